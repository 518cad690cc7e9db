#!/usr/bin/env python3
"""Hostile and damaged files through the real program (findings of a fuzzing campaign):

- tokenizer files: an empty-string token, a merge listed twice and a stray token id of
  16,000,000 in GPT-2's encoder.json + vocab.bpe, in a GPT-2 tokenizer.json and in LLaMA's
  tokenizer.json: `ctrain tokenize` and `ctrain prepare` exit 2 naming the file and the
  token, merge or id.
- the tokenised-data cache: an entry whose checksum verifies but which holds a token id outside
  the vocabulary (or a structure that is not the chunk's) is refused with a warning, the text
  is tokenised again, the shard gets the right tokens, and the entry is replaced.
- `*.tmp.<pid>` files a SIGKILL left in run.dir (config.yaml, metrics.jsonl): `ctrain train`
  removes those of dead pids at start, and keeps a live pid's (this test's) and other names.
- a malformed hw.json in a run directory: `ctrain report` warns naming it and leaves the
  hardware section out (the page does not show the damaged text).

usage: test_hostile_files.py path/to/ctrain
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOK = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA = os.path.join(ROOT, "data", "llama-tokenizer")
EOT = 50256
failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    print(("ok   " if ok else "FAIL ") + label + ("" if ok else ": " + str(detail)[:800]), flush=True)
    if not ok:
        failures.append(label)
    return ok


def run(*args, stdin=None, timeout=300):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([CTRAIN, *args], input=stdin, capture_output=True, timeout=timeout, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w", encoding=None if isinstance(data, bytes)
              else "utf-8") as f:
        f.write(data)


def read_shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    magic, version, n = struct.unpack("<3i", raw[:12])
    size = 2 if version == 1 else 4
    return list(struct.unpack(f"<{n}{'H' if size == 2 else 'I'}", raw[1024:1024 + n * size]))


# ---------------------------------------------------------------- XXH64 (the cache's checksum)

M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M64, 31) * P1) & M64


def xxh64(data, seed=0):
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for k in range(4):
            h = ((h ^ _round(0, v[k])) * P1 + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h = ((_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1) + P4) & M64
        i += 8
    if i + 4 <= n:
        h = ((_rotl(h ^ ((struct.unpack_from("<I", data, i)[0] * P1) & M64), 23) * P2) + P3) & M64
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * P5) & M64), 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


# ---------------------------------------------------------------- tokenizer files

def expect_refused(label, tokdir, needles):
    """tokenize and prepare both exit 2 with every needle in the message."""
    src = os.path.join(os.path.dirname(tokdir), "text.txt")
    write(src, "hello world\n")
    for cmd in (["tokenize", "--tokenizer", tokdir],
                ["prepare", "--tokenizer", tokdir, "--out", tokdir + "_out", "--quiet", "--no-cache", src]):
        rc, out, err = run(*cmd, stdin=b"hello world\n")
        check(f"{label}: {cmd[0]} exits 2 naming it", rc == 2 and all(n in err for n in needles),
              f"rc {rc}: {err.strip()[:500]}")
    check(f"{label}: prepare wrote nothing", not os.path.exists(tokdir + "_out"))


def tokenizer_files(tmp):
    with open(os.path.join(TOK, "encoder.json"), encoding="utf-8") as f:
        enc = json.load(f)
    with open(os.path.join(TOK, "vocab.bpe"), encoding="utf-8") as f:
        bpe = f.read()
    merges = [ln for ln in bpe.split("\n")[1:] if ln]

    def gpt2_dir(name, e, b):
        d = os.path.join(tmp, name)
        write(os.path.join(d, "encoder.json"), json.dumps(e))
        write(os.path.join(d, "vocab.bpe"), b)
        return d

    d = gpt2_dir("g_ok", enc, bpe)
    rc, out, err = run("tokenize", "--tokenizer", d, stdin=b"hello world")
    check("a copy of GPT-2's files still loads", rc == 0 and out.split() == ["31373", "995"], err[:300])

    d = gpt2_dir("g_empty", dict(enc, **{"": 50257}), bpe)
    expect_refused("encoder.json with an empty-string token", d,
                   [os.path.join(d, "encoder.json"), 'token "" (id 50257) is the empty string'])
    # merge 3 ("i n") again as the last line
    d = gpt2_dir("g_dup", enc, bpe.rstrip("\n") + "\n" + merges[2] + "\n")
    a, b = merges[2].split(" ")
    expect_refused("vocab.bpe with a merge listed twice", d,
                   [os.path.join(d, "vocab.bpe") + ":%d" % (len(merges) + 2),
                    'merge "%s" "%s" is listed twice (first at line 4)' % (a, b)])
    huge = dict(enc)
    huge["\u0120zzzzqq"] = 16000000
    d = gpt2_dir("g_huge", huge, bpe)
    expect_refused("encoder.json with a token id of 16,000,000", d,
                   [os.path.join(d, "encoder.json"), "has id 16000000", "50258 tokens"])

    # the same as a GPT-2 tokenizer.json
    def hf(name, vocab, merge_list, added=()):
        d = os.path.join(tmp, name)
        j = {"version": "1.0", "normalizer": None,
             "added_tokens": [{"id": EOT, "content": "<|endoftext|>", "special": True}, *added],
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
             "model": {"type": "BPE", "vocab": vocab, "merges": merge_list}}
        write(os.path.join(d, "tokenizer.json"), json.dumps(j))
        return d

    d = hf("hf_ok", enc, merges)
    rc, out, err = run("tokenize", "--tokenizer", d, stdin=b"hello world")
    check("GPT-2 as tokenizer.json loads", rc == 0 and out.split() == ["31373", "995"], err[:300])
    d = hf("hf_empty", dict(enc, **{"": 50257}), merges)
    expect_refused("tokenizer.json with an empty-string token", d,
                   [os.path.join(d, "tokenizer.json"), 'model.vocab: token "" (id 50257) is the empty string'])
    d = hf("hf_dup", enc, merges + [merges[2]])
    expect_refused("tokenizer.json with a merge listed twice", d,
                   [os.path.join(d, "tokenizer.json"), "model.merges[%d]" % len(merges),
                    "is listed twice (first at model.merges[2])"])
    d = hf("hf_huge", enc, merges, [{"id": 16000000, "content": "<|pad|>", "special": True}])
    expect_refused("tokenizer.json with an added token of id 16,000,000", d,
                   [os.path.join(d, "tokenizer.json"), 'token "<|pad|>" has id 16000000'])

    # LLaMA's (SentencePiece-style) tokenizer.json
    lpath = os.path.join(LLAMA, "tokenizer.json")
    if not os.path.isfile(lpath):
        print("skip LLaMA cases: %s is missing (scripts/fetch_data.sh fetches it)" % lpath)
        return
    with open(lpath, encoding="utf-8") as f:
        base = f.read()

    def llama(name, edit):
        j = json.loads(base)
        edit(j)
        d = os.path.join(tmp, name)
        write(os.path.join(d, "tokenizer.json"), json.dumps(j))
        return d

    d = llama("l_empty", lambda j: j["model"]["vocab"].__setitem__("", 32000))
    expect_refused("LLaMA tokenizer.json with an empty-string token", d,
                   [os.path.join(d, "tokenizer.json"), 'model.vocab: token "" (id 32000) is the empty string'])
    j0 = json.loads(base)
    n_merges = len(j0["model"]["merges"])
    d = llama("l_dup", lambda j: j["model"]["merges"].append(j["model"]["merges"][5]))
    expect_refused("LLaMA tokenizer.json with a merge listed twice", d,
                   [os.path.join(d, "tokenizer.json"), "model.merges[%d]" % n_merges,
                    "is listed twice (first at model.merges[5])"])
    d = llama("l_huge", lambda j: j["model"]["vocab"].__setitem__("\u2581zzzzqq", 16000000))
    expect_refused("LLaMA tokenizer.json with a token id of 16,000,000", d,
                   [os.path.join(d, "tokenizer.json"), "has id 16000000"])


# ---------------------------------------------------------------- the cache

def cache_entries(cache):
    out = []
    for fan in sorted(os.listdir(cache)):
        sub = os.path.join(cache, fan)
        if len(fan) == 2 and os.path.isdir(sub):
            out += [os.path.join(sub, f) for f in sorted(os.listdir(sub)) if f.endswith(".tok")]
    return out


def entry_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack_from("<q", raw, 8)[0]
    return list(struct.unpack_from("<%di" % n, raw, 40)), raw


def forge(path, ids):
    _, raw = entry_tokens(path)
    payload = struct.pack("<%di" % len(ids), *ids)
    with open(path, "wb") as f:
        f.write(raw[:16] + struct.pack("<Q", xxh64(payload)) + raw[24:40] + payload)


def cache(tmp):
    src = os.path.join(tmp, "cache_src.txt")
    write(src, "The quick brown fox jumps over the lazy dog.\n")
    cdir = os.path.join(tmp, "cache")
    out = os.path.join(tmp, "cache_out")

    def prepare():
        return run("prepare", "--tokenizer", TOK, "--out", out, "--overwrite", "--cache", cdir, src)

    rc, _, err = prepare()
    want = read_shard(os.path.join(out, "train_000000.bin")) if rc == 0 else []
    check("prepare with a cache", rc == 0 and want[:1] == [EOT], err[:300])
    entries = cache_entries(cdir)
    if not check("one cache entry", len(entries) == 1, str(entries)):
        return
    ids, raw = entry_tokens(entries[0])
    if not check("this test's XXH64 matches the entry's checksum",
                 struct.unpack_from("<Q", raw, 16)[0] == xxh64(raw[40:]), ""):
        return
    for label, bad in [("id 60000 (past the vocabulary)", 60000), ("id -1", -1),
                       ("id 16,000,000", 16000000)]:
        forged = list(ids)
        forged[3] = bad
        forge(entries[0], forged)
        rc, _, err = prepare()
        got = read_shard(os.path.join(out, "train_000000.bin")) if rc == 0 else []
        check(f"cache entry with {label}: exit 0, the shard holds the tokenizer's ids",
              rc == 0 and got == want and max(got) < 50257, f"rc {rc}; {got[:12]} vs {want[:12]}: {err[:300]}")
        check(f"cache entry with {label}: a warning naming the entry and the id",
              "cache: the entry" in err and "was refused" in err and
              f"token id {bad} at position 3 is not in the vocabulary (ids 0..50256)" in err and src in err,
              err[:500])
        check(f"cache entry with {label}: replaced by the right tokens",
              entry_tokens(entries[0])[0] == ids, str(entry_tokens(entries[0])[0][:8]))
    # a valid id in the wrong place: the chunk's document token missing
    forged = list(ids)
    forged[0] = ids[1]
    forge(entries[0], forged)
    rc, _, err = prepare()
    got = read_shard(os.path.join(out, "train_000000.bin")) if rc == 0 else []
    check("cache entry without its document token: refused, the right shard", rc == 0 and got == want and
          "0 document starts (id 50256), not one at the start, expected 1 documents" in err, err[:400])
    rc, outp, err = prepare()
    check("then served from the cache again, nothing warned",
          rc == 0 and "refused" not in err and "tokenised 0 documents" in outp + err, (outp + err)[:400])


# ---------------------------------------------------------------- stale temp files

def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def stale_tmp(tmp):
    shard = os.path.join(tmp, "train.bin")
    rc, _, err = run("synth", "--out", shard, "--tokens", "20000", "--vocab", "64")
    if not check("synth shard", rc == 0, err[:300]):
        return
    rd = os.path.join(tmp, "run")
    os.makedirs(rd)
    dead = dead_pid()
    gone = ["config.yaml.tmp.%d" % dead, "metrics.jsonl.tmp.%d" % dead]
    kept = ["metrics.jsonl.tmp.%d" % os.getpid(),    # a live writer's
            "config.yaml.tmp.%dx" % dead, "notes.tmp", "keep.tmp.0"]
    for n in gone + kept:
        write(os.path.join(rd, n), "partial")
    common = ["model.preset=gpt2-tiny", f"data.train={shard}", "train.steps=2", "train.batch_size=2",
              "train.seq_len=8", "run.threads=1", f"run.dir={rd}"]
    rc, out, err = run("train", *common)
    check("train into a run.dir holding temp files", rc == 0, (out + err)[-400:])
    left = os.listdir(rd)
    check("dead writers' *.tmp.<pid> files are removed", not [n for n in gone if n in left], str(sorted(left)))
    check("a live pid's temp file and other names are kept", all(n in left for n in kept), str(sorted(left)))
    check("the removal is logged", "removed 2 temp files left by an interrupted write" in out + err,
          (out + err)[:600])
    # a later run (resuming) after another killed writer's leftover
    dead = dead_pid()
    write(os.path.join(rd, "metrics.jsonl.tmp.%d" % dead), "partial")
    rc, out, err = run("train", *[c for c in common if not c.startswith("train.steps")], "train.steps=3",
                       "train.resume=auto", "run.checkpoint_every=1")
    check("a second run removes a new leftover", rc == 0 and "metrics.jsonl.tmp.%d" % dead not in os.listdir(rd)
          and "metrics.jsonl.tmp.%d" % os.getpid() in os.listdir(rd), (out + err)[-400:])


# ---------------------------------------------------------------- hw.json

def report_hw(tmp):
    rd = os.path.join(tmp, "report_run")
    write(os.path.join(rd, "metrics.jsonl"),
          '{"step": 1, "split": "train", "loss": 3.0, "lr": 0.001}\n'
          '{"step": 2, "split": "train", "loss": 2.5, "lr": 0.001}\n')
    hw = os.path.join(rd, "hw.json")
    for label, text, why in [("truncated", '{"cpu_model": "Evil <CPU>", "ram_bytes": 12', "not valid JSON"),
                             ("an array", '["Evil <CPU>"]', "found another JSON value"),
                             ("trailing garbage", '{"cpu_model": "Evil <CPU>"} trailing', "found more after"),
                             ("binary", b"\x00\xff\xfe{", "not valid JSON"),
                             ("an object, a NUL, more", b'{"cpu_model": "Evil <CPU>"}\x00{"x": 1}',
                              "found more after byte offset 27")]:
        write(hw, text)
        rc, out, err = run("report", rd, "--out", os.path.join(rd, "r.html"))
        page = open(os.path.join(rd, "r.html"), encoding="utf-8").read() if rc == 0 else ""
        check(f"hw.json {label}: report exits 0 with a warning naming the file",
              rc == 0 and hw in err and why in err and "hardware section out" in err, f"rc {rc}: {err[:400]}")
        check(f"hw.json {label}: no hardware table and no damaged text on the page",
              'class="hw"' not in page and "Evil" not in page and "hw.json is damaged" in page, page[-800:])
    write(hw, '{"cpu_model": "Good CPU"}\n')
    rc, out, err = run("report", rd, "--out", os.path.join(rd, "r.html"))
    page = open(os.path.join(rd, "r.html"), encoding="utf-8").read() if rc == 0 else ""
    check("a good hw.json: its table, no warning", rc == 0 and "<td>Good CPU</td>" in page and "hw.json" not in err,
          err[:300])


def main():
    if not os.path.isfile(os.path.join(TOK, "vocab.bpe")):
        print(f"missing {TOK}: run scripts/fetch_data.sh")
        return 1
    tmp = tempfile.mkdtemp(prefix="ctrain_hostile_")
    try:
        tokenizer_files(tmp)
        cache(tmp)
        stale_tmp(tmp)
        report_hw(tmp)
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"test_hostile_files: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
