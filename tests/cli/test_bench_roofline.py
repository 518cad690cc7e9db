#!/usr/bin/env python3
"""`ctrain bench kernels`: the roofline percentage reads as a fraction of a real bound.

usage: /usr/bin/python3 tests/cli/test_bench_roofline.py path/to/ctrain

The roofline of a kernel is max(FLOPs / the register FMA ceiling, bytes read / the
read stream, bytes written / the write stream), the streams measured over the
kernel's own footprint (so a kernel whose data sits in L1, L2 or L3 meets that
cache's bandwidth, not memory's). Each term is a real bound, so no kernel may read
over 100%. Checked on gpt2-tiny, llama-tiny and gpt2-demo (footprints from a few KiB
in L1 to MiBs in L2/L3, the sizes at which the old DRAM-triad roof read AdamW at
~700% and residual at ~1600-2200%):
  * every item's of_roofline is in (0, 1] (compute-bound ones within 5% over: the FMA
    probe runs at a lower clock than a GEMM can) and its bound is compute, read or write
    (a kernel outside is run again, twice at most: on a shared machine one sample can
    meet a busy moment, a wrong model is outside every time);
  * roofline_s is the binding term: FLOPs / bound_rate or bytes of that direction /
    bound_rate, and it is at least FLOPs / the FMA ceiling; on a CPU with AVX512_BF16 the
    kernels on bf16 operands (names with 16) are bound by the register bf16 dot-product
    ceiling instead (bf16_peak_gflops in the JSON, "of the bf16 dot-product ceiling");
  * AdamW counts 16 bytes read (p, g, m, v) and 12 written (p, m, v) per parameter;
    sumsq reads 4 and writes nothing; GEMMs are bound by compute or memory, memory-bound
    kernels (no FLOPs) by a stream;
  * the text output names each line's bound ("of the FMA ceiling" or "of the read/write
    stream at SIZE in LEVEL") and never prints a percentage over 100.
An -O0 or sanitized build (roofline_valid false in the JSON, a warning on stderr) runs its
own probes far below the hardware while the BLAS stays fast: there the bound itself is not
checked, only the bookkeeping.
"""
import json
import os
import re
import subprocess
import sys

CTRAIN = os.path.abspath(sys.argv[1])
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1
    return ok


