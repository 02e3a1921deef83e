#!/usr/bin/env python3
"""Measures single-GPU GPT training iterations for `frugal plan validate`.

A plain PyTorch Megatron-style GPT with the operators the planner counts for a
GPT layer (`frugal plan ops --model gpt-350m`): word + position embedding,
per layer layernorm, QKV GEMM, attention scores (batched GEMM), masked softmax
+ dropout, attention x V, projection, dropout + residual, layernorm, 4h MLP
with GeLU, dropout + residual; final layernorm, logits against the tied word
embedding, fp32 cross entropy. Explicit attention, not a fused (flash)
kernel, because the planner costs the s x s scores. Mixed precision as
Megatron: fp16 parameters and activations (`frugal profile` times gpt-* models
in fp16: their bytes_per_value is 2), fp32 master weights, static loss scale
with the fused unscale/inf check, Adam. Full recomputation checkpoints every
layer (Megatron's --recompute-granularity full --recompute-method uniform 1).

One iteration = forward + backward + optimizer step of one micro-batch
(global batch = micro batch, 1 GPU). Times come from CUDA events recorded
around each iteration of a run of back-to-back iterations (no host sync
between them, as in a training loop), median of --iters after --warmup.

Writes PREFIX_recompute-none.csv and PREFIX_recompute-full.csv in the
measurements format of `frugal plan validate` (src/sim/validation.cc), one
file per recompute mode because validate takes --recompute for the file.
Rows are written as they are measured, so a timeout keeps what is done.

  python3 gpt_gpu.py --out-prefix out/measured_h100 [--device cuda:0]
  python3 gpt_gpu.py --out-prefix /tmp/m --device cpu --tiny   # code-path test
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

# hidden, heads of the built-in presets (src/sim/workload.cc kPresets); every
# built-in GPT has sequence length 2048 and vocabulary 51200, so its
# `frugal profile --model NAME` database has the keys of any layer count.
PRESETS = {"gpt-125m": (768, 12), "gpt-350m": (1024, 16), "gpt-1.3b": (2048, 16)}
SEQ, VOCAB = 2048, 51200
# (preset, layers): layer counts reduced so that a row takes tens of ms.
DEFAULT_MODELS = "gpt-350m:8,gpt-1.3b:4,gpt-125m:12"
TINY = {"seq": 64, "vocab": 512, "models": [("tiny-h64", 64, 4, 2), ("tiny-h128", 128, 4, 2)]}

HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
          "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")


class Layer(nn.Module):
    """One Megatron GPT layer on [seq, batch, hidden] activations."""

    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, 4 * hidden)
        self.fc2 = nn.Linear(4 * hidden, hidden)
        self.p = dropout

    def forward(self, x, causal):
        s, b, h = x.shape
        d = h // self.heads
        qkv = self.qkv(self.ln1(x)).view(s, b * self.heads, 3 * d)
        q, k, v = qkv.split(d, dim=-1)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [b*heads, s, d]
        # Scale folded into the GEMM as Megatron does; the causal mask is one
        # in-place pass that Megatron's fused softmax kernel does not need.
        scores = torch.baddbmm(torch.empty(b * self.heads, s, s, dtype=x.dtype, device=x.device), q,
                               k.transpose(1, 2), beta=0.0, alpha=1.0 / math.sqrt(d))
        scores.masked_fill_(causal, -10000.0)
        probs = F.dropout(torch.softmax(scores, dim=-1), self.p, self.training)
        ctx = torch.bmm(probs, v).transpose(0, 1).reshape(s, b, h)
        x = x + F.dropout(self.proj(ctx), self.p, self.training)
        m = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x + F.dropout(m, self.p, self.training)


class Gpt(nn.Module):
    def __init__(self, layers, hidden, heads, seq, vocab, dropout=0.1):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.layers = nn.ModuleList([Layer(hidden, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        self.p = dropout
        self.recompute = False
        self.register_buffer("causal", torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1), persistent=False)
        # Megatron's init (normal, std 0.02): the loss starts near ln(vocab) and
        # the scaled fp16 gradients stay finite.
        for mod in self.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)
            if isinstance(mod, nn.Linear):
                nn.init.zeros_(mod.bias)

    def forward(self, tokens, labels):
        b, s = tokens.shape
        x = self.word(tokens) + self.pos.weight[:s]
        x = F.dropout(x, self.p, self.training).transpose(0, 1).contiguous()  # [s, b, h]
        for layer in self.layers:
            if self.recompute:
                x = torch.utils.checkpoint.checkpoint(layer, x, self.causal, use_reentrant=False)
            else:
                x = layer(x, self.causal)
        logits = F.linear(self.ln_f(x), self.word.weight)  # [s, b, vocab], tied embedding
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.t().reshape(-1))


class MixedPrecisionAdam:
    """Megatron's fp16 optimizer: fp32 master weights, unscale + inf check, Adam, copy back."""

    def __init__(self, model, device, loss_scale=1024.0):
        self.params = [p for p in model.parameters()]
        self.master = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        fused = {"fused": True} if device.type == "cuda" else {}
        try:
            self.opt = torch.optim.Adam(self.master, lr=1e-5, **fused)
        except (TypeError, RuntimeError):
            self.opt = torch.optim.Adam(self.master, lr=1e-5)
        self.scale = loss_scale
        self.inv_scale = torch.full((1,), 1.0 / loss_scale, device=device)
        self.found_inf = torch.zeros(1, device=device)

    def step(self):
        grads = [p.grad.float() for p in self.params]
        if grads[0].is_cuda:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found_inf, self.inv_scale)
        else:
            torch._foreach_mul_(grads, 1.0 / self.scale)
        for m, g in zip(self.master, grads):
            m.grad = g
        self.opt.step()
        with torch.no_grad():
            if hasattr(torch, "_foreach_copy_"):  # torch >= 2.1: one launch per chunk, not per tensor
                torch._foreach_copy_(self.params, self.master)
            else:
                for p, m in zip(self.params, self.master):
                    p.copy_(m)
        for p in self.params:
            p.grad = None


