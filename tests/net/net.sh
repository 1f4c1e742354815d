# net.sh - a network of hosts on one machine, for the testbed (source it).
#
# Each host is a network namespace with one veth into a bridge in the root
# namespace; the bridge holds the gateway address, where the server listens.
# A host's traffic to each peer leaves through an htb class of its own on
# the host's side of the veth, at the configured rate: the link i -> j is
# shaped in i's kernel, independently of every other pair, and traffic to
# the gateway is not shaped.  The kernel here has htb and tbf but not netem,
# so links have bandwidth only; their latency is the veth's (~0.05 ms).
#
# A host may also get a share of the CPU (a cpu cgroup with a CFS quota), so
# that hosts on a two-core machine do not slow each other down while they
# compute, and so that hosts can differ in speed as GPUs do.
#
#   net_up CONFIG     builds the hosts of CONFIG (see README.md); sets NET_N,
#                     NET_GW, NET_IP[i], NET_NS[i], NET_CG[i]
#   net_run I CMD...  runs CMD in host I (its namespace and cgroup), in the
#                     background; sets NET_PID
#   net_nat I         host I takes no inbound connections, as behind a NAT
#                     router (config: "nat": true); what it opens goes out
#                     and back as usual
#   net_cut I         cuts host I off from every other host (its links both
#                     ways shaped to 8 bit/s: packets queue, nothing gets
#                     through in time); the gateway still reaches it, as a
#                     server reaches a site whose peer traffic is blocked
#   net_heal I RATE   gives those links RATE mbit/s again
#   net_down          kills what runs in the hosts and removes everything;
#                     safe to call twice, and after a half-built net_up
#
# Names carry the shell's pid (stb<pid>...), so a run never touches another
# run's hosts; `net_sweep` removes what a killed run left behind.

NET_ID=$$
NET_BR=stb$NET_ID
NET_PREFIX=10.$((NET_ID % 200 + 20)).$((NET_ID / 200 % 250))
NET_GW=$NET_PREFIX.1
NET_N=0
NET_CG_ROOT=""
declare -a NET_IP NET_NS NET_CG NET_VETH

# The cpu controller's directory and how a quota is written: v1 (cpu.cfs_*)
# or v2 (cpu.max); empty when neither is available.
net_cgroup_root() {
    if [ -w /sys/fs/cgroup/cpu/cgroup.procs ] && [ -e /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
        echo "v1 /sys/fs/cgroup/cpu"
    elif grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
        echo "v2 /sys/fs/cgroup"
    fi
}

# net_quota DIR SHARE: at most SHARE cores (e.g. 0.4), in 10 ms periods so
# the throttling is smooth at the scale of one micro-batch.
net_quota() {
    local dir=$1 share=$2 quota
    quota=$(awk -v s="$share" 'BEGIN { printf "%d", s * 10000 }')
    case $NET_CG_ROOT in
        v1*) echo 10000 > "$dir/cpu.cfs_period_us" && echo "$quota" > "$dir/cpu.cfs_quota_us" ;;
        v2*) echo "$quota 10000" > "$dir/cpu.max" ;;
    esac
}

