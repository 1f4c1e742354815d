#!/usr/bin/env bash
# test_metrics.sh - GET /metrics over real HTTP against a real embedded
# Postgres: per-node state and heartbeat age, per-link bandwidth and latency
# in base units, per-job step-time parts, scheduler run counters and their
# histogram, the relay's (a --relay that does not answer), and the
# exposition format itself (HELP, TYPE, names, labels).
set -u
. "$(dirname "$0")/lib.sh"

# its --relay names a closed port: the relay's series say it does not answer
DEAD=127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_server_a --relay "$DEAD" --relay-secret-file "$WORK/relay.secret" || exit 1

# cmp_num NAME A OP B: awk comparison of two numbers, e.g. cmp_num "x grew" 3 '>' 1.
cmp_num() {
    if [ "$(awk -v a="$2" -v b="$4" "BEGIN { print (a != \"\" && a == a + 0 && a $3 b) ? 1 : 0 }")" = 1 ]
    then ok "$1"; else fail "$1" "$2 $3 $4 does not hold"; fi
}
# runs COST RESULT: shoal_scheduler_runs_total for that cost model and result, from $M.
runs() { value "shoal_scheduler_runs_total{cost_model=\"$1\",result=\"$2\"}"; }
hcount() { value "shoal_scheduler_duration_seconds_count{cost_model=\"$1\"}"; }

# ---- before anything happened: the scheduler series exist at zero
scrape
check "metrics answer 200" "$STATUS" 200
for c in shoal dtfm; do
    for r in stored dry_run error; do
        check "scheduler runs $c/$r start at 0" "$(runs $c $r)" 0
    done
    check "scheduler histogram $c starts empty" "$(hcount $c) $(value "shoal_scheduler_duration_seconds_bucket{cost_model=\"$c\",le=\"+Inf\"}")" "0 0"
done
check "no node, no node series" "$(grep -c '^shoal_node_' "$M")" 0
check "shoal_relay_up: the relay (--relay) does not answer the server" "$(value "shoal_relay_up{relay=\"$DEAD\"}")" 0
check "shoal_relay_unreachable_nodes: no agent has said so yet" "$(value "shoal_relay_unreachable_nodes{relay=\"$DEAD\"}")" 0

# ---- four nodes; n0's name needs escaping in a label value
declare -a TOK ID NAME
NAME=('gpu "zero" \ lab' n1 n2 n3)
for i in 0 1 2 3; do
    req POST "$S/v1/agent/register" "$JOIN" "$(jq -cn --arg n "${NAME[$i]}" --arg p "127.0.0.1:710$i" \
        '{name: $n, peer_address: $p, hardware: {tflops: 10, cpu_cores: 8, gpu_memory_bytes: 8000000000}}')"
    TOK[$i]=$(printf '%s' "$BODY" | jq -r .token)
    ID[$i]=$(printf '%s' "$BODY" | jq -r .node_id)
done
check "four nodes register" "$(sql a "SELECT count(*) FROM nodes")" 4
# lab I: the node label pair of node I as /metrics writes it.
lab() { if [ "$1" = 0 ]; then printf 'node="%s",name="gpu \\"zero\\" \\\\ lab"' "${ID[0]}"; else printf 'node="%s",name="n%s"' "${ID[$1]}" "$1"; fi; }

# ---- nodes: up, one-hot state, heartbeat age that is small and grows
scrape
for i in 0 1 2 3; do
    check "node $i is up" "$(value "shoal_node_up{$(lab $i)}")" 1
    check "node $i is idle, one-hot" \
          "$(for s in idle busy draining lost; do value "shoal_node_state{$(lab $i),state=\"$s\"}"; done | tr '\n' ' ')" "1 0 0 0 "
done
check "a name with quotes and a backslash is escaped in its label" \
      "$(grep -c '^shoal_node_up{node="'"${ID[0]}"'",name="gpu \\"zero\\" \\\\ lab"} 1$' "$M")" 1
age0=$(value "shoal_node_heartbeat_age_seconds{$(lab 1)}")
cmp_num "a node that just registered has a small heartbeat age" "$age0" '<' 10
cmp_num "and not a negative one" "$age0" '>=' 0
sleep 2
scrape
age1=$(value "shoal_node_heartbeat_age_seconds{$(lab 1)}")
cmp_num "its heartbeat age grows with time (at least the 2 s slept)" "$(awk -v a="$age1" -v b="$age0" 'BEGIN { print a - b }')" '>=' 1.99
req POST "$S/v1/agent/heartbeat" "${TOK[1]}" '{"state":"idle"}'; expect "a heartbeat" 200
scrape
cmp_num "a heartbeat brings it back down" "$(value "shoal_node_heartbeat_age_seconds{$(lab 1)}")" '<' "$age1"
# nothing listens at their peer addresses: the server finds them unreachable
unreachable0() { scrape; [ "$(value "shoal_node_reachable{$(lab 0)}")" = 0 ]; }
if wait_for 15 unreachable0; then ok "shoal_node_reachable is 0 for a node whose peer port no agent answers"
else fail "shoal_node_reachable is 0 for a node whose peer port no agent answers" "$(grep '^shoal_node_reachable' "$M")"; fi

# ---- links: every ordered pair, in bytes/s and seconds (base units)
# bw I J (Gbit/s) and lat I J (ms): distinct per direction, not round in binary.
bw()  { awk -v i="$1" -v j="$2" 'BEGIN { printf "%.4f", 0.1 + i * 1.3 + j * 0.07 }'; }
lat() { awk -v i="$1" -v j="$2" 'BEGIN { printf "%.3f", 0.35 + i * 17.1 + j * 2.3 }'; }
for i in 0 1 2 3; do
    s=""
    for j in 0 1 2 3; do
        [ "$i" = "$j" ] && continue
        s="$s{\"to\":${ID[$j]},\"latency_ms\":$(lat "$i" "$j"),\"bandwidth_gbps\":$(bw "$i" "$j")},"
    done
    req PUT "$S/v1/links" "${TOK[$i]}" "{\"samples\":[${s%,}]}"; expect "node $i puts its three links" 200 .accepted 3
done
scrape
check "twelve bandwidth series (N^2 - N)" "$(grep -c '^shoal_link_bandwidth_bytes_per_second{' "$M")" 12
check "twelve latency series" "$(grep -c '^shoal_link_latency_seconds{' "$M")" 12
for i in 0 1 2 3; do
    for j in 0 1 2 3; do
        [ "$i" = "$j" ] && continue
        l="from=\"${ID[$i]}\",to=\"${ID[$j]}\""
        near "link $i->$j: bandwidth is the Gbit/s put times 1.25e8 (bytes/s)" \
             "$(value "shoal_link_bandwidth_bytes_per_second{$l}")" "$(awk -v g="$(bw "$i" "$j")" 'BEGIN { printf "%.6f", g * 1.25e8 }')"
        near "link $i->$j: latency is the ms put over 1000" \
             "$(value "shoal_link_latency_seconds{$l}")" "$(awk -v m="$(lat "$i" "$j")" 'BEGIN { printf "%.9f", m / 1000 }')"
    done
done
req PUT "$S/v1/links" "${TOK[2]}" "{\"samples\":[{\"to\":${ID[0]},\"latency_ms\":250,\"bandwidth_gbps\":0.042}]}"
scrape
near "a newer sample replaces a link's bandwidth" "$(value "shoal_link_bandwidth_bytes_per_second{from=\"${ID[2]}\",to=\"${ID[0]}\"}")" 5250000
near "and its latency" "$(value "shoal_link_latency_seconds{from=\"${ID[2]}\",to=\"${ID[0]}\"}")" 0.25
near "the reverse direction keeps its own" "$(value "shoal_link_bandwidth_bytes_per_second{from=\"${ID[0]}\",to=\"${ID[2]}\"}")" \
     "$(awk -v g="$(bw 0 2)" 'BEGIN { printf "%.6f", g * 1.25e8 }')"
check "still one series per direction" "$(grep -c '^shoal_link_latency_seconds{' "$M")" 12

# ---- scheduler runs: one count per run, the histogram agrees
JOB='{"name":"metrics","model":{"vocab_size":256,"context_length":64,"d_model":64,"heads":4,"layers":4},"parallelism":{"stages":2,"replicas":2,"micro_batches":2,"micro_batch_size":2},"training":{"steps":5,"learning_rate":0.001},"data":{"path":"/data/corpus.txt","format":"text"},"validation":{"holdout":0.1,"sequences":4,"eval_interval":3}}'
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; expect "create a 2x2 job" 201
J=$(printf '%s' "$BODY" | jq -r .id)
# schedule_counts BODY WANT_STATUS COST RESULT NAME: schedules, then checks
# that exactly COST/RESULT went up by one, the other five series did not,
# and each cost model's histogram count equals the sum of its runs.
schedule_counts() {
    local before after c r want
    scrape
    before=$(for c in shoal dtfm; do for r in stored dry_run error; do printf '%s/%s=%s ' $c $r "$(runs $c $r)"; done; done)
    req POST "$S/v1/jobs/$J/schedule" "$ADMIN" "$1"
    check "$5: status" "$STATUS" "$2"
    scrape
    after=$(for c in shoal dtfm; do for r in stored dry_run error; do printf '%s/%s=%s ' $c $r "$(runs $c $r)"; done; done)
    want=$(for kv in $before; do
               k=${kv%%=*}; v=${kv#*=}
               [ "$k" = "$3/$4" ] && v=$((v + 1))
               printf '%s=%s ' "$k" "$v"
           done)
    check "$5: counted once, as $3/$4" "$after" "$want"
    for c in shoal dtfm; do
        check "$5: $c histogram count = its runs" "$(hcount $c)" \
              "$(( $(runs $c stored) + $(runs $c dry_run) + $(runs $c error) ))"
        check "$5: $c +Inf bucket = count" \
              "$(value "shoal_scheduler_duration_seconds_bucket{cost_model=\"$c\",le=\"+Inf\"}")" "$(hcount $c)"
    done
}
schedule_counts '{"budget_ms":100,"dry_run":true}' 200 shoal dry_run "dry run"
schedule_counts '{"budget_ms":100}' 201 shoal stored "shoal run"
schedule_counts '{"budget_ms":100,"cost_model":"dtfm"}' 201 dtfm stored "dtfm run"
schedule_counts '{"budget_ms":100,"cost_model":"dtfm","dry_run":true}' 200 dtfm dry_run "dtfm dry run"
cmp_num "the shoal histogram's sum covers its two 100 ms searches" \
        "$(value 'shoal_scheduler_duration_seconds_sum{cost_model="shoal"}')" '>=' 0.2
prev=0; mono=1
for le in 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 30 60 120 300 +Inf; do
    v=$(value "shoal_scheduler_duration_seconds_bucket{cost_model=\"dtfm\",le=\"$le\"}")
    [ "$v" = absent ] && mono=0
    [ "$v" != absent ] && [ "$v" -lt "$prev" ] && mono=0
    prev=$v
done
check "the histogram's buckets are cumulative" "$mono $prev" "1 2"
check "a 100 ms search is not in the 10 ms bucket" "$(value 'shoal_scheduler_duration_seconds_bucket{cost_model="dtfm",le="0.01"}')" 0
scrape; before=$(runs shoal stored)/$(runs shoal error)/$(hcount shoal)
req POST "$S/v1/jobs/424242/schedule" "$ADMIN" '{"budget_ms":100}'; expect "scheduling an unknown job is 404" 404
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":5}'; expect "a budget under 10 ms is 422" 422
scrape
check "requests refused before the search are no scheduler runs" "$(runs shoal stored)/$(runs shoal error)/$(hcount shoal)" "$before"

# ---- the job: step-time parts of the latest complete step
E=$(sql a "SELECT plan_epoch FROM jobs WHERE id = $J")
check "the job is at epoch 2" "$E" 2
declare -a ST RP
for i in 0 1 2 3; do
    req GET "$S/v1/agent/assignment" "${TOK[$i]}"
    ST[$i]=$(printf '%s' "$BODY" | jq .assignment.stage); RP[$i]=$(printf '%s' "$BODY" | jq .assignment.replica)
done
tok_of() { local i; for i in 0 1 2 3; do [ "${ST[$i]}" = "$1" ] && [ "${RP[$i]}" = "$2" ] && echo "${TOK[$i]}"; done; }
# report STAGE REPLICA STEP SCALE [EXTRA]: posts one report whose parts differ
# per tasklet (SCALE multiplies them all), with EXTRA's fields (a JSON
# object) added, and keeps its body in $WORK/posted.STEP.
report() {
    local s=$1 r=$2 loss=null body
    [ "$s" = 1 ] && loss=4.5
    body=$(jq -cn --argjson j "$J" --argjson e "$E" --argjson step "$3" --argjson s "$s" --argjson r "$r" \
                  --argjson loss "$loss" --argjson k "$4" --argjson extra "${5:-{\}}" \
        '{job_id: $j, epoch: $e, step: $step, stage: $s, replica: $r, loss: $loss,
          compute_s: ((0.11 + 0.2 * $s + 0.013 * $r) * $k), send_s: ((0.017 + 0.01 * $s) * $k),
          recv_wait_s: ((0.029 + 0.05 * $r) * $k), allreduce_s: ((0.041 + 0.003 * $s + 0.02 * $r) * $k),
          bubble_s: ((0.07 - 0.03 * $s) * $k), iteration_s: (0.6 * $k), tokens: 256} + $extra')
    req POST "$S/v1/agent/progress" "$(tok_of "$s" "$r")" "$body"
    expect "progress: step $3 stage $s replica $r" 201 .recorded true
    printf '%s\n' "$body" >> "$WORK/posted.$3"
}
for s in 0 1; do for r in 0 1; do report "$s" "$r" 0 1; done; done
report 0 0 1 10   # step 1 has begun: one report, ten times slower
scrape
check "the job's step is the latest reported" "$(value "shoal_job_step{job_id=\"$J\"}")" 1
for p in compute send recv_wait bubble allreduce; do
    near "part $p: the mean over the tasklets of the latest complete step" \
         "$(value "shoal_job_step_part_seconds{job_id=\"$J\",part=\"$p\"}")" \
         "$(jq -s --arg f "${p}_s" 'map(.[$f]) | add / length' "$WORK/posted.0")"
done
near "part other: the mean of what the five leave of each tasklet's iteration" \
     "$(value "shoal_job_step_part_seconds{job_id=\"$J\",part=\"other\"}")" \
     "$(jq -s 'map(.iteration_s - .compute_s - .send_s - .recv_wait_s - .bubble_s - .allreduce_s) | add / length' "$WORK/posted.0")"
check "six parts per job" "$(grep -c "^shoal_job_step_part_seconds{job_id=\"$J\"," "$M")" 6
# sum without(part), as the README promises: the step's mean iteration time, not more
near "the parts add up to the step's mean iteration time" \
     "$(grep "^shoal_job_step_part_seconds{job_id=\"$J\"," "$M" | awk '{ s += $2 } END { printf "%.12f", s }')" \
     "$(jq -s 'map(.iteration_s) | add / length' "$WORK/posted.0")"
for s in 0 1; do for r in 0 1; do [ "$s$r" = 00 ] || report "$s" "$r" 1 10; done; done
scrape
near "once step 1 is complete its parts are shown" "$(value "shoal_job_step_part_seconds{job_id=\"$J\",part=\"compute\"}")" \
     "$(jq -s 'map(.compute_s) | add / length' "$WORK/posted.1")"
near "the tokens per second are still right beside them" "$(value "shoal_job_tokens_per_second{job_id=\"$J\"}")" \
     "$(awk 'BEGIN { printf "%.9f", 512 / 6 }')"
for i in 0 1 2 3; do
    check "node $i is busy now, one-hot" \
          "$(for s in idle busy draining lost; do value "shoal_node_state{$(lab $i),state=\"$s\"}"; done | tr '\n' ' ')" "0 1 0 0 "
done
# A third step, with a validation (eval_interval 3) and byte counts: every
# tasklet's slowdown is measured, and every per-job family has samples.
for s in 0 1; do for r in 0 1; do
    extra='{"stage_link_bytes":1000,"sync_bytes":500}'
    [ "$s" = 1 ] && extra='{"stage_link_bytes":1000,"sync_bytes":500,"eval_s":0.05,"val_loss":3.75,"val_micro_batches":1}'
    report "$s" "$r" 2 1 "$extra"
done; done
scrape
check "four tasklet slowdown series" "$(grep -c "^shoal_tasklet_slowdown_ratio{job_id=\"$J\"," "$M")" 4
check "a validation loss and two byte series" \
      "$(value "shoal_job_validation_loss{job_id=\"$J\"}") $(grep -c "^shoal_job_step_sent_bytes{job_id=\"$J\"," "$M")" "3.75 2"

# ---- HTTP requests: route and method labels, bounded
# reqs ROUTE METHOD STATUS: shoal_http_requests_total of that series, 0 when absent.
reqs() { local v; v=$(value "shoal_http_requests_total{route=\"$1\",method=\"$2\",status=\"$3\"}"); [ "$v" = absent ] && v=0; echo "$v"; }
# hcount_route ROUTE METHOD: the request histogram's _count of that series, 0 when absent.
hcount_route() { local v; v=$(value "shoal_http_request_duration_seconds_count{route=\"$1\",method=\"$2\"}"); [ "$v" = absent ] && v=0; echo "$v"; }
scrape
b_bad=$(reqs "/v1/jobs/{id}" GET 400) b_bad_n=$(hcount_route "/v1/jobs/{id}" GET)
b_del=$(reqs unmatched DELETE 404) b_other=$(reqs unmatched other 404) b_unm=$(reqs unmatched GET 400)
req GET "$S/v1/jobs/abc" "$ADMIN"; expect "GET /v1/jobs/abc is 400" 400 .error.code invalid_id
req DELETE "$S/v1/no-such-thing" "$ADMIN"; expect "DELETE of an unknown path is 404" 404
check "a made-up method on an unknown path is 404" \
      "$(curl -s -o /dev/null -w '%{http_code}' -X BREW "$S/v1/no-such-thing")" 404
check "a made-up method on an unknown id's path is 400" \
      "$(curl -s -o /dev/null -w '%{http_code}' -X BREW "$S/v1/jobs/abc")" 400
scrape
check "a bad id on a known route counts under the route's pattern" "$(reqs "/v1/jobs/{id}" GET 400)" "$((b_bad + 1))"
check "and in its duration histogram" "$(hcount_route "/v1/jobs/{id}" GET)" "$((b_bad_n + 1))"
check "not as unmatched" "$(reqs unmatched GET 400)" "$b_unm"
check "an unmatched request keeps its method" "$(reqs unmatched DELETE 404)" "$((b_del + 1))"
check "a method HTTP does not have is counted as method=\"other\", once per request" \
      "$(reqs unmatched other 404)/$(reqs unmatched other 400)" "$((b_other + 1))/1"
check "no request series has an empty method" "$(grep -c '^shoal_http_[a-z_]*{[^}]*method=""' "$M")" 0
check "the made-up method is no label value" "$(grep -c 'BREW' "$M")" 0
check "the duration histogram is by route and method only" \
      "$(grep '^shoal_http_request_duration_seconds_' "$M" | grep -cv '^shoal_http_request_duration_seconds_[a-z]*{route="[^"]*",method="[A-Za-z]*"\(,le="[^"]*"\)\?} ')" 0

# ---- the exposition as a whole
scrape
check "every line is a HELP, a TYPE or a well-formed sample" \
      "$(grep -cvE '^(# (HELP|TYPE) [a-z_]+ .+|[a-z_:][a-z0-9_:]*(\{[a-z_]+="([^"\\]|\\.)*"(,[a-z_]+="([^"\\]|\\.)*")*\})? (-?[0-9.]+(e[-+]?[0-9]+)?|\+Inf|-Inf|NaN))$' "$M")" 0
check "every metric is named shoal_*" "$(grep -v '^#' "$M" | grep -cv '^shoal_')" 0
# Each sample's family (histogram suffixes stripped) has HELP and TYPE before it, once.
check "every family has one HELP and one TYPE before its samples" "$(awk '
    /^# HELP / { help[$3]++; next }
    /^# TYPE / { type[$3] = $4; ntype[$3]++; next }
    { name = $0; sub(/[{ ].*/, "", name); fam = name
      if (name ~ /_(bucket|sum|count)$/) { base = name; sub(/_(bucket|sum|count)$/, "", base); if (type[base] == "histogram") fam = base }
      if (!(fam in type) || help[fam] != 1 || ntype[fam] != 1) bad[fam] = 1 }
    END { for (f in help) if (help[f] != 1) bad[f] = 1; n = 0; for (f in bad) { print f; n++ } if (n == 0) print "all" }' "$M")" all
check "counters end in _total, and only counters" \
      "$(awk '/^# TYPE / && (($4 == "counter") != ($3 ~ /_total$/)) { print $3 }' "$M" | tr '\n' ' ')" ""
for f in shoal_node_up shoal_node_state shoal_node_heartbeat_age_seconds shoal_node_reachable shoal_link_bandwidth_bytes_per_second \
         shoal_link_latency_seconds shoal_job_step_part_seconds; do
    check "$f is a gauge with HELP" "$(grep -c "^# TYPE $f gauge$" "$M")$(grep -c "^# HELP $f " "$M")" 11
done
check "shoal_scheduler_runs_total is a counter" "$(grep -c '^# TYPE shoal_scheduler_runs_total counter$' "$M")" 1
check "shoal_scheduler_duration_seconds is a histogram" "$(grep -c '^# TYPE shoal_scheduler_duration_seconds histogram$' "$M")" 1
check "no series appears twice" "$(grep -v '^#' "$M" | sed 's/ [^ ]*$//' | sort | uniq -d | wc -l)" 0
check "the database is up" "$(value shoal_database_up)" 1
check "no series has a label that Prometheus sets on every target (job, instance)" \
      "$(grep -cE '^[a-z_]+\{(.*,)?(job|instance)=' "$M")" 0
# Prometheus's own linter, on every family with samples (nodes, links, a live
# job and its tasklets, the scheduler, requests): any warning fails.
if command -v promtool >/dev/null 2>&1; then
    lint=$(promtool check metrics < "$M" 2>&1); rc=$?
    check "promtool check metrics: no warnings" "$rc:$lint" "0:"
    lint=$(promtool check config "$(dirname "$0")/../../deploy/prometheus.yml" 2>&1); rc=$?
    check "promtool check config deploy/prometheus.yml" "$rc" 0
    [ "$rc" = 0 ] || echo "$lint"
else
    fail "promtool check metrics" "promtool is missing: make deps installs Debian's prometheus package"
fi
# The Grafana dashboard's queries against this server's families (grafana.sh).
. "$(dirname "$0")/grafana.sh"
check_dashboard "$(dirname "$0")/../../deploy/grafana/dashboards/shoal.json" "$M"
# A real Prometheus on deploy/prometheus.yml, and the README's queries in it.
. "$(dirname "$0")/prometheus.sh"
check_prometheus "$S" "$J"

# ---- a spare node: drained, then silent past the horizon
req POST "$S/v1/agent/register" "$JOIN" '{"name":"spare","peer_address":"127.0.0.1:7109","hardware":{"tflops":1,"cpu_cores":2}}'
N5=$(printf '%s' "$BODY" | jq -r .node_id); T5=$(printf '%s' "$BODY" | jq -r .token)
req PUT "$S/v1/links" "$T5" "{\"samples\":[{\"to\":${ID[0]},\"latency_ms\":3,\"bandwidth_gbps\":1}]}"
req POST "$S/v1/nodes/$N5/drain" "$ADMIN"; expect "drain the spare" 200
scrape
check "a draining node is one-hot draining" \
      "$(for s in idle busy draining lost; do value "shoal_node_state{node=\"$N5\",name=\"spare\",state=\"$s\"}"; done | tr '\n' ' ')" "0 0 1 0 "
check "and not up" "$(value "shoal_node_up{node=\"$N5\",name=\"spare\"}")" 0
check "its link is shown" "$(value "shoal_link_bandwidth_bytes_per_second{from=\"$N5\",to=\"${ID[0]}\"}")" 125000000
sql a "UPDATE nodes SET last_heartbeat_at = now() - interval '1 hour' WHERE id = ${ID[3]}" >/dev/null
scrape
check "an idle-or-busy node without a heartbeat within the timeout is not up" "$(value "shoal_node_up{$(lab 3)}")" 0
cmp_num "and its heartbeat age says an hour" "$(value "shoal_node_heartbeat_age_seconds{$(lab 3)}")" '>=' 3600
cmp_num "an hour in seconds, not more" "$(value "shoal_node_heartbeat_age_seconds{$(lab 3)}")" '<' 3700
sql a "UPDATE nodes SET last_heartbeat_at = now() - interval '2 days' WHERE id = $N5" >/dev/null
scrape
check "a node silent for over a day has no node series" "$(grep -c "node=\"$N5\"" "$M")" 0
check "nor link series" "$(grep -Ec "(from|to)=\"$N5\"" "$M")" 0
check "but is still counted by state" "$(value 'shoal_nodes{state="draining"}')" 1
sql a "UPDATE nodes SET last_heartbeat_at = now() WHERE id = ${ID[3]}" >/dev/null

# ---- a run that ends in an error: the job is cancelled while it searches
req POST "$S/v1/jobs" "$ADMIN" "$JOB"; K=$(printf '%s' "$BODY" | jq -r .id)
req DELETE "$S/v1/jobs/$J" "$ADMIN"; expect "cancel the first job" 200 .state cancelled
scrape
check "a cancelled job has no job series" "$(grep -c "job_id=\"$J\"" "$M")" 0
before_err=$(runs shoal error); before_n=$(hcount shoal)
curl -s -o "$WORK/race" -w '%{http_code}' -X POST -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
     -d '{"budget_ms":4000}' "$S/v1/jobs/$K/schedule" > "$WORK/race.status" &
racer=$!
sleep 1
req DELETE "$S/v1/jobs/$K" "$ADMIN"; expect "cancel the second job while it is being scheduled" 200 .state cancelled
wait $racer
check "the run's answer is 409" "$(cat "$WORK/race.status") $(jq -r .error.code "$WORK/race")" "409 conflict"
scrape
check "and it counts as an error" "$(runs shoal error)" "$((before_err + 1))"
check "with its time in the histogram" "$(hcount shoal)" "$((before_n + 1))"
cmp_num "which covers the 4 s search" "$(value 'shoal_scheduler_duration_seconds_bucket{cost_model="shoal",le="2.5"}')" '<' "$(hcount shoal)"

# ---- past the body cap, the N^2 link series are left out, nothing else
# 400 more nodes, every pair measured: 159,600 links, over 16 MiB of link series.
sql a "INSERT INTO nodes (name, token_hash, peer_address, tflops, cpu_cores)
       SELECT 'bulk' || g, md5('bulk' || g), '127.0.0.1:1', 1, 1 FROM generate_series(1, 400) g" >/dev/null
sql a "INSERT INTO link_samples (from_node, to_node, latency_ms, bandwidth_gbps)
       SELECT a.id, b.id, 1.2345678901, 0.123456789 FROM nodes a, nodes b
       WHERE a.id <> b.id AND a.name LIKE 'bulk%' AND b.name LIKE 'bulk%'" >/dev/null
scrape
check "a fleet whose links exceed the body cap still scrapes" "$STATUS" 200
check "without link series" "$(grep -c '^shoal_link_' "$M")" 0
check "with every node's series" "$(grep -c '^shoal_node_up{' "$M")" 404
check "and the rest intact" "$(value shoal_database_up) $(runs shoal stored)" "1 1"
check "the log says why" "$(grep -c 'link series do not fit' "$WORK/a.log")" 1
sql a "DELETE FROM nodes WHERE name LIKE 'bulk%'" >/dev/null
scrape
check "with the fleet back to its size the links are back" "$(grep -c '^shoal_link_latency_seconds{' "$M")" 12

stop_server a
[ "$FAILS" -eq 0 ]
