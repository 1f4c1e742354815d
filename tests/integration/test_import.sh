#!/usr/bin/env bash
# test_import.sh - a job fine-tuned from GPT-2 weights across four real
# agents: an llm.c checkpoint written here (known weights, no download) is
# imported into a 2x2 job with a shorter context (shoal-agent import), every
# tensor lands where it should (the job's step-0 model, exported, is the
# file's), the agents' first loss is the one the weights give in closed
# form, the job trains to success, and its export imported into another job
# and exported again is the same file byte for byte; another model, a
# damaged file, a scheduled job and bad options are refused with nothing
# stored; a Llama in Hugging Face's sharded files does the same; the
# documents' fine-tune examples run as written on files of GPT-2 124M's
# and SmolLM2-135M's shapes, written by their pattern-file examples.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
GPT2="python3 $TOP/tests/integration/gpt2_files.py"

start_server_s || exit 1
for n in a0 a1 a2 a3; do start_agent "$n" s; done
nodes_up() { [ "$(sql s "SELECT count(*) FROM nodes WHERE tflops > 0")" = 4 ]; }
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest WHERE latency_ms > 0 AND bandwidth_gbps > 0")" = 12 ]; }
if wait_for 60 nodes_up && wait_for 120 links_up; then ok "four agents register and measure their links"
else fail "four agents register and measure their links" "$(tail -n 5 "$WORK"/agent-a0.log)"; exit 1; fi

# a text of one byte, 'a' (97): a model whose logits do not depend on the
# input has a known loss on it
A=97
head -c 200000 /dev/zero | tr '\0' 'a' > "$WORK/a.txt"
$GPT2 llmc "$WORK/tiny.bin" 256 64 32 2 4 --peaked $A
WANT_LOSS=$($GPT2 loss "$WORK/tiny.bin" $A)

# job NAME STAGES REPLICAS D_MODEL: a job body on the 'a' text, context 32
# (the file's is 64)
job() {
    printf '{"name":"%s","model":{"vocab_size":256,"context_length":32,"d_model":%d,"heads":2,"layers":4},' "$1" "$4"
    printf '"parallelism":{"stages":%d,"replicas":%d,"micro_batches":2,"micro_batch_size":2},' "$2" "$3"
    printf '"training":{"steps":6,"learning_rate":0.001,"warmup_steps":0,"seed":7},'
    printf '"data":{"path":"%s","format":"text"},"checkpoint_interval":3,"communication":{"stage_link":"f32"}}' "$WORK/a.txt"
}
create() { req POST "$S/v1/jobs" "$ADMIN" "$1"; printf '%s' "$BODY" | jq -r .id; }
# import OUT [ARGS...]: shoal-agent import with the admin token; stdout in
# OUT, stderr in OUT.err, exit status in IMPORT_RC.
import() {
    local out=$1; shift
    "$SHOAL_AGENT" import --server "$S" --admin-token-file "$WORK/s/admin.token" --tmp-dir "$WORK" "$@" \
        > "$out" 2> "$out.err"
    IMPORT_RC=$?
}
steps_of() { fetch "$S/v1/jobs/$1/checkpoints" "$ADMIN" | jq -c '[.checkpoints[] | select(.complete) | .step]'; }

# ---- the llm.c file into a 2x2 job
J=$(create "$(job tuned 2 2 32)")
import "$WORK/imp" --job "$J" --model "$WORK/tiny.bin"
check "import: exit 0, one line per stage file (its layers, size, SHA-256) and the job it starts" \
    "$IMPORT_RC $(grep -c '^stage [01] layers [0-9]-[0-9] [0-9]* bytes sha256 [0-9a-f]\{64\}$' "$WORK/imp") $(tail -n 1 "$WORK/imp")" \
    "0 2 job $J starts from $WORK/tiny.bin"
