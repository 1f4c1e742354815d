#!/usr/bin/env bash
# demo.sh - a first real run of shoal on one machine: shoal-server on its
# embedded PostgreSQL, four CPU agents on loopback that measure their links,
# a GPT job (2 stages x 2 replicas, byte-level) trained on the fortune
# cookies of Debian's `fortunes` package, a progress bar, and text sampled
# from the trained model at the end.  Ctrl-C stops everything it started.
#
# usage: deploy/demo.sh BIN_DIR        (make demo passes bin)
# environment: DEMO_STEPS (default 400), DEMO_PORT (default 8080; busy: any
# free port), DEMO_SAMPLE_TOKENS (default 400), DEMO_KEEP=1 keeps the work
# directory; DEMO_D_MODEL (128), DEMO_CONTEXT (64) and DEMO_BATCH (8
# sequences a micro-batch) size the model.  The defaults take about three
# minutes on two cores and bring the loss from 5.6 to about 2.1 nats a byte.
set -u
bin=${1:-bin}
steps=${DEMO_STEPS:-400}
port=${DEMO_PORT:-8080}
sample_tokens=${DEMO_SAMPLE_TOKENS:-400}
case $steps in ''|*[!0-9]*) echo "demo: DEMO_STEPS must be a whole number, got '$steps'" >&2; exit 2;; esac
[ "$steps" -ge 1 ] || { echo "demo: DEMO_STEPS must be at least 1" >&2; exit 2; }
for b in shoal-server shoal-agent; do
    [ -x "$bin/$b" ] || { echo "demo: $bin/$b is missing; run 'make' first" >&2; exit 1; }
done
fortunes=/usr/share/games/fortunes
[ -d "$fortunes" ] || { echo "demo: $fortunes is missing; run 'make deps' (Debian package fortunes)" >&2; exit 1; }

dir=$(mktemp -d /tmp/shoal-demo.XXXXXX)
chmod 711 "$dir"     # the embedded Postgres runs as 'postgres' under root
mkdir "$dir/data"    # what the agents may read (--data-roots): the corpus
pids=""              # agents first, the server last
server_pid=""

finish() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$pids$server_pid" ] && echo && echo "demo: stopping the agents and the server"
    for p in $pids; do kill -TERM "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
    if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; fi
    if [ "${DEMO_KEEP:-0}" = 1 ]; then echo "demo: kept $dir"; else rm -rf "$dir"; fi
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# server_gone WHY: the server no longer answers.  A Ctrl-C reaches it too
# and may stop it (cleanly: status 0) before this shell notices its own:
# then the demo was interrupted (130); otherwise it is an error.
server_gone() {
    local i
    for i in $(seq 1 50); do [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null && sleep 0.1; done
    if [ -n "$server_pid" ] && ! kill -0 "$server_pid" 2>/dev/null; then
        wait "$server_pid" 2>/dev/null && { server_pid=""; exit 130; }
        server_pid=""
    fi
    die "$1; logs are in $dir (DEMO_KEEP=1 keeps them)"
}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }
# api METHOD PATH [BODY]: the admin's call; prints the body.
api() { curl -s -X "$1" -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
             ${3:+-d "$3"} "$S$2"; }
# wait_until SECONDS WHAT COMMAND...: polls every 0.5 s.
wait_until() {
    local secs=$1 what=$2 i; shift 2
    for i in $(seq 1 $((secs * 2))); do
        "$@" && return 0
        sleep 0.5
    done
    die "$what did not happen within $secs s; logs are in $dir (DEMO_KEEP=1 keeps them)"
}

# ---- the server
say "starting shoal-server (embedded PostgreSQL under $dir/server)"
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is taken; using a free one"
    port=0
