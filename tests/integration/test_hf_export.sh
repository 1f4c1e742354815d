#!/usr/bin/env bash
# test_hf_export.sh - an export round-trips the Hugging Face folder it was
# imported from: a SmolLM2-shaped Llama folder (config.json with
# max_position_embeddings 8192, bos/eos 128000/128001, torch_dtype
# bfloat16 and fields shoal does not read; tokenizer files) imported into
# a job of context 64 and exported (step 0, no training needed: import and
# export talk to the server alone): config.json field by field is the
# source's but what the export changed (torch_dtype), generation_config.json
# carries the source's token ids, the tokenizer files are the source's byte
# for byte, the tensors bit for bit, and import-export-import-export gives
# the same files; --dtype bf16 writes BF16 rounded to nearest even and
# torch_dtype "bfloat16"; bad options and files are refused, nothing
# written or uploaded.  Then the same round trip, on the same server, for
# a folder of each other family of the llama kind: Qwen2.5-0.5B's shape
# (q, k, v biases; bos and eos 151643, max_position_embeddings 32768, an
# unused sliding window), Qwen3-0.6B's (q_norm, k_norm; head_dim 16 where
# C / heads is 8) and OLMo-2-0425-1B's (q_norm, k_norm over the whole
# width, norms after attention and MLP; untied; no bos, a pad id;
# torch_dtype float32, so an F32 export changes no field and a bf16 one
# torch_dtype), the Qwen ones with their two tokenizer files, in weights
# whose values hit BF16's ties.  (Training carries the kept files through
# every checkpoint: test_import.sh checks a trained export's config.json.)
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
HF="python3 $TOP/tests/integration/hf_folder.py"
LLAMA="python3 $TOP/tests/integration/llama_files.py"

start_server_s || exit 1
$HF write "$WORK/smol"

# job NAME [MODEL]: a job's body; MODEL the members of its model besides
# the sizes every folder here has (SMOL without it)
SMOL='"architecture":"llama","kv_heads":2,"rope_theta":100000,"tie_embeddings":true'
job() {
    printf '{"name":"%s","model":{"vocab_size":256,"context_length":64,"d_model":32,"heads":4,"ffn_dim":48,' "$1"
    printf '"layers":2,%s},' "${2:-$SMOL}"
    printf '"parallelism":{"stages":2,"replicas":1,"micro_batches":2,"micro_batch_size":2},'
    printf '"training":{"steps":2,"learning_rate":0.001},"data":{"path":"/data/x.bin","format":"text"}}'
}
create() { req POST "$S/v1/jobs" "$ADMIN" "$(job "$@")"; printf '%s' "$BODY" | jq -r .id; }
import() {
    local out=$1; shift
    "$SHOAL_AGENT" import --server "$S" --admin-token-file "$WORK/s/admin.token" --tmp-dir "$WORK" "$@" \
        > "$out" 2> "$out.err"
    IMPORT_RC=$?
}
steps_of() { fetch "$S/v1/jobs/$1/checkpoints" "$ADMIN" | jq -c '[.checkpoints[] | select(.complete) | .step]'; }
files() { ls "$1" | grep -v '\.out$\|\.err$' | xargs; }
# files_sum DIR: one SHA-256 of the files in DIR, their names and bytes
files_sum() { (cd "$1" && sha256sum $(files .) | sha256sum); }

J=$(create smol)
import "$WORK/imp" --job "$J" --model "$WORK/smol/model.safetensors"
check "import: exit 0; it says the file's context, not the job's" \
    "$IMPORT_RC $(grep -c 'context 64 (the file.s 8192)' "$WORK/imp.err")" "0 1"
check "import says the head is tied to the embedding, and what export does with it" \
    "$(grep -c 'the head is tied to the embedding: lm_head is wte (256 x 32).*no lm_head.weight' "$WORK/imp.err")" 1
check "import keeps config.json and the three tokenizer files for export" \
    "$(grep -c 'kept for export: config.json, 3 tokenizer file(s)' "$WORK/imp.err")" 1

export_model "$WORK/e1" --job "$J"
check "export: exit 0; config.json, generation_config.json, the weights and the tokenizer files" \
    "$EXPORT_RC $(files "$WORK/e1")" \
    "0 config.json generation_config.json model.safetensors special_tokens_map.json tokenizer.json tokenizer_config.json"
