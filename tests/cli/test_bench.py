#!/usr/bin/env python3
"""`ctrain bench` through the real program, on tiny shapes (a smoke test of the
benchmarks' plumbing, not a timing test: no figure is compared with a speed).

usage: /usr/bin/python3 tests/cli/test_bench.py path/to/ctrain

Checks that every benchmark runs and reports what it claims:
  * peak: positive GEMM peak, FMA ceiling, theoretical figure and bandwidth;
  * kernels: every kernel of the table is reported once per linear and pass (15 GEMMs,
    attention forward and backward, norms, GELU, residual, encoder, cross-entropy,
    AdamW, sumsq) with positive time and a roofline time; FLOPs of each GEMM equal 2MNK
    of its printed shape; --filter keeps only matching names; --table ref runs too;
    --device sim runs the suite on sim's backend
    (and has the fused c_fc+GELU rows, which the cpu table has not);
  * step: the per-kernel split plus the glue adds up to the summed step times, the
    FLOPs equal the model formula, every recompute/activation-dtype setting runs and
    gives the same first loss (the forward does not depend on them), and the planned
    bytes shrink from none to full;
  * step on llama-tiny: FLOPs with grouped KV heads and SwiGLU, RoPE/RMSNorm/SwiGLU timed;
  * gemm: the GEMM-only step's FLOPs equal 6 x tokens x the GEMM weights;
  * bad options exit 2 with the option named.
"""
import json
import re
import subprocess
import sys

CTRAIN = sys.argv[1]
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what)
    if not ok:
        failures += 1


def run(*args, rc=0):
    p = subprocess.run([CTRAIN, "bench", *args], capture_output=True, text=True, timeout=300)
    if p.returncode != rc:
        print("command: ctrain bench", " ".join(args))
        print(p.stdout[-2000:], p.stderr[-2000:])
    check(p.returncode == rc, "ctrain bench %s exits %d" % (" ".join(args), rc))
    return p


TINY = ["--preset", "gpt2-tiny", "--batch", "2", "--seq", "16", "--threads", "2"]
L, C, V, NH = 2, 16, 64, 2  # gpt2-tiny
F = 4 * C

p = run("peak", "--peak-n", "256", "--reps", "2", "--threads", "2", "--json")
peak = json.loads(p.stdout)
# run.gemm=auto: what `ctrain hw` says auto runs on this machine
AUTO = json.loads(subprocess.run([CTRAIN, "hw", "--json", "--no-bench"], capture_output=True,
                                 text=True, timeout=120).stdout).get("gemm_auto")
for k in ("gemm_peak_gflops", "fma_peak_gflops", "theoretical_gflops", "membw_gbps"):
    check(peak.get(k, 0) > 0, "peak reports %s > 0 (%s)" % (k, peak.get(k)))
# both GEMM libraries' peaks, the one in use (run.gemm) equal to the headline figure
check(AUTO in ("onednn", "openblas") and peak.get("gemm") == "openblas" and
      peak.get("gemm_peak_openblas_gflops") == peak.get("gemm_peak_gflops") and
      (peak.get("gemm_peak_onednn_gflops", 0) > 0 or peak.get("gemm_peak_onednn_gflops") == -1),
      "peak reports each GEMM library's sgemm peak (%s)" % peak)
p = run("peak", "--peak-n", "256", "--reps", "2", "--threads", "2", "--gemm", "auto", "--json")
auto = json.loads(p.stdout)
check(auto.get("gemm") == AUTO and auto.get("gemm_peak_gflops") ==
      auto.get("gemm_peak_%s_gflops" % auto.get("gemm")), "--gemm auto measures the library "
      "it picks (%s)" % auto)

p = run("kernels", *TINY, "--json")
ker = json.loads(p.stdout)
names = [it["name"] for it in ker["items"]]
want = ["gemm.%s.%s" % (l, s) for l in ("qkv", "attn_proj", "fc", "fc_proj", "head")
        for s in ("fwd", "bwd_input", "bwd_weight")]
want += ["gemm_bf16.%s.bwd" % l for l in ("qkv", "attn_proj", "fc", "fc_proj")]
want += ["attention.fwd", "attention.bwd", "layernorm.fwd", "layernorm.bwd",
         "layernorm.fused_fwd", "residual.fwd",
         "residual.bwd", "gelu.fwd", "gelu.bwd", "encoder.fwd", "encoder.bwd", "crossentropy",
         "adamw", "sumsq"]
