"""Reference LLaMA (and its kin: Mistral, Qwen2/2.5, Qwen3, Llama 3.x) in PyTorch for the
golden tests, written to Hugging Face's LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM and Qwen3ForCausalLM semantics (dropout only when forward() is asked for
it: attention_dropout on the probabilities, their attention's only dropout). The family
is the config dict's "model_type" (default "llama"):

- RMSNorm in float32: x * rsqrt(mean(x^2) + eps), then times the weight;
- q_proj (n_heads * head_dim, C), k_proj and v_proj (n_kv * head_dim, C), o_proj
  (C, n_heads * head_dim); head_dim = config["head_dim"] when given (Qwen3's differs
  from C / heads), else C / heads;
- biases on q, k and v for qwen2, on q, k, v and o when "attention_bias" (llama, qwen3);
- qwen3: RMSNorm over each q and k head (q_norm, k_norm weights of head_dim, eps
  rms_norm_eps) right after the projection, before RoPE;
- rotary embedding on q and k, rotate_half convention (pairs (i, i + d/2)),
  inv_freq = 1 / theta^(2i/d) computed in float32, then rope_scaling ("linear": / factor;
  "llama3": HF's _compute_llama3_parameters, low frequencies / factor, high ones kept,
  the band between interpolated), angles = position * inv_freq;
- grouped-query attention: KV head g serves query heads g*n_rep .. (g+1)*n_rep - 1
  (repeat_kv), causal softmax(q k^T / sqrt(d)) v;
- SwiGLU MLP: down(silu(gate(x)) * up(x));
- lm_head untied unless tie_word_embeddings;
- gemma3_text (Gemma3ForCausalLM): embeddings times sqrt(hidden) (an fp32 scale), every
  RMSNorm scaling by 1 + weight in fp32, q/k norms, norms also after the attention and
  after the MLP (post_attention_layernorm, post_feedforward_layernorm; the MLP's input
  norm is pre_feedforward_layernorm), GeGLU (tanh GELU), scores scaled by
  query_pre_attn_scalar^-0.5, and sliding layers (all but every sliding_window_pattern-th)
  whose queries see their last sliding_window keys and whose RoPE base is
  rope_local_base_freq (unscaled).

Parameters are a plain dict {HF tensor name: tensor}, Linear weights [out, in].
File helpers (safetensors, shards) come from gpt2_ref; this adds the configs and sharded
model directories (model-0000i-of-0000n.safetensors + model.safetensors.index.json).
"""

import json
import math
import os
from collections import namedtuple

import numpy as np

import gpt2_ref as G

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - reported by the caller
    torch = None
    F = None


def family(c):
    return c.get("model_type", "llama")


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def qkv_bias(c):
    return family(c) == "qwen2" or bool(c.get("attention_bias", False))


def o_bias(c):
    return family(c) != "qwen2" and bool(c.get("attention_bias", False))


def qk_norm(c):
    return family(c) in ("qwen3", "gemma3_text")


def gemma(c):
    return family(c) == "gemma3_text"


def layer_slides(c, l):
    """Gemma 3: every sliding_window_pattern-th layer is global, the others slide."""
    if not gemma(c):
        return False
    if c.get("layer_types"):
        return c["layer_types"][l] == "sliding_attention"
    return (l + 1) % c.get("sliding_window_pattern", 6) != 0


