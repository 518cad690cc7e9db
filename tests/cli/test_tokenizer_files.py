#!/usr/bin/env python3
"""Which files a --tokenizer path names, and the identity prepare records.

usage: /usr/bin/python3 tests/cli/test_tokenizer_files.py path/to/ctrain

Checks:
  - Hugging Face's vocab.json + merges.txt (made here from GPT-2's encoder.json and vocab.bpe,
    which hold the same formats) load and encode exactly as encoder.json + vocab.bpe do, with
    and without special tokens, and prepare records the same identity for both;
  - --tokenizer DIR/encoder.json (or merges.txt, vocab.json) means DIR;
  - a JSON file that is no tokenizer.json names the file and says to give the directory;
    vocab.json without merges.txt names merges.txt (exit 2 both times);
  - prepare's manifest.json records the tokenizer: identity, kind, vocabulary size, the path
    as given and resolved, and the files read; LLaMA's tokenizer gets another identity.
Needs data/gpt2-tokenizer, data/llama-tokenizer and data/brown/text (scripts/fetch_data.sh).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA = os.path.join(ROOT, "data", "llama-tokenizer")
failures = 0


def check(ok, what, detail=""):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok else " " + str(detail)[-1500:]))
    if not ok:
        failures += 1


def run(*args, stdin=None):
    p = subprocess.run([CTRAIN, *args], capture_output=True, timeout=120,
                       input=stdin.encode() if isinstance(stdin, str) else stdin)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def ids(tok, text, *flags):
    rc, out, err = run("tokenize", "--tokenizer", tok, *flags, stdin=text)
    return out.split() if rc == 0 else "exit %d: %s" % (rc, err.strip())


def manifest(d):
    with open(os.path.join(d, "manifest.json")) as f:
        return json.load(f)["tokenizer"]


def main():
    brown = sorted(glob.glob(os.path.join(ROOT, "data", "brown", "text", "*")))
    if not os.path.exists(os.path.join(GPT2, "vocab.bpe")) or not os.path.isdir(LLAMA) or not brown:
        print("FAIL: reference data missing: run scripts/fetch_data.sh")
        return 1
    tmp = tempfile.mkdtemp(prefix="ct_tok_files_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        hf = P("hf-gpt2")
        os.makedirs(hf)
        shutil.copy(os.path.join(GPT2, "encoder.json"), os.path.join(hf, "vocab.json"))
        shutil.copy(os.path.join(GPT2, "vocab.bpe"), os.path.join(hf, "merges.txt"))

        # the same ids from either pair of files
        text = "".join(open(f, encoding="utf-8").read() for f in brown[:5])
        text += " Héllo wörld — 你好 🙂 <|endoftext|> tabs\tand\n\nnewlines  "
        want = ids(GPT2, text)
        got = ids(hf, text)
        check(isinstance(want, list) and len(want) > 1000 and got == want,
              "vocab.json + merges.txt encode as encoder.json + vocab.bpe (%s ids)" %
              (len(want) if isinstance(want, list) else "?"), got if isinstance(got, str) else "")
        want_sp = ids(GPT2, text, "--allow-special")
        check(ids(hf, text, "--allow-special") == want_sp and "50256" in want_sp,
              "... and with --allow-special (<|endoftext|> is 50256 in both)")
        rc, dec, err = run("tokenize", "--tokenizer", hf, "--decode", stdin=" ".join(want))
        check(rc == 0 and dec == text, "vocab.json + merges.txt decode back to the text", err)

        # a file's path names its directory
        for name in ("encoder.json", "vocab.bpe"):
            got = ids(os.path.join(GPT2, name), text[:2000])
            check(got == ids(GPT2, text[:2000]), "--tokenizer .../%s means its directory" % name, got)
        for name in ("vocab.json", "merges.txt"):
            got = ids(os.path.join(hf, name), text[:2000])
            check(got == ids(GPT2, text[:2000]), "--tokenizer .../%s means its directory" % name, got)
        got = ids(os.path.join(LLAMA, "tokenizer.json"), "Hello world")
        check(got == ids(LLAMA, "Hello world") and isinstance(got, list),
              "--tokenizer .../tokenizer.json is still read as that file", got)

        # clear refusals
        notok = P("notok.json")
        with open(notok, "w") as f:
            json.dump({"hello": 1, "world": 2}, f)
        rc, _, err = run("tokenize", "--tokenizer", notok, stdin="x")
        check(rc == 2 and notok in err and "directory" in err and "tokenizer.json" in err,
              "a JSON file that is no tokenizer.json: exit 2, the file named, the directory asked for",
              "exit %d: %s" % (rc, err))
        half = P("half")
        os.makedirs(half)
        shutil.copy(os.path.join(hf, "vocab.json"), half)
        rc, _, err = run("tokenize", "--tokenizer", half, stdin="x")
        check(rc == 2 and os.path.join(half, "merges.txt") in err,
              "vocab.json without merges.txt: exit 2 naming merges.txt", "exit %d: %s" % (rc, err))

        # prepare records the identity; the two formats are one tokenizer
        docs = P("docs")
        os.makedirs(docs)
        for f in brown[:3]:
            shutil.copy(f, docs)
        ident = {}
        for tag, tok in (("gpt2", GPT2), ("hf", hf), ("llama", LLAMA)):
            out = P("shards-" + tag)
            rc, _, err = run("prepare", "--tokenizer", tok, "--out", out, "--quiet", "--no-cache", docs)
            check(rc == 0, "prepare --tokenizer %s" % tag, err)
            tk = manifest(out) if rc == 0 else {}
            ident[tag] = tk.get("identity")
            if tag != "llama":
                check(tk.get("kind") == "gpt2-bpe" and tk.get("vocab_size") == 50257 and
                      tk.get("path") == tok and os.path.isabs(tk.get("abs_path", "")) and
                      os.path.samefile(tk["abs_path"], tok) and len(tk.get("files", [])) == 2 and
                      all(os.path.isabs(f) and os.path.exists(f) for f in tk["files"]),
                      "manifest.json (%s) records kind, size, path, resolved path and files" % tag, tk)
        check(ident["gpt2"] and ident["gpt2"].startswith("gpt2-bpe:") and ident["gpt2"] == ident["hf"],
              "the same identity from encoder.json + vocab.bpe and vocab.json + merges.txt", ident)
        check(ident["llama"] and ident["llama"].startswith("spm-bpe:") and ident["llama"] != ident["gpt2"],
              "LLaMA's tokenizer has an identity of its own", ident)
        rel = subprocess.run([CTRAIN, "prepare", "--tokenizer", "hf-gpt2", "--out", "rel", "--quiet",
                              "--no-cache", "docs"], cwd=tmp, capture_output=True, text=True, timeout=120)
        tk = manifest(P("rel")) if rel.returncode == 0 else {}
        check(tk.get("path") == "hf-gpt2" and tk.get("abs_path") == os.path.join(os.path.realpath(tmp), "hf-gpt2")
              or (tk.get("abs_path") and os.path.samefile(tk["abs_path"], hf)),
              "a relative --tokenizer is recorded as given and resolved", tk or rel.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s: %d failure(s)" % (os.path.basename(__file__), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
