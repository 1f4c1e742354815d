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
. "$here/net.sh"
. "$here/fleet.sh"

steps_opt="" plans_opt="" keep=""
configs=()
while [ $# -gt 0 ]; do
    case $1 in
        --server) FLEET_SERVER=$2; shift 2 ;;
        --agent) FLEET_AGENT=$2; shift 2 ;;
        --steps) steps_opt=$2; shift 2 ;;
        --plans) plans_opt=$2; shift 2 ;;
        --json) FLEET_JSON=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        -*) echo "testbed: unknown option $1" >&2; exit 2 ;;
        *) configs+=("$1"); shift ;;
    esac
done
[ ${#configs[@]} -gt 0 ] || { echo "usage: $0 [options] CONFIG.json..." >&2; exit 2; }
fleet_check testbed

work=${keep:-$(mktemp -d /tmp/shoal-testbed.XXXXXX)}
mkdir -p "$work"
chmod 711 "$work"
export SHOAL_DATA_ROOTS=$work   # the agents read the corpus from here (--data-roots)
finish() {
    fleet_down
    [ -z "$keep" ] && rm -rf "$work"
}
trap finish EXIT
trap 'exit 130' INT TERM
net_sweep

# A corpus every plan reads the same: the project's own text.
corpus=$work/corpus.txt
fleet_corpus "$corpus"

# ---- one network
run_network() {
    local config=$1 name n
    name=$(jq -r .name "$config")
    n=$(jq '.nodes | length' "$config")
    echo "== network $name: $n hosts, namespaces $NET_BR-0..$((n - 1)) ($(jq -r '.about // ""' "$config"))"
    fleet_up "$config" "$work/$name" || return 1
    local nodes ids=$FLEET_IDS
    nodes=$(api GET /v1/nodes)

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
               data: {path: $data, format: "text"}, checkpoint_interval: 0,
               communication: {stage_link: "f32"}}' "$config")
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
                          wait_s: ($busy.recv_wait_s + $busy.bubble_s)},
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

    fleet_down
}

rc=0
for config in "${configs[@]}"; do
    run_network "$config" || rc=1
done
exit $rc
