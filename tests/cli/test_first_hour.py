#!/usr/bin/env python3
"""The ordinary mistakes of a new user get clear answers, through the real program.

- HF Trainer / nanoGPT key names suggest ctrain's (optim.learning_rate -> optim.lr).
- --config naming a directory says so.
- model.init_from naming model.safetensors or config.json uses its directory.
- A YAML key indented one column too deep gets a hint naming the line.
- eval on a shard too short for one batch names eval's own settings, not train.*.
- The start-up line says "1 thread", "1 shard"; config.json writes floats as their
  shortest decimal (1e-05, not 9.99999974737875e-06).
- A signal's closing message is printed once.
- A preset's toy vocabulary under GPT-2-tokenised shards: the hint names the
  vocab_size the shards need; "no model given" names a preset and the vocabulary.

usage: test_first_hour.py path/to/ctrain
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500])


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def main():
    tmp = tempfile.mkdtemp(prefix="ct_first_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        shard = P("train.bin")
        run("synth", "--out", shard, "--tokens", "20000", "--vocab", "64", "--seed", "1")
        base = ["model.preset=gpt2-tiny", f"data.train={shard}", "train.batch_size=2",
                "train.seq_len=16", "run.threads=1", "train.steps=2"]

        for theirs, ours in (("optim.learning_rate=1e-3", "optim.lr"),
                             ("per_device_train_batch_size=4", "train.batch_size"),
                             ("gradient_accumulation_steps=2", "train.grad_accum"),
                             ("output_dir=x", "run.dir"),
                             ("optim.learnin_rate=1e-3", "optim.lr")):
            rc, out = run("train", *base, theirs)
            check(f"{theirs.split('=')[0]}: exit 2 suggesting {ours}",
                  rc == 2 and f"did you mean '{ours}'" in out, out[-300:])

        rc, out = run("plan", "model.preset=gpt2-tiny")
        check("plan model.preset=gpt2-tiny with the default seq_len: the hint names the length",
              rc == 2 and "set train.seq_len=32" in out, out[-300:])

        rc, out = run("train", "--config", tmp)
        check("--config DIR: exit 2 saying it is a directory, not 'invalid YAML'",
              rc == 2 and "is a directory, expected a YAML config file" in out and
              "invalid YAML" not in out, out[-300:])

        with open(P("indent.yaml"), "w") as f:
            f.write("train:\n  steps: 10\n   seq_len: 16\n")
        rc, out = run("train", "--config", P("indent.yaml"))
        check("a key indented too deep: the hint names the line and the indentation",
              rc == 2 and "runs onto line 3" in out and "indented deeper" in out, out[-400:])

        rc, out = run("train", *base, f"run.dir={P('a')}")
        check("a plain run trains", rc == 0, out[-300:])
        check("the start-up line says '1 thread' and '1 shard'",
              "1 shard, 1 thread, run.dir" in out, out[:600])
        with open(P("a", "config.json")) as f:
            text = f.read()
        check("config.json writes layer_norm_epsilon as 1e-05",
              '"layer_norm_epsilon":\t1e-05' in text or '"layer_norm_epsilon": 1e-05' in text,
              text)

        for name in ("model.safetensors", "config.json"):
            rc, out = run("train", "model.init_from=" + P("a", name), f"data.train={shard}",
                          "train.batch_size=2", "train.seq_len=16", "train.steps=1",
                          "run.threads=1", f"run.dir={P('ft_' + name)}")
            check(f"model.init_from=DIR/{name}: trains from DIR, saying so",
                  rc == 0 and f"is a file: using its directory {P('a')}" in out, out[-400:])

        with open(P("tiny.bin"), "wb") as f:
            pass
        run("synth", "--out", P("tiny.bin"), "--tokens", "10", "--vocab", "64")
        rc, out = run("eval", "--model", P("a"), "--data", P("tiny.bin"))
        check("eval on a too-short shard names its own batch shape, not train.*",
              rc == 2 and "fewer than one batch of 1 rows x 16 tokens" in out and
              "train.batch_size" not in out, out[-400:])
        rc, out = run("train", *base, f"data.train={P('tiny.bin')}", f"run.dir={P('b')}")
        check("train on a too-short shard: the hint names train.batch_size and train.seq_len",
              rc == 2 and "train.batch_size x train.seq_len" in out, out[-400:])

        # a preset's toy vocabulary under GPT-2-tokenised text: the hint names the size
        tok = os.path.join(os.path.dirname(__file__), "..", "..", "data", "gpt2-tokenizer")
        with open(P("text.txt"), "w") as f:
            f.write("The quick brown fox jumps over the lazy dog. " * 200)
        rc, out = run("prepare", "--tokenizer", tok, "--out", P("shards"), "--no-cache",
                      P("text.txt"))
        if rc == 0:
            rc, out = run("train", "model.preset=gpt2-demo", f"data.train={P('shards')}",
                          "train.steps=1", f"run.dir={P('demo')}")
            check("gpt2-demo on GPT-2-tokenised shards: the hint names model.vocab_size=50257",
                  rc == 2 and "set model.vocab_size=50257" in out and "toy vocabularies" in out,
                  out[-500:])
        else:
            check("prepare with the GPT-2 tokenizer", False, out[-300:])
        rc, out = run("train", f"data.train={shard}", f"run.dir={P('none')}")
        check("no model given: the hint names a preset and the vocabulary to set with it",
              rc == 2 and "model.preset=gpt2-demo" in out and "model.vocab_size=50257" in out,
              out[-400:])

        p = subprocess.Popen([CTRAIN, "train", *base[:-1], "train.steps=100000",
                              "debug.sleep_ms=50", f"run.dir={P('sig')}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.5)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
        check("a stopped run's closing message is printed once",
              p.returncode == 130 and out.count("stopped by signal") == 1, out[-500:])
    finally:
        if failures:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks - len(failures)}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
