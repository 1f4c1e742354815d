#!/usr/bin/env bash
# testbed.sh - the scheduler on real links: hosts in network namespaces with
# shaped bandwidth (net.sh), a real server and one real agent per host; the
# link matrix the agents measure against the configured one; then one job
# run under several plans, back to back on the same hosts and data, each
# plan's predicted iteration time (both cost models) against the measured.
#
# usage: tests/net/testbed.sh [options] CONFIG.json...
#   --server BIN, --agent BIN   the binaries (default: bin/shoal-server, bin/shoal-agent)
#   --steps N                   training steps per plan (default: the config's job.steps)
#   --plans LIST                comma-separated, of shoal, dtfm, random, sequential
#                               (default: the config's plans, else all four)
#   --json FILE                 also append the JSON lines to FILE
#   --keep DIR                  keep logs and data under DIR (default: a temporary directory, removed)
#
# Prints, per network, the links (configured, measured, error), then one row
# per plan (predicted s under shoal, dtfm's cost, measured median s, the
# error, the measured split) and JSON lines ({"bench":"testbed-link"|
# "testbed-plan"|"testbed"}).  Needs root (namespaces, tc, cgroups); exits
# 77 saying why when the machine cannot build the network.  It asserts
# nothing about time: tests/integration/test_testbed.sh checks what must
# hold.  The plans (README.md here):
#   shoal       POST /v1/jobs/{id}/schedule {"cost_model": "shoal"}
#   dtfm        the same under the paper's cost model
#   random      POST /v1/jobs/{id}/plan, a uniformly random assignment (seed: the config's random_seed)
#   sequential  POST /v1/jobs/{id}/plan, host i at tasklet i, stage-major
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$here/net.sh"

server_bin=$top/bin/shoal-server
agent_bin=$top/bin/shoal-agent
steps_opt="" plans_opt="" json_out="" keep=""
configs=()
while [ $# -gt 0 ]; do
    case $1 in
        --server) server_bin=$2; shift 2 ;;
        --agent) agent_bin=$2; shift 2 ;;
        --steps) steps_opt=$2; shift 2 ;;
        --plans) plans_opt=$2; shift 2 ;;
        --json) json_out=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        -*) echo "testbed: unknown option $1" >&2; exit 2 ;;
        *) configs+=("$1"); shift ;;
    esac
