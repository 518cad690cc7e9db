#!/usr/bin/env python3
"""`ctrain sample`: the sliding window, top-p, repetition penalty, stops and several prompts.

usage: /usr/bin/python3 tests/cli/test_sample_features.py path/to/ctrain

A tiny GPT-2 (n_ctx 32, vocab 64) is trained for a few steps; a PyTorch reference of its
forward (tests/golden/gpt2_ref.py) scores what ctrain generates. Checks:
  - --tokens 100 on a 32-token context gives exactly 100 ids, says on stderr that it slid
    the window, and equals greedy decoding under the documented rule (when the window is
    full, the last n_ctx/2 tokens are read again from position 0) in the reference;
  - --top-p with a tiny P is greedy; with P = 0.5 every sampled token lies in the
    reference's nucleus (HF: the smallest set of most likely tokens reaching P);
  - --repetition-penalty 1.8 (greedy) equals the reference's HF/CTRL arithmetic (score/R
    when positive, score*R otherwise, for every id in prompt + generated) and differs from
    no penalty;
  - --stop "A B" (ids) ends the output before the first A B of the generation, with
    "stopped": "stop" in --json; with GPT-2's tokenizer (a 50257-id model) --stop STR ends
    the text before STR, which is not printed;
  - several prompts (--prompt repeated, --prompts FILE) print one line each, each equal to
    a run of that prompt alone (the RNG is seeded per prompt); --json lines parse;
    --prompts FILE.jsonl: JSON strings (or {"prompt": ...}), so a prompt holds a newline;
    a line that is neither exits 2 naming it;
  - the end of sequence (checks 1-6 run on models without one, as the reference has none):
    config.json's eos_token_id ends the greedy ids before its first occurrence ("stopped":
    "eos", not printed); generation_config.json's list (any id of it) wins over config.json;
    --ignore-eos goes on; a model whose every next token is <|endoftext|> stops at once
    with GPT-2's tokenizer (its EOS, when no file names one: no "<|endoftext|>" text, the
    issue's "animal</s></s></s>"), runs on without one, and prints the tokens with
    --ignore-eos.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
import gpt2_ref as G  # noqa: E402
import torch  # noqa: E402

GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
failures = 0


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok else " " + str(detail)[-1500:]))
    if not ok:
        failures += 1
    return ok


def run(*args, text=True):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=text, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def ids_of(out):
    return [int(x) for x in out.split()]


class Ref:
    """The model in PyTorch (float64): last-position logits of a token list."""

    def __init__(self, d):
        cfg, params = G.load_hf_dir(d)
        self.cfg = cfg
        self.P = {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}

    def logits(self, toks):
        with torch.no_grad():
            lg, _ = G.forward(self.P, self.cfg, torch.tensor([toks], dtype=torch.long))
        return lg[0, -1]


def penalize(scores, context, R):
    s = scores.clone()
    for i in set(context):
        s[i] = s[i] / R if s[i] > 0 else s[i] * R
    return s


def ref_greedy(ref, prompt, n, n_ctx, penalty=1.0):
    """Greedy decoding with the window rule: cache capacity min(n_ctx, len(prompt)+n-1);
    when it is full, the last n_ctx//2 tokens are read again from position 0."""
    hist, cache = list(prompt), list(prompt)
    cap = min(n_ctx, len(prompt) + n - 1)
    margins = []
    lg = ref.logits(cache)
    for t in range(n):
        s = penalize(lg, hist, penalty) if penalty != 1.0 else lg
        top2 = torch.topk(s, 2).values
        margins.append(float(top2[0] - top2[1]))
        tok = int(torch.argmax(s))
        hist.append(tok)
        if t == n - 1:
            break
        if len(cache) < cap:
            cache.append(tok)
        else:
            cache = hist[-max(1, n_ctx // 2):]
        lg = ref.logits(cache)
    return hist[len(prompt):], min(margins)


def nucleus(scores, T, P):
    probs = torch.softmax(scores / T, dim=-1)
    order = torch.argsort(probs, descending=True)
    keep, acc = [], 0.0
    for i in order.tolist():
        if keep and acc >= P:
            break
        keep.append(i)
        acc += float(probs[i])
    return set(keep)


def st_read(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), bytearray(b), 8 + n


def st_set(buf, hdr, base, name, row, values):
    """Overwrite F32 values of tensor `name` from element row*cols on."""
    t = hdr[name]
    cols = t["shape"][-1] if len(t["shape"]) > 1 else len(values)
    off = base + t["data_offsets"][0] + 4 * row * cols
    buf[off:off + 4 * len(values)] = struct.pack("<%df" % len(values), *values)


def set_eos(d, config=None, generation=None):
    """The end-of-sequence ids of model directory d: config.json's eos_token_id (None: no
    key) and generation_config.json's (None: no file)."""
    path = os.path.join(d, "config.json")
    cfg = json.load(open(path))
    cfg.pop("eos_token_id", None)
    if config is not None:
        cfg["eos_token_id"] = config
    json.dump(cfg, open(path, "w"))
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    if generation is not None:
        json.dump({"eos_token_id": generation}, open(gen, "w"))


def write_shard(path, toks):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240520, 1, len(toks)] + [0] * 253)))
        f.write(struct.pack("<%dH" % len(toks), *toks))


