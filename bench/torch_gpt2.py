#!/usr/bin/env python3
"""bench/torch_gpt2.py: the PyTorch eager reference for bench/train_step on the GPU.

One training step (forward, backward, AdamW, zero_grad) of the GPT-2-124M shape of
configs/gpt2-124m.cfg: vocab 50257, 12 pre-LN blocks (LayerNorm, causal self-attention with
bias, LayerNorm, MLP 4x with tanh GELU), d_model 768, 12 heads, learned positions (T rows, as
brigade's embedding), final LayerNorm, LM head tied to the token embedding, cross-entropy;
random tokens and targets, as bench/train_step. Prints tokens/s and MFU with brigade's count:
FLOPs per token = 6 N + 6 L C T, N the parameters with the tied embedding counted once, against
BRIGADE_PEAK_TFLOPS (default 989.4, the H100 SXM's dense bf16; on the CPU no MFU unless set).

  python3 bench/torch_gpt2.py [--B 16] [--T 1024] [--steps 10] [--dtype bf16|fp32]
                              [--attention sdpa|math] [--compile] [--device cuda|cpu]
bf16: torch.autocast(bfloat16) over fp32 master weights (brigade's mixed precision: fp32
parameters and optimizer state, 16-bit GEMMs). sdpa: F.scaled_dot_product_attention(
is_causal=True) (flash / memory-efficient kernels); math: softmax(Q K^T / sqrt(d)) V with the
B x H x T x T scores in memory, as brigade computes attention. AdamW(lr 6e-4, betas (0.9, 0.95),
eps 1e-8, weight_decay 0.1 on every parameter, as brigade's), fused on CUDA unless --no-fused.
Eager by default; --compile wraps the model in torch.compile. The first --warmup steps (1) are
not timed; each timed step is bracketed by torch.cuda.synchronize().
CPU check: python3 bench/torch_gpt2.py --device cpu --B 2 --T 32 --steps 2
"""
import argparse
import math
import os
import platform
import resource
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # a peer benchmark: without PyTorch there is nothing to compare, said so
    print(f"torch_gpt2: skipped: PyTorch is not installed for {sys.executable} "
          "(Debian: apt-get install python3-torch, then run it with /usr/bin/python3)", file=sys.stderr)
    sys.exit(0)


class Attention(nn.Module):
    def __init__(self, C, H, mode):
        super().__init__()
        self.H, self.mode = H, mode
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if self.mode == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, H, mode):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = Attention(C, H, mode)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, C, H, mode):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, mode) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one tensor
        for name, p in self.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--attention", choices=["sdpa", "math"], default="sdpa")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (off: eager)")
    ap.add_argument("--no-fused", action="store_true", help="AdamW without fused=True")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0:
        ap.error("need --steps >= 1 and --warmup >= 0")
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_gpt2: --device cuda but torch.cuda.is_available() is False (use --device cpu)")
    torch.manual_seed(1)
    V, T, L, C, H, B = a.vocab, a.T, a.layers, a.d_model, a.heads, a.B

    model = GPT(V, T, L, C, H, a.attention).to(dev)
    N = sum(p.numel() for p in model.parameters())  # the tied embedding once
    fused = cuda and not a.no_fused
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, **({"fused": True} if fused else {}))
    step_model = torch.compile(model) if a.compile else model
    if cuda:
        name = torch.cuda.get_device_name(dev)
    else:
        name = f"CPU {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"
    print(f"torch_gpt2: torch {torch.__version__} (CUDA {torch.version.cuda}), device {name}")
    print(f"torch_gpt2: GPT-2 shape V={V} L={L} C={C} H={H}, N={N / 1e6:.2f} M parameters (tied head once), "
          f"B={B} T={T}, {a.dtype}{' autocast over fp32 weights' if a.dtype == 'bf16' else ''}, attention "
          f"{a.attention}, {'torch.compile' if a.compile else 'eager'}, AdamW {'fused' if fused else 'not fused (foreach default)'}, "
          f"TF32 matmul {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}")

    g = torch.Generator(device=dev).manual_seed(1234)
    batches = [(torch.randint(0, V, (B, T), device=dev, generator=g),
                torch.randint(0, V, (B, T), device=dev, generator=g)) for _ in range(a.warmup + a.steps)]
    amp = torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16")

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    times = []
    for s, (x, y) in enumerate(batches):
        sync()
        t = time.perf_counter()
        with amp:
            loss = step_model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t = time.perf_counter() - t
        if s < a.warmup:
            print(f"  warm-up step: {t:.3f} s, loss {loss.item():.4f} (not counted)")
            continue
        times.append(t)
        print(f"  step {s - a.warmup + 1}: {t:.3f} s, {B * T / t:.0f} tokens/s, loss {loss.item():.4f}")

    total = sum(times)
    tps = B * T * len(times) / total
    per_token = 6.0 * N + 6.0 * L * C * T
    pk = os.environ.get("BRIGADE_PEAK_TFLOPS")
    peak = float(pk) if pk else (989.4 if cuda else 0.0)
    mfu = f", MFU {100 * per_token * tps / (peak * 1e12):.1f}% of {peak:.1f} TFLOP/s" if peak > 0 else ""
    if cuda:
        mem = f"peak memory {torch.cuda.max_memory_allocated(dev) / 2**30:.2f} GiB allocated, " \
              f"{torch.cuda.max_memory_reserved(dev) / 2**30:.2f} GiB reserved"
    else:
        mem = f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"
    print(f"torch_gpt2: {a.dtype} {a.attention} {'compiled' if a.compile else 'eager'} on {name}: "
          f"mean {total / len(times):.3f} s/step, {tps:.0f} tokens/s; model FLOPs {per_token:.3g} per token "
          f"(6N + 6LCT), {per_token * tps / 1e12:.2f} TFLOP/s{mfu}; {mem}")


if __name__ == "__main__":
    main()
