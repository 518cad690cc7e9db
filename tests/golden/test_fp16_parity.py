#!/usr/bin/env python3
"""Mixed precision fp16 with dynamic loss scaling (train.precision=fp16): ctrain against
PyTorch, step for step.

usage: /usr/bin/python3 tests/golden/test_fp16_parity.py path/to/ctrain
Exit status 0 when every check passes, 1 otherwise; each check prints PASS/FAIL with numbers.

fp16 runs only on GPUs without bf16, so ctrain runs on run.device=sim reporting compute
capability 7.5 (CT_SIM_COMPUTE_CAPABILITY). torch 1.13 on a CPU has neither fp16 autocast
nor a CPU GradScaler, so the reference writes both out:
  * every GEMM of a linear layer or the head reads fp16-rounded inputs and weights
    (.half().float(), so beyond 65504 is inf and subnormals stay), sums in fp32, fp32
    outputs, biases fp32; its backward rounds the incoming gradient to fp16 as autocast's
    fp16 linear does (an fp16 output's gradient is fp16) and multiplies it by the rounded
    input and weight; attention, norms, softmax and the loss stay fp32 (F16Gemm below);
  * GradScaler's loop: (loss * S).backward(); a non-finite gradient skips the step and
    halves S; otherwise the gradients are unscaled (times the fp32 1/S), clipped
    (clip_grad_norm_) and AdamW steps; after W good steps in a row S doubles.
Checks, for GPT-2 (model.dropout=0) and a LLaMA-family tiny (GQA, SwiGLU, RoPE):
  * 8 AdamW steps at the default scale (2^16): the unscaled gradient norms within
    NORM_RTOL of the reference; per-step losses within LOSS_RTOL of the
    reference (the bf16 parity test allows 2e-2 against autocast; fp16 keeps 3 more bits
    and the reference has ctrain's semantics exactly, so the bound here is far tighter);
    ctrain's fp16 losses differ from its fp32 ones (fp16 is in effect) by much more;
    and ctrain fp16's mean gap to the reference is well under ctrain fp32's (fp16 rounds
    activations too, so a one-ulp difference in an fp32 sum may flip an element's fp16
    value: the gap is small, not zero);
  * from a scale of 2^24 with W = 2, 12 steps: the same steps overflow on both sides
    (only fp16's range makes them overflow), the scales are the same at every step, and
    the losses agree as above.
Set CT_KEEP_TMP=1 to keep the working directory (it is always kept when a check fails).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import numpy as np
    import torch
except ImportError:
    print("FAIL: PyTorch is not installed (python3-torch); run with /usr/bin/python3")
    sys.exit(1)
import gpt2_ref as G  # noqa: E402
import llama_ref as L  # noqa: E402

GPT2_CFG = dict(vocab_size=97, n_ctx=32, n_embd=32, n_layer=2, n_head=4)
LLAMA_CFG = dict(vocab_size=293, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                 rms_norm_eps=1e-6, rope_theta=20000.0, tie_word_embeddings=False)
B, T, STEPS = 4, 16, 8
# eps 1e-4, against gradients of 1e-4..1e-2: an update AdamW would read still scaled by S
# (not unscaled) moves far enough from the reference to fail
LR, BETA1, BETA2, WD, CLIP, EPS = 3e-3, 0.9, 0.95, 0.1, 0.5, 1e-4
LOSS_RTOL = 2e-4   # per-step losses against the reference (same semantics, other sum orders)
NORM_RTOL = 1e-3   # the gradient norms (sums over every gradient, in other orders)
TEETH = 0.8        # ctrain fp16's mean gap to the reference under TEETH x ctrain fp32's
OVF_INIT, OVF_W, OVF_STEPS = 2.0 ** 24, 2, 12
TIMEOUT_S = 300


class Report:
    def __init__(self):
        self.fails = 0

    def check(self, name, ok, detail=""):
        print("%s  %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""),
              flush=True)
        self.fails += 0 if ok else 1
        return ok


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def r16(x):
    return x.half().float()


class F16Mm(torch.autograd.Function):
    """a @ b with both rounded to fp16, fp32 sums; the backward rounds the incoming
    gradient to fp16 and multiplies it by the rounded operands."""

    @staticmethod
    def forward(ctx, a, b):
        a16, b16 = r16(a), r16(b)
        ctx.save_for_backward(a16, b16)
        return torch.matmul(a16, b16)

    @staticmethod
    def backward(ctx, g):
        a16, b16 = ctx.saved_tensors
        g16 = r16(g)
        da = torch.matmul(g16, b16.transpose(-2, -1))
        db = torch.matmul(a16.reshape(-1, a16.shape[-1]).t(), g16.reshape(-1, g16.shape[-1]))
        return da, db


class F16Gemm(torch.Tensor):
    """A GEMM weight: its products (x @ W, x @ W.T) go through F16Mm; any other use (an
    embedding lookup) sees the fp32 weight."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        plain = [a.as_subclass(torch.Tensor) if isinstance(a, cls) else a for a in args]
        if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__):
            return F16Mm.apply(*plain)
        with torch._C.DisableTorchFunction():
            out = func(*plain, **kwargs)
        name = getattr(func, "__name__", "")
        if isinstance(args[0], cls) and name in ("t", "transpose", "__get__"):
            return out.as_subclass(cls)   # W.t(), W.T: still a GEMM weight
        return out


