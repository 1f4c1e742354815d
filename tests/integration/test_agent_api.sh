#!/usr/bin/env bash
# test_agent_api.sh - the agent side of the API over real HTTP against a real
# embedded Postgres: assignments and their long-polls (woken through
# LISTEN/NOTIFY, also from a second server), progress, failures, the
# checkpoint store, probe targets, heartbeats and per-job metrics.
set -u
. "$(dirname "$0")/lib.sh"

# A long heartbeat timeout keeps the recovery thread from marking these
# hand-driven nodes lost; one recovery is allowed, so the second failure
# ends a job.
start_server_a --heartbeat-timeout 3600 --max-recoveries 1 || exit 1

now() { date +%s.%N; }
# within NAME START LOW HIGH: checks that LOW <= now - START <= HIGH seconds.
within() {
    local took
    took=$(echo "$(now) - $2" | bc)
    if [ "$(echo "$took >= $3 && $took <= $4" | bc)" = 1 ]; then ok "$1"
    else fail "$1" "took $took s, want $3..$4"; fi
}
# bg_get URL TOKEN OUT: a GET in the background; its body lands in OUT, its
# status in OUT.status, and its pid in BG.
bg_get() {
    curl -s -o "$3" -w '%{http_code}' -H "Authorization: Bearer $2" "$1" > "$3.status" &
    BG=$!
}

# ---- four nodes, all links measured
declare -a TOK ID
for i in 0 1 2 3; do
    req POST "$S/v1/agent/register" "$JOIN" "{\"name\":\"n$i\",\"peer_address\":\"127.0.0.1:700$i\",\"hardware\":{\"tflops\":$((10 + i)),\"cpu_cores\":8,\"gpu_memory_bytes\":8000000000}}"
    TOK[$i]=$(printf '%s' "$BODY" | jq -r .token)
    ID[$i]=$(printf '%s' "$BODY" | jq -r .node_id)
done
check "four nodes register" "$(sql a "SELECT count(*) FROM nodes")" 4

# ---- probe targets
req GET "$S/v1/agent/probes" "${TOK[0]}"
expect "with no links a node is asked to probe every other live node" 200 \
       '[(.targets | map(.node_id)), .stale_after_s] | tostring' "[[${ID[1]},${ID[2]},${ID[3]}],600]"
check "each target carries its peer address" "$(printf '%s' "$BODY" | jq -r '.targets[0].peer_address')" 127.0.0.1:7001
check "with no --relay there is no relay to measure, and no ticket" "$(printf '%s' "$BODY" | jq -c '[.relay, .relay_ticket]')" \
    '[null,null]'
# a node's link to a relay: only to the server's own (server b below has one)
req PUT "$S/v1/links" "${TOK[0]}" '{"relay":{"address":"relay.example.org:7946","latency_ms":12.5,"bandwidth_gbps":0.8}}'
expect "a link to a relay on a server with none is 422, saying so" 422 \
    '[.error.field, (.error.message | test("this server has no relay"))] | tostring' '["relay.address",true]'
check "and nothing is stored" "$(sql a "SELECT count(*) FROM relay_links")" 0
req PUT "$S/v1/links" "${TOK[0]}" '{"relay":{"address":"relay.example.org:7946","latency_ms":12.5}}'
expect "a relay link without its bandwidth is 400" 400 .error.field relay.bandwidth_gbps
req PUT "$S/v1/links" "${TOK[0]}" '{"relay":{"address":"relay.example.org:7946","latency_ms":-1,"bandwidth_gbps":1}}'
expect "nor with a negative latency" 422 .error.field relay.latency_ms
req PUT "$S/v1/links" "${TOK[0]}" '{}'
expect "a report with neither samples nor a relay is 400" 400 .error.field samples
for i in 0 1 2 3; do
    s=""
    for j in 0 1 2 3; do
        [ "$i" = "$j" ] && continue
        s="$s{\"to\":${ID[$j]},\"latency_ms\":1,\"bandwidth_gbps\":10},"
    done
    req PUT "$S/v1/links" "${TOK[$i]}" "{\"samples\":[${s%,}]}"
done
req GET "$S/v1/agent/probes" "${TOK[0]}"
expect "fresh links leave nothing to probe" 200 '.targets | length' 0
sql a "UPDATE link_samples SET measured_at = now() - interval '1 hour' WHERE from_node = ${ID[0]} AND to_node = ${ID[2]}" >/dev/null
req GET "$S/v1/agent/probes" "${TOK[0]}"
expect "a link older than link_stale_s is probed again" 200 '.targets | map(.node_id) | tostring' "[${ID[2]}]"
req PUT "$S/v1/links" "${TOK[0]}" "{\"samples\":[{\"to\":${ID[2]},\"latency_ms\":1,\"bandwidth_gbps\":10}]}"
# a named report is stored once: a retry after a lost answer adds nothing
LINK_BODY="{\"report_id\":\"links-abc.1_2\",\"samples\":[{\"to\":${ID[3]},\"latency_ms\":2,\"bandwidth_gbps\":9}]}"
n_samples() { sql a "SELECT count(*) FROM link_samples WHERE from_node = ${ID[0]}"; }
before=$(n_samples)
req PUT "$S/v1/links" "${TOK[0]}" "$LINK_BODY"; expect "a named link report is stored" 200 '[.accepted, .duplicate] | tostring' '[1,false]'
req PUT "$S/v1/links" "${TOK[0]}" "$LINK_BODY"; expect "its retry is a duplicate and stores nothing" 200 '[.accepted, .duplicate] | tostring' '[0,true]'
check "one sample more, not two" "$(n_samples)" "$((before + 1))"
req PUT "$S/v1/links" "${TOK[1]}" "$(printf '%s' "$LINK_BODY" | jq -c ".samples[0].to = ${ID[2]}")"
expect "another node may use the same name" 200 .accepted 1
req PUT "$S/v1/links" "${TOK[0]}" "$(printf '%s' "$LINK_BODY" | jq -c '.report_id = "a b"')"
expect "a report name with a space is 422" 422 .error.field report_id
req PUT "$S/v1/links" "${TOK[0]}" "$(printf '%s' "$LINK_BODY" | jq -c '.report_id = 5')"
expect "a report name that is no string is 400" 400 .error.field report_id
req POST "$S/v1/agent/register" "$JOIN" '{"name":"late","peer_address":"127.0.0.1:7009","hardware":{"tflops":1,"cpu_cores":2}}'
N5=$(printf '%s' "$BODY" | jq -r .node_id); T5=$(printf '%s' "$BODY" | jq -r .token)
req GET "$S/v1/agent/probes" "${TOK[0]}"
expect "a new node is a probe target" 200 '.targets | map(.node_id) | tostring' "[$N5]"
sql a "UPDATE nodes SET last_heartbeat_at = now() - interval '1 hour' WHERE id = $N5" >/dev/null
req GET "$S/v1/agent/probes" "${TOK[0]}"
expect "a node without a recent heartbeat is not" 200 '.targets | length' 0
req POST "$S/v1/agent/heartbeat" "$T5" '{"state":"idle"}'
req POST "$S/v1/nodes/$N5/drain" "$ADMIN"
req GET "$S/v1/agent/probes" "${TOK[0]}"
expect "nor is a draining node" 200 '.targets | length' 0
req GET "$S/v1/agent/probes" "$ADMIN";  expect "probes need a node token" 403

# ---- heartbeat may move the peer address
req POST "$S/v1/agent/heartbeat" "${TOK[0]}" '{"state":"idle","peer_address":"127.0.0.1:7100"}'
expect "a heartbeat may carry a new peer address" 200 .peer_address 127.0.0.1:7100
req GET "$S/v1/nodes/${ID[0]}" "$ADMIN"; expect "and the node keeps its id with it" 200 .peer_address 127.0.0.1:7100
req POST "$S/v1/agent/heartbeat" "${TOK[0]}" '{"state":"idle","peer_address":"nowhere"}'
expect "a bad peer address in a heartbeat is 422" 422 .error.field peer_address
req POST "$S/v1/agent/heartbeat" "${TOK[0]}" '{"state":"idle","peer_address":"169.254.169.254:80"}'
expect "so is the metadata service's address (the server would probe it)" 422 .error.field peer_address
req POST "$S/v1/agent/heartbeat" "${TOK[0]}" '{"state":"idle"}'
expect "a heartbeat without one keeps it" 200 .peer_address 127.0.0.1:7100
req POST "$S/v1/agent/heartbeat" "${TOK[0]}" '{"state":"busy","peer_address":"127.0.0.1:7200"}'
expect "a heartbeat that says it trains may not move the address its neighbours dial" 422 .error.field peer_address
req POST "$S/v1/agent/heartbeat" "${TOK[0]}" '{"state":"busy","peer_address":"127.0.0.1:7100"}'
expect "(its own address again is fine)" 200 .peer_address 127.0.0.1:7100
req POST "$S/v1/agent/heartbeat" "${TOK[0]}" '{"state":"idle"}'

# ---- no assignment yet
req GET "$S/v1/agent/assignment" "${TOK[0]}";   expect "no assignment before a job is scheduled" 200 .assignment null
t0=$(now); req GET "$S/v1/agent/assignment?wait=2" "${TOK[0]}"
expect "a long-poll with nothing changing answers 200" 200 .assignment null
within "and answers after 80-100% of the wait" "$t0" 1.5 3.5
req GET "$S/v1/agent/assignment?wait=61" "${TOK[0]}";        expect "wait over 60 is 400" 400 .error.field wait
req GET "$S/v1/agent/assignment?wait=x" "${TOK[0]}";         expect "a wait that is no number is 400" 400 .error.field wait
req GET "$S/v1/agent/assignment?wait=1&job=3" "${TOK[0]}";   expect "job without epoch is 400" 400 .error.field epoch
req GET "$S/v1/agent/assignment" "$ADMIN";                   expect "the assignment needs a node token" 403

