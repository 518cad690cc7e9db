#!/usr/bin/env python3
"""run.device=cuda through the real program, with or without a GPU.

usage: /usr/bin/python3 tests/cli/test_cuda_device.py path/to/ctrain

Everywhere: `ctrain hw --json --no-bench` says whether the build has the CUDA backend and how
many devices the driver sees (with its reason when none); a malformed device (cuda:x, gpu) is
refused with exit 2 naming run.device and the choices.
Without a GPU (or a CUDA build): `train`, `eval` (through CTRAIN_DEVICE) and `plan`-free
paths refuse run.device=cuda with exit 2, "no CUDA device: " and a reason, and run.dir is
not created: nothing is touched.
With a GPU: a few steps of a tiny GPT-2 and LLaMA on cuda:0 equal the CPU's losses within
1e-4, a device index past the last is refused with exit 2, and a second run is bit-identical
(deterministic kernels).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

CTRAIN = sys.argv[1]
failures = 0


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ((": " + detail) if detail and not ok else ""))
    if not ok:
        failures += 1


def run(args, env=None):
    e = dict(os.environ, OMP_NUM_THREADS="2")
    e.pop("CTRAIN_DEVICE", None)
    e.update(env or {})
    return subprocess.run([CTRAIN] + args, capture_output=True, text=True, timeout=600, env=e)


def losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if o.get("split") == "train":
                out[o["step"]] = o["loss"]
    return [out[k] for k in sorted(out)]


def main():
    p = run(["hw", "--json", "--no-bench"])
    hw = json.loads(p.stdout) if p.returncode == 0 else {}
    check(p.returncode == 0 and "cuda_built" in hw and "cuda_devices" in hw,
          "hw --json says whether CUDA is built and how many devices it sees", p.stderr[-300:])
    built, ndev = hw.get("cuda_built", False), hw.get("cuda_devices", 0)
    print("CUDA backend built: %s, devices: %d %s" % (built, ndev, hw.get("cuda_name", "")))
    if built and not ndev:
        check(len(hw.get("cuda_error", "")) > 0, "without a device, hw gives the driver's reason")

    tmp = tempfile.mkdtemp(prefix="ct_cuda_")
    shard = os.path.join(tmp, "train.bin")
    q = run(["synth", "--out", shard, "--tokens", "20000", "--vocab", "64"])
    check(q.returncode == 0, "synth writes a shard", q.stderr[-300:])
    common = ["model.arch=gpt2", "model.preset=gpt2-tiny", "data.train=%s" % shard, "train.steps=3",
              "train.batch_size=2", "train.seq_len=16", "run.threads=2"]
    for bad in ("cuda:x", "gpu", "cuda:-1"):
        q = run(["train"] + common + ["run.device=%s" % bad, "run.dir=%s/bad" % tmp])
        check(q.returncode == 2 and "run.device" in q.stderr and "cuda:N" in q.stderr,
              "run.device=%s is refused with exit 2 naming the choices" % bad, q.stderr[-300:])

    if not ndev:
        rd = os.path.join(tmp, "nogpu")
        q = run(["train"] + common + ["run.device=cuda", "run.dir=%s" % rd])
        check(q.returncode == 2 and "no CUDA device: " in q.stderr,
              "train run.device=cuda without a GPU exits 2: no CUDA device, with the reason",
              q.stderr[-400:])
        check(not os.path.exists(rd), "and run.dir was not created")
        q = run(["train"] + common + ["run.device=cuda:3", "run.dir=%s" % rd])
        check(q.returncode == 2 and "no CUDA device" in q.stderr, "cuda:3 the same",
              q.stderr[-300:])
        q = run(["eval", "--model", "/nonexistent", "--data", shard], env={"CTRAIN_DEVICE": "cuda"})
        check(q.returncode == 2 and "CUDA" in q.stderr, "eval under CTRAIN_DEVICE=cuda exits 2",
              q.stderr[-300:])
    else:
        for arch, preset in (("gpt2", "gpt2-tiny"), ("llama", "llama-tiny")):
            base = ["model.arch=%s" % arch, "model.preset=%s" % preset, "data.train=%s" % shard,
                    "train.steps=5", "train.batch_size=2", "train.seq_len=16", "run.threads=2",
                    "optim.lr=1e-3"]
            runs = {}
            for dev in ("cpu", "cuda:0", "cuda"):
                rd = os.path.join(tmp, "%s_%s" % (arch, dev.replace(":", "")))
                q = run(["train"] + base + ["run.device=%s" % dev, "run.dir=%s" % rd])
                if check(q.returncode == 0, "%s on %s trains" % (arch, dev), q.stderr[-600:]):
                    runs[dev] = losses(rd)
            if len(runs) == 3:
                worst = max(abs(a - b) / abs(b) for a, b in zip(runs["cuda:0"], runs["cpu"]))
                check(worst <= 1e-4, "%s: cuda losses equal the CPU's within 1e-4" % arch,
                      "worst %.2e: %s vs %s" % (worst, runs["cuda:0"], runs["cpu"]))
                check(runs["cuda:0"] == runs["cuda"], "%s: two GPU runs are bit-identical" % arch)
        q = run(["train"] + common + ["run.device=cuda:%d" % ndev, "run.dir=%s/past" % tmp])
        check(q.returncode == 2 and "no such CUDA device" in q.stderr,
              "cuda:%d (past the last) exits 2" % ndev, q.stderr[-300:])
    if failures:
        print("kept %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