done
[ ${#configs[@]} -gt 0 ] || { echo "usage: $0 [options] CONFIG.json..." >&2; exit 2; }
for b in "$server_bin" "$agent_bin"; do
    [ -x "$b" ] || { echo "testbed: $b is not built (make)" >&2; exit 2; }
done

skip() { echo "testbed: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces, tc and cgroups"
for c in ip tc jq curl awk; do command -v "$c" >/dev/null || skip "needs $c"; done
ip netns add "stb$$-probe" 2>/dev/null || skip "this machine does not allow network namespaces (ip netns add failed)"
ip netns del "stb$$-probe"

work=${keep:-$(mktemp -d /tmp/shoal-testbed.XXXXXX)}
mkdir -p "$work"
chmod 711 "$work"
server_pid=""
finish() {
    [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    net_down
    [ -z "$keep" ] && rm -rf "$work"
}
trap finish EXIT
trap 'exit 130' INT TERM
net_sweep

emit() {   # a JSON line to stdout and the --json file
    echo "$1"
    [ -n "$json_out" ] && echo "$1" >> "$json_out"
    return 0
}
api() {    # METHOD PATH [BODY]: prints the body; fails on a non-2xx answer
    local out code
    out=$(curl -s -w '\n%{http_code}' -X "$1" -H "Authorization: Bearer $ADMIN" \
        ${3:+-H 'Content-Type: application/json' --data-binary "$3"} "$S$2")
    code=${out##*$'\n'}
    printf '%s' "${out%$'\n'*}"
    case $code in 2??) return 0 ;; *) echo " (HTTP $code on $1 $2)" >&2; return 1 ;; esac
}
wait_until() {   # SECONDS COMMAND...
    local end=$((SECONDS + $1)); shift
    until "$@"; do
        [ $SECONDS -ge $end ] && return 1
        sleep 1
    done
}

# A corpus every plan reads the same: the project's own text.
corpus=$work/corpus.txt
cat "$top"/README.md "$top"/server/*.c "$top"/agent/*.c "$top"/kernels/*.c > "$corpus"

# ---- one network
run_network() {
    local config=$1 name n port i j
    name=$(jq -r .name "$config")
    n=$(jq '.nodes | length' "$config")
    echo "== network $name: $n hosts, namespaces $NET_BR-0..$((n - 1)) ($(jq -r '.about // ""' "$config"))"
    net_up "$config" || { echo "testbed: could not build network $name" >&2; return 1; }
    [ -n "$NET_CG_ROOT" ] || echo "   (no cpu cgroup here: the hosts share the cores without quotas)"

    # The server in the root namespace, on the bridge's address.
    mkdir -p "$work/$name/server"
    "$server_bin" --data-dir "$work/$name/server" --listen "$NET_GW" --port 0 --heartbeat-timeout 30 \
        --link-stale 86400 > "$work/$name/server.log" 2>&1 &
    server_pid=$!
    wait_until 60 test -s "$work/$name/server/server.port" || { echo "testbed: the server did not start" >&2; return 1; }
    port=$(cat "$work/$name/server/server.port")
    S=http://$NET_GW:$port
    ADMIN=$(cat "$work/$name/server/admin.token")
    wait_until 60 curl -sf -o /dev/null "$S/readyz" || { echo "testbed: the server is not ready" >&2; return 1; }

    # One agent per host: one BLAS thread each, its host's CPU share.
    for i in $(seq 0 $((n - 1))); do
        mkdir -p "$work/$name/agent-$i"
        net_run "$i" env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$agent_bin" --server "$S" \
            --join-token-file "$work/$name/server/join.token" --listen "${NET_IP[$i]}:7070" \
            --data-dir "$work/$name/agent-$i" --name "$(jq -r ".nodes[$i].name" "$config")" \
            --region "$(jq -r ".nodes[$i].region // \"\"" "$config")" --heartbeat-interval 1 \
            --probe-interval 2 --measure-ms 2000 --peer-timeout 120 --connect-timeout 120 \
            > "$work/$name/agent-$i.log" 2>&1
    done
    all_registered() { [ "$(api GET /v1/nodes | jq '.nodes | length')" = "$n" ]; }
    wait_until 120 all_registered || { echo "testbed: not every agent registered" >&2; return 1; }
    local nodes ids
    nodes=$(api GET /v1/nodes)
    # Host index -> node id, by name.
    ids=$(jq -c --argjson nodes "$nodes" '[.nodes[].name as $h | $nodes.nodes[] | select(.name == $h) | .id]' "$config")
    links_done() { [ "$(api GET /v1/links | jq '[.bandwidth_gbps[][] | select(. == null)] | length')" = "$n" ]; }
    wait_until $((60 + 20 * n)) links_done || { echo "testbed: the link matrix did not fill" >&2; return 1; }

    # ---- the links: configured against measured
    local links
    links=$(jq -c --argjson m "$(api GET /v1/links)" --argjson ids "$ids" --arg net "$name" '
        [range(0; .nodes | length) as $i | range(0; .nodes | length) as $j | select($i != $j)
         | (.bandwidth_mbit[$i][$j]) as $want
         | ($m.nodes | index($ids[$i])) as $a | ($m.nodes | index($ids[$j])) as $b
         | ($m.bandwidth_gbps[$a][$b] * 1000) as $got
         | {bench: "testbed-link", network: $net, from: .nodes[$i].name, to: .nodes[$j].name,
            configured_mbit: $want, measured_mbit: $got, latency_ms: $m.latency_ms[$a][$b],
            error: (($got - $want) / $want)}]' "$config")
    printf '%s' "$links" | jq -r '"   link            configured   measured   error",
        (.[] | "   \(.from) -> \(.to)\t\(.configured_mbit) Mbit/s\t\(.measured_mbit | floor) Mbit/s\t\(.error * 100 | round)%")'
    printf '%s' "$links" | jq -c '.[]' | while read -r l; do emit "$l"; done

    # ---- the plans
    local plans steps job kind answer J state rows="[]" seed
    plans=${plans_opt:-$(jq -r '(.plans // ["shoal","dtfm","random","sequential"]) | join(",")' "$config")}
    steps=${steps_opt:-$(jq -r '.job.steps // 12' "$config")}
    seed=$(jq -r '.random_seed // 1' "$config")
    for kind in ${plans//,/ }; do
        job=$(jq -c --arg kind "$kind" --arg data "$corpus" --argjson steps "$steps" '.job
            | {name: "testbed-\($kind)", model, parallelism,
               training: {steps: $steps, learning_rate: 0.001, seed: 1},
               data: {path: $data, format: "text"}, checkpoint_interval: 0}' "$config")
        J=$(api POST /v1/jobs "$job" | jq -r .id) || return 1
        case $kind in
            shoal|dtfm) answer=$(api POST "/v1/jobs/$J/schedule" "{\"cost_model\":\"$kind\",\"budget_ms\":1000}") ;;
            random|sequential)
                answer=$(api POST "/v1/jobs/$J/plan" "$(jq -nc --argjson ids "$ids" --argjson job "$job" \
                    --arg kind "$kind" --argjson seed "$seed" '
                    ($job.parallelism.stages) as $P | ($job.parallelism.replicas) as $D
                    # A seeded Fisher-Yates shuffle (an LCG, the same on every machine).
                    | def shuffle($s): reduce range(($ids | length) - 1; 0; -1) as $k
                        ({a: $ids, r: $s}; .r = ((.r * 1103515245 + 12345) % 2147483648)
                         | (.r % ($k + 1)) as $x | .a[$k] as $t | .a[$k] = .a[$x] | .a[$x] = $t) | .a;
                    (if $kind == "random" then shuffle($seed) else $ids end) as $order
                    | {stages: [range(0; $P) as $s | {nodes: [range(0; $D) as $r | $order[$s * $D + $r]]}]}')") ;;
            *) echo "testbed: unknown plan $kind" >&2; return 1 ;;
        esac || return 1
        job_done() { state=$(api GET "/v1/jobs/$J" | jq -r .state); case $state in succeeded|failed|cancelled) return 0 ;; esac; return 1; }
        wait_until $((120 + 60 * steps)) job_done || state=timeout
        local detail row
        detail=$(api GET "/v1/jobs/$J")
        row=$(jq -c --arg kind "$kind" --arg net "$name" --arg state "$state" --argjson plan "$answer" \
            --argjson nodes "$nodes" '
            ([.measured[] | .iteration_s] | max) as $it
            | ([.measured[]] | max_by(.compute_s)) as $busy
            | {bench: "testbed-plan", network: $net, plan: $kind, state: $state,
               steps: (.progress.step + 1), job_id: .id,
               predicted_s: $plan.predictions.shoal.total_s, predicted_dtfm: $plan.predictions.dtfm.total_s,
               measured_s: $it, error: (if $it then ($plan.predictions.shoal.total_s - $it) / $it else null end),
               measured: {compute_s: $busy.compute_s, comm_s: ($busy.send_s + $busy.allreduce_s),
                          wait_s: $busy.recv_wait_s},
               predicted: ($plan.predictions.shoal | {compute_s: (.compute_s + .optimizer_s),
                          comm_s: (.comm_s + .dp_s), bubble_s}),
               stages: [$plan.stages[] | [.nodes[] as $id | $nodes.nodes[] | select(.id == $id) | .name]]}' <<< "$detail")
        emit "$row"
        rows=$(jq -c --argjson r "$row" '. + [$r]' <<< "$rows")
    done

    # ---- the table and the verdicts
    printf '%s' "$rows" | jq -r '
        "   plan         predicted   dtfm cost   measured   error   compute  comm   wait (measured, s)   stages",
        (.[] | "   \(.plan)\t\(.predicted_s * 1000 | round / 1000) s\t\(.predicted_dtfm * 1000 | round / 1000)\t\(if .measured_s then (.measured_s * 1000 | round / 1000 | tostring) + " s" else .state end)\t\(if .error then (.error * 100 | round | tostring) + "%" else "-" end)\t\(.measured.compute_s // 0 | . * 100 | round / 100)\t\(.measured.comm_s // 0 | . * 100 | round / 100)\t\(.measured.wait_s // 0 | . * 100 | round / 100)\t\(.stages | map(join(",")) | join(" | "))")'
    emit "$(jq -nc --arg net "$name" --argjson rows "$rows" --argjson links "$links" '
        def by($k): ($rows | map(select(.plan == $k)) | .[0].measured_s);
        ($rows | map(select(.measured_s != null))) as $ok
        | {bench: "testbed", network: $net, plans: ($rows | length),
           all_succeeded: ($rows | all(.state == "succeeded")),
           speedup_vs_random: (if by("shoal") and by("random") then by("random") / by("shoal") else null end),
           speedup_vs_sequential: (if by("shoal") and by("sequential") then by("sequential") / by("shoal") else null end),
           max_abs_error: ($ok | map(.error | fabs) | max),
           # Every pair of plans whose predictions differ by more than 10%
           # is measured in the same order (closer pairs are a tie).
           ranking_agrees: ([$ok[] as $a | $ok[] | select($a.predicted_s < 0.9 * .predicted_s)
                             | $a.measured_s < .measured_s] | all),
           link_max_abs_error: ($links | map(.error | fabs) | max),
           link_median_abs_error: ($links | map(.error | fabs) | sort | .[length / 2 | floor])}')"

    kill -TERM "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
    net_down
}

rc=0
for config in "${configs[@]}"; do
    run_network "$config" || rc=1
done
exit $rc
