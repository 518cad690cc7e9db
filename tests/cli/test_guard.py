#!/usr/bin/env python3
"""The stability guard through the real program, with faults injected by the
debug keys.

- debug.nan_step: the step's update is skipped (the weights after it equal
  those of a run that stopped one step earlier), it is logged with its step,
  and later losses are finite.
- debug.spike_step: a loss/grad-norm spike is skipped the same way; with
  guard.zscore=0 it is not; a clean run has no spikes.
- debug.bad_steps: a run of bad steps rolls back to the last good checkpoint
  (its weights restored exactly), lowers the LR, shows in the log, in
  metrics.jsonl and in TensorBoard, and training recovers; before any
  checkpoint the current weights stay (they hold only the good updates); a
  grad-norm spike alone is not skipped while clipping is on; a resume after
  the rollback keeps
  the lowered LR; guard.max_rollbacks ends a hopeless run with exit 2.
- train.early_stop_patience stops a run whose validation loss stops improving,
  with a final checkpoint and weights.

usage: test_guard.py path/to/ctrain
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import tb_reader  # noqa: E402

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(label)
        print(f"FAIL {label}: {detail}"[:1500])


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def metrics(run_dir, split="train"):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m["split"] == split:
                out[m["step"]] = m
    return out


def weights(run_dir, step=None):
    d = run_dir if step is None else os.path.join(run_dir, "checkpoints", "step_%08d" % step)
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        return f.read()


def train(tmp, name, *args):
    d = os.path.join(tmp, name)
    rc, out = run("train", *BASE, *args, f"run.dir={d}")
    return d, rc, out


BASE = []


def nan_step(tmp):
    d5, rc5, out5 = train(tmp, "nan_ref5", "train.steps=5")
    d6, rc6, out6 = train(tmp, "nan_at6", "train.steps=6", "debug.nan_step=6")
    check("nan: both runs exit 0", rc5 == 0 and rc6 == 0, out5[-300:] + out6[-300:])
    check("nan: the NaN step leaves the weights as they were after step 5",
          weights(d5) == weights(d6))
    d, rc, out = train(tmp, "nan_long", "train.steps=14", "debug.nan_step=6")
    m = metrics(d)
    check("nan: exit 0", rc == 0, out[-300:])
    check("nan: logged with its step", "step 6: non-finite gradient, update skipped" in out,
          out[-600:])
    check("nan: metrics mark step 6 skipped, no other",
          [s for s in m if m[s]["skipped"]] == [6] and m[6]["grad_norm"] is None,
          str({s: m[s]["skipped"] for s in m}))
    later = [m[s]["loss"] for s in range(7, 15)]
    check("nan: later losses finite",
          all(x is not None and math.isfinite(x) for x in later), str(later))
    check("nan: no rollback for a single bad step", all(m[s]["rollback"] == 0 for s in m))


def spikes(tmp):
    guard = ["guard.window=10", "guard.min_steps=5"]
    d, rc, out = train(tmp, "clean", "train.steps=40")
    m = metrics(d)
    check("spike: a clean run has no skipped steps", rc == 0 and not any(
        m[s]["skipped"] for s in m), out[-300:])
    d19, _, _ = train(tmp, "spike_ref19", "train.steps=19", *guard)
    d, rc, out = train(tmp, "spike_at20", "train.steps=20", "debug.spike_step=20",
                       "debug.spike_factor=50", *guard)
    m = metrics(d)
    check("spike: exit 0", rc == 0, out[-300:])
    check("spike: step 20 judged a spike and skipped", m[20]["spike"] == 1 and
          m[20]["skipped"] == 1 and "step 20: loss spike" in out, json.dumps(m[20]) + out[-400:])
    check("spike: the skipped spike leaves the weights of step 19", weights(d19) == weights(d))
    check("spike: only step 20 skipped", [s for s in m if m[s]["skipped"]] == [20])
    d, rc, out = train(tmp, "spike_off", "train.steps=20", "debug.spike_step=20",
                       "debug.spike_factor=50", "guard.zscore=0", *guard)
    m = metrics(d)
    check("spike: guard.zscore=0 lets the spike through", rc == 0 and m[20]["skipped"] == 0 and
          m[20]["spike"] == 0 and weights(d19) != weights(d), json.dumps(m.get(20)))
    d, rc, out = train(tmp, "spike_early", "train.steps=20", "debug.spike_step=3",
                       "debug.spike_factor=50", *guard)
    m = metrics(d)
    check("spike: not judged before guard.min_steps good steps", rc == 0 and
          m[3]["skipped"] == 0, json.dumps(m.get(3)))


def tb_scalars(run_dir):
    files = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
    out = {}
    for path in files:
        events, _ = tb_reader.decode_bytes(open(path, "rb").read())
        for e in events[1:]:
            for tag, value in e["values"]:
                out[(e["step"], tag)] = value
    return out


def rollback(tmp):
    args = ["train.steps=40", "run.checkpoint_every=5", "run.keep_last=0", "optim.lr=3e-3",
            "debug.bad_steps=23-25"]
    d, rc, out = train(tmp, "rollback", *args)
    m = metrics(d)
    check("rollback: exit 0", rc == 0, out[-400:])
    check("rollback: logged", "3 bad steps in a row (from step 23): rolled back to" in out and
          "step_00000020" in out, out[-800:])
    check("rollback: metrics mark steps 23-25 skipped and step 25 as the rollback to step 20",
          [s for s in m if m[s]["skipped"]] == [23, 24, 25] and
          [s for s in m if m[s]["rollback"]] == [25] and m[25].get("rollback_to") == 20,
          json.dumps(m.get(25)))
    check("rollback: the LR is halved from then on",
          m[22]["lr"] == 3e-3 and all(m[s]["lr"] == 1.5e-3 for s in range(26, 41)),
          str([m[s]["lr"] for s in (22, 26, 40)]))
    check("rollback: the weights after it are checkpoint 20's exactly",
          weights(d, 25) == weights(d, 20) and weights(d, 20) != weights(d, 15))
    losses = [m[s]["loss"] for s in range(26, 41)]
    check("rollback: training recovers: finite losses, final below initial",
          all(x is not None and math.isfinite(x) for x in losses) and m[40]["loss"] < m[1]["loss"],
          f"{m[1]['loss']} -> {losses}")
    tb = tb_scalars(d)
    check("rollback: TensorBoard guard/skipped and guard/rollbacks",
          tb.get((25, "guard/skipped")) == 3 and tb.get((25, "guard/rollbacks")) == 1 and
          tb.get((24, "guard/rollbacks")) == 0 and tb.get((40, "guard/rollbacks")) == 1,
          str({k: v for k, v in tb.items() if k[1].startswith("guard/") and 22 <= k[0] <= 26}))

    # a resume after the rollback keeps the lowered LR and the counters
    r = os.path.join(tmp, "rollback_resumed")
    shutil.copytree(d, r)
    for s in (35, 40):
        shutil.rmtree(os.path.join(r, "checkpoints", "step_%08d" % s))
    rc, out = run("train", *BASE, *args, "train.resume=auto", f"run.dir={r}")
    mr = metrics(r)
    check("rollback: resumed after it, the run ends with the same weights",
          rc == 0 and "step_00000030" in out and weights(r) == weights(d), out[-400:])
    check("rollback: resumed run keeps the halved LR", mr[31]["lr"] == 1.5e-3, str(mr.get(31)))

    # before any checkpoint: the weights of the last good step stay
    d0, rc0, out0 = train(tmp, "init2", "train.steps=2")
    d, rc, out = train(tmp, "rollback_init", "train.steps=5", "debug.bad_steps=3-5")
    m = metrics(d)
    check("rollback without a checkpoint keeps the last good step's weights",
          rc0 == 0 and rc == 0 and m[5]["rollback"] == 1 and m[5].get("rollback_to") == 2 and
          weights(d) == weights(d0) and "no checkpoint yet" in out, out[-400:])

    d, rc, out = train(tmp, "hopeless", "train.steps=20", "debug.bad_steps=3-14",
                       "guard.max_rollbacks=2")
    m = metrics(d)
    check("guard.max_rollbacks: a run that keeps diverging fails with exit 2",
          rc == 2 and "keeps diverging" in out and
          [s for s in m if m[s]["rollback"]] == [5, 8] and max(m) == 11, out[-400:])


def early_stop(tmp, val):
    # with lr 0 the validation loss never improves after the first evaluation
    args = ["train.steps=100", f"data.val={val}", "train.eval_every=2", "train.eval_batches=2",
            "optim.lr=0"]
    d, rc, out = train(tmp, "early", *args, "train.early_stop_patience=2")
    m, v = metrics(d), metrics(d, "val")
    check("early stop: exit 0 after 3 evaluations (step 6)",
          rc == 0 and max(m) == 6 and sorted(v) == [2, 4, 6], f"{sorted(m)[-3:]} {sorted(v)}")
    check("early stop: logged", "early stop" in out, out[-400:])
    check("early stop: final checkpoint and weights",
          os.path.exists(os.path.join(d, "checkpoints", "step_00000006", "MANIFEST.json")) and
          os.path.exists(os.path.join(d, "model.safetensors")))
    d, rc, out = train(tmp, "no_early", "train.steps=10", f"data.val={val}",
                       "train.eval_every=2", "train.eval_batches=2", "optim.lr=0")
    check("early stop off (patience 0): all steps run", rc == 0 and max(metrics(d)) == 10)


def main():
    tmp = tempfile.mkdtemp(prefix="ct_guard_")
    try:
        shard = os.path.join(tmp, "train.bin")
        val = os.path.join(tmp, "val.bin")
        for path, seed in ((shard, "1"), (val, "2")):
            rc, out = run("synth", "--out", path, "--tokens", "30000", "--vocab", "64",
                          "--seed", seed)
            assert rc == 0, out
        BASE.extend(["model.preset=gpt2-tiny", f"data.train={shard}", "train.batch_size=4",
                     "train.seq_len=16", "run.threads=1"])
        nan_step(tmp)
        spikes(tmp)
        rollback(tmp)
        early_stop(tmp, val)
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"test_guard: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
