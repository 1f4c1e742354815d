#!/usr/bin/env bash
# bench_load.sh - shoal-server under simulated agents, in steps: for each
# step a fresh release server on an embedded Postgres, the load generator
# (tests/load/loadgen.c) with that many agents (heartbeats, assignment
# long-polls, progress posts of the agents its jobs' plans name), and
# samples of the server's RSS and the database's client connections.  Then
# a peak run: wrk posting heartbeats at full rate (tests/load/heartbeat.lua)
# while 1,000 simulated agents keep going.  Prints a table and JSON lines
# ("bench":"bench-load-step" per step, "bench-load-wrk", then "bench-load"
# with the knee: the first step where heartbeat p99 >= 50 ms or any request
# failed).  A benchmark, not a test: nothing is asserted, and the load
# generator, wrk, the server and Postgres share this machine's cores.
#
# usage: tests/bench/bench_load.sh SHOAL_SERVER LOADGEN
# Environment (defaults in brackets):
#   LOAD_STEPS      agents per step ["250 500 1000 2000 4000"]
#   LOAD_FULL       the step that runs LOAD_FULL_S [1000]
#   LOAD_FULL_S     its measured window, s [60]
#   LOAD_SHORT_S    the other steps' window, s [30]
#   LOAD_WRK_S      wrk's run, s (0: no wrk run) [20]
#   LOAD_WRK_AGENTS simulated agents beside wrk [1000]
#   LOAD_WRK_CONNS  wrk's connections [32]; LOAD_WRK_THREADS [2]
#   LOAD_ARGS       more loadgen options (e.g. "--jobs 0")
#   LOAD_SERVER_ARGS more shoal-server options (e.g. "--threads 16 --db-pool 16")
#   LOAD_P99_MS     the knee's heartbeat p99 bound, ms [50]
set -u
SHOAL_SERVER=$(realpath "${1:?usage: bench_load.sh SHOAL_SERVER LOADGEN}")
export SHOAL_SERVER
LOADGEN=$(realpath "${2:?usage: bench_load.sh SHOAL_SERVER LOADGEN}")
STEPS=${LOAD_STEPS:-250 500 1000 2000 4000}
FULL=${LOAD_FULL:-1000}
FULL_S=${LOAD_FULL_S:-60}
SHORT_S=${LOAD_SHORT_S:-30}
WRK_S=${LOAD_WRK_S:-20}
WRK_AGENTS=${LOAD_WRK_AGENTS:-1000}
WRK_CONNS=${LOAD_WRK_CONNS:-32}
WRK_THREADS=${LOAD_WRK_THREADS:-2}
P99_BOUND=${LOAD_P99_MS:-50}
here=$(cd "$(dirname "$0")" && pwd)
LUA=$here/../load/heartbeat.lua
. "$here/../integration/lib.sh" >/dev/null

for tool in jq psql; do
    command -v "$tool" >/dev/null || { echo "bench_load: $tool is missing; run 'make deps'" >&2; exit 1; }
done
[ "$WRK_S" = 0 ] || command -v wrk >/dev/null || { echo "bench_load: wrk is missing; run 'make deps'" >&2; exit 1; }

# Every connection is a descriptor: agents hold two or three each.
ulimit -n "$(ulimit -Hn)" 2>/dev/null
BG=""
stop_all() {
    local p
    for p in $BG; do kill -TERM "$p" 2>/dev/null; done
    cleanup
}
trap stop_all EXIT
trap 'exit 130' INT TERM

HELP=$("$SHOAL_SERVER" --help 2>&1)
has_flag() { printf '%s\n' "$HELP" | grep -q -- "$1 "; }
NOTES=()