def torch_train(forward, names, params, cfg, tokens, steps, init, window, fp16=True):
    """Losses, scales and overflow flags of `steps` optimizer steps."""
    torch.set_num_threads(2)
    P = {n: torch.as_tensor(np.asarray(params[n]) if not torch.is_tensor(params[n])
                            else params[n]).detach().clone().float().contiguous()
         .requires_grad_(True) for n in names}
    decay = [P[n] for n in names if P[n].ndim >= 2]
    no_decay = [P[n] for n in names if P[n].ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS, foreach=False)
    plist = [P[n] for n in names]
    batches = G.sequential_batches(tokens, B, T)
    S, good = init, 0
    losses, scales, overflow, norms = [], [], [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        x, y = next(batches)
        V = {n: (P[n].as_subclass(F16Gemm) if fp16 and P[n].ndim == 2 else P[n]) for n in names}
        _, loss = forward(V, cfg, torch.from_numpy(x), torch.from_numpy(y))
        loss = loss.as_subclass(torch.Tensor)
        (loss * (S if fp16 else 1.0)).backward()
        losses.append(float(loss.detach()))
        scales.append(S)
        if not fp16:
            torch.nn.utils.clip_grad_norm_(plist, CLIP)
            opt.step()
            overflow.append(0)
            continue
        if not all(bool(torch.isfinite(p.grad).all()) for p in plist):
            S, good = S * 0.5, 0
            overflow.append(1)
            norms.append(None)
            continue
        overflow.append(0)
        inv = torch.tensor(1.0 / S, dtype=torch.float32)
        with torch.no_grad():
            for p in plist:
                p.grad.mul_(inv)
        norms.append(float(torch.nn.utils.clip_grad_norm_(plist, CLIP)))
        opt.step()
        good += 1
        if good == window:
            S, good = S * 2, 0
    return losses, scales, overflow, norms


def run(binary, args):
    env = dict(os.environ, OMP_NUM_THREADS="2", CT_SIM_COMPUTE_CAPABILITY="7.5")
    env.pop("CTRAIN_DEVICE", None)
    return subprocess.run([binary] + args, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=TIMEOUT_S)


def train_args(init, shard, run_dir, steps, extra=()):
    return ["train", "model.init_from=%s" % init, "data.train=%s" % shard,
            "data.shuffle=false", "train.batch_size=%d" % B, "train.seq_len=%d" % T,
            "train.grad_accum=1", "train.steps=%d" % steps, "train.seed=0", "model.dropout=0",
            "optim.lr=%r" % LR, "optim.beta1=%r" % BETA1, "optim.beta2=%r" % BETA2,
            "optim.eps=%r" % EPS, "optim.weight_decay=%r" % WD, "optim.grad_clip=%r" % CLIP,
            "schedule.name=constant", "schedule.warmup_steps=0", "run.dir=%s" % run_dir,
            "run.checkpoint_every=0", "run.threads=2", "run.device=sim"] + list(extra)


def ctrain_run(rep, binary, label, args):
    p = run(binary, args)
    if not rep.check("%s: ctrain exits 0" % label, p.returncode == 0,
                     "exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace")[-1500:])):
        return None
    d = args[[a.startswith("run.dir=") for a in args].index(True)][8:]
    out = {}
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if o.get("split") == "train":
                out[o["step"]] = o
    return [out[s] for s in sorted(out)]


def make_tokens(n, vocab, seed):
    """A seeded bigram chain with skewed frequencies, so a few steps learn something."""
    rng = np.random.default_rng(seed)
    trans = rng.dirichlet(np.full(vocab, 0.05), size=vocab)
    cum = np.cumsum(trans, axis=1)
    toks = np.empty(n, dtype=np.int64)
    toks[0] = rng.integers(vocab)
    u = rng.random(n)
    for i in range(1, n):
        toks[i] = min(int(np.searchsorted(cum[toks[i - 1]], u[i], side="right")), vocab - 1)
    return toks


