#!/usr/bin/env python3
"""Dropout parity: ctrain's training dropout against PyTorch (gpt2_ref.py, llama_ref.py).

usage: /usr/bin/python3 tests/golden/test_dropout_parity.py path/to/ctrain
Exit status 0 when every check passes, 1 otherwise; each check prints PASS/FAIL.

Two small models are first trained for a while in PyTorch without dropout (so that they
predict their bigram data well and dropout visibly costs loss), then written as Hugging
Face directories: a GPT-2 whose config.json has no *_pdrop keys (GPT2Config's default,
0.1 each, applies) and a LLaMA with attention_dropout 0.1. For each:
(a) one step of 2 accumulated micro-batches with debug.dump_dropout=1: the loss of
    PyTorch's model with ctrain's dumped masks equals ctrain's step-1 loss within 1e-5
    (relative) and its gradients ctrain's step-1 gradients (1e-4 of each tensor's largest),
    while the loss without dropout is far off; the masks hold 0 or 1/(1-p), drop about p,
    differ between micro-batches, and name every site HF has (GPT-2: embd, attn_probs,
    attn_resid, mlp_resid; LLaMA: attn_probs only); the log says what dropout trains;
(b) statistics: optim.lr=0 for 200 steps, so the weights stay put: the mean over the steps
    of ctrain's loss minus PyTorch's mean loss on the same batch with its own nn.Dropout
    (4 passes per batch) is within 3 standard errors of 0, while ctrain's mean minus the
    no-dropout loss is more than 5 standard errors above 0 (the test can tell);
(c) model.dropout=0 trains without dropout: its losses are PyTorch's eval-mode losses.
Set CT_KEEP_TMP=1 to keep the working directory (kept anyway when a check fails).
CT_DROPOUT_PARTS=a runs (a) only: the sim test list's run, which checks that the masks and
their gradients cross the backend seam (the ref kernels would take over ten minutes over
(b)'s 1600 steps, whose statistics do not depend on the backend); the gpu list runs both.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import numpy as np
    import torch
except ImportError:
    print("FAIL: PyTorch is not installed (python3-torch); run with /usr/bin/python3")
    sys.exit(1)
import gpt2_ref as G  # noqa: E402
import llama_ref as R  # noqa: E402

V = 97
GPT_CFG = dict(vocab_size=V, n_ctx=64, n_embd=64, n_layer=2, n_head=4)
LLAMA_CFG = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                 rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
P_DROP = 0.1
T = 32
# CT_PARITY_HEAD_SIZE=64 (the GPU check, `ctest -L sim` for some): the same checks at
# head size 64 and a longer sequence, the shapes whose attention the CUDA backend runs in
# its tiled kernels (GPT-2 124M, TinyLlama); the head sizes above take its row kernels.
HEAD_SIZE = int(os.environ.get("CT_PARITY_HEAD_SIZE") or 0)
if HEAD_SIZE:
    GPT_CFG = dict(GPT_CFG, n_head=2, n_embd=2 * HEAD_SIZE)
    LLAMA_CFG = dict(LLAMA_CFG, hidden_size=4 * HEAD_SIZE, intermediate_size=256)
    T = 48
B_A, ACCUM_A = 2, 2          # (a): two micro-batches, rows 0..1 and 2..3 of the step
B_B, STEPS_B, PASSES = 8, 200, 4  # (b)
PRE_B, PRE_STEPS, PRE_LR = 8, 150, 3e-3
N_TOKENS = (STEPS_B + 2) * B_B * T + 1
SEED = 5
PARTS = os.environ.get("CT_DROPOUT_PARTS") or "ab"

LOSS_RTOL = 1e-5
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-7
CTRAIN_TIMEOUT_S = 300


def make_tokens(n, vocab, seed):
    """A seeded bigram chain with skewed token frequencies: something a model can learn."""
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, vocab + 1)
    rng.shuffle(zipf)
    alpha = 0.5 * zipf * vocab / zipf.sum()
    cum = np.cumsum(np.stack([rng.dirichlet(alpha) for _ in range(vocab)]), axis=1)
    toks = np.empty(n, dtype=np.int64)
    toks[0] = rng.integers(vocab)
    u = rng.random(n)
    for i in range(1, n):
        toks[i] = min(int(np.searchsorted(cum[toks[i - 1]], u[i], side="right")), vocab - 1)
    return toks


class Report:
    def __init__(self):
        self.results = []

    def check(self, name, ok, detail=""):
        ok = bool(ok)
        self.results.append((name, ok, detail))
        print("%s  %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""),
              flush=True)
        return ok


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def run_ctrain(rep, binary, args, label):
    """(ok, stderr text) of one ctrain run."""
    cmd = [binary] + args
    env = dict(os.environ, OMP_NUM_THREADS="2")
    print("\n[%s] %s" % (label, " ".join(shlex.quote(c) for c in cmd)), flush=True)
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=CTRAIN_TIMEOUT_S)
    except (subprocess.TimeoutExpired, OSError) as e:
        return rep.check("%s: ctrain ran" % label, False, str(e)), ""
    err = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0:
        print("--- ctrain stderr ---\n%s" % err[-6000:])
    return rep.check("%s: ctrain exit status 0" % label, proc.returncode == 0,
                     "status %d after %.1fs" % (proc.returncode, time.time() - t0)), err


def read_losses(path):
    recs = {}
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("split") == "train":
                    recs[obj["step"]] = float(obj["loss"])
    return [recs[s] for s in sorted(recs)]


def args_for(init, shard, run, B, accum, steps, lr, extra=()):
    return ["train", "model.init_from=%s" % init, "data.train=%s" % shard,
            "data.shuffle=false", "train.batch_size=%d" % B, "train.seq_len=%d" % T,
            "train.grad_accum=%d" % accum, "train.steps=%d" % steps, "train.seed=%d" % SEED,
            "optim.lr=%r" % lr, "optim.weight_decay=0.1", "optim.grad_clip=0",
            "schedule.name=constant", "schedule.warmup_steps=0", "run.dir=%s" % run,
            "run.checkpoint_every=0"] + list(extra)


class Arch:
    """The two families behind one interface: the reference's forward, names and config."""

    def __init__(self, name):
        self.name = name
        self.gpt2 = name == "gpt2"
        self.cfg = GPT_CFG if self.gpt2 else LLAMA_CFG
        self.L = self.cfg["n_layer"] if self.gpt2 else self.cfg["num_hidden_layers"]
        self.NH = self.cfg["n_head"] if self.gpt2 else self.cfg["num_attention_heads"]
        self.C = self.cfg["n_embd"] if self.gpt2 else self.cfg["hidden_size"]

    def sites(self):
        """Mask names of one micro-batch and their shapes, for a batch of B rows."""
        out = {}
        if self.gpt2:
            out["embd"] = "rows"
        for l in range(self.L):
            out["h.%d.attn_probs" % l] = "probs"
            if self.gpt2:
                out["h.%d.attn_resid" % l] = "rows"
                out["h.%d.mlp_resid" % l] = "rows"
        return out

    def torch_params(self, params):
        return {n: torch.as_tensor(np.asarray(v)).float().clone() for n, v in params.items()}

    def forward(self, P, x, y, dropout=None):
        if self.gpt2:
            drop = (P_DROP, P_DROP, P_DROP) if dropout == "torch" else dropout
            return G.forward(P, self.cfg, x, y, dropout=drop)[1]
        drop = P_DROP if dropout == "torch" else dropout
        return R.forward(P, self.cfg, x, y, dropout=drop)[1]

    def pretrain(self, tokens):
        """Parameters ({name: numpy}) after PRE_STEPS of AdamW without dropout."""
        if self.gpt2:
            p0 = G.init_params(self.cfg, seed=3)
            res = G.train_torch(p0, self.cfg, tokens, PRE_B, T, 1, PRE_STEPS, PRE_LR, 0.9, 0.95,
                                1e-8, 0.0, 1.0)
        else:
            p0 = R.init_params(self.cfg, seed=3)
            res = R.train_torch(p0, self.cfg, tokens, PRE_B, T, PRE_STEPS, PRE_LR, 0.9, 0.95,
                                1e-8, 0.0, 1.0)
        return res.params

    def save(self, path, params):
        if self.gpt2:
            G.save_hf_dir(path, self.cfg, params)
            # no *_pdrop keys: transformers' GPT2Config default (0.1) applies
            with open(os.path.join(path, "config.json")) as f:
                cfg = json.load(f)
            for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
                cfg.pop(k, None)
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2)
        else:
            R.save_hf_dir(path, self.cfg, params, config_extra={"attention_dropout": P_DROP})

    def log_line(self):
        if self.gpt2:
            return "dropout: embeddings 0.1, residual 0.1, attention 0.1 (config.json)"
        return "dropout: attention 0.1 (config.json)"


