#!/usr/bin/env bash
# test_dataset.sh - a job on a dataset of shards made by `shoal-agent
# tokenize`, proven the same at every site: the job records the manifest's
# SHA-256 (from the first agent, or given with the job) and an agent whose
# copy differs fails the job at once, naming itself, the dataset and both
# digests; a shard changed behind its manifest is found when it is read.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)

node "$TOP/tests/tokenize/oracle.mjs" files "$WORK/tok" 2> "$WORK/err" || { fail "tokenizer files" "$(cat "$WORK/err")"; exit 1; }
TOKENIZER=$WORK/tok/gpt2_tokenizer.bin
python3 "$TOP/tests/tokenize/corpus.py" "$WORK/corpus" 0.3
# dataset DIR TEXT: DIR of GPT-2 shards (several) from TEXT, with a validation split
dataset() {
    "$SHOAL_AGENT" tokenize --tokenizer "$TOKENIZER" --out "$1" --shard-tokens 8192 --val-fraction 0.2 \
        "$2" > /dev/null 2> "$WORK/tokenize.err"
}
# documents of the fortunes, one a line
python3 -c '
import json, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
with open(sys.argv[2], "w") as f:
    for doc in text.split("\n%\n"):
        if doc.strip():
            f.write(json.dumps({"text": doc}) + "\n")
' "$WORK/corpus/fortunes.txt" "$WORK/docs.jsonl"
dataset "$WORK/data" "$WORK/docs.jsonl"
check "tokenize writes a dataset of several shards" "$? $(jq '[.shards[] | select(.split == "train")] | length > 2' "$WORK/data/dataset.json")" "0 true"
MANIFEST_SHA=$(sha256sum "$WORK/data/dataset.json" | cut -d' ' -f1)

start_server_s || exit 1
for n in a b; do start_agent "$n" s; done
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest")" = 2 ]; }
wait_for 120 links_up || { fail "agents measure their links"; exit 1; }

# job NAME [EXTRA]: GPT-2's vocabulary, 2 stages on the two agents, the
# dataset's train shards for data and its val shards for validation
job() {
    printf '{"name":"%s","model":{"vocab_size":50257,"context_length":32,"d_model":32,"heads":2,"layers":2},' "$1"
    printf '"parallelism":{"stages":2,"replicas":1,"micro_batches":2,"micro_batch_size":2},'
    printf '"training":{"steps":6,"learning_rate":0.001},"checkpoint_interval":0,'
    printf '"data":{"path":"%s","format":"llmc"%s},' "$WORK/data" "${2:-}"
    printf '"validation":{"path":"%s","format":"llmc","sequences":4,"eval_interval":3}}' "$WORK/data"
}
run_job "a job on the shards' directory (train and val shards by its manifest)" "$(job shards)"
check "the job records the manifest's SHA-256 for its data and validation, from the agents" \
    "$(fetch "$S/v1/jobs/$J" "$ADMIN" | jq -r '[.dataset.data_sha256, .dataset.validation_sha256] | join(" ")')" \
    "$MANIFEST_SHA $MANIFEST_SHA"
check "it evaluated on the val shards" "$(fetch "$S/v1/jobs/$J" "$ADMIN" | jq '[.progress.val_losses[]?] | length > 0')" true

run_job "a job naming the manifest's SHA-256 (data.sha256)" "$(job named ",\"sha256\":\"$MANIFEST_SHA\"")"

# the README's walkthrough as written: GPT-2's tokenizer.json to llm.c's
# tokenizer file, then a text file to shards, a job, a sample
mkdir -p "$README_DIR"
cp "$WORK/tok/gpt2.json" "$README_DIR/tokenizer.json"
readme_example llmc-tokenizer
check "the README's tokenizer example runs as written: gpt2_tokenizer.bin from tokenizer.json, llm.c's bytes" \
    "$EXAMPLE_RC $(cat "$README_DIR/llmc-tokenizer.err")$(cmp -s "$TOKENIZER" "$README_DIR/gpt2_tokenizer.bin" && echo same)" \
    "0 same"
head -c 200000 "$WORK/corpus/fortunes.txt" > "$README_DIR/book.txt"
readme_example from-text
check "the README's text-to-model walkthrough runs as written: the job succeeds on its proven shards" \
    "$EXAMPLE_RC $(grep -c '^\["succeeded",true\]$' "$README_DIR/from-text.out") $(grep -A1 '^\["succeeded",true\]$' "$README_DIR/from-text.out" | tail -n 1 | head -c 4)" \
    "0 1 The "

# a digest that is not the copy's: failed at once, both digests named
OTHER=$(printf '%064d' 7)
req POST "$S/v1/jobs" "$ADMIN" "$(job wrong ",\"sha256\":\"$OTHER\"")"
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
wait_for 120 finished "$J"
REASON=$(fetch "$S/v1/jobs/$J" "$ADMIN" | jq -r .failure_reason)
check "a job whose data.sha256 is not the copy's fails, naming the node, the dataset and both digests" \
    "$(job_state "$S" "$ADMIN" "$J") $(printf '%s' "$REASON" | grep -c "node [0-9]*'s copy of data '$WORK/data' is not job $J's: its manifest's SHA-256 is $MANIFEST_SHA, the job's $OTHER")" \
    "failed 1"

# two sites, two copies at the same path: agent c sees another dataset
# there (a mount namespace); every member says which copy it opened, and
# when they differ the job fails naming each node's copy, blaming none
# (one member cannot make the others look wrong)
python3 -c '
import json
for i in range(100):
    print(json.dumps({"text": "not the same corpus, document %d. " % i * 20}))' > "$WORK/other.jsonl"
