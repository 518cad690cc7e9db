#!/usr/bin/env python3
"""Chat templates: `ctrain tokenize --render` against @huggingface/jinja (the Jinja transformers.js uses).

usage: /usr/bin/python3 tests/golden/test_chat_template.py path/to/ctrain
Exit status 0 when every check passes (or the reference is missing: SKIP), 1 otherwise.

The templates are the chat_template strings of seven models' tokenizer_config.json
(tests/golden/chat_templates/*.json: LLaMA-2-chat, TinyLlama/Zephyr, Mistral-Instruct v0.1,
Mixtral/Mistral's classic one, ChatML (Qwen2), Phi-3, Gemma). Each renders a set of
conversations (with and without a system message, one to many turns, unicode, empty
content, content that looks like Jinja or like the templates' own markup, JavaScript
whitespace, control characters, extra message fields, roles out of order, unknown roles),
each with add_generation_prompt false and true, by the reference (tests/golden/chat_render.js
on node) and by ctrain: the texts must be byte-identical, and where the reference raises
(raise_exception: roles out of order, a system message Gemma does not take), ctrain must exit
2 with the same message. Then the errors of the CLI itself (bad JSON, not an array, a
template outside the Jinja subset, a config without a chat_template), and `--chat`: a
GPT-2 tokenizer.json with <|im_start|>, <|im_end|> (special) and <tool_call> (added, not
special) and LLaMA's tokenizer with the LLaMA-2 template must give the added tokens' ids for
the markup and the plain encoding of the text between.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TEMPLATES = os.path.join(HERE, "chat_templates")
DRIVER = os.path.join(HERE, "chat_render.js")
PACKAGE = os.path.join(ROOT, "deps", "npm", "node_modules", "@huggingface", "jinja", "package.json")
GPT2_DIR = os.path.join(ROOT, "data", "gpt2-tokenizer")
LLAMA_JSON = os.path.join(ROOT, "data", "llama-tokenizer", "tokenizer.json")
NAMES = ["llama2", "tinyllama", "mistral", "mixtral", "qwen2", "phi3", "gemma"]

failures = 0
checks = 0


def check(ok, what, detail=""):
    global failures, checks
    checks += 1
    if not ok:
        failures += 1
        print("FAIL: %s%s" % (what, (" -- " + detail) if detail else ""))
    return ok


# ---------------------------------------------------------------- conversations

def m(role, content, **extra):
    d = {"role": role, "content": content}
    d.update(extra)
    return d


U, A, S = "user", "assistant", "system"
LONG = ("The quick brown fox jumps over the lazy dog. " * 250).strip()

CONVERSATIONS = [
    ("one user message", [m(U, "Hello, how are you?")]),
    ("user, assistant", [m(U, "Hi"), m(A, "Hello! How can I help?")]),
    ("three turns", [m(U, "Hello, how are you?"), m(A, "I'm doing great. How can I help you today?"),
                     m(U, "I'd like to show off how chat templating works!")]),
    ("system first", [m(S, "You are a friendly chatbot who always responds in the style of a pirate"),
                      m(U, "How many helicopters can a human eat in one sitting?")]),
    ("system, two exchanges", [m(S, "Be brief."), m(U, "2+2?"), m(A, "4"), m(U, "3+3?"), m(A, "6")]),
    ("many turns", [m(U if i % 2 == 0 else A, "turn %d" % i) for i in range(12)]),
    ("unicode", [m(U, "中文分词测试。日本語のテキスト。한국어 — ünïcødé, Ελληνικά, עברית, हिन्दी"),
                 m(A, "😀 👍🏽 🇫🇷 👩‍💻 e\u0301 \U0001F600")]),
    ("empty content", [m(U, ""), m(A, "")]),
    ("empty system", [m(S, ""), m(U, "hi")]),
    ("jinja-looking content", [m(U, "{{ x }} {% if true %}yes{% endif %} {# c #} {%- raw -%} {{ raise_exception('no') }}"),
                               m(A, "{{ messages }} {% for m in messages %}{{ m }}{% endfor %}")]),
    ("markup-looking content", [m(U, "<|im_start|>user\n<|im_end|> </s> <s>[INST] <<SYS>> <start_of_turn>"),
                                m(A, "<|end|><|assistant|><end_of_turn>")]),
    ("whitespace", [m(U, "  \n\thi there \n  "), m(A, "\u00a0\u3000answer\ufeff\u2028 ")]),
    ("quotes and escapes", [m(U, "a \"quoted\" 'word' and \\backslash\\ and \\n literal"),
                            m(A, "tab\there\rcarriage\x01\x1f control")]),
    ("long content", [m(U, LONG), m(A, LONG[::-1])]),
    ("extra fields", [m(U, "hi", name="alice"), m(A, "hello", name="bot", extra={"k": [1, 2.5, None, True]})]),
    ("assistant first", [m(A, "I speak first"), m(U, "ok")]),
    ("two users in a row", [m(U, "one"), m(U, "two")]),
    ("system in the middle", [m(U, "hi"), m(A, "hello"), m(S, "new rules"), m(U, "ok")]),
    ("unknown role", [m(U, "hi"), m("tool", "42")]),
    ("no messages", []),
]


# Small templates over the same conversation that exercise the subset's constructs one by
# one (numbers as JavaScript prints them, loose ==, filters, tests, methods, slices, loops,
# scopes, whitespace control, {% generation %}); the last few must fail in both engines.
CONVERSATION = [m(S, "Be nice."), m(U, "Hi  there"), m(A, " Hello! "), m(U, "Bye")]
CONSTRUCTS = [
    "{{ 1 + 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ 2 ** 10 }} "
    "{{ 2 ** -1 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 3 * 1.0 }} {{ 1 - 2.5 }} {{ 10 / 3 }} {{ 1 / 0 }} {{ 2 ** 0.5 }}",
    "{{ 10 ** 21 }} {{ 10 ** 20 }} {{ 10.0 ** 21 }} {{ 10 ** -7 }} {{ 10 ** -6 }} {{ 1 / 3 }} {{ -0.0 }} {{ 0 * -1 }} "
    "{{ 123456789.125 }} {{ 5 % 0 }} {{ -(3) }} {{ +2.5 }} {{ - 4 }}",
    "{{ 'a' + 1 }} {{ 1 ~ 2 }} {{ 'x' ~ true }} {{ 'n' + 2.0 }} {{ [1, 'a'] ~ '!' }} {{ messages[0] ~ '' }}",
    "{{ true }} {{ false }} {{ none }} {{ True }} {{ undefined_var }} {{ [1, 'a', true, none, 1.5, 2.0] }} "
    "{{ {'a': 1, 'b': [1, 2]} }} {{ (1, 2) | length }} {{ [undefined_var] }}",
    "{{ 1 == 1.0 }} {{ '1' == 1 }} {{ '' == false }} {{ 0 == false }} {{ none == false }} {{ 'a' != 'b' }} "
    "{{ [] == false }} {{ 1 < 2 }} {{ 2 >= 2.5 }} {{ 'abc' == 'abc' }} {{ '0x10' == 16 }} {{ ' 12 ' == 12 }} "
    "{{ none == undefined_var }} {{ [1] == '1' }} {{ messages == messages }} {{ true == 1 }} {{ 'true' == true }}",
    "{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not none }} {{ [] or 'empty' }} {{ {} and 1 }} {{ 'a' if 0 else 'b' }} "
    "{{ 'c' if 1 }}{{ 'd' if 0 }} {{ not not 'x' }} {{ 1 if 0 else 2 if 0 else 3 }}",
    "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 1 in [1, 2] }} {{ 1.0 in [1] }} {{ '1' in [1] }} "
    "{{ 'role' in messages[0] }} {{ 'x' in undefined_var }} {{ 'x' not in undefined_var }} {{ '' in 'a' }}",
    "{{ '  a b  '.strip() }}|{{ '  a '.lstrip() }}|{{ ' a  '.rstrip() }}|{{ 'hello world foo-bar_baz 9x'.title() }}|"
    "{{ 'hELLO'.capitalize() }}|{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}|{{ 'abc'.startswith('ab') }}"
    "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'a,b,,c'.split(',') }}|{{ '  a  b c '.split() }}|{{ 'a,b,c'.split(',', 1) }}|"
    "{{ 'a b c'.split(none, 1) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.replace('', '-') }}|{{ 'abc'.length }}|"
    "{{ '\U0001F600a'.length }}|{{ 'x\u00a0'.strip() }}.",
    "{{ '  x  ' | trim }}|{{ messages | length }}|{{ 'abc' | upper }}|{{ [3,1,2] | first }}{{ [3,1,2] | last }}|"
    "{{ [1,2,3] | reverse }}|{{ ['a','b'] | join }}|{{ ['a','b'] | join(', ') }}|{{ 'abc' | join('-') }}|"
    "{{ [1, none, 'x', true, 2.0, [3, 4]] | join('|') }}|{{ '42' | int }}{{ '3.5x' | float }}{{ 'x' | int }}"
    "{{ 'x' | int(7) }}{{ ' 12abc' | int }}|{{ -3 | abs }}|{{ 3.7 | int }}|{{ 3 | float }}|{{ 3 | string }}"
    "{{ 2.0 | string }}|{{ true | int }}{{ true | string }}|{{ undefined_var | default('d') }}{{ '' | default('e') }}"
    "{{ '' | default('f', true) }}|{{ messages[0] | items | list | length }}|{{ 'a\\nb\\n\\nc' | indent }}|"
    "{{ 'a\\nb' | indent(2, true) }}|{{ 'abc' | replace('b', 'X') }}|{{ 'aXbXc' | replace('X', '', 1) }}|"
    "{{ messages | list | length }}|{{ 'ab' | title }}{{ 'ab' | capitalize }}|{{ 'x' | safe }}|{{ true | bool }}",
    "{{ messages | tojson }}|{{ {'a': '\u00e9\"\\n', 'b': [1, 2.5, true, none]} | tojson }}|{{ messages | tojson(indent=2) }}|"
    "{{ '\u00e9\U0001F600\x7f' | tojson(ensure_ascii=true) }}|{{ [1, [2, {}], []] | tojson(indent=4) }}|"
    "{{ {'a': 1, 'b': 2} | tojson(separators=(',', ':')) }}|{{ 'x\x01\t' | tojson }}|{{ 1.0 | tojson }}|"
    "{{ [1, 2] | string }}|{{ {'k': undefined_var} | tojson }}",
    "{{ messages[1:] | length }}|{{ 'abcdef'[1:4] }}|{{ 'abcdef'[::-1] }}|{{ 'abcdef'[::2] }}|{{ [1,2,3,4][-2:] }}|"
    "{{ [1,2,3,4][:-1] }}|{{ 'h\u00e9llo\U0001F600'[1:3] }}|{{ [1,2,3][5:] }}|{{ 'abc'[-1] }}|{{ messages[-1].role }}|"
    "{{ [1,2,3].0 }}|{{ [1,2,3][1] }}|{{ [1,2,3][7] }}|{{ 'abc'[1] }}|{{ [1,2,3,4,5][4:1:-2] }}",
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/"
    "{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem.role if loop.previtem else '-' }}/"
    "{{ loop.nextitem.role if loop.nextitem is defined else '-' }};{% endfor %}",
    "{% for m in messages if m.role == 'user' %}{{ m.content }},{% else %}none{% endfor %}|"
    "{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% if i == 3 %}{% break %}{% endif %}"
    "{% endfor %}|{% for i in [] %}x{% else %}empty{% endfor %}|{% for k, v in messages[0].items() %}{{ k }}={{ v }};"
    "{% endfor %}|{% for k in messages[0] %}{{ k }}{% endfor %}|{% for a, b in [[1,2],[3,4]] %}{{ a + b }}{% endfor %}|"
    "{% for i in [1,2] %}x{% continue %}{% else %}E{% endfor %}|{% for i in [1,2,3] %}{{ i }}{% break %}{% else %}F"
    "{% endfor %}|{% for i in [1,2,3] %}{{ i }}{% if i == 2 %}{% break %}{% endif %}{% else %}G{% endfor %}",
    "{% set x = 1 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}|"
    "{% set ns = namespace(total=0, names=[]) %}{% for m in messages %}{% set ns.total = ns.total + 1 %}"
    "{% set ns.names = ns.names + [m.role] %}{% endfor %}{{ ns.total }}{{ ns.names }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|"
    "{% set ns2 = namespace({'k': 'v'}) %}{{ ns2.k }}|{% if true %}{% set y = 5 %}{% endif %}{{ y }}|{{ ns }}",
    "{{ range(3) }}{{ range(1, 7, 2) }}{{ range(5, 0, -2) }}{{ range(0) }}{{ range(0.5, 3) }}{{ range(3) | length }}",
    "Line1\n  {% if true %}\n  in\n  {% endif %}\n\t{%- for i in range(2) -%}\n   [{{ i }}]  \n{%- endfor %}\n"
    "  {{- 'x' }}  {{ 'y' -}}  \n z {# c #}\n{#- c2 -#}  w\n   {% set q = 1 %}\n{% for m in messages %}\n"
    "    {{ m.role }}\n{% endfor %}\n\n",
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
    "{% else %}{{ m.content }}{% endif %}\n  {%- generation -%}  \n (g) {% endgeneration %}\n{% endfor %}",
    "{{ none is none }}{{ 1 is number }}{{ 1.5 is integer }}{{ 'a' is string }}{{ messages is iterable }}"
    "{{ messages[0] is mapping }}{{ x is defined }}{{ x is undefined }}{{ 3 is odd }}{{ 4 is even }}{{ true is boolean }}"
    "{{ true is true }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ messages is sequence }}{{ raise_exception is callable }}"
    "{{ 'a' is not string }}{{ (1, 2) is iterable }}{{ 1 is false }}",
    "{{ messages[0].get('role') }}{{ messages[0].get('nope', 'dflt') }}{{ messages[0].get('nope') }}"
    "{{ messages[0].keys() }}{{ messages[0].values() | length }}{{ messages[0].items() }}",
    "{{ '\\u00e9\\x41\\n\\t\\\\' }}{{ \"it's\" }}{{ 'a' 'b' \"c\" }}{{ '\\'' }}",
    "{{ {'a': 1}['a'] }}{{ ([1] + [2]) | length }}{{ {'a': {'b': 'c'}}.a.b }}{{ [1, 2 3] }}{{ ('x') }}",
    "{#- only a comment -#}\n\n   {{ messages | length }}   \n\n",
    "{% if messages[0]['role'] == 'system' %}{% set s = messages[0]['content'] %}{% set ms = messages[1:] %}{% else %}"
    "{% set ms = messages %}{% endif %}{% for message in ms %}{% if message['role'] == 'user' %}"
    "{{ '<|user|>' + (s + '\\n\\n' if loop.first and s is defined else '') + message['content'] | trim }}"
    "{% elif message.role == 'assistant' %}{{ message.content.strip() + eos_token }}{% endif %}{% endfor %}",
    # both engines refuse these
    "{{ 'x' + none }}",
    "{{ undefined_var + 1 }}",
    "{{ 1 < 'a' }}",
    "{{ raise_exception(42) }}",
    "{% for c in 'abc' %}{{ c }}{% endfor %}",
    "{{ messages[0].content.nope() }}",
]

# ---------------------------------------------------------------- runners

def lines(text):
    """Lines split at "\n" only (str.splitlines also splits at U+2028, which JSON leaves unescaped)."""
    parts = text.split("\n")
    return parts[:-1] if parts and parts[-1] == "" else parts


def reference(config, convs, agp):
    args = ["node", DRIVER, config] + (["--generation-prompt"] if agp else [])
    p = subprocess.run(args, input="".join(json.dumps(c) + "\n" for c in convs).encode(), capture_output=True)
    if p.returncode != 0:
        raise RuntimeError("chat_render.js failed: %s" % p.stderr.decode(errors="replace"))
    return [json.loads(line) for line in lines(p.stdout.decode())]


def ours(ctrain, args, stdin_text):
    p = subprocess.run([ctrain, "tokenize"] + args, input=stdin_text.encode(), capture_output=True)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def render_parity(ctrain):
    for name in NAMES:
        config = os.path.join(TEMPLATES, name + ".json")
        for agp in (False, True):
            convs = [c for _, c in CONVERSATIONS]
            ref = reference(config, convs, agp)
            flag = ["--generation-prompt"] if agp else []
            ok_idx = [i for i, r in enumerate(ref) if isinstance(r, str)]
            # everything the reference renders, in one batch
            rc, out, err = ours(ctrain, ["--render", "--chat-template", config] + flag,
                                "".join(json.dumps(convs[i]) + "\n" for i in ok_idx))
            got = [json.loads(line) for line in lines(out)] if rc == 0 else []
            if not check(rc == 0 and len(got) == len(ok_idx), "%s agp=%s: renders %d conversations" %
                         (name, agp, len(ok_idx)), err.strip()):
                continue
            for i, text in zip(ok_idx, got):
                check(text == ref[i], "%s agp=%s %s: byte-identical" % (name, agp, CONVERSATIONS[i][0]),
                      "ours %r\n  ref  %r" % (text[:300], ref[i][:300]))
            # what the reference refuses, one at a time: exit 2 with its message
            for i, r in enumerate(ref):
                if isinstance(r, str):
                    continue
                rc, out, err = ours(ctrain, ["--render", "--chat-template", config] + flag, json.dumps(convs[i]) + "\n")
                check(rc == 2 and r["error"] in err and "raise_exception" in err and name + ".json" in err,
                      "%s agp=%s %s: exit 2 with %r" % (name, agp, CONVERSATIONS[i][0], r["error"]),
                      "rc=%d stderr=%s" % (rc, err.strip()))
    # the model directory's own tokenizer_config.json, as --tokenizer DIR finds it
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(os.path.join(TEMPLATES, "qwen2.json"), os.path.join(d, "tokenizer_config.json"))
        conv = CONVERSATIONS[2][1]
        ref = reference(os.path.join(d, "tokenizer_config.json"), [conv], True)[0]
        rc, out, err = ours(ctrain, ["--render", "--generation-prompt", "--tokenizer", d], json.dumps(conv) + "\n")
        check(rc == 0 and json.loads(out) == ref, "--render --tokenizer DIR reads DIR/tokenizer_config.json", err)
        # a list of named templates: "default" is taken
        cfg = json.load(open(os.path.join(TEMPLATES, "tinyllama.json")))
        cfg["chat_template"] = [{"name": "tool_use", "template": "{{ 'tools' }}"},
                                {"name": "default", "template": cfg["chat_template"]}]
        json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"))
        ref = reference(os.path.join(d, "tokenizer_config.json"), [conv], False)[0]
        rc, out, err = ours(ctrain, ["--render", "--tokenizer", d], json.dumps(conv) + "\n")
        check(rc == 0 and json.loads(out) == ref, "a list of named templates: the \"default\" one", err)


def construct_parity(ctrain):
    with tempfile.TemporaryDirectory() as d:
        for k, tpl in enumerate(CONSTRUCTS):
            cfg = os.path.join(d, "construct_%02d.json" % k)
            with open(cfg, "w") as f:
                json.dump({"chat_template": tpl, "bos_token": "<s>", "eos_token": "</s>"}, f)
            ref = reference(cfg, [CONVERSATION], False)[0]
            rc, out, err = ours(ctrain, ["--render", "--chat-template", cfg], json.dumps(CONVERSATION) + "\n")
            what = "construct %d %r" % (k, tpl[:60])
            if isinstance(ref, str):
                got = json.loads(out) if rc == 0 else None
                check(got == ref, what + ": byte-identical", "ours %r\n  ref  %r\n  %s" % (got, ref, err.strip()))
            else:
                check(rc == 2 and ("construct_%02d.json" % k) in err, what + ": both refuse",
                      "ref error %r; ours rc=%d %s %r" % (ref["error"], rc, err.strip(), out[:200]))


def cli_errors(ctrain):
    qwen = os.path.join(TEMPLATES, "qwen2.json")
    rc, out, err = ours(ctrain, ["--render", "--chat-template", qwen], '[{"role": "user", "content": "a"}]\n[{"role": \n')
    check(rc == 2 and "stdin line 2" in err and "JSON" in err, "bad JSON: exit 2 naming the line", err.strip())
    rc, out, err = ours(ctrain, ["--render", "--chat-template", qwen], '{"role": "user"}\n')
    check(rc == 2 and "stdin line 1" in err and "array" in err, "not an array: exit 2", err.strip())
    rc, out, err = ours(ctrain, ["--render", "--chat-template", qwen], '[{"role": "user", "content": "a\\u0000b"}]\n')
    check(rc == 2 and "stdin line 1" in err, "a NUL in a string: exit 2", err.strip())
    with tempfile.TemporaryDirectory() as d:
        bad = os.path.join(d, "bad.jinja")
        with open(bad, "w") as f:
            f.write("{% for m in messages %}\n{{ m.content }}\n{% macro x() %}{% endmacro %}{% endfor %}")
        rc, out, err = ours(ctrain, ["--render", "--chat-template", bad], "[]\n")
        check(rc == 2 and "macro" in err and "bad.jinja:3" in err, "{% macro %}: exit 2 naming it, the file and the line",
              err.strip())
        with open(bad, "w") as f:
            f.write("{{ messages | map(attribute='content') | join(', ') }}")
        rc, out, err = ours(ctrain, ["--render", "--chat-template", bad], "[]\n")
        check(rc == 2 and "'map'" in err and "bad.jinja:1" in err, "an unsupported filter: exit 2 naming it", err.strip())
        with open(bad, "w") as f:
            f.write("{% if messages %}unclosed")
        rc, out, err = ours(ctrain, ["--render", "--chat-template", bad], "[]\n")
        check(rc == 2 and "never closed" in err and "bad.jinja:1" in err, "an unclosed {% if %}: exit 2", err.strip())
        cfg = os.path.join(d, "tokenizer_config.json")
        with open(cfg, "w") as f:
            json.dump({"bos_token": "<s>"}, f)
        rc, out, err = ours(ctrain, ["--render", "--tokenizer", d], "[]\n")
        check(rc == 2 and "no chat_template" in err and "tokenizer_config.json" in err,
              "a config without a chat_template: exit 2 naming the file", err.strip())
    rc, out, err = ours(ctrain, ["--render"], "[]\n")
    check(rc == 2, "--render without a template: exit 2", err.strip())
    rc, out, err = ours(ctrain, ["--chat", "--chat-template", qwen], "[]\n")
    check(rc == 2 and "--tokenizer" in err, "--chat without --tokenizer: exit 2", err.strip())


# ---------------------------------------------------------------- --chat ids

def encode_plain(ctrain, tok, segments):
    """The plain encodings of text segments (ctrain tokenize --jsonl)."""
    rc, out, err = ours(ctrain, ["--tokenizer", tok, "--jsonl"], "".join(json.dumps(s) + "\n" for s in segments))
    if rc != 0:
        raise RuntimeError(err)
    return [[int(x) for x in line.split()] for line in lines(out)]


def chat_ids(ctrain):
    with tempfile.TemporaryDirectory() as d:
        enc = json.load(open(os.path.join(GPT2_DIR, "encoder.json")))
        merges = [l for l in open(os.path.join(GPT2_DIR, "vocab.bpe"), encoding="utf-8").read().split("\n")[1:] if l]
        added = [("<|endoftext|>", 50256, True), ("<|im_start|>", 50257, True), ("<|im_end|>", 50258, True),
                 ("<tool_call>", 50259, False)]
        vocab = dict(enc)
        for text, i, _ in added:
            vocab[text] = i
        tj = {"version": "1.0", "normalizer": None,
              "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
              "added_tokens": [{"id": i, "content": t, "special": s, "lstrip": False, "rstrip": False,
                                "normalized": False, "single_word": False} for t, i, s in added],
              "model": {"type": "BPE", "vocab": vocab, "merges": merges}}
        tok = os.path.join(d, "chatml")
        os.mkdir(tok)
        json.dump(tj, open(os.path.join(tok, "tokenizer.json"), "w"))
        shutil.copy(os.path.join(TEMPLATES, "qwen2.json"), os.path.join(tok, "tokenizer_config.json"))
        conv = [m(U, "Call it: <tool_call> now"), m(A, "Done.")]
        rc, out, err = ours(ctrain, ["--chat", "--tokenizer", tok], json.dumps(conv) + "\n")
        # <|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n... as ids
        segs = ["system\nYou are a helpful assistant.", "\n", "user\nCall it: ", " now", "\n", "assistant\nDone.", "\n"]
        plain = encode_plain(ctrain, tok, segs)
        want = ([50257] + plain[0] + [50258] + plain[1] + [50257] + plain[2] + [50259] + plain[3] + [50258] +
                plain[4] + [50257] + plain[5] + [50258] + plain[6])
        got = [int(x) for x in out.split()] if rc == 0 else None
        check(got == want, "--chat (ChatML, GPT-2 BPE): markup as the added tokens' ids, the text between as BPE",
              "got %s\n  want %s\n  %s" % (got, want, err.strip()))
        # the same text through --render and plain tokenize --allow-special keeps <tool_call> as text
        rc, out, err = ours(ctrain, ["--chat", "--generation-prompt", "--tokenizer", tok], json.dumps(conv[:1]) + "\n")
        got = [int(x) for x in out.split()] if rc == 0 else []
        check(got[-len(encode_plain(ctrain, tok, ["assistant\n"])[0]) - 1:] ==
              [50257] + encode_plain(ctrain, tok, ["assistant\n"])[0],
              "--chat --generation-prompt ends with <|im_start|>assistant\\n", err.strip())
        if os.path.exists(LLAMA_JSON):
            tok = os.path.join(d, "llama")
            os.mkdir(tok)
            shutil.copy(LLAMA_JSON, os.path.join(tok, "tokenizer.json"))
            shutil.copy(os.path.join(TEMPLATES, "llama2.json"), os.path.join(tok, "tokenizer_config.json"))
            conv = [m(U, "Hello"), m(A, "Hi there"), m(U, "Bye")]
            rc, out, err = ours(ctrain, ["--chat", "--tokenizer", tok], json.dumps(conv) + "\n")
            got = [int(x) for x in out.split()] if rc == 0 else None
            # <s>[INST] Hello [/INST] Hi there </s><s>[INST] Bye [/INST]: each piece after a special token
            # gets its own "▁" prefix, as Hugging Face's LLaMA tokenizer encodes the pieces between them
            plain = encode_plain(ctrain, tok, ["[INST] Hello [/INST] Hi there ", "[INST] Bye [/INST]"])
            want = [1] + plain[0] + [2, 1] + plain[1]
            check(got == want, "--chat (LLaMA-2, SentencePiece): <s> and </s> as ids 1 and 2",
                  "got %s\n  want %s\n  %s" % (got, want, err.strip()))
        else:
            print("SKIP: --chat with LLaMA's tokenizer: %s missing (scripts/fetch_data.sh)" % LLAMA_JSON)


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    ctrain = os.path.abspath(sys.argv[1])
    if shutil.which("node") is None:
        print("SKIP: node is not installed (the reference runs on it); apt-get install nodejs npm")
        return 0
    if not os.path.exists(PACKAGE):
        print("SKIP: @huggingface/jinja is missing from deps/npm; run scripts/fetch_data.sh")
        return 0
    render_parity(ctrain)
    construct_parity(ctrain)
    cli_errors(ctrain)
    if os.path.exists(os.path.join(GPT2_DIR, "encoder.json")):
        chat_ids(ctrain)
    else:
        print("SKIP: --chat ids: data/gpt2-tokenizer missing (scripts/fetch_data.sh)")
    print("test_chat_template: %d checks, %d failed" % (checks, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
