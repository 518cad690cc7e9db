#!/usr/bin/env python3
"""The families of the LLaMA layout against PyTorch (llama_ref.py, written to transformers'
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM math).

usage: /usr/bin/python3 tests/golden/test_family_parity.py path/to/ctrain [family ...]
Exit status 0 when every check passes, 1 otherwise; each check prints PASS/FAIL.

One small random model per family, each with the switches that family adds:
- llama3: Llama 3's RoPE scaling (rope_type llama3, original_max_position_embeddings 32,
  shorter than the sequences of 48 tokens, with frequencies in all three of its bands),
  a tied head, and attention_bias (biases on q, k, v and o_proj);
- qwen2: biases on q, k and v (not o_proj), a tied head;
- qwen3: per-head RMSNorm of q and k, head_dim 24 with hidden_size 64 and 4 heads (the
  attention is 96 wide, not 64), grouped-query attention, an untied head;
- mistral: multi-query attention (1 KV head), "sliding_window": null;
- gemma3 (gemma3_text): embeddings scaled by sqrt(hidden), every RMSNorm by 1 + weight,
  norms after the attention and the MLP too, GeGLU, q/k norms, head_dim 24, a tied head,
  and sliding layers (three of four, window 16 < T) with their own RoPE base.
For each, the Python side writes a Hugging Face directory (config.json as transformers
writes the family's config); `ctrain train model.init_from=DIR` runs 10 AdamW steps with
clipping, checked against torch.optim.AdamW: (a) per-step losses to 1e-4, (b) pre-clip
grad norms to 1e-3, (c) step-1 gradients, (d) final weights under the family's tensor
names, (e) the exported config.json is the family's (model_type, architectures and the
switches), (f) the export loads back and trains a step that torch agrees with; then (g)
LoRA on all seven Linear kinds (a PEFT adapter with non-zero B) for 10 steps to 1e-4, and
(h) greedy `ctrain sample` (the KV-cache decoder: q/k norms, scaled RoPE at later
positions) picks at every step a token that torch's full forward ranks first (within 1e-4
of the best logit).
Then LoRA with PEFT's modules_to_save (embed_tokens and lm_head trained in full beside the
adapters, as independent copies) on the tied qwen2 and the untied qwen3: (i) 10 steps of
losses to 1e-4 against torch with the copies in its optimizer, (j) the written adapter
holds the copies under PEFT's names equal to torch's final ones, (k) `ctrain merge` unties
the tied head (tie_word_embeddings false, lm_head.weight written) and the merged model's
logits equal torch's base + adapter + copies.
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
import lora_ref as LR  # noqa: E402
import test_llama_parity as TP  # noqa: E402  (Report, run_ctrain, metrics helpers)

BASE = dict(vocab_size=293, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=None)
FAMILIES = {
    "llama3": dict(BASE, model_type="llama", rope_theta=10000.0, tie_word_embeddings=True,
                   attention_bias=True,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    "qwen2": dict(BASE, model_type="qwen2", rope_theta=1000000.0, tie_word_embeddings=True),
    "qwen3": dict(BASE, model_type="qwen3", rope_theta=1000000.0, head_dim=24,
                  tie_word_embeddings=False),
    "mistral": dict(BASE, model_type="mistral", rope_theta=1000000.0, num_key_value_heads=1,
                    tie_word_embeddings=False),
    # 4 layers, every 3rd global: layers 0, 1 and 3 slide with a window of 16 < T = 48
    "gemma3": dict(BASE, model_type="gemma3_text", rope_theta=1000000.0, head_dim=24,
                   query_pre_attn_scalar=24, num_hidden_layers=4, sliding_window=16,
                   sliding_window_pattern=3, rope_local_base_freq=10000.0,
                   tie_word_embeddings=True),
}
ARCH = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
        "mistral": "MistralForCausalLM", "gemma3_text": "Gemma3ForCausalLM"}
B, T, STEPS = 2, 48, 10
LR_, BETA1, BETA2, WD, CLIP, EPS = 3e-3, 0.9, 0.95, 0.1, 1.0, 1e-6
LORA_LR, LORA_R, LORA_ALPHA = 1e-2, 4, 16
N_TOKENS = 6 * B * T + 1
LOSS_RTOL, GNORM_RTOL, GRAD_RTOL, GRAD_ATOL, W_ATOL = 1e-4, 1e-3, 1e-4, 1e-7, 1e-4
GEN_PROMPT, GEN_TOKENS, GEN_MARGIN = [5, 17, 42, 7], 40, 1e-4


def train_args(init, shard, run, steps, lr, extra=()):
    return ["train", "model.init_from=%s" % init, "data.train=%s" % shard, "data.shuffle=false",
            "train.batch_size=%d" % B, "train.seq_len=%d" % T, "train.grad_accum=1",
            "train.steps=%d" % steps, "train.seed=0", "optim.lr=%r" % lr,
            "optim.beta1=%r" % BETA1, "optim.beta2=%r" % BETA2, "optim.eps=%r" % EPS,
            "optim.weight_decay=%r" % WD, "optim.grad_clip=%r" % CLIP,
            "schedule.name=constant", "schedule.warmup_steps=0", "run.dir=%s" % run,
            "run.checkpoint_every=0"] + list(extra)


def check_config(rep, label, path, cfg):
    """The exported config.json names the family and carries its switches."""
    try:
        with open(path) as f:
            got = json.load(f)
    except (OSError, ValueError) as e:
        return rep.check("%s: (e) exported config.json" % label, False, str(e))
    fam = R.family(cfg)
    cfg = R.hf_config(cfg)  # with the family's defaults (rope_scaling None, ...)
    want = {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_key_value_heads", "vocab_size",
                                "tie_word_embeddings", "rope_scaling")}
    want.update(model_type=fam, architectures=[ARCH[fam]], bos_token_id=1)
    if fam != "qwen2":
        want["head_dim"] = R.head_dim(cfg)
    if fam == "gemma3_text":
        want.update(sliding_window=cfg["sliding_window"], query_pre_attn_scalar=R.head_dim(cfg),
                    layer_types=["sliding_attention" if R.layer_slides(cfg, l) else
                                 "full_attention" for l in range(cfg["num_hidden_layers"])])
    if "attention_bias" in cfg:
        want["attention_bias"] = cfg["attention_bias"]
    if fam in ("qwen2", "qwen3"):
        want["use_sliding_window"] = False
    bad = []
    for k, v in want.items():
        g = got.get(k, "<missing>")
        if isinstance(v, dict) and isinstance(g, dict):
            same = set(v) == set(g) and all(g[x] == v[x] for x in v)
        else:
            same = g == v
        if not same:
            bad.append("%s=%r (expected %r)" % (k, g, v))
    theta_ok = abs(got.get("rope_theta", 0) - cfg["rope_theta"]) <= 1e-6 * cfg["rope_theta"]
    if not theta_ok:
        bad.append("rope_theta=%r" % got.get("rope_theta"))
    return rep.check("%s: (e) exported config.json is the %s config" % (label, fam), not bad,
                     "; ".join(bad))


def check_generation(rep, binary, label, model_dir, cfg, params):
    """Greedy decoding with the KV cache picks torch's best token at every step."""
    cmd = [binary, "sample", "--model", model_dir, "--prompt", " ".join(map(str, GEN_PROMPT)),
           "--tokens", str(GEN_TOKENS), "--temperature", "0", "--json"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=dict(os.environ, OMP_NUM_THREADS="2"), timeout=120)
    if proc.returncode != 0:
        return rep.check("%s: (h) ctrain sample ran" % label, False,
                         proc.stderr.decode("utf-8", "replace")[-400:])
    try:
        out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        ids = out["ids"] if isinstance(out["ids"], list) else [int(x) for x in out["ids"].split()]
    except (ValueError, KeyError, IndexError) as e:
        return rep.check("%s: (h) ctrain sample --json output" % label, False, str(e))
    seq = GEN_PROMPT + ids
    P = {n: torch.as_tensor(np.asarray(t) if not torch.is_tensor(t) else t).float()
         for n, t in params.items()}
    with torch.no_grad():
        logits, _ = R.forward(P, cfg, torch.tensor([seq[:-1]], dtype=torch.long))
    worst, where = 0.0, -1
    for j, tok in enumerate(ids):
        row = logits[0, len(GEN_PROMPT) - 1 + j]
        gap = float(row.max() - row[tok])
        if gap > worst:
            worst, where = gap, j
    return rep.check("%s: (h) greedy KV-cache decoding follows torch's forward" % label,
                     len(ids) == GEN_TOKENS and worst <= GEN_MARGIN,
                     "%d tokens, worst gap to torch's best logit %.2e (token %d)"
                     % (len(ids), worst, where))


