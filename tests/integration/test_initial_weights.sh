#!/usr/bin/env bash
# test_initial_weights.sh - a job's initial weights: its step-0 checkpoint,
# uploaded by the admin (as shoal-agent import does) before its first
# schedule.  Every upload's stage file header is checked against the job;
# a job with some but not all initial weights is not scheduled; one with
# all of them starts from them (the assignment's resume is the job's own
# step 0).  Stage files come from stage_file.py (the real layout and
# checksum, models/checkpoint.c).
set -u
. "$(dirname "$0")/lib.sh"

start_server_a --heartbeat-timeout 3600 || exit 1
MK="python3 $(dirname "$0")/stage_file.py"

two_regions 1 1 1 1 1   # two nodes, every link measured

# V=256 T=16 C=16 NH=2 L=2, two stages of one layer each
JOB='{"name":"imported","model":{"vocab_size":256,"context_length":16,"d_model":16,"heads":2,"layers":2},"parallelism":{"stages":2,"replicas":1,"micro_batches":2,"micro_batch_size":2},"training":{"steps":10,"learning_rate":0.0003},"data":{"path":"/data/x.bin"}}'
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; K=$(printf '%s' "$BODY" | jq -r .id)

#            out              V   T  C  NH L ls le first last step
$MK "$WORK/s0.bin"           256 16 16 2  2 0  1  1     0    0
$MK "$WORK/s1.bin"           256 16 16 2  2 1  2  0     1    0
$MK "$WORK/big.bin"          256 32 16 2  2 0  1  1     0    0
$MK "$WORK/nofirst.bin"      256 16 16 2  2 0  1  0     0    0
$MK "$WORK/stepped.bin"      256 16 16 2  2 0  1  1     0    5
head -c 91660 /dev/urandom > "$WORK/random.bin"
sha() { sha256sum "$1" | cut -d' ' -f1; }

# put NAME STATUS JOB STEP STAGE FILE [TOKEN] [QUERY]: one upload, as the CLI sends it.
put() {
    local q=${8-}
    STATUS=$(curl -s -o "$WORK/body" -w '%{http_code}' -X PUT -H "Authorization: Bearer ${7:-$ADMIN}" \
             -H "X-Shoal-SHA256: $(sha "$6")" -H 'Content-Type: application/octet-stream' \
             --data-binary "@$6" "$S/v1/jobs/$3/checkpoints/$4/stages/$5${q:+?$q}")
    BODY=$(cat "$WORK/body")
    resp_log PUT "$S/v1/jobs/$3/checkpoints/$4/stages/$5${q:+?$q}" "$STATUS" application/json "$BODY"
}
files() { find "$WORK/a/checkpoints" -type f 2>/dev/null | wc -l; }
rows() { sql a "SELECT count(*) FROM checkpoints"; }

# ---- refused files: nothing stored, no file left
put x 0 "$J" 0 0 "$WORK/big.bin"
expect "a file of another model is 422" 422 .error.message \
    "the file holds a model gpt2 V=256 T=32 C=16 NH=2 L=2; job $J trains gpt2 V=256 T=16 C=16 NH=2 L=2; nothing was kept"
put x 0 "$J" 0 0 "$WORK/random.bin"
expect "a file that is no stage file is 422" 422 '.error.message | test("not a stage file")' true
put x 0 "$J" 0 0 "$WORK/nofirst.bin"
expect "stage 0 without the embeddings (first=0) is 422" 422 '.error.message | test("first=0 last=0.*first=1 last=0")' true
put x 0 "$J" 0 1 "$WORK/s0.bin"
expect "stage 0's file uploaded as stage 1 is 422" 422 '.error.message | test("first=1 last=0 .embeddings, head.; stage 1 of job [0-9]+.s 2 stages is first=0 last=1")' true
put x 0 "$J" 0 0 "$WORK/s0.bin" "$ADMIN" "layer_start=0&layer_end=2"
expect "layers other than the query's are 422" 422 '.error.message | test("the file holds layers 0-0; the query says layers 0-1 .layer_start 0, layer_end 2.")' true
put x 0 "$J" 0 0 "$WORK/stepped.bin"
expect "initial weights that took AdamW steps are 422" 422 '.error.message | test("5 AdamW steps")' true
check "no row was written" "$(rows)" 0
check "no file was left in the checkpoint store" "$(files)" 0
req GET "$S/v1/jobs/$J/checkpoints" "$ADMIN"
expect "the job lists no checkpoint" 200 '.checkpoints | length' 0

