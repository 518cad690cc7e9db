#!/usr/bin/env python3
"""`ctrain chat`: turns through the chat template, the KV cache kept across turns.

usage: /usr/bin/python3 tests/cli/test_chat.py path/to/ctrain

Models: a small GPT-2 (vocab 50259, n_ctx 128) beside GPT-2's vocabulary as a tokenizer.json
with <|im_start|> and <|im_end|> added and Qwen2's ChatML template, and a small LLaMA beside
LLaMA's tokenizer.json with TinyLlama's template, both in Hugging Face layout. Checks:
  - greedy replies are deterministic, and every turn equals an independent computation:
    the conversation so far (the earlier replies as --json printed them) rendered by
    `ctrain tokenize --chat --generation-prompt` has prompt_tokens ids, and `ctrain sample`
    of those ids (a fresh KV cache) begins with the reply's tokens (then an EOS id when the
    stop is "eos"); turn 2 also against PyTorch (tests/golden/gpt2_ref.py);
  - cached_tokens is exactly what the cache held (the last prompt and the reply ids read
    after it) when those are the new prompt's start, else 0, and some turns do reuse it;
  - the conversation outgrowing n_ctx drops its oldest exchanges (the system message stays)
    until min(--max-new, n_ctx/2) positions are left, said on stderr, and the reply is
    that shorter conversation's; a message that fills the context alone exits 2;
  - text output is the --json replies, one per line (escaped), empty input lines skipped;
  - EOS ends a reply: the template's eos_token (set to the text of a token the model would
    say k-th: the reply is its first k-1 tokens), generation_config.json's eos_token_id, and
    a model whose every next token is <|im_end|> (empty replies); --max-new ends it with
    "max_new"; sampling with --seed is reproducible;
  - config.json's eos_token_id ends a reply too; --ignore-eos goes on to --max-new;
  - --prompts FILE.jsonl answers each line's conversation (a string, a message list, an
    object with "messages"; a message may hold a newline) on its own, as the same
    conversation typed on stdin (--system first where it has none), or as a fresh decode
    of it rendered; a plain file is a user message per line; an unknown role exits 2
    naming the line;
  - base + unmerged PEFT adapter (--adapter) replies as the merged model (`ctrain merge`)
    does, and differently from the base; an adapter for another model exits 2 naming the
    adapter's file;
  - errors exit 2: a missing model directory (named), a directory without a chat template
    (naming tokenizer_config.json), which --chat-template FILE then makes work.
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
GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA_JSON = os.path.join(ROOT, "data", "llama-tokenizer", "tokenizer.json")
TEMPLATES = os.path.join(ROOT, "tests", "golden", "chat_templates")
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
failures = 0

IM_END, EOT = 50258, 50256


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok else " " + str(detail)[-2000:]))
    if not ok:
        failures += 1
    return ok


def run(*args, stdin=None):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300, input=stdin,
                       env=env)
    return p.returncode, p.stdout, p.stderr


def chat(model, lines, *args):
    """--json chat over lines: (rc, [turn objects], stderr)."""
    rc, out, err = run("chat", "--model", model, "--temperature", "0", "--json", *args,
                       stdin="".join(l + "\n" for l in lines))
    turns = []
    for l in out.splitlines():
        try:
            turns.append(json.loads(l))
        except ValueError:
            turns.append({"bad line": l})
    return rc, turns, err


# ----------------------------------------------------------- model directories

def chatml_tokenizer(d):
    """GPT-2's vocabulary as a tokenizer.json with <|im_start|>, <|im_end|> added, Qwen2's template."""
    enc = json.load(open(os.path.join(GPT2, "encoder.json")))
    merges = [l for l in open(os.path.join(GPT2, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if l]
    added = [("<|endoftext|>", EOT), ("<|im_start|>", 50257), ("<|im_end|>", IM_END)]
    vocab = dict(enc)
    for t, i in added:
        vocab[t] = i
    tj = {"version": "1.0", "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
          "added_tokens": [{"id": i, "content": t, "special": True, "lstrip": False, "rstrip": False,
                            "normalized": False, "single_word": False} for t, i in added],
          "model": {"type": "BPE", "vocab": vocab, "merges": merges}}
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"))
    shutil.copy(os.path.join(TEMPLATES, "qwen2.json"), os.path.join(d, "tokenizer_config.json"))


def build(tmp, name, overrides, vocab):
    """A model directory (config.json + model.safetensors) from one training step."""
    data = os.path.join(tmp, "synth_%d.bin" % vocab)
    if not os.path.exists(data):
        rc, _, err = run("synth", "--out", data, "--tokens", "20000", "--vocab", str(vocab))
        check(rc == 0, "synth --vocab %d" % vocab, err)
    run_dir = os.path.join(tmp, name + "_run")
    rc, _, err = run("train", *overrides, "model.vocab_size=%d" % vocab, "data.train=" + data,
                     "train.batch_size=2", "train.seq_len=32", "train.steps=1",
                     "run.checkpoint_every=0", "run.dir=" + run_dir)
    check(rc == 0, "a small model (%s) is built" % name, err)
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(run_dir, f), d)
    return d


def sharpen(d):
    """Scale the blocks' output projections (x30) and c_attn (x6) of a GPT-2 directory: at
    initialisation a tied GPT-2 mostly repeats its last token, whatever the context; this
    one's replies depend on the whole conversation, which the KV-cache checks need."""
    path = os.path.join(d, "model.safetensors")
    hdr, buf, base = st_read(path)
    for name, t in hdr.items():
        f = 30.0 if name.endswith("c_proj.weight") else 6.0 if name.endswith("c_attn.weight") else None
        if f is None:
            continue
        o0, o1 = t["data_offsets"]
        n = (o1 - o0) // 4
        vals = struct.unpack("<%df" % n, bytes(buf[base + o0:base + o1]))
        buf[base + o0:base + o1] = struct.pack("<%df" % n, *[v * f for v in vals])
    open(path, "wb").write(bytes(buf))


