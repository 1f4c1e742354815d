#!/usr/bin/env bash
# test_flood.sh - floods (issues 34 and 45).  Idle connections from twelve
# addresses at the limits (--max-connections-per-address, the 64 an
# address the server does not know may hold, then --max-connections) are
# closed on accept, not left hanging in the listen queue, and the reserve
# past the limit is kept for addresses the server knows, which strangers
# cannot spend however many addresses they have: /healthz (loopback) and a
# known node's heartbeats (from the address its token was seen at) keep
# answering, and no node is lost.  Stalled large bodies cost the server
# little: with a token it does not know nothing (tokens are checked before
# any body is read), with a node's token at most 4 x --max-body of that
# node's, and from one address at most 16 x --max-body; past that the
# request is answered 429 bodies_in_flight.  An address registers at most
# --max-registrations nodes a minute.  127.0.0.x addresses other than
# 127.0.0.1 are all loopback to Linux, and strangers to the server.
set -u
. "$(dirname "$0")/lib.sh"

# One HTTP thread: each admits what it accepts before it counts it, so a
# burst on several threads may pass a limit by a connection a thread.
# Nodes are lost 3 s after their last heartbeat (lib.sh gives suites 60).
start_server_a --max-connections 100 --max-connections-per-address 80 --threads 1 --heartbeat-timeout 3 \
               --max-registrations 3 || exit 1