# server_args AGENTS EXTRA_CONNS: flags that let every agent's connections
# in: each agent holds a heartbeat and a long-poll connection (and a
# progress one while training); registration and wrk add EXTRA_CONNS.
server_args() {
    local agents=$1 extra=$2 conns
    conns=$((3 * agents + extra + 256))
    ARGS=()
    if [ "$agents" -gt 3800 ]; then ARGS+=(--max-long-polls $((agents + 256))); fi
    if has_flag --max-connections; then
        ARGS+=(--max-connections "$conns")
    else
        # MHD's limit is --max-long-polls + 1024 in this server: raise it
        # through --max-long-polls so that the connection limit is not what
        # is measured (noted in the report).
        if [ "$conns" -gt 5120 ]; then ARGS+=(--max-long-polls $((conns - 1024))); fi
    fi
    if has_flag --max-connections-per-address; then
        ARGS+=(--max-connections-per-address $((WRK_CONNS + 64)))
    fi
    # shellcheck disable=SC2206
    ARGS+=(${LOAD_SERVER_ARGS:-})
}
has_flag --max-connections ||
    NOTES+=("this server has no --max-connections: its connection limit was raised through --max-long-polls where 3 x agents passed 5120")
has_flag --max-connections-per-address ||
    NOTES+=("this server has no --max-connections-per-address: nothing limits connections per address")

