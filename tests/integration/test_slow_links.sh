#!/usr/bin/env bash
# test_slow_links.sh - real agents on loopback, the job options for slow
# links: what crosses stage links (f32, bf16, int8) counted to the byte;
# validation loss on fixed sequences, the same whatever the layout; DiLoCo
# (one replica with outer lr 1 and no momentum trains as plain training,
# outer steps the only data-parallel traffic, a checkpoint file per
# replica, an operator's re-plan in the middle of an inner phase continues
# exactly as an uninterrupted run).
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"

start_server_s || exit 1

for n in a0 a1 a2 a3; do start_agent "$n" s; done
nodes_up() { [ "$(sql s "SELECT count(*) FROM nodes WHERE tflops > 0")" = 4 ]; }
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest")" = 12 ]; }
if wait_for 60 nodes_up && wait_for 120 links_up; then ok "four agents register and measure their links"
else fail "four agents register and measure their links" "$(tail -n 5 "$WORK"/agent-a0.log)"; exit 1; fi

# job NAME STAGES REPLICAS MICRO_BATCHES SCHEDULE STEPS CKPT COMMUNICATION [VALIDATION]: a job
# body; B=2, T=32, C=32.
job() {
    printf '{"name":"%s","model":{"vocab_size":256,"context_length":32,"d_model":32,"heads":2,"layers":4},' "$1"
    printf '"parallelism":{"stages":%d,"replicas":%d,"micro_batches":%d,"micro_batch_size":2,"schedule":"%s"},' "$2" "$3" "$4" "$5"
    printf '"training":{"steps":%d,"learning_rate":0.003,"warmup_steps":3,"weight_decay":0.1,"grad_clip":1.0,"seed":7},' "$6"
    printf '"data":{"path":"%s","format":"text"},"checkpoint_interval":%d,"communication":%s' "$CORPUS" "$7" "$8"
    printf ',"validation":%s}' "${9:-null}"
}
VAL='{"holdout":0.1,"sequences":8,"eval_interval":6}'

