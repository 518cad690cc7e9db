#!/usr/bin/env python3
"""LoRA training parity: ctrain against PyTorch (lora_ref.py, PEFT's LoRA semantics).

usage: /usr/bin/python3 tests/golden/test_lora_parity.py path/to/ctrain
Exit status 0 when every check passes, 1 otherwise; each check prints PASS/FAIL.

For a small LLaMA with grouped-query attention (adapters on all seven Linear kinds) and a
tiny GPT-2 (adapters on c_attn, both c_proj and c_fc), the Python side writes the base as an
HF directory and a PEFT adapter directory whose B is non-zero (so both factors learn from
step 1). `ctrain train model.init_from=BASE lora.init_from=ADAPTER` trains 10 AdamW steps
with clipping; checked against torch.optim.AdamW over the adapter factors with the base
frozen: (a) per-step losses to 1e-4, (b) pre-clip grad norms to 1e-3, (c) the written
adapter (adapter_model.safetensors, PEFT names) equals torch's final A and B, (d) the base
directory is bit-unchanged and `ctrain merge` of the written adapter leaves every
non-adapted tensor bit-identical to the base and every adapted one equal to
W + alpha/r * B A computed from the ORIGINAL base (so the run never moved the base), (e)
the merged model's logits (torch, loading ctrain's merged directory) equal base + adapter
logits, and `ctrain eval` of the merged directory gives base + adapter's loss; (f) with
lora.base_dtype=bf16 the losses follow torch on the base with bf16-rounded matrices.
Set CT_KEEP_TMP=1 to keep the working directory (kept anyway when a check fails).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import numpy as np
    import torch
except ImportError:
    print("FAIL: PyTorch is not installed (python3-torch); run with /usr/bin/python3")
    sys.exit(1)
import gpt2_ref as G  # noqa: E402
import llama_ref as R  # noqa: E402
import lora_ref as L  # noqa: E402
import test_llama_parity as TP  # noqa: E402  (Report, run_ctrain, metrics helpers)

LLAMA = dict(vocab_size=293, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
             rms_norm_eps=1e-6, rope_theta=20000.0, tie_word_embeddings=False)
GPT2 = dict(vocab_size=293, n_ctx=64, n_embd=64, n_layer=2, n_head=4)
B, T, STEPS = 2, 32, 10
LR, BETA1, BETA2, WD, EPS = 1e-2, 0.9, 0.95, 0.1, 1e-6
N_TOKENS = 6 * B * T + 1
LOSS_RTOL, GNORM_RTOL, AD_ATOL, MERGE_ATOL, LOGIT_RTOL = 1e-4, 1e-3, 1e-4, 1e-5, 1e-5

CASES = [
    # arch, config, r, alpha, target_modules, kinds, clip
    ("llama", LLAMA, 4, 16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                             "down_proj"], L.LLAMA_KINDS, 1.5),
    ("gpt2", GPT2, 4, 8, ["c_attn", "c_proj", "c_fc"], L.GPT2_KINDS, 0.25),
]


def train_args(base, adapter, shard, run, clip, extra=()):
    return ["train", "model.init_from=%s" % base, "lora.init_from=%s" % adapter,
            "lora.dropout=0", "data.train=%s" % shard, "data.shuffle=false",
            "train.batch_size=%d" % B, "train.seq_len=%d" % T, "train.grad_accum=1",
            "train.steps=%d" % STEPS, "train.seed=0", "optim.lr=%r" % LR,
            "optim.beta1=%r" % BETA1, "optim.beta2=%r" % BETA2, "optim.eps=%r" % EPS,
            "optim.weight_decay=%r" % WD, "optim.grad_clip=%r" % clip,
            "schedule.name=constant", "schedule.warmup_steps=0", "run.dir=%s" % run,
            "run.checkpoint_every=0"] + list(extra)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def run_case(rep, binary, tmp, arch, cfg, r, alpha, targets, kinds, clip):
    P = lambda *a: os.path.join(tmp, arch, *a)  # noqa: E731
    os.makedirs(P(), exist_ok=True)
    scale = alpha / r
    n_layer = cfg["num_hidden_layers"] if arch == "llama" else cfg["n_layer"]
    if arch == "llama":
        base = R.init_params(cfg, seed=4321)
        R.save_hf_dir(P("base"), cfg, base)
    else:
        base = G.init_params(cfg, seed=4321)
        G.save_hf_dir(P("base"), cfg, base)
    base_bytes = read_bytes(P("base", "model.safetensors"))
    paths = L.modules(arch, n_layer, kinds)
    adapter = L.make_adapter(arch, base, paths, r, seed=77)
    L.save_peft(P("adapter"), adapter, r, alpha, targets, arch == "gpt2", P("base"))
    tokens = TP.make_tokens(N_TOKENS, cfg["vocab_size"], 11)
    G.write_shard(P("train.bin"), tokens)

    t0 = time.time()
    ref = L.train(arch, base, cfg, adapter, scale, tokens, B, T, STEPS, LR, BETA1, BETA2, EPS,
                  WD, clip)
    print("[%s] torch reference: %.2fs" % (arch, time.time() - t0))
    clipped = sum(g > clip for g in ref.grad_norms)
    rep.check("%s: test setup: grad_clip=%g clips in torch" % (arch, clip), clipped >= 3,
              "%d of %d steps (norms %s)" % (clipped, STEPS,
                                             ", ".join("%.3f" % g for g in ref.grad_norms)))
    label = "%s LoRA r=%d on %s" % (arch, r, ",".join(targets))
    if not TP.run_ctrain(rep, binary, train_args(P("base"), P("adapter"), P("train.bin"),
                                                  P("run"), clip), label):
        return
    recs = TP.read_metrics(P("run", "metrics.jsonl"))
    TP.compare_series(rep, label, "(a) per-step losses", ref.losses, recs, "loss", LOSS_RTOL)
    TP.compare_series(rep, label, "(b) pre-clip grad norms", ref.grad_norms, recs, "grad_norm",
                      GNORM_RTOL)
    want = {}
    for p, (A, Bm) in ref.adapter.items():
        want["base_model.model.%s.lora_A.weight" % p] = A.numpy().astype(np.float64)
        want["base_model.model.%s.lora_B.weight" % p] = Bm.numpy().astype(np.float64)
    TP.compare_tensors(rep, label, "(c) written adapter = torch's final A and B",
                       P("run", "adapter_model.safetensors"), want, lambda x: AD_ATOL)
    moved = max(float(np.abs(ref.adapter[p][i].numpy() - adapter[p][i].numpy()).max())
                for p in paths for i in (0, 1))
    rep.check("%s: test setup: the adapter moved in 10 steps" % label, moved > 100 * AD_ATOL,
              "max change %.3g" % moved)

    # (d) the base: its file, and the merge of ctrain's adapter against the original base
    rep.check("%s: (d) base directory bit-unchanged" % label,
              read_bytes(P("base", "model.safetensors")) == base_bytes)
    if not TP.run_ctrain(rep, binary, ["merge", "--base", P("base"), "--adapter", P("run"),
                                       "--out", P("merged")], label + " merge"):
        return
    got = L.load_peft(P("run"))
    rep.check("%s: written adapter holds every module" % label, sorted(got) == sorted(paths))
    if arch == "llama":
        merged = G.read_safetensors(P("merged", "model.safetensors"))
    else:
        merged = G.load_hf_dir(P("merged"))[1]
    want_m = L.merge(arch, base, got, scale)
    adapted = {L.base_weight_name(arch, p) for p in paths}
    exact = [n for n in base if n not in adapted and
             not np.array_equal(np.asarray(merged.get(n)), base[n].numpy())]
    rep.check("%s: (d) merged non-adapted tensors bit-identical to the base" % label,
              not exact and set(merged) == set(base), "differ: %s" % exact[:5])
    worst = max(float(np.abs(np.asarray(merged[n], np.float64) -
                             want_m[n].numpy().astype(np.float64)).max()) for n in adapted)
    rep.check("%s: (d) merged adapted weights = original W + alpha/r B A" % label,
              worst <= MERGE_ATOL, "max diff %.3g (tol %.0e)" % (worst, MERGE_ATOL))

    # (e) logits and loss of the merged model against base + adapter
    x, y = next(G.sequential_batches(tokens, B, T))
    xi, yi = torch.from_numpy(x), torch.from_numpy(y)
    Pb = {n: t.float() for n, t in base.items()}
    Pm = {n: torch.from_numpy(np.array(t)).float() for n, t in merged.items()}
    with torch.no_grad():
        la, loss_a = L.forward(arch, Pb, cfg, xi, yi, got, scale)
        lm, _ = L.forward(arch, Pm, cfg, xi, yi, {}, scale)
    d = float((la - lm).abs().max()) / max(float(la.abs().max()), 1e-30)
    rep.check("%s: (e) merged logits = base + adapter logits" % label, d <= LOGIT_RTOL,
              "max rel diff %.2e" % d)
    # (f) lora.base_dtype=bf16: torch on the base with its matrices rounded to bf16
    base_r = {n: torch.from_numpy(G.bf16_round(t.numpy())) if t.ndim == 2 else t
              for n, t in base.items()}
    ref_b = L.train(arch, base_r, cfg, adapter, scale, tokens, B, T, STEPS, LR, BETA1, BETA2,
                    EPS, WD, clip)
    lb = label + ", bf16 base"
    if TP.run_ctrain(rep, binary, train_args(P("base"), P("adapter"), P("train.bin"),
                                             P("run_bf16"), clip, ["lora.base_dtype=bf16"]), lb):
        recs = TP.read_metrics(P("run_bf16", "metrics.jsonl"))
        TP.compare_series(rep, lb, "(f) per-step losses vs torch on the bf16-rounded base",
                          ref_b.losses, recs, "loss", LOSS_RTOL)
        want_b = {}
        for p, (A, Bm) in ref_b.adapter.items():
            want_b["base_model.model.%s.lora_A.weight" % p] = A.numpy().astype(np.float64)
            want_b["base_model.model.%s.lora_B.weight" % p] = Bm.numpy().astype(np.float64)
        TP.compare_tensors(rep, lb, "(f) written adapter = torch's on the bf16-rounded base",
                           P("run_bf16", "adapter_model.safetensors"), want_b,
                           lambda x: AD_ATOL)
        # the comparisons above must be able to tell a bf16 base from an fp32 one
        dl = max(TP.rel(a, b) for a, b in zip(ref_b.losses, ref.losses))
        da = max(float(np.abs(want_b[n] - want[n]).max()) for n in want)
        rep.check("%s: test setup: the rounding moves the losses or the adapter beyond "
                  "tolerance" % lb, dl > 2 * LOSS_RTOL or da > 2 * AD_ATOL,
                  "losses by %.2e, adapter by %.2e" % (dl, da))
    env = dict(os.environ, OMP_NUM_THREADS="2")
    proc = subprocess.run([binary, "eval", "--model", P("merged"), "--data", P("train.bin"),
                           "--batches", "1", "--batch-size", str(B), "--seq-len", str(T),
                           "--json"], capture_output=True, text=True, env=env, timeout=120)
    try:
        ev = json.loads(proc.stdout)
    except ValueError:
        ev = {}
    rep.check("%s: (e) ctrain eval of the merged model = base + adapter loss" % label,
              "loss" in ev and TP.rel(ev["loss"], float(loss_a)) <= LOSS_RTOL,
              "ctrain %s vs torch %.8f (rc %d %s)" % (ev.get("loss"), float(loss_a),
                                                      proc.returncode, proc.stderr[-300:]))


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 1
    binary = os.path.abspath(argv[1])
    rep = TP.Report()
    t_start = time.time()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="ctrain_lora_parity_")
    print("working directory: %s" % tmp)
    for case in CASES:
        run_case(rep, binary, tmp, *case)
    fails = [r for r in rep.results if not r[1]]
    print("\n%d checks, %d failed, %.1fs" % (len(rep.results), len(fails), time.time() - t_start))
    for name, _, detail in fails:
        print("FAIL  %s%s" % (name, (": " + detail) if detail else ""))
    if fails or os.environ.get("CT_KEEP_TMP"):
        print("kept working directory %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("RESULT: %s" % ("PASS" if not fails else "FAIL"))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
