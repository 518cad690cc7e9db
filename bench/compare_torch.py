#!/usr/bin/env python3
"""Training-step speed and memory of ctrain side by side with PyTorch on this machine.

usage: python3 bench/compare_torch.py [--preset gpt2] [--batch 4] [--seqs 64,256,1024]
           [--rounds 3] [--warmup 1] [--steps 3] [--threads 2] [--ctrain build/ctrain]
           [--precisions fp32[,bf16]] [--json-out FILE] [--markdown FILE]

For each sequence length, each round runs three fresh processes in turn: A `ctrain bench
step`, B bench/torch_gpt2_step.py (PyTorch, same model and shapes), C `ctrain bench gemm`
(the step's GEMMs alone). `ctrain bench peak` runs once, for the machine's GEMM peak. The
peak RSS of every child is read here with wait4(), so both sides are measured the same
way; both sides' MFU uses the FLOP count that ctrain reports for the step.
--precisions fp32,bf16 runs every length in both: ctrain's train.precision=bf16 (bf16 GEMM
inputs, fp32 sums; its GEMM-only column the same mixed-precision GEMMs) against PyTorch's
forward under CPU autocast bf16. On a CPU without bf16 instructions both sides emulate it
and the bf16 rows say nothing about speed.
Prints a table and PASS/MISS lines for the project's goals; exits 0 even when a goal is
missed, 1 when a child fails or prints something unreadable, 2 on bad arguments.
Standard library only; PyTorch runs in its own interpreter (--python, /usr/bin/python3).
"""

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_SCRIPT = os.path.join(HERE, "torch_gpt2_step.py")
NAME = "compare_torch.py"

# Goals: ctrain tokens/s at least this many times PyTorch's, by sequence length.
GOAL_SPEEDUP = {64: 2.0, 256: 1.6, 1024: 2.0}
GOAL_STEP_OVER_GEMM = 1.25      # ctrain step time <= this x its GEMM-only time, every T
GOAL_RSS = (4, 1024, 0.5)       # at B=4 T=1024, ctrain peak RSS <= 0.5 x PyTorch's
GOAL_BF16_OVER_FP32 = {256: 1.8, 1024: 1.8}  # ctrain bf16 tokens/s >= this x its fp32
GOAL_BF16_SPEEDUP = {64: 5.0}                # ctrain bf16 tokens/s >= this x PyTorch autocast


class RunError(Exception):
    """A child failed or printed something other than what its interface promises."""


# ----------------------------------------------------------------------------------------
# Children

