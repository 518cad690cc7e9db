#!/usr/bin/env python3
"""`ctrain train` on instruction data (`ctrain prepare --format sft`), end to end.

- train.epochs: the run is as many optimizer steps as the epochs hold (the log
  says how many), metrics.jsonl's train lines carry "epoch" (reaching exactly
  the number of epochs at the last step) and "counted_tokens" (the step's
  completion targets, fewer than its B*T*grad_accum tokens), the progress line
  shows the epoch, and validation scores the counted targets of the val split.
- Exact resume mid-epoch with data.shuffle=true and grad_accum 2: a run stopped
  after 3 steps and continued with train.resume=auto gives the unbroken run's
  losses bit for bit and its final weights.
- data.packing=false trains too (more rows, so more steps per epoch), and a
  resume that changes data.packing is refused (exit 2, naming the key).
- run.keep_best with train.load_best_at_end: the best validation's checkpoint
  survives run.keep_last=1, and the final weights are that checkpoint's;
  load_best_at_end without keep_best, and keep_best without validation data,
  are refused with exit 2.
- `ctrain eval` of the final (best) weights on the val split gives the best
  validation loss.
- Under mpirun (when installed): 2 ranks at B=2 give the losses and grad norms of one
  process at B=4, step for step (1e-5), on packed, shuffled examples with grad_accum 2.
- The README's four commands on a LLaMA-layout directory with TinyLlama's chat
  template: prepare chat JSONL, LoRA-train 4 epochs with packing (validation,
  best checkpoint loaded at the end), merge, chat; the merged model and the
  base with the unmerged adapter give the same greedy replies.

usage: test_sft_train.py path/to/ctrain
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA_JSON = os.path.join(ROOT, "data", "llama-tokenizer", "tokenizer.json")
TEMPLATES = os.path.join(ROOT, "tests", "golden", "chat_templates")
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
    return ok


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def metrics(run_dir, split="train"):
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("split") == split:
                out.append(m)
    return out


def tensors(path):
    """name -> raw bytes of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    return {k: data[base + v["data_offsets"][0]:base + v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}


WORDS = ("alpha beta gamma delta river stone light cloud green small quick brown fox jumps over the lazy "
         "dog north south east west seven eleven paper glass water fire").split()


def examples(n):
    lines = []
    for i in range(n):
        p = " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(3 + i % 9))
        c = " ".join(WORDS[(i * 5 + k * 11) % len(WORDS)] for k in range(2 + (i * 3) % 13))
        lines.append({"prompt": f"Q: {p}?\nA:", "completion": " " + c})
    return lines


def base_args(data, run_dir, extra=()):
    return ["train", f"data.train={data}", f"data.val={data}", f"run.dir={run_dir}",
            "model.preset=gpt2-tiny", "model.vocab_size=50257", "model.n_ctx=64", "train.batch_size=2",
            "train.seq_len=64", "optim.lr=3e-3", "train.seed=7", "run.threads=2", "model.dropout=0",
            "schedule.name=constant", *extra]


# Open MPI as tests/cli/test_mpi.py runs it: as root, oversubscribed, shared memory only
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_hwloc_base_binding_policy": "none",
           "OMPI_MCA_btl": "self,vader", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def ranks(tmp, data):
    one, two = os.path.join(tmp, "one"), os.path.join(tmp, "two")
    common = ["train.epochs=2", "train.grad_accum=2", "data.shuffle=true", "run.threads=1"]
    rc, text = run(*base_args(data, one, common + ["train.batch_size=4"]))
    check("1 process at B=4", rc == 0, text[-600:])
    p = subprocess.run(["mpirun", "-np", "2", CTRAIN, *base_args(data, two, common + ["train.batch_size=2"])],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, **MPI_ENV))
    if "built without MPI" in p.stdout + p.stderr:
        print("SKIP: 2 ranks = 1 process: ctrain was built without MPI")
        return
    check("2 ranks at B=2 under mpirun", p.returncode == 0, (p.stdout + p.stderr)[-600:])
    if rc != 0 or p.returncode != 0:
        return
    a, b = metrics(one), metrics(two)

    def close(x, y):
        return abs(x - y) <= 1e-5 * max(1.0, abs(x))
    check("2 ranks x B = 1 process x 2B: every step's loss, grad norm and counted targets",
          len(a) == len(b) > 2 and all(close(x["loss"], y["loss"]) and close(x["grad_norm"], y["grad_norm"]) and
                                       x["counted_tokens"] == y["counted_tokens"] for x, y in zip(a, b)),
          str([(x["loss"], y["loss"]) for x, y in zip(a, b)][:4]))


