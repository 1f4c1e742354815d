#!/usr/bin/env bash
# test_api.sh - every endpoint of shoal-server over real HTTP against a real
# embedded Postgres: happy paths, bad input, auth, restart, two servers.
set -u
. "$(dirname "$0")/lib.sh"

# ---- configuration
help=$("$SHOAL_SERVER" --help); rc=$?
check "--help exits 0" "$rc" 0
for var in SHOAL_LISTEN SHOAL_PORT SHOAL_DATABASE_URL SHOAL_DATA_DIR SHOAL_ADMIN_TOKEN SHOAL_JOIN_TOKEN SHOAL_LOG_LEVEL; do
    check "--help documents $var" "$(printf '%s' "$help" | grep -c "($var)")" 1
done
"$SHOAL_SERVER" --port 99999 >/dev/null 2>"$WORK/err"; rc=$?
check "a bad flag value exits 2" "$rc" 2
check "and says what is wrong" "$(grep -c -- '--port must be an integer from 0 to 65535' "$WORK/err")" 1
SHOAL_LOG_LEVEL=loud "$SHOAL_SERVER" >/dev/null 2>"$WORK/err"; rc=$?
check "a bad environment value exits 2" "$rc" 2
"$SHOAL_SERVER" --no-such-flag >/dev/null 2>&1; rc=$?
check "an unknown flag exits 2" "$rc" 2

start_server_a || exit 1

# ---- probes and documents
req GET "$S/healthz";            expect "healthz answers ok" 200 .status ok
req GET "$S/readyz";             expect "readyz answers ready" 200 .status ready
req GET "$S/v1/openapi.yaml";    check "openapi.yaml is served" "$(printf '%s' "$BODY" | head -n 1 | cut -c1-8)" "openapi:"
req GET "$S/";                   check "index answers 200" "$STATUS" 200

# ---- tokens were generated once, mode 0600
check "admin token file is mode 600" "$(stat -c %a "$WORK/a/admin.token")" 600
check "admin token has its prefix" "${ADMIN:0:12}" "shoal_admin_"

# ---- registration
NODE='{"name":"gpu-a","peer_address":"10.0.0.1:7000","region":"eu","hardware":{"gpu_model":"NVIDIA H100","gpu_memory_bytes":85899345920,"gpu_count":1,"tflops":420.5,"cpu_cores":32,"ram_bytes":274877906944}}'
req POST "$S/v1/agent/register" "$JOIN" "$NODE"
expect "register returns 201 and a node" 201 .node.hardware.gpu_model "NVIDIA H100"
N1=$(printf '%s' "$BODY" | jq -r .node_id)
T1=$(printf '%s' "$BODY" | jq -r .token)
check "node token has its prefix" "${T1:0:11}" "shoal_node_"
check "only the token's SHA-256 is stored" "$(sql a "SELECT token_hash FROM nodes WHERE id = $N1")" \
      "$(printf '%s' "$T1" | sha256sum | cut -d' ' -f1)"
check "the response holds no token hash" "$(printf '%s' "$BODY" | grep -c token_hash)" 0
req POST "$S/v1/agent/register" "$JOIN" '{"name":"cpu-b","peer_address":"[::1]:7001","hardware":{"tflops":0.5,"cpu_cores":8}}'
expect "register a CPU node with an IPv6 peer address" 201 .node.hardware.gpu_count 0
N2=$(printf '%s' "$BODY" | jq -r .node_id)
T2=$(printf '%s' "$BODY" | jq -r .token)
# The server probes each node's peer port from outside (jobs/reach.c): no
# shoal agent answers at cpu-b's address, so it is not reachable, and says why.
unreachable() { req GET "$S/v1/nodes/$N2" "$ADMIN"; [ "$(printf '%s' "$BODY" | jq -r .reachable.from_server)" = false ]; }
if wait_for 15 unreachable; then
    ok "a node whose peer port no agent answers shows reachable.from_server false ($(printf '%s' "$BODY" | jq -r .reachable.why))"
else fail "a node whose peer port no agent answers shows reachable.from_server false" "$BODY"; fi
check "and the server's log says so" \
    "$(grep -c "node $N2 (cpu-b): the server cannot reach its peer port \[::1\]:7001" "$WORK/a.log")" 1

