#!/bin/sh
# bundle.sh - packs the release binaries, the kernel tools, PostgreSQL, jq and
# the shared libraries they need into one tar.xz, for a GPU machine that has
# CUDA but not shoal's Debian packages (and cannot install any).
# usage: tests/gpu/bundle.sh OUT.tar.xz     (after: make all build/rel/tests/gpu/test_kernels_gpu
#                                            build/rel/bench/bench_kernels build/rel/bench/bench_pipeline)
# Unpacked into DIR it holds DIR/bin (shoal-*, kernel tools, jq, curl), DIR/pg
# (lib/postgresql/N/bin with its share/ beside it, where Postgres looks for it)
# and DIR/lib (every library ldd names, libjansson among them: the agent and
# test_kernels_gpu link models/, which reads JSON through it).
# tests/gpu/device_check.sh runs from it.
# Left out: glibc and the C++ runtime (the GPU machine has newer ones) and
# CUDA's own libraries, which must come from that machine's CUDA.
set -eu
out=${1:?usage: bundle.sh OUT.tar.xz}
top=$(cd "$(dirname "$0")/../.." && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pgver=$(ls /usr/lib/postgresql | sort -n | tail -n 1)
pgbin=/usr/lib/postgresql/$pgver/bin

mkdir -p "$stage/bin" "$stage/lib" "$stage/pg/lib/postgresql/$pgver/bin" "$stage/pg/share/postgresql"
for f in bin/shoal-server bin/shoal-agent bin/shoal-sched build/rel/tests/gpu/test_kernels_gpu \
         build/rel/bench/bench_kernels build/rel/bench/bench_pipeline; do
    cp "$top/$f" "$stage/bin/"
done
cp /usr/bin/jq /usr/bin/curl "$stage/bin/"
for t in initdb pg_ctl postgres psql pg_dump; do cp "$pgbin/$t" "$stage/pg/lib/postgresql/$pgver/bin/"; done
# The modules initdb and the server load; not the JIT (LLVM is 100 MB).
mkdir -p "$stage/pg/lib/postgresql/$pgver/lib"
for m in /usr/lib/postgresql/$pgver/lib/*.so; do
    case $(basename "$m") in llvmjit*) ;; *) cp "$m" "$stage/pg/lib/postgresql/$pgver/lib/";; esac
done
cp -r "/usr/share/postgresql/$pgver" "$stage/pg/share/postgresql/"

# Every library the executables and Postgres's modules load, but the system's own.
skip='^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64|linux-vdso|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.'
for f in "$stage"/bin/* "$stage"/pg/lib/postgresql/$pgver/bin/* "$stage"/pg/lib/postgresql/$pgver/lib/*.so; do
    ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
    printf '%s\n' "$name" | grep -Eq "$skip" || cp -L "$path" "$stage/lib/$name"
done
tar -C "$stage" -cJf "$out" .
echo "bundle: $out ($(du -h "$out" | cut -f1)), Postgres $pgver"
