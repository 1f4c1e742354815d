#!/usr/bin/env bash
# test_sched_cli.sh - shoal-sched as an operator runs it: scenarios, the
# server's JSON files, errors and exit codes.
set -u
. "$(dirname "$0")/lib.sh"
SCHED="$(dirname "$SHOAL_SERVER")/shoal-sched"

"$SCHED" --help > "$WORK/out"; check "--help exits 0" "$?" 0
check "--help lists the scenarios" "$(grep -c 'dc|spot|multi|regional|world' "$WORK/out")" 1

"$SCHED" --scenario dc --paper-job --cost dtfm --budget-ms 500 --random-plans 200 --json > "$WORK/out"
check "dc under dtfm reaches the paper's 3.440" "$(jq '.cost.total_s <= 3.4399' "$WORK/out")" true
check "the plan has 8 stages of 8 distinct nodes" "$(jq '[.plan[].nodes[]] | unique | length' "$WORK/out")" 64
check "baselines are reported" "$(jq '.baselines.random_plans == 200 and .baselines.sequential_s > .cost.total_s' "$WORK/out")" true
"$SCHED" --scenario world --paper-job --cost dtfm --budget-ms 200 --random-plans 10 > "$WORK/out"
check "the human output shows regions in the grid" "$(grep -c '@tokyo' "$WORK/out" | awk '$1 > 0 {print "yes"}')" yes
check "and the cost breakdown" "$(grep -c '^cost model dtfm: ' "$WORK/out")" 1

"$SCHED" --scenario multi --paper-job --cost shoal --seed 3 --candidates 400 --budget-ms 60000 --random-plans 0 --json > "$WORK/a.json"
"$SCHED" --scenario multi --paper-job --cost shoal --seed 3 --candidates 400 --budget-ms 60000 --random-plans 0 --json > "$WORK/b.json"
check "same seed and candidate budget, same plan" "$(jq -c .plan "$WORK/a.json")" "$(jq -c .plan "$WORK/b.json")"
check "the plan's bytes per step: stage links, sync, no tied head (gpt2)" \
    "$(jq -c '.bytes_per_step | [.stage_links > 0, .sync > 0, .tied_head]' "$WORK/a.json")" '[true,true,0]'
"$SCHED" --scenario multi --paper-job --cost shoal --seed 3 --candidates 400 --budget-ms 60000 --random-plans 0 > "$WORK/out"
check "the human output says what a step sends" "$(grep -c '^  sent per step: stage links .* MiB, sync .* MiB, tied head 0.0 MiB$' "$WORK/out")" 1

# The search itself from random starts only (no structured start, no
# baseline to start from) reaches the paper's target on dc, and reports
# how it ran.
"$SCHED" --scenario dc --paper-job --cost dtfm --starts random --threads 2 --candidates 60000 --random-plans 0 --json > "$WORK/out"
check "dc from random starts reaches 3.440" "$(jq '.cost.total_s <= 3.4399' "$WORK/out")" true
check "the search says how it ran" "$(jq -c '[.search.starts, .search.threads]' "$WORK/out")" '["random",2]'
"$SCHED" --scenario multi --paper-job --cost shoal --seed 4 --threads 2 --candidates 9000 --random-plans 0 --json > "$WORK/a.json"
"$SCHED" --scenario multi --paper-job --cost shoal --seed 4 --threads 2 --candidates 9000 --random-plans 0 --json > "$WORK/b.json"
check "two threads, same seed and candidates: same plan" "$(jq -c .plan "$WORK/a.json")" "$(jq -c .plan "$WORK/b.json")"
check "with every evaluation spent" "$(jq '.search.evaluations' "$WORK/a.json")" 9000

# Generated families: any shape with --stages/--replicas, never worse
# than the baselines the run computed.
"$SCHED" --family mixed:40 --network-seed 2 --paper-job --stages 4 --replicas 8 --candidates 2000 --random-plans 500 --json > "$WORK/out"
check "a mixed family of 40 nodes schedules 4 x 8" "$(jq -c '[.nodes, .stages, .replicas, ([.plan[].nodes[]] | unique | length)]' "$WORK/out")" "[40,4,8,32]"
check "and its plan is no worse than its baselines" \
    "$(jq '.cost.total_s <= .baselines.best_random_s and .cost.total_s <= .baselines.sequential_s' "$WORK/out")" true
