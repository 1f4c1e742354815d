#!/usr/bin/env bash
# test_tokenize.sh - shoal's BPE encoder against outside tokenizers, id for
# id, and `shoal-agent tokenize` from text to shards.
#
# The oracles and the tokenizer files come from tests/tokenize's npm
# packages (tests/tokenize/oracle.mjs): tiktoken (Rust compiled to WASM)
# for GPT-2, cl100k_base, o200k_base and Llama 3's ranks, and
# @huggingface/tokenizers for a Llama 3 tokenizer.json, a SmolLM2-style
# one (Digits + ByteLevel), a Qwen2-style one (NFC first) and a
# DeepSeek-V3-style one (an empty Sequence normalizer, a Split of behavior
# Removed, inverted); llm.c's gpt2_tokenizer.bin must give GPT-2's
# ids.  The texts (tests/tokenize/corpus.py) are the fortunes, the
# translations under /usr/share/locale, generated words of many scripts and
# emoji, long runs of spaces and digits, and invalid UTF-8; and edges.txt,
# U+180E (not White_Space since Unicode 6.3, though PCRE2's \s holds it)
# beside spaces, letters, digits and punctuation, and Unicode's other spaces.
set -u
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
AGENT=${SHOAL_AGENT:?set SHOAL_AGENT to the shoal-agent binary}
ORACLE="node $TOP/tests/tokenize/oracle.mjs"
TOK=$WORK/tok
CORPUS=$WORK/corpus

$ORACLE files "$TOK" 2> "$WORK/err"
check "the oracle packages write the tokenizer files" "$? $(ls "$TOK" | wc -l)" "0 10"
check "tiktoken's files are the published ones (SHA-256 of cl100k_base, o200k_base, GPT-2)" \
    "$(sha256sum "$TOK/cl100k_base.tiktoken" "$TOK/o200k_base.tiktoken" "$TOK/gpt2.tiktoken" | cut -c1-16 | tr '\n' ' ')" \
    "223921b76ee99bde 446a9538cb6c348e 306cd27f03c1a714 "
python3 "$TOP/tests/tokenize/corpus.py" "$CORPUS" "${TOKENIZE_MB:-2}"
TEXTS="fortunes.txt locales.txt scripts.txt runs.txt invalid.bin"
check "the texts are written" "$(ls "$CORPUS" | wc -l)" 5
check "the translations hold several scripts (Cyrillic, CJK, Arabic)" \
    "$(grep -c -P '[\x{0400}-\x{04FF}]' "$CORPUS/locales.txt" | awk '{print ($1 > 0)}')$(grep -c -P '[\x{4E00}-\x{9FFF}]' "$CORPUS/locales.txt" | awk '{print ($1 > 0)}')$(grep -c -P '[\x{0600}-\x{06FF}]' "$CORPUS/locales.txt" | awk '{print ($1 > 0)}')" \
    "111"
# U+180E (e1 a0 8e) after one space, two, a tab, a newline; between letters,
# digits and punctuation; at the ends; and Unicode's White_Space beside it
MVS='\xe1\xa0\x8e'
printf "a${MVS} b  ${MVS}${MVS} x\t${MVS}1\n${MVS}\n  ${MVS}z 12${MVS}34 !${MVS}? ${MVS}  \n${MVS}\xe2\x80\x83 \xe3\x80\x80${MVS}\xe2\x80\xaf${MVS}a\xc2\xa0${MVS} ${MVS}" \
    > "$CORPUS/edges.txt"
TEXTS="$TEXTS edges.txt"