def run_family(rep, binary, tmp, name, cfg, tokens):
    P = lambda *a: os.path.join(tmp, name, *a)  # noqa: E731
    os.makedirs(P(), exist_ok=True)
    params = R.init_params(cfg, seed=sum(map(ord, name)))
    R.save_hf_dir(P("init"), cfg, params)
    shard = os.path.join(tmp, "train.bin")
    common = dict(lr=LR_, beta1=BETA1, beta2=BETA2, eps=EPS, weight_decay=WD)
    ref = R.train_torch(params, cfg, tokens, B, T, STEPS, grad_clip=CLIP, **common)
    grad_tol = lambda r: GRAD_RTOL * float(np.abs(r).max()) + GRAD_ATOL  # noqa: E731
    L = "%s full, %d steps" % (name, STEPS)
    if TP.run_ctrain(rep, binary, train_args(P("init"), shard, P("run"), STEPS, LR_,
                                             ["debug.dump_grads_step=1"]), L):
        recs = TP.read_metrics(P("run", "metrics.jsonl"))
        TP.compare_series(rep, L, "(a) per-step losses", ref.losses, recs, "loss", LOSS_RTOL)
        TP.compare_series(rep, L, "(b) pre-clip grad norms", ref.grad_norms, recs, "grad_norm",
                          GNORM_RTOL)
        TP.compare_tensors(rep, L, "(c) step-1 gradients", P("run", "grads_step1.safetensors"),
                           ref.grads, grad_tol)
        TP.compare_tensors(rep, L, "(d) final weights under the family's names",
                           P("run", "model.safetensors"), ref.params, lambda r: W_ATOL)
        check_config(rep, L, P("run", "config.json"), cfg)
        ref_next = R.train_torch(ref.params, cfg, tokens, B, T, 1, grad_clip=CLIP, **common)
        L2 = "%s from the export" % name
        if TP.run_ctrain(rep, binary, train_args(P("run"), shard, P("run_b"), 1, LR_), L2):
            TP.compare_series(rep, L2, "(f) step-1 loss", ref_next.losses,
                              TP.read_metrics(P("run_b", "metrics.jsonl")), "loss", LOSS_RTOL)
    # LoRA on every Linear kind, PEFT's semantics
    paths = LR.modules("llama", cfg["num_hidden_layers"], LR.LLAMA_KINDS)
    adapter = LR.make_adapter("llama", params, paths, LORA_R, seed=7)
    LR.save_peft(P("adapter"), adapter, LORA_R, LORA_ALPHA,
                 ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                 False)
    scale = LORA_ALPHA / LORA_R
    ref_l = LR.train("llama", params, cfg, adapter, scale, tokens, B, T, STEPS, LORA_LR, BETA1,
                     BETA2, EPS, WD, CLIP)
    L = "%s LoRA, %d steps" % (name, STEPS)
    if TP.run_ctrain(rep, binary, train_args(P("init"), shard, P("run_lora"), STEPS, LORA_LR,
                                             ["lora.init_from=%s" % P("adapter"),
                                              "lora.dropout=0"]), L):
        recs = TP.read_metrics(P("run_lora", "metrics.jsonl"))
        TP.compare_series(rep, L, "(g) per-step losses", ref_l.losses, recs, "loss", LOSS_RTOL)
    check_generation(rep, binary, name, P("init"), cfg, params)
    if name in ("qwen2", "qwen3"):
        run_modules_to_save(rep, binary, P, name, cfg, params, tokens, shard)


