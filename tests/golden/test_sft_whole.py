#!/usr/bin/env python3
"""`ctrain prepare --format sft`: prompt/completion and Alpaca examples tokenised whole, as TRL's
SFTTrainer does with completion_only_loss, against the reference encoders.

usage: /usr/bin/python3 tests/golden/test_sft_whole.py path/to/ctrain
Exit status 0 when every check passes (or node or the tokenizers are missing: SKIP), 1 otherwise.

300 examples drawn with a fixed seed (prompt/completion and Alpaca with and without input),
whose prompts end in every way a boundary can fall: "\\n", ":", a space (so the completion's
first word and that space make one token), the middle of a word or a number, an emoji; and
completions that start with a space, a newline, a letter, a digit, unicode (and decomposed
"cafe\u0301", which Qwen's NFC composes). Each is prepared with GPT-2's and LLaMA's tokenizers
and with the real tokenizer.json of Llama 3.1, Qwen3 and Gemma 3 (@lenml/tokenizer-*), and checked:
  - the ids are the document token, the reference encoder's ids of prompt + completion as one
    text (gpt-3-encoder, llama-tokenizer-js, @lenml/tokenizers), and EOS (the tokenizer config's
    eos_token: <|eot_id|>, <|im_end|>, <end_of_turn>). The document token is the BOS the
    tokenizer puts before a text (LLaMA's <s>, Llama 3's <|begin_of_text|>, Gemma's <bos>: what
    TRL's tokenizer(prompt + completion) starts with too), else <|endoftext|> (GPT-2, Qwen, which
    add none: ctrain starts each document with it as plain prepare does; TRL has no token there);
  - Qwen's tokens spell the text in NFC: offsets are compared in those bytes;
  - the mask (read from the .sft sidecar) counts exactly the tokens that end past the prompt's
    last byte, and EOS: it starts at the token holding the completion's first byte;
  - where encode(prompt) begins encode(prompt + completion), the mask is TRL's: the first
    len(encode(prompt)) tokens of the text masked, the rest counted. Where it does not, either
    a token straddles the boundary (TRL leaves it out; it counts here) or the prompt's end
    tokenises otherwise before the completion than alone (GPT-2 splits "\n\n" before a letter
    into two "\n", so TRL's count of the prompt alone would count a prompt token).
The summary line says how many examples fall in each case, and how many encode otherwise than
the old way (prompt and completion encoded apart), i.e. how many this fixes.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_chat_families as F  # noqa: E402  (Tok: the reference encoders and token bytes; read_examples)

N = 300
ALPACA_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                "context. Write a response that appropriately completes the request.\n\n"
                "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n")
ALPACA = ("Below is an instruction that describes a task. Write a response that appropriately completes "
          "the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n")

failures = 0
checks = 0


def check(ok, what, detail=""):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
        print("FAIL: %s%s" % (what, (" -- " + str(detail)[:1500]) if detail else ""))
    return ok


WORDS = ["vehicle", "Paris", "answer", "the", "quick", "brown", "fox", "jumps", "über", "naïve", "東京", "😀", "cafe\u0301",
         "12", "345", "3.14", "hello", "world", "don't", "it's", "co-operate", "e-mail", "x", "I", "a"]
PROMPT_ENDS = ["?\n", ":", ": ", " ", "\n\n", "\n### Response:\n", "Answer:", "=", "(", "\t", "",
               " wor", "12", "hel", "😀", "ü", " -", "'", "\"", "."]
COMP_STARTS = [" ", "", "\n", "  ", "ld", "34", "lo", "s", "\u00a0", "😀", "über", "-", "'s", "!"]


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def example(rng):
    k = rng.random()
    if k < 0.2:
        ins, out = words(rng, 1, 8) + rng.choice(["?", ".", ""]), rng.choice(COMP_STARTS) + words(rng, 1, 10)
        if rng.random() < 0.5:
            return {"instruction": ins, "input": words(rng, 0, 6), "output": out}
        return {"instruction": ins, "output": out}
    prompt = rng.choice(["", "Q: ", "Question: ", "Translate: ", ""]) + words(rng, 0, 12) + rng.choice(PROMPT_ENDS)
    completion = rng.choice(COMP_STARTS) + words(rng, 0, 10)
    if not completion:
        completion = "x"
    return {"prompt": prompt, "completion": completion}


def split(ex):
    if "prompt" in ex:
        return ex["prompt"], ex["completion"]
    t = ALPACA_INPUT if ex.get("input") else ALPACA
    return t.format(instruction=ex["instruction"], input=ex.get("input")), ex["output"]


def run(ctrain, tmp, tok, exs):
    src = os.path.join(tmp, "pc.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        for ex in exs:
            f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    out = os.path.join(tmp, "out_" + tok.name)
    p = subprocess.run([ctrain, "prepare", "--format", "sft", "--tokenizer", tok.dir, "--out", out, "--quiet", src],
                       capture_output=True)
    if not check(p.returncode == 0, "%s: prepare --format sft of %d examples" % (tok.name, len(exs)),
                 p.stderr.decode(errors="replace")[-600:]):
        return
    got = F.read_examples(out)
    pairs = [split(ex) for ex in exs]
    enc = tok.encode([p + c for p, c in pairs] + [p for p, _ in pairs] + [c for _, c in pairs])  # one load
    wholes, prompts, comps = enc[:len(pairs)], enc[len(pairs):2 * len(pairs)], enc[2 * len(pairs):]
    bad_ids = bad_mask = bad_trl = straddle = context = changed = trl_differs = 0
    for i, ((pr, co), g, ids, pids, cids) in enumerate(zip(pairs, got, wholes, prompts, comps)):
        want_ids = [tok.doc] + ids + [tok.eos]
        if g[0] != want_ids:
            bad_ids += 1
            if bad_ids <= 3:
                check(False, "%s example %d: ids = document token + encode(prompt + completion) + EOS" % (tok.name, i),
                      "%r + %r\n  got  %s\n  want %s" % (pr, co, g[0], want_ids))
            continue
        # in the bytes the tokens spell: Qwen's tokens spell NFC(text) ("cafe\u0301" -> "café")
        st, pn = tok.offsets(ids, tok.norm(pr + co).encode()), tok.norm_at(pr + co, len(pr.encode()))
        mask = [0] + [int(st[k + 1] > pn or st[k] == st[k + 1] >= pn) for k in range(len(ids))] + [1]
        if g[1] != mask:
            bad_mask += 1
            if bad_mask <= 3:
                check(False, "%s example %d: the mask starts at the token holding the completion's first byte" %
                      (tok.name, i), "%r + %r\n  ids  %s\n  got  %s\n  want %s" % (pr, co, ids, g[1], mask))
            continue
        # TRL: input_ids = encode(prompt + completion), completion_mask = [0] * len(encode(prompt)) + [1] * rest
        trl = [0] + [0] * min(len(pids), len(ids)) + [1] * max(0, len(ids) - len(pids)) + [1]
        if ids[:len(pids)] == pids:
            if g[1] != trl:
                bad_trl += 1
                check(False, "%s example %d: no token straddles, and the mask is TRL's" % (tok.name, i),
                      "%r + %r: %s vs %s" % (pr, co, g[1], trl))
        elif any(st[k] < pn < st[k + 1] for k in range(len(ids))):
            straddle += 1  # TRL leaves the straddling token out
        else:
            context += 1  # the prompt's end tokenises otherwise before the completion (GPT-2's "\n\n" + "x")
        trl_differs += g[1] != trl
        if pids + cids != ids:
            changed += 1
    ok = len(got) == len(exs) and bad_ids == bad_mask == bad_trl == 0
    check(ok, "%s: %d examples: ids as %s gives them for the whole text, masks from the completion's first byte, "
          "TRL's mask wherever no token straddles" % (tok.name, len(exs), tok.ref),
          "%d examples read, %d id / %d mask / %d TRL mismatches" % (len(got), bad_ids, bad_mask, bad_trl))
    print("%s: %d examples, %d id mismatches, %d mask mismatches; %d with a token straddling the boundary, %d whose "
          "prompt ends in other tokens before the completion than alone; %d masks differ from TRL's "
          "len(encode(prompt)) rule (all among those); %d whose ids differ from encoding prompt and completion apart" %
          (tok.name, len(exs), bad_ids, bad_mask, straddle, context, trl_differs, changed))
    check(changed > 0 and straddle > 0, "%s: the examples include boundaries where whole and apart differ" % tok.name)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ctrain = os.path.abspath(sys.argv[1])
    if shutil.which("node") is None:
        print("SKIP: node is not installed (the reference encoders run on it)")
        return 0
    toks = []
    if os.path.exists(os.path.join(F.GPT2_DIR, "encoder.json")):
        toks.append(F.Tok("gpt2"))
    if os.path.exists(F.LLAMA_JSON):
        toks.append(F.Tok("llama"))
    if os.path.exists(os.path.join(F.ROOT, "deps", "npm", "node_modules", "@lenml", "tokenizers", "package.json")):
        for f in F.FAMILIES:
            if os.path.exists(os.path.join(F.family_dir(f), "tokenizer.json")):
                toks.append(F.Tok(f))
    if len(toks) < 2 + len(F.FAMILIES):
        print("SKIP (partly): data/gpt2-tokenizer, data/llama-tokenizer or @lenml/tokenizer-{llama3_1,qwen3,gemma3} "
              "missing (scripts/fetch_data.sh)")
    if not toks:
        return 0
    rng = random.Random(33)
    exs = [example(rng) for _ in range(N)]
    tmp = tempfile.mkdtemp(prefix="ctrain_sft_whole_")
    try:
        for tok in toks:
            run(ctrain, tmp, tok, exs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_sft_whole: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