check "import: the job's step-0 checkpoint is complete, two files splitting the layers 0-1, 2-3" \
    "$(fetch "$S/v1/jobs/$J/checkpoints" "$ADMIN" | jq -c '.checkpoints[] | [.step, .complete, [.stages[] | [.layer_start, .layer_end]]]')" \
    '[0,true,[[0,2],[2,4]]]'
check "import: the printed SHA-256s are the server's" \
    "$(awk '/^stage/ { print $NF }' "$WORK/imp" | sort | tr '\n' ' ')" \
    "$(fetch "$S/v1/jobs/$J/checkpoints" "$ADMIN" | jq -r '.checkpoints[0].stages[].sha256' | sort | tr '\n' ' ')"
export_model "$WORK/ex0" --job "$J"
check "import: every tensor lands where it should (the job's step-0 model exported is the file's, its position embedding cut to 32 rows, the head tied: no lm_head.weight)" \
    "$EXPORT_RC $($GPT2 same "$WORK/tiny.bin" "$WORK/ex0/model.safetensors" 32)" "0 same 52"

# ---- refused, nothing stored
D=$(create "$(job other 2 2 64)")
import "$WORK/imp" --job "$D" --model "$WORK/tiny.bin"
check "import into a job of another model: exit 1, both models named, nothing uploaded" \
    "$IMPORT_RC $(grep -c 'd_model 32.*d_model 64.*nothing was uploaded' "$WORK/imp.err") $(steps_of "$D")" "1 1 []"
head -c 5000 "$WORK/tiny.bin" > "$WORK/short.bin"
import "$WORK/imp" --job "$D" --model "$WORK/short.bin"
check "import of a truncated llm.c file: exit 1, the reader's reason, nothing uploaded" \
    "$IMPORT_RC $(grep -c 'short.bin: ' "$WORK/imp.err") $(steps_of "$D")" "1 1 []"
import "$WORK/imp" --job "$D"
check "import without --model: exit 2, saying so" "$IMPORT_RC $(grep -c 'model is required' "$WORK/imp.err")" "2 1"
import "$WORK/imp" --job "$D" --model "$WORK/nothing-here.bin"
check "import of a missing file: exit 2" "$IMPORT_RC $(grep -c 'nothing-here.bin' "$WORK/imp.err")" "2 1"
import "$WORK/imp" --model "$WORK/tiny.bin"
check "import without --job: exit 2" "$IMPORT_RC $(grep -c 'job is required' "$WORK/imp.err")" "2 1"

# ---- the job trains from the imported weights on four agents
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
check "the job with imported weights is scheduled" "$STATUS" 201
wait_for 300 finished "$J"
check "it trains to success on four agents" "$(job_state "$S" "$ADMIN" "$J")" succeeded
check "its plan resumed from its own step 0" \
    "$(sql s "SELECT resume_step FROM plans p JOIN jobs j ON j.id = p.job_id WHERE p.job_id = $J AND p.epoch = 1")" 0
first=$(sql s "SELECT avg(loss) FROM job_steps WHERE job_id = $J AND step = 0 AND stage = 1")
check "its first loss is the imported weights' (closed form $WANT_LOSS; ln 256 = 5.545 from scratch)" \
    "$(awk -v a="$first" -v b="$WANT_LOSS" 'BEGIN { d = a - b; if (d < 0) d = -d; print (d < 1e-4 * b) ? "yes" : "no: " a }')" yes
import "$WORK/imp" --job "$J" --model "$WORK/tiny.bin"
check "import into a job that has run: exit 1, saying why" "$IMPORT_RC $(grep -c 'first schedule' "$WORK/imp.err")" "1 1"

# ---- loaded elsewhere: the trained model's export imported into a 4x1
# job (safetensors with its config.json and untied head) is that model
export_model "$WORK/ex" --job "$J"
check "the trained job exports (step 6)" "$EXPORT_RC $(steps_of "$J")" "0 [6,3,0]"
E=$(create "$(job elsewhere 4 1 32)")
import "$WORK/imp" --job "$E" --model "$WORK/ex/model.safetensors"
check "its model.safetensors imports into a 4x1 job (config.json beside it)" \
    "$IMPORT_RC $(grep -c '^stage' "$WORK/imp")" "0 4"