def sample_json(*args):
    rc, out, err = run("sample", *args, "--json")
    try:
        return rc, json.loads(out), err
    except ValueError:
        return rc, {}, out + err


def eos_checks(P, model, wide):
    # ids: an id the greedy generation first says at k ends it there
    base = ["--model", model, "--prompt", "5 12 19", "--tokens", "24", "--temperature", "0"]
    rc, full, err = sample_json(*base)
    ids = full.get("ids", [])
    k = next((i for i in range(2, len(ids)) if ids[i] not in ids[:i]), None)
    if not check(rc == 0 and len(ids) == 24 and k is not None, "test setup: an id new at k >= 2",
                 (ids, err)):
        return
    eos, never = ids[k], next(i for i in range(64) if i not in ids)
    set_eos(model, config=eos)
    rc, rec, err = sample_json(*base)
    check(rc == 0 and rec.get("ids") == ids[:k] and rec.get("stopped") == "eos" and
          rec.get("tokens") == k + 1,
          "config.json's eos_token_id %d ends the ids before its first occurrence (%d)" % (eos, k),
          (rec, ids, err))
    rc, out, err = run("sample", *base)
    check(rc == 0 and ids_of(out) == ids[:k], "text output: the ids before the EOS, not it",
          out + err)
    rc, rec, err = sample_json(*base, "--ignore-eos")
    check(rc == 0 and rec.get("ids") == ids and rec.get("stopped") == "length",
          "--ignore-eos goes on past it", (rec, err))
    set_eos(model, config=eos, generation=[never])
    rc, rec, err = sample_json(*base)
    check(rc == 0 and rec.get("ids") == ids and rec.get("stopped") == "length",
          "generation_config.json's eos_token_id wins over config.json's", (rec, err))
    set_eos(model, config=never, generation=[100000, never, eos])
    rc, rec, err = sample_json(*base)
    check(rc == 0 and rec.get("ids") == ids[:k] and rec.get("stopped") == "eos",
          "any id of generation_config.json's list ends it", (rec, err))
    set_eos(model)

    # text: a model whose next token is always <|endoftext|> (50256)
    end = P("wide_end")
    shutil.copytree(wide, end)
    path = os.path.join(end, "model.safetensors")
    hdr, buf, off = st_read(path)
    C = hdr["ln_f.weight"]["shape"][0]
    u = [3.0 if i % 2 else -3.0 for i in range(C)]  # a logit of 9 C for 50256
    st_set(buf, hdr, off, "wte.weight", 50256, u)
    st_set(buf, hdr, off, "ln_f.weight", 0, [0.0] * C)
    st_set(buf, hdr, off, "ln_f.bias", 0, u)
    open(path, "wb").write(bytes(buf))
    text = ["--model", end, "--tokenizer", end, "--prompt", "The animal", "--tokens", "6",
            "--temperature", "0"]
    rc, rec, err = sample_json(*text)
    check(rc == 0 and rec.get("text") == "" and rec.get("stopped") == "eos" and
          rec.get("tokens") == 1,
          "no file names an EOS: the tokenizer's <|endoftext|> ends the text, unprinted", (rec, err))
    rc, out, err = run("sample", *text)
    check(rc == 0 and out == "\n", "text output: an empty line, no <|endoftext|>", out + err)
    rc, rec, err = sample_json(*text, "--ignore-eos")
    check(rc == 0 and rec.get("text") == "<|endoftext|>" * 6 and rec.get("stopped") == "length",
          "--ignore-eos prints the end-of-text tokens", (rec, err))
    rc, rec, err = sample_json("--model", end, "--prompt", "1 2", "--tokens", "6", "--temperature", "0")
    check(rc == 0 and rec.get("ids") == [50256] * 6 and rec.get("stopped") == "length",
          "without a tokenizer or a file naming it, nothing ends the ids", (rec, err))
    set_eos(end, config=50256)
    rc, rec, err = sample_json("--model", end, "--prompt", "1 2", "--tokens", "6", "--temperature", "0")
    check(rc == 0 and rec.get("ids") == [] and rec.get("stopped") == "eos",
          "config.json's eos_token_id ends the ids", (rec, err))


