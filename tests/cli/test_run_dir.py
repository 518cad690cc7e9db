#!/usr/bin/env python3
"""A run directory cannot be lost or mixed up, through the real program.

- Lock: a second run into a run.dir in use is refused (exit 2) naming the
  first's pid and host, and changes nothing; a lock left by a SIGKILLed run is
  taken over; a finished run leaves no lock; a run refused at setup leaves no
  directory behind.
- The end of a run is resumable: with the defaults (no periodic checkpoints)
  a finished run leaves a checkpoint, and train.resume=auto with train.steps
  raised continues it, equal bit for bit to one unbroken run.
- Results are never overwritten unasked: train.resume=never on a finished
  run is refused (exit 2) and changes nothing; results without a checkpoint
  under resume=auto are refused too; train.resume=never run.overwrite=true
  starts over and leaves no event file or metrics line of the old run;
  run.overwrite with resume=auto is refused.
- The report marks where a run stopped and was resumed.
- Signals: the first Ctrl-C is acknowledged at once, naming the step being
  finished; a second one stops at once (exit 130) and says what is saved.

usage: test_run_dir.py path/to/ctrain
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500])


def train(*args, timeout=120):
    p = subprocess.run([CTRAIN, "train", *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def run_report(run_dir):
    p = subprocess.run([CTRAIN, "report", run_dir], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def base(shard, run_dir, steps, extra=()):
    return ["model.preset=gpt2-tiny", f"data.train={shard}", f"train.steps={steps}",
            "train.batch_size=2", "train.seq_len=16", "run.threads=1", "optim.lr=3e-3",
            "schedule.name=constant", f"run.dir={run_dir}", *extra]


def read(path):
    with open(path, "rb") as f:
        return f.read()


def losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m["split"] == "train":
                out[m["step"]] = m["loss"]
    return out


def snapshot(d):
    """Every file under d with its bytes: to prove nothing changed."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, d)] = read(p)
    return out


