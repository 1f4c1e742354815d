#!/usr/bin/env bash
# test_demo.sh - `make demo`'s script, short: it starts a server and four
# agents, trains the fortunes job to success, prints sampled text, and
# leaves nothing behind; interrupted mid-run (Ctrl-C) it stops everything
# it started and removes its files.
set -u
. "$(dirname "$0")/lib.sh"
: "${SHOAL_AGENT:?set SHOAL_AGENT to the shoal-agent binary}"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$WORK/bin
mkdir -p "$BIN"
ln -s "$SHOAL_SERVER" "$BIN/shoal-server"
ln -s "$SHOAL_AGENT" "$BIN/shoal-agent"
export DEMO_PORT=0 DEMO_SAMPLE_TOKENS=80

# demo_dir LOG: the work directory the demo announced.
demo_dir() { sed -n 's/.*embedded PostgreSQL under \(\/tmp\/shoal-demo\.[A-Za-z0-9]*\)\/server.*/\1/p' "$1" | head -n 1; }
# leftovers DIR: processes still running with DIR in their command line.
leftovers() { pgrep -f -- "$1" | tr '\n' ' '; }

# ---- a whole short run
DEMO_STEPS=12 timeout 900 bash "$TOP/deploy/demo.sh" "$BIN" > "$WORK/demo.log" 2>&1
rc=$?
D=$(demo_dir "$WORK/demo.log")
check "the demo exits 0" "$rc" 0
check "the four agents measure all twelve links" "$(grep -c 'links measured: 12 of 12' "$WORK/demo.log")" 1
check "it prints the dashboard URL and the admin token" \
    "$(grep -cE '^dashboard: +http://127\.0\.0\.1:[0-9]+/$' "$WORK/demo.log") $(grep -cE '^admin token: shoal_admin_[0-9a-f]{64}' "$WORK/demo.log")" "1 1"
check "the job trains all 12 steps" "$(grep -c 'step 12/12 .*(succeeded)' "$WORK/demo.log")" 1
check "and reports the loss falling" "$(grep -cE '^loss went from [0-9.]+ to [0-9.]+ over 12 steps' "$WORK/demo.log")" 1
check "and the validation loss after steps 4, 8 and 12" \
    "$(grep -cE '^validation loss .*: [0-9.]+ after step 4, [0-9.]+ after step 8, [0-9.]+ after step 12$' "$WORK/demo.log")" 1
text=$(sed -n '/text sampled from the trained model/,/^demo done/p' "$WORK/demo.log" | sed '1d;$d')
check "it prints text sampled from the trained model" "$(( $(printf '%s' "$text" | wc -c) >= 80 ))" 1
check "the demo names its work directory" "$([ -n "$D" ] && echo yes)" yes
check "and removes it" "$([ -e "$D" ] && echo left || echo removed)" removed
check "no process of the demo is left running" "$(leftovers "$D")" ""

# ---- Ctrl-C in the middle of training (SIGINT to the demo's process group,
# as a terminal sends it)
set -m
DEMO_STEPS=100000 bash "$TOP/deploy/demo.sh" "$BIN" > "$WORK/int.log" 2>&1 &
pid=$!
set +m
training() { grep -q 'tokens/s  (running)' "$WORK/int.log"; }
for _ in $(seq 1 360); do training && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
D=$(demo_dir "$WORK/int.log")
if training; then ok "the interrupted demo reached training"; else fail "the interrupted demo reached training" "$(tail -n 5 "$WORK/int.log")"; fi
kill -INT -- -"$pid" 2>/dev/null
waited=0
while kill -0 "$pid" 2>/dev/null && [ $waited -lt 60 ]; do sleep 0.5; waited=$((waited + 1)); done
wait "$pid"
check "Ctrl-C ends the demo with status 130" "$?" 130
check "it says it stops what it started" "$(grep -c 'demo: stopping the agents and the server' "$WORK/int.log")" 1
check "no agent, server or Postgres of the demo is left" "$(leftovers "$D")" ""
check "its work directory is gone" "$([ -n "$D" ] && [ ! -e "$D" ] && echo removed)" removed

exit "$FAILS"
