#!/usr/bin/env python3
"""`ctrain tune` and tuned profiles through the real program.

usage: /usr/bin/python3 tests/cli/test_tune.py path/to/ctrain

  * `ctrain tune` on a tiny model with a budget of a few seconds exits 0, prints the trial
    table and the winner, and writes run.dir/profile.yaml: the config as given (batch
    4 x 2), plus tune.signature (this machine's, as `ctrain hw` prints it), tune.settings
    naming all six tuned keys, tune.tokens_per_s and tune.mfu of the best trial;
    `--json --out F` reports the same trials, every one with the effective batch kept,
    the config's settings first (repeated 3 times or more), and a winner that is the start
    or beat it by more than the noise band (test_tune_noise.py covers the noise);
  * `ctrain train --config profile.yaml` runs the tuned settings (the log says so and
    run.dir/config.yaml holds them), key=value overrides still win, and `ctrain plan`
    plans them;
  * the same profile with an edited signature warns, naming both signatures and "re-run
    ctrain tune", and runs the base settings;
  * `--level NAME` and `--level configs/levels/NAME.yaml` give the same configuration for
    every ready level, and the levels differ;
  * bad input exits 2 naming what is wrong: an unknown level, a level file with other
    keys, a bad tune.search, a memory limit nothing fits (no profile written), a bad
    tune.settings in a profile.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
LEVELS = os.path.normpath(os.path.join(HERE, "..", "..", "configs", "levels"))
CTRAIN = os.path.abspath(sys.argv[1])
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1
    return ok


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def settings_dict(text):
    return dict(kv.split("=", 1) for kv in text.split())


def flat(path):
    with open(path) as fh:
        d = yaml.safe_load(fh)
    return {"%s.%s" % (s, k): v for s, keys in d.items() for k, v in keys.items()}


with tempfile.TemporaryDirectory() as tmp:
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    rc, _, err = run("synth", "--out", P("s.bin"), "--tokens", "20000", "--vocab", "64")
    check(rc == 0, "synth")
    base = P("run.yaml")
    with open(base, "w") as fh:
        fh.write("model:\n  preset: gpt2-tiny\ndata:\n  train: %s\ntrain:\n  batch_size: 4\n"
                 "  seq_len: 16\n  grad_accum: 2\n  steps: 2\nrun:\n  dir: %s\n"
                 % (P("s.bin"), P("run")))
    rc, out, err = run("hw", "--json", "--no-bench")
    sig = json.loads(out)["signature"] if rc == 0 else None
    check(bool(sig), "ctrain hw gives the machine signature")

    # ------------------------------------------------------------ tune
    rc, out, err = run("tune", "--config", base, "--level", "basic", "tune.budget_s=4")
    check(rc == 0, "tune exits 0: %s" % err.strip()[-300:])
    check("best: run.threads=" in out and "profile written to" in out and "tokens/s" in out,
          "tune prints the table and the winner: %s" % out[-300:])
    prof = P("run", "profile.yaml")
    check(os.path.isfile(prof), "the profile is written to run.dir/profile.yaml")
    check(not [f for f in os.listdir(P("run")) if ".tmp." in f], "no temporary file is left")
    f = flat(prof)
    s = settings_dict(f["tune.settings"])
    check(f["tune.signature"] == sig, "tune.signature is this machine's (%s)" % f["tune.signature"])
    check(set(s) == {"run.threads", "train.batch_size", "train.grad_accum", "train.recompute",
                     "train.activation_dtype", "run.attention_tiles", "run.gemm"},
          "tune.settings names the seven tuned keys: %s" % f["tune.settings"])
    check(int(s["train.batch_size"]) * int(s["train.grad_accum"]) == 8,
          "the tuned batch keeps 4 x 2 = 8 sequences per step")
    check(f["tune.tokens_per_s"] > 0 and 0 < f["tune.mfu"] < 1.5 and f["tune.level"] == "basic",
          "tune.tokens_per_s, tune.mfu and tune.level are recorded")
    check(f["train.batch_size"] == 4 and f["train.grad_accum"] == 2 and f["data.train"] == P("s.bin"),
          "the profile holds the config as given")
    with open(prof) as fh:
        text = fh.read()
    check(re.search(r"^#\s+\d+\s+\d+\s+\d+ none\s+fp32 .*<- best$", text, re.M) is not None,
          "the profile's comment block lists the trials and marks the best")
    # why the library and the precision: the library's figures when the build has
    # both (basic searches it), and on a CPU without native bf16 why bf16 was not tried
    rc, hwo, _ = run("hw", "--json", "--no-bench")
    hwj = json.loads(hwo) if rc == 0 else {}
    why = re.findall(r"^# why: (.*)$", text, re.M)
    lib = s.get("run.gemm")
    check(len(why) == 2 and why[0].startswith("run.gemm=%s" % lib) and
          (("tokens/s" in why[0] and ("openblas" in why[0]) and ("onednn" in why[0]))
           if hwj.get("onednn_built") else "no oneDNN" in why[0]),
          "the profile says why its library: %s" % why)
    check(len(why) == 2 and why[1].startswith("train.precision=") and
          "tune.search has no dtype" in why[1],
          "basic does not search the precision, and says so: %s" % why[1:])

    rc, out, err = run("tune", "--config", base, "tune.budget_s=4", "--json", "--out", P("p2.yaml"))
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and j.get("trials"), "tune --json exits 0 with trials: %s" % err.strip()[-200:])
    if j.get("trials"):
        t = j["trials"]
        check(all(x["batch_size"] * x["grad_accum"] == 8 for x in t), "every trial keeps the batch")
        check(len({x["threads"] for x in t}) == j["cores"] and len({x["batch_size"] for x in t}) >= 2,
              "threads 1..cores and several micro-batches were tried")
        best, start = t[j["best"]], t[j["start"]]
        check(j["start"] == 0 and start["runs"] >= 3,
              "the config's own settings are the first trial, run 3 times or more")
        check(best["measured"] and (j["best"] == j["start"] or
                                    best["tokens_per_s"] > start["tokens_per_s"] * (1 + j["threshold"])),
              "the winner is the start, or faster than it by more than the noise band")
        check(all(x["tokens_per_s"] <= best["tokens_per_s"] *
                  (1 + max(x["spread"], best["spread"], 0.02)) * (1 + 1e-9)
                  or x["runs"] < 3 or j["unconfirmed"] for x in t if x["measured"]),
              "no repeated trial beat the winner by more than their noise")
        check(settings_dict(flat(P("p2.yaml"))["tune.settings"]) == settings_dict(j["settings"]),
              "--out holds the reported settings")
        # each trial is planned as train plans it: the start's plan is `ctrain plan`'s
        rc2, out2, err2 = run("plan", "--config", base, "run.threads=%d" % start["threads"],
                              "--json")
        pj = json.loads(out2) if rc2 == 0 else {}
        # (within the jitter of the process baseline each process measures of itself: a
        # few pages, up to 1.4 MiB seen in a clean-clone CI run, which is more than 1% of
        # a tiny model's plan)
        check(rc2 == 0 and abs(start["plan_bytes"] - pj.get("total_bytes", 0)) <=
              max(0.01 * pj.get("total_bytes", 1), 2 << 20),
              "the start's planned bytes equal `ctrain plan`'s (%s vs %s)" %
              (start.get("plan_bytes"), pj.get("total_bytes")))

    # a LoRA config is tuned as it trains: its trials are planned with the adapters (the
    # base frozen: no gradients or moments for it) and timed on its LoRA step. GPT-2
    # 124M, where that plan is a fraction of the full model's; synthetic timings
    lcfg = P("lora.yaml")
    with open(lcfg, "w") as fh:
        fh.write("model:\n  preset: gpt2\ndata:\n  train: %s\ntrain:\n  batch_size: 4\n"
                 "  seq_len: 32\n  steps: 2\nlora:\n  r: 8\nrun:\n  dir: %s\n"
                 % (P("s.bin"), P("lrun")))
    rc, out, err = run("tune", "--config", lcfg, "tune.search=batch", "tune.budget_s=2",
                       "debug.tune_fake=on", "--json", "--out", P("pl.yaml"))
    jl = json.loads(out) if rc == 0 else {}
    if check(rc == 0 and jl.get("trials"), "tune on a LoRA config runs: %s" % err.strip()[-300:]):
        start = jl["trials"][jl["start"]]
        plans = []
        for extra in ([], ["lora.r=0"]):
            rc2, out2, _ = run("plan", "--config", lcfg, "run.threads=%d" % start["threads"],
                               *extra, "--json")
            plans.append(json.loads(out2)["total_bytes"] if rc2 == 0 else 0)
        check(abs(start["plan_bytes"] - plans[0]) <= max(0.01 * plans[0], 2 << 20) and
              plans[0] < 0.8 * plans[1],
              "a LoRA config's trials are planned as the LoRA run (%s; `ctrain plan` %s, the full "
              "model's %s)" % (start["plan_bytes"], plans[0], plans[1]))

    # lora.base_dtype=auto: a bf16 trial of a LoRA config is planned with the base stored
    # bf16, as its run would store it (debug.emulate_bf16: bf16 is tried on any CPU)
    rc, out, err = run("tune", "--config", lcfg, "tune.search=dtype", "tune.budget_s=2",
                       "debug.tune_fake=on", "debug.emulate_bf16=true", "--json",
                       "--out", P("pl16.yaml"))
    jl = json.loads(out) if rc == 0 else {}
    by = {}
    for t in jl.get("trials", []):
        by.setdefault(t["precision"], t)
    if check(rc == 0 and set(by) == {"fp32", "bf16"},
             "tune tries both precisions on a LoRA config: %s" % (err.strip()[-300:] or by)):
        want = {}
        for prec in ("fp32", "bf16"):
            rc2, out2, _ = run("plan", "--config", lcfg, "train.precision=" + prec,
                               "debug.emulate_bf16=true", "run.threads=%d" % by[prec]["threads"],
                               "train.batch_size=%d" % by[prec]["batch_size"],
                               "train.grad_accum=%d" % by[prec]["grad_accum"], "--json")
            want[prec] = json.loads(out2)["total_bytes"] if rc2 == 0 else 0
        check(all(abs(by[k]["plan_bytes"] - want[k]) <= max(0.01 * want[k], 2 << 20)
                  for k in want) and want["bf16"] < want["fp32"],
              "its bf16 trial is planned with the base in bf16, as `ctrain plan` plans that run "
              "(%s; plan %s)" % ({k: by[k]["plan_bytes"] for k in by}, want))

    # a limit only full recompute fits: tune re-runs the fewest first blocks whose plan
    # stays within alerts.memory_warning (90%) of it, and the profile says how many
    # (4 blocks with heavy activations: light does not fit 80 MiB, full over the first
    # 3 blocks plans under 72 MiB, over 2 over 72)
    scfg = P("small.yaml")
    with open(scfg, "w") as fh:
        fh.write("model:\n  arch: gpt2\n  n_layer: 4\n  n_head: 2\n  n_embd: 64\n"
                 "  vocab_size: 256\n  n_ctx: 256\ndata:\n  train: %s\ntrain:\n"
                 "  batch_size: 16\n  seq_len: 256\n  steps: 2\nrun:\n  dir: %s\n"
                 "  threads: 1\n  memory_limit: 80MB\n" % (P("s256.bin"), P("srun")))
    run("synth", "--out", P("s256.bin"), "--tokens", "100000", "--vocab", "256")
    rc, out, err = run("tune", "--config", scfg, "tune.search=recompute", "tune.budget_s=5",
                       "debug.tune_fake=on", "--json", "--out", P("ps.yaml"))
    js = json.loads(out) if rc == 0 else {}
    plans = {}
    for k in (2, 3):
        rc2, out2, _ = run("plan", "--config", scfg, "train.recompute=full",
                           "train.recompute_layers=%d" % k, "run.memory_limit=1GB", "--json")
        plans[k] = json.loads(out2)["total_bytes"] if rc2 == 0 else 0
    win = js.get("trials", [{}])[js.get("best", 0)] if js.get("trials") else {}
    check(rc == 0 and win.get("recompute") == "full" and win.get("recompute_layers") == 3 and
          plans[3] <= 0.9 * 80 * 2**20 < plans[2] and
          "train.recompute_layers=3" in open(P("ps.yaml")).read(),
          "under a limit only full fits, tune re-runs the fewest blocks within the memory "
          "warning, and the profile says so: %s (plans %s)" % (win, plans))
    rc, out, err = run("plan", "--config", P("ps.yaml"), "--json")
    jp = json.loads(out) if rc == 0 else {}
    check(jp.get("recompute_layers") == 3 and jp.get("total_bytes", 1 << 40) <= 80 * 2**20,
          "the profile plans that run: %s" % {k: jp.get(k) for k in ("recompute",
                                                                        "recompute_layers",
                                                                        "total_bytes")})

    # the precision searched: bf16 is tried only where its GEMMs are native here
    # (`ctrain hw`'s bf16_precision_allowed), and the result says why either way
    rc, out, err = run("tune", "--config", base, "tune.search=dtype", "tune.budget_s=3", "--json",
                       "--out", P("p3.yaml"))
    j3 = json.loads(out) if rc == 0 else {}
    wp = j3.get("why_precision", "")
    tried = {x["precision"] for x in j3.get("trials", [])}
    if hwj.get("bf16_precision_allowed"):
        check(rc == 0 and "tokens/s" in wp and tried == {"fp32", "bf16"},
              "bf16 CPU: bf16 is tried and the figures say why: %s" % wp)
    else:
        check(rc == 0 and wp.startswith("train.precision=fp32: bf16 not tried") and
              hwj.get("bf16_gemm") in ("emulated", "widened") and hwj["bf16_gemm"] in wp and
              tried == {"fp32"},
              "no native bf16: bf16 is not tried and the profile says why: %s" % wp)

    # ------------------------------------------------------------ train with the profile
    rc, out, err = run("train", "--config", prof, "run.dir=" + P("t1"))
    check(rc == 0 and "tuned profile for this machine" in err,
          "train --config profile applies it: %s" % err.strip()[-300:])
    c = flat(P("t1", "config.yaml"))
    check(all(str(c[k]) == v for k, v in s.items()),
          "run.dir/config.yaml holds the tuned settings: %s" % {k: c[k] for k in s})
    rc, out, err = run("train", "--config", prof, "run.dir=" + P("t2"), "train.batch_size=8",
                       "train.grad_accum=1")
    c = flat(P("t2", "config.yaml")) if rc == 0 else {}
    check(rc == 0 and c.get("train.batch_size") == 8, "key=value overrides win over the profile")
    rc, out, err = run("plan", "--config", prof, "--json")
    check(rc == 0 and json.loads(out)["batch_size"] == int(s["train.batch_size"]),
          "plan --config profile plans the tuned batch")

    # ------------------------------------------------------------ another machine
    other = P("other.yaml")
    with open(other, "w") as fh:
        fh.write(text.replace(sig, "x86_64-0123456789abcdef"))
    rc, out, err = run("train", "--config", other, "run.dir=" + P("t3"))
    check(rc == 0 and "x86_64-0123456789abcdef" in err and sig in err
          and "re-run ctrain tune on this machine" in err,
          "a profile from another machine warns: %s" % err.strip()[:300])
    c = flat(P("t3", "config.yaml")) if rc == 0 else {}
    check(c.get("train.batch_size") == 4 and c.get("train.grad_accum") == 2
          and c.get("run.threads") == 0 and c.get("run.attention_tiles") == "auto",
          "... and runs the base settings")

    # ------------------------------------------------------------ levels
    printed = {}
    for name in ("basic", "advanced", "ultra"):
        path = os.path.join(LEVELS, name + ".yaml")
        rc1, a, e1 = run("tune", "--level", name, "--print-config")
        rc2, b, e2 = run("tune", "--level", path, "--print-config")
        check(rc1 == 0 and rc2 == 0 and a == b,
              "--level %s and configs/levels/%s.yaml agree %s" % (name, name, (e1 + e2).strip()[:200]))
        printed[name] = a
    check(len(set(printed.values())) == 3, "the three levels differ")

    # ------------------------------------------------------------ bad input
    rc, out, err = run("tune", "--config", base, "--level", "turbo")
    check(rc == 2 and "turbo" in err and "advanced" in err, "an unknown level exits 2: %s" % err.strip())
    rc, out, err = run("tune", "--config", base, "--level", base)
    check(rc == 2 and "tune.* keys only" in err, "a level file with other keys exits 2: %s" % err.strip())
    rc, out, err = run("tune", "--config", base, "tune.search=threads,warp")
    check(rc == 2 and "tune.search" in err and "warp" in err, "a bad tune.search exits 2")
    rc, out, err = run("tune", "--config", base, "run.memory_limit=1KB", "--out", P("none.yaml"))
    check(rc == 2 and "run.memory_limit" in err and not os.path.exists(P("none.yaml")),
          "a limit nothing fits exits 2 and writes nothing: %s" % err.strip()[:200])
    bad = P("bad.yaml")
    with open(bad, "w") as fh:
        fh.write(re.sub(r"^  settings: .*$", '  settings: "train.recompute=medium"', text, flags=re.M))
    rc, out, err = run("train", "--config", bad, "run.dir=" + P("t4"))
    check(rc == 2 and "bad.yaml: tune.settings" in err and "train.recompute" in err
          and not os.path.exists(P("t4")),
          "a bad tune.settings exits 2 naming the file and the key: %s" % err.strip()[:200])

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
