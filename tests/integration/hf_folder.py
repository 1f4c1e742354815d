#!/usr/bin/env python3
"""hf_folder.py - a Hugging Face model folder and the checks of its export
(test_hf_export.sh), stdlib only.

  hf_folder.py write DIR [SHAPE]
      a small folder of a published model's shape (V 256, C 32, 4 heads,
      MLP 48, 2 layers, F32 weights): llama_files.py's model.safetensors,
      a config.json as the model's own says it but for the sizes (its ids,
      max_position_embeddings, rope_theta, torch_dtype,
      transformers_version and the fields shoal does not read), and its
      tokenizer files.  SHAPE is
        smollm2     (the default) SmolLM2-135M: Llama, 2 kv heads, tied,
                    bos 128000, eos 128001, rope_theta 100000;
                    tokenizer.json, tokenizer_config.json,
                    special_tokens_map.json; weights from llama_files.py's
                    seed;
        qwen2.5     Qwen2.5-0.5B: Qwen2 (q, k, v biases), 2 kv heads, tied,
                    bos and eos 151643, max_position_embeddings 32768,
                    rope_theta 1e6, a sliding window not used;
        qwen3       Qwen3-0.6B: Qwen3 (q_norm, k_norm over each head),
                    2 kv heads, head_dim 16 (4 x 16 is not C's 32), tied,
                    bos 151643, eos 151645;
        olmo2       OLMo-2-0425-1B: OLMo-2 (q_norm, k_norm over the whole
                    width, norms after the attention and the MLP), 4 kv
                    heads, untied, no bos, eos 100257, pad 100277,
                    torch_dtype float32;
      the Qwen folders have tokenizer.json and tokenizer_config.json only,
      as the published ones (their tokenizer.json in raw UTF-8, as
      tokenizers writes it), OLMo-2's the three; their weights are
      llama_files.py's pattern (BF16's ties included).
  hf_folder.py config SRC_CONFIG EXPORT_CONFIG
      compares two config.json files field by field: prints "same" or
      "changed K1 K2 ..." (the fields whose values differ, added or
      removed; numbers compared by value).
  hf_folder.py bf16 F32_EXPORT BF16_EXPORT
      checks that BF16_EXPORT/model.safetensors holds F32_EXPORT's tensors
      as BF16, each value rounded to nearest, ties to even, in the same
      names, shapes and order: prints "bf16 N" or what differs.
  hf_folder.py exports DIR F32_EXPORT BF16_EXPORT
      the checks of a folder's two exports in one run (Python starts
      slowly on a loaded machine), a line each: config DIR/config.json
      F32_EXPORT/config.json, llama_files.py same DIR F32_EXPORT, bf16
      F32_EXPORT BF16_EXPORT, config DIR/config.json
      BF16_EXPORT/config.json.
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


# The other shapes: llama_files.py write's sizes and options, config.json,
# and the tokenizer files (name, object).
QWEN_ADDED = [{"id": 151643 + k, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
               "normalized": False, "special": True}
              for k, t in enumerate(("<|endoftext|>", "<|im_start|>", "<|im_end|>"))]
QWEN_TOKENIZER = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": QWEN_ADDED,
                  "normalizer": {"type": "NFC"},
                  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                      {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?"
                                                             "\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*"
                                                             "[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                       "behavior": "Isolated", "invert": False},
                      {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                       "use_regex": False}]},
                  "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                            "vocab": {"!": 0, "a": 1, "b": 2, "\u0120": 3, "\u0120a": 4, "\u00e9": 5},
                            "merges": ["\u0120 a"]}}
QWEN_CHAT = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
             "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
             "{%- endif %}")


def qwen_tokenizer_config(eos):
    return {"add_bos_token": False, "add_prefix_space": False,
            "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in QWEN_ADDED},
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": None,
            "chat_template": QWEN_CHAT, "clean_up_tokenization_spaces": False, "eos_token": eos,
            "errors": "replace", "model_max_length": 131072, "pad_token": "<|endoftext|>",
            "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}


OLMO_SPECIAL = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|pad|>",
                "unk_token": "<|endoftext|>"}
SHAPES = {
    "qwen2.5": (["2", "--tied", "--family", "qwen2"], {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
        "intermediate_size": 48, "max_position_embeddings": 32768, "max_window_layers": 2, "model_type": "qwen2",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.40.1", "use_cache": True, "use_mrope": False, "use_sliding_window": False,
        "vocab_size": 256}, [("tokenizer.json", QWEN_TOKENIZER),
                             ("tokenizer_config.json", qwen_tokenizer_config("<|endoftext|>"))]),
    "qwen3": (["2", "--tied", "--family", "qwen3", "--head-dim", "16"], {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 16, "hidden_act": "silu", "hidden_size": 32,
        "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 40960,
        "max_window_layers": 2, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 2,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
        "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 256},
        [("tokenizer.json", QWEN_TOKENIZER), ("tokenizer_config.json", qwen_tokenizer_config("<|im_end|>"))]),
    "olmo2": (["4", "--family", "olmo2"], {
        "architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02,
        "intermediate_size": 48, "max_position_embeddings": 4096, "model_type": "olmo2",
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 4, "pad_token_id": 100277,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000, "tie_word_embeddings": False,
        "torch_dtype": "float32", "transformers_version": "4.48.3", "use_cache": True, "vocab_size": 256},
        [("tokenizer.json", TOKENIZER),
         ("tokenizer_config.json", dict(TOKENIZER_CONFIG, pad_token="<|pad|>", model_max_length=4096)),
         ("special_tokens_map.json", OLMO_SPECIAL)]),
}


def write(argv):
    d, shape = argv[0], argv[1] if len(argv) > 1 else "smollm2"
    if shape == "smollm2":
        llama_files.write([d, "256", "8192", "32", "4", "2", "48", "2", "--tied"])
        for name, obj in (("config.json", CONFIG), ("tokenizer.json", TOKENIZER),
                          ("tokenizer_config.json", TOKENIZER_CONFIG), ("special_tokens_map.json", SPECIAL)):
            with open(os.path.join(d, name), "w") as f:
                json.dump(obj, f, indent=2)
        return
    options, cfg, tokenizer = SHAPES[shape]
    kv, options = options[0], options[1:]
    llama_files.write([d, "256", str(cfg["max_position_embeddings"]), "32", "4", kv, "48", "2", "--pattern"] + options)
    # as save_pretrained and tokenizers write them: sorted, indented, UTF-8
    for name, obj in [("config.json", cfg)] + tokenizer:
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(obj, indent=2, sort_keys=name != "tokenizer.json", ensure_ascii=False) + "\n")


def config_of(src, export):
    """What `config` prints."""
    a, b = (json.load(open(p)) for p in (src, export))
    changed = sorted(k for k in set(a) | set(b) if k not in a or k not in b or a[k] != b[k])
    return "same" if not changed else "changed " + " ".join(changed)


def config(argv):
    print(config_of(*argv))


def bf16_of(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        return h, f.read()


def bf16_check(f32_export, bf16_export):
    """What `bf16` prints."""
    (h32, d32), (h16, d16) = (header(os.path.join(p, "model.safetensors")) for p in (f32_export, bf16_export))
    n32 = [k for k in h32 if k != "__metadata__"]
    n16 = [k for k in h16 if k != "__metadata__"]
    if n32 != n16:
        return "names or order differ"
    for k in n32:
        a, b = h32[k], h16[k]
        if a["dtype"] != "F32" or b["dtype"] != "BF16" or a["shape"] != b["shape"]:
            return "%s: %s %s, want BF16 %s" % (k, b["dtype"], b["shape"], a["shape"])
        lo, hi = a["data_offsets"]
        vals = struct.unpack("<%df" % ((hi - lo) // 4), d32[lo:hi])
        lo, hi = b["data_offsets"]
        got = struct.unpack("<%dH" % ((hi - lo) // 2), d16[lo:hi])
        if list(got) != [bf16_of(v) for v in vals]:
            return "%s: values are not F32's rounded to nearest even" % k
    return "bf16 %d" % len(n32)


def bf16(argv):
    print(bf16_check(*argv))


def exports(argv):
    src, f32, b16 = argv
    for line in (config_of(os.path.join(src, "config.json"), os.path.join(f32, "config.json")),
                 llama_files.same_of(src, f32), bf16_check(f32, b16),
                 config_of(os.path.join(src, "config.json"), os.path.join(b16, "config.json"))):
        print(line)


if __name__ == "__main__":
    commands = {"write": write, "config": config, "bf16": bf16, "exports": exports}
    if len(sys.argv) > 3 and sys.argv[1] == "write" and sys.argv[3] not in SHAPES and sys.argv[3] != "smollm2":
        sys.exit("hf_folder.py: no shape %s (smollm2, %s)" % (sys.argv[3], ", ".join(SHAPES)))
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](sys.argv[2:])
