#!/usr/bin/env bash
# wan.sh - make bench-wan: one job on two sites joined by a slow link, run
# back to back under each of the config's communication modes (stage-link
# wire types, every-step and DiLoCo syncs), the same spec, seed, data,
# token budget and plan: each pipeline inside a site, each stage's
# data-parallel group across the slow link.
#
# usage: tests/net/wan.sh [options] [CONFIG.json]     (default tests/net/wan.json)
#   --server BIN, --agent BIN   the binaries (default: bin/shoal-server, bin/shoal-agent)
#   --steps N                   the token budget in steps (default: the config's)
#   --modes LIST                comma-separated mode names (default: all of the config's)
#   --extend F                  a mode that misses the baseline's final validation loss
#                               trains again for F times the steps (default 2; 1: never)
#   --tolerance R               a loss within R (relative) of the baseline's final one
#                               reaches it (default 0.001: rounding, not training)
#   --json FILE                 also append the JSON lines to FILE
#   --keep DIR                  keep logs and data under DIR
#
# Per mode: bytes per step on stage links and to the data-parallel groups
# (across the slow link) as the agents count them, and the interfaces' htb
# class counters for the same links (IP and TCP headers and ACKs
# included); the mean step time; the median step's part in the data-
# parallel sync (over every step); validation loss at the end of the
# budget; and the wall time (from the plan to the last stage's report) at
# which the validation loss first reached (within --tolerance) the first mode's (the
# baseline's) final value, and the worst final value of all modes (a loss
# every mode reaches: the speedup to it against the baseline's time).  A
# table, a JSON line per mode ({"bench":"wan-mode"}) and a summary
# ({"bench":"wan"}) with the issue's targets.  Needs root; exits 77 saying
# why when the machine cannot build the network.  Asserts nothing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/net.sh"
. "$here/fleet.sh"

steps_opt="" modes_opt="" keep="" extend=2 tolerance=0.001 config=$here/wan.json
while [ $# -gt 0 ]; do
    case $1 in
        --server) FLEET_SERVER=$2; shift 2 ;;
        --agent) FLEET_AGENT=$2; shift 2 ;;
        --steps) steps_opt=$2; shift 2 ;;
        --modes) modes_opt=$2; shift 2 ;;
        --extend) extend=$2; shift 2 ;;
        --tolerance) tolerance=$2; shift 2 ;;
        --json) FLEET_JSON=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        -*) echo "bench-wan: unknown option $1" >&2; exit 2 ;;
        *) config=$1; shift ;;
    esac
done
fleet_check bench-wan

work=${keep:-$(mktemp -d /tmp/shoal-wan.XXXXXX)}
mkdir -p "$work"
chmod 711 "$work"
export SHOAL_DATA_ROOTS=$work   # the agents read the corpus from here (--data-roots)
trap 'fleet_down; [ -z "$keep" ] && rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
net_sweep
# The corpus: Debian's fortune cookies (the demo's; `make deps` installs
# them), which stay the same from one commit to the next, as the project's
# own text would not.
corpus=$work/fortunes.txt
for f in /usr/share/games/fortunes/*; do
    case $f in *.dat|*.u8|*/art|*/ascii-art) continue ;; esac
    [ -f "$f" ] && cat "$f"
done | tr -d '\r' > "$corpus"
[ -s "$corpus" ] || { echo "bench-wan: skipped: needs Debian's fortunes (make deps)"; exit 77; }

n=$(jq '.nodes | length' "$config")
echo "== bench-wan: $(jq -r .about "$config")"
fleet_up "$config" "$work/wan" || exit 1
echo "   links: $(api GET /v1/links | jq -c --argjson ids "$FLEET_IDS" --slurpfile c "$config" '
    [range(0; $ids | length) as $i | range(0; $ids | length) as $j | select($i != $j)
     | "\($c[0].nodes[$i].name)->\($c[0].nodes[$j].name) \(.bandwidth_gbps[.nodes | index($ids[$i])][.nodes | index($ids[$j])] * 1000 | floor) Mbit/s"]
     | join(", ")')"

