#!/usr/bin/env bash
# bench_finetune.sh - GPT-2 124M fine-tuned across four real agents on this
# machine's CPU, side by side with the same job from scratch: how long
# `shoal-agent import` takes and what it uploads, the first and last loss,
# the median step and tokens per second, and how long `shoal-agent export`
# takes; a table and one JSON line.  A benchmark, not a test: nothing is
# asserted.
#
# usage: tests/bench/bench_finetune.sh SHOAL_SERVER SHOAL_AGENT [STEPS]
#   GPT2_BIN=gpt2_124M.bin   llm.c's file (default: one of its sizes whose
#                            weights are a short pattern, written here: the
#                            timings hold, the losses say nothing)
#   GPT2_DATA=shard.bin      an llm.c token shard (default: random tokens)
#   CONTEXT=64               the job's context_length (at most 1024)
#   FAMILY=llama             SmolLM2-135M instead (a Llama: 30 layers, GQA,
#                            a tied head), from LLAMA_DIR (its hub directory:
#                            model.safetensors and config.json; default a
#                            pattern of its shape, written here); GPT2_DATA
#                            then holds its tokens
#   SHAPE=llama-3.2-1b       with FAMILY=llama: a Llama-3.2-1B-shaped file
#                            (128256 tokens, llama3 rope scaling, tied;
#                            2.5 GB) imported, exported, imported into a
#                            second job and exported again, the two exports
#                            compared byte for byte; not trained (see below)
set -u
export SHOAL_SERVER=$(realpath "${1:?usage: bench_finetune.sh SERVER AGENT [STEPS]}")
export SHOAL_AGENT=$(realpath "${2:?usage: bench_finetune.sh SERVER AGENT [STEPS]}")
STEPS=${3:-4}
CONTEXT=${CONTEXT:-64}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh" >/dev/null
. "$here/../integration/agents.sh"

start_server s >/dev/null || exit 1
S=$URL_s
ADMIN=$(cat "$WORK/s/admin.token")
for n in a0 a1 a2 a3; do start_agent "$n" s; done
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest")" = 12 ]; }
wait_for 180 links_up || { echo "agents did not measure their links" >&2; exit 1; }

FAMILY=${FAMILY:-gpt2}
SHAPE=${SHAPE:-smollm2-135m}
if [ "$FAMILY" = llama ] && [ "$SHAPE" = llama-3.2-1b ]; then
    WEIGHTS=${LLAMA_DIR:-$WORK/Llama-3.2-1B}/model.safetensors
    [ -n "${LLAMA_DIR:-}" ] || python3 "$here/../integration/llama_files.py" big "$WORK/Llama-3.2-1B" "$SHAPE"
    VOCAB=128256 NAME="Llama-3.2-1B"
    MODEL='"architecture":"llama","vocab_size":128256,"context_length":%d,"d_model":2048,"heads":32,"kv_heads":8,"ffn_dim":8192,"layers":16,"rope_theta":500000,"rope_scaling":{"rope_type":"llama3","factor":32,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":8192},"tie_embeddings":true'
elif [ "$FAMILY" = llama ]; then
    WEIGHTS=${LLAMA_DIR:-$WORK/SmolLM2-135M}/model.safetensors
    [ -n "${LLAMA_DIR:-}" ] || python3 "$here/../integration/llama_files.py" big "$WORK/SmolLM2-135M"
    VOCAB=49152 NAME="SmolLM2-135M"
    MODEL='"architecture":"llama","vocab_size":49152,"context_length":%d,"d_model":576,"heads":9,"kv_heads":3,"ffn_dim":1536,"layers":30,"rope_theta":100000,"tie_embeddings":true'
else
    WEIGHTS=${GPT2_BIN:-$WORK/gpt2_124M.bin}
    [ -n "${GPT2_BIN:-}" ] || python3 "$here/../integration/gpt2_files.py" big "$WEIGHTS"
    VOCAB=50257 NAME="GPT-2 124M"
    MODEL='"vocab_size":50257,"context_length":%d,"d_model":768,"heads":12,"layers":12'
fi
DATA=${GPT2_DATA:-$WORK/shard.bin}
export SHOAL_DATA_ROOTS=$SHOAL_DATA_ROOTS:$(dirname "$(realpath -m "$DATA")")   # the agents may read it
[ -n "${GPT2_DATA:-}" ] || [ "$VOCAB" -gt 65536 ] || python3 -c '
import random, struct, sys
n = 200000
rnd = random.Random(3)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *[0] * 253))
    f.write(struct.pack("<%dH" % n, *[rnd.randrange(int(sys.argv[2])) for _ in range(n)]))' "$DATA" "$VOCAB"

