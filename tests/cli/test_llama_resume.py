#!/usr/bin/env python3
"""A LLaMA built from a preset trains, checkpoints and resumes through the real program:
6 steps straight and 3 steps + train.resume=auto to 6 give bit-identical losses and final
weights; the saved model.safetensors holds Hugging Face LLaMA tensor names with a
LlamaConfig beside it; a run.dir whose checkpoint holds a GPT-2 is refused (exit 2) when
resumed as a LLaMA, naming both architectures.

usage: test_llama_resume.py path/to/ctrain
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


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print("ok   %s" % label)
    else:
        failures.append("%s: %s" % (label, detail))


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout + p.stderr


def losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            o = json.loads(line)
            if o.get("split") == "train":
                out[o["step"]] = o["loss"]
    return out


def st_names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return set(json.loads(f.read(n))) - {"__metadata__"}


def main():
    tmp = tempfile.mkdtemp(prefix="ctrain_llama_resume_")
    try:
        shard = os.path.join(tmp, "t.bin")
        toks = [(i * 7 + i // 5) % 64 for i in range(4000)]
        with open(shard, "wb") as f:
            f.write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)))
            f.write(struct.pack("<%dH" % len(toks), *toks))

        def args(preset, run_dir, steps, *extra):
            return ["train", "model.preset=" + preset, "data.train=" + shard, "data.shuffle=false",
                    "train.batch_size=4", "train.seq_len=32", "train.steps=%d" % steps,
                    "run.dir=" + run_dir, "run.checkpoint_every=3", *extra]

        a, b = os.path.join(tmp, "straight"), os.path.join(tmp, "resumed")
        rc1, out1 = run(*args("llama-tiny", a, 6))
        rc2, out2 = run(*args("llama-tiny", b, 3))
        rc3, out3 = run(*args("llama-tiny", b, 6, "train.resume=auto"))
        check("runs exit 0", rc1 == rc2 == rc3 == 0, (out1 + out2 + out3)[-800:])
        if rc1 == rc2 == rc3 == 0:
            la, lb = losses(a), losses(b)
            check("resumed losses bit-identical to the straight run",
                  la == lb and sorted(la) == list(range(1, 7)), "%s vs %s" % (la, lb))
            with open(os.path.join(a, "model.safetensors"), "rb") as f:
                wa = f.read()
            with open(os.path.join(b, "model.safetensors"), "rb") as f:
                wb = f.read()
            check("resumed final weights bit-identical", wa == wb)
            names = st_names(os.path.join(a, "model.safetensors"))
            want = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                    "model.layers.1.self_attn.k_proj.weight", "model.layers.0.mlp.up_proj.weight"}
            check("saved tensors carry HF LLaMA names", want <= names and
                  not any(n.startswith("h.") or n.startswith("wte") for n in names), sorted(names)[:6])
            with open(os.path.join(a, "config.json")) as f:
                cfg = json.load(f)
            check("config.json is a LlamaConfig", cfg.get("model_type") == "llama" and
                  cfg.get("num_key_value_heads") == 2 and cfg.get("architectures") == ["LlamaForCausalLM"],
                  str(cfg)[:300])

        g = os.path.join(tmp, "gpt2_run")
        rc, out = run(*args("gpt2-tiny", g, 3))
        check("gpt2 run exits 0", rc == 0, out[-400:])
        rc, out = run(*args("llama-tiny", g, 6, "train.resume=auto"))
        check("resuming a GPT-2 checkpoint as a LLaMA exits 2 naming both",
              rc == 2 and "gpt2" in out and "llama" in out, "exit %d: %s" % (rc, out[-500:]))
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