# ---- jobs: data format text, resume_from checks
JOB='{"name":"agent-api","model":{"vocab_size":256,"context_length":64,"d_model":64,"heads":4,"layers":4},"parallelism":{"stages":2,"replicas":2,"micro_batches":2,"micro_batch_size":2},"training":{"steps":3,"learning_rate":0.001},"data":{"path":"/data/corpus.txt","format":"text"},"checkpoint_interval":1}'
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c '.model.vocab_size = 1000')"
expect "text data needs a 256-token vocabulary" 422 .error.field model.vocab_size
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c '.resume_from = {"job_id": 424242, "step": 1}')"
expect "resume_from naming no job is 422" 422 .error.field resume_from
req POST "$S/v1/jobs" "$ADMIN" "$JOB"
expect "create a 2x2 text job" 201 '[.state, .spec.data.format, .spec.resume_from, .failure_reason, .started_at] | tostring' '["pending","text",null,null,null]'
J=$(printf '%s' "$BODY" | jq -r .id)
check "the job has a 64-hex-digit peer secret" "$(sql a "SELECT peer_secret ~ '^[0-9a-f]{64}\$' FROM jobs WHERE id = $J")" t
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
expect "schedule it" 201 .epoch 1
req GET "$S/v1/jobs/$J" "$ADMIN"; PLAN=$(printf '%s' "$BODY" | jq -c .plan.assignments); SPEC=$(printf '%s' "$BODY" | jq -cS .spec)

# ---- every node's assignment
declare -a ST RP
for i in 0 1 2 3; do
    req GET "$S/v1/agent/assignment" "${TOK[$i]}"
    a=$(printf '%s' "$BODY" | jq -c .assignment)
    ST[$i]=$(printf '%s' "$a" | jq .stage); RP[$i]=$(printf '%s' "$a" | jq .replica)
    want=$(printf '%s' "$PLAN" | jq -c --argjson n "${ID[$i]}" '.[] | select(.node_id == $n) | [.stage, .replica, .layer_start, .layer_end]')
    check "node $i: its tasklet and layers are the plan's" "$(printf '%s' "$a" | jq -c '[.stage, .replica, .layer_start, .layer_end]')" "$want"
    check "node $i: job, epoch, state and shape" "$(printf '%s' "$a" | jq -c '[.job_id, .epoch, .state, .stages, .replicas, .resume]')" "[$J,1,\"scheduled\",2,2,null]"
    check "node $i: the pipeline is its replica's stages in order" \
          "$(printf '%s' "$a" | jq -c '[.pipeline[] | [.stage, .node_id, .layer_start, .layer_end]]')" \
          "$(printf '%s' "$PLAN" | jq -c --argjson r "${RP[$i]}" '[.[] | select(.replica == $r)] | sort_by(.stage) | map([.stage, .node_id, .layer_start, .layer_end])')"
    check "node $i: the group is its stage's replicas in order" \
          "$(printf '%s' "$a" | jq -c '[.group[] | [.replica, .node_id]]')" \
          "$(printf '%s' "$PLAN" | jq -c --argjson s "${ST[$i]}" '[.[] | select(.stage == $s)] | sort_by(.replica) | map([.replica, .node_id])')"
    check "node $i: peers come with their addresses" "$(printf '%s' "$a" | jq '[.pipeline[], .group[]] | all(.peer_address | test("^127\\.0\\.0\\.1:7[0-9]+$"))')" true
    check "node $i: the spec is the job's" "$(printf '%s' "$a" | jq -cS .spec)" "$SPEC"
    printf '%s' "$a" > "$WORK/assignment.$i"
    check "node $i: the job's secret stays on the server" "$(printf '%s' "$a" | jq 'has("peer_secret")')" false
done
# Every link has a key of its own, given to its two ends only:
# HMAC-SHA256(job secret, "shoal-link-v1" | job | epoch | lesser role | NUL |
# greater role), checked against Python's hmac.
check "each node holds the keys of its own links, and they are the job secret's (hmac)" "$(
    python3 - "$(sql a "SELECT peer_secret FROM jobs WHERE id = $J")" "$WORK"/assignment.[0-3] <<'PY'
import hashlib, hmac, json, struct, sys
secret = bytes.fromhex(sys.argv[1])
keys, bad = {}, []
for path in sys.argv[2:]:
    a = json.load(open(path))
    me = next(e["node_id"] for e in a["pipeline"] if e["stage"] == a["stage"])
    role = lambda s, r, n: b"stage=%d replica=%d node=%d" % (s, r, n)
    mine = role(a["stage"], a["replica"], me)
    for e in a["pipeline"] + a["group"]:
        other = role(e.get("stage", a["stage"]), e.get("replica", a["replica"]), e["node_id"])
        if other == mine:
            if "link_key" in e: bad.append("a key of a link to itself")
            continue
        lo, hi = sorted([mine, other])
        msg = b"shoal-link-v1" + struct.pack("<qI", a["job_id"], a["epoch"]) + lo + b"\0" + hi
        if e.get("link_key") != hmac.new(secret, msg, hashlib.sha256).hexdigest():
            bad.append("%s -> %s" % (mine, other))
        keys.setdefault((lo, hi), set()).add(e.get("link_key"))
print(" ".join(bad) or "ok", len(keys), sum(len(v) for v in keys.values()), len({k for v in keys.values() for k in v}))
PY
)" "ok 4 4 4"
check "the four tasklets are distinct" "$(for i in 0 1 2 3; do echo "${ST[$i]},${RP[$i]}"; done | sort -u | wc -l)" 4
# tok_of STAGE REPLICA: the token of the node at that tasklet.
tok_of() { local i; for i in 0 1 2 3; do [ "${ST[$i]}" = "$1" ] && [ "${RP[$i]}" = "$2" ] && echo "${TOK[$i]}"; done; }

# ---- a heartbeat while training names the node's job and step
req POST "$S/v1/agent/heartbeat" "$(tok_of 0 0)" "$(printf '{"state":"busy","job_id":%s,"step":7}' "$J")"
expect "heartbeat while training" 200 .state busy
check "the node shows its job and step" \
    "$(sql a "SELECT current_job_id || ':' || current_step FROM nodes WHERE current_job_id IS NOT NULL")" "$J:7"
req POST "$S/v1/agent/heartbeat" "$(tok_of 0 0)" '{"state":"idle","job_id":null,"step":null}'

# ---- what an idle agent holds for a live resume (agent/train/live.h): a stage of a job it is in
req POST "$S/v1/agent/heartbeat" "$(tok_of 0 0)" '{"state":"idle","held":{"job_id":'"$J"',"layer_start":0,"layer_end":2,"step":12}}'
expect "an idle heartbeat may say what it holds" 200 .state idle
check "the held stage is stored" "$(sql a "SELECT held_job_id || ':' || held_layer_start || '..' || held_layer_end || '@' || held_step FROM nodes WHERE held_job_id IS NOT NULL")" "$J:0..2@12"
req POST "$S/v1/agent/heartbeat" "$(tok_of 0 0)" '{"state":"busy","held":{"job_id":'"$J"',"layer_start":0,"layer_end":2,"step":12}}'
expect "a busy node holding a stage is 422" 422 .error.field held
req POST "$S/v1/agent/heartbeat" "$(tok_of 0 0)" '{"state":"idle","held":{"job_id":'"$J"',"layer_start":2,"layer_end":2,"step":12}}'
expect "a held stage of no layers is 422" 422 .error.field held.layer_end
req POST "$S/v1/agent/heartbeat" "$(tok_of 0 0)" '{"state":"idle"}'
check "a heartbeat holding nothing clears it" "$(sql a "SELECT count(*) FROM nodes WHERE held_job_id IS NOT NULL")" 0

id_of() { local i; for i in 0 1 2 3; do [ "${ST[$i]}" = "$1" ] && [ "${RP[$i]}" = "$2" ] && echo "${ID[$i]}"; done; }
# tok_by_id NODE / id_by_tok TOKEN: one of the four nodes' token by id, and back.
tok_by_id() { local i; for i in 0 1 2 3; do [ "${ID[$i]}" = "$1" ] && echo "${TOK[$i]}"; done; }
id_by_tok() { local i; for i in 0 1 2 3; do [ "${TOK[$i]}" = "$1" ] && echo "${ID[$i]}"; done; }

# ---- long-polls
req GET "$S/v1/agent/assignment?wait=5&job=$J&epoch=7" "${TOK[0]}"
expect "a long-poll that knows another epoch answers at once" 200 .assignment.epoch 1
t0=$(now); req GET "$S/v1/agent/assignment?wait=2&job=$J&epoch=1" "${TOK[0]}"
expect "a long-poll on the current assignment answers it after the wait" 200 .assignment.epoch 1
within "after 80-100% of two seconds" "$t0" 1.5 3.5
bg_get "$S/v1/agent/assignment?wait=20&job=$J&epoch=1" "${TOK[1]}" "$WORK/lp1"; p1=$BG
sleep 1
t0=$(now)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":100}'; check "re-scheduling makes epoch 2" "$STATUS $(printf '%s' "$BODY" | jq .epoch)" "201 2"
wait $p1
within "a waiting long-poll wakes when the job is re-scheduled" "$t0" 0 4
check "and answers the new epoch" "$(cat "$WORK/lp1.status") $(jq .assignment.epoch "$WORK/lp1")" "200 2"

