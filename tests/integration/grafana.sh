# grafana.sh - checks the Grafana dashboard against a live server's /metrics
# (source after lib.sh; test_metrics.sh runs it on a scrape where every
# family has samples).
#
# check_dashboard DASHBOARD_JSON METRICS_FILE: one check each that
# - the dashboard loads, is provisioned by uid, and queries only the data
#   source with uid "prometheus";
# - every query (panel targets and template variables) names at least one
#   shoal_* metric, and every metric it names is a family the server serves
#   (histograms by their _bucket/_sum/_count series): a renamed metric fails;
# - every label a query uses (in a selector, by/without, a legend's {{label}},
#   label_values) is on a sample of one of the metrics it names: a renamed
#   label fails;
# - every expression parses as PromQL: promtool check rules on a rules file
#   with each one as a recording rule (Grafana's $variables replaced first).

# grafana_families METRICS_FILE: one "family type" line per # TYPE line.
grafana_families() {
    awk '/^# TYPE / { print $3, $4 }' "$1"
}

# grafana_labels METRICS_FILE FAMILY: the label names on the family's samples
# (a histogram's _bucket, _sum and _count included), one per line.
grafana_labels() {
    FAM=$2 awk 'BEGIN { f = ENVIRON["FAM"] }
        /^#/ { next }
        { name = $0; sub(/[{ ].*/, "", name)
          if (name != f && name != f "_bucket" && name != f "_sum" && name != f "_count") next
          if (!match($0, /\{.*\}/)) next
          ls = substr($0, RSTART + 1, RLENGTH - 2)
          while (match(ls, /[a-zA-Z_][a-zA-Z0-9_]*="/)) {
              print substr(ls, RSTART, RLENGTH - 2)
              ls = substr(ls, RSTART + RLENGTH)
              # skip the quoted value (escaped quotes included)
              if (match(ls, /^([^"\\]|\\.)*"/)) ls = substr(ls, RLENGTH + 1)
          } }' "$1" | sort -u
}

# grafana_family NAME METRICS_FILE: the family NAME belongs to (NAME, or the
# histogram it is a _bucket, _sum or _count of); empty if none is served.
grafana_family() {
    local base
    if grafana_families "$2" | grep -q "^$1 "; then echo "$1"; return; fi
    base=$(printf '%s' "$1" | sed -E 's/_(bucket|sum|count)$//')
    if [ "$base" != "$1" ] && grafana_families "$2" | grep -q "^$base histogram$"; then echo "$base"; fi
}

check_dashboard() {
    local dash=$1 metrics=$2 bad="" q fam m l labels used rules lint rc n
    if ! jq -e '.uid == "shoal" and (.schemaVersion | type == "number") and (.panels | length > 0)' "$dash" >/dev/null 2>&1; then
        fail "grafana: $dash loads, with uid shoal, a schemaVersion and panels"
        return
    fi
    ok "grafana: the dashboard loads, with uid shoal, a schemaVersion and panels"
    check "grafana: every query and variable uses the data source uid prometheus" \
        "$(jq -r '[.. | objects | select(has("targets")) | .targets[] | .datasource.uid]
                  + [.. | objects | select(has("gridPos") and .type != "row") | .datasource.uid]
                  + [.templating.list[] | .datasource.uid] | unique | join(",")' "$dash")" prometheus

    # One query per line: "EXPR<TAB>LEGEND"; a variable's label_values(METRIC, LABEL)
    # becomes "METRIC<TAB>{{LABEL}}" so its label is checked the same way.
    jq -r '[.. | objects | select(has("expr")) | [.expr, (.legendFormat // "")]]
           + [.templating.list[] | .definition | capture("label_values\\((?<m>[a-zA-Z_:][a-zA-Z0-9_:]*), *(?<l>[a-zA-Z_]+)\\)")
              | [.m, "{{" + .l + "}}"]]
           | .[] | @tsv' "$dash" > "$WORK/dashboard.queries"
    n=$(wc -l < "$WORK/dashboard.queries")
    while IFS="$(printf '\t')" read -r q legend; do
        names=$(printf '%s\n' "$q" | grep -oE 'shoal_[a-z0-9_]+' | sort -u)
        if [ -z "$names" ]; then bad="$bad; no shoal_* metric in: $q"; continue; fi
        labels=""
        for m in $names; do
            fam=$(grafana_family "$m" "$metrics")
            if [ -z "$fam" ]; then bad="$bad; $m is not served (in: $q)"; continue; fi
            labels="$labels $(grafana_labels "$metrics" "$fam" | tr '\n' ' ')"
        done
        # Labels in selectors ({l="v", l=~"v"}), by/without (...), and the legend's {{l}}.
        used=$( { printf '%s\n' "$q" | grep -oE '\{[^}]*\}' | grep -oE '[a-zA-Z_][a-zA-Z0-9_]*[[:space:]]*(=~|!~|!=|=)' \
                      | grep -oE '^[a-zA-Z_][a-zA-Z0-9_]*'
                  printf '%s\n' "$q" | grep -oE '(by|without)[[:space:]]*\([^)]*\)' | sed -E 's/^[a-z]+[[:space:]]*\(//; s/\)$//' \
                      | tr ',' '\n' | tr -d ' '
                  printf '%s\n' "$legend" | grep -oE '\{\{ *[a-zA-Z_][a-zA-Z0-9_]* *\}\}' | tr -d '{} '
                } | grep -v '^$' | sort -u)
        for l in $used; do
            case " $labels " in *" $l "*) ;; *) bad="$bad; label $l is on none of $(echo $names) (in: $q)";; esac
        done
    done < "$WORK/dashboard.queries"
    check "grafana: each of the $n queries names served families and their labels" "${bad#; }" ""

    # PromQL for real: every expression as a recording rule.  Grafana's
    # interval variables become 5m, any other $variable a regex that matches all.
    rules="$WORK/dashboard.rules.yml"
    jq '{groups: [{name: "dashboard", rules: [.. | objects | select(has("expr")) | .expr
           | gsub("\\$__(rate_interval|interval|range)"; "5m")
           | gsub("\\$\\{?[a-zA-Z_][a-zA-Z0-9_]*(:[a-z]+)?\\}?"; ".*")]
           | to_entries | map({record: "dashboard:query_\(.key)", expr: .value})}]}' "$dash" > "$rules"
    if command -v promtool >/dev/null 2>&1; then
        lint=$(promtool check rules "$rules" 2>&1); rc=$?
        if [ "$rc" = 0 ]; then ok "grafana: every expression parses as PromQL (promtool check rules)"
        else fail "grafana: every expression parses as PromQL (promtool check rules)" "$lint"; fi
    else
        fail "grafana: every expression parses as PromQL" "promtool is missing: make deps installs Debian's prometheus package"
    fi
}