def check_masks(rep, L, arch, masks, n_mb, B):
    """The dump's names, shapes and values; returns the per-micro-batch mask dicts."""
    want = set()
    for a in range(n_mb):
        want |= {"mb%d.%s" % (a, s) for s in arch.sites()}
    rep.check("%s: dump names" % L, set(masks) == want,
              "extra %s, missing %s" % (sorted(set(masks) - want)[:4], sorted(want - set(masks))[:4]))
    keep = np.float32(1.0) / np.float32(1.0 - np.float32(P_DROP))
    bad, fracs = [], []
    for name, m in masks.items():
        kind = arch.sites().get(name.split(".", 1)[1])
        shape = (B, arch.NH, T, T) if kind == "probs" else (B, T, arch.C)
        if tuple(m.shape) != shape:
            bad.append("%s shape %s, expected %s" % (name, list(m.shape), list(shape)))
            continue
        if not np.all((m == 0) | (m == keep)):
            bad.append("%s holds values other than 0 and %r" % (name, float(keep)))
        fracs.append(float((m == 0).mean()))
    rep.check("%s: masks are 0 or 1/(1-p), shapes (B,NH,T,T) and (B,T,C)" % L, not bad,
              "; ".join(bad[:4]))
    total = float(np.mean(fracs)) if fracs else 0.0
    rep.check("%s: the masks drop about p = %g" % (L, P_DROP), abs(total - P_DROP) < 0.01,
              "dropped %.4f of the elements" % total)
    per = [{k.split(".", 1)[1]: v for k, v in masks.items() if k.startswith("mb%d." % a)}
           for a in range(n_mb)]
    if n_mb > 1 and per[0] and per[1]:
        differ = any(not np.array_equal(per[0][k], per[1][k]) for k in per[0] if k in per[1])
        rep.check("%s: micro-batches draw other masks" % L, differ)
    return per


