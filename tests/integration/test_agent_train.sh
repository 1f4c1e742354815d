#!/usr/bin/env bash
# test_agent_train.sh - real agents on loopback train real jobs: register,
# measure links, schedule, train 2x2 to success; the same global batch on
# other layouts gives the same losses; a restart from a checkpoint continues
# the run exactly; text sampled from a checkpoint, its model exported as
# safetensors (llm.c's format refused for its untied head), and an llm.c-shard job's
# tokens decoded through a tokenizer file; a failing checkpoint
# store shows in the job and heals; an agent killed mid-step fails the job
# with its reason; an agent that cannot run its assignment says so and the
# job does not wait for it; the README's sample and export examples run
# as written.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"

# a relay (shoal-relay) for the links blocked both ways below
start_relay r || exit 1
start_server_s --relay "$RELAY_r" --relay-secret-file "$WORK/relay.secret" || exit 1

# a1 and a3 ask for encrypted peer connections (--peer-encryption on): every
# connection that touches them is sealed, the others stay plain, so the jobs
# below train over both kinds and must still match the 1x1 losses
for n in a0 a2; do start_agent "$n" s; done
for n in a1 a3; do start_agent "$n" s --peer-encryption on; done

nodes_up() { [ "$(sql s "SELECT count(*) FROM nodes WHERE tflops > 0")" = 4 ]; }
if wait_for 60 nodes_up; then ok "four agents register with a measured throughput"
else fail "four agents register with a measured throughput" "$(tail -n 5 "$WORK"/agent-a0.log)"; exit 1; fi

# an operator's drain shows in the agent's log, and so does the undrain
A0=$(sql s "SELECT id FROM nodes WHERE name = 'a0'")
req POST "$S/v1/nodes/$A0/drain" "$ADMIN"
said() { grep -q "$1" "$WORK/agent-a0.log"; }
if wait_for 10 said "node=$A0 is draining (an operator's POST /v1/nodes/$A0/drain)"; then ok "a drained agent says so in its log"
else fail "a drained agent says so in its log" "$(tail -n 3 "$WORK/agent-a0.log")"; fi
req POST "$S/v1/nodes/$A0/undrain" "$ADMIN"; expect "undrain it" 200 .state idle
if wait_for 10 said "node=$A0 is no longer draining"; then ok "and says when it is back"
else fail "and says when it is back" "$(tail -n 3 "$WORK/agent-a0.log")"; fi

# a second agent on a0's data directory would be a0's node with another address
timeout 30 "$SHOAL_AGENT" --server "$URL_s" --data-dir "$WORK/agent-a0" --listen 127.0.0.1:0 >/dev/null 2>"$WORK/dup.err"
check "a second agent on a running agent's --data-dir exits 1" "$?" 1
check "and names the running one's pid" \
    "$(grep -c "another shoal-agent (pid $(cat "$WORK/agent-a0.pid")) is using the data directory" "$WORK/dup.err")" 1

reached() { req GET "$S/v1/nodes" "$ADMIN"; [ "$(printf '%s' "$BODY" | jq '[.nodes[] | select(.reachable.from_server)] | length')" = 4 ]; }
if wait_for 20 reached; then ok "the server reaches the four agents' peer ports from outside (reachable.from_server)"
else fail "the server reaches the four agents' peer ports from outside" "$(printf '%s' "$BODY" | jq -c '[.nodes[].reachable]')"; fi
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest WHERE latency_ms > 0 AND bandwidth_gbps > 0")" = 12 ]; }
if wait_for 120 links_up; then ok "the agents measure all twelve directed links"
else fail "the agents measure all twelve directed links" "$(sql s "SELECT count(*) FROM links_latest")"; fi

# A node whose peer port nothing answers: the idle agents cannot connect to
# it and say so (reachable false in the matrix, why in link_reach); it is
# drained then (a drained node is neither probed nor planned).
req POST "$S/v1/agent/register" "$(cat "$WORK/s/join.token")" \
    '{"name":"ghost","peer_address":"127.0.0.1:1","hardware":{"tflops":1,"cpu_cores":1}}'
GHOST=$(printf '%s' "$BODY" | jq -r .node_id)
ghost_seen() { [ "$(sql s "SELECT count(*) FROM link_reach WHERE to_node = $GHOST AND NOT reachable")" -ge 1 ]; }
if wait_for 20 ghost_seen; then
    ok "an agent reports a link it could not connect: $(sql s "SELECT why FROM link_reach WHERE to_node = $GHOST LIMIT 1")"
else fail "an agent reports a link it could not connect" "$(grep 'node=$GHOST' "$WORK"/agent-a0.log | tail -n 2)"; fi
req POST "$S/v1/nodes/$GHOST/drain" "$ADMIN"
req GET "$S/v1/links" "$ADMIN"
check "GET /v1/links shows it unreachable from that agent" \
    "$(printf '%s' "$BODY" | jq --argjson g "$GHOST" '(.nodes | index($g)) as $j | [.reachable[][$j] | select(. == false)] | length > 0')" true

# job NAME STAGES REPLICAS MICRO_BATCHES SCHEDULE STEPS CKPT [EXTRA_JSON]: a job body.
# MODEL, when set, is the model object instead of the small GPT-2's.
GPT2_SMALL='{"vocab_size":256,"context_length":32,"d_model":32,"heads":2,"layers":4}'
job() {
    printf '{"name":"%s","model":%s,' "$1" "${MODEL:-$GPT2_SMALL}"
    printf '"parallelism":{"stages":%d,"replicas":%d,"micro_batches":%d,"micro_batch_size":2,"schedule":"%s"},' "$2" "$3" "$4" "$5"
    printf '"training":{"steps":%d,"learning_rate":0.003,"warmup_steps":3,"weight_decay":0.1,"grad_clip":1.0,"seed":7},' "$6"
    printf '"data":{"path":"%s","format":"text"},"checkpoint_interval":%d,' "$CORPUS" "$7"
    # f32 stage links: the layouts below must give the same losses to 1e-5
    printf '"communication":{"stage_link":"f32"}%s}' "${8-}"
}

