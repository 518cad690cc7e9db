#!/usr/bin/env python3
"""Bad input through the real program: every case must exit with status 2,
print an error naming the file and the tensor or key with what was expected,
and write nothing (the run directory is never created).

usage: test_bad_input.py path/to/ctrain
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
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def expect_fail(label, args, must_contain, run_dir=None):
    """Run ctrain; require exit 2, each string of must_contain in the output,
    and (if given) run_dir absent afterwards."""
    global checks
    checks += 1
    rc, out = run(*args)
    problems = []
    if rc != 2:
        problems.append(f"exit status {rc}, expected 2")
    for s in must_contain:
        if s not in out:
            problems.append(f"message lacks {s!r}")
    if run_dir and os.path.exists(run_dir):
        problems.append(f"{run_dir} was created")
    if problems:
        failures.append(f"{label}: {'; '.join(problems)}\n    output: {out.strip()[:400]}")
    else:
        err = [line for line in out.splitlines() if "error" in line] or [out.strip()]
        print(f"ok   {label}: {err[0][:160]}")


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_st(path, header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def main():
    tmp = tempfile.mkdtemp(prefix="ct_bad_")
    try:
        shard = os.path.join(tmp, "train.bin")
        rc, out = run("synth", "--out", shard, "--tokens", "5000", "--vocab", "64")
        assert rc == 0, out
        good = os.path.join(tmp, "good")
        base = ["model.preset=gpt2-tiny", f"data.train={shard}", "train.steps=1",
                "train.batch_size=2", "train.seq_len=8"]
        rc, out = run("train", *base, f"run.dir={good}")
        assert rc == 0, out
        st_path = os.path.join(good, "model.safetensors")
        header, data = read_st(st_path)

        def model_dir(name, mutate_header=None, data_bytes=None, config=None, raw=None):
            d = os.path.join(tmp, name)
            os.makedirs(d)
            shutil.copy(os.path.join(good, "config.json"), d)
            if config is not None:
                with open(os.path.join(d, "config.json"), "w") as f:
                    f.write(config)
            p = os.path.join(d, "model.safetensors")
            if raw is not None:
                with open(p, "wb") as f:
                    f.write(raw)
            elif mutate_header is not None or data_bytes is not None:
                h = json.loads(json.dumps(header))
                if mutate_header:
                    mutate_header(h)
                write_st(p, h, data if data_bytes is None else data_bytes)
            else:
                shutil.copy(st_path, p)
            return d, p

        def train_from(label, d, must):
            run_dir = os.path.join(tmp, "run_" + label.replace(" ", "_"))
            args = ["train", f"model.init_from={d}", f"data.train={shard}", "train.steps=1",
                    "train.batch_size=2", "train.seq_len=8", f"run.dir={run_dir}"]
            expect_fail(label, args, must, run_dir)

        # --- weights ---------------------------------------------------------
        d = os.path.join(tmp, "nofile")
        os.makedirs(d)
        shutil.copy(os.path.join(good, "config.json"), d)
        train_from("missing safetensors", d, [os.path.join(d, "model.safetensors")])

        with open(st_path, "rb") as f:
            full = f.read()
        d, p = model_dir("truncated", raw=full[: len(full) - 100])
        train_from("truncated safetensors", d, [p])
        d, p = model_dir("tiny", raw=full[:5])
        train_from("file shorter than its header length", d, [p])

        def lie_offsets(h):
            h["h.0.ln_1.weight"]["data_offsets"][1] += 4
        d, p = model_dir("offsets", lie_offsets)
        train_from("offsets that lie", d, [p, "h.0.ln_1.weight"])

        def beyond(h):
            b, e = h["ln_f.bias"]["data_offsets"]
            h["ln_f.bias"]["data_offsets"] = [b + 10**9, e + 10**9]
        d, p = model_dir("beyond", beyond)
        train_from("offsets beyond the file", d, [p, "ln_f.bias"])

        def bad_dtype(h):
            h["wpe.weight"]["dtype"] = "Q7"
        d, p = model_dir("dtype", bad_dtype)
        train_from("unknown dtype", d, [p, "wpe.weight"])

        def int_dtype(h):
            h["wpe.weight"]["dtype"] = "I32"
        d, p = model_dir("intdtype", int_dtype)
        train_from("integer dtype for a weight", d, [p, "wpe.weight", "F32"])

        def bad_shape(h):
            h["h.1.mlp.c_fc.weight"]["shape"] = h["h.1.mlp.c_fc.weight"]["shape"][::-1]
        d, p = model_dir("shape", bad_shape)
        train_from("tensor shaped unlike config.json", d, [p, "h.1.mlp.c_fc.weight", "expected"])

        def missing(h):
            del h["h.1.attn.c_proj.bias"]
        d, p = model_dir("missing", missing)
        train_from("tensor missing", d, [p, "h.1.attn.c_proj.bias", "missing"])

        d, p = model_dir("notjson", raw=struct.pack("<Q", 16) + b"{not json!!!!!!}" + data)
        train_from("header not JSON", d, [p])

        cfg = json.load(open(os.path.join(good, "config.json")))
        cfg["n_layer"] = 3
        d, p = model_dir("cfglayers", config=json.dumps(cfg))
        train_from("config.json with more layers than the weights", d, [p, "h.2.", "missing"])
        cfg = json.load(open(os.path.join(good, "config.json")))
        cfg["n_embd"] = 24
        d, p = model_dir("cfgembd", config=json.dumps(cfg))
        train_from("config.json n_embd unlike the weights", d, [p, "wte.weight", "expected"])
        cfg = json.load(open(os.path.join(good, "config.json")))
        cfg["n_layer"] = 1000000000
        d, p = model_dir("cfgcap", config=json.dumps(cfg))
        train_from("config.json n_layer beyond model.n_layer's cap", d,
                   [os.path.join(d, "config.json"), "n_layer", "1..4096"])
        d, p = model_dir("cfgbroken", config="{\"n_layer\": 2,")
        train_from("config.json not JSON", d, [os.path.join(d, "config.json")])
        cfg = json.load(open(os.path.join(good, "config.json")))
        del cfg["n_head"]
        d, p = model_dir("cfgnohead", config=json.dumps(cfg))
        train_from("config.json without n_head", d, [os.path.join(d, "config.json"), "n_head"])

        # --- config keys and values -------------------------------------------
        rd = os.path.join(tmp, "run_keys")
        expect_fail("unknown key", ["train", *base, "optim.learning_rate=1", f"run.dir={rd}"],
                    ["optim.learning_rate", "unknown"], rd)
        expect_fail("wrong type", ["train", *base, "train.batch_size=two", f"run.dir={rd}"],
                    ["train.batch_size", "integer"], rd)
        expect_fail("out of range", ["train", *base, "optim.beta1=1.5", f"run.dir={rd}"],
                    ["optim.beta1", "range"], rd)
        expect_fail("bad enum", ["train", *base, "schedule.name=exponential", f"run.dir={rd}"],
                    ["schedule.name", "constant"], rd)
        expect_fail("bad recompute policy", ["train", *base, "train.recompute=partial", f"run.dir={rd}"],
                    ["train.recompute", "partial", "none", "light", "full"], rd)
        expect_fail("bad activation dtype", ["train", *base, "train.activation_dtype=fp16",
                                             f"run.dir={rd}"],
                    ["train.activation_dtype", "fp16", "fp32", "bf16"], rd)
        expect_fail("bad recompute policy (plan)", ["plan", *base, "train.recompute=all"],
                    ["train.recompute", "none", "light", "full"])
        yml = os.path.join(tmp, "bad.yaml")
        with open(yml, "w") as f:
            f.write("train:\n  steps: 3\noptim:\n  lr: 1e-3\n  wd: 0.1\n")
        expect_fail("unknown key in YAML", ["train", "--config", yml, *base, f"run.dir={rd}"],
                    [yml + ":5", "optim.wd"], rd)
        yml2 = os.path.join(tmp, "type.yaml")
        with open(yml2, "w") as f:
            f.write("data:\n  shuffle: sometimes\n")
        expect_fail("wrong type in YAML", ["train", "--config", yml2, *base, f"run.dir={rd}"],
                    [yml2 + ":2", "data.shuffle", "true or false"], rd)
        expect_fail("missing YAML", ["train", "--config", os.path.join(tmp, "none.yaml"),
                                     *base, f"run.dir={rd}"], ["none.yaml"], rd)
        expect_fail("unknown preset", ["train", *base, "model.preset=gpt5", f"run.dir={rd}"],
                    ["gpt5", "gpt2-medium"], rd)
        expect_fail("seq_len over n_ctx", ["train", *base, "train.seq_len=64", f"run.dir={rd}"],
                    ["train.seq_len", "n_ctx"], rd)

        # --- trainer: run.dir, contradictions, guard and debug keys -----------
        plain = os.path.join(tmp, "plain_file")
        with open(plain, "w") as f:
            f.write("not a directory\n")
        under = os.path.join(plain, "run")
        expect_fail("run.dir under a regular file", ["train", *base, f"run.dir={under}"],
                    ["run.dir", under, plain, "not a directory"])
        with open(plain) as f:
            check_plain = f.read() == "not a directory\n"
        if not check_plain:
            failures.append("run.dir under a regular file: the file was changed")
        expect_fail("early stopping without validation data",
                    ["train", *base, "train.early_stop_patience=3", f"run.dir={rd}"],
                    ["train.early_stop_patience", "data.val"], rd)
        expect_fail("early stopping without periodic validation",
                    ["train", *base, f"data.val={shard}", "train.early_stop_patience=3",
                     f"run.dir={rd}"], ["train.early_stop_patience", "train.eval_every"], rd)
        expect_fail("guard.min_steps above guard.window",
                    ["train", *base, "guard.window=10", "guard.min_steps=20", f"run.dir={rd}"],
                    ["guard.min_steps", "guard.window"], rd)
        expect_fail("guard.lr_factor out of range", ["train", *base, "guard.lr_factor=1.5",
                                                     f"run.dir={rd}"], ["guard.lr_factor"], rd)
        expect_fail("malformed debug.bad_steps", ["train", *base, "debug.bad_steps=9-3",
                                                  f"run.dir={rd}"], ["debug.bad_steps", "A-B"], rd)
        expect_fail("train.resume names no checkpoint",
                    ["train", *base, f"train.resume={tmp}/nothing", f"run.dir={rd}"],
                    ["train.resume", f"{tmp}/nothing"], rd)

        # --- token shards -----------------------------------------------------
        bad_magic = os.path.join(tmp, "magic.bin")
        with open(shard, "rb") as f:
            raw = bytearray(f.read())
        raw[0:4] = struct.pack("<i", 12345)
        with open(bad_magic, "wb") as f:
            f.write(raw)
        expect_fail("shard with bad magic", ["train", *base, f"data.train={bad_magic}",
                                            f"run.dir={rd}"], [bad_magic, "magic", "20240520"], rd)
        trunc = os.path.join(tmp, "trunc.bin")
        with open(shard, "rb") as f:
            raw = f.read()
        with open(trunc, "wb") as f:
            f.write(raw[:-7])
        expect_fail("truncated shard", ["train", *base, f"data.train={trunc}", f"run.dir={rd}"],
                    [trunc], rd)
        big = os.path.join(tmp, "vocab.bin")
        rc, out = run("synth", "--out", big, "--tokens", "5000", "--vocab", "1000")
        assert rc == 0, out
        expect_fail("tokens beyond the vocabulary", ["train", *base, f"data.train={big}",
                                                     f"run.dir={rd}"],
                    [big, "vocab_size", "at index"], rd)
        short = os.path.join(tmp, "short.bin")
        rc, out = run("synth", "--out", short, "--tokens", "16", "--vocab", "64")
        assert rc == 0, out
        expect_fail("shard shorter than one batch", ["train", *base, f"data.train={short}",
                                                     f"run.dir={rd}"],
                    [short, "fewer than one batch"], rd)
        empty_dir = os.path.join(tmp, "no_shards")
        os.makedirs(empty_dir)
        expect_fail("directory without shards", ["train", *base, f"data.train={empty_dir}",
                                                 f"run.dir={rd}"], [empty_dir, "holds no"], rd)
        expect_fail("negative data.prefetch", ["train", *base, "data.prefetch=-1",
                                               f"run.dir={rd}"], ["data.prefetch"], rd)
        expect_fail("missing shard", ["train", *base, f"data.train={tmp}/nope.bin",
                                      f"run.dir={rd}"], ["nope.bin"], rd)
        expect_fail("empty glob", ["train", *base, f"data.train={tmp}/*.nothing",
                                   f"run.dir={rd}"], ["*.nothing"], rd)

        # --- sample -----------------------------------------------------------
        expect_fail("sample: bad prompt token", ["sample", "--model", good, "--prompt", "1 999"],
                    ["999", "0..63"])
        expect_fail("sample: missing model", ["sample", "--model", os.path.join(tmp, "zz")],
                    [os.path.join(tmp, "zz")])
        expect_fail("unknown command", ["trian"], ["trian"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL", f)
    print(f"test_bad_input: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
