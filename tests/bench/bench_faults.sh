#!/usr/bin/env bash
# bench_faults.sh - the fault campaign (make bench-faults): one server and
# six CPU agents on loopback train a 2x2 job (40 steps, a checkpoint every
# 5) once uninterrupted, then once per fault, each fault striking a victim
# and a step drawn from the seed:
#
#   kill-agent       kill -9 one agent of the plan
#   kill-two         kill -9 two agents of the plan at once
#   kill-nospare     kill -9 two agents and wait until they are lost, then
#                    one agent of the plan: with no spare the job goes on
#                    with one replica of 8 micro-batches
#   kill-server      kill -9 the server; it is started again 5 s later
#   kill-postmaster  kill -9 the embedded PostgreSQL's postmaster
#   stall-agent      SIGSTOP one agent of the plan (woken after the job)
#   store-full       the server's checkpoint store fails every upload (507:
#                    a file where the job's directory goes, as a full or
#                    read-only disk answers) from the job's start, and one
#                    agent of the plan is killed -9; the store comes back
#                    once the job trains its last step but one
#   disk-full        one uploader's (replica 0's) own data directory fills:
#                    a 1 MiB tmpfs mounted over it in the agent's mount
#                    namespace and filled with dd (ENOSPC), so its
#                    checkpoints cannot be written; it gets room again once
#                    the job trains its last step but one (root; every
#                    agent then runs in a mount namespace of its own)
#   relay-restart    every pair of the fleet is marked unreachable both
#                    ways (link_reach, as agents behind NAT report it), so
#                    that every link of the plan goes through a shoal-relay
#                    (started for the campaign, the server's --relay); the
#                    relay is killed -9 and started again on its port 3 s
#                    later (the marks are taken back after the trial)
#   freeze-db        SIGSTOP the database (postmaster and backends) for
#                    FAULTS_FREEZE_S (20) s while 50 more nodes heartbeat
#                    every second (tests/integration/heartbeat_load.py);
#                    /healthz is timed every 100 ms throughout
#
# For each: seconds from the fault to the job counting a recovery, to the
# re-plan and to the first step of the new epoch; the steps that had been
# completed and were trained again (the re-plan's resume step up to the
# last step reported before the fault; the step in flight is not counted);
# whether job_steps holds every step once (whole: a row per tasklet of the
# epoch that trained it), whether every step's loss equals the
# uninterrupted run's, and the largest difference (fewer replicas sum the
# gradients in another order: equal to rounding); the re-plans it took;
# /healthz's slowest answer during the fault (freeze-db; "-" otherwise);
# in the JSON lines also the job's checkpoints not kept
# (checkpoint_failures) and the failures its agents reported
# (failures_reported: each may blame a link or a node).  A
# table, a JSON line per trial and one for the campaign.  A partition of one node's peer port is in make test
# (tests/integration/test_partition.sh: it needs network namespaces).
# Where a stopped process is resumed by its environment (these sandboxes
# send SIGCONT within a second or two), stall-agent shows a hiccup, not a
# recovery.
#
# usage: tests/bench/bench_faults.sh SERVER AGENT [--seed N] [--trials K] [--only a,b]
# FAULTS_AGENT_ARGS / FAULTS_SERVER_ARGS add agent and server options; the
# agents otherwise run with their defaults (heartbeats, peer timeouts).
set -u
[ $# -ge 2 ] || { echo "usage: $0 SERVER AGENT [--seed N] [--trials K] [--only a,b]" >&2; exit 2; }
export SHOAL_SERVER=$1 SHOAL_AGENT=$2; shift 2
SEED=$(( $(date +%s) % 100000 )) TRIALS=1 ONLY=""
while [ $# -gt 0 ]; do
    case $1 in
        --seed) SEED=$2; shift 2 ;;
        --trials) TRIALS=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        *) echo "bench-faults: unknown option $1" >&2; exit 2 ;;
    esac