nodes_before=$(sql a "SELECT count(*) FROM nodes")
bad_register() {  # NAME STATUS CODE FIELD BODY
    req POST "$S/v1/agent/register" "$JOIN" "$5"
    expect "$1" "$2" '.error.code + " " + (.error.field // "")' "$3 $4"
}
bad_register "register: malformed JSON is 400"        400 invalid_json "" '{"name":'
bad_register "register: top level must be an object"  400 invalid_json "" '[1,2]'
bad_register "register: empty body is 400"            400 invalid_json "" ''
bad_register "register: missing hardware"             400 missing_field hardware '{"name":"x","peer_address":"h:1"}'
bad_register "register: unknown field is named"       400 unknown_field hardware.gpus '{"name":"x","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":1,"gpus":2}}'
bad_register "register: wrong type"                   400 invalid_field hardware.cpu_cores '{"name":"x","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":"8"}}'
bad_register "register: fractional integer"           400 invalid_field hardware.cpu_cores '{"name":"x","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":8.5}}'
bad_register "register: negative tflops"              422 invalid_field hardware.tflops '{"name":"x","peer_address":"h:1","hardware":{"tflops":-1,"cpu_cores":8}}'
bad_register "register: huge number"                  400 invalid_json "" '{"name":"x","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":99999999999999999999999}}'
bad_register "register: NaN is not JSON"              400 invalid_json "" '{"name":"x","peer_address":"h:1","hardware":{"tflops":NaN,"cpu_cores":8}}'
bad_register "register: duplicate keys"               400 invalid_json "" '{"name":"x","name":"y","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":8}}'
bad_register "register: peer address without port"    422 invalid_field peer_address '{"name":"x","peer_address":"hostonly","hardware":{"tflops":1,"cpu_cores":8}}'
bad_register "register: port out of range"            422 invalid_field peer_address '{"name":"x","peer_address":"h:70000","hardware":{"tflops":1,"cpu_cores":8}}'
bad_register "register: control character in name"  422 invalid_field name '{"name":"a\tb","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":8}}'
bad_register "register: empty name"                   422 invalid_field name '{"name":"","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":8}}'
bad_register "register: invalid UTF-8"                400 invalid_json "" "$(printf '{"name":"\xff\xfe","peer_address":"h:1","hardware":{"tflops":1,"cpu_cores":8}}')"
bad_register "register: deep nesting"                 400 invalid_json "" "$(printf '%*s' 5000 '' | tr ' ' '[')"
check "bad registrations change nothing" "$(sql a "SELECT count(*) FROM nodes")" "$nodes_before"

# ---- auth
req GET "$S/v1/nodes";                 expect "no token is 401" 401 .error.code unauthorized
check "401 carries WWW-Authenticate" "$(grep -ci '^WWW-Authenticate: Bearer' "$WORK/headers")" 1
req GET "$S/v1/nodes" "wrong-token";   expect "unknown token is 401" 401 .error.code unauthorized
check "and says what the endpoint takes" \
    "$(printf '%s' "$BODY" | jq -r '.error.message | test("^unknown token: .* takes the admin token")')" true
req GET "$S/v1/nodes" "$JOIN";         expect "join token on an admin route is 403" 403 .error.code forbidden
req GET "$S/v1/nodes" "$T1";           expect "node token on an admin route is 403" 403 .error.code forbidden
req POST "$S/v1/agent/register" "$ADMIN" "$NODE"; expect "admin token cannot register" 403 .error.code forbidden
req POST "$S/v1/agent/heartbeat" "$ADMIN" '{"state":"idle"}'; expect "admin token is no node token" 403 .error.code forbidden
check "and the answer says which token it takes and which it got" \
    "$(printf '%s' "$BODY" | jq -r '.error.message | test("takes a node.s token .*node.json.*; this is the admin token")')" true
req GET "$S/v1/nodes" "$JOIN"
check "an admin route given the join token names the admin token's file" \
    "$(printf '%s' "$BODY" | jq -r '.error.message | test("takes the admin token .*admin.token.*; this is the join token")')" true
req POST "$S/v1/agent/heartbeat" "${T1}x" '{"state":"idle"}';   expect "mangled node token is 401" 401 .error.code unauthorized
req GET "$S/v1/nodes" "" "" -H "Authorization: Basic $ADMIN"; expect "non-bearer scheme is 401" 401

