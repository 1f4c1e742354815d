#!/usr/bin/env bash
# test_tls.sh - the REST API over HTTPS with a self-signed CA: the server
# refuses bad certificate/key pairs at start, serves TLS 1.2+ only, clients
# verify it with the CA, and agents given --ca-file register, measure their
# links and train a job (checkpoint uploads included) over it; an agent
# without the CA is refused with a message that says what to do.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"

if ! command -v openssl >/dev/null; then
    echo "ok - tls # SKIP openssl not installed"
    exit 0
fi
T="$WORK/pki"
mkdir -p "$T"

# ---- a CA, a server certificate it signs for 127.0.0.1, and a stranger CA
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
newkey "$T/ca.key"; newkey "$T/other.key"; newkey "$T/server.key"
openssl req -x509 -key "$T/ca.key" -out "$T/ca.pem" -days 2 -subj /CN=shoal-test-ca 2>/dev/null
openssl req -x509 -key "$T/other.key" -out "$T/other.pem" -days 2 -subj /CN=someone-else 2>/dev/null
openssl req -new -key "$T/server.key" -out "$T/server.csr" -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$T/ext"
sign() {   # sign OUT DAYS
    openssl x509 -req -in "$T/server.csr" -CA "$T/ca.pem" -CAkey "$T/ca.key" -CAcreateserial \
        -out "$1" -days "$2" -extfile "$T/ext" 2>/dev/null
}
sign "$T/server.pem" 2
sign "$T/expired.pem" 0
chmod 600 "$T"/*.key
if [ -s "$T/server.pem" ] && [ -s "$T/expired.pem" ]; then ok "a CA signs a server certificate for 127.0.0.1"
else fail "a CA signs a server certificate for 127.0.0.1"; exit 1; fi
printf 'not a certificate\n' > "$T/garbage.pem"

# ---- refused at start, with the reason, before anything listens
refused() {   # refused NAME WANT_IN_MESSAGE ARGS...
    local name=$1 want=$2 out rc; shift 2
    mkdir -p "$WORK/refused"
    out=$(timeout 20 "$SHOAL_SERVER" --data-dir "$WORK/refused" --port 0 "$@" 2>&1); rc=$?
    case $out in
        *"$want"*) if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then ok "$name"; else fail "$name" "exit $rc"; fi ;;
        *) fail "$name" "exit $rc, said: $(printf '%.300s' "$out")" ;;
    esac
}
sleep 1   # the 0-day certificate's notAfter is now in the past
refused "a certificate without a key is refused" "needs both --tls-cert and --tls-key" --tls-cert "$T/server.pem"
refused "a key without a certificate is refused" "needs both --tls-cert and --tls-key" --tls-key "$T/server.key"
refused "a missing certificate file is refused" "cannot open the TLS certificate" \
    --tls-cert "$T/nope.pem" --tls-key "$T/server.key"
refused "a file that is not PEM is refused" "not a PEM file" --tls-cert "$T/garbage.pem" --tls-key "$T/server.key"
refused "a key of another certificate is refused" "does not belong to the certificate" \
    --tls-cert "$T/server.pem" --tls-key "$T/ca.key"
refused "an expired certificate is refused" "expired or not yet valid" \
    --tls-cert "$T/expired.pem" --tls-key "$T/server.key"
check "nothing was started by the refused runs" "$(ls "$WORK/refused" | grep -c -e '^pg$' -e server.port)" 0

# ---- an HTTPS server
SERVER_SCHEME=https SERVER_CA="$T/ca.pem" start_server s --tls-cert "$T/server.pem" --tls-key "$T/server.key" || exit 1
S=$URL_s
ADMIN=$(cat "$WORK/s/admin.token")
case $S in https://*) ok "the server serves https";; *) fail "the server serves https" "$S";; esac
curl -s -o /dev/null "$S/readyz"; check "curl without the CA refuses the certificate" "$?" 60
curl -s -o /dev/null --cacert "$T/other.pem" "$S/readyz"; check "a stranger CA does not verify it" "$?" 60
curl -s -o /dev/null --cacert "$T/ca.pem" --tls-max 1.1 "$S/readyz"; rc=$?
if [ "$rc" -ne 0 ]; then ok "TLS 1.1 is refused (curl exit $rc)"; else fail "TLS 1.1 is refused"; fi
code=$(curl -s -o /dev/null -w '%{http_code}' "http://${S#https://}/readyz"); rc=$?
if [ "$rc" -ne 0 ] && [ "$code" != 200 ]; then ok "plain HTTP on the TLS port gets no answer (curl exit $rc)"
else fail "plain HTTP on the TLS port gets no answer" "exit $rc status $code"; fi
req GET "$S/v1/nodes" "$ADMIN" "" --cacert "$T/ca.pem"
expect "an admin request over TLS with the CA" 200 '.nodes | length' 0
req GET "$S/v1/nodes" "wrong-token" "" --cacert "$T/ca.pem"
expect "a wrong token over TLS is still 401" 401 .error.code unauthorized
curl -s -o /dev/null --cacert "$T/ca.pem" "$S/readyz" && ok "the server keeps serving after the failed handshakes" ||
    fail "the server keeps serving after the failed handshakes"

# ---- an agent given a wrong --server says so at once and keeps saying so,
# naming the address and what the server listens on
mkdir -p "$WORK/agent-wrongurl"
"$SHOAL_AGENT" --server http://127.0.0.1:9 --join-token-file "$WORK/s/join.token" --listen 127.0.0.1:0 \
    --data-dir "$WORK/agent-wrongurl" --measure-ms 50 > "$WORK/agent-wrongurl.log" 2>&1 &
wrong_pid=$!
wrong_said() { [ "$(grep -c 'cannot reach the server at http://127.0.0.1:9: .*--listen 0.0.0.0' "$WORK/agent-wrongurl.log")" -ge 3 ]; }
if wait_for 20 wrong_said; then ok "an agent with a wrong --server warns at once and again, naming it and --listen"
else fail "an agent with a wrong --server warns at once and again, naming it and --listen" \
    "$(grep -c 'cannot reach' "$WORK/agent-wrongurl.log") warnings; $(tail -n 2 "$WORK/agent-wrongurl.log")"; fi
kill -TERM "$wrong_pid"; wait "$wrong_pid" 2>/dev/null

# ---- agents: without the CA they are refused and say why; with it they work
start_agent nocert s
nocert_said() { grep -q -- "--ca-file" "$WORK/agent-nocert.log"; }
if wait_for 30 nocert_said; then ok "an agent without --ca-file says to give the CA"
else fail "an agent without --ca-file says to give the CA" "$(tail -n 3 "$WORK/agent-nocert.log")"; fi
stop_agent nocert
check "it did not register" "$(sql s "SELECT count(*) FROM nodes")" 0

for n in a0 a1; do start_agent "$n" s --ca-file "$T/ca.pem"; done
nodes_up() { [ "$(sql s "SELECT count(*) FROM nodes WHERE tflops > 0")" = 2 ]; }
if wait_for 60 nodes_up; then ok "agents with --ca-file register over TLS"
else fail "agents with --ca-file register over TLS" "$(tail -n 5 "$WORK/agent-a0.log")"; exit 1; fi
links_up() { [ "$(sql s "SELECT count(*) FROM links_latest WHERE bandwidth_gbps > 0")" = 2 ]; }
if wait_for 60 links_up; then ok "they post their measured links over TLS"
else fail "they post their measured links over TLS" "$(sql s "SELECT count(*) FROM links_latest")"; fi

CORPUS=/usr/share/common-licenses/GPL-3
[ -r "$CORPUS" ] || CORPUS=$(cd "$(dirname "$0")/../.." && pwd)/README.md
body='{"name":"tls","model":{"vocab_size":256,"context_length":16,"d_model":16,"heads":2,"layers":2},
 "parallelism":{"stages":2,"replicas":1,"micro_batches":2,"micro_batch_size":2,"schedule":"1f1b"},
 "training":{"steps":6,"learning_rate":0.003,"seed":7},
 "data":{"path":"'"$CORPUS"'","format":"text"},"checkpoint_interval":3}'
req POST "$S/v1/jobs" "$ADMIN" "$body" --cacert "$T/ca.pem"
expect "a job is created over TLS" 201
J=$(printf '%s' "$BODY" | jq -r .id)
req POST "$S/v1/jobs/$J/schedule" "$ADMIN" '{"budget_ms":100}' --cacert "$T/ca.pem"
expect "and scheduled" 201
done_() { case $(sql s "SELECT state FROM jobs WHERE id = $J") in succeeded|failed|cancelled) return 0;; esac; return 1; }
wait_for 120 done_
check "the job trains to the end over TLS" "$(sql s "SELECT state FROM jobs WHERE id = $J")" succeeded
# (an upload still queued when a newer checkpoint comes is replaced by it)
ckpts() { [ "$(sql s "SELECT count(*) FROM checkpoints WHERE job_id = $J AND step = 6")" = 2 ]; }
if wait_for 30 ckpts; then ok "its final checkpoint (both stages) was uploaded over TLS"
else fail "its final checkpoint (both stages) was uploaded over TLS" "$(sql s "SELECT step, stage FROM checkpoints")"; fi

SERVER_CA="$T/ca.pem" check_no_secrets s
for n in a0 a1; do
    stop_agent "$n"
    check "agent $n exits cleanly" "$AGENT_RC" 0
done
stop_server s
if grep -q -e 'ERROR: AddressSanitizer' -e 'runtime error:' "$WORK"/*.log; then
    fail "no sanitizer reports" "$(grep -h -m 3 -e AddressSanitizer -e 'runtime error' "$WORK"/*.log)"
else ok "no sanitizer reports"; fi
[ "$FAILS" -eq 0 ]
