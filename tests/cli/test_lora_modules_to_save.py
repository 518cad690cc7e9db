#!/usr/bin/env python3
"""lora.modules_to_save through the real program (PEFT's modules_to_save: embed_tokens and
lm_head trained in full beside the adapters). Standard library only.

- the plan counts each copy (vocab_size x hidden_size) in the grads and AdamW moments;
- a run on a tied base writes adapter_config.json with "modules_to_save" and the trained
  copy as "base_model.model.lm_head.weight" (PEFT's name), different from the base's
  embedding; `ctrain eval` of the unmerged adapter equals eval of `ctrain merge`'s output,
  whose config.json is untied (tie_word_embeddings false) with its own lm_head.weight;
- the adapter trains on from lora.init_from, and a lora.modules_to_save that disagrees
  with it is refused;
- refused with exit 2 and the key named: a module other than embed_tokens / lm_head, GPT-2
  (whose head is always tied), and modules_to_save without LoRA.

usage: test_lora_modules_to_save.py path/to/ctrain
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
checks = 0


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=180, env=env)
    return p.returncode, p.stdout, p.stderr


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print("ok   %s" % label)
    else:
        failures.append("%s: %s" % (label, detail))


def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def st_tensor(path, name):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        a, b = h[name]["data_offsets"]
        f.seek(8 + n + a)
        raw = f.read(b - a)
    return struct.unpack("<%df" % (len(raw) // 4), raw)


def plan(*extra):
    rc, out, err = run("plan", "model.preset=qwen2-tiny", "lora.r=4", "train.batch_size=2",
                       "train.seq_len=16", "--json", *extra)
    return json.loads(out) if rc == 0 else {"error": err}


def eval_loss(model, shard):
    rc, out, err = run("eval", "--model", model, "--data", shard, "--batches", "2",
                       "--batch-size", "1", "--seq-len", "16", "--json")
    try:
        return json.loads(out)["loss"]
    except (ValueError, KeyError):
        return "rc %d: %s" % (rc, err[-300:])


def main():
    tmp = tempfile.mkdtemp(prefix="ctrain_mts_")
    try:
        shard = os.path.join(tmp, "s.bin")
        run("synth", "--out", shard, "--tokens", "4000", "--vocab", "64")
        V, C = 64, 32  # qwen2-tiny
        p0, p1 = plan("data.train=" + shard), plan("data.train=" + shard,
                                                   "lora.modules_to_save=lm_head,embed_tokens")
        grew = (p1.get("grads_bytes", 0) - p0.get("grads_bytes", 0),
                p1.get("optim_bytes", 0) - p0.get("optim_bytes", 0))
        check("plan counts the copies' gradients and AdamW moments",
              grew == (2 * V * C * 4, 2 * 2 * V * C * 4), "grew by %s (%s)" % (grew, p1))

        base = os.path.join(tmp, "base")
        rc, out, err = run("train", "model.preset=qwen2-tiny", "data.train=" + shard,
                           "train.batch_size=2", "train.seq_len=16", "train.steps=2",
                           "run.dir=" + base)
        check("base trains", rc == 0, err[-300:])
        run_dir = os.path.join(tmp, "run")
        rc, out, err = run("train", "model.init_from=" + base, "lora.r=4", "lora.targets=q_proj",
                           "lora.modules_to_save=lm_head", "data.train=" + shard,
                           "train.batch_size=2", "train.seq_len=16", "train.steps=6",
                           "optim.lr=1e-2", "run.dir=" + run_dir)
        check("a LoRA run with modules_to_save=lm_head trains on a tied base", rc == 0,
              err[-400:])
        if rc != 0:
            return
        with open(os.path.join(run_dir, "adapter_config.json")) as f:
            acfg = json.load(f)
        check("adapter_config.json lists modules_to_save", acfg.get("modules_to_save") ==
              ["lm_head"], str(acfg.get("modules_to_save")))
        ad = os.path.join(run_dir, "adapter_model.safetensors")
        h = st_header(ad)
        name = "base_model.model.lm_head.weight"
        check("the copy is saved under PEFT's name and shape", name in h and
              h[name]["shape"] == [V, C], str(sorted(h)[:6]))
        if name in h:
            head = st_tensor(ad, name)
            emb = st_tensor(os.path.join(base, "model.safetensors"), "model.embed_tokens.weight")
            diff = max(abs(a - b) for a, b in zip(head, emb))
            check("the head's copy trained away from the tied embedding", diff > 1e-3,
                  "max diff %.3g" % diff)
        merged = os.path.join(tmp, "merged")
        rc, out, err = run("merge", "--adapter", run_dir, "--out", merged)
        check("merge", rc == 0, err[-300:])
        if rc == 0:
            with open(os.path.join(merged, "config.json")) as f:
                mcfg = json.load(f)
            mh = st_header(os.path.join(merged, "model.safetensors"))
            check("the merged model is untied with its own lm_head.weight",
                  mcfg.get("tie_word_embeddings") is False and "lm_head.weight" in mh,
                  "tie %r" % mcfg.get("tie_word_embeddings"))
            la, lm = eval_loss(run_dir, shard), eval_loss(merged, shard)
            check("eval of the adapter = eval of the merged model",
                  isinstance(la, float) and isinstance(lm, float) and abs(la - lm) <= 1e-5 * abs(la),
                  "%s vs %s" % (la, lm))
        # trains on from the adapter; a disagreeing modules_to_save is refused
        rc, out, err = run("train", "model.init_from=" + base, "lora.init_from=" + run_dir,
                           "data.train=" + shard, "train.batch_size=2", "train.seq_len=16",
                           "train.steps=1", "run.dir=" + os.path.join(tmp, "run2"))
        check("lora.init_from of an adapter with modules_to_save trains", rc == 0, err[-300:])
        r3 = os.path.join(tmp, "run3")
        rc, out, err = run("train", "model.init_from=" + base, "lora.init_from=" + run_dir,
                           "lora.modules_to_save=embed_tokens", "data.train=" + shard,
                           "train.steps=1", "run.dir=" + r3)
        check("a lora.modules_to_save that disagrees with lora.init_from is refused",
              rc == 2 and "lora.modules_to_save" in err and not os.path.exists(r3), err[-300:])
        for label, args, want in [
                ("another module", ["model.preset=qwen2-tiny", "lora.r=4",
                                    "lora.modules_to_save=mlp"], "lora.modules_to_save"),
                ("GPT-2", ["model.preset=gpt2-tiny", "lora.r=4",
                           "lora.modules_to_save=lm_head"], "GPT-2"),
                ("without LoRA", ["model.preset=qwen2-tiny", "lora.modules_to_save=lm_head"],
                 "lora.modules_to_save")]:
            rd = os.path.join(tmp, "bad")
            rc, out, err = run("train", "data.train=" + shard, "train.steps=1", "run.dir=" + rd,
                               *args)
            check("refused: %s" % label, rc == 2 and want in err and not os.path.exists(rd),
                  "rc %d: %s" % (rc, err[-300:]))
    finally:
        if failures:
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL " + f)
    print("%d checks, %d failed" % (checks, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
