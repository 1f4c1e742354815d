#!/usr/bin/env python3
"""corpus.py - the texts the tokenizer checks encode, from what every
machine with `make deps` holds (no download), stdlib only.

  corpus.py DIR [MB]
      writes into DIR:
        fortunes.txt   the fortune files (English prose, verse, ASCII art)
        locales.txt    translated messages of /usr/share/locale's catalogues,
                       many languages and scripts (Latin, Cyrillic, Greek,
                       Arabic, Hebrew, Devanagari, CJK, Hangul, Thai, ...)
        scripts.txt    words drawn from Unicode blocks (every script the
                       catalogues may lack), emoji with modifiers and joiners,
                       combining marks
        runs.txt       long runs of spaces, tabs, newlines, CRLF and digits,
                       words repeated into pieces of thousands of bytes,
                       contractions in every case ('S, 'll, long s)
        invalid.bin    invalid UTF-8: stray continuation bytes, overlongs,
                       surrogates, truncated sequences, bytes F5-FF, NULs
      about MB megabytes in all (default 3), the same bytes on every run.
"""
import os
import random
import struct
import sys


def mo_strings(path):
    """The translations of a gettext .mo catalogue (UTF-8 ones only)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 28:
        return []
    for endian in "<>":
        magic, _, n, _, trans = struct.unpack(endian + "5I", data[:20])
        if magic == 0x950412de:
            break
    else:
        return []
    out = []
    for i in range(n):
        try:
            length, off = struct.unpack(endian + "2I", data[trans + 8 * i:trans + 8 * i + 8])
            s = data[off:off + length].decode("utf-8")
        except (struct.error, UnicodeDecodeError):
            continue
        if i == 0:
            if "charset=UTF-8" not in s and "charset=utf-8" not in s:
                return []
            continue
        out.extend(p for p in s.split("\0") if p)
    return out


def locales(limit):
    root = "/usr/share/locale"
    parts, size = [], 0
    langs = sorted(os.listdir(root)) if os.path.isdir(root) else []
    per_lang = max(2000, limit // max(1, len(langs)))
    for lang in langs:
        d = os.path.join(root, lang, "LC_MESSAGES")
        if not os.path.isdir(d):
            continue
        got = 0
        for mo in sorted(os.listdir(d)):
            for s in mo_strings(os.path.join(d, mo)):
                b = s.encode("utf-8")
                parts.append(b)
                got += len(b) + 1
                if got >= per_lang:
                    break
            if got >= per_lang:
                break
        size += got
        if size >= limit:
            break
    return b"\n".join(parts)


def fortunes(limit):
    root = "/usr/share/games/fortunes"
    out, size = [], 0
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        p = os.path.join(root, name)
        if "." in name or not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            b = f.read()
        out.append(b)
        size += len(b)
        if size >= limit:
            break
    return b"".join(out)[:limit]


BLOCKS = [(0x41, 0x7a), (0xc0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x531, 0x587), (0x5d0, 0x5ea),
          (0x620, 0x64a), (0x900, 0x97f), (0x980, 0x9ff), (0xb80, 0xbff), (0xe01, 0xe5b), (0x10a0, 0x10ff),
          (0x1100, 0x11ff), (0x1200, 0x137f), (0x3041, 0x30ff), (0x4e00, 0x9fff), (0xac00, 0xd7a3),
          (0x1d400, 0x1d7ff), (0x20000, 0x2a6df)]
EMOJI = [0x1f600, 0x1f64f, 0x1f300, 0x1f5ff, 0x1f680, 0x1f6ff, 0x1f900, 0x1f9ff]


def scripts(rng, limit):
    out = []
    size = 0
    while size < limit:
        lo, hi = rng.choice(BLOCKS)
        word = "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 9)))
        r = rng.random()
        if r < 0.1:   # emoji, with a skin tone, a joiner sequence, a flag
            word += chr(rng.randint(EMOJI[0], EMOJI[1])) + rng.choice(["", "\U0001F3FD", "\u200d\u2764\ufe0f",
                                                                          "\U0001F1EF\U0001F1F5"])
        elif r < 0.15:   # combining marks
            word += "".join(chr(rng.randint(0x300, 0x36f)) for _ in range(rng.randint(1, 4)))
        elif r < 0.2:
            word += str(rng.randint(0, 10 ** rng.randint(1, 12)))
        sep = rng.choice([" ", " ", " ", "  ", "\n", ", ", ". ", "\u3000", "\u00a0", "\t", "'s ", "'LL "])
        b = (word + sep).encode("utf-8")
        out.append(b)
        size += len(b)
    return b"".join(out)


def runs(rng, limit):
    out, size = [], 0
    pieces = [" ", "\t", "\n", "\r\n", "\r", "\u2028", "\v", "\f"]
    while size < limit:
        k = rng.random()
        if k < 0.3:
            s = rng.choice(pieces) * rng.choice([1, 2, 3, 7, 64, 500, 3000])
        elif k < 0.5:
            s = "".join(rng.choice("0123456789") for _ in range(rng.choice([1, 2, 3, 4, 5, 17, 400])))
        elif k < 0.6:   # one word repeated into a long piece (merged from a heap above 64 bytes)
            s = " " + rng.choice(["a", "ab", "the", "\u0430\u0431", "\U0001F600", "zz9"]) * rng.choice([20, 300, 2000])
        elif k < 0.7:
            s = rng.choice(["It's", "IT'S", "we'll", "WE'LL", "they'RE", "I'd", "you've", "ſ'ſ", "'s'", "''s",
                            "don't", "DON'T", "'M", "x'ſ"])
        else:
            s = "".join(rng.choice("ab .,;:!?-_()[]{}<>/\\|@#$%^&*~`\"'") for _ in range(rng.randint(1, 30)))
        b = s.encode("utf-8")
        out.append(b)
        size += len(b)
    return b"".join(out)


def invalid(rng, limit):
    bad = [b"\x80", b"\xbf", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf0\x80\x80\xaf", b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe", b"\xe2\x82", b"\xf0\x9f\x98",
           b"\xc3", b"\x00", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80"]
    out, size = [], 0
    while size < limit:
        if rng.random() < 0.5:
            b = rng.choice(bad)
        elif rng.random() < 0.5:
            b = bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 8)))
        else:
            b = rng.choice([b"word ", b"caf\xc3\xa9 ", b" 123", b"\n", b"  "])
        out.append(b)
        size += len(b)
    return b"".join(out)


def main():
    d = sys.argv[1]
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    total = int(mb * 1e6)
    os.makedirs(d, exist_ok=True)
    rng = random.Random(20261127)
    files = {
        "fortunes.txt": fortunes(int(total * 0.35)),
        "locales.txt": locales(int(total * 0.35)),
        "scripts.txt": scripts(rng, int(total * 0.15)),
        "runs.txt": runs(rng, int(total * 0.1)),
        "invalid.bin": invalid(rng, int(total * 0.05)),
    }
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
