#!/usr/bin/env python3
"""What ctrain writes, loaded by Hugging Face: hf_check.py path/to/ctrain [WORKDIR] [--device D]

Trains a small GPT-2 (Conv1D layers, learned positions) and a small LLaMA
(grouped-query attention, RoPE, SwiGLU), both of head size 64, and one of
each family of the llama layout with its switches (Llama 3's RoPE scaling
past its original context, Qwen2's q,k,v biases, Qwen3's q/k norms with a
head size unlike hidden / heads, Mistral, Gemma 3's norms, GeGLU, scaled
embeddings and sliding layers), a few steps each with ctrain on run.device D
(default: CTRAIN_DEVICE, else cpu), then:
- loads each run directory with transformers' AutoModelForCausalLM.from_pretrained
  (fp32, eager attention) and compares its logits on a fixed sequence with the
  logits `ctrain sample --logits` writes (the KV-cache decoding ctrain samples
  with): max |difference| <= 1e-4 x max(1, max |logit|);
- compares the mean loss of `ctrain eval` on held-out windows with the loss
  transformers computes on the same windows (relative 1e-4);
- trains LoRA adapters on each (GPT-2's fused c_attn, LLaMA's q_proj and
  v_proj), loads each adapter with peft's PeftModel.from_pretrained on the
  base and compares logits with ctrain's (the adapter merged in memory);
  merges it with `ctrain merge` and loads the merged model with
  AutoModelForCausalLM (its logits the adapter's, 1e-4).
Exit status: 0 every check passed; 1 a check failed; 77 transformers (or
torch) is not installed in this Python, so nothing was checked (the GPU check
records that as skipped); 2 bad usage. peft missing: the LoRA checks are
skipped (said so), the rest still run. Each check prints PASS/FAIL/SKIP with
its numbers. WORKDIR (default: a temporary directory, kept when a check
fails) holds the runs.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

TOL = 1e-4
SKIP = 77
T_SEQ = 32
VOCAB = 256


def usage():
    print(__doc__)
    return 2


class Report:
    def __init__(self):
        self.fails = 0

    def check(self, name, ok, detail=""):
        print("%s  %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""),
              flush=True)
        self.fails += 0 if ok else 1
        return ok

    def skip(self, name, why):
        print("SKIP  %s: %s" % (name, why), flush=True)


def run(cmd, what, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("%s failed (exit %d): %s\n%s" % (what, p.returncode, " ".join(cmd),
                                                          (p.stderr or p.stdout)[-2000:]))
    return p


def read_shard(path):
    """Tokens of an llm.c-format shard: 256 int32 header, then uint16 (v1) or uint32 (v2)."""
    with open(path, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
        if head[0] != 20240520:
            raise RuntimeError("%s: not a token shard (magic %d)" % (path, head[0]))
        n, width = head[2], 2 if head[1] == 1 else 4
        data = f.read(n * width)
    fmt = "<%d%s" % (n, "H" if width == 2 else "I")
    return list(struct.unpack(fmt, data))


def load_hf(transformers, torch, path):
    kw = dict(attn_implementation="eager")
    try:  # transformers 5 names it dtype, 4 torch_dtype
        m = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    except TypeError:
        m = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32, **kw)
    return m.float().eval()


def hf_logits(torch, model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long)).logits[0].double()


def ctrain_logits(torch, ctrain, model_dir, ids, work, device, extra=()):
    out = os.path.join(work, "logits_%s.json" % os.path.basename(model_dir.rstrip("/")))
    run([ctrain, "sample", "--model", model_dir, "--prompt", " ".join(map(str, ids)),
         "--logits", out] + list(extra), "ctrain sample --logits", timeout=300)
    d = json.load(open(out))
    if d["ids"] != ids:
        raise RuntimeError("ctrain sample --logits scored other ids: %s" % d["ids"][:8])
    return torch.tensor(d["logits"], dtype=torch.float64)


def compare(report, name, a, b):
    scale = max(1.0, float(b.abs().max()))
    diff = float((a - b).abs().max())
    return report.check(name, diff <= TOL * scale and a.shape == b.shape,
                        "max |diff| %.3e, max |logit| %.3g, shape %s vs %s (tolerance %.1e)"
                        % (diff, scale, tuple(a.shape), tuple(b.shape), TOL * scale))


def hf_loss(torch, model, tokens, windows):
    """Mean cross-entropy over the first `windows` windows of T_SEQ + 1 tokens, as
    `ctrain eval --batch-size 1 --seq-len T` reads them (window m starts at m*T)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for m in range(windows):
            w = tokens[m * T_SEQ: m * T_SEQ + T_SEQ + 1]
            x, y = torch.tensor([w[:-1]]), torch.tensor(w[1:])
            logits = model(x).logits[0].double()
            total += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
            count += T_SEQ
    return total / count