detail() { curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$1"; }
val_losses() { detail "$1" | jq -r '.progress.val_losses[] | "\(.[0]) \(.[1])"' | sort -k1,1; }
losses() { job_losses "$S" "$ADMIN" "$1" | sort -k1,1; }

# ---- stage links: the same 2x2 job in each wire type, with validation
# Bytes a 2x2 job's tasklets send in a step without validation: per replica
# one link, M=2 micro-batches each way, frame = 72-byte header + payload,
# plus the global norm down and back (two 8-byte frames).
declare -A PAYLOAD=([f32]=$((2 * 32 * 32 * 4)) [bf16]=$((2 * 32 * 32 * 2)) [int8]=$((2 * 32 * (32 + 4))))
declare -A JOBS
for link in f32 bf16 int8; do
    run_job "a 2x2 job with $link stage links" "$(job "link-$link" 2 2 2 1f1b 12 0 "{\"stage_link\":\"$link\"}" "$VAL")" || continue
    JOBS[$link]=$J
    want=$((2 * (2 * 2 * (72 + PAYLOAD[$link]) + 2 * (72 + 8))))
    check "$link: the tasklets count exactly the frames' bytes on stage links in a step ($want)" \
        "$(sql s "SELECT sum(stage_link_bytes), sum(sync_bytes) > 0 FROM job_steps WHERE job_id = $J AND step = 0")" "$want|t"
    check "$link: validation after steps 5 and 11 (every 6, and the last)" \
        "$(detail "$J" | jq -c '[.progress.val_losses[][0]]')" "[5,11]"
    check "$link: both replicas ran half the 4 validation micro-batches" \
        "$(sql s "SELECT string_agg(val_micro_batches::text, ',' ORDER BY replica) FROM job_steps WHERE job_id = $J AND step = 11 AND stage = 1")" "2,2"
done
if [ -n "${JOBS[f32]:-}" ] && [ -n "${JOBS[int8]:-}" ]; then
    ratio=$(detail "${JOBS[f32]}" | jq '.traffic.stage_link_bytes_per_step' | awk -v i="$(detail "${JOBS[int8]}" | jq '.traffic.stage_link_bytes_per_step')" '{ printf "%.2f", $1 / i }')
    check "int8 stage links send over 3x fewer bytes than f32 at C=32 (4C/(C+4) = 3.56 for payloads; headers)" \
        "$(awk -v r="$ratio" 'BEGIN { print (r > 3.2) ? "yes" : "no: " r }')" yes
    f=$(detail "${JOBS[f32]}" | jq .progress.val_loss)
    for link in bf16 int8; do
        v=$(detail "${JOBS[$link]}" | jq .progress.val_loss)
        check "$link: the final validation loss is within 3% of f32's ($v vs $f)" \
            "$(awk -v a="$v" -v b="$f" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; print (d < 0.03) ? "yes" : "no" }')" yes
    done
fi

# ---- validation: the same sequences on every layout (f32 links)
F32='{"stage_link":"f32"}'
run_job "a 1x1 job with validation" "$(job val-1x1 1 1 4 1f1b 12 0 "$F32" "$VAL")" && val_losses "$J" > "$WORK/v11"
run_job "a 4x1 job with validation" "$(job val-4x1 4 1 4 gpipe 12 0 "$F32" "$VAL")" && val_losses "$J" > "$WORK/v41"
[ -n "${JOBS[f32]:-}" ] && val_losses "${JOBS[f32]}" > "$WORK/v22"
same_losses "validation losses of 2x2 and 1x1 agree to 1e-5" "$WORK/v22" "$WORK/v11" 1e-5
same_losses "validation losses of 4x1 and 1x1 agree to 1e-5" "$WORK/v41" "$WORK/v11" 1e-5

# ---- DiLoCo with one replica, outer lr 1 and no momentum: plain training
run_job "a 1x1 job, every step" "$(job plain 1 1 4 1f1b 12 0 "$F32")" && losses "$J" > "$WORK/plain"
run_job "a 1x1 diloco job, H=4, outer lr 1, momentum 0" \
    "$(job dl-one 1 1 4 1f1b 12 0 '{"stage_link":"f32","sync":"diloco","inner_steps":4,"outer_learning_rate":1,"outer_momentum":0}')" &&
    losses "$J" > "$WORK/dl-one"
same_losses "its losses equal plain training's to fp32 rounding (1e-5)" "$WORK/dl-one" "$WORK/plain" 1e-5

# ---- DiLoCo 2x2: outer steps are the only data-parallel traffic
DL='{"sync":"diloco","inner_steps":4,"sync_dtype":"int8"}'
run_job "a 2x2 diloco job, H=4, int8 pseudo-gradients" \
    "$(job dl 2 2 2 1f1b 16 4 "$DL" '{"holdout":0.1,"sequences":8,"eval_interval":8}')"
DLJ=$J
check "data-parallel bytes only after steps 3, 7, 11 and 15" \
    "$(sql s "SELECT string_agg(DISTINCT step::text, ',' ORDER BY step::text) FROM job_steps WHERE job_id = $J AND sync_bytes > 0")" \
    "11,15,3,7"
check "every tasklet sends in each outer step" \
    "$(sql s "SELECT count(*) FROM job_steps WHERE job_id = $J AND sync_bytes > 0")" 16
# An outer step's bytes, to the byte: stage 0 holds n0 = V*C + T*C + 2 blocks
# of 12C^2+13C = 34624 floats, stage 1 n1 = 2 blocks + 2C + V*C = 33664.
# Each of the 2 ranks sends its half of the pseudo-gradient (reduce-scatter)
# and the half it finished (all-gather): two frames of 72 bytes plus
# ceil(n/2/256) int8 rows of 256 values and a 4-byte scale.
rows0=$(((34624 / 2 + 255) / 256)); rows1=$(((33664 / 2 + 255) / 256))
want=$((2 * 2 * (72 + rows0 * 260) + 2 * 2 * (72 + rows1 * 260)))
check "an outer step sends the int8 ring's bytes exactly ($want)" \
    "$(sql s "SELECT sum(sync_bytes) FROM job_steps WHERE job_id = $J AND step = 3")" "$want"
# Uploads are queued and retried (agent/control/report.c), so the last of them may
# land after the job's last step: the listing is read once it settles.  An
# upload that waited behind two newer ones of its tasklet is replaced before
# it is sent (a slow machine), leaving its checkpoint incomplete; then the
# newest three complete ones are kept instead.
ckpts() { curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J/checkpoints" |
          jq -c '[.checkpoints[] | "\(.step):\(.stages | length):\(.complete)"] | sort'; }
on_disk() { ls "$WORK/s/checkpoints/job$J" | sort | tr '\n' ' '; }
listed() { ckpts | jq -r '.[] | "step" + split(":")[0]' | sort | tr '\n' ' '; }
kept='["12:4:true","16:4:true","8:4:true"]'
replaced() { grep -h "replaced by path=/v1/jobs/$J/" "$WORK"/agent-*.log | wc -l; }
settled() { [ "$(ckpts)" = "$kept" ] && [ "$(on_disk)" = "step12 step16 step8 " ] || [ "$(replaced)" != 0 ]; }
wait_for 60 settled
if [ "$(replaced)" = 0 ]; then
    check "checkpoints 8, 12 and 16 hold a file per stage and replica (4 retired: the newest three are kept)" "$(ckpts)" "$kept"
    check "and step 4's files are gone from the server's disk" "$(on_disk)" "step12 step16 step8 "
else
    sleep 2
    echo "# $(replaced) upload(s) replaced in an agent's queue before they were sent: $(ckpts)"
    check "the newest three complete checkpoints are kept, 16 among them" \
        "$(ckpts | jq -c '[.[] | select(endswith(":4:true"))] | length, any(startswith("16:"))' | tr '\n' ' ')" "3 true "
    check "and the server's disk holds the files of those listed, no others" "$(on_disk)" "$(listed)"
fi
check "validation after the outer steps 7 and 15" "$(detail "$J" | jq -c '[.progress.val_losses[][0]]')" "[7,15]"
losses "$J" > "$WORK/dl"
fell=$(awk 'NR <= 2 { a += $2 } NR > 14 { b += $2 } END { print (b < a - 0.2) ? "yes" : "no: " a / 2 " -> " b / 2 }' "$WORK/dl")
check "the diloco job's loss falls" "$fell" yes

# ---- resume: an operator's re-plan in the middle of an inner phase
# restarts the phase from the last outer step and continues exactly.  A
# larger model (d_model 64, context 64) for steps slow enough to land in a
# phase of 16; f32 stage links, since the re-plan may split the layers
# otherwise (compressed links round at the boundary, wherever it is).
big() { job "$@" | sed 's/"context_length":32,"d_model":32,"heads":2/"context_length":64,"d_model":64,"heads":4/'; }
LONG='{"stage_link":"f32","sync":"diloco","inner_steps":16,"sync_dtype":"int8"}'
t0=$(date +%s.%N)
run_job "a 2x2 diloco job of 48 steps, H=16" "$(big dl-long 2 2 4 1f1b 48 16 "$LONG")" && losses "$J" > "$WORK/straight"
echo "# 48 steps took $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
req POST "$S/v1/jobs" "$ADMIN" "$(big dl-replan 2 2 4 1f1b 48 16 "$LONG")"
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
# (a window of 9 steps of the phase's 16: one of 6 was missed at 65 ms a
# step; its end leaves the re-plan 6 steps before the next outer step)
mid_phase() {
    local at
    at=$(sql s "SELECT max(step) FROM job_steps WHERE job_id = $J AND stage = 1")
    [ -n "$at" ] && [ "$at" -ge 18 ] && [ $(((at + 1) % 16)) -ge 2 ] && [ $(((at + 1) % 16)) -le 10 ]
}
# polled without pause (a psql call is some 20 ms): at 30 ms a step the
# window is about 0.3 s, which wait_for's half-second polls can miss twice
# and let the job finish
for i in $(seq 1 4000); do mid_phase && break; [ $((i % 25)) = 0 ] && finished "$J" && break; done
before=$(sql s "SELECT max(step) FROM job_steps WHERE job_id = $J AND stage = 1")
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
expect "re-scheduling a running job without \"replan\": true is 409" 409 .error.code replan_required
check "and the answer says what a re-plan would train again" \
    "$(printf '%s' "$BODY" | jq -r '.error.message | test("is running .* restarts it from step [0-9]+ and trains [0-9]+ steps again")')" true
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200,"replan":true}'
expect "an operator re-plans the running job after step $before" 201
check "the plan says the steps it trains again" \
    "$(printf '%s' "$BODY" | jq '.steps_retrained == (.resume_step as $r | '"$before"' + 1 - $r) or .steps_retrained > 0')" true
