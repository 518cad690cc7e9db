#!/usr/bin/env python3
"""train.precision=fp16 (GPUs without bf16) end to end, through the real program, on sim.

usage: /usr/bin/python3 tests/cli/test_fp16.py path/to/ctrain

fp16 with dynamic loss scaling is for NVIDIA GPUs of compute capability below 8.0
(T4, V100). The sim backend reports the capability CT_SIM_COMPUTE_CAPABILITY names.
  * Refusals, before anything is built (exit 2, run.dir not made, the key, the device
    and why named, with a hint): on the CPU (train and plan), and on sim at 8.0 and 9.0
    (train, and plan at 9.0), the hint naming bf16. sim at 7.5 trains, every metrics
    line carrying loss_scale (65536 at the start).
  * Overflow: an initial scale of 2^24 makes the scaled gradient overflow fp16 (the seed
    gradient alone is 2^17 > 65504): those steps are skipped with overflow 1 and a null
    grad_norm, the scale halves after each, the guard never sees them (more overflows in
    a row than guard.max_bad, and no rollback, no spike, TensorBoard's guard/skipped 0),
    and after train.loss_scale_window good steps in a row the scale doubles. The whole
    scale sequence follows those rules step by step; the losses are finite and the run
    goes on.
  * The floor: a static scale never changes; train.loss_scale_init=1 with a gradient
    made NaN at step 2 (debug.nan_step; under fp16 a non-finite gradient with a finite
    loss is an overflow, as for GradScaler) stops with exit 2 naming the loss scale,
    rather than halving below 1.
  * Exact resume: a run killed after step 7 and resumed from its checkpoint of step 6
    (taken mid-way between an overflow and the next doubling) writes the unbroken run's
    losses, scales and weights bit for bit.
  * The config keys: a bad train.loss_scale is refused naming the key.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
import tb_reader  # noqa: E402

CTRAIN = sys.argv[1]
failures = 0


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok or not detail else " -- " + detail),
          flush=True)
    if not ok:
        failures += 1


def run(args, cc):
    e = dict(os.environ)
    e.pop("CTRAIN_DEVICE", None)
    e.pop("CT_SIM_COMPUTE_CAPABILITY", None)
    if cc is not None:
        e["CT_SIM_COMPUTE_CAPABILITY"] = cc
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300, env=e)
    return p.returncode, p.stderr


def train_lines(d):
    out = []
    with open(os.path.join(d, "metrics.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if o.get("split") == "train":
                out.append(o)
    return out


def tb_scalar(d, tag):
    """The last value of tag in run dir d's event files (None when absent)."""
    last = None
    for name in sorted(os.listdir(d)):
        if name.startswith("events.out.tfevents"):
            events, _ = tb_reader.read_events(os.path.join(d, name))
            for ev in events:
                for t, v in ev["values"]:
                    if t == tag:
                        last = v
    return last


def follows_rules(lines, init, window):
    """Whether the loss_scale column obeys the scaler: halve after an overflow, double
    after `window` good steps in a row, else stay. Returns (ok, growths)."""
    s, good, growths = init, 0, 0
    for o in lines:
        if o.get("loss_scale") != s:
            return False, growths
        if o.get("overflow"):
            s, good = s / 2, 0
        else:
            good += 1
            if good == window:
                s, good, growths = s * 2, 0, growths + 1
    return True, growths