# same NAME FILE ORACLE_NAME: shoal's ids for every text equal the oracle's
# (one line of ids a text, each program started once)
same() {
    local name=$1 file=$2 oracle=$3 t texts=""
    for t in $TEXTS; do
        if [ "$oracle" = smol.json ]; then   # see oracle.mjs strip-numerics
            $ORACLE strip-numerics "$CORPUS/$t" "$WORK/$t.nn"
            texts="$texts $WORK/$t.nn"
        else
            texts="$texts $CORPUS/$t"
        fi
    done
    # the oracle and shoal side by side (two cores)
    # shellcheck disable=SC2086
    $ORACLE encode "$TOK" "$oracle" $texts > "$WORK/want" 2> "$WORK/err.oracle" &
    local oracle_pid=$!
    # shellcheck disable=SC2086
    "$AGENT" tokenize --tokenizer "$TOK/$file" --print-ids 1 $texts > "$WORK/got" 2> "$WORK/err"
    local rc=$?
    wait "$oracle_pid"
    local differ
    # shellcheck disable=SC2086
    differ=$(python3 - "$WORK/want" "$WORK/got" $TEXTS <<'PY'
import sys
want, got, names = open(sys.argv[1]).read().split("\n"), open(sys.argv[2]).read().split("\n"), sys.argv[3:]
bad = [n for i, n in enumerate(names) if i >= len(got) or i >= len(want) or want[i] != got[i]]
print(" ".join(bad) if bad else "none differ")
PY
)
    check "$name: ids equal the oracle's on every text ($(wc -w < "$WORK/got") ids)" "$rc $differ" "0 none differ"
}
same "GPT-2 (tiktoken file)" gpt2.tiktoken gpt2
same "GPT-2 (llm.c's gpt2_tokenizer.bin)" gpt2_tokenizer.bin gpt2
same "cl100k_base" cl100k_base.tiktoken cl100k_base
same "o200k_base" o200k_base.tiktoken o200k_base
same "Llama 3 (tokenizer.model)" llama3.tiktoken llama3
same "Llama 3 (tokenizer.json, ignore_merges)" llama3.json llama3.json
same "SmolLM2-style tokenizer.json (Digits, ByteLevel, merges)" smol.json smol.json
same "Qwen2-style tokenizer.json (NFC, Split, ByteLevel)" nfc.json nfc.json
same "DeepSeek-V3-style tokenizer.json (an empty Sequence normalizer; Split Removed, inverted)" seq.json seq.json
printf 'caf\x65\xcc\x81\n' > "$WORK/nfd.txt"
printf 'caf\xc3\xa9\n' > "$WORK/nfc.txt"
check "NFC: e and a combining acute encode as the one character" \
    "$("$AGENT" tokenize --tokenizer "$TOK/nfc.json" --print-ids 1 "$WORK/nfd.txt" "$WORK/nfc.txt" | uniq | wc -l)" 1

# ---- tokenize: text and JSON lines into shards
python3 - "$WORK/docs.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(300):
        f.write(json.dumps({"id": i, "text": "Document %d: %s" % (i, "the quick brown fox jumps over the lazy dog. " * (i % 7 + 1))}) + "\n")
        if i == 10:
            f.write("\n")   # blank lines are no documents
PY
tokenize() { "$AGENT" tokenize --tokenizer "$TOK/$1" "${@:2}" > "$WORK/out" 2> "$WORK/err"; }
tokenize gpt2_tokenizer.bin --out "$WORK/ds1" --threads 1 --shard-tokens 4096 --val-fraction 0.05 \
    "$WORK/docs.jsonl" "$CORPUS/fortunes.txt"
check "tokenize exits 0 and prints the manifest's path" "$? $(cat "$WORK/out")" "0 $WORK/ds1/dataset.json"
M=$WORK/ds1/dataset.json
check "the manifest: GPT-2's tokenizer, uint16 tokens, <|endoftext|> before each document" \
    "$(jq -c '[.format, .version, .tokenizer.format, .tokenizer.vocab_size, .token_type, .separator]' "$M")" \
    '["shoal-dataset",1,"llmc",50257,"uint16",50256]'
check "301 documents, some held out" \
    "$(jq -c '[.documents.train + .documents.val, (.documents.val > 0)]' "$M")" '[301,true]'
