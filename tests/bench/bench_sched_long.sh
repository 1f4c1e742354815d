#!/bin/sh
# bench_sched_long.sh - long searches that set the best known cost of each
# generated network in make bench-sched, kept in tests/bench/sched_bests.json.
# usage: tests/bench/bench_sched_long.sh [path/to/shoal-sched]
# Each instance (family:nodes:network seed, dtfm, the paper's job) is searched
# for SCHED_LONG_MS (default: 300 s up to 256 nodes, 600 s at 1,024) with
# seed 1 on two threads; the file keeps, per instance, the lowest cost any
# such run found, the budget and the commit.  SCHED_LONG_SIZES narrows the
# sizes ("64 128"), SCHED_LONG_FAMILIES the families.
set -eu
sched=${1:-bin/shoal-sched}
bests=tests/bench/sched_bests.json
sizes=${SCHED_LONG_SIZES:-64 128 256 1024}
families=${SCHED_LONG_FAMILIES:-plane regions mixed}
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -f "$bests" ] || echo '{}' > "$bests"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
. tests/bench/sched_instances.sh
for n in $sizes; do
    budget=${SCHED_LONG_MS:-$(long_budget_ms "$n")}
    for family in $families; do
        for nseed in $(network_seeds "$n"); do
            key="$family:$n:$nseed"
            "$sched" --family "$family:$n" --network-seed "$nseed" --paper-job --cost dtfm --seed 1 \
                --budget-ms "$budget" --random-plans 100 --json 2>/dev/null > "$out"
            cost=$(jq '.cost.total_s' "$out")
            jq --arg k "$key" --argjson c "$cost" --argjson b "$budget" --arg commit "$commit" \
                --arg day "$(date -u +%F)" \
                'if (.[$k] == null or .[$k].cost > $c) then .[$k] = {cost:$c, budget_ms:$b, commit:$commit, day:$day}
                 else . end' "$bests" > "$bests.tmp" && mv "$bests.tmp" "$bests"
            printf '%-16s %12.4f  (best known %s)\n' "$key" "$cost" "$(jq --arg k "$key" '.[$k].cost' "$bests")"
        done
    done
done