# ---- a 2x2 job, 30 steps, checkpoints every 10
run_job "a 2x2 job of 30 steps" "$(job main 2 2 2 1f1b 30 10)"
MAIN=$J
check "job_steps holds every step of every tasklet" "$(sql s "SELECT count(*), count(DISTINCT step) FROM job_steps WHERE job_id = $MAIN")" "120|30"
check "each last-stage report carries the loss of the replica before it on the ring" \
    "$(sql s "SELECT count(*), bool_and(r.ring_prev_loss = p.loss) FROM job_steps r JOIN job_steps p
              ON p.job_id = r.job_id AND p.step = r.step AND p.stage = r.stage AND p.replica = (r.replica + 1) % 2
              WHERE r.job_id = $MAIN AND r.stage = 1")" "60|t"
check "every last-stage row has a loss" "$(sql s "SELECT count(*) FROM job_steps WHERE job_id = $MAIN AND stage = 1 AND loss > 0")" 60
job_losses "$S" "$ADMIN" "$MAIN" | sort -k1,1 > "$WORK/main.losses"
fell=$(awk 'NR <= 3 { a += $2 } NR > 27 { b += $2 } END { print (b / 3 < a / 3 - 0.3) ? "yes" : "no: " a / 3 " -> " b / 3 }' "$WORK/main.losses")
check "the loss falls over the run" "$fell" yes
check "checkpoints 10, 20 and 30 are complete" \
    "$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$MAIN/checkpoints" | jq -c '[.checkpoints[] | select(.complete) | .step] | sort')" "[10,20,30]"
check "a1 and a3 (--peer-encryption on) train the 2x2 job over encrypted connections only" \
    "$(cat "$WORK"/agent-a1.log "$WORK"/agent-a3.log | grep "tasklet connected job=$MAIN " | grep -c 'encrypted=\([1-9][0-9]*\)/\1$')" 2

# ---- the same global batch (4 micro-batches of 2) on other layouts
run_job "a 1x1 job (the same batch in one process)" "$(job one 1 1 4 1f1b 30 30)"
ONE=$J
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/one.losses"
same_losses "2x2 equals 1x1 to 1e-5" "$WORK/main.losses" "$WORK/one.losses" 1e-5
run_job "a 4x1 gpipe job" "$(job deep 4 1 4 gpipe 30 30)"
DEEP=$J
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/deep.losses"
same_losses "4x1 equals 1x1 to 1e-5" "$WORK/deep.losses" "$WORK/one.losses" 1e-5

run_job "a 1x4 job" "$(job wide 1 4 1 1f1b 30 30)"
WIDE=$J
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/wide.losses"
same_losses "1x4 equals 1x1 to 1e-5" "$WORK/wide.losses" "$WORK/one.losses" 1e-5

# ---- a Llama model (RoPE, RMSNorm, SwiGLU, two kv heads for four query
# heads) on the same layouts: 2x2 equals 1x1, untied and with a head tied
# to the embedding across the pipeline
LLAMA='{"architecture":"llama","vocab_size":256,"context_length":32,"d_model":32,"heads":4,"kv_heads":2,"ffn_dim":48,"layers":4}'
MODEL=$LLAMA run_job "a 2x2 llama job" "$(MODEL=$LLAMA job llama 2 2 2 1f1b 20 10)"
LLAMA_MAIN=$J
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/llama.losses"
fell=$(awk 'NR <= 3 { a += $2 } NR > 17 { b += $2 } END { print (b / 3 < a / 3 - 0.3) ? "yes" : "no: " a / 3 " -> " b / 3 }' "$WORK/llama.losses")
check "the llama job's loss falls" "$fell" yes
MODEL=$LLAMA run_job "a 1x1 llama job" "$(MODEL=$LLAMA job llama-one 1 1 4 1f1b 20 20)"
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/llama-one.losses"
same_losses "llama: 2x2 equals 1x1 to 1e-5" "$WORK/llama.losses" "$WORK/llama-one.losses" 1e-5
TIED="${LLAMA%\}},\"tie_embeddings\":true}"
MODEL=$TIED run_job "a 2x2 llama job with a tied head (first and last stage sum its gradient)" \
    "$(MODEL=$TIED job llama-tied 2 2 2 1f1b 20 20)"
LLAMA_TIED=$J
check "its stored spec says the head is tied" \
    "$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J" | jq -c '.spec.model | [.architecture, .tie_embeddings, .kv_heads]')" \
    '["llama",true,2]'
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/llama-tied.losses"
MODEL=$TIED run_job "a 1x1 llama job with a tied head" "$(MODEL=$TIED job llama-tied-one 1 1 4 1f1b 20 20)"
LLAMA_TIED_ONE=$J
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/llama-tied-one.losses"
same_losses "llama, tied: 2x2 equals 1x1 to 1e-5" "$WORK/llama-tied.losses" "$WORK/llama-tied-one.losses" 1e-5
# the families of the same blocks, 10 steps each (NAME=ARCHITECTURE[,FIELDS]):
# Qwen2's q, k, v biases; Qwen3's per-head q and k norms with heads of 16
# where d_model / heads is 8; OLMo-2's norms after the attention and the
# MLP; a Llama with a sliding window of 8 of the 32 positions
for FAM in 'qwen2="qwen2"' 'qwen3="qwen3","head_dim":16' 'olmo2="olmo2"' 'window="llama","sliding_window":8'; do
    NAME=${FAM%%=*}
    FMODEL="{\"architecture\":${FAM#*=},${LLAMA#*\"llama\",}"
    MODEL=$FMODEL run_job "a 2x2 $NAME job" "$(MODEL=$FMODEL job "$NAME" 2 2 2 1f1b 10 10)"
    job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/$NAME.losses"
    MODEL=$FMODEL run_job "a 1x1 $NAME job" "$(MODEL=$FMODEL job "$NAME-one" 1 1 4 1f1b 10 10)"
    job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/$NAME-one.losses"
    same_losses "$NAME: 2x2 equals 1x1 to 1e-5" "$WORK/$NAME.losses" "$WORK/$NAME-one.losses" 1e-5
