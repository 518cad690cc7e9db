#!/usr/bin/env python3
"""LoRA runs through the real program (a LLaMA with grouped KV heads and a GPT-2):
the run ends with a PEFT adapter directory (adapter_config.json with r, lora_alpha and
target_modules; adapter_model.safetensors with base_model.model.<module>.lora_A/B names
and [r, in] / [out, r] shapes); checkpoints hold the adapter, not the base; 6 steps
straight and 3 steps + train.resume=auto to 6 give bit-identical losses and adapters
(with lora.base_dtype=bf16, with lora.dropout, which must change the losses, and on
instruction data from `ctrain prepare --format sft`); lora.base_dtype=auto, the default,
stores the base bf16 under train.precision=bf16 (lora.base_dtype=bf16's losses bit for
bit) and fp32 otherwise, and a run begun with an fp32 base under bf16 resumes with
lora.base_dtype=fp32, which the refusal under auto names;
a resume on changed base weights, an adapter whose targets or shapes do not fit the
model, and lora.targets naming no module are refused with exit 2 naming the key, file
and tensor, and touch nothing.

usage: test_lora_resume.py path/to/ctrain
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


def check(label, ok, detail=""):
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


def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def read(path):
    with open(path, "rb") as f:
        return f.read()


def case(tmp, name, base_args, targets, want_names, extra=(), shard=None, seq_len=16):
    shard = shard or os.path.join(tmp, "t.bin")
    common = ["data.train=" + shard, "train.batch_size=2", "train.seq_len=%d" % seq_len,
              "lora.r=4", "lora.alpha=8", "lora.targets=" + targets, "optim.lr=1e-2",
              "run.checkpoint_every=3"] + list(extra)
    # the base: a short full run's HF directory
    base = os.path.join(tmp, name + "_base")
    rc, out = run("train", *base_args, "data.train=" + shard, "train.batch_size=2",
                  "train.seq_len=%d" % seq_len, "train.steps=1", "run.dir=" + base)
    check(name + " base built", rc == 0, out[-600:])
    if rc:
        return
    base_bytes = read(os.path.join(base, "model.safetensors"))
    a = os.path.join(tmp, name + "_a")
    rc, out = run("train", "model.init_from=" + base, *common, "train.steps=6", "run.dir=" + a)
    check(name + " LoRA run", rc == 0, out[-800:])
    if rc:
        return
    cfg = json.load(open(os.path.join(a, "adapter_config.json")))
    check(name + " adapter_config", cfg.get("peft_type") == "LORA" and cfg.get("r") == 4 and
          cfg.get("lora_alpha") == 8 and cfg.get("task_type") == "CAUSAL_LM" and
          cfg.get("base_model_name_or_path") == base, str(cfg))
    h = st_header(os.path.join(a, "adapter_model.safetensors"))
    check(name + " adapter tensor names", set(h) == want_names,
          str(sorted(set(h) ^ want_names))[:400])
    shapes_ok = all(v["dtype"] == "F32" and len(v["shape"]) == 2 and
                    (v["shape"][0] == 4 if ".lora_A." in k else v["shape"][1] == 4)
                    for k, v in h.items())
    check(name + " adapter shapes [r, in] / [out, r]", shapes_ok, str(h)[:400])
    ck = os.path.join(a, "checkpoints", "step_00000003")
    check(name + " checkpoint holds the adapter, not the base",
          os.path.exists(os.path.join(ck, "adapter_model.safetensors")) and
          not os.path.exists(os.path.join(ck, "model.safetensors")), str(os.listdir(ck)))
    check(name + " no model.safetensors in run.dir",
          not os.path.exists(os.path.join(a, "model.safetensors")))
    check(name + " base file untouched", read(os.path.join(base, "model.safetensors")) ==
          base_bytes)
    # 3 steps, then resume to 6
    b = os.path.join(tmp, name + "_b")
    rc, out = run("train", "model.init_from=" + base, *common, "train.steps=3", "run.dir=" + b)
    check(name + " first half", rc == 0, out[-600:])
    rc, out = run("train", "model.init_from=" + base, *common, "train.steps=6",
                  "train.resume=auto", "run.dir=" + b)
    check(name + " resumed half", rc == 0 and "resuming from" in out, out[-600:])
    la, lb = losses(a), losses(b)
    check(name + " resumed losses bit-identical", la == lb and len(la) == 6, "%s vs %s" % (la, lb))
    check(name + " resumed adapter bit-identical",
          read(os.path.join(a, "adapter_model.safetensors")) ==
          read(os.path.join(b, "adapter_model.safetensors")))
    check(name + " the adapter moved", losses(a)[1] != losses(a)[6])
    # other base weights under the same path: the checkpoint's base hash refuses it
    moved = os.path.join(tmp, name + "_base_kept")
    shutil.copytree(base, moved)
    p = os.path.join(base, "model.safetensors")
    data = bytearray(base_bytes)
    n = struct.unpack("<Q", data[:8])[0]
    data[8 + n + 4:8 + n + 8] = struct.pack("<f", 0.5)  # one weight changed
    with open(p, "wb") as f:
        f.write(data)
    before = sorted(os.listdir(os.path.join(b, "checkpoints")))
    rc, out = run("train", "model.init_from=" + base, *common, "train.steps=9",
                  "train.resume=auto", "run.dir=" + b)
    check(name + " resume on another base refused", rc == 2 and "base_xxh64" in out,
          "rc=%d %s" % (rc, out[-600:]))
    check(name + " refusal wrote nothing",
          sorted(os.listdir(os.path.join(b, "checkpoints"))) == before)
    shutil.rmtree(base)
    shutil.move(moved, base)
    # lora.init_from: the finished adapter starts a new run
    c = os.path.join(tmp, name + "_c")
    rc, out = run("train", "model.init_from=" + base, *common, "train.steps=1",
                  "lora.init_from=" + a, "run.dir=" + c)
    check(name + " lora.init_from run", rc == 0, out[-600:])
    return a, base


def base_dtype_auto(tmp, base):
    """lora.base_dtype=auto (the default): under train.precision=bf16 the frozen base is
    stored bf16, as lora.base_dtype=bf16 stores it (the same losses bit for bit, the same
    plan); under fp32 it stays fp32. A run started with the base in fp32 under bf16 (the
    default before auto) resumes only with lora.base_dtype=fp32, and the refusal says so."""
    shard = os.path.join(tmp, "t.bin")
    common = ["model.init_from=" + base, "data.train=" + shard, "train.batch_size=2",
              "train.seq_len=16", "lora.r=4", "lora.alpha=8", "lora.targets=q_proj,v_proj",
              "optim.lr=1e-2", "run.checkpoint_every=3", "train.precision=bf16",
              "debug.emulate_bf16=true"]

    def plan(*extra):
        rc, out = run("plan", *common, *extra, "--json")
        return json.loads(out[:out.rindex("}") + 1]) if rc == 0 else {}
    pa, p16, p32 = plan(), plan("lora.base_dtype=bf16"), plan("lora.base_dtype=fp32")
    pf = plan("train.precision=fp32")
    def weights(p):  # the stored weights and their 16-bit copies
        return (p.get("params_bytes", 0), p.get("weights16_bytes", 0))
    check("auto plans a bf16 base under train.precision=bf16 (no fp32 masters, no copies), "
          "fp32 under fp32", pa and weights(pa) == weights(p16) and weights(pa)[1] == 0 and
          weights(p32)[1] > 0 and weights(p32)[0] > weights(pa)[0] and
          weights(pf)[0] == weights(p32)[0] and weights(pf)[1] == 0,
          "auto %s, bf16 %s, fp32 %s, precision fp32 %s" %
          (weights(pa), weights(p16), weights(p32), weights(pf)))
    runs = {}
    for name, extra in (("auto", []), ("bf16", ["lora.base_dtype=bf16"]),
                        ("fp32", ["lora.base_dtype=fp32"])):
        d = os.path.join(tmp, "auto_" + name)
        rc, out = run("train", *common, *extra, "train.steps=3", "run.dir=" + d)
        check("base_dtype %s under bf16 trains" % name, rc == 0, out[-600:])
        runs[name] = (d, out)
    if not all(os.path.exists(os.path.join(d, "metrics.jsonl")) for d, _ in runs.values()):
        return
    check("the start-up line says auto stored the base bf16, and why",
          "stored bf16: lora.base_dtype=auto under train.precision=bf16" in runs["auto"][1] and
          "stored fp32)" in runs["fp32"][1], runs["auto"][1][-800:])
    la, lb, lf = (losses(runs[k][0]) for k in ("auto", "bf16", "fp32"))
    check("auto's losses are lora.base_dtype=bf16's bit for bit", la == lb and len(la) == 3,
          "%s vs %s" % (la, lb))
    # the fp32 base under bf16 GEMMs differs only in the embedding rows' rounding
    check("and within 1e-2 of an fp32 base's", all(abs(la[k] - lf[k]) < 1e-2 for k in la),
          "%s vs %s" % (la, lf))
    d = runs["fp32"][0]
    before = sorted(os.listdir(os.path.join(d, "checkpoints")))
    rc, out = run("train", *common, "train.steps=6", "train.resume=auto", "run.dir=" + d)
    check("a run begun with an fp32 base under bf16, resumed under auto: refused, naming "
          "lora.base_dtype=fp32", rc == 2 and "base=fp32" in out and
          "set lora.base_dtype=fp32 to resume it" in out, "rc=%d %s" % (rc, out[-600:]))
    check("that refusal wrote nothing", sorted(os.listdir(os.path.join(d, "checkpoints"))) ==
          before)
    rc, out = run("train", *common, "lora.base_dtype=fp32", "train.steps=6",
                  "train.resume=auto", "run.dir=" + d)
    check("and resumes with lora.base_dtype=fp32", rc == 0 and "resuming from" in out,
          out[-600:])


def bad_inputs(tmp, adapter, base):
    shard = os.path.join(tmp, "t.bin")
    common = ["model.init_from=" + base, "data.train=" + shard, "train.batch_size=2",
              "train.seq_len=16", "train.steps=1"]
    # targets that are not the adapter's
    d = os.path.join(tmp, "bad_targets")
    shutil.copytree(adapter, d)
    cfg = json.load(open(os.path.join(d, "adapter_config.json")))
    cfg["target_modules"] = ["q_proj", "k_proj", "v_proj"]
    json.dump(cfg, open(os.path.join(d, "adapter_config.json"), "w"))
    rc, out = run("train", *common, "lora.init_from=" + d, "run.dir=" + os.path.join(tmp, "x1"))
    check("adapter missing a target's tensor refused",
          rc == 2 and "adapter_model.safetensors" in out and "k_proj.lora_A.weight" in out,
          "rc=%d %s" % (rc, out[-600:]))
    # a rank that is not the tensors'
    cfg["target_modules"] = ["q_proj", "v_proj"]
    cfg["r"] = 2
    json.dump(cfg, open(os.path.join(d, "adapter_config.json"), "w"))
    rc, out = run("train", *common, "lora.init_from=" + d, "run.dir=" + os.path.join(tmp, "x2"))
    check("adapter shape mismatch refused",
          rc == 2 and "has shape [4, 32]" in out and "lora_A.weight" in out,
          "rc=%d %s" % (rc, out[-600:]))
    # a module the model does not have
    cfg["r"] = 4
    cfg["target_modules"] = ["c_attn"]
    json.dump(cfg, open(os.path.join(d, "adapter_config.json"), "w"))
    rc, out = run("train", *common, "lora.init_from=" + d, "run.dir=" + os.path.join(tmp, "x3"))
    check("adapter for another arch refused", rc == 2 and "adapter_config.json" in out and
          "target_modules" in out and "c_attn" in out, "rc=%d %s" % (rc, out[-600:]))
    rc, out = run("train", *common, "lora.r=4", "lora.targets=q_proj,wq",
                  "run.dir=" + os.path.join(tmp, "x4"))
    check("lora.targets naming no module refused", rc == 2 and "lora.targets" in out and
          "wq" in out, "rc=%d %s" % (rc, out[-600:]))
    rc, out = run("train", *common, "lora.r=8", "lora.init_from=" + adapter,
                  "run.dir=" + os.path.join(tmp, "x5"))
    check("lora.r disagreeing with the adapter refused", rc == 2 and "lora.r = 8" in out,
          "rc=%d %s" % (rc, out[-600:]))
    rc, out = run("train", *common, "lora.init_from=" + os.path.join(tmp, "nowhere"),
                  "run.dir=" + os.path.join(tmp, "x6"))
    check("missing adapter directory refused", rc == 2 and "adapter_config.json" in out,
          "rc=%d %s" % (rc, out[-600:]))
    # ctrain merge: a good adapter, then the same refusals
    rc, out = run("merge", "--base", base, "--adapter", adapter, "--out",
                  os.path.join(tmp, "merged"))
    check("merge writes an HF directory", rc == 0 and
          os.path.exists(os.path.join(tmp, "merged", "model.safetensors")) and
          os.path.exists(os.path.join(tmp, "merged", "config.json")), out[-400:])
    rc, out = run("merge", "--base", base, "--adapter", d, "--out", os.path.join(tmp, "x7"))
    check("merge of an adapter for another arch refused", rc == 2 and
          "adapter_config.json" in out and "c_attn" in out, "rc=%d %s" % (rc, out[-400:]))
    rc, out = run("merge", "--base", base, "--adapter", adapter, "--out", base)
    check("merge onto the base directory refused", rc == 2 and "--out" in out,
          "rc=%d %s" % (rc, out[-400:]))
    check("refusals touch nothing",
          not any(os.path.exists(os.path.join(tmp, "x%d" % i)) for i in range(1, 8)))


def sft_data(tmp):
    """A `ctrain prepare --format sft` directory of 24 prompt/completion examples (GPT-2's
    tokenizer); None, said on stdout, when data/gpt2-tokenizer is missing."""
    tok = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                       "gpt2-tokenizer")
    if not os.path.isdir(tok):
        print("SKIP the instruction-data case: %s missing (scripts/fetch_data.sh)" % tok)
        return None
    words = "river stone tree cloud light water fire earth wind sun moon star".split()
    src, out = os.path.join(tmp, "ex.jsonl"), os.path.join(tmp, "sft")
    with open(src, "w") as f:
        for i in range(24):
            p = " ".join(words[(i * 7 + k * 3) % len(words)] for k in range(3 + i % 5))
            c = " ".join(words[(i * 5 + k * 11) % len(words)] for k in range(2 + (i * 3) % 7))
            f.write(json.dumps({"prompt": "Q: %s?\nA:" % p, "completion": " " + c}) + "\n")
    rc, text = run("prepare", "--format", "sft", "--tokenizer", tok, "--out", out, "--max-len",
                   "32", "--quiet", src)
    check("prepare --format sft", rc == 0, text[-400:])
    return out if rc == 0 else None


def main():
    tmp = tempfile.mkdtemp(prefix="ctrain_lora_resume_")
    try:
        shard = os.path.join(tmp, "t.bin")
        toks = [(i * 7 + i // 5) % 64 for i in range(4000)]
        with open(shard, "wb") as f:
            f.write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)))
            f.write(struct.pack("<%dH" % len(toks), *toks))
        names = set()
        for l in range(2):
            for mod in ("q_proj", "v_proj"):
                for ab in ("A", "B"):
                    names.add("base_model.model.model.layers.%d.self_attn.%s.lora_%s.weight"
                              % (l, mod, ab))
        got = case(tmp, "llama", ["model.preset=llama-tiny"], "q_proj,v_proj", names)
        names = set()
        for l in range(2):
            for mod in ("attn.c_attn", "attn.c_proj", "mlp.c_proj"):
                for ab in ("A", "B"):
                    names.add("base_model.model.transformer.h.%d.%s.lora_%s.weight"
                              % (l, mod, ab))
        plain = case(tmp, "gpt2", ["model.preset=gpt2-tiny"], "c_attn,c_proj", names)
        # adapter dropout: its masks through the backend's dropout, their keys across a resume
        drop = case(tmp, "gpt2_dropout", ["model.preset=gpt2-tiny"], "c_attn,c_proj", names,
                    ["lora.dropout=0.2"])
        if plain and drop:
            lp, ld = losses(plain[0]), losses(drop[0])
            check("lora.dropout=0.2 changed the run (from step 2: B starts at zero)",
                  lp[1] == ld[1] and lp[6] != ld[6], "%s vs %s" % (lp, ld))
        # instruction data (ctrain prepare --format sft): masked, packed examples
        sft = sft_data(tmp)
        if sft:
            got_sft = case(tmp, "gpt2_sft", ["model.preset=gpt2-tiny", "model.vocab_size=50257"],
                           "c_attn,c_proj", names, ["lora.dropout=0.1"], shard=sft, seq_len=32)
            if got_sft:  # the loss counted only completion targets: the instruction path ran
                with open(os.path.join(got_sft[0], "metrics.jsonl")) as f:
                    rows = [json.loads(x) for x in f if '"train"' in x]
                check("gpt2_sft counted only completion targets",
                      len(rows) == 6 and all(0 < r.get("counted_tokens", 0) < 2 * 32 for r in rows),
                      str([r.get("counted_tokens") for r in rows]))
        llama_names = set()
        for l in range(2):
            for mod in ("q_proj", "v_proj"):
                for ab in ("A", "B"):
                    llama_names.add("base_model.model.model.layers.%d.self_attn.%s.lora_%s.weight"
                                    % (l, mod, ab))
        bf = case(tmp, "llama_bf16", ["model.preset=llama-tiny"], "q_proj,v_proj", llama_names,
                  ["lora.base_dtype=bf16"])
        if bf:
            # the same run.dir resumed with an fp32 base is another run: refused
            shard = os.path.join(tmp, "t.bin")
            rc, out = run("train", "model.init_from=" + bf[1], "data.train=" + shard,
                          "train.batch_size=2", "train.seq_len=16", "lora.r=4", "lora.alpha=8",
                          "lora.targets=q_proj,v_proj", "optim.lr=1e-2",
                          "run.checkpoint_every=3", "train.steps=9", "train.resume=auto",
                          "run.dir=" + os.path.join(tmp, "llama_bf16_b"))
            check("bf16-base run resumed with an fp32 base refused, naming the fix", rc == 2
                  and "base=bf16" in out and "set lora.base_dtype=bf16 to resume it" in out,
                  "rc=%d %s" % (rc, out[-400:]))
            base_dtype_auto(tmp, bf[1])
        rc, out = run("train", "model.preset=llama-tiny", "data.train=" + shard,
                      "lora.base_dtype=bf16", "train.steps=1", "train.batch_size=2",
                      "train.seq_len=16", "run.dir=" + os.path.join(tmp, "x9"))
        check("lora.base_dtype=bf16 without LoRA refused", rc == 2 and "lora.base_dtype" in out,
              "rc=%d %s" % (rc, out[-400:]))
        if got:
            bad_inputs(tmp, *got)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL " + f)
    sys.exit(1 if failures else 0)


main()
