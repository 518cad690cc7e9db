#!/usr/bin/python3
"""LoRA fine-tuning memory and speed: ctrain side by side with PyTorch, TinyLlama-1.1B shapes.

usage: /usr/bin/python3 bench/lora_tinyllama.py [--ctrain build/ctrain] [--layers 22]
           [--seq 512] [--steps 3] [--threads 2] [--base-dtype bf16] [--workdir DIR]
           [--markdown FILE] [--json-out FILE] [--device cpu|cuda] [--batch B]
           [--precision fp32|bf16]

Writes a TinyLlama-1.1B-shaped LLaMA directory with random BF16 weights (22 layers, 32
heads, 4 KV heads, C=2048, ffn 5632, vocab 32000; --layers shrinks it for a quick try) and
a random token shard (under --workdir, kept and reused; without it a temporary directory,
removed at the end), then trains LoRA r=8, alpha=16 on q_proj,k_proj,v_proj,o_proj at B=1,
T=--seq for --steps AdamW steps, in two fresh processes:
  ctrain   `ctrain train model.init_from=DIR lora.* lora.base_dtype=--base-dtype`
  PyTorch  the --torch-worker mode of this file: the same model in plain torch ops
           (HF LlamaForCausalLM math, attention spelled out), base weights loaded as
           fp32 with requires_grad=False, LoRA A/B as fp32 parameters, AdamW on them only.
--precision bf16 (cpu): ctrain with train.precision=bf16 (its GEMMs on the bf16 base as it
is, on a CPU with bf16 instructions), PyTorch's forward under torch.autocast("cpu",
torch.bfloat16); the goal is then the bf16 issue's, tokens/s >= 3 x PyTorch's.
Peak RSS of each child is read with wait4() (the same way for both); tokens/s is the
median over the steps after the first (warm-up). Prints a markdown table and PASS/MISS
for the goals (ctrain peak RSS <= 0.5 x PyTorch's, tokens/s >= PyTorch's). Exit 0 unless a
child fails.

--device cuda is the GPU comparison (run by scripts/gpu_check.sh's peers stage): ctrain
with run.device=cuda train.precision=bf16 over the bf16 base, against Hugging Face
transformers' LlamaForCausalLM loaded in bf16 with attn_implementation="sdpa" and PEFT's
LoRA on the same modules (adapters fp32, PEFT's default over a bf16 base, dropout 0), the
forward under torch.autocast("cuda", torch.bfloat16) as the Trainer's bf16=True runs it,
the loss F.cross_entropy on the same T+1-token windows, fused AdamW, clipping at 1.0; each
step between device synchronisations, --batch sequences per step. Memory is the GPU's:
ctrain's device peak (metrics.jsonl) against torch.cuda.max_memory_allocated. Goals there
(the GPU issue's): tokens/s >= 1.5x PEFT's, device peak <= 0.6x PEFT's. --recompute
none,full,full:12+bf16 (the GPU check's) runs ctrain once per setting, each its own rows
and goal lines, and says whether one run met both goals: recompute none keeps what the
backward reads (TinyLlama at B=4, T=512: a 6.2 GiB plan), full only each block's input (2.9
GiB, one more forward of the blocks per step). A setting POLICY:K+bf16 adds
train.recompute_layers=K (full re-runs the first K blocks only) and bf16 activations: the
check's full:12+bf16 plans 3.5 GiB and re-runs 12 of the 22 blocks (full+bf16: 2.8 GiB).
"""

import argparse
import json
import math
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

NAME = "lora_tinyllama.py"
CFG = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
           num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
           rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
R, ALPHA, TARGETS = 8, 16, ["q_proj", "k_proj", "v_proj", "o_proj"]


def shapes(c):
    C, Fd, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    KC = c["num_key_value_heads"] * C // c["num_attention_heads"]
    out = [("model.embed_tokens.weight", (V, C))]
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", (C,)), (p + "self_attn.q_proj.weight", (C, C)),
                (p + "self_attn.k_proj.weight", (KC, C)), (p + "self_attn.v_proj.weight", (KC, C)),
                (p + "self_attn.o_proj.weight", (C, C)),
                (p + "post_attention_layernorm.weight", (C,)),
                (p + "mlp.gate_proj.weight", (Fd, C)), (p + "mlp.up_proj.weight", (Fd, C)),
                (p + "mlp.down_proj.weight", (C, Fd))]
    out += [("model.norm.weight", (C,)), ("lm_head.weight", (V, C))]
    return out


