#!/usr/bin/env python3
"""The soak (tests/soak/soak.py), short: 4 SIGKILLs at random moments of a
training run, at least one of them during a checkpoint write, each followed
by train.resume=auto, and the result compared with an uninterrupted run
(weights, checkpoints and config byte for byte, metrics.jsonl's losses, grad
norms and LRs with one line per step, the same file names in run.dir with
nothing left behind). `make soak SOAK_KILLS=N` runs the long one; see the
soak's docstring for the rules.

Then the comparison's teeth: copies of the finished run, each damaged one
way (a stray temp file, an unfinished checkpoint directory, a changed loss, a
missing step, a torn event file, a changed weight), must each be refused.

usage: test_soak.py path/to/ctrain
"""
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOAK = os.path.join(ROOT, "tests", "soak", "soak.py")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(SOAK))
import soak  # noqa: E402

failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:2000])
        print(f"FAIL {label}: {detail}"[:2000])


def short_soak(tmp):
    work = os.path.join(tmp, "soak")
    cmd = [sys.executable, SOAK, "--ctrain", CTRAIN, "--kills", "4", "--seed", "20250101",
           "--min-ckpt-hits", "1", "--workdir", work, "--keep"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    dt = time.time() - t0
    out = p.stdout + p.stderr
    print("\n".join("     | " + line for line in out.splitlines()))
    check("soak: 4 kills, resumed, identical to the uninterrupted run (exit 0, PASS)",
          p.returncode == 0 and "PASS" in out, f"exit {p.returncode}: {out[-1500:]}")
    m = re.search(r"soak: (\d+) kills .*?; (\d+) hit a checkpoint write", out)
    check("soak: at least 4 kills, at least one during a checkpoint write",
          m is not None and int(m.group(1)) >= 4 and int(m.group(2)) >= 1,
          m.group(0) if m else out[-500:])
    check("soak: every kill is printed with what it hit",
          len(re.findall(r"^kill +\d+ ", out, re.M)) == (int(m.group(1)) if m else -1), out[-500:])
    print(f"     (the short soak took {dt:.1f} s)")
    return work


def teeth(work):
    """Damaged copies of a finished episode must each fail the comparison."""
    ref = os.path.join(work, "ref", "run")
    eps = sorted(d for d in os.listdir(work) if re.fullmatch(r"ep\d+", d))
    if not eps or not os.path.isdir(ref):
        check("teeth: the soak kept its runs", False, str(os.listdir(work)))
        return
    good = os.path.join(work, eps[0], "run")
    args = soak.build_parser().parse_args(["--ctrain", CTRAIN, "--kills", "0", "--steps", "40",
                                           "--keep-last", "2", "--workdir", work])
    s = soak.Soak(args)
    starts = 1 + len([n for n in os.listdir(good) if soak.EVENTS.match(n)])

    def compare(d):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            ok = s.compare("teeth", ref, d, starts)
        return ok, buf.getvalue()

    ok, out = compare(good)
    check("teeth: the kept episode compares equal", ok, out)

    def damaged(label, how, must):
        d = os.path.join(work, "teeth")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(good, d)
        how(d)
        ok, out = compare(d)
        check(f"teeth: {label} is refused", not ok and must in out, out[-600:])

    def touch(path):
        with open(path, "wb") as f:
            f.write(b"x")

    def edit(path, fn):
        with open(path, "rb") as f:
            raw = f.read()
        with open(path, "wb") as f:
            f.write(fn(raw))

    def newest_events(d):
        ev = [n for n in os.listdir(d) if soak.EVENTS.match(n)]
        return os.path.join(d, max(ev, key=lambda n: os.stat(os.path.join(d, n)).st_mtime_ns))

    damaged("a stray config.yaml.tmp.<pid>",
            lambda d: touch(os.path.join(d, "config.yaml.tmp.12345")), "left behind")
    damaged("an unfinished checkpoint directory",
            lambda d: os.mkdir(os.path.join(d, "checkpoints", "step_00000036.tmp-12345")),
            "left behind")
    damaged("a checkpoint kept beyond run.keep_last",
            lambda d: shutil.copytree(os.path.join(d, "checkpoints", "step_00000040"),
                                      os.path.join(d, "checkpoints", "step_00000032")),
            "left behind")
    damaged("a changed loss in metrics.jsonl",
            lambda d: edit(os.path.join(d, "metrics.jsonl"),
                           lambda r: re.sub(rb'("step": 17, "split": "train", "loss": \d\.\d)\d',
                                            rb"\g<1>9", r, count=1)),
            "train metrics differ")
    damaged("a step logged twice",
            lambda d: edit(os.path.join(d, "metrics.jsonl"),
                           lambda r: r.splitlines(keepends=True)[0] + r),
            "once each")
    damaged("a torn record at the end of the finishing start's event file",
            lambda d: edit(newest_events(d), lambda r: r + r[:20]), "torn record")
    damaged("a flipped byte in model.safetensors",
            lambda d: edit(os.path.join(d, "model.safetensors"),
                           lambda r: r[:-8] + bytes([r[-8] ^ 1]) + r[-7:]),
            "model.safetensors differs")
    damaged("a missing event file",
            lambda d: [os.unlink(os.path.join(d, n)) for n in os.listdir(d)
                       if soak.EVENTS.match(n)], "event files")


def main():
    tmp = tempfile.mkdtemp(prefix="ct_test_soak_")
    try:
        work = short_soak(tmp)
        teeth(work)
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"test_soak: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
