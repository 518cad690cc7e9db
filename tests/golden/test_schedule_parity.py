#!/usr/bin/env python3
"""Learning-rate schedules and gradient clipping: ctrain against PyTorch.

usage: /usr/bin/python3 tests/golden/test_schedule_parity.py path/to/ctrain
Exit status 0 when every check passes, 1 otherwise; each check prints PASS/FAIL with numbers.

A gpt2-tiny-shaped GPT-2 (2 layers, 2 heads, C=16, V=64, n_ctx=32) with random weights
(LayerNorm weights and biases random too) is saved as a Hugging Face directory, and a
synthetic shard is made with `ctrain synth`. For each schedule below ctrain trains it for
STEPS steps (B=4, T=16, AdamW, grad_clip on) and the test compares, per step k = 1..STEPS:

  * metrics.jsonl's "lr" at step k with the lr torch's optimizer holds when its k-th
    optimizer.step() runs: a torch.optim.AdamW stepped by the scheduler below, reading
    param_groups[*]["lr"] before optimizer.step() and calling scheduler.step() after it
    (relative 1e-6; metrics.jsonl prints 9 significant digits);
  * that the lr was really used: the final weights against the same training in torch
    (reference GPT-2 of gpt2_ref.py, AdamW with decay on rank >= 2, the scheduler above,
    torch.nn.utils.clip_grad_norm_), max abs difference <= W_ATOL;
  * "grad_norm" at step 1 against the total norm torch.nn.utils.clip_grad_norm_ returns for
    the same model and batch (relative 1e-5), and the later steps' norms loosely (1e-3).

The torch schedulers (torch 1.13):
  onecycle: torch.optim.lr_scheduler.OneCycleLR(max_lr=optim.lr, total_steps=STEPS,
            pct_start, anneal_strategy cos|linear, div_factor, final_div_factor,
            cycle_momentum=False, three_phase=False).
  others:   LambdaLR with lr_i = optim.lr * f(i), i = 0-based step (= scheduler.last_epoch),
            W = schedule.warmup_steps, N = train.steps, lr = optim.lr, m = schedule.min_lr:
              i < W:            lr * (i + 1) / W                        (linear warmup)
              constant:         lr
              p = min(1, (i - W) / (N - W))   (1 when N == W)
              cosine:           m + (lr - m) * (1 + cos(pi * p)) / 2
              linear:           lr + (m - lr) * p
            This is the rule src/train/schedule.c implements (llm.c's warmup and cosine
            decay; the linear decay ends near, not at, min_lr, as the cosine one does).
Set CT_KEEP_TMP=1 to keep the working directory (it is always kept when a check fails).
"""

import json
import math
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
except ImportError as e:  # reported, not skipped: torch is a declared test dependency
    print("FAIL: %s. Install python3-torch (scripts/bootstrap.sh) and run with /usr/bin/python3." % e)
    sys.exit(1)
import gpt2_ref as R  # noqa: E402

CFG = dict(vocab_size=64, n_ctx=32, n_embd=16, n_layer=2, n_head=2)  # the gpt2-tiny shape
INIT_SEED = 4321
B, T, STEPS = 4, 16, 30
LR, BETA1, BETA2, EPS, WD, CLIP = 1e-2, 0.9, 0.95, 1e-6, 0.1, 0.5
N_TOKENS = STEPS * B * T + 1  # every step reads fresh tokens; no wrap

LR_RTOL = 1e-6
NORM1_RTOL = 1e-5      # step-1 norm, ctrain vs clip_grad_norm_
NORM_RTOL = 1e-3       # later steps (weights have drifted by float32 rounding)
W_ATOL = 5e-5          # final weights after STEPS steps (measured: up to ~5e-6)

SCHEDULES = [
    ("constant warmup=5", dict(name="constant", warmup_steps=5, min_lr=1e-3)),
    ("constant no warmup", dict(name="constant", warmup_steps=0, min_lr=0.0)),
    ("linear warmup=5 min_lr=1e-3", dict(name="linear", warmup_steps=5, min_lr=1e-3)),
    ("linear warmup=0 min_lr=0", dict(name="linear", warmup_steps=0, min_lr=0.0)),
    ("cosine warmup=6 min_lr=1e-3", dict(name="cosine", warmup_steps=6, min_lr=1e-3)),
    ("cosine warmup=steps", dict(name="cosine", warmup_steps=STEPS, min_lr=0.0)),
    ("onecycle cos", dict(name="onecycle", pct_start=0.3, anneal="cos", div_factor=25.0,
                          final_div_factor=1e4)),
    ("onecycle linear", dict(name="onecycle", pct_start=0.25, anneal="linear", div_factor=10.0,
                             final_div_factor=100.0)),
]


