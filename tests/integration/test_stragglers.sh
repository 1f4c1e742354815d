#!/usr/bin/env bash
# test_stragglers.sh - stragglers over real HTTP against a real embedded
# Postgres: each tasklet's predicted compute time (checked against a hand
# computation and against the plan's breakdown, which the scheduler's C cost
# model made), its slowdown, the straggler rule relative to the job (a
# uniformly slow job, a 1x1 and a 2x1 job flag nobody; fewer than 3 steps
# count for nothing), the job detail, /metrics, and the operator's re-plan
# of the running job from its latest checkpoint.
set -u
. "$(dirname "$0")/lib.sh"

# A long heartbeat timeout keeps the recovery thread away from these
# hand-driven nodes.
start_server_a --heartbeat-timeout 3600 || exit 1
# Predictions are microseconds: agree to 1e-9 relative, nothing absolute.
NEAR_ABS=1e-300

# ---- eight nodes, each with its own measured TFLOP/s; every link alike
TFLOPS=(10 12.5 20 40 80 25 50 5)
declare -a TOK ID
for i in 0 1 2 3 4 5 6 7; do
    req POST "$S/v1/agent/register" "$JOIN" "{\"name\":\"n$i\",\"peer_address\":\"127.0.0.1:$((7200 + i))\",\"hardware\":{\"tflops\":${TFLOPS[$i]},\"cpu_cores\":8,\"gpu_memory_bytes\":8000000000}}"
    TOK[$i]=$(printf '%s' "$BODY" | jq -r .token)
    ID[$i]=$(printf '%s' "$BODY" | jq -r .node_id)
done
check "eight nodes register" "$(sql a "SELECT count(*) FROM nodes")" 8
for i in 0 1 2 3 4 5 6 7; do
    s=""
    for j in 0 1 2 3 4 5 6 7; do
        [ "$i" = "$j" ] && continue
        s="$s{\"to\":${ID[$j]},\"latency_ms\":2,\"bandwidth_gbps\":10},"
    done
    req PUT "$S/v1/links" "${TOK[$i]}" "{\"samples\":[${s%,}]}"
done
TFMAP=$(for i in 0 1 2 3 4 5 6 7; do printf '{"%s":%s}\n' "${ID[$i]}" "${TFLOPS[$i]}"; done | jq -sc add)
tok_by_id() { local i; for i in 0 1 2 3 4 5 6 7; do [ "${ID[$i]}" = "$1" ] && echo "${TOK[$i]}"; done; }

# A model whose every dimension differs (C 48, T 32, V 256, B 3, M 5, 5
# layers), so a term with the wrong factor cannot pass.
GPT2_MODEL='{"vocab_size":256,"context_length":32,"d_model":48,"heads":4,"layers":5}'
spec() {  # NAME STAGES REPLICAS; MODEL, when set, the model object
    printf '{"name":"%s","model":%s,"parallelism":{"stages":%s,"replicas":%s,"micro_batches":5,"micro_batch_size":3},"training":{"steps":40,"learning_rate":0.001},"data":{"path":"/data/corpus.txt","format":"text"},"checkpoint_interval":4}' "$1" "${MODEL:-$GPT2_MODEL}" "$2" "$3"
}

