#!/usr/bin/env python3
"""The progress line of `ctrain train`, with stderr piped and on a terminal.

usage: /usr/bin/python3 tests/cli/test_progress.py path/to/ctrain

Piped: one plain line per shown step, shown at step 1, every run.log_every steps, at each
evaluation and at the last step (and nothing else); each line holds "step k/N", loss, lr,
tok/s, an ETA, the peak memory in human units (at least the parameters, gradients and
AdamW moments), MFU, "val" on evaluation steps and the monitor's standing alert when there
is one; no carriage returns.
On a terminal (a pty): lines are redrawn in place ("\\r" + clear to end of line) and only
evaluation, skipped and last-step lines are ended with a newline.
Skipped updates (weights holding a NaN make every loss non-finite) are marked on their
line, also between log_every steps, and the trainer's warnings start on a line of their own.
"""
import fcntl
import os
import pty
import re
import struct
import shutil
import subprocess
import sys
import tempfile
import termios

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
import gpt2_ref as R  # noqa: E402  (numpy only for the file helpers)

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
LINE = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) \| lr (\S+) \| norm (\S+) \| (\d+) tok/s \| "
                  r"(\d+) ms \| ETA (\S+) \| mem ([0-9.]+) (B|KiB|MiB|GiB) \| MFU (?:[0-9.]+%|n/a)"
                  r"( \| val (\S+) \(\S+ tok\))?( \| SKIPPED \((\d+) so far\))?"
                  r"(?: \| ROLLED BACK [^|]*)?(?: \| (?:WARNING|CRITICAL) [a-z_]+: .*)?$")
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def check(label, ok, detail=""):
    print("%s %s%s" % ("PASS" if ok else "FAIL", label, (": " + detail) if detail else ""), flush=True)
    if not ok:
        failures.append(label)
    return ok


