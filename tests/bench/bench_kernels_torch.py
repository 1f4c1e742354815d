#!/usr/bin/env python3
"""bench_kernels_torch.py - the stages of bench_kernels.c in PyTorch eager,
the baseline the shoal kernels are compared with.

The same configs as bench_kernels.c (xl-mid-b1/2/4: GPT-3 XL-like middle
stage, layers [3,6) of 24, C=2048, NH=16, T=2048; gpt2-124m-b4/8: GPT-2 124M
whole, C=768, NH=12, L=12, T=1024; smollm2-whole-b1 and llama1b-mid-b1:
SmolLM2-135M whole and Llama-3.2-1B's layers [4,8); and the small CPU smoke
set), built as shoal's stacks: GPT-2's pre-LayerNorm, one fused qkv Linear,
causal softmax attention, GELU (tanh), 4x MLP, residual adds, token and
position embeddings on a first stage, final LayerNorm, untied head and
cross-entropy on a last one; or Llama's (Hugging Face's LlamaForCausalLM
written out: RMSNorm, q/k/v/o without bias, rotate_half RoPE, k and v
repeated for grouped-query attention, SwiGLU, the head tied to the embedding
on a stage holding both). Weights are fp32; the forward runs under bf16 autocast on a
GPU (shoal's CUDA products are bf16) and in plain fp32 on the CPU (shoal's
CPU backend is fp32), or as --dtype says. On the CPU torch uses --threads
threads (default: OMP_NUM_THREADS, else every core, as shoal's OpenMP does),
stated in the header and the JSON.
Two attention implementations, each timed on its own:
  torch-eager  explicit matmuls, masked fill and softmax (the eager reference)
  torch-sdpa   torch.nn.functional.scaled_dot_product_attention(is_causal=True)

Each config: 3 warm-up iterations, then --steps timed ones (default 10) of
forward then backward of one micro-batch, torch.cuda.synchronize() around
each half, time.perf_counter(). A middle stage takes an fp32 hidden state
that requires grad (so grad_input is computed, as shoal's backward does) and
a random grad_output; a last stage backpropagates the loss with gradient 1.
Tensors live on the GPU; --host-io instead copies the input from and the
output, grad_output and grad_input between host and GPU inside the timed
region, as shoal's API does. FLOPs per micro-batch follow kern_stage_flops()
(6N + 6LCT per token, matrix products only); MFU against --peak-tflops.

Output: per implementation a table with bench_kernels.c's columns, then one
JSON line per config and implementation:
  {"bench":"kernels","impl":"torch-eager","config":...,"device":...,"B":...,
   "T":...,"steps":...,"ms":...,"fwd_ms":...,"bwd_ms":...,"tokens_per_s":...,
   "tflops":...,"mfu":...,"gpu":...,"host_io":false,"dtype":...,"threads":...}
   (or "error":"...")

Run: python3 tests/bench/bench_kernels_torch.py [--steps N] [--only NAME]
       [--impl eager|sdpa|both] [--peak-tflops X] [--host-io] [--device cuda|cpu]
       [--dtype bf16|fp32] [--threads N]
Exit: 0 every config ran, 1 one failed, 2 usage, 3 no torch or no device.
"""
import argparse
import json
import math
import sys
import os
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    _Module = nn.Module
    _IMPORT_ERROR = None
except ImportError as exc:  # reported by main(); the file still parses
    torch = nn = F = None
    _Module = object
    _IMPORT_ERROR = exc

WARMUP = 3
EXIT_FAILED, EXIT_USAGE, EXIT_NO_DEVICE = 1, 2, 3