def run_child(cmd, env, timeout_s):
    """Run cmd to completion; returns (stdout, stderr, exit code, rusage, wall s).

    The child is reaped with wait4() so its own rusage comes back (ru_maxrss in KiB on Linux).
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        try:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
        except OSError as e:
            raise RunError("cannot start %s: %s" % (cmd[0], e.strerror))
        deadline = t0 + timeout_s
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            if time.perf_counter() > deadline:
                os.kill(p.pid, 9)
                _, status, ru = os.wait4(p.pid, 0)
                p.returncode = -9
                raise RunError("%s ran past --timeout %d s and was killed" % (" ".join(cmd), timeout_s))
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"),
                p.returncode, ru, wall)


def run_json(cmd, env, timeout_s, required):
    """Run a benchmark child that prints one JSON object; returns (object, run record).

    The record keeps the 1-minute load average before the start and the child's CPU
    seconds, so a run that shared the cores with other work can be told apart.
    """
    load = os.getloadavg()[0]
    stdout, stderr, rc, ru, wall = run_child(cmd, env, timeout_s)
    shown = " ".join(cmd)
    if rc != 0:
        tail = "\n".join(stderr.strip().splitlines()[-8:])
        raise RunError("`%s` exited with status %d\n%s" % (shown, rc, tail))
    text = stdout.strip()
    try:
        obj = json.loads(text)
    except ValueError:
        lines = text.splitlines()
        try:  # tolerate log lines before the object
            obj = json.loads(lines[-1]) if lines else None
        except ValueError:
            obj = None
    if not isinstance(obj, dict):
        raise RunError("`%s` printed no JSON object on stdout (got %r)" % (shown, text[:200]))
    for key in required:
        v = obj.get(key)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        if key == "step_s":
            ok = (isinstance(v, list) and len(v) > 0 and
                  all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in v))
        if not ok:
            raise RunError("`%s`: JSON field '%s' is %r, expected %s" % (
                shown, key, v, "a non-empty list of positive seconds" if key == "step_s"
                else "a positive finite number"))
    return obj, {"cmd": cmd, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
                 "loadavg_before": load, "maxrss_bytes": ru.ru_maxrss * 1024, "json": obj}


# ----------------------------------------------------------------------------------------
# Machine

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def physical_cores():
    """Distinct (package, core) pairs in /proc/cpuinfo, or None when it does not say."""
    cores, phys = set(), None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("physical id"):
                    phys = line.split(":", 1)[1].strip()
                elif line.startswith("core id"):
                    cores.add((phys, line.split(":", 1)[1].strip()))
    except OSError:
        return None
    return len(cores) or None


def ctrain_version(ctrain, env):
    try:
        stdout, _, rc, _, _ = run_child([ctrain, "version"], env, 60)
    except RunError:
        return "unknown"
    words = stdout.split()
    return words[-1] if rc == 0 and words else "unknown"


# ----------------------------------------------------------------------------------------
# Summary

def median(xs):
    return statistics.median(xs) if xs else float("nan")


def side_summary(runs, B, T, flops, peak):
    """Pooled timed steps of one side's runs -> medians, tokens/s, MFU, peak RSS."""
    steps = [s for r in runs for s in r["json"]["step_s"]]
    med = median(steps)
    gflops = flops / med / 1e9 if flops else float("nan")
    return {
        "step_s": steps, "median_s": med, "min_s": min(steps), "max_s": max(steps),
        "tokens_per_s": B * T / med, "gflops": gflops,
        "mfu_measured": gflops / peak["gemm_peak_gflops"],
        "mfu_theoretical": gflops / peak["theoretical_gflops"],
        "peak_rss_bytes": max(r["maxrss_bytes"] for r in runs),
        "self_peak_rss_bytes": max(r["json"].get("peak_rss_bytes") or 0 for r in runs),
    }


def summarize(cfg_runs, B, T, peak):
    ct_runs, pt_runs, gm_runs = cfg_runs["ctrain"], cfg_runs["pytorch"], cfg_runs["gemm"]
    flops = ct_runs[0]["json"]["flops_per_step"]
    ct = side_summary(ct_runs, B, T, flops, peak)
    pt = side_summary(pt_runs, B, T, flops, peak)
    splits = {}
    for r in ct_runs:
        for k, v in (r["json"].get("split_s") or {}).items():
            if isinstance(v, (int, float)):
                splits.setdefault(k, []).append(v)
    ct["split_s"] = {k: median(v) for k, v in splits.items()}
    gemm_s = [r["json"]["gemm_s"] for r in gm_runs]
    gemm = {"gemm_s": gemm_s, "median_s": median(gemm_s), "min_s": min(gemm_s), "max_s": max(gemm_s)}
    return {
        "B": B, "T": T, "precision": ct_runs[0]["json"].get("precision", "fp32"),
        "flops_per_step": flops, "ctrain": ct, "pytorch": pt, "gemm": gemm,
        "ratio_tokens_per_s": ct["tokens_per_s"] / pt["tokens_per_s"],
        "ratio_step_over_gemm": ct["median_s"] / gemm["median_s"],
        "ratio_peak_rss": ct["peak_rss_bytes"] / pt["peak_rss_bytes"],
    }


