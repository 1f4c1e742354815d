#!/usr/bin/env bash
# test_schedule.sh - POST /v1/jobs/{id}/schedule against a real server and
# database: registered nodes, posted links, plans stored (or not), errors.
set -u
. "$(dirname "$0")/lib.sh"

start_server_a || exit 1

# Four nodes in two regions; fast links inside a region, slow across.
two_regions 10 0.1 5 10 20 30 40
check "all twelve links are posted" "$(sql a "SELECT count(*) FROM links_latest")" 12

JOB='{"name":"sched","model":{"vocab_size":1000,"context_length":256,"d_model":256,"heads":8,"layers":8},"parallelism":{"stages":2,"replicas":2,"micro_batches":4,"micro_batch_size":8},"training":{"steps":100,"learning_rate":0.0003},"data":{"path":"/data/x.bin"}}'
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; J=$(printf '%s' "$BODY" | jq -r .id)

# ---- dry run: a plan, nothing stored
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"dry_run":true,"budget_ms":200}'
expect "a dry run answers 200 with a plan" 200 '[.dry_run, .epoch, (.stages | length), .nodes_available] | tostring' '[true,null,2,4]'
check "the dry run's plan uses four distinct nodes" "$(printf '%s' "$BODY" | jq '[.stages[].nodes[]] | unique | length')" 4
check "its layer ranges cover the model" "$(printf '%s' "$BODY" | jq -c '[.stages[0].layer_start, .stages[0].layer_end == .stages[1].layer_start, .stages[1].layer_end]')" "[0,true,8]"
check "it reports the baselines" "$(printf '%s' "$BODY" | jq '.baselines.random_plans > 0 and .baselines.sequential_s > 0 and .predicted_iteration_s > 0')" true
check "a dry run stores no plan" "$(sql a "SELECT count(*) FROM plans")" 0
req GET "$S/v1/jobs/$J" "$ADMIN";   expect "and leaves the job pending" 200 '[.state, .plan_epoch, .plan] | tostring' '["pending",0,null]'

# ---- same seed, same plan
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"dry_run":true,"seed":7,"candidates":300,"budget_ms":60000}'; first=$(printf '%s' "$BODY" | jq -c .stages)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"dry_run":true,"seed":7,"candidates":300,"budget_ms":60000}'
check "the same seed gives the same plan" "$(printf '%s' "$BODY" | jq -c .stages)" "$first"

# ---- the job's communication prices its plans: one plan (pipelines inside
# the regions, the all-reduce across), costed for jobs that differ only in
# what they send
ROWS="[{\"nodes\":[${ID[0]},${ID[2]}]},{\"nodes\":[${ID[1]},${ID[3]}]}]"
# cost COMMUNICATION: the shoal prediction's "dp_s pipeline_s" for it.
cost() {
    req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c ".communication = $1")"
    req POST "$S/v1/jobs/$(printf '%s' "$BODY" | jq -r .id)/plan" "$ADMIN" "{\"stages\":$ROWS,\"dry_run\":true}"
    printf '%s' "$BODY" | jq -r '"\(.predictions.shoal.dp_s) \(.predictions.shoal.pipeline_s)"'
}
read -r dp_every pipe_f32 <<<"$(cost '{"stage_link":"f32"}')"
read -r dp_dl pipe_bf16 <<<"$(cost '{"stage_link":"bf16","sync":"diloco","inner_steps":100}')"
read -r dp_q8 _ <<<"$(cost '{"stage_link":"bf16","sync":"diloco","inner_steps":100,"sync_dtype":"int8"}')"
check "diloco (H=100) prices the plan's all-reduce at a hundredth" \
    "$(awk -v a="$dp_every" -v b="$dp_dl" 'BEGIN { r = a / b; print (r > 99.999 && r < 100.001) ? "yes" : "no: " r }')" yes