# name, (vocab, context, d_model, heads, layers), layer_start, layer_end, B, T, small,
# and for a Llama (kv_heads, ffn_dim, tied, rope_theta); None: GPT-2
CONFIGS = [
    ("xl-mid-b1", (50257, 2048, 2048, 16, 24), 3, 6, 1, 2048, False, None),
    ("xl-mid-b2", (50257, 2048, 2048, 16, 24), 3, 6, 2, 2048, False, None),
    ("xl-mid-b4", (50257, 2048, 2048, 16, 24), 3, 6, 4, 2048, False, None),
    ("gpt2-124m-b4", (50257, 1024, 768, 12, 12), 0, 12, 4, 1024, False, None),
    ("gpt2-124m-b8", (50257, 1024, 768, 12, 12), 0, 12, 8, 1024, False, None),
    ("small-mid-b2", (8192, 256, 256, 4, 4), 1, 3, 2, 256, True, None),
    ("small-whole-b2", (8192, 256, 256, 4, 2), 0, 2, 2, 256, True, None),
    ("smollm2-whole-b1", (49152, 2048, 576, 9, 30), 0, 30, 1, 512, False, (3, 1536, True, 100000.0)),
    ("llama1b-mid-b1", (128256, 2048, 2048, 32, 16), 4, 8, 1, 2048, False, (8, 8192, True, 500000.0)),
    ("small-llama-whole-b2", (8192, 256, 256, 4, 2), 0, 2, 2, 256, True, (2, 688, False, 10000.0)),
]

IMPLS = {"eager": "torch-eager", "sdpa": "torch-sdpa"}