# ---- who may upload what
put x 0 "$J" 5 0 "$WORK/s0.bin"
expect "the admin may not upload step 5" 403 .error.code forbidden
put x 0 "$J" 0 2 "$WORK/s1.bin"
expect "a stage past the job's is 422" 422 .error.field stage

# ---- one stage only: scheduling is refused, the job stays pending
put x 0 "$J" 0 0 "$WORK/s0.bin" "$ADMIN" "layer_start=0&layer_end=1"
expect "the admin uploads stage 0's initial weights" 201 '[.step, .stage, .complete] | tostring' '[0,0,false]'
check "with no node" "$(sql a "SELECT coalesce(node_id::text, 'null') FROM checkpoints WHERE job_id = $J")" null
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":100}'
expect "scheduling with 1 of 2 stages' initial weights is 409" 409 .error.message \
    "job $J has initial weights for 1 of 2 stages; upload the rest (shoal-agent import) before scheduling it"
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "the job is still pending" 200 .state pending

# ---- both stages: complete, then scheduled from them
put x 0 "$J" 0 1 "$WORK/s1.bin"
expect "the admin uploads stage 1 (layers from the file)" 201 '[.step, .stage, .complete] | tostring' '[0,1,true]'
req GET "$S/v1/jobs/$J/checkpoints" "$ADMIN"
expect "step 0 is listed complete, with the files' layers" 200 \
    '[.checkpoints[0].step, .checkpoints[0].complete, (.checkpoints[0].stages | map([.layer_start, .layer_end]))] | tostring' \
    '[0,true,[[0,1],[1,2]]]'
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":100}'
expect "a job with all its initial weights is scheduled from step 0" 201 .resume_step 0
for i in 0 1; do
    req GET "$S/v1/agent/assignment?wait=0" "${TOK[$i]}"
    expect "node $i's assignment resumes from the job's own step 0" 200 \
        '.assignment.resume | [.job_id, .step, .stages, .replicas] | tostring' \
        "[$J,0,[{\"stage\":0,\"layer_start\":0,\"layer_end\":1},{\"stage\":1,\"layer_start\":1,\"layer_end\":2}],1]"
    st=$(printf '%s' "$BODY" | jq -r .assignment.stage)
    put x 0 "$J" 0 "$st" "$WORK/s$st.bin" "${TOK[$i]}"
    expect "node $i, planned for stage $st, may not upload step 0" 422 .error.field step
done
put x 0 "$J" 0 0 "$WORK/s0.bin"
expect "an upload after the first schedule is 409" 409 .error.message \
    "job $J has been scheduled; initial weights can be given only before its first schedule"

# ---- a job that fails before its first checkpoint recovers to step 0
sql a "UPDATE jobs SET started_at = now(), state = 'recovering' WHERE id = $J" >/dev/null
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":100}'
expect "re-planned after a start with no newer checkpoint, it resumes at step 0" 201 .resume_step 0

# ---- a job that resumes from another's checkpoint takes no initial weights
R=$(printf '%s' "$JOB" | jq -c --argjson j "$J" '. + {resume_from: {job_id: $j, step: 0}}')
req POST "$S/v1/jobs" "$ADMIN" "$R"; RJ=$(printf '%s' "$BODY" | jq -r .id)
put x 0 "$RJ" 0 0 "$WORK/s0.bin"
expect "a job with resume_from is 409" 409 '.error.message | test("resume_from")' true

# ---- damaged initial weights are not started from
put x 0 "$K" 0 0 "$WORK/s0.bin"
put x 0 "$K" 0 1 "$WORK/s1.bin"
printf 'x' | dd of="$WORK/a/checkpoints/job$K/step0/stage1.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
req POST "$S/v1/jobs/$K/schedule" "$ADMIN" '{"budget_ms":100}'
expect "a job whose initial weights are damaged is 409" 409 '.error.message | test("cannot be used")' true

stop_server a
[ "$FAILS" -eq 0 ]
