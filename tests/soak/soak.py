#!/usr/bin/env python3
"""Soak: SIGKILL a training run at random moments, resume it, and compare.

One uninterrupted reference run, then "episodes": each trains a fresh run.dir
with the same config (train.resume=auto, so the first start is fresh) and
SIGKILLs it up to --kills-per-run times, resuming each time with
train.resume=auto, until a start runs to its end. Every episode is then
compared with the reference. A kill is one of:

  time      at a uniformly random moment of the run (start-up, steps, writes);
  ckpt      during a checkpoint save: inotify reports the save's
            step_N.tmp-PID directory (or a later event of the same save: a
            file created or renamed inside it, the rename into place, the
            pruning of an old checkpoint) and the kill follows the randomly
            chosen event, sometimes after a few hundred microseconds more;
  rewrite   while a file of run.dir is rewritten through NAME.tmp.PID
            (config.yaml at start, metrics.jsonl trimmed on resume, hw.json,
            the final model.safetensors and config.json).

What a kill hit is read from the disk after the process is gone: a
step_*.tmp-* directory in checkpoints/ (a save in progress, a replaced or
pruned checkpoint not yet removed), more than run.keep_last finished
checkpoints (renamed into place, not yet pruned): "checkpoint write"; a
*.tmp.PID file in run.dir: "rewrite". A finished step_N directory without
MANIFEST.json is a failure at once (saves are atomic by rename).

Each episode must equal the reference:
  - model.safetensors, config.json, config.yaml and every file under
    checkpoints/ byte for byte;
  - metrics.jsonl: the train lines' (step, loss, grad_norm, lr) and the val
    lines' (step, loss) identical, exactly one train line per step 1..S
    (timings and memory figures differ and are not compared);
  - the same set of file names in run.dir, recursively: no *.tmp* files, no
    partial or extra checkpoint directories, nothing else. The one exception
    is TensorBoard's event files, events.out.tfevents.<time>.<host>.<pid>.ctrain:
    every process that opens run.dir starts a new one (by design: an event
    file is append-only and never rewritten), so an episode has one per
    start that got that far. The rule: at least one and at most one per
    start, every name of that pattern, every file a valid TFRecord stream
    (length and data CRC32C checked) where only a killed process's file may
    end in a torn record, and the last written file (the finishing start's)
    ends cleanly;
  - no process left running (with --mpirun: no rank outliving mpirun).

--mpirun runs every start as `mpirun --allow-run-as-root --oversubscribe -np 2`
with dist.zero=1; a kill then hits rank 0 (the writer of run.dir), rank 1, or
every rank at once (a lost host), and mpirun must end the job by itself.
mpirun can exit before it reaps a killed rank; the zombie then lasts until
init reaps it, and while it does kill(pid, 0) still finds the "writer" of its
temp files alive, so a start that begins at once does not remove them. A
leftover of such a writer is named as such; --reap-wait S waits for the reaping
before the next start.

Prints the seed, every kill (when, which mode, which step, what it hit), one
line per episode, and a PASS/FAIL summary; exits 1 on failure, 2 on bad usage.

usage: soak.py [--ctrain PATH] [--kills N] [--seed S] [--mpirun] [options]
"""
import argparse
import ctypes
import json
import os
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Open MPI as in tests/cli/test_mpi.py: root allowed, oversubscribed, no
# binding, shared memory only, no single-copy (CMA needs ptrace).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_hwloc_base_binding_policy": "none",
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}

STEP_DIR = re.compile(r"step_\d{8}$")
SAVE_TMP = re.compile(r"step_\d{8}\.tmp-\d+$")  # a save's own directory (not -pruned/-replaced)
FILE_TMP = re.compile(r".+\.tmp\.\d+$")  # ct_afile: NAME.tmp.PID
EVENTS = re.compile(r"events\.out\.tfevents\.\d+\.[^/]+\.\d+\.ctrain(\.\d+)?$")


# ------------------------------------------------------------------ inotify

IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x8, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_ISDIR = 0x100, 0x200, 0x40000000


