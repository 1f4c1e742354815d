#!/usr/bin/env bash
# test_recovery.sh - real agents on loopback lose one of their own (kill -9)
# in the middle of a 2x2 job: with a spare registered the server re-plans
# onto it from the latest complete checkpoint and the job succeeds with the
# losses of an uninterrupted run, each step recorded once; with no spare it
# goes on with fewer replicas, and with too few nodes for one it waits in
# 'recovering' until agents join.  The server itself is
# killed and restarted mid-run: nothing is lost or recorded twice.  A node
# that stalls (SIGSTOP) is found out and worked around.  A node that dies
# between its step's all-reduce and its report costs no step.  A job whose
# dataset is missing or too short fails at once, saying why.  A failing
# checkpoint store plus a kill costs one re-plan from the survivors.  A
# drained node's job moves off it to a spare from the survivors' step.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"

# Heartbeats every second (agents.sh); a node silent for 3 s is lost.
HB_TIMEOUT=3
start_server s --heartbeat-timeout "$HB_TIMEOUT" || exit 1
S=$URL_s
ADMIN=$(cat "$WORK/s/admin.token")
CORPUS=/usr/share/common-licenses/GPL-3
[ -r "$CORPUS" ] || CORPUS=$(cd "$(dirname "$0")/../.." && pwd)/README.md

# A neighbour silent for 5 s fails a step (a stalled node).
for n in a0 a1 a2 a3 a4; do start_agent "$n" s --peer-timeout 5; done
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest WHERE bandwidth_gbps > 0")" = 20 ]; }
if wait_for 120 links_up; then ok "five agents register and measure their twenty links"
else fail "five agents register and measure their twenty links" "$(sql s "SELECT count(*) FROM links_latest")"; exit 1; fi

