#!/usr/bin/env python3
"""Instruction fine-tuning (SFT) parity: `ctrain train` on a `ctrain prepare --format sft`
directory against sft_ref.py (PyTorch), step for step.

usage: /usr/bin/python3 tests/golden/test_sft_parity.py path/to/ctrain
Exit status 0 when every check passes (or PyTorch is missing: SKIP), 1 otherwise.

A JSONL of prompt/completion and chat ({"messages": [...]}) examples of varied lengths (one
longer than T, so it is truncated) is prepared with a GPT-2 tokenizer.json that has ChatML's
tokens (Qwen2's template) and, when data/llama-tokenizer is there, with LLaMA's tokenizer
(TinyLlama's template). Random tiny GPT-2 and LLaMA models are saved as HF directories and
trained 10 AdamW steps (weight decay, clipping, dropout 0) by ctrain;
sft_ref.py rebuilds the rows (whole examples, packed or one per row, positions restarting
at each example, prompt tokens not counted) from the files and trains the same model with
an explicit (B, T, T) attention mask. Per-step losses must agree to 1e-4 (relative),
pre-clip grad norms to 1e-3 and final weights to 1e-4 (absolute), for: GPT-2 packed, GPT-2
one example per row, GPT-2 grad_accum 2, GPT-2 group_by_length, GPT-2 shuffled (loader.h's
permutation, into a second epoch), LLaMA packed, LLaMA grad_accum 2 one example per row. The test checks its own premises too: packed rows hold
several examples, prompt targets are masked, the mask changes the loss, micro-batches of a
step count different numbers of targets (so a mean of per-micro-batch means would differ).
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
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SYSTEM_PYTHON = "/usr/bin/python3"
sys.path.insert(0, HERE)
try:
    import numpy as np
    import torch
except ImportError:
    if (os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and os.path.exists(SYSTEM_PYTHON)
            and subprocess.call([SYSTEM_PYTHON, "-c", "import torch"], stderr=subprocess.DEVNULL) == 0):
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
    print("SKIP: PyTorch is not installed (apt-get install python3-torch; run with %s)" % SYSTEM_PYTHON)
    sys.exit(0)
import gpt2_ref as G  # noqa: E402
import llama_ref as R  # noqa: E402
import sft_ref as S  # noqa: E402
import test_llama_parity as TP  # noqa: E402  (Report, run_ctrain, read_metrics, compare_series)

GPT2_TOK = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA_JSON = os.path.join(ROOT, "data", "llama-tokenizer", "tokenizer.json")
TEMPLATES = os.path.join(HERE, "chat_templates")

T, STEPS = 64, 10
LR, BETA1, BETA2, WD, CLIP = 3e-3, 0.9, 0.95, 0.1, 1.0
EPS = 1e-6  # see test_gpt2_parity.py
LOSS_RTOL, GNORM_RTOL, W_ATOL = 1e-4, 1e-3, 1e-4
SEED = 3  # train.seed: the loader's shuffle seed (data.shuffle=true runs only)
GPT2_V = 50259  # GPT-2's 50257 ids + <|im_start|>, <|im_end|>
LLAMA_V = 32000


def gpt2_cfg(v):
    return dict(vocab_size=v, n_ctx=T, n_embd=32, n_layer=2, n_head=4)


def llama_cfg(v):
    return dict(vocab_size=v, hidden_size=64, intermediate_size=172, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2 * T,
                rms_norm_eps=1e-6, rope_theta=20000.0, tie_word_embeddings=False)


# ----------------------------------------------------------------------------------------
# Data

WORDS = ("the a river stone light small green quick model train token cat dog house "
         "blue over under seven three ninety paper window learn answer question because "
         "mountain engine slowly bright quiet number letter garden city north winter").split()


def sentence(rng, n):
    return " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), n)).capitalize() + "."


def m(role, content):
    return {"role": role, "content": content}


def make_lines(seed=5):
    """~26 examples from 10 to ~60 tokens, a third of them chats, one far longer than T."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(26):
        if i % 3 == 2:
            conv = [m("user", sentence(rng, int(rng.integers(2, 8)))),
                    m("assistant", sentence(rng, int(rng.integers(2, 10))))]
            if i % 2:
                conv = [m("system", "Be brief.")] + conv + [m("user", sentence(rng, 3)), m("assistant", sentence(rng, 2))]
            lines.append({"messages": conv})
        else:
            lines.append({"prompt": sentence(rng, int(rng.integers(2, 12))) + "\n",
                          "completion": " " + sentence(rng, int(rng.integers(1, 25)))})
    lines[7] = {"prompt": "Tell a long story.\n", "completion": " " + sentence(rng, 90)}  # > T tokens
    return lines