# hand JOB_DETAIL: the plan's tasklets with the compute time the shoal cost
# model predicts for each, worked out here from the job's spec, the plan's
# layers and the nodes' TFLOP/s: [{stage, replica, node_id, layer_start,
# layer_end, fwd_bwd, optimizer, predicted}] (seconds per step).
#   per micro-batch: layer_flops = B*T*(72 C^2 + 6 C T), last_flops = B*T*6 C V
#   AdamW: 12 FLOP per parameter at 5% of the rate; parameters: 12 C^2 + 13 C
#   a layer, V C + T C on the first stage, 2 C + V C on the last.
hand() {
    printf '%s' "$1" | jq -c --argjson tf "$TFMAP" '
        .spec as $s | ($s.model.d_model) as $C | ($s.model.context_length) as $T | ($s.model.vocab_size) as $V
        | ($s.parallelism.micro_batch_size * $T) as $tok | ($s.parallelism.micro_batches) as $M
        | ($s.parallelism.stages) as $P
        | [.plan.assignments[] | (.layer_end - .layer_start) as $L
           | (if .stage == 0 then 1 else 0 end) as $first | (if .stage == $P - 1 then 1 else 0 end) as $last
           | ($tf[.node_id | tostring] * 1e12) as $rate
           | ($M * ($L * $tok * (72 * $C * $C + 6 * $C * $T) + $last * $tok * 6 * $C * $V) / $rate) as $fb
           | (12 * ($L * (12 * $C * $C + 13 * $C) + $first * ($V * $C + $T * $C) + $last * (2 * $C + $V * $C))
              / ($rate * 0.05)) as $opt
           | {stage, replica, node_id, layer_start, layer_end, fwd_bwd: $fb, optimizer: $opt, predicted: ($fb + $opt)}]'
}

# report J EPOCH STEP STAGE REPLICA COMPUTE_S: one progress report.
report() {
    local loss=null tok
    [ "$(sql a "SELECT stages - 1 FROM jobs WHERE id = $1")" = "$4" ] && loss=4.2
    tok=$(tok_by_id "$(printf '%s' "$TASKLETS" | jq -r --argjson s "$4" --argjson r "$5" '.[] | select(.stage == $s and .replica == $r) | .node_id')")
    req POST "$S/v1/agent/progress" "$tok" "$(jq -cn --argjson j "$1" --argjson e "$2" --argjson st "$3" --argjson s "$4" \
        --argjson r "$5" --argjson loss "$loss" --argjson c "$6" \
        '{job_id: $j, epoch: $e, step: $st, stage: $s, replica: $r, loss: $loss, iteration_s: ($c + 0.5),
          compute_s: $c, send_s: 0.01, recv_wait_s: 0.02, allreduce_s: 0.03, bubble_s: 0.04, tokens: 96}')"
    [ "$STATUS" = 201 ] || fail "progress of job $1 step $3 tasklet ($4,$5)" "status $STATUS: $BODY"
}
# steps J FROM TO SLOW: every tasklet of job J reports steps FROM..TO with
# compute_s = its hand prediction times SLOW's factor for it: SLOW is a jq
# expression over .stage and .replica.
steps() {
    local step a s r c
    for step in $(seq "$2" "$3"); do
        for a in $(printf '%s' "$TASKLETS" | jq -r ".[] | \"\(.stage),\(.replica),\(.predicted * ($4))\""); do
            IFS=, read -r s r c <<<"$a"
            report "$1" 1 "$step" "$s" "$r" "$c"
        done
    done
}

# new_job VAR NAME STAGES REPLICAS BUDGET_MS SCHEDULE_CHECK: creates a job
# of that shape, schedules it (epoch 1) and sets VAR to its id.
new_job() {
    req POST "$S/v1/jobs" "$ADMIN" "$(spec "$2" "$3" "$4")"; expect "create job ${1} (${3}x${4})" 201
    printf -v "$1" '%s' "$(printf '%s' "$BODY" | jq -r .id)"
    req POST "$S/v1/jobs/${!1}/schedule" "$ADMIN" "{\"budget_ms\":$5}"; expect "$6" 201 .epoch 1
}

# ---- job A, 2 stages x 2 replicas: one tasklet three times slower than the rest
new_job A strag-a 2 2 200 "schedule A"
req GET "$S/v1/jobs/$A" "$ADMIN"
TASKLETS=$(hand "$BODY"); DETAIL_A=$BODY
expect "before any report A has no measured tasklets and no stragglers" 200 '[.measured, .stragglers] | tostring' '[[],[]]'
# The C cost model's breakdown: its optimizer term is the slowest tasklet's
# AdamW, its compute the critical replica's M x slowest stage.
near "the hand AdamW term of the slowest tasklet is the plan's optimizer_s" \
     "$(printf '%s' "$TASKLETS" | jq '[.[].optimizer] | max')" "$(printf '%s' "$DETAIL_A" | jq .plan.breakdown.optimizer_s)"