def main():
    tmp = tempfile.mkdtemp(prefix="ct_sample_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        toks = [(i * 7 + (i // 5) * 3 + (i // 17)) % 64 for i in range(6000)]
        write_shard(P("data.bin"), toks)
        model = P("model")
        rc, _, err = run("train", "model.preset=gpt2-tiny", "data.train=" + P("data.bin"),
                         "train.batch_size=4", "train.seq_len=32", "train.steps=15",
                         "optim.lr=1e-2", "run.checkpoint_every=0", "run.dir=" + model)
        check(rc == 0, "a tiny GPT-2 is trained", err)
        set_eos(model)  # the reference generates without an end of sequence (7. tests it)
        ref = Ref(model)
        n_ctx = int(ref.cfg["n_ctx"])
        check(n_ctx == 32, "the model's context is 32 (n_ctx)", n_ctx)

        # 1. more tokens than the context: the window slides
        prompt = [5, 12, 19]
        rc, out, err = run("sample", "--model", model, "--prompt", " ".join(map(str, prompt)),
                           "--tokens", "100", "--temperature", "0")
        got = ids_of(out) if rc == 0 else []
        check(rc == 0 and len(got) == 100, "--tokens 100 on n_ctx 32 gives exactly 100 ids",
              "exit %d, %d ids: %s" % (rc, len(got), err))
        check("slid the window" in err, "stderr says the window slid", err)
        want, margin = ref_greedy(ref, prompt, 100, n_ctx)
        check(got == want or margin < 1e-4,
              "the slid generation equals the reference's window rule (smallest top-2 gap %.3g)"
              % margin, "%s\n%s" % (got, want))

        # 2. top-p
        rc, greedy, _ = run("sample", "--model", model, "--tokens", "20", "--temperature", "0")
        rc2, tiny_p, err = run("sample", "--model", model, "--tokens", "20", "--top-p", "1e-9",
                               "--seed", "5")
        check(rc == 0 and rc2 == 0 and greedy == tiny_p and len(ids_of(greedy)) == 20,
              "--top-p 1e-9 is greedy", "%r vs %r %s" % (greedy, tiny_p, err))
        start = [63]  # the default start token without a tokenizer: the last id
        outside = 0
        for seed in (1, 2, 3, 4):
            rc, out, err = run("sample", "--model", model, "--tokens", "20", "--top-p", "0.5",
                               "--temperature", "1.5", "--seed", str(seed))
            seq = ids_of(out) if rc == 0 else []
            check(rc == 0 and len(seq) == 20, "--top-p 0.5 seed %d runs" % seed, err)
            hist = list(start)
            for tok in seq:
                if tok not in nucleus(ref.logits(hist), 1.5, 0.5):
                    outside += 1
                hist.append(tok)
        check(outside == 0, "every --top-p 0.5 token lies in the reference's nucleus",
              "%d tokens outside" % outside)
        rc, a, _ = run("sample", "--model", model, "--tokens", "30", "--temperature", "1.5",
                       "--seed", "9")
        rc2, b, _ = run("sample", "--model", model, "--tokens", "30", "--temperature", "1.5",
                        "--top-p", "1", "--seed", "9")
        check(rc == 0 and a == b, "--top-p 1 changes nothing")

        # 3. repetition penalty
        rc, out, err = run("sample", "--model", model, "--prompt", "5 12 19", "--tokens", "24",
                           "--temperature", "0", "--repetition-penalty", "1.8")
        pen = ids_of(out) if rc == 0 else []
        want, margin = ref_greedy(ref, prompt, 24, n_ctx, penalty=1.8)
        check(rc == 0 and (pen == want or margin < 1e-4),
              "--repetition-penalty 1.8 equals the reference's HF arithmetic (smallest top-2 "
              "gap %.3g)" % margin,
              "%s\n%s %s" % (pen, want, err))
        plain, _ = ref_greedy(ref, prompt, 24, n_ctx)
        check(pen != plain, "the penalty changes the greedy output", pen)

        # 4. stops, ids mode (on the penalised run: it repeats less)
        pen_args = ["--model", model, "--prompt", "5 12 19", "--tokens", "24", "--temperature",
                    "0", "--repetition-penalty", "1.8"]
        k = next((i for i in range(3, len(pen) - 1)
                  if (pen[i], pen[i + 1]) not in zip(pen[:i], pen[1:i + 1])), None)
        check(k is not None, "test setup: a pair of ids to stop at", pen)
        k = k or 3
        stop = "%d %d" % tuple((pen + [1, 2, 3, 4, 5])[k:k + 2])
        rc, out, err = run("sample", *pen_args, "--stop", stop)
        check(rc == 0 and ids_of(out) == pen[:k],
              "--stop '%s' ends the ids before the pair" % stop, "%r vs %r %s" % (out, pen, err))
        rc, out, err = run("sample", *pen_args, "--stop", stop, "--stop", "63 63 63 63", "--json")
        try:
            rec = json.loads(out)
        except ValueError:
            rec = {}
        check(rc == 0 and rec.get("ids") == pen[:k] and rec.get("stopped") == "stop" and
              rec.get("tokens") == k + 2, "--json says stopped: stop", out + err)
        rc, out, err = run("sample", "--model", model, "--tokens", "5", "--temperature", "0",
                           "--json")
        check(rc == 0 and json.loads(out).get("stopped") == "length", "--json says length", out)
        rc, out, err = run("sample", "--model", model, "--stop", "1 x")
        check(rc == 2 and "--stop" in err, "a --stop that is no id sequence: exit 2", err)

        # 5. several prompts
        prompts = ["1 2 3", "40", "7 7"]
        args = ["--tokens", "6", "--temperature", "1.2", "--top-k", "10", "--seed", "11"]
        singles = []
        for p in prompts:
            rc, out, _ = run("sample", "--model", model, "--prompt", p, *args)
            singles.append(out.strip())
        rc, out, err = run("sample", "--model", model, *sum((["--prompt", p] for p in prompts), []),
                           *args)
        lines = out.rstrip("\n").split("\n")
        check(rc == 0 and lines == singles,
              "three --prompt: one line each, each as the prompt alone", "%r vs %r %s" %
              (lines, singles, err))
        with open(P("prompts.txt"), "w") as f:
            f.write("\n".join(prompts[1:]) + "\n")
        rc, out, err = run("sample", "--model", model, "--prompt", prompts[0], "--prompts",
                           P("prompts.txt"), *args, "--json")
        recs = []
        try:
            recs = [json.loads(line) for line in out.splitlines()]
        except ValueError:
            pass
        check(rc == 0 and [r.get("prompt") for r in recs] == prompts and
              [" ".join(map(str, r.get("ids", []))) for r in recs] == singles and
              all(r.get("tokens") == 6 and r.get("stopped") == "length" for r in recs),
              "--prompt + --prompts FILE --json: one object per line", out + err)

        # 6. text: stop strings with GPT-2's tokenizer
        if not os.path.exists(os.path.join(GPT2, "vocab.bpe")):
            check(False, "data/gpt2-tokenizer missing: run scripts/fetch_data.sh")
            return
        write_shard(P("wide.bin"), [(i * 7919) % 50257 for i in range(3000)])
        wide = P("wide")
        rc, _, err = run("train", "model.arch=gpt2", "model.n_layer=1", "model.n_head=2",
                         "model.n_embd=16", "model.vocab_size=50257", "model.n_ctx=64",
                         "data.train=" + P("wide.bin"), "train.batch_size=2", "train.seq_len=32",
                         "train.steps=1", "run.checkpoint_every=0", "run.dir=" + wide)
        check(rc == 0, "a small GPT-2 with GPT-2's vocabulary", err)
        set_eos(wide)  # (and without the tokenizer's: 7. tests it)
        shutil.copy(os.path.join(GPT2, "encoder.json"), os.path.join(wide, "vocab.json"))
        shutil.copy(os.path.join(GPT2, "vocab.bpe"), os.path.join(wide, "merges.txt"))
        text_args = ["--model", wide, "--tokenizer", wide, "--prompt", "The jury said",
                     "--tokens", "24", "--temperature", "0"]
        rc, full, err = run("sample", *text_args, text=False)
        full = full.rstrip(b"\n")
        check(rc == 0 and len(full) > 12, "greedy text", err)
        cut = len(full) // 2
        while cut < len(full) and full[cut:cut + 1] in (b" ", b"\n"):
            cut += 1
        stop = full[cut:cut + 3]
        at = full.find(stop)
        stop_s = stop.decode("utf-8", "replace")
        ok_setup = len(stop) == 3 and stop_s.encode() == stop and b"\n" not in stop
        check(ok_setup, "test setup: a 3-byte ASCII stop string in the text", full)
        if ok_setup:
            rc, out, err = run("sample", *text_args, "--stop", stop_s, text=False)
            check(rc == 0 and out.rstrip(b"\n") == full[:at] and stop not in out,
                  "--stop STR ends the text before STR and does not print it",
                  "%r vs %r (stop %r) %s" % (out, full, stop, err))
            rc, out, err = run("sample", *text_args, "--stop", stop_s, "--json")
            try:
                rec = json.loads(out)
            except ValueError:
                rec = {}
            check(rc == 0 and rec.get("stopped") == "stop" and
                  rec.get("text", "").encode() == full[:at] and rec.get("prompt") == "The jury said",
                  "--json with a tokenizer: text, stopped: stop", out + err)
        rc, out, err = run("sample", "--model", wide, "--tokenizer", wide, "--prompt", "a\nb",
                           "--prompt", "c", "--tokens", "4", "--json")
        try:
            recs = [json.loads(line) for line in out.splitlines()]
        except ValueError:
            recs = []
        check(rc == 0 and [r.get("prompt") for r in recs] == ["a\nb", "c"],
              "--json text lines parse, prompts kept", out + err)
        with open(P("prompts.jsonl"), "w") as f:
            f.write('"a\\nb"\n\n{"prompt": "c"}\n')
        rc, out, err = run("sample", "--model", wide, "--tokenizer", wide, "--prompts",
                           P("prompts.jsonl"), "--tokens", "4", "--json")
        try:
            recs2 = [json.loads(line) for line in out.splitlines()]
        except ValueError:
            recs2 = []
        check(rc == 0 and [r.get("prompt") for r in recs2] == ["a\nb", "c"] and
              [r.get("text") for r in recs2] == [r.get("text") for r in recs],
              "--prompts FILE.jsonl: a JSON string per line holds a newline (blank lines skipped)",
              out + err)
        with open(P("bad.jsonl"), "w") as f:
            f.write('"fine"\n[1, 2]\n')
        rc, out, err = run("sample", "--model", wide, "--tokenizer", wide, "--prompts",
                           P("bad.jsonl"), "--tokens", "4")
        check(rc == 2 and P("bad.jsonl") + " line 2" in err and not out,
              "a JSONL line that is no string: exit 2 naming the line", out + err)

        # 7. the end of sequence
        eos_checks(P, model, wide)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s: %d failure(s)" % (os.path.basename(__file__), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
