#!/usr/bin/env python3
"""Hostile Hugging Face directories through `ctrain eval` and `ctrain sample` (findings
of a fuzzing campaign). Each case exits with status 2 and names the file and the key or
tensor:
  - config.json sizes beyond the caps of the YAML keys model.* (n_layer 1e9, vocab_size
    20M, ...) are refused naming config.json, the key and the allowed range;
  - a config.json that declares far more than its weights hold (vocab_size 16,000,000,
    within the cap, over a tiny model's weights: 1 GiB of fp32 embedding) fails on the
    weight headers before the model is allocated: quickly and with a small peak RSS;
  - a model.safetensors.index.json without "weight_map" names the index file.
Standard library only.

usage: test_hf_hostile.py path/to/ctrain
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
checks = 0

# peak RSS of one ctrain run: a fresh interpreter whose only child is that run
RSS_PROBE = ("import resource, subprocess, sys\n"
             "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
             "sys.stdout.write('%d %d\\n' % (p.returncode, "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
             "sys.stdout.write(p.stdout + p.stderr)\n")


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300, env=env)
    return p.returncode, p.stdout + p.stderr


def run_measured(*args):
    """(exit status, output, seconds, peak RSS in MiB) of one ctrain run."""
    env = dict(os.environ, OMP_NUM_THREADS="2")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", RSS_PROBE, CTRAIN, *args], capture_output=True,
                       text=True, timeout=300, env=env)
    secs = time.monotonic() - t0
    head, _, out = p.stdout.partition("\n")
    rc, kib = (int(x) for x in head.split())
    return rc, out, secs, kib / 1024.0


def expect_fail(label, args, must_contain, max_s=None, max_mib=None):
    global checks
    checks += 1
    if max_s is None:
        rc, out = run(*args)
        secs = mib = 0.0
    else:
        rc, out, secs, mib = run_measured(*args)
    problems = []
    if rc != 2:
        problems.append("exit status %d, expected 2" % rc)
    for s in must_contain:
        if s not in out:
            problems.append("message lacks %r" % s)
    if max_s is not None and secs > max_s:
        problems.append("took %.2f s, expected under %.1f s" % (secs, max_s))
    if max_mib is not None and mib > max_mib:
        problems.append("peak RSS %.0f MiB, expected under %d MiB" % (mib, max_mib))
    if problems:
        failures.append("%s: %s\n    output: %s" % (label, "; ".join(problems), out.strip()[:500]))
    else:
        err = [line for line in out.splitlines() if "error" in line] or [out.strip()]
        extra = " (%.2f s, %.0f MiB)" % (secs, mib) if max_s is not None else ""
        print("ok   %s%s: %s" % (label, extra, err[0][:200]))


def both(label, d, shard, must, **kw):
    """The same failure through sample and eval."""
    expect_fail("sample: " + label, ["sample", "--model", d, "--tokens", "2"], must, **kw)
    expect_fail("eval: " + label, ["eval", "--model", d, "--data", shard], must, **kw)


def main():
    global checks
    tmp = tempfile.mkdtemp(prefix="ct_hf_hostile_")
    try:
        shard = os.path.join(tmp, "val.bin")
        rc, out = run("synth", "--out", shard, "--tokens", "5000", "--vocab", "64")
        assert rc == 0, out
        goods = {}
        for preset in ("gpt2-tiny", "llama-tiny"):
            d = os.path.join(tmp, "good_" + preset)
            rc, out = run("train", "model.preset=" + preset, "data.train=" + shard,
                          "train.steps=1", "train.batch_size=2", "train.seq_len=8",
                          "run.dir=" + d)
            assert rc == 0, out
            goods[preset] = d
            # the untouched directory works (the failures below are about what was changed)
            checks += 1
            rc, out = run("eval", "--model", d, "--data", shard, "--batches", "1")
            if rc != 0:
                failures.append("eval of the valid %s directory: exit %d\n    %s"
                                % (preset, rc, out[-400:]))
            else:
                print("ok   the valid %s directory evaluates" % preset)

        def model_dir(name, preset, change):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            good = goods[preset]
            shutil.copy(os.path.join(good, "model.safetensors"), d)
            cfg = json.load(open(os.path.join(good, "config.json")))
            cfg.update(change)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(cfg, f)
            return d

        # --- sizes beyond the caps of the YAML keys ------------------------------------
        cases = [
            ("gpt2-tiny", "n_layer", 1000000000, "1..4096"),
            ("gpt2-tiny", "n_embd", 1000000000, "1..1048576"),
            ("gpt2-tiny", "n_inner", 1000000000, "0..4194304"),
            ("gpt2-tiny", "vocab_size", 20000000, "2..16777216"),
            ("gpt2-tiny", "n_positions", 1 << 21, "1..1048576"),
            ("llama-tiny", "num_hidden_layers", 4097, "1..4096"),
            ("llama-tiny", "intermediate_size", 1000000000, "1..4194304"),
            ("llama-tiny", "num_key_value_heads", 1000000000, "1..4096"),
            ("llama-tiny", "max_position_embeddings", 1000000000, "1..1048576"),
        ]
        for preset, key, value, rng in cases:
            d = model_dir("cap_%s_%s" % (preset, key), preset, {key: value})
            both("%s %s = %d" % (preset, key, value), d, shard,
                 [os.path.join(d, "config.json"), '"%s"' % key, rng])

        # --- config.json declares more than the weights: headers before memory ----------
        d = model_dir("lie_gpt2", "gpt2-tiny", {"vocab_size": 16000000})
        both("gpt2 vocab_size 16M over tiny weights", d, shard,
             [os.path.join(d, "model.safetensors"), "wte.weight", "[16000000, 16]"],
             max_s=2.0, max_mib=200)
        d = model_dir("lie_llama", "llama-tiny", {"vocab_size": 16000000})
        both("llama vocab_size 16M over tiny weights", d, shard,
             [os.path.join(d, "model.safetensors"), "model.embed_tokens.weight",
              "[16000000, 32]"], max_s=2.0, max_mib=200)
        d = model_dir("lie_layers", "llama-tiny", {"num_hidden_layers": 4096,
                                                   "intermediate_size": 4194304})
        both("llama 4096 layers of width 4M over tiny weights", d, shard,
             [os.path.join(d, "model.safetensors"), "model.layers.0.mlp.gate_proj.weight"],
             max_s=2.0, max_mib=200)

        # --- an index without weight_map ------------------------------------------------
        for label, index in (("no weight_map", {"metadata": {}}),
                             ("weight_map not an object", {"weight_map": ["a", "b"]})):
            d = model_dir("index_" + label.replace(" ", "_"), "llama-tiny", {})
            os.remove(os.path.join(d, "model.safetensors"))
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump(index, f)
            both("index with " + label, d, shard,
                 [os.path.join(d, "model.safetensors.index.json"), "weight_map"])
    finally:
        if failures:
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL " + f)
    print("test_hf_hostile: %d checks, %d failed" % (checks, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