class Config:
    def __init__(self, row):
        (self.name, model, self.layer_start, self.layer_end, self.B, self.T,
         self.small, llama) = row
        self.V, self.context, self.C, self.NH, self.L = model
        self.llama = llama is not None
        self.KVH, self.F, self.tied, self.theta = llama if llama else (self.NH, 4 * self.C, False, 0.0)
        self.first = self.layer_start == 0
        self.last = self.layer_end == self.L
        self.blocks = self.layer_end - self.layer_start

    def block_matmul_params(self):
        """Weights multiplied per token in one block (common/model.c's rows)."""
        if not self.llama:
            return 12.0 * self.C * self.C
        kv = self.KVH * (self.C // self.NH)
        return 2.0 * self.C * self.C + 2.0 * self.C * kv + 3.0 * self.C * self.F

    def flops(self):
        """One forward+backward of a micro-batch, as kern_stage_flops()."""
        matmul_params = self.blocks * self.block_matmul_params()
        if self.last:
            matmul_params += float(self.V) * self.C
        per_token = 6.0 * matmul_params + 6.0 * self.blocks * self.C * self.T
        return per_token * self.B * self.T


class Block(_Module):
    """x (B,T,C) -> x + attn(ln1(x)), then + fcproj(gelu(fc(ln2(x))))."""

    def __init__(self, C, NH, sdpa):
        super().__init__()
        self.NH, self.sdpa = NH, sdpa
        self.ln1 = nn.LayerNorm(C)
        self.qkv = nn.Linear(C, 3 * C)
        self.attproj = nn.Linear(C, C)
        self.ln2 = nn.LayerNorm(C)
        self.fc = nn.Linear(C, 4 * C)
        self.fcproj = nn.Linear(4 * C, C)

    def attention(self, x, blocked):
        B, T, C = x.shape
        hs = C // self.NH
        q, k, v = self.qkv(x).split(C, dim=2)                # (B,T,C) each
        q = q.view(B, T, self.NH, hs).transpose(1, 2)         # (B,NH,T,hs)
        k = k.view(B, T, self.NH, hs).transpose(1, 2)
        v = v.view(B, T, self.NH, hs).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))   # (B,NH,T,T)
            att = att.masked_fill(blocked, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v                                                # (B,NH,T,hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.attproj(y)

    def forward(self, x, blocked):
        x = x + self.attention(self.ln1(x), blocked)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class RMSNorm(_Module):
    """LlamaRMSNorm: weight * (x * rsqrt(mean(x^2) + eps))."""

    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(C)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate(x, cos, sin):
    """Hugging Face's apply_rotary_pos_emb: x cos + rotate_half(x) sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LlamaBlock(_Module):
    """x (B,T,C) -> x + o(attn(rope(q), rope(k), v)) of rmsnorm(x), then
    + down(silu(gate) * up) of rmsnorm(x); k and v of KVH heads."""

    def __init__(self, C, NH, KVH, F_, sdpa):
        super().__init__()
        self.NH, self.KVH, self.sdpa, hs = NH, KVH, sdpa, C // NH
        self.ln1, self.ln2 = RMSNorm(C), RMSNorm(C)
        self.q = nn.Linear(C, C, bias=False)
        self.k = nn.Linear(C, KVH * hs, bias=False)
        self.v = nn.Linear(C, KVH * hs, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.gate = nn.Linear(C, F_, bias=False)
        self.up = nn.Linear(C, F_, bias=False)
        self.down = nn.Linear(F_, C, bias=False)

    def attention(self, x, blocked, cos, sin):
        B, T, C = x.shape
        hs, group = C // self.NH, self.NH // self.KVH
        q = rotate(self.q(x).view(B, T, self.NH, hs).transpose(1, 2), cos, sin)     # (B,NH,T,hs)
        k = rotate(self.k(x).view(B, T, self.KVH, hs).transpose(1, 2), cos, sin)    # (B,KVH,T,hs)
        v = self.v(x).view(B, T, self.KVH, hs).transpose(1, 2)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # repeat_kv
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = F.softmax(att.masked_fill(blocked, float("-inf")), dim=-1)
            y = att @ v
        return self.o(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x, blocked, cos, sin):
        x = x + self.attention(self.ln1(x), blocked, cos, sin)
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Stage(_Module):
    """Blocks [layer_start, layer_end), with embeddings when first and final
    norm, head and mean cross-entropy when last: GPT-2's (untied head) or a
    Llama's (rotary positions, tied head where the config ties it and the
    stage holds both)."""

    def __init__(self, cfg, sdpa):
        super().__init__()
        self.first, self.last, self.llama = cfg.first, cfg.last, cfg.llama
        if cfg.first:
            self.wte = nn.Embedding(cfg.V, cfg.C)
            if not cfg.llama:
                self.wpe = nn.Embedding(cfg.context, cfg.C)
        if cfg.llama:
            self.blocks = nn.ModuleList(LlamaBlock(cfg.C, cfg.NH, cfg.KVH, cfg.F, sdpa) for _ in range(cfg.blocks))
            hs = cfg.C // cfg.NH
            inv = 1.0 / (cfg.theta ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
            angle = torch.arange(cfg.T, dtype=torch.float32)[:, None] * inv[None, :]
            angle = torch.cat((angle, angle), dim=-1)                     # (T,hs)
            self.register_buffer("cos", angle.cos(), persistent=False)
            self.register_buffer("sin", angle.sin(), persistent=False)
        else:
            self.blocks = nn.ModuleList(Block(cfg.C, cfg.NH, sdpa) for _ in range(cfg.blocks))
        if cfg.last:
            self.lnf = RMSNorm(cfg.C) if cfg.llama else nn.LayerNorm(cfg.C)
            self.head = nn.Linear(cfg.C, cfg.V, bias=False)
            if cfg.llama and cfg.tied and cfg.first:
                self.head.weight = self.wte.weight
        # (T,T) True above the diagonal: the future a position may not attend to
        blocked = None if sdpa else torch.ones(cfg.T, cfg.T, dtype=torch.bool).triu(1)
        self.register_buffer("blocked", blocked, persistent=False)

    def forward(self, inp, targets=None):
        if self.first and self.llama:                         # inp (B,T) token ids
            x = self.wte(inp)
        elif self.first:
            pos = torch.arange(inp.shape[1], device=inp.device)
            x = self.wte(inp) + self.wpe(pos)                 # (B,T,C)
        else:                                                 # inp (B,T,C) fp32
            x = inp
        for block in self.blocks:
            x = block(x, self.blocked, self.cos, self.sin) if self.llama else block(x, self.blocked)
        if not self.last:
            return x
        logits = self.head(self.lnf(x))                       # (B,T,V)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_batch(cfg, device, host_io):
    """The micro-batch on the host (host_io) or on the device."""
    g = torch.Generator().manual_seed(1)
    where = torch.device("cpu") if host_io else device
    if cfg.first:
        inp = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=g)
    else:
        inp = torch.rand(cfg.B, cfg.T, cfg.C, generator=g) * 2 - 1
    targets = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=g) if cfg.last else None
    if cfg.last:
        grad_out = torch.tensor(1.0)
    else:
        grad_out = (torch.rand(cfg.B, cfg.T, cfg.C, generator=g) * 2 - 1) * 1e-3
    inp, grad_out = inp.to(where), grad_out.to(where)
    # targets (B,T int32) stay on the device even with host_io: small next to (B,T,C)
    targets = targets.to(device) if targets is not None else None
    return inp, targets, grad_out


def one_iteration(model, cfg, batch, device, host_io, dtype):
    """Forward then backward; (fwd seconds, bwd seconds)."""
    inp, targets, grad_out = batch
    sync(device)
    t0 = time.perf_counter()
    x = inp.to(device, non_blocking=False) if host_io else inp
    if not cfg.first:
        x = x.detach().requires_grad_()
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
        out = model(x, targets)
    if host_io:
        out_host = out.detach().to("cpu")   # noqa: F841  (the copy is what is timed)
    sync(device)
    t1 = time.perf_counter()
    out.backward(grad_out.to(device) if host_io else grad_out.to(out.dtype))
    if host_io and not cfg.first:
        gin_host = x.grad.to("cpu")         # noqa: F841
    sync(device)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def bench_one(cfg, impl, steps, device, host_io, dtype):
    """Mean (fwd_ms, bwd_ms) over the timed iterations."""
    if impl == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        raise RuntimeError("scaled_dot_product_attention needs torch >= 2.0, this is "
                           + torch.__version__)
    torch.manual_seed(0)
    model = Stage(cfg, sdpa=(impl == "sdpa")).to(device)
    batch = make_batch(cfg, device, host_io)
    fwd = bwd = 0.0
    for i in range(WARMUP + steps):
        f, b = one_iteration(model, cfg, batch, device, host_io, dtype)
        if i >= WARMUP:
            fwd, bwd = fwd + f, bwd + b
    return 1e3 * fwd / steps, 1e3 * bwd / steps


def result_fields(cfg, fwd_ms, bwd_ms, peak):
    ms = fwd_ms + bwd_ms
    tflops = cfg.flops() / (ms / 1e3) / 1e12
    return {"ms": round(ms, 4), "fwd_ms": round(fwd_ms, 4), "bwd_ms": round(bwd_ms, 4),
            "tokens_per_s": round(cfg.B * cfg.T / (ms / 1e3), 1),
            "tflops": float(f"{tflops:.6g}"), "mfu": float(f"{tflops / peak:.6g}")}


def print_header(impl_name, args):
    print(f"# bench_kernels_torch: {impl_name}, device {args.device}, timed steps "
          f"{args.steps} (after {WARMUP} warm-up), peak {args.peak_tflops:.0f} TFLOP/s"
          f"{', host io' if args.host_io else ''}, {args.dtype}"
          f"{f', {args.threads} threads' if args.device == 'cpu' else ''}")
    print(f"{'config':<20} {'B':>3} {'T':>5} {'fwd ms':>10} {'bwd ms':>10} {'ms':>10} "
          f"{'tokens/s':>12} {'TFLOP/s':>9} {'MFU':>7}")


def print_row(cfg, r, error):
    if error is not None:
        print(f"{cfg.name:<20} {cfg.B:>3} {cfg.T:>5} error: {error}")
    else:
        print(f"{cfg.name:<20} {cfg.B:>3} {cfg.T:>5} {r['fwd_ms']:>10.2f} "
              f"{r['bwd_ms']:>10.2f} {r['ms']:>10.2f} {r['tokens_per_s']:>12.0f} "
              f"{r['tflops']:>9.2f} {100 * r['mfu']:>6.2f}%")
    sys.stdout.flush()


def free_memory(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()


def parse_args(argv):
    p = argparse.ArgumentParser(description="PyTorch eager baseline for bench_kernels.c")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    p.add_argument("--steps", type=int, default=10,
                   help=f"timed iterations after {WARMUP} warm-up (default 10)")
    p.add_argument("--only", metavar="NAME",
                   help="one config: " + " ".join(c[0] for c in CONFIGS))
    p.add_argument("--impl", choices=["eager", "sdpa", "both"], default="both")
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="MFU denominator (default 989, H100 SXM dense bf16)")
    p.add_argument("--host-io", action="store_true",
                   help="copy stage inputs/outputs between host and device, as shoal's API")
    p.add_argument("--dtype", choices=["bf16", "fp32"],
                   help="bf16 autocast or plain fp32 (default: bf16 on cuda, fp32 on cpu)")
    p.add_argument("--threads", type=int,
                   help="CPU threads (default: OMP_NUM_THREADS, else every core)")
    args = p.parse_args(argv)
    if args.dtype is None:
        args.dtype = "fp32" if args.device == "cpu" else "bf16"
    if args.threads is None:
        env = os.environ.get("OMP_NUM_THREADS", "")
        args.threads = int(env) if env.isdigit() and int(env) > 0 else os.cpu_count() or 1
    if args.threads < 1:
        p.error("--threads must be >= 1")
    if args.steps < 1 or not args.peak_tflops > 0:
        p.error("--steps must be >= 1 and --peak-tflops > 0")
    if args.only and args.only not in [c[0] for c in CONFIGS]:
        p.error(f"no config named '{args.only}'")
    return args


def open_device(name):
    """The torch.device, or None after printing why it cannot be used."""
    if torch is None:
        print(f"bench_kernels_torch: cannot import torch: {_IMPORT_ERROR}", file=sys.stderr)
        return None
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        print(f"bench_kernels_torch: bad device '{name}': {exc}", file=sys.stderr)
        return None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            print(f"bench_kernels_torch: device '{name}': torch sees no CUDA device "
                  f"(torch {torch.__version__}, built with CUDA {torch.version.cuda})",
                  file=sys.stderr)
            return None
        index = device.index or 0
        if index >= torch.cuda.device_count():
            print(f"bench_kernels_torch: device '{name}': only "
                  f"{torch.cuda.device_count()} CUDA device(s)", file=sys.stderr)
            return None
        device = torch.device("cuda", index)
    elif device.type != "cpu":
        print(f"bench_kernels_torch: device '{name}': use cuda, cuda:N or cpu", file=sys.stderr)
        return None
    return device


def main(argv):
    args = parse_args(argv)
    device = open_device(args.device)
    if device is None:
        return EXIT_NO_DEVICE
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if device.type == "cpu":
        torch.set_num_threads(args.threads)
    configs = [Config(c) for c in CONFIGS
               if (c[0] == args.only if args.only else c[6] == (device.type == "cpu"))]
    impls = ["eager", "sdpa"] if args.impl == "both" else [args.impl]
    lines, failed = [], 0
    for impl in impls:
        print_header(IMPLS[impl], args)
        for cfg in configs:
            r, error = None, None
            try:
                r = result_fields(cfg, *bench_one(cfg, impl, args.steps, device, args.host_io,
                                                  args.dtype), args.peak_tflops)
            except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is one
                error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                failed += 1
            free_memory(device)
            print_row(cfg, r, error)
            line = {"bench": "kernels", "impl": IMPLS[impl], "config": cfg.name,
                    "device": args.device, "B": cfg.B, "T": cfg.T, "steps": args.steps}
            line.update(r if r is not None else {"error": error})
            line.update({"gpu": gpu, "host_io": args.host_io, "dtype": args.dtype,
                         "threads": args.threads if device.type == "cpu" else None})
            lines.append(line)
        print()
    for line in lines:
        print(json.dumps(line, separators=(",", ":")))
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
