#!/usr/bin/env bash
# bench_relay.sh - what shoal-relay costs (make bench-relay; root, for
# network namespaces): one sealed job connection (tests/bench/bench_relay.c)
# between hosts a and b of the testbed (tests/net/net.sh), every link shaped
# to --mbit, first direct, then through a shoal-relay in a third host r (its
# own links at the same rate: the relay host's link speed); each --runs
# times, the best kept.  Then the same relayed connection on loopback with
# nothing shaped, where the relay's CPU is the limit.  Reports throughput
# (Mbit/s of frames, headers and tags included), relayed/direct, and the
# relay's CPU seconds per Gbit forwarded (from /proc, user + system).  A
# table, then one JSON line {"bench":"relay",...}.  Asserts nothing.
#
# usage: bench_relay.sh RELAY_BIN BENCH_BIN [--mbit N] [--mib N] [--runs N]
set -u
RELAY=$1 BENCH=$2; shift 2
MBIT=400 MIB=96 RUNS=3
while [ $# -gt 0 ]; do
    case $1 in
        --mbit) MBIT=$2; shift 2 ;;
        --mib) MIB=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        *) echo "bench_relay: unknown option $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench_relay: skipped: needs root for network namespaces"; exit 0; }
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/tests/net/net.sh"
work=$(mktemp -d /tmp/bench-relay.XXXXXX)
trap 'net_down; rm -rf "$work"' EXIT
net_sweep
BYTES=$((MIB << 20))
jq -n --argjson m "$MBIT" '{name: "relay", nodes: [{name: "a"}, {name: "b"}, {name: "r"}],
    bandwidth_mbit: [[0, $m, $m], [$m, 0, $m], [$m, $m, 0]]}' > "$work/net.json"
net_up "$work/net.json" || { echo "bench_relay: could not build the network" >&2; exit 1; }

# cpu_ticks PID: user + system clock ticks so far
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

# one RUN: direct or relay; prints "seconds relay_cpu_s"
one() {
    local path=$1 ns_a=$2 ns_b=$3 b_addr=$4 relay_addr=$5 relay_pid=$6 lpid c0 c1 out
    ${ns_b:+ip netns exec "$ns_b"} "$BENCH" listen "$b_addr" "$([ "$path" = relay ] && echo "$relay_addr" || echo -)" \
        "$BYTES" > /dev/null &
    lpid=$!
    c0=$([ -n "$relay_pid" ] && cpu_ticks "$relay_pid" || echo 0)
    out=$(${ns_a:+ip netns exec "$ns_a"} "$BENCH" dial "$([ "$path" = relay ] && echo "$relay_addr" || echo "$b_addr")" \
          "$path" "$BYTES") || { wait "$lpid"; return 1; }
    wait "$lpid"
    c1=$([ -n "$relay_pid" ] && cpu_ticks "$relay_pid" || echo 0)
    echo "$(jq -r .seconds <<< "$out") $(awk -v t="$TICK" -v a="$c0" -v b="$c1" 'BEGIN { printf "%.3f", (b - a) / t }')"
}

# best PATH ... : the fastest of RUNS; prints "seconds relay_cpu_s"
best() {
    local r s best=""
    for r in $(seq 1 "$RUNS"); do
        s=$(one "$@") || { echo "bench_relay: a $1 run failed" >&2; return 1; }
        if [ -z "$best" ] || awk -v x="${s% *}" -v y="${best% *}" 'BEGIN { exit !(x < y) }'; then best=$s; fi
    done
    echo "$best"
}
mbit() { awk -v b="$BYTES" -v s="$1" 'BEGIN { printf "%.1f", b * 8 / s / 1e6 }'; }
per_gbit() { awk -v b="$BYTES" -v c="$2" -v s="$1" 'BEGIN { printf "%.3f", c / (b * 8 / 1e9) }'; }

# the secret a server would share with its relay: the relay's
# --secret-file, and what both ends sign their tickets with
(umask 077; echo "shoal_relay_$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$work/relay.secret")
export SHOAL_RELAY_SECRET_FILE=$work/relay.secret

A=${NET_NS[0]} B=${NET_NS[1]} R=${NET_NS[2]}
ip netns exec "$R" "$RELAY" --listen "${NET_IP[2]}:7946" --log-level warn &
RPID=$!
sleep 0.5
direct=$(best direct "$A" "$B" "${NET_IP[1]}:7000" "" "") || exit 1
relayed=$(best relay "$A" "$B" "${NET_IP[1]}:7000" "${NET_IP[2]}:7946" "$RPID") || exit 1
kill "$RPID"; wait "$RPID" 2>/dev/null

"$RELAY" --listen 127.0.0.1:17946 --log-level warn &
LPID=$!
sleep 0.5
loop=$(best relay "" "" "127.0.0.1:17000" "127.0.0.1:17946" "$LPID") || exit 1
kill "$LPID"; wait "$LPID" 2>/dev/null

d_mbit=$(mbit "${direct% *}") r_mbit=$(mbit "${relayed% *}") l_mbit=$(mbit "${loop% *}")
ratio=$(awk -v r="$r_mbit" -v d="$d_mbit" 'BEGIN { printf "%.3f", r / d }')
link_ratio=$(awk -v r="$r_mbit" -v m="$MBIT" 'BEGIN { printf "%.3f", r / m }')
r_cpu=$(per_gbit "${relayed% *}" "${relayed#* }") l_cpu=$(per_gbit "${loop% *}" "${loop#* }")
printf '%-34s %12s %18s\n' "one sealed connection, $MIB MiB" "Mbit/s" "relay CPU s/Gbit"
printf '%-34s %12s %18s\n' "direct, links at $MBIT Mbit/s" "$d_mbit" "-"
printf '%-34s %12s %18s\n' "through the relay, same links" "$r_mbit" "$r_cpu"
printf '%-34s %12s %18s\n' "through the relay, loopback" "$l_mbit" "$l_cpu"
echo "relayed/direct $ratio, relayed/link $link_ratio (best of $RUNS runs each)"
printf '{"bench":"relay","link_mbit":%s,"mib":%s,"runs":%s,"direct_mbit":%s,"relay_mbit":%s,"relay_over_direct":%s,"relay_over_link":%s,"relay_cpu_s_per_gbit":%s,"loopback_relay_mbit":%s,"loopback_relay_cpu_s_per_gbit":%s}\n' \
    "$MBIT" "$MIB" "$RUNS" "$d_mbit" "$r_mbit" "$ratio" "$link_ratio" "$r_cpu" "$l_mbit" "$l_cpu"