class Timer:
    """CUDA events on a GPU (no host sync between iterations); the wall clock on CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.marks = []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def intervals_ms(self):
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]


def measure(model, opt, mb, seq, vocab, device, warmup, iters, loss_scale):
    tokens = torch.randint(0, vocab, (mb, seq), device=device)
    labels = torch.randint(0, vocab, (mb, seq), device=device)

    def step():
        loss = model(tokens, labels)
        (loss * loss_scale).backward()
        opt.step()

    for _ in range(warmup):
        step()
    timer = Timer(device)
    timer.mark()
    for _ in range(iters):
        step()
        timer.mark()
    times = sorted(timer.intervals_ms())
    return times[len(times) // 2], times


def parse_models(text):
    out = []
    for item in text.split(","):
        name, layers = item.split(":")
        if name not in PRESETS:
            sys.exit(f"gpt_gpu.py: unknown preset {name!r}; known: {', '.join(PRESETS)}")
        hidden, heads = PRESETS[name]
        out.append((name, hidden, heads, int(layers)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-prefix", required=True, help="writes PREFIX_recompute-{none,full}.csv")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--models", default=DEFAULT_MODELS, help="preset:layers,... (presets: %s)" % ", ".join(PRESETS))
    ap.add_argument("--micro-batches", default="1,2,4,8")
    ap.add_argument("--recompute", default="none,full")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=80, help="start no new configuration after this")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (seq 64, vocab 512) to test the code path")
    ap.add_argument("--gpu-name", default="", help="for the comment line (default: the device's name)")
    a = ap.parse_args()

    t_start = time.monotonic()
    device = torch.device(a.device)
    torch.manual_seed(0)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        gpu = a.gpu_name or torch.cuda.get_device_name(device)
    else:
        gpu = a.gpu_name or "cpu"
        torch.set_num_threads(1 if a.tiny else max(1, min(8, os.cpu_count() or 1)))
    seq, vocab = (TINY["seq"], TINY["vocab"]) if a.tiny else (SEQ, VOCAB)
    models = TINY["models"] if a.tiny else parse_models(a.models)
    mbs = [int(x) for x in a.micro_batches.split(",")]
    modes = a.recompute.split(",")
    dtype = torch.float16 if device.type == "cuda" else torch.float32  # CPU fp16 GEMMs are slow or missing
    loss_scale = 1024.0

    files = {}
    for mode in modes:
        if mode not in ("none", "full"):
            sys.exit(f"gpt_gpu.py: --recompute {mode}: none or full")
        f = open(f"{a.out_prefix}_recompute-{mode}.csv", "w")
        f.write(f"# measured by bench/planner/gpt_gpu.py on {gpu}: torch {torch.__version__}, {dtype}, "
                f"recompute {mode}, Adam, median of {a.iters} iterations after {a.warmup}; "
                f"validate with --recompute {mode} --gpus-per-node 1 --vocab {vocab}\n")
        f.write(HEADER + "\n")
        f.flush()
        files[mode] = f

    print(f"gpt_gpu.py: {gpu}, torch {torch.__version__}, {dtype}, seq {seq}, vocab {vocab}", flush=True)
    rows = 0
    for name, hidden, heads, layers in models:
        if time.monotonic() - t_start > a.budget_s:
            print(f"gpt_gpu.py: budget {a.budget_s:.0f} s spent, skipping {name}", flush=True)
            continue
        model = Gpt(layers, hidden, heads, seq, vocab).to(device=device, dtype=dtype).train()
        opt = MixedPrecisionAdam(model, device, loss_scale)
        for mode in modes:
            model.recompute = mode == "full"
            for mb in mbs:
                if time.monotonic() - t_start > a.budget_s:
                    print(f"gpt_gpu.py: budget spent, skipping {name} mb{mb} recompute {mode}", flush=True)
                    continue
                t0 = time.monotonic()
                try:
                    ms, times = measure(model, opt, mb, seq, vocab, device, a.warmup, a.iters, loss_scale)
                except RuntimeError as e:  # out of memory and the like: skip the row, keep going
                    print(f"gpt_gpu.py: {name} l{layers} mb{mb} recompute {mode}: {str(e).splitlines()[0]}",
                          flush=True)
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                    continue
                files[mode].write(f"1,{mb},{mb},{hidden},{heads},{layers},{seq},1,1,1,{ms:.3f}\n")
                files[mode].flush()
                rows += 1
                spread = (times[-1] - times[0]) / ms * 100 if ms > 0 else 0
                print(f"{name} h{hidden} l{layers} mb{mb} recompute {mode}: {ms:.2f} ms "
                      f"(min {times[0]:.2f}, max {times[-1]:.2f}, spread {spread:.1f}%; {time.monotonic() - t0:.1f} s)",
                      flush=True)
        del model, opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for f in files.values():
        f.close()
    print(f"gpt_gpu.py: {rows} rows in {time.monotonic() - t_start:.1f} s", flush=True)
    return 0 if rows > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