check "--family with a size under 2 exits 2" "$("$SCHED" --family plane:1 > /dev/null 2>&1; echo $?)" 2
"$SCHED" --family ring:10 > /dev/null 2> "$WORK/err"; check "an unknown family fails" "$?" 1
check "and says which exist" "$(grep -c 'use plane, regions or mixed' "$WORK/err")" 1
"$SCHED" --family plane:10 --generated 10:2 > /dev/null 2> "$WORK/err"; check "--family and --generated together exit 2" "$?" 2
"$SCHED" --scenario dc --threads 0 > /dev/null 2>&1; check "--threads 0 exits 2" "$?" 2
"$SCHED" --scenario dc --starts some > /dev/null 2>&1; check "--starts some exits 2" "$?" 2

# server/sched/README.md's examples that need no files, run as written:
# their cost, breakdown and baseline lines must be what the tool prints.
README="$(dirname "$0")/../../server/sched/README.md"
grep '^\$ bin/shoal-sched ' "$README" | grep -v -- '--help\|--nodes' | sed 's/^\$ //' > "$WORK/examples"
check "the README has its three examples" "$(wc -l < "$WORK/examples")" 3
while read -r cmd; do
    awk -v cmd="\$ $cmd" '$0 == cmd {on = 1; next} on && /^```/ {exit} on' "$README" |
        grep '^cost model\|^  data-parallel\|^  pipeline\|^baseline' > "$WORK/want"
    eval "\"\$SCHED\" ${cmd#bin/shoal-sched }" 2>/dev/null |
        grep '^cost model\|^  data-parallel\|^  pipeline\|^baseline' > "$WORK/got"
    check "README example prints what it shows: $cmd" "$(diff "$WORK/want" "$WORK/got" && wc -l < "$WORK/got")" 4
done < "$WORK/examples"

# The server's own JSON: three nodes, one link missing.
cat > "$WORK/nodes.json" <<'JSON'
{"nodes":[{"id":11,"region":"eu","hardware":{"tflops":50,"gpu_memory_bytes":17179869184}},
          {"id":12,"region":"eu","hardware":{"tflops":50,"gpu_memory_bytes":17179869184}},
          {"id":13,"region":"us","hardware":{"tflops":25,"ram_bytes":68719476736}}]}
JSON
cat > "$WORK/links.json" <<'JSON'
{"nodes":[11,12,13],
 "latency_ms":[[null,1,80],[1,null,80],[80,null,null]],
 "bandwidth_gbps":[[null,10,0.2],[10,null,0.2],[0.2,null,null]]}
JSON
cat > "$WORK/job.json" <<'JSON'
{"model":{"vocab_size":1000,"context_length":128,"d_model":128,"heads":4,"layers":6},
 "parallelism":{"stages":3,"replicas":1,"micro_batches":4,"micro_batch_size":2},
 "training":{"steps":10,"learning_rate":0.001},"data":{"path":"x.bin"}}
JSON
"$SCHED" --nodes "$WORK/nodes.json" --links "$WORK/links.json" --job "$WORK/job.json" --budget-ms 200 > "$WORK/out" 2> "$WORK/err"
check "a missing link fails" "$?" 1
check "naming the pair" "$(grep -c '13->12' "$WORK/err")" 1
"$SCHED" --nodes "$WORK/nodes.json" --links "$WORK/links.json" --job "$WORK/job.json" --budget-ms 200 \
    --fill-latency-ms 80 --fill-bandwidth-gbps 0.2 --json > "$WORK/out"