# ---- two servers on one database
export SHOAL_ADMIN_TOKEN="$ADMIN" SHOAL_JOIN_TOKEN="$JOIN"
# Servers on one database share one checkpoint store (--checkpoint-dir).
start_server b --database-url "host=$WORK/a/pg-socket dbname=shoal user=shoal" --max-long-polls 1 --max-checkpoint-bytes 100000 \
    --checkpoint-dir "$WORK/a/checkpoints" --relay relay.example.org:7946 || exit 1
unset SHOAL_ADMIN_TOKEN SHOAL_JOIN_TOKEN
B=$URL_b
# server b names a relay: its secret is made beside its tokens, a node's
# probes name the relay with a ticket, and a link is stored only to it
check "a server with --relay makes the secret it shares with the relay (mode 0600)" \
    "$(stat -c %a "$WORK/b/relay.secret") $(grep -c '^shoal_relay_[0-9a-f]\{64\}$' "$WORK/b/relay.secret")" "600 1"
req GET "$B/v1/agent/probes" "${TOK[3]}"
expect "its probe targets name the relay and give the node a ticket to probe it" 200 \
    '[.relay, (.relay_ticket | test("^[0-9a-f]{176}$"))] | tostring' '["relay.example.org:7946",true]'
req PUT "$B/v1/links" "${TOK[0]}" '{"relay":{"address":"relay.example.org:7946","latency_ms":12.5,"bandwidth_gbps":0.8}}'
expect "a link to the server's relay alone is a report" 200 .accepted 1
check "it is stored for that relay" "$(sql a "SELECT relay, latency_ms, bandwidth_gbps FROM relay_links WHERE node_id = ${ID[0]}")" \
    "relay.example.org:7946|12.5|0.8"
req PUT "$B/v1/links" "${TOK[0]}" '{"samples":[],"relay":{"address":"made-up.example.org:1","latency_ms":1,"bandwidth_gbps":9}}'
expect "a link to another relay is 422, naming the server's" 422 \
    '[.error.field, (.error.message | test("this server.s relay is .relay.example.org:7946."))] | tostring' \
    '["relay.address",true]'
check "and stores nothing" "$(sql a "SELECT count(*) FROM relay_links")" 1
bg_get "$B/v1/agent/assignment?wait=20&job=$J&epoch=2" "${TOK[2]}" "$WORK/lp2"; p2=$BG
sleep 1
t0=$(now); req GET "$B/v1/agent/assignment?wait=5&job=$J&epoch=2" "${TOK[3]}"
within "past --max-long-polls a long-poll is answered at once" "$t0" 0 1.5
req GET "$B/metrics"; check "server b counts its waiting long-poll" "$(printf '%s\n' "$BODY" | grep '^shoal_assignment_long_polls ')" "shoal_assignment_long_polls 1"
t0=$(now)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":100}'
wait $p2
within "a long-poll on server b wakes when server a re-schedules" "$t0" 0 4
check "with epoch 3" "$(jq .assignment.epoch "$WORK/lp2")" 3

# ---- re-read every assignment of the current epoch
E=3
for i in 0 1 2 3; do
    req GET "$S/v1/agent/assignment" "${TOK[$i]}"
    ST[$i]=$(printf '%s' "$BODY" | jq .assignment.stage); RP[$i]=$(printf '%s' "$BODY" | jq .assignment.replica)
done

# ---- which all-reduce a group uses: NCCL only when every member has a GPU
allreduce_of() { req GET "$S/v1/agent/assignment" "$(tok_of "$1" "$2")"; printf '%s' "$BODY" | jq -r .assignment.allreduce; }
check "CPU nodes sum their gradients over the TCP ring" "$(allreduce_of 0 0)$(allreduce_of 1 1)" ringring
sql a "UPDATE nodes SET gpu_count = 1 WHERE id IN ($(id_of 0 0), $(id_of 0 1), $(id_of 1 0))" >/dev/null
check "a group of GPU nodes uses NCCL, each member is told so" "$(allreduce_of 0 0) $(allreduce_of 0 1)" "nccl nccl"
check "a group with one CPU node stays on the ring, for every member" "$(allreduce_of 1 0) $(allreduce_of 1 1)" "ring ring"
sql a "UPDATE nodes SET gpu_count = 0" >/dev/null

# ---- the NCCL id of a stage's data-parallel group
hex128() { head -c 128 /dev/urandom | od -An -tx1 -v | tr -d ' \n'; }
NID=$(hex128)
# nccl_put TOKEN [JQ-EDIT]: replica 0's put of NID for stage 0 in epoch E.
nccl_put() {
    req PUT "$S/v1/agent/nccl" "$1" "$(printf '{"job_id":%s,"epoch":%s,"stage":0,"unique_id":"%s"}' "$J" "$E" "$NID" | jq -c "${2:-.}")"
}
NG="$S/v1/agent/nccl?job=$J&epoch=$E&stage=0"
req GET "$NG" "$(tok_of 0 1)";  expect "nccl: no id before replica 0 puts it is 404" 404 .error.code not_found
nccl_put "$(tok_of 0 0)";       expect "nccl: replica 0 puts its stage's id" 200 .unique_id "$NID"
req GET "$NG" "$(tok_of 0 1)";  expect "nccl: replica 1 gets the same id" 200 .unique_id "$NID"
req GET "$NG" "$(tok_of 0 0)";  expect "nccl: replica 0 may read it back" 200 .unique_id "$NID"
nccl_put "$(tok_of 0 1)";       expect "nccl: replica 1 may not put it" 403 .error.code forbidden
nccl_put "$(tok_of 1 0)";       expect "nccl: nor may replica 0 of another stage" 403 .error.code forbidden
req GET "$NG" "$(tok_of 1 1)";  expect "nccl: a node of another stage may not read it" 403 .error.code forbidden
# A node outside the job learns nothing of it: to it the job does not exist
# (its state, shape and epoch are other nodes' business).
req GET "$NG" "$T5";            expect "nccl: to a node outside the job, the job does not exist" 404 .error.message "job $J does not exist"
nccl_put "$T5";                 expect "nccl: nor for a put" 404 .error.message "job $J does not exist"
req POST "$S/v1/agent/progress" "$T5" "$(printf '{"job_id":%s,"epoch":%s,"step":0,"stage":9,"replica":0,"iteration_s":1,"compute_s":1,"send_s":0,"recv_wait_s":0,"allreduce_s":0,"bubble_s":0,"tokens":1}' "$J" "$E")"
expect "progress: nor for a report (not even that stage 9 is out of range)" 404 .error.message "job $J does not exist"
req POST "$S/v1/agent/failure" "$T5" "$(printf '{"job_id":%s,"epoch":%s,"stage":0,"replica":0,"reason":"x"}' "$J" "$E")"
expect "failure: nor for a failure report (its state is not said)" 404 .error.message "job $J does not exist"
req POST "$S/v1/agent/dataset" "$T5" "$(printf '{"job_id":%s,"epoch":%s,"source":"data","sha256":"%064d"}' "$J" "$E" 0)"
expect "dataset: nor for a dataset digest" 404 .error.message "job $J does not exist"
req POST "$S/v1/agent/heartbeat" "$T5" "$(printf '{"state":"busy","job_id":%s,"step":3}' "$J")"
expect "a heartbeat may not claim to train a job the node holds no tasklet of" 422 .error.field job_id
req POST "$S/v1/agent/heartbeat" "$T5" "$(printf '{"state":"idle","held":{"job_id":%s,"layer_start":0,"layer_end":1,"step":3}}' "$J")"
expect "nor to hold its state" 422 .error.field held.job_id
check "and nothing of it was written" "$(sql a "SELECT coalesce(current_job_id, 0), coalesce(held_job_id, 0) FROM nodes WHERE id = $N5")" "0|0"
req GET "$NG" "$ADMIN";         expect "nccl: the id is for node tokens only" 403
nccl_put "$(tok_of 0 0)" '.epoch = 2';        expect "nccl: a put for a past epoch is 409" 409 .error.code stale_epoch
req GET "$S/v1/agent/nccl?job=$J&epoch=2&stage=0" "$(tok_of 0 1)"
expect "nccl: so is a get" 409 .error.code stale_epoch
nccl_put "$(tok_of 0 0)" '.job_id = 424242';  expect "nccl: a put for an unknown job is 404" 404 .error.code not_found
req GET "$S/v1/agent/nccl?job=424242&epoch=1&stage=0" "$(tok_of 0 1)"
expect "nccl: so is a get" 404 .error.code not_found
req GET "$S/v1/agent/nccl?job=$J&epoch=$E&stage=1" "$(tok_of 1 1)"
expect "nccl: another stage's group has its own id" 404 .error.code not_found
nccl_put "$(tok_of 0 0)" '.stage = 2';        expect "nccl: a stage the job does not have is 422" 422 .error.field stage
nccl_put "$(tok_of 0 0)" '.stage = 1024';     expect "nccl: a stage out of range is 422" 422 .error.field stage
nccl_put "$(tok_of 0 0)" '.unique_id = ("zz" + .unique_id[2:])'
expect "nccl: an id that is not hex is 422" 422 .error.field unique_id
nccl_put "$(tok_of 0 0)" '.unique_id = .unique_id[2:]'
expect "nccl: an id of 254 hex digits is 422" 422 .error.field unique_id
nccl_put "$(tok_of 0 0)" '.unique_id = 7';    expect "nccl: an id that is no string is 400" 400 .error.field unique_id
nccl_put "$(tok_of 0 0)" 'del(.unique_id)';   expect "nccl: a put without its id is 400" 400 .error.code missing_field
nccl_put "$(tok_of 0 0)" '.rank = 0';         expect "nccl: an unknown field is 400" 400 .error.field rank
req PUT "$S/v1/agent/nccl" "$(tok_of 0 0)" '{"job_id":'; expect "nccl: malformed JSON is 400" 400 .error.code invalid_json
req GET "$S/v1/agent/nccl?job=$J&epoch=$E" "$(tok_of 0 1)"
expect "nccl: a get without its stage is 400" 400 .error.field stage
req GET "$S/v1/agent/nccl?job=$J&epoch=$E&stage=x" "$(tok_of 0 1)"
expect "nccl: a stage that is no number is 400" 400 .error.field stage
req GET "$NG" "$(tok_of 0 1)";  expect "nccl: refused puts changed nothing" 200 .unique_id "$NID"
NID=$(hex128)
nccl_put "$(tok_of 0 0)" '.unique_id |= ascii_upcase'
expect "nccl: a re-put replaces the id, upper-case hex stored lower-case" 200 .unique_id "$NID"
req GET "$NG" "$(tok_of 0 1)";  expect "nccl: and replica 1 gets the new one" 200 .unique_id "$NID"
check "nccl: one row per group" "$(sql a "SELECT count(*) FROM nccl_ids WHERE job_id = $J")" 1

