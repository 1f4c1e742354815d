# fleet.sh - a server and one agent per host on the testbed's network
# (net.sh, which it sources when it is not yet), for the benches and suites
# that train on shaped links (testbed.sh, wan.sh, test_partition.sh,
# test_nat.sh).
#
#   fleet_check WHAT [CMD...]  exits 77 saying why when this machine cannot build
#                           the network (not root, no namespaces, a tool or a CMD
#                           missing)
#   fleet_suite NAME [CMD...]  for an integration suite (lib.sh sourced): the
#                           fleet runs the suite's binaries; where fleet_check
#                           fails, prints "ok - NAME # SKIP why" and ends the
#                           suite; else removes the hosts at exit
#   fleet_suite_up CONFIG WHAT  then: the corpus in $CORPUS, fleet_up CONFIG
#                           in $WORK/fleet, and the check WHAT (a failure ends
#                           the suite)
#   fleet_up CONFIG DIR     builds CONFIG's hosts, starts the server (in the root
#                           namespace, on the bridge) and an agent per host, and
#                           waits until every agent registered and measured its
#                           links; sets S, ADMIN, FLEET_DIR and FLEET_IDS (node ids
#                           by host index, a JSON array)
#   fleet_down              stops the server and removes the hosts
#   api METHOD PATH [BODY]  the admin API: prints the body; fails on a non-2xx answer
#   fleet_sql QUERY         runs QUERY on the server's embedded database
#   wait_until SECONDS CMD  polls CMD every second
#   emit JSON               a JSON line to stdout and to $FLEET_JSON when set
#   fleet_corpus FILE       writes the benches' corpus: the project's own text
#
# Agents run with one BLAS thread, a CPU share as the config says, 1 s
# heartbeats and --link-stale 86400 on the server: links are measured once,
# so no probe traffic crosses them during the runs.  FLEET_AGENT_OPTS
# replaces their "--measure-ms 2000 --peer-timeout 120 --connect-timeout 120";
# FLEET_SERVER_OPTS adds options to the server's.  A link whose agent could
# not connect at all (a host behind NAT) counts as measured: it never will be.

FLEET_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
declare -F net_up > /dev/null || . "$FLEET_TOP/tests/net/net.sh"
FLEET_SERVER=${FLEET_SERVER:-$FLEET_TOP/bin/shoal-server}
FLEET_AGENT=${FLEET_AGENT:-$FLEET_TOP/bin/shoal-agent}
FLEET_PID=""

fleet_check() {
    local what=$1 b c
    shift
    for b in "$FLEET_SERVER" "$FLEET_AGENT"; do
        [ -x "$b" ] || { echo "$what: $b is not built (make)" >&2; exit 2; }
    done
    [ "$(id -u)" = 0 ] || { echo "$what: skipped: needs root for network namespaces, tc and cgroups"; exit 77; }
    for c in ip tc jq curl awk psql "$@"; do
        command -v "$c" >/dev/null || { echo "$what: skipped: needs $c"; exit 77; }
    done
    ip netns add "stb$$-probe" 2>/dev/null ||
        { echo "$what: skipped: this machine does not allow network namespaces (ip netns add failed)"; exit 77; }
    ip netns del "stb$$-probe"
}

fleet_suite() {
    local why rc
    FLEET_SERVER=$SHOAL_SERVER
    FLEET_AGENT=$SHOAL_AGENT
    why=$( (fleet_check "$@") 2>&1 ); rc=$?
    if [ "$rc" = 77 ]; then echo "ok - $1 # SKIP $why"; exit 0; fi
    [ "$rc" = 0 ] || { fail "the network can be built" "$why"; exit 1; }
    trap 'fleet_down; cleanup' EXIT
    net_sweep
}

fleet_suite_up() {
    CORPUS=$WORK/corpus.txt
    fleet_corpus "$CORPUS"
    if fleet_up "$1" "$WORK/fleet" > "$WORK/fleet.log" 2>&1; then
        ok "$2"
    else
        fail "$2" "$(tail -n 3 "$WORK/fleet.log")"; exit 1
    fi
}

emit() {
    echo "$1"
    [ -n "${FLEET_JSON:-}" ] && echo "$1" >> "$FLEET_JSON"
    return 0
}

