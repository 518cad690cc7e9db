#!/usr/bin/env python3
"""A device's memory in the plan, through the real program, on the sim backend.

usage: /usr/bin/python3 tests/cli/test_device_memory.py path/to/ctrain

run.device=sim with debug.sim_device_memory is a device of that much memory that
refuses a buffer past it, as a full GPU does; run.device=cuda reads its GPU the
same way (cudaMemGetInfo), which only a GPU run can show. Here:
  * `ctrain plan --json` has a device part (the tensors: params to scratch and
    AdamW) that run.memory_limit bounds, a percentage being of the device's
    memory; without a capacity sim has none (device false) and the plan is the
    host's, as before;
  * train.batch_size=auto takes the largest micro-batch whose device part fits
    (the effective batch kept: B=4 x 4 of 16 where B=8 would not fit), in
    `plan` and in `train`; a batch that does not fit is refused (exit 2) before
    anything is allocated, naming device memory, and run.dir is not made;
  * the run holds what it planned: the device's own count of its peak is the
    plan's device part (sim allocates nothing else), within 5% and not above;
  * a bad debug.sim_device_memory exits 2 naming the key.
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
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1


def run(*args, env=None):
    e = dict(os.environ)
    e.pop("CTRAIN_DEVICE", None)
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300, env=e)
    return p.returncode, p.stdout, p.stderr


with tempfile.TemporaryDirectory() as tmp:
    shard = os.path.join(tmp, "s.bin")
    rc, _, err = run("synth", "--out", shard, "--tokens", "20000", "--vocab", "64")
    check(rc == 0, "synth")
    model = ["model.arch=gpt2", "model.n_layer=1", "model.n_head=2", "model.n_embd=32",
             "model.vocab_size=64", "model.n_ctx=32", "train.seq_len=32", "data.train=" + shard,
             "run.device=sim", "run.threads=1"]

    def plan(*extra):
        rc, out, err = run("plan", *model, *extra, "--json")
        return rc, (json.loads(out) if rc == 0 else None), err

    rc, host, err = plan("train.batch_size=4")
    check(rc == 0 and host["device"] is False and host["device_bytes"] == 0,
          "no capacity: sim has no memory of its own to plan (%s)" % (err.strip()[-200:]))
    rc, p4, _ = plan("train.batch_size=4", "debug.sim_device_memory=1GB")
    rc8, p8, _ = plan("train.batch_size=8", "debug.sim_device_memory=1GB")
    ok = rc == 0 and rc8 == 0
    check(ok and p4["device"] and p4["device_free_bytes"] == 1 << 30
          and p4["limit_bytes"] == int(0.85 * (1 << 30)),
          "with a capacity: a device plan; run.memory_limit 85% is of the device's memory")
    if ok:
        tensors = sum(p4[k] for k in ("params_bytes", "weights16_bytes", "grads_bytes",
                                      "optim_bytes", "acts_bytes", "work_bytes",
                                      "scratch_bytes"))
        check(p4["device_bytes"] == tensors and p4["device_workspace_bytes"] == 0,
              "the device part is the tensors (%d bytes) and nothing else on sim" % tensors)
        check(p4["total_bytes"] == p4["data_bytes"] + p4["shards_bytes"] + p4["runtime_bytes"],
              "the host part leaves the tensors to the device")
        check(p8["device_bytes"] > p4["device_bytes"], "B=8 needs more than B=4")
        # a device that holds B=4 but not B=8, all of it the run's
        cap = (p4["device_bytes"] + p8["device_bytes"]) // 2
        dev = ["debug.sim_device_memory=%d" % cap, "run.memory_limit=100%"]
        rc, pa, err = plan("train.batch_size=auto", "train.effective_batch=16", *dev)
        check(rc == 0 and pa["batch_size"] == 4 and pa["grad_accum"] == 4
              and pa["device_bytes"] <= pa["limit_bytes"] == cap,
              "batch_size=auto fits the device: B=4 x 4 (%s)"
              % (pa and (pa["batch_size"], pa["grad_accum"]), ))
        run_dir = os.path.join(tmp, "big")
        rc, _, err = run("train", *model, "train.batch_size=8", *dev, "run.dir=" + run_dir,
                         "train.steps=1")
        check(rc == 2 and "device memory on sim" in err and "train.batch_size=" in err
              and not os.path.exists(run_dir),
              "B=8 refused before allocating, naming device memory, run.dir not made: %s"
              % err.strip().splitlines()[0][:200] if err.strip() else "no message")
        run_dir = os.path.join(tmp, "auto")
        rc, _, err = run("train", *model, "train.batch_size=auto", "train.effective_batch=16",
                         *dev, "run.dir=" + run_dir, "train.steps=2")
        check(rc == 0 and "train.batch_size=4 train.grad_accum=4" in err,
              "train runs B=4 x 4 under the same plan (%s)" % err.strip()[-300:])
        lines = []
        try:
            lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
        except OSError:
            pass
        dl = [l for l in lines if l.get("split") == "device"]
        if dl:
            peak, planned = dl[-1]["device_peak_bytes"], dl[-1]["device_plan_bytes"]
            check(planned == pa["device_bytes"] and 0.95 * planned <= peak <= planned,
                  "the device's peak %d is the plan's %d (within 5%%, not above)"
                  % (peak, planned))
            check(dl[-1]["device_limit_bytes"] == cap, "the metrics name the device's limit")
        else:
            check(False, "metrics.jsonl has device lines")
        check("device memory: peak" in err, "train says the device's peak against the plan")
    rc, _, err = run("plan", *model, "debug.sim_device_memory=lots", "--json")
    check(rc == 2 and "debug.sim_device_memory" in err, "a bad capacity names the key")

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