# job NAME: a 2x2 job of 40 steps with a checkpoint every 5.  f32 stage
# links: a re-plan may split the layers otherwise, and only f32 links
# (nothing rounded at a stage boundary) give the same bits on any split.
job() {
    printf '{"name":"%s","model":{"vocab_size":256,"context_length":64,"d_model":64,"heads":2,"layers":4},' "$1"
    printf '"parallelism":{"stages":2,"replicas":2,"micro_batches":4,"micro_batch_size":2,"schedule":"1f1b"},'
    printf '"training":{"steps":40,"learning_rate":0.003,"warmup_steps":3,"weight_decay":0.1,"grad_clip":1.0,"seed":11},'
    printf '"data":{"path":"%s","format":"text"},"checkpoint_interval":5,"communication":{"stage_link":"f32"}}' "$CORPUS"
}
state_of() { job_state "$S" "$ADMIN" "$1"; }
is_state() { [ "$(state_of "$1")" = "$2" ]; }
# start_job NAME [SED]: creates it (its spec edited by the sed script
# SED) and schedules it; sets J.
start_job() {
    req POST "$S/v1/jobs" "$ADMIN" "$(job "$1" | sed "${2:-}")"
    J=$(printf '%s' "$BODY" | jq -r .id)
    # A newcomer's links are measured only once its peers are idle too.
    req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200,"fill_missing_links":{"latency_ms":1,"bandwidth_gbps":1}}'
    [ "$STATUS" = 201 ] || fail "$1 is scheduled" "status $STATUS: $BODY"
}
reached() { [ "$(sql s "SELECT count(*) FROM job_steps WHERE job_id = $1 AND step = $2")" = 4 ]; }
node_of() { sql s "SELECT n.name FROM assignments a JOIN plans p ON p.id = a.plan_id JOIN nodes n ON n.id = a.node_id
                   JOIN jobs j ON j.id = p.job_id AND j.plan_epoch = p.epoch WHERE j.id = $1 AND a.stage = $2 AND a.replica = $3"; }
now() { date +%s.%N; }
# since T SQL_TIMESTAMP: seconds from T (date +%s.%N) to the timestamp.
since() { sql s "SELECT round((extract(epoch FROM ($2)) - $1)::numeric, 2)"; }

# ---- the reference: the same job, uninterrupted
start_job reference
wait_for 300 is_state "$J" succeeded
check "the reference job succeeds" "$(state_of "$J")" succeeded
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/reference.losses"
check "its losses cover 40 steps" "$(wc -l < "$WORK/reference.losses")" 40

# ---- drain a node of the plan, a spare standing by: the job moves off it
# at once (its tasklets stop at the step in flight) and goes on from the
# survivors' step on the spare, none trained again, whatever speeds the
# nodes timed at start-up; nothing failed, so nothing is blamed and no
# recovery is counted.  One survivor is made to look 20 times slower than
# it trains, as an agent that timed itself while its neighbours started on
# the same busy cores: priced that way, a search that gives its stage
# fewer layers looks over twice as quick as the repair, and the drain used
# to resume from the checkpoint (here the start: no checkpoints, so the
# survivors' step is never a checkpoint's, where no step is saved either way).
start_job drain 's/"checkpoint_interval":5/"checkpoint_interval":0/'
DRAINED=$(node_of "$J" 0 1)
DRAINED_ID=$(sql s "SELECT id FROM nodes WHERE name = '$DRAINED'")
BUSY=$(node_of "$J" 1 0)
BUSY_TFLOPS=$(sql s "SELECT tflops FROM nodes WHERE name = '$BUSY'")
sql s "UPDATE nodes SET tflops = tflops / 20 WHERE name = '$BUSY'" > /dev/null
wait_for 120 reached "$J" 8
req POST "$S/v1/nodes/$DRAINED_ID/drain" "$ADMIN"
check "draining a node of a running job answers the node, draining" \
    "$STATUS $(printf '%s' "$BODY" | jq -r .state)" "200 draining"
replanned() { [ "$(sql s "SELECT plan_epoch FROM jobs WHERE id = $J")" = 2 ]; }
if wait_for 60 replanned; then ok "the job is re-planned without the drained node"
else fail "the job is re-planned without the drained node" "$(sql s "SELECT state, recovery_waiting FROM jobs WHERE id = $J")"; fi
check "saying why, with no recovery counted" \
    "$(sql s "SELECT recovery_reason, recoveries FROM jobs WHERE id = $J")" "node $DRAINED_ID ($DRAINED) is draining|0"
plan2=$(sql s "SELECT string_agg(n.name, ',' ORDER BY n.name) FROM assignments a JOIN plans p ON p.id = a.plan_id
               JOIN nodes n ON n.id = a.node_id WHERE p.job_id = $J AND p.epoch = 2")
check "epoch 2 leaves the drained node out, four nodes still training" \
    "$(case ",$plan2," in *",$DRAINED,"*) echo drained;; esac)$(printf '%s\n' "$plan2" | tr ',' '\n' | wc -l)" 4
R=$(sql s "SELECT resume_step FROM plans WHERE job_id = $J AND epoch = 2")
# (where no survivor of some stage holds a step the others do, no repair
# is offered and there is no choice to make: the log says why)
NO_OFFER=$(grep -o "job $J resumes from a checkpoint, not from its survivors: .*" "$WORK/s.log" | head -n 1)
if [ -n "$NO_OFFER" ] && [ "$(sql s "SELECT detail ? 'live_resume' FROM plans WHERE job_id = $J AND epoch = 2")" = f ]; then
    ok "and goes on from the survivors' step # SKIP no repair offered: ${NO_OFFER#*: }"
else check "and goes on from the survivors' step (live, 8 or later), 0 steps trained again, whatever the speeds say" \
    "$(sql s "SELECT (live->>'step')::bigint = resume_step AND resume_step >= 8, detail->'steps_retrained',
                     detail->'live_resume'->>'chosen', detail->'live_resume'->'drain'
              FROM plans WHERE job_id = $J AND epoch = 2")" "t|0|survivors|true"; fi
ok "the drain's move resumed from step $R ($(sql s "SELECT CASE WHEN live IS NULL THEN 'a checkpoint or the start' ELSE 'the survivors''' END
    || ', predicted ' || round((detail->'live_resume'->>'repair_s')::numeric, 4) || ' s a step against the search''s '
    || round((detail->'live_resume'->>'searched_s')::numeric, 4) FROM plans WHERE job_id = $J AND epoch = 2"))"
sql s "UPDATE nodes SET tflops = $BUSY_TFLOPS WHERE name = '$BUSY'" > /dev/null
wait_for 300 is_state "$J" succeeded
check "the moved job succeeds, blaming no node or link" \
    "$(state_of "$J") $(sql s "SELECT count(*) FROM job_faults WHERE job_id = $J")" "succeeded 0"
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/drain.losses"
check "with the uninterrupted run's losses, each step once" \
    "$(join "$WORK/drain.losses" "$WORK/reference.losses" | awk '$2 != $3 { d++ } END { print NR, d + 0 }') $(sql s \
       "SELECT count(*) = count(DISTINCT (step, stage, replica)) FROM job_steps WHERE job_id = $J")" "40 0 t"
check "the drained node stays draining" "$(sql s "SELECT state FROM nodes WHERE id = $DRAINED_ID")" draining
req POST "$S/v1/nodes/$DRAINED_ID/undrain" "$ADMIN"
check "undrained, it is back in the fleet" "$STATUS $(printf '%s' "$BODY" | jq -r .state)" "200 idle"

# ---- kill -9 a node of the plan, a spare standing by
start_job spare
wait_for 120 reached "$J" 12
VICTIM=$(node_of "$J" 1 0)
SPARE=$(sql s "SELECT name FROM nodes WHERE name NOT IN (SELECT n.name FROM assignments a JOIN plans p ON p.id = a.plan_id
               JOIN nodes n ON n.id = a.node_id WHERE p.job_id = $J)")
t_kill=$(now)
kill -9 "$(cat "$WORK/agent-$VICTIM.pid")"
# (counted, not seen: it may be recovering for less than a poll)
recovered() { [ "$(sql s "SELECT recoveries FROM jobs WHERE id = $J")" -ge 1 ]; }
if wait_for 60 recovered; then ok "the job goes to recovery"
else fail "the job goes to recovery" "state $(state_of "$J")"; fi
t_recovering=$(now)
reason=$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J" | jq -r .recovery_reason)
case $reason in *peer*|*lost*) ok "saying why: $reason";; *) fail "saying why" "$reason";; esac
wait_for 60 replanned
# Its neighbours name it by node id (and theirs may name the neighbour that
# gave up); the server's probe of its peer port is refused, so it is the
# culprit of every report and left out of the re-plan at once.
VICTIM_ID=$(sql s "SELECT id FROM nodes WHERE name = '$VICTIM'")
req GET "$S/v1/jobs/$J" "$ADMIN"
check "the failure is pinned on the killed node (its peer port refuses the server's probe)" \
    "$(printf '%s' "$BODY" | jq -r --argjson v "$VICTIM_ID" '[.faults[] | select(.epoch == 1)] |
        [length > 0, all(.verdict == "node" and .culprit_node == $v),
         (.[0].judgement | test("refused"))] | map(tostring) | join(" ")')" "true true true"
