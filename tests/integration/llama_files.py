#!/usr/bin/env python3
"""llama_files.py - weight files of the llama kind (Llama, Qwen2, Qwen3, OLMo-2)
for the import tests, and for trying the import without a download
(docs/models.md names the `big` command), stdlib only.

  llama_files.py write DIR V T C NH KVH F L [--tied] [--shards N] [--bf16]
                       [--family F] [--head-dim D] [--pattern]
      writes DIR/config.json (LlamaForCausalLM's, theta 10000, eps 1e-5)
      and the weights under Hugging Face's names: DIR/model.safetensors, or
      with --shards N the tensors dealt into N files
      model-0000K-of-0000N.safetensors and DIR/model.safetensors.index.json;
      weights from a fixed seed, F32 or BF16; no lm_head.weight with --tied.
      --family qwen2, qwen3 or olmo2 writes that family's tensors under the
      names transformers gives them (Qwen2's q, k, v biases; Qwen3's q_norm
      and k_norm of one head; OLMo-2's over the whole width, and its
      post_attention_layernorm and post_feedforward_layernorm) and its
      class and model_type; --head-dim D a head of D (config.json's
      head_dim), not C / NH; --pattern weights from a formula instead of the
      seed (pattern_values: each tensor's its own, BF16's ties included).
  llama_files.py big DIR [SHAPE]
      the files of a published model's shape (its config.json and one BF16
      model.safetensors), the weights a short pattern repeated: fast to
      write, valid to read.  SHAPE smollm2-135m (the default: V 49152,
      C 576, 9 heads, 3 kv heads, MLP 1536, 30 layers, theta 100000, tied)
      or llama-3.2-1b (V 128256, C 2048, 32 heads, 8 kv heads, MLP 8192,
      16 layers, theta 500000, llama3 rope scaling, tied: 2.5 GB).
  llama_files.py pattern DIR EXPORT_DIR
      the same check as `same` for a `big` file, streamed (a 1B model's
      values do not fit in Python's memory): every exported tensor holds
      the pattern, widened to F32; prints "same N" or what differs.
  llama_files.py same DIR EXPORT_DIR
      checks that an export (EXPORT_DIR/model.safetensors, F32) holds
      exactly DIR's tensors (the same names, shapes and values, bf16 ones
      widened) and that its config.json says the same model; prints
      "same N" (N tensors) or what differs.
"""
import array
import json
import os
import random
import struct
import sys


# Each family's block as transformers' modules register it (the state dict's
# order): (the name after "model.layers.N.", rows, cols); rows and cols are
# "C", "F", "Q" (NH hd), "KV" (KVH hd), "HD" (hd) or 1 (a vector).
def _proj(p, rows, cols):
    return ("self_attn.%s_proj.weight" % p, rows, cols)


QKV = [_proj("q", "Q", "C"), _proj("k", "KV", "C"), _proj("v", "KV", "C")]
MLP = [("mlp.gate_proj.weight", "F", "C"), ("mlp.up_proj.weight", "F", "C"), ("mlp.down_proj.weight", "C", "F")]
NORMS = [("input_layernorm.weight", "C", 1), ("post_attention_layernorm.weight", "C", 1)]
FAMILIES = {
    # Llama's in the order this file always wrote it (input_layernorm first)
    "llama": ("LlamaForCausalLM", NORMS[:1] + QKV + [_proj("o", "C", "Q")] + NORMS[1:] + MLP),
    "qwen2": ("Qwen2ForCausalLM", [t for w in QKV for t in (w, (w[0].replace("weight", "bias"), w[1], 1))] +
              [_proj("o", "C", "Q")] + MLP + NORMS),
    "qwen3": ("Qwen3ForCausalLM", QKV + [_proj("o", "C", "Q"), ("self_attn.q_norm.weight", "HD", 1),
                                         ("self_attn.k_norm.weight", "HD", 1)] + MLP + NORMS),
    # OLMo-2: its q and k norms over the whole width, its two norms after
    # the attention and the MLP, none before
    "olmo2": ("Olmo2ForCausalLM", QKV + [_proj("o", "C", "Q"), ("self_attn.q_norm.weight", "Q", 1),
                                         ("self_attn.k_norm.weight", "KV", 1), NORMS[1]] + MLP +
              [("post_feedforward_layernorm.weight", "C", 1)]),
}


