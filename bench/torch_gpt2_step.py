#!/usr/bin/python3
"""Time GPT-2 training steps in PyTorch: the other side of bench/compare_torch.py (CPU) and
of scripts/gpu_check.sh (GPU).

usage: /usr/bin/python3 bench/torch_gpt2_step.py [--preset gpt2] [--batch 4] [--seq 64]
           [--warmup 1] [--steps 3] [--threads 2] [--precision fp32|bf16] [--json]
           [--device cpu|cuda] [--compile] [--attention explicit|sdpa]

The model is written here, not imported: token and position embeddings, pre-LayerNorm
blocks (eps 1e-5) with a fused qkv projection, causal attention spelled out as Hugging
Face's GPT-2 computes it (q @ k^T / sqrt(head size), causal mask, softmax, @ v), an MLP
with tanh-approximated GELU, a final LayerNorm and an lm_head tied to the token embedding.
Each timed step is forward + mean cross-entropy + backward + AdamW step, in fp32 on
random token batches from a seeded generator; the data draw is outside the timed region.
--precision bf16 runs the forward under torch.autocast("cpu", dtype=torch.bfloat16), the
mixed precision ctrain's train.precision=bf16 is checked against (much slower than fp32 on
CPUs without bf16 units). Left out on purpose: dropout and anything that needs more than
torch and the standard library.

--device cuda is the nanoGPT-style GPU step ctrain's CUDA backend is measured against: the
model and batches on the GPU, TF32 off (fp32 is fp32, as ctrain's), autocast on the GPU for
bf16, AdamW fused, --compile for torch.compile and --attention sdpa for
F.scaled_dot_product_attention (flash attention where PyTorch has it). Steps are timed
between device synchronisations; peak_device_bytes is torch.cuda.max_memory_allocated.
"""

import argparse
import json
import math
import resource
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # reported in main(), so --help still works without torch
    torch = None

# The same shapes as ctrain's model presets (src/models/model.c).
PRESETS = {
    "gpt2": dict(layers=12, heads=12, embd=768, vocab=50257, ctx=1024),
    "gpt2-medium": dict(layers=24, heads=16, embd=1024, vocab=50257, ctx=1024),
    "gpt2-large": dict(layers=36, heads=20, embd=1280, vocab=50257, ctx=1024),
    "gpt2-xl": dict(layers=48, heads=25, embd=1600, vocab=50257, ctx=1024),
    "gpt2-demo": dict(layers=4, heads=4, embd=128, vocab=512, ctx=128),
    "gpt2-tiny": dict(layers=2, heads=2, embd=16, vocab=64, ctx=32),
}
NAME = "torch_gpt2_step.py"


def fail(msg, code=2):
    print("%s: error: %s" % (NAME, msg), file=sys.stderr)
    sys.exit(code)


def model_class():
    """The GPT2 module class (defined here so that importing this file does not need torch)."""

    class Attention(nn.Module):
        def __init__(self, C, H, ctx, sdpa=False):
            super().__init__()
            self.H = H
            self.sdpa = sdpa
            self.qkv = nn.Linear(C, 3 * C)
            self.proj = nn.Linear(C, C)
            mask = torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx)
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, x):
            B, T, C = x.shape
            hs = C // self.H
            q, k, v = self.qkv(x).split(C, dim=2)
            # (B, T, C) -> (B, H, T, hs)
            q = q.view(B, T, self.H, hs).transpose(1, 2)
            k = k.view(B, T, self.H, hs).transpose(1, 2)
            v = v.view(B, T, self.H, hs).transpose(1, 2)
            if self.sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.proj(y)

    class Block(nn.Module):
        def __init__(self, C, H, ctx, sdpa=False):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.attn = Attention(C, H, ctx, sdpa)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.fc = nn.Linear(C, 4 * C)
            self.fc_proj = nn.Linear(4 * C, C)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            h = F.gelu(self.fc(self.ln_2(x)), approximate="tanh")
            return x + self.fc_proj(h)

    class GPT2(nn.Module):
        def __init__(self, cfg, sdpa=False):
            super().__init__()
            C = cfg["embd"]
            self.wte = nn.Embedding(cfg["vocab"], C)
            self.wpe = nn.Embedding(cfg["ctx"], C)
            self.h = nn.ModuleList(Block(C, cfg["heads"], cfg["ctx"], sdpa) for _ in range(cfg["layers"]))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            self.init_weights(cfg["layers"])

        def init_weights(self, L):
            # GPT-2: N(0, 0.02) for matrices and embeddings, zero biases, unit LayerNorm
            # gains; the two projections that write into the residual use 0.02/sqrt(2L).
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    std = 0.02
                    if name.endswith("attn.proj.weight") or name.endswith("fc_proj.weight"):
                        std = 0.02 / math.sqrt(2 * L)
                    nn.init.normal_(p, mean=0.0, std=std)
                elif ".ln_" in name or name.startswith("ln_f"):
                    nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
                else:
                    nn.init.zeros_(p)

        def forward(self, idx, targets):
            B, T = idx.shape
            pos = torch.arange(T, dtype=torch.long, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            x = self.ln_f(x)
            logits = F.linear(x, self.wte.weight)  # head tied to wte
            return F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))

    return GPT2


