#!/usr/bin/env python3
"""The README's three LoRA commands on a TinyLlama-layout directory, end to end.

usage: /usr/bin/python3 tests/cli/test_lora_text.py path/to/ctrain

A small LLaMA with TinyLlama's vocabulary (32000) is written in Hugging Face layout
(config.json + model.safetensors) with LLaMA's tokenizer.json beside it, as a downloaded
model directory has. Then, as the README says:
  1. `ctrain prepare --tokenizer MODEL_DIR` turns plain text into shards (BOS per document);
  2. `ctrain train --config configs/lora-tinyllama.yaml model.init_from=MODEL_DIR ...`
     fine-tunes with LoRA (the config's bf16 base, dropout and light recompute, shortened);
  3. `ctrain merge` folds the adapter into a plain model directory.
Checks: the shards hold the tokenizer's ids of the text; the run writes a PEFT adapter and
leaves the base directory untouched; the merged directory loads (`ctrain eval`) and scores
the held-out text better than the base does, as the training loss fell.
Needs data/llama-tokenizer (scripts/fetch_data.sh) and data/brown/text.
"""
import glob
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

CTRAIN = sys.argv[1]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = 0


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok else " " + str(detail)[-1500:]))
    if not ok:
        failures += 1


def run(*args, stdin=None):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300, input=stdin)
    return p.returncode, p.stdout, p.stderr


def digest(d):
    h = hashlib.sha256()
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()


def eval_loss(model, shards):
    rc, out, err = run("eval", "--model", model, "--data", shards, "--seq-len", "32",
                       "--batch-size", "2", "--json")
    check(rc == 0, "ctrain eval --model %s" % os.path.basename(model), err)
    return json.loads(out)["loss"] if rc == 0 else float("nan")


def main():
    tok = os.path.join(ROOT, "data", "llama-tokenizer", "tokenizer.json")
    brown = sorted(glob.glob(os.path.join(ROOT, "data", "brown", "text", "*")))
    if not os.path.exists(tok) or not brown:
        print("FAIL: reference data missing: run scripts/fetch_data.sh")
        return 1
    tmp = tempfile.mkdtemp(prefix="ct_lora_text_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        # the "downloaded" model: a small LLaMA with TinyLlama's vocabulary, HF layout
        rc, _, err = run("synth", "--out", P("rand.bin"), "--tokens", "20000", "--vocab", "32000")
        check(rc == 0, "synth", err)
        rc, _, err = run("train", "model.arch=llama", "model.n_layer=2", "model.n_head=4",
                         "model.n_kv_head=2", "model.n_embd=64", "model.n_ffn=172",
                         "model.vocab_size=32000", "model.n_ctx=64", "data.train=" + P("rand.bin"),
                         "train.batch_size=2", "train.seq_len=32", "train.steps=1",
                         "run.checkpoint_every=0", "run.dir=" + P("base_run"))
        check(rc == 0, "a small LLaMA is built and saved in HF layout", err)
        base = P("TinyLlama-small")
        os.makedirs(base)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(P("base_run", f), base)
        shutil.copy(tok, base)
        with open(os.path.join(base, "config.json")) as f:
            check(json.load(f).get("model_type") == "llama", "the base is a LLaMA config.json")
        before = digest(base)

        # 1. text -> shards with the model directory's own tokenizer
        text = P("mine")
        os.makedirs(text)
        for i, src in enumerate(brown[:40]):
            shutil.copy(src, os.path.join(text, "doc%02d.txt" % i))
        rc, out, err = run("prepare", "--tokenizer", base, "--out", P("shards"),
                           "--val-tokens", "4000", text)
        check(rc == 0, "1. ctrain prepare --tokenizer MODEL_DIR", err)
        with open(P("shards", "manifest.json")) as f:
            man = json.load(f)
        check(man.get("tokenizer", {}).get("kind") == "spm-bpe",
              "the shards were made with the SentencePiece tokenizer", man)
        rc, ids, err = run("tokenize", "--tokenizer", base, "--bos",
                           stdin=open(os.path.join(text, "doc00.txt"), encoding="utf-8").read())
        first = [int(x) for x in ids.split()][:40]
        toks = []
        for shard in sorted(glob.glob(P("shards", "*.bin"))):
            with open(shard, "rb") as f:
                data = f.read()
            hdr = struct.unpack("<256i", data[:1024])
            code = "H" if hdr[1] == 1 else "I"
            toks += struct.unpack("<%d%s" % (hdr[2], code), data[1024:1024 + hdr[2] * (2 if
                                  code == "H" else 4)])
        found = any(toks[i:i + len(first)] == first for i in range(len(toks)))
        check(rc == 0 and len(first) == 40 and first[0] == 1 and found,
              "the shards hold the tokenizer's ids of a document, BOS (1) first")

        # 2. LoRA fine-tuning with the ready config, shortened for a test
        run_dir = P("lora_run")
        rc, out, err = run("train", "--config", os.path.join(ROOT, "configs", "lora-tinyllama.yaml"),
                           "model.init_from=" + base, "data.train=" + P("shards"),
                           "data.val=" + P("shards"), "train.seq_len=32", "train.batch_size=2",
                           "train.grad_accum=2", "train.steps=30", "train.eval_every=0",
                           "train.eval_batches=2", "optim.lr=1e-2", "schedule.warmup_steps=2",
                           "schedule.min_lr=1e-3", "run.checkpoint_every=0", "run.dir=" + run_dir)
        check(rc == 0, "2. ctrain train --config configs/lora-tinyllama.yaml", err)
        losses = []
        for line in open(os.path.join(run_dir, "metrics.jsonl")):
            m = json.loads(line)
            if m["split"] == "train":
                losses.append(m["loss"])
        check(len(losses) == 30 and sum(losses[-5:]) < sum(losses[:5]),
              "the LoRA run's loss falls (%s -> %s)" % (losses[:2], losses[-2:]))
        with open(os.path.join(run_dir, "adapter_config.json")) as f:
            ac = json.load(f)
        check(ac.get("peft_type") == "LORA" and ac.get("r") == 8 and
              os.path.exists(os.path.join(run_dir, "adapter_model.safetensors")),
              "the run wrote a PEFT adapter (r=8)", ac)
        check(digest(base) == before, "the base directory is untouched")

        # 3. merge, then the merged model scores the held-out text better than the base
        merged = P("merged")
        rc, out, err = run("merge", "--base", base, "--adapter", run_dir, "--out", merged)
        check(rc == 0 and os.path.exists(os.path.join(merged, "model.safetensors")),
              "3. ctrain merge writes a model directory", err)
        lb, lm = eval_loss(base, P("shards")), eval_loss(merged, P("shards"))
        check(lm < lb - 0.05, "the merged model beats the base on the text (%.4f < %.4f)"
              % (lm, lb))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