S=$URL_a
PORT=${S##*:}
KNOWN=127.0.0.20   # where the node n0 registers and heartbeats from
req POST "$S/v1/agent/register" "$JOIN" '{"name":"n0","peer_address":"127.0.0.20:7001","hardware":{"tflops":1,"cpu_cores":1}}' \
    --interface $KNOWN
expect "a node registers" 201
NODE=$(printf '%s' "$BODY" | jq -r .token)
N0=$(printf '%s' "$BODY" | jq -r .node_id)
beat() { req POST "$S/v1/agent/heartbeat" "$NODE" '{"state":"idle"}' --interface $KNOWN --max-time 3; }
beat
expect "its heartbeat makes its address known" 200

# 90 idle connections from 127.0.0.2 (64 held: an address not known holds
# no more, under --max-connections-per-address 80), then 40 from 127.0.0.3
# (36 to the total of 100, then 4 more: --max-connections), then 8 each
# from ten more addresses, which the reserve past the limit used to let in
# (it was for any address holding fewer than 8): it is for known ones now.
FLOODERS="127.0.0.2:90 127.0.0.3:40"
for i in $(seq 4 13); do FLOODERS="$FLOODERS 127.0.0.$i:8"; done
coproc FLOOD { python3 "$(dirname "$0")/conn_flood.py" 127.0.0.1 "$PORT" 60 $FLOODERS; }
read -r -t 60 report <&"${FLOOD[0]}"
check "an address not known: 64 held, the 26 over closed on accept" "$(printf '%s' "$report" | jq -c '.["127.0.0.2"]')" \
    '{"closed":26,"held":64}'
check "in all: 36 more held, the 4 past --max-connections closed on accept" \
    "$(printf '%s' "$report" | jq -c '.["127.0.0.3"]')" '{"closed":4,"held":36}'
check "ten more addresses of 8 each: every one closed on accept (the reserve is not theirs)" \
    "$(printf '%s' "$report" | jq -c '[to_entries[] | select(.key != "127.0.0.2" and .key != "127.0.0.3") | .value.held] | add')" 0
healthz_ok=0 beat_ok=0
for i in 1 2 3 4; do
    req GET "$S/healthz" "" "" --max-time 3
    [ "$STATUS" = 200 ] && healthz_ok=$((healthz_ok + 1))
    beat
    [ "$STATUS" = 200 ] && beat_ok=$((beat_ok + 1))
    sleep 1
done
check "with the server at its limits for 4 s, /healthz answers every time" "$healthz_ok" 4
check "and so does the known node's heartbeat, from its own address" "$beat_ok" 4
req GET "$S/healthz" "" "" --max-time 3 --interface 127.0.0.30
check "while a thirteenth address, not known, is closed on accept" "$STATUS" 000
req GET "$S/v1/nodes/$N0" "$ADMIN"
expect "no node is lost (--heartbeat-timeout 3)" 200 .state idle
req GET "$S/metrics" "" "" --max-time 5
check "/metrics counts the refused connections and those held" \
    "$(printf '%s\n' "$BODY" | awk '/^shoal_http_connections_refused_total / { r = $2 } /^shoal_http_connections / { h = $2 }
                                   END { print (r >= 100 && h >= 100) ? "yes" : r " " h }')" yes
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
# stalled N PATH TOKEN: N bodies of 1 MiB, all but 64 KiB sent, held open
# (BODIES; close_bodies lets go); SENT says how many went out.
stalled() {
    coproc BODIES { python3 "$(dirname "$0")/body_flood.py" 127.0.0.1 "$PORT" "$1" "$2" "$3"; }
    read -r -t 60 SENT <&"${BODIES[0]}"
    sleep 1
}
close_bodies() { exec {BODIES[1]}>&-; wait "$BODIES_PID" 2>/dev/null; }
before=$(rss)
stalled 60 /v1/agent/heartbeat shoal_node_nosuchtoken
grew=$(( $(rss) - before ))
check "sixty stalled 1 MiB bodies with an unknown token: $SENT, the server grew by under 16 MiB" \
    "$([ "$grew" -lt 16384 ] && echo yes || echo "$grew KiB")" yes
close_bodies
# ... and with a node's token, that node's 4 x --max-body (4 MiB) are held,
# the rest answered 429 without being held
req POST "$S/v1/agent/register" "$JOIN" '{"name":"n1","peer_address":"127.0.0.1:7002","hardware":{"tflops":1,"cpu_cores":1}}'
expect "a second node registers (from loopback)" 201
N1_TOKEN=$(printf '%s' "$BODY" | jq -r .token)
before=$(rss)
stalled 30 /v1/agent/heartbeat "$N1_TOKEN"
grew=$(( $(rss) - before ))
check "thirty stalled 1 MiB bodies with a node's token: $SENT, the server grew by under 16 MiB" \
    "$([ "$grew" -lt 16384 ] && echo yes || echo "$grew KiB")" yes
req POST "$S/v1/agent/heartbeat" "$N1_TOKEN" '{"state":"idle"}'
expect "that node's next request is 429 bodies_in_flight" 429 .error.code bodies_in_flight
check "with Retry-After, closing the connection" \
    "$(tr -d '\r' < "$WORK/headers" | awk -F': ' 'tolower($1) == "retry-after" { r = $2 } tolower($1) == "connection" { c = $2 }
                                                 END { print r " " c }')" "1 close"
beat
expect "another node's heartbeat passes meanwhile" 200
close_bodies
req POST "$S/v1/agent/heartbeat" "$N1_TOKEN" '{"state":"idle"}'
expect "once they are gone, that node's heartbeat passes" 200
# ... and from one address, 16 x --max-body (16 MiB) in all, whoever sends
stalled 17 /v1/jobs "$ADMIN"
req POST "$S/v1/jobs" "$ADMIN" '{}'
expect "seventeen stalled 1 MiB bodies from one address: its next body is 429 bodies_in_flight" 429 \
    '.error.message | test("this address")' true
req GET "$S/healthz"
expect "a request without a body from there passes" 200
beat
expect "and a body from another address" 200
close_bodies
req POST "$S/v1/agent/heartbeat" "$NODE" '{"state":"idle"}'
check "the known node's heartbeat, body and all, passes from loopback too" "$STATUS" 200
req POST "$S/v1/agent/heartbeat" "shoal_node_nosuchtoken" '{"state":"idle"}'
expect "an unknown token is 401, as before" 401 .error.code unauthorized

# ---- registrations: --max-registrations 3 a minute an address (n0 was one
# from 127.0.0.20); loopback is not limited
reg() { req POST "$S/v1/agent/register" "$JOIN" "{\"name\":\"r$1\",\"peer_address\":\"127.0.0.21:7001\",\"hardware\":{\"tflops\":1,\"cpu_cores\":1}}" "${@:2}"; }
codes=""
for i in 1 2 3; do reg "$i" --interface 127.0.0.21; codes="$codes$STATUS "; done
check "three registrations from one address" "$codes" "201 201 201 "
reg 4 --interface 127.0.0.21
expect "a fourth within the minute is 429 too_many_registrations" 429 .error.code too_many_registrations
check "with Retry-After" "$(tr -d '\r' < "$WORK/headers" | awk -F': ' 'tolower($1) == "retry-after" { print ($2 > 0 && $2 <= 60) ? "yes" : $2 }')" yes
reg 5 --interface $KNOWN; reg 6 --interface $KNOWN
check "another address has its own (two left of three)" "$STATUS" 201
reg 7 --interface $KNOWN
check "and then waits too" "$STATUS" 429
codes=""
for i in 8 9 10 11; do reg "$i"; codes="$codes$STATUS "; done
check "loopback is not limited" "$codes" "201 201 201 201 "
stop_server a
[ "$FAILS" -eq 0 ]