export_model "$WORK/ex2" --job "$E"
check "exported again, model.safetensors is the same file byte for byte" \
    "$(sha256sum < "$WORK/ex2/model.safetensors")" "$(sha256sum < "$WORK/ex/model.safetensors")"
printf '{"model_type":"gpt2","n_head":4}' > "$WORK/bad-config.json"
import "$WORK/imp" --job "$E" --model "$WORK/ex/model.safetensors" --config "$WORK/bad-config.json"
check "a --config that is not a GPT-2 config: exit 1, its reason" "$IMPORT_RC $(grep -c 'bad-config.json: ' "$WORK/imp.err")" "1 1"

# ---- Llama (Hugging Face's LlamaForCausalLM files): three bf16 shards and
# their index, grouped-query attention, imported into a 2x2 job, land where
# their names say; the job trains; its export (one F32 file) imported into
# a 4x1 job and exported again is the same file; a tied model goes into two
# stages; a config.json of another model is refused, nothing stored
LLAMA="python3 $TOP/tests/integration/llama_files.py"
$LLAMA write "$WORK/llama" 256 64 32 4 2 48 4 --shards 3 --bf16
$LLAMA write "$WORK/llama-tied" 256 64 32 4 2 48 4 --tied
# llama_job NAME STAGES REPLICAS [MORE]: a Llama job body (MORE: model members)
llama_job() {
    printf '{"name":"%s","model":{"architecture":"llama","vocab_size":256,"context_length":32,"d_model":32,' "$1"
    printf '"heads":4,"kv_heads":2,"ffn_dim":48,"layers":4%s},' "${4-}"
    printf '"parallelism":{"stages":%d,"replicas":%d,"micro_batches":2,"micro_batch_size":2},' "$2" "$3"
    printf '"training":{"steps":6,"learning_rate":0.001,"warmup_steps":0,"seed":7},'
    printf '"data":{"path":"%s","format":"text"},"checkpoint_interval":3,"communication":{"stage_link":"f32"}}' "$WORK/a.txt"
}
LJ=$(create "$(llama_job llama 2 2)")
import "$WORK/limp" --job "$LJ" --model "$WORK/llama/model.safetensors.index.json"
check "import of a sharded Llama (three bf16 shards, the index, config.json beside): exit 0, two stage files" \
    "$IMPORT_RC $(grep -c '^stage [01] layers' "$WORK/limp")" "0 2"
export_model "$WORK/lex0" --job "$LJ"
check "every Llama tensor lands where its name says (the step-0 export is the files' model, config.json alike)" \
    "$EXPORT_RC $($LLAMA same "$WORK/llama" "$WORK/lex0")" "0 same 39"
req POST "$S/v1/jobs/$LJ/schedule" "$ADMIN" '{"budget_ms":200}'
wait_for 300 finished "$LJ"
check "the imported Llama trains to success on four agents" "$(job_state "$S" "$ADMIN" "$LJ")" succeeded
export_model "$WORK/lex" --job "$LJ"
check "the trained export's config.json is the imported one, carried through training's checkpoints (max_position_embeddings 64; the job's context is 32)" \
    "$EXPORT_RC $(jq -c '[.max_position_embeddings, .torch_dtype]' "$WORK/lex/config.json") $(python3 "$TOP/tests/integration/hf_folder.py" config "$WORK/llama/config.json" "$WORK/lex/config.json")" \
    '0 [64,"float32"] changed torch_dtype'
LE=$(create "$(llama_job llama-elsewhere 4 1)")
import "$WORK/limp" --job "$LE" --model "$WORK/lex/model.safetensors"
export_model "$WORK/lex2" --job "$LE"
check "its export imports into a 4x1 job and exports again as the same file byte for byte" \
    "$IMPORT_RC $EXPORT_RC $(sha256sum < "$WORK/lex2/model.safetensors")" "0 0 $(sha256sum < "$WORK/lex/model.safetensors")"
