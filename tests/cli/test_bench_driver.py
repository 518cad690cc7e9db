#!/usr/bin/env python3
"""Smoke test of bench/compare_torch.py, the ctrain-vs-PyTorch training-step comparison.

usage: /usr/bin/python3 tests/cli/test_bench_driver.py path/to/ctrain

Runs the driver on gpt2-tiny (B=2, T=8 and 16, one round of one step) and checks that both
sides ran, that every number is positive and finite, that the summary (medians, tokens/s,
ratios, MFU, peak RSS) recomputes from the raw runs in --json-out, and that the Markdown
table has one row per sequence length. Also: a failing child or bad arguments give a
non-zero exit; --precisions fp32,bf16 runs each length in both; and the PyTorch model of
the benchmark computes the same loss and gradients
as the golden reference model (tests/golden/gpt2_ref.py) and starts from GPT-2's init.
"""
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DRIVER = os.path.join(ROOT, "bench", "compare_torch.py")
TORCH_SCRIPT = os.path.join(ROOT, "bench", "torch_gpt2_step.py")
CTRAIN = os.path.abspath(sys.argv[1])
B, SEQS = 2, [8, 16]
failures = []


def check(label, ok, detail=""):
    shown = (": " + detail) if detail and not ok else ""
    print("%s %s%s" % ("PASS" if ok else "FAIL", label, shown), flush=True)
    if not ok:
        failures.append(label)
    return ok


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def driver(args, timeout=120):
    return subprocess.run([sys.executable, DRIVER, "--ctrain", CTRAIN] + args,
                          capture_output=True, text=True, timeout=timeout)


def check_result(r, runs, peak):
    """Recompute one config's summary from its raw runs."""
    T = r["T"]
    mine = {s: [x for x in runs if x["T"] == T and x["side"] == s] for s in ("ctrain", "pytorch", "gemm")}
    for s, lst in mine.items():
        check("T=%d: one %s run" % (T, s), len(lst) == 1, str(len(lst)))
    if any(len(lst) != 1 for lst in mine.values()):
        return
    ct_json, pt_json, gm_json = (mine[s][0]["json"] for s in ("ctrain", "pytorch", "gemm"))
    check("T=%d: ctrain step JSON" % T, ct_json.get("bench") == "step" and ct_json.get("impl") == "ctrain",
          str({k: ct_json.get(k) for k in ("bench", "impl")}))
    check("T=%d: pytorch step JSON" % T, pt_json.get("bench") == "torch_step" and pt_json.get("impl") == "pytorch",
          str({k: pt_json.get(k) for k in ("bench", "impl")}))
    check("T=%d: gemm JSON" % T, gm_json.get("bench") == "gemm", str(gm_json.get("bench")))
    for name, js in (("ctrain", ct_json), ("pytorch", pt_json)):
        check("T=%d: %s shape echoed" % (T, name), js.get("B") == B and js.get("T") == T and
              js.get("preset") == "gpt2-tiny", str({k: js.get(k) for k in ("B", "T", "preset")}))
        steps = js.get("step_s") or []
        check("T=%d: %s timed 1 step, positive" % (T, name), len(steps) == 1 and all(map(positive, steps)),
              str(steps))
    check("T=%d: pytorch losses finite" % T, len(pt_json.get("loss", [])) == 1 and
          all(math.isfinite(x) and x > 0 for x in pt_json["loss"]), str(pt_json.get("loss")))

    flops = ct_json.get("flops_per_step")
    check("T=%d: flops_per_step positive" % T, positive(flops), str(flops))
    check("T=%d: summary uses ctrain's FLOPs" % T, r.get("flops_per_step") == flops)
    if not positive(flops):
        return
    meds = {}
    for side, js, rec in (("ctrain", ct_json, mine["ctrain"][0]), ("pytorch", pt_json, mine["pytorch"][0])):
        s = r[side]
        med = statistics.median(js["step_s"])
        meds[side] = med
        check("T=%d: %s median recomputes" % (T, side), close(s["median_s"], med), "%r vs %r" % (s["median_s"], med))
        check("T=%d: %s min <= median <= max" % (T, side), s["min_s"] <= s["median_s"] <= s["max_s"])
        check("T=%d: %s tokens/s = B*T/median" % (T, side), close(s["tokens_per_s"], B * T / med))
        gf = flops / med / 1e9
        check("T=%d: %s MFU (measured peak)" % (T, side), close(s["mfu_measured"], gf / peak["gemm_peak_gflops"]))
        check("T=%d: %s MFU (theoretical peak)" % (T, side),
              close(s["mfu_theoretical"], gf / peak["theoretical_gflops"]))
        check("T=%d: %s peak RSS from wait4" % (T, side),
              positive(rec["maxrss_bytes"]) and s["peak_rss_bytes"] == rec["maxrss_bytes"],
              "%r vs %r" % (s["peak_rss_bytes"], rec["maxrss_bytes"]))
        check("T=%d: %s self-reported peak RSS present" % (T, side), positive(js.get("peak_rss_bytes")),
              str(js.get("peak_rss_bytes")))
    g = gm_json.get("gemm_s")
    check("T=%d: gemm_s positive" % T, positive(g), str(g))
    if positive(g):
        check("T=%d: GEMM-only median" % T, close(r["gemm"]["median_s"], g))
        check("T=%d: step/GEMM ratio" % T, close(r["ratio_step_over_gemm"], meds["ctrain"] / g))
    check("T=%d: tokens/s ratio" % T, close(r["ratio_tokens_per_s"], meds["pytorch"] / meds["ctrain"], 1e-9))
    check("T=%d: RSS ratio" % T, close(r["ratio_peak_rss"], mine["ctrain"][0]["maxrss_bytes"] /
                                           mine["pytorch"][0]["maxrss_bytes"]))


