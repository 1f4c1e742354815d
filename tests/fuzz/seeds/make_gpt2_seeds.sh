#!/bin/sh
# make_gpt2_seeds.sh - writes the seed corpora of fuzz_gpt2_llmc and
# fuzz_safetensors: small files (V=5, T=4, C=4, NH=2, L=2) that
# tests/unit/test_model_io.c writes with its own writers (llm.c fp32
# unpadded and bf16, safetensors as the hub holds GPT-2 and with the
# prefix, F16 and BF16, each also in fuzz_safetensors' two-part form) and
# with kernels' (the llm.c and safetensors exports, a config.json), plus
# the hub's gpt2 config.json, trimmed.
#
#   sh tests/fuzz/seeds/make_gpt2_seeds.sh      (from the repository root)
set -eu
make -s SAN=1 build/san/tests/test_model_io
mkdir -p tests/fuzz/corpus/fuzz_gpt2_llmc tests/fuzz/corpus/fuzz_safetensors
SHOAL_WRITE_GPT2_SEEDS=tests/fuzz/corpus build/san/tests/test_model_io > /dev/null
