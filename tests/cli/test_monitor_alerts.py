#!/usr/bin/env python3
"""The training monitor and its alerts through the real program.

usage: /usr/bin/python3 tests/cli/test_monitor_alerts.py path/to/ctrain

A short run of the demo model (gpt2-demo on synthetic shards) with the defaults:
  * every train line of metrics.jsonl carries the monitor's keys; the time split
    (data, forward, backward, optimizer, comm = 0) sums to about the step time;
    gflops is the 6N + attention FLOP count of the step over its time; mfu and
    mfu_theory are gflops over the peaks run.dir/hw.json records; RSS, peak RSS,
    arena bytes, the limit and the plan (equal to `ctrain plan --json`) are there;
  * run.dir/hw.json holds the `ctrain hw --json` profile and the measured peak;
  * MFU's peak is the measured one, or the theoretical one once the measured one is
    set aside (below 10% of the theoretical: measured while busy, logged) or beaten by
    a step (logged); never a step's own rate, so MFU never reads ~100% because the
    start-up peak ran in a busy moment (alerts.gemm_peak_gflops=0.001 makes every step
    beat it: MFU is then gflops / the theoretical peak, < 99%, and the log says so);
  * TensorBoard gets perf/*, memory/* and alerts/* scalars;
  * the progress line shows MFU; no memory or loss alert fires, and throughput
    or data-wait ones only when the run's figures show them (a loaded machine).
The same run with low thresholds (memory fractions tiny, a loss ceiling inside
the loss curve of the first run, a data-wait share near 0 without prefetch, an
unreachable expected rate):
  * each kind is reported on entering its level and not again while it stays
    (repeat_every=0), the loss alert once per crossing of the ceiling (counted
    from the first run's losses) and cleared in between; values and thresholds
    match the train lines; warm-up steps are not judged on time;
  * the log has a warning per report and the progress line shows the alert;
  * alerts.repeat_every=3 repeats a standing alert every 3 steps;
  * contradictory thresholds exit 2 naming the key and write nothing.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
import tb_reader  # noqa: E402

CTRAIN = os.path.abspath(sys.argv[1])
failures = 0

NEW_KEYS = ["t_data_ms", "t_fwd_ms", "t_bwd_ms", "t_opt_ms", "t_comm_ms", "gflops", "mfu",
            "mfu_theory", "rss_bytes", "rss_peak_bytes", "arena_bytes", "mem_limit_bytes",
            "plan_bytes", "major_faults"]
OLD_KEYS = ["loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "skipped", "spike", "rollback",
            "data_wait_ms", "mem_bytes"]
HW_FIELDS = ["cpu_model", "physical_cores", "logical_cpus", "threads_per_core", "allowed_cpus",
             "cpu_quota", "l1d_bytes", "l2_bytes", "l3_bytes", "avx2", "fma", "avx512f",
             "avx512_bf16", "amx", "neon", "ram_bytes", "cgroup_limit_bytes",
             "memory_available_bytes", "gpu", "gpu_name", "nominal_mhz", "theoretical_gflops",
             "signature", "blas_corename", "openblas_coretype"]
ALERT_KEYS = ["step", "split", "level", "kind", "value", "threshold", "message"]


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1
    return ok


def close(a, b, rel):
    return a is not None and b is not None and abs(a - b) <= rel * abs(b)


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        lines = [json.loads(ln) for ln in f if ln.strip()]
    return ([x for x in lines if x["split"] == "train"],
            [x for x in lines if x["split"] == "alert"], lines)


def step_flops(L, C, V, F, B, T):
    """Model FLOPs of a training step: 6 per weight per token, causal attention."""
    N = B * T
    gemm = 6.0 * N * (L * (3 * C * C + C * C + 2 * C * F) + V * C)
    return gemm + 12.0 * L * C * (T * (T + 1) / 2.0) * B


def mfu_expected(train, hw, err):
    """The monitor's MFU per train line: gflops over the peak in use, which starts
    as hw.json's (the theoretical one when the log says the measured one was set
    aside) and becomes the theoretical one when a step beats it (None, n/a, when
    a step beats that too)."""
    theory = hw["theoretical_gflops"]
    peak = hw.get("gemm_peak_gflops", 0)
    if "of the theoretical" in err and "the machine was busy" in err:
        peak = theory
    out = []
    for x in train:
        if peak > 0 and x["gflops"] > peak:
            peak = theory if theory > x["gflops"] else 0
        out.append(x["gflops"] / peak if peak > 0 else None)
    return out


def mfu_matches(train, hw, err, rel):
    return all((m is None and x["mfu"] is None) or
               (m is not None and x["mfu"] is not None and close(x["mfu"], m, rel))
               for x, m in zip(train, mfu_expected(train, hw, err)))


def tb_scalars(d):
    ev = [f for f in os.listdir(d) if f.startswith("events.out.tfevents")]
    if len(ev) != 1:
        return {}
    events, _ = tb_reader.read_events(os.path.join(d, ev[0]))
    out = {}
    for e in events:
        for tag, v in e["values"]:
            out.setdefault(tag, {})[e["step"]] = v
    return out


with tempfile.TemporaryDirectory() as tmp:
    shard = os.path.join(tmp, "train.bin")
    rc, _, err = run("synth", "--out", shard, "--tokens", "60000", "--vocab", "512")
    check(rc == 0, "synth: %s" % err.strip()[-200:])
    B, T, L, C, V = 4, 64, 4, 128, 512
    model = ["model.preset=gpt2-demo", "model.vocab_size=%d" % V, "train.batch_size=%d" % B,
             "train.seq_len=%d" % T, "run.threads=2", f"data.train={shard}"]
    steps = 12

    # ------------------------------------------------------------ defaults
    da = os.path.join(tmp, "defaults")
    rc, _, err = run("train", *model, f"train.steps={steps}", f"run.dir={da}")
    check(rc == 0, "a run with the defaults trains: %s" % err.strip()[-300:])
    rc2, out, _ = run("plan", *model, "--json")
    plan = json.loads(out) if rc2 == 0 else {}
    train, alerts, _ = metrics(da)
    check(len(train) == steps, "one train line per step")
    missing = sorted({k for x in train for k in OLD_KEYS + NEW_KEYS if k not in x})
    check(not missing, "every train line has the old and the monitor's keys (missing %s)" % missing)
    # With the defaults nothing fires on this machine at rest. The timed kinds
    # may fire for real when neighbours load the cores (the run then is slow
    # or starved, which is what they report), so any such report must agree
    # with the run's own figures; memory and loss must stay silent.
    check(not [a for a in alerts if a["kind"] in ("memory", "loss")],
          "no memory or loss alert with the defaults: %s" % alerts[:2])
    rows0 = {x["step"]: x for x in train}
    with open(os.path.join(da, "hw.json")) as f:
        hw = json.load(f)
    expected = 0.10 * hw.get("gemm_peak_gflops", 0) * 1e9 / (step_flops(L, C, V, 4 * C, B, T) / (B * T))
    frac = {"warning": 0.5, "critical": 0.25}
    dwf = {"warning": 0.1, "critical": 0.3}
    for a in alerts:
        k = a["step"]
        if a["kind"] == "throughput":
            win = sorted(rows0[i]["tokens_per_s"] for i in range(max(6, k - 4), k + 1))
            med = (win[len(win) // 2] if len(win) % 2 else
                   (win[len(win) // 2 - 1] + win[len(win) // 2]) / 2)
            check(k > 5 and close(a["value"], med, 1e-6) and
                  close(a["threshold"], frac[a["level"]] * expected, 2e-3) and
                  a["value"] < a["threshold"],
                  "a throughput report under load agrees with the run's figures: %s" % a)
        if a["kind"] == "data_wait":
            x = rows0[k]
            check(k > 5 and close(a["value"], x["t_data_ms"], 1e-6) and x["t_data_ms"] >= 1 and
                  x["t_data_ms"] > dwf[a["level"]] * x["step_ms"],
                  "a data-wait report under load agrees with the run's figures: %s" % a)
    if alerts:
        print("note: the machine was busy; timed alerts fired for real: %s" %
              [(a["step"], a["kind"], a["level"]) for a in alerts])
    else:
        check(not any("alert" in ln and "GEMM peak" not in ln for ln in err.splitlines()),
              "no alert in the log")
    check(all(k in hw for k in HW_FIELDS), "hw.json has every `ctrain hw --json` field")
    # the peak MFU counts against: measured, or the theoretical one when the measured
    # peak read implausibly low (a busy machine)
    check(hw.get("gemm_peak_gflops", 0) > 0 and hw.get("gemm_peak_source") in
          ("measured", "theoretical (the measured peak read low)") and
          hw.get("gemm_n", 0) > 0 and hw.get("threads") == 2,
          "hw.json records the GEMM peak MFU uses: %s" %
          {k: hw.get(k) for k in ("gemm_peak_gflops", "gemm_peak_source", "gemm_n", "threads")})
    flops = step_flops(L, C, V, 4 * C, B, T)
    split_sum = sum(x["t_data_ms"] + x["t_fwd_ms"] + x["t_bwd_ms"] + x["t_opt_ms"] + x["t_comm_ms"]
                    for x in train)
    total = sum(x["step_ms"] for x in train)
    check(0.95 * total <= split_sum <= total * 1.0001,
          "the split sums to the step time: %.2f of %.2f ms" % (split_sum, total))
    check(all(x["t_fwd_ms"] > 0 and x["t_bwd_ms"] > 0 and x["t_opt_ms"] > 0 and
              x["t_data_ms"] >= 0 for x in train), "forward, backward, optimizer times positive")
    check(all(x["t_comm_ms"] == 0 for x in train), "communication is 0 without data parallelism")
    check(all(x["t_data_ms"] == x["data_wait_ms"] for x in train), "t_data_ms is the data wait")
    check(all(close(x["gflops"] * x["step_ms"] * 1e6, flops, 1e-6) for x in train),
          "gflops x step time = 6N + attention FLOPs (%.4g)" % flops)
    check(all(close(x["tokens_per_s"] * x["step_ms"] / 1e3, B * T, 1e-6) for x in train),
          "tokens/s x step time = B*T")
    # the measured peak, or the theoretical one once it was set aside or beaten
    check(mfu_matches(train, hw, err, 2e-3),
          "mfu = gflops / the measured GEMM peak (or the theoretical one): %s vs %s" %
          ([x["mfu"] for x in train][:4], mfu_expected(train, hw, err)[:4]))
    check(all(x["mfu"] is None or x["mfu"] < 0.99 or x["gflops"] >= 0.99 * hw["theoretical_gflops"]
              for x in train), "MFU never reads ~100%% against a low start-up peak")
    check(hw["theoretical_gflops"] > 0 and
          all(close(x["mfu_theory"], x["gflops"] / hw["theoretical_gflops"], 2e-3) for x in train),
          "mfu_theory = gflops / the theoretical peak")
    check(all(0 < x["rss_bytes"] <= x["rss_peak_bytes"] for x in train), "0 < RSS <= peak RSS")
    check(all(x["rss_peak_bytes"] >= x["arena_bytes"] > 0 for x in train),
          "peak RSS holds ctrain's tracked memory")
    check(all(x["arena_bytes"] == x["mem_bytes"] for x in train), "arena_bytes is the tracked use")
    # the plan measures the process's own baseline (process_bytes), which moves by
    # a few pages from one process to the next: the rest is computed and the same.
    # A busy machine has moved a plan's baseline by more once: `ctrain plan` is asked
    # again (up to twice) before the check fails, and the failure gives the numbers.
    def plan_agrees(p):
        return all(abs(x["plan_bytes"] - p.get("total_bytes", 0)) <= 1 << 20 and
                   x["mem_limit_bytes"] == p.get("limit_bytes") for x in train)
    plans = [plan]
    while not plan_agrees(plans[-1]) and len(plans) < 3:
        rc3, out3, _ = run("plan", *model, "--json")
        plans.append(json.loads(out3) if rc3 == 0 else {})
    check(plan_agrees(plans[-1]),
          "plan_bytes and mem_limit_bytes are `ctrain plan`'s (within the measured baseline's "
          "jitter, 1 MiB): train %s / %s, plan %s / %s (process %s)"
          % (sorted({x["plan_bytes"] for x in train}), sorted({x["mem_limit_bytes"] for x in train}),
             [q.get("total_bytes") for q in plans], [q.get("limit_bytes") for q in plans],
             [q.get("process_bytes") for q in plans]))
    check(all(x["major_faults"] >= 0 and x["major_faults"] == int(x["major_faults"])
              for x in train), "major faults are counts")
    tb = tb_scalars(da)
    want = ["perf/t_fwd_ms", "perf/t_bwd_ms", "perf/t_opt_ms", "perf/t_data_ms", "perf/gflops",
            "perf/mfu", "perf/mfu_theory", "memory/rss_bytes", "memory/rss_peak_bytes",
            "memory/arena_bytes", "alerts/memory", "alerts/throughput", "alerts/loss",
            "alerts/data_wait"]
    check(all(len(tb.get(k, {})) == steps for k in want),
          "TensorBoard has perf/*, memory/* and alerts/* at every step (missing %s)" %
          [k for k in want if len(tb.get(k, {})) != steps])
    check(all(v == 0 for k in want if k.startswith("alerts/") for v in tb.get(k, {}).values())
          or alerts, "TensorBoard alert levels stay 0")
    prog = [ln for ln in err.splitlines() if ln.startswith("step ") and " | loss " in ln]
    check(prog and all(" | MFU " in ln and "%" in ln.split(" | MFU ")[1] for ln in prog),
          "the progress line shows MFU: %s" % (prog[-1] if prog else err[-200:]))
    losses = [x["loss"] for x in train]

    # ------------------------------------------------------- low thresholds
    # a loss ceiling inside the first run's curve (the same data and seed
    # give the same losses): the alert enters at each upward crossing
    srt = sorted(losses)
    ceiling = (srt[len(srt) // 2 - 1] + srt[len(srt) // 2]) / 2
    entries = sum(1 for i, v in enumerate(losses) if v > ceiling and (i == 0 or losses[i - 1] <= ceiling))
    clears = sum(1 for i, v in enumerate(losses) if v <= ceiling and i > 0 and losses[i - 1] > ceiling)
    db = os.path.join(tmp, "low")
    low = [f"train.steps={steps}", "alerts.memory_warning=1e-6", "alerts.memory_critical=2e-6",
           f"alerts.loss_warning={ceiling!r}", "alerts.loss_critical=1000",
           "data.prefetch=0", "alerts.data_wait_warning=1e-9", "alerts.data_wait_critical=0",
           "alerts.data_wait_min_ms=0",
           "alerts.expected_tokens_per_s=1e12", "alerts.warmup_steps=2", "alerts.repeat_every=0",
           "alerts.gemm_peak_gflops=100000"]
    rc, _, err = run("train", *model, *low, f"run.dir={db}")
    check(rc == 0, "a run with low thresholds trains: %s" % err.strip()[-300:])
    train2, alerts, lines = metrics(db)
    check([x["loss"] for x in train2] == losses, "the same losses as the first run")
    check(all(list(a.keys()) == ALERT_KEYS for a in alerts),
          "alert lines carry exactly %s" % ALERT_KEYS)
    by = {}
    for a in alerts:
        by.setdefault(a["kind"], []).append(a)
    rows = {x["step"]: x for x in train2}
    mem = by.get("memory", [])
    check(len(mem) == 1 and mem[0]["step"] == 1 and mem[0]["level"] == "critical",
          "memory: one critical report at step 1, none while it stands: %s" % mem)
    if mem:
        limit = rows[1]["mem_limit_bytes"]
        check(mem[0]["value"] == rows[1]["rss_bytes"] and close(mem[0]["threshold"], 2e-6 * limit, 1e-6)
              and "run.memory_limit" in mem[0]["message"],
              "memory: value = RSS, threshold = 2e-6 x the limit (bytes)")
    lo = by.get("loss", [])
    check(len(lo) == entries and all(a["level"] == "warning" for a in lo),
          "loss: one warning per upward crossing of %.4f (%d expected, got %d)" %
          (ceiling, entries, len(lo)))
    # the threshold is the config's value as a float, printed to 9 digits: equal to the
    # ceiling only where the ceiling's decimal form is that short
    check(all(a["value"] == rows[a["step"]]["loss"] and close(a["threshold"], ceiling, 1e-7) and
              rows[a["step"]]["loss"] > ceiling for a in lo), "loss: value = the step's loss")
    check(err.count("loss back to normal") == clears,
          "loss: cleared in the log at each downward crossing (%d)" % clears)
    dw = by.get("data_wait", [])
    check(len(dw) == 1 and dw[0]["step"] == 3 and dw[0]["level"] == "warning" and
          close(dw[0]["value"], rows[3]["t_data_ms"], 1e-6),
          "data wait: judged after the 2 warm-up steps, reported once, in ms: %s" % dw)
    tp = by.get("throughput", [])
    check(len(tp) == 1 and tp[0]["step"] == 3 and tp[0]["level"] == "critical" and
          close(tp[0]["value"], rows[3]["tokens_per_s"], 1e-6) and
          close(tp[0]["threshold"], 0.25e12, 1e-9),
          "throughput: critical after the warm-up, tokens/s against 25%% of the expected: %s" % tp)
    check(all(close(x["mfu"], x["gflops"] / 100000.0, 1e-9) for x in train2),
          "alerts.gemm_peak_gflops sets MFU's peak")
    with open(os.path.join(db, "hw.json")) as f:
        hw2 = json.load(f)
    check(hw2.get("gemm_peak_source") == "config" and hw2.get("gemm_peak_gflops") == 100000 and
          "gemm_n" not in hw2, "hw.json records the configured peak")
    # alert lines come before their step's train line
    order = [(x["step"], x["split"]) for x in lines if x["split"] in ("train", "alert")]
    check(all(order.index((a["step"], "alert")) < order.index((a["step"], "train")) for a in alerts),
          "each alert line precedes its step's train line")
    warns = [ln for ln in err.splitlines() if ln.startswith("warning: step ") and " alert" in ln]
    check(len(warns) == len(alerts), "one log warning per report (%d, %d)" % (len(warns), len(alerts)))
    prog = [ln for ln in err.splitlines() if ln.startswith("step ") and " | loss " in ln]
    check(prog and all(" | CRITICAL " in ln for ln in prog),
          "the progress line shows the standing alert: %s" % (prog[0] if prog else ""))
    tb = tb_scalars(db)
    check(all(v == 2 for v in tb.get("alerts/memory", {0: 0}).values()) and
          tb.get("alerts/throughput", {}).get(1) == 0 and tb.get("alerts/throughput", {}).get(3) == 2,
          "TensorBoard alert levels: memory 2 throughout, throughput 0 in warm-up then 2")

    # repeat_every=3: a standing alert is reported again every 3 steps
    dc = os.path.join(tmp, "repeat")
    rc, _, err = run("train", *model, "train.steps=7", "alerts.memory_warning=1e-6",
                     "alerts.memory_critical=0", "alerts.repeat_every=3",
                     "alerts.gemm_peak_gflops=0.001", f"run.dir={dc}")
    train3, alerts, _ = metrics(dc)
    check(rc == 0 and [a["step"] for a in alerts if a["kind"] == "memory"] == [1, 4, 7],
          "repeat_every=3 reports at steps 1, 4, 7: %s" % [a["step"] for a in alerts])
    # a peak no step can stay under (as when measured in a busy moment): MFU
    # counts against the theoretical peak from the first step, never against
    # the step itself (which would read 100%), and the log says so once
    with open(os.path.join(dc, "hw.json")) as f:
        theory = json.load(f)["theoretical_gflops"]
    check(all(close(x["mfu"], x["gflops"] / theory, 1e-6) and x["mfu"] < 0.99 for x in train3)
          and err.count("above the GEMM peak of 0.0 GFLOP/s measured at the start") == 1
          and "theoretical peak of" in err,
          "a step above the given peak: MFU = gflops / the theoretical peak (< 99%%), logged "
          "once (%s)" % [x["mfu"] for x in train3])

    # contradictory thresholds
    dd = os.path.join(tmp, "bad")
    rc, _, err = run("train", *model, "train.steps=2", "alerts.memory_warning=0.99",
                     "alerts.memory_critical=0.9", f"run.dir={dd}")
    check(rc == 2 and "alerts.memory_warning" in err and "alerts.memory_critical" in err and
          not os.path.exists(dd), "warning above critical exits 2 naming the keys: %s" %
          err.strip()[:200])
    rc, _, err = run("train", *model, "train.steps=2", "alerts.data_wait_warning=2",
                     f"run.dir={dd}")
    check(rc == 2 and "alerts.data_wait_warning" in err and not os.path.exists(dd),
          "an out-of-range share exits 2 naming the key")

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