check "int8 pseudo-gradients cheaper still" "$(awk -v a="$dp_dl" -v b="$dp_q8" 'BEGIN { print (b < a / 3) ? "yes" : "no: " a " " b }')" yes
check "bf16 stage links make the pipeline cheaper than f32" \
    "$(awk -v a="$pipe_f32" -v b="$pipe_bf16" 'BEGIN { print (b < a) ? "yes" : "no: " a " " b }')" yes

# ---- schedule for real
req POST "$S/v1/jobs/$J/plan" "$ADMIN" '{"stages":[{"nodes":['"${ID[0]},${ID[1]}"']},{"nodes":['"${ID[2]}"',999999]}]}'
expect "a plan naming an unknown node is refused" 422 .error.field stages
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "and the pending job keeps the refusal" 200 '[.state, .schedule_refused.status] | join(" ")' "pending 422"
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":300,"cost_model":"dtfm"}'
expect "scheduling stores epoch 1" 201 '[.epoch, .cost_model] | tostring' '[1,"dtfm"]'
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "which clears the refusal" 200 .schedule_refused null
check "one assignment per tasklet" "$(sql a "SELECT count(*) FROM assignments")" 4
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "the job shows its plan" 200 '[.state, .plan_epoch, .plan.epoch, (.plan.assignments | length), (.plan.breakdown.total_s > 0), (.plan.baselines.random_plans)] | tostring' '["scheduled",1,1,4,true,1000]'
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" ''
expect "scheduling again (empty body: defaults) makes epoch 2" 201 '[.epoch, .cost_model] | tostring' '[2,"shoal"]'
check "both plans are kept" "$(sql a "SELECT string_agg(epoch::text, ',' ORDER BY epoch) FROM plans")" "1,2"
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "each link of the plan with how it is made: two stage links and four ring edges, all dialled, no relay" 200 \
    '[.plan.relay, ([.plan.links[] | [.kind, .way]] | group_by(.) | map([.[0][0], .[0][1], length]))] | tostring' \
    '[null,[["ring","dial",4],["stage","dial",2]]]'
check "a stage link runs from a tasklet to the next stage of its replica" \
    "$(printf '%s' "$BODY" | jq -c '[.plan.links[] | select(.kind == "stage") | [.from.stage, .to.stage, .from.replica == .to.replica]] | unique')" \
    '[[0,1,true]]'
check "and its nodes are the assignments'" \
    "$(printf '%s' "$BODY" | jq '. as $j | [.plan.links[] | .from, .to | . as $e | $j.plan.assignments[]
        | select(.stage == $e.stage and .replica == $e.replica) | .node_id == $e.node_id] | all')" true
check "the plan's bytes per step: stage links and the rings' sync, no tied head" \
    "$(printf '%s' "$BODY" | jq -c '.plan.bytes_per_step | [.stage_links > 0, .sync > 0, .tied_head]')" '[true,true,0]'


# ---- bad parameters change nothing
plans_before=$(sql a "SELECT count(*) FROM plans")
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"cost_model":"magic"}';  expect "unknown cost model is 422" 422 .error.field cost_model
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":5}';         expect "too small a budget is 422" 422 .error.field budget_ms
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"seed":"x"}';            expect "a string seed is 400" 400 .error.field seed
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget":5}';            expect "an unknown field is 400" 400 .error.field budget
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"dry_run":';             expect "malformed JSON is 400" 400 .error.code invalid_json
req POST "$S/v1/jobs/424242/schedule" "$ADMIN" '{}';                  expect "an unknown job is 404" 404 .error.code not_found
req POST "$S/v1/jobs/$J/schedule" "$JOIN" '{}';                       expect "the join token may not schedule" 403
check "bad requests store no plan" "$(sql a "SELECT count(*) FROM plans")" "$plans_before"