def llama_base(tmp):
    """A tiny LLaMA in Hugging Face layout with TinyLlama's tokenizer and chat template (its
    weights from one training step on synthetic tokens)."""
    synth = os.path.join(tmp, "synth.bin")
    rc, text = run("synth", "--out", synth, "--tokens", "20000", "--vocab", "32000")
    check("synth data for the base model", rc == 0, text[-400:])
    r = os.path.join(tmp, "base_run")
    rc, text = run("train", "model.arch=llama", "model.n_layer=2", "model.n_head=4", "model.n_kv_head=2",
                   "model.n_embd=64", "model.n_ffn=172", "model.n_ctx=128", "model.vocab_size=32000",
                   f"data.train={synth}", "train.batch_size=2", "train.seq_len=32", "train.steps=1",
                   "run.checkpoint_every=0", f"run.dir={r}")
    check("a tiny LLaMA base model", rc == 0, text[-400:])
    d = os.path.join(tmp, "base")
    os.makedirs(d)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(r, f), d)
    shutil.copy(LLAMA_JSON, os.path.join(d, "tokenizer.json"))
    shutil.copy(os.path.join(TEMPLATES, "tinyllama.json"), os.path.join(d, "tokenizer_config.json"))
    return d


def workflow(tmp):
    base = llama_base(tmp)
    src = os.path.join(tmp, "chat.jsonl")
    with open(src, "w") as f:
        for i, ex in enumerate(examples(40)):
            conv = [{"role": "user", "content": ex["prompt"]}, {"role": "assistant", "content": ex["completion"]}]
            if i % 3 == 0:
                conv = [{"role": "system", "content": "Answer in words."}] + conv
            f.write(json.dumps({"messages": conv}) + "\n")
    data, r, merged = (os.path.join(tmp, n) for n in ("chat_sft", "lora_run", "merged"))
    rc, text = run("prepare", "--format", "sft", "--tokenizer", base, "--out", data, "--val-examples", "8",
                   "--max-len", "128", src)
    check("workflow 1/4: prepare --format sft of chat JSONL with the model's template", rc == 0, text[-600:])
    rc, text = run("train", f"model.init_from={base}", f"data.train={data}", f"data.val={data}",
                   "lora.r=8", "lora.alpha=16", "lora.targets=q_proj,k_proj,v_proj,o_proj", "train.epochs=4",
                   "train.seq_len=128", "train.batch_size=2", "optim.lr=1e-2", "train.eval_every=4",
                   "run.keep_best=true", "train.load_best_at_end=true", f"run.dir={r}", "run.threads=2")
    check("workflow 2/4: LoRA training for 4 epochs with packing and validation",
          rc == 0 and "epoch 4.00/4" in text and "train.load_best_at_end" in text and
          os.path.exists(os.path.join(r, "adapter_model.safetensors")), text[-800:])
    rc, text = run("merge", "--adapter", r, "--out", merged)
    check("workflow 3/4: merge", rc == 0 and os.path.exists(os.path.join(merged, "tokenizer_config.json")),
          text[-400:])
    turns = "What is the river?\nAnd the stone?\n"
    p = subprocess.run([CTRAIN, "chat", "--model", merged, "--json", "--temperature", "0", "--max-new", "8"],
                       input=turns, capture_output=True, text=True, timeout=300)
    replies = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    check("workflow 4/4: chat with the merged model, one reply per turn",
          p.returncode == 0 and len(replies) == 2 and all(x["stop"] in ("eos", "max_new") for x in replies),
          p.stdout[-600:] + p.stderr[-600:])
    q = subprocess.run([CTRAIN, "chat", "--model", base, "--adapter", r, "--json", "--temperature", "0",
                        "--max-new", "8"], input=turns, capture_output=True, text=True, timeout=300)
    alt = [json.loads(x) for x in q.stdout.splitlines() if x.startswith("{")]
    check("the base with the unmerged adapter replies as the merged model",
          q.returncode == 0 and [x["tokens"] for x in alt] == [x["tokens"] for x in replies], q.stderr[-600:])