dataset "$WORK/data-other" "$WORK/other.jsonl"
stop_agent b
printf '#!/bin/sh\nmount --bind "%s" "%s" && exec "$@"\n' "$WORK/data-other" "$WORK/data" > "$WORK/wrap.sh"
chmod +x "$WORK/wrap.sh"
if unshare -m --propagation private "$WORK/wrap.sh" cmp -s "$WORK/data-other/dataset.json" "$WORK/data/dataset.json" 2>/dev/null; then
    AGENT_PREFIX="unshare -m --propagation private $WORK/wrap.sh" start_agent c s
    links_c() { [ "$(sql s "SELECT count(*) FROM links_latest l JOIN nodes n ON n.id IN (l.from_node, l.to_node) WHERE n.name = 'c'")" -ge 2 ]; }
    wait_for 120 links_c
    req POST "$S/v1/nodes/$(sql s "SELECT id FROM nodes WHERE name = 'b'")/drain" "$ADMIN"   # drained: not planned
    req POST "$S/v1/jobs" "$ADMIN" "$(job sites)"
    J=$(printf '%s' "$BODY" | jq -r .id)
    req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
    wait_for 120 finished "$J"
    REASON=$(fetch "$S/v1/jobs/$J" "$ADMIN" | jq -r .failure_reason)
    OTHER_SHA=$(sha256sum "$WORK/data-other/dataset.json" | cut -d' ' -f1)
    RECORDED=$(fetch "$S/v1/jobs/$J" "$ADMIN" | jq -r .dataset.data_sha256)
    A_ID=$(sql s "SELECT id FROM nodes WHERE name = 'a'"); C_ID=$(sql s "SELECT id FROM nodes WHERE name = 'c'")
    check "two copies that differ: the job fails, naming each node's copy and blaming none; nothing recorded" \
        "$(job_state "$S" "$ADMIN" "$J") $(printf '%s' "$REASON" | grep -c "no node is blamed") $(printf '%s' "$REASON" | grep -c "manifest $MANIFEST_SHA at node $A_ID") $(printf '%s' "$REASON" | grep -c "manifest $OTHER_SHA at node $C_ID") $RECORDED" \
        "failed 1 1 1 null"
else
    ok "two copies at one path # SKIP no mount namespaces here (unshare -m)"
fi

# ---- what a job may make an agent read: beneath its owner's --data-roots
# only.  Agent d's owner lends $WORK/site, 96 MiB and one thread; the key
# beside it is what a job must never reach.  The others are drained: d alone is planned.
stop_all_agents
for n in a c; do
    id=$(sql s "SELECT id FROM nodes WHERE name = '$n'"); [ -n "$id" ] && req POST "$S/v1/nodes/$id/drain" "$ADMIN"
done
mkdir -p "$WORK/site" "$WORK/keys"
head -c 20000 "$WORK/corpus/fortunes.txt" > "$WORK/site/ok.txt"
for _ in $(seq 1 400); do echo "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"; done > "$WORK/keys/id.pem"
ln -s "$WORK/keys/id.pem" "$WORK/site/leak.txt"
start_agent d s --data-roots "$WORK/site" --max-memory 96M --threads 1
d_up() { [ "$(sql s "SELECT count(*) FROM nodes WHERE name = 'd' AND policy IS NOT NULL")" = 1 ]; }
wait_for 60 d_up || fail "agent d registers"
D_ID=$(sql s "SELECT id FROM nodes WHERE name = 'd'")
req GET "$S/v1/nodes/$D_ID" "$ADMIN"
expect "the node shows its owner's policy, and offers the planner its memory and cores within it" 200 \
    '[.policy.data_roots, .policy.max_memory_bytes, .policy.threads, .hardware.ram_bytes, .hardware.cpu_cores] | tostring' \
    "[[\"$WORK/site\"],100663296,1,100663296,1]"
# text_job NAME PATH [MODEL-EDIT]: a 1x1 job on PATH as bytes
text_job() {
    printf '{"name":"%s","model":{"vocab_size":256,"context_length":32,"d_model":32,"heads":2,"layers":2},' "$1"
    printf '"parallelism":{"stages":1,"replicas":1,"micro_batches":1,"micro_batch_size":2},'
    printf '"training":{"steps":3,"learning_rate":0.001},"checkpoint_interval":0,"data":{"path":"%s","format":"text"}}' "$2"
}
req POST "$S/v1/jobs" "$ADMIN" "$(text_job outside "$WORK/keys/id.pem")"; J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
expect "a job on a file outside every node's data roots is not planned, the node and its roots named" 409 \
    '.error.message | test("node '"$D_ID"' [(]d[)] beneath '"$WORK"'/site")' true
req POST "$S/v1/jobs" "$ADMIN" "$(text_job big "$WORK/site/ok.txt" | jq -c '.model.d_model = 256 | .model.layers = 8')"
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
expect "a model whose state exceeds the owner's --max-memory is not planned there" 422 .error.code infeasible
req DELETE "$S/v1/jobs/$J" "$ADMIN"
run_job "a job beneath the roots trains" "$(text_job inside "$WORK/site/ok.txt")"
req POST "$S/v1/jobs" "$ADMIN" "$(text_job leak "$WORK/site/leak.txt")"; J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
wait_for 60 finished "$J"
req GET "$S/v1/jobs/$J" "$ADMIN"
check "a path beneath a root whose link leads out: the job fails at once, naming the path and the flag" \
    "$(printf '%s' "$BODY" | jq -c '[.state, .recoveries, (.failure_reason | test("leak.txt. leads out of its data root.*--data-roots")), .latest_step]')" \
    '["failed",0,true,null]'

check_no_secrets s
stop_all_agents
[ "$FAILS" -eq 0 ]
