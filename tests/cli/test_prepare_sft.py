#!/usr/bin/env python3
"""`ctrain prepare --format sft` end to end: prompt/completion, Alpaca and messages lines
(ChatML with a GPT-2 tokenizer.json that has <|im_start|>/<|im_end|>, TinyLlama's template
with LLaMA's tokenizer) into shards and .sft sidecars, checked against an independent
reading: the tokens are `ctrain tokenize` of the pieces (document token + prompt +
completion + EOS) or `ctrain tokenize --chat` of the conversation; the mask is recomputed
here from `ctrain tokenize --render`'s text, the assistant contents and each token's bytes
read from tokenizer.json (a token counts when one of its bytes lies in an assistant span:
the content and the end-of-turn token after it; for prompt/completion, when it reaches past
the prompt's last byte, the text being encoded whole). LLaMA's " vehicle" after "?\n" is one
token, as in the whole text, not "▁" + "▁vehicle". Then bad lines (exit 2 listing them, or
skipped), --max-len truncate/drop with their counts in the manifest and the summary, a
validation split, a rerun refused without --overwrite, a failed run leaving nothing
behind, option errors, and (with nginx) the sidecars uploaded with --out http://.

usage: test_prepare_sft.py path/to/ctrain
"""
import json
import os
import re
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

ALPACA_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                "context. Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
ALPACA = ("Below is an instruction that describes a task. Write a response that appropriately completes "
          "the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")


def check(cond, label, detail=""):
    global checks
    checks += 1
    if cond:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}")
        print(f"FAIL {label}: {detail}")
    return cond