# ---- nodes
req GET "$S/v1/nodes" "$ADMIN";        expect "list nodes" 200 '.nodes | length' 2
req GET "$S/v1/nodes?state=idle" "$ADMIN"; expect "filter nodes by state" 200 '.nodes | length' 2
req GET "$S/v1/nodes?state=bogus" "$ADMIN"; expect "bad state filter is 400" 400 .error.field state
req GET "$S/v1/nodes/$N1" "$ADMIN";    expect "get one node" 200 .name gpu-a
req GET "$S/v1/nodes/999999" "$ADMIN"; expect "unknown node is 404" 404 .error.code not_found
req GET "$S/v1/nodes/abc" "$ADMIN";    expect "non-numeric id is 400" 400 .error.code invalid_id
req GET "$S/v1/nodes/-1" "$ADMIN";     expect "negative id is 400" 400 .error.code invalid_id

# ---- jobs
JOB='{"name":"gpt-tiny","model":{"vocab_size":50257,"context_length":256,"d_model":256,"heads":8,"layers":8},"parallelism":{"stages":2,"replicas":1,"micro_batches":4,"micro_batch_size":8},"training":{"steps":100,"learning_rate":0.0003,"warmup_steps":10},"data":{"path":"/data/tiny.bin"}}'
req POST "$S/v1/jobs" "$ADMIN" "$JOB"
expect "create a job" 201 '.state + " " + .spec.parallelism.schedule + " " + (.spec.training.grad_clip|tostring)' "pending 1f1b 1"
J1=$(printf '%s' "$BODY" | jq -r .id)
req GET "$S/v1/jobs/$J1" "$ADMIN";     expect "get the job with plan and progress" 200 '[.name, .plan, .progress] | tostring' '["gpt-tiny",null,null]'
req GET "$S/v1/jobs" "$ADMIN";         expect "list jobs" 200 '.jobs | length' 1
# The documents are functions in the database (sql/017_read_models.sql):
# psql shows the same answer.
req GET "$S/v1/jobs/$J1" "$ADMIN"
check "psql's job_detail_json is GET /v1/jobs/{id}'s answer" \
    "$(sql a "SELECT job_detail_json($J1)" | jq -S -c .)" "$(printf '%s' "$BODY" | jq -S -c .)"
req GET "$S/v1/jobs" "$ADMIN"
check "and job_json GET /v1/jobs's" \
    "$(sql a "SELECT json_agg(job_json(j) ORDER BY j.id) FROM jobs j" | jq -S -c .)" "$(printf '%s' "$BODY" | jq -S -c .jobs)"
req GET "$S/v1/jobs/424242" "$ADMIN";  expect "unknown job is 404" 404 .error.code not_found

jobs_before=$(sql a "SELECT count(*) FROM jobs")
bad_job() {  # NAME STATUS FIELD JQ-EDIT
    req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c "$4")"
    expect "$1" "$2" .error.field "$3"
}
bad_job "job: d_model not divisible by heads" 422 model.d_model '.model.heads = 7'
bad_job "job: more stages than layers"       422 parallelism.stages '.parallelism.stages = 9'
bad_job "job: zero replicas"                 422 parallelism.replicas '.parallelism.replicas = 0'
bad_job "job: unknown schedule"              422 parallelism.schedule '.parallelism.schedule = "zigzag"'
bad_job "job: warm-up longer than training"  422 training.warmup_steps '.training.warmup_steps = 1000'
bad_job "job: learning rate zero"            422 training.learning_rate '.training.learning_rate = 0'
bad_job "job: missing model"                 400 model 'del(.model)'
bad_job "job: a relative data.path"          422 data.path '.data.path = "data/tiny.bin"'
bad_job "job: a relative validation.path"    422 validation.path '.validation = {"path": "val.bin"}'
bad_job "job: unknown top-level field"       400 priority '.priority = 1'
bad_job "job: wrong type in nested object"   400 training.steps '.training.steps = "100"'
bad_job "job: unknown data format"           422 data.format '.data.format = "csv"'
bad_job "job: control character in name"     422 name '.name = "a\nb"'
check "rejected jobs change nothing" "$(sql a "SELECT count(*) FROM jobs")" "$jobs_before"

EVIL="x'); DROP TABLE jobs; --"
req POST "$S/v1/jobs" "$ADMIN" "$(printf '%s' "$JOB" | jq -c --arg n "$EVIL" '.name = $n')"
expect "SQL-looking names are stored verbatim" 201 .name "$EVIL"
check "and the jobs table is still there" "$(sql a "SELECT count(*) FROM jobs")" "$((jobs_before + 1))"
J2=$(printf '%s' "$BODY" | jq -r .id)

