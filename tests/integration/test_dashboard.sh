#!/usr/bin/env bash
# test_dashboard.sh - the dashboard (web/, served at /) in headless Chromium
# against a real server: six registered nodes with distinct measured links,
# a scheduled 2x2 job with five reported steps, one tasklet a straggler, and
# a cancelled 1x1 job with a failure report the server judged.
# Checks the files the server serves and the API fields the dashboard reads
# (node roles, a job's latest step, per-tasklet medians, stragglers), then runs
# tests/browser/dashboard.test.mjs, which loads every page, compares what is
# drawn with the API, submits and schedules a job through the form, and
# saves screenshots.  Screenshots go to $SHOAL_SHOTS_DIR or a fresh
# /tmp/shoal-dashboard.* directory (kept; its path is printed).
#
# Needs node, playwright-core (tests/browser/node_modules) and Debian's
# chromium; `make deps` installs them.  Without them the suite fails.
set -u
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
CHROMIUM=${SHOAL_CHROMIUM:-/usr/bin/chromium}

# ---- prerequisites: missing ones fail the suite, they do not skip it
missing=0
if command -v node >/dev/null 2>&1; then ok "node is installed ($(node --version))"
else fail "node is installed" "run 'make deps'"; missing=1; fi
if [ -x "$CHROMIUM" ]; then ok "chromium is installed at $CHROMIUM"
else fail "chromium is installed at $CHROMIUM" "run 'make deps' (Debian package chromium)"; missing=1; fi
if [ -f "$TOP/tests/browser/node_modules/playwright-core/package.json" ]; then ok "playwright-core is installed"
else fail "playwright-core is installed in tests/browser/node_modules" "run 'make deps' (npm ci there)"; missing=1; fi
[ "$missing" = 0 ] || exit 1

SHOTS=${SHOAL_SHOTS_DIR:-$(mktemp -d /tmp/shoal-dashboard.XXXXXX)}
mkdir -p "$SHOTS"

# Nodes stay live for the whole run without heartbeats (the form schedules a job late).
start_server_a --heartbeat-timeout 3600 || exit 1

# header NAME: the value of response header NAME of the last req.
header() { grep -i "^$1:" "$WORK/headers" | head -n 1 | cut -d' ' -f2- | tr -d '\r'; }

# ---- the files
req GET "$S/"
check "/ is the dashboard" "$STATUS $(header Content-Type)" "200 text/html; charset=utf-8"
check "it loads its script and style sheet from this server" \
      "$(printf '%s' "$BODY" | grep -c -e 'src="/app.js"' -e 'href="/app.css"')" 2
check "with a policy that keeps everything on this origin" "$(header Content-Security-Policy)" \
      "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
req GET "$S/app.js";      check "app.js is JavaScript" "$STATUS $(header Content-Type)" "200 text/javascript; charset=utf-8"
check "app.js is web/app.js" "$(printf '%s\n' "$BODY" | cmp -s - "$TOP/web/app.js" && echo same)" same
req GET "$S/app.css";     check "app.css is CSS" "$STATUS $(header Content-Type)" "200 text/css; charset=utf-8"
req GET "$S/favicon.svg"; check "the icon is SVG" "$STATUS $(header Content-Type)" "200 image/svg+xml"
req GET "$S/index.html";  check "nothing else is served as a file" "$STATUS" 404
check "the dashboard's script never writes markup from strings" \
      "$(grep -c -e 'innerHTML' -e 'outerHTML' -e 'insertAdjacentHTML' -e 'document.write' "$TOP/web/app.js")" 0