def bench(*args):
    p = subprocess.run([CTRAIN, "bench", "kernels", *args], capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def close(a, b, rel=1e-3):
    return abs(a - b) <= rel * max(abs(a), abs(b))


SHAPES = {
    "gpt2-tiny": ["--preset", "gpt2-tiny", "--batch", "2", "--seq", "16"],
    "llama-tiny": ["--preset", "llama-tiny", "--batch", "2", "--seq", "16"],
    "gpt2-demo": ["--preset", "gpt2-demo", "--batch", "4", "--seq", "64"],
}

# A compute-bound GEMM may beat the register FMA ceiling by a few percent: the probe
# keeps every lane on 512-bit (256-bit) FMAs, which holds the cores at a lower clock
# than a GEMM that interleaves loads (seen on the Zen 4 VM: gemm.fc_proj.bwd_weight at
# 100.1-103.1% in three runs in a row). A wrong FLOP model is off by far more than that.
COMPUTE_SLACK = 1.05


def outside(items):
    return {it["name"]: round(100 * it["of_roofline"], 3) for it in items
            if not 0 < it["of_roofline"] <= (COMPUTE_SLACK if it.get("bound") == "compute"
                                             else 1.0)}


for name, shape in SHAPES.items():
    rc, out, err = bench(*shape, "--threads", "2", "--repeat", "1", "--json")
    j = json.loads(out) if rc == 0 else {}
    if not check(rc == 0 and j.get("items"), "%s: bench kernels runs: %s" % (name, err[-200:])):
        continue
    items = j["items"]
    valid = j.get("roofline_valid", True)
    if not valid:
        # an -O0 or sanitized build: its probes are slow compiled loops, the BLAS is not
        print("note: %s: this ctrain is not an optimized build; the bound itself is not "
              "checked" % name)
    # One sample per kernel on a shared machine: a neighbour can hold a stream probe
    # down for its whole remeasure, or deschedule a kernel of a few microseconds. A
    # wrong model reads over its bound every time; noise does not. So a kernel fails
    # only when it is outside (0, 100%] in each of up to three runs.
    over = outside(items)
    for attempt in range(2):
        if not over or not valid:
            break
        print("note: %s: outside on run %d: %s; running again" % (name, attempt + 1, over))
        rc2, out2, _ = bench(*shape, "--threads", "2", "--repeat", "1", "--json")
        if rc2 != 0:
            break
        again = outside(json.loads(out2)["items"])
        over = {k: (v, again[k]) for k, v in over.items() if k in again}
    over = sorted(over.items())
    check(not over or not valid,
          "%s: every kernel reads (0, 100%%] of its roofline, compute (0, %d%%] (over: %s)"
          % (name, round(100 * COMPUTE_SLACK), over))
    if not check("fma_peak_gflops" in j and all("bound" in it for it in items),
                 "%s: the JSON gives the FMA ceiling and each item's bound" % name):
        continue
    # the ceiling is measured again when a kernel beats it (a busy moment held it down)
    # kernels on bf16 operands (names with 16) meet the bf16 dot-product ceiling instead,
    # where the CPU has one (bf16_peak_gflops > 0)
    b16 = j.get("bf16_peak_gflops", -1)
    check(b16 >= 0, "%s: the JSON gives the bf16 dot-product ceiling (0: none)" % name)

    def on16(it):
        return b16 > 0 and "16" in it["name"]
    fma_max = max([j["fma_peak_gflops"]] + [it["bound_rate"] for it in items
                                             if it["bound"] == "compute" and not on16(it)])
    c16 = [it for it in items if on16(it) and it["bound"] == "compute"]
    check(all(close(it["bound_rate"], b16, 1e-4) for it in c16),  # b16 printed to 0.01
          "%s: the 16-bit kernels' compute bound is the bf16 ceiling (%d of them)"
          % (name, len(c16)))
    check(all(it["bound"] in ("compute", "read", "write") for it in items),
          "%s: every item names its bound" % name)
    bad = []
    for it in items:
        num = {"compute": it["flops"] / 1e9, "read": it["read_bytes"] / 1e9,
               "write": it["write_bytes"] / 1e9}[it["bound"]]
        ok = close(it["roofline_s"], num / it["bound_rate"])
        ok &= it["roofline_s"] >= it["flops"] / ((b16 if on16(it) else fma_max) * 1e9) * (1 - 1e-4)
        ok &= close(it["bytes"], it["read_bytes"] + it["write_bytes"], 1e-6)
        ok &= it["footprint_bytes"] > 0 and it["level"] in ("L1", "L2", "L3", "memory", "?")
        if not ok:
            bad.append((it["name"], it["bound"], it["bound_rate"], it["roofline_s"]))
    check(not bad, "%s: roofline_s is the binding term's time, bytes = read + written (%s)"
          % (name, bad))
    check(all(it["bound"] != "compute" for it in items if it["flops"] == 0),
          "%s: kernels without FLOPs are bound by a stream" % name)
    adamw = [it for it in items if it["name"] == "adamw"][0]
    n = int(re.match(r"n=(\d+)", adamw["shape"]).group(1))
    check(close(adamw["read_bytes"], 16.0 * n, 1e-6) and close(adamw["write_bytes"], 12.0 * n, 1e-6),
          "%s: AdamW reads 16 and writes 12 bytes per parameter" % name)
    sumsq = [it for it in items if it["name"] == "sumsq"][0]
    check(sumsq["write_bytes"] == 0 and sumsq["bound"] == "read", "%s: sumsq only reads" % name)

# The text form, with the JSON's rule for noise: a percentage over 100 fails only when
# every one of up to three runs prints one (a busy moment reads a ceiling low once).
maxes = []
for attempt in range(3):
    rc, out, err = bench(*SHAPES["gpt2-tiny"], "--threads", "2", "--repeat", "1")
    lines = [ln for ln in out.splitlines() if ln.startswith("  gemm.") or ln.startswith("  adamw")]
    pct = [float(x) for x in re.findall(r"([\d.]+)% of the", out)]
    if attempt == 0:
        check(rc == 0 and lines and all("of the FMA ceiling" in ln or " stream at " in ln or
                                        ("16" in ln.split()[0] and
                                         "of the bf16 dot-product ceiling" in ln)
                                        for ln in lines),
              "the text names each line's bound: %s" % (lines[-1] if lines else out[-300:]))
    maxes.append(max(pct) if pct else None)
    if not pct or max(pct) <= 100.0 or "not bounds" in err:
        break
    print("note: text run %d printed %.1f%%; running again" % (attempt + 1, max(pct)))
check(maxes[-1] is not None and (maxes[-1] <= 100.0 or "not bounds" in err),
      "no printed percentage is over 100 (max of each run: %s)" % maxes)

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