# ---- missing links: named, unless filled
req POST "$S/v1/agent/register" "$JOIN" '{"name":"late","peer_address":"10.0.0.9:7000","hardware":{"tflops":20,"cpu_cores":8}}'
N5=$(printf '%s' "$BODY" | jq -r .node_id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"dry_run":true,"budget_ms":100}'
expect "unmeasured links are an error" 422 .error.code missing_links
check "which names the missing pairs" "$(printf '%s' "$BODY" | jq -r .error.message | grep -c -- "${ID[0]}->$N5")" 1
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"dry_run":true,"budget_ms":100,"fill_missing_links":{"latency_ms":100,"bandwidth_gbps":0.01}}'
expect "fill values stand in for unmeasured links" 200 .nodes_available 5

# ---- too few nodes; drained nodes and other jobs' nodes are not offered
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c '.parallelism.replicas = 3')"; J2=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J2/schedule" "$ADMIN" '{"fill_missing_links":{"latency_ms":100,"bandwidth_gbps":0.01}}'
expect "too few nodes is 409" 409 .error.code not_enough_nodes
check "naming what is needed and what is available" "$(printf '%s' "$BODY" | jq -r .error.message | grep -c 'needs 6 nodes .* and 1 are available')" 1
req POST "$S/v1/nodes/${ID[0]}/drain" "$ADMIN"
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"dry_run":true,"fill_missing_links":{"latency_ms":100,"bandwidth_gbps":0.01}}'
expect "a drained node is not offered" 200 .nodes_available 4
check "and is not in the plan" "$(printf '%s' "$BODY" | jq "[.stages[].nodes[]] | index(${ID[0]})")" null
check "no plan was stored for the job that did not fit" "$(sql a "SELECT count(*) FROM plans WHERE job_id = $J2")" 0
req GET "$S/v1/jobs/$J2" "$ADMIN"
expect "the refused job stays pending and says why" 200 \
       '[.state, .schedule_refused.status, .schedule_refused.code, (.schedule_refused.message | test("needs 6 nodes"))] | join(" ")' \
       "pending 409 not_enough_nodes true"
req POST "$S/v1/jobs/$J2/schedule" "$ADMIN" '{"dry_run":true,"fill_missing_links":{"latency_ms":100,"bandwidth_gbps":0.01}}'
req GET "$S/v1/jobs/$J2" "$ADMIN"
expect "a refused dry run leaves the note as it was" 200 '.schedule_refused.code' not_enough_nodes

# ---- scheduling runs beside other requests, at most two at a time
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" ''   # settle: epoch 3 on the four live nodes
long='{"dry_run":true,"budget_ms":4000,"fill_missing_links":{"latency_ms":100,"bandwidth_gbps":0.01}}'
curl -s -o "$WORK/long1" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' -d "$long" "$S/v1/jobs/$J/schedule" &
p1=$!
curl -s -o "$WORK/long2" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' -d "$long" "$S/v1/jobs/$J/schedule" &
p2=$!
sleep 1
req GET "$S/v1/jobs/$J" "$ADMIN";   expect "other requests are served while searches run" 200 .id "$J"
check "and the searches were still running then" "$(kill -0 $p1 2>/dev/null && kill -0 $p2 2>/dev/null && echo yes)" yes
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" "$long"; expect "a third concurrent search is 503" 503 .error.code busy
wait $p1 $p2
check "the long searches finish with a plan" "$(jq -s -c 'map(.dry_run)' "$WORK/long1" "$WORK/long2")" "[true,true]"

# ---- only live jobs are scheduled
req DELETE "$S/v1/jobs/$J2" "$ADMIN"
req POST "$S/v1/jobs/$J2/schedule" "$ADMIN" '{}';   expect "a cancelled job cannot be scheduled" 409 .error.code conflict

