#!/usr/bin/env python3
"""Validation numbers that do not mislead, through the real program.

- By default a validation scores the whole val split (one pass over every
  full window), says so at start, and the progress line says how many tokens
  it scored; its loss equals `ctrain eval` over the same shard.
- train.eval_tokens caps it, and the start-up line says what share was
  scored; train.eval_batches still fixes the count.
- A data.val directory without a val split (only train_*.bin) is not used as
  validation: a warning at start and no "val" anywhere; with early stopping,
  exit 2.
- `ctrain eval` on a run directory defaults --seq-len to the run's
  train.seq_len, not the model's context.

usage: test_validation.py path/to/ctrain
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500])


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def base(shard, run_dir, extra=()):
    return ["train", "model.preset=gpt2-tiny", f"data.train={shard}", "train.steps=4",
            "train.batch_size=2", "train.seq_len=16", "run.threads=1", "optim.lr=3e-3",
            f"run.dir={run_dir}", *extra]


def val_losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(l)["loss"] for l in f if json.loads(l)["split"] == "val"]


def main():
    tmp = tempfile.mkdtemp(prefix="ct_val_")
    try:
        shard, val = os.path.join(tmp, "train.bin"), os.path.join(tmp, "val.bin")
        for path, tokens, seed in ((shard, 20000, 1), (val, 4000, 2)):
            rc, _, err = run("synth", "--out", path, "--tokens", str(tokens), "--vocab", "64",
                             "--seed", str(seed))
            if rc != 0:
                print(f"FAIL synth: {err}")
                return 1
        windows = (4000 - 1) // 32  # full windows of 2 x 16 (+1) tokens

        # the whole split by default
        d = os.path.join(tmp, "whole")
        rc, _, err = run(*base(shard, d, [f"data.val={val}"]))
        check("the default validation scores the whole val split, and says so at start",
              rc == 0 and f"validation: the whole val split, {windows} batches of 32 tokens = "
              f"{windows * 32} of its 4000 tokens" in err, err[-600:])
        check("the progress line says how many tokens validation scored",
              f"| val " in err and f"({windows * 32 / 1000:.1f}K tok)" in err, err[-400:])
        rc2, out, err2 = run("eval", "--model", d, "--data", val, "--batch-size", "2", "--json")
        ev = json.loads(out) if rc2 == 0 else {}
        vl = val_losses(d) if rc == 0 else []
        check("its loss equals `ctrain eval` over the same shard (to 1e-5)",
              rc2 == 0 and vl and ev.get("tokens") == windows * 32 and
              abs(vl[-1] - ev["loss"]) <= 1e-5, f"{vl} {ev} {err2[-300:]}")
        check("`ctrain eval` on a run defaults --seq-len to the run's train.seq_len",
              rc2 == 0 and "--seq-len 16, the run's train.seq_len" in err2, err2[-300:])
        rc3, out3, err3 = run("eval", "--model", d, "--data", val, "--batch-size", "2",
                              "--seq-len", "32", "--json")
        check("... and an explicit --seq-len still wins",
              rc3 == 0 and json.loads(out3)["tokens"] == (4000 - 1) // 64 * 64, out3 + err3[-300:])

        # capped by train.eval_tokens; fixed by train.eval_batches
        d = os.path.join(tmp, "capped")
        rc, _, err = run(*base(shard, d, [f"data.val={val}", "train.eval_tokens=320"]))
        check("train.eval_tokens=320 caps validation at 10 batches and says what share",
              rc == 0 and "validation: 10 batches of 32 tokens = 320 of the val split's 4000 "
              "tokens (8%; train.eval_tokens = 320 caps it)" in err and "(320 tok)" in err,
              err[-600:])
        d = os.path.join(tmp, "fixed")
        rc, _, err = run(*base(shard, d, [f"data.val={val}", "train.eval_batches=3"]))
        check("train.eval_batches=3 still fixes the count",
              rc == 0 and "validation: 3 batches of 32 tokens (train.eval_batches)" in err and
              "(96 tok)" in err, err[-600:])

        # a directory with no val split
        nd = os.path.join(tmp, "noval")
        os.makedirs(nd)
        shutil.copy(shard, os.path.join(nd, "train_000000.bin"))
        d = os.path.join(tmp, "nov")
        rc, _, err = run(*base(nd, d, [f"data.val={nd}", "train.eval_every=2"]))
        check("data.val without val_*.bin: a warning at start, the run trains",
              rc == 0 and "holds no val_*.bin" in err and "this run has no validation" in err,
              err[-600:])
        check("... and no 'val' is shown or recorded as if held out",
              " | val " not in err and val_losses(d) == [], err[-300:])
        rc, _, err = run(*base(nd, os.path.join(tmp, "nov2"),
                               [f"data.val={nd}", "train.eval_every=2",
                                "train.early_stop_patience=2"]))
        check("... with early stopping: exit 2, naming data.val",
              rc == 2 and "data.val" in err and "early_stop_patience" in err, err[-400:])
        rc, _, err = run("eval", "--model", os.path.join(tmp, "whole"), "--data", nd)
        check("`ctrain eval --data DIR` without val_*.bin is refused, not scored on training data",
              rc == 2 and "holds no val_*.bin" in err, err[-300:])
    finally:
        if failures:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks - len(failures)}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
