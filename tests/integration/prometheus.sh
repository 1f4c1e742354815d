# prometheus.sh - a real Prometheus (Debian's, from make deps) scrapes a live
# server with deploy/prometheus.yml, and the README's PromQL examples are
# asked of it as written.  Sourced by test_metrics.sh (after lib.sh).

# prom_query URL QUERY: the query's result vector as JSON ([] if empty).
prom_query() {
    curl -s --data-urlencode "query=$2" "$1/api/v1/query" | jq -c '.data.result'
}

# check_prometheus SERVER_URL JOB_ID: starts Prometheus on deploy/prometheus.yml
# (its shoal-server target pointed at SERVER_URL, a 1 s interval, nothing
# else changed), waits for a scrape, then compares the README's queries
# (job_id="2" there, JOB_ID here) with what the server's /metrics ($M) says.
check_prometheus() {
    local url=$1 job=$2 top conf port pid p i ready="" q got want
    top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    if ! command -v prometheus >/dev/null 2>&1; then
        fail "prometheus scrapes the server" "prometheus is missing: make deps installs Debian's prometheus package"
        return
    fi
    conf="$WORK/prometheus.yml"
    sed -e "s|\"shoal-server:8080\"|\"${url#http://}\"|" -e 's|scrape_interval: 15s|scrape_interval: 1s|' -e 's|scrape_timeout: 10s|scrape_timeout: 1s|' \
        "$top/deploy/prometheus.yml" > "$conf"
    # A free port: Prometheus cannot listen on port 0 and say which it got.
    for i in 1 2 3 4 5; do
        port=$((20000 + RANDOM % 20000))
        prometheus --config.file="$conf" --storage.tsdb.path="$WORK/prom-data" \
            --web.listen-address="127.0.0.1:$port" --log.level=error >>"$WORK/prometheus.log" 2>&1 &
        pid=$!
        echo "$pid" > "$WORK/prometheus.pid"
        SERVERS="$SERVERS $WORK/prometheus.pid"
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            curl -sf -o /dev/null "http://127.0.0.1:$port/-/ready" && { ready=1; break; }
            sleep 0.1
        done
        [ -n "$ready" ] && break
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    done
    if [ -z "$ready" ]; then
        fail "prometheus starts on deploy/prometheus.yml" "$(tail -n 5 "$WORK/prometheus.log")"
        return
    fi
    p="http://127.0.0.1:$port"
    up_() { [ "$(prom_query "$p" "up{job=\"shoal-server\"}" | jq -r '.[0].value[1]')" = 1 ] &&
            [ "$(prom_query "$p" "shoal_job_step{job_id=\"$job\"}" | jq length)" = 1 ]; }
    if ! wait_for 30 up_; then
        fail "prometheus scrapes the server" "$(prom_query "$p" 'up'; tail -n 5 "$WORK/prometheus.log")"
        kill "$pid" 2>/dev/null
        return
    fi
    ok "prometheus scrapes the server: up{job=\"shoal-server\"} is 1"
    # The README's examples, as written but for the job's id.
    for q in $(cat "$top/README.md" "$top"/docs/*.md | grep -o '`[^`]*job_id="2"[^`]*`' | tr -d '`' | sort -u | tr ' ' '~'); do
        q=$(printf '%s' "$q" | tr '~' ' ' | sed "s/job_id=\"2\"/job_id=\"$job\"/")
        got=$(prom_query "$p" "$q")
        case $q in
            "shoal_job_step{"*) want=$(value "shoal_job_step{job_id=\"$job\"}") ;;
            "sum without(part) (shoal_job_step_part_seconds{"*)
                want=$(grep "^shoal_job_step_part_seconds{job_id=\"$job\"," "$M" | awk '{ s += $2 } END { printf "%.12f", s }') ;;
            *) fail "the documents' query $q is known to this test"; continue ;;
        esac
        NEAR_ABS=1e-9 near "the documents' query in Prometheus: $q" "$(printf '%s' "$got" | jq -r '.[0].value[1] // empty')" "$want"
    done
    check "its per-job series keep job_id beside Prometheus's job" \
          "$(prom_query "$p" "shoal_job_step{job_id=\"$job\"}" | jq -r '.[0].metric | "\(.job) \(.job_id) \(has("exported_job"))"')" \
          "shoal-server $job false"
    check "no series arrives as exported_job" "$(prom_query "$p" '{exported_job!=""}' | jq length)" 0
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
}