check "config.json field by field is the source's but torch_dtype (F32 weights: float32)" \
    "$($HF config "$WORK/smol/config.json" "$WORK/e1/config.json") $(jq -c '[.max_position_embeddings, .bos_token_id, .eos_token_id, .torch_dtype, .rope_interleaved]' "$WORK/e1/config.json")" \
    'changed torch_dtype [8192,128000,128001,"float32",false]'
check "generation_config.json as GenerationConfig.from_model_config derives it" \
    "$(jq -c . "$WORK/e1/generation_config.json")" \
    '{"_from_model_config":true,"bos_token_id":128000,"eos_token_id":128001,"transformers_version":"4.40.1"}'
# same_bytes SRC EXPORT [FILES]: the tokenizer files FILES (the three) the same in both
same_bytes() {
    local f
    for f in ${3:-tokenizer.json tokenizer_config.json special_tokens_map.json}; do
        cmp -s "$1/$f" "$2/$f" || echo "$f differs"
    done
}
check "the tokenizer files are the source's byte for byte" "$(same_bytes "$WORK/smol" "$WORK/e1")" ""
check "every tensor is the source's bit for bit (F32)" "$($LLAMA same "$WORK/smol" "$WORK/e1")" "same 20"

K=$(create smol-again)
import "$WORK/imp2" --job "$K" --model "$WORK/e1/model.safetensors"
export_model "$WORK/e2" --job "$K"
check "import-export-import-export: the same model.safetensors, config.json and files" \
    "$IMPORT_RC $EXPORT_RC $(files_sum "$WORK/e2")" \
    "0 0 $(files_sum "$WORK/e1")"

export_model "$WORK/e3" --job "$J" --dtype bf16
check "--dtype bf16: every tensor BF16, F32's values rounded to nearest even" \
    "$EXPORT_RC $($HF bf16 "$WORK/e1" "$WORK/e3")" "0 bf16 20"
check "--dtype bf16: config.json is the source's field for field (torch_dtype bfloat16)" \
    "$($HF config "$WORK/smol/config.json" "$WORK/e3/config.json")" "same"

mkdir -p "$WORK/tok"
echo '{"model":{}}' > "$WORK/tok/tokenizer.json"
export_model "$WORK/e4" --job "$J" --tokenizer "$WORK/tok"
check "export --tokenizer DIR writes DIR's tokenizer files instead of the kept ones" \
    "$EXPORT_RC $(cmp -s "$WORK/tok/tokenizer.json" "$WORK/e4/tokenizer.json" && echo same) $(ls "$WORK/e4" | grep -c special_tokens)" "0 same 0"

# refused: nothing written, nothing uploaded
export_model "$WORK/e5" --job "$J" --dtype f16
check "export --dtype f16: exit 2, the reason, nothing written" \
    "$EXPORT_RC $(grep -c 'dtype must be f32 or bf16' "$WORK/e5.err") $(ls "$WORK/e5" 2>/dev/null | wc -l)" "2 1 0"
export_model "$WORK/e6" --job "$J" --tokenizer "$WORK/nowhere"
check "export --tokenizer of a folder without tokenizer.json: exit 2, found before anything is written" \
    "$EXPORT_RC $(grep -c 'cannot read .*nowhere/tokenizer.json' "$WORK/e6.err") $(ls "$WORK/e6" 2>/dev/null | wc -l)" "2 1 0"
L=$(create smol-bad)
import "$WORK/imp3" --job "$L" --model "$WORK/smol/model.safetensors" --tokenizer "$WORK/nowhere"
check "import --tokenizer of a folder without tokenizer.json: exit 2, nothing uploaded" \
    "$IMPORT_RC $(grep -c 'has no tokenizer.json' "$WORK/imp3.err") $(steps_of "$L")" "2 1 []"
echo 'not json' > "$WORK/tok/tokenizer.json"
import "$WORK/imp3" --job "$L" --model "$WORK/smol/model.safetensors" --tokenizer "$WORK/tok"
check "import of a tokenizer.json that is not JSON: exit 1, it is named, nothing uploaded" \
    "$IMPORT_RC $(grep -c "$WORK/tok/tokenizer.json: '\\[' or '{' expected" "$WORK/imp3.err") $(steps_of "$L")" "1 1 []"

