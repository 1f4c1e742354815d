# lib.sh - helpers for integration suites: real servers, real Postgres, real HTTP.
#
# A suite sources this file, starts servers with start_server, drives them
# with req, and records each check with ok/check_*; every check prints
# "ok - name" or "not ok - name".  Everything lives under one temporary
# directory that is removed at exit, with every server stopped.

: "${SHOAL_SERVER:?set SHOAL_SERVER to the shoal-server binary}"
WORK=$(mktemp -d /tmp/shoal-it.XXXXXX)
# The embedded Postgres runs as 'postgres' when we are root; it must reach here.
chmod 711 "$WORK"
FAILS=0
SERVERS=""

cleanup() {
    local pidfile pg pid
    for pidfile in $SERVERS; do
        [ -f "$pidfile" ] && kill -TERM "$(cat "$pidfile")" 2>/dev/null
    done
    sleep 1
    # Embedded clusters left behind by a server we killed on purpose.
    for pg in "$WORK"/*/pg; do
        [ -f "$pg/postmaster.pid" ] || continue
        pid=$(head -n 1 "$pg/postmaster.pid")
        kill -TERM "$pid" 2>/dev/null
    done
    sleep 1
    [ -n "${KEEP_WORK:-}" ] && cp -r "$WORK" "$KEEP_WORK"; rm -rf "$WORK"
}
trap cleanup EXIT

# ok NAME / fail NAME DETAIL: record one check.
ok()   { echo "ok - $1"; }
fail() { echo "not ok - $1${2:+: $2}"; FAILS=$((FAILS + 1)); }

# Suites drive nodes by hand (a heartbeat when they say so), so their
# servers give a node 60 s, not the default 10, before calling it lost; a
# suite that tests losing nodes passes --heartbeat-timeout itself.
export SHOAL_HEARTBEAT_TIMEOUT=${SHOAL_HEARTBEAT_TIMEOUT:-60}

# The data a suite's jobs read lies in $WORK, or is a text of the system's
# (/usr/share/common-licenses) or of this tree: its agents' owner allows
# those (shoal-agent --data-roots; the default, <data-dir>/datasets, holds
# nothing); a suite that tests the roots passes --data-roots itself.
export SHOAL_DATA_ROOTS=$WORK:/usr/share/common-licenses:$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# start_server NAME [ARGS...]: starts a server with data dir $WORK/NAME, on a
# free port, and waits until /readyz answers 200.  Sets URL_<NAME> and leaves
# its log in $WORK/NAME.log.  Extra args go to shoal-server.
# With SERVER_SCHEME=https and SERVER_CA=<ca.pem> it waits for an HTTPS server.
start_server() {
    local name=$1 dir port; shift
    dir="$WORK/$name"
    mkdir -p "$dir"
    rm -f "$dir/server.port"
    "$SHOAL_SERVER" --data-dir "$dir" --port 0 "$@" >>"$WORK/$name.log" 2>&1 &
    echo $! > "$WORK/$name.pid"
    SERVERS="$SERVERS $WORK/$name.pid"
    for _ in $(seq 1 300); do
        if [ -s "$dir/server.port" ]; then
            port=$(cat "$dir/server.port")
            if curl -s ${SERVER_CA:+--cacert "$SERVER_CA"} -o /dev/null -w '%{http_code}' \
                    "${SERVER_SCHEME:-http}://127.0.0.1:$port/readyz" | grep -q 200; then
                eval "URL_$name=${SERVER_SCHEME:-http}://127.0.0.1:$port"
                return 0
            fi
        fi
        kill -0 "$(cat "$WORK/$name.pid")" 2>/dev/null || break
        sleep 0.2
    done
    not_started server "$name"
}

# not_started KIND NAME: says KIND NAME did not start, with its log; fails.
not_started() {
    echo "$1 $2 did not start; its log:" >&2
    cat "$WORK/$2.log" >&2
    return 1
}

# start_relay NAME [ARGS...]: starts shoal-relay (beside SHOAL_SERVER, or
# SHOAL_RELAY) on RELAY_HOST (127.0.0.1) and a free port (or RELAY_PORT),
# with the secret in $WORK/relay.secret (made when missing: give its server
# --relay-secret-file "$WORK/relay.secret"); sets RELAY_<NAME> to
# 127.0.0.1:port and leaves its log in $WORK/NAME.log.
start_relay() {
    local name=$1 port before; shift
    before=$(cat "$WORK/$name.log" 2>/dev/null | wc -l)
    [ -s "$WORK/relay.secret" ] ||
        (umask 077; echo "shoal_relay_$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$WORK/relay.secret")
    "${SHOAL_RELAY:-$(dirname "$SHOAL_SERVER")/shoal-relay}" --listen "${RELAY_HOST:-127.0.0.1}:${RELAY_PORT:-0}" \
        --secret-file "$WORK/relay.secret" "$@" >>"$WORK/$name.log" 2>&1 &
    echo $! > "$WORK/$name.pid"
    SERVERS="$SERVERS $WORK/$name.pid"
    for _ in $(seq 1 100); do
        port=$(sed -n 's/.*relay listening on .* (port \([0-9]*\)).*/\1/p' <(tail -n +$((before + 1)) "$WORK/$name.log") | tail -n 1)
        if [ -n "$port" ]; then eval "RELAY_$name=127.0.0.1:$port"; return 0; fi
        kill -0 "$(cat "$WORK/$name.pid")" 2>/dev/null || break
        sleep 0.1
    done
    not_started relay "$name"
}