check "fill values let it schedule" "$?" 0
check "all six layers are placed over three stages" "$(jq -c '[.plan[0].layer_start, .plan[2].layer_end, (.plan | length)]' "$WORK/out")" "[0,6,3]"
"$SCHED" --nodes "$WORK/nodes.json" --links "$WORK/links.json" --job "$WORK/job.json" --budget-ms 200 \
    --fill-latency-ms 80 --fill-bandwidth-gbps 0.2 > "$WORK/grid"
check "the plan's grid writes each stage's layers first-last, both included, as the JSON's numbers say" \
    "$(sed -n '/^stage (layers)/,$p' "$WORK/grid" | awk 'NR > 1 && NR <= 4 { printf "%s%s %s", sep, $1, $2; sep = " " }')" \
    "$(jq -r '[.plan | to_entries[] | "\(.key) (layers \(.value.layer_start)-\(.value.layer_end - 1))"] | join(" ")' "$WORK/out" | sed 's/(layers /(/g')"

# a Llama job of the same sizes: the family's own counts (fewer parameters a
# block with 2 kv heads and an MLP of 256), a different predicted time
jq '.model += {"architecture":"llama","kv_heads":2,"ffn_dim":256}' "$WORK/job.json" > "$WORK/llama.json"
"$SCHED" --nodes "$WORK/nodes.json" --links "$WORK/links.json" --job "$WORK/llama.json" --budget-ms 200 \
    --fill-latency-ms 80 --fill-bandwidth-gbps 0.2 --json > "$WORK/llama.out"
check "a Llama job file schedules" "$? $(jq -c '[.plan[0].layer_start, .plan[2].layer_end]' "$WORK/llama.out")" "0 [0,6]"
check "with its own predicted compute" \
    "$(jq -n --slurpfile a "$WORK/out" --slurpfile b "$WORK/llama.out" '$a[0].cost.compute_s != $b[0].cost.compute_s')" true
# tied across its three stages, the pipeline's ends sum the head's gradient
# (1000 x 128 floats) each step: a gradient sum with no replicas to sync
jq '.model += {"tie_embeddings":true}' "$WORK/llama.json" > "$WORK/tied.json"
"$SCHED" --nodes "$WORK/nodes.json" --links "$WORK/links.json" --job "$WORK/tied.json" --budget-ms 200 \
    --fill-latency-ms 80 --fill-bandwidth-gbps 0.2 --json > "$WORK/tied.out"
check "a tied Llama job prices its ends' exchange" \
    "$? $(jq '.cost.dp_s > 0' "$WORK/tied.out") $(jq '.cost.dp_s' "$WORK/llama.out")" "0 true 0"
jq '.model += {"architecture":"llama","kv_heads":3,"ffn_dim":256}' "$WORK/job.json" > "$WORK/bad-llama.json"
"$SCHED" --nodes "$WORK/nodes.json" --links "$WORK/links.json" --job "$WORK/bad-llama.json" --budget-ms 200 \
    --fill-latency-ms 80 --fill-bandwidth-gbps 0.2 > /dev/null 2> "$WORK/err"
check "a Llama job whose heads do not divide into kv heads is refused, naming the field" \
    "$? $(grep -c 'kv_heads' "$WORK/err")" "1 1"

"$SCHED" --scenario moon --paper-job > /dev/null 2> "$WORK/err"
check "an unknown scenario fails" "$?" 1
check "and says which exist" "$(grep -c 'use dc, spot, multi, regional or world' "$WORK/err")" 1
"$SCHED" --scenario dc --budget-ms soon > /dev/null 2>&1; check "a bad value exits 2" "$?" 2
"$SCHED" --scenario dc --frobnicate > /dev/null 2>&1;     check "an unknown option exits 2" "$?" 2
"$SCHED" --scenario dc --nodes "$WORK/nodes.json" --links "$WORK/links.json" > /dev/null 2>&1
check "two networks at once fail" "$?" 1
"$SCHED" --nodes "$WORK/nodes.json" --links "$WORK/nope.json" > /dev/null 2> "$WORK/err"
check "a missing file fails" "$?" 1
check "and names it" "$(grep -c 'nope.json' "$WORK/err")" 1

[ "$FAILS" -eq 0 ]