net_up() {
    local config=$1 i j n mbit ns veth share cg
    n=$(jq '.nodes | length' "$config")
    NET_CG_ROOT=$(net_cgroup_root)
    ip link add "$NET_BR" type bridge || return 1
    ip link set "$NET_BR" up && ip addr add "$NET_GW/24" dev "$NET_BR" || return 1
    for i in $(seq 0 $((n - 1))); do
        ns=$NET_BR-$i
        veth=${NET_BR}v$i
        NET_NS[$i]=$ns
        NET_VETH[$i]=$veth
        NET_IP[$i]=$NET_PREFIX.$((10 + i))
        NET_N=$((i + 1))
        ip netns add "$ns" || return 1
        ip link add "$veth" type veth peer name eth0 netns "$ns" || return 1
        ip link set "$veth" master "$NET_BR" up || return 1
        ip -n "$ns" link set lo up && ip -n "$ns" addr add "${NET_IP[$i]}/24" dev eth0 &&
            ip -n "$ns" link set eth0 up && ip -n "$ns" route add default via "$NET_GW" || return 1
        # Class 1:1, the default, is the unshaped way to the gateway.
        tc -n "$ns" qdisc add dev eth0 root handle 1: htb default 1 || return 1
        tc -n "$ns" class add dev eth0 parent 1: classid 1:1 htb rate 10gbit quantum 65536 || return 1
        for j in $(seq 0 $((n - 1))); do
            [ "$i" = "$j" ] && continue
            mbit=$(jq -r ".bandwidth_mbit[$i][$j]" "$config")
            tc -n "$ns" class add dev eth0 parent 1: classid "1:$((100 + j))" htb rate "${mbit}mbit" \
                ceil "${mbit}mbit" quantum 1514 || return 1
            tc -n "$ns" filter add dev eth0 parent 1: protocol ip prio 1 u32 \
                match ip dst "$NET_PREFIX.$((10 + j))/32" flowid "1:$((100 + j))" || return 1
        done
        if [ "$(jq -r ".nodes[$i].nat // false" "$config")" = true ]; then net_nat "$i" || return 1; fi
        NET_CG[$i]=""
        share=$(jq -r ".nodes[$i].cpu // empty" "$config")
        if [ -n "$share" ] && [ -n "$NET_CG_ROOT" ]; then
            cg=${NET_CG_ROOT#* }/$ns
            mkdir "$cg" && net_quota "$cg" "$share" || return 1
            NET_CG[$i]=$cg
        fi
    done
}

net_run() {
    local i=$1; shift
    # The child joins the cgroup first, then becomes the command in the host.
    sh -c 'if [ -n "$1" ]; then echo $$ > "$1/cgroup.procs" || exit 1; fi; ns=$2; shift 2; exec ip netns exec "$ns" "$@"' \
        _ "${NET_CG[$i]}" "${NET_NS[$i]}" "$@" &
    NET_PID=$!
    disown "$NET_PID"   # net_down ends it; no job notices
}

# A stateful firewall in the host (nftables): a new TCP connection to it
# is refused, every packet of one it opened comes back.  A home router
# drops such connections silently (the dialer times out); the reset makes
# the test's probes fail at once instead, and shoal tells the two apart
# only by how long a failed dial takes.
net_nat() {
    printf '%s\n' 'table inet shoal_nat {' \
        '    chain input {' \
        '        type filter hook input priority 0; policy accept;' \
        '        ct state established,related accept' \
        '        tcp flags & (syn | ack) == syn reject with tcp reset' \
        '    }' '}' | ip netns exec "${NET_NS[$1]}" nft -f -
}

# net_shape I J RATE: host I's link to host J at RATE (tc's units).
net_shape() {
    tc -n "${NET_NS[$1]}" class change dev eth0 parent 1: classid "1:$((100 + $2))" htb rate "$3" ceil "$3" \
        quantum 1514
}

net_cut() {
    local j
    for j in $(seq 0 $((NET_N - 1))); do
        [ "$j" = "$1" ] && continue
        net_shape "$1" "$j" 8bit && net_shape "$j" "$1" 8bit || return 1
    done
}

net_heal() {
    local j
    for j in $(seq 0 $((NET_N - 1))); do
        [ "$j" = "$1" ] && continue
        net_shape "$1" "$j" "$2mbit" && net_shape "$j" "$1" "$2mbit" || return 1
    done
}

net_down() {
    local i pids k p alive
    # SIGTERM first (agents leave cleanly), SIGKILL after 5 s.
    for k in TERM KILL; do
        pids=""
        for i in $(seq 0 $((NET_N - 1))); do
            pids="$pids $(ip netns pids "${NET_NS[$i]}" 2>/dev/null)"
        done
        [ -z "${pids// /}" ] && break
        kill -$k $pids 2>/dev/null
        for _ in $(seq 1 50); do
            alive=0
            for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
            [ $alive = 0 ] && break
            sleep 0.1
        done
    done
    for i in $(seq 0 $((NET_N - 1))); do
        ip netns del "${NET_NS[$i]}" 2>/dev/null
        [ -n "${NET_CG[$i]:-}" ] && rmdir "${NET_CG[$i]}" 2>/dev/null
    done
    ip link del "$NET_BR" 2>/dev/null
    NET_N=0
    return 0
}

# net_sweep: removes hosts, bridges and cgroups of runs whose shell is gone.
net_sweep() {
    local ns pid br cg
    for ns in $(ip netns list 2>/dev/null | awk '/^stb[0-9]+-[0-9]+/ { print $1 }'); do
        pid=${ns#stb}; pid=${pid%%-*}
        kill -0 "$pid" 2>/dev/null && continue
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        ip netns del "$ns"
    done
    for br in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{ print $2 }' | grep -E '^stb[0-9]+$'); do
        kill -0 "${br#stb}" 2>/dev/null || ip link del "$br"
    done
    for cg in /sys/fs/cgroup/cpu/stb*-* /sys/fs/cgroup/stb*-*; do
        [ -d "$cg" ] || continue
        pid=${cg##*/stb}; pid=${pid%%-*}
        kill -0 "$pid" 2>/dev/null || rmdir "$cg" 2>/dev/null
    done
    return 0
}