done
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/integration/lib.sh"
. "$top/tests/integration/agents.sh"
RANDOM=$SEED
# FAULTS_KEEP=DIR keeps the server's and agents' logs there.
[ -n "${FAULTS_KEEP:-}" ] && trap 'stop_all_agents; mkdir -p "$FAULTS_KEEP"; cp "$WORK"/*.log "$FAULTS_KEEP"/; cleanup' EXIT
echo "bench-faults: seed $SEED (--seed $SEED repeats this campaign), $TRIALS trial(s) per fault"

# The defaults, whatever agents.sh and lib.sh start agents and servers with
# for the tests.
unset SHOAL_HEARTBEAT_TIMEOUT
# Each agent in a mount namespace of its own, where disk-full can mount a
# full disk over its data directory (nsenter) and no one else sees it.
if [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2>/dev/null; then
    export AGENT_PREFIX="unshare -m --propagation private"
fi
AGENT_ARGS="--heartbeat-interval 2 --peer-timeout 120 --connect-timeout 120 ${FAULTS_AGENT_ARGS:-}"
faults=${ONLY:-kill-agent,kill-two,kill-nospare,kill-server,kill-postmaster,stall-agent,store-full,disk-full,relay-restart,freeze-db}
if [ -z "${AGENT_PREFIX:-}" ] && [[ ",$faults," == *,disk-full,* ]]; then
    echo "bench-faults: disk-full skipped: it needs root and mount namespaces (unshare -m)" >&2
    faults=$(echo ",$faults," | sed 's/,disk-full,/,/; s/^,//; s/,$//')
fi
# relay-restart: a relay for the campaign, and the server's --relay
case ",$faults," in *,relay-restart,*)
    start_relay r > /dev/null || exit 1
    FAULTS_SERVER_ARGS="${FAULTS_SERVER_ARGS:-} --relay $RELAY_r --relay-secret-file $WORK/relay.secret" ;;
esac
start_server_s ${FAULTS_SERVER_ARGS:-} > /dev/null || exit 1
PORT=${S##*:}
for n in f0 f1 f2 f3 f4 f5; do start_agent "$n" s $AGENT_ARGS; done
disown -a   # the processes this kills are not reported as jobs
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest WHERE bandwidth_gbps > 0")" = 30 ]; }
wait_for 180 links_up || { echo "bench-faults: the agents did not measure their links" >&2; exit 1; }

JOB=$(jq -nc --arg data "$CORPUS" '{name: "faults",
    model: {vocab_size: 256, context_length: 64, d_model: 64, heads: 2, layers: 4},
    parallelism: {stages: 2, replicas: 2, micro_batches: 4, micro_batch_size: 2, schedule: "1f1b"},
    training: {steps: 40, learning_rate: 0.003, warmup_steps: 3, weight_decay: 0.1, grad_clip: 1.0, seed: 11},
    data: {path: $data, format: "text"}, checkpoint_interval: 5, communication: {stage_link: "f32"}}')