# ---- progress
# progress STAGE REPLICA STEP LOSS [TOKEN] [EPOCH]: posts one report.
progress() {
    req POST "$S/v1/agent/progress" "${5:-$(tok_of "$1" "$2")}" \
        "{\"job_id\":$J,\"epoch\":${6:-$E},\"step\":$3,\"stage\":$1,\"replica\":$2,\"loss\":$4,\"iteration_s\":0.$((5 + $1)),\"compute_s\":0.3,\"send_s\":0.01,\"recv_wait_s\":0.02,\"allreduce_s\":0.03,\"bubble_s\":0.1,\"tokens\":256}"
}
progress 0 0 0 null; expect "the first report is recorded" 201 '[.recorded, .state] | tostring' '[true,"running"]'
req GET "$S/v1/jobs/$J" "$ADMIN";  expect "and the job is running, with started_at" 200 '[.state, (.started_at != null)] | tostring' '["running",true]'
check "comm_s is send + receive wait + all-reduce" "$(sql a "SELECT round(comm_s::numeric, 6) FROM job_steps WHERE job_id = $J AND step = 0")" 0.060000
progress 0 0 0 null; expect "a repeated report is no duplicate" 200 .recorded false
progress 0 0 1 null "" 2; expect "a report from a past epoch is 409" 409 .error.code stale_epoch
progress 0 0 1 null "$(tok_of 1 0)"; expect "a report from a node that is not at the tasklet is 409" 409 .error.code stale_epoch
progress 0 0 3 null; expect "a step past the job's steps is 422" 422 .error.field step
progress 1 0 1 null; expect "the last stage must report its loss" 422 .error.field loss
progress 2 0 1 null "$(tok_of 0 0)"; expect "a stage the job does not have is 422" 422 .error.field stage
req POST "$S/v1/agent/progress" "$(tok_of 0 0)" '{"job_id":424242,"epoch":1,"step":0,"stage":0,"replica":0,"iteration_s":1,"compute_s":1,"send_s":0,"recv_wait_s":0,"allreduce_s":0,"bubble_s":0,"tokens":1}'
expect "a report for an unknown job is 404" 404 .error.code not_found
bad_progress() {  # NAME STATUS FIELD JQ-EDIT
    req POST "$S/v1/agent/progress" "$(tok_of 0 0)" "$(printf '{"job_id":%s,"epoch":%s,"step":1,"stage":0,"replica":0,"loss":null,"iteration_s":1,"compute_s":1,"send_s":0,"recv_wait_s":0,"allreduce_s":0,"bubble_s":0,"tokens":1}' "$J" "$E" | jq -c "$4")"
    expect "$1" "$2" .error.field "$3"
}
bad_progress "progress: missing timing is 400"   400 iteration_s 'del(.iteration_s)'
bad_progress "progress: negative time is 422"    422 compute_s '.compute_s = -1'
bad_progress "progress: a string loss is 400"    400 loss '.loss = "low"'
bad_progress "progress: unknown field is 400"    400 speed '.speed = 1'
bad_progress "progress: fractional step is 400"  400 step '.step = 1.5'
req POST "$S/v1/agent/progress" "$(tok_of 0 0)" '{"job_id":1,'; expect "progress: malformed JSON is 400" 400 .error.code invalid_json
req POST "$S/v1/agent/progress" "$ADMIN" '{}';                   expect "progress needs a node token" 403
check "refused reports store nothing" "$(sql a "SELECT count(*) FROM job_steps WHERE job_id = $J")" 1
req GET "$S/v1/nodes/$(id_of 0 0)" "$ADMIN"
expect "the reporting node is busy with the job at its step" 200 '[.state, .current_job_id, .current_step] | tostring' "[\"busy\",$J,0]"

