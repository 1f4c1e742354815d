#!/usr/bin/env bash
# pipeline_bench.sh - the GPU pipeline benchmark (make bench-gpu-pipeline):
# two shoal-agents on one device train a GPT-2-124M-sized byte model (V 256,
# T 1024, C 768, 12 heads, 12 layers) as 2 pipeline stages over TCP against a
# real server, 16 sequences a step (M 4 micro-batches of B 4), once per
# stage-link type; beside each, bench_pipeline's kernels-only step of the
# same work in one process (tests/bench/bench_pipeline.c). The gap between
# the two is what the agents, the copies and the links cost.
# usage: tests/gpu/pipeline_bench.sh SHOAL_SERVER SHOAL_AGENT BENCH_PIPELINE [STEPS]
# Environment: DEVICE (cuda), LINKS ("f32 bf16 int8"), VOCAB CONTEXT D_MODEL
# HEADS LAYERS MICRO_BATCHES MICRO_BATCH_SIZE (the model and batch above); DEVICE=cpu with a small model
# checks this script on a machine without a GPU.
# Prints a table and one JSON line per link type; targets (issue 35): the
# pipeline at least 85% of the kernels-only throughput, bf16 at least as
# fast as f32. Nothing is asserted about time; exit 1 when a job failed.
set -u
export SHOAL_SERVER=$(realpath "${1:?usage: pipeline_bench.sh SERVER AGENT BENCH_PIPELINE [STEPS]}")
export SHOAL_AGENT=$(realpath "${2:?usage: pipeline_bench.sh SERVER AGENT BENCH_PIPELINE [STEPS]}")
BENCH=$(realpath "${3:?usage: pipeline_bench.sh SERVER AGENT BENCH_PIPELINE [STEPS]}")
STEPS=${4:-20}
DEVICE=${DEVICE:-cuda}
LINKS=${LINKS:-f32 bf16 int8}
VOCAB=${VOCAB:-256} CONTEXT=${CONTEXT:-1024} D_MODEL=${D_MODEL:-768} HEADS=${HEADS:-12} LAYERS=${LAYERS:-12}
MB=${MICRO_BATCHES:-4} BS=${MICRO_BATCH_SIZE:-4}
. "$(dirname "$0")/../integration/lib.sh" >/dev/null
. "$(dirname "$0")/../integration/agents.sh"

start_server_s >/dev/null || exit 1
for name in g0 g1; do start_agent "$name" s --device "$DEVICE"; done
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest")" = 2 ]; }
wait_for 120 links_up || { echo "agents did not measure their links" >&2; exit 1; }
node_id() { sql s "SELECT id FROM nodes WHERE name = '$1'"; }
MODEL="{\"vocab_size\":$VOCAB,\"context_length\":$CONTEXT,\"d_model\":$D_MODEL,\"heads\":$HEADS,\"layers\":$LAYERS}"
TOKENS=$((MB * BS * CONTEXT))

# the median over steps 2.. of a step's slowest tasklet (ms); of one stage's compute_s
step_ms() { sql s "SELECT round((percentile_cont(0.5) WITHIN GROUP (ORDER BY s) * 1e3)::numeric, 2)
                   FROM (SELECT max(iteration_s) AS s FROM job_steps WHERE job_id = $1 AND step >= 2 GROUP BY step) x"; }
compute_ms() { sql s "SELECT round((percentile_cont(0.5) WITHIN GROUP (ORDER BY compute_s) * 1e3)::numeric, 2)
                      FROM job_steps WHERE job_id = $1 AND stage = $2 AND step >= 2"; }

run_link() {   # run_link LINK: a job on g0 -> g1; sets J
    local body
    body='{"name":"pipeline-'$1'","model":'"$MODEL"','
    body=$body"\"parallelism\":{\"stages\":2,\"replicas\":1,\"micro_batches\":$MB,\"micro_batch_size\":$BS},"
    body=$body"\"training\":{\"steps\":$STEPS,\"learning_rate\":0.0003,\"warmup_steps\":2,\"seed\":7},"
    body=$body"\"data\":{\"path\":\"$CORPUS\",\"format\":\"text\"},\"checkpoint_interval\":0,"
    body=$body"\"communication\":{\"stage_link\":\"$1\"}}"
    req POST "$S/v1/jobs" "$ADMIN" "$body"
    J=$(printf '%s' "$BODY" | jq -r .id)
    [ -n "$J" ] && [ "$J" != null ] || { fail "the $1 job is made" "status $STATUS: $BODY"; return 1; }
    req POST "$S/v1/jobs/$J/plan" "$ADMIN" "{\"stages\":[{\"nodes\":[$(node_id g0)]},{\"nodes\":[$(node_id g1)]}]}"
    [ "$STATUS" = 201 ] || { fail "the $1 job is planned" "status $STATUS: $BODY"; return 1; }
    wait_for 900 finished "$J"
    check "the $1 job succeeds" "$(job_state "$S" "$ADMIN" "$J")" succeeded
}

rows="" json=""
for link in $LINKS; do
    run_link "$link" || continue
    kernels=$("$BENCH" --device "$DEVICE" --vocab "$VOCAB" --context "$CONTEXT" --d-model "$D_MODEL" \
              --heads "$HEADS" --layers "$LAYERS" --stages 2 --micro-batches "$MB" --micro-batch-size "$BS" \
              --link "$link" --steps 10 2>&1 | grep '^{') || { fail "bench_pipeline --link $link runs" "$kernels"; continue; }
    kms=$(printf '%s' "$kernels" | jq .step_ms)
    pms=$(step_ms "$J") c0=$(compute_ms "$J" 0) c1=$(compute_ms "$J" 1)
    line=$(awk -v l="$link" -v p="$pms" -v k="$kms" -v t="$TOKENS" -v c0="$c0" -v c1="$c1" 'BEGIN {
        printf "%-5s %10.2f %12.0f %12.2f %14.0f %8.3f %10.2f %10.2f", l, p, t / p * 1e3, k, t / k * 1e3, k / p, c0, c1 }')
    rows="$rows$line
"
    json="$json{\"bench\":\"gpu_pipeline\",\"device\":\"$DEVICE\",\"link\":\"$link\",\"stages\":2,\"M\":$MB,\"B\":$BS,\"T\":$CONTEXT,\"d_model\":$D_MODEL,\"layers\":$LAYERS,\"steps\":$STEPS,\"step_ms\":$pms,\"tokens_per_s\":$(awk -v p="$pms" -v t="$TOKENS" 'BEGIN { printf "%.1f", t / p * 1e3 }'),\"kernels_step_ms\":$kms,\"kernels_tokens_per_s\":$(awk -v k="$kms" -v t="$TOKENS" 'BEGIN { printf "%.1f", t / k * 1e3 }'),\"of_kernels\":$(awk -v p="$pms" -v k="$kms" 'BEGIN { printf "%.3f", k / p }'),\"compute_ms\":[$c0,$c1]}
"
done
stop_all_agents

echo "2 stages on one $DEVICE device, model $MODEL, M=$MB B=$BS ($TOKENS tokens a step), median of steps 2..$((STEPS - 1))"
printf '%-5s %10s %12s %12s %14s %8s %10s %10s\n' link step_ms tokens/s kernels_ms kernels_tok/s of_kern compute0 compute1
printf '%s' "$rows"
printf '%s' "$json"
[ "$FAILS" = 0 ]