def eta_seconds(s):
    m = re.fullmatch(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", s)
    if not m or not s:
        return None
    d, h, mi, se = (int(g) if g else 0 for g in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + se


def run_piped(args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300, env=env)
    return p.returncode, p.stderr


def run_tty(args, cols=200):
    """Run with stderr on a pty of `cols` columns (output post-processing off, so bytes
    arrive as written)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen([CTRAIN, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO once the child has closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return p.wait(timeout=300), b"".join(chunks).decode("utf-8", "replace")


def main():
    tmp = tempfile.mkdtemp(prefix="ct_progress_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        for name, n, seed in (("tr.bin", 40000, 1), ("va.bin", 2000, 5)):
            p = subprocess.run([CTRAIN, "synth", "--out", P(name), "--tokens", str(n), "--vocab", "64",
                                "--seed", str(seed)], capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
        base = ["model.preset=gpt2-tiny", "data.train=" + P("tr.bin"), "data.val=" + P("va.bin"),
                "train.batch_size=4", "train.seq_len=16", "train.eval_batches=2",
                "run.checkpoint_every=0"]

        # --- piped -------------------------------------------------------------------
        rc, err = run_piped(["train", *base, "train.steps=12", "run.log_every=5", "train.eval_every=6",
                             "run.dir=" + P("run_pipe")])
        check("piped run exits 0", rc == 0, "" if rc == 0 else err[-300:])
        steps = [ln for ln in err.splitlines() if ln.startswith("step")]
        parsed = [LINE.match(ln) for ln in steps]
        bad = [ln for ln, m in zip(steps, parsed) if not m]
        check("every progress line has step k/N, loss, lr, norm, tok/s, ms, ETA, mem", not bad and steps,
              "unmatched: %r" % bad[:2])
        shown = [int(m.group(1)) for m in parsed if m]
        check("lines at step 1, every 5 steps, each evaluation (6, 12) and the last",
              shown == [1, 5, 6, 10, 12], str(shown))
        check("no carriage returns when stderr is not a terminal", "\r" not in err)
        vals = {int(m.group(1)): m.group(12) for m in parsed if m}
        check("val loss on evaluation steps only", [k for k, v in vals.items() if v] == [6, 12], str(vals))
        if parsed and all(parsed):
            numel = 8128   # gpt2-tiny: params, grads, AdamW m and v are 4 * 4 * numel bytes
            mem = [float(m.group(9)) * UNITS[m.group(10)] for m in parsed]
            check("mem (peak) covers params + grads + AdamW moments (>= %d bytes)" % (16 * numel),
                  min(mem) >= 16 * numel and mem == sorted(mem), str(mem))
            etas = [eta_seconds(m.group(8)) for m in parsed]
            check("ETA parses as a duration and is 0s at the last step",
                  None not in etas and etas[-1] == 0, str([m.group(8) for m in parsed]))
            lrs = [float(m.group(4)) for m in parsed]
            check("lr and loss are numbers", all(x > 0 for x in lrs)
                  and all(float(m.group(3)) > 0 for m in parsed))

        # --- a terminal ----------------------------------------------------------------
        rc, out = run_tty(["train", *base, "train.steps=2000", "run.log_every=50", "train.eval_every=1000",
                           "run.dir=" + P("run_tty")])
        check("tty run exits 0", rc == 0, "" if rc == 0 else out[-300:])
        # each draw starts with "\r" + clear-to-end-of-line; a kept line ends with a newline
        draws = [d.partition("\n") for d in out.split("\r\x1b[K")[1:]]
        progress = [(line, bool(nl)) for line, nl, _ in draws if line.startswith("step")]
        kept = [line for line, nl in progress if nl]
        in_place = [line for line, nl in progress if not nl]
        # an in-place draw (step 1 always is one) is overwritten by the next draw
        check("a terminal gets in-place updates (\\r, clear line) of the progress line",
              in_place and progress[0] == (in_place[0], False) and len(progress) > len(in_place),
              "%d draws, %d in place" % (len(progress), len(in_place)))
        check("each draw is one complete progress line", all(LINE.match(x) for x, _ in progress),
              repr([x for x, _ in progress if not LINE.match(x)][:2]))
        first = LINE.match(progress[0][0]) if progress else None
        if check("the first draw is step 1", first is not None and first.group(1) == "1"):
            # before a second step the mean step time is step 1's own: ETA = ms * (N - 1)
            ms, eta = int(first.group(7)), eta_seconds(first.group(8))
            lo, hi = max(0.0, ms - 0.5) * 1999 / 1000 - 0.5, (ms + 0.5) * 1999 / 1000 + 0.5
            check("step 1's ETA is its step time times the steps left", eta is not None and lo <= eta <= hi,
                  "%s ms -> ETA %s, expected %.1f..%.1f s" % (ms, first.group(8), lo, hi))
        kept_steps = [int(LINE.match(x).group(1)) for x in kept if LINE.match(x)]
        check("lines stay every run.log_every=50 steps, at evaluations and at the end",
              kept_steps == list(range(50, 2001, 50)), str(kept_steps))
        check("the evaluation lines carry the val loss",
              [int(LINE.match(d).group(1)) for d in kept if " | val " in d] == [1000, 2000])
        check("the run's closing message starts on its own line",
              re.search(r"\nctrain train: done", out) is not None, repr(out[-200:]))

        # an 80-column terminal: a line redrawn in place never wraps (it would leave
        # its first row behind at every redraw); kept lines are whole
        rc, out = run_tty(["train", *base, "train.steps=300", "run.log_every=100",
                           "alerts.gemm_peak_gflops=100000", "run.dir=" + P("run_80")], cols=80)
        draws = [d.partition("\n") for d in out.split("\r\x1b[K")[1:]]
        in_place = [line for line, nl, _ in draws if line.startswith("step") and not nl]
        kept = [line for line, nl, _ in draws if line.startswith("step") and nl]
        check("80 columns: every in-place line fits in 79 columns, cut with '...'",
              rc == 0 and in_place and all(len(x) <= 79 for x in in_place) and
              any(x.endswith("...") for x in in_place), repr(in_place[:2]))
        check("80 columns: the kept lines are whole", kept and all(LINE.match(x) for x in kept),
              repr(kept[:2]))

        # --- skipped updates -----------------------------------------------------------
        rc, err = run_piped(["train", *base, "train.steps=0", "run.dir=" + P("init")])
        assert rc == 0, err
        w = R.read_safetensors(P("init", "model.safetensors"))
        w = {k: v.copy() for k, v in w.items()}
        w["ln_f.weight"][3] = float("nan")
        os.makedirs(P("nan"))
        shutil.copy(P("init", "config.json"), P("nan", "config.json"))
        R.write_safetensors(P("nan", "model.safetensors"), w)
        nan_args = ["train", "model.init_from=" + P("nan"), "data.train=" + P("tr.bin"),
                    "train.batch_size=4", "train.seq_len=16", "train.steps=3", "run.log_every=10",
                    "run.checkpoint_every=0"]
        rc, err = run_piped([*nan_args, "run.dir=" + P("run_nan")])
        lines = [LINE.match(ln) for ln in err.splitlines() if ln.startswith("step")]
        if rc != 0 and not lines and re.search(r"finite|nan", err, re.I):
            # the trainer refuses non-finite weights up front: no step to mark
            check("skipped steps: weights with a NaN are refused before training", True, err.strip()[:160])
        else:
            marks = [(int(m.group(1)), m.group(14)) for m in lines if m]
            check("skipped steps are shown between log_every steps and marked with a running count",
                  marks[:2] == [(1, "1"), (2, "2")], "%s\n%s" % (marks, err[-400:]))
            warns = [ln for ln in err.splitlines() if "non-finite" in ln]
            check("the trainer's warnings are plain lines", warns and all(ln.startswith("warning:") for ln in warns),
                  str(warns[:2]))
            rc, out = run_tty([*nan_args, "run.dir=" + P("run_nan_tty")])
            bad = [ln for ln in re.split(r"\n|\r\x1b\[K", out) if "non-finite" in ln and not ln.startswith("warning:")]
            check("on a terminal, warnings start on a line of their own",
                  "non-finite" in out and not bad, repr(bad[:2]) if bad else repr(out[:300]))
            check("on a terminal, skipped-step lines stay (end with a newline)",
                  re.search(r"\r\x1b\[Kstep +1/3 [^\r\n]* \| SKIPPED \(1 so far\)[^\r\n]*\n", out)
                  is not None,
                  repr(out[:400]))
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