# ---- a full step 0 and 1: progress in the job and metrics
progress 0 1 0 null; progress 1 0 0 5.5; progress 1 1 0 5.0
for r in 0 1; do progress 0 "$r" 1 null; done
progress 1 0 1 4.5; progress 1 1 1 4.0
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "the job shows the latest step and its mean loss" 200 '[.progress.step, .progress.loss] | tostring' '[1,4.25]'
check "and the loss curve" "$(printf '%s' "$BODY" | jq -c .progress.losses)" '[[0,5.25],[1,4.25]]'
req GET "$S/metrics"; printf '%s\n' "$BODY" > "$WORK/metrics"
check "metric: the job's step" "$(grep "^shoal_job_step{job_id=\"$J\"}" "$WORK/metrics")" "shoal_job_step{job_id=\"$J\"} 1"
check "metric: the job's loss" "$(grep "^shoal_job_loss{job_id=\"$J\"}" "$WORK/metrics")" "shoal_job_loss{job_id=\"$J\"} 4.25"
check "metric: mean step time" "$(grep "^shoal_job_step_seconds{job_id=\"$J\"}" "$WORK/metrics" | awk '{printf "%.2f", $2}')" 0.55
# tokens: 256 per replica, 2 replicas, over the slowest iteration 0.6 s
check "metric: tokens per second" "$(grep "^shoal_job_tokens_per_second{job_id=\"$J\"}" "$WORK/metrics" | awk '{printf "%.1f", $2}')" 853.3
# step, step time, tokens per second, loss, validation loss, the step's
# parts, bytes sent per step, and stragglers
check "metric: families have HELP and TYPE" "$(grep -c '^# TYPE shoal_job_[a-z_]* gauge$' "$WORK/metrics")" 8
check "metric: the listener is up" "$(grep '^shoal_assignment_listener_up ' "$WORK/metrics")" "shoal_assignment_listener_up 1"

# ---- checkpoints
# Real stage files (the server checks each header against the job and the
# stage): stage 0 and 1 of J's model, split as its plan splits the layers;
# other.bin is stage 0 again with other weights, alien.bin stage 0 of another
# model (d_model 32).
req GET "$S/v1/jobs/$J" "$ADMIN"
MID=$(printf '%s' "$BODY" | jq '.plan.assignments[] | select(.stage == 0 and .replica == 0) | .layer_end')
mkstage() { python3 "$(dirname "$0")/stage_file.py" "$@"; }   # OUT V T C NH L LS LE FIRST LAST STEP [SEED]
mkstage "$WORK/stage0.bin" 256 64 64 4 4 0 "$MID" 1 0 1 1
mkstage "$WORK/stage1.bin" 256 64 64 4 4 "$MID" 4 0 1 1 1
mkstage "$WORK/other.bin" 256 64 64 4 4 0 "$MID" 1 0 1 2
mkstage "$WORK/alien.bin" 256 64 32 4 4 0 "$MID" 1 0 1 1
size() { stat -c %s "$1"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
put_ckpt() {  # URL TOKEN FILE [SHA]
    local sha_hdr=()
    [ -n "${4-}" ] && sha_hdr=(-H "X-Shoal-SHA256: $4")
    STATUS=$(curl -s -o "$WORK/body" -w '%{http_code}' -X PUT -H "Authorization: Bearer $2" \
             -H 'Content-Type: application/octet-stream' "${sha_hdr[@]}" --data-binary "@$3" "$1")
    BODY=$(cat "$WORK/body")
}
CK="$S/v1/jobs/$J/checkpoints"
put_ckpt "$CK/1/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin" "$(sha "$WORK/stage0.bin")"
expect "upload stage 0 of step 1 with its checksum" 201 '[.job_id, .step, .stage, .bytes, .sha256, .complete] | tostring' "[$J,1,0,$(size "$WORK/stage0.bin"),\"$(sha "$WORK/stage0.bin")\",false]"
put_ckpt "$CK/1/stages/0" "$(tok_of 0 0)" "$WORK/other.bin" "$(sha "$WORK/stage0.bin")"
expect "a wrong checksum is 422" 422 .error.code checksum_mismatch
put_ckpt "$CK/1/stages/0" "$(tok_of 0 1)" "$WORK/stage0.bin"
expect "replica 1 may not upload its stage's checkpoint" 403 .error.code forbidden
put_ckpt "$CK/1/stages/0" "$ADMIN" "$WORK/stage0.bin"; expect "nor may the admin" 403
put_ckpt "$CK/1/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin" "xyz"; expect "a malformed checksum header is 400" 400 .error.field X-Shoal-SHA256
# A refused upload's answer waits until its body is read: closing with
# unread bytes would reset the connection and could destroy the answer.  A
# client that asked "Expect: 100-continue" is answered at once instead.
# refused_upload [EXPECT_HEADER]: "<before> <after>": the status line seen
# within 1 s of the headers, then after the body.
refused_upload() {
    local port=${S##*:} before="" after=""
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return
    printf 'PUT /v1/jobs/%s/checkpoints/1/stages/0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %s\r\n%s\r\n' "$J" "$ADMIN" "$(size "$WORK/stage0.bin")" "${1-}" >&3
    IFS= read -r -t 1 before <&3
    [ -z "$before" ] && { cat "$WORK/stage0.bin" >&3 2>/dev/null; IFS= read -r -t 10 after <&3; }
    exec 3<&- 3>&-
    before=${before%$'\r'}; after=${after%$'\r'}
    printf '%s|%s' "${before:-none}" "${after:-none}"
}
check "a refused upload is answered after its body, not before" "$(refused_upload)" "none|HTTP/1.1 403 Forbidden"
check "with Expect: 100-continue it is answered at once" "$(refused_upload $'Expect: 100-continue\r\n')" \
    "HTTP/1.1 403 Forbidden|none"
put_ckpt "$S/v1/jobs/424242/checkpoints/1/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin"; expect "an unknown job is 404" 404
put_ckpt "$CK/9/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin"; expect "a step past the job's end is 422" 422 .error.field step
req GET "$CK" "$ADMIN"
expect "the list shows one stage of step 1, incomplete" 200 '[.checkpoints[0].step, (.checkpoints[0].stages | length), .checkpoints[0].complete] | tostring' '[1,1,false]'
check "the refused upload kept nothing" "$(printf '%s' "$BODY" | jq -r '.checkpoints[0].stages[0].sha256')" "$(sha "$WORK/stage0.bin")"
put_ckpt "$CK/1/stages/1" "$(tok_of 1 0)" "$WORK/stage1.bin"
expect "upload stage 1 without a checksum header: now complete" 201 '[.bytes, .complete] | tostring' "[$(size "$WORK/stage1.bin"),true]"
check "without layers in the query the file's own are recorded" \
    "$(sql a "SELECT layer_start || '..' || layer_end FROM checkpoints WHERE job_id = $J AND step = 1 AND stage = 1")" "$MID..4"
put_ckpt "$CK/0/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin"
expect "step 0 is the admin's initial weights: a node's upload of it is 422" 422 .error.field step
put_ckpt "$CK/2/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin"
expect "stage 0 of step 2 alone is incomplete" 201 .complete false
req GET "$CK" "$ADMIN"
expect "the list is newest first and says which steps are complete" 200 '[.checkpoints[] | [.step, .complete]] | tostring' '[[2,false],[1,true]]'
STATUS=$(curl -s -D "$WORK/headers" -o "$WORK/got.bin" -w '%{http_code}' -H "Authorization: Bearer $ADMIN" "$CK/1/stages/0")
check "download stage 0 as the admin" "$STATUS" 200
if cmp -s "$WORK/got.bin" "$WORK/stage0.bin"; then ok "the bytes come back identical"; else fail "the bytes come back identical"; fi
check "with their checksum in X-Shoal-SHA256" "$(grep -i '^X-Shoal-SHA256:' "$WORK/headers" | tr -d '\r' | cut -d' ' -f2)" "$(sha "$WORK/stage0.bin")"
check "as application/octet-stream" "$(grep -i '^Content-Type:' "$WORK/headers" | tr -d '\r')" "Content-Type: application/octet-stream"
STATUS=$(curl -s -o "$WORK/got.bin" -w '%{http_code}' -H "Authorization: Bearer $(tok_of 1 1)" "$CK/1/stages/1")
check "any node of the job may download" "$STATUS" 200
if cmp -s "$WORK/got.bin" "$WORK/stage1.bin"; then ok "stage 1 comes back identical"; else fail "stage 1 comes back identical"; fi
req GET "$CK/1/stages/1" "$T5";          expect "a node outside the job may not" 403
req GET "$CK/3/stages/0" "$ADMIN";       expect "an unknown checkpoint is 404" 404 .error.code not_found
req GET "$CK/1/stages/x" "$ADMIN";       expect "a stage that is no number is 400" 400 .error.code invalid_id
req GET "$CK" "${TOK[0]}";               expect "the list is for the admin" 403
put_ckpt "$CK/1/stages/0" "$(tok_of 0 0)" "$WORK/other.bin" "$(sha "$WORK/other.bin")"
expect "a re-upload replaces the file" 201 .sha256 "$(sha "$WORK/other.bin")"
curl -s -o "$WORK/got.bin" -H "Authorization: Bearer $ADMIN" "$CK/1/stages/0"
if cmp -s "$WORK/got.bin" "$WORK/other.bin"; then ok "and the new bytes are served"; else fail "and the new bytes are served"; fi
put_ckpt "$CK/1/stages/0" "$(tok_of 0 0)" "$WORK/alien.bin"
expect "a stage file of another model is 422" 422 .error.field body
curl -s -o "$WORK/got.bin" -H "Authorization: Bearer $ADMIN" "$CK/1/stages/0"
if cmp -s "$WORK/got.bin" "$WORK/other.bin"; then ok "and leaves the stored file as it was"; else fail "and leaves the stored file as it was"; fi
rm -f "$WORK/got.bin"
# A failure at each step of a re-upload leaves the stored checkpoint, file
# and row, exactly as it was: a wrong checksum, a header whose layers no
# stage holds ([0, 0): it used to pass the header check, fail the
# database's and destroy the good file), and the database refusing the row
# after the file was moved into place (a trigger).  At a step with nothing
# stored such a failure leaves no file.
stored() {  # the row and the bytes of step 1's stage 0
    printf '%s %s' "$(sql a "SELECT bytes, sha256, path, layer_start, layer_end, node_id FROM checkpoints
                             WHERE job_id = $J AND step = 1 AND stage = 0")" \
        "$(sha256sum < "$WORK/a/$(sql a "SELECT path FROM checkpoints WHERE job_id = $J AND step = 1 AND stage = 0")" | cut -d' ' -f1)"
}
GOOD=$(stored)
mkstage "$WORK/empty.bin" 256 64 64 4 4 0 0 1 0 1 1
put_ckpt "$CK/1/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin" "$(sha "$WORK/other.bin")"
check "a re-upload with a wrong checksum: 422, the stored checkpoint as it was" "$STATUS $(stored)" "422 $GOOD"
put_ckpt "$CK/1/stages/0" "$(tok_of 0 0)" "$WORK/empty.bin"
check "a re-upload of a stage holding no layer (layer_start 0, layer_end 0): 422, saying so, the stored checkpoint as it was" \
    "$STATUS $(printf '%s' "$BODY" | jq -r '.error.message | test("layer_start 0 and layer_end 0")') $(stored)" "422 true $GOOD"
sql a "CREATE FUNCTION refuse_upload() RETURNS trigger LANGUAGE plpgsql AS
       \$\$ BEGIN RAISE EXCEPTION 'injected: the database refuses this row'; END \$\$;
       CREATE TRIGGER refuse_upload BEFORE INSERT OR UPDATE ON checkpoints FOR EACH ROW
       WHEN (NEW.sha256 IN ('$(sha "$WORK/stage0.bin")', '$(sha "$WORK/stage1.bin")')) EXECUTE FUNCTION refuse_upload()" > /dev/null
put_ckpt "$CK/1/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin"
check "the database refusing a re-upload's row: a 500, the stored checkpoint as it was" "$STATUS $(stored)" "500 $GOOD"
put_ckpt "$CK/2/stages/1" "$(tok_of 1 0)" "$WORK/stage1.bin"
check "the database refusing a first upload's row: no row, no file" \
    "$STATUS $(sql a "SELECT count(*) FROM checkpoints WHERE job_id = $J AND step = 2 AND stage = 1") $(find "$WORK/a/checkpoints" -path '*step2/stage1*' | wc -l)" \
    "500 0 0"
sql a "DROP TRIGGER refuse_upload ON checkpoints; DROP FUNCTION refuse_upload()" > /dev/null
check "and no kept copy is left behind" "$(find "$WORK/a/checkpoints" -name '.upload-*' | wc -l)" 0
curl -s -o "$WORK/got.bin" -H "Authorization: Bearer $ADMIN" "$B/v1/jobs/$J/checkpoints/1/stages/0"
if cmp -s "$WORK/got.bin" "$WORK/other.bin"; then ok "server b, sharing the checkpoint directory, serves what server a received"
else fail "server b, sharing the checkpoint directory, serves what server a received"; fi
check "one row per stage and step" "$(sql a "SELECT count(*) FROM checkpoints WHERE job_id = $J")" 3
put_ckpt "$B/v1/jobs/$J/checkpoints/1/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin"
expect "over --max-checkpoint-bytes is 413" 413 .error.code body_too_large
STATUS=$(curl -s -o "$WORK/body" -w '%{http_code}' -X PUT -H "Authorization: Bearer $(tok_of 0 0)" -H 'Transfer-Encoding: chunked' \
         -H 'Content-Type: application/octet-stream' --data-binary "@$WORK/stage0.bin" "$B/v1/jobs/$J/checkpoints/1/stages/0")
check "a chunked upload over the cap is 413 too" "$STATUS" 413
check "and leaves no file behind" "$(find "$WORK/a/checkpoints" -name '.upload-*' | wc -l)" 0
check "nor a directory of server b's own" "$(find "$WORK/b" -path '*checkpoints*' | wc -l)" 0
curl -s -o /dev/null -X PUT -H "Authorization: Bearer $(tok_of 0 0)" -H 'Content-Type: application/octet-stream' \
     --limit-rate 50K --data-binary "@$WORK/stage0.bin" "$CK/3/stages/0" &
slow=$!
sleep 1.5
check "a slow upload is written to a temporary file as it comes" "$(find "$WORK/a/checkpoints" -name '.upload-*' | wc -l)" 1
kill $slow; wait $slow 2>/dev/null
sleep 1
check "a client that gives up mid-upload leaves no file" "$(find "$WORK/a/checkpoints" -name '.upload-*' | wc -l)" 0
req GET "$CK" "$ADMIN"; expect "and no checkpoint row" 200 '[.checkpoints[].step] | tostring' '[2,1]'
# A database that stalls at the commit of a re-upload: server c gives up on
# it (--db-timeout 1: 503, "may or may not have taken effect"), and the
# commit lands once the stall ends.  Whatever the row then says, the file
# it names holds exactly those bytes (it used to name the new SHA-256 over
# the old file put back).  A synchronous standby that is never there holds
# every commit after it is written (statement_timeout does not cut it).
export SHOAL_ADMIN_TOKEN="$ADMIN" SHOAL_JOIN_TOKEN="$JOIN"
start_server c --database-url "host=$WORK/a/pg-socket dbname=shoal user=shoal" --db-timeout 1 \
    --checkpoint-dir "$WORK/a/checkpoints" || exit 1
unset SHOAL_ADMIN_TOKEN SHOAL_JOIN_TOKEN
sql a "ALTER SYSTEM SET synchronous_standby_names = 'shoal_test_never'" >/dev/null
sql a "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
put_ckpt "$URL_c/v1/jobs/$J/checkpoints/1/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin"
check "a re-upload whose commit stalls is a 503 database_unavailable" "$STATUS $(printf '%s' "$BODY" | jq -r .error.code)" \
    "503 database_unavailable"
sql a "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null
sql a "SELECT pg_reload_conf()" >/dev/null
landed() { [ "$(sql a "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")" = 0 ]; }
wait_for 10 landed
served() {  # the SHA-256 of the bytes GET serves, and the one the row names
    curl -s -o "$WORK/got.bin" -H "Authorization: Bearer $ADMIN" "$CK/1/stages/0"
    printf '%s %s' "$(sha "$WORK/got.bin")" "$(sql a "SELECT sha256 FROM checkpoints WHERE job_id = $J AND step = 1 AND stage = 0")"
}
read -r got row <<<"$(served)"
check "once the stall ends, GET serves the bytes whose SHA-256 the row names" "$got" "$row"
stop_server c

# ---- resume_from
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c --argjson j "$J" '.resume_from = {"job_id": $j, "step": 2}')"
expect "resume_from an incomplete checkpoint is 422" 422 .error.field resume_from
# Files that do not say their layers (an older agent's: the server now
# records every file's own) fit only as many stages.
sql a "UPDATE checkpoints SET layer_start = NULL, layer_end = NULL WHERE job_id = $J AND step = 1 AND stage = 1" >/dev/null
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c --argjson j "$J" '.resume_from = {"job_id": $j, "step": 1} | .parallelism.stages = 4')"
expect "resume_from with other stages, from files without layers, is 422" 422 .error.field resume_from
sql a "UPDATE checkpoints SET layer_start = $MID, layer_end = 4 WHERE job_id = $J AND step = 1 AND stage = 1" >/dev/null
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c --argjson j "$J" '.resume_from = {"job_id": $j, "step": 1} | .parallelism.stages = 4')"
expect "from files that say their layers it is accepted" 201 '.spec.resume_from | [.job_id, .step] | tostring' "[$J,1]"
req DELETE "$S/v1/jobs/$(printf '%s' "$BODY" | jq -r .id)" "$ADMIN"
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c --argjson j "$J" '.resume_from = {"job_id": $j, "step": 1} | .model.d_model = 128')"
expect "resume_from another model is 422" 422 .error.field resume_from
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c --argjson j "$J" '.resume_from = {"job_id": $j, "step": 3}')"
expect "resume_from a step not below the job's steps is 422" 422 .error.field resume_from
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c --argjson j "$J" '.resume_from = {"job_id": $j, "step": 1} | .parallelism.replicas = 1')"
expect "resume_from a complete checkpoint of the same model" 201 '.spec.resume_from | [.job_id, .step] | tostring' "[$J,1]"
K=$(printf '%s' "$BODY" | jq -r .id)

