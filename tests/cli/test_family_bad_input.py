#!/usr/bin/env python3
"""The LLaMA layout's families through the real program: what ctrain does not implement,
and a directory whose config.json does not describe its weights, exit with status 2,
name the file, the key (or tensor) and its value, and write nothing (the run directory is
never created); what it does implement loads. Standard library only: the directories are
made by ctrain itself (a one-step run of each family's tiny preset) and then edited.

Refused: a model_type of another family (the message lists the supported ones), Mistral
v0.1's sliding window of 4096 (and MistralConfig's default window when the key is absent),
Qwen's use_sliding_window, Phi-3's LongRoPE scaling, mixture-of-experts keys, MLP
biases, Gemma 3's image-and-text model_type, a query_pre_attn_scalar other than the head
size, logit soft-capping, layer_types that are no repeating pattern; and, with their tensors named and explained, a Qwen2 directory relabelled llama
(its q/k/v biases), a Qwen3 one relabelled llama (its q/k norms) or qwen2 (its head
size), and a llama one whose shards gained an extra tensor. Loaded: a window that cannot bind (sliding_window >=
max_position_embeddings, or null), RoPE's inv_freq buffers of older exports,
transformers 5's rope_parameters, and Gemma's pattern given as layer_types.

usage: test_family_bad_input.py path/to/ctrain
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
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout + p.stderr


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return header, data


def write_st(path, header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def add_tensor(path, name, values):
    """Append an F32 1-D tensor to a safetensors file."""
    header, data = read_st(path)
    raw = struct.pack("<%df" % len(values), *values)
    header[name] = {"dtype": "F32", "shape": [len(values)],
                    "data_offsets": [len(data), len(data) + len(raw)]}
    write_st(path, header, data + raw)


def edit_config(d, **change):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        cfg = json.load(f)
    for k, v in change.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    with open(p, "w") as f:
        json.dump(cfg, f)


def copy_model(src, dst):
    os.makedirs(dst)
    for n in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, n), os.path.join(dst, n))


def train_args(model, shard, run_dir):
    return ["train", "model.init_from=" + model, "data.train=" + shard, "train.batch_size=2",
            "train.seq_len=8", "train.steps=1", "run.dir=" + run_dir, "run.checkpoint_every=0"]


def expect(label, args, rc_want, must_contain, run_dir):
    global checks
    checks += 1
    rc, out = run(*args)
    problems = []
    if rc != rc_want:
        problems.append("exit status %d, expected %d" % (rc, rc_want))
    for s in must_contain:
        if s not in out:
            problems.append("message lacks %r" % s)
    if rc_want == 2 and os.path.exists(run_dir):
        problems.append("%s was created" % run_dir)
    if problems:
        failures.append("%s: %s\n    output: %s" % (label, "; ".join(problems), out.strip()[-700:]))
    else:
        err = [line for line in out.splitlines() if "error" in line] or ["exit %d" % rc]
        print("ok   %s: %s" % (label, err[0][:220]))
    shutil.rmtree(run_dir, ignore_errors=True)


def main():
    tmp = tempfile.mkdtemp(prefix="ctrain_family_bad_")
    try:
        shard = os.path.join(tmp, "train.bin")
        rc, out = run("synth", "--out", shard, "--tokens", "4000", "--vocab", "64")
        if rc != 0:
            print("FAIL ctrain synth: %s" % out)
            return 1
        base = {}
        for preset in ("llama-tiny", "mistral-tiny", "qwen2-tiny", "qwen3-tiny", "gemma3-tiny"):
            d = os.path.join(tmp, "made_" + preset)
            rc, out = run("train", "model.preset=" + preset, "data.train=" + shard,
                          "train.batch_size=2", "train.seq_len=8", "train.steps=1",
                          "run.dir=" + d, "run.checkpoint_every=0")
            if rc != 0:
                print("FAIL making %s: %s" % (preset, out[-500:]))
                return 1
            base[preset.split("-")[0]] = d
        run_dir = os.path.join(tmp, "run")
        n = [0]

        def case(label, fam, change=None, rc=2, want=(), tensor=None):
            n[0] += 1
            d = os.path.join(tmp, "case%02d" % n[0])
            copy_model(base[fam], d)
            if change:
                edit_config(d, **change)
            if tensor:
                add_tensor(os.path.join(d, "model.safetensors"), tensor[0], tensor[1])
            expect(label, train_args(d, shard, run_dir), rc, list(want), run_dir)

        # features not built: refused with the file, the key and the value
        case("model_type of another family", "llama", {"model_type": "phi3"},
             want=["config.json", "model_type", "phi3", "gpt2", "llama", "mistral", "qwen2",
                   "qwen3"])
        case("Mistral v0.1's sliding window", "mistral",
             {"sliding_window": 4, "max_position_embeddings": 32},
             want=["config.json", "sliding_window", "= 4", "max_position_embeddings"])
        case("MistralConfig's default window (key absent)", "mistral",
             {"sliding_window": None, "max_position_embeddings": 8192},
             want=["config.json", "sliding_window", "4096", "absent"])
        case("a window that cannot bind loads", "mistral",
             {"sliding_window": 32, "max_position_embeddings": 32}, rc=0)
        case("Qwen's use_sliding_window", "qwen2", {"use_sliding_window": True},
             want=["config.json", "use_sliding_window"])
        case("layer_types with sliding layers", "qwen3",
             {"layer_types": ["full_attention", "sliding_attention"]},
             want=["config.json", "layer_types", "sliding_attention"])
        case("Phi-3's LongRoPE", "llama",
             {"rope_scaling": {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}},
             want=["config.json", "rope_scaling", "longrope"])
        case("mixture of experts", "qwen3", {"num_experts": 8},
             want=["config.json", "num_experts", "mixture-of-experts"])
        case("MLP biases", "llama", {"mlp_bias": True}, want=["config.json", "mlp_bias"])
        # Gemma 3: what its text model has that is not built
        case("Gemma 3's image-and-text model_type", "gemma3", {"model_type": "gemma3"},
             want=["config.json", "model_type", "gemma3", "gemma3_text"])
        case("a query scale other than the head's", "gemma3", {"query_pre_attn_scalar": 168},
             want=["config.json", "query_pre_attn_scalar", "168"])
        case("logit soft-capping", "gemma3", {"final_logit_softcapping": 30.0},
             want=["config.json", "final_logit_softcapping"])
        case("layer_types that are no repeating pattern", "gemma3",
             {"layer_types": ["sliding_attention", "full_attention", "full_attention",
                              "sliding_attention", "sliding_attention", "full_attention",
                              "sliding_attention"]},
             want=["config.json", '"layer_types"[2]', "sliding_attention"])
        case("Gemma's window and pattern from layer_types load", "gemma3",
             {"sliding_window_pattern": None,
              "layer_types": ["sliding_attention", "full_attention"] * 3 + ["sliding_attention"]},
             rc=0)
        # a config.json that does not describe its weights: the tensors are named
        case("a qwen2 directory relabelled llama", "qwen2",
             {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
             want=["model.safetensors", "q_proj.bias", "model_type \"llama\"",
                   "attention biases"])
        case("a qwen3 directory relabelled qwen2", "qwen3",
             {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
              "head_dim": None},
             want=["q_proj.weight", "[64, 32]", "expected [32, 32]"])
        case("a qwen3 directory relabelled llama", "qwen3",
             {"model_type": "llama", "architectures": ["LlamaForCausalLM"]},
             want=["model.safetensors", "q_norm.weight", "q/k norms"])
        case("an extra tensor in the shards", "llama",
             tensor=("model.layers.0.mlp.extra.weight", [1.0] * 4),
             want=["model.safetensors", "model.layers.0.mlp.extra.weight",
                   "no parameter of this model takes"])
        # buffers that carry no weights load
        case("RoPE's inv_freq buffer of an older export", "llama",
             tensor=("model.layers.0.self_attn.rotary_emb.inv_freq", [1.0] * 4), rc=0)
        case("transformers 5's rope_parameters", "llama",
             {"rope_theta": None, "rope_scaling": None,
              "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 4.0,
                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 16}}, rc=0)
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
