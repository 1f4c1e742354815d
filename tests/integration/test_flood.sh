#!/usr/bin/env bash
# test_flood.sh - floods (issue 34): idle connections from two addresses
# at the limits (--max-connections-per-address, then --max-connections)
# are closed on accept, not left hanging in the listen queue, and the
# reserve past the limit still lets in clients that hold few connections:
# /healthz and a known node's heartbeats keep answering.  Stalled large
# bodies with a token the server does not know cost it no memory: tokens
# are checked before any body is read.
set -u
. "$(dirname "$0")/lib.sh"

# One HTTP thread: each admits what it accepts before it counts it, so a
# burst on several threads may pass a limit by a connection a thread.
start_server_a --max-connections 100 --max-connections-per-address 80 --threads 1 || exit 1
S=$URL_a
PORT=${S##*:}
req POST "$S/v1/agent/register" "$JOIN" '{"name":"n0","peer_address":"127.0.0.1:7001","hardware":{"tflops":1,"cpu_cores":1}}'
expect "a node registers" 201
NODE=$(printf '%s' "$BODY" | jq -r .token)

# 90 idle connections from 127.0.0.2 (its 80, then 10 over), then 40 from
# 127.0.0.3 (20 to the total of 100, then 20 more: it holds more than a few)
coproc FLOOD { python3 "$(dirname "$0")/conn_flood.py" 127.0.0.1 "$PORT" 60 127.0.0.2:90 127.0.0.3:40; }
read -r -t 60 report <&"${FLOOD[0]}"
check "per address: 80 held, the 10 over closed on accept" "$(printf '%s' "$report" | jq -c '.["127.0.0.2"]')" \
    '{"closed":10,"held":80}'
check "in all: 20 more held, the 20 past --max-connections closed on accept" \
    "$(printf '%s' "$report" | jq -c '.["127.0.0.3"]')" '{"closed":20,"held":20}'
for i in 1 2 3; do
    req GET "$S/healthz" "" "" --max-time 3
    check "with the server at its limits, /healthz answers ($i)" "$STATUS" 200
    req POST "$S/v1/agent/heartbeat" "$NODE" '{"state":"idle"}' --max-time 3
    check "and so does the known node's heartbeat ($i)" "$STATUS" 200
done
req GET "$S/metrics" "" "" --max-time 5
check "/metrics counts the refused connections and those held" \
    "$(printf '%s\n' "$BODY" | awk '/^shoal_http_connections_refused_total / { r = $2 } /^shoal_http_connections / { h = $2 }
                                   END { print (r >= 30 && h >= 100) ? "yes" : r " " h }')" yes
check "the log says so" "$(grep -c 'http refusing connections' "$WORK/a.log" | awk '{ print ($1 >= 1) ? "yes" : $1 }')" yes
exec {FLOOD[1]}>&-   # the flood lets go
wait "$FLOOD_PID" 2>/dev/null
held_gone() { [ "$(curl -s "$S/metrics" | awk '/^shoal_http_connections / { print $2 }')" -lt 10 ] 2>/dev/null; }
wait_for 20 held_gone
check "once it lets go the server holds them no more" "$(held_gone && echo yes)" yes
# ---- bodies before tokens: the token is checked when the headers arrive,
# so sixty stalled 1 MiB bodies with a token the server does not know cost
# it no memory (they are read and dropped, the 401 waiting for the end)
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$(cat "$WORK/a.pid")/status"; }   # KiB
before=$(rss)
coproc BODIES { python3 "$(dirname "$0")/body_flood.py" 127.0.0.1 "$PORT" 60 /v1/agent/heartbeat shoal_node_nosuchtoken; }
read -r -t 60 sent <&"${BODIES[0]}"
sleep 1
grew=$(( $(rss) - before ))
check "sixty stalled 1 MiB bodies with an unknown token: $sent, the server grew by under 16 MiB" \
    "$([ "$grew" -lt 16384 ] && echo yes || echo "$grew KiB")" yes
exec {BODIES[1]}>&-
wait "$BODIES_PID" 2>/dev/null
req POST "$S/v1/agent/heartbeat" "$NODE" '{"state":"idle"}'
check "the known node's heartbeat, body and all, still passes" "$STATUS" 200
req POST "$S/v1/agent/heartbeat" "shoal_node_nosuchtoken" '{"state":"idle"}'
expect "an unknown token is 401, as before" 401 .error.code unauthorized
stop_server a
[ "$FAILS" -eq 0 ]