# start_server_a [ARGS...]: start_server a, then S (its URL), ADMIN and JOIN
# (its tokens) for the suite.
start_server_a() {
    start_server a "$@" || return 1
    S=$URL_a
    ADMIN=$(cat "$WORK/a/admin.token")
    JOIN=$(cat "$WORK/a/join.token")
}

# stop_server NAME: SIGTERM, wait, and check a clean exit (sanitizers report
# errors and leaks through the exit status).
stop_server() {
    local name=$1 pid rc
    pid=$(cat "$WORK/$name.pid")
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    wait "$pid" 2>/dev/null
    rc=$?
    if [ "$rc" -eq 0 ]; then ok "server $name exits cleanly on SIGTERM"
    else fail "server $name exits cleanly on SIGTERM" "status $rc; log: $(tail -n 20 "$WORK/$name.log")"; fi
}

# req METHOD URL [TOKEN] [BODY] [extra curl args...]: one request.  Sets STATUS
# (HTTP code) and BODY (response text); headers land in $WORK/headers.  The
# answer goes to the response log (resp_log).
req() {
    local method=$1 url=$2 token=${3:-} body=${4-} answer
    shift 2; [ $# -gt 0 ] && shift; [ $# -gt 0 ] && shift
    set -- -s -X "$method" -o "$WORK/body" -D "$WORK/headers" -w '%{http_code} %{content_type}' "$@"
    [ -n "$token" ] && set -- "$@" -H "Authorization: Bearer $token"
    if [ -n "$body" ]; then
        printf '%s' "$body" > "$WORK/request"
        set -- "$@" -H 'Content-Type: application/json' --data-binary "@$WORK/request"
    fi
    answer=$(curl "$@" "$url")
    STATUS=${answer%% *}
    BODY=$(cat "$WORK/body")
    resp_log "$method" "$url" "$STATUS" "${answer#* }" "$BODY"
}

# fetch URL [TOKEN] [extra curl args...]: GET URL (with TOKEN as the bearer
# token), the body to stdout and the answer to the response log (resp_log);
# unlike req it leaves STATUS and BODY alone.
fetch() {
    local url=$1 token=${2:-} f="$WORK/fetch.$BASHPID" answer
    shift; [ $# -gt 0 ] && shift
    answer=$(curl -s -o "$f" -w '%{http_code} %{content_type}' ${token:+-H "Authorization: Bearer $token"} "$@" "$url")
    resp_log GET "$url" "${answer%% *}" "${answer#* }" "$(cat "$f" 2>/dev/null)"
    cat "$f" 2>/dev/null
    rm -f "$f"
}

# resp_log METHOD URL STATUS CONTENT_TYPE BODY: with SHOAL_RESPONSE_LOG set
# (tests/run.sh sets it), appends the answer to that file for
# tests/api/validate_responses.mjs, which checks it against
# server/openapi.yaml.  One record: a line of tab-separated fields
# "SHOAL-RESPONSE METHOD STATUS CONTENT_TYPE URL BYTES", then BYTES bytes of
# body (JSON and plain text only) and a newline.  Status 000 (no answer)
# is not logged.  Builtins only: it runs on every request.
resp_log() {
    [ -n "${SHOAL_RESPONSE_LOG:-}" ] && [ "$3" != 000 ] || return 0
    local LC_ALL=C body=""
    case "${4,,}" in application/json*|text/plain*) body=$5 ;; esac
    printf 'SHOAL-RESPONSE\t%s\t%s\t%s\t%s\t%d\n%s\n' "$1" "$3" "$4" "$2" "${#body}" "$body" \
        >> "$SHOAL_RESPONSE_LOG"
}

# expect NAME STATUS [JQ_FILTER EXPECTED]: checks the last response's status
# and, if given, that `jq -r FILTER` of its body prints EXPECTED.
expect() {
    local name=$1 want=$2 filter=${3:-} want_value=${4-} got
    if [ "$STATUS" != "$want" ]; then
        fail "$name" "status $STATUS, want $want; body: $(printf '%.300s' "$BODY")"
        return
    fi
    if [ -n "$filter" ]; then
        got=$(printf '%s' "$BODY" | jq -r "$filter" 2>&1)
        if [ "$got" != "$want_value" ]; then
            fail "$name" "$filter is '$got', want '$want_value'; body: $(printf '%.300s' "$BODY")"
            return
        fi
    fi
    ok "$name"
}

# check NAME GOT WANT: compares two strings.
check() {
    if [ "$2" = "$3" ]; then ok "$1"; else fail "$1" "got '$2', want '$3'"; fi
}

# wait_for SECONDS COMMAND...: polls COMMAND every 0.5 s until it succeeds.
wait_for() {
    local secs=$1 i; shift
    for i in $(seq 1 $((secs * 2))); do
        "$@" && return 0
        sleep 0.5
    done
    return 1
}

# example_block FILE NAME: the lines of the fenced block under FILE's
# `<!-- example: NAME ... -->` marker, a documented example to run as written.
example_block() {
    sed -n "/^<!-- example: $2 /,/^\`\`\`\$/p" "$1" | sed '1,2d;$d'
}

# doc_example NAME: example_block NAME of whichever document holds it:
# README.md or a page of docs/.
doc_example() {
    local top f
    top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    for f in "$top/README.md" "$top"/docs/*.md; do
        if grep -q "^<!-- example: $1 " "$f"; then
            example_block "$f" "$1"
            return
        fi
    done
    echo "false # no document holds the example $1"
}

# sql NAME QUERY: runs QUERY on server NAME's embedded database, prints rows.
sql() {
    psql -X -q -t -A "host=$WORK/$1/pg-socket dbname=shoal user=shoal" -c "$2"
}

# ---- /metrics helpers (suites set S)
# scrape: GET /metrics into $WORK/metrics ($M); fails the check "scrape" if not 200.
M="$WORK/metrics"
scrape() {
    req GET "$S/metrics"
    printf '%s\n' "$BODY" > "$M"
    [ "$STATUS" = 200 ] || fail "scrape" "status $STATUS: $(printf '%.300s' "$BODY")"
}
# value SERIES: the value of the sample whose name and labels are exactly SERIES, or "absent".
# (The series goes through the environment: awk -v would undo its escapes.)
value() {
    SERIES=$1 awk 'BEGIN { s = ENVIRON["SERIES"] } index($0, s " ") == 1 && length($0) > length(s) + 1 { v = substr($0, length(s) + 2); n++ }
                   END { if (n == 1) print v; else if (n == 0) print "absent"; else print "duplicate" }' "$M"
}
# near NAME GOT WANT: GOT and WANT agree to 1e-9 relative (or NEAR_ABS absolute, default 1e-12).
near() {
    if [ "$(awk -v g="$2" -v w="$3" -v a="${NEAR_ABS:-1e-12}" 'BEGIN { d = g - w; if (d < 0) d = -d; m = w < 0 ? -w : w;
                                            print (g != "" && g == g + 0 && d <= 1e-9 * m + a) ? 1 : 0 }')" = 1 ]
    then ok "$1"; else fail "$1" "got '$2', want '$3'"; fi
}

# two_regions INSIDE_GBPS ACROSS_GBPS LATENCY_MS TFLOPS...: registers one
# node per TFLOPS value (n0, n1, ...; regions r0 for the first half, r1 for
# the rest; 8 GB of GPU memory each) and posts every link between them:
# INSIDE_GBPS within a region, ACROSS_GBPS between.  Sets TOK[i] and ID[i].
two_regions() {
    local inside=$1 across=$2 lat=$3 i j s bw n; shift 3
    n=$#
    declare -ga TOK ID
    for i in $(seq 0 $((n - 1))); do
        req POST "$S/v1/agent/register" "$JOIN" "{\"name\":\"n$i\",\"peer_address\":\"10.0.0.$i:7000\",\"region\":\"r$((2 * i / n))\",\"hardware\":{\"tflops\":$1,\"cpu_cores\":8,\"gpu_memory_bytes\":8000000000}}"
        shift
        TOK[$i]=$(printf '%s' "$BODY" | jq -r .token)
        ID[$i]=$(printf '%s' "$BODY" | jq -r .node_id)
    done
    for i in $(seq 0 $((n - 1))); do
        s=""
        for j in $(seq 0 $((n - 1))); do
            [ "$i" = "$j" ] && continue
            bw=$([ $((2 * i / n)) = $((2 * j / n)) ] && echo "$inside" || echo "$across")
            s="$s{\"to\":${ID[$j]},\"latency_ms\":$lat,\"bandwidth_gbps\":$bw},"
        done
        req PUT "$S/v1/links" "${TOK[$i]}" "{\"samples\":[${s%,}]}"
    done
}
