#!/usr/bin/env bash
# test_kernels_host.sh - the CUDA backend's own kernels (kernels/cuda_*.cu),
# compiled as host code against the host emulation of CUDA and cuBLAS
# (tests/gpu/host), checked against the cpu oracle by test_kernels_gpu's
# sources at small shapes, under the sanitizers of the build under test.
# What the emulation cannot show is in tests/gpu/host/README.md.
set -u
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$(dirname "$(dirname "${SHOAL_AGENT:?set SHOAL_AGENT to the shoal-agent binary}")")" && pwd)
T="$BUILD/tests/gpu/test_kernels_host"

if [ ! -x "$T" ]; then
    fail "kernels on the emulated device: the test is built" "no $T; build it with: make SAN=1 ${T#"$TOP"/}"
    exit 1
fi
# The cpu oracle's OpenMP threads sleep while the emulation runs.
OMP_WAIT_POLICY=passive "$T" --small > "$WORK/out" 2> "$WORK/err"
rc=$?
grep -E '^(ok|not ok) - ' "$WORK/out" | sed 's/^\(not \)\{0,1\}ok - /&emulated cuda: /'
check "test_kernels_host --small exits 0" "$rc" 0
check "it ran every check (the count of a GPU run)" "$(grep -cE '^(ok|not ok) - ' "$WORK/out")" 411
check "the emulation reported no fault" "$(grep -c '^hcu: ' "$WORK/err")" 0
if [ "$rc" -ne 0 ]; then
    grep -E '^(hcu|==[0-9]+==|SUMMARY)' "$WORK/err" | head -n 20
fi

# The products without cuBLASLt's epilogues (SHOAL_CUDA_LT=0): the bias and
# GELU kernels of ours, which a device uses where cuBLASLt has no kernel.
SHOAL_CUDA_LT=0 OMP_WAIT_POLICY=passive "$T" --small --only tiny-whole \
    > "$WORK/out" 2> "$WORK/err"
rc=$?
grep -E '^(ok|not ok) - ' "$WORK/out" | sed 's/^\(not \)\{0,1\}ok - /&emulated cuda, no cuBLASLt: /'
check "test_kernels_host without cuBLASLt exits 0" "$rc" 0
check "it ran the case's checks" "$(grep -cE '^(ok|not ok) - ' "$WORK/out")" 19
check "the emulation reported no fault" "$(grep -c '^hcu: ' "$WORK/err")" 0
[ "$FAILS" -eq 0 ]