lost() { [ "$(sql s "SELECT state FROM nodes WHERE name = '$VICTIM'")" = lost ]; }
wait_for 30 lost
check "the killed node is lost" "$(sql s "SELECT state FROM nodes WHERE name = '$VICTIM'")" lost
R=$(sql s "SELECT resume_step FROM plans WHERE job_id = $J AND epoch = 2")
LIVE=$(sql s "SELECT (live->>'step')::bigint = resume_step FROM plans WHERE job_id = $J AND epoch = 2")
check "epoch 2 resumes from the survivors' step (live) or the latest complete checkpoint (a multiple of 5), 10 or later" \
    "$([ -n "$R" ] && { [ "$LIVE" = t ] || [ $((R % 5)) = 0 ]; } && [ "$R" -ge 10 ] && echo yes)" yes
plan2=$(sql s "SELECT string_agg(n.name, ',' ORDER BY n.name) FROM assignments a JOIN plans p ON p.id = a.plan_id
               JOIN nodes n ON n.id = a.node_id WHERE p.job_id = $J AND p.epoch = 2")
check "and runs on the spare instead of the lost node" \
    "$(case ",$plan2," in *",$SPARE,"*) echo spare;; esac)$(case ",$plan2," in *",$VICTIM,"*) echo victim;; esac)" spare
wait_for 300 is_state "$J" succeeded
check "the job succeeds" "$(state_of "$J")" succeeded
check "job_steps holds each step of each tasklet once" \
    "$(sql s "SELECT count(*), count(DISTINCT (step, stage, replica)), min(step), max(step) FROM job_steps WHERE job_id = $J")" \
    "160|160|0|39"
check "steps from the checkpoint on are epoch 2's, those before epoch 1's" \
    "$(sql s "SELECT count(*) FROM job_steps WHERE job_id = $J AND (step >= $R) <> (epoch = 2)")" 0
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/spare.losses"
check "its per-step losses equal the uninterrupted run's" \
    "$(join "$WORK/spare.losses" "$WORK/reference.losses" | awk '$2 != $3 { d++ } END { print NR, d + 0 }')" "40 0"
detect=$(awk -v a="$t_kill" -v b="$t_recovering" 'BEGIN { printf "%.2f", b - a }')
replan=$(since "$t_kill" "(SELECT created_at FROM plans WHERE job_id = $J AND epoch = 2)")
again=$(since "$t_kill" "(SELECT min(reported_at) FROM job_steps WHERE job_id = $J AND epoch = 2)")
ok "recovery times: recovering after ${detect} s (polled), re-planned after ${replan} s, training again after ${again} s, from step $R"

# ---- kill -9 with no spare: the job goes on with fewer replicas, each
# training more micro-batches, so that every step reads the same sequences
# and its losses are the uninterrupted run's to rounding (the gradients are
# summed in another order).  With too few nodes even for one replica it
# waits in recovery until nodes join.
start_job nospare
wait_for 120 reached "$J" 7
VICTIM2=$(node_of "$J" 0 1)
kill -9 "$(cat "$WORK/agent-$VICTIM2.pid")"
wait_for 60 replanned
check "with no spare, epoch 2 trains 1 replica of 8 micro-batches instead of 2 of 4" \
    "$(sql s "SELECT replicas, micro_batches, (SELECT count(*) FROM assignments WHERE plan_id = p.id) FROM plans p
              WHERE job_id = $J AND epoch = 2")" "1|8|2"
R2=$(sql s "SELECT resume_step FROM plans WHERE job_id = $J AND epoch = 2")
req GET "$S/v1/jobs/$J" "$ADMIN"
check "the job's plan says so" "$(printf '%s' "$BODY" | jq -r '[.plan.replicas, .plan.micro_batches] | join(" ")')" "1 8"
# reached_rows JOB STEP ROWS: that step has ROWS tasklet reports
reached_rows() { [ "$(sql s "SELECT count(*) FROM job_steps WHERE job_id = $1 AND step = $2")" = "$3" ]; }
wait_for 120 reached_rows "$J" $((R2 + 2)) 2
check "it trains on: step $((R2 + 2)) reported by both stages of the one replica" \
    "$(reached_rows "$J" $((R2 + 2)) 2 && echo yes)" yes
K1=$(node_of "$J" 0 0) K2=$(node_of "$J" 1 0)
kill -9 "$(cat "$WORK/agent-$K1.pid")" "$(cat "$WORK/agent-$K2.pid")"
waiting() { [ -n "$(sql s "SELECT recovery_waiting FROM jobs WHERE id = $J AND state = 'recovering'")" ]; }
if wait_for 60 waiting; then ok "with too few nodes for one replica the job waits in recovery"
else fail "with too few nodes for one replica the job waits in recovery" "$(sql s "SELECT state, recovery_waiting FROM jobs WHERE id = $J")"; fi
# (the two die at once but may be found lost a heartbeat apart: until the
# second is, the re-plan waits for what it holds, as for any survivor)
short_of_nodes() { sql s "SELECT recovery_waiting FROM jobs WHERE id = $J" | grep -q "needs 2 nodes"; }
wait_for $((HB_TIMEOUT + 5)) short_of_nodes
req GET "$S/v1/jobs/$J" "$ADMIN"
case $(printf '%s' "$BODY" | jq -r .recovery_waiting) in *"needs 2 nodes (2 stages x 1 replicas, the fewest"*"1 are available"*)
    ok "and says what for";;
    *) fail "and says what for" "$(printf '%s' "$BODY" | jq -r .recovery_waiting)";; esac