def test_driver(tmp):
    jpath, mpath = os.path.join(tmp, "cmp.json"), os.path.join(tmp, "cmp.md")
    p = driver(["--preset", "gpt2-tiny", "--batch", str(B), "--seqs", ",".join(map(str, SEQS)),
                "--rounds", "1", "--warmup", "1", "--steps", "1", "--threads", "2",
                "--json-out", jpath, "--markdown", mpath])
    if not check("driver exits 0", p.returncode == 0, p.stderr[-2000:]):
        return
    out = p.stdout
    check("stdout names the machine", "Machine:" in out and "PyTorch" in out, out[:300])
    check("stdout has goal lines", sum(1 for ln in out.splitlines()
                                       if ln.split()[:1] in (["PASS"], ["MISS"], ["N/A"])) >= len(SEQS) + 4)
    check("stdout has a step/GEMM verdict per T", all(
        any(ln.startswith(("PASS", "MISS")) and ("T=%d:" % t) in ln for ln in out.splitlines()) for t in SEQS))

    with open(jpath) as f:
        doc = json.load(f)
    peak = doc["peak"]["json"]
    check("peak measured", positive(peak.get("gemm_peak_gflops")) and positive(peak.get("theoretical_gflops")),
          str(peak))
    m = doc["machine"]
    check("machine header", all(m.get(k) for k in ("cpu", "torch_version", "ctrain_version", "date")) and
          m.get("threads") == 2, str(m))
    results = doc["results"]
    check("one result per seq", [r["T"] for r in results] == SEQS, str([r.get("T") for r in results]))
    runs = doc["runs"]
    check("three runs per seq", len(runs) == 3 * len(SEQS), str(len(runs)))
    for r in results:
        check_result(r, runs, peak)
    check("no hidden leftovers", not [n for n in os.listdir(tmp) if n.startswith(".")], str(os.listdir(tmp)))

    with open(mpath) as f:
        md = f.read().splitlines()
    rows = [ln for ln in md if ln.startswith("|") and ln.split("|")[1].strip().isdigit()]
    check("markdown: one row per seq", [int(ln.split("|")[1]) for ln in rows] == SEQS, "\n".join(rows))
    check("markdown: rows as wide as the header",
          all(ln.count("|") == md[[i for i, ln2 in enumerate(md) if ln2.startswith("| T |")][0]].count("|")
              for ln in rows) if any(ln.startswith("| T |") for ln in md) else False)


def test_precisions(tmp):
    """--precisions fp32,bf16: both precisions per length, each side told which, and each
    row's ratios taken between runs of its own precision."""
    jpath = os.path.join(tmp, "prec.json")
    p = driver(["--preset", "gpt2-tiny", "--batch", str(B), "--seqs", "16", "--rounds", "1",
                "--warmup", "1", "--steps", "1", "--threads", "2", "--precisions", "fp32,bf16",
                "--json-out", jpath])
    if not check("--precisions fp32,bf16 exits 0", p.returncode == 0, p.stderr[-2000:]):
        return
    with open(jpath) as f:
        doc = json.load(f)
    res, runs = doc["results"], doc["runs"]
    check("one result per precision", [(r["T"], r["precision"]) for r in res] ==
          [(16, "fp32"), (16, "bf16")], str([(r.get("T"), r.get("precision")) for r in res]))
    for r in runs:
        check("%s %s run reports its precision" % (r["side"], r["precision"]),
              r["json"].get("precision") == r["precision"], str(r["json"].get("precision")))
    for r in res:
        mine = {s: [x for x in runs if x["precision"] == r["precision"] and x["side"] == s]
                for s in ("ctrain", "pytorch", "gemm")}
        if any(len(v) != 1 for v in mine.values()):
            check("%s: one run per side" % r["precision"], False, str(mine))
            continue
        ct, pt = (statistics.median(mine[s][0]["json"]["step_s"]) for s in ("ctrain", "pytorch"))
        check("%s: the speed-up is between runs of that precision" % r["precision"],
              close(r["ratio_tokens_per_s"], pt / ct), "%r vs %r" % (r["ratio_tokens_per_s"], pt / ct))
        check("%s: step/GEMM uses that precision's GEMM-only run" % r["precision"],
              close(r["ratio_step_over_gemm"], ct / mine["gemm"][0]["json"]["gemm_s"]))
    check("a bf16 step/GEMM verdict", any(ln.startswith(("PASS", "MISS")) and "T=16 bf16:" in ln
                                          for ln in p.stdout.splitlines()), p.stdout[-800:])
    p = driver(["--precisions", "fp16"])
    check("--precisions fp16 exits 2", p.returncode == 2 and "--precisions" in p.stderr,
          p.stderr[-300:])


