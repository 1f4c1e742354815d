#!/usr/bin/env bash
# test_db_outage.sh - Postgres stopped and started under a running server
# (issue 7): during the outage what needs the database answers a clean JSON
# 503 within a bounded time, /healthz and /metrics still answer, /readyz
# says 503; once it is back everything works again at once (no stale pooled
# connection fails a request), and the assignment listener is back so a
# schedule wakes a waiting long-poll through NOTIFY.  Both a fast shutdown
# and an immediate (crash-like) stop, against a cluster this suite runs
# itself with the PostgreSQL binaries, reached through --database-url.  On
# a second server with a short heartbeat timeout: an outage and a freeze
# (SIGSTOP) longer than it mark no node lost and roll no job back, and a
# frozen database costs a request a 503 within seconds (--db-timeout); under
# fifty agents' heartbeats /healthz still answers at once.  Under the
# default --db-timeout a real agent's calls during a freeze get the
# server's 503, never a timeout of their own (common/patience.h), and a
# server whose options contradict each other says so at start-up.  A
# server's own embedded postmaster killed with -9 is started again.
set -u
. "$(dirname "$0")/lib.sh"

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
PGX="$WORK/pgx"                      # the cluster: data/, sock/, log
LIMIT=10                             # s: every request must be answered within this
POOL=3                               # --db-pool: small, so a leaked slot shows

# as_pg CMD...: runs CMD as the 'postgres' account when we are root (the
# postmaster refuses root), else as ourselves.
as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
pg_ctl_x() {  # pg_ctl_x ARGS...: pg_ctl on our cluster
    as_pg "$PG_BIN/pg_ctl" -D "$PGX/data" -l "$PGX/log" -t 60 \
          -o "-k $PGX/sock -c listen_addresses='' -c fsync=off" "$@"
}
pg_up() { [ -f "$PGX/data/postmaster.pid" ]; }

# lib.sh's cleanup stops the servers and removes $WORK; our cluster goes
# first (immediate: nothing in it is worth a checkpoint), even on failure.
# KEEP_LOG=FILE keeps a copy of the server's log for a look afterwards.
outage_cleanup() {
    pg_up && pg_ctl_x -m immediate -w stop >/dev/null 2>&1
    [ -n "${LOCKER:-}" ] && kill "$LOCKER" 2>/dev/null
    [ -n "${KEEP_LOG:-}" ] && cp "$WORK/a.log" "$KEEP_LOG"
    cleanup
}
trap outage_cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "$PG_BIN" ] || [ ! -x "$PG_BIN/initdb" ]; then
    fail "PostgreSQL server binaries (initdb, pg_ctl) found" "none under /usr/lib/postgresql; set PG_BIN"
    exit 1
fi
mkdir -p "$PGX/sock"
[ "$(id -u)" = 0 ] && chown -R postgres "$PGX"
as_pg "$PG_BIN/initdb" -D "$PGX/data" -U shoal --auth=trust -E UTF8 --no-locale >"$PGX/initdb.log" 2>&1 \
    || { fail "initdb" "$(tail -n 5 "$PGX/initdb.log")"; exit 1; }
pg_ctl_x -w start >/dev/null || { fail "postgres starts" "$(tail -n 5 "$PGX/log")"; exit 1; }
psql -X -q "host=$PGX/sock user=shoal dbname=postgres" -c 'CREATE DATABASE shoal' >/dev/null \
    || { fail "create database shoal"; exit 1; }
DBURL="host=$PGX/sock user=shoal dbname=shoal"
xsql() { psql -X -q -t -A "$DBURL" -c "$1"; }

start_server_a --database-url "$DBURL" --db-pool "$POOL" --heartbeat-timeout 3600 || exit 1

