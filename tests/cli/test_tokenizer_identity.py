#!/usr/bin/env python3
"""The tokenizer travels with the data and the model, and a mismatch is refused.

usage: /usr/bin/python3 tests/cli/test_tokenizer_identity.py path/to/ctrain

A small GPT-2 with GPT-2's whole vocabulary (50257, so LLaMA's 32000 ids fit it) is written in
Hugging Face layout with GPT-2's tokenizer beside it as vocab.json + merges.txt, as a downloaded
model directory has it. Text is prepared twice: with GPT-2's tokenizer and with LLaMA's.
Checks:
  - training it (model.init_from) on the LLaMA shards: exit 2 naming both tokenizers (their
    identities), both config keys and both paths, before run.dir is made;
  - a full fine-tune on the GPT-2 shards: run.dir and every checkpoint hold the tokenizer files
    (listed in the checkpoint's MANIFEST.json), `sample --tokenizer RUN_DIR` prints text, and
    eval on the GPT-2 shards works;
  - resuming that run on the LLaMA shards: exit 2 naming the checkpoint's tokenizer;
  - sample with LLaMA's tokenizer, and eval on the LLaMA shards: exit 2 naming both; so is a
    data.val of the other tokenizer; a manifest of another program, or one that does not list
    the shard named, is not used; a damaged ctrain manifest is named (exit 2);
  - a model trained from scratch on the LLaMA shards carries LLaMA's tokenizer.json in run.dir;
  - a model directory whose tokenizer.json ctrain cannot read (WordPiece) is refused with the
    reason and the way out, run.dir untouched (it used to train, and save the shards' GPT-2
    files beside it); with --tokenizer (data.tokenizer) naming a tokenizer that reads, that
    tokenizer stands for the model's: checked against the shards (and against a model whose
    own files load), and the only one in run.dir.
Needs data/gpt2-tokenizer, data/llama-tokenizer and data/brown/text (scripts/fetch_data.sh).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA = os.path.join(ROOT, "data", "llama-tokenizer")
failures = 0


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok else " " + str(detail)[-1500:]))
    if not ok:
        failures += 1


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def identity(shards):
    with open(os.path.join(shards, "manifest.json")) as f:
        return json.load(f)["tokenizer"]["identity"]


def main():
    brown = sorted(glob.glob(os.path.join(ROOT, "data", "brown", "text", "*")))
    if not os.path.exists(os.path.join(GPT2, "vocab.bpe")) or not os.path.isdir(LLAMA) or not brown:
        print("FAIL: reference data missing: run scripts/fetch_data.sh")
        return 1
    tmp = tempfile.mkdtemp(prefix="ct_tok_ident_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    small = ["train.batch_size=2", "train.seq_len=32", "train.eval_batches=2"]
    try:
        # the "downloaded" GPT-2: full vocabulary, tiny otherwise; tokenizer under HF's names
        rc, _, err = run("synth", "--out", P("rand.bin"), "--tokens", "4000", "--vocab", "50257")
        check(rc == 0, "synth", err)
        rc, _, err = run("train", "model.arch=gpt2", "model.n_layer=1", "model.n_head=2",
                         "model.n_embd=16", "model.vocab_size=50257", "model.n_ctx=64",
                         "data.train=" + P("rand.bin"), "train.steps=1", "run.checkpoint_every=0",
                         "run.dir=" + P("base_run"), *small)
        check(rc == 0, "a small GPT-2 with GPT-2's vocabulary is built", err)
        base = P("gpt2-small")
        os.makedirs(base)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(P("base_run", f), base)
        shutil.copy(os.path.join(GPT2, "encoder.json"), os.path.join(base, "vocab.json"))
        shutil.copy(os.path.join(GPT2, "vocab.bpe"), os.path.join(base, "merges.txt"))

        text = P("text")
        os.makedirs(text)
        for f in brown[:12]:
            shutil.copy(f, text)
        for tag, tok in (("gpt2", GPT2), ("llama", LLAMA)):
            rc, _, err = run("prepare", "--tokenizer", tok, "--out", P(tag), "--quiet", "--no-cache",
                             "--val-tokens", "2000", text)
            check(rc == 0, "prepare with %s's tokenizer" % tag, err)
        id_gpt2, id_llama = identity(P("gpt2")), identity(P("llama"))

        # 1. GPT-2 on LLaMA-tokenised shards: refused before run.dir exists
        rc, _, err = run("train", "model.init_from=" + base, "data.train=" + P("llama"),
                         "train.steps=2", "run.dir=" + P("bad_run"), *small)
        check(rc == 2 and id_gpt2 in err and id_llama in err and "model.init_from" in err and
              "data.train" in err and base in err and P("llama", "manifest.json") in err and
              not os.path.exists(P("bad_run")),
              "model.init_from (GPT-2) on LLaMA shards: exit 2 naming both tokenizers",
              "exit %d: %s" % (rc, err))

        # 2. a full fine-tune: the tokenizer beside the weights, in run.dir and each checkpoint
        ft = P("ft")
        rc, _, err = run("train", "model.init_from=" + base, "data.train=" + P("gpt2"),
                         "data.val=" + P("gpt2"), "train.steps=2", "run.checkpoint_every=1",
                         "run.dir=" + ft, *small)
        check(rc == 0, "fine-tune on the GPT-2 shards", err)
        check(all(os.path.isfile(os.path.join(ft, f)) for f in ("vocab.json", "merges.txt")),
              "run.dir holds the tokenizer (vocab.json + merges.txt)", sorted(os.listdir(ft)))
        ck = os.path.join(ft, "checkpoints", "step_00000001")
        with open(os.path.join(ck, "MANIFEST.json")) as f:
            listed = [e["name"] for e in json.load(f)["files"]]
        check(all(os.path.isfile(os.path.join(ck, f)) and f in listed for f in ("vocab.json", "merges.txt")),
              "each checkpoint holds the tokenizer files, listed in its manifest", listed)
        rc, out, err = run("sample", "--model", ft, "--tokenizer", ft, "--prompt", "The jury said",
                           "--tokens", "8", "--temperature", "0")
        check(rc == 0 and out.strip() and not out.strip().replace(" ", "").isdigit(),
              "sample --tokenizer RUN_DIR prints text", "exit %d: %s%s" % (rc, out, err))
        rc, out, err = run("sample", "--model", ck, "--tokenizer", GPT2, "--prompt", "The jury",
                           "--tokens", "4")
        check(rc == 0, "sample a checkpoint with the same tokenizer in another format", err)
        rc, out, err = run("eval", "--model", ft, "--data", P("gpt2"), "--seq-len", "32", "--json")
        check(rc == 0, "eval on shards of the model's tokenizer", err)

        # 3. a resume on LLaMA shards: the checkpoint's tokenizer speaks against it
        rc, _, err = run("train", "model.init_from=" + base, "data.train=" + P("llama"),
                         "train.steps=3", "train.resume=auto", "run.checkpoint_every=1",
                         "run.dir=" + ft, *small)
        check(rc == 2 and "checkpoint" in err and id_gpt2 in err and id_llama in err,
              "resuming on LLaMA shards: exit 2 naming both", "exit %d: %s" % (rc, err))

        # 4. sample and eval with what does not belong to the model
        rc, out, err = run("sample", "--model", ft, "--tokenizer", LLAMA, "--prompt", "The jury",
                           "--tokens", "4")
        check(rc == 2 and id_gpt2 in err and id_llama in err and LLAMA in err and ft in err and not out,
              "sample with LLaMA's tokenizer on the GPT-2 run: exit 2 naming both",
              "exit %d: %s%s" % (rc, out[:200], err))
        rc, out, err = run("eval", "--model", ft, "--data", P("llama"), "--seq-len", "32")
        check(rc == 2 and id_gpt2 in err and id_llama in err and P("llama") in err,
              "eval of the GPT-2 run on LLaMA shards: exit 2 naming both", "exit %d: %s" % (rc, err))

        rc, _, err = run("train", "model.init_from=" + base, "data.train=" + P("gpt2"),
                         "data.val=" + P("llama"), "train.steps=2", "run.dir=" + P("bad_val"), *small)
        check(rc == 2 and "data.val" in err and id_gpt2 in err and id_llama in err,
              "data.val prepared with another tokenizer: exit 2", "exit %d: %s" % (rc, err))

        # which manifests speak for which shards
        shard = sorted(glob.glob(P("gpt2", "train_*.bin")))[0]
        for d in ("other", "damaged", "mixed"):
            os.makedirs(P(d))
        shutil.copy(shard, P("other", "val_000000.bin"))
        with open(P("other", "manifest.json"), "w") as f:
            json.dump({"format": "someone-else/3", "tokenizer": "whatever"}, f)
        rc, _, err = run("eval", "--model", ft, "--data", P("other"), "--seq-len", "32")
        check(rc == 0, "another program's manifest.json says nothing of the tokenizer", err)
        shutil.copy(shard, P("damaged", "val_000000.bin"))
        with open(P("damaged", "manifest.json"), "w") as f:
            json.dump({"format": "ctrain-shards/1", "tokenizer": {"identity": 12}}, f)
        rc, _, err = run("eval", "--model", ft, "--data", P("damaged"), "--seq-len", "32")
        check(rc == 2 and P("damaged", "manifest.json") in err and "tokenizer.identity" in err,
              "a damaged manifest: exit 2 naming the file and the key", "exit %d: %s" % (rc, err))
        shutil.copy(P("llama", "manifest.json"), P("mixed"))
        shutil.copy(shard, P("mixed", "extra.bin"))
        rc, _, err = run("eval", "--model", ft, "--data", P("mixed", "extra.bin"), "--seq-len", "32")
        check(rc == 0, "a shard the manifest beside it does not list is not judged by it", err)

        # 5. from scratch on LLaMA shards: LLaMA's tokenizer.json in run.dir
        lr = P("llama_run")
        rc, _, err = run("train", "model.arch=llama", "model.n_layer=1", "model.n_head=2",
                         "model.n_kv_head=1", "model.n_embd=16", "model.n_ffn=32",
                         "model.vocab_size=32000", "model.n_ctx=64", "data.train=" + P("llama"),
                         "train.steps=1", "run.dir=" + lr, *small)
        check(rc == 0 and os.path.isfile(os.path.join(lr, "tokenizer.json")),
              "a LLaMA trained from scratch carries tokenizer.json", err)
        rc, out, err = run("sample", "--model", lr, "--tokenizer", lr, "--tokens", "4")
        check(rc == 0, "sample --tokenizer RUN_DIR (LLaMA)", err)
        rc, out, err = run("sample", "--model", lr, "--tokenizer", GPT2, "--tokens", "4")
        check(rc == 2 and id_gpt2 in err and id_llama in err,
              "sample with GPT-2's tokenizer on the LLaMA run: exit 2", "exit %d: %s" % (rc, err))

        # 6. a model whose tokenizer ctrain cannot read (a WordPiece tokenizer.json beside it):
        #    refused with the reason; data.tokenizer / --tokenizer stands for it, checked
        smol = P("unreadable")
        os.makedirs(smol)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(base, f), smol)
        wp = {"version": "1.0", "added_tokens": [], "normalizer": {"type": "BertNormalizer"},
              "pre_tokenizer": {"type": "BertPreTokenizer"},
              "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                        "max_input_chars_per_word": 100,
                        "vocab": {"[UNK]": 0, "the": 1, "jury": 2, "##s": 3}}}
        with open(os.path.join(smol, "tokenizer.json"), "w") as f:
            json.dump(wp, f)
        with open(os.path.join(smol, "tokenizer_config.json"), "w") as f:
            json.dump({"eos_token": "[UNK]"}, f)
        rc, _, err = run("train", "model.init_from=" + smol, "data.train=" + P("gpt2"),
                         "train.steps=1", "run.dir=" + P("unread_run"), *small)
        check(rc == 2 and "model.init_from" in err and smol in err and "do not load" in err and
              "WordPiece" in err and "data.tokenizer" in err and "--tokenizer" in err and
              not os.path.exists(P("unread_run")),
              "a model whose tokenizer files do not load: exit 2 with the reason, nothing written",
              "exit %d: %s" % (rc, err))
        ur = P("unread_given")
        rc, _, err = run("train", "model.init_from=" + smol, "data.train=" + P("gpt2"),
                         "--tokenizer", GPT2, "train.steps=1", "run.checkpoint_every=1",
                         "run.dir=" + ur, *small)
        listed = sorted(f for f in os.listdir(ur) if "vocab" in f or "merges" in f or
                        f.startswith("tokenizer")) if os.path.isdir(ur) else []
        check(rc == 0 and listed == ["merges.txt", "vocab.json"],
              "--tokenizer (data.tokenizer) stands for it: run.dir holds that tokenizer only",
              "exit %d, %s: %s" % (rc, listed, err))
        if rc == 0:
            rc, out, err = run("sample", "--model", ur, "--tokenizer", ur, "--prompt", "The jury",
                               "--tokens", "4")
            check(rc == 0, "sample --tokenizer RUN_DIR of that run", err)
        rc, _, err = run("train", "model.init_from=" + smol, "data.train=" + P("gpt2"),
                         "data.tokenizer=" + LLAMA, "train.steps=1", "run.dir=" + P("unread_bad"),
                         *small)
        check(rc == 2 and "data.tokenizer" in err and "data.train" in err and id_llama in err and
              id_gpt2 in err and not os.path.exists(P("unread_bad")),
              "data.tokenizer of another tokenizer than the shards': exit 2 naming both",
              "exit %d: %s" % (rc, err))
        rc, _, err = run("train", "model.init_from=" + base, "data.train=" + P("gpt2"),
                         "data.tokenizer=" + LLAMA, "train.steps=1", "run.dir=" + P("given_bad"),
                         *small)
        check(rc == 2 and "data.tokenizer" in err and "model.init_from" in err and id_llama in err
              and id_gpt2 in err, "data.tokenizer against a model whose own files load: checked",
              "exit %d: %s" % (rc, err))
        rc, _, err = run("train", "model.init_from=" + smol, "data.train=" + P("gpt2"),
                         "data.tokenizer=" + P("nowhere"), "train.steps=1",
                         "run.dir=" + P("given_missing"), *small)
        check(rc == 2 and "data.tokenizer" in err and P("nowhere") in err,
              "a data.tokenizer that is not there: exit 2 naming it", "exit %d: %s" % (rc, err))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s: %d failure(s)" % (os.path.basename(__file__), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