bd=$(printf '%s' "$DETAIL_A" | jq .plan.breakdown.compute_s)
check "the plan's compute_s is one replica's slowest stage (forward + backward), by hand" \
      "$(printf '%s' "$TASKLETS" | jq --argjson b "$bd" \
           '[group_by(.replica)[] | map(.fwd_bwd) | max | (. - $b) | fabs <= 1e-9 * $b] | any')" true
STRAGGLER='if .stage == 1 and .replica == 0 then 3.3 else 1.1 end'
steps "$A" 0 1 "$STRAGGLER"
req GET "$S/v1/jobs/$A" "$ADMIN"
check "after two steps every tasklet is measured" "$(printf '%s' "$BODY" | jq -c '[.measured[] | [.stage, .replica, .steps]]')" \
      '[[0,0,2],[0,1,2],[1,0,2],[1,1,2]]'
check "and predicted" "$(printf '%s' "$BODY" | jq '[.measured[] | .predicted_compute_s > 0] | all')" true
check "but has no slowdown before 3 steps, so no straggler" \
      "$(printf '%s' "$BODY" | jq -c '[[.measured[] | [.slowdown, .straggler]], .stragglers]')" \
      '[[[null,false],[null,false],[null,false],[null,false]],[]]'
scrape
check "metrics: A has no straggler yet" "$(value "shoal_job_stragglers{job_id=\"$A\"}")" 0
check "metrics: and no tasklet slowdown" "$(grep -c "^shoal_tasklet_slowdown_ratio{job_id=\"$A\"," "$M")" 0
steps "$A" 2 5 "$STRAGGLER"
req GET "$S/v1/jobs/$A" "$ADMIN"
DETAIL_A=$BODY
check "A is running, six steps per tasklet" "$(printf '%s' "$BODY" | jq -c '[.state, [.measured[].steps]]')" '["running",[6,6,6,6]]'
for t in 0 1 2 3; do
    got=$(printf '%s' "$DETAIL_A" | jq -c ".measured[$t] | [.stage, .replica, .node_id]")
    want=$(printf '%s' "$TASKLETS" | jq -c "sort_by(.stage, .replica) | .[$t] | [.stage, .replica, .node_id]")
    lbl=$(printf '%s' "$want" | jq -r '"(\(.[0]), \(.[1])) on node \(.[2])"')
    check "tasklet $t is $lbl, as planned" "$got" "$want"
    near "tasklet $lbl: predicted_compute_s is the hand computation" \
         "$(printf '%s' "$DETAIL_A" | jq ".measured[$t].predicted_compute_s")" \
         "$(printf '%s' "$TASKLETS" | jq "sort_by(.stage, .replica) | .[$t].predicted")"
    near "tasklet $lbl: slowdown is compute_s over it" \
         "$(printf '%s' "$DETAIL_A" | jq ".measured[$t].slowdown")" \
         "$(printf '%s' "$DETAIL_A" | jq ".measured[$t] | if .stage == 1 and .replica == 0 then 3.3 else 1.1 end")"
done
check "predictions differ by node and layers (the plan is not uniform)" \
      "$(printf '%s' "$DETAIL_A" | jq '[.measured[].predicted_compute_s] | unique | length > 1')" true
check "only the tasklet 3x slower than its peers (3.3 > 2 x 1.1) straggles" \
      "$(printf '%s' "$DETAIL_A" | jq -c '[.measured[] | [.stage, .replica, .straggler]]')" \
      '[[0,0,false],[0,1,false],[1,0,true],[1,1,false]]'