api() {
    local out code
    out=$(curl -s -w '\n%{http_code}' -X "$1" -H "Authorization: Bearer $ADMIN" \
        ${3:+-H 'Content-Type: application/json' --data-binary "$3"} "$S$2")
    code=${out##*$'\n'}
    printf '%s' "${out%$'\n'*}"
    case $code in 2??) return 0 ;; *) echo " (HTTP $code on $1 $2)" >&2; return 1 ;; esac
}

fleet_sql() {
    psql -X -q -t -A "host=$FLEET_DIR/server/pg-socket dbname=shoal user=shoal" -c "$1"
}

wait_until() {
    local end=$((SECONDS + $1)); shift
    until "$@"; do
        [ $SECONDS -ge $end ] && return 1
        sleep 1
    done
}

fleet_corpus() {
    cat "$FLEET_TOP"/README.md "$FLEET_TOP"/server/*.c "$FLEET_TOP"/server/*/*.c "$FLEET_TOP"/agent/*.c "$FLEET_TOP"/agent/*/*.c "$FLEET_TOP"/kernels/*.c > "$1"
}

fleet_up() {
    local config=$1 n port i nodes
    FLEET_DIR=$2
    n=$(jq '.nodes | length' "$config")
    mkdir -p "$FLEET_DIR/server"
    net_up "$config" || { echo "fleet: could not build the network" >&2; return 1; }
    [ -n "$NET_CG_ROOT" ] || echo "   (no cpu cgroup here: the hosts share the cores without quotas)"
    "$FLEET_SERVER" --data-dir "$FLEET_DIR/server" --listen "$NET_GW" --port 0 --heartbeat-timeout 30 \
        --link-stale 86400 ${FLEET_SERVER_OPTS:-} > "$FLEET_DIR/server.log" 2>&1 &
    FLEET_PID=$!
    wait_until 60 test -s "$FLEET_DIR/server/server.port" || { echo "fleet: the server did not start" >&2; return 1; }
    port=$(cat "$FLEET_DIR/server/server.port")
    S=http://$NET_GW:$port
    ADMIN=$(cat "$FLEET_DIR/server/admin.token")
    wait_until 60 curl -sf -o /dev/null "$S/readyz" || { echo "fleet: the server is not ready" >&2; return 1; }
    for i in $(seq 0 $((n - 1))); do
        mkdir -p "$FLEET_DIR/agent-$i"
        net_run "$i" env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$FLEET_AGENT" --server "$S" \
            --join-token-file "$FLEET_DIR/server/join.token" --listen "${NET_IP[$i]}:7070" \
            --data-dir "$FLEET_DIR/agent-$i" --name "$(jq -r ".nodes[$i].name" "$config")" \
            --region "$(jq -r ".nodes[$i].region // \"\"" "$config")" --heartbeat-interval 1 \
            --probe-interval 2 ${FLEET_AGENT_OPTS:---measure-ms 2000 --peer-timeout 120 --connect-timeout 120} \
            > "$FLEET_DIR/agent-$i.log" 2>&1
    done
    fleet_registered() { [ "$(api GET /v1/nodes | jq '.nodes | length')" = "$n" ]; }
    wait_until 120 fleet_registered || { echo "fleet: not every agent registered" >&2; return 1; }
    nodes=$(api GET /v1/nodes)
    FLEET_IDS=$(jq -c --argjson nodes "$nodes" '[.nodes[].name as $h | $nodes.nodes[] | select(.name == $h) | .id]' "$config")
    fleet_measured() {
        [ "$(api GET /v1/links | jq '[.bandwidth_gbps as $b | .reachable as $r | range($b | length) as $i
              | range($b | length) as $j | select($i != $j and $b[$i][$j] == null and $r[$i][$j] != false)] | length')" = 0 ]
    }
    wait_until $((60 + 20 * n)) fleet_measured || { echo "fleet: the link matrix did not fill" >&2; return 1; }
}

fleet_down() {
    if [ -n "$FLEET_PID" ]; then
        kill -TERM "$FLEET_PID" 2>/dev/null
        wait "$FLEET_PID" 2>/dev/null
    fi
    FLEET_PID=""
    net_down
}