def run(args, stdin=None, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([CTRAIN, *args], input=stdin, capture_output=True, timeout=300, env=e)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def prepare(tok, out, *inputs, extra=(), env=None):
    rc, so, se = run(["prepare", "--format", "sft", "--tokenizer", tok, "--out", out, "--quiet", *extra, *inputs],
                     env=env)
    return rc, so + se


def tokenize_plain(tok, texts):
    """The plain encodings of texts (ctrain tokenize --jsonl: one JSON string per line)."""
    rc, so, se = run(["tokenize", "--tokenizer", tok, "--jsonl"],
                     stdin="".join(json.dumps(t) + "\n" for t in texts).encode())
    assert rc == 0, se
    return [[int(x) for x in line.split()] for line in so.split("\n")[:len(texts)]]


def tokenize_chat(tok, conv):
    rc, so, se = run(["tokenize", "--chat", "--tokenizer", tok], stdin=(json.dumps(conv) + "\n").encode())
    assert rc == 0, se
    return [int(x) for x in so.split()]


def render(tok, conv):
    rc, so, se = run(["tokenize", "--render", "--tokenizer", tok], stdin=(json.dumps(conv) + "\n").encode())
    assert rc == 0, se
    return json.loads(so.split("\n")[0])


def read_shard(path):
    raw = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    assert magic == 20240520, path
    fmt = "<%d%s" % (n, "H" if version == 1 else "I")
    return list(struct.unpack(fmt, raw[1024:]))


def read_sidecar(path):
    raw = open(path, "rb").read()
    magic, version, n, ntok, counted = struct.unpack("<iiqqq", raw[:32])
    assert magic == 20261125 and version == 1, path
    offs = list(struct.unpack("<%dq" % (n + 1), raw[32:32 + 8 * (n + 1)]))
    bits = raw[32 + 8 * (n + 1):]
    assert len(bits) == (ntok + 7) // 8, path
    mask = [(bits[i >> 3] >> (i & 7)) & 1 for i in range(ntok)]
    assert sum(mask) == counted, path
    return offs, mask


def read_examples(out, split="train"):
    """[(ids, mask)] of every example of split, in order, over all its shards."""
    exs = []
    i = 0
    while os.path.exists(os.path.join(out, "%s_%06d.bin" % (split, i))):
        ids = read_shard(os.path.join(out, "%s_%06d.bin" % (split, i)))
        offs, mask = read_sidecar(os.path.join(out, "%s_%06d.sft" % (split, i)))
        assert offs[-1] == len(ids)
        for a, b in zip(offs, offs[1:]):
            exs.append((ids[a:b], mask[a:b]))
        i += 1
    return exs


# ----------------------------------------------------------- token bytes

def bytes_to_unicode():
    """GPT-2's byte <-> printable-character alphabet (encoder.py)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class TokenBytes:
    """Each id's bytes, read from a tokenizer.json: GPT-2 byte-level, or SentencePiece
    ("▁" a space, <0xXX> a byte). Added tokens are their content."""

    def __init__(self, tokenizer_json):
        tj = json.load(open(tokenizer_json, encoding="utf-8"))
        self.spm = bool(tj["model"].get("byte_fallback"))
        dec = {c: b for b, c in bytes_to_unicode().items()}
        self.b = {}
        for s, i in tj["model"]["vocab"].items():
            if self.spm:
                m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", s)
                self.b[i] = bytes([int(m.group(1), 16)]) if m else s.replace("\u2581", " ").encode()
            else:
                self.b[i] = bytes(dec[c] for c in s)
        self.added = set()
        for a in tj.get("added_tokens", []):
            self.b[a["id"]] = a["content"].encode()
            self.added.add(a["id"])

    def offsets(self, ids, text):
        """start[i] of each token in text (bytes), start[n] = len. SentencePiece (its
        normalizer prepends "▁" to every piece between added tokens): the first token of
        each piece starts with that "▁", which the text lacks."""
        start, p, out = [], 0, b""
        for i, t in enumerate(ids):
            tb = self.b[t]
            if self.spm and t not in self.added and (i == 0 or ids[i - 1] in self.added):
                assert tb.startswith(b" "), (i, t, tb)
                tb = tb[1:]
            start.append(p)
            out += tb
            p += len(tb)
        start.append(p)
        assert out == text, (out[:200], text[:200])
        return start


def expected_mask(tb, ids, text, spans):
    st = tb.offsets(ids, text)
    mask = []
    for i in range(len(ids)):
        a, b = st[i], st[i + 1]
        mask.append(int(any((s <= a < e) if a == b else (a < e and b > s) for s, e in spans)))
    if mask:
        mask[0] = 0
    return mask


def assistant_spans(text, conv, header, end):
    """Byte spans of header + content + end for each assistant message, in order."""
    spans, cur = [], 0
    for m in conv:
        if m["role"] != "assistant":
            continue
        piece = (header + m["content"] + end).encode()
        at = text.index(piece, cur) + len(header.encode())
        spans.append((at, at + len((m["content"] + end).encode())))
        cur = spans[-1][1]
    return spans


# ----------------------------------------------------------- tokenizers

def chatml_dir(d):
    """GPT-2's vocabulary as a tokenizer.json with <|im_start|>, <|im_end|> added, Qwen2's template."""
    enc = json.load(open(os.path.join(GPT2, "encoder.json")))
    merges = [l for l in open(os.path.join(GPT2, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if l]
    added = [("<|endoftext|>", 50256), ("<|im_start|>", 50257), ("<|im_end|>", 50258)]
    vocab = dict(enc)
    for t, i in added:
        vocab[t] = i
    tj = {"version": "1.0", "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
          "added_tokens": [{"id": i, "content": t, "special": True, "lstrip": False, "rstrip": False,
                            "normalized": False, "single_word": False} for t, i in added],
          "model": {"type": "BPE", "vocab": vocab, "merges": merges}}
    tok = os.path.join(d, "chatml")
    os.mkdir(tok)
    json.dump(tj, open(os.path.join(tok, "tokenizer.json"), "w"))
    shutil.copy(os.path.join(TEMPLATES, "qwen2.json"), os.path.join(tok, "tokenizer_config.json"))
    return tok


def llama_dir(d):
    tok = os.path.join(d, "tinyllama")
    os.mkdir(tok)
    shutil.copy(LLAMA_JSON, os.path.join(tok, "tokenizer.json"))
    shutil.copy(os.path.join(TEMPLATES, "tinyllama.json"), os.path.join(tok, "tokenizer_config.json"))
    return tok


# ----------------------------------------------------------- the data

def m(role, content):
    return {"role": role, "content": content}


LINES = [
    {"prompt": "What is the capital of France?", "completion": " Paris."},
    {"instruction": "Give three colors.", "input": "", "output": "Red, green, blue."},
    {"messages": [m("user", "Hi there"), m("assistant", "Hello! How can I help?")]},
    {"instruction": "Translate to French.", "input": "cat", "output": "chat"},
    {"messages": [m("system", "Be brief."), m("user", "2+2?"), m("assistant", "4"), m("user", "3+3?"),
                  m("assistant", "6, of course.")]},
    {"prompt": "Zwölf Boxkämpfer 🙂:", "completion": " jagen Viktor quer über den großen Sylter Deich.", "id": 6},
    {"messages": [m("user", "Say <|im_end|> please"), m("assistant", "  spaced  out  ")]},
]


def expected(tok, tb, doc, eos, line, header, end):
    """(ids, mask) of one line, from the CLI's tokenize and this file's reading of the bytes."""
    if "messages" in line:
        conv = line["messages"]
        ids = tokenize_chat(tok, conv)
        text = render(tok, conv).encode()
        return ids, expected_mask(tb, ids, text, assistant_spans(text, conv, header, end))
    if "prompt" in line:
        prompt, completion = line["prompt"], line["completion"]
    else:
        t = ALPACA_INPUT if line.get("input") else ALPACA
        prompt, completion = t.format(instruction=line["instruction"], input=line.get("input")), line["output"]
    # the text encoded whole (as TRL does); a token counts when it reaches past the prompt's last byte
    ids = tokenize_plain(tok, [prompt + completion])[0]
    st, pn = tb.offsets(ids, (prompt + completion).encode()), len(prompt.encode())
    mask = [int(st[k + 1] > pn or st[k] == st[k + 1] >= pn) for k in range(len(ids))]
    return [doc] + ids + [eos], [0] + mask + [1]


def write_jsonl(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for l in lines:
            f.write((l if isinstance(l, str) else json.dumps(l, ensure_ascii=False)) + "\n")


def kind(line):
    return "messages" if "messages" in line else "prompt_completion" if "prompt" in line else "alpaca"


def formats(tmp, name, tok, tb, doc, eos, header, end):
    src = os.path.join(tmp, name + ".jsonl")
    write_jsonl(src, LINES)
    out = os.path.join(tmp, name + "_out")
    rc, text = prepare(tok, out, src, extra=["--shard-tokens", "120"])
    if not check(rc == 0, f"{name}: prepare --format sft", text[-800:]):
        return
    want = [expected(tok, tb, doc, eos, l, header, end) for l in LINES]
    got = read_examples(out)
    check(len(got) == len(LINES), f"{name}: one example per line", f"{len(got)} examples")
    for i, (g, w) in enumerate(zip(got, want)):
        check(g[0] == w[0], f"{name}: example {i} ({kind(LINES[i])}): tokens as ctrain tokenize{' --chat' if 'messages' in LINES[i] else ''} gives them",
              f"\n  got  {g[0]}\n  want {w[0]}")
        check(g[1] == w[1], f"{name}: example {i}: the mask covers exactly the completion/assistant tokens",
              f"\n  got  {g[1]}\n  want {w[1]}\n  ids  {g[0]}")
        if "messages" not in LINES[i]:
            check(g[0][-1] == eos and g[1][-1] == 1 and g[0][0] == doc,
                  f"{name}: example {i}: starts with the document token {doc}, ends with EOS {eos} (counted)")
    man = json.load(open(os.path.join(out, "manifest.json")))
    shards = man["shards"]
    check(man["format"] == "ctrain-sft/1" and len(shards) >= 2 and all(s["split"] == "train" for s in shards),
          f"{name}: manifest format ctrain-sft/1, examples kept whole across {len(shards)} shards of <= 120 tokens",
          json.dumps(shards)[:300])
    ok = True
    for s in shards:
        side = s.get("sidecar", {})
        bpath, spath = os.path.join(out, s["file"]), os.path.join(out, side.get("file", "?"))
        offs, mask = read_sidecar(spath)
        ok &= (s["bytes"] == os.path.getsize(bpath) and side["bytes"] == os.path.getsize(spath) and
               len(side["xxh3_128"]) == 32 and s["examples"] == len(offs) - 1 and
               s["counted_tokens"] == sum(mask) and s["tokens"] == offs[-1] and len(s["blocks"]) >= 1 and
               (s["tokens"] <= 120 or s["examples"] == 1))
    check(ok, f"{name}: each shard entry: bytes, blocks, examples, counted_tokens, sidecar file/bytes/xxh3_128",
          json.dumps(shards)[:600])
    tot = man["totals"]
    n_counted = sum(sum(w[1]) for w in want)
    n_tokens = sum(len(w[0]) for w in want)
    kinds = {k: sum(1 for l in LINES if kind(l) == k) for k in ("prompt_completion", "alpaca", "messages")}
    check(tot["examples"] == len(LINES) and tot["tokens"] == n_tokens and tot["counted_tokens"] == n_counted and
          tot["bad_lines"] == 0 and tot["truncated"] == 0 and tot["dropped"] == 0 and
          all(tot["kinds"][k]["examples"] == v for k, v in kinds.items()),
          f"{name}: totals: examples, tokens, counted tokens, per kind", json.dumps(tot))
    check(man["tokenizer"]["identity"].startswith(("gpt2-bpe:", "spm-bpe:")) and man["options"]["eos"] == eos and
          man["options"]["bos"] == doc and man["options"]["chat_template"], f"{name}: manifest tokenizer and options",
          json.dumps(man["options"]))
    return src, out, want


def whole_text(tmp, llama):
    """Issue #33's case: with the completion tokenised apart, " vehicle" after "?\n" was 29871 19716
    (a lone "▁", then "▁vehicle"); the whole text has 19716 alone. A prompt ending in a space:
    the token " Paris" holds the completion's first byte and counts."""
    src = os.path.join(tmp, "vehicle.jsonl")
    write_jsonl(src, [{"prompt": "What is a car?\n", "completion": " vehicle"},
                      {"prompt": "The capital of France is ", "completion": "Paris"}])
    out = os.path.join(tmp, "vehicle_out")
    rc, text = prepare(llama, out, src)
    got = read_examples(out) if rc == 0 else [([], []), ([], [])]
    whole = tokenize_plain(llama, ["What is a car?\n vehicle", "The capital of France is Paris"])
    check(got[0][0] == [1] + whole[0] + [2] and got[0][0][-2:] == [19716, 2] and 29871 not in got[0][0],
          "LLaMA: \"...?\\n\" + \" vehicle\" is the whole text's ids (... 13 19716), not ... 13 29871 19716",
          f"{got[0][0]} vs {whole[0]}: {text[-300:]}")
    check(got[0][1] == [0] * (len(got[0][0]) - 2) + [1, 1], "... and only \"▁vehicle\" and EOS count", str(got[0][1]))
    paris = whole[1][-1]
    check(got[1][0] == [1] + whole[1] + [2] and got[1][1] == [0] * (len(got[1][0]) - 2) + [1, 1] and
          paris not in tokenize_plain(llama, ["The capital of France is "])[0],
          "a token straddling the prompt's end (\"▁Paris\" after \"is \") counts", f"{got[1]}")


def main():
    if not os.path.exists(os.path.join(GPT2, "encoder.json")):
        print("SKIP: data/gpt2-tokenizer missing (scripts/fetch_data.sh)")
        return 0
    tmp = tempfile.mkdtemp(prefix="ctrain_sft_cli_")
    try:
        return body(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def body(tmp):
    chatml = chatml_dir(tmp)
    res = formats(tmp, "chatml", chatml, TokenBytes(os.path.join(chatml, "tokenizer.json")), 50256, 50256,
                  "<|im_start|>assistant\n", "<|im_end|>")
    if os.path.exists(LLAMA_JSON):
        llama = llama_dir(tmp)
        formats(tmp, "tinyllama", llama, TokenBytes(LLAMA_JSON), 1, 2, "<|assistant|>\n", "</s>")
        whole_text(tmp, llama)
    else:
        print("SKIP: LLaMA's tokenizer: %s missing (scripts/fetch_data.sh)" % LLAMA_JSON)
    if not res:
        return 1
    src, out, want = res

    # --- a rerun without --overwrite is refused, and leaves the dataset as it was
    before = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    rc, text = prepare(chatml, out, src)
    check(rc == 2 and "already holds" in text and "--overwrite" in text, "a rerun without --overwrite: exit 2",
          text[-400:])

    # --- bad lines: listed by line, exit 2, nothing written; skipped with --bad-lines skip
    bad = os.path.join(tmp, "bad.jsonl")
    write_jsonl(bad, [LINES[0], "not json", {"prompt": "x"}, "", {"messages": [m("user", "no answer")]},
                      {"prompt": "a", "completion": ""}, LINES[1]])
    fresh = os.path.join(tmp, "fresh")
    rc, text = prepare(chatml, fresh, bad)
    check(rc == 2 and "bad.jsonl: 4 bad JSONL lines (line 2: not valid JSON; line 3: no field \"completion\"; "
          "line 5: no assistant message" in text and "line 6: field \"completion\" is empty" in text and
          "--bad-lines skip" in text, "bad lines: exit 2, each listed with its line and reason", text[-600:])
    check(not os.path.exists(fresh), "a failed prepare leaves no --out behind")
    rc, text = prepare(chatml, out, bad, extra=["--overwrite"])
    after = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
    check(rc == 2 and after == before, "a failed prepare --overwrite leaves the old dataset byte for byte",
          str(sorted(after)))
    rc, so, se = run(["prepare", "--format", "sft", "--tokenizer", chatml, "--out", fresh, "--bad-lines", "skip", bad])
    man = json.load(open(os.path.join(fresh, "manifest.json"))) if rc == 0 else {}
    check(rc == 0 and man["totals"]["bad_lines"] == 4 and man["totals"]["examples"] == 2 and
          "bad.jsonl:2: skipped: not valid JSON" in se and "skipped 4 bad lines" in se and
          man["sources"][0]["bad_lines"] == 4,
          "--bad-lines skip: skipped with a warning each, counted in the manifest and the summary", se[-600:])
    many = os.path.join(tmp, "many.jsonl")
    write_jsonl(many, ["{}"] * 12 + [LINES[0]])
    rc, text = prepare(chatml, os.path.join(tmp, "many_out"), many)
    check(rc == 2 and "12 bad JSONL lines" in text and "line 10:" in text and "line 11:" not in text and "; ...)" in text,
          "more than 10 bad lines: the first 10 listed, then ...", text[-400:])

    # --- --max-len: truncate keeps the first N tokens, drop leaves the example out; counted
    lens = [len(w[0]) for w in want]
    n = sorted(lens)[len(lens) // 2]
    trunc = [i for i, w in enumerate(want) if len(w[0]) > n and any(w[1][:n])]
    empty = [i for i, w in enumerate(want) if len(w[0]) > n and not any(w[1][:n])]
    mo = os.path.join(tmp, "maxlen")
    rc, so, se = run(["prepare", "--format", "sft", "--tokenizer", chatml, "--out", mo, "--max-len", str(n), src])
    got = read_examples(mo) if rc == 0 else []
    keep = [i for i in range(len(want)) if i not in empty]
    man = json.load(open(os.path.join(mo, "manifest.json"))) if rc == 0 else {"totals": {}}
    tot = man["totals"]
    check(rc == 0 and len(got) == len(keep) and
          all(g[0] == want[i][0][:n] and g[1] == want[i][1][:n] for g, i in zip(got, keep)) and
          tot["truncated"] == len(trunc) and tot["dropped"] == len(empty) and
          f"truncated {len(trunc)}, dropped {len(empty)} (--max-len {n}, truncate)" in se,
          f"--max-len {n} truncate: the first {n} tokens, {len(trunc)} truncated, {len(empty)} left with no "
          f"counted token dropped, in the manifest and the summary", se[-500:] + json.dumps(tot))
    kinds_t = sum(v["truncated"] for v in tot.get("kinds", {}).values())
    check(kinds_t == len(trunc), "per-kind truncated counts add up", json.dumps(tot.get("kinds")))
    rc, so, se = run(["prepare", "--format", "sft", "--tokenizer", chatml, "--out", mo, "--overwrite",
                      "--max-len", str(n), "--max-len-policy", "drop", src])
    got = read_examples(mo) if rc == 0 else []
    short = [i for i, w in enumerate(want) if len(w[0]) <= n]
    tot = json.load(open(os.path.join(mo, "manifest.json")))["totals"] if rc == 0 else {}
    check(rc == 0 and [g[0] for g in got] == [want[i][0] for i in short] and tot["dropped"] == len(want) - len(short)
          and tot["truncated"] == 0 and f"truncated 0, dropped {len(want) - len(short)}" in se,
          "--max-len-policy drop: longer examples left out whole, counted", se[-400:])

    # --- validation split: the first N examples
    vo = os.path.join(tmp, "val")
    rc, text = prepare(chatml, vo, src, extra=["--val-examples", "2"])
    val, train = (read_examples(vo, "val"), read_examples(vo)) if rc == 0 else ([], [])
    check(rc == 0 and [v[0] for v in val] == [w[0] for w in want[:2]] and
          [t[0] for t in train] == [w[0] for w in want[2:]], "--val-examples 2: the first two examples in val_000000",
          text[-300:])

    # --- option errors
    rc, text = prepare(chatml, os.path.join(tmp, "x"), src, extra=["--field", "text"])
    check(rc == 2 and "--field does not apply to --format sft" in text, "--field with --format sft: exit 2", text)
    rc, so, se = run(["prepare", "--tokenizer", chatml, "--out", os.path.join(tmp, "x"), "--max-len", "5", src])
    check(rc == 2 and "--max-len is for --format sft" in se, "--max-len without --format sft: exit 2", se)
    rc, text = prepare(chatml, os.path.join(tmp, "x"), src, extra=["--max-len-policy", "cut"])
    check(rc == 2 and "expected truncate or drop" in text, "--max-len-policy cut: exit 2", text)
    rc, text = prepare(chatml, os.path.join(tmp, "x"), src, extra=["--val-examples", "1", "--val-fraction", "0.1"])
    check(rc == 2 and "choose one" in text, "--val-examples with --val-fraction: exit 2", text)

    # --- messages need a template: GPT-2's bare files have none; --chat-template gives one
    rc, text = prepare(GPT2, os.path.join(tmp, "notpl"), src)
    check(rc == 2 and "chat template" in text and "--chat-template" in text and ":3:" in text,
          "messages without a chat template: exit 2 naming the line, hint --chat-template", text[-400:])
    check(not os.path.exists(os.path.join(tmp, "notpl")), "... and no --out left behind")
    rc, text = prepare(GPT2, os.path.join(tmp, "tpl"), src,
                       extra=["--chat-template", os.path.join(TEMPLATES, "qwen2.json")])
    check(rc == 0, "--chat-template FILE", text[-300:])

    # --- --out http://: shards, sidecars, then the manifest uploaded
    sys.path.insert(0, HERE)
    import remote_servers
    why = remote_servers.missing(nginx=True, s3rver=False)
    if why:
        print("SKIP: upload: " + why)
    else:
        www = os.path.join(tmp, "www")
        os.makedirs(os.path.join(www, "ds"))
        with remote_servers.Nginx(www) as ng:
            rc, so, se = run(["prepare", "--format", "sft", "--tokenizer", chatml, "--out", f"{ng.url}/ds/sft/",
                              "--shard-tokens", "120", src])
            up = os.path.join(www, "ds", "sft")
            names = sorted(os.listdir(up)) if os.path.isdir(up) else []
            local = sorted(os.listdir(out))
            check(rc == 0 and "uploaded" in se and names == local and
                  all(open(os.path.join(up, f), "rb").read() == open(os.path.join(out, f), "rb").read()
                      for f in names if not f.endswith(".json")),
                  "--out http://: every shard and sidecar uploaded with the manifest", f"{names} vs {local}: {se[-400:]}")

    print(f"{checks} checks, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