# cpu_ticks NAME: clock ticks used so far by the server NAME, its Postgres
# (the postmaster with the backends it reaped, plus the live ones), and the
# whole machine (every core's busy time).  The load generator counts its own.
cpu_ticks() {
    local name=$1 pm pg=0 srv all
    srv=$(awk '{print $14 + $15}' "/proc/$(cat "$WORK/$name.pid")/stat" 2>/dev/null || echo 0)
    all=$(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat)
    pm=$(head -n 1 "$WORK/$name/pg/postmaster.pid" 2>/dev/null)
    if [ -n "$pm" ]; then
        pg=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat" 2>/dev/null || echo 0)
        for p in $(pgrep -P "$pm"); do
            pg=$((pg + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
        done
    fi
    echo "$srv $pg $all"
}

# sample NAME FILE: every second, "rss_kB db_client_connections" of server NAME.
sample() {
    local name=$1 out=$2 pid rss conns
    pid=$(cat "$WORK/$name.pid")
    while kill -0 "$pid" 2>/dev/null; do
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
        conns=$(sql "$name" "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
                             AND pid <> pg_backend_pid()" 2>/dev/null)
        echo "${rss:-0} ${conns:-0}" >> "$out"
        sleep 1
    done
}

# stop NAME: SIGTERM the server and wait for it (it stops its Postgres).
stop() {
    local pid
    pid=$(cat "$WORK/$1.pid")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
}

# run_load NAME AGENTS SECONDS [WRK]: one run on a fresh server; leaves
# $WORK/NAME.json (the loadgen's JSON line plus the samples and CPU) and,
# with WRK, $WORK/NAME.wrk (wrk's JSON line).
run_load() {
    local name=$1 agents=$2 secs=$3 with_wrk=${4:-} url lpid spid cpu0 cpu1 t0 t1 tick wall
    server_args "$agents" $((${with_wrk:-0} ? WRK_CONNS + 32 : 32))
    start_server "$name" "${ARGS[@]}" >/dev/null || exit 1
    url=$(eval echo "\$URL_$name")
    echo "step: $agents agents, ${secs} s, server ${ARGS[*]:-(defaults)}" >&2
    # shellcheck disable=SC2086
    "$LOADGEN" --url "$url" --join-token-file "$WORK/$name/join.token" \
        --admin-token-file "$WORK/$name/admin.token" --agents "$agents" --duration "$secs" \
        --tokens-out "$WORK/$name.tokens" --window-mark "$WORK/$name.window" --label "$name" ${LOAD_ARGS:-} \
        > "$WORK/$name.out" 2> "$WORK/$name.err" &
    lpid=$!
    BG="$BG $lpid"
    # The mark appears when the measured window opens (after the warm-up).
    while [ ! -e "$WORK/$name.window" ] && kill -0 "$lpid" 2>/dev/null; do sleep 0.1; done
    read -r -a cpu0 <<< "$(cpu_ticks "$name")"
    t0=$(date +%s.%N)
    sample "$name" "$WORK/$name.samples" &
    spid=$!
    BG="$BG $spid"
    if [ -n "$with_wrk" ]; then
        wrk -t"$WRK_THREADS" -c"$WRK_CONNS" -d"${WRK_S}s" --latency -s "$LUA" "$url" -- "$WORK/$name.tokens" \
            > "$WORK/$name.wrkout" 2>&1
        grep '^{"bench":"load-wrk"' "$WORK/$name.wrkout" > "$WORK/$name.wrk"
    fi
    # The window ends a moment before the load generator exits.
    while kill -0 "$lpid" 2>/dev/null && ! grep -q '^{"bench":"load"' "$WORK/$name.out"; do sleep 0.1; done
    read -r -a cpu1 <<< "$(cpu_ticks "$name")"
    t1=$(date +%s.%N)
    wait "$lpid"
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    stop "$name"
    cat "$WORK/$name.out" >&2
    [ -s "$WORK/$name.err" ] && sed 's/^/  /' "$WORK/$name.err" >&2
    if ! grep -q '^{"bench":"load"' "$WORK/$name.out"; then
        echo "bench_load: the load generator gave no result for $name" >&2
        exit 1
    fi
    tick=$(getconf CLK_TCK)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
    awk '{ if ($1 > r) r = $1; if ($2 > c) c = $2; n++ } END { printf "%d %d %d\n", r, c, n }' \
        "$WORK/$name.samples" > "$WORK/$name.peak"
    read -r rss conns nsamples < "$WORK/$name.peak"
    grep '^{"bench":"load"' "$WORK/$name.out" | jq -c \
        --argjson rss "$rss" --argjson conns "$conns" --argjson n "$nsamples" --argjson wall "$wall" \
        --argjson srv "$(( ${cpu1[0]} - ${cpu0[0]} ))" --argjson pg "$(( ${cpu1[1]} - ${cpu0[1]} ))" \
        --argjson all "$(( ${cpu1[2]} - ${cpu0[2]} ))" \
        --argjson tick "$tick" '
        . + {server_rss_max_mb: ($rss / 1024), db_connections_max: $conns, samples: $n, cpu_wall_s: $wall,
             server_cpu_pct: (100 * $srv / $tick / $wall), postgres_cpu_pct: (100 * $pg / $tick / $wall),
             loadgen_cpu_pct: (100 * .loadgen_window_cpu_s / .duration_s),
             others_cpu_pct: (100 * (($all - $srv - $pg) / $tick - .loadgen_window_cpu_s) / $wall),
             errors: ([.kinds[] | .errors] | add), warmup_errors: ([.warmup[] | .errors] | add)}' > "$WORK/$name.json"
}

echo "bench-load: $(nproc) cores shared by the load generator, wrk, shoal-server and Postgres" >&2
for n in $STEPS; do
    secs=$SHORT_S
    [ "$n" = "$FULL" ] && secs=$FULL_S
    run_load "s$n" "$n" "$secs"
done
if [ "$WRK_S" != 0 ]; then
    run_load peak "$WRK_AGENTS" $((WRK_S + 2)) 1
fi

# ---- report
echo
echo "shoal-server under simulated agents ($(nproc) cores shared by everything; latencies in ms; CPU in % of one core)"
printf '%7s %5s %8s %8s %8s %8s %8s %8s %8s %6s %7s %5s %5s %5s %5s %6s\n' agents secs hb/s hb_p50 hb_p99 hb_max \
    lp_max prog_p99 wake_p99 errors rss_MB dbcon srv% pg% gen% other%
knee=null
steps_json=""
for n in $STEPS; do
    j=$WORK/s$n.json
    jq -r '[.agents, .duration_s, .kinds.heartbeat.rps, .kinds.heartbeat.p50_ms, .kinds.heartbeat.p99_ms,
            .kinds.heartbeat.max_ms, .kinds.longpoll.max_ms, .kinds.progress.p99_ms, .kinds.wake.p99_ms,
            .errors, .server_rss_max_mb, .db_connections_max, .server_cpu_pct, .postgres_cpu_pct,
            .loadgen_cpu_pct, .others_cpu_pct] | @tsv' "$j" |
        awk -F'\t' '{ printf "%7d %5d %8.1f %8.2f %8.2f %8.2f %8.0f %8.2f %8.1f %6d %7.1f %5d %5.0f %5.0f %5.0f %6.0f\n",
                      $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16 }'
    jq -c '{bench: "bench-load-step"} + del(.bench)' "$j"
    holds=$(jq --argjson b "$P99_BOUND" '.kinds.heartbeat.p99_ms < $b and .errors == 0' "$j")
    [ "$knee" = null ] && [ "$holds" = false ] && knee=$n
    steps_json="$steps_json$(jq -c '{agents, heartbeat_p99_ms: .kinds.heartbeat.p99_ms, errors, warmup_errors,
                                      server_rss_max_mb, db_connections_max, others_cpu_pct}' "$j"),"