fi
"$bin/shoal-server" --data-dir "$dir/server" --port "$port" >"$dir/server.log" 2>&1 &
server_pid=$!
server_ready() {
    kill -0 "$server_pid" 2>/dev/null || { cat "$dir/server.log" >&2; die "shoal-server exited"; }
    [ -s "$dir/server/server.port" ] &&
        curl -sf "http://127.0.0.1:$(cat "$dir/server/server.port")/readyz" >/dev/null
}
wait_until 60 "shoal-server's start" server_ready
S="http://127.0.0.1:$(cat "$dir/server/server.port")"
ADMIN=$(cat "$dir/server/admin.token")
echo "dashboard:   $S/"
echo "admin token: $ADMIN   (paste it into the dashboard)"

# ---- four agents
say "starting four CPU agents on loopback"
# One BLAS thread each: four agents share this machine's cores.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for i in 0 1 2 3; do
    region=$([ "$i" -lt 2 ] && echo lab || echo campus)
    "$bin/shoal-agent" --server "$S" --join-token-file "$dir/server/join.token" --name "demo-$i" \
        --region "$region" --listen 127.0.0.1:0 --data-dir "$dir/agent-$i" --data-roots "$dir/data" \
        --heartbeat-interval 2 \
        --probe-interval 1 --measure-ms 200 >"$dir/agent-$i.log" 2>&1 &
    pids="$pids $!"
done
count_nodes() { api GET /v1/nodes | jq '[.nodes[] | select(.hardware.tflops > 0)] | length'; }
count_links() { api GET /v1/links | jq '[.bandwidth_gbps[][] | select(. != null)] | length'; }
nodes_ready() { [ "$(count_nodes)" = 4 ]; }
links_ready() { local n; n=$(count_links); printf '\r  links measured: %s of 12' "$n"; [ "$n" = 12 ]; }
wait_until 120 "four agents registering" nodes_ready
api GET /v1/nodes | jq -r '.nodes[] | "  node \(.id) \(.name) (\(.region)): \(.hardware.cpu_cores) cores, \(.hardware.tflops * 1000 | floor) GFLOP/s measured, peer \(.peer_address)"'
wait_until 180 "the agents measuring their links" links_ready
echo
api GET /v1/links | jq -r '.nodes as $n | .bandwidth_gbps | to_entries[] | .key as $i |
    "  from \($n[$i]): " + ([.value[] | if . == null then "    -" else "\(. | floor) Gbit/s" end] | join("  "))'

# ---- the corpus and the job
say "training a GPT on Debian's fortune cookies"
corpus=$dir/data/fortunes.txt   # beneath the agents' --data-roots
for f in "$fortunes"/*; do
    case $f in *.dat|*.u8|*/art|*/ascii-art) continue;; esac
    [ -f "$f" ] && cat "$f"
done | tr -d '\r' > "$corpus"
echo "corpus: $(wc -c < "$corpus") bytes of English from $fortunes"
d_model=${DEMO_D_MODEL:-128} context=${DEMO_CONTEXT:-64} batch=${DEMO_BATCH:-8}
# a step is 2 replicas x 4 micro-batches x batch sequences x context bytes
tokens_per_step=$((2 * 4 * batch * context))
# validation: 32 fixed sequences from the last 5% of the corpus, which
# training never sees, every 50 steps (a short run: a third of its steps)
eval_every=$((steps >= 150 ? 50 : (steps / 3 > 0 ? steps / 3 : 1)))
job=$(api POST /v1/jobs "$(printf '{"name":"demo-fortunes",
  "model":{"vocab_size":256,"context_length":%d,"d_model":%d,"heads":4,"layers":4},
  "parallelism":{"stages":2,"replicas":2,"micro_batches":4,"micro_batch_size":%d,"schedule":"1f1b"},
  "training":{"steps":%d,"learning_rate":0.003,"warmup_steps":%d,"weight_decay":0.1,"grad_clip":1.0,"seed":1337},
  "data":{"path":"%s","format":"text"},"checkpoint_interval":%d,
  "validation":{"holdout":0.05,"sequences":%d,"eval_interval":%d}}' \
  "$context" "$d_model" "$batch" "$steps" $((steps < 100 ? steps / 10 + 1 : 10)) "$corpus" $((steps < 50 ? steps : 50)) \
  $((32 / batch > 0 ? 32 / batch * batch : batch)) "$eval_every")")