def goals(results):
    """[(status, text)] with status PASS, MISS or N/A (the config was not run)."""
    out = []
    by_t = {r["T"]: r for r in results if r["precision"] == "fp32"}
    bf = {r["T"]: r for r in results if r["precision"] == "bf16"}
    for r in results:
        x = r["ratio_step_over_gemm"]
        out.append(("PASS" if x <= GOAL_STEP_OVER_GEMM else "MISS",
                    "T=%d%s: ctrain step <= %.2fx GEMM-only (%.2fx)"
                    % (r["T"], "" if r["precision"] == "fp32" else " " + r["precision"],
                       GOAL_STEP_OVER_GEMM, x)))
    for t, want in sorted(GOAL_BF16_OVER_FP32.items()):
        if t in bf and t in by_t:
            x = bf[t]["ctrain"]["tokens_per_s"] / by_t[t]["ctrain"]["tokens_per_s"]
            out.append(("PASS" if x >= want else "MISS",
                        "T=%d: ctrain bf16 tokens/s >= %.1fx its fp32 (%.2fx)" % (t, want, x)))
    for t, want in sorted(GOAL_BF16_SPEEDUP.items()):
        if t in bf:
            x = bf[t]["ratio_tokens_per_s"]
            out.append(("PASS" if x >= want else "MISS",
                        "T=%d: ctrain bf16 tokens/s >= %.1fx PyTorch autocast bf16 (%.2fx)"
                        % (t, want, x)))
    for t, want in sorted(GOAL_SPEEDUP.items()):
        if t in by_t:
            x = by_t[t]["ratio_tokens_per_s"]
            out.append(("PASS" if x >= want else "MISS",
                        "T=%d: tokens/s >= %.1fx PyTorch (%.2fx)" % (t, want, x)))
        else:
            out.append(("N/A", "T=%d: tokens/s >= %.1fx PyTorch (T=%d not run)" % (t, want, t)))
    b, t, want = GOAL_RSS
    hit = [r for r in results if r["B"] == b and r["T"] == t]
    if hit:
        x = hit[0]["ratio_peak_rss"]
        out.append(("PASS" if x <= want else "MISS",
                    "B=%d T=%d: peak RSS <= %.1fx PyTorch (%.2fx)" % (b, t, want, x)))
    else:
        out.append(("N/A", "B=%d T=%d: peak RSS <= %.1fx PyTorch (not run)" % (b, t, want)))
    return out


# ----------------------------------------------------------------------------------------
# Output

def fmt_s(s):
    if s >= 1:
        return "%.2f s" % s
    if s >= 1e-3:
        return "%.1f ms" % (s * 1e3)
    return "%.0f us" % (s * 1e6)


def fmt_mib(b):
    return "%.0f MiB" % (b / 2 ** 20) if b >= 2 ** 20 else "%.2f MiB" % (b / 2 ** 20)


def fmt_pct(x):
    return "%.1f%%" % (100 * x)


COLUMNS = ["T", "precision", "ctrain step (min-max)", "PyTorch step (min-max)", "ctrain tok/s", "PyTorch tok/s",
           "speedup", "GEMM-only", "step/GEMM", "MFU ctrain", "MFU PyTorch",
           "RSS ctrain", "RSS PyTorch", "RSS ratio"]


def row_cells(r):
    ct, pt = r["ctrain"], r["pytorch"]
    return [
        str(r["T"]), r["precision"],
        "%s (%s-%s)" % (fmt_s(ct["median_s"]), fmt_s(ct["min_s"]), fmt_s(ct["max_s"])),
        "%s (%s-%s)" % (fmt_s(pt["median_s"]), fmt_s(pt["min_s"]), fmt_s(pt["max_s"])),
        "%.0f" % ct["tokens_per_s"], "%.0f" % pt["tokens_per_s"],
        "%.2fx" % r["ratio_tokens_per_s"],
        fmt_s(r["gemm"]["median_s"]), "%.2fx" % r["ratio_step_over_gemm"],
        "%s (%s)" % (fmt_pct(ct["mfu_measured"]), fmt_pct(ct["mfu_theoretical"])),
        "%s (%s)" % (fmt_pct(pt["mfu_measured"]), fmt_pct(pt["mfu_theoretical"])),
        fmt_mib(ct["peak_rss_bytes"]), fmt_mib(pt["peak_rss_bytes"]),
        "%.2fx" % r["ratio_peak_rss"],
    ]