def main(argv):
    args, device, i = [], os.environ.get("CTRAIN_DEVICE", "") or "cpu", 1
    while i < len(argv):
        if argv[i] == "--device" and i + 1 < len(argv):
            device = argv[i + 1]
            i += 2
            continue
        if argv[i].startswith("--device="):
            device = argv[i].split("=", 1)[1]
        else:
            args.append(argv[i])
        i += 1
    if len(args) not in (1, 2) or args[0] in ("-h", "--help"):
        return usage()
    ctrain = os.path.abspath(args[0])
    try:
        import torch
        import transformers
    except ImportError as e:
        print("SKIP  transformers or torch is not installed in %s (%s): nothing checked"
              % (sys.executable, e), flush=True)
        return SKIP
    try:
        import peft
    except ImportError:
        peft = None
    print("hf_check: %s, torch %s, transformers %s, peft %s; ctrain %s on run.device=%s"
          % (sys.executable, torch.__version__, transformers.__version__,
             peft.__version__ if peft else "not installed", ctrain, device), flush=True)
    torch.manual_seed(0)
    work = os.path.abspath(args[1]) if len(args) == 2 else tempfile.mkdtemp(prefix="ctrain-hf-")
    os.makedirs(work, exist_ok=True)
    os.environ["CTRAIN_DEVICE"] = device  # eval and sample run there too
    report = Report()
    try:
        train_bin, val_bin = os.path.join(work, "train.bin"), os.path.join(work, "val.bin")
        run([ctrain, "synth", "--out", train_bin, "--tokens", "40000", "--vocab", str(VOCAB)],
            "ctrain synth")
        run([ctrain, "synth", "--out", val_bin, "--tokens", "4000", "--vocab", str(VOCAB),
             "--seed", "9"], "ctrain synth")
        val = read_shard(val_bin)
        ids = val[:T_SEQ]
        common = ["data.train=" + train_bin, "train.seq_len=%d" % T_SEQ, "train.batch_size=4",
                  "optim.lr=3e-3", "run.device=" + device, "model.vocab_size=%d" % VOCAB,
                  "model.n_ctx=64", "model.n_layer=2", "train.seed=7"]
        archs = {
            "gpt2": ["model.arch=gpt2", "model.n_head=2", "model.n_embd=128"],
            "llama": ["model.arch=llama", "model.n_head=4", "model.n_kv_head=2",
                      "model.n_embd=256", "model.n_ffn=512"],
            # the families: transformers' own classes against ctrain's exports
            "llama3": ["model.preset=llama3-tiny"],  # llama3 RoPE scaling, original ctx 16 < T
            "mistral": ["model.arch=mistral", "model.n_head=4", "model.n_kv_head=1",
                        "model.n_embd=128", "model.n_ffn=256"],
            "qwen2": ["model.arch=qwen2", "model.n_head=4", "model.n_kv_head=2",
                      "model.n_embd=128", "model.n_ffn=256"],
            "qwen3": ["model.arch=qwen3", "model.n_head=4", "model.n_kv_head=2",
                      "model.n_embd=128", "model.head_dim=64", "model.n_ffn=256"],
            # 7 layers: six slide with a window of 8 < T, the sixth is global
            "gemma3": ["model.preset=gemma3-tiny", "model.n_layer=7"],
        }
        for arch, shape in archs.items():
            base = os.path.join(work, arch)
            shutil.rmtree(base, ignore_errors=True)
            run([ctrain, "train", "train.steps=6", "run.dir=" + base] + common + shape,
                "ctrain train (%s)" % arch)
            model = load_hf(transformers, torch, base)
            report.check("%s: AutoModelForCausalLM loads the run directory" % arch, True,
                         type(model).__name__)
            compare(report, "%s: logits of transformers and ctrain sample" % arch,
                    ctrain_logits(torch, ctrain, base, ids, work, device),
                    hf_logits(torch, model, ids))
            windows = 4
            p = run([ctrain, "eval", "--model", base, "--data", val_bin, "--batch-size", "1",
                     "--seq-len", str(T_SEQ), "--batches", str(windows), "--json"], "ctrain eval")
            ours = json.loads(p.stdout.strip().splitlines()[-1])["loss"]
            theirs = hf_loss(torch, model, val, windows)
            report.check("%s: ctrain eval's loss is transformers'" % arch,
                         abs(ours - theirs) <= TOL * abs(theirs),
                         "%.7f vs %.7f (relative %.1e)" % (ours, theirs,
                                                           abs(ours - theirs) / abs(theirs)))
            # LoRA: the adapter in PEFT, and merged by ctrain
            if peft is None:
                report.skip("%s: LoRA adapter in PeftModel" % arch, "peft is not installed")
                continue
            lora = os.path.join(work, arch + "_lora")
            shutil.rmtree(lora, ignore_errors=True)
            run([ctrain, "train", "train.steps=4", "run.dir=" + lora, "model.init_from=" + base,
                 "lora.r=4", "lora.alpha=8", "optim.lr=1e-2"] +
                [c for c in common if not c.startswith("model.")], "ctrain train (%s LoRA)" % arch)
            pm = peft.PeftModel.from_pretrained(load_hf(transformers, torch, base), lora).eval()
            ad = hf_logits(torch, pm, ids)
            cfg = json.load(open(os.path.join(lora, "adapter_config.json")))
            report.check("%s: PeftModel loads the adapter" % arch, True,
                         "r=%s, target_modules %s" % (cfg.get("r"), cfg.get("target_modules")))
            plain = hf_logits(torch, model, ids)
            report.check("%s: the adapter changes the logits (it trained)" % arch,
                         float((ad - plain).abs().max()) > 1e-3,
                         "max |adapter - base| %.3e" % float((ad - plain).abs().max()))
            compare(report, "%s: logits of PEFT and ctrain (adapter)" % arch,
                    ctrain_logits(torch, ctrain, lora, ids, work, device, ["--base", base]), ad)
            merged = os.path.join(work, arch + "_merged")
            shutil.rmtree(merged, ignore_errors=True)
            run([ctrain, "merge", "--adapter", lora, "--base", base, "--out", merged],
                "ctrain merge")
            compare(report, "%s: the merged model in transformers gives the adapter's logits"
                    % arch, hf_logits(torch, load_hf(transformers, torch, merged), ids), ad)
    except (RuntimeError, OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
        report.check("hf_check ran to its end", False, str(e)[-3000:])
    if report.fails:
        print("hf_check: %d check(s) failed; the runs are in %s" % (report.fails, work))
        return 1
    if len(args) == 1:
        shutil.rmtree(work, ignore_errors=True)
    print("hf_check: every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
