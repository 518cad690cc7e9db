#!/usr/bin/env python3
"""`ctrain eval` and `ctrain sample` on an unmerged LoRA run (base + adapter, as PEFT runs it).

usage: /usr/bin/python3 tests/cli/test_lora_eval.py path/to/ctrain

A tiny GPT-2 base is written in Hugging Face layout; a LoRA run fine-tunes it
(model.init_from = the base). Checks:
  - eval --model RUN_DIR works and its loss equals the run's own final validation loss
    (same windows: B, T and batch count) and the merged model's loss (`ctrain merge`
    output) to 1e-5 relative, and differs from the base's (the adapter is applied);
  - eval of the run's checkpoint (adapter_config.json names no base there: the run's
    config.yaml does) gives the same loss;
  - sample --model RUN_DIR equals sample of the merged model (greedy ids);
  - an adapter whose base_model_name_or_path names no directory: eval and sample exit 2
    naming adapter_config.json and that path and suggesting --base and `ctrain merge`;
    with --base they work and give the same loss;
  - merge without --base finds the base; it copies the tokenizer files of the adapter
    directory, or of the base when the adapter has none;
  - a LoRA run on freshly initialised weights (model.preset) is scored on its rebuilt base
    and matches its validation loss.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
failures = 0


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok else " " + str(detail)[-1500:]))
    if not ok:
        failures += 1


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def close(a, b, rel=1e-5):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def last_val(run_dir):
    val = None
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        m = json.loads(line)
        if m.get("split") == "val":
            val = m["loss"]
    return val


def write_shard(path, toks):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)))
        f.write(struct.pack("<%dH" % len(toks), *toks))


def main():
    tmp = tempfile.mkdtemp(prefix="ct_lora_eval_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        # a learnable stream over 64 ids
        toks = [(i * 7 + (i // 5) * 3) % 64 for i in range(6000)]
        write_shard(P("data.bin"), toks)
        small = ["data.train=" + P("data.bin"), "data.val=" + P("data.bin"),
                 "train.batch_size=2", "train.seq_len=32", "run.checkpoint_every=0"]
        rc, _, err = run("train", "model.preset=gpt2-tiny", "train.steps=1",
                         "run.dir=" + P("base_run"), *small)
        check(rc == 0, "a tiny GPT-2 base is built", err)
        base = P("base")
        os.makedirs(base)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(P("base_run", f), base)

        run_dir = P("lora")
        rc, _, err = run("train", "model.init_from=" + base, "lora.r=4", "lora.alpha=8",
                         "lora.targets=c_attn,c_fc", "optim.lr=2e-2", "train.steps=12",
                         "train.eval_every=0", "train.eval_batches=3", *small[:-1],
                         "run.checkpoint_every=12", "run.dir=" + run_dir)
        check(rc == 0 and os.path.exists(os.path.join(run_dir, "adapter_config.json")),
              "a LoRA run on the base writes its adapter", err)
        with open(os.path.join(run_dir, "adapter_config.json")) as f:
            check(json.load(f).get("base_model_name_or_path") == base,
                  "adapter_config.json names the base")
        val = last_val(run_dir)
        score = ["--data", P("data.bin"), "--batch-size", "2", "--batches", "3", "--json"]

        # 1. eval of the unmerged run: the trainer's validation loss
        rc, out, err = run("eval", "--model", run_dir, *score)
        check(rc == 0, "eval --model LORA_RUN_DIR works", err)
        lr = json.loads(out)["loss"] if rc == 0 else float("nan")
        check(val is not None and close(lr, val),
              "eval loss of base + adapter equals the run's final val loss (%r vs %r)" % (lr, val))
        check("adapter" in err.lower() and base in err, "eval says it scores an adapter on the base",
              err)
        rc, out, err = run("eval", "--model", base, *score, "--seq-len", "32")
        lb = json.loads(out)["loss"] if rc == 0 else float("nan")
        check(rc == 0 and abs(lb - lr) > 1e-3,
              "the adapter changes the loss (base %r, base + adapter %r)" % (lb, lr), err)
        ck = os.path.join(run_dir, "checkpoints", "step_00000012")
        rc, out, err = run("eval", "--model", ck, *score)
        check(rc == 0 and close(json.loads(out)["loss"], lr),
              "eval of the LoRA checkpoint (base from the run's config.yaml)", err + out)

        # 2. the merged model scores the same
        merged = P("merged")
        rc, out, err = run("merge", "--adapter", run_dir, "--out", merged)
        check(rc == 0, "merge without --base finds the base", err)
        rc, out, err = run("eval", "--model", merged, *score, "--seq-len", "32")
        lm = json.loads(out)["loss"] if rc == 0 else float("nan")
        check(rc == 0 and close(lm, lr),
              "eval of base + adapter equals the merged model's (%r vs %r)" % (lr, lm), err)

        # 3. sample on the unmerged run equals sample of the merged model
        greedy = ["--tokens", "12", "--temperature", "0", "--prompt", "3 10 17"]
        rc, out_r, err = run("sample", "--model", run_dir, *greedy)
        check(rc == 0 and len(out_r.split()) == 12, "sample --model LORA_RUN_DIR works", err)
        rc, out_m, err = run("sample", "--model", merged, *greedy)
        check(rc == 0 and out_r == out_m, "sample of base + adapter equals the merged model's",
              "%r vs %r" % (out_r, out_m))

        # 4. an adapter whose base is not here
        lone = P("lone_adapter")
        os.makedirs(lone)
        shutil.copy(os.path.join(run_dir, "adapter_model.safetensors"), lone)
        with open(os.path.join(run_dir, "adapter_config.json")) as f:
            ac = json.load(f)
        gone = P("moved", "base-model")
        ac["base_model_name_or_path"] = gone
        with open(os.path.join(lone, "adapter_config.json"), "w") as f:
            json.dump(ac, f)
        for sub in (["eval", "--model", lone, *score], ["sample", "--model", lone, "--tokens", "3"]):
            rc, out, err = run(*sub)
            check(rc == 2 and "adapter_config.json" in err and gone in err and "--base" in err
                  and "ctrain merge" in err and "Traceback" not in err,
                  "%s of an adapter whose base is missing: exit 2 naming adapter_config.json, "
                  "the base path, --base and ctrain merge" % sub[0], "exit %d: %s" % (rc, err))
        rc, out, err = run("eval", "--model", lone, "--base", base, *score, "--seq-len", "32")
        check(rc == 0 and close(json.loads(out)["loss"], lr), "eval --base DIR of that adapter", err)
        rc, out, err = run("sample", "--model", lone, "--base", base, *greedy)
        check(rc == 0 and out == out_r, "sample --base DIR of that adapter", err)
        rc, out, err = run("eval", "--model", merged, "--base", base, *score)
        check(rc == 2 and "adapter" in err, "--base with a full model is refused", err)

        # 5. merge copies the tokenizer files: the adapter's own, else the base's
        if os.path.exists(os.path.join(GPT2, "vocab.bpe")):
            shutil.copy(os.path.join(GPT2, "encoder.json"), os.path.join(lone, "vocab.json"))
            shutil.copy(os.path.join(GPT2, "vocab.bpe"), os.path.join(lone, "merges.txt"))
            rc, _, err = run("merge", "--adapter", lone, "--base", base, "--out", P("m2"))
            check(rc == 0 and all(os.path.isfile(P("m2", f)) for f in ("vocab.json", "merges.txt")),
                  "merge copies the adapter directory's tokenizer files", err)
            base_tok = P("base_tok")
            shutil.copytree(base, base_tok)
            with open(os.path.join(GPT2, "encoder.json")) as f:
                vocab = f.read()
            with open(os.path.join(base_tok, "vocab.json"), "w") as f:
                f.write(vocab)
            shutil.copy(os.path.join(GPT2, "vocab.bpe"), os.path.join(base_tok, "merges.txt"))
            with open(os.path.join(base_tok, "generation_config.json"), "w") as f:
                f.write("{}\n")
            rc, _, err = run("merge", "--adapter", run_dir, "--base", base_tok, "--out", P("m3"))
            check(rc == 0 and all(os.path.isfile(P("m3", f)) for f in
                                  ("vocab.json", "merges.txt", "generation_config.json")),
                  "merge copies the base's tokenizer and generation files", err)
        else:
            check(False, "data/gpt2-tokenizer missing: run scripts/fetch_data.sh")

        # 6. a LoRA run on fresh weights: the base is rebuilt from the run's config.yaml
        fresh = P("fresh")
        rc, _, err = run("train", "model.preset=gpt2-tiny", "lora.r=2", "lora.targets=c_proj",
                         "optim.lr=2e-2", "train.steps=6", "train.eval_every=0",
                         "train.eval_batches=2", *small, "run.dir=" + fresh)
        check(rc == 0, "a LoRA run on fresh weights", err)
        rc, out, err = run("eval", "--model", fresh, "--data", P("data.bin"), "--batch-size", "2",
                           "--batches", "2", "--json")
        fv = last_val(fresh)
        check(rc == 0 and fv is not None and close(json.loads(out)["loss"], fv),
              "eval of the fresh-weights LoRA run equals its val loss", err + out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s: %d failure(s)" % (os.path.basename(__file__), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
