#!/usr/bin/env python3
"""hf_folder.py - a Hugging Face model folder and the checks of its export
(test_hf_export.sh), stdlib only.

  hf_folder.py write DIR
      a SmolLM2-shaped Llama folder, small (V 256, C 32, 4 heads, 2 kv
      heads, MLP 48, 2 layers, tied, F32 weights): llama_files.py's
      model.safetensors, a config.json as SmolLM2-135M's says it
      (max_position_embeddings 8192, bos 128000, eos 128001, rope_theta
      100000, torch_dtype bfloat16, transformers_version, fields shoal
      does not read), and tokenizer.json, tokenizer_config.json,
      special_tokens_map.json.
  hf_folder.py config SRC_CONFIG EXPORT_CONFIG
      compares two config.json files field by field: prints "same" or
      "changed K1 K2 ..." (the fields whose values differ, added or
      removed; numbers compared by value).
  hf_folder.py bf16 F32_EXPORT BF16_EXPORT
      checks that BF16_EXPORT/model.safetensors holds F32_EXPORT's tensors
      as BF16, each value rounded to nearest, ties to even, in the same
      names, shapes and order: prints "bf16 N" or what differs.
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_files  # noqa: E402

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 32,
    "initializer_range": 0.041666666666666664, "intermediate_size": 48, "is_llama_config": True,
    "max_position_embeddings": 8192, "mlp_bias": False, "model_type": "llama", "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_interleaved": False, "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": True, "vocab_size": 256,
}
TOKENIZER = {"version": "1.0", "truncation": None, "padding": None,
             "added_tokens": [{"id": 0, "content": "<|endoftext|>", "special": True}],
             "model": {"type": "BPE", "vocab": {"<|endoftext|>": 0, "a": 1, "b": 2}, "merges": []}}
TOKENIZER_CONFIG = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "model_max_length": 8192,
                    "tokenizer_class": "GPT2Tokenizer", "clean_up_tokenization_spaces": False}
SPECIAL = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}


def write(argv):
    d = argv[0]
    llama_files.write([d, "256", "8192", "32", "4", "2", "48", "2", "--tied"])
    for name, obj in (("config.json", CONFIG), ("tokenizer.json", TOKENIZER),
                      ("tokenizer_config.json", TOKENIZER_CONFIG), ("special_tokens_map.json", SPECIAL)):
        with open(os.path.join(d, name), "w") as f:
            json.dump(obj, f, indent=2)


def config(argv):
    a, b = (json.load(open(p)) for p in argv)
    changed = sorted(k for k in set(a) | set(b) if k not in a or k not in b or a[k] != b[k])
    print("same" if not changed else "changed " + " ".join(changed))


def bf16_of(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        return h, f.read()


def bf16(argv):
    (h32, d32), (h16, d16) = (header(os.path.join(p, "model.safetensors")) for p in argv)
    n32 = [k for k in h32 if k != "__metadata__"]
    n16 = [k for k in h16 if k != "__metadata__"]
    if n32 != n16:
        print("names or order differ")
        return
    for k in n32:
        a, b = h32[k], h16[k]
        if a["dtype"] != "F32" or b["dtype"] != "BF16" or a["shape"] != b["shape"]:
            print("%s: %s %s, want BF16 %s" % (k, b["dtype"], b["shape"], a["shape"]))
            return
        lo, hi = a["data_offsets"]
        vals = struct.unpack("<%df" % ((hi - lo) // 4), d32[lo:hi])
        lo, hi = b["data_offsets"]
        got = struct.unpack("<%dH" % ((hi - lo) // 2), d16[lo:hi])
        if list(got) != [bf16_of(v) for v in vals]:
            print("%s: values are not F32's rounded to nearest even" % k)
            return
    print("bf16 %d" % len(n32))


if __name__ == "__main__":
    commands = {"write": write, "config": config, "bf16": bf16}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](sys.argv[2:])