def main():
    if not os.path.isdir(GPT2):
        print(f"SKIP: {GPT2} missing (scripts/fetch_data.sh)")
        return 0
    tmp = tempfile.mkdtemp(prefix="ct-sft-train-")
    try:
        return body(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def body(tmp):
    src = os.path.join(tmp, "ex.jsonl")
    with open(src, "w") as f:
        for line in examples(72):
            f.write(json.dumps(line) + "\n")
    data = os.path.join(tmp, "sft")
    rc, text = run("prepare", "--format", "sft", "--tokenizer", GPT2, "--out", data, "--val-examples", "12",
                   "--max-len", "64", "--quiet", src)
    if not check("prepare --format sft", rc == 0, text[-800:]):
        return 1

    # --- epochs, counted tokens, validation of counted targets
    a = os.path.join(tmp, "a")
    rc, text = run(*base_args(data, a, ["train.epochs=2", "train.grad_accum=2", "train.eval_every=4",
                                        "data.shuffle=true"]))
    check("train.epochs=2 on instruction data: exit 0", rc == 0, text[-1500:])
    if rc != 0:
        return 1
    tr = metrics(a)
    steps = len(tr)
    check("the log names the steps the epochs hold", f"train.epochs = 2: {steps} optimizer steps" in text,
          text[-1500:])
    check("epochs: at least 2 steps, an even split between the two epochs", steps >= 2 and steps % 2 == 0,
          str(steps))
    check("the epoch reaches exactly 2.0 at the last step, and 1.0 halfway",
          tr[-1].get("epoch") == 2.0 and tr[steps // 2 - 1].get("epoch") == 1.0,
          str([m.get("epoch") for m in tr]))
    check("epoch grows with every step", all(tr[i]["epoch"] < tr[i + 1]["epoch"] for i in range(steps - 1)),
          str([m.get("epoch") for m in tr]))
    full = 2 * 64 * 2
    check("counted_tokens: completion targets only, fewer than the step's tokens, never 0",
          all(0 < m["counted_tokens"] < full for m in tr), str([m.get("counted_tokens") for m in tr]))
    check("the progress line shows the epoch", "epoch 2.00/2" in text, text[-600:])
    check("instruction data is announced with its rows", "instruction data: 60 examples" in text, text[-1500:])
    val = metrics(a, "val")
    check("validation ran and scored finite losses", len(val) >= 2 and all(v["loss"] == v["loss"] for v in val),
          str(val))

    # --- exact resume mid-epoch (shuffled, grad_accum 2)
    b = os.path.join(tmp, "b")
    rc, text = run(*base_args(data, b, ["train.steps=3", "train.grad_accum=2", "train.eval_every=4",
                                        "data.shuffle=true", "run.checkpoint_every=3"]))
    check("the first part of a split run (3 steps)", rc == 0, text[-800:])
    rc, text = run(*base_args(data, b, ["train.epochs=2", "train.grad_accum=2", "train.eval_every=4",
                                        "data.shuffle=true", "train.resume=auto"]))
    check("resumed to the end of epoch 2", rc == 0 and "resuming from" in text, text[-800:])
    tb = metrics(b)
    check("resume mid-epoch: every step's loss and grad norm bit-identical",
          [(m["step"], m["loss"], m["grad_norm"]) for m in tb] ==
          [(m["step"], m["loss"], m["grad_norm"]) for m in tr],
          str([(m["step"], m["loss"]) for m in tb][:6]) + " vs " + str([(m["step"], m["loss"]) for m in tr][:6]))
    check("resume mid-epoch: identical final weights",
          tensors(os.path.join(a, "model.safetensors")) == tensors(os.path.join(b, "model.safetensors")))

    # --- packing off: one example per row
    c = os.path.join(tmp, "c")
    rc, text = run(*base_args(data, c, ["train.epochs=1", "data.packing=false"]))
    tc = metrics(c) if rc == 0 else []
    check("data.packing=false: trains, one example per row (60 rows, 30 steps of B=2)",
          rc == 0 and len(tc) == 30 and tc[-1]["epoch"] == 1.0, text[-800:])
    rc, text = run(*base_args(data, c, ["train.epochs=2", "data.packing=true", "train.resume=auto"]))
    check("a resume that changes data.packing: exit 2 naming it", rc == 2 and "data.packing" in text, text[-600:])

    # --- keep_best and load_best_at_end: a learning rate that warms up too far
    # makes the later validations worse than an earlier one
    d = os.path.join(tmp, "d")
    rc, text = run(*base_args(data, d, ["train.epochs=3", "train.eval_every=1", "run.keep_last=1",
                                        "run.keep_best=true", "train.load_best_at_end=true", "optim.lr=0.3",
                                        "schedule.warmup_steps=39", "guard.zscore=0"]))
    check("keep_best + load_best_at_end: exit 0", rc == 0, text[-800:])
    if rc == 0:
        val = metrics(d, "val")
        best = min(val, key=lambda v: v["loss"])
        last = val[-1]["step"]
        kept = sorted(os.listdir(os.path.join(d, "checkpoints")))
        check("the test's premise: the best validation is not the last step", best["step"] < last,
              str([(v["step"], v["loss"]) for v in val]))
        check("keep_last=1 keeps the last and the best checkpoint",
              kept == sorted({f"step_{best['step']:08d}", f"step_{last:08d}"}), str(kept))
        bw = os.path.join(d, "checkpoints", f"step_{best['step']:08d}", "model.safetensors")
        check("the final weights are the best checkpoint's",
              os.path.exists(bw) and tensors(bw) == tensors(os.path.join(d, "model.safetensors")))
        check("the log says which step was loaded", f"the final weights are step {best['step']}'s" in text,
              text[-600:])
        rc, out = run("eval", "--model", d, "--data", data, "--batch-size", "2", "--seq-len", "64", "--json")
        try:
            got = json.loads(out[out.index("{"):])["loss"] if rc == 0 else None
        except (ValueError, KeyError):
            got = None
        check("ctrain eval of the best weights gives the best validation loss",
              got is not None and abs(got - best["loss"]) < 1e-5 * max(1.0, abs(best["loss"])),
              f"{got} vs {best['loss']}: {out[-600:]}")
    e = os.path.join(tmp, "e")
    rc, text = run(*base_args(data, e, ["train.steps=2", "train.load_best_at_end=true"]))
    check("load_best_at_end without keep_best: exit 2", rc == 2 and "run.keep_best" in text, text[-400:])
    rc, text = run("train", f"data.train={data}", f"run.dir={e}", "model.preset=gpt2-tiny", "model.vocab_size=50257", "model.n_ctx=64", "model.n_ctx=64",
                   "train.batch_size=2", "train.seq_len=64", "train.steps=2", "run.keep_best=true")
    check("keep_best without validation data: exit 2 naming data.val", rc == 2 and "data.val" in text, text[-400:])

    if shutil.which("mpirun"):
        ranks(tmp, data)
    else:
        print("SKIP: 2 ranks = 1 process: mpirun is not installed")
    if os.path.exists(LLAMA_JSON):
        workflow(tmp)
    else:
        print(f"SKIP: the LLaMA workflow: {LLAMA_JSON} missing (scripts/fetch_data.sh)")

    print(f"{checks - len(failures)}/{checks} checks passed")
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
