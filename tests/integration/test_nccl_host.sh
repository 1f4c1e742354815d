#!/usr/bin/env bash
# test_nccl_host.sh - agent/net/nccl.c's data-parallel groups on the host
# emulation of CUDA and NCCL (tests/gpu/host), against a real server: a job
# of GPU nodes whose stages each have three replicas, one stage per scenario
# of tests/gpu/nccl/test_nccl_host.c (tests/gpu/nccl/ranks.h), whose ranks
# are threads that trade their NCCL id through /v1/agent/nccl with these
# nodes' tokens.
set -u
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
# The build the agent under test comes from (build/san under make test).
BUILD=$(cd "$(dirname "$(dirname "${SHOAL_AGENT:?set SHOAL_AGENT to the shoal-agent binary}")")" && pwd)
T="$BUILD/tests/gpu/test_nccl_host"
STAGES=16    # ranks.h's SCENARIO_STAGES
REPLICAS=3   # ranks.h's RANKS

if [ ! -x "$T" ]; then
    fail "nccl: the test is built" "no $T; build it with: make SAN=1 ${T#"$TOP"/}"
    exit 1
fi

start_server_a --heartbeat-timeout 3600 || exit 1

# ---- a job of STAGES x REPLICAS GPU nodes, scheduled
declare -a TOK
HW='"hardware":{"tflops":10,"cpu_cores":8,"gpu_count":1,"gpu_model":"emulated","gpu_memory_bytes":8000000000}'
for i in $(seq 0 $((STAGES * REPLICAS - 1))); do
    req POST "$S/v1/agent/register" "$JOIN" "{\"name\":\"g$i\",\"peer_address\":\"127.0.0.1:$((7200 + i))\",$HW}"
    TOK[$i]=$(printf '%s' "$BODY" | jq -r .token)
done
check "nccl: $((STAGES * REPLICAS)) GPU nodes register" "$(sql a "SELECT count(*) FROM nodes WHERE gpu_count = 1")" \
    $((STAGES * REPLICAS))
JOB=$(jq -nc --argjson s "$STAGES" --argjson r "$REPLICAS" '{name: "nccl-host",
    model: {vocab_size: 256, context_length: 64, d_model: 64, heads: 4, layers: $s},
    parallelism: {stages: $s, replicas: $r, micro_batches: 2, micro_batch_size: 2},
    training: {steps: 3, learning_rate: 0.001}, data: {path: "/data/corpus.txt", format: "text"}}')
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; expect "nccl: create a ${STAGES}x$REPLICAS job" 201
J=$(printf '%s' "$BODY" | jq -r .id)
# No node measured a link: one fill value serves them all.
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200,"fill_missing_links":{"latency_ms":1,"bandwidth_gbps":10}}'
expect "nccl: schedule it" 201
E=$(printf '%s' "$BODY" | jq -r .epoch)

# Every node's tasklet, as STAGE:REPLICA:TOKEN for the test.
ARGS=()
groups=""
for i in "${!TOK[@]}"; do
    req GET "$S/v1/agent/assignment" "${TOK[$i]}"
    a=$(printf '%s' "$BODY" | jq -r '.assignment | "\(.stage):\(.replica) \(.allreduce)"')
    ARGS+=("${a%% *}:${TOK[$i]}")
    groups="$groups ${a#* }"
done
tasklets=$(printf '%s\n' "${ARGS[@]}" | cut -d: -f1,2 | grep -E '^[0-9]+:[0-9]+$' | sort -u | wc -l)
check "nccl: every node has a tasklet of its own, each group all-reducing over NCCL" \
    "$tasklets $(printf '%s\n' $groups | sort -u | tr -d '\n')" "$((STAGES * REPLICAS)) nccl"

# ---- the scenarios: about 5 s; the timeout only bounds a hang
SHOAL_HOST_CUDA_DEVICES=$REPLICAS timeout 120 "$T" "$S" "$J" "$E" "${ARGS[@]}" > "$WORK/out" 2> "$WORK/err"
rc=$?
grep -E '^(ok|not ok) - ' "$WORK/out"
FAILS=$((FAILS + $(grep -c '^not ok - ' "$WORK/out")))
if [ "$rc" -eq 0 ] && [ "$(grep -c '^ok - ' "$WORK/out")" -gt 0 ]; then
    ok "nccl: test_nccl_host exits 0, sanitizers clean"
else
    # Its whole stderr (a sanitizer's report, the agent's log) goes before the verdict.
    sed 's/^/# /' "$WORK/err"
    why=$(grep -m 1 -E 'ERROR: [A-Za-z]+Sanitizer|runtime error|^hcu: ' "$WORK/err")
    fail "nccl: test_nccl_host exits 0, sanitizers clean" \
        "status $rc$([ "$rc" = 124 ] && echo ' (timed out)')${why:+; $why}; its stderr is above"
fi

[ "$FAILS" -eq 0 ]