check "every shard's SHA-256 and token count are its file's" "$(python3 - "$WORK/ds1" <<'PY'
import hashlib, json, os, struct, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "dataset.json")))
ok = True
for s in m["shards"]:
    b = open(os.path.join(d, s["name"]), "rb").read()
    magic, version, n = struct.unpack("<3i", b[:12])
    ok &= hashlib.sha256(b).hexdigest() == s["sha256"] and n == s["tokens"] and len(b) == 1024 + 2 * n
    ok &= (magic, version) == (20240520, 1) and n <= 4096
ok &= sum(s["tokens"] for s in m["shards"] if s["split"] == "train") == m["tokens"]["train"]
print(ok, len(m["shards"]) > 2)
PY
)" "True True"
# the shards hold the documents' ids in order, each after the separator
"$AGENT" tokenize --tokenizer "$TOK/gpt2_tokenizer.bin" --print-ids 1 "$WORK/docs.jsonl" "$CORPUS/fortunes.txt" \
    > "$WORK/ids" 2> "$WORK/err"
check "the shards are the printed ids, documents in order, held out ones apart" "$(python3 - "$WORK/ds1" "$WORK/ids" <<'PY'
import json, os, struct, sys
d, ids = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(d, "dataset.json")))
got = {"train": [], "val": []}
for s in m["shards"]:
    b = open(os.path.join(d, s["name"]), "rb").read()
    got[s["split"]] += list(struct.unpack("<%dH" % s["tokens"], b[1024:]))
want = {"train": [], "val": []}
docs = [list(map(int, line.split())) for line in open(ids)]
# which are held out: the manifest counts them; find them by matching
t = v = 0
for doc in docs:
    seq = [50256] + doc
    if got["train"][t:t + len(seq)] == seq:
        t += len(seq)
    elif got["val"][v:v + len(seq)] == seq:
        v += len(seq)
    else:
        print("document not found"); sys.exit()
print(t == len(got["train"]) and v == len(got["val"]) and v > 0)
PY
)" True

tokenize gpt2_tokenizer.bin --out "$WORK/ds3" --threads 3 --shard-tokens 4096 --val-fraction 0.05 \
    "$WORK/docs.jsonl" "$CORPUS/fortunes.txt"
check "3 threads write the same shards and manifest byte for byte" \
    "$? $(cd "$WORK/ds1" && for f in *; do cmp -s "$f" "$WORK/ds3/$f" || echo "$f"; done | wc -l) $(ls "$WORK/ds3" | wc -l)" \
    "0 0 $(ls "$WORK/ds1" | wc -l)"

tokenize llama3.tiktoken --out "$WORK/dsl" --val-fraction 0.1 "$WORK/docs.jsonl"
check "a Llama 3 vocabulary: uint32 shards (llm.c's magic 20240801, version 7), <|begin_of_text|> first" \
    "$? $(jq -c '[.token_type, .separator, .tokenizer.vocab_size]' "$WORK/dsl/dataset.json") $(python3 -c '
import struct, sys; b = open(sys.argv[1], "rb").read(); print(struct.unpack("<3i", b[:12])[:2], struct.unpack("<I", b[1024:1028])[0])
' "$WORK/dsl/train_000000.bin" | tr -d ' ')" '0 ["uint32",128000,128256] (20240801,7)128000'

tokenize llama3.json --out "$WORK/dsj" --separator '<|end_of_text|>' --val-fraction 0 "$WORK/docs.jsonl"
check "--separator names another special token; --val-fraction 0 holds nothing out" \
    "$? $(jq -c '[.separator, .documents.val, ([.shards[].split] | unique)]' "$WORK/dsj/dataset.json")" \
    '0 [128001,0,["train"]]'

# ---- --extend: a dataset's documents, then more, as shards after its own
check "the manifest records the Unicode version its ids were made with (PCRE2's)" \
    "$(jq -r .tokenizer.unicode_version "$M" | grep -c '^[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*$')" 1
UNI=$(jq -r .tokenizer.unicode_version "$M")
tokenize gpt2_tokenizer.bin --out "$WORK/dsx" --threads 1 --shard-tokens 4096 --val-fraction 0.05 "$WORK/docs.jsonl"
jq -c .shards "$WORK/dsx/dataset.json" > "$WORK/dsx.shards"
tokenize gpt2_tokenizer.bin --out "$WORK/dsx" --extend 1 --threads 1 --shard-tokens 4096 --val-fraction 0.05 \
    "$CORPUS/fortunes.txt"