def header_lines(m):
    cores = "%d logical" % m["logical_cores"]
    if m["physical_cores"]:
        cores = "%d physical / %s" % (m["physical_cores"], cores)
    return [
        "Machine: %s, %s cores; %d threads per side; load average before the runs %.1f-%.1f"
        % (m["cpu"], cores, m["threads"], m["loadavg_before_runs"][0], m["loadavg_before_runs"][1]),
        "ctrain %s vs PyTorch %s; %s B=%d; %d round(s) x (%d warmup + %d timed steps); %s"
        % (m["ctrain_version"], m["torch_version"], m["preset"], m["B"], m["rounds"], m["warmup"],
           m["steps"], m["date"]),
        "GEMM peak measured %.1f GFLOP/s (shape %s), theoretical %.1f GFLOP/s; "
        "MFU = flops_per_step / step time / measured peak (theoretical in brackets)"
        % (m["gemm_peak_gflops"], "x".join(str(x) for x in m["gemm_shape"]) or "?",
           m["theoretical_gflops"]),
        "ctrain's GEMMs: %s (run.gemm); sgemm peak OpenBLAS (%s kernels) %s, oneDNN %s GFLOP/s"
        % (m.get("gemm", "openblas"), m.get("blas") or "?",
           "%.1f" % m["gemm_peak_openblas_gflops"] if m.get("gemm_peak_openblas_gflops") else "?",
           "%.1f" % m["gemm_peak_onednn_gflops"] if (m.get("gemm_peak_onednn_gflops") or -1) > 0
           else "n/a"),
    ] + (["Note: the load average was above %d before some runs: other work shared the cores, "
          "so the figures are rough" % (m["logical_cores"] + 1)]
         if m["loadavg_before_runs"][1] > m["logical_cores"] + 1 else [])


def render_text(m, results, goal_lines):
    lines = header_lines(m) + [""]
    rows = [COLUMNS] + [row_cells(r) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    for k, row in enumerate(rows):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    for r in results:
        split = r["ctrain"]["split_s"]
        if split:
            parts = ", ".join("%s %s" % (k, fmt_s(v)) for k, v in
                              sorted(split.items(), key=lambda kv: -kv[1]))
            lines.append("ctrain time per step at T=%d %s: %s" % (r["T"], r["precision"], parts))
    lines.append("")
    lines += ["%-4s %s" % g for g in goal_lines]
    return "\n".join(lines) + "\n"


def render_markdown(m, results, goal_lines):
    lines = ["_" + line + "_  " for line in header_lines(m)] + [""]
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "|".join("---:" for _ in COLUMNS) + "|")
    for r in results:
        lines.append("| " + " | ".join(row_cells(r)) + " |")
    lines.append("")
    lines += ["- %s %s" % g for g in goal_lines]
    return "\n".join(lines) + "\n"


def write_atomic(path, text):
    """Write text to path through a temporary file in the same folder, fsync, rename."""
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# ----------------------------------------------------------------------------------------
# Main

def parse_args(argv):
    ap = argparse.ArgumentParser(prog=NAME, description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="gpt2")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seqs", default="64,256,1024", help="comma-separated sequence lengths")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctrain", default=os.path.join(ROOT, "build", "ctrain"))
    ap.add_argument("--gemm", default="auto", choices=("openblas", "onednn", "auto"),
                    help="ctrain's GEMM library, run.gemm (default auto, as `ctrain train`: "
                         "oneDNN where OpenBLAS's kernels are narrower than the cores); "
                         "the GEMM-only column and the peak use the same one")
    ap.add_argument("--precisions", default="fp32",
                    help="comma-separated: fp32 and/or bf16 (ctrain train.precision, PyTorch "
                         "autocast)")
    ap.add_argument("--python", default="/usr/bin/python3", help="interpreter with torch")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per child (default 3600)")
    ap.add_argument("--json-out", help="write the raw runs and the summary here")
    ap.add_argument("--markdown", help="write the table as Markdown here")
    a = ap.parse_args(argv)
    try:
        a.seq_list = [int(s) for s in a.seqs.split(",") if s.strip()]
    except ValueError:
        ap.error("--seqs %r: expected comma-separated integers such as 64,256,1024" % a.seqs)
    if not a.seq_list or min(a.seq_list) < 1 or len(set(a.seq_list)) != len(a.seq_list):
        ap.error("--seqs %r: expected distinct positive integers" % a.seqs)
    a.prec_list = [p.strip() for p in a.precisions.split(",") if p.strip()]
    if not a.prec_list or any(p not in ("fp32", "bf16") for p in a.prec_list) or \
            len(set(a.prec_list)) != len(a.prec_list):
        ap.error("--precisions %r: expected fp32, bf16 or fp32,bf16" % a.precisions)
    for k in ("batch", "rounds", "steps", "threads", "timeout"):
        if getattr(a, k) < 1:
            ap.error("--%s must be at least 1, got %d" % (k, getattr(a, k)))
    if a.warmup < 0:
        ap.error("--warmup must be at least 0, got %d" % a.warmup)
    if not os.access(a.ctrain, os.X_OK):
        ap.error("--ctrain %s: no executable there (build it with `make`)" % a.ctrain)
    return a