req DELETE "$S/v1/jobs/$J2" "$ADMIN";  expect "cancel a job" 200 .state cancelled
req DELETE "$S/v1/jobs/$J2" "$ADMIN";  expect "cancelling twice is 409" 409 .error.code conflict
req DELETE "$S/v1/jobs/777777" "$ADMIN"; expect "cancel unknown job is 404" 404
req GET "$S/v1/jobs?state=cancelled" "$ADMIN"; expect "filter jobs by state" 200 '.jobs[0].id' "$J2"

# ---- heartbeats
req POST "$S/v1/agent/heartbeat" "$T1" '{"state":"idle"}'; expect "heartbeat" 200 .state idle
# (a heartbeat while training, naming the node's job: test_agent_api.sh)
req POST "$S/v1/agent/heartbeat" "$T1" "{\"state\":\"busy\",\"job_id\":$J1,\"step\":7}"
expect "a heartbeat naming a job the node holds no tasklet of is 422" 422 .error.field job_id
req GET "$S/v1/nodes/$N1" "$ADMIN";    expect "and writes nothing" 200 '[.current_job_id, .current_step] | tostring' "[null,null]"
req POST "$S/v1/agent/heartbeat" "$T1" '{"state":"busy","job_id":555555}'; expect "heartbeat naming an unknown job is 422" 422 .error.field job_id
req POST "$S/v1/agent/heartbeat" "$T1" '{"state":"sleeping"}'; expect "heartbeat with a bad state is 422" 422 .error.field state
req POST "$S/v1/agent/heartbeat" "$T1" '{"state":"idle","job_id":null,"step":null}'; expect "null job and step clear them" 200 .state idle

# ---- links
req PUT "$S/v1/links" "$T1" "{\"samples\":[{\"to\":$N2,\"latency_ms\":12.5,\"bandwidth_gbps\":0.8}]}"
expect "report a link" 200 .accepted 1
req GET "$S/v1/links" "$ADMIN"
expect "the matrix has the link, directional" 200 '[.nodes, .latency_ms[0][1], .bandwidth_gbps[0][1], .latency_ms[1][0], .latency_ms[0][0]] | tostring' "[[$N1,$N2],12.5,0.8,null,null]"
req PUT "$S/v1/links" "$T1" "{\"samples\":[{\"to\":$N2,\"latency_ms\":10,\"bandwidth_gbps\":1.5}]}"
req GET "$S/v1/links" "$ADMIN";        expect "the latest sample wins" 200 '.bandwidth_gbps[0][1]' 1.5
check "history keeps every sample" "$(sql a "SELECT count(*) FROM link_samples")" 2
samples_before=2
req PUT "$S/v1/links" "$T1" "{\"from\":$N2,\"samples\":[{\"to\":$N1,\"latency_ms\":1,\"bandwidth_gbps\":1}]}"
expect "a node cannot write another node's links" 403 .error.field from
req PUT "$S/v1/links" "$T1" "{\"samples\":[{\"to\":$N1,\"latency_ms\":1,\"bandwidth_gbps\":1}]}"
expect "a link to itself is 422" 422 .error.field 'samples[0]'
req PUT "$S/v1/links" "$T1" '{"samples":[{"to":888888,"latency_ms":1,"bandwidth_gbps":1}]}'
expect "a link to an unknown node is 422" 422 .error.field samples
req PUT "$S/v1/links" "$T1" "{\"samples\":[{\"to\":$N2,\"latency_ms\":1,\"bandwidth_gbps\":1},{\"to\":$N2,\"latency_ms\":\"x\",\"bandwidth_gbps\":1}]}"
expect "one bad sample rejects the batch" 400 .error.field 'samples[1].latency_ms'
req PUT "$S/v1/links" "$T1" "{\"samples\":[{\"to\":$N2,\"latency_ms\":1,\"bandwidth_gbps\":0}]}"
expect "zero bandwidth is 422" 422 .error.field 'samples[0].bandwidth_gbps'
req PUT "$S/v1/links" "$T1" '{"samples":[]}'; expect "empty batch is 422" 422 .error.field samples
req PUT "$S/v1/links" "$T1" "{\"samples\":[{\"to\":$N2,\"reachable\":false,\"latency_ms\":1}]}"
expect "a sample both unreachable and measured is 422" 422 .error.field 'samples[0]'
req PUT "$S/v1/links" "$T1" "{\"samples\":[{\"to\":$N2,\"latency_ms\":1}]}"
expect "a measured sample without its bandwidth is 400" 400 .error.code missing_field
req PUT "$S/v1/links" "$T1" "{\"samples\":[{\"to\":$N2,\"latency_ms\":1,\"bandwidth_gbps\":1,\"why\":\"x\"}]}"
expect "why without reachable false is 422" 422 .error.field 'samples[0]'
check "rejected samples change nothing" "$(sql a "SELECT count(*) FROM link_samples") $(sql a "SELECT count(*) FROM link_reach WHERE NOT reachable")" "$samples_before 0"
# A link the agent could not connect at all (jobs need it both ways:
# issue 37): reported as such, shown in the matrix, not measured.
req GET "$S/v1/links" "$ADMIN";        expect "a measured link is reachable in the matrix" 200 '[.reachable[0][1], .reachable[1][0]] | tostring' '[true,null]'
req GET "$S/v1/agent/probes" "$T2"
check "before, the other node is a probe target" "$(printf '%s' "$BODY" | jq --argjson n "$N1" '[.targets[].node_id] | index($n) != null')" true
req PUT "$S/v1/links" "$T2" "{\"samples\":[{\"to\":$N1,\"reachable\":false,\"why\":\"connect: Connection refused\"}]}"
expect "a link that could not be connected is reported" 200 .accepted 1
req GET "$S/v1/links" "$ADMIN"
expect "the matrix says so, that direction only, with no measurement" 200 '[.reachable[1][0], .reachable[0][1], .latency_ms[1][0]] | tostring' '[false,true,null]'
check "and why, in link_reach" "$(sql a "SELECT why FROM link_reach WHERE from_node = $N2 AND to_node = $N1")" "connect: Connection refused"
req GET "$S/v1/agent/probes" "$T2"
check "the reporter is not sent to probe it again until it is stale" "$(printf '%s' "$BODY" | jq --argjson n "$N1" '[.targets[].node_id] | index($n)')" null
req PUT "$S/v1/links" "$ADMIN" '{"samples":[]}'; expect "links need a node token" 403

