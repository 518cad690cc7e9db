#!/usr/bin/env python3
"""The chat template travels with the run (issue #33, point 4).

usage: test_sft_chat_template.py path/to/ctrain

GPT-2's tokenizer files alone (data/gpt2-tokenizer: no tokenizer_config.json, no template)
and a ChatML template given as a .jinja file that uses eos_token:
  - `prepare --format sft --chat-template FILE.jinja` renders (eos_token is the tokenizer's
    <|endoftext|>, as GPT2Tokenizer has it) and records the template in the manifest
    ("chat_template": name, the template's text, the special tokens it rendered with);
  - the same .jinja with no tokenizer at hand (`tokenize --render`) exits 2 naming eos_token;
  - `train` (a tiny GPT-2, from scratch) writes it into run.dir/tokenizer_config.json as
    "chat_template" with eos_token, and into the checkpoints; the run's tokenizer is unchanged
    (same ids);
  - `ctrain chat --model RUN` works (it failed: "no tokenizer_config.json or
    chat_template.jinja") and its prompt is the ids of `tokenize --chat --generation-prompt
    --tokenizer RUN`, whose render equals @huggingface/jinja's render of RUN's
    tokenizer_config.json (what transformers.js' apply_chat_template does; transformers'
    Python apply_chat_template reads the same chat_template and eos_token) and the render
    prepare made with the .jinja.
  - A LLaMA run (SentencePiece: bos_token and eos_token in tokenizer_config.json are part of
    the tokenizer) with a template whose eos_token is not the tokenizer's: the template is
    saved, that eos_token is left out with a warning, and the tokenizer is the same.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA_JSON = os.path.join(ROOT, "data", "llama-tokenizer", "tokenizer.json")
DRIVER = os.path.join(ROOT, "tests", "golden", "chat_render.js")
JINJA_PKG = os.path.join(ROOT, "deps", "npm", "node_modules", "@huggingface", "jinja", "package.json")
failures = []
checks = 0

TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] | trim + eos_token + '\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def check(label, ok, detail=""):
    global checks
    checks += 1
    print(("ok   " if ok else "FAIL ") + label + ("" if ok else ": " + str(detail)[-1500:]))
    if not ok:
        failures.append(label)
    return ok


def run(*args, stdin=None):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=600, input=stdin, env=env)
    return p.returncode, p.stdout, p.stderr


WORDS = "alpha beta gamma delta river stone light cloud green small quick brown fox".split()


def conversations(n):
    out = []
    for i in range(n):
        q = " ".join(WORDS[(i * 3 + k) % len(WORDS)] for k in range(2 + i % 4))
        a = " ".join(WORDS[(i * 5 + k * 2) % len(WORDS)] for k in range(1 + i % 3))
        out.append({"messages": [{"role": "user", "content": q + "?"}, {"role": "assistant", "content": a}]})
    return out


def gpt2_run(tmp):
    jinja = os.path.join(tmp, "chatml_eos.jinja")
    with open(jinja, "w") as f:
        f.write(TEMPLATE)
    conv = [{"role": "user", "content": "What is the river?"}]
    rc, so, se = run("tokenize", "--render", "--chat-template", jinja, stdin=json.dumps(conv) + "\n")
    check("a .jinja using eos_token with no tokenizer: exit 2 naming eos_token", rc == 2 and
          "'eos_token' is undefined" in se and "chatml_eos.jinja" in se, se)

    src = os.path.join(tmp, "chat.jsonl")
    with open(src, "w") as f:
        for c in conversations(24):
            f.write(json.dumps(c) + "\n")
    data = os.path.join(tmp, "sft")
    rc, so, se = run("prepare", "--format", "sft", "--tokenizer", GPT2, "--chat-template", jinja, "--out", data,
                     "--quiet", src)
    if not check("prepare --format sft --chat-template X.jinja (eos_token from GPT-2's tokenizer)", rc == 0, se):
        return
    man = json.load(open(os.path.join(data, "manifest.json")))
    rec = man.get("chat_template", {})
    check("the manifest records the template: its name, text and the special tokens it rendered with",
          rec.get("template") == TEMPLATE and rec.get("name", "").endswith("chatml_eos.jinja")
          and rec.get("special_tokens", {}).get("eos_token") == "<|endoftext|>", json.dumps(rec)[:600])

    r = os.path.join(tmp, "run")
    rc, so, se = run("train", f"data.train={data}", f"run.dir={r}", "model.preset=gpt2-tiny",
                     "model.vocab_size=50257", "model.n_ctx=64", "train.batch_size=2", "train.seq_len=64",
                     "train.steps=2", "run.checkpoint_every=1", "run.threads=2", "optim.lr=1e-3")
    if not check("train on the instruction shards", rc == 0, (so + se)[-1500:]):
        return
    cfg_path = os.path.join(r, "tokenizer_config.json")
    cfg = json.load(open(cfg_path)) if os.path.exists(cfg_path) else {}
    check("run.dir/tokenizer_config.json has the template and eos_token",
          cfg.get("chat_template") == TEMPLATE and cfg.get("eos_token") == "<|endoftext|>", json.dumps(cfg)[:600])
    check("the log says where the template came from", "chat template" in so + se and "data.train" in so + se,
          (so + se)[-800:])
    ck = os.path.join(r, "checkpoints")
    saved = [os.path.join(ck, d, "tokenizer_config.json") for d in sorted(os.listdir(ck))] if os.path.isdir(ck) else []
    check("each checkpoint carries it", saved and all(os.path.exists(p) and
                                                      json.load(open(p)).get("chat_template") == TEMPLATE for p in saved),
          saved)
    text = "What is the river? <|endoftext|> alpha"
    rc1, a, _ = run("tokenize", "--tokenizer", GPT2, stdin=text)
    rc2, b, _ = run("tokenize", "--tokenizer", r, stdin=text)
    check("the run's tokenizer is the prepared one (same ids)", rc1 == rc2 == 0 and a == b and a.strip(), (a, b))

    # chat --model RUN: the template from the run, the prompt as tokenize --chat renders it
    rc, so, se = run("chat", "--model", r, "--json", "--temperature", "0", "--max-new", "4", stdin="What is the river?\n")
    replies = [json.loads(x) for x in so.splitlines() if x.startswith("{")]
    check("chat --model RUN: one reply (it failed: no tokenizer_config.json or chat_template.jinja)",
          rc == 0 and len(replies) == 1, se[-800:])
    rc, ids, se2 = run("tokenize", "--chat", "--generation-prompt", "--tokenizer", r, stdin=json.dumps(conv) + "\n")
    check("... its prompt is the conversation rendered with the run's template",
          rc == 0 and replies and replies[0].get("prompt_tokens") == len(ids.split()), (replies, ids, se2))
    rc, rendered, se3 = run("tokenize", "--render", "--generation-prompt", "--tokenizer", r, stdin=json.dumps(conv) + "\n")
    rc0, before, _ = run("tokenize", "--render", "--generation-prompt", "--chat-template", jinja, "--tokenizer", GPT2,
                         stdin=json.dumps(conv) + "\n")
    check("the run's render is the one prepare made with the .jinja", rc == rc0 == 0 and rendered == before and
          "<|endoftext|>" in rendered, (rendered, before, se3))
    if shutil.which("node") and os.path.exists(JINJA_PKG):
        p = subprocess.run(["node", DRIVER, cfg_path, "--generation-prompt"], input=json.dumps(conv) + "\n",
                           capture_output=True, text=True)
        check("@huggingface/jinja renders run.dir/tokenizer_config.json the same (apply_chat_template)",
              p.returncode == 0 and rc == 0 and json.loads(p.stdout) == json.loads(rendered), (p.stdout, rendered))
    else:
        print("SKIP: the @huggingface/jinja render of the run's config (node or deps/npm missing)")


def llama_run(tmp):
    """SentencePiece: eos_token in tokenizer_config.json would change the tokenizer; a template
    rendering with another is saved without it."""
    tok = os.path.join(tmp, "llama_tok")
    os.makedirs(tok)
    shutil.copy(LLAMA_JSON, os.path.join(tok, "tokenizer.json"))
    tpl = os.path.join(tmp, "other_eos.json")
    json.dump({"chat_template": TEMPLATE, "eos_token": "<|im_end|>"}, open(tpl, "w"))
    src = os.path.join(tmp, "chat.jsonl")
    data = os.path.join(tmp, "llama_sft")
    rc, so, se = run("prepare", "--format", "sft", "--tokenizer", tok, "--chat-template", tpl, "--out", data,
                     "--quiet", src)
    if not check("LLaMA: prepare with a template whose eos_token is <|im_end|>", rc == 0, se):
        return
    r = os.path.join(tmp, "llama_run")
    rc, so, se = run("train", "model.arch=llama", "model.n_layer=1", "model.n_head=2", "model.n_kv_head=1",
                     "model.n_embd=32", "model.n_ffn=64", "model.n_ctx=64", "model.vocab_size=32000",
                     f"data.train={data}", f"run.dir={r}", "train.batch_size=1", "train.seq_len=64", "train.steps=1",
                     "run.checkpoint_every=0", "run.threads=2")
    if not check("LLaMA: train", rc == 0, (so + se)[-1200:]):
        return
    cfg = json.load(open(os.path.join(r, "tokenizer_config.json")))
    check("LLaMA: the template is saved, the foreign eos_token left out with a warning",
          cfg.get("chat_template") == TEMPLATE and "eos_token" not in cfg and "left out" in so + se,
          (json.dumps(cfg)[:400], (so + se)[-600:]))
    text = "Hello </s> world"
    rc1, a, _ = run("tokenize", "--tokenizer", tok, "--allow-special", stdin=text)
    rc2, b, _ = run("tokenize", "--tokenizer", r, "--allow-special", stdin=text)
    check("LLaMA: the run's tokenizer is the prepared one (same ids, </s> still EOS)", rc1 == rc2 == 0 and a == b,
          (a, b))


def main():
    if not os.path.exists(os.path.join(GPT2, "encoder.json")):
        print("SKIP: data/gpt2-tokenizer missing (scripts/fetch_data.sh)")
        return 0
    tmp = tempfile.mkdtemp(prefix="ctrain_sft_tpl_")
    try:
        gpt2_run(tmp)
        if os.path.exists(LLAMA_JSON):
            llama_run(tmp)
        else:
            print("SKIP: the LLaMA run: data/llama-tokenizer missing")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks} checks, {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
