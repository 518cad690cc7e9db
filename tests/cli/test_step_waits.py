#!/usr/bin/env python3
"""One wait per training step on a device, through the real program, on sim.

usage: /usr/bin/python3 tests/cli/test_step_waits.py path/to/ctrain

A GPU runs the work its host queued while the host goes on; each time the host
waits for that work (a reduction read back, a download, a synchronize, an event
not yet reached) the GPU drains and idles. The sim backend counts those stalls
as a GPU would (backend.h: ct_backend.stalls), and a run on a device writes a
step's count as `host_waits` in metrics.jsonl's device lines. Here, for
several steps of gradient accumulation each:
  * GPT-2 with dropout, fp32;
  * LLaMA with GQA, LoRA on a bf16 base, train.precision=bf16;
  * Gemma 3 (sliding-window attention, whose windows are uploaded per batch);
every step waits exactly once (the read of its loss and gradient norm after
the last micro-batch), and the run's losses are finite and go down. And
train.precision=fp16 (sim reporting compute capability 7.5), with an initial
loss scale that overflows: overflowing steps and good ones wait once each too
(the loss scaler decides from the same read). A traced run (run.trace, the
kernel profiler in front) waits once per step too. The same
runs on cpu give the same losses and gradient norms, to 1e-5 in fp32 and 2e-3
in bf16 (sim runs ref's kernels, cpu its own: they differ in the order of their
sums, and in bf16 by the head's logits, bf16 on sim and fp32 on cpu).
"""
import json
import math
import os
import subprocess
import sys
import tempfile

CTRAIN = sys.argv[1]
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1


def run(*args, cc=None):
    e = dict(os.environ)
    e.pop("CTRAIN_DEVICE", None)
    e.pop("CT_SIM_COMPUTE_CAPABILITY", None)
    if cc:
        e["CT_SIM_COMPUTE_CAPABILITY"] = cc
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300, env=e)
    return p.returncode, p.stdout + p.stderr


def lines(run_dir, split):
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if d.get("split") == split:
                out.append(d)
    return out


CASES = [
    ("gpt2 dropout fp32 accum 2", 1e-5,
     ["model.preset=gpt2-tiny", "model.dropout=0.1", "train.grad_accum=2"]),
    ("llama gqa lora bf16-base bf16 accum 3", 2e-3,
     ["model.preset=llama-tiny", "lora.r=4", "lora.targets=q_proj,v_proj",
      "lora.base_dtype=bf16", "train.precision=bf16", "debug.emulate_bf16=true",
      "train.grad_accum=3"]),
    ("gemma3 sliding windows accum 2", 1e-5,
     ["model.preset=gemma3-tiny", "train.grad_accum=2"]),
]

with tempfile.TemporaryDirectory() as tmp:
    shard = os.path.join(tmp, "s.bin")
    rc, out = run("synth", "--out", shard, "--tokens", "40000", "--vocab", "256")
    check(rc == 0, "synth " + out.strip()[-200:])
    for name, tol, extra in CASES:
        common = ["model.vocab_size=256", "train.seq_len=32", "train.batch_size=2",
                  "train.steps=5", "data.train=" + shard, "run.threads=1",
                  "optim.lr=3e-3", "train.seed=7", *extra]
        res = {}
        for device in ("sim", "cpu"):
            d = os.path.join(tmp, "%s-%s" % (name.split()[0], device))
            dev = ["run.device=" + device]
            if device == "sim":
                dev.append("debug.sim_device_memory=1GB")  # a device plan: device lines
            rc, out = run("train", *common, *dev, "run.dir=" + d)
            check(rc == 0, "%s on %s trains (%s)" % (name, device, out.strip()[-300:]))
            if rc != 0:
                continue
            res[device] = lines(d, "train")
            if device == "sim":
                waits = [x.get("host_waits") for x in lines(d, "device")]
                check(len(waits) == 5 and all(w == 1 for w in waits),
                      "%s: every step waits once on the device: %s" % (name, waits))
        if len(res) == 2:
            sim, cpu = res["sim"], res["cpu"]
            losses = [x["loss"] for x in sim]
            check(len(sim) == 5 and all(math.isfinite(v) for v in losses)
                  and losses[-1] < losses[0], "%s: losses finite and falling: %s" % (name, losses))
            worst = max(max(abs(a["loss"] - b["loss"]) / abs(b["loss"]),
                            abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"]))
                        for a, b in zip(sim, cpu))
            check(worst < tol, "%s: sim's losses and norms are cpu's (worst relative "
                  "difference %.2g)" % (name, worst))

    # fp16: overflowing steps first (2^24 makes the seed gradient 2^17, past fp16
    # range), then good ones; one wait per step all the same
    d = os.path.join(tmp, "fp16-sim")
    rc, out = run("train", "model.preset=gpt2-tiny", "model.vocab_size=256", "train.seq_len=32",
                  "train.batch_size=2", "train.grad_accum=2", "train.steps=6",
                  "data.train=" + shard, "run.threads=1", "optim.lr=3e-3", "train.seed=7",
                  "run.device=sim", "debug.sim_device_memory=1GB", "train.precision=fp16",
                  "train.loss_scale_init=16777216", "run.dir=" + d, cc="7.5")
    check(rc == 0, "fp16 on sim (7.5) trains (%s)" % out.strip()[-300:])
    if rc == 0:
        tr = lines(d, "train")
        waits = [x.get("host_waits") for x in lines(d, "device")]
        over = [x.get("overflow", 0) for x in tr]
        check(len(waits) == 6 and all(w == 1 for w in waits),
              "fp16: every step waits once on the device, overflows %s included: %s"
              % (over, waits))
        check(over[0] == 1 and 0 in over, "fp16: the run overflows first, then steps: %s" % over)

    # run.trace puts the kernel profiler in front of the backend: it reads its
    # kernels' times at the waits the step has anyway, never one of its own
    d = os.path.join(tmp, "traced-sim")
    rc, out = run("train", "model.preset=gpt2-tiny", "model.vocab_size=256", "train.seq_len=32",
                  "train.batch_size=2", "train.grad_accum=2", "train.steps=5",
                  "data.train=" + shard, "run.threads=1", "run.device=sim",
                  "debug.sim_device_memory=1GB", "run.trace=steps:2-4", "run.dir=" + d)
    check(rc == 0, "traced run on sim trains (%s)" % out.strip()[-300:])
    if rc == 0:
        waits = [x.get("host_waits") for x in lines(d, "device")]
        check(len(waits) == 5 and all(w == 1 for w in waits),
              "run.trace: every step waits once on the device, traced or not: %s" % waits)
        check(os.path.exists(os.path.join(d, "trace.json")), "run.trace: trace.json written")

print("failures:", failures)
sys.exit(1 if failures else 0)