# ---- drain, undrain, and a lost node's record removed
req DELETE "$S/v1/nodes/$N2" "$ADMIN"; expect "removing a node whose agent still heartbeats is 409" 409 .error.code conflict
check "and says to stop its agent first or drain it" \
    "$(printf '%s' "$BODY" | jq -r '.error.message | test("node [0-9]+ is idle: only a lost node.s record is removed; stop its agent.*drain")')" true
req POST "$S/v1/nodes/$N2/drain" "$ADMIN"; expect "drain a node" 200 .state draining
req POST "$S/v1/agent/heartbeat" "$T2" '{"state":"idle"}'; expect "a draining node stays draining" 200 .state draining
req POST "$S/v1/nodes/$N2/undrain" "$ADMIN"; expect "undrain it" 200 .state idle
req POST "$S/v1/agent/heartbeat" "$T2" '{"state":"busy"}'; expect "its heartbeats set its state again" 200 .state busy
req POST "$S/v1/nodes/$N2/undrain" "$ADMIN"; expect "undraining a node that is not draining is 409" 409 .error.code conflict
req POST "$S/v1/nodes/31337/drain" "$ADMIN"; expect "drain unknown node is 404" 404
req POST "$S/v1/agent/heartbeat" "$T2" '{"state":"idle"}'
sql a "UPDATE nodes SET state = 'lost' WHERE id = $N2" >/dev/null   # as the sweep does (test_recovery times it)
req DELETE "$S/v1/nodes/$N2" "$ADMIN"; expect "a lost node's record is removed" 200 .id "$N2"
req GET "$S/v1/nodes" "$ADMIN"; check "it leaves the fleet's list" "$(printf '%s' "$BODY" | jq "[.nodes[] | select(.id == $N2)] | length")" 0
req GET "$S/v1/nodes/$N2" "$ADMIN"; expect "and is 404 by id" 404
req POST "$S/v1/agent/heartbeat" "$T2" '{"state":"idle"}'; expect "its agent's heartbeat is 404" 404 .error.code not_found
check "which says to register anew" "$(printf '%s' "$BODY" | jq -r '.error.message | test("node.json")')" true
check "the row stays for the history that names it" "$(sql a "SELECT count(*) FROM nodes WHERE id = $N2 AND removed_at IS NOT NULL")" 1
req DELETE "$S/v1/nodes/$N2" "$ADMIN"; expect "removing it again is 404" 404

