#!/usr/bin/env bash
# test_kernels_tools.sh - the release kernel tools that `make test` builds
# (with the CUDA backend where nvcc is): the benchmark runs a small CPU stage,
# the GPU test checks its own harness on the CPU oracle, and both say clearly
# what is wrong when no CUDA device can be used.
set -u
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BENCH="$TOP/build/rel/bench/bench_kernels"
GPUTEST="$TOP/build/rel/tests/gpu/test_kernels_gpu"

"$BENCH" --device cpu --steps 1 > "$WORK/out" 2> "$WORK/err"
check "bench_kernels on the cpu exits 0" "$?" 0
check "it prints one JSON line per config (GPT-2 two, Llama one)" "$(grep -c '^{"bench":"kernels"' "$WORK/out")" 3
check "with positive tokens/s" \
    "$(grep '^{' "$WORK/out" | jq -s 'all(.tokens_per_s > 0 and .device == "cpu")')" true

"$BENCH" --steps 0 > "$WORK/out" 2> "$WORK/err"
check "a bad argument exits 2" "$?" 2

# make bench-kernels' side-by-side: PyTorch's rows where a python3 has torch
# (an optional bench dependency), else a line that says it is missing.
bash "$TOP/tests/bench/bench_kernels.sh" "$BENCH" --device cpu --steps 1 --only small-mid-b2 \
    > "$WORK/out" 2> "$WORK/err"
check "bench_kernels.sh on the cpu exits 0" "$?" 0
if grep -q '^# no python3 with torch' "$WORK/out"; then
    ok "without PyTorch it says so and prints shoal's row alone"
    check "(shoal's row)" "$(grep -c '^{"bench":"kernels","impl":"shoal"' "$WORK/out")" 1
else
    check "with PyTorch: one side-by-side row, both timed, in fp32 on the cpu" \
        "$(grep '^{"bench":"kernels_vs_torch"' "$WORK/out" | jq -c '[.dtype, (.rows | length), (.rows[0].eager_over_shoal > 0)]')" \
        '["fp32",1,true]'
fi

if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1; then
    ok "a GPU is present: the CUDA paths run under make test-gpu, not here"
else
    "$BENCH" --device cuda --steps 1 > "$WORK/out" 2> "$WORK/err"
    check "bench_kernels --device cuda without a GPU exits 3" "$?" 3
    check "and says why" "$(grep -c -E 'no CUDA (backend|device)' "$WORK/err" "$WORK/out" | awk -F: '{s+=$NF} END {print (s > 0)}')" 1
    "$GPUTEST" > "$WORK/out" 2> "$WORK/err"
    check "test_kernels_gpu without a GPU exits 77 (skip)" "$?" 77
    check "and prints the skip line" "$(grep -c '^skip - no CUDA device' "$WORK/out")" 1
fi

# make bench-gpu-pipeline's script on the cpu with a small model: two
# agents train the 2-stage job and bench_pipeline times the same step alone.
DEVICE=cpu LINKS=int8 VOCAB=256 CONTEXT=32 D_MODEL=32 HEADS=2 LAYERS=2 MICRO_BATCHES=2 MICRO_BATCH_SIZE=2 \
    bash "$TOP/tests/gpu/pipeline_bench.sh" "$SHOAL_SERVER" "$SHOAL_AGENT" "$TOP/build/rel/bench/bench_pipeline" 4 \
    > "$WORK/out" 2> "$WORK/err"
check "pipeline_bench.sh on the cpu exits 0" "$?" 0
check "it prints the int8 job's step, tokens/s and the kernels-only step" \
    "$(grep '^{"bench":"gpu_pipeline"' "$WORK/out" | jq -c '[.link, .step_ms > 0, .tokens_per_s > 0, .kernels_step_ms > 0, .of_kernels > 0]')" \
    '["int8",true,true,true,true]'

"$GPUTEST" --device cpu > "$WORK/out" 2> "$WORK/err"
check "test_kernels_gpu's harness passes with the cpu oracle on both sides" "$?" 0
check "and reports no failed check" "$(grep -c '^not ok' "$WORK/out")" 0

[ "$FAILS" -eq 0 ]