def param_shapes(c):
    """{name: shape} in HF order."""
    C, Fd, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = head_dim(c)
    QC, KC = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    out = {"model.embed_tokens.weight": (V, C)}
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        out[p + "input_layernorm.weight"] = (C,)
        out[p + "self_attn.q_proj.weight"] = (QC, C)
        if qkv_bias(c):
            out[p + "self_attn.q_proj.bias"] = (QC,)
        out[p + "self_attn.k_proj.weight"] = (KC, C)
        if qkv_bias(c):
            out[p + "self_attn.k_proj.bias"] = (KC,)
        out[p + "self_attn.v_proj.weight"] = (KC, C)
        if qkv_bias(c):
            out[p + "self_attn.v_proj.bias"] = (KC,)
        out[p + "self_attn.o_proj.weight"] = (C, QC)
        if o_bias(c):
            out[p + "self_attn.o_proj.bias"] = (C,)
        if qk_norm(c):
            out[p + "self_attn.q_norm.weight"] = (d,)
            out[p + "self_attn.k_norm.weight"] = (d,)
        out[p + "post_attention_layernorm.weight"] = (C,)
        if gemma(c):
            out[p + "pre_feedforward_layernorm.weight"] = (C,)
        out[p + "mlp.gate_proj.weight"] = (Fd, C)
        out[p + "mlp.up_proj.weight"] = (Fd, C)
        out[p + "mlp.down_proj.weight"] = (C, Fd)
        if gemma(c):
            out[p + "post_feedforward_layernorm.weight"] = (C,)
    out["model.norm.weight"] = (C,)
    if not c.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (V, C)
    return out


def init_params(c, seed=0):
    """Random weights: matrices N(0, 0.08) (larger than HF's 0.02, so every path matters),
    norm weights 1 + U(-0.3, 0.3) and biases 0.1 N(0, 1) (random, so their gradients are
    tested)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for n, shape in param_shapes(c).items():
        if n.endswith(".bias"):
            out[n] = 0.1 * torch.randn(shape, generator=g)
        elif len(shape) == 1:  # Gemma stores the scale's offset from 1
            out[n] = (0.0 if gemma(c) else 1.0) + 0.6 * (torch.rand(shape, generator=g) - 0.5)
        else:
            out[n] = 0.08 * torch.randn(shape, generator=g)
    return out


def rms_norm(x, w, eps, offset=False):
    x32 = x.float()
    var = x32.pow(2).mean(-1, keepdim=True)
    if offset:  # Gemma3RMSNorm: the scale is 1 + weight, in fp32
        return ((x32 * torch.rsqrt(var + eps)) * (1.0 + w.float())).to(x.dtype)
    return w * (x32 * torch.rsqrt(var + eps)).to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def inv_freq(d, theta, scaling=None):
    """RoPE's inverse frequencies as HF computes them (fp32), scaled by rope_scaling."""
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    if not scaling:
        return inv
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / scaling["factor"]
    assert kind == "llama3", kind
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    low_wl, high_wl = old / low, old / high
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > low_wl, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
    return torch.where(medium, smoothed, inv_l)


def rope_cos_sin(T, d, theta, dtype, scaling=None):
    t = torch.arange(T, dtype=torch.int64).float()
    freqs = torch.outer(t, inv_freq(d, theta, scaling))
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope_cos_sin_at(pos, d, theta, dtype, scaling=None):
    """cos, sin (B, 1, T, d) at positions pos (int64 (B, T)): HF's position_ids. The angle
    pos * inv_freq is the same float32 product rope_cos_sin forms for pos = 0..T-1."""
    freqs = pos.float()[..., None] * inv_freq(d, theta, scaling)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def linear(P, h, path):
    """A Linear module of the model: h @ W^T (+ b when the family has one)."""
    y = h @ P[path + ".weight"].T
    b = P.get(path + ".bias")
    return y if b is None else y + b