# class_bytes: "host peer bytes" for every host's htb class to every peer:
# what its interface sent to that peer (IP packets whole), cumulative.
class_bytes() {
    local i
    for i in $(seq 0 $((n - 1))); do
        tc -n "${NET_NS[$i]}" -s class show dev eth0 | awk -v h="$i" '
            $1 == "class" { split($3, c, ":"); cls = c[2] + 0 }
            $1 == "Sent" && cls >= 100 { print h, cls - 100, $2 }'
    done
}
# cross_and_intra BEFORE AFTER: "cross intra" bytes sent between them,
# between hosts of different regions and of the same one.
cross_and_intra() {
    local regions
    regions=$(jq -r '[.nodes[].region] | join(" ")' "$config")
    join <(awk '{ print $1 "-" $2, $3 }' "$1" | sort) <(awk '{ print $1 "-" $2, $3 }' "$2" | sort) |
        awk -v regions="$regions" 'BEGIN { split(regions, r, " ") }
            { split($1, hp, "-"); d = $3 - $2; if (r[hp[1] + 1] != r[hp[2] + 1]) x += d; else y += d }
            END { printf "%d %d\n", x, y }'
}

modes=${modes_opt:-$(jq -r '[.modes[].name] | join(",")' "$config")}
steps=${steps_opt:-$(jq -r .job.training.steps "$config")}
plan=$(jq -c --argjson ids "$FLEET_IDS" '.nodes as $h | {stages: [.plan[] | {nodes: [.[] as $name
    | $ids[$h | map(.name) | index($name)]]}]}' "$config")