def run_modules_to_save(rep, binary, P, name, cfg, params, tokens, shard):
    paths = LR.modules("llama", cfg["num_hidden_layers"], ["self_attn.q_proj", "self_attn.v_proj"])
    adapter = LR.make_adapter("llama", params, paths, LORA_R, seed=8)
    LR.add_saved(adapter, params, cfg, LR.SAVED, seed=9)
    LR.save_peft(P("adapter_mts"), adapter, LORA_R, LORA_ALPHA, ["q_proj", "v_proj"], False)
    scale = LORA_ALPHA / LORA_R
    ref = LR.train("llama", params, cfg, adapter, scale, tokens, B, T, STEPS, LORA_LR, BETA1,
                   BETA2, EPS, WD, CLIP)
    L = "%s LoRA + modules_to_save embed_tokens, lm_head%s" % (
        name, " (tied base)" if cfg.get("tie_word_embeddings") else "")
    if not TP.run_ctrain(rep, binary, train_args(P("init"), shard, P("run_mts"), STEPS, LORA_LR,
                                                 ["lora.init_from=%s" % P("adapter_mts"),
                                                  "lora.dropout=0"]), L):
        return
    recs = TP.read_metrics(P("run_mts", "metrics.jsonl"))
    TP.compare_series(rep, L, "(i) per-step losses", ref.losses, recs, "loss", LOSS_RTOL)
    want = {"base_model.model.%s.weight" % m: ref.adapter[m].numpy().astype(np.float64)
            for m in LR.SAVED}
    got = G.read_safetensors(P("run_mts", "adapter_model.safetensors"))
    # 2e-4: an embedding row whose token is absent from a batch gets a gradient of fp32
    # noise, which AdamW (eps 1e-6, lr 1e-2) turns into steps of up to ~1e-5 (measured:
    # 6.6e-5 after 10 steps, the LoRA factors 1e-6)
    TP.compare_tensors(rep, L, "(j) the copies under PEFT's names = torch's",
                       P("run_mts", "adapter_model.safetensors"),
                       dict(want, **{k: np.asarray(got[k], np.float64) for k in got
                                     if k not in want}), lambda r: 2 * W_ATOL)
    moved = max(float(np.abs(ref.adapter[m].numpy() - adapter[m].numpy()).max())
                for m in LR.SAVED)
    rep.check("%s: test setup: the copies moved" % L, moved > 100 * W_ATOL,
              "max change %.3g" % moved)
    if not TP.run_ctrain(rep, binary, ["merge", "--base", P("init"), "--adapter", P("run_mts"),
                                       "--out", P("merged_mts")], L + " merge"):
        return
    with open(P("merged_mts", "config.json")) as f:
        mcfg = json.load(f)
    merged = G.read_safetensors(P("merged_mts", "model.safetensors"))
    rep.check("%s: (k) merged: untied head with its own lm_head.weight" % L,
              mcfg.get("tie_word_embeddings") is False and "lm_head.weight" in merged,
              "tie_word_embeddings=%r, lm_head %s" % (mcfg.get("tie_word_embeddings"),
                                                       "lm_head.weight" in merged))
    x, y = next(G.sequential_batches(tokens, B, T))
    Pb = {n: torch.as_tensor(np.asarray(t)).float() for n, t in params.items()}
    Pm = {n: torch.from_numpy(np.array(t)).float() for n, t in merged.items()}
    with torch.no_grad():
        la, _ = LR.forward("llama", Pb, cfg, torch.from_numpy(x), None, ref.adapter, scale)
        lm, _ = R.forward(Pm, dict(cfg, tie_word_embeddings=False), torch.from_numpy(x))
    d = float((la - lm).abs().max()) / max(float(la.abs().max()), 1e-30)
    rep.check("%s: (k) merged logits = torch's base + adapter + copies" % L, d <= 1e-4,
              "max rel diff %.2e" % d)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 1
    binary = os.path.abspath(argv[1])
    names = argv[2:] or list(FAMILIES)
    rep = TP.Report()
    t_start = time.time()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="ctrain_family_parity_")
    print("working directory: %s" % tmp)
    # Llama 3's scaling must reach all three bands at this head size, or it is not tested
    c = FAMILIES["llama3"]
    inv = R.inv_freq(R.head_dim(c), c["rope_theta"])
    wl = 2 * np.pi / inv.numpy()
    old = c["rope_scaling"]["original_max_position_embeddings"]
    bands = (int((wl < old / 4).sum()), int(((wl >= old / 4) & (wl <= old)).sum()),
             int((wl > old).sum()))
    rep.check("test setup: llama3 RoPE bands (kept, interpolated, divided) all used, and "
              "T > original_max_position_embeddings", min(bands) > 0 and T > old,
              "%s at head size %d, T=%d" % (bands, R.head_dim(c), T))
    tokens = TP.make_tokens(N_TOKENS, BASE["vocab_size"], 11)
    G.write_shard(os.path.join(tmp, "train.bin"), tokens)
    for n in names:
        t0 = time.time()
        run_family(rep, binary, tmp, n, FAMILIES[n], tokens)
        print("[%s] %.1fs" % (n, time.time() - t0), flush=True)
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