# precision bf16's entries of the cpu table: its attention, the kept bf16 operands' producers
# and the GEMM on a kept bf16 input beside the same GEMM on an fp32 one
want += ["attention_bf16.fwd", "attention_bf16.bwd", "layernorm.fused_fwd16", "gelu.fwd16",
         "gemm_bf16.fc_proj.fwd", "gemm_bf16.fc_proj.fwd_in16"]
check(sorted(names) == sorted(want), "kernels lists each kernel once: %s" % names)
check(all(it["seconds"] > 0 and it["roofline_s"] > 0 for it in ker["items"]),
      "every kernel has a positive time and roofline time")
ok = True
for it in ker["items"]:
    if it["name"].startswith("gemm."):
        m = re.match(r"M=(\d+) N=(\d+) K=(\d+)", it["shape"])
        M, N, K = map(int, m.groups())
        ok &= abs(it["flops"] - 2.0 * M * N * K) < 1e-6 * it["flops"]
check(ok, "each GEMM's FLOPs are 2MNK of its shape")
qkv = [it for it in ker["items"] if it["name"] == "gemm.qkv.fwd"][0]
check(qkv["shape"] == "M=32 N=%d K=%d" % (3 * C, C), "qkv forward shape is N x 3C x C")

p = run("kernels", *TINY, "--filter", "attention", "--json")
check([it["name"] for it in json.loads(p.stdout)["items"]] ==
      ["attention.fwd", "attention.bwd", "attention_bf16.fwd", "attention_bf16.bwd"],
      "--filter keeps only the matching kernels")
p = run("kernels", *TINY, "--filter", "gelu", "--table", "ref", "--json")
check(json.loads(p.stdout)["table"] == "ref", "--table ref measures the ref table")
# the fused c_fc+GELU entry: rows where the table has it (ref; cuda), none on cpu (above)
fused = [it["name"] for it in json.loads(p.stdout)["items"] if "fc_gelu" in it["name"]]
check(fused == ["gemm.fc_gelu.fwd", "gemm_bf16.fc_gelu.fwd", "gemm_bf16.fc_gelu.fwd_in16"],
      "ref's table has the fused c_fc+GELU rows, fp32, bf16 and on a kept bf16 input: %s"
      % fused)
# the bf16 head's rows: where the table has its entries (ref; cuda), none on cpu (above)
p = run("kernels", *TINY, "--filter", "bf16", "--table", "ref", "--json")
head16 = [it["name"] for it in json.loads(p.stdout)["items"] if "head16" in it["name"] or
          it["name"] == "crossentropy_bf16"]
check(head16 == ["gemm_bf16.head16.fwd", "crossentropy_bf16", "gemm_bf16.head16.bwd_input",
                 "gemm_bf16.head16.bwd_weight"],
      "ref's table has the bf16 head's rows: %s" % head16)
# --device: the suite on a device's backend (sim here; cuda on a GPU, its roofline from
# cuBLAS's peaks), where the bf16 head's rows are; sim has no peaks: no roofline
p = run("kernels", *TINY, "--filter", "gelu,head16", "--device", "sim", "--json")
k = json.loads(p.stdout)
check(k["table"] == "sim" and k["roofline_valid"] is False and
      {it["name"] for it in k["items"]} >= {"gelu.fwd", "gelu.bwd", "gemm_bf16.head16.fwd"} and
      all(it["seconds"] > 0 and it["level"] == "device" for it in k["items"]),
      "--device sim: the kernels on sim's backend, each on the device: %s"
      % [(it["name"], it["level"]) for it in k["items"]])
# --no-roofline: the kernels alone (no peak or stream measured), as under a profiler
p = run("kernels", *TINY, "--filter", "gelu", "--no-roofline", "--json")
k = json.loads(p.stdout)
check(k["roofline_valid"] is False and k["fma_peak_gflops"] == 0 and len(k["items"]) == 3 and
      all(it["roofline_s"] == 0 and it["seconds"] > 0 for it in k["items"]),
      "--no-roofline: the kernels timed, no roofline measured")
