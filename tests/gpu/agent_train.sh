#!/usr/bin/env bash
# agent_train.sh - two shoal-agents on one device train a 2x1 job (two
# pipeline stages over TCP, one replica) against a real server, then two CPU
# agents train the same job; the loss curves are compared within bf16
# tolerance. Needs a GPU for what it is for; DEVICE=cpu runs both on cpu
# (a check of this script: the curves then agree to the last bit).
# usage: tests/gpu/agent_train.sh SHOAL_SERVER SHOAL_AGENT [STEPS]   (CURVES=FILE keeps both curves)
# Prints "ok - ..." / "not ok - ..." lines, a table of both curves and one
# JSON line; exit 1 when a check failed.
set -u
export SHOAL_SERVER=$(realpath "${1:?usage: agent_train.sh SERVER AGENT [STEPS]}")
export SHOAL_AGENT=$(realpath "${2:?usage: agent_train.sh SERVER AGENT [STEPS]}")
STEPS=${3:-40}
DEVICE=${DEVICE:-cuda}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh" >/dev/null
. "$here/../integration/agents.sh"

start_server_s >/dev/null || exit 1
start_agent g0 s --device "$DEVICE"
start_agent g1 s --device "$DEVICE"
start_agent c0 s --device cpu
start_agent c1 s --device cpu
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest")" = 12 ]; }
wait_for 120 links_up || { echo "agents did not measure their links" >&2; exit 1; }

# MODEL (a job's model object) picks the model: GPT-2 of d_model 256 unless
# set, e.g. a tied Llama (device_check.sh's agent-llama).
MODEL=${MODEL:-'{"vocab_size":256,"context_length":128,"d_model":256,"heads":4,"layers":4}'}

# A job on two given nodes: the plan is forced, so each run lands where it should.
node_id() { sql s "SELECT id FROM nodes WHERE name = '$1'"; }
train() {   # train NAME NODE0 NODE1: sets J
    local body
    body='{"name":"'$1'","model":'"$MODEL"','
    body=$body'"parallelism":{"stages":2,"replicas":1,"micro_batches":2,"micro_batch_size":4},'
    body=$body"\"training\":{\"steps\":$STEPS,\"learning_rate\":0.001,\"warmup_steps\":2,\"seed\":7},"
    body=$body"\"data\":{\"path\":\"$CORPUS\",\"format\":\"text\"},\"checkpoint_interval\":0,\"communication\":{\"stage_link\":\"f32\"}}"
    req POST "$S/v1/jobs" "$ADMIN" "$body"
    J=$(printf '%s' "$BODY" | jq -r .id)
    req POST "$S/v1/jobs/$J/plan" "$ADMIN" "{\"stages\":[{\"nodes\":[$(node_id "$2")]},{\"nodes\":[$(node_id "$3")]}]}"
    [ "$STATUS" = 201 ] || { fail "$1 is planned" "status $STATUS: $BODY"; return 1; }
    wait_for 600 finished "$J"
    check "$1 succeeds" "$(job_state "$S" "$ADMIN" "$J")" succeeded
}
train on-"$DEVICE" g0 g1; JG=$J
train on-cpu c0 c1; JC=$J

job_losses "$S" "$ADMIN" "$JG" > "$WORK/g.loss"
job_losses "$S" "$ADMIN" "$JC" > "$WORK/c.loss"
step_ms() { sql s "SELECT round((percentile_cont(0.5) WITHIN GROUP (ORDER BY iteration_s) * 1e3)::numeric, 1)
                    FROM job_steps WHERE job_id = $1 AND step >= 2"; }
echo "2x1, model $MODEL, M=2, B=4: $DEVICE agents vs cpu agents"
printf '%6s %12s %12s %10s\n' step "$DEVICE" cpu rel_diff
join "$WORK/g.loss" "$WORK/c.loss" | awk '{ d = $2 - $3; if (d < 0) d = -d; printf "%6d %12.6f %12.6f %10.2e\n", $1, $2, $3, d / $3 }' \
    | tee "$WORK/cmp" | awk -v s="$STEPS" 'NR <= 5 || NR % 10 == 0 || NR == s'
n=$(wc -l < "$WORK/cmp")
check "both curves have every step" "$n" "$STEPS"
# bf16 matrix products: the first step (same weights, same data) within 1%;
# after that the two runs drift apart like any two runs of different rounding,
# so the curves are compared over their last 10 steps (mean within 2%).
first=$(awk 'NR == 1 { print $4 }' "$WORK/cmp")
worst=$(awk 'BEGIN { m = 0; s = "-" } $4 > m { m = $4; s = $1 } END { print m " (step " s ")" }' "$WORK/cmp")
tail_rel=$(tail -n 10 "$WORK/cmp" | awk '{ g += $2; c += $3 } END { d = (g - c) / c; printf "%.2e", d < 0 ? -d : d }')
holds() { awk "BEGIN { exit !($1) }"; }
a=$(awk 'NR == 1 { print $2 }' "$WORK/cmp"); b=$(tail -n 10 "$WORK/cmp" | awk '{ g += $2 } END { print g / NR }')
if holds "\"$first\" != \"\" && $first <= 0.01"; then ok "the first step's losses agree within 1% ($first)"
else fail "the first step's losses agree within 1%" "relative difference $first"; fi
if holds "$tail_rel <= 0.02"; then ok "the last 10 steps' mean losses agree within 2% ($tail_rel; worst single step $worst)"
else fail "the last 10 steps' mean losses agree within 2%" "relative difference $tail_rel"; fi
if holds "$b < 0.7 * $a"; then ok "the $DEVICE loss falls by more than 30% ($a -> $b, mean of the last 10)"
else fail "the $DEVICE loss falls by more than 30%" "$a -> $b"; fi
cat "$WORK/cmp" > "${CURVES:-/dev/null}"
echo "{\"bench\":\"agent_train_2x1\",\"device\":\"$DEVICE\",\"steps\":$STEPS,\"first_rel_diff\":$first,\"last10_rel_diff\":$tail_rel,\"step_ms\":{\"$DEVICE\":$(step_ms "$JG"),\"cpu\":$(step_ms "$JC")}}"
stop_all_agents
[ "$FAILS" = 0 ]