wait_for 300 finished "$J"
check "the re-planned job succeeds" "$(job_state "$S" "$ADMIN" "$J")" succeeded
resumed=$(sql s "SELECT resume_step FROM plans p JOIN jobs j ON j.id = p.job_id WHERE p.job_id = $J AND p.epoch = j.plan_epoch")
check "it resumed from the outer step before the re-plan (step $resumed)" \
    "$(awk -v r="$resumed" -v b="$before" 'BEGIN { print (r != "" && r % 16 == 0 && r <= b + 1) ? "yes" : "no" }')" yes
retrained=$(cat "$WORK"/agent-*.log | grep -c "step job=$J step=")
check "steps of the interrupted phase were trained twice" "$(awk -v n="$retrained" 'BEGIN { print (n > 96) ? "yes" : "no: " n }')" yes
losses "$J" > "$WORK/replanned"
same_losses "its losses equal the uninterrupted run's" "$WORK/replanned" "$WORK/straight" 1e-6

# ---- the README's example, as written
TOP=$(cd "$(dirname "$0")/../.." && pwd)
doc_example slow-links > "$WORK/example.sh"
want=$(sed -n 's/^# -> //p' "$WORK/example.sh")
got=$(S=$S ADMIN=$ADMIN bash "$WORK/example.sh" 2>&1)
check "the README's slow-links example answers as it says" "$got" "$want"

check_no_secrets s
exit 0