def part_a(rep, binary, arch, init, shard, tokens, tmp):
    L = "%s (a) step 1 with ctrain's masks" % arch.name
    run = os.path.join(tmp, arch.name + "_a")
    ok, err = run_ctrain(rep, binary, args_for(init, shard, run, B_A, ACCUM_A, 1, 1e-3,
                                               ["debug.dump_dropout=1",
                                                "debug.dump_grads_step=1"]), L)
    if not ok:
        return
    rep.check("%s: the log says what trains" % L, arch.log_line() in err,
              "" if arch.log_line() in err else "no line %r" % arch.log_line())
    path = os.path.join(run, "dropout_step1.safetensors")
    if not rep.check("%s: %s written" % (L, os.path.basename(path)), os.path.isfile(path)):
        return
    per = check_masks(rep, L, arch, G.read_safetensors(path), ACCUM_A, B_A)
    # PyTorch's step: the mean of the micro-batch losses, each under its masks
    P = arch.torch_params(G.read_safetensors(os.path.join(init, "model.safetensors")))
    if arch.gpt2:
        P = {n[len("transformer."):] if n.startswith("transformer.") else n: t for n, t in P.items()}
    for t in P.values():
        t.requires_grad_(True)
    batches = G.sequential_batches(tokens, B_A, T)
    total, plain = 0.0, 0.0
    for a in range(ACCUM_A):
        x, y = (torch.from_numpy(v) for v in next(batches))
        loss = arch.forward(P, x, y, dropout=per[a])
        (loss / ACCUM_A).backward()
        total += float(loss.detach()) / ACCUM_A
        with torch.no_grad():
            plain += float(arch.forward(P, x, y)) / ACCUM_A
    got = read_losses(os.path.join(run, "metrics.jsonl"))
    if not rep.check("%s: metrics.jsonl has step 1" % L, len(got) == 1, "%d steps" % len(got)):
        return
    d = rel(got[0], total)
    rep.check("%s: loss equals PyTorch's with the masks" % L, d <= LOSS_RTOL,
              "ctrain %.8f, torch %.8f, rel %.2e (tol %.0e)" % (got[0], total, d, LOSS_RTOL))
    rep.check("%s: the loss without dropout is far off (the check can fail)" % L,
              rel(got[0], plain) > 100 * LOSS_RTOL,
              "no dropout %.8f, rel %.2e" % (plain, rel(got[0], plain)))
    grads = G.read_safetensors(os.path.join(run, "grads_step1.safetensors"))
    problems, worst = [], (0.0, "")
    for n, t in P.items():
        key = n if n in grads else ("transformer." + n if ("transformer." + n) in grads else None)
        if key is None:
            problems.append("%s missing" % n)
            continue
        r = t.grad.detach().numpy().astype(np.float64)
        o = np.asarray(grads[key], dtype=np.float64)
        if o.shape != r.shape:
            problems.append("%s shape %s vs %s" % (n, o.shape, r.shape))
            continue
        tol = GRAD_RTOL * float(np.abs(r).max()) + GRAD_ATOL
        dd = float(np.abs(o - r).max())
        if not dd <= tol:
            problems.append("%s: %.3g > %.3g" % (n, dd, tol))
        if dd / tol >= worst[0]:
            worst = (dd / tol, n)
    rep.check("%s: step-1 gradients equal PyTorch's with the masks" % L, not problems,
              "; ".join(problems[:4]) if problems else "worst %s at %.2f of tol" % (worst[1], worst[0]))