class Report:
    def __init__(self):
        self.results = []

    def check(self, name, ok, detail=""):
        self.results.append((name, bool(ok)))
        print("%s  %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""), flush=True)
        return ok

    def failures(self):
        return [n for n, ok in self.results if not ok]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def lambda_rule(s):
    """f(i) of the LambdaLR for a non-onecycle schedule (see the module docstring)."""
    W, N, m = s["warmup_steps"], STEPS, s["min_lr"]

    def f(i):
        if i < W:
            return (i + 1) / W
        if s["name"] == "constant":
            return 1.0
        p = min(1.0, (i - W) / (N - W)) if N > W else 1.0
        if s["name"] == "cosine":
            return (m + (LR - m) * (1.0 + math.cos(math.pi * p)) / 2.0) / LR
        return (LR + (m - LR) * p) / LR
    return f


def make_scheduler(opt, s):
    if s["name"] == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=LR, total_steps=STEPS, pct_start=s["pct_start"],
            anneal_strategy=s["anneal"], div_factor=s["div_factor"],
            final_div_factor=s["final_div_factor"], cycle_momentum=False, three_phase=False)
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda_rule(s))


def train_torch(params, tokens, s):
    """STEPS steps of the reference model with AdamW, the scheduler of s and clipping.
    Returns (lrs, norms, final params): the lr of each optimizer.step() as torch's optimizer
    holds it, clip_grad_norm_'s total norm per step, {name: numpy}."""
    names = R.param_names(CFG["n_layer"])
    P = {n: torch.tensor(np.asarray(params[n])).float().requires_grad_(True) for n in names}
    decay = [P[n] for n in names if P[n].ndim >= 2]
    no_decay = [P[n] for n in names if P[n].ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS, foreach=False)
    sched = make_scheduler(opt, s)
    plist = [P[n] for n in names]
    batches = R.sequential_batches(tokens, B, T)
    lrs, norms = [], []
    for k in range(1, STEPS + 1):
        opt.zero_grad(set_to_none=False)
        x, y = next(batches)
        _, loss = R.forward(P, CFG, torch.from_numpy(x), torch.from_numpy(y))
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(plist, CLIP)))
        group_lrs = [g["lr"] for g in opt.param_groups]
        assert group_lrs[0] == group_lrs[1]
        lrs.append(group_lrs[0])   # the lr this optimizer.step() applies
        opt.step()
        if k < STEPS:
            sched.step()
    return lrs, norms, {n: P[n].detach().numpy().copy() for n in names}


def run_ctrain(rep, binary, args, label):
    cmd = [binary] + args
    env = dict(os.environ, OMP_NUM_THREADS="1")
    print("\n[%s] OMP_NUM_THREADS=1 %s" % (label, " ".join(shlex.quote(c) for c in cmd)), flush=True)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print(p.stdout[-2000:] + p.stderr[-4000:])
    return rep.check("%s: ctrain exit status" % label, p.returncode == 0, str(p.returncode))