def test_failures(tmp):
    p = driver(["--seqs", "64,x"])
    check("bad --seqs exits 2", p.returncode == 2 and "--seqs" in p.stderr, p.stderr[-300:])
    p = subprocess.run([sys.executable, DRIVER, "--ctrain", "/bin/false", "--preset", "gpt2-tiny",
                        "--seqs", "8", "--rounds", "1", "--steps", "1",
                        "--json-out", os.path.join(tmp, "f.json")],
                       capture_output=True, text=True, timeout=60)
    check("failing child exits 1 and names it", p.returncode == 1 and "/bin/false" in p.stderr, p.stderr[-300:])
    check("failing run writes no JSON", not os.path.exists(os.path.join(tmp, "f.json")))
    p = subprocess.run([sys.executable, TORCH_SCRIPT, "--preset", "gpt2-tiny", "--seq", "33", "--json"],
                       capture_output=True, text=True, timeout=60)
    check("torch script: T past the context exits 2", p.returncode == 2 and "context" in p.stderr, p.stderr)


def test_same_model():
    """The benchmark's PyTorch model equals the golden reference model, and starts from GPT-2's init."""
    try:
        import torch
    except ImportError:
        check("torch importable", False, "run with /usr/bin/python3 (python3-torch)")
        return
    sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
    import gpt2_ref as R
    spec = importlib.util.spec_from_file_location("torch_gpt2_step", TORCH_SCRIPT)
    S = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(S)

    cfg = dict(S.PRESETS["gpt2-tiny"])
    ref_cfg = {"vocab_size": cfg["vocab"], "n_ctx": cfg["ctx"], "n_embd": cfg["embd"],
               "n_layer": cfg["layers"], "n_head": cfg["heads"]}
    # Random norms and biases too; matrices scaled up so that activations are of order one
    # (at GPT-2's init the tanh and exact GELU would agree to 1e-7 here).
    params = {n: t * 25 if t.dim() == 2 else t for n, t in R.init_params(ref_cfg, seed=7).items()}
    model = S.model_class()(cfg)
    names = {"ln_1": "ln_1", "ln_2": "ln_2", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj",
             "mlp.c_fc": "fc", "mlp.c_proj": "fc_proj"}
    mine = dict(model.named_parameters())
    with torch.no_grad():
        for n, t in params.items():
            dst = n
            for a, b in names.items():
                if ".%s." % a in n:
                    dst = n.replace(".%s." % a, ".%s." % b)
            w = t.t() if dst.endswith("weight") and t.dim() == 2 and dst.startswith("h.") else t
            mine[dst].copy_(w)
    g = torch.Generator().manual_seed(3)
    tok = torch.randint(0, cfg["vocab"], (3, 13), generator=g)
    x, y = tok[:, :-1], tok[:, 1:]
    loss = model(x, y)
    loss.backward()
    ref = {n: t.clone().requires_grad_(True) for n, t in params.items()}
    _, ref_loss = R.forward(ref, ref_cfg, x, y)
    ref_loss.backward()
    print("loss %r (golden %r)" % (loss.item(), ref_loss.item()))
    check("same loss as the golden model", abs(loss.item() - ref_loss.item()) < 1e-5 * abs(ref_loss.item()),
          "%r vs %r" % (loss.item(), ref_loss.item()))
    worst = 0.0
    for n, t in ref.items():
        dst = n
        for a, b in names.items():
            if ".%s." % a in n:
                dst = n.replace(".%s." % a, ".%s." % b)
        gm = mine[dst].grad
        gm = gm.t() if dst.endswith("weight") and gm.dim() == 2 and dst.startswith("h.") else gm
        worst = max(worst, ((gm - t.grad).abs().max() / t.grad.abs().max()).item())
    print("largest gradient difference: %g of the tensor's largest entry" % worst)
    check("same gradients as the golden model", worst < 1e-4, "%g" % worst)

    torch.manual_seed(0)
    demo = S.model_class()(S.PRESETS["gpt2-demo"])
    L = S.PRESETS["gpt2-demo"]["layers"]
    p = dict(demo.named_parameters())
    std_fc = p["h.0.fc.weight"].std().item()
    std_proj = p["h.0.fc_proj.weight"].std().item()
    check("init: matrices N(0, 0.02)", abs(std_fc / 0.02 - 1) < 0.03, "%g" % std_fc)
    check("init: residual projections 0.02/sqrt(2L)", abs(std_proj / (0.02 / math.sqrt(2 * L)) - 1) < 0.03,
          "%g" % std_proj)
    check("init: LayerNorm ones and zero biases",
          bool((p["ln_f.weight"] == 1).all()) and bool((p["h.1.attn.qkv.bias"] == 0).all()))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        test_driver(tmp)
        test_precisions(tmp)
        test_failures(tmp)
    test_same_model()
    if failures:
        print("%d check(s) failed: %s" % (len(failures), ", ".join(failures)))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
