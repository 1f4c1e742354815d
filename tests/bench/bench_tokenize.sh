#!/usr/bin/env bash
# bench_tokenize.sh - make bench-tokenize: shoal's BPE encoder beside the
# npm tiktoken package (Rust compiled to WASM, one thread) on the same
# text, for GPT-2's and Llama 3's vocabularies: MB/s of `shoal-agent
# tokenize` on 1 and 2 threads (documents of ~4 KB, shards written,
# tokenizer load included) and of tiktoken's encode_ordinary, as a table
# and one JSON line.  The text: tests/tokenize/corpus.py's fortunes,
# translations and generated scripts, repeated to MB megabytes.  A
# benchmark: nothing is asserted.
# usage: tests/bench/bench_tokenize.sh SHOAL_AGENT [MB]
set -u
agent=$(realpath "${1:?usage: bench_tokenize.sh SHOAL_AGENT [MB]}")
mb=${2:-24}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

node "$here/../tokenize/oracle.mjs" files "$work/tok" || exit 1
python3 "$here/../tokenize/corpus.py" "$work/corpus" 3
python3 - "$work" "$mb" <<'PY'
import json, os, sys
work, mb = sys.argv[1], float(sys.argv[2])
text = "".join(open(os.path.join(work, "corpus", f), encoding="utf-8", errors="replace").read()
               for f in ("fortunes.txt", "locales.txt", "scripts.txt"))
reps = int(mb * 1e6 // len(text.encode())) + 1
whole = text * reps
with open(os.path.join(work, "text.txt"), "w", encoding="utf-8") as f:
    f.write(whole)
with open(os.path.join(work, "docs.jsonl"), "w") as f:
    for i in range(0, len(whole), 4096):
        f.write(json.dumps({"text": whole[i:i + 4096]}) + "\n")
PY
bytes=$(stat -c %s "$work/text.txt")
now() { date +%s.%N; }
# shoal_mbs FILE THREADS: MB/s of the whole command
shoal_mbs() {
    rm -rf "$work/out"
    local t0; t0=$(now)
    "$agent" tokenize --tokenizer "$work/tok/$1" --out "$work/out" --threads "$2" --val-fraction 0 \
        "$work/docs.jsonl" > /dev/null 2> "$work/err" || { cat "$work/err" >&2; exit 1; }
    awk -v b="$bytes" -v a="$t0" -v z="$(now)" 'BEGIN { printf "%.2f", b / 1e6 / (z - a) }'
}
echo
echo "BPE encoding, $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') MB of mixed text (prose, 200 languages, scripts), MB/s"
printf '%-10s %14s %14s %16s %10s %10s\n' vocab shoal_1thread shoal_2threads tiktoken_1thread "1t/tiktoken" "2t/1t"
JSON=""
for row in "gpt2 gpt2_tokenizer.bin gpt2" "llama3 llama3.tiktoken llama3"; do
    set -- $row
    one=$(shoal_mbs "$2" 1)
    two=$(shoal_mbs "$2" 2)
    tik=$(node "$here/../tokenize/oracle.mjs" time "$work/tok" "$3" "$work/text.txt" 1)
    r1=$(awk -v a="$one" -v b="$tik" 'BEGIN { printf "%.2f", a / b }')
    r2=$(awk -v a="$two" -v b="$one" 'BEGIN { printf "%.2f", a / b }')
    printf '%-10s %14s %14s %16s %10s %10s\n' "$1" "$one" "$two" "$tik" "$r1" "$r2"
    JSON="$JSON{\"vocab\":\"$1\",\"shoal_1thread_mb_s\":$one,\"shoal_2threads_mb_s\":$two,\"tiktoken_mb_s\":$tik,\"shoal_over_tiktoken\":$r1,\"two_over_one\":$r2},"
done
echo "{\"bench\":\"tokenize\",\"mb\":$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }'),\"rows\":[${JSON%,}]}"
