#!/usr/bin/env bash
# bench_train.sh - a 2x2 CPU training run on loopback: four real agents, a
# real server; prints each tasklet's median step time split into the parts
# the agents report (docs/api.md, the step parts under /metrics): compute,
# send, receive wait, bubble (the pipeline's fill and drain), all-reduce
# and the rest
# (checkpoint, data, codecs, bookkeeping; the median of each row's
# remainder), as a table and one JSON line.  A benchmark, not a test: nothing is asserted.
# usage: tests/bench/bench_train.sh SHOAL_SERVER SHOAL_AGENT [STEPS]
set -u
export SHOAL_SERVER=$(realpath "${1:?usage: bench_train.sh SERVER AGENT [STEPS]}")
export SHOAL_AGENT=$(realpath "${2:?usage: bench_train.sh SERVER AGENT [STEPS]}")
STEPS=${3:-20}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh" >/dev/null
. "$here/../integration/agents.sh"

start_server s >/dev/null || exit 1
ADMIN=$(cat "$WORK/s/admin.token")
CORPUS=/usr/share/common-licenses/GPL-3
[ -r "$CORPUS" ] || CORPUS=$(cd "$here/../.." && pwd)/README.md
for n in a0 a1 a2 a3; do start_agent "$n" s; done
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest")" = 12 ]; }
wait_for 120 links_up || { echo "agents did not measure their links" >&2; exit 1; }

# d_model 256, context 128, 4 layers: each stage computes for tens of ms a micro-batch.
body='{"name":"bench","model":{"vocab_size":256,"context_length":128,"d_model":256,"heads":4,"layers":4},'
body=$body'"parallelism":{"stages":2,"replicas":2,"micro_batches":4,"micro_batch_size":4,"schedule":"1f1b"},'
body=$body"\"training\":{\"steps\":$STEPS,\"learning_rate\":0.001,\"warmup_steps\":2},"
body=$body"\"data\":{\"path\":\"$CORPUS\",\"format\":\"text\"},\"checkpoint_interval\":0}"
req POST "$URL_s/v1/jobs" "$ADMIN" "$body"
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$URL_s/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":200}'
done_() { [ "$(job_state "$URL_s" "$ADMIN" "$J")" = succeeded ]; }
wait_for 900 done_ || { echo "the job did not succeed: $(job_state "$URL_s" "$ADMIN" "$J")" >&2; exit 1; }

# Medians over the steps after the first two (warm-up), per tasklet.
q="SELECT stage, replica,
  percentile_cont(0.5) WITHIN GROUP (ORDER BY iteration_s), percentile_cont(0.5) WITHIN GROUP (ORDER BY compute_s),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY send_s), percentile_cont(0.5) WITHIN GROUP (ORDER BY recv_wait_s),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY bubble_s), percentile_cont(0.5) WITHIN GROUP (ORDER BY allreduce_s),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY iteration_s - compute_s - send_s - recv_wait_s - bubble_s - allreduce_s)
  FROM job_steps WHERE job_id = $J AND step >= 2 GROUP BY stage, replica ORDER BY stage, replica"
echo
echo "2x2 CPU training, d_model 256, context 128, 4 layers, M=4, B=4, $STEPS steps (medians, ms)"
printf '%-8s %-8s %10s %10s %10s %12s %10s %10s %10s\n' stage replica step compute send recv_wait bubble allreduce other
json=""
while IFS='|' read -r s r it c se rw bu ar rest; do
    awk -v s="$s" -v r="$r" -v it="$it" -v c="$c" -v se="$se" -v rw="$rw" -v bu="$bu" -v ar="$ar" -v rest="$rest" 'BEGIN {
        printf "%-8s %-8s %10.1f %10.1f %10.1f %12.1f %10.1f %10.1f %10.1f\n", s, r, it*1e3, c*1e3, se*1e3, rw*1e3,
               bu*1e3, ar*1e3, rest*1e3 }'
    json="$json{\"stage\":$s,\"replica\":$r,\"step_s\":$it,\"compute_s\":$c,\"send_s\":$se,\"recv_wait_s\":$rw,\"bubble_s\":$bu,\"allreduce_s\":$ar,\"other_s\":$rest},"
done < <(sql s "$q")
echo "{\"bench\":\"train_2x2\",\"steps\":$STEPS,\"tasklets\":[${json%,}]}"