J=$(printf '%s' "$job" | jq -r '.id // empty')
[ -n "$J" ] || die "the server refused the job: $job"
plan=$(api POST "/v1/jobs/$J/schedule" '{"budget_ms":500}')
printf '%s' "$plan" | jq -e .epoch >/dev/null 2>&1 || die "scheduling failed: $plan"
echo "job $J scheduled; the plan (stage x replica -> node):"
api GET "/v1/jobs/$J" | jq -r '.plan.assignments[] | "  stage \(.stage) replica \(.replica) -> node \(.node_id) (layers \(.layer_start)..\(.layer_end - 1))"'
echo "watch it at $S/#/jobs/$J"

# ---- progress
bar() {   # bar DONE TOTAL WIDTH
    local fill=$(($1 * $3 / $2)) s=""
    s=$(printf '%*s' "$fill" '' | tr ' ' '#')$(printf '%*s' $(($3 - fill)) '' | tr ' ' '.')
    printf '%s' "$s"
}
tty=0; [ -t 1 ] && tty=1
last_line=-1
while :; do
    detail=$(api GET "/v1/jobs/$J") || server_gone "the server stopped answering"
    state=$(printf '%s' "$detail" | jq -r '.state // empty' 2>/dev/null)
    [ -n "$state" ] || server_gone "the server answered no job state: $detail"
    read -r step loss it val < <(printf '%s' "$detail" | jq -r '[(.progress.step // -1) + 1, (.progress.loss // 0), (.progress.iteration_s // 0), (.progress.val_loss // "-")] | @tsv')
    rate=$(awk -v t="$tokens_per_step" -v s="$it" 'BEGIN { printf "%.0f", (s > 0 ? t / s : 0) }')
    [ "$val" = - ] || val=$(printf '%.3f' "$val")
    line=$(printf '[%s] step %d/%d  loss %.3f  validation %s  %s tokens/s  (%s)' "$(bar "$step" "$steps" 30)" "$step" "$steps" "$loss" "$val" "$rate" "$state")
    if [ "$tty" = 1 ]; then printf '\r%s\033[K' "$line"
    elif [ $((step / 10)) != "$last_line" ] || [ "$step" = "$steps" ]; then echo "$line"; last_line=$((step / 10)); fi
    case $state in succeeded|failed|cancelled) break;; esac
    sleep 1
done
echo
if [ "$state" != succeeded ]; then
    echo "the job $state: $(printf '%s' "$detail" | jq -r '.failure_reason // "no reason given"')" >&2
    for i in 0 1 2 3; do echo "--- agent $i:"; tail -n 5 "$dir/agent-$i.log"; done >&2
    exit 1
fi
first_loss=$(printf '%s' "$detail" | jq -r '.progress.losses[0][1]')
printf 'loss went from %.3f to %.3f over %d steps\n' "$first_loss" "$loss" "$steps"
printf '%s' "$detail" | jq -r '.progress.val_losses | "validation loss (32 sequences the training never saw): " +
    (map("\(.[1] * 1000 | round / 1000) after step \(.[0] + 1)") | join(", "))'

# ---- text from the trained model
say "text sampled from the trained model (shoal-agent sample, temperature 0.8)"
"$bin/shoal-agent" sample --server "$S" --admin-token-file "$dir/server/admin.token" --job "$J" \
    --tokens "$sample_tokens" --temperature 0.8 --tmp-dir "$dir" 2>"$dir/sample.log" || { cat "$dir/sample.log" >&2; exit 1; }
echo
echo "demo done: that was a real 2x2 pipeline- and data-parallel run over TCP."
