#!/usr/bin/env python3
"""`ctrain bench step|kernels|gemm --config RUN.yaml [key=value ...]`: the benchmarks on
the user's own model and batch, read and planned as `ctrain train` reads and plans them.

usage: /usr/bin/python3 tests/cli/test_bench_config.py path/to/ctrain

  * bench step --config on a tiny LLaMA-shaped config (not a preset: 2 layers, 32
    channels, 4 heads with 2 KV heads, MLP 88, vocabulary 96): the JSON shows the
    config's model shape, micro-batch, sequence length, grad_accum, threads,
    recompute policy and attention tile; its FLOPs per step follow that shape (GQA +
    SwiGLU); the text output names the config and shows the shape;
  * key=value arguments override the file (train.batch_size, run.threads);
  * train.batch_size=auto takes the planner's micro-batch (`ctrain plan` agrees);
  * bench kernels and bench gemm take the same config (the kernels' shapes are its);
  * a LoRA config's step is its LoRA step: the adapters train (their parameter count in
    the JSON, FLOPs with the frozen base's weight gradients left out), the base frozen
    and, with lora.base_dtype=bf16, stored bf16; kernels and gemm say they time the full
    model's shapes;
  * --batch (or another shape option) with --config, a missing file and an unknown
    key exit 2 naming what is wrong.
"""
import json
import os
import subprocess
import sys
import tempfile

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


L, C, NH, NKV, F, V, NCTX = 2, 32, 4, 2, 88, 96, 64
B, T, ACC = 3, 24, 2


def step_flops(b, t):
    kv = C * NKV // NH
    w = L * (C * (C + 2 * kv) + C * C + 3 * C * F) + V * C
    return 6.0 * b * t * w + 12.0 * L * C * (t * (t + 1) / 2) * b