def copy_dir(src, dst):
    shutil.copytree(src, dst)
    return dst


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


# ----------------------------------------------------------- the independent computation

def tokenize_convs(tok, convs):
    """ids of each conversation rendered with the generation prompt (one call)."""
    rc, out, err = run("tokenize", "--tokenizer", tok, "--chat", "--generation-prompt",
                       stdin="".join(json.dumps(c) + "\n" for c in convs))
    if not check(rc == 0, "tokenize --chat", err):
        return [[] for _ in convs]
    return [[int(x) for x in l.split()] for l in out.splitlines()]


def sample_greedy(model, ids, n):
    """n greedy ids after ids from a fresh KV cache (an EOS among them: --ignore-eos)."""
    rc, out, err = run("sample", "--model", model, "--prompt", " ".join(map(str, ids)),
                       "--tokens", str(n), "--temperature", "0", "--ignore-eos")
    check(rc == 0, "sample of a rendered conversation", err)
    return [int(x) for x in out.split()]


def verify(label, model, tok, turns, lines, n_ctx, max_new, system=None, eos=(), ref=None):
    """Replay the conversation: each turn's prompt, reply tokens, stop and cached_tokens.
    Returns (turns whose cache was reused, exchanges dropped)."""
    conv = [{"role": "system", "content": system}] if system else []
    first = len(conv)
    room = max(1, min(max_new, n_ctx // 2))
    lines = [l for l in lines if l]
    if not check(len(turns) == len(lines), "%s: one reply per non-empty line (%d)" % (label, len(lines)),
                 turns):
        return 0, 0
    cache, reused, dropped = [], 0, 0
    for k, (t, line) in enumerate(zip(turns, lines)):
        conv.append({"role": "user", "content": line})
        # the oldest exchanges go while the reply has too little room
        variants = [conv[:first] + conv[first + 2 * d:] for d in range((len(conv) - first) // 2 + 1)]
        ids_all = tokenize_convs(tok, variants)
        d = 0
        while d + 1 < len(variants) and len(ids_all[d]) + room > n_ctx:
            d += 1
        conv, ids = variants[d], ids_all[d]
        dropped += d
        ok = t.get("turn") == k + 1 and t.get("prompt_tokens") == len(ids)
        toks = t.get("tokens", [])
        stop = t.get("stop")
        want = sample_greedy(model, ids, min(max_new, n_ctx - len(ids) + 1))
        ok = ok and toks == want[:len(toks)]
        if stop == "eos":
            ok = ok and len(want) > len(toks) and want[len(toks)] in eos
        elif stop == "max_new":
            ok = ok and len(toks) == max_new and not any(x in eos for x in toks)
        else:
            ok = ok and stop == "n_ctx" and len(ids) + len(toks) - 1 == n_ctx
        exp_cached = len(cache) if cache and len(cache) < len(ids) and ids[:len(cache)] == cache else 0
        ok = ok and t.get("cached_tokens") == exp_cached
        check(ok, "%s turn %d: prompt %d ids, reply %s (%s), cached %d: as a fresh decode of the "
              "rendered conversation" % (label, k + 1, len(ids), toks, stop, exp_cached),
              "got %s; sample %s, expected cached %d" % (t, want, exp_cached))
        if ref is not None and k == 1:
            ref_check(label, ref, ids, toks)
        reused += exp_cached > 0
        cache = ids + (toks[:-1] if stop in ("max_new", "n_ctx") else toks)
        conv.append({"role": "assistant", "content": t.get("reply", "")})
    return reused, dropped


def ref_check(label, ref, ids, toks):
    """The reply's tokens against PyTorch's greedy continuation (float64), up to a near-tie."""
    G, P, cfg, torch = ref
    seq, agree, tie = list(ids), 0, False
    with torch.no_grad():
        for t in toks:
            lg, _ = G.forward(P, cfg, torch.tensor([seq], dtype=torch.long))
            top = torch.topk(lg[0, -1], 2)
            if float(top.values[0] - top.values[1]) < 1e-4:
                tie = True
                break
            if int(top.indices[0]) != t:
                break
            agree += 1
            seq.append(t)
    check(agree == len(toks) or tie, "%s turn 2: the reply is PyTorch's greedy continuation (%d/%d "
          "tokens%s)" % (label, agree, len(toks), ", then a near-tie" if tie else ""))


def load_ref(model):
    try:
        import torch
        import gpt2_ref as G
    except ImportError as e:
        check(False, "PyTorch reference: %s (install python3-torch)" % e)
        return None
    cfg, params = G.load_hf_dir(model)
    return G, {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}, cfg, torch


# ----------------------------------------------------------- the checks

LINES = ["Hello there", "", "How are you today?", "Tell me more about it.", "Why?"]
LONG = ["Hello there, this is a longer message to fill the context", "And another one",
        "Short", "What do you think about all of this in the end?", "ok", "one more", "last"]


def gpt2_checks(tmp, gm):
    # 1. determinism and every turn against a fresh decode (and PyTorch for turn 2)
    args = ["--max-new", "12", "--system", "Be brief."]
    rc, turns, err = chat(gm, LINES, *args)
    check(rc == 0, "chat --json runs", err)
    rc2, turns2, _ = chat(gm, LINES, *args)
    check(rc2 == 0 and turns2 == turns, "greedy chat is deterministic", (turns, turns2))
    reused, _ = verify("gpt2", gm, gm, turns, LINES, 128, 12, system="Be brief.", eos=(EOT, IM_END),
                       ref=load_ref(gm))
    rc, turns1, err = chat(gm, LINES, "--max-new", "1")
    check(rc == 0, "chat --max-new 1 runs", err)
    r1, _ = verify("gpt2 max-new 1", gm, gm, turns1, LINES, 128, 1, eos=(EOT, IM_END))
    check(reused + r1 >= 2, "the KV cache is reused across turns (%d + %d turns)" % (reused, r1))

    # 2. text output: the same replies, one per line, escaped; no prompt on a pipe
    rc, out, err = run("chat", "--model", gm, "--temperature", "0", *args,
                       stdin="".join(l + "\n" for l in LINES))
    esc = [t["reply"].replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r") for t in turns]
    check(rc == 0 and out.split("\n") == esc + [""] and "> " not in err,
          "text output is the replies, one per line", (out, esc, err))

    # 3. outgrowing the context: the oldest exchanges go
    rc, turns, err = chat(gm, LONG, "--max-new", "10", "--system", "You are terse.")
    check(rc == 0 and "dropped" in err and "n_ctx 128" in err,
          "a conversation past n_ctx drops its oldest exchanges, saying so", err)
    _, dropped = verify("gpt2 n_ctx", gm, gm, turns, LONG, 128, 10, system="You are terse.",
                        eos=(EOT, IM_END))
    check(dropped > 0, "exchanges were dropped (%d)" % dropped)
    rc, turns, err = chat(gm, [" ".join(["word"] * 140)], "--max-new", "4")
    check(rc == 2 and "n_ctx 128" in err and not turns, "a message that fills the context: exit 2", err)

    # 4. --max-new ends a reply with "max_new"; sampling with a seed is reproducible
    rc, turns, err = chat(gm, ["Hi"], "--max-new", "3")
    check(rc == 0 and len(turns) == 1 and turns[0]["stop"] == "max_new" and len(turns[0]["tokens"]) == 3,
          "--max-new 3 stops with \"max_new\"", (turns, err))
    samp = ["--temperature", "0.9", "--top-k", "50", "--seed", "7", "--max-new", "8", "--json"]
    a = run("chat", "--model", gm, *samp, stdin="Hi\nAgain\n")
    b = run("chat", "--model", gm, *samp, stdin="Hi\nAgain\n")
    check(a[0] == 0 and a == b and len(a[1].splitlines()) == 2, "sampling is reproducible with --seed",
          (a, b))


def eos_pick(gm):
    """A user line, its greedy reply's ids and a k >= 1 whose token is new at k and is the
    one token its text encodes to."""
    for line in ("Hello", "What is the capital of France?", "Tell me a story", "Why is the sky blue?"):
        rc, turns, err = chat(gm, [line], "--max-new", "12")
        toks = turns[0]["tokens"] if rc == 0 and turns else []
        for k in range(1, len(toks)):
            if toks[k] in toks[:k] or toks[k] in (EOT, IM_END):
                continue
            rc, text, _ = run("tokenize", "--tokenizer", gm, "--decode", stdin=str(toks[k]))
            rc2, ids, _ = run("tokenize", "--tokenizer", gm, stdin=text)
            if rc == 0 and rc2 == 0 and ids.split() == [str(toks[k])]:
                return line, toks, k, text
    return None


def eos_checks(tmp, gm):
    pick = eos_pick(gm)
    if not check(pick is not None, "a reply token to make the end-of-sequence"):
        return
    line, toks, k, text = pick
    # the template's eos_token
    d = copy_dir(gm, os.path.join(tmp, "gm_eos"))
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    cfg["eos_token"] = text
    json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"))
    rc, turns, err = chat(d, [line], "--max-new", "12")
    check(rc == 0 and turns and turns[0]["tokens"] == toks[:k] and turns[0]["stop"] == "eos",
          "the template's eos_token (the text of id %d) ends the reply before it" % toks[k], (turns, toks, err))
    # generation_config.json's eos_token_id
    d = copy_dir(gm, os.path.join(tmp, "gm_gen"))
    json.dump({"eos_token_id": [12345, toks[k]]}, open(os.path.join(d, "generation_config.json"), "w"))
    rc, turns, err = chat(d, [line], "--max-new", "12")
    check(rc == 0 and turns and turns[0]["tokens"] == toks[:k] and turns[0]["stop"] == "eos",
          "generation_config.json's eos_token_id ends the reply", (turns, toks, err))
    # config.json's eos_token_id, without a generation_config.json
    d = copy_dir(gm, os.path.join(tmp, "gm_cfg"))
    cfg = json.load(open(os.path.join(d, "config.json")))
    cfg["eos_token_id"] = toks[k]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    rc, turns, err = chat(d, [line], "--max-new", "12")
    check(rc == 0 and turns and turns[0]["tokens"] == toks[:k] and turns[0]["stop"] == "eos",
          "config.json's eos_token_id ends the reply", (turns, toks, err))
    rc, turns, err = chat(d, [line], "--max-new", "12", "--ignore-eos")
    check(rc == 0 and turns and turns[0]["tokens"][:k + 1] == toks[:k + 1] and
          turns[0]["stop"] == "max_new", "--ignore-eos goes on past it to --max-new", (turns, toks, err))
    # a model whose next token is always <|im_end|>: empty replies, the chat goes on
    d = copy_dir(gm, os.path.join(tmp, "gm_end"))
    path = os.path.join(d, "model.safetensors")
    hdr, buf, base = st_read(path)
    C = hdr["ln_f.weight"]["shape"][0]
    u = [0.5 if i % 2 else -0.5 for i in range(C)]
    st_set(buf, hdr, base, "wte.weight", IM_END, u)
    st_set(buf, hdr, base, "ln_f.weight", 0, [0.0] * C)
    st_set(buf, hdr, base, "ln_f.bias", 0, u)
    open(path, "wb").write(bytes(buf))
    rc, turns, err = chat(d, ["Hello", "Anyone?"], "--max-new", "12")
    check(rc == 0 and len(turns) == 2 and all(t["tokens"] == [] and t["reply"] == "" and
                                              t["stop"] == "eos" for t in turns),
          "<|im_end|> first: empty replies that stop at \"eos\"", (turns, err))
    verify("im_end model", d, d, turns, ["Hello", "Anyone?"], 128, 12, eos=(EOT, IM_END))
    rc, out, err = run("chat", "--model", d, "--temperature", "0", stdin="Hello\nAnyone?\n")
    check(rc == 0 and out == "\n\n", "text output: an empty line per empty reply", (out, err))
    rc, turns, err = chat(d, ["Hello"], "--max-new", "3", "--ignore-eos")
    check(rc == 0 and turns and turns[0]["tokens"] == [IM_END] * 3 and turns[0]["stop"] == "max_new",
          "--ignore-eos: <|im_end|> three times, to --max-new", (turns, err))


def prompts_checks(tmp, gm):
    """--prompts FILE: each conversation answered on its own, as the same conversation on stdin."""
    args = ["--max-new", "12", "--system", "Be brief."]
    rc, turns, err = chat(gm, ["Hello there", "How are you today?"], *args)
    if not check(rc == 0 and len(turns) == 2, "a stdin chat to compare --prompts with", err):
        return
    own = [{"role": "system", "content": "Answer in one line."},
           {"role": "user", "content": "line one\nline two"}]
    convs = ["Hello there",
             [{"role": "user", "content": "Hello there"},
              {"role": "assistant", "content": turns[0]["reply"]},
              {"role": "user", "content": "How are you today?"}],
             {"messages": own}]
    path = os.path.join(tmp, "convs.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(convs[0]) + "\n\n" + "\n".join(json.dumps(c) for c in convs[1:]) + "\n")
    rc, out, err = run("chat", "--model", gm, "--temperature", "0", "--json", "--prompts", path, *args)
    recs = []
    try:
        recs = [json.loads(l) for l in out.splitlines()]
    except ValueError:
        pass
    if not check(rc == 0 and [r.get("turn") for r in recs] == [1, 2, 3],
                 "--prompts FILE.jsonl: one reply per conversation (a blank line skipped)", out + err):
        return
    check(recs[0]["tokens"] == turns[0]["tokens"] and recs[1]["tokens"] == turns[1]["tokens"],
          "a string and a message list are answered as the same conversation on stdin (--system "
          "first)", (recs, turns))
    ids = tokenize_convs(gm, [own])[0]
    want = sample_greedy(gm, ids, 12)
    toks = recs[2]["tokens"]
    check(recs[2]["prompt_tokens"] == len(ids) and toks == want[:len(toks)] and
          (recs[2]["stop"] != "eos" or want[len(toks)] in (EOT, IM_END)),
          "a conversation with its own system message and a newline in a message: as a fresh "
          "decode of it rendered", (recs[2], want))
    rc, out2, err = run("chat", "--model", gm, "--temperature", "0", "--prompts", path, *args)
    esc = [r["reply"].replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r") for r in recs]
    check(rc == 0 and out2.split("\n") == esc + [""], "text output: one reply per line", (out2, esc))
    with open(os.path.join(tmp, "lines.txt"), "w") as f:
        f.write("Hello there\nHow are you today?\n")
    rc, turns3, err = chat(gm, [], "--prompts", os.path.join(tmp, "lines.txt"), *args)
    check(rc == 0 and len(turns3) == 2 and turns3[0]["tokens"] == turns[0]["tokens"] and
          turns3[1]["prompt_tokens"] < turns[1]["prompt_tokens"],
          "--prompts FILE (not JSONL): a user message per line, each alone", (turns3, err))
    with open(os.path.join(tmp, "bad.jsonl"), "w") as f:
        f.write('"Hi"\n[{"role": "robot", "content": "beep"}]\n')
    rc, out, err = run("chat", "--model", gm, "--temperature", "0", "--prompts",
                       os.path.join(tmp, "bad.jsonl"))
    check(rc == 2 and os.path.join(tmp, "bad.jsonl") + " line 2" in err and "message 1" in err and
          "role" in err, "a message of no known role: exit 2 naming the line and message", (out, err))


def adapter_checks(tmp, gm, data):
    run_dir = os.path.join(tmp, "lora")
    rc, _, err = run("train", "model.init_from=" + gm, "lora.r=4", "lora.alpha=16",
                     "lora.targets=c_attn,c_fc", "optim.lr=5e-2", "train.steps=10",
                     "data.train=" + data, "train.batch_size=2", "train.seq_len=32",
                     "run.checkpoint_every=0", "run.dir=" + run_dir)
    if not check(rc == 0 and os.path.exists(os.path.join(run_dir, "adapter_config.json")),
                 "a LoRA run on the base writes its adapter", err):
        return
    merged = os.path.join(tmp, "merged")
    rc, _, err = run("merge", "--base", gm, "--adapter", run_dir, "--out", merged)
    check(rc == 0, "ctrain merge", err)
    args = ["--max-new", "10"]
    rc, t_adapter, err = chat(gm, LINES, "--adapter", run_dir, *args)
    check(rc == 0 and "merged in memory" in err, "chat --model BASE --adapter DIR", err)
    rc, t_merged, err = chat(merged, LINES, *args)
    check(rc == 0, "chat --model MERGED", err)
    rc, t_base, err = chat(gm, LINES, *args)
    check(t_adapter == t_merged and len(t_adapter) == 4,
          "base + unmerged adapter replies as the merged model", (t_adapter, t_merged))
    check([t["tokens"] for t in t_adapter] != [t["tokens"] for t in t_base],
          "the adapter changes the replies", (t_adapter, t_base))
    verify("adapter", merged, merged, t_adapter, LINES, 128, 10, eos=(EOT, IM_END))
    # an adapter for another model
    other = build(tmp, "gm_wide", ["model.arch=gpt2", "model.n_layer=2", "model.n_head=2",
                                   "model.n_embd=48", "model.n_ctx=128"], 50259)
    chatml_tokenizer(other)
    rc, turns, err = chat(other, ["Hi"], "--adapter", run_dir)
    check(rc == 2 and not turns and "adapter" in err and
          ("adapter_model.safetensors" in err or "adapter_config.json" in err),
          "an adapter for another model: exit 2 naming the adapter's file", err)


def error_checks(tmp, gm):
    rc, turns, err = chat(os.path.join(tmp, "nope"), ["Hi"])
    check(rc == 2 and os.path.join(tmp, "nope") in err and not turns,
          "a missing model directory: exit 2 naming it", err)
    plain = copy_dir(gm, os.path.join(tmp, "plain"))
    cfg = json.load(open(os.path.join(plain, "tokenizer_config.json")))
    del cfg["chat_template"]
    json.dump(cfg, open(os.path.join(plain, "tokenizer_config.json"), "w"))
    rc, turns, err = chat(plain, ["Hi"])
    check(rc == 2 and "tokenizer_config.json" in err and "chat_template" in err and not turns,
          "no chat_template: exit 2 naming tokenizer_config.json", err)
    os.remove(os.path.join(plain, "tokenizer_config.json"))
    rc, turns, err = chat(plain, ["Hi"])
    check(rc == 2 and "tokenizer_config.json" in err, "no tokenizer_config.json: exit 2 naming it", err)
    rc, t_file, err = chat(plain, LINES, "--chat-template", os.path.join(TEMPLATES, "qwen2.json"),
                           "--max-new", "6")
    rc2, t_own, _ = chat(gm, LINES, "--max-new", "6")
    check(rc == 0 and rc2 == 0 and t_file == t_own, "--chat-template FILE gives the template's replies",
          (t_file, t_own, err))
    rc, _, err = run("chat", "--temperature", "0", stdin="Hi\n")
    check(rc == 2 and "--model" in err, "no --model: exit 2", err)
    rc, _, err = run("chat", "--model", gm, "--max-new", "0", stdin="Hi\n")
    check(rc == 2 and "--max-new" in err, "--max-new 0: exit 2", err)
    rc, out, err = run("chat", "--model", gm, "--temperature", "0", stdin="")
    check(rc == 0 and out == "", "no input: no output, exit 0", (out, err))
    rc, out, _ = run("--help")
    check(rc == 0 and "chat" in out, "ctrain --help lists chat")


def llama_checks(tmp):
    lm = build(tmp, "tl", ["model.arch=llama", "model.n_layer=2", "model.n_head=4",
                           "model.n_kv_head=2", "model.n_embd=64", "model.n_ffn=172",
                           "model.n_ctx=128"], 32000)
    shutil.copy(LLAMA_JSON, os.path.join(lm, "tokenizer.json"))
    shutil.copy(os.path.join(TEMPLATES, "tinyllama.json"), os.path.join(lm, "tokenizer_config.json"))
    rc, turns, err = chat(lm, LINES, "--max-new", "8", "--system", "You are a pirate.")
    check(rc == 0, "chat on a LLaMA with TinyLlama's template", err)
    verify("tinyllama", lm, lm, turns, LINES, 128, 8, system="You are a pirate.", eos=(2,))


def main():
    for need in (os.path.join(GPT2, "encoder.json"), LLAMA_JSON):
        if not os.path.exists(need):
            print("FAIL: reference data missing (%s): run scripts/fetch_data.sh" % need)
            return 1
    tmp = tempfile.mkdtemp(prefix="ct_chat_")
    try:
        gm = build(tmp, "gm", ["model.arch=gpt2", "model.n_layer=2", "model.n_head=2",
                               "model.n_embd=32", "model.n_ctx=128"], 50259)
        chatml_tokenizer(gm)
        sharpen(gm)
        gpt2_checks(tmp, gm)
        eos_checks(tmp, gm)
        prompts_checks(tmp, gm)
        adapter_checks(tmp, gm, os.path.join(tmp, "synth_50259.bin"))
        error_checks(tmp, gm)
        llama_checks(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