class Inotify:
    """The few inotify calls we need, through libc (no packages)."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.paths = {}  # wd -> path

    def add(self, path, mask):
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            return None  # gone already (a renamed or removed directory)
        self.paths[wd] = path
        return wd

    def events(self, timeout):
        """[(dir path, mask, name)] that arrived within timeout seconds."""
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return []
        try:
            buf = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        out, i = [], 0
        while i + 16 <= len(buf):
            wd, mask, _cookie, n = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16:i + 16 + n].split(b"\0", 1)[0].decode(errors="replace")
            out.append((self.paths.get(wd, "?"), mask, name))
            i += 16 + n
        return out

    def close(self):
        os.close(self.fd)


# ------------------------------------------------------------- TFRecords

def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC_TABLE = _crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(path):
    """(records, torn tail?, error or None) of a TensorBoard event file."""
    with open(path, "rb") as f:
        raw = f.read()
    pos, n = 0, 0
    while pos < len(raw):
        if len(raw) - pos < 12:
            return n, True, None
        length, crc_len = struct.unpack_from("<QI", raw, pos)
        if masked_crc32c(raw[pos:pos + 8]) != crc_len:
            return n, False, f"record {n} at byte {pos}: bad length CRC"
        if len(raw) - pos < 12 + length + 4:
            return n, True, None
        data = raw[pos + 12:pos + 12 + length]
        (crc_data,) = struct.unpack_from("<I", raw, pos + 12 + length)
        if masked_crc32c(data) != crc_data:
            return n, False, f"record {n} at byte {pos}: bad data CRC"
        pos += 12 + length + 4
        n += 1
    return n, False, None


# ------------------------------------------------------------ processes

def proc_children():
    """pid -> [child pids] of every process we can see."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] != b"Z"