def read_train_metrics(path):
    recs = {}
    with open(path) as f:
        for line in f:
            obj = json.loads(line)
            if obj.get("split") == "train":
                recs[obj["step"]] = obj
    return recs


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 1
    binary = os.path.abspath(argv[1])
    # one thread each: these models are tiny, and spinning thread pools make timings
    # erratic on a loaded machine
    torch.set_num_threads(1)
    rep = Report()
    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="ctrain_sched_")
    print("working directory: %s" % tmp)
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731

    # --- inputs: a synthetic shard from ctrain itself, a shared random init ---------------
    p = subprocess.run([binary, "synth", "--out", P("train.bin"), "--tokens", str(N_TOKENS),
                        "--vocab", str(CFG["vocab_size"]), "--seed", "3"],
                       capture_output=True, text=True, timeout=60)
    if not rep.check("ctrain synth writes the shard", p.returncode == 0, p.stderr.strip()[-300:]):
        return finish(rep, tmp, t_start)
    tokens = R.read_shard(P("train.bin"))
    params = R.init_params(CFG, seed=INIT_SEED, random_norms_and_biases=True)
    R.save_hf_dir(P("init"), CFG, params)

    # --- the step-1 norm: torch.nn.utils.clip_grad_norm_ on the same model and batch ------
    names = R.param_names(CFG["n_layer"])
    Pt = {n: params[n].clone().requires_grad_(True) for n in names}
    x, y = next(R.sequential_batches(tokens, B, T))
    _, loss = R.forward(Pt, CFG, torch.from_numpy(x), torch.from_numpy(y))
    loss.backward()
    ref_norm1 = float(torch.nn.utils.clip_grad_norm_([Pt[n] for n in names], CLIP))
    rep.check("test setup: grad_clip=%g clips at step 1 (torch total norm %.6f)" % (CLIP, ref_norm1),
              ref_norm1 > CLIP)

    for label, s in SCHEDULES:
        run = P("run_" + label.replace(" ", "_").replace("=", ""))
        args = ["train", "model.init_from=%s" % P("init"), "data.train=%s" % P("train.bin"),
                "data.shuffle=false", "train.batch_size=%d" % B, "train.seq_len=%d" % T,
                "train.grad_accum=1", "train.steps=%d" % STEPS, "train.seed=0",
                "optim.lr=%r" % LR, "optim.beta1=%r" % BETA1, "optim.beta2=%r" % BETA2,
                "optim.eps=%r" % EPS, "optim.weight_decay=%r" % WD, "optim.grad_clip=%r" % CLIP,
                "run.dir=%s" % run, "run.checkpoint_every=0",
                # torch applies every update: the spike guard must not skip one
                "guard.zscore=0"]
        args += ["schedule.%s=%s" % (k, v if isinstance(v, str) else repr(v)) for k, v in s.items()]
        t0 = time.time()
        ref_lrs, ref_norms, ref_w = train_torch(params, tokens, s)
        t_torch = time.time() - t0
        if not run_ctrain(rep, binary, args, label):
            continue
        recs = read_train_metrics(os.path.join(run, "metrics.jsonl"))
        steps = list(range(1, STEPS + 1))
        if not rep.check("%s: metrics.jsonl has steps 1..%d" % (label, STEPS), sorted(recs) == steps,
                         "got %s" % sorted(recs)):
            continue
        got = [float(recs[k]["lr"]) for k in steps]
        errs = [rel(g, r) if r != 0 else abs(g) for g, r in zip(got, ref_lrs)]
        worst = int(np.argmax(errs))
        print("  step  lr_torch          lr_ctrain")
        for k in sorted(set([1, 2, 3, STEPS // 3, STEPS // 2, STEPS - 1, STEPS, worst + 1])):
            print("  %4d  %.10e  %.10e" % (k, ref_lrs[k - 1], got[k - 1]))
        rep.check("%s: lr of steps 1..%d == torch's (rel %g)" % (label, STEPS, LR_RTOL),
                  max(errs) <= LR_RTOL,
                  "worst step %d: ctrain %.10e torch %.10e (rel %.2e)"
                  % (worst + 1, got[worst], ref_lrs[worst], errs[worst]))
        # as many distinct values as torch's (catches a flat or stuck schedule, and a test
        # that compares nothing)
        want = len(set("%.8e" % v for v in ref_lrs))
        rep.check("%s: the lr takes %d distinct values, as in torch" % (label, want),
                  len(set("%.8e" % v for v in got)) == want,
                  "ctrain %d" % len(set("%.8e" % v for v in got)))
        n1 = float(recs[1]["grad_norm"])
        rep.check("%s: step-1 grad_norm == clip_grad_norm_'s total norm (rel %g)" % (label, NORM1_RTOL),
                  rel(n1, ref_norm1) <= NORM1_RTOL and rel(ref_norms[0], ref_norm1) <= 1e-6,
                  "ctrain %.9g torch %.9g (rel %.2e)" % (n1, ref_norm1, rel(n1, ref_norm1)))
        nerr = [rel(float(recs[k]["grad_norm"]), ref_norms[k - 1]) for k in steps]
        clipped = sum(n > CLIP for n in ref_norms)
        rep.check("%s: grad_norm of steps 1..%d (rel %g; %d of them clipped)"
                  % (label, STEPS, NORM_RTOL, clipped), max(nerr) <= NORM_RTOL,
                  "worst step %d rel %.2e" % (int(np.argmax(nerr)) + 1, max(nerr)))
        w = R.read_safetensors(os.path.join(run, "model.safetensors"))
        w = {(n[len("transformer."):] if n.startswith("transformer.") else n): a for n, a in w.items()}
        missing = [n for n in names if n not in w]
        if not rep.check("%s: final weights hold every tensor" % label, not missing, ", ".join(missing[:4])):
            continue
        diff = max(float(np.abs(w[n].astype(np.float64) - ref_w[n]).max()) for n in names)
        moved = max(float(np.abs(ref_w[n] - params[n].numpy()).max()) for n in names)
        rep.check("%s: final weights == torch with this schedule (max abs diff %.2e <= %g; "
                  "weights moved up to %.3f; torch %.1fs)" % (label, diff, W_ATOL, moved, t_torch),
                  diff <= W_ATOL and moved > 100 * W_ATOL)
    return finish(rep, tmp, t_start)


def finish(rep, tmp, t_start):
    fails = rep.failures()
    print("\n" + "=" * 78)
    print("%d checks, %d failed, %.1fs" % (len(rep.results), len(fails), time.time() - t_start))
    for n in fails:
        print("FAIL  %s" % n)
    if fails or os.environ.get("CT_KEEP_TMP"):
        print("kept working directory %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("RESULT: %s" % ("PASS" if not fails else "FAIL"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