check "--extend 1 adds documents to a dataset: exit 0, its shards all listed as they were, new ones after them" \
    "$? $(jq -c --slurpfile old "$WORK/dsx.shards" '[($old[0] - .shards), (.shards | length > ($old[0] | length))]' "$WORK/dsx/dataset.json")" \
    "0 [[],true]"
check "the extended dataset holds what one run over both inputs does: documents, tokens, each split's ids in order" \
    "$(python3 - "$WORK/ds1" "$WORK/dsx" <<'PY'
import json, os, struct, sys
def load(d):
    m = json.load(open(os.path.join(d, "dataset.json")))
    ids = {"train": [], "val": []}
    for s in m["shards"]:
        b = open(os.path.join(d, s["name"]), "rb").read()
        ids[s["split"]] += struct.unpack("<%dH" % s["tokens"], b[1024:])
    return m["documents"], m["tokens"], ids, [s["name"] for s in m["shards"]]
a, b = load(sys.argv[1]), load(sys.argv[2])
print(a[:3] == b[:3], len(set(b[3])) == len(b[3]))
PY
)" "True True"
refused_extend() {   # refused_extend NAME WANT DIR [ARGS...]: exit 2 saying WANT, DIR as it was
    local name=$1 want=$2 dir=$3 before
    before=$(cd "$dir" && ls -a | xargs && sha256sum dataset.json)
    tokenize "${4:-gpt2_tokenizer.bin}" --out "$dir" --extend 1 "$CORPUS/runs.txt"
    check "--extend: $name: exit 2, said, nothing written" \
        "$? $(grep -c -F -- "$want" "$WORK/err") $([ "$(cd "$dir" && ls -a | xargs && sha256sum dataset.json)" = "$before" ] && echo unchanged)" \
        "2 1 unchanged"
}
cp -r "$WORK/dsx" "$WORK/dsu"
jq '.tokenizer.unicode_version = "99.0.0"' "$WORK/dsx/dataset.json" > "$WORK/dsu/dataset.json"
refused_extend "a dataset made with another Unicode version" \
    "its ids were made with Unicode 99.0.0, this site's PCRE2 has Unicode $UNI" "$WORK/dsu"
jq 'del(.tokenizer.unicode_version)' "$WORK/dsx/dataset.json" > "$WORK/dsu/dataset.json"
refused_extend "a manifest from before the Unicode version was recorded" "it records no Unicode version" "$WORK/dsu"
refused_extend "another tokenizer file" "its ids are of the tokenizer file of SHA-256" "$WORK/dsx" gpt2.tiktoken
tokenize gpt2_tokenizer.bin --out "$WORK/dse" --extend 1 "$CORPUS/runs.txt"
check "--extend: a directory with no dataset: exit 2, said, not made" \
    "$? $(grep -c 'holds no dataset.json to extend' "$WORK/err") $([ -e "$WORK/dse" ] && echo made || echo none)" "2 1 none"

# ---- refusals: clear, and nothing written
tokenize gpt2_tokenizer.bin --out "$WORK/ds1" "$WORK/docs.jsonl"
check "a directory that already holds a dataset: exit 2, said" "$? $(grep -c 'already holds a dataset.json' "$WORK/err")" "2 1"
printf '{"text": "fine"}\n{"body": "no text"}\n' > "$WORK/bad.jsonl"
tokenize gpt2_tokenizer.bin --out "$WORK/dsb" "$WORK/bad.jsonl"
check "a JSON line without the text field: exit 1, the file and line named, no manifest" \
    "$? $(grep -c 'bad.jsonl:2' "$WORK/err") $([ -e "$WORK/dsb/dataset.json" ] && echo written || echo none)" "1 1 none"