now() { date +%s.%N; }
# within NAME START HIGH: checks that now - START <= HIGH seconds.
within() {
    local took
    took=$(echo "$(now) - $2" | bc)
    if [ "$(echo "$took <= $3" | bc)" = 1 ]; then ok "$1"; else fail "$1" "took $took s, want <= $3"; fi
}
# metric NAME: the value of one unlabelled series from /metrics ("" if none).
metric() {
    curl -s --max-time "$LIMIT" "$S/metrics" | sed -n "s/^$1 //p"
}
# wait_metric NAME VALUE: waits up to 20 s for the series to read VALUE;
# prints what it read last.
wait_metric() {
    local v=""
    for _ in $(seq 1 100); do
        v=$(metric "$1")
        [ "$v" = "$2" ] && break
        sleep 0.2
    done
    printf '%s' "$v"
}
# parallel N URL TOKEN: N GETs at once; prints their statuses sorted, one
# line ("200 200 200").
parallel() {
    local i pids=""
    for i in $(seq 1 "$1"); do
        curl -s -o /dev/null --max-time "$LIMIT" -w '%{http_code}\n' -H "Authorization: Bearer $3" "$2" \
            > "$WORK/par.$i" &
        pids="$pids $!"
    done
    wait $pids
    for i in $(seq 1 "$1"); do cat "$WORK/par.$i"; done | sort | tr '\n' ' ' | sed 's/ $//'
}
# bg_get URL TOKEN OUT: a GET in the background; body in OUT, status in
# OUT.status, pid in BG.
bg_get() {
    curl -s --max-time 90 -o "$3" -w '%{http_code}' -H "Authorization: Bearer $2" "$1" > "$3.status" &
    BG=$!
}
# unavailable NAME: the last response was a clean 503 saying the database is
# unavailable.
unavailable() {
    expect "$1" 503 '.error.code + " " + (.error.message | test("database") | tostring)' \
           "database_unavailable true"
}

# ---- a node and a scheduled 1x1 job
req POST "$S/v1/agent/register" "$JOIN" '{"name":"n0","peer_address":"127.0.0.1:7000","hardware":{"tflops":10,"cpu_cores":8,"gpu_memory_bytes":8000000000}}'
expect "register a node" 201
NODE_TOKEN=$(printf '%s' "$BODY" | jq -r .token)
JOB='{"name":"outage","model":{"vocab_size":256,"context_length":64,"d_model":64,"heads":4,"layers":4},"parallelism":{"stages":1,"replicas":1,"micro_batches":2,"micro_batch_size":2},"training":{"steps":3,"learning_rate":0.001},"data":{"path":"/data/corpus.txt","format":"text"}}'
req POST "$S/v1/jobs" "$ADMIN" "$JOB"
expect "create a job" 201
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":100}'
expect "schedule it" 201 .epoch 1
EPOCH=1

