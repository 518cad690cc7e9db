#!/usr/bin/env python3
"""`ctrain sample --logits` against the PyTorch references, and scripts/hf_check.py's skip.

usage: /usr/bin/python3 tests/golden/test_sample_logits.py path/to/ctrain

scripts/hf_check.py compares what transformers computes from ctrain's exports with the
logits `ctrain sample --logits` writes; this checks that side without transformers:
- a GPT-2 (head size 32, random LayerNorms and biases) and a LLaMA (grouped-query
  attention) saved by the references as HF directories: the logits sample writes after
  each prompt token, read through the KV cache one token at a time, equal gpt2_ref's and
  llama_ref's full forward to 1e-5 x max(1, max |logit|), for every position;
- --logits without a prompt exits 2 naming --prompt;
- hf_check.py run by a Python without transformers exits 77 (the GPU check's "skipped")
  and says so (where transformers is installed it runs the whole check instead, which
  must then pass).
Set CT_KEEP_TMP=1 to keep the working directory.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
try:
    import torch
except ImportError:
    print("FAIL: PyTorch is not installed (python3-torch); run with /usr/bin/python3")
    sys.exit(1)
import gpt2_ref as G  # noqa: E402
import llama_ref as L  # noqa: E402

fails = 0


def check(ok, what):
    global fails
    print(("PASS  " if ok else "FAIL  ") + what, flush=True)
    fails += 0 if ok else 1


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    ctrain = os.path.abspath(argv[1])
    tmp = tempfile.mkdtemp(prefix="ct-logits-")
    env = dict(os.environ)
    env.pop("CTRAIN_DEVICE", None)
    ids = [5, 17, 3, 88, 42, 1, 60, 7, 33, 90, 12, 4]

    def logits_of(model_dir, prompt):
        out = os.path.join(tmp, "l.json")
        p = subprocess.run([ctrain, "sample", "--model", model_dir, "--prompt", prompt,
                            "--logits", out], capture_output=True, text=True, env=env,
                           timeout=120)
        if p.returncode != 0:
            print(p.stderr[-2000:])
            return None
        d = json.load(open(out))
        return d["ids"], torch.tensor(d["logits"], dtype=torch.float64)

    def compare(name, got, want):
        if got is None:
            check(False, "%s: ctrain sample --logits ran" % name)
            return
        gids, g = got
        scale = max(1.0, float(want.abs().max()))
        diff = float((g - want).abs().max()) if g.shape == want.shape else float("inf")
        check(gids == ids and diff <= 1e-5 * scale,
              "%s: logits after each of %d tokens, KV-cache decoding vs the reference forward: "
              "max |diff| %.2e (max |logit| %.3g)" % (name, len(ids), diff, scale))

    # GPT-2
    gcfg = dict(vocab_size=97, n_ctx=32, n_embd=64, n_layer=2, n_head=2)
    gp = G.init_params(gcfg, seed=11, random_norms_and_biases=True)
    gdir = os.path.join(tmp, "gpt2")
    G.save_hf_dir(gdir, gcfg, gp)
    with torch.no_grad():
        want, _ = G.forward({k: torch.as_tensor(v) for k, v in gp.items()},
                            G.normalize_config(gcfg), torch.tensor([ids]))
    compare("gpt2", logits_of(gdir, " ".join(map(str, ids))), want[0].double())

    # LLaMA, grouped-query attention
    lcfg = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
    lp = L.init_params(lcfg, seed=12)
    ldir = os.path.join(tmp, "llama")
    L.save_hf_dir(ldir, lcfg, lp)
    with torch.no_grad():
        want, _ = L.forward({k: torch.as_tensor(v) for k, v in lp.items()}, lcfg,
                            torch.tensor([ids]))
    compare("llama", logits_of(ldir, " ".join(map(str, ids))), want[0].double())

    p = subprocess.run([ctrain, "sample", "--model", gdir, "--logits",
                        os.path.join(tmp, "x.json")], capture_output=True, text=True, env=env,
                       timeout=60)
    check(p.returncode == 2 and "--prompt" in p.stderr,
          "--logits without a prompt: exit 2 naming --prompt (%d)" % p.returncode)

    # hf_check.py where transformers is missing: skipped, said so, exit 77
    has_hf = subprocess.run([sys.executable, "-c", "import transformers"],
                            capture_output=True).returncode == 0
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "hf_check.py"), ctrain,
                        os.path.join(tmp, "hf")], capture_output=True, text=True, env=env,
                       timeout=900)
    if has_hf:
        check(p.returncode == 0, "hf_check.py with transformers installed passes (%d): %s"
              % (p.returncode, p.stdout[-1500:]))
    else:
        check(p.returncode == 77 and "SKIP" in p.stdout and "transformers" in p.stdout,
              "hf_check.py without transformers: exit 77, skipped, says why (%d: %s)"
              % (p.returncode, p.stdout.strip()[-200:]))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "hf_check.py")],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2, "hf_check.py without arguments: usage, exit 2")

    if fails or os.environ.get("CT_KEEP_TMP"):
        print("working directory kept: %s" % tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