def write_base(path, c, seed=0):
    """config.json + model.safetensors in BF16, streamed tensor by tensor (never the whole
    model in memory): matrices N(0, 0.02), norm weights 1."""
    import numpy as np
    os.makedirs(path, exist_ok=True)
    cfg = dict(c, architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
               rope_scaling=None, attention_bias=False, mlp_bias=False, torch_dtype="bfloat16")
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    header, off = {}, 0
    for n, s in shapes(c):
        nb = 2 * int(np.prod(s))
        header[n] = {"dtype": "BF16", "shape": list(s), "data_offsets": [off, off + nb]}
        off += nb
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    rng = np.random.default_rng(seed)
    tmp = os.path.join(path, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for n, s in shapes(c):
            a = (np.ones(s, np.float32) if len(s) == 1
                 else rng.standard_normal(s, dtype=np.float32) * np.float32(0.02))
            bits = a.view(np.uint32)
            # round to nearest even, as the bf16 of a real checkpoint
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
            f.write(bits.tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(path, "model.safetensors"))


def write_shard(path, n, vocab, seed=1):
    import numpy as np
    toks = np.random.default_rng(seed).integers(0, vocab, n).astype("<u2")
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, n] + [0] * 253)))
        f.write(toks.tobytes())


def run_child(cmd, env):
    """(exit status, peak RSS bytes, wall s, stdout, stderr) of one child, RSS by wait4."""
    t0 = time.time()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.time() - t0
        out.seek(0)
        err.seek(0)
        return (os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024, wall,
                out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"))


# ------------------------------------------------------------------ PyTorch side

def torch_worker(a):
    import numpy as np
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(os.path.join(a.base, "config.json")) as f:
        c = json.load(f)
    path = os.path.join(a.base, "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        start = 8 + n
        P = {}
        for name, h in header.items():
            if name == "__metadata__":
                continue
            b, e = h["data_offsets"]
            f.seek(start + b)
            bits = np.frombuffer(f.read(e - b), dtype="<u2").astype(np.uint32) << 16
            P[name] = torch.from_numpy(bits.view(np.float32).reshape(h["shape"]))  # frozen fp32
    C, NH, NKV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d, rep, eps = C // NH, NH // NKV, c["rms_norm_eps"]
    scale = ALPHA / R
    ad = {}
    for l in range(c["num_hidden_layers"]):
        for t in TARGETS:
            w = P["model.layers.%d.self_attn.%s.weight" % (l, t)]
            A = ((torch.rand(R, w.shape[1]) * 2 - 1) / math.sqrt(w.shape[1])).requires_grad_(True)
            Bm = torch.zeros(w.shape[0], R, requires_grad=True)
            ad["model.layers.%d.self_attn.%s" % (l, t)] = (A, Bm)
    params = [x for pair in ad.values() for x in pair]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def lin(x, name):
        y = x @ P[name + ".weight"].T
        if name in ad:
            A, Bm = ad[name]
            y = y + (x @ A.T) @ Bm.T * scale
        return y

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    T = a.seq
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2).float() / d))
    fr = torch.outer(torch.arange(T).float(), inv)
    cos, sin = torch.cat((fr, fr), -1).cos(), torch.cat((fr, fr), -1).sin()
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    toks = np.fromfile(a.shard, dtype="<u2", offset=1024).astype(np.int64)
    times = []
    for step in range(a.steps):
        x_ids = torch.from_numpy(toks[step * T:(step + 1) * T].copy()).view(1, T)
        y_ids = torch.from_numpy(toks[step * T + 1:(step + 1) * T + 1].copy()).view(1, T)
        t0 = time.time()
        opt.zero_grad(set_to_none=True)
        ac = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16")
        ac.__enter__()
        x = P["model.embed_tokens.weight"][x_ids]
        for l in range(c["num_hidden_layers"]):
            p = "model.layers.%d." % l
            h = rms(x, P[p + "input_layernorm.weight"])
            q = lin(h, p + "self_attn.q_proj").view(1, T, NH, d).transpose(1, 2)
            k = lin(h, p + "self_attn.k_proj").view(1, T, NKV, d).transpose(1, 2)
            v = lin(h, p + "self_attn.v_proj").view(1, T, NKV, d).transpose(1, 2)
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
            k = k[:, :, None].expand(1, NKV, rep, T, d).reshape(1, NH, T, d)
            v = v[:, :, None].expand(1, NKV, rep, T, d).reshape(1, NH, T, d)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            x = x + lin((att @ v).transpose(1, 2).reshape(1, T, C), p + "self_attn.o_proj")
            h = rms(x, P[p + "post_attention_layernorm.weight"])
            x = x + lin(F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"),
                        p + "mlp.down_proj")
        logits = rms(x, P["model.norm.weight"]) @ P["lm_head.weight"].T
        ac.__exit__(None, None, None)
        loss = F.cross_entropy(logits.float().view(T, -1), y_ids.view(T))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.time() - t0)
        print(json.dumps({"step": step + 1, "loss": float(loss), "s": times[-1]}), flush=True)


