#!/usr/bin/env python3
"""run.memory_limit and batch_size=auto through the real program.

usage: /usr/bin/python3 tests/cli/test_memory_limit.py path/to/ctrain

  * `ctrain plan` reports the limit; over it, plan and train exit 2 before
    allocating, name run.memory_limit, list settings that fit, and train never
    creates the run directory;
  * train.batch_size=auto with a limit between the plans of B=3 and B=4 picks
    B=3 in `plan` and in `train`, which then trains; its checkpoint records the
    batch it ran (B=4 cannot resume it, auto can); with train.effective_batch=4
    it runs B=2 x grad_accum 2;
  * recompute=auto picks light where none does not fit;
  * bad limits exit 2.
"""
import json
import os
import subprocess
import sys
import tempfile

CTRAIN = sys.argv[1]
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what)
    if not ok:
        failures += 1


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as tmp:
    shard = os.path.join(tmp, "s.bin")
    rc, _, err = run("synth", "--out", shard, "--tokens", "20000", "--vocab", "64")
    check(rc == 0, "synth")
    model = ["model.preset=gpt2-tiny", "model.n_embd=64", "model.n_head=4", "model.vocab_size=64",
             "train.seq_len=32"]

    def plan(*extra):
        rc, out, err = run("plan", *model, *extra, "--json")
        return rc, (json.loads(out) if rc == 0 else None), err

    rc, p4, _ = plan("train.batch_size=4")
    rc3, p3, _ = plan("train.batch_size=3")
    check(rc == 0 and rc3 == 0 and p4["total_bytes"] > p3["total_bytes"] > 0,
          "plan: B=4 needs more than B=3")
    check(p4["limit_bytes"] > 0, "plan reports the limit (85% of RAM by default)")
    limit = (p3["total_bytes"] + p4["total_bytes"]) // 2

    # over the limit: plan and train refuse, naming the key and what fits
    rc, out, err = run("plan", *model, "train.batch_size=4", f"run.memory_limit={limit}")
    check(rc == 2 and "run.memory_limit" in err and "train.batch_size=3" in err,
          "plan over the limit exits 2 naming the key and B=3: %s" % err.strip()[:200])
    rd = os.path.join(tmp, "refused")
    rc, out, err = run("train", *model, "train.batch_size=4", f"run.memory_limit={limit}",
                       f"data.train={shard}", "train.steps=2", f"run.dir={rd}")
    check(rc == 2 and "run.memory_limit" in err and "settings that fit" in err,
          "train over the limit exits 2 with the plan and a hint: %s" % err.strip()[:200])
    check(not os.path.exists(rd), "the refused run wrote nothing")
    rc, out, err = run("train", *model, "train.batch_size=1", "run.memory_limit=64KB",
                       f"data.train={shard}", "train.steps=2", f"run.dir={rd}")
    check(rc == 2 and "not even train.batch_size=1" in err,
          "a limit below batch 1 says so: %s" % err.strip()[:200])

    # auto: the largest batch under the limit
    rc, pa, err = plan("train.batch_size=auto", f"run.memory_limit={limit}")
    check(rc == 0 and pa["batch_size"] == 3 and pa["total_bytes"] <= limit,
          "plan: batch_size=auto picks B=3 under the limit")
    ra = os.path.join(tmp, "auto")
    common = [*model, f"data.train={shard}", f"run.dir={ra}", "run.checkpoint_every=1"]
    rc, out, err = run("train", *common, "train.batch_size=auto", f"run.memory_limit={limit}",
                       "train.steps=2")
    check(rc == 0 and "train.batch_size=3" in err, "train: batch_size=auto trains with B=3: %s"
          % err.strip()[-300:])
    # the checkpoint records the batch it ran: B=4 cannot resume it, auto can
    rc, out, err = run("train", *common, "train.batch_size=4", "train.steps=3",
                       "train.resume=auto")
    check(rc == 2 and "train.batch_size = 3" in err,
          "resuming with B=4 names the checkpoint's B=3: %s" % err.strip()[:200])
    rc, out, err = run("train", *common, "train.batch_size=auto", f"run.memory_limit={limit}",
                       "train.steps=3", "train.resume=auto")
    check(rc == 0, "resuming with batch_size=auto under the same limit works: %s"
          % err.strip()[-200:])
    rc, pe, err = plan("train.batch_size=auto", "train.effective_batch=4",
                       f"run.memory_limit={limit}")
    check(rc == 0 and pe["batch_size"] == 2 and pe["grad_accum"] == 2,
          "effective_batch=4 under the limit: B=2 x grad_accum 2 (%s)" % pe)

    # recompute auto: light where none does not fit
    rc, pl, _ = plan("train.batch_size=4", "train.recompute=light")
    rc2, pr, err = plan("train.batch_size=4", "train.recompute=auto",
                        "run.memory_limit=%d" % pl["total_bytes"])
    check(rc == 0 and rc2 == 0 and pr["recompute"] == "light",
          "recompute=auto picks light when none does not fit (%s)" % (pr or err))

    for bad in ("lots", "150%", "0"):
        rc, out, err = run("plan", *model, f"run.memory_limit={bad}")
        check(rc == 2 and "run.memory_limit" in err, "bad limit %s exits 2" % bad)

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