sleep 3
check "it stays there" "$(state_of "$J")" recovering
req GET "$S/metrics"
check "visible in the metrics" "$(printf '%s\n' "$BODY" | grep '^shoal_jobs{state="recovering"}')" 'shoal_jobs{state="recovering"} 1'
start_agent "$K1" s --peer-timeout 5
start_agent "$K2" s --peer-timeout 5
wait_for 300 is_state "$J" succeeded
check "the killed agents start again: the job resumes and succeeds" "$(state_of "$J")" succeeded
check "epoch 3 from its latest checkpoint ($R2 or later), with 1 replica of 8 micro-batches" \
    "$(sql s "SELECT p.resume_step >= $R2 AND p.resume_step % 5 = 0 AND p.live IS NULL, p.replicas, p.micro_batches
              FROM plans p WHERE p.job_id = $J AND p.epoch = 3")" "t|1|8"
check "each step once, and whole: 4 tasklets before step $R2, 2 from it on" \
    "$(sql s "SELECT count(*) = count(DISTINCT (step, stage, replica)), count(DISTINCT step),
                     bool_and(n = CASE WHEN step < $R2 THEN 4 ELSE 2 END)
              FROM (SELECT step, stage, replica, count(*) OVER (PARTITION BY step) AS n FROM job_steps
                    WHERE job_id = $J) s")" "t|40|t"
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/nospare.losses"
check "with the uninterrupted run's losses to 1e-5" \
    "$(join "$WORK/nospare.losses" "$WORK/reference.losses" |
       awk '{ d = $2 - $3; if (d < 0) d = -d; if (d > 1e-5) n++; if (d > m) m = d } END { print NR, n + 0 }')" "40 0"