def peft_worker(a):
    """The GPU peer: transformers + PEFT LoRA + SDPA on the bf16 base, one JSON line a step."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    import peft
    import transformers
    torch.manual_seed(0)
    dev = torch.device("cuda")
    try:
        model = transformers.LlamaForCausalLM.from_pretrained(
            a.base, dtype=torch.bfloat16, attn_implementation="sdpa")
    except TypeError:  # transformers before dtype= replaced torch_dtype=
        model = transformers.LlamaForCausalLM.from_pretrained(
            a.base, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.config.use_cache = False
    model = model.to(dev)
    lc = peft.LoraConfig(r=R, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0,
                         bias="none", task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lc)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0, fused=True)
    B, T = a.batch, a.seq
    toks = np.fromfile(a.shard, dtype="<u2", offset=1024).astype(np.int64)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for step in range(a.steps):
        w = [toks[(step * B + b) * T:(step * B + b + 1) * T + 1] for b in range(B)]
        x_ids = torch.from_numpy(np.stack([v[:-1] for v in w])).to(dev)
        y_ids = torch.from_numpy(np.stack([v[1:] for v in w])).to(dev)
        torch.cuda.synchronize()
        t0 = time.time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x_ids).logits
        loss = F.cross_entropy(logits.float().view(B * T, -1), y_ids.view(B * T))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        torch.cuda.synchronize()
        dt = time.time() - t0
        print(json.dumps({"step": step + 1, "loss": float(loss), "s": dt}), flush=True)
    print(json.dumps({"peak_device_bytes": torch.cuda.max_memory_allocated(),
                      "torch": torch.__version__, "transformers": transformers.__version__,
                      "peft": peft.__version__, "gpu": torch.cuda.get_device_name(0)}),
          flush=True)


# ------------------------------------------------------------------ driver

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctrain", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "build", "ctrain"))
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base-dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--workdir", default="")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--json-out", default="")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--batch", type=int, default=1, help="sequences per step (cuda)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="cpu: ctrain's train.precision; bf16 runs PyTorch under autocast")
    ap.add_argument("--recompute", default="none",
                    help="train.recompute of ctrain's runs, comma-separated: one run each "
                         "(none,full: the memory goal's way and the speed goal's); "
                         "POLICY[:K][+bf16]: full over the first K blocks only "
                         "(train.recompute_layers=K), bf16 activations")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--base", default="", help=argparse.SUPPRESS)
    ap.add_argument("--shard", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        if a.device == "cuda":
            peft_worker(a)
        else:
            torch_worker(a)
        return 0
    if a.device == "cpu" and a.batch != 1:
        ap.error("--batch is for --device cuda (the CPU comparison is at B=1)")
    if a.steps < 2:
        ap.error("--steps must be at least 2 (the first is warm-up)")
    c = dict(CFG, num_hidden_layers=a.layers)
    work = a.workdir or tempfile.mkdtemp(prefix="ctrain_lora_bench_")
    try:
        return bench(a, c, work)
    finally:
        if not a.workdir:  # ours: ~2 GB of weights at the full size
            shutil.rmtree(work, ignore_errors=True)


def bench(a, c, work):
    """Write the model and shard under work, run both sides, print and write the results."""
    base, shard = os.path.join(work, "base"), os.path.join(work, "train.bin")
    if not os.path.exists(os.path.join(base, "model.safetensors")):
        t0 = time.time()
        write_base(base, c)
        print("wrote %s (%.0fs)" % (base, time.time() - t0), flush=True)
    gpu = a.device == "cuda"
    write_shard(shard, (a.steps + 1) * a.batch * a.seq + 1, c["vocab_size"])
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    load = os.getloadavg()

    runs = []  # one ctrain run per train.recompute setting
    for rc_name in [x for x in a.recompute.split(",") if x]:
        run_dir = os.path.join(work, "run_ctrain_" + rc_name.replace(":", "_").replace("+", "_"))
        policy, _, acts = rc_name.partition("+")
        policy, _, layers = policy.partition(":")
        extra = ["train.recompute_layers=" + layers] if layers else []
        if acts:
            extra.append("train.activation_dtype=" + acts)
        cmd = [os.path.abspath(a.ctrain), "train", "model.init_from=" + base,
               "data.train=" + shard, "data.shuffle=false", "train.batch_size=%d" % a.batch,
               "train.seq_len=%d" % a.seq, "train.steps=%d" % a.steps, "lora.r=%d" % R,
               "lora.alpha=%d" % ALPHA, "lora.targets=" + ",".join(TARGETS),
               "lora.base_dtype=" + a.base_dtype, "optim.lr=1e-4", "optim.weight_decay=0",
               "optim.grad_clip=1", "run.dir=" + run_dir, "run.checkpoint_every=0",
               "train.resume=never", "run.overwrite=true", "run.threads=%d" % a.threads,
               "train.recompute=" + policy] + extra
        if gpu:
            cmd += ["run.device=cuda", "train.precision=bf16"]
        elif a.precision == "bf16":
            cmd += ["train.precision=bf16"]
        rc, c_rss, c_wall, out, err = run_child(cmd, env)
        if rc != 0:
            print(err[-3000:], file=sys.stderr)
            print("%s: ctrain failed (exit %d, recompute %s)" % (NAME, rc, rc_name),
                  file=sys.stderr)
            return 1
        rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
        steps = [r for r in rows if r.get("split") == "train"]
        c_tps = statistics.median(s["tokens_per_s"] for s in steps[1:])
        c_mem = c_rss
        if gpu:  # the device's peak, as the trainer reports it
            dev = [r["device_peak_bytes"] for r in rows
                   if r.get("split") == "device" and "device_peak_bytes" in r]
            c_mem = max(dev) if dev else float("nan")
        runs.append({"recompute": rc_name, "peak_rss_bytes": c_rss, "tokens_per_s": c_tps,
                     "wall_s": c_wall, "peak_bytes": c_mem,
                     "losses": [s["loss"] for s in steps]})
    if not runs:
        print("%s: --recompute names no setting" % NAME, file=sys.stderr)
        return 2
    c_rss, c_tps, c_mem = runs[0]["peak_rss_bytes"], runs[0]["tokens_per_s"], runs[0]["peak_bytes"]

    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--base", base,
           "--shard", shard, "--seq", str(a.seq), "--steps", str(a.steps),
           "--threads", str(a.threads), "--device", a.device, "--batch", str(a.batch),
           "--precision", a.precision]
    rc, t_rss, t_wall, out, err = run_child(cmd, env)
    if rc != 0:
        print(err[-3000:], file=sys.stderr)
        print("%s: the PyTorch worker failed (exit %d)" % (NAME, rc), file=sys.stderr)
        return 1
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    tsteps = [l for l in lines if "step" in l]
    info = next((l for l in lines if "peak_device_bytes" in l), {})
    t_tps = statistics.median(a.batch * a.seq / s["s"] for s in tsteps[1:])
    t_mem = info.get("peak_device_bytes", float("nan")) if gpu else t_rss
    load_after = os.getloadavg()

    res = {"device": a.device, "layers": a.layers, "seq": a.seq, "batch": a.batch,
           "steps": a.steps, "threads": a.threads,
           "base_dtype": a.base_dtype, "r": R, "alpha": ALPHA, "targets": TARGETS,
           "ctrain": runs[0], "ctrain_runs": runs,
           "torch": {"peak_rss_bytes": t_rss, "tokens_per_s": t_tps, "wall_s": t_wall,
                     "peak_bytes": t_mem, "losses": [s["loss"] for s in tsteps],
                     "versions": info},
           "loadavg_before": load, "loadavg_after": load_after, "cores": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    G = 1024.0 ** 3
    if gpu:
        peer = "PEFT %s + SDPA, transformers %s, PyTorch %s (base bf16, autocast)" % (
            info.get("peft", "?"), info.get("transformers", "?"), info.get("torch", "?"))
        md = ["| LoRA r=%d q,k,v,o, %d layers, B=%d T=%d, %s | device peak | tokens/s |"
              % (R, a.layers, a.batch, a.seq, info.get("gpu", "GPU")), "|---|---|---|"]
        md += ["| ctrain (base %s, precision bf16, recompute %s) | %.2f GiB | %.0f |"
               % (a.base_dtype, r["recompute"], r["peak_bytes"] / G, r["tokens_per_s"])
               for r in runs]
        md += ["| %s | %.2f GiB | %.0f |" % (peer, t_mem / G, t_tps)]
        md += ["| ratio ctrain (recompute %s) / PEFT | %.2f | %.2f |"
               % (r["recompute"], r["peak_bytes"] / t_mem, r["tokens_per_s"] / t_tps)
               for r in runs]
        md += ["", res["date"]]
        goals = []
        for r in runs:
            m, v = r["peak_bytes"] / t_mem, r["tokens_per_s"] / t_tps
            goals += [("recompute %s: device peak <= 0.6 x PEFT's" % r["recompute"], m <= 0.6, m),
                      ("recompute %s: tokens/s >= 1.5 x PEFT's" % r["recompute"], v >= 1.5, v)]
        both = [r["recompute"] for r in runs
                if r["peak_bytes"] <= 0.6 * t_mem and r["tokens_per_s"] >= 1.5 * t_tps]
        goals.append(("both goals in one run (%s)" % (", ".join(both) or "none"), bool(both),
                      float(len(both))))
    else:
        md = ["| LoRA r=%d q,k,v,o, %d layers, B=1 T=%d, %d threads | peak RSS | tokens/s |"
              % (R, a.layers, a.seq, a.threads), "|---|---|---|",
              "| ctrain (base %s, precision %s) | %.2f GiB | %.1f |"
              % (a.base_dtype, a.precision, c_rss / G, c_tps),
              "| PyTorch %s (base fp32, frozen%s) | %.2f GiB | %.1f |"
              % (_torch_version(), ", autocast bf16" if a.precision == "bf16" else "",
                 t_rss / G, t_tps),
              "| ratio ctrain / PyTorch | %.2f | %.2f |" % (c_rss / t_rss, c_tps / t_tps),
              "", "load average before %.1f, after %.1f on %d cores; %s"
              % (load[0], load_after[0], os.cpu_count(), res["date"])]
        want = 3.0 if a.precision == "bf16" else 1.0
        goals = [("peak RSS <= 0.5 x PyTorch's", c_rss <= 0.5 * t_rss, c_rss / t_rss),
                 ("tokens/s >= %g x PyTorch's" % want, c_tps >= want * t_tps, c_tps / t_tps)]
    print("\n".join(md))
    for what, ok, ratio in goals:
        print("%s  %s (%.2f x)" % ("PASS" if ok else "MISS", what, ratio))
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("\n".join(md) + "\n")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(res, f, indent=2)
    return 0


def _torch_version():
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, timeout=60).stdout.strip()
        return out or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
