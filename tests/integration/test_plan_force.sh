#!/usr/bin/env bash
# test_plan_force.sh - POST /v1/jobs/{id}/plan: an explicit assignment,
# checked like a scheduled plan, costed under both models and stored as the
# next epoch; everything it refuses changes nothing.
set -u
. "$(dirname "$0")/lib.sh"

start_server_a || exit 1

# Four nodes in two regions (r0: 0 1, r1: 2 3); fast inside, slow across.
two_regions 1 0.02 1 1 1 1 1

# f32 stage links: the pipeline across the slow link must cost more than the all-reduce there.
JOB='{"name":"forced","model":{"vocab_size":256,"context_length":256,"d_model":256,"heads":4,"layers":8},"parallelism":{"stages":2,"replicas":2,"micro_batches":8,"micro_batch_size":8},"training":{"steps":100,"learning_rate":0.0003},"data":{"path":"/data/x.bin"},"communication":{"stage_link":"f32"}}'
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; J=$(printf '%s' "$BODY" | jq -r .id)
# The sequential plan: node i at tasklet i, stage-major; DP inside each
# region and the pipeline across the slow link.
SEQ="[{\"nodes\":[${ID[0]},${ID[1]}]},{\"nodes\":[${ID[2]},${ID[3]}]}]"
# Pipelines inside each region and the all-reduce across.
ROWS="[{\"nodes\":[${ID[0]},${ID[2]}]},{\"nodes\":[${ID[1]},${ID[3]}]}]"

# ---- a dry run's stages, posted back, cost what the scheduler said
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"dry_run":true,"budget_ms":200}'
sched=$BODY
check "a schedule's answer has predictions under both models" \
    "$(printf '%s' "$sched" | jq '.predictions.shoal.total_s == .predicted_iteration_s and .predictions.dtfm.total_s > 0 and .forced == false')" true
req POST "$S/v1/jobs/$J/plan" "$ADMIN" "$(printf '%s' "$sched" | jq -c '{stages, dry_run: true}')"
expect "posting a dry run's stages back is a forced dry run" 200 '[.dry_run, .forced, .epoch] | tostring' '[true,true,null]'
check "with the same layers and the same shoal prediction" \
    "$(jq -n --argjson a "$sched" --argjson b "$BODY" '$a.stages == $b.stages and (($a.predicted_iteration_s - $b.predicted_iteration_s) | fabs) < 1e-9 * $a.predicted_iteration_s')" true
check "a forced dry run stores nothing" "$(sql a "SELECT count(*) FROM plans")" 0

# ---- the two layouts, costed
req POST "$S/v1/jobs/$J/plan" "$ADMIN" "{\"stages\":$ROWS,\"dry_run\":true}"; rows=$BODY
req POST "$S/v1/jobs/$J/plan" "$ADMIN" "{\"stages\":$SEQ,\"dry_run\":true}"; seq_=$BODY
check "shoal predicts the pipeline across the slow link slower" \
    "$(jq -n --argjson r "$rows" --argjson s "$seq_" '$s.predicted_iteration_s > $r.predicted_iteration_s')" true
check "the scheduler found the faster layout (within 1e-9)" \
    "$(jq -n --argjson r "$rows" --argjson d "$sched" '$d.predicted_iteration_s <= $r.predicted_iteration_s * (1 + 1e-9)')" true
check "the breakdown is the shoal prediction" "$(printf '%s' "$seq_" | jq '.breakdown == .predictions.shoal')" true

# ---- stored for real, with the layers as given
req POST "$S/v1/jobs/$J/plan" "$ADMIN" "$(jq -nc --argjson s "$SEQ" '{stages: [$s[0] + {layer_start: 0, layer_end: 3}, $s[1] + {layer_start: 3, layer_end: 8}], cost_model: "dtfm"}')"
expect "a forced plan is stored as epoch 1" 201 '[.epoch, .forced, .cost_model, .dry_run] | tostring' '[1,true,"dtfm",false]'
check "its prediction is the dtfm one" "$(printf '%s' "$BODY" | jq '.predicted_iteration_s == .predictions.dtfm.total_s')" true
check "the assignments are the given ones, layers as given" \
    "$(sql a "SELECT string_agg(a.stage || ':' || a.replica || ':' || a.node_id || ':' || a.layer_start || '-' || a.layer_end, ' ' ORDER BY a.stage, a.replica) FROM assignments a JOIN plans p ON p.id = a.plan_id WHERE p.job_id = $J AND p.epoch = 1")" \
    "0:0:${ID[0]}:0-3 0:1:${ID[1]}:0-3 1:0:${ID[2]}:3-8 1:1:${ID[3]}:3-8"
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "the job shows the forced plan and its predictions" 200 '[.state, .plan_epoch, .plan.forced, (.plan.predictions.shoal.total_s > 0)] | tostring' '["scheduled",1,true,true]'
req POST "$S/v1/jobs/$J/plan" "$ADMIN" "{\"stages\":$ROWS}"
expect "forcing again makes epoch 2 (shoal splits the layers)" 201 '[.epoch, .cost_model, (.stages | map(.layer_end - .layer_start) | add)] | tostring' '[2,"shoal",8]'

