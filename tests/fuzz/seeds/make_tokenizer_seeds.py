"""make_tokenizer_seeds.py - writes the seed corpus of fuzz_tokenizer: llm.c
tokenizer files (tokenizer.h's format) as llm.c's write_tokenizer lays them
out, small enough for the target's -max_len.

    python3 tests/fuzz/seeds/make_tokenizer_seeds.py tests/fuzz/corpus/fuzz_tokenizer
"""
import os
import struct
import sys


def tokenizer(tokens, version=2, eot=None, vocab=None):
    vocab = len(tokens) if vocab is None else vocab
    eot = len(tokens) - 1 if eot is None else eot
    head = [20240328, version, vocab, eot if version == 2 else 0] + [0] * 252
    return struct.pack("<256I", *head) + b"".join(bytes([len(t)]) + t for t in tokens)


def main(out):
    os.makedirs(out, exist_ok=True)
    words = [b"hello", b",", b" world", b"\x00", b"\xc3", b"\xa9", b"x" * 255, b"<|endoftext|>"]
    # GPT-2's shape in miniature: the 256 single bytes, a few merges, eot last
    merges = [b" the", b" of", b" and", b"ing", b" to", b"ed", b" a", b"er", b"\xe2\x80\x99", b" \xc3\xa9t\xc3\xa9"]
    seeds = {
        "v2-words": tokenizer(words),
        "v2-bytes-and-merges": tokenizer([bytes([b]) for b in range(256)] + merges + [b"<|endoftext|>"]),
        "v2-one-token": tokenizer([b"\n"], eot=0),
        "v1-gpt2-header-short": tokenizer(words, version=1, vocab=50257),
        "v2-eot-first": tokenizer(words, eot=0),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