ok "the largest loss difference: $(join "$WORK/nospare.losses" "$WORK/reference.losses" |
    awk '{ d = $2 - $3; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.2g", m }')"
start_agent a5 s --peer-timeout 5
four_up() { [ "$(sql s "SELECT count(*) FROM nodes WHERE state = 'idle' AND last_heartbeat_at > now() - interval '2 s'")" -ge 4 ]; }
wait_for 60 four_up

# ---- kill -9 the server mid-run and start it again on its port and
# database: the agents train on, their progress waits for it
start_job restart
wait_for 120 reached "$J" 8
PORT=${S##*:}
kill -9 "$(cat "$WORK/s.pid")"
sleep $((HB_TIMEOUT + 2))   # longer than a heartbeat timeout
start_server s --heartbeat-timeout "$HB_TIMEOUT" --port "$PORT" || exit 1
wait_for 300 is_state "$J" succeeded
check "with the server killed and restarted the job succeeds" "$(state_of "$J")" succeeded
check "in its first epoch: no node was taken for lost" "$(sql s "SELECT plan_epoch, recoveries, recovery_reason FROM jobs WHERE id = $J")" "1|0|"
check "job_steps holds every step once" \
    "$(sql s "SELECT count(*), count(DISTINCT (step, stage, replica)) FROM job_steps WHERE job_id = $J")" "160|160"
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/restart.losses"
check "with the uninterrupted run's losses" \
    "$(join "$WORK/restart.losses" "$WORK/reference.losses" | awk '$2 != $3 { d++ } END { print NR, d + 0 }')" "40 0"

# ---- a node that stalls mid-step (SIGSTOP): found out, worked around
start_agent a6 s --peer-timeout 5
spare_up() { [ "$(sql s "SELECT count(*) FROM nodes WHERE state = 'idle' AND last_heartbeat_at > now() - interval '2 s'")" -ge 5 ]; }
wait_for 60 spare_up
start_job stall
wait_for 120 reached "$J" 8
STALLED=$(node_of "$J" 0 0)
t_stop=$(now)
kill -STOP "$(cat "$WORK/agent-$STALLED.pid")"
wait_for 300 is_state "$J" succeeded
check "a stalled node: the job recovers without it and succeeds" \
    "$(state_of "$J") $(sql s "SELECT count(*) FROM assignments a JOIN plans p ON p.id = a.plan_id JOIN nodes n ON n.id = a.node_id
                          WHERE p.job_id = $J AND p.epoch = 2 AND n.name = '$STALLED'")" "succeeded 0"
ok "the stall: re-planned $(since "$t_stop" "(SELECT created_at FROM plans WHERE job_id = $J AND epoch = 2)") s after SIGSTOP ($(sql s "SELECT recovery_reason FROM jobs WHERE id = $J"))"
check "each step once, with the uninterrupted run's losses" \
    "$(sql s "SELECT count(*), count(DISTINCT (step, stage, replica)) FROM job_steps WHERE job_id = $J") $(job_losses "$S" "$ADMIN" "$J" | sort -k1,1 | join - "$WORK/reference.losses" | awk '$2 != $3 { d++ } END { print NR, d + 0 }')" \
    "160|160 40 0"
kill -CONT "$(cat "$WORK/agent-$STALLED.pid")"
back() { [ "$(sql s "SELECT state FROM nodes WHERE name = '$STALLED'")" = idle ]; }
if wait_for 60 back; then ok "woken again, the stalled node is an idle node like any other"
else fail "woken again, the stalled node is an idle node like any other" "$(sql s "SELECT state FROM nodes WHERE name = '$STALLED'")"; fi

# ---- the first killed agent starts again from its data directory: the
# same node, now idle, its job long finished
before=$(sql s "SELECT id FROM nodes WHERE name = '$VICTIM'")
start_agent "$VICTIM" s --peer-timeout 5
back_idle() { [ "$(sql s "SELECT state FROM nodes WHERE name = '$VICTIM'")" = idle ]; }
if wait_for 60 back_idle; then ok "a restarted agent is the same node, idle again"
else fail "a restarted agent is the same node, idle again" "$(sql s "SELECT id, state FROM nodes WHERE name = '$VICTIM'")"; fi
check "no second node of that name" "$(sql s "SELECT count(*), min(id) FROM nodes WHERE name = '$VICTIM'")" "1|$before"

# ---- a node that dies right after step 30's all-reduce, before its
# report: its stage's other replica applied the step, so the live resume
# records step 30 for it (a stand-in, with the loss its ring neighbour was
# passed before the all-reduce) and goes on at step 31: none trained again.
# It is put at the last stage, whose loss is the one a survivor must carry.
# No checkpoints: the repair saves 31 steps over a resume from the start
# with 9 left, so the planner's rule takes it unless the search's plan is
# over 4x quicker (this forced plan need not be the search's best).
stop_agent "$VICTIM"
ready_before=$(grep -c 'agent ready' "$WORK/agent-$VICTIM.log")
SHOAL_AGENT_FAULT_EXIT_AFTER_SYNC=30 start_agent "$VICTIM" s --peer-timeout 5
# (its new peer address registered, not the one of the agent stopped)
ready_again() { [ "$(grep -c 'agent ready' "$WORK/agent-$VICTIM.log")" -gt "$ready_before" ]; }
wait_for 60 ready_again
six_up() { [ "$(sql s "SELECT count(*) FROM nodes WHERE state = 'idle' AND last_heartbeat_at > now() - interval '2 s'")" -ge 6 ]; }
wait_for 60 six_up
# and every link among the six measured: a spare's unmeasured links count
# as slow (RECOVERY_FILL_*), which could make the search's plan, free to
# leave it out, quicker than a repair that needs it
six_linked() { [ "$(sql s "SELECT count(*) FROM links_latest l JOIN nodes a ON a.id = l.from_node JOIN nodes b
                            ON b.id = l.to_node WHERE a.state = 'idle' AND b.state = 'idle' AND l.bandwidth_gbps > 0")" = 30 ]; }
wait_for 60 six_linked
req POST "$S/v1/jobs" "$ADMIN" "$(job split | sed 's/"checkpoint_interval":5/"checkpoint_interval":0/')"
J=$(printf '%s' "$BODY" | jq -r .id)
OTHERS=$(sql s "SELECT string_agg(id::text, ' ' ORDER BY id) FROM (SELECT id FROM nodes WHERE state = 'idle'
                AND name <> '$VICTIM' AND last_heartbeat_at > now() - interval '2 s' ORDER BY id LIMIT 3) n")
set -- $OTHERS
req POST "$S/v1/jobs/$J/plan" "$ADMIN" "{\"stages\":[{\"nodes\":[$1,$2]},{\"nodes\":[$3,$before]}]}"
expect "a plan puts it at stage 1, replica 1" 201 '.stages[1].nodes[1]' "$before"
wait_for 300 is_state "$J" succeeded
check "the job succeeds" "$(state_of "$J")" succeeded
if [ "$(sql s "SELECT live->>'step', resume_step FROM plans WHERE job_id = $J AND epoch = 2")" = "31|31" ]; then
    ok "epoch 2 goes on from the survivors at step 31"
else fail "epoch 2 goes on from the survivors at step 31" \
    "$(sql s "SELECT resume_step, detail->'live_resume' FROM plans WHERE job_id = $J AND epoch = 2")"; fi
# (Its stage-0 neighbour may miss the norm it sent back as it died, and
# stop at step 30 too: a stand-in of its own, with no loss.)
check "step 30 of the dead tasklet is a stand-in, with the loss it passed round; any other is its replica's" \
    "$(sql s "SELECT bool_or(s.stage = 1 AND s.loss = r.ring_prev_loss),
                     bool_and(s.step = 30 AND s.replica = 1 AND s.iteration_s IS NULL AND (s.stage = 1 OR s.loss IS NULL))
              FROM job_steps s JOIN job_steps r ON r.job_id = s.job_id AND r.step = s.step AND r.stage = 1 AND r.replica = 0
              WHERE s.job_id = $J AND s.stand_in")" "t|t"
check "each step once, with the uninterrupted run's losses" \
    "$(sql s "SELECT count(*), count(DISTINCT (step, stage, replica)) FROM job_steps WHERE job_id = $J") $(job_losses "$S" "$ADMIN" "$J" | sort -k1,1 | join - "$WORK/reference.losses" | awk '$2 != $3 { d++ } END { print NR, d + 0 }')" \
    "160|160 40 0"
start_agent "$VICTIM" s --peer-timeout 5

# ---- a dataset that cannot be read fails the job at once, with the
# reason, instead of --max-recoveries re-plans onto the same path
printf 'too short' > "$WORK/short.txt"
for bad in "$WORK/missing.txt:No such file" "$WORK/short.txt:fewer than one sequence"; do
    path=${bad%%:*} want=${bad#*:}
    req POST "$S/v1/jobs" "$ADMIN" "$(job dataset | sed "s#$CORPUS#$path#")"
    J=$(printf '%s' "$BODY" | jq -r .id)
    t0=$(now)
    req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200,"fill_missing_links":{"latency_ms":1,"bandwidth_gbps":1}}'
    wait_for 60 is_state "$J" failed
    check "dataset $(basename "$path"): the job fails without a recovery, saying why" \
        "$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J" |
           jq -r --arg w "$want" '[.state, .recoveries, (.failure_reason | contains($w) and contains("dataset"))] | join(" ")')" \
        "failed 0 true"
    ok "dataset $(basename "$path"): failed $(since "$t0" "(SELECT finished_at FROM jobs WHERE id = $J)") s after the schedule"