done

# ---- connections dialled the other way, and through the relay (issue 37):
# the tied 2x2 job's nodes again (A B stage 0, C D stage 1, replicas 0 1),
# with A unable to connect to C (the pipeline link and the tied head's edge
# A to C turn round) and to B (the ring edge A to B turns: B dials A twice,
# on two channels), and C and D, B and D unable to connect to each other
# either way (stage 1's ring, replica 1's pipeline link and both edges of
# its tied head go through the relay).  Same losses as the 1x1 run.
req GET "$S/v1/jobs/$LLAMA_TIED" "$ADMIN"
read -r NA NB NC ND <<<"$(printf '%s' "$BODY" | jq -r '[.plan.assignments[] | .node_id] | @tsv')"
node_token() { jq -r .token "$WORK/agent-$(sql s "SELECT name FROM nodes WHERE id = $1")/node.json"; }
blocked() { printf '{"to":%s,"reachable":false,"why":"test: blocked"}' "$1"; }
req PUT "$S/v1/links" "$(node_token "$NA")" "{\"samples\":[$(blocked "$NC"),$(blocked "$NB")]}"
req PUT "$S/v1/links" "$(node_token "$NC")" "{\"samples\":[$(blocked "$ND")]}"
req PUT "$S/v1/links" "$(node_token "$ND")" "{\"samples\":[$(blocked "$NC"),$(blocked "$NB")]}"
req PUT "$S/v1/links" "$(node_token "$NB")" "{\"samples\":[$(blocked "$ND")]}"
req POST "$S/v1/jobs" "$ADMIN" "$(MODEL=$TIED job llama-turned 2 2 2 1f1b 20 20)"; TURNED=$(printf '%s' "$BODY" | jq -r .id)
# C's agent is stopped from the plan to the check of its assignment below:
# the job trains its 20 steps in about a second, and an assignment asked
# for after it succeeded is none (the check failed so on loaded machines).
# The others wait for C on their connections (--peer-timeout 20).
TOKEN_C=$(node_token "$NC"); PID_C=$(cat "$WORK/agent-$(sql s "SELECT name FROM nodes WHERE id = $NC").pid")
kill -STOP "$PID_C"
req POST "$S/v1/jobs/$TURNED/plan" "$ADMIN" "{\"stages\":[{\"nodes\":[$NA,$NB]},{\"nodes\":[$NC,$ND]}]}"
expect "a plan on nodes whose links are blocked one way or both is stored" 201 .epoch 1
check "it says how each connection is made (next, ring up, tied head; by stage and replica)" \
    "$(sql s "SELECT string_agg(a.next_way || '/' || a.up_way || '/' || a.tie_way, ' ' ORDER BY a.stage, a.replica)
              || ' ' || p.relay FROM assignments a JOIN plans p ON p.id = a.plan_id WHERE p.job_id = $TURNED GROUP BY p.relay")" \
    "reverse/reverse/reverse relay/dial/relay dial/relay/dial dial/relay/relay $RELAY_r"
req GET "$S/v1/agent/assignment" "$TOKEN_C"
kill -CONT "$PID_C"
tickets=$(printf '%s' "$BODY" | jq -c '[[.assignment.group[] | .up_ticket | .[0:2], length],
    ([.assignment.pipeline[] | has("next_ticket") or has("tie_ticket")] | any)]' 2>/dev/null) ||
    tickets="HTTP $STATUS: $(printf '%.400s' "$BODY")"
check "C's assignment carries its tickets for its relayed ring edges only: the dialer's to D, the listener's from D" \
    "$tickets" '[["00",176,"01",176],false]'
req GET "$S/v1/jobs/$TURNED" "$ADMIN"
check "the job's plan says which stage opens each pipeline link" \
    "$(printf '%s' "$BODY" | jq -c '[.plan.assignments[] | .dials_next]')" "[false,true,true,true]"
wait_for 400 finished "$TURNED"
check "the job with links turned round and relayed succeeds" "$(job_state "$S" "$ADMIN" "$TURNED")" succeeded
job_losses "$S" "$ADMIN" "$TURNED" | sort -k1,1 > "$WORK/turned.losses"
same_losses "turned and relayed, llama tied 2x2 equals 1x1 to 1e-5" "$WORK/turned.losses" "$WORK/llama-tied-one.losses" 1e-5
check "the relay joined its five links: stage 1's ring edges, replica 1's pipeline link and tied head's two edges" \
    "$(curl -s "http://$RELAY_r/metrics" | awk '$1 == "shoal_relay_pairs_total" { print $2 }')" 5
check "and forwarded the job's bytes" \
    "$(curl -s "http://$RELAY_r/metrics" | awk -v j="shoal_relay_job_bytes_total{job=\"$TURNED\"}" '$1 == j { print ($2 > 100000) }')" 1
check "every end it paired came with the server's ticket for it, and none was refused for one" \
    "$(curl -s "http://$RELAY_r/metrics" | awk '$1 == "shoal_relay_bad_tickets_total" { print $2 }')" 0
# measured again: connected both ways (the later jobs plan as before)
for pair in "$NA $NC" "$NA $NB" "$NC $ND" "$ND $NC" "$ND $NB" "$NB $ND"; do
    set -- $pair
    req PUT "$S/v1/links" "$(node_token "$1")" "{\"samples\":[{\"to\":$2,\"latency_ms\":0.1,\"bandwidth_gbps\":1}]}"
done
check "and the links are connected again" \
    "$(sql s "SELECT count(*) FROM link_reach WHERE NOT reachable AND from_node IN ($NA, $NB, $NC, $ND) AND to_node IN ($NA, $NB, $NC, $ND)")" 0
MODEL=$LLAMA run_job "a 4x1 llama job resumed from the 2-stage checkpoint at step 10" \
    "$(MODEL=$LLAMA job llama-resumed 4 1 4 gpipe 20 10 ",\"resume_from\":{\"job_id\":$LLAMA_MAIN,\"step\":10}")"
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/llama-resumed.losses"
same_losses "llama: its losses equal the straight run's (a re-split of the checkpoint)" \
    "$WORK/llama-resumed.losses" "$WORK/llama.losses" 1e-5

