#!/usr/bin/env python3
"""The paths the chosen CLI tests reach only through their refusals, run
once each for `make valgrind` (tests/soak/valgrind_run.py): `ctrain sample`
that succeeds (token ids with temperature and top-k on GPT-2 and LLaMA, text
through the GPT-2 tokenizer), `eval --json` of a run directory, `plan --json`
of the 124M preset, `hw --json --no-bench`, `tokenize` and `--decode` back,
and `report` of a finished run. Each must exit 0 with the output it promises.
Not part of the default suite (the CLI tests cover these paths' results);
it exists so that valgrind sees them.

usage: valgrind_smoke.py path/to/ctrain
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOK = os.path.join(ROOT, "data", "gpt2-tokenizer")
failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    print(f"{'ok  ' if ok else 'FAIL'} {label}" + ("" if ok else f": {detail}"[:1500]))
    if not ok:
        failures.append(label)


def run(*args, stdin=None):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([CTRAIN, *args], input=stdin, capture_output=True, timeout=1800,
                       env=env)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def main():
    tmp = tempfile.mkdtemp(prefix="ct_vg_smoke_")
    try:
        shard = os.path.join(tmp, "train.bin")
        rc, out, err = run("synth", "--out", shard, "--tokens", "5000", "--vocab", "64")
        check("synth", rc == 0, err)
        small = ["train.steps=3", "train.batch_size=2", "train.seq_len=16", "run.threads=1",
                 f"data.train={shard}"]
        gpt2, llama, wide = (os.path.join(tmp, n) for n in ("gpt2", "llama", "wide"))
        for d, model in ((gpt2, ["model.preset=gpt2-tiny"]),
                         (llama, ["model.preset=llama-tiny"]),
                         (wide, ["model.preset=gpt2-tiny", "model.vocab_size=50257"])):
            rc, out, err = run("train", *model, *small, f"run.dir={d}")
            check(f"train {' '.join(model)}", rc == 0, err[-500:])
        for d, name in ((gpt2, "gpt2"), (llama, "llama")):
            rc, out, err = run("sample", "--model", d, "--prompt", "1 2 3", "--tokens", "6",
                               "--temperature", "0.8", "--top-k", "5", "--seed", "3",
                               "--threads", "1", "--ignore-eos")
            check(f"sample {name}: 6 token ids after the prompt", rc == 0 and
                  len(out.split()) >= 6 and all(t.isdigit() for t in out.split()), out + err)
            rc, out, err = run("sample", "--model", d, "--tokens", "4", "--temperature", "0",
                               "--threads", "1", "--ignore-eos")
            check(f"sample {name}: greedy", rc == 0 and out.split(), out + err)
        rc, out, err = run("sample", "--model", wide, "--tokenizer", TOK, "--prompt",
                           "Hello there", "--tokens", "4", "--seed", "1", "--threads", "1")
        check("sample with the GPT-2 tokenizer: text", rc == 0 and out.strip(), out + err)
        rc, out, err = run("eval", "--model", gpt2, "--data", shard, "--batches", "2",
                           "--batch-size", "2", "--seq-len", "16", "--threads", "1", "--json")
        ok = rc == 0
        try:
            ok = ok and json.loads(out.strip().splitlines()[-1]).get("loss", 0) > 0
        except (ValueError, IndexError, AttributeError):
            ok = False
        check("eval --json of a run directory", ok, out + err)
        rc, out, err = run("plan", "model.preset=gpt2", "--json")
        check("plan --json of the 124M preset", rc == 0 and "params_bytes" in out, out + err)
        rc, out, err = run("hw", "--json", "--no-bench")
        check("hw --json --no-bench", rc == 0 and "signature" in out, out + err)
        text = "Soak and valgrind: caf\u00e9 \u2014 1234 tokens!\n"
        rc, ids, err = run("tokenize", "--tokenizer", TOK, stdin=text.encode())
        check("tokenize", rc == 0 and ids.split(), err)
        rc, back, err = run("tokenize", "--tokenizer", TOK, "--decode", stdin=ids.encode())
        check("tokenize --decode gives the text back", rc == 0 and back == text,
              repr(back) + err)
        page = os.path.join(tmp, "report.html")
        rc, out, err = run("report", gpt2, "--out", page)
        check("report of a finished run", rc == 0 and os.path.getsize(page) > 1000, out + err)
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"valgrind_smoke: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