with tempfile.TemporaryDirectory() as tmp:
    cfg = os.path.join(tmp, "mine.yaml")
    with open(cfg, "w") as fh:
        fh.write("model:\n  arch: llama\n  n_layer: %d\n  n_head: %d\n  n_kv_head: %d\n"
                 "  n_embd: %d\n  n_ffn: %d\n  vocab_size: %d\n  n_ctx: %d\n"
                 "train:\n  batch_size: %d\n  seq_len: %d\n  grad_accum: %d\n"
                 "  recompute: light\nrun:\n  threads: 1\n  attention_tiles: 32x64\n"
                 % (L, NH, NKV, C, F, V, NCTX, B, T, ACC))

    rc, out, err = run("bench", "step", "--config", cfg, "--steps", "2", "--warmup", "1",
                       "--json")
    j = json.loads(out) if rc == 0 else {}
    if check(rc == 0 and j, "bench step --config runs: %s" % err.strip()[-300:]):
        m = j["model"]
        check(m == {"arch": "llama", "n_layer": L, "n_embd": C, "n_head": NH, "n_kv_head": NKV,
                    "n_ffn": F, "vocab_size": V, "n_ctx": NCTX},
              "the JSON shows the config's model shape: %s" % m)
        check((j["B"], j["T"], j["grad_accum"], j["threads"]) == (B, T, ACC, 1),
              "... its micro-batch, sequence length, grad_accum and threads: %s" %
              [j["B"], j["T"], j["grad_accum"], j["threads"]])
        check(j["recompute"] == "light" and j["activation_dtype"] == "fp32" and
              j["attention_tiles"] == "32x64", "... its recompute policy and attention tile")
        check(abs(j["flops_per_step"] - step_flops(B, T)) < 1e-6 * step_flops(B, T),
              "FLOPs per step follow the config's shape (GQA + SwiGLU)")
        check(j["config"] == cfg and cfg in j["preset"] and len(j["step_s"]) == 2 and
              all(s > 0 for s in j["step_s"]), "the result names the config; two timed steps")

    rc, out, err = run("bench", "step", "--config", cfg, "--steps", "1")
    check(rc == 0 and "from %s" % cfg in out and "4 heads (2 KV)" in out and "MLP 88" in out
          and "B=%d T=%d" % (B, T) in out and "grad_accum %d" % ACC in out,
          "the text output names the config and shows its shape: %s" % out[:400])

    rc, out, err = run("bench", "step", "--config", cfg, "train.batch_size=2", "run.threads=2",
                       "--steps", "1", "--json")
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and j.get("B") == 2 and j.get("threads") == 2,
          "key=value overrides win over the file: %s" % err.strip()[-200:])

    rc, out, err = run("bench", "step", "--config", cfg, "train.batch_size=auto",
                       "train.effective_batch=4", "--steps", "1", "--json")
    j = json.loads(out) if rc == 0 else {}
    rc2, out2, _ = run("plan", "--config", cfg, "train.batch_size=auto",
                       "train.effective_batch=4", "--json")
    plan = json.loads(out2) if rc2 == 0 else {}
    check(rc == 0 and rc2 == 0 and j.get("B") == plan.get("batch_size") and
          j["B"] * j["grad_accum"] == 4,
          "batch_size=auto benches the planner's micro-batch (%s, plan %s)" %
          (j.get("B"), plan.get("batch_size")))

    rc, out, err = run("bench", "kernels", "--config", cfg, "--filter", "gemm.qkv,attention",
                       "--repeat", "1", "--json")
    j = json.loads(out) if rc == 0 else {}
    qkv = [it for it in j.get("items", []) if it["name"] == "gemm.qkv.fwd"]
    check(rc == 0 and (j.get("B"), j.get("T")) == (B, T) and qkv and
          qkv[0]["shape"] == "M=%d N=%d K=%d" % (B * T, C + 2 * C * NKV // NH, C),
          "bench kernels --config times the config's shapes: %s" % (qkv[0]["shape"] if qkv else err))
    rc, out, err = run("bench", "gemm", "--config", cfg, "--reps", "1", "--json")
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and (j.get("B"), j.get("T")) == (B, T), "bench gemm --config too")

    # a LoRA run's step: r=4 on q_proj and v_proj (A: r x in, B: out x r)
    kv = C * NKV // NH
    adapters = L * (4 * (C + C) + 4 * (C + kv))
    w = L * (C * (C + 2 * kv) + C * C + 3 * C * F) + V * C
    lflops = 4.0 * B * T * w + 6.0 * B * T * adapters + 12.0 * L * C * (T * (T + 1) / 2) * B
    lora = ["lora.r=4", "lora.alpha=8", "lora.targets=q_proj,v_proj"]
    rc, out, err = run("bench", "step", "--config", cfg, *lora, "--steps", "2", "--json")
    j = json.loads(out) if rc == 0 else {}
    rcf, outf, _ = run("bench", "step", "--config", cfg, "--steps", "1", "--json")
    jf = json.loads(outf) if rcf == 0 else {}
    if check(rc == 0 and j and jf, "bench step on a LoRA config runs: %s" % err.strip()[-300:]):
        check(j["lora"] == {"r": 4, "alpha": 8, "targets": j["lora"]["targets"],
                            "base_dtype": "fp32"} and jf["lora"] is None,
              "the JSON names the adapters (none for the full model): %s" % j["lora"])
        check(j["trainable"] == adapters and jf["trainable"] > w,
              "AdamW updates the adapters only: %d trainable, want %d (full model %d)" %
              (j["trainable"], adapters, jf["trainable"]))
        check(abs(j["flops_per_step"] - lflops) < 1e-6 * lflops,
              "FLOPs per step: the frozen base's forward and input gradient, the adapters' "
              "three GEMMs (%.6g, want %.6g)" % (j["flops_per_step"], lflops))
    rc, out, err = run("bench", "step", "--config", cfg, *lora, "lora.base_dtype=bf16",
                       "--steps", "1")
    check(rc == 0 and "LoRA r=4 on 2 modules a layer, base bf16" in out,
          "the text output names the adapters and the base's dtype: %s" % (out + err)[:400])
    rc, out, err = run("bench", "kernels", "--config", cfg, *lora, "--filter", "gemm.qkv",
                       "--repeat", "1", "--json")
    check(rc == 0 and "full model's shapes" in err,
          "bench kernels on a LoRA config says it times the full model's shapes: %s" % err[-200:])

    for args, words in ((["--batch", "4"], ["--batch", "train.batch_size"]),
                        (["--preset", "gpt2"], ["--preset", "model.preset"]),
                        (["--threads", "2"], ["--threads", "run.threads"])):
        rc, out, err = run("bench", "step", "--config", cfg, *args)
        check(rc == 2 and all(w in err for w in words),
              "%s with --config exits 2 naming %s: %s" % (args[0], words[1], err.strip()[:160]))
    rc, out, err = run("bench", "step", "--config", os.path.join(tmp, "none.yaml"))
    check(rc == 2 and "none.yaml" in err, "a missing config exits 2 naming it")
    rc, out, err = run("bench", "step", "--config", cfg, "train.bogus=1")
    check(rc == 2 and "train.bogus" in err, "an unknown key exits 2 naming it")

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