# ---- the step parts the agents report (docs/api.md, the step parts under
# /metrics), on every step of the four layouts above: disjoint stretches of
# the iteration, so none is negative and together they never exceed it
check "step parts: none negative, on all $(sql s "SELECT count(*) FROM job_steps") reports" \
    "$(sql s "SELECT count(*) FROM job_steps WHERE least(compute_s, send_s, recv_wait_s, bubble_s, allreduce_s) < 0")" 0
check "step parts: compute + send + recv_wait + bubble + allreduce <= iteration_s" \
    "$(sql s "SELECT count(*) || ' over, worst ' || coalesce(max(compute_s + send_s + recv_wait_s + bubble_s + allreduce_s
                - iteration_s)::text, '-') FROM job_steps
              WHERE compute_s + send_s + recv_wait_s + bubble_s + allreduce_s > iteration_s + 1e-6")" "0 over, worst -"
check "step parts: the bubble is not the receive wait counted twice" \
    "$(sql s "SELECT count(*) FROM job_steps WHERE recv_wait_s > 0 AND bubble_s = recv_wait_s")" 0
check "step parts: every stage after the first of the 4x1 job waits out the pipeline's fill, every step" \
    "$(sql s "SELECT count(*) FILTER (WHERE bubble_s > 0) || '/' || count(*) FROM job_steps
              WHERE job_id = $DEEP AND stage > 0")" "90/90"
check "step parts: the 1x1 and 1x4 jobs have no pipeline neighbour to wait for" \
    "$(sql s "SELECT max(send_s + recv_wait_s + bubble_s) FROM job_steps WHERE job_id IN ($ONE, $WIDE)")" 0

# ---- a restart from the main job's checkpoint at step 10
run_job "a 2x2 job resumed from step 10" "$(job resumed 2 2 2 1f1b 30 10 ",\"resume_from\":{\"job_id\":$MAIN,\"step\":10}")"
check "the resumed job starts at step 10" "$(sql s "SELECT min(step), count(DISTINCT step) FROM job_steps WHERE job_id = $J")" "10|20"
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/resumed.losses"
same_losses "its losses equal the straight run's" "$WORK/resumed.losses" "$WORK/main.losses" 1e-6
assembled() { cat "$WORK"/agent-*.log | grep -c "checkpoint job=$MAIN step=10 assembled"; }
BEFORE=$(assembled)   # the 2x2 restart above assembles too when its stages split the layers otherwise
run_job "a 4x1 job resumed from the 2-stage checkpoint at step 10" \
    "$(job deep-resumed 4 1 4 gpipe 30 10 ",\"resume_from\":{\"job_id\":$MAIN,\"step\":10}")"
# four stages assembled, in each epoch that started from the resume point
# (a recovery before the job's own first checkpoint starts there again)
check "its stages are assembled from the checkpoint's two files" \
    "$(n=$(($(assembled) - BEFORE)); e=$(sql s "SELECT plan_epoch FROM jobs WHERE id = $J")
       [ "$n" -gt 0 ] && [ $((n % 4)) = 0 ] && [ "$n" -le $((4 * e)) ] && echo "4 a start" || echo "$n in $e epochs")" "4 a start"
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/deep-resumed.losses"
same_losses "its losses equal the straight run's" "$WORK/deep-resumed.losses" "$WORK/main.losses" 1e-5

# ---- text from a checkpoint (shoal-agent sample, on the cpu)
# sample OUT [ARGS...]: runs the sampler with the admin token; its text in
# OUT, its stderr in OUT.err, its exit status in SAMPLE_RC.
sample() {
    local out=$1; shift
    "$SHOAL_AGENT" sample --server "$S" --admin-token-file "$WORK/s/admin.token" --tmp-dir "$WORK" "$@" \
        >"$out" 2>"$out.err"
    SAMPLE_RC=$?
}
sample "$WORK/s2x2" --job "$MAIN" --prompt "The " --tokens 40 --temperature 0
check "sample: greedy text from the 2x2 job's newest checkpoint" \
    "$SAMPLE_RC $(head -c 4 "$WORK/s2x2") $(($(wc -c < "$WORK/s2x2") >= 44))" "0 The  1"
check "sample: it says which checkpoint it loaded" "$(grep -o 'checkpoint step [0-9]*, 2 stage(s)' "$WORK/s2x2.err")" \
    "checkpoint step 30, 2 stage(s)"
sample "$WORK/s1x1" --job "$ONE" --prompt "The " --tokens 40 --temperature 0
check "sample: the 1x1 job (same losses) writes the same greedy text from one stage" \
    "$SAMPLE_RC $(cmp -s "$WORK/s2x2" "$WORK/s1x1" && echo same)" "0 same"
sample "$WORK/sl2x2" --job "$LLAMA_TIED" --prompt "The " --tokens 40 --temperature 0
sample "$WORK/sl1x1" --job "$LLAMA_TIED_ONE" --prompt "The " --tokens 40 --temperature 0
check "sample: the tied llama jobs (2x2 and 1x1, the same losses) write the same greedy text" \
    "$SAMPLE_RC $(head -c 4 "$WORK/sl2x2") $(cmp -s "$WORK/sl2x2" "$WORK/sl1x1" && echo same)" "0 The  same"
sample "$WORK/s10" --job "$MAIN" --step 10 --prompt "The " --tokens 40 --temperature 0
check "sample: --step 10 loads that checkpoint, and its model writes other text" \
    "$SAMPLE_RC $(grep -c 'checkpoint step 10,' "$WORK/s10.err") $(cmp -s "$WORK/s2x2" "$WORK/s10" || echo differs)" \
    "0 1 differs"
sample "$WORK/sa" --job "$MAIN" --tokens 60 --seed 5
sample "$WORK/sb" --job "$MAIN" --tokens 60 --seed 5
sample "$WORK/sc" --job "$MAIN" --tokens 60 --seed 6
check "sample: draws depend on the seed alone" \
    "$(cmp -s "$WORK/sa" "$WORK/sb" && echo same) $(cmp -s "$WORK/sa" "$WORK/sc" || echo differs)" "same differs"
