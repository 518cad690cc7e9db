"""Reference LoRA in PyTorch for the golden tests, following PEFT's LoraLayer semantics
(peft/tuners/lora/layer.py, `Linear.forward` with one adapter, no DoRA, no rsLoRA):

    result = base_layer(x) + lora_B(lora_A(dropout(x))) * scaling,  scaling = lora_alpha / r

with lora_A.weight (r, in) and lora_B.weight (out, r). GPT-2's Conv1D base layers keep
their own x @ W + b (W stored [in, out]); PEFT's fan_in_fan_out only changes how the delta
is merged (transposed), not the adapter's shapes. Dropout is left out (the parity runs use
lora_dropout = 0, where PEFT uses nn.Identity).

The base forwards repeat llama_ref.forward and gpt2_ref.forward with every adapted linear
routed through `lin`, so no weight is ever merged during training. Adapters are dicts
{module path: (A, B)} with PEFT's module paths ("model.layers.0.self_attn.q_proj",
"transformer.h.0.attn.c_attn"); files use "base_model.model.<path>.lora_A.weight".

modules_to_save (PEFT's ModulesToSaveWrapper): the adapter dict may also hold
"model.embed_tokens" and "lm_head" mapped to a single tensor, a trainable copy of that
module's weight used in place of the base's; the copies are independent, so on a tied base
a copied head no longer shares the embedding (and the other way round). Files hold them as
"base_model.model.<module>.weight".
"""

import json
import math
import os
from collections import namedtuple

import numpy as np
import torch
import torch.nn.functional as F

import gpt2_ref as G
import llama_ref as R

LLAMA_KINDS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
GPT2_KINDS = ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]


def modules(arch, n_layer, kinds):
    pre = "model.layers.%d." if arch == "llama" else "transformer.h.%d."
    return [pre % l + k for l in range(n_layer) for k in kinds]


def base_weight_name(arch, path):
    """The base tensor a module path adapts, as the base dicts name it."""
    n = path + ".weight"
    return n[len("transformer."):] if arch == "gpt2" else n


def module_dims(arch, base, path):
    """(in, out) of the adapted module."""
    w = np.shape(base[base_weight_name(arch, path)])
    return (w[0], w[1]) if arch == "gpt2" else (w[1], w[0])  # Conv1D is [in, out]


SAVED = ("model.embed_tokens", "lm_head")


def add_saved(adapter, base, c, modules, seed):
    """modules_to_save copies: the base's embedding / head (the embedding when tied), moved
    a little (0.01 N(0, 1)) so the test can tell a loaded copy from the base's own."""
    g = torch.Generator().manual_seed(seed)
    for m in modules:
        src = "model.embed_tokens.weight" if (m == "model.embed_tokens" or
                                              c.get("tie_word_embeddings")) else "lm_head.weight"
        t = torch.as_tensor(np.asarray(base[src])).float()
        adapter[m] = t + 0.01 * torch.randn(t.shape, generator=g)
    return adapter


