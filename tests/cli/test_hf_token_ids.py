#!/usr/bin/env python3
"""Token ids survive a fine-tune: bos/eos/pad in config.json, and generation_config.json.

usage: /usr/bin/python3 tests/cli/test_hf_token_ids.py path/to/ctrain

A tiny Llama is written in Hugging Face layout (one training step from a preset),
then its config.json is given the token ids a real checkpoint has, and it is
fine-tuned from there (model.init_from). Checks, for the run directory's model
and for a LoRA run merged with `ctrain merge`:
  - scalar ids (bos 1, eos 2, pad 0) come back in config.json as they went in, and a
    generation_config.json is made from them (_from_model_config, the same ids);
  - Llama 3's form, a list of eos ids and a null pad, comes back as a list and a null;
  - a generation_config.json of the base's own (sampling settings of its authors) is
    kept byte for byte, not replaced by one made from config.json;
  - a model with no ids gets none invented in generation_config.json's place.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
failures = 0


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok else " " + str(detail)[-1500:]))
    if not ok:
        failures += 1


def run(*args, cwd=None):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120,
                       env=env, cwd=cwd)
    return p.returncode, p.stdout + p.stderr


def load(path):
    with open(path) as f:
        return json.load(f)


TRAIN = ["train.batch_size=2", "train.seq_len=8", "train.steps=1", "run.checkpoint_every=0"]


def base(tmp, name, ids, gen=None):
    """An HF directory: the preset's weights, config.json with ids merged in."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(tmp, "made", f), d)
    cfg = load(os.path.join(d, "config.json"))
    for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
        cfg.pop(k, None)
    cfg.update(ids)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if gen is not None:
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            f.write(gen)
    return d


def main():
    tmp = tempfile.mkdtemp(prefix="ct_hfids_")
    try:
        s = os.path.join(tmp, "s.bin")
        rc, out = run("synth", "--out", s, "--tokens", "4000", "--vocab", "64")
        check(rc == 0, "synth", out)
        rc, out = run("train", "model.preset=llama-tiny", "data.train=" + s,
                      "run.dir=" + os.path.join(tmp, "made"), *TRAIN)
        check(rc == 0, "preset run writes an HF model", out)

        def finetune(d, tag, lora=False):
            rd = os.path.join(tmp, "run_" + tag)
            extra = ["lora.r=4"] if lora else []
            rc, out = run("train", "model.init_from=" + d, "data.train=" + s,
                          "run.dir=" + rd, *extra, *TRAIN)
            check(rc == 0, tag + ": fine-tune runs", out)
            if not lora:
                return rd
            md = os.path.join(tmp, "merged_" + tag)
            rc, out = run("merge", "--adapter", rd, "--out", md)
            check(rc == 0, tag + ": merge runs", out)
            return md

        # scalar ids, no generation_config.json: one is made from them
        ids = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
        d = base(tmp, "scalar", ids)
        for tag, lora in (("scalar", False), ("scalar_lora", True)):
            out = finetune(d, tag, lora)
            cfg = load(os.path.join(out, "config.json"))
            got = {k: cfg.get(k) for k in ids}
            check(got == ids, tag + ": config.json keeps bos/eos/pad", got)
            gp = os.path.join(out, "generation_config.json")
            gen = load(gp) if os.path.exists(gp) else None
            want = dict(ids, _from_model_config=True)
            check(gen is not None and {k: gen.get(k) for k in want} == want,
                  tag + ": generation_config.json made from config.json's ids", gen)

        # Llama 3's form: several eos ids, pad null
        ids3 = {"bos_token_id": 1, "eos_token_id": [2, 3, 5], "pad_token_id": None}
        d = base(tmp, "list", ids3)
        out = finetune(d, "list")
        cfg = load(os.path.join(out, "config.json"))
        check(cfg.get("eos_token_id") == [2, 3, 5], "list: eos_token_id stays a list",
              cfg.get("eos_token_id"))
        check(cfg.get("bos_token_id") == 1, "list: bos_token_id kept", cfg.get("bos_token_id"))
        check(cfg.get("pad_token_id") is None, "list: pad stays null or absent",
              cfg.get("pad_token_id"))
        gen = load(os.path.join(out, "generation_config.json"))
        check(gen.get("eos_token_id") == [2, 3, 5], "list: generation_config.json's eos list",
              gen)

        # the base's own generation_config.json is carried unchanged
        own = ('{\n  "bos_token_id": 1,\n  "do_sample": true,\n  "eos_token_id": [2, 3],\n'
               '  "temperature": 0.6,\n  "top_p": 0.9\n}\n')
        d = base(tmp, "own", ids, gen=own)
        for tag, lora in (("own", False), ("own_lora", True)):
            out = finetune(d, tag, lora)
            with open(os.path.join(out, "generation_config.json")) as f:
                got = f.read()
            check(got == own, tag + ": the base's generation_config.json kept byte for byte",
                  got)

        # no ids at all: nothing invented
        d = base(tmp, "none", {})
        out = finetune(d, "none")
        cfg = load(os.path.join(out, "config.json"))
        check(not any(k in cfg for k in ("bos_token_id", "pad_token_id")),
              "none: no bos/pad invented in config.json",
              {k: cfg.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")})
        check(not os.path.exists(os.path.join(out, "generation_config.json")),
              "none: no generation_config.json made without ids")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILURES:", failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
