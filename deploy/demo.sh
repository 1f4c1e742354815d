#!/bin/sh
# demo.sh - a first look at shoal: starts shoal-server on its embedded
# PostgreSQL in a temporary directory, registers two nodes, reports the link
# between them, submits a job, prints what the API answers, and stops.
# usage: deploy/demo.sh path/to/shoal-server
set -eu
server=${1:-bin/shoal-server}
dir=$(mktemp -d /tmp/shoal-demo.XXXXXX)
chmod 711 "$dir"     # the embedded Postgres runs as 'postgres' under root
pid=""
finish() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap finish EXIT INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { jq . 2>/dev/null || cat; }

say "starting shoal-server (embedded PostgreSQL under $dir/data)"
"$server" --data-dir "$dir/data" --port 0 >"$dir/server.log" 2>&1 &
pid=$!
i=0
until [ -s "$dir/data/server.port" ] && curl -sf "http://127.0.0.1:$(cat "$dir/data/server.port")/readyz" >/dev/null; do
    i=$((i + 1))
    if [ $i -gt 300 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "shoal-server did not start; its log:"; cat "$dir/server.log"; exit 1
    fi
    sleep 0.2
done
S="http://127.0.0.1:$(cat "$dir/data/server.port")"
ADMIN=$(cat "$dir/data/admin.token")
JOIN=$(cat "$dir/data/join.token")
echo "listening on $S"

say "POST /v1/agent/register (two nodes, with the join token)"
r1=$(curl -s -H "Authorization: Bearer $JOIN" -H 'Content-Type: application/json' "$S/v1/agent/register" \
     -d '{"name":"lab-h100","peer_address":"10.1.0.5:7070","region":"zurich","hardware":{"gpu_model":"NVIDIA H100 80GB HBM3","gpu_memory_bytes":85899345920,"gpu_count":1,"tflops":612.0,"cpu_cores":32,"ram_bytes":549755813888}}')
echo "$r1" | show
r2=$(curl -s -H "Authorization: Bearer $JOIN" -H 'Content-Type: application/json' "$S/v1/agent/register" \
     -d '{"name":"uni-a100","peer_address":"192.0.2.17:7070","region":"oregon","hardware":{"gpu_model":"NVIDIA A100-SXM4-40GB","gpu_memory_bytes":42949672960,"gpu_count":1,"tflops":231.0,"cpu_cores":16,"ram_bytes":274877906944}}')
echo "$r2" | show
n1=$(echo "$r1" | jq -r .node_id); t1=$(echo "$r1" | jq -r .token)
n2=$(echo "$r2" | jq -r .node_id); t2=$(echo "$r2" | jq -r .token)

say "PUT /v1/links (each node reports its measured link to the other)"
curl -s -X PUT -H "Authorization: Bearer $t1" -H 'Content-Type: application/json' "$S/v1/links" \
     -d "{\"samples\":[{\"to\":$n2,\"latency_ms\":78.4,\"bandwidth_gbps\":0.42}]}" | show
curl -s -X PUT -H "Authorization: Bearer $t2" -H 'Content-Type: application/json' "$S/v1/links" \
     -d "{\"samples\":[{\"to\":$n1,\"latency_ms\":79.1,\"bandwidth_gbps\":0.37}]}" | show

say "POST /v1/agent/heartbeat"
curl -s -H "Authorization: Bearer $t1" -H 'Content-Type: application/json' "$S/v1/agent/heartbeat" -d '{"state":"idle"}' | show

say "POST /v1/jobs (a GPT-2 small run, 2 stages x 1 replica)"
job=$(curl -s -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' "$S/v1/jobs" \
     -d '{"name":"gpt2-small-demo","model":{"vocab_size":50257,"context_length":1024,"d_model":768,"heads":12,"layers":12},"parallelism":{"stages":2,"replicas":1,"micro_batches":8,"micro_batch_size":4,"schedule":"1f1b"},"training":{"steps":1000,"learning_rate":0.0006,"warmup_steps":100,"weight_decay":0.1,"grad_clip":1.0,"seed":1337},"data":{"path":"data/fineweb_train_000001.bin","format":"llmc"},"checkpoint_interval":100}')
echo "$job" | show
jid=$(echo "$job" | jq -r .id)

say "a bad job is refused with the field named"
curl -s -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' "$S/v1/jobs" \
     -d '{"model":{"vocab_size":50257,"context_length":1024,"d_model":768,"heads":7,"layers":12},"parallelism":{"stages":2,"replicas":1,"micro_batches":8,"micro_batch_size":4},"training":{"steps":10,"learning_rate":0.0006},"data":{"path":"x.bin"}}' | show

say "GET /v1/nodes"
curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/nodes" | show
say "GET /v1/links (row = from, column = to)"
curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/links" | show
say "GET /v1/jobs/$jid"
curl -s -H "Authorization: Bearer $ADMIN" "$S/v1/jobs/$jid" | show
say "GET /metrics (excerpt)"
curl -s "$S/metrics" | grep -E '^shoal_(nodes|jobs|http_requests_total)' | head -n 20

say "stopping shoal-server"
kill -TERM "$pid"; wait "$pid" || true; pid=""
tail -n 3 "$dir/server.log"
echo
echo "demo done. The agent that trains on these plans is the next step (see README.md)."
