#!/usr/bin/env python3
"""`ctrain prepare` end to end: inputs (files, directories, globs, JSONL,
stdin, separators), the token stream against `ctrain tokenize`, validation
splits, shard limits, the manifest, the tokenised-data cache (a second run
tokenises nothing; eviction keeps the limit), and bad input (exit 2, the file
and line or offset named, the output directory left as it was, also when the
disk fills up or the run is killed). With LLaMA's tokenizer: BOS before each
document, and a tokenizer.json of a kind not supported refused by prepare and
tokenize with the file and key named.

usage: test_prepare.py path/to/ctrain
"""
import glob
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOK = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA = os.path.join(ROOT, "data", "llama-tokenizer")
BROWN = os.path.join(ROOT, "data", "brown", "text")
EOT = 50256
failures = []
checks = 0


def check(cond, label, detail=""):
    global checks
    checks += 1
    if cond:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}")
        print(f"FAIL {label}: {detail}")


def run(args, stdin=None, preexec=None, timeout=300):
    p = subprocess.run([CTRAIN, *args], input=stdin, capture_output=True, timeout=timeout,
                       preexec_fn=preexec)
    return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")


def prepare(out, *inputs, extra=(), cache=None, stdin=None, preexec=None):
    args = ["prepare", "--tokenizer", TOK, "--out", out, "--quiet"]
    args += ["--cache", cache] if cache else ["--no-cache"]
    return run(args + list(extra) + list(inputs), stdin=stdin, preexec=preexec)


def read_shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    assert magic == 20240520, path
    size = 2 if version == 1 else 4
    assert len(raw) == 1024 + n * size, f"{path}: size does not match the header"
    return list(struct.unpack(f"<{n}{'H' if size == 2 else 'I'}", raw[1024:]))


def shards(out, split):
    names = sorted(f for f in os.listdir(out) if f.startswith(split + "_") and f.endswith(".bin"))
    return names, [t for n in names for t in read_shard(os.path.join(out, n))]