def forward(P, c, idx, targets=None, pos=None, attn_mask=None, dropout=None, lin=None):
    """Logits (B, T, V) and the mean cross-entropy (or None) of token ids idx (B, T).

    pos: optional int64 (B, T) rotary position of each token (HF's position_ids; default
    0..T-1 in every row). attn_mask: optional bool (B, T, T), True where query t may
    attend to key s (default causal). Instruction data (sft_ref.py) passes both.
    dropout: None (eval), a dict {"h.<l>.attn_probs": (B, NH, T, T) multipliers}
    (ctrain's debug.dump_dropout masks without "mb<a>."; absent layers are not dropped),
    or a float p: torch's own dropout of the probabilities (train mode).
    lin: optional lin(P, h, module path) for every Linear of the blocks (LoRA's hook;
    default `linear`)."""
    lin = lin or linear
    Bn, T = idx.shape
    C, NH, NKV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    d, rep = head_dim(c), NH // NKV
    eps, theta, scaling = c["rms_norm_eps"], c["rope_theta"], c.get("rope_scaling")
    gm = gemma(c)
    x = P["model.embed_tokens.weight"][idx]
    if gm:  # Gemma3TextScaledWordEmbedding: times sqrt(hidden) as an fp32 tensor
        x = x * torch.tensor(C ** 0.5).to(x.dtype)
    rope = (rope_cos_sin if pos is None else rope_cos_sin_at)
    at = T if pos is None else pos
    cos, sin = rope(at, d, theta, x.dtype, scaling)
    if gm:
        cos_l, sin_l = rope(at, d, c.get("rope_local_base_freq", 10000.0), x.dtype, None)
    if attn_mask is None:
        mask = torch.ones(T, T, dtype=torch.bool).tril()
    else:
        mask = attn_mask.to(torch.bool)[:, None]                                  # (B,1,T,T)
    if gm:  # sliding layers: query i sees keys j with i - j < sliding_window
        i = torch.arange(T)
        window = (i[:, None] - i[None, :]) < c["sliding_window"]
        mask_l = mask & window
    scale = (c.get("query_pre_attn_scalar", d) if gm else d) ** -0.5
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        slides = layer_slides(c, l)
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps, gm)
        q = lin(P, h, p + "self_attn.q_proj").view(Bn, T, NH, d)
        k = lin(P, h, p + "self_attn.k_proj").view(Bn, T, NKV, d)
        v = lin(P, h, p + "self_attn.v_proj").view(Bn, T, NKV, d).transpose(1, 2)
        if qk_norm(c):  # Qwen3, Gemma 3: per head, before the transpose and RoPE
            q = rms_norm(q, P[p + "self_attn.q_norm.weight"], eps, gm)
            k = rms_norm(k, P[p + "self_attn.k_norm.weight"], eps, gm)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        cs, sn = (cos_l, sin_l) if slides else (cos, sin)
        q = q * cs + rotate_half(q) * sn
        k = k * cs + rotate_half(k) * sn
        # repeat_kv: (B, NKV, T, d) -> (B, NKV * rep, T, d)
        k = k[:, :, None].expand(Bn, NKV, rep, T, d).reshape(Bn, NH, T, d)
        v = v[:, :, None].expand(Bn, NKV, rep, T, d).reshape(Bn, NH, T, d)
        att = (q @ k.transpose(-2, -1)) * scale
        att = att.masked_fill(~(mask_l if slides else mask), float("-inf"))
        att = torch.softmax(att.float(), dim=-1).to(q.dtype)
        if isinstance(dropout, dict) and ("h.%d.attn_probs" % l) in dropout:
            att = att * torch.as_tensor(np.asarray(dropout["h.%d.attn_probs" % l]), dtype=att.dtype)
        elif dropout is not None and not isinstance(dropout, dict) and dropout > 0:
            att = F.dropout(att, dropout, training=True)
        y = (att @ v).transpose(1, 2).reshape(Bn, T, NH * d)
        y = lin(P, y, p + "self_attn.o_proj")
        if gm:
            y = rms_norm(y, P[p + "post_attention_layernorm.weight"], eps, True)
        x = x + y
        pre = "pre_feedforward_layernorm" if gm else "post_attention_layernorm"
        h = rms_norm(x, P[p + pre + ".weight"], eps, gm)
        gate = lin(P, h, p + "mlp.gate_proj")
        up = lin(P, h, p + "mlp.up_proj")
        act = F.gelu(gate, approximate="tanh") if gm else F.silu(gate)
        y = lin(P, act * up, p + "mlp.down_proj")
        if gm:
            y = rms_norm(y, P[p + "post_feedforward_layernorm.weight"], eps, True)
        x = x + y
    x = rms_norm(x, P["model.norm.weight"], eps, gm)
    head = P["model.embed_tokens.weight"] if c.get("tie_word_embeddings", False) else P["lm_head.weight"]
    logits = x @ head.T
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    return logits, loss