def chatml_dir(d):
    """GPT-2's vocabulary as a tokenizer.json with <|im_start|>, <|im_end|> added and Qwen2's
    template (as tests/cli/test_prepare_sft.py builds it)."""
    enc = json.load(open(os.path.join(GPT2_TOK, "encoder.json")))
    merges = [l for l in open(os.path.join(GPT2_TOK, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if l]
    added = [("<|endoftext|>", 50256), ("<|im_start|>", 50257), ("<|im_end|>", 50258)]
    vocab = dict(enc)
    for t, i in added:
        vocab[t] = i
    tj = {"version": "1.0", "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
          "added_tokens": [{"id": i, "content": t, "special": True, "lstrip": False, "rstrip": False,
                            "normalized": False, "single_word": False} for t, i in added],
          "model": {"type": "BPE", "vocab": vocab, "merges": merges}}
    tok = os.path.join(d, "chatml")
    os.mkdir(tok)
    json.dump(tj, open(os.path.join(tok, "tokenizer.json"), "w"))
    shutil.copy(os.path.join(TEMPLATES, "qwen2.json"), os.path.join(tok, "tokenizer_config.json"))
    return tok


def llama_dir(d):
    tok = os.path.join(d, "tinyllama")
    os.mkdir(tok)
    shutil.copy(LLAMA_JSON, os.path.join(tok, "tokenizer.json"))
    shutil.copy(os.path.join(TEMPLATES, "tinyllama.json"), os.path.join(tok, "tokenizer_config.json"))
    return tok


def prepare(rep, binary, tok, src, out, label):
    cmd = [binary, "prepare", "--format", "sft", "--tokenizer", tok, "--out", out, "--quiet", src]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    ok = p.returncode == 0 and json.load(open(os.path.join(out, "manifest.json"))).get("format") == "ctrain-sft/1"
    return rep.check("%s: ctrain prepare --format sft" % label, ok,
                     "" if ok else "status %d: %s" % (p.returncode, p.stderr.decode("utf-8", "replace")[-800:]))


# ----------------------------------------------------------------------------------------
# Premises

def check_premises(rep, label, arch, params, cfg, data, accum, packing, final):
    """The run cannot pass vacuously: its steps hold what the spec is about. final: the
    reference's trained parameters."""
    used = [rows for s in range(1, STEPS + 1) for _, _, _, rows in data.step(s)]
    rows = [r for mb in used for r in mb]
    most = max(len(r.examples) for r in rows)
    if packing:
        rep.check("%s: premise: a packed row holds >= 2 examples" % label, most >= 2,
                  "at most %d per row; %d rows per epoch" % (most, len(data.rows)))
    else:
        rep.check("%s: premise: one example per row" % label, most == 1)
    inside = sum(int(r.targets[c + k] < 0) for r in rows for _, c, n in r.examples for k in range(n - 1))
    rep.check("%s: premise: targets inside examples are masked (prompt tokens)" % label, inside > 0,
              "%d masked targets inside examples over the %d steps" % (inside, STEPS))
    pad = sum(1 for r in rows if not r.examples or r.examples[-1][1] + r.examples[-1][2] < T)
    rep.check("%s: premise: rows end in padding" % label, pad > 0, "%d of %d rows" % (pad, len(rows)))
    if packing:
        # a trainer that ignored the boundaries (causal over the row, positions 0..T-1)
        # would log other losses: by how much, at the start and at the end
        worst = (0.0, 0, "")
        for when, p in (("initial", params), ("final", final)):
            for s in range(1, STEPS + 1):
                masked = S.step_loss(arch, p, cfg, data, s)
                plain = S.step_loss(arch, p, cfg, data, s, plain=True)
                worst = max(worst, (TP.rel(plain, masked), s, when))
        rep.check("%s: premise: without the mask and positions the step losses differ by > %g" % (label, 10 * LOSS_RTOL),
                  worst[0] > 10 * LOSS_RTOL, "by up to %.1e (step %d, %s weights)" % worst)
    if accum > 1:
        worst = 0.0
        for s in range(1, STEPS + 1):
            counts = [int((y >= 0).sum()) for _, y, _, _ in data.step(s)]
            if min(counts) > 0 and len(set(counts)) > 1:
                worst = max(worst, max(counts) / min(counts))
        rep.check("%s: premise: micro-batches of a step count different numbers of targets" % label,
                  worst > 1.2, "largest ratio %.2f" % worst)


def read_weights(path):
    """{name: float64} of a written model, GPT-2's `transformer.` prefix stripped, causal
    buffers and a tied lm_head dropped."""
    out = {}
    for n, a in G.read_safetensors(path).items():
        k = n[len("transformer."):] if n.startswith("transformer.") else n
        if k.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        out[k] = np.asarray(a, np.float64)
    return out


def compare_weights(rep, label, path, ref, tied):
    if not os.path.isfile(path):
        return rep.check("%s: final weights" % label, False, "%s is missing" % path)
    out = read_weights(path)
    if tied:
        out.pop("lm_head.weight", None)
    problems, worst = [], (0.0, "")
    if set(out) != set(ref):
        problems.append("names differ: extra %s, missing %s" % (sorted(set(out) - set(ref))[:4],
                                                                 sorted(set(ref) - set(out))[:4]))
    for n, r in ref.items():
        if n in out and out[n].shape == r.shape:
            d = float(np.abs(out[n] - r).max()) if np.all(np.isfinite(out[n])) else float("inf")
            if not d <= W_ATOL:
                problems.append("%s: max diff %.3g" % (n, d))
            worst = max(worst, (d, n))
        elif n in out:
            problems.append("%s has shape %s, expected %s" % (n, out[n].shape, r.shape))
    return rep.check("%s: final weights, max abs diff <= %g" % (label, W_ATOL), not problems,
                     "; ".join(problems[:5]) if problems else "worst %s: %.3g" % (worst[1], worst[0]))


def report_divergence(label, data, ref, recs):
    """Which step first leaves the tolerance, and what its micro-batches held."""
    for s in range(1, STEPS + 1):
        if s in recs and TP.rel(float(recs[s]["loss"]), ref.losses[s - 1]) > LOSS_RTOL:
            print("  %s: first diverging step %d: ctrain %.8f, torch %.8f (rel %.2e); torch counted %d targets"
                  % (label, s, recs[s]["loss"], ref.losses[s - 1], TP.rel(float(recs[s]["loss"]), ref.losses[s - 1]),
                     ref.counted[s - 1]))
            for k, (_, y, _, rows) in enumerate(data.step(s)):
                print("    micro-batch %d: rows %s, counted %d" % (
                    k, [[(i, c, n) for i, c, n in r.examples] for r in rows], int((y >= 0).sum())))
            extra = {k: v for k, v in recs[s].items() if k not in ("loss", "lr", "grad_norm", "split", "step")}
            if extra:
                print("    ctrain's record: %s" % json.dumps(extra)[:400])
            return


# ----------------------------------------------------------------------------------------

def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 1
    binary = os.path.abspath(argv[1])
    if not os.path.exists(os.path.join(GPT2_TOK, "encoder.json")):
        print("SKIP: data/gpt2-tokenizer missing (scripts/fetch_data.sh)")
        return 0
    rep = TP.Report()
    t_start = time.time()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="ctrain_sft_parity_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    print("working directory: %s" % tmp)

    src = P("sft.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for line in make_lines():
            f.write(json.dumps(line) + "\n")
    datasets = {}
    if prepare(rep, binary, chatml_dir(tmp), src, P("data_gpt2"), "GPT-2 tokenizer (ChatML)"):
        datasets["gpt2"] = (P("data_gpt2"), GPT2_V)
    if os.path.exists(LLAMA_JSON):
        if prepare(rep, binary, llama_dir(tmp), src, P("data_llama"), "LLaMA tokenizer (TinyLlama)"):
            datasets["llama"] = (P("data_llama"), LLAMA_V)
    elif "gpt2" in datasets:
        print("note: %s missing; the LLaMA runs use the GPT-2 tokenizer's data" % LLAMA_JSON)
        datasets["llama"] = datasets["gpt2"]

    models = {}
    for arch in ("gpt2", "llama"):
        if arch not in datasets:
            continue
        v = datasets[arch][1]
        examples = S.read_examples(datasets[arch][0])
        top = max(int(ids.max()) for ids, _ in examples)
        long_ = sum(len(ids) > T for ids, _ in examples)
        rep.check("%s data: %d examples, ids < V=%d, %d longer than T=%d (truncated)" % (arch, len(examples), v, long_, T),
                  top < v and long_ >= 1 and len(examples) == len(make_lines()), "largest id %d" % top)
        if arch == "gpt2":
            cfg = gpt2_cfg(v)
            # matrices 4x GPT-2's init (std 0.08, as llama_ref's): attention that is not
            # near-uniform, so where a token may look changes the loss
            params = {n: t * 4 if t.ndim >= 2 else t
                      for n, t in G.init_params(cfg, seed=1234, random_norms_and_biases=True).items()}
            G.save_hf_dir(P("init_gpt2"), cfg, params)
        else:
            cfg = llama_cfg(v)
            params = R.init_params(cfg, seed=4321)
            R.save_hf_dir(P("init_llama"), cfg, params)
        models[arch] = (cfg, params, examples)

    # label, arch, B, accum, packing, group_by_length, shuffle
    cases = [("gpt2 packed", "gpt2", 2, 1, True, False, False),
             ("gpt2 unpacked", "gpt2", 2, 1, False, False, False),
             ("gpt2 packed accum=2", "gpt2", 2, 2, True, False, False),
             ("gpt2 packed group_by_length", "gpt2", 2, 1, True, True, False),
             ("gpt2 packed shuffle", "gpt2", 2, 1, True, False, True),
             ("llama packed", "llama", 2, 1, True, False, False),
             ("llama unpacked accum=2", "llama", 2, 2, False, False, False)]
    common = dict(lr=LR, beta1=BETA1, beta2=BETA2, eps=EPS, weight_decay=WD, grad_clip=CLIP)
    for label, arch, b, accum, packing, gbl, shuffle in cases:
        if arch not in models:
            continue
        cfg, params, examples = models[arch]
        data = S.SftBatches(examples, b, T, accum, packing, gbl, shuffle=shuffle, seed=SEED)
        print("\n== %s: %d rows in epoch 0 (+%d empty), %d micro-batches in epoch 0"
              % (label, len(data.rows), data.nrows - len(data.rows), data.batches_per_epoch))
        if shuffle:
            n0 = data.batches_per_epoch
            rep.check("%s: premise: the steps run into epoch 1, ordered unlike epoch 0" % label,
                      n0 < STEPS * accum and data.plan(1)[0] != data.plan(0)[0],
                      "%d micro-batches in epoch 0" % n0)
        t0 = time.time()
        ref = S.train(arch, params, cfg, data, STEPS, **common)
        print("  torch reference: %.1fs; counted targets per step %s; grad norms %s"
              % (time.time() - t0, ref.counted, " ".join("%.3f" % g for g in ref.grad_norms)))
        check_premises(rep, label, arch, params, cfg, data, accum, packing, ref.params)
        run = P("run_" + label.replace(" ", "_").replace("=", ""))
        args = ["train", "model.init_from=%s" % P("init_" + arch), "model.dropout=0",
                "data.train=%s" % datasets[arch][0], "data.shuffle=%s" % ("true" if shuffle else "false"),
                "data.packing=%s" % ("true" if packing else "false"),
                "data.group_by_length=%s" % ("true" if gbl else "false"),
                "train.batch_size=%d" % b, "train.seq_len=%d" % T, "train.grad_accum=%d" % accum,
                "train.steps=%d" % STEPS, "train.seed=%d" % SEED, "optim.lr=%r" % LR, "optim.beta1=%r" % BETA1,
                "optim.beta2=%r" % BETA2, "optim.eps=%r" % EPS, "optim.weight_decay=%r" % WD,
                "optim.grad_clip=%r" % CLIP, "schedule.name=constant", "schedule.warmup_steps=0",
                "run.dir=%s" % run, "run.checkpoint_every=0"]
        if not TP.run_ctrain(rep, binary, args, label):
            continue
        recs = TP.read_metrics(os.path.join(run, "metrics.jsonl"))
        if not TP.compare_series(rep, label, "per-step losses (rel %g)" % LOSS_RTOL, ref.losses, recs, "loss",
                                 LOSS_RTOL) and recs:
            report_divergence(label, data, ref, recs)
        TP.compare_series(rep, label, "pre-clip grad norms (rel %g)" % GNORM_RTOL, ref.grad_norms, recs,
                          "grad_norm", GNORM_RTOL)
        compare_weights(rep, label, os.path.join(run, "model.safetensors"), ref.params,
                        tied=(arch == "gpt2"))

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
