#!/usr/bin/env python3
"""bf16 on a GPU without bf16 GEMMs is refused before training, through the real program.

usage: /usr/bin/python3 tests/cli/test_bf16_capability.py path/to/ctrain

A GPU of compute capability below 8.0 (a T4 is 7.5) has no bf16 GEMMs. The decision is
ct_device_check_bf16 (unit-tested in test_device.c); this test checks the trainer asks it,
on the sim backend made to report a compute capability (CT_SIM_COMPUTE_CAPABILITY, with
debug.sim_device_memory so it counts as a device):
  * 7.5 with train.precision=bf16: exit 2 before anything is built, the error naming the
    key and value, the GPU and its compute capability, the hint train.precision=fp32,
    and run.dir not made;
  * 7.5 with a LoRA run's lora.base_dtype=bf16 (train.precision=fp32): the same, naming
    lora.base_dtype and its fix;
  * 7.5 with fp32 trains (fp32 runs on every GPU), and so does 8.0 with bf16;
  * a malformed CT_SIM_COMPUTE_CAPABILITY exits 2 naming the variable.
"""
import os
import subprocess
import sys
import tempfile

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


with tempfile.TemporaryDirectory() as tmp:
    shard = os.path.join(tmp, "s.bin")
    rc, err = run(["synth", "--out", shard, "--tokens", "20000", "--vocab", "64"], None)
    check(rc == 0, "synth", err[-300:])
    base = ["model.arch=gpt2", "model.n_layer=1", "model.n_head=2", "model.n_embd=32",
            "model.vocab_size=64", "model.n_ctx=32", "train.seq_len=32", "train.batch_size=2",
            "train.steps=2", "data.train=" + shard, "run.device=sim", "run.threads=1",
            "debug.sim_device_memory=1GB"]

    def train(name, cc, *extra):
        d = os.path.join(tmp, name)
        rc, err = run(["train", *base, "run.dir=" + d, *extra], cc)
        return rc, err, d

    rc, err, d = train("t4_bf16", "7.5", "train.precision=bf16")
    check(rc == 2, "7.5, train.precision=bf16: exit 2", "rc %d: %s" % (rc, err[-300:]))
    check("train.precision = bf16" in err and "compute capability 7.5" in err and
          "sim" in err, "the error names the key, its value, the GPU and 7.5", err[-300:])
    check("train.precision=fp32" in err, "the hint says train.precision=fp32", err[-300:])
    check(not os.path.exists(d), "run.dir not made")

    rc, err, d = train("t4_lora", "7.5", "train.precision=fp32", "lora.r=4",
                       "lora.base_dtype=bf16")
    check(rc == 2, "7.5, LoRA with lora.base_dtype=bf16: exit 2", "rc %d: %s" % (rc, err[-300:]))
    check("lora.base_dtype = bf16" in err and "train.precision" not in err.split("hint")[0] and
          "lora.base_dtype=fp32" in err, "the error names lora.base_dtype and its fix",
          err[-300:])
    check(not os.path.exists(d), "run.dir not made (LoRA)")

    rc, err, d = train("t4_fp32", "7.5", "train.precision=fp32")
    check(rc == 0 and os.path.exists(os.path.join(d, "metrics.jsonl")),
          "7.5, train.precision=fp32 trains", "rc %d: %s" % (rc, err[-300:]))

    rc, err, d = train("a100_bf16", "8.0", "train.precision=bf16")
    check(rc == 0 and os.path.exists(os.path.join(d, "metrics.jsonl")),
          "8.0, train.precision=bf16 trains", "rc %d: %s" % (rc, err[-300:]))

    rc, err, d = train("bad_cc", "7.x")
    check(rc == 2 and "CT_SIM_COMPUTE_CAPABILITY" in err and "7.x" in err,
          "a malformed CT_SIM_COMPUTE_CAPABILITY: exit 2 naming it", "rc %d: %s" % (rc, err[-300:]))

print("test_bf16_capability: %d failure(s)" % failures)
sys.exit(1 if failures else 0)
