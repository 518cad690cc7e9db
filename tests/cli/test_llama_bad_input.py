#!/usr/bin/env python3
"""Hugging Face LLaMA directories through the real program: a valid sharded F32/BF16
directory trains, and every broken one exits with status 2, prints an error naming the
file and the key or tensor with what was expected, and writes nothing (the run directory
is never created). Standard library only: the safetensors files are written here.

usage: test_llama_bad_input.py path/to/ctrain
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
checks = 0

CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
       "intermediate_size": 24, "num_hidden_layers": 1, "num_attention_heads": 4,
       "num_key_value_heads": 2, "vocab_size": 32, "max_position_embeddings": 16,
       "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "hidden_act": "silu",
       "tie_word_embeddings": False, "attention_bias": False}


def shapes():
    C, F, V, KC = 16, 24, 32, 8
    p = "model.layers.0."
    return {"model.embed_tokens.weight": [V, C], p + "input_layernorm.weight": [C],
            p + "self_attn.q_proj.weight": [C, C], p + "self_attn.k_proj.weight": [KC, C],
            p + "self_attn.v_proj.weight": [KC, C], p + "self_attn.o_proj.weight": [C, C],
            p + "post_attention_layernorm.weight": [C], p + "mlp.gate_proj.weight": [F, C],
            p + "mlp.up_proj.weight": [F, C], p + "mlp.down_proj.weight": [C, F],
            "model.norm.weight": [C], "lm_head.weight": [V, C]}


def write_st(path, tensors, dtype="F32"):
    """tensors: {name: (shape, [floats])}; F32 or BF16 (truncated bits, fine for tests)."""
    header, blobs, off = {}, [], 0
    for name, (shape, vals) in tensors.items():
        if dtype == "F32":
            raw = struct.pack("<%df" % len(vals), *vals)
        else:
            raw = b"".join(struct.pack("<f", v)[2:] for v in vals)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_dir(path, cfg=None, dtype="F32", shape_override=None, drop=None):
    """A two-shard LLaMA directory with an index."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg or CFG, f)
    rnd = random.Random(1)
    names = list(shapes())
    wmap = {}
    for i in range(2):
        fname = "model-%05d-of-00002.safetensors" % (i + 1)
        part = {}
        for n in names[i::2]:
            shape = (shape_override or {}).get(n, shapes()[n])
            count = 1
            for d in shape:
                count *= d
            vals = [1.0 + 0.1 * rnd.uniform(-1, 1) if len(shape) == 1 else 0.2 * rnd.uniform(-1, 1)
                    for _ in range(count)]
            if n != drop:
                part[n] = (shape, vals)
            wmap[n] = fname
        write_st(os.path.join(path, fname), part, dtype)
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f)


def write_shard(path, tokens):
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens))


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout + p.stderr


def train_args(model, shard, run_dir):
    return ["train", "model.init_from=" + model, "data.train=" + shard, "train.batch_size=2",
            "train.seq_len=8", "train.steps=1", "run.dir=" + run_dir, "run.checkpoint_every=0"]


def expect_fail(label, args, must_contain, run_dir):
    global checks
    checks += 1
    rc, out = run(*args)
    problems = []
    if rc != 2:
        problems.append("exit status %d, expected 2" % rc)
    for s in must_contain:
        if s not in out:
            problems.append("message lacks %r" % s)
    if os.path.exists(run_dir):
        problems.append("%s was created" % run_dir)
    if problems:
        failures.append("%s: %s\n    output: %s" % (label, "; ".join(problems), out.strip()[:500]))
    else:
        err = [line for line in out.splitlines() if "error" in line] or [out.strip()]
        print("ok   %s: %s" % (label, err[0][:200]))


def main():
    global checks
    tmp = tempfile.mkdtemp(prefix="ctrain_llama_bad_")
    try:
        shard = os.path.join(tmp, "train.bin")
        write_shard(shard, [(i * 7) % 32 for i in range(200)])
        # the valid directories train (so the failures below are about what was broken)
        for dtype in ("F32", "BF16"):
            good = os.path.join(tmp, "good_" + dtype)
            make_dir(good, dtype=dtype)
            checks += 1
            rc, out = run(*train_args(good, shard, os.path.join(tmp, "run_good_" + dtype)))
            if rc != 0:
                failures.append("valid sharded %s directory: exit %d\n    %s" % (dtype, rc, out[-600:]))
            else:
                print("ok   valid sharded %s directory trains" % dtype)
        run_dir = os.path.join(tmp, "run_bad")

        d = os.path.join(tmp, "missing_shard")
        make_dir(d)
        os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
        expect_fail("index names a missing shard", train_args(d, shard, run_dir),
                    ["model.safetensors.index.json", "model-00002-of-00002.safetensors"], run_dir)

        # (linear and llama3 RoPE scaling, head_dim, attention biases and model_type
        # mistral are supported now: what is refused is what is not built, or what the
        # weights do not hold)
        cases = [
            ("rope_scaling dynamic", {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
             ["config.json", "rope_scaling", "dynamic"]),
            ("rope_scaling llama3 without its fields",
             {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
             ["config.json", "rope_scaling", "low_freq_factor", "llama3"]),
            ("heads do not divide hidden_size", {"num_attention_heads": 3},
             ["config.json", "num_attention_heads", "hidden_size"]),
            ("kv heads do not divide heads", {"num_key_value_heads": 3},
             ["config.json", "num_key_value_heads"]),
            ("head_dim the weights do not have", {"head_dim": 8},
             ["self_attn.q_proj.weight", "[16, 16]", "[32, 16]"]),
            ("attention_bias the weights do not have", {"attention_bias": True},
             ["self_attn.q_proj.bias", "is missing", "attention_bias"]),
            ("hidden_act gelu", {"hidden_act": "gelu"}, ["config.json", "hidden_act", "silu"]),
            ("hidden_size missing", {"hidden_size": None}, ["config.json", "hidden_size"]),
            ("unknown model_type", {"model_type": "phi3"},
             ["config.json", "model_type", "phi3", "qwen3"]),
        ]
        for label, change, want in cases:
            d = os.path.join(tmp, label.replace(" ", "_"))
            cfg = dict(CFG)
            for k, v in change.items():
                if v is None:
                    cfg.pop(k)
                else:
                    cfg[k] = v
            make_dir(d, cfg=cfg)
            expect_fail(label, train_args(d, shard, run_dir), want, run_dir)

        d = os.path.join(tmp, "bad_shape")
        make_dir(d, shape_override={"model.layers.0.self_attn.k_proj.weight": [16, 16]})
        expect_fail("k_proj has the shape of full heads", train_args(d, shard, run_dir),
                    ["model-00002-of-00002.safetensors", "model.layers.0.self_attn.k_proj.weight",
                     "[8, 16]"], run_dir)
        d = os.path.join(tmp, "missing_tensor")
        make_dir(d, drop="model.norm.weight")
        expect_fail("a tensor the index lists is absent from its shard", train_args(d, shard, run_dir),
                    ["model.norm.weight", "safetensors"], run_dir)
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