# ---- refused, and nothing changes
plans_before=$(sql a "SELECT count(*) FROM plans")
refuse() {   # NAME STATUS FIELD BODY [TOKEN] [JOB]
    req POST "$S/v1/jobs/${6:-$J}/plan" "${5:-$ADMIN}" "$4"
    if [ -n "$3" ]; then expect "$1" "$2" .error.field "$3"; else expect "$1" "$2"; fi
}
refuse "a node that is not registered is 422" 422 stages "{\"stages\":[{\"nodes\":[${ID[0]},9999]},{\"nodes\":[${ID[2]},${ID[3]}]}]}"
check "naming the node" "$(printf '%s' "$BODY" | jq -r .error.message | grep -c 'node 9999 (stage 0, replica 1) is not available')" 1
refuse "a node twice is 422" 422 assignments "{\"stages\":[{\"nodes\":[${ID[0]},${ID[0]}]},{\"nodes\":[${ID[2]},${ID[3]}]}]}"
refuse "three stages for a two-stage job is 422" 422 stages "{\"stages\":[{\"nodes\":[${ID[0]}]},{\"nodes\":[${ID[1]}]},{\"nodes\":[${ID[2]}]}]}"
refuse "stages of different widths are 422" 422 'stages[1]' "{\"stages\":[{\"nodes\":[${ID[0]},${ID[1]}]},{\"nodes\":[${ID[2]}]}]}"
refuse "layers on one stage only are 422" 422 'stages[1]' "{\"stages\":[{\"nodes\":[${ID[0]},${ID[1]}],\"layer_start\":0,\"layer_end\":4},{\"nodes\":[${ID[2]},${ID[3]}]}]}"
refuse "layers that do not cover the model are 422" 422 layers "{\"stages\":[{\"nodes\":[${ID[0]},${ID[1]}],\"layer_start\":0,\"layer_end\":4},{\"nodes\":[${ID[2]},${ID[3]}],\"layer_start\":4,\"layer_end\":7}]}"
refuse "a stage without layers is 422" 422 layers "{\"stages\":[{\"nodes\":[${ID[0]},${ID[1]}],\"layer_start\":0,\"layer_end\":8},{\"nodes\":[${ID[2]},${ID[3]}],\"layer_start\":8,\"layer_end\":8}]}"
refuse "stages out of order are 422" 422 'stages[0]' "{\"stages\":[{\"stage\":1,\"nodes\":[${ID[0]},${ID[1]}]},{\"stage\":0,\"nodes\":[${ID[2]},${ID[3]}]}]}"
refuse "a string node id is 400" 400 'stages[0]' "{\"stages\":[{\"nodes\":[\"${ID[0]}\",${ID[1]}]},{\"nodes\":[${ID[2]},${ID[3]}]}]}"
refuse "a missing stages member is 400" 400 stages '{"dry_run":true}'
refuse "stages that is not an array is 400" 400 stages '{"stages":{}}'
refuse "an unknown member of a stage is 400" 400 'stages[0]' "{\"stages\":[{\"nodes\":[${ID[0]},${ID[1]}],\"replicas\":2},{\"nodes\":[${ID[2]},${ID[3]}]}]}"
refuse "an unknown member is 400" 400 budget_ms "{\"stages\":$SEQ,\"budget_ms\":10}"
refuse "an unknown cost model is 422" 422 cost_model "{\"stages\":$SEQ,\"cost_model\":\"magic\"}"
refuse "malformed JSON is 400" 400 "" '{"stages":['
refuse "an unknown job is 404" 404 "" "{\"stages\":$SEQ}" "$ADMIN" 424242
refuse "a node's token may not force a plan" 403 "" "{\"stages\":$SEQ}" "${TOK[0]}"
refuse "nor the join token" 403 "" "{\"stages\":$SEQ}" "$JOIN"
req POST "$S/v1/jobs/$J/plan" "" "{\"stages\":$SEQ}";   expect "nor nobody" 401

# A node too small for its stage: the shoal model's memory check.
req POST "$S/v1/agent/register" "$JOIN" '{"name":"tiny","peer_address":"10.0.0.9:7000","hardware":{"tflops":1,"cpu_cores":1,"gpu_memory_bytes":1000000}}'
N5=$(printf '%s' "$BODY" | jq -r .node_id)
refuse "an unmeasured link is 422" 422 "" "{\"stages\":[{\"nodes\":[${ID[0]},$N5]},{\"nodes\":[${ID[2]},${ID[3]}]}]}"
check "naming the missing link" "$(printf '%s' "$BODY" | jq -r .error.code)" missing_links
refuse "a plan that does not fit in memory is 422" 422 stages "{\"stages\":[{\"nodes\":[${ID[0]},$N5]},{\"nodes\":[${ID[2]},${ID[3]}]}],\"fill_missing_links\":{\"latency_ms\":1,\"bandwidth_gbps\":1}}"
check "saying so" "$(printf '%s' "$BODY" | jq -r .error.code)" infeasible
check "with the bytes: the stage's need and the small node's memory" \
    "$(printf '%s' "$BODY" | jq -r '.error.message | test("stage 0 .* needs [0-9.]+ GiB .* node \\(id '"$N5"'\\) has 0.00 GiB")')" true
check "refused plans store nothing" "$(sql a "SELECT count(*) FROM plans")" "$plans_before"
req GET "$S/v1/jobs/$J" "$ADMIN";   expect "and the job keeps its plan" 200 .plan_epoch 2

# A node planned for another live job is not available to this one.
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c '.parallelism.replicas = 1 | .parallelism.stages = 1')"; J2=$(printf '%s' "$BODY" | jq -r .id)
refuse "another job's nodes are not available" 422 stages "{\"stages\":[{\"nodes\":[${ID[0]}]}],\"fill_missing_links\":{\"latency_ms\":1,\"bandwidth_gbps\":1}}" "$ADMIN" "$J2"
req DELETE "$S/v1/jobs/$J2" "$ADMIN"
refuse "a cancelled job cannot be planned" 409 state "{\"stages\":[{\"nodes\":[$N5]}]}" "$ADMIN" "$J2"

stop_server a
[ "$FAILS" -eq 0 ]