def part_b(rep, binary, arch, init, shard, tokens, params, tmp):
    L = "%s (b) mean loss over %d steps at lr 0" % (arch.name, STEPS_B)
    run = os.path.join(tmp, arch.name + "_b")
    ok, _ = run_ctrain(rep, binary, args_for(init, shard, run, B_B, 1, STEPS_B, 0.0), L)
    if not ok:
        return
    got = read_losses(os.path.join(run, "metrics.jsonl"))
    if not rep.check("%s: %d steps in metrics.jsonl" % (L, STEPS_B), len(got) == STEPS_B,
                     "%d" % len(got)):
        return
    torch.manual_seed(1234)
    P = arch.torch_params(params)
    batches = G.sequential_batches(tokens, B_B, T)
    ref, plain = [], []
    with torch.no_grad():
        for _ in range(STEPS_B):
            x, y = (torch.from_numpy(v) for v in next(batches))
            ref.append(np.mean([float(arch.forward(P, x, y, dropout="torch"))
                                for _ in range(PASSES)]))
            plain.append(float(arch.forward(P, x, y)))
    got, ref, plain = np.array(got), np.array(ref), np.array(plain)
    d, e = got - ref, got - plain
    se_d, se_e = d.std(ddof=1) / np.sqrt(STEPS_B), e.std(ddof=1) / np.sqrt(STEPS_B)
    print("  ctrain mean %.6f, torch nn.Dropout mean %.6f, no dropout %.6f"
          % (got.mean(), ref.mean(), plain.mean()))
    rep.check("%s: ctrain's mean equals PyTorch's nn.Dropout mean within 3 standard errors" % L,
              abs(d.mean()) <= 3 * se_d, "difference %.5f, standard error %.5f (%.2f SE)"
              % (d.mean(), se_d, d.mean() / se_d))
    rep.check("%s: and differs from the no-dropout loss by more than 5 standard errors" % L,
              e.mean() > 5 * se_e, "difference %.5f, standard error %.5f (%.1f SE)"
              % (e.mean(), se_e, e.mean() / se_e))
    # (c) model.dropout=0: PyTorch's eval-mode losses
    L = "%s (c) model.dropout=0" % arch.name
    run = os.path.join(tmp, arch.name + "_c")
    ok, err = run_ctrain(rep, binary, args_for(init, shard, run, B_B, 1, 3, 0.0,
                                               ["model.dropout=0"]), L)
    if ok:
        got = read_losses(os.path.join(run, "metrics.jsonl"))
        worst = max(rel(g, p) for g, p in zip(got, plain[:3])) if len(got) == 3 else 1.0
        rep.check("%s: losses equal PyTorch's without dropout" % L, worst <= LOSS_RTOL,
                  "worst rel %.2e" % worst)
        rep.check("%s: the log says so" % L, "(model.dropout)" in err and "dropout:" in err)


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 1
    binary = os.path.abspath(argv[1])
    rep = Report()
    t_start = time.time()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="ctrain_dropout_parity_")
    print("working directory: %s" % tmp)
    tokens = make_tokens(N_TOKENS, V, 11)
    shard = os.path.join(tmp, "train.bin")
    G.write_shard(shard, tokens)
    for name in ("gpt2", "llama"):
        arch = Arch(name)
        t0 = time.time()
        params = arch.pretrain(tokens)
        init = os.path.join(tmp, name + "_init")
        arch.save(init, params)
        print("\n%s: pretrained without dropout in %.1fs" % (name, time.time() - t0))
        part_a(rep, binary, arch, init, shard, tokens, tmp)
        if "b" in PARTS:
            part_b(rep, binary, arch, init, shard, tokens, params, tmp)
        else:
            print("%s (b): not run (CT_DROPOUT_PARTS=%s)" % (name, PARTS))

    fails = [r for r in rep.results if not r[1]]
    print("\n%d checks, %d failed, %.1fs" % (len(rep.results), len(fails), time.time() - t_start))
    for name, _, detail in fails:
        print("FAIL  %s%s" % (name, (": " + detail) if detail else ""))
    if fails or os.environ.get("CT_KEEP_TMP"):
        print("kept working directory %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("RESULT: %s" % ("PASS" if not fails else "FAIL"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