tokenize gpt2_tokenizer.bin --out "$WORK/dsb" --separator '<|nope|>' "$WORK/docs.jsonl"
check "an unknown separator: exit 2, named" "$? $(grep -c "'<|nope|>' is no special token" "$WORK/err")" "2 1"
tokenize gpt2_tokenizer.bin --out "$WORK/dsb" --val-fraction 0.9 "$WORK/docs.jsonl"
check "--val-fraction above 0.5: exit 2" "$?" 2

# bad tokenizer files: each refused with its reason
printf 'not base64!! 0\n' > "$WORK/bad.tiktoken"
head -c 5000 "$TOK/llama3.json" > "$WORK/cut.json"
head -c 2000 "$TOK/gpt2_tokenizer.bin" > "$WORK/cut.bin"
head -n 1000 "$TOK/cl100k_base.tiktoken" > "$WORK/few.tiktoken"
jq '.model.type = "Unigram"' "$TOK/llama3.json" > "$WORK/unigram.json"
jq '.normalizer = {"type": "NFKC"}' "$TOK/llama3.json" > "$WORK/nfkc.json"
jq '.model.merges[5] = "zzzz qqqq"' "$TOK/llama3.json" > "$WORK/merge.json"
for c in "bad.tiktoken:line 1 is not" "cut.json:not JSON" "cut.bin:the header promises 50257 tokens" "few.tiktoken:1000 ranks match no known encoding" \
         "unigram.json:only BPE" "nfkc.json:normalizer NFKC" "merge.json:merge 5"; do
    f=${c%%:*} want=${c#*:}
    "$AGENT" tokenize --tokenizer "$WORK/$f" --print-ids 1 "$CORPUS/runs.txt" > /dev/null 2> "$WORK/err"
    check "tokenizer $f is refused: $want" "$? $(grep -c -F "$want" "$WORK/err")" "1 1"
done
"$AGENT" tokenize --tokenizer "$TOK/cl100k_base.tiktoken" --encoding llama3 --print-ids 1 "$CORPUS/runs.txt" \
    > /dev/null 2> "$WORK/err"
check "a tiktoken file named as another encoding: refused, both counts said" \
    "$? $(grep -c '100256 ranks, but encoding llama3 has 128000' "$WORK/err")" "1 1"

# llm.c's tokenizer file written from the others (--write-llmc-tokenizer):
# GPT-2's from its tokenizer.json or tiktoken ranks is gpt2_tokenizer.bin
# byte for byte
for f in gpt2.json gpt2.tiktoken; do
    "$AGENT" tokenize --tokenizer "$TOK/$f" --write-llmc-tokenizer "$WORK/llmc-$f.bin" > "$WORK/out" 2> "$WORK/err"
    check "GPT-2's $f written as llm.c's tokenizer file: gpt2_tokenizer.bin byte for byte" \
        "$? $(cmp -s "$WORK/llmc-$f.bin" "$TOK/gpt2_tokenizer.bin" && echo same) $(grep -c ': 50257 tokens, eot 50256, sha256 [0-9a-f]\{64\}$' "$WORK/out")" \
        "0 same 1"
done
"$AGENT" tokenize --tokenizer "$TOK/llama3.json" --write-llmc-tokenizer "$WORK/llama3.bin" > /dev/null 2> "$WORK/err"
check "Llama 3's tokenizer.json written as llm.c's file: version 2, 128256 tokens, eot <|end_of_text|>" \
    "$? $(od -An -tu4 -j 4 -N 12 "$WORK/llama3.bin" | xargs)" "0 2 128256 128001"
"$AGENT" tokenize --tokenizer "$TOK/gpt2.json" --write-llmc-tokenizer "$WORK/x.bin" "$CORPUS/runs.txt" > /dev/null 2> "$WORK/err"
check "--write-llmc-tokenizer with an INPUT: exit 2, said, nothing written" \
    "$? $(grep -c 'writes a tokenizer file only' "$WORK/err") $([ -e "$WORK/x.bin" ] && echo written || echo none)" "2 1 none"

[ "$FAILS" -eq 0 ]