def parity(rep, binary, tmp, name, forward, names, params, save, cfg, tokens, overflow_run):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    init = os.path.join(d, "init")
    save(init, cfg, params)
    shard = os.path.join(d, "train.bin")
    G.write_shard(shard, tokens)
    ref, ref_s, _, ref_n = torch_train(forward, names, params, cfg, tokens, STEPS, 65536.0,
                                       2000)
    c16 = ctrain_run(rep, binary, "%s fp16" % name,
                     train_args(init, shard, os.path.join(d, "run16"), STEPS,
                                ["train.precision=fp16"]))
    c32 = ctrain_run(rep, binary, "%s fp32" % name,
                     train_args(init, shard, os.path.join(d, "run32"), STEPS))
    if c16 is None or c32 is None:
        return
    l16 = [o["loss"] for o in c16]
    l32 = [o["loss"] for o in c32]
    print("\n%s  %4s  %12s  %12s  %12s  %9s" % (name, "step", "torch fp16", "ctrain fp16",
                                                 "ctrain fp32", "rel"))
    for s in range(STEPS):
        print("%s  %4d  %12.7f  %12.7f  %12.7f  %9.2e" % (name, s + 1, ref[s], l16[s], l32[s],
                                                           rel(l16[s], ref[s])))
    worst = max(rel(c, r) for c, r in zip(l16, ref))
    rep.check("%s: %d per-step losses within %g of the torch fp16 reference"
              % (name, STEPS, LOSS_RTOL), len(l16) == STEPS and worst <= LOSS_RTOL,
              "worst %.2e" % worst)
    gn = [o["grad_norm"] for o in c16]
    wn = max(rel(a, b) for a, b in zip(gn, ref_n))
    rep.check("%s: the true (unscaled) gradient norms within %g of the reference"
              % (name, NORM_RTOL), wn <= NORM_RTOL, "worst %.2e: %s vs %s" % (wn, gn, ref_n))
    rep.check("%s: loss_scale 65536 every step, as the reference" % name,
              [o.get("loss_scale") for o in c16] == ref_s, str([o.get("loss_scale") for o in c16]))
    # fp16 rounds activations too, so a 1-ulp difference in an fp32 sum can flip an
    # element's fp16 value: the gap is not zero; but it is well below fp32's from the
    # fp16 reference
    g16 = sum(rel(c, r) for c, r in zip(l16, ref)) / STEPS
    g32 = sum(rel(c, r) for c, r in zip(l32, ref)) / STEPS
    rep.check("%s: fp16 is in effect (the mean gap to the reference is under %g x fp32's)"
              % (name, TEETH), g16 < TEETH * g32,
              "fp16 %.2e, fp32 %.2e" % (g16, g32))
    if not overflow_run:
        return
    ref, ref_s, ref_o, _ = torch_train(forward, names, params, cfg, tokens, OVF_STEPS,
                                       OVF_INIT, OVF_W)
    co = ctrain_run(rep, binary, "%s fp16 from 2^24" % name,
                    train_args(init, shard, os.path.join(d, "runovf"), OVF_STEPS,
                               ["train.precision=fp16", "train.loss_scale_init=%r" % OVF_INIT,
                                "train.loss_scale_window=%d" % OVF_W]))
    if co is None:
        return
    got_o = [o.get("overflow", 0) for o in co]
    got_s = [o.get("loss_scale") for o in co]
    print("%s overflow: torch %s, ctrain %s" % (name, ref_o, got_o))
    print("%s scales:   torch %s\n%s           ctrain %s" % (name, ref_s, name, got_s))
    rep.check("%s from 2^24: the same steps overflow, some do and some do not" % name,
              got_o == ref_o and 0 < sum(ref_o) < OVF_STEPS, "%s vs %s" % (got_o, ref_o))
    rep.check("%s from 2^24: the same scale at every step, with a doubling" % name,
              got_s == ref_s and any(b == 2 * a for a, b in zip(ref_s, ref_s[1:])),
              "%s vs %s" % (got_s, ref_s))
    lo = [o["loss"] for o in co]
    worst = max(rel(c, r) for c, r in zip(lo, ref))
    rep.check("%s from 2^24: per-step losses within %g" % (name, LOSS_RTOL),
              len(lo) == OVF_STEPS and worst <= LOSS_RTOL, "worst %.2e" % worst)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = os.path.abspath(sys.argv[1])
    rep = Report()
    tmp = tempfile.mkdtemp(prefix="ct_fp16_")
    print("working directory: %s" % tmp)
    gparams = G.init_params(GPT2_CFG, seed=1234)
    gtok = make_tokens(14 * B * T + 1, GPT2_CFG["vocab_size"], 7)
    parity(rep, binary, tmp, "gpt2", G.forward, G.param_names(GPT2_CFG["n_layer"]), gparams,
           G.save_hf_dir, GPT2_CFG, gtok, True)
    lparams = L.init_params(LLAMA_CFG, seed=4321)
    ltok = make_tokens(14 * B * T + 1, LLAMA_CFG["vocab_size"], 11)
    parity(rep, binary, tmp, "llama", L.forward, list(L.param_shapes(LLAMA_CFG)), lparams,
           L.save_hf_dir, LLAMA_CFG, ltok, True)
    if rep.fails == 0 and not os.environ.get("CT_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("kept %s" % tmp)
    print("%d failure(s)" % rep.fails)
    return 1 if rep.fails else 0


if __name__ == "__main__":
    sys.exit(main())