N10=$(printf '%s' "$TASKLETS" | jq '.[] | select(.stage == 1 and .replica == 0) | .node_id')
check "the job's stragglers name it, its node and its slowdown" \
      "$(printf '%s' "$DETAIL_A" | jq -c '.stragglers | map([.stage, .replica, .node_id, (.slowdown * 1e6 | round)])')" \
      "[[1,0,$N10,3300000]]"

# ---- job B, 1 stage x 3 replicas: all four times slower than registered, one 1.9 times that
new_job B strag-b 1 3 200 "schedule B on three other nodes"
req GET "$S/v1/jobs/$B" "$ADMIN"; TASKLETS=$(hand "$BODY")
steps "$B" 0 4 'if .replica == 2 then 7.6 else 4 end'
req GET "$S/v1/jobs/$B" "$ADMIN"
for t in 0 1 2; do
    near "B tasklet $t (first and last stage at once): predicted_compute_s is the hand computation" \
         "$(printf '%s' "$BODY" | jq ".measured[$t].predicted_compute_s")" "$(printf '%s' "$TASKLETS" | jq "sort_by(.replica) | .[$t].predicted")"
done
check "B's slowdowns are its factors" "$(printf '%s' "$BODY" | jq -c '[.measured[].slowdown * 1e6 | round]')" '[4000000,4000000,7600000]'
check "a job uniformly slower than its nodes' TFLOP/s, one tasklet 1.9x its peers, flags nobody" \
      "$(printf '%s' "$BODY" | jq -c '[[.measured[].straggler], .stragglers]')" '[[false,false,false],[]]'

# ---- job C, 1x1: fifty times slower, alone
new_job C strag-c 1 1 100 "schedule C on the last node"
req GET "$S/v1/jobs/$C" "$ADMIN"; TASKLETS=$(hand "$BODY")
near "C: the hand prediction is the plan's compute_s + optimizer_s (the C cost model)" \
     "$(printf '%s' "$TASKLETS" | jq '.[0].predicted')" "$(printf '%s' "$BODY" | jq '.plan.breakdown.compute_s + .plan.breakdown.optimizer_s')"
steps "$C" 0 3 50
req GET "$S/v1/jobs/$C" "$ADMIN"
near "C: predicted_compute_s is the plan's compute_s + optimizer_s" \
     "$(printf '%s' "$BODY" | jq '.measured[0].predicted_compute_s')" "$(printf '%s' "$BODY" | jq '.plan.breakdown.compute_s + .plan.breakdown.optimizer_s')"
check "a 1x1 job has no straggler, however slow" \
      "$(printf '%s' "$BODY" | jq -c '[(.measured[0].slowdown | round), .measured[0].straggler, .stragglers]')" '[50,false,[]]'

# ---- metrics
scrape
check "metrics: A has one straggler" "$(value "shoal_job_stragglers{job_id=\"$A\"}")" 1
check "metrics: B and C none" "$(value "shoal_job_stragglers{job_id=\"$B\"}") $(value "shoal_job_stragglers{job_id=\"$C\"}")" "0 0"
check "metrics: a slowdown per measured tasklet of the live jobs (4 + 3 + 1)" "$(grep -c '^shoal_tasklet_slowdown_ratio{' "$M")" 8
near "metrics: the straggler's slowdown, labelled with its node" \
     "$(value "shoal_tasklet_slowdown_ratio{job_id=\"$A\",stage=\"1\",replica=\"0\",node=\"$N10\"}")" 3.3
N00=$(printf '%s' "$DETAIL_A" | jq '.measured[0].node_id')
near "metrics: a peer's slowdown" "$(value "shoal_tasklet_slowdown_ratio{job_id=\"$A\",stage=\"0\",replica=\"0\",node=\"$N00\"}")" 1.1
check "metrics: both families are gauges with HELP" \
      "$(grep -c -e '^# TYPE shoal_job_stragglers gauge$' -e '^# TYPE shoal_tasklet_slowdown_ratio gauge$' -e '^# HELP shoal_job_stragglers ' -e '^# HELP shoal_tasklet_slowdown_ratio ' "$M")" 4
