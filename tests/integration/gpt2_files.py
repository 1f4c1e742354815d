#!/usr/bin/env python3
"""gpt2_files.py - GPT-2 weight files for the import tests, and for trying the
import without a download (docs/models.md names the `big` command), stdlib only.

  gpt2_files.py llmc OUT V T C NH L [--peaked TOKEN]
      writes an llm.c version 3 checkpoint (gpt2_124M.bin's format: a
      header of 256 int32, then wte (Vp,C), wpe (T,C), the blocks' tensors
      layer-major, lnfw, lnfb; Vp = V rounded up to 128) with weights drawn
      from a fixed seed.  With --peaked TOKEN the final layer norm's weight
      is zero and its bias b is chosen so the logits are wte . b whatever
      the input, TOKEN's at 3: the loss on a text of TOKEN only is then
      known in closed form (`loss` prints it).
  gpt2_files.py loss FILE TOKEN
      that loss: logsumexp(wte . b) - (wte . b)[TOKEN], in double.
  gpt2_files.py same FILE SAFETENSORS CONTEXT
      checks that a safetensors export (GPT2LMHeadModel's names, F32,
      Conv1D (in, out)) holds exactly the llm.c file's tensors, no
      lm_head.weight (the head is tied to wte, as the file holds it) and
      the position embedding's first CONTEXT rows; prints
      "same N" (N tensors) or what differs.
  gpt2_files.py big OUT
      GPT-2 124M's sizes (V 50257, T 1024, C 768, NH 12, L 12), the
      weights a short pattern repeated: fast to write, valid to read.
"""
import array
import json
import math
import random
import struct
import sys

MAGIC = 20240326


def shapes(V, T, C, L):
    """llm.c's tensors in file order: name, shape (Vp for wte)."""
    Vp = (V + 127) // 128 * 128
    return [("wte", (Vp, C)), ("wpe", (T, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
            ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
            ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


def count(shape):
    return math.prod(shape)


def header(V, T, C, NH, L):
    h = [0] * 256
    h[0:8] = [MAGIC, 3, T, V, L, NH, C, (V + 127) // 128 * 128]
    return struct.pack("<256i", *h)


def read_llmc(path):
    with open(path, "rb") as f:
        data = f.read()
    h = struct.unpack_from("<256i", data)
    T, V, L, NH, C = h[2], h[3], h[4], h[5], h[6]
    out, off = {}, 1024
    for name, shape in shapes(V, T, C, L):
        n = count(shape)
        out[name] = array.array("f", data[off:off + 4 * n])
        off += 4 * n
    return (V, T, C, NH, L), out


def write_llmc(path, V, T, C, NH, L, peaked):
    rnd = random.Random(1234)
    t = {}
    for name, shape in shapes(V, T, C, L):
        n = count(shape)
        if name in ("ln1w", "ln2w", "lnfw"):
            t[name] = array.array("f", [1.0 + rnd.gauss(0, 0.1) for _ in range(n)])
        else:
            t[name] = array.array("f", [rnd.gauss(0, 0.1) for _ in range(n)])
    for i in range(V * C, len(t["wte"])):
        t["wte"][i] = 0.0   # llm.c's padding rows
    if peaked is not None:
        w = t["wte"][peaked * C:(peaked + 1) * C]
        norm2 = sum(x * x for x in w)
        t["lnfw"] = array.array("f", [0.0] * C)
        t["lnfb"] = array.array("f", [3.0 * x / norm2 for x in w])
    with open(path, "wb") as f:
        f.write(header(V, T, C, NH, L))
        for name, _ in shapes(V, T, C, L):
            t[name].tofile(f)


def loss(path, token):
    (V, T, C, NH, L), t = read_llmc(path)
    b = t["lnfb"]
    z = [sum(t["wte"][v * C + c] * b[c] for c in range(C)) for v in range(V)]
    m = max(z)
    return m + math.log(sum(math.exp(x - m) for x in z)) - z[token]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<Q", data)[0]
    head = json.loads(data[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for name, d in head.items():
        if d["dtype"] != "F32":
            raise SystemExit(f"{name}: dtype {d['dtype']}")
        a, b = d["data_offsets"]
        out[name] = (tuple(d["shape"]), array.array("f", data[8 + n + a:8 + n + b]))
    return out


def transpose(a, rows, cols):
    """(rows, cols) row-major -> (cols, rows)."""
    return array.array("f", [a[r * cols + c] for c in range(cols) for r in range(rows)])


def same(llmc_path, st_path, context):
    (V, T, C, NH, L), t = read_llmc(llmc_path)
    st = read_safetensors(st_path)
    want = {"transformer.wte.weight": ((V, C), t["wte"][:V * C]),
            "transformer.wpe.weight": ((context, C), t["wpe"][:context * C]),
            "transformer.ln_f.weight": ((C,), t["lnfw"]), "transformer.ln_f.bias": ((C,), t["lnfb"])}
    per_layer = [("ln_1.weight", "ln1w", (C,), None), ("ln_1.bias", "ln1b", (C,), None),
                 ("attn.c_attn.weight", "qkvw", (C, 3 * C), (3 * C, C)), ("attn.c_attn.bias", "qkvb", (3 * C,), None),
                 ("attn.c_proj.weight", "attprojw", (C, C), (C, C)), ("attn.c_proj.bias", "attprojb", (C,), None),
                 ("ln_2.weight", "ln2w", (C,), None), ("ln_2.bias", "ln2b", (C,), None),
                 ("mlp.c_fc.weight", "fcw", (C, 4 * C), (4 * C, C)), ("mlp.c_fc.bias", "fcb", (4 * C,), None),
                 ("mlp.c_proj.weight", "fcprojw", (4 * C, C), (C, 4 * C)), ("mlp.c_proj.bias", "fcprojb", (C,), None)]
    for l in range(L):
        for hf, ours, shape, conv in per_layer:
            n = count(shape)
            part = t[ours][l * n:(l + 1) * n]
            want[f"transformer.h.{l}.{hf}"] = (shape, transpose(part, *conv) if conv else part)
    if set(st) != set(want):
        return f"names differ: {sorted(set(st) ^ set(want))[:6]}"
    for name, (shape, values) in want.items():
        if st[name][0] != shape:
            return f"{name}: shape {st[name][0]}, want {shape}"
        if st[name][1].tobytes() != values.tobytes():
            return f"{name}: values differ"
    return f"same {len(want)}"


def big(path):
    V, T, C, NH, L = 50257, 1024, 768, 12, 12
    rnd = random.Random(5)
    pattern = array.array("f", [rnd.gauss(0, 0.02) for _ in range(4099)])
    total = sum(count(s) for _, s in shapes(V, T, C, L))
    with open(path, "wb") as f:
        f.write(header(V, T, C, NH, L))
        chunk = pattern * 256
        left = total
        while left > 0:
            k = min(left, len(chunk))
            chunk[:k].tofile(f)
            left -= k


def main(argv):
    cmd = argv[1]
    if cmd == "llmc":
        V, T, C, NH, L = (int(x) for x in argv[3:8])
        peaked = int(argv[9]) if len(argv) > 9 and argv[8] == "--peaked" else None
        write_llmc(argv[2], V, T, C, NH, L, peaked)
    elif cmd == "loss":
        print(f"{loss(argv[2], int(argv[3])):.9g}")
    elif cmd == "same":
        print(same(argv[2], argv[3], int(argv[4])))
    elif cmd == "big":
        big(argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