# ---- a link no agent could connect either way (PUT /v1/links, reachable
# false) is avoided like a blamed one: n0 and n1 are then neither pipeline
# nor ring neighbours (in a 2x2 plan on four nodes: diagonal).  Blocked one
# way only, it is dialled the other way (test_agent_train.sh).
req DELETE "$S/v1/jobs/$J" "$ADMIN"
req POST "$S/v1/nodes/$N5/drain" "$ADMIN"   # the four nodes of the two regions only
req POST "$S/v1/nodes/${ID[0]}/undrain" "$ADMIN"
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; K=$(printf '%s' "$BODY" | jq -r .id)
# apart PLAN: true when n0 and n1 share neither a stage nor a replica (or
# one of them is not in the plan).
apart() {
    printf '%s' "$1" | jq --argjson a "${ID[0]}" --argjson b "${ID[1]}" \
        '[.stages | to_entries[] | .key as $s | .value.nodes | to_entries[] | {s: $s, r: .key, n: .value}]
         | (map(select(.n == $a))[0]) as $x | (map(select(.n == $b))[0]) as $y
         | if $x == null or $y == null then true else ($x.s != $y.s and $x.r != $y.r) end'
}
req POST "$S/v1/jobs/$K/schedule" "$ADMIN" '{"dry_run":true,"seed":3,"budget_ms":300,"fill_missing_links":{"latency_ms":100,"bandwidth_gbps":0.01}}'
expect "a dry run of a new 2x2 job" 200 .dry_run true
check "with every link connected, the plan pairs n0 and n1 (their region's fast link)" "$(apart "$BODY")" false
req PUT "$S/v1/links" "${TOK[0]}" "{\"samples\":[{\"to\":${ID[1]},\"reachable\":false,\"why\":\"connect: No route to host\"}]}"
req POST "$S/v1/jobs/$K/schedule" "$ADMIN" '{"dry_run":true,"seed":3,"budget_ms":300,"fill_missing_links":{"latency_ms":100,"bandwidth_gbps":0.01}}'
check "blocked one way, the link is still used (dialled the other way)" "$(apart "$BODY")" false
req PUT "$S/v1/links" "${TOK[1]}" "{\"samples\":[{\"to\":${ID[0]},\"reachable\":false,\"why\":\"connect: No route to host\"}]}"
req POST "$S/v1/jobs/$K/schedule" "$ADMIN" '{"dry_run":true,"seed":3,"budget_ms":300,"fill_missing_links":{"latency_ms":100,"bandwidth_gbps":0.01}}'
check "blocked both ways, the plan keeps n0 and n1 apart" "$(apart "$BODY")" true
# a plan that makes them neighbours anyway, on a server with no --relay: refused, naming them
req POST "$S/v1/jobs/$K/plan" "$ADMIN" "{\"stages\":[{\"nodes\":[${ID[0]},${ID[2]}]},{\"nodes\":[${ID[1]},${ID[3]}]}]}"
expect "a plan joining two nodes blocked both ways, with no relay, is refused" 422 .error.code unreachable
check "the refusal names both nodes and the way out" \
    "$(printf '%s' "$BODY" | jq -r '.error.message' | grep -c "nodes ${ID[0]} (n0) and ${ID[1]} (n1) cannot connect to each other either way.*--relay")" 1
check "and stores nothing" "$(sql a "SELECT plan_epoch FROM jobs WHERE id = $K")" 0

# ---- two nodes behind NAT (home0, home1): they connect out to the four
# others, which cannot connect to them, nor can they to each other, so
# those directions are never measured.  A turned direction is priced as the
# one measured back; the pair blocked both ways as unusable (no relay): the
# planner needs no fill values, and keeps home0 and home1 apart.
for h in 0 1; do
    req POST "$S/v1/agent/register" "$JOIN" "{\"name\":\"home$h\",\"peer_address\":\"192.168.1.$h:7000\",\"hardware\":{\"tflops\":10,\"cpu_cores\":8,\"gpu_memory_bytes\":8000000000}}"
    HT[$h]=$(printf '%s' "$BODY" | jq -r .token); HID[$h]=$(printf '%s' "$BODY" | jq -r .node_id)