now() { date +%s.%N; }
q() { sql s "$1" 2>/dev/null; }
# start_job [store-full]: creates the job (its checkpoint store failing
# with store-full) and schedules it; sets J.
start_job() {
    req POST "$S/v1/jobs" "$ADMIN" "$JOB"; J=$(printf '%s' "$BODY" | jq -r .id)
    if [ "${1:-}" = store-full ]; then mkdir -p "$WORK/s/checkpoints"; : > "$WORK/s/checkpoints/job$J"; fi
    req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
}
# freeze_db SECONDS: the database stopped (SIGSTOP) that long under 50
# heartbeating nodes more; sets HEALTHZ_MAX (s) from their load's probes.
freeze_db() {
    local pm frozen
    python3 "$top/tests/integration/heartbeat_load.py" "$S" "$WORK/s/join.token" 50 $(($1 + 6)) "load-$trial-" \
        > "$WORK/load.json" &
    local load=$!
    sleep 3
    pm=$(head -n 1 "$WORK/s/pg/postmaster.pid")
    frozen="$pm $(pgrep -P "$pm" | tr '\n' ' ')"
    kill -STOP $frozen
    sleep "$1"
    kill -CONT $frozen
    wait $load
    HEALTHZ_MAX=$(jq -r '.healthz.max_s // "-"' "$WORK/load.json")
}
done_() { case $(job_state "$S" "$ADMIN" "$J") in succeeded|failed|cancelled) return 0 ;; esac; return 1; }
reached() { [ "$(q "SELECT count(*) FROM job_steps WHERE job_id = $J AND step = $1")" = 4 ]; }
plan_node() { q "SELECT n.name FROM assignments a JOIN plans p ON p.id = a.plan_id JOIN nodes n ON n.id = a.node_id
                 WHERE p.job_id = $J AND p.epoch = 1 ORDER BY random() LIMIT 1"; }
# (the nodes freeze-db's load registers are none of the fleet's)
lost_two() { [ "$(q "SELECT count(*) FROM nodes WHERE state = 'lost' AND name NOT LIKE 'load-%'")" = 2 ]; }
# since T SQL: seconds from T to the timestamp SQL gives ("-" when none).
since() { local v; v=$(q "SELECT round((extract(epoch FROM ($2)) - $1)::numeric, 2)"); echo "${v:--}"; }
# (every idle node: freeze-db's load must be lost before the next job is planned)
idle_fleet() { [ "$(q "SELECT count(*) FROM nodes WHERE state = 'idle' AND last_heartbeat_at > now() - interval '30 s'")" = 6 ]; }

start_job; wait_for 600 done_
[ "$(job_state "$S" "$ADMIN" "$J")" = succeeded ] || { echo "bench-faults: the reference job did not succeed" >&2; exit 1; }
job_losses "$S" "$ADMIN" "$J" | sort -k1,1 > "$WORK/reference.losses"

# disk_full VICTIM on|off: VICTIM's data directory full (a 1 MiB tmpfs over
# it in its mount namespace, filled to ENOSPC), or back as it was.
disk_full() {
    local pid dir="$WORK/agent-$1"
    pid=$(cat "$WORK/agent-$1.pid")
    if [ "$2" = on ]; then
        nsenter -t "$pid" -m -- mount -t tmpfs -o size=1m,mode=0700 shoal-disk "$dir" &&
            nsenter -t "$pid" -m -- dd if=/dev/zero of="$dir/filler" bs=64k 2>/dev/null
    else
        nsenter -t "$pid" -m -- umount -l "$dir"
    fi
}
# a node of replica 0 of the first plan: it uploads its stage's checkpoints
uploader_node() { q "SELECT n.name FROM assignments a JOIN plans p ON p.id = a.plan_id JOIN nodes n ON n.id = a.node_id
                     WHERE p.job_id = $J AND p.epoch = 1 AND a.replica = 0 ORDER BY random() LIMIT 1"; }

printf '%-16s %6s %-11s %9s %8s %8s %7s %10s %12s %13s %7s %s\n' fault step victims detect_s replan_s train_s redone steps_once \
    losses_equal max_loss_diff replans healthz_max_s
rows="[]"
for fault in ${faults//,/ }; do
    for trial in $(seq 1 "$TRIALS"); do
        wait_for 120 idle_fleet
        at=$((6 + RANDOM % 25))
        gone=""
        if [ "$fault" = kill-nospare ]; then   # no spare: two agents gone before the job
            gone=$(q "SELECT string_agg(name, ' ') FROM (SELECT name FROM nodes ORDER BY random() LIMIT 2) n")
            for v in $gone; do kill -9 "$(cat "$WORK/agent-$v.pid")"; done
            wait_for 60 lost_two
        fi
        if [ "$fault" = relay-restart ]; then   # every link through the relay
            q "INSERT INTO link_reach (from_node, to_node, reachable, why)
               SELECT a.id, b.id, false, 'bench-faults relay-restart' FROM nodes a JOIN nodes b ON a.id <> b.id
               WHERE a.name NOT LIKE 'load-%' AND b.name NOT LIKE 'load-%'
               ON CONFLICT (from_node, to_node) DO UPDATE SET reachable = false, why = EXCLUDED.why" > /dev/null
        fi
        start_job "$fault"; wait_for 300 reached "$at"
        victims="" HEALTHZ_MAX=-
        case $fault in
            kill-agent|stall-agent|store-full) victims=$(plan_node) ;;
            kill-two) victims="$(plan_node)"; while v=$(plan_node); [ "$v" = "$victims" ]; do :; done; victims="$victims $v" ;;
            kill-nospare) victims=$(plan_node) ;;
            disk-full) victims=$(uploader_node) ;;
        esac
        before=$(q "SELECT coalesce(max(step), -1) FROM job_steps WHERE job_id = $J")
        t=$(now)
        case $fault in
            kill-agent|kill-two|kill-nospare|store-full) for v in $victims; do kill -9 "$(cat "$WORK/agent-$v.pid")"; done ;;
            stall-agent) kill -STOP "$(cat "$WORK/agent-$victims.pid")" ;;
            freeze-db) freeze_db "${FAULTS_FREEZE_S:-20}" ;;
            kill-server) kill -9 "$(cat "$WORK/s.pid")"; sleep 5; start_server s --port "$PORT" ${FAULTS_SERVER_ARGS:-} > /dev/null; disown -a ;;
            kill-postmaster) kill -9 "$(head -n 1 "$WORK/s/pg/postmaster.pid")" ;;
            disk-full) disk_full "$victims" on ;;
            relay-restart) victims=relay; kill -9 "$(cat "$WORK/r.pid")"   # back on its port 3 s later
                (sleep 3; RELAY_PORT=${RELAY_r##*:} start_relay r > /dev/null) & disown -a ;;
        esac
        counted() { [ "$(q "SELECT recoveries FROM jobs WHERE id = $J")" -ge 1 ] 2>/dev/null; }
        detect=-
        case $fault in kill-server|kill-postmaster|freeze-db|disk-full) ;; *)
            for _ in $(seq 1 3000); do
                counted && { detect=$(awk -v a="$t" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'); break; }
                done_ && break
                sleep 0.1
            done ;;
        esac
        if [ "$fault" = store-full ]; then   # the store back once the job has trained all it can without it
            wait_for 300 reached 38
            rm -f "$WORK/s/checkpoints/job$J"
        fi
        if [ "$fault" = disk-full ]; then   # room again once the job has trained all it can without it
            wait_for 300 reached 38
            disk_full "$victims" off
        fi
        wait_for 900 done_
        [ "$fault" = relay-restart ] && q "DELETE FROM link_reach WHERE why = 'bench-faults relay-restart'" > /dev/null
        case $fault in
            stall-agent) kill -CONT "$(cat "$WORK/agent-$victims.pid")" ;;
            kill-agent|kill-two|kill-nospare|store-full) for v in $victims $gone; do start_agent "$v" s $AGENT_ARGS; done; disown -a ;;
        esac
        state=$(job_state "$S" "$ADMIN" "$J")
        replan=$(since "$t" "(SELECT min(created_at) FROM plans WHERE job_id = $J AND epoch > 1)")
        train=$(since "$t" "(SELECT min(reported_at) FROM job_steps WHERE job_id = $J AND epoch > 1)")
        resume=$(q "SELECT coalesce(min(resume_step), -1) FROM plans WHERE job_id = $J AND epoch > 1")
        retrained=0
        [ "$(q "SELECT count(*) FROM plans WHERE job_id = $J AND epoch > 1")" != 0 ] && retrained=$((before + 1 - (resume < 0 ? 0 : resume))); [ "$retrained" -lt 0 ] && retrained=0
        once=$(q "SELECT count(*) = count(DISTINCT (s.step, s.stage, s.replica)) AND count(DISTINCT s.step) = 40
                    AND bool_and(s.n = 2 * p.replicas) FROM (SELECT *, count(*) OVER (PARTITION BY step) AS n
                    FROM job_steps WHERE job_id = $J) s JOIN plans p ON p.job_id = s.job_id AND p.epoch = s.epoch")
        [ "$once" = t ] || q "SELECT 'bench-faults: job ' || $J || ' step ' || step || ': ' || string_agg(stage || '/' || replica
                                || ' epoch ' || epoch || CASE WHEN stand_in THEN ' (stand-in)' ELSE '' END, ', ' ORDER BY stage, replica)
                                FROM job_steps WHERE job_id = $J GROUP BY step
                                HAVING count(*) <> 2 * max((SELECT replicas FROM plans p WHERE p.job_id = $J AND p.epoch = job_steps.epoch))
                                    OR count(*) <> count(DISTINCT (stage, replica)) ORDER BY step" >&2
        job_losses "$S" "$ADMIN" "$J" | sort -k1,1 | join - "$WORK/reference.losses" > "$WORK/joined.losses"
        equal=$(awk '$2 != $3 { d++ } END { print (NR == 40 && d == 0) ? "t" : "f" }' "$WORK/joined.losses")
        diff=$(awk '{ d = $2 - $3; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.2g", m }' "$WORK/joined.losses")
        [ "$state" = succeeded ] || equal="f ($state)"
        replans=$(q "SELECT plan_epoch - 1 FROM jobs WHERE id = $J")
        # checkpoints not kept (store or a node's disk), failures reported (each may blame a link or node)
        ckfail=$(q "SELECT checkpoint_failures FROM jobs WHERE id = $J")
        reported=$(q "SELECT count(*) FROM job_faults WHERE job_id = $J AND reporter_node IS NOT NULL")
        printf '%-16s %6s %-11s %9s %8s %8s %7s %10s %12s %13s %7s %s\n' "$fault" "$before" "${victims:--}" "$detect" "$replan" \
            "$train" "$retrained" "$once" "$equal" "$diff" "$replans" "$HEALTHZ_MAX"
        row=$(jq -nc --arg fault "$fault" --argjson trial "$trial" --argjson step "$before" --arg victims "$victims" \
            --arg detect "$detect" --arg replan "$replan" --arg train "$train" --argjson retrained "$retrained" \
            --arg once "$once" --arg equal "$equal" --argjson diff "$diff" --arg state "$state" --argjson seed "$SEED" \
            --argjson replans "${replans:-null}" --arg healthz "$HEALTHZ_MAX" \
            --argjson ckfail "${ckfail:-null}" --argjson reported "${reported:-null}" '
            def num: if . == "-" then null else tonumber end;
            {bench: "faults-trial", seed: $seed, fault: $fault, trial: $trial, step: $step,
             victims: ($victims | split(" ") | map(select(. != ""))), state: $state,
             detect_s: ($detect | num), replan_s: ($replan | num), train_again_s: ($train | num),
             steps_redone: $retrained, steps_once: ($once == "t"), losses_equal: ($equal == "t"),
             max_loss_diff: $diff, replans: $replans, healthz_max_s: ($healthz | num),
             checkpoint_failures: $ckfail, failures_reported: $reported}')
        echo "$row" >> "$WORK/rows.json"
    done
done
jq -sc --argjson seed "$SEED" '{bench: "faults", seed: $seed, trials: length,
    all_succeeded: all(.state == "succeeded"), all_steps_once: all(.steps_once), all_losses_equal: all(.losses_equal),
    all_losses_within_1e5: all(.max_loss_diff <= 1e-5),
    max_train_again_s: ([.[].train_again_s | select(. != null)] | max),
    max_steps_redone: ([.[].steps_redone] | max), max_replans: ([.[].replans] | max),
    max_healthz_s: ([.[].healthz_max_s | select(. != null)] | max)}' "$WORK/rows.json"
cat "$WORK/rows.json"