# stuck_request MODE TAG: a GET /v1/nodes that waits inside Postgres, behind
# a lock another session holds (its pid in LOCKER); the request's pid is
# STUCK, its body lands in $WORK/stuck.MODE.TAG.  Its backend is told from
# others waiting on that lock by its SQL (server/api/h_nodes.c's list query).
stuck_request() {
    local locked=0
    psql -X -q "$DBURL" -c 'BEGIN; LOCK TABLE nodes IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(120);' \
        >/dev/null 2>&1 &
    LOCKER=$!
    for _ in $(seq 1 100); do
        [ "$(xsql "SELECT count(*) FROM pg_locks WHERE relation = 'nodes'::regclass AND mode = 'AccessExclusiveLock' AND granted")" = 1 ] && break
        sleep 0.1
    done
    bg_get "$S/v1/nodes" "$ADMIN" "$WORK/stuck.$1.$2"; STUCK=$BG
    for _ in $(seq 1 100); do
        [ "$(xsql "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM nodes WHERE removed_at IS NULL AND (\$1::text IS NULL%'")" -ge 1 ] \
            && { locked=1; break; }
        sleep 0.1
    done
    check "$1: a GET /v1/nodes is waiting inside Postgres ($2)" "$locked" 1
}
# unstick: ends the lock holder's session (already gone if Postgres
# stopped); killing psql alone would leave its backend asleep with the lock.
unstick() {
    xsql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(120)%' AND pid <> pg_backend_pid()" >/dev/null 2>&1
    wait "$LOCKER" 2>/dev/null
    LOCKER=""
}

# outage MODE: one stop of Postgres with pg_ctl -m MODE, and the way back.
outage() {
    local mode=$1 t0 lp1 lp2 v

    # Fill the pool, so every slot holds a connection the stop will kill.
    check "$mode: before: $((POOL * 2)) requests at once all succeed" \
          "$(parallel $((POOL * 2)) "$S/v1/nodes" "$ADMIN")" "$(printf '200 %.0s' $(seq 1 $((POOL * 2))) | sed 's/ $//')"
    # A long-poll parked before the outage, knowing the current epoch.
    bg_get "$S/v1/agent/assignment?wait=60&job=$J&epoch=$EPOCH" "$NODE_TOKEN" "$WORK/lp1.$mode"; lp1=$BG
    # A request whose connection is killed while its query runs.
    stuck_request "$mode" kill
    xsql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM nodes WHERE removed_at IS NULL AND (\$1::text IS NULL%'" >/dev/null
    wait "$STUCK"; BODY=$(cat "$WORK/stuck.$mode.kill"); STATUS=$(cat "$WORK/stuck.$mode.kill.status")
    unavailable "$mode: a request whose connection is killed mid-query gets 503, not 500"
    unstick
    # And one still in its query when Postgres goes.  A fast stop ends the
    # lock holder too, so the query may finish first: 200 or 503, never 500.
    stuck_request "$mode" stop

    # ---- the outage
    t0=$(now)
    pg_ctl_x -m "$mode" -w stop >/dev/null
    check "$mode: Postgres is stopped" "$(pg_up && echo running || echo stopped)" stopped
    wait "$STUCK"; BODY=$(cat "$WORK/stuck.$mode.stop"); STATUS=$(cat "$WORK/stuck.$mode.stop.status")
    if [ "$mode" = immediate ]; then
        unavailable "$mode: the request in its query when Postgres stops gets 503, not 500"
    else
        v=$STATUS; [ "$STATUS" = 503 ] && v=200
        check "$mode: the request in its query when Postgres stops gets 200 or 503" "$v" 200
    fi
    within "$mode: and gets it promptly" "$t0" "$LIMIT"
    unstick

    t0=$(now); req GET "$S/v1/nodes" "$ADMIN" "" --max-time "$LIMIT"
    unavailable "$mode: during: GET /v1/nodes is 503 database_unavailable"
    within "$mode: during: within $LIMIT s" "$t0" "$LIMIT"
    t0=$(now); req POST "$S/v1/agent/heartbeat" "$NODE_TOKEN" '{"state":"idle"}' --max-time "$LIMIT"
    unavailable "$mode: during: a heartbeat with a node token is 503"
    within "$mode: during: within $LIMIT s" "$t0" "$LIMIT"
    t0=$(now); req POST "$S/v1/jobs" "$ADMIN" "$JOB" --max-time "$LIMIT"
    unavailable "$mode: during: POST /v1/jobs is 503"
    within "$mode: during: within $LIMIT s" "$t0" "$LIMIT"
    req GET "$S/v1/agent/assignment" "$NODE_TOKEN" "" --max-time "$LIMIT"
    unavailable "$mode: during: a new assignment long-poll is 503"
    req GET "$S/readyz" "" "" --max-time "$LIMIT"
    unavailable "$mode: during: /readyz is 503"
    req GET "$S/healthz" "" "" --max-time "$LIMIT"
    expect "$mode: during: /healthz is still 200" 200 .status ok
    req GET "$S/metrics" "" "" --max-time "$LIMIT"
    check "$mode: during: /metrics answers 200" "$STATUS" 200
    check "$mode: during: with shoal_database_up 0" "$(printf '%s\n' "$BODY" | sed -n 's/^shoal_database_up //p')" 0
    check "$mode: during: the assignment listener is down" "$(wait_metric shoal_assignment_listener_up 0)" 0
    check "$mode: during: $((POOL * 3)) requests at once are all 503" \
          "$(parallel $((POOL * 3)) "$S/v1/nodes" "$ADMIN")" "$(printf '503 %.0s' $(seq 1 $((POOL * 3))) | sed 's/ $//')"
    check "$mode: during: no pool connection is left taken" "$(wait_metric shoal_db_pool_connections_in_use 0)" 0
    check "$mode: during: the long-poll parked before it is still waiting" \
          "$(kill -0 "$lp1" 2>/dev/null && echo waiting || echo "answered $(cat "$WORK/lp1.$mode.status")")" waiting

    # ---- back
    pg_ctl_x -w start >/dev/null
    check "$mode: Postgres is running again" "$(pg_up && echo running || echo stopped)" running
    # Straight away, before anything else touches the pool: each slot still
    # holds a connection the stop killed, and none may fail a request.
    check "$mode: after: the first $((POOL * 2)) requests at once all succeed" \
          "$(parallel $((POOL * 2)) "$S/v1/nodes" "$ADMIN")" "$(printf '200 %.0s' $(seq 1 $((POOL * 2))) | sed 's/ $//')"
    req GET "$S/readyz" "" "" --max-time "$LIMIT";  expect "$mode: after: /readyz is 200" 200 .status ready
    req GET "$S/v1/nodes" "$ADMIN" "" --max-time "$LIMIT"
    expect "$mode: after: GET /v1/nodes works" 200 '.nodes | length' 1
    req POST "$S/v1/agent/heartbeat" "$NODE_TOKEN" '{"state":"idle"}' --max-time "$LIMIT"
    expect "$mode: after: a heartbeat works" 200
    req POST "$S/v1/jobs" "$ADMIN" "$JOB" --max-time "$LIMIT"
    expect "$mode: after: POST /v1/jobs works" 201 .state pending
    req GET "$S/healthz" "" "" --max-time "$LIMIT";  expect "$mode: after: /healthz is 200" 200
    check "$mode: after: /metrics says shoal_database_up 1" "$(wait_metric shoal_database_up 1)" 1
    check "$mode: after: the assignment listener is up again" "$(wait_metric shoal_assignment_listener_up 1)" 1
    # The scrape holds one; a background task may hold another a moment.
    for _ in $(seq 1 50); do
        v=$(metric shoal_db_pool_connections_in_use)
        [ "${v:-9}" -le 1 ] && break
        sleep 0.2
    done
    check "$mode: after: no pool connection leaked (in use <= 1, the scrape's)" \
          "$([ "${v:-9}" -le 1 ] && echo yes || echo "in use: ${v:-none}")" yes

    # ---- long-polls are woken by NOTIFY again
    bg_get "$S/v1/agent/assignment?wait=60&job=$J&epoch=$EPOCH" "$NODE_TOKEN" "$WORK/lp2.$mode"; lp2=$BG
    sleep 1
    check "$mode: after: a long-poll parked after the outage waits" "$(kill -0 "$lp2" 2>/dev/null && echo waiting)" waiting
    t0=$(now)
    req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":100}' --max-time 30
    EPOCH=$((EPOCH + 1))
    expect "$mode: after: re-schedule the job" 201 .epoch "$EPOCH"
    wait "$lp1" "$lp2"
    within "$mode: after: both long-polls wake promptly, not at their 60 s timeout" "$t0" "$LIMIT"
    check "$mode: after: the one parked before the outage gets the new epoch" \
          "$(cat "$WORK/lp1.$mode.status") $(jq .assignment.epoch "$WORK/lp1.$mode")" "200 $EPOCH"
    check "$mode: after: the one parked after it too" \
          "$(cat "$WORK/lp2.$mode.status") $(jq .assignment.epoch "$WORK/lp2.$mode")" "200 $EPOCH"
}

outage fast
outage immediate

# ---- what the operator sees in the log
check "the log says when the database went away" "$(grep -c 'database unreachable, answering 503' "$WORK/a.log")" 2
check "and when it came back" "$(grep -c 'database reachable again' "$WORK/a.log")" 2
check "no request was answered 500" "$(grep -c 'status=500' "$WORK/a.log")" 0
check "Postgres' goodbyes go through the log, not raw to stderr" \
      "$(grep -cE '^(WARNING|FATAL): ' "$WORK/a.log")" 0
req DELETE "$S/v1/jobs/$J" "$ADMIN"   # its node n0 stops heartbeating now
stop_server a

# ---- an outage and a freeze longer than the heartbeat timeout, on a
# second server with a short one (and a short --db-timeout): no node is
# marked lost for heartbeats the database could not take, no job is
# rolled back; during the freeze a request gets its 503 within seconds and
# /healthz answers.  A node that then really goes silent is still lost.
HB=4
start_server b --database-url "$DBURL" --db-pool "$POOL" --heartbeat-timeout "$HB" --db-timeout 2 || exit 1
B=$URL_b
ADMIN_B=$(cat "$WORK/b/admin.token")
req POST "$B/v1/agent/register" "$(cat "$WORK/b/join.token")" \
    '{"name":"n1","peer_address":"127.0.0.1:7001","hardware":{"tflops":10,"cpu_cores":8,"gpu_memory_bytes":8000000000}}'
expect "register a node on the second server" 201
N1_TOKEN=$(printf '%s' "$BODY" | jq -r .token)
N1=$(printf '%s' "$BODY" | jq -r .node_id)
# heartbeats on|off: n1's heartbeats, every 0.5 s.  Off across each outage
# and for a moment after it, as agents that back off between retries: the
# sweeps after the database is back see heartbeats older than the timeout.
heartbeats() {
    if [ "$1" = on ]; then
        ( while :; do
              curl -s -o /dev/null --max-time 2 -X POST -H "Authorization: Bearer $N1_TOKEN" \
                   -H 'Content-Type: application/json' -d '{"state":"idle"}' "$B/v1/agent/heartbeat"
              sleep 0.5
          done ) &
        HEARTBEATS=$!
    else
        kill "$HEARTBEATS"; wait "$HEARTBEATS" 2>/dev/null
    fi
}
heartbeats on
n0_lost() { [ "$(xsql "SELECT state FROM nodes WHERE name = 'n0'")" = lost ]; }
wait_for 20 n0_lost
req POST "$B/v1/jobs" "$ADMIN_B" "$JOB"
K=$(printf '%s' "$BODY" | jq -r .id)
req POST "$B/v1/jobs/$K/schedule" "$ADMIN_B" '{"budget_ms":100}'
expect "a job is scheduled on the heartbeating node" 201 '.stages[0].nodes[0]' "$N1"
# as_planned WHAT: n1 not lost, the job still on its first plan.
as_planned() {
    check "$1: the node is not lost, the job not rolled back" \
          "$(xsql "SELECT n.state <> 'lost', j.state, j.plan_epoch, j.recoveries FROM nodes n, jobs j WHERE n.id = $N1 AND j.id = $K")" \
          "t|scheduled|1|0"
}

heartbeats off
pg_ctl_x -m fast -w stop >/dev/null
sleep $((2 * HB + 1))
pg_ctl_x -w start >/dev/null
sleep 1.5
heartbeats on
sleep $((HB + 2))
as_planned "an outage of $((2 * HB + 1)) s, heartbeat timeout $HB s"

heartbeats off
PM=$(head -n 1 "$PGX/data/postmaster.pid")
FROZEN="$PM $(pgrep -P "$PM" | tr '\n' ' ')"
kill -STOP $FROZEN
t0=$(now)
req GET "$B/v1/nodes" "$ADMIN_B" "" --max-time 20
check "freeze: GET /v1/nodes is a 503" "$STATUS $(printf '%s' "$BODY" | jq -r '.error.code | test("^database_")')" "503 true"
within "freeze: within its database time, --db-timeout + 2 s, and a second (5 s)" "$t0" 5
t0=$(now)
req GET "$B/healthz" "" "" --max-time 5
expect "freeze: /healthz answers 200" 200 .status ok
within "freeze: at once (1 s)" "$t0" 1
sleep $((2 * HB + 1))
kill -CONT $FROZEN
t0=$(now)
req GET "$B/v1/nodes" "$ADMIN_B" "" --max-time 20
expect "after the freeze: GET /v1/nodes works" 200 '.nodes | length' 2
within "after the freeze: within $LIMIT s" "$t0" "$LIMIT"
sleep 1
heartbeats on
sleep $((HB + 2))
as_planned "a freeze of over $((2 * HB + 1)) s"

# ---- a freeze under fifty agents' heartbeats: /healthz answers in
# milliseconds throughout (what needs the database waits on workers of its
# own, never on the threads that take connections), /metrics within its 3
# s of database time, every heartbeat gets an answer (a 503 at worst)
# within --db-timeout + 2 s, and no node is lost for it
python3 "$(dirname "$0")/heartbeat_load.py" "$B" "$WORK/b/join.token" 50 10 > "$WORK/load.json" &
LOAD=$!
sleep 2
FROZEN="$PM $(pgrep -P "$PM" | tr '\n' ' ')"
kill -STOP $FROZEN
sleep 6   # longer than the heartbeat timeout (4 s) and --db-timeout + 2 s
kill -CONT $FROZEN
wait $LOAD
load() { jq -r "$1" "$WORK/load.json"; }
check "fifty agents, a freeze of 6 s: /healthz never waits for the database (slowest under 1 s)" \
      "$(load '.healthz.max_s < 1')" true
ok "/healthz under the freeze: p50 $(load .healthz.p50_s) s, p99 $(load .healthz.p99_s) s, slowest $(load .healthz.max_s) s of $(load .healthz.count)"
check "/metrics answers within its 3 s of database time and a second" "$(load '.metrics.max_s < 4')" true
# (two seconds of slack: with fifty client threads, the server and its
# sanitizers on two cores, one answer in some 400 came 1.8 s past the
# database deadline; 4.0 s is the usual slowest)
check "every heartbeat is answered, 200 or 503, within --db-timeout + 2 s and two seconds" \
      "$(load '[(.heartbeats | keys - ["200", "503"] | length), .heartbeat_max_s < 6] | map(tostring) | join(" ")')" "0 true"
ok "heartbeats answered: $(jq -c .heartbeats "$WORK/load.json"), slowest $(load .heartbeat_max_s) s"
check "no node is lost for the freeze" "$(xsql "SELECT count(*) FROM nodes WHERE state = 'lost' AND name LIKE 'load-%'")" 0
as_planned "fifty agents and a freeze of 6 s"

heartbeats off
t0=$(now)
n1_lost() { [ "$(xsql "SELECT state FROM nodes WHERE id = $N1")" = lost ]; }
wait_for 20 n1_lost
check "a node that goes silent afterwards is lost as before" "$(xsql "SELECT state FROM nodes WHERE id = $N1")" lost
within "within the heartbeat timeout and a sweep or two" "$t0" $((HB + 3))
check "the second server answered no request with 500" "$(grep -c 'status=500' "$WORK/b.log")" 0
# Its options contradict each other on purpose (a heartbeat timeout of 4 s
# against 2 s + 2 s of database time and a heartbeat interval), and it said so.
check "the second server warns at start-up that --heartbeat-timeout $HB is not above --db-timeout + 2 s + a heartbeat interval" \
      "$(grep -c "options contradict: --heartbeat-timeout $HB s is not above --db-timeout + 2 s (4 s)" "$WORK/b.log")" 1
stop_server b

# ---- the agents' patience (common/patience.h): a server with the default
# --db-timeout and a real agent, the database frozen longer than an agent
# waits for an answer: every call the agent made got the server's 503, not
# a client timeout of its own ("Timeout was reached"), and the server
# never answered a caller already gone.  (Issue 46: a --db-timeout of 10 s
# answered at 12 s, agents that gave up at 10 s.)
. "$(dirname "$0")/agents.sh"
start_server d --database-url "$DBURL" --db-pool "$POOL" || exit 1
check "a server with the default options warns of no contradiction" "$(grep -c 'options contradict' "$WORK/d.log")" 0
start_agent p0 d
p0_heard() { grep -q 'registered node=' "$WORK/agent-p0.log"; }
wait_for 30 p0_heard
sleep 3   # a few heartbeats delivered
PM=$(head -n 1 "$PGX/data/postmaster.pid")
FROZEN="$PM $(pgrep -P "$PM" | tr '\n' ' ')"
kill -STOP $FROZEN
sleep 20   # over an agent's patience for a call (15 s) and the server's answer (5 s + 2 s)
kill -CONT $FROZEN
p0_back() { grep -q 'heartbeat delivered again' "$WORK/agent-p0.log"; }
wait_for 30 p0_back
check "the agent's heartbeats failed during the freeze with the server's 503 (the database named)" \
      "$(grep -q 'heartbeat failed: .*database' "$WORK/agent-p0.log" && echo yes)" yes
check "and are delivered again after it" "$(p0_back && echo yes)" yes
check "no call of the agent timed out on its side" \
      "$(grep -c 'Timeout was reached' "$WORK/agent-p0.log")" 0
check "the server answered its heartbeats 503 during the freeze" \
      "$([ "$(grep -c 'route=/v1/agent/heartbeat status=503' "$WORK/d.log")" -ge 1 ] && echo yes)" yes
check "and no answer found its caller gone" "$(grep -c 'aborted=1' "$WORK/d.log")" 0
stop_agent p0
check "the agent exits cleanly on SIGTERM" "$AGENT_RC" 0
stop_server d

# ---- the embedded postmaster killed (-9) under a server that runs it: the
# server starts it again and its data is all there
start_server c || exit 1
C=$URL_c
req POST "$C/v1/agent/register" "$(cat "$WORK/c/join.token")" \
    '{"name":"n2","peer_address":"127.0.0.1:7002","hardware":{"tflops":10,"cpu_cores":8}}'
expect "register a node on a server with its own Postgres" 201
kill -9 "$(head -n 1 "$WORK/c/pg/postmaster.pid")"
t0=$(now)
nodes_back() { [ "$(curl -s --max-time 5 -H "Authorization: Bearer $(cat "$WORK/c/admin.token")" "$C/v1/nodes" | jq -r '.nodes[0].name' 2>/dev/null)" = n2 ]; }
wait_for 40 nodes_back
check "the killed postmaster is started again, the node still registered" "$(nodes_back && echo yes)" yes
ok "the database answered again $(echo "$(now) - $t0" | bc | cut -c1-4) s after the kill"
check "the log says so" "$(grep -c 'the postmaster is gone; starting it again' "$WORK/c.log")" 1
stop_server c

[ "$FAILS" -eq 0 ]
