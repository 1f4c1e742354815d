#!/bin/sh
# run.sh - runs the libFuzzer targets of tests/fuzz: each target's crash
# regressions (regress/NAME/) and seed corpus (corpus/NAME/) once, then
# libFuzzer on a copy of the corpus for a while.  One line per step, "ok - ..."
# or "not ok - ..." (with the report after it, lines starting "# "); exits 1
# when any step failed: a crash, a leak, a sanitizer report, a timeout or a
# broken promise of the target.
#
# usage: tests/fuzz/run.sh [--seconds N] [--jobs J] [--keep DIR] [--crashes DIR] BIN_DIR [NAME...]
#   BIN_DIR      where the fuzz_* binaries are (make fuzz-build puts them in $(FUZZ_BUILD)/bin)
#   NAME         the targets to run [every tests/fuzz/fuzz_*.c]
#   --seconds N  fuzzing time per target, s; 0 replays only [60]
#   --jobs J     targets fuzzed at once [1]
#   --keep DIR   keep the grown corpus in DIR/corpus/NAME (a later run starts from
#                it) and crash inputs in DIR/crashes/NAME [a temporary directory]
#   --crashes DIR  crash inputs in DIR/NAME instead (the corpus stays temporary)
#
# Each target's libFuzzer flags are in tests/fuzz/NAME.options (one line;
# -max_len=4096 when there is none).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
seconds=60
jobs=1
keep=""
crash_root=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
        --jobs) jobs=${2:?--jobs needs a value}; shift 2 ;;
        --keep) keep=${2:?--keep needs a directory}; shift 2 ;;
        --crashes) crash_root=${2:?--crashes needs a directory}; shift 2 ;;
        *) break ;;
    esac
done
bindir=${1:?usage: tests/fuzz/run.sh [--seconds N] [--jobs J] [--keep DIR] BIN_DIR [NAME...]}
shift
case "$bindir" in /*) ;; *) bindir="$PWD/$bindir" ;; esac
case "$keep" in /*|"") ;; *) keep="$PWD/$keep" ;; esac
case "$crash_root" in /*|"") ;; *) crash_root="$PWD/$crash_root" ;; esac
cd "$top" || exit 1
if [ $# -eq 0 ]; then
    for src in tests/fuzz/fuzz_*.c; do
        set -- "$@" "$(basename "$src" .c)"
    done
fi
tmp=$(mktemp -d /tmp/shoal-fuzz.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
work=${keep:-$tmp}
[ -n "$keep" ] && [ -z "$crash_root" ] && crash_root="$keep/crashes"

# ASan: leaks are errors; UBSan: the first report stops the run (the
# objects are built with -fno-sanitize-recover=undefined as well).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

options() {
    if [ -f "tests/fuzz/$1.options" ]; then
        cat "tests/fuzz/$1.options"
    else
        echo "-max_len=4096"
    fi
}

# report LOG: the end of a failed run, as comment lines.
report() {
    grep -v -e '^#[0-9]' -e '^INFO: ' "$1" | tail -n 40 | sed 's/^/# /'
}

# replay NAME: every regression input and seed, once.
replay() {
    name=$1
    # shellcheck disable=SC2046
    set -- $(ls -d "tests/fuzz/regress/$name"/* "tests/fuzz/corpus/$name"/* 2>/dev/null)
    if [ $# -eq 0 ]; then
        echo "ok - $name: no regression inputs or seeds to replay"
        return 0
    fi
    # shellcheck disable=SC2046
    if "$bindir/$name" $(options "$name") "$@" > "$tmp/$name.replay" 2>&1; then
        echo "ok - $name: $# regression inputs and seeds replay cleanly"
    else
        echo "not ok - $name: a regression input or seed fails"
        report "$tmp/$name.replay"
        return 1
    fi
}

# fuzz NAME: libFuzzer for $seconds on the kept (or a fresh) copy of the corpus.
fuzz() {
    name=$1
    corpus="$work/corpus/$name"
    crashes="${crash_root:-$tmp/crashes}/$name"
    log="$tmp/$name.fuzz"
    mkdir -p "$corpus" "$crashes"
    [ -d "tests/fuzz/corpus/$name" ] && cp -n "tests/fuzz/corpus/$name"/* "$corpus"/ 2>/dev/null
    # shellcheck disable=SC2046
    timeout $((seconds + 120)) "$bindir/$name" $(options "$name") -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" > "$log" 2>&1
    rc=$?
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -n 1)
    units=$(ls "$corpus" | wc -l)
    if [ "$rc" -eq 0 ]; then
        echo "ok - $name: ${seconds} s of fuzzing, ${rate:-?} exec/s, ${cov:-cov: ?}, corpus $units"
    else
        echo "not ok - $name: libFuzzer stopped with status $rc after ${rate:-?} exec/s${crash_root:+; the input is in $crashes}"
        report "$log"
        return 1
    fi
}

failed=0
for name in "$@"; do
    if [ ! -x "$bindir/$name" ]; then
        echo "not ok - $name: $bindir/$name is not built (make fuzz-build)"
        failed=1
        continue
    fi
    replay "$name" || failed=1
done
if [ "$seconds" -gt 0 ]; then
    # Batches of $jobs targets at once; each prints its lines when it is done.
    running=0
    for name in "$@"; do
        [ -x "$bindir/$name" ] || continue
        (fuzz "$name" > "$tmp/$name.out"; echo $? > "$tmp/$name.rc") &
        running=$((running + 1))
        if [ "$running" -ge "$jobs" ]; then
            wait
            running=0
        fi
    done
    wait
    for name in "$@"; do
        [ -f "$tmp/$name.out" ] || continue
        cat "$tmp/$name.out"
        [ "$(cat "$tmp/$name.rc")" -eq 0 ] || failed=1
    done
fi
exit "$failed"