# ---- the last step from every tasklet and the final checkpoint (step 3),
# the last of them at once: succeeded, whichever comes last
progress 0 0 2 null; progress 0 1 2 null
put_ckpt "$CK/3/stages/0" "$(tok_of 0 0)" "$WORK/stage0.bin"
check "not succeeded before every tasklet reported the last step" "$(sql a "SELECT state FROM jobs WHERE id = $J")" running
bg_get "$S/v1/agent/assignment?wait=20&job=$J&epoch=$E" "$(tok_of 0 0)" "$WORK/lp3"; p3=$BG
sleep 1
body() { printf '{"job_id":%s,"epoch":%s,"step":2,"stage":1,"replica":%s,"loss":3.5,"iteration_s":0.5,"compute_s":0.3,"send_s":0,"recv_wait_s":0,"allreduce_s":0,"bubble_s":0,"tokens":256}' "$J" "$E" "$1"; }
curl -s -o "$WORK/last0" -H "Authorization: Bearer $(tok_of 1 0)" -H 'Content-Type: application/json' -d "$(body 0)" "$S/v1/agent/progress"
check "trained but for one report, it runs on" "$(sql a "SELECT state FROM jobs WHERE id = $J")" running
pids=""
curl -s -o "$WORK/last1" -H "Authorization: Bearer $(tok_of 1 1)" -H 'Content-Type: application/json' \
     -d "$(body 1)" "$S/v1/agent/progress" & pids="$pids $!"
curl -s -o /dev/null -X PUT -H "Authorization: Bearer $(tok_of 1 0)" -H 'Content-Type: application/octet-stream' \
     --data-binary "@$WORK/stage1.bin" "$CK/3/stages/1" & pids="$pids $!"
wait $pids
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "the last report and the final checkpoint's last file, at once, make the job succeeded" 200 \
    '[.state, (.finished_at != null)] | tostring' '["succeeded",true]'
wait $p3
check "a waiting long-poll learns the job is over" "$(jq -c .assignment "$WORK/lp3")" null
progress 0 0 2 null; expect "a report after the end is 409" 409
nccl_put "$(tok_of 0 0)"; expect "nccl: a finished job forms no group" 409 .error.field state
req GET "$S/metrics"; check "a finished job has no job series" "$(printf '%s\n' "$BODY" | grep -c "job_id=\"$J\"")" 0
check "jobs by state counts succeeded" "$(printf '%s\n' "$BODY" | grep '^shoal_jobs{state="succeeded"}')" 'shoal_jobs{state="succeeded"} 1'

# ---- the resumed job: its assignment says where to start
for i in 0 1 2 3; do req POST "$S/v1/agent/heartbeat" "${TOK[$i]}" '{"state":"idle","job_id":null,"step":null}'; done
req POST "$S/v1/jobs/$K/schedule" "$ADMIN" '{"budget_ms":100}'; expect "schedule the resumed job" 201 .epoch 1
req GET "$S/v1/jobs/$K" "$ADMIN"; KN=$(printf '%s' "$BODY" | jq -r '.plan.assignments[0].node_id'); KS=$(printf '%s' "$BODY" | jq -r '.plan.assignments[1].node_id')
for i in 0 1 2 3; do [ "${ID[$i]}" = "$KN" ] && KT=${TOK[$i]}; [ "${ID[$i]}" = "$KS" ] && KT1=${TOK[$i]}; done
req GET "$S/v1/agent/assignment" "$KT"
expect "its assignment names the checkpoint to resume from" 200 '.assignment.resume | [.job_id, .step] | tostring' "[$J,1]"
STATUS=$(curl -s -o "$WORK/got.bin" -w '%{http_code}' -H "Authorization: Bearer $KT" "$CK/1/stages/0")
check "a node of the resuming job may download the checkpoint" "$STATUS" 200