# ---- six nodes; one name tries to be markup
NAMES=("h100-zurich" "a100-paris" "l4-oregon" "cpu-tokyo" "<img src=x onerror=window.__xss=1>" "t4-sydney")
REGIONS=("zurich" "paris" "oregon" "tokyo" "o'hare & co" "sydney")
TFLOPS=(612.5 231.2 121 1.5 80 65)
GPUS=("NVIDIA H100 80GB HBM3" "NVIDIA A100-SXM4-40GB" "NVIDIA L4" "" "NVIDIA RTX 4090" "Tesla T4")
declare -a TOK ID
for i in 0 1 2 3 4 5; do
    gpu=${GPUS[$i]}
    hw=$(jq -nc --arg g "$gpu" --argjson t "${TFLOPS[$i]}" \
        '{tflops: $t, cpu_cores: 16, ram_bytes: 68719476736} +
         (if $g == "" then {} else {gpu_model: $g, gpu_count: 1, gpu_memory_bytes: 25769803776} end)')
    req POST "$S/v1/agent/register" "$JOIN" "$(jq -nc --arg n "${NAMES[$i]}" --arg r "${REGIONS[$i]}" --argjson hw "$hw" \
        --arg p "127.0.0.1:$((7100 + i))" '{name: $n, region: $r, peer_address: $p, hardware: $hw}')"
    TOK[$i]=$(printf '%s' "$BODY" | jq -r .token)
    ID[$i]=$(printf '%s' "$BODY" | jq -r .node_id)
done
check "six nodes register" "$(sql a "SELECT count(*) FROM nodes")" 6

# Every ordered pair measured, each with its own numbers: from node i to
# node j, latency 5 + 7i + 3j ms and bandwidth (10(i+1) + j+1) / 10 Gbit/s.
for i in 0 1 2 3 4 5; do
    s=""
    for j in 0 1 2 3 4 5; do
        [ "$i" = "$j" ] && continue
        s="$s{\"to\":${ID[$j]},\"latency_ms\":$((5 + 7 * i + 3 * j)),\"bandwidth_gbps\":$(( 10 * (i + 1) + j + 1 ))e-1},"
    done
    req PUT "$S/v1/links" "${TOK[$i]}" "{\"samples\":[${s%,}]}"
done
req GET "$S/v1/links" "$ADMIN"
check "the link matrix has every measured pair" \
      "$(printf '%s' "$BODY" | jq '[.bandwidth_gbps[][] | select(. != null)] | length')" 30
# and one direction its agent then could not connect (the Network page shows it unreachable)
req PUT "$S/v1/links" "${TOK[4]}" "{\"samples\":[{\"to\":${ID[5]},\"reachable\":false,\"why\":\"test: a firewall\"}]}"
req GET "$S/v1/links" "$ADMIN"
check "the link matrix marks it unreachable" "$(printf '%s' "$BODY" | jq '[.reachable[][] | select(. == false)] | length')" 1

# ---- a 2x2 job, scheduled, with five steps of every tasklet
JOB='{"name":"train-2x2","model":{"vocab_size":256,"context_length":64,"d_model":64,"heads":4,"layers":4},"parallelism":{"stages":2,"replicas":2,"micro_batches":2,"micro_batch_size":2},"training":{"steps":10,"learning_rate":0.001},"data":{"path":"/data/corpus.txt","format":"text"},"validation":{"holdout":0.1,"sequences":4,"eval_interval":2}}'
req POST "$S/v1/jobs" "$ADMIN" "$JOB"
expect "create a 2x2 job" 201 '[.state, .latest_step] | tostring' '["pending",null]'
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":300}'
expect "schedule it" 201 .epoch 1
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "before any step it has no measured tasklets" 200 '.measured | tostring' '[]'
PLAN=$(printf '%s' "$BODY" | jq -c .plan.assignments)
# tok_of NODE_ID: that node's token.
tok_of() { local i; for i in 0 1 2 3 4 5; do [ "${ID[$i]}" = "$1" ] && echo "${TOK[$i]}"; done; }

req GET "$S/v1/nodes" "$ADMIN"
check "the four nodes of the plan have its tasklets as their roles" \
      "$(printf '%s' "$BODY" | jq -c --argjson j "$J" '[.nodes[] | select(.role != null) | .role |
           select(.job_id == $j and .job_name == "train-2x2" and .job_state == "scheduled" and .epoch == 1) |
           [.stage, .replica]] | sort')" '[[0,0],[0,1],[1,0],[1,1]]'
check "and each node the tasklet the plan gives it" \
      "$(printf '%s' "$BODY" | jq -c '[.nodes[] | select(.role != null) | [.id, .role.stage, .role.replica]] | sort')" \
      "$(printf '%s' "$PLAN" | jq -c '[.[] | [.node_id, .stage, .replica]] | sort')"
check "the other two have none" "$(printf '%s' "$BODY" | jq '[.nodes[] | select(.role == null)] | length')" 2
FREE=$(printf '%s' "$BODY" | jq -c '[.nodes[] | select(.role == null) | .id] | sort')
N0=$(printf '%s' "$PLAN" | jq '.[0].node_id')
req GET "$S/v1/nodes/$N0" "$ADMIN"
expect "GET /v1/nodes/{id} shows the role too" 200 '[.role.job_id, .role.stage, .role.replica] | tostring' "[$J,0,0]"