# ---- the other families of the llama kind, the same round trip on the
# same server: a folder of each published model's shape (hf_folder.py's
# SHAPE), its import into a job of its model and its exports.
# family_round_trip SHAPE MODEL TOKENIZER_FILES HEAD F32_CHANGED BF16_CHANGED GENERATION TENSORS:
# MODEL the job's model members (job's second argument), TOKENIZER_FILES the folder's
# (the ones import keeps), HEAD "tied to the embedding" or "untied", F32_CHANGED and
# BF16_CHANGED what hf_folder.py config says of an F32 and of a bf16
# export's config.json (the fields an export changes: torch_dtype alone,
# where the source's is not the export's dtype), GENERATION the
# generation_config.json transformers derives from the source's config.json,
# TENSORS the folder's tensor count.
family_round_trip() {
    local shape=$1 model=$2 tok=$3 head=$4 f32=$5 bf16=$6 gen=$7 n=$8 d="$WORK/$1" j k ctx r
    $HF write "$d" "$shape"
    ctx=$(jq .max_position_embeddings "$d/config.json")
    j=$(create "$shape" "$model")
    import "$d.imp" --job "$j" --model "$d/model.safetensors"
    export_model "$d.e1" --job "$j"
    check "$shape: import and export exit 0; import says the file's context and head, keeps config.json and $tok; export writes them back" \
        "$IMPORT_RC $EXPORT_RC $(grep -c "context 64 (the file.s $ctx), head $head" "$d.imp.err") $(grep -c "kept for export: config.json, $(echo "$tok" | wc -w) tokenizer file(s)" "$d.imp.err") $(files "$d.e1")" \
        "0 0 1 1 $(echo "config.json generation_config.json model.safetensors $tok" | tr ' ' '\n' | sort | xargs)"
    check "$shape: generation_config.json as GenerationConfig.from_model_config derives it" \
        "$(jq -c . "$d.e1/generation_config.json")" "$gen"
    check "$shape: the tokenizer files are the source's byte for byte" "$(same_bytes "$d" "$d.e1" "$tok")" ""
    k=$(create "$shape-again" "$model")
    import "$d.imp2" --job "$k" --model "$d.e1/model.safetensors"
    export_model "$d.e2" --job "$k"
    check "$shape: import-export-import-export: the same model.safetensors, config.json and files" \
        "$IMPORT_RC $EXPORT_RC $(files_sum "$d.e2")" \
        "0 0 $(files_sum "$d.e1")"
    export_model "$d.e3" --job "$j" --dtype bf16
    mapfile -t r < <($HF exports "$d" "$d.e1" "$d.e3")
    check "$shape: config.json field by field is the source's but the fields the export changes" "${r[0]-}" "$f32"
    check "$shape: every tensor is the source's bit for bit, under transformers' names (F32)" "${r[1]-}" "same $n"
    check "$shape: --dtype bf16: every tensor BF16, F32's values rounded to nearest even (ties included)" \
        "$EXPORT_RC ${r[2]-}" "0 bf16 $n"
    check "$shape: --dtype bf16: config.json field by field is the source's but the fields the export changes" \
        "${r[3]-}" "$bf16"
}
family_round_trip qwen2.5 '"architecture":"qwen2","kv_heads":2,"rope_theta":1000000,"norm_eps":1e-6,"tie_embeddings":true' \
    "tokenizer.json tokenizer_config.json" "tied to the embedding" "changed torch_dtype" same \
    '{"_from_model_config":true,"bos_token_id":151643,"eos_token_id":151643,"transformers_version":"4.40.1"}' 26
family_round_trip qwen3 '"architecture":"qwen3","kv_heads":2,"head_dim":16,"rope_theta":1000000,"norm_eps":1e-6,"tie_embeddings":true' \
    "tokenizer.json tokenizer_config.json" "tied to the embedding" "changed torch_dtype" same \
    '{"_from_model_config":true,"bos_token_id":151643,"eos_token_id":151645,"transformers_version":"4.51.0"}' 24
family_round_trip olmo2 '"architecture":"olmo2","kv_heads":4,"rope_theta":500000,"norm_eps":1e-6,"tie_embeddings":false' \
    "tokenizer.json tokenizer_config.json special_tokens_map.json" untied same "changed torch_dtype" \
    '{"_from_model_config":true,"eos_token_id":100257,"pad_token_id":100277,"transformers_version":"4.48.3"}' 25

# the documents' example, as written
mkdir -p "$README_DIR"
cp -r "$WORK/smol" "$README_DIR/SmolLM2-135M"
readme_example export-hf J="$J"
check "docs/agents.md's Hugging Face export example runs as written" \
    "$EXAMPLE_RC $(files "$README_DIR/smol-export")" \
    "0 config.json generation_config.json model.safetensors special_tokens_map.json tokenizer.json tokenizer_config.json"

stop_server s
[ "$FAILS" -eq 0 ]