def mpi_ranks(root_pid, exe):
    """{rank: pid} of the ctrain processes below root_pid (mpirun)."""
    kids, found, todo = proc_children(), {}, [root_pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            todo.append(c)
            try:
                if os.path.realpath(f"/proc/{c}/exe") != exe:
                    continue
                with open(f"/proc/{c}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            for kv in env:
                if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                    found[int(kv.split(b"=", 1)[1])] = c
    return found


def last_step(run_dir):
    """The last train step in run_dir/metrics.jsonl (0: none)."""
    step = 0
    try:
        with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
            for line in f:
                m = re.match(rb'\{"step": (\d+), "split": "train"', line)
                if m:
                    step = int(m.group(1))
    except OSError:
        pass
    return step


# --------------------------------------------------------------- the soak

class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.exe = os.path.realpath(a.ctrain)
        self.failures = []
        self.kills = []  # dicts, in order
        self.episodes = []  # (name, ok)
        self.starts = 0
        self.zombies = set()  # killed ranks still unreaped when the next start began
        self.tmp = a.workdir or tempfile.mkdtemp(prefix="ct_soak_")
        os.makedirs(self.tmp, exist_ok=True)
        self.shard = os.path.join(self.tmp, "train.bin")
        self.val = os.path.join(self.tmp, "val.bin")

    def fail(self, msg):
        self.failures.append(msg)
        print(f"FAIL {msg}"[:2000], flush=True)

    # ---- commands
    def args(self):
        a = self.a
        out = ["train", "model.preset=gpt2-tiny", f"data.train={self.shard}",
               f"data.val={self.val}", f"train.eval_every={a.eval_every}", "train.eval_batches=2",
               f"train.steps={a.steps}", "train.batch_size=2", "train.seq_len=16",
               "data.shuffle=true", "data.prefetch=2", "optim.lr=3e-3", "schedule.name=cosine",
               "schedule.warmup_steps=3", f"run.checkpoint_every={a.checkpoint_every}",
               f"run.keep_last={a.keep_last}", "run.threads=1", f"debug.sleep_ms={a.sleep_ms}",
               "train.resume=auto", "run.dir=run"]
        if a.mpirun:
            out.append("dist.zero=1")
        return out

    def cmd(self):
        """The command of every start. run.dir is "run" below the episode's own
        directory (the working directory), so config.yaml is the same in all."""
        if self.a.mpirun:
            return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(self.a.np),
                    self.exe, *self.args()]
        return [self.exe, *self.args()]

    def env(self):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        if self.a.mpirun:
            env.update(MPI_ENV)
        return env

    def start(self, base):
        self.starts += 1
        os.makedirs(base, exist_ok=True)
        log = open(os.path.join(base, "log"), "ab")
        log.write(f"\n==== start {self.starts}: (cd {base} && {' '.join(self.cmd())})\n".encode())
        log.flush()
        p = subprocess.Popen(self.cmd(), stdout=log, stderr=subprocess.STDOUT, cwd=base,
                             env=self.env(), start_new_session=True)
        p.log = log
        return p

    def finish(self, p, timeout=None):
        """Wait for p (and, under mpirun, its ranks); returns its exit status or
        None when it had to be killed after timeout."""
        timeout = timeout or self.a.timeout
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail(f"start {self.starts}: still running after {timeout} s; killed")
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
        p.log.close()
        ranks = getattr(p, "ranks", {})
        for r, pid in ranks.items():
            t_end = time.time() + 10
            while alive(pid) and time.time() < t_end:
                time.sleep(0.01)
            if alive(pid):
                self.fail(f"start {self.starts}: rank {r} (pid {pid}) outlived mpirun")
                os.kill(pid, signal.SIGKILL)
            # mpirun may exit before it reaps a killed rank: the zombie then waits
            # for init (or a subreaper) to reap it; kill(pid, 0) succeeds meanwhile
            t_end = time.time() + (self.a.reap_wait if self.a.reap_wait else 0)
            while os.path.exists(f"/proc/{pid}") and time.time() < t_end:
                time.sleep(0.01)
            if os.path.exists(f"/proc/{pid}"):
                self.zombies.add(pid)
        return rc

    # ---- one start, maybe killed
    def run_once(self, base, plan):
        """Start once in base; kill per plan (None: let it finish). Returns
        (exit status, kill record or None when nothing was killed)."""
        mpi, run_dir = self.a.mpirun, os.path.join(base, "run")
        ckdir = os.path.join(run_dir, "checkpoints")
        before = set(os.listdir(ckdir)) if os.path.isdir(ckdir) else set()
        ino = Inotify()
        p = self.start(base)
        t0 = time.time()
        p.ranks = {}
        watched = set()
        saves = 0  # saves begun by this start
        after = 0  # events since the target save began
        rewrites = 0
        fire = None  # why we kill
        deadline = t0 + (plan["delay"] if plan and plan["mode"] == "time" else 1e9)
        mask_dir = IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_CLOSE_WRITE
        pending = []  # entries that existed before their directory was watched

        def ours(name):
            """A temp name written by this start (not one a killed start left)."""
            m = re.search(r"\.tmp[-.](\d+)", name)
            return m is not None and int(m.group(1)) in {p.pid, *p.ranks.values()}

        def watch(path):
            if path in watched or ino.add(path, mask_dir) is None:
                return False
            watched.add(path)
            return True

        try:
            while p.poll() is None and fire is None:
                if mpi and len(p.ranks) < self.a.np:
                    p.ranks = mpi_ranks(p.pid, self.exe)
                if plan is None:
                    if mpi and len(p.ranks) < self.a.np:
                        time.sleep(0.002)
                        continue
                    break
                if plan["mode"] != "time":
                    if os.path.isdir(run_dir) and watch(run_dir):
                        pending += [(run_dir, IN_CREATE, n) for n in sorted(os.listdir(run_dir))]
                    if os.path.isdir(ckdir) and watch(ckdir):
                        pending += [(ckdir, IN_CREATE | IN_ISDIR, n) for n in
                                    sorted(os.listdir(ckdir))]
                now = time.time()
                if now >= deadline:
                    fire = "the timer"
                    break
                polling = (plan["mode"] != "time" and ckdir not in watched) or \
                    (mpi and len(p.ranks) < self.a.np)
                evs = pending + ino.events(min(deadline - now, 0.002 if polling else 0.05))
                pending = []
                for d, mask, name in evs:
                    if plan["mode"] == "ckpt":
                        if d == ckdir and mask & IN_CREATE and SAVE_TMP.match(name) and ours(name):
                            saves += 1
                            if saves == plan["save"]:
                                after = 0
                                watch(os.path.join(ckdir, name))
                                if plan["event"] == 0:
                                    fire = f"{name[:13]}.tmp created"
                                    break
                                continue
                        if saves >= plan["save"] and d != run_dir:
                            after += 1
                            if after >= plan["event"]:
                                fire = f"event {after} ({os.path.basename(d)[:13]}/{name})"
                                break
                    elif plan["mode"] == "rewrite":
                        if d == run_dir and mask & IN_CREATE and FILE_TMP.match(name) and ours(name):
                            rewrites += 1
                            if rewrites >= plan["nth"]:
                                fire = f"{name} created"
                                break
            if fire is None or p.poll() is not None:
                return self.finish(p), None
            if plan.get("jitter_us"):
                t_end = time.perf_counter() + plan["jitter_us"] * 1e-6
                while time.perf_counter() < t_end:
                    pass
            t_kill = time.time() - t0
            victims = self.victims(p, plan)
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            rc = self.finish(p)
            if not victims:
                return rc, None
            pids = {p.pid, *p.ranks.values()}
            rec = {"t": t_kill, "why": fire, "rc": rc}
            rec.update(self.post_mortem(run_dir, pids, before))
            return rc, rec
        finally:
            ino.close()
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def victims(self, p, plan):
        if not self.a.mpirun:
            return [p.pid]
        ranks = p.ranks if len(p.ranks) == self.a.np else mpi_ranks(p.pid, self.exe)
        p.ranks = ranks
        v = plan.get("victim", "rank0")
        if v == "all":
            return list(ranks.values())
        r = 0 if v == "rank0" else 1
        return [ranks[r]] if r in ranks else []

    def post_mortem(self, run_dir, pids, before):
        """What the kill interrupted, read from what the killed start (pids) left
        on disk; before: checkpoints/ as it was at the start."""
        ckdir = os.path.join(run_dir, "checkpoints")
        hits, bad = [], []
        names = sorted(os.listdir(ckdir)) if os.path.isdir(ckdir) else []
        done = [n for n in names if STEP_DIR.match(n)]

        def ours(name):
            m = re.search(r"\.tmp[-.](\d+)", name)
            return m is not None and int(m.group(1)) in pids

        for n in names:
            path = os.path.join(ckdir, n)
            if STEP_DIR.match(n):
                if not os.path.exists(os.path.join(path, "MANIFEST.json")):
                    bad.append(f"checkpoints/{n} has no MANIFEST.json")
            elif not ours(n):
                continue  # a killed start's leftover, still there: the next save removes it
            elif n.endswith("-pruned"):
                hits.append(f"pruning {n[:13]}")
            elif n.endswith("-replaced"):
                hits.append(f"replacing {n[:13]}")
            else:
                try:
                    files = sorted(os.listdir(path))
                except OSError:
                    files = ["?"]
                what = "complete, not yet renamed" if "MANIFEST.json" in files else \
                    "holds " + (" ".join(files) if files else "nothing yet")
                hits.append(f"writing {n[:13]} ({what})")
        if done and done[-1] not in before and len(done) > self.a.keep_last > 0 and \
                not any(h.startswith("pruning") for h in hits):
            hits.append(f"{done[-1]} renamed into place, {len(done) - self.a.keep_last} "
                        f"older not yet pruned")
        rewrites = [n for n in (os.listdir(run_dir) if os.path.isdir(run_dir) else [])
                    if FILE_TMP.match(n) and ours(n)]
        return {"ckpt": hits, "rewrite": rewrites, "bad": bad, "step": last_step(run_dir)}

    # ---- a kill plan
    def plan(self, est, force_ckpt=False):
        r = self.rng.random()
        a = self.a
        if force_ckpt or r < a.ckpt_share:
            p = {"mode": "ckpt", "save": self.rng.choice((1, 1, 2)),
                 "event": self.rng.randint(0, 16)}
        elif r < a.ckpt_share + a.rewrite_share:
            p = {"mode": "rewrite", "nth": self.rng.randint(1, 5)}
        else:
            p = {"mode": "time", "delay": self.rng.uniform(0, est)}
        p["jitter_us"] = self.rng.choice((0, 0, self.rng.randint(1, 400)))
        if a.mpirun:
            p["victim"] = self.rng.choice(("rank0", "rank0", "rank1", "all"))
        return p

    @staticmethod
    def describe(p):
        if p["mode"] == "ckpt":
            s = f"ckpt(save {p['save']}, event {p['event']})"
        elif p["mode"] == "rewrite":
            s = f"rewrite(#{p['nth']})"
        else:
            s = f"time({p['delay']:.3f} s)"
        if p.get("jitter_us"):
            s += f" +{p['jitter_us']} us"
        if "victim" in p:
            s += f" -> {p['victim']}"
        return s

    # ---- comparison
    @staticmethod
    def tree(d):
        out = set()
        for root, dirs, files in os.walk(d):
            rel = os.path.relpath(root, d)
            for n in dirs + files:
                out.add(n if rel == "." else os.path.join(rel, n))
        return out

    @staticmethod
    def metrics(run_dir):
        train, val, steps = [], [], []
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for i, line in enumerate(f, 1):
                try:
                    m = json.loads(line)
                except ValueError:
                    raise ValueError(f"metrics.jsonl line {i} is not JSON: {line[:80]!r}")
                if m["split"] == "train":
                    train.append((m["step"], m["loss"], m["grad_norm"], m["lr"]))
                    steps.append(m["step"])
                elif m["split"] == "val":
                    val.append((m["step"], m["loss"]))
        return train, val, steps

    def compare(self, name, ref, d, starts):
        errs = []
        rt, dt = self.tree(ref), self.tree(d)
        rev = {n for n in rt if EVENTS.match(os.path.basename(n))}
        dev = {n for n in dt if EVENTS.match(os.path.basename(n))}
        extra, missing = sorted((dt - dev) - (rt - rev)), sorted((rt - rev) - (dt - dev))
        if extra:
            errs.append(f"left behind in run.dir: {extra}")
            for n in extra:
                m = re.search(r"\.tmp[-.](\d+)$", n)
                if m and int(m.group(1)) in self.zombies:
                    errs.append(f"{n}: its writer, pid {m.group(1)}, was killed and still an "
                                f"unreaped zombie (mpirun exited without reaping it) when the "
                                f"next start began; kill(pid, 0) succeeds on a zombie, so the "
                                f"next start took the writer for alive (see --reap-wait)")
            kept = [n for n in extra if STEP_DIR.match(os.path.basename(n)) and "/" in n]
            if kept:
                errs.append(f"{', '.join(kept)}: finished checkpoints beyond run.keep_last = "
                            f"{self.a.keep_last} (the uninterrupted run pruned them)")
        if missing:
            errs.append(f"missing from run.dir: {missing}")
        if len(rev) != 1:
            errs.append(f"the reference has {len(rev)} event files")
        if not 1 <= len(dev) <= starts or any("/" in n for n in dev):
            errs.append(f"{len(dev)} event files after {starts} starts: {sorted(dev)}")
        newest = max(dev, key=lambda n: os.stat(os.path.join(d, n)).st_mtime_ns) if dev else None
        for n in sorted(dev):
            recs, torn, err = tfrecords(os.path.join(d, n))
            if err:
                errs.append(f"{n}: {err}")
            elif torn and n == newest:
                errs.append(f"{n} (the finishing start's) ends in a torn record")
            elif recs < 1:
                errs.append(f"{n} holds no record")
        for rel in sorted(rt - rev):
            pr, pd = os.path.join(ref, rel), os.path.join(d, rel)
            if rel in ("metrics.jsonl", "hw.json") or os.path.isdir(pr) or not os.path.isfile(pd):
                continue
            with open(pr, "rb") as f1, open(pd, "rb") as f2:
                if f1.read() != f2.read():
                    errs.append(f"{rel} differs from the uninterrupted run's")
        try:
            a_train, a_val, _ = self.metrics(ref)
            b_train, b_val, steps = self.metrics(d)
            if steps != list(range(1, self.a.steps + 1)):
                errs.append(f"metrics.jsonl train steps are not 1..{self.a.steps} once each: "
                            f"{steps}")
            elif a_train != b_train:
                bad = [x[0] for x, y in zip(a_train, b_train) if x != y]
                errs.append(f"train metrics differ at steps {bad[:10]}")
            if a_val != b_val:
                errs.append(f"val metrics differ: {a_val} vs {b_val}")
        except (OSError, ValueError, KeyError) as e:
            errs.append(f"metrics.jsonl: {e}")
        for e in errs:
            self.fail(f"{name}: {e}")
        return not errs

    # ---- main
    def setup(self):
        for out, tokens, seed in ((self.shard, 40000, 1), (self.val, 4000, 2)):
            p = subprocess.run([self.exe, "synth", "--out", out, "--tokens", str(tokens),
                                "--vocab", "64", "--seed", str(seed)],
                               capture_output=True, text=True, timeout=60)
            if p.returncode:
                raise SystemExit(f"soak: ctrain synth failed: {p.stdout}{p.stderr}")
        base = os.path.join(self.tmp, "ref")
        t0 = time.time()
        rc, _ = self.run_once(base, None)
        self.t_ref = time.time() - t0
        if rc != 0:
            with open(os.path.join(base, "log")) as f:
                raise SystemExit(f"soak: the uninterrupted run failed ({rc}):\n{f.read()[-2000:]}")
        return os.path.join(base, "run")

    def run(self):
        a = self.a
        print(f"soak: seed {a.seed}, {a.kills} kills, {a.steps} steps, checkpoint every "
              f"{a.checkpoint_every}, keep_last {a.keep_last}, "
              f"{'mpirun -np %d, dist.zero=1' % a.np if a.mpirun else 'one process'}; "
              f"work dir {self.tmp}", flush=True)
        ref = self.setup()
        print(f"soak: uninterrupted run: {self.t_ref:.2f} s", flush=True)
        n_done, extra, ep = 0, 0, 0

        def more():
            """Another kill wanted: --kills not reached, or too few checkpoint hits."""
            hits = sum(1 for k in self.kills if k["ckpt"])
            return n_done < a.kills or (hits < a.min_ckpt_hits and extra < a.max_extra)

        while more():
            ep += 1
            base = os.path.join(self.tmp, f"ep{ep:03d}")
            run_dir = os.path.join(base, "run")
            starts0, ep_kills, rc = self.starts, 0, None
            while True:
                plan = None
                if more() and ep_kills < a.kills_per_run:
                    est = self.t_ref * max(0.2, (a.steps - last_step(run_dir)) / a.steps)
                    plan = self.plan(est, force_ckpt=n_done >= a.kills)
                rc, rec = self.run_once(base, plan)
                if rec is None:
                    if rc != 0:
                        self.fail(f"ep{ep:03d}: a start exited {rc} (see {base}/log)")
                    break
                ep_kills += 1
                if n_done < a.kills:
                    n_done += 1
                else:
                    extra += 1
                rec.update(ep=ep, n=len(self.kills) + 1, plan=self.describe(plan))
                self.kills.append(rec)
                what = "; ".join(rec["ckpt"] + [f"rewriting {r}" for r in rec["rewrite"]])
                tag = "CKPT" if rec["ckpt"] else ("FILE" if rec["rewrite"] else "    ")
                print(f"kill {rec['n']:3d} {tag} ep{ep:03d} t={rec['t']:.4f}s after step "
                      f"{rec['step']:3d}  {rec['plan']:<34} on {rec['why']}"
                      + (f"  => {what}" if what else ""), flush=True)
                for b in rec["bad"]:
                    self.fail(f"kill {rec['n']}: {b}")
            starts = self.starts - starts0
            ok = rc == 0 and self.compare(f"ep{ep:03d}", ref, run_dir, starts)
            self.episodes.append((f"ep{ep:03d}", ok))
            print(f"episode {ep:3d}: {ep_kills} kills, {starts} starts: "
                  f"{'identical to the uninterrupted run' if ok else 'FAILED'}", flush=True)
            if ok and not a.keep:
                shutil.rmtree(base, ignore_errors=True)
        hit = [k["n"] for k in self.kills if k["ckpt"]]
        rw = [k["n"] for k in self.kills if k["rewrite"]]
        print(f"soak: {len(self.kills)} kills ({extra} beyond --kills to reach --min-ckpt-hits); "
              f"{len(hit)} hit a checkpoint write: {hit}; {len(rw)} hit a run.dir file "
              f"rewrite: {rw}")
        ok_eps = sum(1 for _, ok in self.episodes if ok)
        print(f"soak: {len(self.episodes)} runs to the end, {ok_eps} identical to the "
              f"uninterrupted run (weights, metrics, checkpoints, file names)")
        if len(hit) < a.min_ckpt_hits:
            self.fail(f"only {len(hit)} kills hit a checkpoint write (--min-ckpt-hits "
                      f"{a.min_ckpt_hits})")
        return not self.failures



def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ctrain", default=os.path.join(ROOT, "build", "ctrain"))
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs in all (default 20)")
    ap.add_argument("--seed", type=int, default=None, help="default: random, printed")
    ap.add_argument("--mpirun", action="store_true", help="2 ranks under mpirun, dist.zero=1")
    ap.add_argument("--np", type=int, default=2, help="ranks with --mpirun (default 2)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--checkpoint-every", type=int, default=4)
    ap.add_argument("--keep-last", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--sleep-ms", type=int, default=3, help="debug.sleep_ms (default 3)")
    ap.add_argument("--kills-per-run", type=int, default=6,
                    help="kills before a run is let finish (default 6)")
    ap.add_argument("--ckpt-share", type=float, default=0.5,
                    help="share of kills aimed at a checkpoint save (default 0.5)")
    ap.add_argument("--rewrite-share", type=float, default=0.15,
                    help="share aimed at a run.dir file rewrite (default 0.15)")
    ap.add_argument("--min-ckpt-hits", type=int, default=None,
                    help="kills that must hit a checkpoint write; aimed kills are added "
                         "(at most --max-extra) until they do (default: kills/10, at least 1)")
    ap.add_argument("--max-extra", type=int, default=20)
    ap.add_argument("--reap-wait", type=float, default=0,
                    help="with --mpirun: seconds to wait for a killed rank to be reaped "
                         "before the next start (default 0: start at once)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per start")
    ap.add_argument("--workdir", default=None, help="default: a new temporary directory")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    return ap


def main():
    a = build_parser().parse_args()
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    if a.min_ckpt_hits is None:
        a.min_ckpt_hits = max(1, a.kills // 10) if a.kills > 0 else 0
    if not os.access(a.ctrain, os.X_OK):
        print(f"soak: {a.ctrain} is not an executable (build it, or pass --ctrain)")
        return 2
    if a.mpirun and not shutil.which("mpirun"):
        print("soak: --mpirun given but mpirun is not on PATH")
        return 2
    s = Soak(a)
    try:
        ok = s.run()
    finally:
        keep = a.keep or s.failures
        if keep:
            print(f"soak: kept {s.tmp}")
        elif not a.workdir:
            shutil.rmtree(s.tmp, ignore_errors=True)
    print(f"soak: seed {a.seed}: {'PASS' if ok else 'FAIL (%d)' % len(s.failures)}")
    for f in s.failures[:20]:
        print("  " + f[:500])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