# job NAME: the model, 2 stages x 2 replicas, one micro-batch of 4 sequences
job() {
    printf '{"name":"%s","model":{'"$MODEL"'},' "$1" "$CONTEXT"
    printf '"parallelism":{"stages":2,"replicas":2,"micro_batches":1,"micro_batch_size":4},'
    printf '"training":{"steps":%d,"learning_rate":0.0001,"warmup_steps":0},' "$STEPS"
    printf '"data":{"path":"%s","format":"llmc"},"checkpoint_interval":0}' "$(realpath -m "$DATA")"
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# import NAME FILE: a new job J holding FILE's weights; IMPORT_S, UPLOAD_MB
import() {
    req POST "$S/v1/jobs" "$ADMIN" "$(job "$1")"
    J=$(printf '%s' "$BODY" | jq -r .id)
    local t0; t0=$(now)
    "$SHOAL_AGENT" import --server "$S" --admin-token "$ADMIN" --job "$J" --model "$2" --tmp-dir "$WORK" \
        > "$WORK/import.out" 2> "$WORK/import.err" || { cat "$WORK/import.err" >&2; exit 1; }
    IMPORT_S=$(since "$t0")
    UPLOAD_MB=$(awk '/^stage/ { s += $5 } END { printf "%.0f", s / 1e6 }' "$WORK/import.out")
}
# export NAME: job J's latest checkpoint into $WORK/export-NAME; EXPORT_S
export_job() {
    local t0; t0=$(now)
    "$SHOAL_AGENT" export --server "$S" --admin-token "$ADMIN" --job "$J" --out "$WORK/export-$1" --tmp-dir "$WORK" \
        > /dev/null 2> "$WORK/export.err" || { cat "$WORK/export.err" >&2; exit 1; }
    EXPORT_S=$(since "$t0")
}
# run NAME IMPORT(yes|no): one job; sets the row's values
run() {
    IMPORT_S=0 UPLOAD_MB=0
    if [ "$2" = yes ]; then
        import "$1" "$WEIGHTS"
    else
        req POST "$S/v1/jobs" "$ADMIN" "$(job "$1")"
        J=$(printf '%s' "$BODY" | jq -r .id)
    fi
    req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
    wait_for 3600 finished "$J"
    [ "$(job_state "$S" "$ADMIN" "$J")" = succeeded ] || { echo "job $1 did not succeed" >&2; exit 1; }
    FIRST=$(sql s "SELECT round(avg(loss)::numeric, 4) FROM job_steps WHERE job_id = $J AND step = 0 AND stage = 1")
    LAST=$(sql s "SELECT round(avg(loss)::numeric, 4) FROM job_steps WHERE job_id = $J AND step = $STEPS - 1 AND stage = 1")
    STEP_S=$(sql s "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY m)::numeric, 2) FROM
                    (SELECT max(iteration_s) AS m FROM job_steps WHERE job_id = $J AND step >= 1 GROUP BY step) x")
    TOK_S=$(awk -v s="$STEP_S" -v t="$CONTEXT" 'BEGIN { printf "%.0f", 2 * 4 * t / s }')
    export_job "$1"
    printf '%-10s %9s %10s %11s %10s %9s %9s %9s\n' "$1" "$IMPORT_S" "$UPLOAD_MB" "$FIRST" "$LAST" "$STEP_S" "$TOK_S" "$EXPORT_S"
    JSON="$JSON{\"job\":\"$1\",\"import_s\":$IMPORT_S,\"upload_mb\":$UPLOAD_MB,\"first_loss\":$FIRST,\"last_loss\":$LAST,\"step_s\":$STEP_S,\"tokens_per_s\":$TOK_S,\"export_s\":$EXPORT_S},"
}

# The 1B shape is not trained here: four agents would hold 16 bytes (f32
# weight, gradient, Adam m and v) for each of its 1.5 billion parameters
# with the tied copy, about 24 GB, and its 128256-token vocabulary does not
# fit llm.c's uint16 shards.  Its weights go in, out, in again and out again.
if [ "$VOCAB" = 128256 ]; then
    echo
    echo "$NAME: imported (2 stages), exported, the export imported into a second job and exported again"
    echo "weights: ${LLAMA_DIR:-a pattern of the sizes of $NAME}"
    import first "$WEIGHTS"; I1=$IMPORT_S U1=$UPLOAD_MB
    export_job first; E1=$EXPORT_S
    SAME=$([ -n "${LLAMA_DIR:-}" ] || python3 "$here/../integration/llama_files.py" pattern "$(dirname "$WEIGHTS")" "$WORK/export-first")
    import again "$WORK/export-first/model.safetensors"; I2=$IMPORT_S
    export_job again; E2=$EXPORT_S
    BYTES=$(stat -c %s "$WORK/export-first/model.safetensors")
    IDENTICAL=$(cmp -s "$WORK/export-first/model.safetensors" "$WORK/export-again/model.safetensors" && echo true || echo false)
    printf '%-24s %9s %10s %9s %12s %11s %10s %s\n' model import_s upload_MB export_s reimport_s reexport_s identical pattern
    printf '%-24s %9s %10s %9s %12s %11s %10s %s\n' "$NAME" "$I1" "$U1" "$E1" "$I2" "$E2" "$IDENTICAL" "${SAME:-n/a}"
    echo "{\"bench\":\"finetune_llama32_1b_roundtrip\",\"import_s\":$I1,\"upload_mb\":$U1,\"export_s\":$E1,\"reimport_s\":$I2,\"reexport_s\":$E2,\"export_bytes\":$BYTES,\"identical\":$IDENTICAL,\"pattern\":\"${SAME:-n/a}\"}"
    exit 0
fi

echo
echo "$NAME, 2x2 on four agents (one CPU thread each), context $CONTEXT, 1 micro-batch of 4, $STEPS steps"
echo "weights: ${GPT2_BIN:-${LLAMA_DIR:-a pattern of the sizes of $NAME}}; data: ${GPT2_DATA:-random tokens}"
printf '%-10s %9s %10s %11s %10s %9s %9s %9s\n' job import_s upload_MB first_loss last_loss step_s tokens/s export_s
JSON=""
run imported yes
run scratch no
bench=finetune_124M_2x2
[ "$FAMILY" != llama ] || bench=finetune_smollm2_2x2
echo "{\"bench\":\"$bench\",\"steps\":$STEPS,\"context\":$CONTEXT,\"jobs\":[${JSON%,}]}"