sample "$WORK/sx" --job "$MAIN" --step 15
check "sample: a step with no complete checkpoint fails and says so" \
    "$SAMPLE_RC $(grep -c 'no complete checkpoint at step 15' "$WORK/sx.err")" "1 1"
sample "$WORK/sx" --job 987654
check "sample: an unknown job fails and says so" "$SAMPLE_RC $(grep -c 'job 987654' "$WORK/sx.err")" "1 1"
"$SHOAL_AGENT" sample --server "$S" --admin-token nope --job "$MAIN" >/dev/null 2>"$WORK/sx.err"
check "sample: a wrong admin token is refused" "$? $(grep -ci 'token' "$WORK/sx.err")" "1 1"
sample "$WORK/sp" --job "$MAIN" --prompt-tokens 84,104,101,32 --tokens 40 --temperature 0
check "sample: --prompt-tokens 84,104,101,32 on a text job writes what --prompt 'The ' does" \
    "$SAMPLE_RC $(cmp -s "$WORK/s2x2" "$WORK/sp" && echo same)" "0 same"
sample "$WORK/sx" --job "$MAIN" --prompt "The " --prompt-tokens 84
check "sample: --prompt and --prompt-tokens together are refused" \
    "$SAMPLE_RC $(grep -c 'pass one' "$WORK/sx.err")" "2 1"

# ---- the 2x2 job's model exported (shoal-agent export): model.safetensors,
# config.json and generation_config.json, each named with its size and SHA-256; llm.c's format
# refused, since shoal trains the head apart from the embedding
# the files export printed whose size and SHA-256 match the file's own
export_verified() {
    local name size sha
    while read -r name size _ _ sha; do
        [ "$(stat -c %s "$1/$name")" = "$size" ] &&
            [ "$(sha256sum "$1/$name" | cut -d' ' -f1)" = "$sha" ] && printf '%s ' "$name"
    done <"$1.out"
}
export_model "$WORK/ex" --job "$MAIN"
check "export: the 2x2 job's newest checkpoint as model.safetensors, config.json and generation_config.json, nothing else" \
    "$EXPORT_RC $(ls -A "$WORK/ex" | tr '\n' ' ')" "0 config.json generation_config.json model.safetensors "
check "export: each printed size and SHA-256 is the file's" "$(export_verified "$WORK/ex")" \
    "model.safetensors config.json generation_config.json "
check "export: config.json states the job's model, gpt2, and an untied head" \
    "$(jq -r '[.model_type, .n_embd, .n_head, .n_layer, .n_positions, .vocab_size, .tie_word_embeddings]
        | map(tostring) | join(" ")' "$WORK/ex/config.json")" "gpt2 32 2 4 32 256 false"
# a safetensors reader of the test's own: header JSON, F32 only, exactly
# GPT-2's tensor names and shapes for V=256, C=32, L=4, context 32, data
# contiguous from offset 0 to the end of the file
check "export: model.safetensors holds GPT-2's tensors for the job's model, F32, contiguous to the file's end" \
    "$(python3 - "$WORK/ex/model.safetensors" 256 32 4 32 <<'EOF'
import json, math, os, struct, sys
path, V, C, L, T = sys.argv[1], *map(int, sys.argv[2:])
want = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [T, C],
        "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C], "lm_head.weight": [V, C]}
for l in range(L):
    p = "transformer.h.%d." % l
    want.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C],
                 p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                 p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                 p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                 p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
                 p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C]})
with open(path, "rb") as f:
    n, = struct.unpack("<Q", f.read(8))
    head = json.loads(f.read(n))
size = os.path.getsize(path)
if head.pop("__metadata__", None) != {"format": "pt"}:
    sys.exit(print("metadata is not {format: pt}"))
if {k: v["shape"] for k, v in head.items()} != want:
    sys.exit(print("names or shapes differ:", sorted(set(head) ^ set(want))))
at = 0
for name, t in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    lo, hi = t["data_offsets"]
    if t["dtype"] != "F32" or lo != at or hi - lo != 4 * math.prod(t["shape"]):
        sys.exit(print(name, "is not F32 at", at, "of its size:", t))
    at = hi
print("ok" if 8 + n + at == size else "data ends at %d, the file at %d" % (8 + n + at, size))
EOF
)" ok
export_model "$WORK/ex10" --job "$MAIN" --step 10
check "export: --step 10 writes that checkpoint's model, another one" \
    "$EXPORT_RC $(cmp -s "$WORK/ex/model.safetensors" "$WORK/ex10/model.safetensors" || echo differs)" "0 differs"
export_model "$WORK/ex" --job "$MAIN" --llmc on
check "export --llmc on: an untied head is refused, saying why, after the other files; no model.bin, no temporary file" \
    "$EXPORT_RC $(grep -c 'model.bin not written.*not tied' "$WORK/ex.err") $(ls -A "$WORK/ex" | tr '\n' ' ')" \
    "1 1 config.json generation_config.json model.safetensors "
