# agents.sh - helpers for suites that run real shoal-agents against a real
# server (source after lib.sh).  Agents listen on loopback with free ports,
# keep their identity under $WORK/agent-NAME, and log to $WORK/agent-NAME.log.

: "${SHOAL_AGENT:?set SHOAL_AGENT to the shoal-agent binary}"
AGENTS=""
# One BLAS/OpenMP thread per agent: several agents share two cores.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# start_agent NAME SERVER_NAME [ARGS...]: starts an agent registered with
# server SERVER_NAME (its URL and join token); AGENT_PREFIX (words) runs
# it through another command (one that execs it, keeping its pid).
start_agent() {
    local name=$1 server=$2 url; shift 2
    url=$(eval echo "\$URL_$server")
    mkdir -p "$WORK/agent-$name"
    # shellcheck disable=SC2086
    ${AGENT_PREFIX:-} "$SHOAL_AGENT" --server "$url" --join-token-file "$WORK/$server/join.token" \
        --listen 127.0.0.1:0 --data-dir "$WORK/agent-$name" --name "$name" \
        --heartbeat-interval 1 --probe-interval 1 --measure-ms 50 --peer-timeout 20 \
        --connect-timeout 30 "$@" >>"$WORK/agent-$name.log" 2>&1 &
    echo $! > "$WORK/agent-$name.pid"
    AGENTS="$AGENTS $name"
}

# stop_agent NAME: SIGTERM and wait up to 15 s; sets AGENT_RC to the exit
# status (sanitizers report errors and leaks through it; "timeout" if it
# did not exit).
stop_agent() {
    local pid
    pid=$(cat "$WORK/agent-$1.pid")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then AGENT_RC=timeout; return; fi
    wait "$pid" 2>/dev/null
    AGENT_RC=$?
}

stop_all_agents() {
    local a
    for a in $AGENTS; do
        [ -f "$WORK/agent-$a.pid" ] && kill -TERM "$(cat "$WORK/agent-$a.pid")" 2>/dev/null
    done
    for a in $AGENTS; do
        [ -f "$WORK/agent-$a.pid" ] && wait "$(cat "$WORK/agent-$a.pid")" 2>/dev/null
    done
    return 0
}

# job_state SERVER_URL ADMIN JOB
job_state() {
    curl -s -H "Authorization: Bearer $2" "$1/v1/jobs/$3" | jq -r .state
}

# job_losses SERVER_URL ADMIN JOB: one "step loss" line per step.
job_losses() {
    fetch "$1/v1/jobs/$3" "$2" | jq -r '.progress.losses[] | "\(.[0]) \(.[1])"'
}

# start_server_s: start_server s, then S (its URL), ADMIN (its admin token)
# and CORPUS (a text to train on) for the suites that train real jobs.
start_server_s() {
    start_server s "$@" || return 1
    S=$URL_s
    ADMIN=$(cat "$WORK/s/admin.token")
    CORPUS=/usr/share/common-licenses/GPL-3
    [ -r "$CORPUS" ] || CORPUS=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/README.md
}

finished() { case $(job_state "$S" "$ADMIN" "$1") in succeeded|failed|cancelled) return 0;; esac; return 1; }

# run_job NAME BODY: creates, schedules and waits; sets J to the job id and
# checks "NAME succeeds".
run_job() {
    req POST "$S/v1/jobs" "$ADMIN" "$2"
    J=$(printf '%s' "$BODY" | jq -r .id)
    req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
    if [ "$STATUS" != 201 ]; then fail "$1 is scheduled" "status $STATUS: $BODY"; return 1; fi
    wait_for 400 finished "$J"
    local st
    st=$(job_state "$S" "$ADMIN" "$J")
    if [ "$st" = succeeded ]; then
        ok "$1 succeeds"
        # a recovery a job got over is no failure, but say it, with its faults
        local rec
        rec=$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J" |
              jq -c 'select(.recoveries > 0) | [.recoveries, .recovery_reason, [.faults[]? | .reason]]')
        [ -z "$rec" ] || echo "# job $J recovered: $rec"
    else fail "$1 succeeds" "state $st: $(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J" |
                                          jq -c '[.failure_reason, .recovery_reason]')"; return 1; fi
}

# same_losses NAME FILE_A FILE_B TOLERANCE: "step value" lines agree
# (relative), on at least one step.
same_losses() {
    local out
    out=$(join "$2" "$3" | awk -v tol="$4" '{ d = $2 - $3; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2);
          if (r > worst) worst = r; n++ } END { printf "%d %.3g %s", n, worst, (n > 0 && worst <= tol) ? "yes" : "no" }')
    case $out in *yes) ok "$1 (steps, worst relative difference: ${out% yes})";;
                 *) fail "$1" "steps, worst relative difference: $out";; esac
}