def run_all(a):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    common = ["--preset", a.preset, "--batch", str(a.batch)]
    lib = ["--gemm", a.gemm]
    timing = ["--warmup", str(a.warmup), "--steps", str(a.steps), "--threads", str(a.threads)]
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    log("ctrain bench peak ...")
    peak, peak_run = run_json([a.ctrain, "bench", "peak", "--threads", str(a.threads), "--json",
                               "--gemm", a.gemm],
                              env, a.timeout, ["gemm_peak_gflops", "theoretical_gflops"])
    results, raw = [], []
    for prec, T in [(p, t) for p in a.prec_list for t in a.seq_list]:
        runs = {"ctrain": [], "pytorch": [], "gemm": []}
        shape = common + ["--seq", str(T)]
        pr = ["--precision", prec]
        cmds = [
            ("ctrain", [a.ctrain, "bench", "step"] + shape + lib + pr + timing + ["--json"],
             ["step_s", "median_s", "flops_per_step"]),
            ("pytorch", [a.python, TORCH_SCRIPT] + shape + pr + timing + ["--json"],
             ["step_s", "median_s", "peak_rss_bytes"]),
            ("gemm", [a.ctrain, "bench", "gemm"] + shape + lib + pr +
             ["--threads", str(a.threads), "--json"],
             ["gemm_s"]),
        ]
        for rnd in range(a.rounds):
            for side, cmd, need in cmds:
                log("T=%d %s round %d/%d: %s ..." % (T, prec, rnd + 1, a.rounds, side))
                obj, rec = run_json(cmd, env, a.timeout, need)
                if obj.get("B", a.batch) != a.batch or obj.get("T", T) != T:
                    raise RunError("`%s` reports B=%r T=%r, expected B=%d T=%d"
                                   % (" ".join(cmd), obj.get("B"), obj.get("T"), a.batch, T))
                rec.update(side=side, round=rnd + 1, T=T, precision=prec)
                runs[side].append(rec)
        raw += runs["ctrain"] + runs["pytorch"] + runs["gemm"]
        results.append(summarize(runs, a.batch, T, peak))
    return peak, peak_run, results, raw


def main(argv):
    a = parse_args(argv)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    try:
        peak, peak_run, results, raw = run_all(a)
    except RunError as e:
        print("%s: error: %s" % (NAME, e), file=sys.stderr)
        return 1
    torch_versions = sorted({r["json"].get("torch", "?") for r in raw if r["side"] == "pytorch"})
    machine = {
        "cpu": cpu_model(), "logical_cores": os.cpu_count() or 0, "physical_cores": physical_cores(),
        "threads": a.threads, "torch_version": ",".join(torch_versions),
        "ctrain_version": ctrain_version(a.ctrain, env),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "loadavg_before_runs": [min(r["loadavg_before"] for r in raw),
                                max(r["loadavg_before"] for r in raw)],
        "preset": a.preset, "B": a.batch, "rounds": a.rounds, "warmup": a.warmup, "steps": a.steps,
        "gemm_peak_gflops": peak["gemm_peak_gflops"], "theoretical_gflops": peak["theoretical_gflops"],
        "gemm_shape": peak.get("gemm_shape") or [], "gemm": peak.get("gemm", a.gemm),
        "blas": peak.get("blas"), "gemm_peak_openblas_gflops": peak.get("gemm_peak_openblas_gflops"),
        "gemm_peak_onednn_gflops": peak.get("gemm_peak_onednn_gflops"),
    }
    goal_lines = goals(results)
    sys.stdout.write(render_text(machine, results, goal_lines))
    try:
        if a.markdown:
            write_atomic(a.markdown, render_markdown(machine, results, goal_lines))
        if a.json_out:
            doc = {"bench": "compare_torch", "machine": machine, "peak": peak_run,
                   "results": results, "runs": raw,
                   "goals": [{"status": s, "goal": g} for s, g in goal_lines]}
            write_atomic(a.json_out, json.dumps(doc, indent=1) + "\n")
    except OSError as e:
        print("%s: error: cannot write %s: %s" % (NAME, e.filename, e.strerror), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