export_model "$WORK/exx" --job 987654
check "export: an unknown job fails and says so" "$EXPORT_RC $(grep -c 'job 987654' "$WORK/exx.err")" "1 1"
export_model "$WORK/exx" --llmc yes --job "$MAIN"
check "export: --llmc other than off or on is refused" "$EXPORT_RC $(grep -c 'off or on' "$WORK/exx.err")" "2 1"
export_model "$WORK/exx"
check "export: no --job is refused" "$EXPORT_RC $(grep -c 'job is required' "$WORK/exx.err")" "2 1"
for bad in "$WORK/no/such/dir:cannot create the --out directory" "$WORK/ex/config.json:is not a directory"; do
    "$SHOAL_AGENT" export --server "$S" --admin-token-file "$WORK/s/admin.token" --job "$MAIN" --out "${bad%%:*}" \
        >/dev/null 2>"$WORK/exx.err"
    check "export: a bad --out is refused before any download (${bad#*:})" \
        "$? $(grep -c -- "${bad#*:}" "$WORK/exx.err")" "2 1"
done

# ---- an llm.c-shard job: sampled as ids, then through a tokenizer file in
# llm.c's format written here, as text.  The shard is the corpus's bytes
# folded into 64 tokens; tokenizer.bin knows 60 of them (60-63 stand for a
# model's padding rows, never drawn through it), tokenizer64.bin all 64,
# tokenizer65.bin one more than the model has: 0 and 1 are the two halves
# of "é", the others "·N".
cat > "$WORK/llmc.py" <<'EOF'
import struct, sys
def piece(i):
    return b"\xc3" if i == 0 else b"\xa9" if i == 1 else ("\u00b7%d" % i).encode()
if sys.argv[1] == "shard":         # shard CORPUS SHARD
    ids = [b & 63 for b in open(sys.argv[2], "rb").read()[:100000]]
    with open(sys.argv[3], "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253))
        f.write(struct.pack("<%dH" % len(ids), *ids))
elif sys.argv[1] == "tokenizer":   # tokenizer FILE KNOWN
    known = int(sys.argv[3])
    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<256I", 20240328, 2, known, known - 1, *[0] * 252))
        for i in range(known):
            f.write(bytes([len(piece(i))]) + piece(i))
else:                              # decode IDS_FILE KNOWN: the text of the ids `sample` printed
    ids, known = [int(t) for t in open(sys.argv[2]).read().split()], int(sys.argv[3])
    sys.stdout.buffer.write(b"".join(piece(i) if i < known else b"<|%d|>" % i for i in ids) + b"\n")
EOF
python3 "$WORK/llmc.py" shard "$CORPUS" "$WORK/shard.bin"
for k in 60 64 65; do python3 "$WORK/llmc.py" tokenizer "$WORK/tokenizer$k.bin" "$k"; done
mv "$WORK/tokenizer60.bin" "$WORK/tokenizer.bin"
run_job "an llmc-shard job (a 64-token vocabulary)" \
    "$(printf '{"name":"llmc","model":{"vocab_size":64,"context_length":32,"d_model":32,"heads":2,"layers":2},
        "parallelism":{"stages":1,"replicas":1,"micro_batches":2,"micro_batch_size":2,"schedule":"1f1b"},
        "training":{"steps":10,"learning_rate":0.003,"warmup_steps":3,"seed":7},
        "data":{"path":"%s","format":"llmc"},"checkpoint_interval":10}' "$WORK/shard.bin")"
LLMC=$J
sample "$WORK/ids" --job "$LLMC" --prompt-tokens 0,1,63 --tokens 40 --seed 3
check "sample: an llmc job prints the prompt's and 40 drawn token ids, and says to pass --tokenizer for text" \
    "$SAMPLE_RC $(awk '{ print NF, $1, $2, $3 }' "$WORK/ids") $(grep -c 'pass --tokenizer' "$WORK/ids.err")" \
    "0 43 0 1 63 1"
sample "$WORK/text" --job "$LLMC" --prompt-tokens 0,1,63 --tokens 40 --seed 3 --tokenizer "$WORK/tokenizer64.bin"
check "sample --tokenizer (the model's 64 tokens): the same ids decoded, byte for byte" \
    "$SAMPLE_RC $(python3 "$WORK/llmc.py" decode "$WORK/ids" 64 | cmp -s - "$WORK/text" && echo same)" "0 same"
check "sample: as the checkpoint loads it says how far it is, on stderr" \
    "$(grep -c -e "loading job $LLMC's checkpoint of step 10: 1 stage file(s)" -e 'stage 0: [0-9.]* MB fetched' \
       -e 'stage 0 built (1 of 1' "$WORK/text.err")" 3
# tokenizer.bin, 60 tokens for the model's 64 rows: 60-63 are padding,
# which the model draws (ids300) but the sample through it never does
sample "$WORK/ids300" --job "$LLMC" --prompt-tokens 0,1,63 --tokens 300 --seed 3
sample "$WORK/text" --job "$LLMC" --prompt-tokens 0,1,63 --tokens 300 --seed 3 --tokenizer "$WORK/tokenizer.bin"
tail -c +9 "$WORK/text" > "$WORK/drawn"
check "sample --tokenizer (60 of the model's 64): the prompt's 63 prints as <|63|>, no drawn id is 60 or more" \
    "$SAMPLE_RC $(awk '{ for (i = 4; i <= NF; i++) n += $i >= 60 } END { print (n > 0) }' "$WORK/ids300") $(head -c 8 "$WORK/text") $(grep -a -c '<|' "$WORK/drawn") $(grep -a -o '·[0-9]*' "$WORK/drawn" | awk -F'·' '$2 >= 60' | wc -l) $(($(wc -c < "$WORK/drawn") > 300))" \
    "0 1 é<|63|> 0 0 1"
check "sample --tokenizer: it says which ids are padding, never drawn" \
    "$(grep -c 'holds 60 tokens, the model 64: ids 60 to 63 (padding rows) are never drawn' "$WORK/text.err")" 1
sample "$WORK/sx" --job "$LLMC" --tokenizer "$WORK/tokenizer65.bin"
check "sample: a tokenizer of more tokens than the model's vocabulary: refused with both numbers before a download, nothing printed" \
    "$SAMPLE_RC $(grep -c 'holds 65 tokens, more than the 64 of job' "$WORK/sx.err") $(wc -c < "$WORK/sx") $(grep -c 'loading job' "$WORK/sx.err")" \
    "2 1 0 0"
run_job "an llmc-shard job of 2048 rows (its shard's ids use 64)" \
    "$(printf '{"name":"llmc-wide","model":{"vocab_size":2048,"context_length":32,"d_model":32,"heads":2,"layers":1},
        "parallelism":{"stages":1,"replicas":1,"micro_batches":1,"micro_batch_size":2,"schedule":"1f1b"},
        "training":{"steps":2,"learning_rate":0.003,"warmup_steps":1,"seed":7},
        "data":{"path":"%s","format":"llmc"},"checkpoint_interval":2}' "$WORK/shard.bin")"
sample "$WORK/sx" --job "$J" --tokenizer "$WORK/tokenizer.bin" --tokens 5
check "sample: a tokenizer far smaller than the model's vocabulary (60 for 2048) is another's: refused, both numbers said, nothing printed" \
    "$SAMPLE_RC $(grep -c 'holds 60 tokens, far fewer than the 2048 of job' "$WORK/sx.err") $(wc -c < "$WORK/sx")" "2 1 0"
sample "$WORK/sx" --job "$LLMC" --prompt "The "
check "sample: a text prompt for an llmc job needs the tokenizer to encode it" \
    "$SAMPLE_RC $(grep -c 'encoded with --tokenizer.*--prompt-tokens' "$WORK/sx.err")" "2 1"
sample "$WORK/sx" --job "$LLMC" --prompt "The " --tokenizer "$WORK/tokenizer.bin"
check "sample: a tokenizer file of no known encoding prints ids as text but cannot encode a prompt" \
    "$SAMPLE_RC $(grep -c 'decodes ids but cannot encode text' "$WORK/sx.err")" "1 1"
sample "$WORK/sx" --job "$LLMC" --prompt-tokens 5,64
check "sample: a prompt id outside the model's vocabulary is refused" \
    "$SAMPLE_RC $(grep -c 'id 64 (number 2) is outside the model.s vocabulary of 64' "$WORK/sx.err")" "2 1"
sample "$WORK/sx" --job "$LLMC" --prompt-tokens "5,,6"
check "sample: --prompt-tokens that are not ids are refused" \
    "$SAMPLE_RC $(grep -c 'must be token ids' "$WORK/sx.err")" "2 1"
head -c -2 "$WORK/tokenizer.bin" > "$WORK/tokenizer-cut.bin"
sample "$WORK/sx" --job "$LLMC" --tokenizer "$WORK/tokenizer-cut.bin"
check "sample: a truncated tokenizer file is refused, naming it and the token cut" \
    "$SAMPLE_RC $(grep -c "tokenizer '$WORK/tokenizer-cut.bin': the file ends inside token 59" "$WORK/sx.err")" "2 1"
sample "$WORK/sx" --job "$MAIN" --tokenizer "$WORK/tokenizer.bin"
check "sample: --tokenizer for a byte-level job is refused" \
    "$SAMPLE_RC $(grep -c 'byte-level.*drop --tokenizer' "$WORK/sx.err")" "2 1"

# ---- the README's sample and export examples as written (agents.sh)
mkdir -p "$README_DIR"
cp "$WORK/tokenizer.bin" "$README_DIR/gpt2_tokenizer.bin"
readme_example sample J="$MAIN"
check "the README's sample example runs as written: 300 tokens after 'The '" \
    "$EXAMPLE_RC $(head -c 4 "$README_DIR/sample.out") $(($(wc -c < "$README_DIR/sample.out") >= 304))" "0 The  1"
readme_example sample-tokens J="$LLMC"
check "the README's --tokenizer example runs as written: 300 tokens as text" \
    "$EXAMPLE_RC $(grep -c 'checkpoint step 10' "$README_DIR/sample-tokens.err") $(($(wc -c < "$README_DIR/sample-tokens.out") >= 300))" "0 1 1"
readme_example export J="$MAIN"
check "the README's export example runs as written: gpt-job holds model.safetensors, config.json and generation_config.json" \
    "$EXAMPLE_RC $(ls "$README_DIR/gpt-job" | tr '\n' ' ')" "0 config.json generation_config.json model.safetensors "

# ---- garbage on a peer port: dropped and logged, the agent goes on (a
# wrong secret, CRC, job, epoch, step or shape is tested in test_peer)
ADDR=$(sql s "SELECT peer_address FROM nodes WHERE name = 'a0'")
PORT=${ADDR##*:}
if exec 3<>"/dev/tcp/127.0.0.1/$PORT"; then
    head -c 104 <&3 >/dev/null                     # the listener's hello: header and nonce
    printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n%0200d' 0 >&3
    exec 3<&- 3>&-
fi
if exec 3<>"/dev/tcp/127.0.0.1/$PORT"; then
    head -c 104 <&3 >/dev/null
    head -c 112 /dev/urandom >&3
    exec 3<&- 3>&-
fi
dropped() { [ "$(grep -c "peer: refused 127.0.0.1:.*bad frame header" "$WORK/agent-a0.log")" -ge 2 ]; }
if wait_for 10 dropped; then ok "garbage on a peer port is dropped and logged with the sender's address"
else fail "garbage on a peer port is dropped and logged with the sender's address" "$(grep 'peer:' "$WORK/agent-a0.log" | tail -n 3)"; fi
if kill -0 "$(cat "$WORK/agent-a0.pid")" 2>/dev/null; then ok "the agent keeps running"; else fail "the agent keeps running"; fi

# ---- a checkpoint store that fails (its job directory is a file, so no
# upload can be kept): the job trains on with its progress visible and
# says why; trained, it waits for its final checkpoint, running; once the
# store works again the retried upload lands and the job succeeds
req POST "$S/v1/jobs" "$ADMIN" "$(job store 2 1 2 1f1b 12 4)"
J=$(printf '%s' "$BODY" | jq -r .id)
mkdir -p "$WORK/s/checkpoints"
: > "$WORK/s/checkpoints/job$J"
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
store_failed() { [ "$(job_detail_field "$J" '.checkpoint_failures > 0 and .latest_step == 12')" = true ]; }
job_detail_field() { curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$1" | jq -r "$2"; }
if wait_for 90 store_failed; then ok "a failing store: progress goes on to the last step"
else fail "a failing store: progress goes on to the last step" "$(job_detail_field "$J" '[.state, .latest_step, .checkpoint_failures] | tostring')"; fi
check "the job is still running and says why" \
    "$(job_detail_field "$J" '[.state, (.checkpoint_error | test("Not a directory"))] | join(" ")')" "running true"
scrape_failures() { curl -s "$S/metrics" | sed -n "s/^shoal_job_checkpoint_failures_total{job_id=\"$J\"} //p"; }
check "/metrics counts the failures" "$([ "$(scrape_failures)" -ge 1 ] 2>/dev/null && echo yes)" yes
# The job holds still here (trained, it waits for its final checkpoint):
# /metrics of a real training job.  Its step parts are the complete step's
# (both stages reported) and add up to that step's mean iteration time.
curl -s "$S/metrics" > "$WORK/live.metrics"
lint=$(promtool check metrics < "$WORK/live.metrics" 2>&1)
check "promtool check metrics on a training job's series: no warnings" "$?:$lint" "0:"
check "/metrics: the training job's six step parts, none negative" \
    "$(grep "^shoal_job_step_part_seconds{job_id=\"$J\"," "$WORK/live.metrics" | awk '$2 >= 0 { n++ } END { print n + 0 }')" 6
complete_s=$(sql s "SELECT avg(iteration_s) FROM job_steps WHERE job_id = $J AND step =
                      (SELECT max(step) FROM (SELECT step FROM job_steps WHERE job_id = $J GROUP BY step HAVING count(*) = 2) c)")
parts_s=$(grep "^shoal_job_step_part_seconds{job_id=\"$J\"," "$WORK/live.metrics" | awk '{ s += $2 } END { printf "%.17g", s }')
check "/metrics: sum without(part) is the complete step's mean iteration time, not more" \
    "$(awk -v p="$parts_s" -v c="$complete_s" 'BEGIN { d = p - c; if (d < 0) d = -d; print (c > 0 && d <= 1e-9 * c) ? "yes" : p " vs " c }')" yes
rm "$WORK/s/checkpoints/job$J"
wait_for 60 finished "$J"
check "the store back, the retried uploads land and the job succeeds, the error cleared" \
    "$(job_detail_field "$J" '[.state, .checkpoint_error, .latest_step] | tostring')" '["succeeded",null,12]'
check "with its final checkpoint complete" \
    "$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J/checkpoints" | jq -c '[.checkpoints[] | select(.complete) | .step] | max')" 12

# ---- an assignment its agents cannot run (as from a newer server: a stage
# link type they do not know, written into the job by a trigger as its
# plan is stored, after the planner read the spec): they say so, and the
# job does not wait in 'scheduled' for them
req POST "$S/v1/jobs" "$ADMIN" "$(job alien 2 1 2 1f1b 12 0)"
J=$(printf '%s' "$BODY" | jq -r .id)
sql s "CREATE FUNCTION alien_spec() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN
         UPDATE jobs SET spec = jsonb_set(spec, '{communication,stage_link}', '\"fp4\"') WHERE id = NEW.job_id;
         RETURN NEW; END \$\$;
       CREATE TRIGGER alien_spec AFTER INSERT ON plans FOR EACH ROW WHEN (NEW.job_id = $J) EXECUTE FUNCTION alien_spec()"
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
refused() { [ "$(sql s "SELECT count(*) FROM job_faults WHERE job_id = $J AND reason LIKE '%cannot run its assignment: unknown wire type ''fp4''%upgrade it%'")" -ge 2 ]; }
if wait_for 30 refused; then ok "agents that cannot run their assignment report it, with why"
else fail "agents that cannot run their assignment report it, with why" "$(sql s "SELECT state FROM jobs WHERE id = $J; SELECT reason FROM job_faults WHERE job_id = $J")"; fi
check "the job says why it re-plans or failed" \
    "$(sql s "SELECT coalesce(failure_reason, recovery_reason) LIKE '%cannot run its assignment%' FROM jobs WHERE id = $J")" t
# (the spec put back before any answer shows it: the API's answers are
# checked against the OpenAPI document, where "fp4" is no wire type)
sql s "DROP TRIGGER alien_spec ON plans; DROP FUNCTION alien_spec();
       UPDATE jobs SET spec = jsonb_set(spec, '{communication,stage_link}', '\"f32\"') WHERE id = $J" > /dev/null
req DELETE "$S/v1/jobs/$J" "$ADMIN"
wait_for 30 finished "$J"

# ---- an agent killed mid-run: its neighbours report it and the job goes
# to recovery (test_recovery.sh follows a recovery through); a 4x1 job on
# the four agents, so that it waits there for a node (fewer replicas are
# no way out with one); an operator can cancel it there
req POST "$S/v1/jobs" "$ADMIN" "$(job long 4 1 2 1f1b 100000 0)"
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
running() { [ "$(sql s "SELECT count(*) FROM job_steps WHERE job_id = $J")" -gt 8 ]; }
wait_for 120 running
VICTIM=$(sql s "SELECT n.name FROM assignments a JOIN plans p ON p.id = a.plan_id JOIN nodes n ON n.id = a.node_id WHERE p.job_id = $J AND a.stage = 1 AND a.replica = 0")
kill -9 "$(cat "$WORK/agent-$VICTIM.pid")"
recovering() { [ "$(job_state "$S" "$ADMIN" "$J")" = recovering ]; }
wait_for 60 recovering
check "killing an agent sends the job to recovery" "$(job_state "$S" "$ADMIN" "$J")" recovering
reason=$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J" | jq -r .recovery_reason)
case $reason in *closed*|*peer*) ok "the reason names the peer: $reason";;
                *) fail "the reason names the peer" "$reason";; esac
req DELETE "$S/v1/jobs/$J" "$ADMIN"; expect "a recovering job can be cancelled" 200 .state cancelled
idle() { [ "$(sql s "SELECT count(*) FROM nodes WHERE name <> '$VICTIM' AND state = 'idle' AND current_job_id IS NULL")" = 3 ]; }
if wait_for 30 idle; then ok "its agents go idle"; else fail "its agents go idle" "$(sql s "SELECT name, state, current_job_id FROM nodes")"; fi
for a in a0 a1 a2 a3; do
    [ "$a" = "$VICTIM" ] && continue
    stop_agent "$a"
    check "agent $a exits cleanly on SIGTERM" "$AGENT_RC" 0
done
check_no_secrets s
exit 0