done
for h in 0 1; do
    out=""
    for i in 0 1 2 3; do out="$out{\"to\":${ID[$i]},\"latency_ms\":20,\"bandwidth_gbps\":0.5},"; done
    req PUT "$S/v1/links" "${HT[$h]}" "{\"samples\":[$out{\"to\":${HID[$((1 - h))]},\"reachable\":false,\"why\":\"test: NAT\"}]}"
    for i in 0 1 2 3; do
        req PUT "$S/v1/links" "${TOK[$i]}" "{\"samples\":[{\"to\":${HID[$h]},\"reachable\":false,\"why\":\"test: NAT\"}]}"
    done
done
req POST "$S/v1/nodes/${ID[0]}/drain" "$ADMIN"   # so the 2x2 plan must take a home node
req POST "$S/v1/jobs/$K/schedule" "$ADMIN" '{"dry_run":true,"seed":3,"budget_ms":300}'
expect "with directions nobody could measure (NAT), a plan is found without fill values" 200 .dry_run true
check "it keeps the two home nodes, blocked both ways, apart" \
    "$(printf '%s' "$BODY" | jq --argjson a "${HID[0]}" --argjson b "${HID[1]}" \
        '[.stages | to_entries[] | .key as $s | .value.nodes | to_entries[] | {s: $s, r: .key, n: .value}]
         | (map(select(.n == $a))[0]) as $x | (map(select(.n == $b))[0]) as $y
         | if $x == null or $y == null then true else ($x.s != $y.s and $x.r != $y.r) end')" true

stop_server a

# ---- a relay that does not answer (--relay naming a closed port): the
# server says so at start-up, in /metrics, and in the first error it causes
DEAD_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DEAD=127.0.0.1:$DEAD_PORT
start_server b --relay "$DEAD" --relay-secret-file "$WORK/relay.secret" || exit 1
S=$URL_b; ADMIN=$(cat "$WORK/b/admin.token"); JOIN=$(cat "$WORK/b/join.token")
check "start-up warns that the relay does not answer, naming it" \
    "$(grep -c "relay $DEAD (--relay) does not answer: connect: Connection refused" "$WORK/b.log")" 1
relay_gauge() { curl -s "$S/metrics" | awk -v s="$1{relay=\"$DEAD\"}" '$1 == s { print $2 }'; }
check "/metrics: shoal_relay_up 0" "$(relay_gauge shoal_relay_up)" 0
two_regions 10 0.1 5 10 20 30 40

# ---- a tied head across stages: its gradient between the first and last
# stage of each replica every step (4 bytes x vocab x d_model, each end
# sending it all, in a ring of two), shown beside the stage links' and sync's
TIED='{"name":"tied","model":{"architecture":"llama","vocab_size":1000,"context_length":256,"d_model":256,"heads":8,"kv_heads":4,"ffn_dim":512,"layers":8,"tie_embeddings":true},"parallelism":{"stages":2,"replicas":2,"micro_batches":4,"micro_batch_size":8},"training":{"steps":100,"learning_rate":0.0003},"data":{"path":"/data/x.bin"}}'
req POST "$S/v1/jobs" "$ADMIN" "$TIED"; JT=$(printf '%s' "$BODY" | jq -r .id)
expect "a tied llama job is created" 201 .spec.model.tie_embeddings true
req POST "$S/v1/jobs/$JT/schedule" "$ADMIN" '{"dry_run":true,"budget_ms":200}'
expect "a tied 2x2 plan sends the head's gradient: 2 replicas x 2 ends x 4 x 1000 x 256 bytes a step" 200 \
    .bytes_per_step.tied_head 4096000
req DELETE "$S/v1/jobs/$JT" "$ADMIN"