class Live:
    """A run in the background whose stderr is collected as it comes."""

    def __init__(self, args):
        self.p = subprocess.Popen([CTRAIN, "train", *args], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stderr:
            self.lines.append((time.time(), line))

    def text(self):
        return "".join(l for _, l in self.lines)

    def wait_for(self, s, limit=60):
        t0 = time.time()
        while time.time() - t0 < limit:
            for t, l in self.lines:
                if s in l:
                    return t
            if self.p.poll() is not None and not self.t.is_alive():
                return None
            time.sleep(0.01)
        return None

    def finish(self, limit=60):
        try:
            self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.t.join(timeout=5)
        return self.p.returncode


def lock_tests(tmp, shard):
    d = os.path.join(tmp, "locked")
    first = Live(base(shard, d, 100000, ["debug.sleep_ms=20"]))
    started = first.wait_for("step ")
    check("lock: the first run is training", started is not None, first.text()[-300:])
    rc, out = train(*base(shard, d, 4, ["train.resume=auto"]))
    host = socket.gethostname()
    check("lock: a second run into the same run.dir is refused (exit 2) naming the holder",
          rc == 2 and "is in use by another run" in out and f"pid {first.p.pid} " in out and
          f"host {host}" in out, out[-600:])
    # the first run is killed: its lock file stays, with nobody holding it
    first.p.kill()
    first.finish()
    check("lock: a SIGKILLed run leaves run.lock behind",
          os.path.exists(os.path.join(d, "run.lock")))
    rc, out = train(*base(shard, d, 4))
    events = [f for f in os.listdir(d) if f.startswith("events.out")]
    check("lock: the stale lock is taken over, naming the dead run", rc == 0 and
          "took over the lock of a run that is gone" in out and f"pid {first.p.pid} " in out,
          out[-600:])
    check("lock: a finished run leaves no run.lock", not os.path.exists(os.path.join(d, "run.lock")))
    check("a fresh start clears what the killed run left (its metrics and event file)",
          rc == 0 and "file(s) of an earlier run that saved no weights" in out and
          len(events) == 1 and sorted(losses(d)) == [1, 2, 3, 4], f"{events}: {out[-300:]}")
    # refused at setup: nothing is created, not even the parents
    nd = os.path.join(tmp, "never", "made")
    rc, out = train(*base(os.path.join(tmp, "missing.bin"), nd, 4))
    check("lock: a run refused at setup leaves no directory behind",
          rc == 2 and not os.path.exists(os.path.join(tmp, "never")), out[-300:])


def resume_tests(tmp, shard):
    d = os.path.join(tmp, "finished")
    rc, out = train(*base(shard, d, 6))
    check("a finished run with the defaults trains", rc == 0, out[-300:])
    check("the end of a run leaves a checkpoint (run.checkpoint_every=0)",
          os.path.exists(os.path.join(d, "checkpoints", "step_00000006", "MANIFEST.json")),
          str(os.listdir(d)))
    before = snapshot(d)
    rc, out = train(*base(shard, d, 6))
    check("train.resume=never on a finished run is refused (exit 2), saying how to go on",
          rc == 2 and "holds an earlier run" in out and "train.resume=auto" in out and
          "run.overwrite=true" in out, out[-600:])
    check("... and changes nothing in run.dir", snapshot(d) == before)
    # "300 more steps": resume=auto with train.steps raised
    rc, out = train(*base(shard, d, 12, ["train.resume=auto"]))
    check("train.resume=auto train.steps=12 continues the finished run from step 6",
          rc == 0 and "resuming from" in out and "step_00000006" in out, out[-600:])
    ref = os.path.join(tmp, "unbroken")
    rc2, out2 = train(*base(shard, ref, 12))
    if rc == 0 and rc2 == 0:
        a, b = losses(ref), losses(d)
        check("... and equals one unbroken 12-step run bit for bit (losses, weights)",
              a == b and read(os.path.join(ref, "model.safetensors")) ==
              read(os.path.join(d, "model.safetensors")), f"{a} {b}")
    # the report marks where the run stopped and went on
    rc, out = run_report(d)
    page = read(os.path.join(d, "report.html")).decode() if rc == 0 else ""
    check("the report marks the resume: a summary row and a marker after step 6",
          rc == 0 and "<th>resumes</th><td>1, after step 6</td>" in page and
          "step 6: the run stopped here and was resumed" in page, out[-300:])
    # start over, explicitly
    events_before = [f for f in os.listdir(d) if f.startswith("events.out")]
    rc, out = train(*base(shard, d, 3, ["run.overwrite=true"]))
    events = [f for f in os.listdir(d) if f.startswith("events.out")]
    check("train.resume=never run.overwrite=true starts over, saying what it removed",
          rc == 0 and "run.overwrite: removed the earlier run's results" in out, out[-600:])
    check("... leaving one event file, the new metrics and its own checkpoint only",
          len(events) == 1 and events[0] not in events_before and
          sorted(losses(d)) == [1, 2, 3] and
          os.listdir(os.path.join(d, "checkpoints")) == ["step_00000003"],
          f"{events} {events_before} {os.listdir(os.path.join(d, 'checkpoints'))}")
    rc, out = train(*base(shard, d, 3, ["train.resume=auto", "run.overwrite=true"]))
    check("run.overwrite=true with train.resume=auto is refused",
          rc == 2 and "run.overwrite" in out and "train.resume = never" in out, out[-300:])
    # results without a checkpoint (an earlier version's run): auto refuses
    shutil.rmtree(os.path.join(d, "checkpoints"))
    before = snapshot(d)
    rc, out = train(*base(shard, d, 6, ["train.resume=auto"]))
    check("results without a checkpoint under train.resume=auto: refused, naming them",
          rc == 2 and "no checkpoint to continue from" in out and "model.safetensors" in out and
          "model.init_from=" in out, out[-600:])
    check("... and changes nothing", snapshot(d) == before)


def signal_tests(tmp, shard):
    d = os.path.join(tmp, "sig")
    run = Live(base(shard, d, 100000, ["debug.sleep_ms=300"]))
    ok = run.wait_for("step     2/") is not None
    check("signals: the run reaches step 2", ok, run.text()[-300:])
    t_sent = time.time()
    run.p.send_signal(signal.SIGINT)
    t_ack = run.wait_for("then checkpointing", limit=10)
    check("the first SIGINT is acknowledged at once, naming the step and the second press",
          t_ack is not None and t_ack - t_sent < 0.25 and "finishing step " in run.text() and
          "press Ctrl-C again to stop without saving" in run.text(),
          f"{None if t_ack is None else t_ack - t_sent} s: {run.text()[-400:]}")
    time.sleep(0.1)
    run.p.send_signal(signal.SIGINT)
    t2 = time.time()
    rc = run.finish(limit=10)
    out = run.text()
    check("a second SIGINT 0.1 s later stops at once with exit 130 ...",
          rc == 130 and time.time() - t2 < 2, f"exit {rc}")
    check("... saying that nothing was saved (no checkpoint yet)",
          "second SIGINT: stopped at once" in out and "this run's training is lost" in out,
          out[-500:])
    # with a checkpoint: the second signal names it
    d2 = os.path.join(tmp, "sig2")
    run = Live(base(shard, d2, 100000, ["debug.sleep_ms=300", "run.checkpoint_every=2"]))
    ok = run.wait_for("step     3/") is not None
    run.p.send_signal(signal.SIGTERM)
    run.wait_for("then checkpointing", limit=10)
    run.p.send_signal(signal.SIGTERM)
    rc = run.finish(limit=10)
    out = run.text()
    check("SIGTERM twice: exit 143 naming the last checkpoint",
          ok and rc == 143 and "a second signal to stop without saving" in out and
          "the last checkpoint is step 2 " in out, f"exit {rc}: {out[-500:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="ct_rundir_")
    try:
        shard = os.path.join(tmp, "train.bin")
        p = subprocess.run([CTRAIN, "synth", "--out", shard, "--tokens", "20000", "--vocab", "64",
                            "--seed", "1"], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL synth: {p.stderr}")
            return 1
        lock_tests(tmp, shard)
        resume_tests(tmp, shard)
        signal_tests(tmp, shard)
    finally:
        if failures:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks - len(failures)}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
