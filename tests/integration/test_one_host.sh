#!/usr/bin/env bash
# test_one_host.sh - what a new user tries on one machine (issue 46):
# `shoal-agent --help` lists every subcommand and each one answers its own
# --help; two agents on one host started without --name register with
# names of their own, the same again when one registers afresh from its
# data directory; and docs/operations.md's relay tried on one machine runs
# as written: a server with --relay, shoal-relay, two agents that advertise
# ports nobody listens on, a job whose one link the relay joins.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/agents.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BINDIR=$(dirname "$SHOAL_SERVER")

# ---- shoal-agent --help: every subcommand, each with a --help of its own
"$SHOAL_AGENT" --help > "$WORK/help" 2>&1
check "shoal-agent --help exits 0" "$?" 0
for sub in run tokenize import export sample; do
    check "shoal-agent --help lists the subcommand $sub" "$(grep -c "^  $sub " "$WORK/help")" 1
done
for sub in tokenize import export sample; do
    "$SHOAL_AGENT" "$sub" --help > "$WORK/help.$sub" 2>&1
    check "shoal-agent $sub --help exits 0 with its usage" \
        "$? $(head -n 1 "$WORK/help.$sub" | grep -c "^usage: shoal-agent $sub ")" "0 1"
done
"$SHOAL_AGENT" run --help > "$WORK/help.run" 2>&1
check "shoal-agent run --help prints the same text as --help" "$? $(cmp -s "$WORK/help" "$WORK/help.run" && echo same)" "0 same"
# the subcommands agent/tools/README.md names are the ones listed
for sub in $(sed -n 3p "$TOP/agent/tools/README.md" | grep -o '`[a-z -]*`' | tr -d '`' | sed 's/^shoal-agent //'); do
    check "the tool $sub (agent/tools/README.md) is listed" "$(grep -c "^  $sub " "$WORK/help")" 1
done
"$SHOAL_AGENT" tokenise > /dev/null 2> "$WORK/err"
check "an unknown subcommand: exit 2, named, with the list" \
    "$? $(grep -c "no subcommand 'tokenise' (run, tokenize, import, export, sample)" "$WORK/err")" "2 1"
check "--help says what the default name is" "$(grep -c "the host name, '-' and 6 hex digits" "$WORK/help")" 1

# ---- two agents on one host, no --name
start_server_s || exit 1
HOST=$(hostname)
# plain NAME: an agent with data dir $WORK/plain-NAME and no --name
plain() {
    mkdir -p "$WORK/plain-$1"
    "$SHOAL_AGENT" --server "$S" --join-token-file "$WORK/s/join.token" --listen 127.0.0.1:0 \
        --data-dir "$WORK/plain-$1" --heartbeat-interval 1 --probe-interval 1 --measure-ms 50 \
        >>"$WORK/agent-plain-$1.log" 2>&1 &
    echo $! > "$WORK/agent-plain-$1.pid"
    AGENTS="$AGENTS plain-$1"
}
plain 1
plain 2
nodes() { [ "$(sql s "SELECT count(*) FROM nodes")" = "$1" ]; }
wait_for 60 nodes 2 || fail "two agents register" "$(tail -n 3 "$WORK/agent-plain-1.log")"
NAMES=$(sql s "SELECT name FROM nodes ORDER BY id")
check "two agents on one host without --name register with two names" "$(printf '%s\n' "$NAMES" | sort -u | wc -l)" 2
check "each is the host name, '-' and 6 hex digits" \
    "$(printf '%s\n' "$NAMES" | grep -c "^${HOST:0:56}-[0-9a-f]\{6\}$")" 2
# (which agent registered first is a race: each one's node id is in its node.json)
P1=$(jq -r .node_id "$WORK/plain-1/node.json")
P1_NAME=$(sql s "SELECT name FROM nodes WHERE id = $P1")
check "its log says the name it registered with" "$(grep -c "registered node=$P1 name=$P1_NAME " "$WORK/agent-plain-1.log")" 1
# an agent that registers afresh from the same data directory (its node
# removed, or node.json lost) comes back under the same name
stop_agent plain-1
rm -f "$WORK/plain-1/node.json"
plain 1
wait_for 60 nodes 3 || fail "the agent registers again"
wait_for 10 test -s "$WORK/plain-1/node.json"
P1_AGAIN=$(jq -r .node_id "$WORK/plain-1/node.json")
check "an agent registering again from its data directory is a new node with the name it had" \
    "$([ "$P1_AGAIN" != "$P1" ] && echo new) $(sql s "SELECT name FROM nodes WHERE id = $P1_AGAIN")" "new $P1_NAME"
stop_all_agents

# ---- docs/operations.md: the relay tried on one machine, as written
if (exec 3<>/dev/tcp/127.0.0.1/8090) 2>/dev/null || (exec 3<>/dev/tcp/127.0.0.1/7946) 2>/dev/null; then
    ok "the relay on one machine (docs/operations.md) # SKIP port 8090 or 7946 is in use here"
else
    mkdir -p "$README_DIR/bin"
    for p in shoal-server shoal-agent shoal-relay; do ln -sf "$BINDIR/$p" "$README_DIR/bin/$p"; done
    doc_example relay-one-host > "$README_DIR/relay.sh"
    # in a session of its own, so that whatever it leaves running is ended by its id
    (cd "$README_DIR" && exec setsid bash -e relay.sh > relay.out 2> relay.err) &
    EX=$!
    for _ in $(seq 1 360); do kill -0 "$EX" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$EX" 2>/dev/null; then
        fail "the relay example ends within 180 s" "$(tail -n 5 "$README_DIR"/relay-try/*.log)"
        kill -TERM -- -"$EX" 2>/dev/null
    fi
    wait "$EX"
    RC=$?
    check "the relay on one machine (docs/operations.md) runs as written" "$RC $(cat "$README_DIR/relay.err")" "0 "
    check "its job succeeds without a recovery" "$(sed -n 1p "$README_DIR/relay.out")" '["succeeded",0]'
    check "its two agents have names of their own" \
        "$(sed -n 2p "$README_DIR/relay.out" | jq -r 'unique | length')" 2
    check "the relay joined the job's one link" "$(sed -n 3p "$README_DIR/relay.out")" "shoal_relay_pairs_total 1"
    check "each agent found it could not connect to the other and measured its link to the relay" \
        "$(cat "$README_DIR"/relay-try/agent-[12].log | grep -c 'cannot connect to peer 127.0.0.1:[12]' | awk '{print ($1 >= 2)}') $(cat "$README_DIR"/relay-try/agent-[12].log | grep -c 'probe relay=127.0.0.1:7946' | awk '{print ($1 >= 2)}')" \
        "1 1"
    check "the agents' logs write their stages' layers first-last (layers=0-0, layers=1-1), never with .." \
        "$(cat "$README_DIR"/relay-try/agent-[12].log | grep -o 'tasklet start .* layers=[0-9-]*' | sed 's/.*layers=//' | sort -u | xargs) $(cat "$README_DIR"/relay-try/agent-[12].log | grep -c 'layers=[0-9]*\.\.')" \
        "0-0 1-1 0"
    kill -TERM -- -"$EX" 2>/dev/null   # nothing should be left; this is in case
fi

[ "$FAILS" -eq 0 ]