def loss_on_batch(params, c, x, y):
    P = {n: torch.as_tensor(np.asarray(t) if not torch.is_tensor(t) else t).float()
         for n, t in params.items()}
    with torch.no_grad():
        _, loss = forward(P, c, torch.as_tensor(np.asarray(x), dtype=torch.long),
                          torch.as_tensor(np.asarray(y), dtype=torch.long))
    return float(loss)


ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                 "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "gemma3_text": "Gemma3ForCausalLM"}


def hf_config(c):
    """The family's config dict as transformers writes it."""
    fam = family(c)
    out = {
        "architectures": [ARCHITECTURES[fam]],
        "model_type": fam,
        "hidden_act": "silu",
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "rope_scaling": None,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    if fam == "llama":
        out.update(attention_bias=False, mlp_bias=False, pretraining_tp=1)
    elif fam == "gemma3_text":
        out.pop("hidden_act")
        out.update(hidden_activation="gelu_pytorch_tanh", attention_bias=False,
                   query_pre_attn_scalar=c.get("head_dim", 256), final_logit_softcapping=None,
                   attn_logit_softcapping=None, rope_local_base_freq=10000.0,
                   sliding_window_pattern=6, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    elif fam == "mistral":
        out.update(sliding_window=None)
    else:
        out.update(use_sliding_window=False, sliding_window=4096, max_window_layers=28)
        if fam == "qwen3":
            out.update(attention_bias=False)
    out.update(c)
    return out


def save_hf_dir(path, c, params, bf16=False, shards=1, config_extra=None):
    """Write an HF LLaMA directory: config.json and model.safetensors (F32 or BF16), or
    `shards` files model-0000i-of-0000n.safetensors with model.safetensors.index.json."""
    os.makedirs(path, exist_ok=True)
    cfg = hf_config(c)
    cfg.update(config_extra or {})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    names = list(param_shapes(c))
    dtype = "BF16" if bf16 else "F32"
    if shards <= 1:
        G.write_safetensors(os.path.join(path, "model.safetensors"),
                            {n: params[n] for n in names}, dtype=dtype)
        return
    weight_map, total = {}, 0
    for i in range(shards):
        fname = "model-%05d-of-%05d.safetensors" % (i + 1, shards)
        part = names[i::shards]
        G.write_safetensors(os.path.join(path, fname), {n: params[n] for n in part}, dtype=dtype)
        for n in part:
            weight_map[n] = fname
            total += int(np.prod(param_shapes(c)[n])) * (2 if bf16 else 4)
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


TrainResult = namedtuple("TrainResult", "losses grad_norms grads params")


def train_torch(params, c, tokens, B, T, steps, lr, beta1, beta2, eps, weight_decay,
                grad_clip, grads_step=1):
    """torch.optim.AdamW (foreach=False) on sequential batches (ctrain's data.shuffle=false
    order), weight decay on tensors of rank >= 2 only; per step: loss, pre-clip global
    grad norm, clipping when grad_clip > 0. Returns per-step losses and norms, the grads of
    `grads_step` and the final parameters ({name: numpy float32})."""
    torch.set_num_threads(1)
    names = list(param_shapes(c))
    P = {n: torch.as_tensor(np.asarray(params[n]) if not torch.is_tensor(params[n]) else params[n])
         .detach().clone().float().contiguous().requires_grad_(True) for n in names}
    decay = [P[n] for n in names if P[n].ndim >= 2]
    no_decay = [P[n] for n in names if P[n].ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(beta1, beta2), eps=eps, foreach=False)
    plist = [P[n] for n in names]
    batches = G.sequential_batches(tokens, B, T)
    losses, norms, grads = [], [], None
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=False)
        x, y = next(batches)
        _, loss = forward(P, c, torch.from_numpy(x), torch.from_numpy(y))
        loss.backward()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            norms.append(float(torch.norm(torch.stack([p.grad.norm(2) for p in plist]), 2)))
        if step == grads_step:
            grads = {n: P[n].grad.detach().numpy().copy() for n in names}
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, grad_clip)
        opt.step()
    return TrainResult(losses, norms, grads, {n: P[n].detach().numpy().copy() for n in names})