def make_adapter(arch, base, paths, r, seed):
    """PEFT's A init (kaiming-uniform with a=sqrt(5): U(-1/sqrt(in), 1/sqrt(in))) and a
    non-zero B ~ 0.05 N(0, 1), so that both factors get gradients from step 1."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for p in paths:
        i, o = module_dims(arch, base, p)
        bound = 1.0 / math.sqrt(i)
        A = (torch.rand((r, i), generator=g) * 2 - 1) * bound
        B = 0.05 * torch.randn((o, r), generator=g)
        out[p] = (A.float(), B.float())
    return out


def save_peft(path, adapter, r, alpha, targets, fan_in_fan_out, base_name=""):
    os.makedirs(path, exist_ok=True)
    saved = [m.split(".")[-1] for m in SAVED if m in adapter]
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": alpha,
           "lora_dropout": 0.0, "target_modules": targets, "bias": "none",
           "fan_in_fan_out": fan_in_fan_out, "base_model_name_or_path": base_name,
           "inference_mode": True, "modules_to_save": saved or None, "use_rslora": False,
           "use_dora": False}
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tensors = {}
    for p, v in adapter.items():
        if p in SAVED:
            tensors["base_model.model.%s.weight" % p] = v.detach().numpy()
            continue
        A, B = v
        tensors["base_model.model.%s.lora_A.weight" % p] = A.detach().numpy()
        tensors["base_model.model.%s.lora_B.weight" % p] = B.detach().numpy()
    G.write_safetensors(os.path.join(path, "adapter_model.safetensors"), tensors)


def load_peft(path):
    raw = G.read_safetensors(os.path.join(path, "adapter_model.safetensors"))
    out = {}
    for n in raw:
        if n.endswith(".lora_A.weight"):
            p = n[len("base_model.model."):-len(".lora_A.weight")]
            B = raw["base_model.model.%s.lora_B.weight" % p]
            out[p] = (torch.from_numpy(np.array(raw[n])), torch.from_numpy(np.array(B)))
    for m in SAVED:
        if "base_model.model.%s.weight" % m in raw:
            out[m] = torch.from_numpy(np.array(raw["base_model.model.%s.weight" % m]))
    return out


def _lora(x, adapter, path, scale):
    if path not in adapter or path in SAVED:
        return 0.0
    A, B = adapter[path]
    return (x @ A.T) @ B.T * scale


def llama_forward(P, c, idx, targets, adapter, scale):
    """llama_ref.forward (any of its families) with LoRA on every adapted Linear."""

    def lin(P_, h, path):
        return R.linear(P_, h, path) + _lora(h, adapter, path, scale)

    if any(m in adapter for m in SAVED):
        # modules_to_save: the copies replace the base's modules, each on its own
        tied = c.get("tie_word_embeddings", False)
        P = dict(P)
        emb = P["model.embed_tokens.weight"]
        P["lm_head.weight"] = adapter.get("lm_head", emb if tied else P.get("lm_head.weight"))
        P["model.embed_tokens.weight"] = adapter.get("model.embed_tokens", emb)
        c = dict(c, tie_word_embeddings=False)
    return R.forward(P, c, idx, targets, lin=lin)


def gpt2_forward(P, config, idx, targets, adapter, scale):
    """gpt2_ref.forward with LoRA on every adapted Conv1D (x @ W + b, W [in, out])."""
    c = G.normalize_config(config)
    C, H, eps = c["n_embd"], c["n_head"], c["eps"]
    hs = C // H
    Bn, T = idx.shape

    def conv(h, name):
        return (h @ P[name + ".weight"] + P[name + ".bias"] +
                _lora(h, adapter, "transformer." + name, scale))

    pos = torch.arange(T)
    x = F.embedding(idx, P["wte.weight"]) + F.embedding(pos, P["wpe.weight"])[None]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(c["n_layer"]):
        p = "h.%d." % i
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        q, k, v = conv(h, p + "attn.c_attn").split(C, dim=2)
        q = q.reshape(Bn, T, H, hs).transpose(1, 2)
        k = k.reshape(Bn, T, H, hs).transpose(1, 2)
        v = v.reshape(Bn, T, H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, T, C)
        x = x + conv(y, p + "attn.c_proj")
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        x = x + conv(G.gelu_new(conv(h, p + "mlp.c_fc")), p + "mlp.c_proj")
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], eps)
    logits = x @ P["wte.weight"].t()
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(Bn * T, -1), targets.reshape(Bn * T))
    return logits, loss


def forward(arch, P, c, idx, targets, adapter, scale):
    fn = llama_forward if arch == "llama" else gpt2_forward
    return fn(P, c, idx, targets, adapter, scale)


TrainResult = namedtuple("TrainResult", "losses grad_norms adapter")


def train(arch, base, c, adapter, scale, tokens, B, T, steps, lr, beta1, beta2, eps,
          weight_decay, grad_clip):
    """torch.optim.AdamW (foreach=False) over the adapter factors only (every one decayed:
    all are matrices), the base frozen (requires_grad False); sequential batches; per step
    the loss and the pre-clip global grad norm, clipping when grad_clip > 0."""
    torch.set_num_threads(1)
    P = {n: torch.as_tensor(np.asarray(t) if not torch.is_tensor(t) else t).float()
         for n, t in base.items()}
    ad = {p: (v.detach().clone().requires_grad_(True) if p in SAVED else
              (v[0].detach().clone().requires_grad_(True), v[1].detach().clone().requires_grad_(True)))
          for p, v in adapter.items()}
    plist = [t for p in ad for t in ((ad[p],) if p in SAVED else ad[p])]
    opt = torch.optim.AdamW(plist, lr=lr, betas=(beta1, beta2), eps=eps,
                            weight_decay=weight_decay, foreach=False)
    batches = G.sequential_batches(tokens, B, T)
    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        x, y = next(batches)
        _, loss = forward(arch, P, c, torch.from_numpy(x), torch.from_numpy(y), ad, scale)
        loss.backward()
        losses.append(float(loss.detach()))
        with torch.no_grad():
            norms.append(float(torch.norm(torch.stack([t.grad.norm(2) for t in plist]), 2)))
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, grad_clip)
        opt.step()
    return TrainResult(losses, norms, {p: (v.detach() if p in SAVED else (v[0].detach(), v[1].detach()))
                                       for p, v in ad.items()})


def merge(arch, base, adapter, scale):
    """PEFT's merge: W + scaling * (B @ A), transposed for Conv1D (fan_in_fan_out)."""
    out = {n: torch.as_tensor(np.asarray(t) if not torch.is_tensor(t) else t).float().clone()
           for n, t in base.items()}
    for p, (A, Bm) in adapter.items():
        delta = (Bm @ A) * scale
        n = base_weight_name(arch, p)
        out[n] = out[n] + (delta.T if arch == "gpt2" else delta)
    return out