# ---- HTTP-level errors
req GET "$S/v1/nothing" "$ADMIN";      expect "unknown route is 404" 404 .error.code not_found
req PATCH "$S/v1/jobs" "$ADMIN";       expect "wrong method is 405" 405 .error.code method_not_allowed
check "405 carries Allow" "$(grep -i '^Allow:' "$WORK/headers" | tr -d '\r')" "Allow: POST, GET"
req POST "$S/v1/jobs" "$ADMIN" "" -H 'Content-Type: text/plain' --data-binary "$JOB"
expect "wrong content type is 415" 415 .error.code unsupported_media_type
head -c 1100000 /dev/zero | tr '\0' 'a' > "$WORK/big"
req POST "$S/v1/jobs" "$ADMIN" "" -H 'Content-Type: application/json' --data-binary "@$WORK/big"
expect "body over 1 MiB is 413" 413 .error.code body_too_large
req POST "$S/v1/jobs" "$ADMIN" "" -H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' --data-binary "@$WORK/big"
expect "chunked body over 1 MiB is 413" 413 .error.code body_too_large
check "oversized bodies change nothing" "$(sql a "SELECT count(*) FROM jobs")" "$((jobs_before + 1))"
req GET "$S/v1/jobs/$J1" "$ADMIN";     expect "the server still serves after bad input" 200 .id "$J1"

# ---- unversioned paths answer the same
req GET "$S/jobs/$J1" "$ADMIN";        expect "GET /jobs/{id} without /v1" 200 .id "$J1"
req POST "$S/jobs" "$ADMIN" "$JOB";    expect "POST /jobs without /v1" 201 .state pending

# ---- metrics
req GET "$S/metrics"
check "metrics is Prometheus text" "$(grep -i '^Content-Type:' "$WORK/headers" | tr -d '\r')" "Content-Type: text/plain; version=0.0.4; charset=utf-8"
printf '%s\n' "$BODY" > "$WORK/metrics"
check "request counter by route and status" "$(grep -c '^shoal_http_requests_total{route="/v1/jobs",method="POST",status="201"} 3$' "$WORK/metrics")" 1
check "counter has HELP and TYPE" "$(grep -c '^# TYPE shoal_http_requests_total counter$' "$WORK/metrics")" 1
check "nodes by state, a removed node not among them" "$(grep '^shoal_nodes{state="lost"}' "$WORK/metrics")" 'shoal_nodes{state="lost"} 0'
check "and no series of the removed node" "$(grep -c "^shoal_node_[a-z_]*{node=\"$N2\"" "$WORK/metrics")" 0
check "jobs by state" "$(grep '^shoal_jobs{state="pending"}' "$WORK/metrics")" 'shoal_jobs{state="pending"} 2'
check "histogram +Inf equals count" \
      "$(grep '^shoal_http_request_duration_seconds_bucket{route="/healthz",method="GET",le="+Inf"}' "$WORK/metrics" | awk '{print $2}')" \
      "$(grep '^shoal_http_request_duration_seconds_count{route="/healthz",method="GET"}' "$WORK/metrics" | awk '{print $2}')"
check "unmatched requests are one label" "$(grep -c 'route="unmatched"' "$WORK/metrics" | awk '$1 > 0 {print "yes"}')" yes
check "db pool gauge" "$(grep -c '^shoal_db_pool_connections_in_use ' "$WORK/metrics")" 1
check "at the default level no line per request" "$(grep -c 'http method=' "$WORK/a.log")" 0

# ---- restart keeps everything and migrates nothing twice
nodes_a=$(sql a "SELECT count(*) FROM nodes WHERE removed_at IS NULL"); jobs_a=$(sql a "SELECT count(*) FROM jobs")
applied=$(sql a "SELECT count(*) || ' ' || max(applied_at) FROM schema_migrations")
stop_server a
start_server a --log-level debug || exit 1
S=$URL_a
check "restart keeps the admin token" "$(cat "$WORK/a/admin.token")" "$ADMIN"
req GET "$S/v1/nodes" "$ADMIN";        expect "restart keeps the nodes" 200 '.nodes | length' "$nodes_a"
req GET "$S/v1/jobs" "$ADMIN";         expect "restart keeps the jobs" 200 '.jobs | length' "$jobs_a"
req POST "$S/v1/agent/heartbeat" "$T1" '{"state":"idle"}'; expect "node tokens survive a restart" 200
check "no migration runs twice" "$(sql a "SELECT count(*) || ' ' || max(applied_at) FROM schema_migrations")" "$applied"
check "the second start applied nothing" "$(grep -c 'migrations current applied_now=0' "$WORK/a.log")" 1
check "at --log-level debug a line per request" \
    "$(grep -c 'http method=POST route=/v1/agent/heartbeat status=200' "$WORK/a.log" | awk '$1 > 0 {print "yes"}')" yes

