#!/usr/bin/env python3
"""Checkpoints and exact resume through the real program.

- A 20-step run against one killed with SIGKILL right after step 10's
  checkpoint is on disk and resumed with train.resume=auto: bit-identical
  losses and grad norms for steps 11-20, identical final weights, and a
  metrics.jsonl with exactly one line per step (the lines the killed run wrote
  after its checkpoint are dropped). Both with data.shuffle false and true,
  data.prefetch > 0, gradient accumulation and periodic validation (and zstd
  checkpoints in the shuffled case); and with dropout on (model.dropout=0.1: the
  masks are keyed by train.seed, the step and the global row, so the resumed
  steps draw the unbroken run's), whose losses differ from the run without.
- SIGINT and SIGTERM: the run finishes its step, writes a checkpoint and the
  final weights, exits 130 / 143; resuming reaches the unbroken run's weights.
- train.resume=never on a run.dir with checkpoints, PATH, a damaged newest
  checkpoint (auto falls back with a warning, PATH fails), a truncated one,
  another model shape, a contradictory batch shape or seed, model.init_from
  with a checkpoint, train.steps below the checkpoint, and a file-size limit
  (a full disk) that makes a later checkpoint fail while the earlier one
  survives and still resumes.

usage: test_resume.py path/to/ctrain
"""
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:1200])
        print(f"FAIL {label}: {detail}"[:1200])


def run(*args, preexec=None):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300,
                       preexec_fn=preexec)
    return p.returncode, p.stdout + p.stderr


def metrics(run_dir, split="train"):
    """step -> line (dict) of one split; also returns the raw list of steps."""
    by_step, steps = {}, []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m["split"] == split:
                by_step[m["step"]] = m
                steps.append(m["step"])
    return by_step, steps


def read(path):
    with open(path, "rb") as f:
        return f.read()


def ckpt(run_dir, step):
    return os.path.join(run_dir, "checkpoints", "step_%08d" % step)