req PUT "$S/v1/links" "${TOK[0]}" "{\"samples\":[{\"to\":${ID[1]},\"reachable\":false,\"why\":\"test: NAT\"}]}"
req PUT "$S/v1/links" "${TOK[1]}" "{\"samples\":[{\"to\":${ID[0]},\"reachable\":false,\"why\":\"test: NAT\"}]}"
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; JR=$(printf '%s' "$BODY" | jq -r .id)
NEIGHBOURS="{\"stages\":[{\"nodes\":[${ID[0]},${ID[2]}]},{\"nodes\":[${ID[1]},${ID[3]}]}]}"
req POST "$S/v1/jobs/$JR/schedule" "$ADMIN" '{"dry_run":true,"seed":3,"budget_ms":300}'
expect "with the relay silent, the search keeps the pair blocked both ways apart (no missing_links)" 200 .dry_run true
check "apart" "$(apart "$BODY")" true
req POST "$S/v1/jobs/$JR/plan" "$ADMIN" "$NEIGHBOURS"
expect "a plan that needs the silent relay is refused, naming it" 422 \
    '[.error.code, (.error.message | test("^the relay '"$DEAD"' \\(--relay\\) does not answer: connect: Connection refused; nodes '"${ID[0]}"' \\(n0\\) and '"${ID[1]}"' \\(n1\\) cannot connect"))] | tostring' \
    '["relay_unreachable",true]'
# the relay starts on that port: the next plan finds it answering
RELAY_PORT=$DEAD_PORT start_relay r || exit 1
req POST "$S/v1/jobs/$JR/plan" "$ADMIN" "$NEIGHBOURS"
expect "with the relay up, the same plan is stored" 201 .epoch 1
check "/metrics: shoal_relay_up 1" "$(relay_gauge shoal_relay_up)" 1
check "and the log says it answers again" "$(grep -c "relay $DEAD (--relay) answers again" "$WORK/b.log")" 1
req GET "$S/v1/jobs/$JR" "$ADMIN"
check "GET /v1/jobs/{id}: the plan's relay, and its link between n0 and n1 relayed" \
    "$(printf '%s' "$BODY" | jq -c --argjson a "${ID[0]}" --argjson b "${ID[1]}" \
        '[.plan.relay, [.plan.links[] | select([.from.node_id, .to.node_id] | sort == ([$a, $b] | sort)) | [.kind, .way]]]')" \
    "[\"$DEAD\",[[\"stage\",\"relay\"]]]"
# an agent whose probe of the relay fails says so; its links are not planned through it
req PUT "$S/v1/links" "${TOK[0]}" "{\"relay\":{\"address\":\"$DEAD\",\"reachable\":false,\"why\":\"test: relay refused the ticket\"}}"
expect "a failed probe of the relay is taken" 200 .accepted 1
req PUT "$S/v1/links" "${TOK[2]}" "{\"relay\":{\"address\":\"$DEAD\",\"reachable\":false,\"latency_ms\":1}}"
expect "a failed probe with measurements is refused" 422 .error.field relay
check "the server logs it, naming the relay and the node" \
    "$(grep -c "relay $DEAD (--relay) does not answer node ${ID[0]}'s probe: test: relay refused the ticket" "$WORK/b.log")" 1
check "/metrics: shoal_relay_unreachable_nodes 1" "$(relay_gauge shoal_relay_unreachable_nodes)" 1
req GET "$S/v1/agent/probes" "${TOK[0]}"
expect "and its agent is asked to probe the relay again" 200 .relay "$DEAD"
req DELETE "$S/v1/jobs/$JR" "$ADMIN"
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; JR2=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$JR2/plan" "$ADMIN" "$NEIGHBOURS"
expect "a plan that needs the relay from that node is refused, naming the relay and the node's reason" 422 \
    '[.error.code, (.error.message | test("the relay '"$DEAD"' \\(--relay\\) does not answer the probes of node '"${ID[0]}"' \\(n0\\): test: relay refused the ticket"))] | tostring' \
    '["relay_unreachable",true]'
stop_server b
check "no sanitizer reports in the servers' logs" \
    "$(cat "$WORK"/a.log "$WORK"/b.log | grep -c 'ERROR: AddressSanitizer\|runtime error:\|ERROR: LeakSanitizer')" 0
[ "$FAILS" -eq 0 ]