done
idle_again() { [ "$(sql s "SELECT count(*) FROM nodes WHERE state = 'idle' AND last_heartbeat_at > now() - interval '2 s'")" -ge 6 ]; }
if wait_for 30 idle_again; then ok "and its nodes are idle again"
else fail "and its nodes are idle again" "$(sql s "SELECT name, state FROM nodes ORDER BY id")"; fi

# ---- a checkpoint store that fails (full or read-only; here a file where
# the job's directory goes, so every upload gets 507) and a kill -9 of a
# node of the plan: the survivors' memory does not need the store, so the
# job goes on from them, re-planned once, no step trained twice (uploads
# queued behind the failing store never keep a node from its new epoch);
# once the store works again the retried uploads land and it succeeds.
# The re-plan takes the repair unless the search's plan is predicted over
# twice as fast (20 steps saved of 40): with the TFLOP/s each agent timed
# for 50 ms on two busy cores, survivors that happened to time slow lost
# that race now and then (repair 0.027 s a step against 0.013), so the
# nodes' registered speeds are made one here.
sql s "UPDATE nodes SET tflops = (SELECT max(tflops) FROM nodes)" > /dev/null
req POST "$S/v1/jobs" "$ADMIN" "$(job store)"
J=$(printf '%s' "$BODY" | jq -r .id)
mkdir -p "$WORK/s/checkpoints"
: > "$WORK/s/checkpoints/job$J"
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200,"fill_missing_links":{"latency_ms":1,"bandwidth_gbps":1}}'
wait_for 120 reached "$J" 12
STORE_VICTIM=$(node_of "$J" 1 1)
before=$(sql s "SELECT max(step) FROM job_steps WHERE job_id = $J")
kill -9 "$(cat "$WORK/agent-$STORE_VICTIM.pid")"
wait_for 60 replanned
check "a failing store and a kill: epoch 2 goes on from the survivors, after step $before (none trained again)" \
    "$(sql s "SELECT live->>'step' = resume_step::text AND resume_step > $before FROM plans WHERE job_id = $J AND epoch = 2")" t