def kill_after_checkpoint(args, run_dir, step, sig=signal.SIGKILL):
    """Start a run, wait until checkpoint `step` is complete (its MANIFEST.json
    is the last file written), then send sig. Returns (exit status, output)."""
    manifest = os.path.join(ckpt(run_dir, step), "MANIFEST.json")
    p = subprocess.Popen([CTRAIN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    deadline = time.time() + 120
    while not os.path.exists(manifest) and p.poll() is None and time.time() < deadline:
        time.sleep(0.002)
    if p.poll() is None:
        p.send_signal(sig)
    out, _ = p.communicate(timeout=120)
    return p.returncode, out


def exact_resume(tmp, shard, shuffle, extra, tag=None):
    tag = tag or ("shuffle" if shuffle else "sequential")
    common = [*extra, "model.preset=gpt2-tiny", f"data.train={shard}", "train.steps=20",
              "train.batch_size=2", "train.seq_len=8", "train.grad_accum=2",
              f"data.shuffle={'true' if shuffle else 'false'}", "data.prefetch=3",
              "run.threads=2", "run.checkpoint_every=10", "optim.lr=3e-3",
              "schedule.name=cosine", "schedule.warmup_steps=3"]
    ref = os.path.join(tmp, "ref_" + tag)
    rc, out = run("train", *common, f"run.dir={ref}")
    check(f"{tag}: uninterrupted 20-step run", rc == 0, out[-400:])

    killed = os.path.join(tmp, "killed_" + tag)
    rc, out = kill_after_checkpoint(["train", *common, "debug.sleep_ms=40", f"run.dir={killed}"],
                                    killed, 10)
    check(f"{tag}: run killed by SIGKILL after step 10's checkpoint", rc == -signal.SIGKILL,
          f"exit {rc}: {out[-300:]}")
    _, before = metrics(killed)
    check(f"{tag}: the killed run stopped before step 20", before and max(before) < 20,
          str(before))
    rc, out = run("train", *common, "train.resume=auto", f"run.dir={killed}")
    check(f"{tag}: train.resume=auto continues", rc == 0 and "step_00000010" in out, out[-400:])
    a, _ = metrics(ref)
    b, steps = metrics(killed)
    check(f"{tag}: metrics.jsonl holds steps 1..20 once each", steps == list(range(1, 21)),
          str(steps))
    same = all(a[s]["loss"] == b[s]["loss"] and a[s]["grad_norm"] == b[s]["grad_norm"] and
               a[s]["lr"] == b[s]["lr"] for s in range(11, 21) if s in a and s in b)
    check(f"{tag}: steps 11-20 losses, grad norms and LRs bit-identical", same and len(b) == 20,
          "\n".join(f"{s}: {a.get(s, {}).get('loss')} vs {b.get(s, {}).get('loss')}"
                    for s in range(11, 21)))
    check(f"{tag}: final weights bit-identical",
          read(os.path.join(ref, "model.safetensors")) == read(os.path.join(killed,
                                                                            "model.safetensors")))
    opt = "optimizer.bin.zst" if "run.checkpoint_compress=true" in extra else "optimizer.bin"
    check(f"{tag}: final checkpoints' optimizer state bit-identical",
          read(os.path.join(ckpt(ref, 20), opt)) == read(os.path.join(ckpt(killed, 20), opt)))
    va, _ = metrics(ref, "val")
    vb, _ = metrics(killed, "val")
    check(f"{tag}: validation losses after the resume bit-identical",
          sorted(va) == sorted(vb) == [4, 8, 12, 16, 20] and
          all(va[s]["loss"] == vb[s]["loss"] for s in (12, 16, 20)), f"{va} vs {vb}")
    if "run.checkpoint_compress=true" in extra:
        files = sorted(os.listdir(ckpt(killed, 20)))
        check(f"{tag}: compressed state blobs", "optimizer.bin.zst" in files and
              "state.bin.zst" in files, str(files))
    # the losses must actually move: a resume that restarted from scratch or
    # never trained would not match, but make sure the comparison has teeth
    check(f"{tag}: training changes the loss", a[20]["loss"] < a[1]["loss"],
          f"{a[1]['loss']} -> {a[20]['loss']}")
    return ref


def signals(tmp, shard):
    common = ["model.preset=gpt2-tiny", f"data.train={shard}", "train.steps=30",
              "train.batch_size=2", "train.seq_len=8", "data.prefetch=2", "run.threads=2",
              "run.checkpoint_every=100", "optim.lr=3e-3"]
    ref = os.path.join(tmp, "sig_ref")
    rc, out = run("train", *common, f"run.dir={ref}")
    check("signals: reference run", rc == 0, out[-300:])
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        d = os.path.join(tmp, "sig_" + sig.name)
        p = subprocess.Popen([CTRAIN, "train", *common, "debug.sleep_ms=30", f"run.dir={d}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        mpath = os.path.join(d, "metrics.jsonl")
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None:
            # four train lines (a GPU run also writes device lines between them)
            if os.path.exists(mpath) and read(mpath).count(b'"split": "train"') >= 4:
                break
            time.sleep(0.005)
        p.send_signal(sig)
        out, _ = p.communicate(timeout=60)
        check(f"{sig.name}: exit status {code}", p.returncode == code,
              f"exit {p.returncode}: {out[-300:]}")
        check(f"{sig.name}: says it stopped by signal", "stopped by signal" in out, out[-300:])
        _, steps = metrics(d)
        last = steps[-1] if steps else -1
        check(f"{sig.name}: stopped early, after a whole step", 4 <= last < 30, str(steps))
        check(f"{sig.name}: checkpoint of the last step written",
              os.path.exists(os.path.join(ckpt(d, last), "MANIFEST.json")),
              str(os.listdir(os.path.join(d, "checkpoints")))
              if os.path.isdir(os.path.join(d, "checkpoints")) else "no checkpoints/")
        check(f"{sig.name}: final weights written",
              os.path.exists(os.path.join(d, "model.safetensors")))
        rc, out = run("train", *common, "train.resume=auto", f"run.dir={d}")
        check(f"{sig.name}: resumed run completes", rc == 0, out[-300:])
        check(f"{sig.name}: resumed weights equal the unbroken run's",
              read(os.path.join(ref, "model.safetensors")) ==
              read(os.path.join(d, "model.safetensors")))


def expect_fail(label, args, must_contain, preexec=None):
    rc, out = run(*args, preexec=preexec)
    missing = [s for s in must_contain if s not in out]
    check(label, rc == 2 and not missing,
          f"exit {rc}, missing {missing}: {out.strip()[-500:]}")
    return out


def faults(tmp, shard):
    base = ["model.preset=gpt2-tiny", f"data.train={shard}", "train.batch_size=2",
            "train.seq_len=8", "run.threads=2", "run.checkpoint_every=10", "run.keep_last=0"]
    d = os.path.join(tmp, "faults")
    rc, out = run("train", *base, "train.steps=20", f"run.dir={d}")
    check("faults: base run with checkpoints 10 and 20", rc == 0 and
          os.path.isdir(ckpt(d, 10)) and os.path.isdir(ckpt(d, 20)), out[-300:])

    expect_fail("resume=never on a run.dir with checkpoints",
                ["train", *base, "train.steps=25", f"run.dir={d}"],
                [d, "train.resume = never", "train.resume=auto"])
    expect_fail("another model shape",
                ["train", *base, "model.n_layer=3", "train.steps=25", "train.resume=auto",
                 f"run.dir={d}"], ["n_layer=2", "n_layer=3"])
    expect_fail("another batch size than the checkpoint's",
                ["train", *base, "train.batch_size=3", "train.steps=25", "train.resume=auto",
                 f"run.dir={d}"], ["train.batch_size = 3", "step_00000020", "2"])
    expect_fail("another seed than the checkpoint's",
                ["train", *base, "train.seed=7", "train.steps=25", "train.resume=auto",
                 f"run.dir={d}"], ["train.seed"])
    expect_fail("train.steps below the checkpoint",
                ["train", *base, "train.steps=15", "train.resume=auto", f"run.dir={d}"],
                ["train.steps = 15", "step 20"])
    expect_fail("model.init_from with train.resume=PATH",
                ["train", f"model.init_from={d}", f"data.train={shard}", "train.batch_size=2",
                 "train.seq_len=8", "train.steps=25", f"train.resume={ckpt(d, 20)}",
                 f"run.dir={d}"], ["model.init_from", "train.resume"])
    expect_fail("model.init_from unlike the run's",
                ["train", f"model.init_from={ckpt(d, 10)}", f"data.train={shard}",
                 "train.batch_size=2", "train.seq_len=8", "train.steps=25", "train.resume=auto",
                 f"run.dir={d}"], ["model.init_from", "freshly initialised"])
    expect_fail("train.resume=PATH that is no checkpoint",
                ["train", *base, "train.steps=25", f"train.resume={tmp}/nowhere",
                 f"run.dir={tmp}/fork"], ["train.resume", "nowhere"])

    # a flipped byte in the newest checkpoint: auto falls back, PATH refuses
    opt20 = os.path.join(ckpt(d, 20), "optimizer.bin")
    raw = bytearray(read(opt20))
    raw[len(raw) // 2] ^= 0x40
    with open(opt20, "wb") as f:
        f.write(raw)
    expect_fail("resume=PATH of a damaged checkpoint",
                ["train", *base, "train.steps=25", f"train.resume={ckpt(d, 20)}",
                 f"run.dir={tmp}/fork"], ["optimizer.bin"])
    check("nothing written for a refused PATH", not os.path.exists(os.path.join(tmp, "fork")))
    rc, out = run("train", *base, "train.steps=25", "train.resume=auto", f"run.dir={d}")
    check("resume=auto skips a damaged newest checkpoint with a warning",
          rc == 0 and "warning" in out and "step_00000020" in out and
          "resuming from " + ckpt(d, 10) in out, out[-600:])
    _, steps = metrics(d)
    check("metrics.jsonl trimmed to step 10, then steps 11..25", steps == list(range(1, 26)),
          str(steps))

    # a truncated weights file in the newest checkpoint (now step 25? no: 20 was replaced)
    newest = max(int(n[5:]) for n in os.listdir(os.path.join(d, "checkpoints")))
    w = os.path.join(ckpt(d, newest), "model.safetensors")
    raw = read(w)
    with open(w, "wb") as f:
        f.write(raw[: len(raw) - 100])
    rc, out = run("train", *base, "train.steps=30", "train.resume=auto", f"run.dir={d}")
    check("resume=auto skips a truncated checkpoint",
          rc == 0 and "model.safetensors" in out and f"step_{newest:08d}" in out, out[-600:])


def full_disk(tmp, shard):
    """A file-size limit as a full disk: the first checkpoint is written without
    it; the resumed run under it cannot write the next one and fails cleanly."""
    base = ["model.preset=gpt2-tiny", f"data.train={shard}", "train.batch_size=2",
            "train.seq_len=8", "run.threads=2", "run.checkpoint_every=5"]
    d = os.path.join(tmp, "disk")
    rc, out = run("train", *base, "train.steps=5", f"run.dir={d}")
    check("disk: first checkpoint", rc == 0, out[-300:])
    weights = os.path.getsize(os.path.join(ckpt(d, 5), "model.safetensors"))
    moments = os.path.getsize(os.path.join(ckpt(d, 5), "optimizer.bin"))
    limit = (weights + moments) // 2  # the weights fit, the moments do not

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    before = read(os.path.join(ckpt(d, 5), "optimizer.bin"))
    out = expect_fail("disk: a checkpoint that does not fit fails with exit 2",
                      ["train", *base, "train.steps=15", "train.resume=auto", f"run.dir={d}"],
                      ["step 10", "not saved"], preexec=limited)
    check("disk: the error says why", "too large" in out or "no room" in out, out[-300:])
    left = sorted(os.listdir(os.path.join(d, "checkpoints")))
    check("disk: only the good checkpoint remains, no temporary files", left == ["step_00000005"],
          str(left))
    check("disk: the good checkpoint is untouched",
          read(os.path.join(ckpt(d, 5), "optimizer.bin")) == before)
    rc, out = run("train", *base, "train.steps=15", "train.resume=auto", f"run.dir={d}")
    check("disk: with room again the run resumes from the survivor",
          rc == 0 and "step_00000005" in out, out[-300:])
    _, steps = metrics(d)
    check("disk: metrics.jsonl holds steps 1..15 once each", steps == list(range(1, 16)),
          str(steps))


def main():
    tmp = tempfile.mkdtemp(prefix="ct_resume_")
    try:
        shard = os.path.join(tmp, "train.bin")
        rc, out = run("synth", "--out", shard, "--tokens", "30000", "--vocab", "64")
        assert rc == 0, out
        val = os.path.join(tmp, "val.bin")
        rc, out = run("synth", "--out", val, "--tokens", "5000", "--vocab", "64", "--seed", "2")
        assert rc == 0, out
        evals = [f"data.val={val}", "train.eval_every=4", "train.eval_batches=2"]
        plain = exact_resume(tmp, shard, False, evals)
        exact_resume(tmp, shard, True, [*evals, "run.checkpoint_compress=true"])
        dropped = exact_resume(tmp, shard, False, [*evals, "model.dropout=0.1"], tag="dropout")
        a, _ = metrics(plain)
        b, _ = metrics(dropped)
        check("dropout: model.dropout=0.1 changes the training losses",
              1 in a and 1 in b and a[1]["loss"] != b[1]["loss"],
              f"{a.get(1, {}).get('loss')} vs {b.get(1, {}).get('loss')}")
        signals(tmp, shard)
        faults(tmp, shard)
        full_disk(tmp, shard)
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"test_resume: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
