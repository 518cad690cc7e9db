#!/usr/bin/env python3
"""run.memory_limit and batch_size=auto through the real program.

usage: /usr/bin/python3 tests/cli/test_memory_limit.py path/to/ctrain

  * `ctrain plan` reports the limit and names every part of the plan; over
    the limit, plan and train exit 2 before allocating, name
    run.memory_limit, list settings that fit, and train never creates the run
    directory;
  * train.batch_size=auto keeps the effective batch: with the default limit it
    runs the default batch (B=4, not the largest that fits); with a limit
    between the plans of B=3 and B=4 it runs B=2 x grad_accum 2 in `plan` and
    in `train`; with train.grad_accum=3 (an effective batch of 12) B=3 x 4; with
    train.effective_batch=8, B=2 x 4. Its checkpoint records the batch it ran
    (B=4 cannot resume it, auto can);
  * recompute=auto picks light where none does not fit;
  * bad limits exit 2.
The model has a 8192-token head, so one more sequence costs over 2 MiB of
plan: `plan` and `train` each measure their own process (within a fraction
of a MiB of each other), and the limits below sit a MiB from either plan.
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
    rc, _, err = run("synth", "--out", shard, "--tokens", "20000", "--vocab", "8192")
    check(rc == 0, "synth")
    model = ["model.preset=gpt2-tiny", "model.n_embd=64", "model.n_head=4",
             "model.vocab_size=8192", "train.seq_len=32", f"data.train={shard}"]

    def plan(*extra):
        rc, out, err = run("plan", *model, *extra, "--json")
        return rc, (json.loads(out) if rc == 0 else None), err

    rc, p4, _ = plan("train.batch_size=4")
    rc3, p3, _ = plan("train.batch_size=3")
    # the batch's own memory (activations, scratch, token ids: over 1 MiB here) at
    # least; OpenBLAS's packing buffers grow with it too, oneDNN's workspace may not
    grow = sum(p4[k] - p3[k] for k in ("acts_bytes", "scratch_bytes", "data_bytes")) \
        if rc == 0 and rc3 == 0 else 0
    # (less the process's measured baseline, which moves by a few pages per process)
    fixed = lambda p: p["total_bytes"] - p["process_bytes"]  # noqa: E731
    check(grow > (1 << 20) and fixed(p4) >= fixed(p3) + grow,
          "plan: B=4 needs over 1 MiB more than B=3 (%d bytes more activations)" % grow)
    check(p4["limit_bytes"] > 0, "plan reports the limit (85% of RAM by default)")
    parts = ("params", "grads", "optim", "acts", "work", "scratch", "data", "shards", "process",
             "code", "tokenizer", "threads", "io", "blas", "reserve")
    runtime = sum(p4.get(k + "_bytes", 0) for k in parts[8:])
    check(p4["runtime_bytes"] == runtime and p4.get("process_bytes", 0) > 0 and
          p4.get("blas_bytes", 0) > 0, "plan --json names the runtime's parts, which sum to it")
    check(sum(p4.get(k + "_bytes", 0) for k in parts[:8]) + runtime == p4["total_bytes"],
          "the parts sum to the total")
    rc, out, _ = run("plan", *model, "train.batch_size=4")
    # the GEMM library's line names the library run.gemm=auto runs on this machine
    check(rc == 0 and all(w in out for w in ("process", "tokenizer")) and
          (("blas" in out and "OpenBLAS" in out) or ("gemm" in out and "oneDNN" in out)),
          "plan's table shows the process, tokenizer and BLAS lines: %s" % out[-400:])
    limit = (p3["total_bytes"] + p4["total_bytes"]) // 2

    # over the limit: plan and train refuse, naming the key and what fits
    rc, out, err = run("plan", *model, "train.batch_size=4", f"run.memory_limit={limit}")
    check(rc == 2 and "run.memory_limit" in err and "train.batch_size=3" in err,
          "plan over the limit exits 2 naming the key and B=3: %s" % err.strip()[:300])
    rd = os.path.join(tmp, "refused")
    rc, out, err = run("train", *model, "train.batch_size=4", f"run.memory_limit={limit}",
                       "train.steps=2", f"run.dir={rd}")
    check(rc == 2 and "run.memory_limit" in err and "settings that fit" in err,
          "train over the limit exits 2 with the plan and a hint: %s" % err.strip()[:200])
    check(not os.path.exists(rd), "the refused run wrote nothing")
    rc, out, err = run("train", *model, "train.batch_size=1", "run.memory_limit=64KB",
                       "train.steps=2", f"run.dir={rd}")
    check(rc == 2 and "not even train.batch_size=1" in err,
          "a limit below batch 1 says so: %s" % err.strip()[:200])

    # auto keeps the effective batch: the default one under the default limit
    rc, pd, err = plan("train.batch_size=auto")
    check(rc == 0 and pd["batch_size"] == 4 and pd["grad_accum"] == 1,
          "plan: batch_size=auto under the default limit runs the default batch, B=4 x 1 (%s)"
          % ((pd["batch_size"], pd["grad_accum"]) if pd else err,))
    # and splits it when B=4 does not fit: B=2 x grad_accum 2
    rc, pa, err = plan("train.batch_size=auto", f"run.memory_limit={limit}")
    check(rc == 0 and pa["batch_size"] == 2 and pa["grad_accum"] == 2 and
          pa["total_bytes"] <= limit,
          "plan: batch_size=auto under the limit keeps 4 sequences as B=2 x grad_accum 2 (%s)"
          % ((pa["batch_size"], pa["grad_accum"]) if pa else err,))
    rc, pg, err = plan("train.batch_size=auto", "train.grad_accum=3", f"run.memory_limit={limit}")
    check(rc == 0 and pg["batch_size"] == 3 and pg["grad_accum"] == 4,
          "grad_accum=3 (12 sequences per step) under the limit: B=3 x 4 (%s)"
          % ((pg["batch_size"], pg["grad_accum"]) if pg else err,))
    rc, pe, err = plan("train.batch_size=auto", "train.effective_batch=8",
                       f"run.memory_limit={limit}")
    check(rc == 0 and pe["batch_size"] == 2 and pe["grad_accum"] == 4,
          "effective_batch=8 under the limit: B=2 x grad_accum 4 (%s)"
          % ((pe["batch_size"], pe["grad_accum"]) if pe else err,))
    ra = os.path.join(tmp, "auto")
    common = [*model, f"run.dir={ra}", "run.checkpoint_every=1"]
    rc, out, err = run("train", *common, "train.batch_size=auto", f"run.memory_limit={limit}",
                       "train.steps=2")
    check(rc == 0 and "train.batch_size=2 train.grad_accum=2" in err,
          "train: batch_size=auto trains with B=2 x grad_accum 2: %s" % err.strip()[-300:])
    # the checkpoint records the batch it ran: B=4 cannot resume it, auto can
    rc, out, err = run("train", *common, "train.batch_size=4", "train.steps=3",
                       "train.resume=auto")
    check(rc == 2 and "train.batch_size = 2" in err,
          "resuming with B=4 names the checkpoint's B=2: %s" % err.strip()[:200])
    rc, out, err = run("train", *common, "train.batch_size=auto", f"run.memory_limit={limit}",
                       "train.steps=3", "train.resume=auto")
    check(rc == 0, "resuming with batch_size=auto under the same limit works: %s"
          % err.strip()[-200:])

    # recompute auto: light where none does not fit (a model whose activations
    # are tens of MiB, so light saves far more than the processes differ by)
    demo = ["model.preset=gpt2-demo", "model.vocab_size=8192", "train.seq_len=128",
            "train.batch_size=8"]
    rc, pl, _ = run("plan", *demo, "train.recompute=light", "--json")
    rc2, pn, _ = run("plan", *demo, "train.recompute=none", "--json")
    if rc == 0 and rc2 == 0:
        lt, nt = json.loads(pl)["total_bytes"], json.loads(pn)["total_bytes"]
        rc3, pr, err = run("plan", *demo, "train.recompute=auto",
                           "run.memory_limit=%d" % ((lt + nt) // 2), "--json")
        check(nt > lt + (4 << 20) and rc3 == 0 and json.loads(pr)["recompute"] == "light",
              "recompute=auto picks light when none does not fit (%s)" % (pr or err))
    else:
        check(False, "plan the recompute policies")

    for bad in ("lots", "150%", "0"):
        rc, out, err = run("plan", *model, f"run.memory_limit={bad}")
        check(rc == 2 and "run.memory_limit" in err, "bad limit %s exits 2" % bad)

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