# precision bf16's kept GEMM operands: the bf16-output norm and activation, and the
# GEMM on an fp32 input beside the same GEMM on the kept bf16 one (ref, cpu; cuda), the
# fused c_fc+GELU on a kept input where the table fuses them (ref; cuda); the linear's bf16
# backward on all
for preset, bwd, want in (("gpt2-tiny", "gemm_bf16.fc_proj.bwd",
                           ["layernorm.fused_fwd16", "gelu.fwd16",
                            "gemm_bf16.fc_proj.fwd", "gemm_bf16.fc_proj.fwd_in16",
                            "gemm_bf16.fc_gelu.fwd_in16"]),
                          ("llama-tiny", "gemm_bf16.down.bwd",
                           ["rmsnorm.fused_fwd16", "swiglu.fwd16", "gemm_bf16.down.fwd",
                            "gemm_bf16.down.fwd_in16"])):
    for table, rows in (("ref", [bwd] + want),
                        ("cpu", [bwd] + [w for w in want if "fc_gelu" not in w])):
        p = run("kernels", "--preset", preset, "--batch", "2", "--seq", "16", "--threads", "2",
                "--filter", "fused_fwd16,fwd16,fc_proj,down,fwd_in16", "--table", table,
                "--json")
        got = [it["name"] for it in json.loads(p.stdout)["items"] if "16" in it["name"] or
               it["name"].startswith("gemm_bf16.")]
        check(got == rows, "%s on %s: the kept bf16 operands' rows %s" % (preset, table, got))
        check(all(it["seconds"] > 0 for it in json.loads(p.stdout)["items"]),
              "%s on %s: every row is timed" % (preset, table))

Bt, Tt = 2, 16
N = Bt * Tt
gemm_w = L * (3 * C * C + C * C + 2 * C * F) + V * C
model_flops = 6.0 * N * gemm_w + 12.0 * L * C * (Tt * (Tt + 1) / 2) * Bt
first_losses, planned = {}, {}
for rc in ("none", "light", "full"):
    for dt in ("fp32", "bf16"):
        p = run("step", *TINY, "--steps", "3", "--warmup", "1", "--recompute", rc,
                "--activation-dtype", dt, "--json")
        st = json.loads(p.stdout)
        first_losses[(rc, dt)] = st["loss"][0]
        planned[(rc, dt)] = st["planned_bytes"]
        if rc == "none" and dt == "fp32":
            total = sum(st["step_s"])
            split = sum(st["split_s"].values()) * len(st["step_s"])
            check(len(st["step_s"]) == 3 and all(s > 0 for s in st["step_s"]),
                  "step: three positive step times")
            check(abs(split - total) <= 0.02 * total + 1e-4,
                  "step: split (%.6f s) adds up to the steps (%.6f s)" % (split, total))
            check(abs(st["flops_per_step"] - model_flops) < 1e-6 * model_flops,
                  "step: FLOPs per step follow the model formula")
            check(st["split_s"]["matmul_fwd"] > 0 and st["split_s"]["attention_bwd"] > 0 and
                  st["split_s"]["adamw"] > 0, "step: GEMM, attention and AdamW are timed")
            check(st["peak_rss_bytes"] > 0 and st["median_s"] > 0, "step: RSS and median")
base = first_losses[("none", "fp32")]
check(all(abs(v - base) <= 1e-6 * abs(base) for v in first_losses.values()),
      "step: the first loss is the same for every recompute / dtype: %s" % first_losses)
check(planned[("none", "fp32")] > planned[("light", "fp32")] > planned[("full", "fp32")],
      "step: the plan shrinks none > light > full")
check(planned[("none", "fp32")] > planned[("none", "bf16")], "step: bf16 storage plans less")
# mixed precision: the bf16 GEMMs change the loss a little and plan the bf16 weight copies
p = run("step", *TINY, "--steps", "2", "--warmup", "1", "--precision", "bf16", "--json")
st = json.loads(p.stdout)
check(st.get("precision") == "bf16" and 0 < abs(st["loss"][0] - base) <= 1e-2 * abs(base),
      "step --precision bf16: named, and its first loss near fp32's but not equal (%s vs %s)"
      % (st["loss"][0], base))