wait_for 120 reached "$J" 39
check "the store still failing, it trains to its last step on that one re-plan, and waits" \
    "$(curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$J" |
       jq -r '[.state, .plan_epoch, .recoveries, .checkpoint_failures > 0] | map(tostring) | join(" ")')" "running 2 1 true"
# Trained, it needs no node but the final checkpoint's uploaders (replica 0
# of each stage): one of replica 1 lost costs nothing.
TRAINED_VICTIM=$(node_of "$J" 0 1)
kill -9 "$(cat "$WORK/agent-$TRAINED_VICTIM.pid")"
victim_lost() { [ "$(sql s "SELECT state FROM nodes WHERE name = '$TRAINED_VICTIM'")" = lost ]; }
wait_for 30 victim_lost
sleep 2   # a recovery sweep or two
check "a trained job that loses a node of replica 1 is not re-planned" \
    "$(sql s "SELECT state, plan_epoch, recoveries FROM jobs WHERE id = $J")" "running|2|1"
# One that loses an uploader (replica 0 of stage 1) goes on from its
# survivors at its last step: nothing to train, the final checkpoint's part
# that went with it to store again.
UPLOADER=$(node_of "$J" 1 0)
kill -9 "$(cat "$WORK/agent-$UPLOADER.pid")"
epoch3() { [ "$(sql s "SELECT plan_epoch FROM jobs WHERE id = $J")" = 3 ]; }
wait_for 60 epoch3
check "a trained job that loses the uploader of a stage goes on from its survivors at step 40 (none trained again)" \
    "$(sql s "SELECT live->>'step', resume_step FROM plans WHERE job_id = $J AND epoch = 3")" "40|40"