# ---- failure
fail_body() { printf '{"job_id":%s,"epoch":%s,"stage":%s,"replica":0,"reason":"connection reset","peer":%s}' "$K" "$1" "$2" "$3"; }
req POST "$S/v1/agent/failure" "$KT" "$(fail_body 0 0 null)";  expect "a failure from a past epoch changes nothing" 200 .state scheduled
req POST "$S/v1/agent/failure" "$KT1" "$(fail_body 1 0 null)"; expect "nor one from a node not at that tasklet" 200 .state scheduled
req POST "$S/v1/agent/failure" "$KT" "$(fail_body 1 0 '"bad address"')"; expect "a bad peer is 422" 422 .error.field peer
req POST "$S/v1/agent/failure" "$KT" '{"job_id":1}';             expect "a failure without its fields is 400" 400 .error.code missing_field
req POST "$S/v1/agent/failure" "$KT" "$(printf '%s' "$(fail_body 1 0 null)" | jq -c --arg r "$(printf '%1001s' x)" '.reason = $r')"
expect "a reason over 1000 bytes is 422" 422 .error.field reason
# These nodes are no agents: nothing heartbeats them, and the server never
# reached their peer ports.  A node it cannot reach is judged by its
# heartbeats while they come (fault_judge.h): a minute old, their probes
# count.
sql a "UPDATE nodes SET last_heartbeat_at = now() - interval '1 minute'" >/dev/null
bg_get "$S/v1/agent/assignment?wait=20&job=$K&epoch=1" "$KT1" "$WORK/lp4"; p4=$BG
sleep 1
t0=$(now)
# It names a node that is not its neighbour in the plan: no suspect.
for i in 0 1 2 3; do [ "${ID[$i]}" != "$KN" ] && [ "${ID[$i]}" != "$KS" ] && OTHER=${ID[$i]}; done
req POST "$S/v1/agent/failure" "$KT" "$(fail_body 1 0 '"127.0.0.1:7001"' | jq -c --argjson n "$OTHER" '.peer_node = $n')"
expect "a failure from the tasklet's node sends the job to recovery" 200 .state recovering
check "a node named that is not a neighbour in the plan is no suspect" "$(printf '%s' "$BODY" | jq -c .suspect_node)" null
req GET "$S/v1/jobs/$K" "$ADMIN"
expect "with the reason, the tasklet, the node and the peer" 200 .recovery_reason \
    "stage 0 replica 0 (node $KN): connection reset (peer node $OTHER at 127.0.0.1:7001)"
check "its first recovery; the job is not over" "$(printf '%s' "$BODY" | jq -c '[.recoveries, .finished_at, .failure_reason]')" '[1,null,null]'
wait $p4
within "the job's other nodes learn it at once" "$t0" 0 4
check "that their assignment is recovering" "$(jq -r .assignment.state "$WORK/lp4")" recovering
# The server judges at once: the reporter's peer port (127.0.0.1:700N, no
# listener) refuses its probe, so the reporter is gone; so is its stage-1
# neighbour, kept as a fault of its own.  Both are left out of the re-plan,
# which follows at once: epoch 2, from the spec's start.
replanned() { [ "$(sql a "SELECT plan_epoch FROM jobs WHERE id = $K")" = 2 ]; }
wait_for 20 replanned
req GET "$S/v1/jobs/$K" "$ADMIN"
check "the recovery thread re-plans it at once, from its spec's start (it never ran)" \
    "$(printf '%s' "$BODY" | jq -c '[.plan.epoch, .state, .recovery_waiting]')" '[2,"scheduled",null]'
check "the report is judged: the reporter is gone" \
    "$(printf '%s' "$BODY" | jq -c '[.faults[] | [.epoch, .stage, .reporter_node, .suspect_node, .verdict, .culprit_node]]')" \
    "[[1,0,$KN,null,\"node\",$KN],[1,1,null,null,\"node\",$KS]]"
check "in words" "$(printf '%s' "$BODY" | jq -r '.faults[0].judgement | sub(" at 127[.]0[.]0[.]1:[0-9]+: "; " at ADDR: ")')" \
    "node $KN, the reporter, did not answer at ADDR: connect: Connection refused"
check "the gone neighbour too, in words" "$(printf '%s' "$BODY" | jq -r '.faults[1] | [.reason, (.judgement | sub(" from 127[.]0[.]0[.]1:[0-9]+: "; " from ADDR: "))] | join(" / ")')" \
    "gone when the server probed the failed plan / node $KS of the plan is gone from ADDR: connect: Connection refused"
check "and both are left out of epoch 2" \
    "$(printf '%s' "$BODY" | jq -c --argjson a "$KN" --argjson b "$KS" '[.plan.assignments[].node_id] | [index($a), index($b)]')" "[null,null]"
check "(the job lists it excluded only while epoch 1 is current)" "$(printf '%s' "$BODY" | jq -c .excluded_nodes)" '[]'
req POST "$S/v1/jobs/$K/schedule" "$ADMIN" '{"budget_ms":100}'
expect "an operator may re-plan it again: epoch 3" 201 '[.epoch, .resume_step] | tostring' '[3,null]'
req GET "$S/v1/jobs/$K" "$ADMIN"
KT2=$(tok_by_id "$(printf '%s' "$BODY" | jq -r '.plan.assignments[] | select(.stage == 0) | .node_id')")
KS2=$(printf '%s' "$BODY" | jq -r '.plan.assignments[] | select(.stage == 1) | .node_id')
req POST "$S/v1/agent/failure" "$KT2" "$(fail_body 3 0 '"127.0.0.1:7003"' | jq -c --argjson n "$KS2" '.peer_node = $n')"
expect "past --max-recoveries a failure fails the job" 200 .state failed
check "its report is kept against the neighbour it names" "$(printf '%s' "$BODY" | jq -c .suspect_node)" "$KS2"
req GET "$S/v1/jobs/$K" "$ADMIN"
expect "saying why and after how many recoveries" 200 .failure_reason \
    "stage 0 replica 0 (node $(id_by_tok "$KT2")): connection reset (peer node $KS2 at 127.0.0.1:7003) (after 1 recoveries)"
check "and finished_at" "$(printf '%s' "$BODY" | jq '.finished_at != null')" true
req POST "$S/v1/agent/failure" "$KT2" "$(fail_body 3 0 null)";  expect "a failure of a finished job changes nothing" 200 .state failed
req GET "$S/v1/jobs?state=failed" "$ADMIN"; expect "failed jobs are listed by state" 200 '.jobs | map(.id) | tostring' "[$K]"