# export_model DIR [ARGS...]: shoal-agent export into DIR with server s's
# admin token; its stdout in DIR.out, its stderr in DIR.err, its exit status
# in EXPORT_RC.
export_model() {
    local dir=$1; shift
    "$SHOAL_AGENT" export --server "$S" --admin-token-file "$WORK/s/admin.token" --tmp-dir "$WORK" --out "$dir" \
        "$@" >"$dir.out" 2>"$dir.err"
    EXPORT_RC=$?
}

# The documents' agent examples (README.md, docs/) run as written in
# README_DIR, which holds bin/shoal-agent and server s's admin.token (a
# suite adds the files an example names).  readme_example NAME
# [VAR=VALUE...]: runs the block NAME there with S and the given variables set; its stdout in
# README_DIR/NAME.out, its stderr in NAME.err, its exit status in EXAMPLE_RC.
README_DIR=$WORK/readme
readme_example() {
    local name=$1; shift
    if [ ! -e "$README_DIR/bin/shoal-agent" ]; then
        mkdir -p "$README_DIR/bin"
        ln -s "$SHOAL_AGENT" "$README_DIR/bin/shoal-agent"
        cp "$WORK/s/admin.token" "$README_DIR/admin.token"
    fi
    doc_example "$name" > "$README_DIR/$name.sh"
    (cd "$README_DIR" && env S="$S" "$@" bash -e "$name.sh" > "$name.out" 2> "$name.err")
    EXAMPLE_RC=$?
}

trap 'stop_all_agents; cleanup' EXIT

# check_no_secrets SERVER_NAME: no secret of the run appears in any log under
# $WORK (server, agents, relay) nor in what an operator can see: /metrics,
# the dashboard's files and the admin API's answers.  The secrets: the admin
# and join tokens, every node token (the agents' node.json), every job's
# peer secret, and the relay's secret where the suite has one
# ($WORK/relay.secret).  One check per kind of secret.
check_no_secrets() {
    local server=$1 url admin kind secret where f j seen
    url=$(eval echo "\$URL_$server")
    admin=$(cat "$WORK/$server/admin.token")
    mkdir -p "$WORK/seen"
    seen="$WORK/seen"
    # (fetch: these answers, every job's detail after its run, also go to
    # the response log that tests/api checks against the OpenAPI document)
    for p in /metrics / /app.js /v1/nodes /v1/jobs /v1/links; do
        fetch "$url$p" "$admin" ${SERVER_CA:+--cacert "$SERVER_CA"} \
            > "$seen/$(printf '%s' "$p" | tr -c 'a-z0-9\n' _).answer"
    done
    for j in $(sql "$server" "SELECT id FROM jobs"); do
        for p in "" /checkpoints; do
            fetch "$url/v1/jobs/$j$p" "$admin" ${SERVER_CA:+--cacert "$SERVER_CA"} \
                > "$seen/job$j$(printf '%s' "$p" | tr / _).answer"
        done
    done
    for j in $(sql "$server" "SELECT id FROM nodes"); do
        fetch "$url/v1/nodes/$j" "$admin" ${SERVER_CA:+--cacert "$SERVER_CA"} > "$seen/node$j.answer"
    done
    {
        printf 'admin token\t%s\n' "$admin"
        printf 'join token\t%s\n' "$(cat "$WORK/$server/join.token")"
        for f in "$WORK"/agent-*/node.json; do
            [ -f "$f" ] && printf 'node token\t%s\n' "$(jq -r .token "$f")"
        done
        sql "$server" "SELECT 'peer secret', peer_secret FROM jobs" | tr '|' '\t'
        [ -s "$WORK/relay.secret" ] && printf 'relay secret\t%s\n' "$(cat "$WORK/relay.secret")"
    } > "$WORK/secrets"
    local kinds=("admin token" "join token" "node token" "peer secret")
    [ -s "$WORK/relay.secret" ] && kinds+=("relay secret")
    for kind in "${kinds[@]}"; do
        where=""
        n=0
        while IFS=$'\t' read -r k secret; do
            [ "$k" = "$kind" ] && [ -n "$secret" ] || continue
            n=$((n + 1))
            where="$where$(grep -l -F -- "$secret" "$WORK"/*.log "$seen"/*.answer 2>/dev/null | tr '\n' ' ')"
        done < "$WORK/secrets"
        if [ "$n" -eq 0 ]; then fail "no $kind in logs, metrics, dashboard or API answers" "none found to look for"
        elif [ -z "$where" ]; then ok "no $kind in logs, metrics, dashboard or API answers ($n looked for)"
        else fail "no $kind in logs, metrics, dashboard or API answers" "found in: $where"; fi
    done
}
