#!/usr/bin/env bash
# test_agent_disk.sh - an agent whose own disk is full (issue 46): its
# --data-dir is a 3 MiB tmpfs in a mount namespace of its own (unshare -m;
# root), filled with dd until the kernel says ENOSPC, before a 2-stage job
# that checkpoints every 5 steps is scheduled.  Every checkpoint it writes
# fails with "No space left on device", for real.  That is a fault of that
# node's uploads, nothing more: the job trains on, never re-planned, no
# failure is reported and no link or node blamed; the job's
# checkpoint_failures and checkpoint_error and the node's upload_error
# say it.  Trained, the job waits for that node's final checkpoint, saying
# why; once the disk has room again it is written, the job succeeds with
# every step once, and the faults are healed.  Skipped, saying so, where
# mount namespaces cannot be made.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"

DISK=3m   # the full node's data directory: a tmpfs of this size
# own_disk DIR SIZE CMD...: CMD with a tmpfs of SIZE mounted on DIR (in
# the caller's mount namespace: run it under unshare -m).
printf '#!/bin/sh\nd=$1 size=$2; shift 2\nmount -t tmpfs -o "size=$size,mode=0700" shoal-disk "$d" && exec "$@"\n' \
    > "$WORK/own_disk.sh"
chmod +x "$WORK/own_disk.sh"
mkdir -p "$WORK/probe-disk"
if ! unshare -m --propagation private "$WORK/own_disk.sh" "$WORK/probe-disk" 64k true 2>/dev/null; then
    ok "an agent's full disk # SKIP no mount namespaces or tmpfs here (unshare -m, mount -t tmpfs)"
    exit 0
fi

start_server_s || exit 1
start_agent d0 s
AGENT_PREFIX="unshare -m --propagation private $WORK/own_disk.sh $WORK/agent-d1 $DISK" start_agent d1 s
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest WHERE bandwidth_gbps > 0")" = 2 ]; }
if wait_for 120 links_up; then ok "two agents register and measure their links, one on a $DISK tmpfs"
else fail "two agents register and measure their links, one on a $DISK tmpfs" "$(tail -n 5 "$WORK/agent-d1.log")"; exit 1; fi
D1_PID=$(cat "$WORK/agent-d1.pid")
D1=$(sql s "SELECT id FROM nodes WHERE name = 'd1'")
# in_d1 CMD...: CMD in agent d1's mount namespace, where its tmpfs is
in_d1() { nsenter -t "$D1_PID" -m -- "$@"; }
in_d1 dd if=/dev/zero of="$WORK/agent-d1/filler" bs=64k 2> "$WORK/dd.err"
check "d1's data directory is full: dd stops with ENOSPC" \
      "$(grep -c 'No space left on device' "$WORK/dd.err") $(in_d1 df --output=avail -k "$WORK/agent-d1" | tail -n 1 | tr -d ' ')" "1 0"

req POST "$S/v1/jobs" "$ADMIN" "$(jq -nc --arg data "$CORPUS" '{name: "full-disk",
    model: {vocab_size: 256, context_length: 64, d_model: 64, heads: 2, layers: 4},
    parallelism: {stages: 2, replicas: 1, micro_batches: 2, micro_batch_size: 2},
    training: {steps: 30, learning_rate: 0.003, seed: 5},
    data: {path: $data, format: "text"}, checkpoint_interval: 5}')"
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
expect "a 2-stage job is scheduled on both" 201
reached() { [ "$(sql s "SELECT count(*) FROM job_steps WHERE job_id = $J AND step = $1")" = 2 ]; }
# (gives up early when the job leaves its first plan: the old way)
reached_or_moved() { reached "$1" || [ "$(sql s "SELECT state NOT IN ('scheduled', 'running') OR plan_epoch > 1 FROM jobs WHERE id = $J")" = t ]; }
wait_for 180 reached_or_moved 20
job_row() { sql s "SELECT state, plan_epoch, recoveries FROM jobs WHERE id = $J"; }
check "four checkpoints refused by d1's disk later, the job trains on (step 20) on its first plan, never recovered" \
      "$(reached 20 && echo "step 20") $(job_row)" "step 20 running|1|0"
