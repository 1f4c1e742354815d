#!/bin/sh
# run.sh - runs every test suite and prints one closing line "N passed, N failed".
# usage: tests/run.sh BUILD_DIR   (e.g. build/san: its bin/ and tests/ are used)
#
# Unit tests are cmocka binaries (build/*/tests/test_*); integration suites are
# tests/integration/test_*.sh, which print "ok - ..." / "not ok - ..." lines.
# A suite that crashes or exits non-zero counts as a failure even if its
# lines said ok.  Every answer the suites get is logged (SHOAL_RESPONSE_LOG)
# and, after them, checked against server/openapi.yaml (tests/api/check.sh).
set -u
build=${1:?usage: tests/run.sh BUILD_DIR}
top=$(cd "$(dirname "$0")/.." && pwd)
passed=0
failed=0
log=$(mktemp)
responses=$(mktemp)
beside=$(mktemp -d)
trap 'rm -rf "$log" "$responses" "$beside"' EXIT
trap 'exit 130' INT TERM   # (a trap that only cleaned up would let the loop go on)

# Suites that mostly wait run one after another beside the others from the
# start, each with its own log and response log, and are counted at the
# end: a database outage's timeouts (about 70 s, 8 s of them CPU) and bad
# input's deadlines (about 40 s, 7 s of CPU).
BESIDE="test_db_outage test_bad_input"

# tally NAME RC [LOG]: counts the ok / not ok lines in LOG (default $log)
# of a script that exited RC; non-zero without a "not ok" line is one failure.
tally() {
    out=${3:-$log}
    cat "$out"
    p=$(grep -c '^ok - ' "$out")
    f=$(grep -c '^not ok - ' "$out")
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$2" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "not ok - $1 exited with status $2"
        failed=$((failed + 1))
    fi
}

# ASan/UBSan: stop at the first error so it cannot scroll by unnoticed.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:halt_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# integration NAME LOG RESPONSES: runs tests/integration/NAME.sh; its rc.
integration() {
    SHOAL_SERVER="$top/$build/bin/shoal-server" SHOAL_AGENT="$top/$build/bin/shoal-agent" \
        SHOAL_RESPONSE_LOG="$3" bash "$top/tests/integration/$1.sh" >"$2" 2>&1
}

(for name in $BESIDE; do
     began=$(date +%s)
     integration "$name" "$beside/$name.log" "$beside/$name.responses"
     echo $? >"$beside/$name.rc"
     echo $(($(date +%s) - began)) >"$beside/$name.took"
 done) &

for t in "$top/$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    echo "== unit $name"
    "$t" >"$log" 2>&1
    rc=$?
    cat "$log"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
    passed=$((passed + ${p:-0}))
    failed=$((failed + ${f:-0}))
    if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then
        echo "not ok - $name exited with status $rc"
        failed=$((failed + 1))
    fi
done

for s in "$top"/tests/integration/test_*.sh; do
    name=$(basename "$s" .sh)
    case " $BESIDE " in *" $name "*) continue;; esac
    echo "== integration $name"
    began=$(date +%s)
    integration "$name" "$log" "$responses"
    tally "$name" $?
    echo "-- $name took $(($(date +%s) - began)) s"   # make test's budget is about 15 minutes in all
done

wait
for name in $BESIDE; do
    echo "== integration $name (run beside the others)"
    tally "$name" "$(cat "$beside/$name.rc" 2>/dev/null || echo 1)" "$beside/$name.log"
    cat "$beside/$name.responses" >>"$responses" 2>/dev/null
    echo "-- $name took $(cat "$beside/$name.took" 2>/dev/null || echo '?') s"
done

echo "== api openapi"
sh "$top/tests/api/check.sh" "$top/server/openapi.yaml" "$responses" >"$log" 2>&1
tally api $?

echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