done
echo "(lp_max: the longest long-poll hold, wait 25 s; wake: a job cancelled during the warm-up, from the cancel's answer to its"
echo " nodes' long-polls bringing it; CPU in % of one core over the window, other%: processes outside this benchmark)"
target=null
[ -f "$WORK/s$FULL.json" ] && target=$(jq -c --argjson b "$P99_BOUND" \
    '{agents, duration_s, heartbeat_p99_ms: .kinds.heartbeat.p99_ms, errors,
      met: (.kinds.heartbeat.p99_ms < $b and .errors == 0)}' "$WORK/s$FULL.json")
if [ "$knee" = null ]; then
    echo "knee: none up to $(echo "$STEPS" | awk '{print $NF}') agents (heartbeat p99 < $P99_BOUND ms, no errors)"
else
    echo "knee: $knee agents (the first step with heartbeat p99 >= $P99_BOUND ms or errors)"
fi
wrk_json=null
if [ "$WRK_S" != 0 ] && [ -s "$WORK/peak.wrk" ]; then
    wrk_json=$(jq -c --slurpfile g "$WORK/peak.json" '. + {bench: "bench-load-wrk", agents_beside: $g[0].agents,
        agents_heartbeat_p99_ms: $g[0].kinds.heartbeat.p99_ms, agents_errors: $g[0].errors,
        server_rss_max_mb: $g[0].server_rss_max_mb, db_connections_max: $g[0].db_connections_max,
        server_cpu_pct: $g[0].server_cpu_pct, postgres_cpu_pct: $g[0].postgres_cpu_pct}' "$WORK/peak.wrk")
    echo
    echo "wrk: heartbeats at full rate ($WRK_THREADS threads, $WRK_CONNS connections, ${WRK_S} s) beside $WRK_AGENTS agents"
    printf '%10s %8s %8s %8s %8s %8s %14s %12s\n' req/s p50 p90 p99 max errors agents_hb_p99 agents_errors
    printf '%s\n' "$wrk_json" | jq -r '[.rps, .p50_ms, .p90_ms, .p99_ms, .max_ms,
        (.errors | add), .agents_heartbeat_p99_ms, .agents_errors] | @tsv' |
        awk -F'\t' '{ printf "%10.1f %8.2f %8.2f %8.2f %8.2f %8d %14.2f %12d\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
    printf '%s\n' "$wrk_json"
fi
for note in "${NOTES[@]}"; do echo "note: $note"; done
notes_json=$(printf '%s\n' "${NOTES[@]}" | jq -R . | jq -sc 'map(select(length > 0))')
echo "{\"bench\":\"bench-load\",\"cores\":$(nproc),\"p99_bound_ms\":$P99_BOUND,\"knee_agents\":$knee,\"target\":$target,\"steps\":[${steps_json%,}],\"wrk\":$wrk_json,\"notes\":$notes_json}"