check "no failure was reported: no link and no node blamed" \
      "$(sql s "SELECT count(*) FROM job_faults WHERE job_id = $J")" 0
fetch "$S/v1/jobs/$J" "$ADMIN" > "$WORK/job.json"
check "the job counts the refused checkpoints and names the node and its disk in checkpoint_error" \
      "$(jq -r --arg d1 "$D1" '[.checkpoint_failures >= 3,
          (.checkpoint_error // "" | test("^node " + $d1 + " \\(d1\\): cannot write checkpoint .*No space left on device"))]
          | map(tostring) | join(" ")' "$WORK/job.json")" "true true"
fetch "$S/v1/nodes" "$ADMIN" > "$WORK/nodes.json"
# name, upload_failures at least 3, upload_error on the disk
node_faults() {
    jq -r --arg n "$1" '.nodes[] | select(.name == $n)
        | "\(.upload_failures >= 3) \(.upload_error // "null" | sub("^cannot write checkpoint .*: No space left on device$"; "enospc"))"' \
        "$WORK/nodes.json"
}
check "the node shows its uploads' fault (upload_failures, upload_error), the other node none" \
      "d1: $(node_faults d1), d0: $(node_faults d0)" "d1: true enospc, d0: false null"
check "d1's log says the checkpoint is not kept and training goes on" \
      "$([ "$(grep -c 'not kept, training goes on: cannot write checkpoint' "$WORK/agent-d1.log")" -ge 3 ] && echo yes)" yes
check "the server's log says so too" \
      "$([ "$(grep -c "node $D1 could not keep its checkpoint of job $J" "$WORK/s.log")" -ge 3 ] && echo yes)" yes

# Trained: the job waits for d1's final checkpoint, saying why.
wait_for 120 reached_or_moved 29
sleep 2
check "trained, the job stays running at its last step, waiting for d1's final checkpoint" \
      "$(reached 29 && echo "step 29") $(job_row) $(fetch "$S/v1/jobs/$J" "$ADMIN" | jq -r '.checkpoint_error != null')" \
      "step 29 running|1|0 true"
check "d1's log says it tries the final one again" \
      "$(grep -c 'step=30 stage=[01] not kept, training goes on: .*(the final one: tried again' "$WORK/agent-d1.log")" 1
in_d1 rm -f "$WORK/agent-d1/filler"
done_() { [ "$(job_state "$S" "$ADMIN" "$J")" = succeeded ]; }
wait_for 60 done_
check "room again: the final checkpoint is written, the job succeeds on its first plan" \
      "$(job_row) $(sql s "SELECT count(*) FROM checkpoints WHERE job_id = $J AND step = 30")" "succeeded|1|0 2"
check "every step once, from both stages" \
      "$(sql s "SELECT count(*), count(DISTINCT (step, stage)), count(DISTINCT step) FROM job_steps WHERE job_id = $J")" "60|60|30"
check "the faults are healed: the job's checkpoint_error and d1's upload_error are null" \
      "$(fetch "$S/v1/jobs/$J" "$ADMIN" | jq -r '.checkpoint_error') $(fetch "$S/v1/nodes/$D1" "$ADMIN" | jq -r '.upload_error')" \
      "null null"
check "d1's log says the final checkpoint was written once its disk had room" \
      "$(grep -c 'final checkpoint job=[0-9]* step=30 stage=[01] written' "$WORK/agent-d1.log")" 1
for a in d0 d1; do
    stop_agent "$a"
    check "agent $a exits cleanly on SIGTERM" "$AGENT_RC" 0
done
stop_server s
[ "$FAILS" -eq 0 ]
