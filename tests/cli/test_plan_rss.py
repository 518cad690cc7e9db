#!/usr/bin/env python3
"""The memory plan against the peak RSS of real runs.

usage: /usr/bin/python3 tests/cli/test_plan_rss.py path/to/ctrain

For several configurations (batch shape, recompute policy, activation dtype,
gradient accumulation, thread count), each planned at tens to hundreds of MiB so
the plan rather than noise decides the figure, `ctrain plan --json` gives
total_bytes and a one-step `ctrain train` run (every buffer is resident from
the first step: the model makes its arena's pages resident before it) of the same settings is measured two
ways: the process's peak RSS from wait4 (ru_maxrss) and the rss_peak_bytes of
its last metrics line. Both must be within 10% of the plan, and the metrics line
must carry the same plan_bytes. Runs use alerts.gemm_peak_gflops so no start-up
benchmark touches memory the plan does not count, and small shards, whose mapped
pages (which RSS counts) stay far below the tolerance.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1
    return ok


def run_measured(args):
    """(exit status, ru_maxrss in bytes, stderr) of ctrain args."""
    with tempfile.TemporaryFile() as errf:
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(errf.fileno(), 2)
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.execv(CTRAIN, [CTRAIN, *args])
            finally:
                os._exit(127)
        _, status, ru = os.wait4(pid, 0)
        errf.seek(0)
        err = errf.read().decode("utf-8", "replace")
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024, err


CONFIGS = [
    # (label, settings)
    ("B=8 T=128 none fp32, 2 threads",
     ["model.preset=gpt2-demo", "train.batch_size=8", "train.seq_len=128", "run.threads=2"]),
    ("B=16 T=128 full recompute, 2 threads",
     ["model.preset=gpt2-demo", "train.batch_size=16", "train.seq_len=128",
      "train.recompute=full", "run.threads=2"]),
    ("C=256 B=8 T=256 light recompute bf16, 2 threads",
     ["model.n_layer=4", "model.n_head=4", "model.n_embd=256", "model.n_ctx=256",
      "train.batch_size=8", "train.seq_len=256", "train.recompute=light",
      "train.activation_dtype=bf16", "run.threads=2"]),
    ("B=4 T=128 grad_accum 2, 1 thread",
     ["model.preset=gpt2-demo", "train.batch_size=4", "train.seq_len=128", "train.grad_accum=2",
      "run.threads=1"]),
]

t_start = time.time()
with tempfile.TemporaryDirectory() as tmp:
    shard = os.path.join(tmp, "train.bin")
    p = subprocess.run([CTRAIN, "synth", "--out", shard, "--tokens", "40000", "--vocab", "8192"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, "synth: %s" % p.stderr.strip()[-200:])
    for i, (label, cfg) in enumerate(CONFIGS):
        args = cfg + ["model.vocab_size=8192", f"data.train={shard}"]
        p = subprocess.run([CTRAIN, "plan", *args, "--json"], capture_output=True, text=True,
                           timeout=60)
        if not check(p.returncode == 0, "%s: plan %s" % (label, p.stderr.strip()[-200:])):
            continue
        plan = json.loads(p.stdout)
        total = plan["total_bytes"]
        check(total >= 40 << 20, "%s: the plan (%.1f MiB) is big enough to judge" %
              (label, total / 2 ** 20))
        rd = os.path.join(tmp, "run%d" % i)
        t0 = time.time()
        rc, maxrss, err = run_measured(["train", *args, "train.steps=1", f"run.dir={rd}",
                                        "alerts.gemm_peak_gflops=100"])
        if not check(rc == 0, "%s: trains%s" % (label, "" if rc == 0 else ": " + err.strip()[-300:])):
            continue
        with open(os.path.join(rd, "metrics.jsonl")) as f:
            last = [json.loads(ln) for ln in f if '"split": "train"' in ln][-1]
        ratio = maxrss / total
        print("  %s: plan %.1f MiB (runtime %.1f MiB for %d threads), peak RSS %.1f MiB "
              "(wait4) / %.1f MiB (metrics), ratio %.3f, %.1f s" %
              (label, total / 2 ** 20, plan["runtime_bytes"] / 2 ** 20, plan["threads"],
               maxrss / 2 ** 20, last["rss_peak_bytes"] / 2 ** 20, ratio, time.time() - t0))
        check(0.9 <= ratio <= 1.1, "%s: peak RSS (wait4) within 10%% of the plan (ratio %.3f)" %
              (label, ratio))
        r2 = last["rss_peak_bytes"] / total
        check(0.9 <= r2 <= 1.1, "%s: rss_peak_bytes within 10%% of the plan (ratio %.3f)" %
              (label, r2))
        check(last["plan_bytes"] == total, "%s: metrics' plan_bytes is `ctrain plan`'s total" %
              label)
print("%.1f s" % (time.time() - t_start))
print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