with tempfile.TemporaryDirectory() as tmp:
    shard = os.path.join(tmp, "s.bin")
    rc, err = run(["synth", "--out", shard, "--tokens", "20000", "--vocab", "64"], None)
    check(rc == 0, "synth", err[-300:])
    model = ["model.arch=gpt2", "model.n_layer=1", "model.n_head=2", "model.n_embd=32",
             "model.vocab_size=64", "model.n_ctx=32"]
    base = model + ["train.seq_len=16", "train.batch_size=2", "data.train=" + shard,
                    "run.device=sim", "run.threads=1", "train.precision=fp16"]

    def train(name, cc, *extra):
        d = os.path.join(tmp, name)
        rc, err = run(["train", *base, "run.dir=" + d, *extra], cc)
        return rc, err, d

    # ---------------------------------------------------------------- refusals
    rc, err, d = train("cpu", None, "train.steps=2", "run.device=cpu")
    check(rc == 2, "cpu, train.precision=fp16: exit 2", "rc %d: %s" % (rc, err[-300:]))
    check("train.precision = fp16" in err and "CPU" in err and "bf16" in err and
          "fp32" in err, "the error names the key, the CPU, and bf16 / fp32 as the way",
          err[-400:])
    check(not os.path.exists(d), "run.dir not made (cpu)")
    rc, err = run(["plan", *model, "train.seq_len=16", "train.batch_size=2",
                   "train.precision=fp16", "--json"], None)
    check(rc == 2 and "train.precision = fp16" in err and "CPU" in err,
          "plan on the cpu refuses fp16 the same way", "rc %d: %s" % (rc, err[-300:]))
    for cc in ("8.0", "9.0"):
        rc, err, d = train("cc" + cc, cc, "train.steps=2")
        check(rc == 2, "sim at %s, train.precision=fp16: exit 2" % cc,
              "rc %d: %s" % (rc, err[-300:]))
        check("train.precision = fp16" in err and ("compute capability %s" % cc) in err and
              "sim" in err and "train.precision=bf16" in err and "has bf16" in err,
              "%s: the error names the key, the GPU and its capability, the hint bf16" % cc,
              err[-400:])
        check(not os.path.exists(d), "run.dir not made (%s)" % cc)
    rc, err = run(["plan", *model, "train.seq_len=16", "train.batch_size=2", "run.device=sim",
                   "train.precision=fp16", "--json"], "9.0")
    check(rc == 2 and "has bf16" in err, "plan on sim at 9.0 refuses fp16",
          "rc %d: %s" % (rc, err[-300:]))
    rc, err = run(["plan", *model, "train.seq_len=16", "train.batch_size=2", "run.device=sim",
                   "train.precision=fp16", "--json"], "7.5")
    plan = None
    if rc == 0:
        plan = json.loads(subprocess.run([CTRAIN, "plan", *model, "train.seq_len=16",
                                          "train.batch_size=2", "run.device=sim",
                                          "train.precision=fp16", "--json"],
                                         capture_output=True, text=True,
                                         env=dict(os.environ, CT_SIM_COMPUTE_CAPABILITY="7.5"))
                          .stdout)
    C, V = 32, 64
    gemm_numel = V * C + 12 * C * C  # tied head, c_attn, c_proj, c_fc, mlp c_proj
    check(plan is not None and plan["precision"] == "fp16" and
          plan["weights16_bytes"] == 2 * gemm_numel,
          "plan on sim at 7.5 plans fp16: precision fp16, 2 bytes per GEMM weight copied",
          "rc %d: %s %s" % (rc, err[-300:], plan and (plan["precision"],
                                                      plan["weights16_bytes"], 2 * gemm_numel)))
    rc, err, d = train("badkey", "7.5", "train.steps=2", "train.loss_scale=0.5")
    check(rc == 2 and "train.loss_scale" in err and not os.path.exists(d),
          "train.loss_scale=0.5: exit 2 naming the key", "rc %d: %s" % (rc, err[-300:]))

    # ------------------------------------------------------------ 7.5 trains
    rc, err, d = train("t4", "7.5", "train.steps=4")
    check(rc == 0, "sim at 7.5, train.precision=fp16 trains", "rc %d: %s" % (rc, err[-300:]))
    if rc == 0:
        tl = train_lines(d)
        check(len(tl) == 4 and all(o.get("loss_scale") == 65536 for o in tl) and
              all(math.isfinite(o["loss"]) and o["grad_norm"] is not None for o in tl),
              "every step's line says loss_scale 65536 (no overflow at the default scale)",
              str([(o.get("loss_scale"), o["grad_norm"]) for o in tl]))
        check("train.precision = fp16" in err and "loss scale" in err,
              "the start-up line says fp16 and the loss scale", err[:2000][-600:])

    # ------------------------------------------------------- overflow, growth
    W = 2
    ovf = ["train.loss_scale_init=16777216", "train.loss_scale_window=%d" % W]
    rc, err, d = train("ovf", "7.5", "train.steps=12", *ovf)
    check(rc == 0, "an overflowing fp16 run trains on", "rc %d: %s" % (rc, err[-300:]))
    if rc == 0:
        tl = train_lines(d)
        over = [o.get("overflow", 0) for o in tl]
        scales = [o.get("loss_scale") for o in tl]
        print("overflow %s\nscales %s" % (over, scales))
        run_len, best = 0, 0
        for x in over:
            run_len = run_len + 1 if x else 0
            best = max(best, run_len)
        check(over[0] == 1 and best > 3, "step 1 overflows, %d in a row (more than "
              "guard.max_bad = 3)" % best, str(over))
        ok, growths = follows_rules(tl, 16777216, W)
        check(ok and growths >= 1, "the scale halves after each overflow and doubles after "
              "%d good steps (%d doublings)" % (W, growths), str(list(zip(over, scales))))
        check(all((o["skipped"] == 1) == bool(o.get("overflow")) for o in tl) and
              all((o["grad_norm"] is None) == bool(o.get("overflow")) for o in tl),
              "overflow steps, and only they, are skipped with a null grad_norm",
              str([(o["skipped"], o["grad_norm"]) for o in tl]))
        check(all(o["rollback"] == 0 and o["spike"] == 0 for o in tl) and
              all(math.isfinite(o["loss"]) for o in tl),
              "no rollback, no spike, finite losses: the guard never saw the overflows")
        gs = tb_scalar(d, "guard/skipped")
        check(gs == 0, "TensorBoard guard/skipped stays 0", "got %r" % gs)
        check("fp16 gradient overflow" in err and "FP16 OVERFLOW" in err,
              "an info line and the progress line name each overflow", err[-600:])

    # ---------------------------------------------- static scale, the floor
    rc, err, d = train("static", "7.5", "train.steps=6", "train.loss_scale=16777216")
    if check(rc == 0, "a static scale trains", "rc %d: %s" % (rc, err[-300:])):
        tl = train_lines(d)
        check(all(o.get("loss_scale") == 16777216 for o in tl) and
              all(o.get("overflow") == 1 for o in tl),
              "a static scale stays put through its overflows",
              str([(o.get("loss_scale"), o.get("overflow")) for o in tl]))
    rc, err, d = train("floor", "7.5", "train.steps=4", "train.loss_scale_init=1",
                       "debug.nan_step=2")
    check(rc == 2 and "loss scale 1" in err and "below 1" in err and "hint" in err,
          "an overflow at scale 1 stops the run (exit 2, as the guard's failures) instead of "
          "halving below 1",
          "rc %d: %s" % (rc, err[-400:]))

    # --------------------------------------------------------- exact resume
    W = 3
    rs = ["train.steps=10", "train.loss_scale_init=16777216", "train.loss_scale_window=%d" % W,
          "run.checkpoint_every=6"]
    rc1, err1, full = train("full", "7.5", *rs)
    rc2, err2, part = train("part", "7.5", *rs, "debug.kill_step=7")
    check(rc1 == 0 and rc2 != 0, "the unbroken run trains, the killed one dies",
          "rc %d, %d: %s" % (rc1, rc2, err2[-300:]))
    rc3, err3, _ = train("part", "7.5", *rs, "train.resume=auto")
    check(rc3 == 0, "the killed run resumes", "rc %d: %s" % (rc3, err3[-300:]))
    if rc1 == 0 and rc3 == 0:
        a, b = train_lines(full), train_lines(part)
        ka = [(o["step"], o["loss"], o.get("loss_scale"), o.get("overflow")) for o in a]
        kb = [(o["step"], o["loss"], o.get("loss_scale"), o.get("overflow")) for o in b]
        print("unbroken %s" % ka)
        # step 5 overflows, 6 is good (the checkpoint's count is 1), 6..8 good: x2 at 9
        ok6 = len(a) == 10 and a[4].get("overflow") == 1 and \
            not any(o.get("overflow") for o in a[5:8]) and \
            a[8]["loss_scale"] == 2 * a[7]["loss_scale"]
        check(ok6, "the checkpoint of step 6 falls after an overflow and before the next "
              "doubling (the good-step count matters)", str(ka))
        check(ka == kb, "resumed: the unbroken run's losses, scales and overflows bit for bit",
              "%s vs %s" % (ka, kb))
        with open(os.path.join(full, "model.safetensors"), "rb") as f1, \
                open(os.path.join(part, "model.safetensors"), "rb") as f2:
            check(f1.read() == f2.read(), "resumed: the same final weights bit for bit")

print("test_fp16: %d failure(s)" % failures)
sys.exit(1 if failures else 0)