def parse_args(argv):
    ap = argparse.ArgumentParser(prog=NAME, description="Time PyTorch GPT-2 training steps.")
    ap.add_argument("--preset", default="gpt2", choices=sorted(PRESETS))
    for k in ("layers", "heads", "embd", "vocab", "ctx"):
        ap.add_argument("--" + k, type=int, help="override the preset's %s" % k)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (default 3)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                    help="bf16: the forward under CPU autocast (bf16 matmuls)")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="cuda: the step on the GPU (TF32 off, fused AdamW)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--attention", default="explicit", choices=("explicit", "sdpa"),
                    help="sdpa: F.scaled_dot_product_attention (flash where available)")
    a = ap.parse_args(argv)

    cfg = dict(PRESETS[a.preset])
    custom = False
    for k in cfg:
        v = getattr(a, k)
        if v is not None:
            custom = custom or v != cfg[k]
            cfg[k] = v
    for k, v in cfg.items():
        if v < 1:
            fail("--%s must be at least 1, got %d" % (k, v))
    if cfg["embd"] % cfg["heads"]:
        fail("--embd %d is not a multiple of --heads %d" % (cfg["embd"], cfg["heads"]))
    if a.batch < 1 or a.seq < 1:
        fail("--batch and --seq must be at least 1, got %d and %d" % (a.batch, a.seq))
    if a.seq > cfg["ctx"]:
        fail("--seq %d exceeds the context length %d of the model" % (a.seq, cfg["ctx"]))
    if a.steps < 1 or a.warmup < 0:
        fail("expected --steps >= 1 and --warmup >= 0, got %d and %d" % (a.steps, a.warmup))
    if a.threads < 1:
        fail("--threads must be at least 1, got %d" % a.threads)
    a.cfg = cfg
    a.preset_name = "custom" if custom else a.preset
    return a


def main(argv):
    a = parse_args(argv)
    if torch is None:
        fail("cannot import torch; run with /usr/bin/python3 (Debian's python3-torch)", 1)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            fail("--device cuda: torch sees no CUDA device", 1)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device)
    if a.attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        fail("--attention sdpa needs PyTorch 2.0 or later (this is %s)" % torch.__version__, 1)
    if a.compile and not hasattr(torch, "compile"):
        fail("--compile needs PyTorch 2.0 or later (this is %s)" % torch.__version__, 1)

    model = model_class()(a.cfg, sdpa=a.attention == "sdpa").to(dev)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    # Weight decay on matrices and embeddings only, as ctrain's AdamW does.
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if cuda else {"foreach": True}))
    n_params = sum(p.numel() for p in model.parameters())
    step_model = torch.compile(model) if a.compile else model

    gen = torch.Generator().manual_seed(a.seed)
    B, T, V = a.batch, a.seq, a.cfg["vocab"]
    step_s, losses = [], []
    for i in range(a.warmup + a.steps):
        tok = torch.randint(0, V, (B, T + 1), generator=gen)
        x, y = tok[:, :-1].contiguous().to(dev), tok[:, 1:].contiguous().to(dev)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = step_model(x, y)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        lv = loss.item()
        if not math.isfinite(lv):
            fail("step %d: loss is %r, expected a finite number" % (i + 1, lv), 1)
        if i >= a.warmup:
            step_s.append(dt)
            losses.append(lv)
        if not a.json:
            print("%s step %d: %.4f s, loss %.4f" % ("warmup" if i < a.warmup else "timed",
                                                     i + 1, dt, lv), file=sys.stderr)

    med = statistics.median(step_s)
    out = {
        "bench": "torch_step", "impl": "pytorch", "torch": torch.__version__,
        "preset": a.preset_name, "config": a.cfg, "params": n_params,
        "B": B, "T": T, "threads": a.threads, "warmup": a.warmup, "precision": a.precision,
        "step_s": step_s, "median_s": med, "tokens_per_s": B * T / med, "loss": losses,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "device": a.device, "compile": a.compile, "attention": a.attention,
    }
    if cuda:
        out["peak_device_bytes"] = torch.cuda.max_memory_allocated()
        out["gpu"] = torch.cuda.get_device_name()
    if a.json:
        print(json.dumps(out))
    else:
        print("pytorch %s  %s B=%d T=%d threads=%d  params %d\n"
              "step median %.4f s (min %.4f, max %.4f)  %.1f tokens/s  peak RSS %.1f MiB"
              % (out["torch"], out["preset"], B, T, a.threads, n_params, med, min(step_s),
                 max(step_s), out["tokens_per_s"], out["peak_rss_bytes"] / 2 ** 20))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
