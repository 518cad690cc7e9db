#!/usr/bin/env python3
"""The model from explicit sizes through the real program: model.arch=llama with
model.n_layer/n_head/n_kv_head/n_embd/n_ffn/vocab_size/n_ctx trains and saves a
LlamaConfig with exactly those sizes (grouped KV heads included); GPT-2 sizes keep
n_ffn = 4 * n_embd; a GPT-2 with n_kv_head != n_head, a llama without n_ffn, and
lora.targets without LoRA switched on are refused with exit 2 naming the key.

usage: test_lora_setup.py path/to/ctrain
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
failures = []


def check(label, ok, detail=""):
    if ok:
        print("ok   %s" % label)
    else:
        failures.append("%s: %s" % (label, detail))


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout + p.stderr


def main():
    tmp = tempfile.mkdtemp(prefix="ctrain_lora_setup_")
    try:
        shard = os.path.join(tmp, "t.bin")
        toks = [(i * 7 + i // 5) % 64 for i in range(4000)]
        with open(shard, "wb") as f:
            f.write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)))
            f.write(struct.pack("<%dH" % len(toks), *toks))
        common = ["data.train=" + shard, "train.batch_size=2", "train.seq_len=16",
                  "train.steps=2"]
        sizes = ["model.n_layer=2", "model.n_head=4", "model.n_embd=32", "model.vocab_size=64",
                 "model.n_ctx=32"]
        d = os.path.join(tmp, "llama")
        rc, out = run("train", "model.arch=llama", "model.n_kv_head=2", "model.n_ffn=72",
                      *sizes, *common, "run.dir=" + d)
        check("llama from sizes trains", rc == 0, out[-800:])
        if rc == 0:
            cfg = json.load(open(os.path.join(d, "config.json")))
            want = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "hidden_size": 32, "intermediate_size": 72,
                    "vocab_size": 64, "max_position_embeddings": 32}
            got = {k: cfg.get(k) for k in want}
            check("llama config.json has the given sizes", got == want, str(got))
        d = os.path.join(tmp, "gpt2")
        rc, out = run("train", "model.arch=gpt2", *sizes, *common, "run.dir=" + d)
        check("gpt2 from sizes trains", rc == 0, out[-800:])
        if rc == 0:
            cfg = json.load(open(os.path.join(d, "config.json")))
            check("gpt2 keeps n_inner 4C", cfg.get("model_type") == "gpt2" and
                  cfg.get("n_embd") == 32 and cfg.get("n_inner") in (None, 128), str(cfg))
        rc, out = run("train", "model.arch=gpt2", "model.n_kv_head=2", *sizes, *common,
                      "run.dir=" + os.path.join(tmp, "bad1"))
        check("gpt2 with n_kv_head != n_head refused", rc == 2 and "model.n_kv_head" in out,
              "rc=%d %s" % (rc, out[-400:]))
        rc, out = run("train", "model.arch=llama", *sizes, *common,
                      "run.dir=" + os.path.join(tmp, "bad2"))
        check("llama without n_ffn refused", rc == 2 and "model.n_ffn" in out,
              "rc=%d %s" % (rc, out[-400:]))
        rc, out = run("train", "model.preset=llama-tiny", "lora.targets=q_proj", *common,
                      "run.dir=" + os.path.join(tmp, "bad3"))
        check("lora.targets without lora.r refused", rc == 2 and "lora.targets" in out and
              "lora.r" in out, "rc=%d %s" % (rc, out[-400:]))
        check("refusals touch nothing", not os.path.exists(os.path.join(tmp, "bad1")) and
              not os.path.exists(os.path.join(tmp, "bad2")) and
              not os.path.exists(os.path.join(tmp, "bad3")))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


main()
