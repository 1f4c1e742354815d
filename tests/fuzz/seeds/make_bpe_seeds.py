"""make_bpe_seeds.py - writes the seed corpus of fuzz_bpe: texts for the
built-in tokenizer (byte 0 = 0x80) and small tokenizer files of each format
(byte 0 = 0 llmc, 1 hf, 2 tiktoken), within the target's -max_len.

    python3 tests/fuzz/seeds/make_bpe_seeds.py tests/fuzz/corpus/fuzz_bpe
"""
import base64
import json
import os
import struct
import sys


def alphabet():
    out, extra = {}, 0
    for b in range(256):
        printable = 0x21 <= b <= 0x7e or 0xa1 <= b <= 0xac or 0xae <= b <= 0xff
        out[b] = chr(b if printable else 256 + extra)
        extra += not printable
    return out


def main(out):
    os.makedirs(out, exist_ok=True)
    a = alphabet()
    vocab = {a[b]: b for b in range(256)}
    vocab.update({"he": 256, "\u0120t": 257, "\u0120the": 258})
    hf = {"added_tokens": [{"id": 259, "content": "<|endoftext|>", "special": True}], "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+|\\s+"},
               "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
          "model": {"type": "BPE", "vocab": vocab, "merges": ["h e", "\u0120 t", "\u0120t he"],
                    "ignore_merges": True}}
    # Split at its edges: every behavior, invert, a String pattern, empty
    # matches, \S in a class; an empty Sequence normalizer
    edges = dict(hf, normalizer={"type": "Sequence", "normalizers": []}, pre_tokenizer={
        "type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "[\\s\\S]"}, "behavior": "Removed", "invert": True},
            {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithPrevious", "invert": False},
            {"type": "Split", "pattern": {"Regex": "x*|[^\\S\\n]"}, "behavior": "Contiguous", "invert": True},
            {"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)"}, "behavior": "MergedWithNext", "invert": False}]})
    llmc = struct.pack("<256I", *([20240328, 2, 260, 259] + [0] * 252)) + b"".join(
        bytes([len(t)]) + t for t in [bytes([b]) for b in range(256)] + [b"he", b" t", b" the", b"<|endoftext|>"])
    tiktoken = "".join("%s %d\n" % (base64.b64encode(bytes([b])).decode(), b) for b in range(256))
    seeds = {
        "text-english": b"\x80The theory of the thing: 12345 tests, it's fine.\n",
        "text-scripts": "\x80\u041f\u0440\u0438\u0432\u0435\u0442 \u4e16\u754c \U0001F600\u200d \u0661\u0662 'S".encode(),
        "text-invalid": b"\x80ok \xff\xc3 \xe2\x82 \xed\xa0\x80 \xf0\x9f\x98 end",
        "text-spaces": b"\x80" + b" " * 300 + b"x" + b"\n" * 40 + b"9" * 50,
        "hf-small": b"\x01" + json.dumps(hf).encode(),
        "hf-split-edges": b"\x01" + json.dumps(edges).encode(),
        "llmc-small": b"\x00" + llmc,
        "tiktoken-bytes": b"\x02" + tiktoken.encode(),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
