#!/usr/bin/env bash
# bench_kernels.sh - make bench-kernels: bench_kernels, then (where a python3
# has torch: Debian's python3-torch is an optional bench dependency)
# bench_kernels_torch.py on the same device, configs, steps and threads
# (OMP_NUM_THREADS, else every core, for both), then the two side by side:
# ms per forward+backward and PyTorch's time over shoal's (above 1: shoal is
# faster), as a table and one JSON line.  A benchmark: nothing is asserted.
# usage: tests/bench/bench_kernels.sh BENCH_KERNELS [--device D] [--steps N] [--only NAME]
#                                     [--peak-tflops X]
set -u
bin=${1:?usage: bench_kernels.sh BENCH_KERNELS [ARGS...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$bin" "$@" | tee "$out/shoal"
rc=${PIPESTATUS[0]}
py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    if "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "# no python3 with torch (Debian: python3-torch): no PyTorch comparison"
    exit "$rc"
fi
echo
"$py" "$here/bench_kernels_torch.py" "$@" | tee "$out/torch"

echo
grep -h '^{' "$out/shoal" "$out/torch" | jq -rs '
    . as $all
    | def ms(impl; c): ($all | map(select(.impl == impl and .config == c and .ms != null)) | first | .ms) // null;
      def r2: if . == null then null else (. * 100 | round / 100) end;
      def ratio(a; b): if a == null or b == null then null else (a / b | r2) end;
      ($all | map(select(.impl == "torch-eager")) | first) as $t
    | [$all | map(select(.impl == "shoal")) | .[] | .config as $c
       | {config: $c, shoal_ms: (.ms | r2), torch_eager_ms: (ms("torch-eager"; $c) | r2),
          torch_sdpa_ms: (ms("torch-sdpa"; $c) | r2)}
       | .eager_over_shoal = ratio(.torch_eager_ms; .shoal_ms)
       | .sdpa_over_shoal = ratio(.torch_sdpa_ms; .shoal_ms)] as $rows
    | "shoal beside PyTorch: device \($t.device // "?"), torch \($t.dtype // "?")"
      + (if $t.threads then ", \($t.threads) threads" else "" end) + " (ms per forward+backward; ratio: PyTorch over shoal)",
      "config                 shoal ms  torch-eager ms   ratio  torch-sdpa ms   ratio",
      ($rows[] | [.config, .shoal_ms, .torch_eager_ms, .eager_over_shoal, .torch_sdpa_ms, .sdpa_over_shoal]
               | map(if . == null then "-" else tostring end)
               | "\(.[0] | . + " " * (20 - length)) \(.[1] | " " * (10 - length) + .) \(.[2] | " " * (15 - length) + .) \(.[3] | " " * (7 - length) + .) \(.[4] | " " * (14 - length) + .) \(.[5] | " " * (7 - length) + .)"),
      ({bench: "kernels_vs_torch", device: $t.device, dtype: $t.dtype, threads: $t.threads, rows: $rows} | tojson)'
exit "$rc"
