#!/usr/bin/env python3
"""`ctrain report RUN_DIR [--out FILE]`: the run report, end to end.

usage: /usr/bin/python3 tests/cli/test_report.py path/to/ctrain

Builds two runs: a short real `ctrain train` of gpt2-tiny on synthetic shards (every plot must
be drawn from what the trainer's monitor writes, hw.json included), and a hand-written metrics.jsonl with every key of the metrics schema,
alerts of each kind, a rollback, validation points, steps written twice by a resume, nulls and a
torn last line, and a short LoRA run whose summary must show r, alpha, dropout and the targets
(and the full run's, that LoRA is off); and a hand-written GPU run (device lines with NVML
readings, nulls, a gpu_util alert) whose GPU section must state the summary figures and draw
its plots, while the CPU runs' pages have no GPU section; and a short sim run with a device
memory, whose device lines the trainer writes without an NVML reading (one note, no plot). For each: the command prints the path it wrote, the page is well-formed (parsed
as XML), holds the expected plots, notes and tables, and refers to nothing outside itself. Then
headless Chromium (Debian's `chromium`) opens each page, takes a screenshot and must log no
console message; the screenshot is decoded (PNG, with zlib) and must not be blank. Self-tests
show the two browser checks can fail: a page with a script error must be caught, and a blank
page's screenshot must count as blank. Last, bad input: exit 2, a message naming the file (and
line) and what to change, and nothing written.
When chromium is not installed, the browser part is skipped with a printed reason (the bootstrap
installs it).
"""
import collections
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib

CTRAIN = os.path.abspath(sys.argv[1])
CHROMIUM = shutil.which("chromium")
failures = []


def check(label, ok, detail=""):
    print("%s %s%s" % ("PASS" if ok else "FAIL", label, (": " + detail) if detail else ""), flush=True)
    if not ok:
        failures.append(label)
    return ok


def run(*args, timeout=300):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=timeout, env=env)


# ---------------------------------------------------------------- PNG decoding (stdlib only)