rm "$WORK/s/checkpoints/job$J"
wait_for 120 is_state "$J" succeeded
check "the store back, the job succeeds, each step once, with the uninterrupted run's losses" \
    "$(state_of "$J") $(sql s "SELECT count(*), count(DISTINCT (step, stage, replica)) FROM job_steps WHERE job_id = $J") $(job_losses "$S" "$ADMIN" "$J" | sort -k1,1 | join - "$WORK/reference.losses" | awk '$2 != $3 { d++ } END { print NR, d + 0 }')" \
    "succeeded 160|160 40 0"
start_agent "$STORE_VICTIM" s --peer-timeout 5
start_agent "$TRAINED_VICTIM" s --peer-timeout 5
start_agent "$UPLOADER" s --peer-timeout 5
# all up (a SIGTERM before an agent sets its handlers would kill it outright)
both_back() { [ "$(sql s "SELECT count(*) FROM nodes WHERE name IN ('$STORE_VICTIM', '$TRAINED_VICTIM', '$UPLOADER')
                           AND state = 'idle' AND last_heartbeat_at > now() - interval '2 s'")" = 3 ]; }
wait_for 60 both_back

for a in a0 a1 a2 a3 a4 a5 a6; do
    [ "$a" = "$VICTIM2" ] && continue
    stop_agent "$a"
    check "agent $a exits cleanly on SIGTERM" "$AGENT_RC" 0
done
exit 0
