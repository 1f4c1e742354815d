#!/bin/sh
# bench_sched.sh - the scheduler against the paper's reference-code results.
# usage: tests/bench/bench_sched.sh [path/to/shoal-sched]
# For each of the paper's five 64-GPU networks under the dtfm cost model:
# shoal's cost after a 1 s search on one core (seed 1), the cost the paper's
# own scheduler reached in 640-1,040 s, when shoal first reached its final
# cost, the best of 5,000 random plans and the sequential plan.  Then 1,024
# nodes (32 stages x 32 replicas, 8 generated regions) under both models.
# Prints a table, then one JSON line per row.
set -eu
sched=${1:-bin/shoal-sched}
out=$(mktemp)
trap 'rm -f "$out" "$out.jsonl"' EXIT

printf '%-10s %-6s %10s %10s %6s %10s %12s %12s %8s\n' network model cost target met best_at_ms best_random sequential wall_s
for row in "dc 3.440" "spot 49.504" "multi 16.087" "regional 34.802" "world 49.218"; do
    set -- $row
    t0=$(date +%s.%N)
    "$sched" --scenario "$1" --paper-job --cost dtfm --seed 1 --budget-ms 1000 --random-plans 5000 --json > "$out"
    t1=$(date +%s.%N)
    jq -c --arg net "$1" --argjson target "$2" --argjson wall "$(echo "$t1 - $t0" | bc)" \
        '{bench:"sched", network:$net, cost_model, nodes, stages, replicas, cost:.cost.total_s, target:$target,
          met:(.cost.total_s <= $target + 0.0005), best_at_ms:.search.best_at_ms, evaluations:.search.evaluations,
          budget_ms:.search.budget_ms, best_random_s:.baselines.best_random_s, sequential_s:.baselines.sequential_s,
          wall_s:$wall}' "$out" >> "$out.jsonl"
done
for model in dtfm shoal; do
    t0=$(date +%s.%N)
    "$sched" --generated 1024:8 --stages 32 --replicas 32 --cost "$model" --seed 1 --budget-ms 20000 --random-plans 200 --json > "$out"
    t1=$(date +%s.%N)
    jq -c --arg net "generated-1024" --argjson wall "$(echo "$t1 - $t0" | bc)" \
        '{bench:"sched", network:$net, cost_model, nodes, stages, replicas, cost:.cost.total_s, target:null,
          met:($wall < 30), best_at_ms:.search.best_at_ms, evaluations:.search.evaluations,
          budget_ms:.search.budget_ms, best_random_s:.baselines.best_random_s, sequential_s:.baselines.sequential_s,
          wall_s:$wall}' "$out" >> "$out.jsonl"
done
jq -r '[.network, .cost_model, (.cost*1000|round/1000), (.target // "-"), .met, (.best_at_ms|round),
        (.best_random_s*1000|round/1000), (.sequential_s*1000|round/1000), (.wall_s*10|round/10)] | @tsv' "$out.jsonl" |
    while IFS="$(printf '\t')" read -r net model cost target met at rnd seq wall; do
        printf '%-10s %-6s %10s %10s %6s %10s %12s %12s %8s\n' "$net" "$model" "$cost" "$target" "$met" "$at" "$rnd" "$seq" "$wall"
    done
echo
cat "$out.jsonl"