def png_pixels(path):
    """(width, height, bytes per pixel, rows of raw bytes) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, w = 8, [], 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError("unsupported PNG: depth %d colour type %d" % (depth, ctype))
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    m7 = int.from_bytes(b"\x7f" * stride, "big")
    m8 = int.from_bytes(b"\x80" * stride, "big")
    rows, prev, i = [], bytes(stride), 0
    for _ in range(h):
        ft, line = raw[i], raw[i + 1:i + 1 + stride]
        i += 1 + stride
        if ft == 2:   # up: a bytewise sum mod 256 of two whole rows, without carries between bytes
            x, y = int.from_bytes(line, "big"), int.from_bytes(prev, "big")
            line = (((x & m7) + (y & m7)) ^ ((x ^ y) & m8)).to_bytes(stride, "big")
        elif ft:
            line = bytearray(line)
            for k in range(stride):
                a = line[k - bpp] if k >= bpp else 0
                b = prev[k]
                c = prev[k - bpp] if k >= bpp else 0
                if ft == 1:
                    line[k] = (line[k] + a) & 255
                elif ft == 3:
                    line[k] = (line[k] + (a + b) // 2) & 255
                elif ft == 4:
                    q = a + b - c
                    pa, pb, pc = abs(q - a), abs(q - b), abs(q - c)
                    line[k] = (line[k] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            line = bytes(line)
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def png_stats(path):
    """(distinct colours, fraction of pixels that are not the background, pixels near C_BLUE)."""
    w, h, bpp, rows = png_pixels(path)
    counts = collections.Counter()
    for r in rows:
        counts.update(zip(r[0::bpp], r[1::bpp], r[2::bpp]))
    bg = max(counts, key=counts.get)
    blue = sum(c for px, c in counts.items()
               if abs(px[0] - 31) + abs(px[1] - 119) + abs(px[2] - 180) < 40)
    return len(counts), 1 - counts[bg] / (w * h), blue


# ---------------------------------------------------------------- chromium

def browse(page, png, workdir, height=1800):
    """Screenshot page into png; returns (returncode, console lines)."""
    prof = tempfile.mkdtemp(prefix="prof_", dir=workdir)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--no-first-run", "--enable-logging=stderr", "--v=0", "--user-data-dir=" + prof,
           "--screenshot=" + png, "--window-size=1000,%d" % height, "file://" + os.path.abspath(page)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    # Chromium logs each console message of the page as "...:CONSOLE(:N)] "text", source: URL"
    console = [ln for ln in p.stderr.splitlines() if re.search(r":CONSOLE[(:]", ln)]
    return p.returncode, console


def browser_checks(pages, tmp):
    if not CHROMIUM:
        print("SKIP browser checks: `chromium` is not installed (scripts/bootstrap.sh installs it)")
        return
    # self-test 1: a script error must show as a console message
    bad = os.path.join(tmp, "bad.html")
    with open(bad, "w") as f:
        f.write("<!DOCTYPE html><html><body><p>x</p><script>noSuchFunction();</script></body></html>")
    rc, console = browse(bad, os.path.join(tmp, "bad.png"), tmp, 400)
    check("self-test: a page with a script error logs a console message",
          rc == 0 and any("noSuchFunction" in ln for ln in console), "rc %d, %r" % (rc, console))
    # self-test 2: a blank page's screenshot counts as blank
    blank = os.path.join(tmp, "blank.html")
    with open(blank, "w") as f:
        f.write("<!DOCTYPE html><html><body></body></html>")
    rc, console = browse(blank, os.path.join(tmp, "blank.png"), tmp, 400)
    ncol, ink, _ = png_stats(os.path.join(tmp, "blank.png"))
    check("self-test: a blank page's screenshot is found blank", rc == 0 and ncol <= 2 and ink < 0.001,
          "%d colours, %.4f ink" % (ncol, ink))
    for label, page in pages:
        png = os.path.join(tmp, label + ".png")
        rc, console = browse(page, png, tmp)
        check("%s: chromium renders the report (exit 0)" % label, rc == 0 and os.path.exists(png),
              "rc %d" % rc)
        check("%s: no console messages (errors, blocked loads)" % label, not console, repr(console[:3]))
        if not os.path.exists(png):
            continue
        w, h, _, _ = png_pixels(png)
        ncol, ink, blue = png_stats(png)
        check("%s: the screenshot is %dx%d, not blank (%d colours, %.1f%% ink)" % (label, w, h, ncol, 100 * ink),
              w == 1000 and h == 1800 and ncol > 50 and ink > 0.03)
        check("%s: plot lines are drawn (%d pixels of the train/tokens colour)" % (label, blue), blue > 500)


# ---------------------------------------------------------------- the hand-written run

def write_synthetic_run(d, hw_json):
    os.makedirs(d)
    lines = []
    limit = 6 * 2 ** 30

    def train(step, loss, **kw):
        rec = {"step": step, "split": "train", "loss": loss, "lr": 3e-4 * min(1, step / 20),
               "grad_norm": 1 + 0.3 * math.sin(step / 5), "tokens_per_s": 9000 + 500 * math.sin(step / 9),
               "step_ms": 450.0, "skipped": 0, "spike": 0, "rollback": 0, "data_wait_ms": 2.0,
               "mem_bytes": 2 ** 30, "t_data_ms": 2.0, "t_fwd_ms": 140.0, "t_bwd_ms": 260.0,
               "t_opt_ms": 45.0, "t_comm_ms": 0.0, "gflops": 180.0, "mfu": 0.42, "mfu_theory": 0.21,
               "rss_bytes": 2.5 * 2 ** 30 + step * 2 ** 20, "rss_peak_bytes": 2.6 * 2 ** 30 + step * 2 ** 20,
               "arena_bytes": 2 ** 31, "mem_limit_bytes": limit, "plan_bytes": 2.2 * 2 ** 30,
               "major_faults": 0}
        rec.update(kw)
        lines.append(json.dumps(rec))

    for s in range(1, 121):
        train(s, 10 * math.exp(-s / 60) + 2)
    # step 121 blows up: skipped, alert, rollback to 100
    train(121, None, skipped=1, spike=1, grad_norm=None)
    lines.append(json.dumps({"step": 121, "split": "alert", "level": "critical", "kind": "loss",
                             "value": None, "threshold": 4.0, "message": "loss is NaN <after> step 120 & rolled back"}))
    train(122, 40.0, rollback=1, rollback_to=100)
    for s in range(101, 161):   # the replayed steps replace the first timeline's
        train(s, 10 * math.exp(-s / 60) + 1.9)
        if s % 20 == 0:
            lines.append(json.dumps({"step": s, "split": "val", "loss": 10 * math.exp(-s / 60) + 2.1,
                                     "best_loss": 10 * math.exp(-s / 60) + 2.1}))
    lines.append(json.dumps({"step": 140, "split": "alert", "level": "warning", "kind": "memory",
                             "value": 5.2 * 2 ** 30, "threshold": 5.1 * 2 ** 30, "message": "RSS at 87% of run.memory_limit"}))
    lines.append(json.dumps({"step": 150, "split": "alert", "level": "warning", "kind": "throughput",
                             "value": 4000, "threshold": 6000, "message": "tokens/s fell below 2/3 of the median"}))
    # the process died; a resume from the checkpoint at 150 writes 151..200 again
    for s in range(151, 201):
        train(s, 10 * math.exp(-s / 60) + 1.85, data_wait_ms=30.0 if s == 170 else 2.0)
    lines.append(json.dumps({"step": 170, "split": "alert", "level": "warning", "kind": "data_wait",
                             "value": 30.0, "threshold": 10.0, "message": "the loader made the step wait 30 ms"}))
    lines.append(json.dumps({"step": 200, "split": "val", "loss": 2.0, "best_loss": 2.0}))
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
        f.write('{"step": 201, "split": "train", "loss": 1.9')   # torn by a crash
    with open(os.path.join(d, "config.yaml"), "w") as f:
        f.write("model:\n  preset: gpt2  # <b>bold</b> & co\ntrain:\n  steps: 200\n")
    with open(os.path.join(d, "hw.json"), "w") as f:
        f.write(hw_json)
    return len(lines) + 1


def write_gpu_run(d):
    """A run on a GPU: a device line every step, an NVML reading every 5th (power null on
    this board, one reading all null), a gpu_util alert. Returns (median util, % below 90)."""
    os.makedirs(d)
    lines, utils = [], []
    for s in range(1, 101):
        lines.append(json.dumps({"step": s, "split": "train", "loss": 5 - s / 50, "step_ms": 80.0,
                                 "tokens_per_s": 50000.0}))
        dev = {"step": s, "split": "device", "device_peak_bytes": 3 * 2 ** 30,
               "device_plan_bytes": 3.2 * 2 ** 30, "device_limit_bytes": 70 * 2 ** 30,
               "device_free_bytes": 76 * 2 ** 30}
        if s % 5 == 0:
            u = None if s == 50 else (30.0 if s <= 40 else 97.0 + (s % 3))
            dev.update({"gpu_util": u, "gpu_mem_util": None if u is None else u / 3,
                        "gpu_mem_used_mib": None if u is None else 4000.0 + s,
                        "gpu_mem_total_mib": 81559.0, "gpu_power_w": None,
                        "gpu_temp_c": None if u is None else 40 + s / 10,
                        "gpu_sm_clock_mhz": 1980.0, "gpu_mem_clock_mhz": 2619.0})
            if u is not None:
                utils.append(u)
        lines.append(json.dumps(dev))
    lines.append(json.dumps({"step": 40, "split": "alert", "level": "warning", "kind": "gpu_util",
                             "value": 30.0, "threshold": 90.0,
                             "message": "GPU utilisation 30%, below 90% for 60 s"}))
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    utils.sort()
    n = len(utils)
    med = utils[n // 2] if n % 2 else 0.5 * (utils[n // 2 - 1] + utils[n // 2])
    return med, 100.0 * sum(u < 90 for u in utils) / n, n


def page_checks(label, page, text_expect, n_svg):
    with open(page, encoding="utf-8") as f:
        html = f.read()
    try:
        root = ET.fromstring(html.replace("<!DOCTYPE html>", "", 1))
        ok, detail = True, ""
    except ET.ParseError as e:
        root, ok, detail = None, False, str(e)
    check("%s: the page is well-formed" % label, ok, detail)
    svgs = root.findall(".//svg") if root is not None else []
    check("%s: %d plots" % (label, n_svg), len(svgs) == n_svg, "%d <svg>" % len(svgs))
    paths = [p.get("d", "") for s in svgs for p in s.iter("path")]
    check("%s: every plot has drawn paths" % label,
          all(any(p.get("d") for p in s.iter("path")) for s in svgs) and all(
              re.fullmatch(r"[MLhZlz0-9. \-]+", p) for p in paths), str([p[:40] for p in paths if p][:2]))
    check("%s: nothing outside the page (no URL, no script, no src)" % label,
          not re.search(r"https?:|<script|\bsrc=|<link|@import|url\(", html))
    for t in text_expect:
        check("%s: shows %r" % (label, t), t in html)
    check("%s: under 300 KB" % label, len(html.encode()) < 300 * 1024, "%d bytes" % len(html.encode()))
    return html


def main():
    tmp = tempfile.mkdtemp(prefix="ct_report_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        # --- a real run of the trainer --------------------------------------------------------
        for name, n, seed in (("tr.bin", 40000, 1), ("va.bin", 2000, 5)):
            p = run("synth", "--out", P(name), "--tokens", str(n), "--vocab", "64", "--seed", str(seed))
            assert p.returncode == 0, p.stderr
        p = run("train", "model.preset=gpt2-tiny", "data.train=" + P("tr.bin"), "data.val=" + P("va.bin"),
                "train.batch_size=4", "train.seq_len=16", "train.eval_batches=2", "train.steps=40",
                "train.eval_every=10", "run.checkpoint_every=0", "run.dir=" + P("real"))
        check("real run trains", p.returncode == 0, p.stderr[-300:])
        p = run("report", P("real"))
        check("report of the real run exits 0 and prints the path",
              p.returncode == 0 and p.stdout.strip() == P("real", "report.html"), p.stdout + p.stderr)
        real = page_checks("real run", P("real", "report.html"),
                           ["Run report: " + P("real"), "40 (steps 1 to 40)", "4 evaluations",
                            "of the measured GEMM peak", "<th>signature</th>", "forward",
                            "backward", "optimizer", "peak RSS", "arena", "limit",
                            "preset: gpt2-tiny", "No rollbacks.", "data wait"], 7)
        # the trainer's monitor writes every key now: nothing is left unplotted
        check("real run: every plot drawn", "Not plotted" not in real and "not recorded" not in real)
        # a tiny run under a limit of 85% of RAM: the limit is named, not drawn flat
        check("real run: the far-away memory limit is a note, not a line",
              "is off this plot's scale" in real)
        check("real run: tokens trained = 40 steps x 64 tokens", "<th>tokens trained</th><td>2560</td>" in real)
        check("real run: no stray temporary files", sorted(os.listdir(P("real"))) == sorted(
            ["checkpoints", "config.json", "config.yaml", "generation_config.json", "hw.json",
             "metrics.jsonl", "model.safetensors", "report.html"]
            + [x for x in os.listdir(P("real")) if x.startswith("events.out.tfevents")]))

        check("real run: the summary names the model and that LoRA is off",
              "<th>model</th><td>from scratch: gpt2, preset gpt2-tiny</td>" in real and
              "<th>LoRA</th><td>off: every weight trained</td>" in real)

        # --- a LoRA run: its settings in the summary -------------------------------------------
        p = run("train", "model.preset=gpt2-tiny", "data.train=" + P("tr.bin"), "train.batch_size=2",
                "train.seq_len=16", "train.steps=3", "run.checkpoint_every=0", "lora.r=4",
                "lora.alpha=8", "lora.dropout=0.05", "lora.targets=c_attn,c_fc", "run.dir=" + P("lora"))
        check("LoRA run trains", p.returncode == 0, p.stderr[-300:])
        p = run("report", P("lora"))
        with open(P("lora", "report.html")) as f:
            lora = f.read()
        m = re.search(r"<th>LoRA</th><td>([^<]*)</td>", lora)
        check("LoRA run: the summary shows r, alpha, the scale, dropout and the targets",
              p.returncode == 0 and m and "r 4, alpha 8 (scale alpha/r 2)" in m.group(1) and
              "dropout 0.05" in m.group(1) and "c_attn" in m.group(1) and "c_fc" in m.group(1),
              m.group(1) if m else p.stderr[-300:])

        # --- a hand-written run with every key -----------------------------------------------
        hw = run("hw", "--json", "--no-bench")
        hwj = json.loads(hw.stdout)
        hwj["gemm_peak_gflops"] = 430.5
        nlines = write_synthetic_run(P("synth"), json.dumps(hwj))
        p = run("report", P("synth"), "--out", P("synth.html"))
        check("report --out exits 0 and prints that path",
              p.returncode == 0 and p.stdout.strip() == P("synth.html"), p.stdout + p.stderr)
        check("the torn last line is skipped with a warning naming it",
              ("metrics.jsonl:%d" % nlines) in p.stderr and "skipped" in p.stderr, p.stderr)
        check("--out leaves RUN_DIR alone", not os.path.exists(P("synth", "report.html")))
        syn = page_checks("full run", P("synth.html"),
                          ["200 (steps 1 to 200)", "42.0% of the measured GEMM peak",
                           "21.0% of the theoretical peak", "of the 6.00 GiB limit",
                           "loss is NaN &lt;after&gt; step 120 &amp; rolled back",
                           "step 122: rollback to step 100", "&lt;b&gt;bold&lt;/b&gt; &amp; co",
                           "<th>gemm_peak_gflops</th><td>430.5</td>", "<th>signature</th>",
                           "lines were written again", "could not be read (a crash mid-write)",
                           "forward", "backward", "optimizer", "peak RSS", "arena", "limit",
                           "4 (1 critical)", "RSS at 87% of run.memory_limit"], 7)
        check("full run: a limit near the RSS is drawn", "is off this plot's scale" not in syn)
        check("full run: replayed steps replaced the first timeline (final loss from the resume)",
              "final %.4g (step 200)" % (10 * math.exp(-200 / 60) + 1.85) in syn)
        check("full run: the rollback line is kept although its step was replayed",
              syn.count("rollback to step 100") >= 2)  # grad-norm and loss plot markers
        check("full run: one alert row per alert", len(re.findall(r'<td class="(crit|warn)">', syn)) == 4)

        # --- a run on a GPU: the GPU section from its device lines ------------------------------
        check("real run (CPU): no GPU section", "<h2>GPU</h2>" not in real and "gpu_util" not in real)
        check("full run (CPU): no GPU section", "<h2>GPU</h2>" not in syn)
        med, low, n = write_gpu_run(P("gpu"))
        p = run("report", P("gpu"))
        check("report of a GPU run exits 0", p.returncode == 0, p.stderr[-300:])
        gpu = page_checks("GPU run", P("gpu", "report.html"),
                          ["<h2>GPU</h2>", "<th>GPU readings</th><td>20 (steps 5 to 100)</td>",
                           "<th>median utilisation</th><td>%g%%</td>" % med,
                           "<td>%.1f%% (8 of %d readings)</td>" % (low, n),
                           "<th>board power</th><td>not reported by this GPU</td>",
                           "<th>max temperature</th><td>50 \u00b0C</td>",
                           "<th>gpu_util alerts</th><td>1 (", "GPU utilisation", "GPU memory",
                           "step 40: warning gpu_util alert"], 4)
        check("GPU run: no power plot for a board without power readings", "GPU power" not in gpu)
        # the trainer's own device lines: sim with a device memory writes them, with no NVML
        # reading (as a GPU whose watch was off): one note, no plot, no crash
        p = run("train", "model.preset=gpt2-tiny", "data.train=" + P("tr.bin"), "train.batch_size=2",
                "train.seq_len=16", "train.steps=3", "run.checkpoint_every=0", "run.device=sim",
                "debug.sim_device_memory=1GB", "run.dir=" + P("simdev"))
        check("sim run with a device memory trains", p.returncode == 0, p.stderr[-300:])
        with open(P("simdev", "metrics.jsonl")) as f:
            ndev = sum(json.loads(x).get("split") == "device" for x in f if x.strip())
        check("sim run: the trainer wrote a device line per step", ndev == 3, "%d" % ndev)
        p = run("report", P("simdev"))
        check("report of the sim run exits 0", p.returncode == 0, p.stderr[-300:])
        with open(P("simdev", "report.html"), encoding="utf-8") as f:
            simdev = f.read()
        check("sim run: a GPU section that says the run holds no GPU reading",
              "<h2>GPU</h2>" in simdev and "hold no GPU reading" in simdev and
              "GPU utilisation" not in simdev)

        browser_checks([("real run", P("real", "report.html")), ("full run", P("synth.html")),
                        ("GPU run", P("gpu", "report.html"))], tmp)

        # --- bad input -------------------------------------------------------------------------
        def bad(label, args, needles, rundir=None):
            before = sorted(os.listdir(rundir)) if rundir else None
            p = run("report", *args)
            ok = p.returncode == 2 and all(n in p.stderr for n in needles) and not p.stdout
            if rundir:
                ok = ok and sorted(os.listdir(rundir)) == before
            check("bad input: %s: exit 2, says what is wrong, writes nothing" % label, ok,
                  "rc %d: %s" % (p.returncode, p.stderr.strip()[:300]))

        bad("no RUN_DIR", [], ["missing RUN_DIR"])
        bad("unknown option", [P("real"), "--colour"], ["unknown option '--colour'"])
        bad("RUN_DIR missing", [P("nope")], [P("nope"), "no such run directory"])
        os.makedirs(P("empty"))
        bad("no metrics.jsonl", [P("empty")], ["no metrics in " + P("empty", "metrics.jsonl"),
                                                "ctrain train run.dir="], P("empty"))
        os.makedirs(P("valonly"))
        with open(P("valonly", "metrics.jsonl"), "w") as f:
            f.write('{"step": 5, "split": "val", "loss": 3.0}\n')
        bad("no train lines", [P("valonly")], ["no metrics in", "no training step", "run.dir="], P("valonly"))
        os.makedirs(P("corrupt"))
        with open(P("real", "metrics.jsonl")) as f:
            good = f.read().splitlines()
        with open(P("corrupt", "metrics.jsonl"), "w") as f:
            f.write("\n".join(good[:5] + ['{"step": 6, "split": "train", "lo'] + good[5:]) + "\n")
        bad("a corrupt line before the end", [P("corrupt")],
            [P("corrupt", "metrics.jsonl") + ":6: not a JSON object"], P("corrupt"))
        bad("--out into a missing directory", [P("real"), "--out", P("no", "dir", "r.html")],
            [P("no", "dir", "r.html")], P("real"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