w16 = 2 * (V * C + L * 12 * C * C)   # the GEMM weights (tied head included) as bf16
Ns = 2 * 16                          # TINY's rows
inp16 = 2 * Ns * F                   # the widest GEMM input's bf16 copy, for weight gradients
# ln1, ln2 and the GELU output kept as their GEMMs' bf16 operands (2 bytes, not 4), their
# fp32 values in one work buffer (ln1 and ln2 share it; the GELU's is gradient scratch)
kept16 = 2 * L * Ns * (2 * C + F)
work = 4 * Ns * C
want = planned[("none", "fp32")] + w16 + inp16 + work - kept16
check(st["planned_bytes"] == want,
      "step --precision bf16 plans the bf16 weight copies and keeps the GEMM-only activations "
      "as bf16 (%d == %d + %d + %d + %d - %d)"
      % (st["planned_bytes"], planned[("none", "fp32")], w16, inp16, work, kept16))
run("step", *TINY, "--precision", "fp16", rc=2)

# LLaMA: grouped KV heads shrink the qkv weight, SwiGLU has three MLP matrices
Ll, Cl, Fl, Vl, kvl = 2, 32, 88, 64, 32 * 2 // 4  # llama-tiny: 4 heads, 2 KV heads
p = run("step", "--preset", "llama-tiny", "--batch", "2", "--seq", "16", "--threads", "2",
        "--steps", "2", "--warmup", "1", "--json")
st = json.loads(p.stdout)
lw = Ll * (Cl * (Cl + 2 * kvl) + Cl * Cl + 3 * Cl * Fl) + Vl * Cl
lflops = 6.0 * N * lw + 12.0 * Ll * Cl * (Tt * (Tt + 1) / 2) * Bt
check(abs(st["flops_per_step"] - lflops) < 1e-6 * lflops,
      "step llama-tiny: FLOPs per step follow the GQA + SwiGLU formula")
check(st["split_s"]["rope"] > 0 and st["split_s"]["norm_fwd"] > 0 and
      st["split_s"]["act_bwd"] > 0, "step llama-tiny: RoPE, RMSNorm and SwiGLU are timed")

p = run("kernels", "--preset", "llama-tiny", "--batch", "2", "--seq", "16", "--threads", "2",
        "--json")
names = [it["name"] for it in json.loads(p.stdout)["items"]]
check(all(n in names for n in ("rmsnorm.fwd", "rmsnorm.bwd", "rmsnorm.fused_fwd",
                               "swiglu.fwd", "swiglu.bwd",
                               "rope.fwd", "rope.bwd", "gemm.gate_up.fwd", "gemm.down.bwd_weight"))
      and not any(n.startswith(("layernorm", "gelu")) for n in names),
      "kernels llama-tiny: the LLaMA kernels replace LayerNorm and GELU: %s" % names)

p = run("gemm", "--preset", "llama-tiny", "--batch", "2", "--seq", "16", "--threads", "2",
        "--reps", "1", "--json")
check(abs(json.loads(p.stdout)["flops"] - 6.0 * N * lw) < 1e-6 * 6.0 * N * lw,
      "gemm llama-tiny: the replay has the LLaMA linears' shapes")

p = run("gemm", *TINY, "--reps", "2", "--json")
g = json.loads(p.stdout)
check(abs(g["flops"] - 6.0 * N * gemm_w) < 1e-6 * g["flops"],
      "gemm: FLOPs are 6 x tokens x the GEMM weights")
check(len(g["runs_s"]) == 2 and g["gemm_s_min"] <= g["gemm_s"] <= g["gemm_s_max"],
      "gemm: median within min..max")

for args, word in ((["bogus"], "bogus"), (["step", "--batch", "0"], "--batch"),
                   (["step", "--recompute", "most"], "recompute"),
                   (["kernels", "--table", "gpu"], "--table"),
                   (["kernels", "--device", "tpu"], "--device"),
                   (["peak", "--device", "sim"], "--device"),
                   (["kernels", "--device", "sim", "--table", "ref"], "--table"),
                   (["kernels", "--attention-tiles", "64x999"], "--attention-tiles"),
                   (["kernels", "--precision", "bf17"], "--precision"),
                   (["step", "--preset", "gpt9"], "gpt9"),
                   (["step", "--preset", "gpt2-tiny", "--seq", "33"], "--seq")):
    p = run(*args, rc=2)
    check(word in p.stderr, "bad option names %s: %s" % (word, p.stderr.strip()[:120]))

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
