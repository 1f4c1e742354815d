#!/usr/bin/env bash
# test_fuzz.sh - the libFuzzer targets of tests/fuzz under ASan and UBSan:
# built with clang when missing or stale (make fuzz-build; make test builds
# only the gcc sanitizer tree), every crash regression and seed replayed,
# then each target fuzzed for FUZZ_TEST_SECONDS (6) on a throwaway copy of
# its corpus, two at a time.  A crash, a leak, a sanitizer report, a
# timeout or a broken promise of a target fails, and leaves the input in
# $FUZZ_BUILD/crashes/NAME; tests/fuzz/README.md says how to reproduce it.
#
# FUZZ_BUILD (build/fuzz) is where the objects and binaries go.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
build=${FUZZ_BUILD:-build/fuzz}
seconds=${FUZZ_TEST_SECONDS:-6}
cc=${FUZZ_CC:-clang}

if ! command -v "$cc" > /dev/null 2>&1; then
    echo "ok - fuzz # SKIP clang not installed"
    exit 0
fi
# libFuzzer itself comes with libclang-rt-dev, which clang only recommends.
probe=$(mktemp -d /tmp/shoal-fuzz-probe.XXXXXX)
trap 'rm -rf "$probe"' EXIT
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' \
    > "$probe/probe.c"
if ! "$cc" -fsanitize=fuzzer -o "$probe/probe" "$probe/probe.c" > /dev/null 2>&1; then
    echo "ok - fuzz # SKIP libFuzzer is not installed (Debian: libclang-rt-dev)"
    exit 0
fi

# A make of its own: not the caller's flags (make test's SAN=1 and the like).
if env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -j2 --no-print-directory fuzz-build FUZZ_BUILD="$build" \
        FUZZ_CC="$cc" > "$probe/build.log" 2>&1; then
    echo "ok - the fuzz targets build with $cc (-fsanitize=fuzzer,address,undefined)"
else
    echo "not ok - the fuzz targets do not build"
    tail -n 30 "$probe/build.log" | sed 's/^/# /'
    exit 1
fi

sh tests/fuzz/run.sh --seconds "$seconds" --jobs 2 --crashes "$build/crashes" "$build/bin"
