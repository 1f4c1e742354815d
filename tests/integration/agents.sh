# agents.sh - helpers for suites that run real shoal-agents against a real
# server (source after lib.sh).  Agents listen on loopback with free ports,
# keep their identity under $WORK/agent-NAME, and log to $WORK/agent-NAME.log.

: "${SHOAL_AGENT:?set SHOAL_AGENT to the shoal-agent binary}"
AGENTS=""
# One BLAS/OpenMP thread per agent: several agents share two cores.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# start_agent NAME SERVER_NAME [ARGS...]: starts an agent registered with
# server SERVER_NAME (its URL and join token).
start_agent() {
    local name=$1 server=$2 url; shift 2
    url=$(eval echo "\$URL_$server")
    mkdir -p "$WORK/agent-$name"
    "$SHOAL_AGENT" --server "$url" --join-token-file "$WORK/$server/join.token" \
        --listen 127.0.0.1:0 --data-dir "$WORK/agent-$name" --name "$name" \
        --heartbeat-interval 1 --probe-interval 1 --measure-ms 50 --peer-timeout 20 \
        --connect-timeout 30 "$@" >>"$WORK/agent-$name.log" 2>&1 &
    echo $! > "$WORK/agent-$name.pid"
    AGENTS="$AGENTS $name"
}

# stop_agent NAME: SIGTERM and wait up to 15 s; sets AGENT_RC to the exit
# status (sanitizers report errors and leaks through it; "timeout" if it
# did not exit).
stop_agent() {
    local pid
    pid=$(cat "$WORK/agent-$1.pid")
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then AGENT_RC=timeout; return; fi
    wait "$pid" 2>/dev/null
    AGENT_RC=$?
}

stop_all_agents() {
    local a
    for a in $AGENTS; do
        [ -f "$WORK/agent-$a.pid" ] && kill -TERM "$(cat "$WORK/agent-$a.pid")" 2>/dev/null
    done
    for a in $AGENTS; do
        [ -f "$WORK/agent-$a.pid" ] && wait "$(cat "$WORK/agent-$a.pid")" 2>/dev/null
    done
    return 0
}

# wait_for SECONDS COMMAND...: polls COMMAND every 0.5 s until it succeeds.
wait_for() {
    local secs=$1 i; shift
    for i in $(seq 1 $((secs * 2))); do
        "$@" && return 0
        sleep 0.5
    done
    return 1
}

# job_state SERVER_URL ADMIN JOB
job_state() {
    curl -s -H "Authorization: Bearer $2" "$1/v1/jobs/$3" | jq -r .state
}

# job_losses SERVER_URL ADMIN JOB: one "step loss" line per step.
job_losses() {
    curl -s -H "Authorization: Bearer $2" "$1/v1/jobs/$3" | jq -r '.progress.losses[] | "\(.[0]) \(.[1])"'
}

trap 'stop_all_agents; cleanup' EXIT