req DELETE "$S/v1/jobs/$B" "$ADMIN"; expect "cancel B" 200 .state cancelled
scrape
check "metrics: a cancelled job has no straggler series" "$(grep -c "job_id=\"$B\"" "$M")" 0

# ---- job D, 2x1 on B's nodes: one tasklet ten times slower than the other,
# but two tasklets have no majority (their median is their mean)
new_job D strag-d 2 1 100 "schedule D"
req GET "$S/v1/jobs/$D" "$ADMIN"; TASKLETS=$(hand "$BODY")
steps "$D" 0 3 'if .stage == 1 then 10 else 1 end'
req GET "$S/v1/jobs/$D" "$ADMIN"
check "a job of two tasklets flags neither, even ten times apart" \
      "$(printf '%s' "$BODY" | jq -c '[[.measured[] | .slowdown * 1e6 | round], [.measured[].straggler], .stragglers]')" \
      '[[1000000,10000000],[false,false],[]]'

# ---- job E, a 1x1 Llama on B's last node: its prediction comes from its
# family's counts (jobs.model_costs, common/model.c), as the C cost model's
MODEL='{"architecture":"llama","vocab_size":256,"context_length":32,"d_model":48,"heads":4,"kv_heads":2,"ffn_dim":100,"layers":5}' \
    new_job E strag-e 1 1 100 "schedule the Llama job E"
req GET "$S/v1/jobs/$E" "$ADMIN"; TASKLETS=$(hand "$BODY")
steps "$E" 0 3 1
req GET "$S/v1/jobs/$E" "$ADMIN"
near "E (Llama): predicted_compute_s is the plan's compute_s + optimizer_s" \
     "$(printf '%s' "$BODY" | jq '.measured[0].predicted_compute_s')" "$(printf '%s' "$BODY" | jq '.plan.breakdown.compute_s + .plan.breakdown.optimizer_s')"

# ---- the operator re-plans A from its latest complete checkpoint
TASKLETS=$(hand "$DETAIL_A")
for s in 0 1; do
    a=$(printf '%s' "$TASKLETS" | jq -c ".[] | select(.stage == $s and .replica == 0)")
    # a real stage file of A's model (spec's) and this stage's layers
    python3 "$(dirname "$0")/stage_file.py" "$WORK/shard.bin" 256 32 48 4 5 "$(printf '%s' "$a" | jq .layer_start)" \
            "$(printf '%s' "$a" | jq .layer_end)" "$((s == 0))" "$((s == 1))" 4
    STATUS=$(curl -s -o "$WORK/body" -w '%{http_code}' -X PUT -H "Authorization: Bearer $(tok_by_id "$(printf '%s' "$a" | jq .node_id)")" \
             -H 'Content-Type: application/octet-stream' --data-binary "@$WORK/shard.bin" \
             "$S/v1/jobs/$A/checkpoints/4/stages/$s?layer_start=$(printf '%s' "$a" | jq .layer_start)&layer_end=$(printf '%s' "$a" | jq .layer_end)")
    BODY=$(cat "$WORK/body")
    expect "upload A's checkpoint of step 4, stage $s" 201 .complete "$([ "$s" = 1 ] && echo true || echo false)"
done
req POST "$S/v1/jobs/$A/schedule" "$ADMIN" '{"budget_ms":200,"replan":true}'
expect "POST schedule on the running job re-plans it from its latest checkpoint" 201 '[.epoch, .resume_step] | tostring' '[2,4]'
req GET "$S/v1/jobs/$A" "$ADMIN"
check "the new epoch starts unmeasured, without stragglers" "$(printf '%s' "$BODY" | jq -c '[.state, .plan_epoch, .measured, .stragglers]')" '["scheduled",2,[],[]]'
scrape
check "metrics: and its straggler series are gone" "$(grep -c "^shoal_[a-z_]*{job_id=\"$A\"" "$M")" 0

stop_server a
[ "$FAILS" -eq 0 ]