def names(C, NH, KVH, F, L, V, tied, family="llama", head_dim=None):
    """(name, shape) in the family's state dict order (Llama's in the order
    this file always wrote it); head_dim None is C / NH."""
    hd = head_dim or C // NH
    dims = {"C": C, "F": F, "Q": NH * hd, "KV": KVH * hd, "HD": hd}
    out = [("model.embed_tokens.weight", (V, C))]
    for l in range(L):
        out += [("model.layers.%d.%s" % (l, name), (dims[rows],) if cols == 1 else (dims[rows], dims[cols]))
                for name, rows, cols in FAMILIES[family][1]]
    out.append(("model.norm.weight", (C,)))
    if not tied:
        out.append(("lm_head.weight", (V, C)))
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def safetensors(path, tensors, bf16):
    """tensors: [(name, shape, array('f'))]."""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape, values in tensors:
        if bf16:
            raw = values.tobytes()
            data = b"".join(raw[i + 2:i + 4] for i in range(0, len(raw), 4))
        else:
            data = values.tobytes()
        header[name] = {"dtype": "BF16" if bf16 else "F32", "shape": list(shape),
                        "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data, out = raw[8 + n:], {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        chunk = data[b:end]
        if e["dtype"] == "BF16":
            chunk = b"".join(b"\0\0" + chunk[i:i + 2] for i in range(0, len(chunk), 2))
        elif e["dtype"] != "F32":
            raise SystemExit("%s: dtype %s" % (name, e["dtype"]))
        out[name] = (tuple(e["shape"]), array.array("f", chunk))
    return out


def pattern_values(index, n):
    """Tensor `index`'s n values from a formula, not a seed: each distinct
    from its neighbours' and from every other tensor's (so a tensor moved
    or transposed is seen), of either sign and of several magnitudes, and
    the low 16 bits cycling through BF16 rounding's cases (exact, below
    half, a tie to even down, a tie to even up, above half), which random
    values almost never hit."""
    low = (0x0000, 0x7FFF, 0x8000, 0x8001, 0x1234, 0xC000)
    bits = array.array("I", ((i // 3 + index) % 2 << 31 | (0x78 + (i * 7 + index) % 3) << 23 |
                             (i * 37 + i // 6 + index * 11) % 128 << 16 | low[(i + index) % 6] for i in range(n)))
    return array.array("f", bits.tobytes())


def write(argv):
    d = argv[0]
    V, T, C, NH, KVH, F, L = (int(x) for x in argv[1:8])
    tied, bf16 = "--tied" in argv, "--bf16" in argv
    shards = int(argv[argv.index("--shards") + 1]) if "--shards" in argv else 0
    family = argv[argv.index("--family") + 1] if "--family" in argv else "llama"
    head_dim = int(argv[argv.index("--head-dim") + 1]) if "--head-dim" in argv else None
    os.makedirs(d, exist_ok=True)
    rng = random.Random(20241127)
    tensors = []
    for k, (name, shape) in enumerate(names(C, NH, KVH, F, L, V, tied, family, head_dim)):
        if "--pattern" in argv:
            values = pattern_values(k, numel(shape))
        elif len(shape) == 1:
            values = array.array("f", (1.0 + rng.uniform(-0.1, 0.1) for _ in range(numel(shape))))
        else:
            values = array.array("f", (rng.uniform(-0.08, 0.08) for _ in range(numel(shape))))
        if bf16:   # values exact in bf16, so an F32 export holds them as they are
            raw = values.tobytes()
            values = array.array("f", b"".join(b"\0\0" + raw[i + 2:i + 4] for i in range(0, len(raw), 4)))
        tensors.append((name, shape, values))
    config = {"architectures": [FAMILIES[family][0]], "attention_bias": False, "hidden_act": "silu",
              "hidden_size": C, "intermediate_size": F, "max_position_embeddings": T, "model_type": family,
              "num_attention_heads": NH, "num_hidden_layers": L, "num_key_value_heads": KVH,
              "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": tied,
              "torch_dtype": "bfloat16" if bf16 else "float32", "vocab_size": V}
    if head_dim:
        config["head_dim"] = head_dim
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if not shards:
        safetensors(os.path.join(d, "model.safetensors"), tensors, bf16)
        return
    weight_map = {}
    for k in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
        part = tensors[k::shards]
        safetensors(os.path.join(d, file), part, bf16)
        weight_map.update({name: file for name, _, _ in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(4 * numel(s) for _, s, _ in tensors)},
                   "weight_map": weight_map}, f, indent=2)


# The published shapes `big` writes: sizes, then config.json's other fields.
SHAPES = {
    "smollm2-135m": ((49152, 576, 9, 3, 1536, 30),
                     {"max_position_embeddings": 8192, "rope_scaling": None, "rope_theta": 100000}),
    "llama-3.2-1b": ((128256, 2048, 32, 8, 8192, 16),
                     {"max_position_embeddings": 131072, "rope_theta": 500000.0,
                      "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}}),
}
# big's weights: 4096 values exact in bf16, repeated from each tensor's start
PATTERN_F32 = array.array("f", ((i % 17 - 8) / 256.0 for i in range(4096))).tobytes()
PATTERN_BF16 = b"".join(PATTERN_F32[i + 2:i + 4] for i in range(0, len(PATTERN_F32), 4))


def big(argv):
    d = argv[0]
    (V, C, NH, KVH, F, L), extra = SHAPES[argv[1] if len(argv) > 1 else "smollm2-135m"]
    os.makedirs(d, exist_ok=True)
    bf16 = PATTERN_BF16
    header, at, sizes = {"__metadata__": {"format": "pt"}}, 0, []
    for name, shape in names(C, NH, KVH, F, L, V, True):
        n = 2 * numel(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + n]}
        sizes.append(n)
        at += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for n in sizes:
            f.write(bf16 * (n // len(bf16)) + bf16[:n % len(bf16)])
    config = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_act": "silu",
              "hidden_size": C, "intermediate_size": F, "model_type": "llama",
              "num_attention_heads": NH, "num_hidden_layers": L, "num_key_value_heads": KVH,
              "rms_norm_eps": 1e-05, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": V}
    config.update(extra)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)


def pattern(argv):
    d, ex = argv
    def header_of(path):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            return json.loads(f.read(n)), 8 + n
    want, _ = header_of(os.path.join(d, "model.safetensors"))
    got, base = header_of(os.path.join(ex, "model.safetensors"))
    want.pop("__metadata__", None)
    got.pop("__metadata__", None)
    if set(got) != set(want):
        print("names differ: %s" % sorted(set(got) ^ set(want))[:4])
        return
    with open(os.path.join(ex, "model.safetensors"), "rb") as f:
        for name, e in want.items():
            g = got[name]
            if g["shape"] != e["shape"] or g["dtype"] != "F32":
                print("%s: %s %s, want F32 %s" % (name, g["dtype"], g["shape"], e["shape"]))
                return
            f.seek(base + g["data_offsets"][0])
            left, chunk = g["data_offsets"][1] - g["data_offsets"][0], PATTERN_F32 * 256
            while left > 0:
                n = min(left, len(chunk))
                if f.read(n) != chunk[:n]:
                    print("%s: values differ" % name)
                    return
                left -= n
    a, b = json.load(open(os.path.join(d, "config.json"))), json.load(open(os.path.join(ex, "config.json")))
    # (max_position_embeddings is the job's context_length, not the file's)
    for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
              "num_hidden_layers", "rope_theta", "rope_scaling", "tie_word_embeddings"):
        if a.get(k) != b.get(k):
            print("config.json: %s is %s, want %s" % (k, b.get(k), a.get(k)))
            return
    print("same %d" % len(want))


def same_of(d, ex):
    """What `same` prints."""
    want = {}
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    for f in files:
        want.update(read_safetensors(os.path.join(d, f)))
    got = read_safetensors(os.path.join(ex, "model.safetensors"))
    if set(got) != set(want):
        return "names differ: %s" % sorted(set(got) ^ set(want))[:4]
    for name in want:
        if got[name][0] != want[name][0]:
            return "%s: shape %s, want %s" % (name, got[name][0], want[name][0])
        if got[name][1] != want[name][1]:
            return "%s: values differ" % name
    a, b = json.load(open(os.path.join(d, "config.json"))), json.load(open(os.path.join(ex, "config.json")))
    for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
              "num_hidden_layers", "vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
              "model_type", "hidden_act"):
        if a.get(k) != b.get(k):
            return "config.json: %s is %s, want %s" % (k, b.get(k), a.get(k))
    return "same %d" % len(want)


def same(argv):
    print(same_of(*argv))


if __name__ == "__main__":
    commands = {"write": write, "big": big, "same": same, "pattern": pattern}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        raise SystemExit(__doc__)
    commands[sys.argv[1]](sys.argv[2:])