# progress STEP [COMPUTE]: every tasklet's report of STEP.  Tasklet (s, r)
# takes 0.4 + 0.1 s + 0.02 STEP seconds; the last stage's loss is
# 5 - 0.25 STEP + 0.1 r; its compute_s is COMPUTE["s,r"] (a JSON object),
# or 0.2 + 0.05 s without one.  After odd steps (eval_interval 2) each
# replica's last stage reports one validation micro-batch of loss
# 4 - 0.2 STEP + 0.1 r.  Every tasklet sends 1000 + 100 s bytes on stage
# links and 500 to its group.
progress() {
    local step=$1 compute=${2-'{}'} a s r n loss val
    for a in $(printf '%s' "$PLAN" | jq -r '.[] | "\(.stage),\(.replica),\(.node_id)"'); do
        IFS=, read -r s r n <<<"$a"
        loss=null
        val='{}'
        [ "$s" = 1 ] && loss=$(echo "5 - 0.25 * $step + 0.1 * $r" | bc)
        [ "$s" = 1 ] && [ $((step % 2)) = 1 ] &&
            val=$(jq -nc --argjson v "$(echo "4 - 0.2 * $step + 0.1 * $r" | bc)" '{val_loss: $v, val_micro_batches: 1, eval_s: 0.05}')
        req POST "$S/v1/agent/progress" "$(tok_of "$n")" "$(jq -nc --argjson j "$J" --argjson st "$step" \
            --argjson s "$s" --argjson r "$r" --argjson loss "$loss" --argjson c "$compute" --argjson val "$val" \
            '{job_id: $j, epoch: 1, step: $st, stage: $s, replica: $r, loss: $loss,
              iteration_s: (0.4 + 0.1 * $s + 0.02 * $st), compute_s: ($c["\($s),\($r)"] // (0.2 + 0.05 * $s)),
              send_s: (0.01 * ($s + 1)),
              recv_wait_s: 0.02, allreduce_s: (0.03 + 0.01 * $r), bubble_s: 0.05, tokens: 256,
              stage_link_bytes: (1000 + 100 * $s), sync_bytes: 500} + $val')"
        [ "$STATUS" = 201 ] || fail "progress step $step of tasklet ($s,$r)" "status $STATUS: $BODY"
    done
}
# In steps 1-4 each tasklet computes 1.25 times what the shoal cost model
# predicts for its node and layers, except tasklet (1, 0): 5 times, a
# straggler for the job page to mark.
progress 0
req GET "$S/v1/jobs/$J" "$ADMIN"
COMPUTE=$(printf '%s' "$BODY" | jq -c '[.measured[] | {key: "\(.stage),\(.replica)",
    value: (.predicted_compute_s * (if .stage == 1 and .replica == 0 then 5 else 1.25 end))}] | from_entries')
for step in 1 2 3 4; do progress "$step" "$COMPUTE"; done
req GET "$S/v1/jobs/$J" "$ADMIN"
expect "the job ran five steps" 200 '[.state, .latest_step, (.progress.losses | length)] | tostring' '["running",5,5]'
check "measured: one summary per tasklet, by stage then replica" \
      "$(printf '%s' "$BODY" | jq -c '[.measured[] | [.stage, .replica, .steps, .last_step]]')" \
      '[[0,0,5,4],[0,1,5,4],[1,0,5,4],[1,1,5,4]]'
check "measured: the median iteration time of the five steps" \
      "$(printf '%s' "$BODY" | jq -c '[.measured[] | .iteration_s * 1000 | round]')" '[440,440,540,540]'
check "measured: the median of each part" \
      "$(printf '%s' "$BODY" | jq -c '.measured[3] | [.send_s, .recv_wait_s, .allreduce_s, .bubble_s, .tokens] | map(. * 1000 | round)')" \
      '[20,20,40,50,256000]'
check "measured: the median compute time, the one of steps 1-4" \
      "$(printf '%s' "$BODY" | jq -c --argjson c "$COMPUTE" '[.measured[] | (.compute_s / $c["\(.stage),\(.replica)"] * 1e6 | round)]')" \
      '[1000000,1000000,1000000,1000000]'
check "measured: slowdowns 1.25, and 5 for tasklet (1, 0)" \
      "$(printf '%s' "$BODY" | jq -c '[.measured[] | .slowdown * 1e6 | round]')" '[1250000,1250000,5000000,1250000]'
check "stragglers: tasklet (1, 0) alone" \
      "$(printf '%s' "$BODY" | jq -c '[.stragglers[] | [.stage, .replica, .node_id == $n]]' --argjson n "$(printf '%s' "$PLAN" | jq '.[2].node_id')")" \
      '[[1,0,true]]'
