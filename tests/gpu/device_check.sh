#!/usr/bin/env bash
# device_check.sh - the GPU checklist in one call, on a machine with a GPU
# and CUDA but none of shoal's Debian packages: make test-gpu's test, a 2x1
# training run of CUDA agents against CPU agents (tests/gpu/agent_train.sh),
# then bench_kernels beside PyTorch on the same GPU (when python3 has torch).
# usage: tests/gpu/device_check.sh BUNDLE.tar.xz OUT_DIR [PART...]
#   BUNDLE from tests/gpu/bundle.sh (built on a Debian machine with CUDA);
#   PARTs: test memcheck racecheck agent agent-llama pipeline bench torch torch-io profile
#   (default: all, in that order); memcheck and racecheck are the test's small
#   shapes under compute-sanitizer (out-of-bounds and uninitialised device
#   accesses; shared-memory hazards, as in flash attention's tiles);
#   agent-llama is agent's run for a tied Llama (GQA, SwiGLU, RoPE);
#   pipeline is make bench-gpu-pipeline (tests/gpu/pipeline_bench.sh: two
#   CUDA agents, a GPT-2-124M-sized job as 2 stages, per stage-link type,
#   beside bench_pipeline's kernels-only step);
#   profile is Nsight Compute's time per kernel over one xl-mid-b1 iteration
#   (ncu.csv: where the GPU time goes).
# Each part has its own time limit and log in OUT_DIR; a summary ends the output.
set -u
bundle=${1:?usage: device_check.sh BUNDLE.tar.xz OUT_DIR [PART...]}
out=${2:?usage: device_check.sh BUNDLE.tar.xz OUT_DIR [PART...]}
shift 2
parts=${*:-test memcheck racecheck agent agent-llama pipeline bench torch torch-io profile}
top=$(cd "$(dirname "$0")/../.." && pwd)
b=/tmp/shoal-bundle
mkdir -p "$b" "$out" && tar -C "$b" -xJf "$bundle" && chmod 755 "$b" || exit 1
pgbin=$(ls -d "$b"/pg/lib/postgresql/*/bin)
export PATH="$b/bin:$pgbin:$PATH"
# CUDA's libraries from this machine: the toolkit's, else a Python wheel's.
libpath=$b/lib
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    d=$(dirname "$(find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /opt /usr/local/lib \
                    -name "$l" 2>/dev/null | head -n 1)" 2>/dev/null)
    [ -n "$d" ] && [ "$d" != . ] && libpath="$libpath:$d" || echo "# $l not found on this machine"
done
export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The embedded Postgres refuses root; it runs as 'postgres'.
[ "$(id -u)" != 0 ] || id postgres >/dev/null 2>&1 || useradd -r -M -d /nonexistent postgres
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$out/gpu.txt"
missing=$(for f in "$b"/bin/*; do ldd "$f" | grep "not found"; done | sort -u)
[ -z "$missing" ] || echo "# missing libraries: $missing"

summary=""
part() {   # part NAME SECONDS COMMAND...: runs one part into OUT_DIR/NAME.log
    local name=$1 secs=$2 rc t0; shift 2
    case " $parts " in *" $name "*) ;; *) return 0;; esac
    echo "== $name: $*"
    t0=$(date +%s)
    timeout "$secs" "$@" > "$out/$name.log" 2>&1
    rc=$?
    tail -n 40 "$out/$name.log"
    summary="$summary$(printf '%-6s rc=%-3s %4ss  %s' "$name" "$rc" $(( $(date +%s) - t0 )) \
        "$(grep -c '^ok - ' "$out/$name.log") ok, $(grep -c '^not ok - ' "$out/$name.log") not ok")
"
}
part test 150 "$b/bin/test_kernels_gpu"
csan=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -n 1)
part memcheck 150 "${csan:-compute-sanitizer}" --tool memcheck --error-exitcode 1 "$b/bin/test_kernels_gpu" --small
part racecheck 150 "${csan:-compute-sanitizer}" --tool racecheck --racecheck-report hazard --error-exitcode 1 \
    "$b/bin/test_kernels_gpu" --small
part agent 150 env CURVES="$out/curves.txt" bash "$top/tests/gpu/agent_train.sh" "$b/bin/shoal-server" "$b/bin/shoal-agent" 40
part agent-llama 150 env MODEL='{"architecture":"llama","vocab_size":256,"context_length":128,"d_model":256,"heads":4,"kv_heads":2,"ffn_dim":688,"layers":4,"tie_embeddings":true}' \
    bash "$top/tests/gpu/agent_train.sh" "$b/bin/shoal-server" "$b/bin/shoal-agent" 40
part pipeline 300 bash "$top/tests/gpu/pipeline_bench.sh" "$b/bin/shoal-server" "$b/bin/shoal-agent" \
    "$b/bin/bench_pipeline" 20
part bench 150 "$b/bin/bench_kernels" --steps 10
part torch 120 env PYTHONUNBUFFERED=1 python3 "$top/tests/bench/bench_kernels_torch.py" --steps 10
# Like for like with bench_kernels, whose input and outputs cross to the host.
part torch-io 120 env PYTHONUNBUFFERED=1 python3 "$top/tests/bench/bench_kernels_torch.py" --steps 10 --host-io
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
part profile 150 "${ncu:-ncu}" --clock-control none --csv --print-summary per-kernel \
    --metrics gpu__time_duration.sum "$b/bin/bench_kernels" --only xl-mid-b1 --steps 1
echo "== summary"
printf '%s' "$summary"