# ---- a re-plan of a running job resumes from its checkpoint; reports that
# arrive late from the old epoch fill holes before it, nothing after it
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c '.name = "late" | .parallelism.stages = 1 | .parallelism.replicas = 1 | .training.steps = 6')"
L=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$L/schedule" "$ADMIN" '{"budget_ms":100}'; expect "schedule a 1x1 job" 201 .resume_step null
req GET "$S/v1/jobs/$L" "$ADMIN"; LT=$(tok_by_id "$(printf '%s' "$BODY" | jq -r '.plan.assignments[0].node_id')")
lprog() {  # STEP EPOCH
    req POST "$S/v1/agent/progress" "$LT" "{\"job_id\":$L,\"epoch\":$2,\"step\":$1,\"stage\":0,\"replica\":0,\"loss\":3.$1,\"iteration_s\":0.1,\"compute_s\":0.1,\"send_s\":0,\"recv_wait_s\":0,\"allreduce_s\":0,\"bubble_s\":0,\"tokens\":64}"
}
lprog 0 1; lprog 3 1; lprog 4 1
mkstage "$WORK/late.bin" 256 64 64 4 4 0 4 1 1 2   # its one stage: every layer, first and last
put_ckpt "$S/v1/jobs/$L/checkpoints/2/stages/0?layer_start=0" "$LT" "$WORK/late.bin"
expect "a checkpoint's layer_start goes with its layer_end" 400 .error.field layer_end
put_ckpt "$S/v1/jobs/$L/checkpoints/2/stages/0?layer_start=0&layer_end=9" "$LT" "$WORK/late.bin"
expect "and a file holds no layer past the model's" 422 .error.field layer_end
put_ckpt "$S/v1/jobs/$L/checkpoints/2/stages/0?layer_start=0&layer_end=4" "$LT" "$WORK/late.bin"
expect "a checkpoint says which layers it holds" 201 .complete true
put_ckpt "$S/v1/jobs/$L/checkpoints/3/stages/0?layer_start=0&layer_end=4" "$LT" "$WORK/late.bin"
put_ckpt "$S/v1/jobs/$L/checkpoints/4/stages/0" "$LT" "$WORK/late.bin"
# flip_byte FILE OFFSET: changes one byte in place (the size stays).
flip_byte() {
    local b
    b=$(dd if="$1" bs=1 skip="$2" count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
    printf "\\$(printf %o $(((b + 1) % 256)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
flip_byte "$WORK/a/$(sql a "SELECT path FROM checkpoints WHERE job_id = $L AND step = 4")" 100
# Steps 1 and 2 were never reported (a replica that died after a step's
# all-reduce, before its report): resuming at 2 or 3 would leave that hole.
req POST "$S/v1/jobs/$L/schedule" "$ADMIN" '{"budget_ms":100,"dry_run":true}'
expect "a checkpoint whose previous step a tasklet never reported is passed over" 200 .resume_step null
lprog 2 1
req POST "$S/v1/jobs/$L/schedule" "$ADMIN" '{"budget_ms":100,"replan":true}'
expect "re-planning the running job resumes from its newest checkpoint whose file is whole" 201 '[.epoch, .resume_step] | tostring' '[2,3]'
check "the steps from there on are dropped" "$(sql a "SELECT string_agg(step::text, ',' ORDER BY step) FROM job_steps WHERE job_id = $L")" 0,2
check "the damaged checkpoint is logged (by the dry run and the plan)" \
    "$(grep -c "checkpoint file damaged path=.*job$L/step4/" "$WORK/a.log")" 2
lprog 1 1; expect "a late report of epoch 1 before the resume step is kept" 201 .recorded true
lprog 3 1; expect "one from the resume step on is a stale epoch" 409 .error.code stale_epoch
check "it filled the hole and moved nothing" "$(sql a "SELECT string_agg(step || ':' || epoch, ',' ORDER BY step) FROM job_steps WHERE job_id = $L") $(sql a "SELECT state, plan_epoch FROM jobs WHERE id = $L")" "0:1,1:1,2:1 scheduled|2"
lprog 3 2; expect "epoch 2 reports from the resume step" 201 '[.recorded, .state] | tostring' '[true,"running"]'
req GET "$S/v1/agent/assignment" "$LT"
expect "its assignment resumes from the job's own checkpoint, with the layers of its files" 200 \
    '.assignment.resume | [.job_id, .step, .stages] | tostring' "[$L,3,[{\"stage\":0,\"layer_start\":0,\"layer_end\":4}]]"
req GET "$S/v1/jobs/$L/checkpoints" "$ADMIN"
expect "the checkpoint list shows them (step 4's from its file, its query said none)" 200 '[.checkpoints[] | .stages[0] | [.layer_start, .layer_end]] | tostring' '[[0,4],[0,4],[0,4]]'

req DELETE "$S/v1/jobs/$L" "$ADMIN"

# ---- a client that leaves a long-poll: answered into the void at its deadline
# (kill only once curl runs: a shell forked but not yet curl would run our EXIT trap)
bg_get "$S/v1/agent/assignment?wait=2" "${TOK[0]}" "$WORK/lp8"; sleep 0.5; kill $BG; wait $BG 2>/dev/null
sleep 2.5
req GET "$S/healthz"; expect "the server carries on after a long-poll's client left" 200 .status ok

# ---- the database restarts under server b: its listener reconnects
stop_server a
start_server a || exit 1
S=$URL_a
for _ in $(seq 1 20); do
    req GET "$B/metrics"
    printf '%s\n' "$BODY" | grep -q '^shoal_assignment_listener_up 1' && break
    sleep 0.5
done
check "server b's listener reconnects after Postgres restarts" "$(printf '%s\n' "$BODY" | grep '^shoal_assignment_listener_up ')" "shoal_assignment_listener_up 1"
# ---- datasets: every member says what it opened, no one member decides (sql/019_site_policy.sql)
claim() {   # claim TOKEN JOB SOURCE SHA|null
    req POST "$S/v1/agent/dataset" "$1" "$(printf '{"job_id":%s,"epoch":1,"source":"%s","sha256":%s}' "$2" "$3" "$4")"
}
X=$(printf '%064d' 1); Y=$(printf '%064d' 2)
LLMC=$(printf '%s' "$JOB" | jq -c '.data = {"path": "/data/shards", "format": "llmc"}')
# schedule_llmc JQ-EDIT: a 2x2 job (llmc unless the edit says otherwise) on
# the four nodes, scheduled (epoch 1); JD its id.
schedule_llmc() {
    req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$LLMC" | jq -c "$1")"; JD=$(printf '%s' "$BODY" | jq -r .id)
    req POST "$S/v1/jobs/$JD/schedule" "$ADMIN" '{"budget_ms":100}'
}
for i in 0 1 2 3; do req POST "$S/v1/agent/heartbeat" "${TOK[$i]}" '{"state":"idle"}'; done
schedule_llmc '.data.format = "text"'
claim "${TOK[0]}" "$JD" data "\"$X\""
expect "a digest for a text job's data is 422: text has no manifest" 422 .error.field sha256
claim "${TOK[0]}" "$JD" validation null
expect "a claim about validation on a job without validation.path is 422" 422 .error.field source
req DELETE "$S/v1/jobs/$JD" "$ADMIN"
schedule_llmc .
for i in 0 1 2; do
    claim "${TOK[$i]}" "$JD" data "\"$X\""
    expect "member $i's claim waits for the others (every node of the first and last stage reads the data)" 202 \
        '[.claimed, .members] | tostring' "[$((i + 1)),4]"
done
claim "${TOK[3]}" "$JD" data "\"$Y\""
expect "one member that says otherwise: the job fails (409), nobody blamed" 409 .error.code dataset_disagreement
req GET "$S/v1/jobs/$JD" "$ADMIN"
check "the job failed, its reason naming every node on each side and blaming none" \
    "$(printf '%s' "$BODY" | jq -r '[.state, (.failure_reason | test("manifest '"$X"' at nodes '"${ID[0]}, ${ID[1]}, ${ID[2]}"'; manifest '"$Y"' at node '"${ID[3]}"'")), (.failure_reason | test("no node is blamed")), .dataset.data_sha256] | tostring')" \
    '["failed",true,true,null]'
schedule_llmc .
for i in 0 1 2 3; do claim "${TOK[$i]}" "$JD" data "\"$X\""; done
expect "when every member says the same, the last one hears it" 200 '[.sha256, .by] | tostring' "[\"$X\",\"members\"]"
claim "${TOK[3]}" "$JD" data "\"$Y\""
expect "after that the agreed digest is the answer (a member that says otherwise fails by itself)" 200 \
    '[.sha256, .by] | tostring' "[\"$X\",\"agreed\"]"
req GET "$S/v1/jobs/$JD" "$ADMIN"; check "the job records it" "$(printf '%s' "$BODY" | jq -r .dataset.data_sha256)" "$X"
req DELETE "$S/v1/jobs/$JD" "$ADMIN"
schedule_llmc ".data.sha256 = \"$X\""
claim "${TOK[0]}" "$JD" data "\"$Y\""
expect "the job's own data.sha256 is the answer at once" 200 '[.sha256, .by] | tostring' "[\"$X\",\"job\"]"
claim "${TOK[0]}" "$JD" data null
expect "also to a node that opened no manifest" 200 .sha256 "$X"
req DELETE "$S/v1/jobs/$JD" "$ADMIN"
schedule_llmc .
for i in 0 1 2 3; do claim "${TOK[$i]}" "$JD" data null; done
expect "no manifest anywhere: every member agrees on none" 200 '[.sha256, .by] | tostring' '[null,"members"]'
req DELETE "$S/v1/jobs/$JD" "$ADMIN"

req POST "$S/v1/jobs" "$ADMIN" "$JOB"; J2=$(printf '%s' "$BODY" | jq -r .id)
for i in 0 1 2 3; do req POST "$S/v1/agent/heartbeat" "${TOK[$i]}" '{"state":"idle"}'; done
bg_get "$B/v1/agent/assignment?wait=20" "${TOK[0]}" "$WORK/lp5"; p5=$BG
sleep 1
t0=$(now)
req POST "$S/v1/jobs/$J2/schedule" "$ADMIN" '{"budget_ms":100}'
wait $p5
within "and wakes a node without an assignment when it gets one" "$t0" 0 4
check "with that assignment" "$(jq .assignment.job_id "$WORK/lp5")" "$J2"

# ---- the node failed links point to (job_link_suspect, sql/017_read_models.sql), on judged reports
# written straight into job_faults: [epoch, reporter, neighbour named] over
# nodes 1-5 of this server.  A cut node 3: in epoch 1 its neighbour 2 was
# also reported by 5, which gave up after it; in epoch 2 the spare 5 was
# reported by 1.  Nodes 3 and 5 then share reports with 3 peers each, and
# the tie goes to 3, named by three peers against 5's one.
NODES=($(sql a "SELECT id FROM nodes ORDER BY id LIMIT 5"))
link_faults() {   # link_faults JOB "epoch reporter named" ...: judged link verdicts
    local job=$1 e r n values=""; shift
    for f in "$@"; do
        read -r e r n <<< "$f"
        values="$values,($job, $e, 0, 0, ${NODES[$((r - 1))]}, ${NODES[$((n - 1))]}, 'peer timeout', 'link', now())"
    done
    sql a "INSERT INTO job_faults (job_id, epoch, stage, replica, reporter_node, suspect_node, reason, verdict, judged_at)
           VALUES ${values#,}" >/dev/null
}
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; JL=$(printf '%s' "$BODY" | jq -r .id)
link_faults "$JL" "1 2 3" "1 3 2" "1 5 2"
req GET "$S/v1/jobs/$JL" "$ADMIN"
check "one failed epoch leaves no one out" "$(printf '%s' "$BODY" | jq -c .excluded_nodes)" '[]'
link_faults "$JL" "2 1 5" "2 5 3" "2 3 4" "2 4 3"
req GET "$S/v1/jobs/$JL" "$ADMIN"
check "after two, equal peer counts go to the node named by more peers" \
    "$(printf '%s' "$BODY" | jq -c .excluded_nodes)" "[${NODES[2]}]"
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; JL=$(printf '%s' "$BODY" | jq -r .id)
link_faults "$JL" "1 1 2" "1 2 1" "2 1 2" "2 2 1"
req GET "$S/v1/jobs/$JL" "$ADMIN"
check "a tie on both excludes no one" "$(printf '%s' "$BODY" | jq -c .excluded_nodes)" '[]'

# ---- shutting down with long-polls waiting is clean
bg_get "$B/v1/agent/assignment?wait=30&job=$J2&epoch=1" "${TOK[0]}" "$WORK/lp6"; p6=$BG
bg_get "$S/v1/agent/assignment?wait=30&job=$J2&epoch=1" "${TOK[1]}" "$WORK/lp7"; p7=$BG
sleep 1
t0=$(now)
stop_server b
wait $p6
within "a waiting long-poll is answered when its server stops" "$t0" 0 5
check "with its current assignment" "$(cat "$WORK/lp6.status") $(jq .assignment.epoch "$WORK/lp6")" "200 1"
stop_server a
wait $p7
check "on server a too" "$(cat "$WORK/lp7.status") $(jq .assignment.epoch "$WORK/lp7")" "200 1"

[ "$FAILS" -eq 0 ]