def tokenize(text):
    p = subprocess.run([CTRAIN, "tokenize", "--tokenizer", TOK], input=text.encode(),
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    return [int(x) for x in p.stdout.split()]


def expected(docs):
    out = []
    for d in docs:
        out += [EOT] + tokenize(d)
    return out


def listing(d):
    return sorted(os.listdir(d)) if os.path.isdir(d) else None


def expect_fail(label, rc, out, must, out_dir=None, before=None):
    problems = []
    if rc != 2:
        problems.append(f"exit status {rc}, expected 2")
    for s in must:
        if s not in out:
            problems.append(f"message lacks {s!r}")
    if out_dir is not None and listing(out_dir) != before:
        problems.append(f"{out_dir} changed: {before} -> {listing(out_dir)}")
    err = [line for line in out.splitlines() if "error" in line] or [out.strip()]
    check(not problems, f"{label}: {err[0][:150]}", "; ".join(problems) + f"\n    {out[:400]}")


def main():
    if not os.path.isfile(os.path.join(TOK, "vocab.bpe")) or not os.path.isdir(BROWN):
        print(f"missing {TOK} or {BROWN}: run scripts/bootstrap.sh (it runs "
              "scripts/fetch_data.sh)")
        return 1
    tmp = tempfile.mkdtemp(prefix="ctrain_prepare_")
    try:
        tests(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"test_prepare: {checks} checks, {len(failures)} failed")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


def write(path, data, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(data)


def tests(tmp):
    docs = ["Hello world.\n", "It's 2024; the café’s menu costs $12.50 — 3 items.\n",
            "def f(x):\n    return x  # tabs\tand  spaces  \n", "日本語のテキスト 🙂\n"]
    src = os.path.join(tmp, "src")
    for i, d in enumerate(docs):
        write(os.path.join(src, f"d{i}.txt"), d)
    write(os.path.join(src, ".hidden.txt"), "never read")
    want = expected(docs)

    # a directory: one document per file, in path order, <|endoftext|> first
    out = os.path.join(tmp, "o1")
    rc, msg = prepare(out, src)
    names, toks = shards(out, "train")
    check(rc == 0 and names == ["train_000000.bin"] and toks == want,
          "directory: tokens equal ctrain tokenize per document", f"rc={rc} {msg[:300]}")
    man = json.load(open(os.path.join(out, "manifest.json")))
    check(len(man["sources"]) == 4 and man["totals"]["documents"] == 4 and
          man["totals"]["tokens"] == len(want) and
          sum(s["tokens"] for s in man["sources"]) == len(want) and
          all(len(s["xxh3_128"]) == 32 for s in man["sources"]) and
          man["tokenizer"]["identity"].startswith("gpt2-bpe:") and
          [{k: v for k, v in e.items() if k in ("file", "split", "tokens", "version")}
           for e in man["shards"]] == [{"file": "train_000000.bin", "split": "train",
                                        "tokens": len(want), "version": 1}] and
          # what a remote reader checks: the size, a hash of the file and of each block
          man["shards"][0]["bytes"] == 1024 + 2 * len(want) and
          len(man["shards"][0]["xxh3_128"]) == 32 and man["shards"][0]["block_bytes"] == 1 << 20
          and len(man["shards"][0]["blocks"]) == 1,
          "manifest records sources, hashes, counts, shards, tokenizer", json.dumps(man)[:500])
    check(not [f for f in os.listdir(out) if f.startswith(".staging")],
          "no staging directory is left behind")

    # the same content gives the same manifest; a change changes that hash
    out_b = os.path.join(tmp, "o1b")
    prepare(out_b, src)
    check(open(os.path.join(out, "manifest.json")).read().replace(out, "") ==
          open(os.path.join(out_b, "manifest.json")).read().replace(out_b, ""),
          "manifest is reproducible")

    # files, a glob and stdin, in the order given
    out = os.path.join(tmp, "o2")
    rc, msg = prepare(out, os.path.join(src, "d1.txt"), os.path.join(src, "d[23].txt"), "-",
                      stdin=docs[0].encode())
    check(rc == 0 and shards(out, "train")[1] == expected([docs[1], docs[2], docs[3], docs[0]]),
          "file, glob and stdin inputs in order", msg[:300])

    # separators split text files into documents; empty pieces are dropped
    out = os.path.join(tmp, "o3")
    rc, msg = prepare(out, "-", extra=["--separator", "\\n\\n"],
                      stdin=b"first para\n\nsecond para\n\n\n\nthird")
    check(rc == 0 and shards(out, "train")[1] ==
          expected(["first para", "second para", "third"]),
          "--separator splits documents", msg[:300])

    # JSONL: the chosen field, blank lines ignored
    jl = os.path.join(tmp, "in.jsonl")
    write(jl, json.dumps({"body": "alpha beta", "id": 1}) + "\n\n" +
          json.dumps({"body": "gamma\ndelta ☃"}) + "\n")
    out = os.path.join(tmp, "o4")
    rc, msg = prepare(out, jl, extra=["--field", "body"])
    check(rc == 0 and shards(out, "train")[1] == expected(["alpha beta", "gamma\ndelta ☃"]),
          "JSONL field chosen by --field", msg[:300])

    # JSONL bad lines: fail names them all; skip leaves them out
    bad = os.path.join(tmp, "bad.jsonl")
    write(bad, '{"text": "good one"}\n{"text": 5}\nnot json\n{"other": "x"}\n'
          '{"text": "good two"}\n[1,2]\n')
    out = os.path.join(tmp, "o5")
    rc, msg = prepare(out, bad)
    expect_fail("JSONL bad lines fail with count and line numbers", rc, msg,
                [bad, "4 bad JSONL lines", "line 2:", "line 3: not valid JSON",
                 "line 4: no field \"text\"", "line 6: not a JSON object", "--bad-lines skip"],
                out, None)
    rc, msg = prepare(out, bad, extra=["--bad-lines", "skip"])
    check(rc == 0 and shards(out, "train")[1] == expected(["good one", "good two"]) and
          "skipped 4 bad lines" in msg and f"{bad}:3: skipped" in msg,
          "--bad-lines skip leaves them out and says which", msg[:400])

    # validation split: whole leading documents, at least N tokens
    out = os.path.join(tmp, "o6")
    n0 = len(expected(docs[:1]))
    rc, msg = prepare(out, src, extra=["--val-tokens", str(n0 + 1)])
    _, val = shards(out, "val")
    _, train = shards(out, "train")
    check(rc == 0 and val == expected(docs[:2]) and train == expected(docs[2:]),
          "--val-tokens takes whole leading documents", msg[:300])
    rc, msg = prepare(os.path.join(tmp, "o6b"), BROWN, extra=["--val-fraction", "0.1"])
    man = json.load(open(os.path.join(tmp, "o6b", "manifest.json")))
    vd = man["totals"]["val_documents"]
    check(rc == 0 and 25 <= vd <= 80, "--val-fraction 0.1 picks about 10% of 500 documents",
          f"{vd} {msg[:200]}")
    brown_tokens = man["totals"]["tokens"]
    # one document: the hash puts it whole into train, and prepare says there is no val split
    one = os.path.join(tmp, "one_doc.txt")
    write(one, "The jury said it did find that the city had no evidence. " * 40)
    rc, msg = prepare(os.path.join(tmp, "o6c"), one, extra=["--val-fraction", "0.1"])
    check(rc == 0 and not glob.glob(os.path.join(tmp, "o6c", "val_*.bin")) and "warning" in msg and
          "--val-fraction 0.1" in msg and "no val shard" in msg and "1 document" in msg,
          "--val-fraction on one document: no val split, and a warning that says so", msg[-400:])

    # shard size limit: same stream, cut into shards of at most N tokens
    out = os.path.join(tmp, "o7")
    rc, msg = prepare(out, src, extra=["--shard-tokens", "20"])
    names, toks = shards(out, "train")
    sizes = [len(read_shard(os.path.join(out, n))) for n in names]
    check(rc == 0 and toks == want and len(names) == (len(want) + 19) // 20 and
          all(s == 20 for s in sizes[:-1]), "--shard-tokens cuts the stream", f"{sizes} {msg}")

    # threads do not change the output
    o8a, o8b = os.path.join(tmp, "o8a"), os.path.join(tmp, "o8b")
    prepare(o8a, BROWN, extra=["--threads", "1"])
    prepare(o8b, BROWN, extra=["--threads", "2"])
    same = all(open(os.path.join(o8a, f), "rb").read() == open(os.path.join(o8b, f), "rb").read()
               for f in os.listdir(o8a))
    check(same and sorted(os.listdir(o8a)) == sorted(os.listdir(o8b)),
          "1 and 2 threads write identical shards")
    check(shards(o8a, "train")[1][:len(expected([open(os.path.join(BROWN, "ca01.txt")).read()]))]
          == expected([open(os.path.join(BROWN, "ca01.txt")).read()]),
          "Brown corpus: first document tokenised as by ctrain tokenize")

    # the cache: a second run tokenises nothing and writes the same shards
    cache = os.path.join(tmp, "cache")
    c1, c2 = os.path.join(tmp, "c1"), os.path.join(tmp, "c2")
    rc1, m1 = prepare(c1, BROWN, cache=cache)
    rc2, m2 = prepare(c2, BROWN, cache=cache)
    same = all(open(os.path.join(c1, f), "rb").read() == open(os.path.join(c2, f), "rb").read()
               for f in os.listdir(c1) if f.endswith(".bin"))
    check(rc1 == 0 and "tokenised 500 documents" in m1, "first cached run tokenises all", m1)
    check(rc2 == 0 and "tokenised 0 documents" in m2 and same,
          "second run over unchanged input tokenises nothing, same shards", m2)
    # one edited document re-tokenises only its chunk
    edit = os.path.join(tmp, "brown_edit")
    shutil.copytree(BROWN, edit)
    with open(os.path.join(edit, "cg22.txt"), "a") as f:
        f.write("An added sentence.\n")
    rc3, m3 = prepare(os.path.join(tmp, "c3"), edit, cache=cache)
    import re
    k = re.search(r"tokenised (\d+) documents", m3)
    check(rc3 == 0 and k and 1 <= int(k.group(1)) < 100,
          "an edit re-tokenises only the edited chunk", m3)
    # eviction keeps the disk tier within its limit
    small = os.path.join(tmp, "cache_small")
    limit = 300 * 1024
    rc4, m4 = prepare(os.path.join(tmp, "c4"), BROWN, cache=small,
                      extra=["--cache-limit", "300KB"])
    used = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(small) for f in fs)
    check(rc4 == 0 and 0 < used <= limit and "evict" in m4,
          f"disk cache stays within --cache-limit ({used} <= {limit} bytes)", m4)

    # ---- bad input: exit 2, named, the output directory unchanged
    outs = os.path.join(tmp, "keep")
    prepare(outs, src)
    before = listing(outs)
    rc, msg = prepare(outs, src)
    expect_fail("--out already holds shards", rc, msg, [outs, "--overwrite"], outs, before)
    missing = os.path.join(tmp, "nope.txt")
    rc, msg = prepare(outs, missing, extra=["--overwrite"])
    expect_fail("missing input", rc, msg, [missing, "No such file"], outs, before)
    empty = os.path.join(tmp, "empty.txt")
    write(empty, "")
    rc, msg = prepare(outs, empty, extra=["--overwrite"])
    expect_fail("empty input file", rc, msg, [empty, "empty input"], outs, before)
    rc, msg = prepare(outs, "-", extra=["--overwrite"], stdin=b"")
    expect_fail("empty stdin", rc, msg, ["<stdin>", "empty input"], outs, before)
    rc, msg = prepare(outs, os.path.join(tmp, "*.nomatch"), extra=["--overwrite"])
    expect_fail("glob matching nothing", rc, msg, ["*.nomatch", "no files match"], outs, before)
    badutf = os.path.join(tmp, "latin1.txt")
    write(badutf, b"line one\nline two caf\xe9 au lait\n", "wb")
    rc, msg = prepare(outs, src, badutf, extra=["--overwrite"])
    expect_fail("invalid UTF-8 names file, offset and line", rc, msg,
                [badutf, "invalid UTF-8 at byte offset 21 (line 2)", "--lossy"], outs, before)
    rc, msg = prepare(os.path.join(tmp, "lossy"), badutf, extra=["--lossy"])
    check(rc == 0, "--lossy encodes invalid UTF-8", msg[:200])
    rc, msg = prepare(outs, src, extra=["--overwrite", "--val-tokens", "10", "--val-fraction",
                                        "0.5"])
    expect_fail("two validation options", rc, msg, ["--val-tokens", "--val-fraction"], outs,
                before)
    rc, msg = prepare(outs, src, extra=["--overwrite", "--val-tokens", "100000"])
    expect_fail("validation takes everything", rc, msg, ["validation split"], outs, before)
    rc, msg = run(["prepare", "--tokenizer", os.path.join(tmp, "notok"), "--out", outs,
                   "--overwrite", src])
    expect_fail("missing tokenizer", rc, msg, ["notok"], outs, before)
    badtok = os.path.join(tmp, "badtok")
    os.makedirs(badtok)
    write(os.path.join(badtok, "encoder.json"), '{"a": 0, "b": ')
    shutil.copy(os.path.join(TOK, "vocab.bpe"), badtok)
    rc, msg = run(["prepare", "--tokenizer", badtok, "--out", outs, "--overwrite", src])
    expect_fail("malformed tokenizer file", rc, msg, ["encoder.json"], outs, before)
    rc, msg = run(["prepare", "--tokenizer", TOK, "--out", outs, "--bogus", src])
    expect_fail("unknown option", rc, msg, ["--bogus"], outs, before)
    rc, msg = run(["prepare", "--tokenizer", TOK, "--out", outs, "--shard-tokens", "0", src])
    expect_fail("bad --shard-tokens", rc, msg, ["--shard-tokens"], outs, before)

    # a full disk (file size limit): exit 2, the earlier shards survive intact
    keep_bytes = {f: open(os.path.join(outs, f), "rb").read() for f in before}

    def limit_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
    rc, msg = prepare(outs, BROWN, extra=["--overwrite"], preexec=limit_files)
    expect_fail("disk full while writing shards", rc, msg, ["File too large"], outs, before)
    check(all(open(os.path.join(outs, f), "rb").read() == b for f, b in keep_bytes.items()),
          "the previous shards are intact after the failed run")

    # killed once shards are complete in staging: none appears in --out
    big = os.path.join(tmp, "big")
    os.makedirs(big)
    for r in range(4):
        for f in sorted(os.listdir(BROWN)):
            shutil.copy(os.path.join(BROWN, f), os.path.join(big, f"{r}_{f}"))
    kout = os.path.join(tmp, "killed")
    p = subprocess.Popen([CTRAIN, "prepare", "--tokenizer", TOK, "--out", kout, "--no-cache",
                          "--quiet", "--threads", "1", "--shard-tokens", "20000", big],
                         stderr=subprocess.DEVNULL)
    staged, deadline = [], time.time() + 60
    while p.poll() is None and time.time() < deadline and len(staged) < 2:
        stages = [d for d in (listing(kout) or []) if d.startswith(".staging")]
        staged = [f for d in stages for f in (listing(os.path.join(kout, d)) or [])
                  if f.endswith(".bin")]
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    visible = [f for f in (listing(kout) or []) if not f.startswith(".staging")]
    check(len(staged) >= 2 and visible == [],
          "a prepare killed with complete shards in staging leaves --out without shards",
          f"staged {staged}, visible {visible}")
    rc, msg = prepare(kout, src)
    check(rc == 0 and not [f for f in os.listdir(kout) if f.startswith(".staging")],
          "the next run removes the killed run's staging directory", str(listing(kout)))
    print(f"(Brown corpus: {brown_tokens} tokens)")
    llama_tests(tmp, src, docs)


def llama_tests(tmp, src, docs):
    """prepare and tokenize with LLaMA's SentencePiece-BPE tokenizer."""
    present = os.path.isfile(os.path.join(LLAMA, "tokenizer.json"))
    check(present, "LLaMA tokenizer present", f"{LLAMA} is missing: run scripts/fetch_data.sh")
    if not present:
        return
    ids = {}
    for d in docs:
        p = subprocess.run([CTRAIN, "tokenize", "--tokenizer", LLAMA], input=d.encode(),
                           capture_output=True, timeout=120)
        ids[d] = [int(x) for x in p.stdout.split()] if p.returncode == 0 else None
    check(ids["Hello world.\n"] == [15043, 3186, 29889, 13], "tokenize with LLaMA's tokenizer",
          str(ids["Hello world.\n"]))
    p = subprocess.run([CTRAIN, "tokenize", "--tokenizer", LLAMA, "--bos"], input=b"Hello world.\n",
                       capture_output=True, timeout=120)
    check(p.returncode == 0 and p.stdout.split() == [b"1", b"15043", b"3186", b"29889", b"13"],
          "tokenize --bos puts <s> first", p.stdout.decode()[:100] + p.stderr.decode()[:200])
    out = os.path.join(tmp, "llama")
    rc, msg = run(["prepare", "--tokenizer", LLAMA, "--out", out, "--quiet", "--no-cache", src])
    want = [t for d in docs for t in [1] + (ids[d] or [])]
    names, toks = shards(out, "train") if rc == 0 else ([], [])
    check(rc == 0 and names == ["train_000000.bin"] and toks == want,
          "prepare with LLaMA's tokenizer: <s> and the tokenize ids per document", f"rc={rc} {msg[:300]}")
    if rc == 0:
        man = json.load(open(os.path.join(out, "manifest.json")))
        tk = man["tokenizer"]
        check(tk["kind"] == "spm-bpe" and tk["identity"].startswith("spm-bpe:") and tk["vocab_size"] == 32000
              and tk["bos"] == 1 and tk["eot"] == 2 and tk["document_token"] == 1 and
              all(s["version"] == 1 for s in man["shards"]),
              "manifest: SentencePiece tokenizer, BOS as the document token, uint16 shards", json.dumps(tk))

    # a tokenizer.json of a kind not supported: exit 2, the file and the key named
    for kind, key in (("WordPiece", "model.type"), ("Unigram", "model.type")):
        bad = os.path.join(tmp, "tok_" + kind)
        write(os.path.join(bad, "tokenizer.json"),
              json.dumps({"model": {"type": kind, "vocab": {"a": 0}}, "normalizer": None}))
        p = subprocess.run([CTRAIN, "tokenize", "--tokenizer", bad], input=b"a", capture_output=True,
                           timeout=60)
        expect_fail(f"tokenize refuses a {kind} tokenizer.json", p.returncode,
                    (p.stdout + p.stderr).decode(), [os.path.join(bad, "tokenizer.json"), key, "supported"])
        outb = os.path.join(tmp, "out_" + kind)
        rc, msg = run(["prepare", "--tokenizer", bad, "--out", outb, "--quiet", "--no-cache", src])
        expect_fail(f"prepare refuses a {kind} tokenizer.json", rc, msg,
                    [os.path.join(bad, "tokenizer.json"), key], outb, None)
    with open(os.path.join(LLAMA, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tj["normalizer"]["normalizers"].append({"type": "Lowercase"})
    bad = os.path.join(tmp, "tok_lowercase")
    write(os.path.join(bad, "tokenizer.json"), json.dumps(tj))
    p = subprocess.run([CTRAIN, "tokenize", "--tokenizer", bad], input=b"a", capture_output=True, timeout=60)
    expect_fail("tokenize refuses an unknown normalizer", p.returncode, (p.stdout + p.stderr).decode(),
                [os.path.join(bad, "tokenizer.json"), "normalizer.normalizers[2].type", "Lowercase"])
    tj["normalizer"]["normalizers"][2] = {"type": "NFKC"}
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "UnicodeScripts"}]}
    bad = os.path.join(tmp, "tok_scripts")
    write(os.path.join(bad, "tokenizer.json"), json.dumps(tj))
    outb = os.path.join(tmp, "out_scripts")
    rc, msg = run(["prepare", "--tokenizer", bad, "--out", outb, "--quiet", "--no-cache", src])
    expect_fail("prepare refuses an unknown pre-tokenizer", rc, msg,
                [os.path.join(bad, "tokenizer.json"), "pre_tokenizer.pretokenizers[0].type", "UnicodeScripts"],
                outb, None)


if __name__ == "__main__":
    sys.exit(main())
