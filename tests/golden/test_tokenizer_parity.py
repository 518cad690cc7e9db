#!/usr/bin/env python3
"""GPT-2 tokenizer parity: `ctrain tokenize` against the npm package gpt-3-encoder.

usage: /usr/bin/python3 tests/golden/test_tokenizer_parity.py path/to/ctrain
Exit status 0 when every check passes, 1 otherwise.

Both encoders get the same texts in one batch each (`--jsonl`: one JSON string per
line in, one line of ids out) and must agree token for token: handcrafted cases
(contractions, digit runs, whitespace runs, emoji, scripts, NFC/NFD, the code points
where JavaScript's \\s differs from PCRE2's), the files of tests/data/tokenizer
(whole and line by line), a sweep over the code points, seeded random strings of
tricky pieces, and every document of the Brown corpus in full. Then the ids of all
of them must decode back to the texts, the plain stdin mode must agree with the
batch mode, and src/data/tokenizer/tokenizer_unicode.h must be what this node generates.
Needs node and the reference (scripts/bootstrap.sh installs both).
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
TOK_DIR = os.path.join(ROOT, "data", "gpt2-tokenizer")
BROWN_DIR = os.path.join(ROOT, "data", "brown", "text")
CORPUS_DIR = os.path.join(ROOT, "tests", "data", "tokenizer")
DRIVER = os.path.join(HERE, "gpt3_encode.js")
REFERENCE = os.path.join(ROOT, "deps", "npm", "node_modules", "gpt-3-encoder", "Encoder.js")
UNICODE_H = os.path.join(ROOT, "src", "data", "tokenizer", "tokenizer_unicode.h")

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

# Code points where JavaScript's \s, PCRE2's \s and Python's differ, and their neighbours.
EDGE_SPACES = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680, 0x180E,
               0x2000, 0x2005, 0x200A, 0x200B, 0x200C, 0x200D, 0x2028, 0x2029, 0x202F, 0x205F, 0x2060,
               0x3000, 0xFEFF, 0xFFFE]


def handcrafted():
    cases = [
        ("hello", "Hello world"),
        ("empty", ""),
        ("one space", " "),
        ("prose", "The quick brown fox jumps over the lazy dog. It's 2024, isn't it?"),
        ("contractions", "it's you're we've I'm you'd she'll don't can't 'tis 's 't 're 've 'm 'll 'd"),
        ("contractions upper", "IT'S YOU'RE WE'VE I'M YOU'D SHE'LL DON'T 'S 'T 'RE 'VE 'M 'LL 'D"),
        ("contractions mixed", "It'S you'Re we'vE I'm'd y'all'd've o'clock rock'n'roll"),
        ("contractions curly", "it\u2019s you\u2019re we\u2019ve I\u2019m \u2018quoted\u2019 \u201cdouble\u201d"),
        ("apostrophes alone", "' '' ''' 's's 'ss 'sa ' s '\n's"),
        ("digits", "0 1 12 123 1234 12345 123456789012345678901234567890 3.14159 1,000,000 1e10 0x1F"),
        ("digit letter mix", "abc123def 123abc abc 123 a1b2c3 ٣٤٥ ४२ 一二三 ½ ⅷ ①"),
        ("spaces", "a b  c   d    e     f" + " " * 40 + "g"),
        ("tabs newlines", "a\tb\t\tc\nd\n\ne\n\n\nf\r\ng\r\n\r\nh \n i \t\n j"),
        ("trailing spaces", "end with spaces   "),
        ("trailing newlines", "end with newlines\n\n\n"),
        ("leading whitespace", "   \t\n  leading"),
        ("only whitespace", " \t \n\n  \r\n "),
        ("space before punct", "a !b ?c  .d   ,e"),
        ("punct runs", "?!?! ... --- *** ### ((( ))) [[[ ]]] {{{ }}} <<< >>> ||| ~~~ ^^^ ``` $$$ %%% &&&"),
        ("special text", "<|endoftext|> text <|endoftext|><|endoftext|> <|endoftext"),
        ("emoji", "😀 😃 👍 👍🏽 👍🏿 ❤️ 🇫🇷🇯🇵 🏳️‍🌈"),
        ("emoji zwj", "👩‍💻 👨‍👩‍👧‍👦 🧑🏿‍🚀 👁️‍🗨️ 1️⃣ #️⃣ *️⃣"),
        ("cjk", "中文分词测试。日本語のテキスト。한국어 텍스트입니다。"),
        ("accents nfc", unicodedata.normalize("NFC", "café naïve résumé Ångström façade Ñandú Zoë")),
        ("accents nfd", unicodedata.normalize("NFD", "café naïve résumé Ångström façade Ñandú Zoë")),
        ("arabic", "مرحبا بالعالم ١٢٣ هذه جملة"),
        ("hebrew", "שלום עולם 123 זה משפט"),
        ("devanagari", "नमस्ते दुनिया यह एक वाक्य है। ४२"),
        ("thai", "สวัสดีชาวโลก"),
        ("mixed scripts", "English中文Русскийالعربية123日本"),
        ("zalgo", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇"),
        ("control chars", "a\x00b\x01c\x7fd\x1be[0m"),
        ("byte alphabet", "ĠĊĉ Ġthe ÃĤ"),
        ("astral letters", "𝔸𝔹ℂ 𝟘𝟙𝟚 𐍈𐌰𐌹 𓀀𓀁 𠀀𠀁"),
        ("replacement char", "\ufffd \ufffd\ufffd"),
        ("private use", "\ue000\uf8ff \U000f0000"),
        ("url", "https://example.org/a/b?c=1&d=two#frag someone@example.com"),
        ("long word", "a" * 300 + " " + "xyz" * 120),
        ("long digits", "9" * 500),
        ("long punct", "-" * 400),
        ("long space run", " " * 1000 + "x"),
    ]
    for cp in EDGE_SPACES:
        w = chr(cp)
        ctx = ["a%sb" % w, "a%s%sb" % (w, w), "a %sb" % w, "a%s b" % w, w, "a%s" % w, "%s1" % w,
               "x%s\n" % w, "'s%s" % w, " %s %s " % (w, w), "1%s2" % w, "!%s!" % w, "%s's" % w, "\n%s\n" % w]
        cases.append(("space U+%04X" % cp, " | ".join(ctx)))
        cases.append(("space U+%04X run" % cp, "word" + w * 3 + "word" + w))
    return cases


def corpus_files():
    cases = []
    for name in sorted(os.listdir(CORPUS_DIR)):
        with open(os.path.join(CORPUS_DIR, name), encoding="utf-8", newline="") as f:
            text = f.read()
        cases.append(("%s (whole)" % name, text))
        for i, line in enumerate(text.splitlines(keepends=True)):
            cases.append(("%s line %d" % (name, i + 1), line))
    return cases


def header_ranges():
    """The [lo, hi] ranges listed in tokenizer_unicode.h (checked against node below)."""
    out = []
    keep = False  # the three tables GPT-2's pattern uses
    with open(UNICODE_H, encoding="utf-8") as f:
        for line in f:
            if line.startswith("static const"):
                keep = any(n in line for n in ("tok_js_space[", "tok_js_letter[", "tok_js_number["))
            if not keep:
                continue
            for cell in line.split("{")[1:]:
                parts = cell.split("}")[0].split(",")
                if len(parts) == 2 and parts[0].strip().startswith("0x"):
                    out.append((int(parts[0], 16), int(parts[1], 16)))
    return out


def codepoint_sweep():
    """Every BMP code point, plus the edges of every class range and a sample of the
    other planes, each in contexts where its class decides the split."""
    cps = set(range(0x10000))
    for lo, hi in header_ranges():
        cps.update((lo - 1, lo, lo + 1, hi - 1, hi, hi + 1))
    cps.update(range(0x10000, 0x110000, 251))
    cps = sorted(c for c in cps if 0 <= c <= 0x10FFFF and not 0xD800 <= c <= 0xDFFF)
    cases = []
    for k in range(0, len(cps), 128):
        block = [chr(c) for c in cps[k:k + 128]]
        text = " ".join("a%s1%s %s%s" % (c, c, c, c) for c in block) + "\n"
        cases.append(("code points U+%04X..U+%04X" % (cps[k], cps[min(k + 127, len(cps) - 1)]), text))
    return cases


def fuzz(n=3000, seed=20240520):
    pieces = ["a", "Z", "the", "é", "e\u0301", "中", "日本", "1", "42", "٣", "'", "'s", "'S", "'ll", "\u2019",
              "\u2019s", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u0085", "\u180e", "\u200b",
              "\u2028", "\u3000", "\ufeff", "\u1680", "\u202f", "!", ".", ",", "...", "😀", "👩‍💻", "🏽",
              "\x00", "\x7f", "ll", "ve", "re", "d", "m", "t", "s", "\u0120", "\u2009", "-", "_", "$", "%"]
    rng = random.Random(seed)
    return [("fuzz %d" % i, "".join(rng.choice(pieces) for _ in range(rng.randint(1, 40)))) for i in range(n)]


def brown():
    names = sorted(n for n in os.listdir(BROWN_DIR) if n.endswith(".txt"))
    cases = []
    for n in names:
        with open(os.path.join(BROWN_DIR, n), encoding="utf-8", newline="") as f:
            cases.append(("brown/%s" % n, f.read()))
    return cases


# ---------------------------------------------------------------- running both

def run_batches(ctrain, texts, tmp):
    """Encode texts with both, in parallel; returns (ours, reference) as lists of id lists."""
    path = os.path.join(tmp, "cases.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    outs = {}
    procs = {}
    for who, cmd in (("ours", [ctrain, "tokenize", "--tokenizer", TOK_DIR, "--jsonl"]),
                     ("reference", ["node", DRIVER, "--jsonl"])):
        fin = open(path, "rb")
        fout = open(os.path.join(tmp, who + ".txt"), "wb")
        ferr = open(os.path.join(tmp, who + ".err"), "wb")
        procs[who] = (subprocess.Popen(cmd, stdin=fin, stdout=fout, stderr=ferr), fin, fout, ferr, cmd)
    for who, (p, fin, fout, ferr, cmd) in procs.items():
        t0 = time.time()
        rc = p.wait()
        for f in (fin, fout, ferr):
            f.close()
        with open(os.path.join(tmp, who + ".err"), encoding="utf-8", errors="replace") as f:
            err = f.read()
        if not check(rc == 0, "%s encodes the batch" % who, "exit %d: %s\n  command: %s < %s" %
                     (rc, err.strip()[-2000:], " ".join(cmd), path)):
            return None, None
        with open(os.path.join(tmp, who + ".txt"), encoding="ascii") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        outs[who] = [[int(x) for x in line.split()] for line in lines]
        del t0
    return outs["ours"], outs["reference"]


def token_strings():
    with open(os.path.join(TOK_DIR, "encoder.json"), encoding="utf-8") as f:
        enc = json.load(f)
    return {v: k for k, v in enc.items()}


def show(ids, names, lo, hi):
    return " ".join("%d:%s" % (i, json.dumps(names.get(i, "?"), ensure_ascii=False)) for i in ids[lo:hi])


def compare(cases, ours, ref):
    if not check(len(ours) == len(cases) and len(ref) == len(cases), "one line of ids per case",
                 "%d cases, ours %d lines, reference %d" % (len(cases), len(ours), len(ref))):
        return
    names = None
    bad = 0
    for (name, text), a, b in zip(cases, ours, ref):
        if a == b:
            continue
        bad += 1
        if bad > 10:
            continue
        names = names or token_strings()
        k = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        lo = max(0, k - 4)
        print("  mismatch in %s (%d bytes): first difference at token %d (ours %d tokens, reference %d)\n"
              "    ours:      %s\n    reference: %s" %
              (name, len(text.encode("utf-8")), k, len(a), len(b), show(a, names, lo, k + 5),
               show(b, names, lo, k + 5)))
    check(bad == 0, "%d cases agree token for token (%d tokens)" % (len(cases), sum(len(x) for x in ref)),
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
         "run scripts/bootstrap.sh (it runs scripts/fetch_data.sh, which installs deps/npm)")
    need(os.path.exists(os.path.join(TOK_DIR, "vocab.bpe")), "%s is missing" % TOK_DIR,
         "run scripts/fetch_data.sh")
    need(os.path.isdir(BROWN_DIR) and len(os.listdir(BROWN_DIR)) >= 500, "%s is missing or incomplete" % BROWN_DIR,
         "run scripts/fetch_data.sh")
    t_start = time.time()

    # the class tables must be this node's
    gen = subprocess.run(["node", DRIVER, "--classes"], capture_output=True)
    with open(UNICODE_H, "rb") as f:
        committed = f.read()
    check(gen.returncode == 0 and gen.stdout == committed,
          "src/data/tokenizer/tokenizer_unicode.h matches `node gpt3_encode.js --classes` "
          "(node %s)" %
          subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip(),
          "this node's regexes classify code points differently from the committed tables, so its "
          "reference output differs from ctrain's; regenerate the header with "
          "`node tests/golden/gpt3_encode.js --classes > "
          "src/data/tokenizer/tokenizer_unicode.h` and rebuild")

    groups = [("handcrafted", handcrafted()), ("tests/data/tokenizer", corpus_files()),
              ("code point sweep", codepoint_sweep()), ("fuzz", fuzz()), ("brown corpus", brown())]
    cases = [c for _, g in groups for c in g]
    print("%d cases: %s; %.1f MB" % (len(cases), ", ".join("%s %d" % (n, len(g)) for n, g in groups),
                                     sum(len(t.encode("utf-8")) for _, t in cases) / 1e6))
    tmp = tempfile.mkdtemp(prefix="ctrain_tokparity_")
    keep = False
    try:
        t0 = time.time()
        ours, ref = run_batches(ctrain, [t for _, t in cases], tmp)
        print("  both encoders ran in %.1f s" % (time.time() - t0))
        if ours is None:
            keep = True
            return 1
        compare(cases, ours, ref)
        brown_ref = sum(len(ref[i]) for i, (n, _) in enumerate(cases) if n.startswith("brown/"))
        brown_ours = sum(len(ours[i]) for i, (n, _) in enumerate(cases) if n.startswith("brown/"))
        check(brown_ours == brown_ref and brown_ref > 1000000,
              "brown corpus: %d tokens from both" % brown_ref, "ours %d" % brown_ours)

        # every id sequence decodes back to its text
        ids_path = os.path.join(tmp, "all_ids.txt")
        with open(ids_path, "w") as f:
            for line in ours:
                f.write(" ".join(map(str, line)) + "\n")
        with open(ids_path, "rb") as fin:
            dec = subprocess.run([ctrain, "tokenize", "--tokenizer", TOK_DIR, "--decode"], stdin=fin,
                                 capture_output=True)
        want = "".join(t for _, t in cases).encode("utf-8")
        check(dec.returncode == 0 and dec.stdout == want, "decode(encode(text)) == text for every case",
              "exit %d, %d bytes back for %d; %s" % (dec.returncode, len(dec.stdout), len(want),
                                                     dec.stderr.decode(errors="replace").strip()))

        # the plain stdin mode agrees with the batch mode
        plain_bad = []
        for i, (name, text) in enumerate(cases):
            if not name.endswith("(whole)") and name not in ("hello", "empty", "emoji zwj", "brown/ca01.txt"):
                continue
            p = subprocess.run([ctrain, "tokenize", "--tokenizer", TOK_DIR], input=text.encode("utf-8"),
                               capture_output=True)
            if p.returncode != 0 or [int(x) for x in p.stdout.split()] != ref[i]:
                plain_bad.append(name)
        check(not plain_bad, "plain stdin mode gives the reference's ids", "differs for %s" % plain_bad)
    finally:
        if failures or keep:
            print("working files kept in %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%s: tokenizer parity in %.1f s" % ("FAIL" if failures else "PASS", time.time() - t_start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