LT=$(create "$(llama_job llama-tied 2 2 ',"tie_embeddings":true')")
import "$WORK/limp" --job "$LT" --model "$WORK/llama-tied/model.safetensors"
export_model "$WORK/ltx" --job "$LT"
check "a tied Llama (no lm_head.weight) imports into two stages and exports tied" \
    "$IMPORT_RC $($LLAMA same "$WORK/llama-tied" "$WORK/ltx") $(grep -c '"tie_word_embeddings": true' "$WORK/ltx/config.json")" \
    "0 same 38 1"
LB=$(create "$(llama_job llama-other 2 2 ',"rope_theta":500000')")
import "$WORK/limp" --job "$LB" --model "$WORK/llama/model.safetensors.index.json"
check "a config.json of another Llama (rope_theta): exit 1, both named, nothing uploaded" \
    "$IMPORT_RC $(grep -c 'theta=10000.*theta=500000.*nothing was uploaded' "$WORK/limp.err") $(steps_of "$LB")" "1 1 []"
import "$WORK/limp" --job "$LB" --model "$WORK/tiny.bin"
check "GPT-2 weights into a Llama job: exit 1, nothing uploaded" "$IMPORT_RC $(steps_of "$LB")" "1 []"

# ---- the README's example as written, on a file of GPT-2 124M's sizes
# (weights a repeated pattern): created, imported, not trained
# (the documents' pattern-weight examples run from a checkout: its tests/)
mkdir -p "$README_DIR"
ln -s "$TOP/tests" "$README_DIR/tests"
readme_example finetune-files
check "docs/models.md's GPT-2 pattern file example runs as written: gpt2_124M.bin of GPT-2 124M's sizes" \
    "$EXAMPLE_RC $(cat "$README_DIR/finetune-files.err")$(stat -c %s "$README_DIR/gpt2_124M.bin")" "0 497904640"
readme_example finetune ADMIN="$ADMIN"
check "the README's fine-tune example runs as written" \
    "$EXAMPLE_RC $(tail -n 1 "$README_DIR/finetune.out" | grep -c 'starts from gpt2_124M.bin')" "0 1"
R=$(tail -n 1 "$README_DIR/finetune.out" | awk '{ print $2 }')
check "its job holds GPT-2 124M's weights as two stage files, complete" \
    "$(fetch "$S/v1/jobs/$R/checkpoints" "$ADMIN" | jq -c '.checkpoints[] | [.step, .complete, [.stages[] | [.layer_start, .layer_end]]]')" \
    '[0,true,[[0,6],[6,12]]]'

# ---- the README's Llama example as written, on files of SmolLM2-135M's
# shape (a repeated pattern, bf16): created, imported, not trained
readme_example finetune-llama-files
check "docs/models.md's Llama pattern files example runs as written: SmolLM2-135M/ holds config.json and model.safetensors" \
    "$EXAMPLE_RC $(cat "$README_DIR/finetune-llama-files.err")$(ls "$README_DIR/SmolLM2-135M" | xargs)" "0 config.json model.safetensors"
readme_example finetune-llama ADMIN="$ADMIN"
check "the README's Llama fine-tune example runs as written" \
    "$EXAMPLE_RC $(tail -n 1 "$README_DIR/finetune-llama.out" | grep -c 'starts from SmolLM2-135M/model.safetensors')" "0 1"
R=$(tail -n 1 "$README_DIR/finetune-llama.out" | awk '{ print $2 }')
check "its job holds SmolLM2-135M's shape as two stage files, complete" \
    "$(fetch "$S/v1/jobs/$R/checkpoints" "$ADMIN" | jq -c '.checkpoints[] | [.step, .complete, [.stages[] | [.layer_start, .layer_end]]]')" \
    '[0,true,[[0,15],[15,30]]]'

check_no_secrets s
[ "$FAILS" -eq 0 ]