# run_mode MODE STEPS: trains the job under MODE for STEPS steps on the
# plan; sets ROW to its JSON line (against $target, the baseline's final
# validation loss, once known).
run_mode() {
    local mode=$1 steps=$2 comm job J tc_cross tc_intra times sync_part
    comm=$(jq -c --arg m "$mode" '.modes[] | select(.name == $m) | .communication' "$config")
    [ -n "$comm" ] || { echo "bench-wan: no mode $mode in $config" >&2; exit 2; }
    # A shorter budget (--steps) keeps the warm-up, the evaluations and the
    # inner phases within it.
    job=$(jq -c --arg m "$mode" --arg data "$corpus" --argjson steps "$steps" --argjson comm "$comm" '.job
        | .name = "wan-\($m)" | .training.steps = $steps | .data = {path: $data, format: "text"}
        | .training.warmup_steps = ([.training.warmup_steps, $steps] | min)
        | .validation.eval_interval = ([.validation.eval_interval, $steps] | min)
        | .communication = $comm
        | if $comm.inner_steps then .communication.inner_steps = ([$comm.inner_steps, $steps] | min) else . end' "$config")
    class_bytes > "$work/before"
    J=$(api POST /v1/jobs "$job" | jq -r '.id // empty')
    [ -n "$J" ] && api POST "/v1/jobs/$J/plan" "$plan" > /dev/null || { echo "bench-wan: mode $mode was refused" >&2; exit 1; }
    job_done() { case $(api GET "/v1/jobs/$J" | jq -r .state) in succeeded|failed|cancelled) return 0 ;; esac; return 1; }
    wait_until $((300 + 30 * steps)) job_done
    class_bytes > "$work/after"
    read -r tc_cross tc_intra <<< "$(cross_and_intra "$work/before" "$work/after")"
    # Wall time of each step: the plan's creation to the last stage's last report of it.
    times=$(fleet_sql "SELECT coalesce(json_agg(json_build_array(t.step, t.s) ORDER BY t.step), '[]')
        FROM (SELECT s.step, extract(epoch FROM max(s.reported_at) - p.created_at)::float8 AS s
              FROM job_steps s JOIN jobs j ON j.id = s.job_id JOIN plans p ON p.job_id = j.id AND p.epoch = j.plan_epoch
              WHERE s.job_id = $J AND s.stage = j.stages - 1 GROUP BY s.step, p.created_at) t")
    # The part of the tasklets' step time spent in the data-parallel sync, over every step.
    sync_part=$(fleet_sql "SELECT coalesce(sum(allreduce_s) / nullif(sum(iteration_s), 0), 0) FROM job_steps WHERE job_id = $J")
    ROW=$(api GET "/v1/jobs/$J" | jq -c --arg mode "$mode" --argjson comm "$comm" --argjson times "$times" \
        --argjson sync_part "$sync_part" \
        --argjson cross "$tc_cross" --argjson intra "$tc_intra" --argjson target "${target:-null}" --argjson tol "$tolerance" '
        (.spec.training.steps) as $steps
        | ($times | map({key: (.[0] | tostring), value: .[1]}) | from_entries) as $at
        | ($times | last | .[1]) as $wall
        | [.progress.val_losses[] | . + [$at[.[0] | tostring]]] as $curve
        | ($target // .progress.val_loss) as $goal
        | {bench: "wan-mode", mode: $mode, state, communication: $comm, steps: (.progress.step + 1),
           wall_s: $wall, step_s: (($wall - $times[0][1]) / ($steps - 1)),
           sync_part: $sync_part,
           stage_link_bytes_per_step: .traffic.stage_link_bytes_per_step,
           sync_bytes_per_step: .traffic.sync_bytes_per_step,
           iface_intra_bytes_per_step: ($intra / $steps), iface_cross_bytes_per_step: ($cross / $steps),
           final_val_loss: .progress.val_loss, val_curve: $curve,
           target_val_loss: $goal, reach_tolerance: $tol,
           time_to_target_s: ([$curve[] | select(.[1] <= $goal * (1 + $tol)) | .[2]] | first)}')
}

rows="[]" target=""
for mode in ${modes//,/ }; do
    run_mode "$mode" "$steps"
    row=$ROW
    # A mode that misses the baseline's final validation loss within the
    # budget trains again for --extend times as many steps (its schedule
    # stretched accordingly): how long it takes to get there, if it does.
    if [ -n "$target" ] && [ "$(printf '%s' "$row" | jq .time_to_target_s)" = null ] &&
       awk -v e="$extend" 'BEGIN { exit !(e > 1) }'; then
        run_mode "$mode" "$(awk -v s="$steps" -v e="$extend" 'BEGIN { printf "%d", s * e }')"
        row=$(jq -c --argjson x "$ROW" '.extended = ($x | {steps, wall_s, final_val_loss, val_curve, time_to_target_s})' <<< "$row")
    fi
    emit "$row"
    [ -n "$target" ] || target=$(printf '%s' "$row" | jq .final_val_loss)
    rows=$(jq -c --argjson r "$row" '. + [$r]' <<< "$rows")
done

printf '%s' "$rows" | jq -r '
    def mb: . / 1e6 * 100 | round / 100;
    def s: . * 100 | round / 100;
    def reached: if .time_to_target_s then (.time_to_target_s | s | tostring) + " s" else "not reached" end;
    "   mode              step s  sync part  stage MB/step (iface)  cross MB/step (iface)  final val  to baseline loss",
    (.[] | "   \(.mode)\t\(.step_s | s)\t\(.sync_part * 100 | round)%\t\(.stage_link_bytes_per_step | mb) (\(.iface_intra_bytes_per_step | mb))\t\(.sync_bytes_per_step | mb) (\(.iface_cross_bytes_per_step | mb))\t\(.final_val_loss * 1e4 | round / 1e4)\t\(reached)\(if .extended then " (\(.extended.steps) steps: \(.extended | reached))" else "" end)")'
emit "$(jq -nc --argjson rows "$rows" '
    ($rows[0]) as $b
    | def m($k): $rows | map(select(.mode == $k)) | .[0];
    # the loss every mode reaches (the worst final one) and when each got there
    ($rows | map(.final_val_loss) | max) as $common
    | def reach($r): [$r.val_curve[] | select(.[1] <= $common) | .[2]] | first;
    {bench: "wan", baseline: $b.mode, baseline_wall_s: $b.wall_s, baseline_sync_part: $b.sync_part,
     common_val_loss: $common,
     baseline_final_val_loss: $b.final_val_loss,
     int8_activation_bytes_ratio: (if m("int8") then $b.stage_link_bytes_per_step / m("int8").stage_link_bytes_per_step else null end),
     int8_val_loss_rel: (if m("int8") then (m("int8").final_val_loss - $b.final_val_loss) / $b.final_val_loss else null end),
     bf16_val_loss_rel: (if m("bf16") then (m("bf16").final_val_loss - $b.final_val_loss) / $b.final_val_loss else null end),
     modes: [$rows[] | {mode, H: (.communication.inner_steps // 1),
                        cross_bytes_cut: ($b.sync_bytes_per_step / .sync_bytes_per_step),
                        iface_cross_bytes_cut: ($b.iface_cross_bytes_per_step / .iface_cross_bytes_per_step),
                        iface_over_agents: (.iface_cross_bytes_per_step / .sync_bytes_per_step),
                        speedup: ($b.step_s / .step_s),
                        time_to_target_fraction: ((.time_to_target_s // .extended.time_to_target_s)
                                                  | if . then . / $b.wall_s else null end),
                        extended_steps: .extended.steps,
                        time_to_common_loss_speedup: (reach($b) / reach(.)),
                        final_val_loss_rel: ((.final_val_loss - $b.final_val_loss) / $b.final_val_loss)}]}')"