# ---- a second server on the same data directory is refused, the first goes on
timeout 30 "$SHOAL_SERVER" --data-dir "$WORK/a" --port 0 >/dev/null 2>"$WORK/err"; rc=$?
check "a second server on a running server's --data-dir exits 1" "$rc" 1
check "and names the running one's pid" \
    "$(grep -m 1 -c "another shoal-server (pid $(cat "$WORK/a.pid")) is using the data directory" "$WORK/err")" 1
req GET "$S/readyz";                   expect "the running server keeps its database" 200 .status ready

# ---- two servers on one database
export SHOAL_ADMIN_TOKEN="$ADMIN" SHOAL_JOIN_TOKEN="$JOIN"
start_server b --database-url "host=$WORK/a/pg-socket dbname=shoal user=shoal" || exit 1
unset SHOAL_ADMIN_TOKEN SHOAL_JOIN_TOKEN
B=$URL_b
req POST "$B/v1/jobs" "$ADMIN" "$JOB"; expect "server b creates a job" 201
JB=$(printf '%s' "$BODY" | jq -r .id)
req GET "$S/v1/jobs/$JB" "$ADMIN";     expect "server a sees it" 200 .id "$JB"
req POST "$S/v1/agent/register" "$JOIN" "$NODE"; expect "server a registers a node" 201
TN=$(printf '%s' "$BODY" | jq -r .token)
req POST "$B/v1/agent/heartbeat" "$TN" '{"state":"idle"}'; expect "server b knows its token" 200
req GET "$S/v1/nodes" "$ADMIN"; list_a=$BODY
req GET "$B/v1/nodes" "$ADMIN"; list_b=$BODY
check "both servers list the same nodes" "$(printf '%s' "$list_a" | jq -c '[.nodes[] | [.id, .state]]')" "$(printf '%s' "$list_b" | jq -c '[.nodes[] | [.id, .state]]')"
check "server b applied no migration" "$(grep -c 'migrations current applied_now=0' "$WORK/b.log")" 1

# ---- the database goes away under server b, and comes back
stop_server a
req GET "$B/readyz";                   expect "readyz is 503 while the database is down" 503 .error.code database_unavailable
req GET "$B/v1/jobs" "$ADMIN";         expect "API calls are 503 while the database is down" 503 .error.code database_unavailable
req GET "$B/healthz";                  expect "healthz still answers" 200
start_server a || exit 1
S=$URL_a
for _ in 1 2 3; do req GET "$B/readyz"; [ "$STATUS" = 200 ] && break; sleep 0.5; done
expect "server b reconnects when the database is back" 200 .status ready
req GET "$B/v1/jobs/$JB" "$ADMIN";     expect "and serves data again" 200 .id "$JB"
stop_server b

# ---- a crashed server: its Postgres is still running and is adopted
kill -KILL "$(cat "$WORK/a.pid")"; wait "$(cat "$WORK/a.pid")" 2>/dev/null
start_server a || exit 1
req GET "$URL_a/v1/jobs" "$ADMIN";     expect "restart after SIGKILL adopts the running Postgres" 200 '.jobs | length' "$((jobs_a + 1))"
# ---- and a crashed Postgres leaves a stale postmaster.pid that must not block
pg_pid=$(head -n 1 "$WORK/a/pg/postmaster.pid")
kill -KILL "$(cat "$WORK/a.pid")"; wait "$(cat "$WORK/a.pid")" 2>/dev/null
kill -KILL "$pg_pid"; sleep 1
check "the crash left postmaster.pid behind" "$(test -f "$WORK/a/pg/postmaster.pid" && echo yes)" yes
start_server a || exit 1
req GET "$URL_a/v1/jobs" "$ADMIN";     expect "restart after a Postgres crash recovers the data" 200 '.jobs | length' "$((jobs_a + 1))"
stop_server a

[ "$FAILS" -eq 0 ]