check "validation: the replicas' means weighed into the job's, after steps 1 and 3" \
      "$(printf '%s' "$BODY" | jq -c '[.progress.val_losses[] | [.[0], (.[1] * 1000 | round)]], .progress.val_step, (.progress.val_loss * 1000 | round)' | tr '\n' ' ')" \
      '[[1,3850],[3,3450]] 3 3450 '
check "traffic: bytes per step summed over the tasklets" \
      "$(printf '%s' "$BODY" | jq -c '.traffic | [.steps, .stage_link_bytes_per_step, .sync_bytes_per_step]')" '[5,4200,2000]'
check "measured: each tasklet's mean bytes per step" \
      "$(printf '%s' "$BODY" | jq -c '[.measured[] | [.stage_link_bytes, .sync_bytes]]')" '[[1000,500],[1000,500],[1100,500],[1100,500]]'
check "measured: the node of each tasklet's latest report" \
      "$(printf '%s' "$BODY" | jq -c '[.measured[] | .node_id]')" "$(printf '%s' "$PLAN" | jq -c '[.[] | .node_id]')"
scrape
near "metric: the job's validation loss" "$(value "shoal_job_validation_loss{job_id=\"$J\"}")" 3.45
near "metric: bytes sent per step on stage links" "$(value "shoal_job_step_sent_bytes{job_id=\"$J\",link=\"stage\"}")" 4200
near "metric: and to the data-parallel groups" "$(value "shoal_job_step_sent_bytes{job_id=\"$J\",link=\"sync\"}")" 2000
req GET "$S/v1/jobs" "$ADMIN"
expect "the job list shows each job's latest step" 200 ".jobs[] | select(.id == $J) | .latest_step" 5

# ---- a job that failed once, for the job page's failures panel: a 1x1
# job on a free node, whose report the server judges (the node's peer port
# refuses the probe: it is gone), then cancelled
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c '.name = "failed-once" | .parallelism.stages = 1 | .parallelism.replicas = 1')"
FJ=$(printf '%s' "$BODY" | jq -r .id)
F0=$(printf '%s' "$FREE" | jq '.[0]')
req POST "$S/v1/jobs/$FJ/plan" "$ADMIN" "{\"stages\":[{\"nodes\":[$F0]}]}"
expect "a 1x1 job on a free node" 201 .epoch 1
req POST "$S/v1/agent/failure" "$(tok_of "$F0")" "{\"job_id\":$FJ,\"epoch\":1,\"stage\":0,\"replica\":0,\"reason\":\"CUDA error: an illegal memory access was encountered\"}"
expect "its node reports a failure" 200 .state recovering
judged() { [ "$(sql a "SELECT count(*) FROM job_faults WHERE job_id = $FJ AND judged_at IS NOT NULL")" -ge 1 ]; }
wait_for 20 judged
req GET "$S/v1/jobs/$FJ" "$ADMIN"
check "the server judged it: the node is gone" "$(printf '%s' "$BODY" | jq -c '[.faults[0] | .verdict, .culprit_node]')" "[\"node\",$F0]"
req DELETE "$S/v1/jobs/$FJ" "$ADMIN"
expect "and it is cancelled" 200 .state cancelled

# ---- the browser
jq -n --arg url "$S" --arg admin "$ADMIN" --argjson job "$J" --argjson free "$FREE" --arg chromium "$CHROMIUM" \
      --argjson plan "$PLAN" --argjson ids "$(printf '%s\n' "${ID[@]}" | jq -s .)" \
      --argjson toks "$(printf '%s\n' "${TOK[@]}" | jq -R . | jq -s .)" \
      --argjson fj "$FJ" \
      '{url: $url, admin: $admin, job_id: $job, fault_job_id: $fj, free_nodes: $free, chromium: $chromium,
        tasklets: [$plan[] | . as $a | {stage, replica, node_id,
                   token: ($toks[$ids | index($a.node_id)])}]}' > "$WORK/fixture.json"
node "$TOP/tests/browser/dashboard.test.mjs" "$WORK/fixture.json" "$SHOTS" > "$WORK/browser.out" 2>&1
rc=$?
cat "$WORK/browser.out"
if [ "$rc" -eq 0 ]; then ok "the browser test ran to its end"
else fail "the browser test ran to its end" "exit status $rc"; fi
echo "# screenshots: $SHOTS"
ls "$SHOTS" | sed 's/^/#   /'

stop_server a
[ "$FAILS" -eq 0 ]
