"""Reference GPT-2 in PyTorch, and the file formats the golden tests exchange with ctrain.

The model's math equals Hugging Face's GPT2LMHeadModel in eval mode (dropout only when
forward() is asked for it, in train mode's places: see `dropout`): learned positions,
pre-LayerNorm blocks (eps 1e-5), Conv1D weights stored [in, out] (y = x @ W + b), causal
attention scaled by 1/sqrt(head_size), GELU in its tanh form ("gelu_new"), a final LayerNorm
and a head tied to wte. The loss is the mean cross-entropy over all B*T targets.
Parameters are a plain dict {HF tensor name without prefix: tensor}, so what is saved is
exactly what Hugging Face (and ctrain) read.

File helpers (numpy only; no `safetensors` or `transformers` package needed):
safetensors read/write (F32, BF16, F16), HF config.json, llm.c token shards (v1/v2).
Deliberately left out: sampling, tokenizers, anything but CPU float math.
"""

import json
import math
import os
from collections import namedtuple

import numpy as np

try:  # the file helpers work without torch; the model and the trainer need it
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - reported by the caller
    torch = None
    F = None


# ----------------------------------------------------------------------------------------
# Names, shapes, config

def param_names(n_layer):
    """HF GPT-2 tensor names (no `transformer.` prefix), in model order."""
    names = ["wte.weight", "wpe.weight"]
    for i in range(n_layer):
        p = "h.%d." % i
        names += [p + "ln_1.weight", p + "ln_1.bias",
                  p + "attn.c_attn.weight", p + "attn.c_attn.bias",
                  p + "attn.c_proj.weight", p + "attn.c_proj.bias",
                  p + "ln_2.weight", p + "ln_2.bias",
                  p + "mlp.c_fc.weight", p + "mlp.c_fc.bias",
                  p + "mlp.c_proj.weight", p + "mlp.c_proj.bias"]
    names += ["ln_f.weight", "ln_f.bias"]
    return names


def normalize_config(config):
    """Config dict with the keys the model uses: vocab_size, n_ctx, n_embd, n_layer, n_head, eps.

    Accepts either our short form or an HF GPT2Config dict (n_positions / layer_norm_epsilon).
    """
    n_ctx = config.get("n_ctx", config.get("n_positions"))
    out = {
        "vocab_size": int(config["vocab_size"]),
        "n_ctx": int(n_ctx),
        "n_embd": int(config["n_embd"]),
        "n_layer": int(config["n_layer"]),
        "n_head": int(config["n_head"]),
        "eps": float(config.get("layer_norm_epsilon", config.get("eps", 1e-5))),
    }
    if out["n_embd"] % out["n_head"]:
        raise ValueError("n_embd %d is not a multiple of n_head %d" % (out["n_embd"], out["n_head"]))
    return out


def param_shapes(config):
    """{name: shape} in HF layout (Conv1D weights [in, out])."""
    c = normalize_config(config)
    V, N, C = c["vocab_size"], c["n_ctx"], c["n_embd"]
    shapes = {"wte.weight": (V, C), "wpe.weight": (N, C)}
    for i in range(c["n_layer"]):
        p = "h.%d." % i
        shapes.update({
            p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
            p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
            p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
            p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
            p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
            p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,),
        })
    shapes["ln_f.weight"] = (C,)
    shapes["ln_f.bias"] = (C,)
    return shapes


def _need_torch():
    if torch is None:
        raise RuntimeError("PyTorch is required here (Debian: apt-get install python3-torch)")


def init_params(config, seed=0, random_norms_and_biases=True):
    """Random GPT-2 parameters {name: float32 tensor}.

    Matrices and embeddings ~ N(0, 0.02) (c_proj weights scaled by 1/sqrt(2*n_layer) as in
    GPT-2). With random_norms_and_biases, LayerNorm weights are 1 + 0.1*N(0,1) and every bias
    is 0.1*N(0,1), so no gradient path is hidden behind a 1 or a 0; otherwise HF's init
    (ones and zeros).
    """
    _need_torch()
    c = normalize_config(config)
    g = torch.Generator().manual_seed(int(seed))
    params = {}
    for name, shape in param_shapes(c).items():
        if len(shape) >= 2:
            std = 0.02
            if name.endswith("c_proj.weight"):
                std = 0.02 / math.sqrt(2 * c["n_layer"])
            t = torch.randn(shape, generator=g, dtype=torch.float32) * std
        elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
            t = (1.0 + 0.1 * torch.randn(shape, generator=g, dtype=torch.float32)
                 if random_norms_and_biases else torch.ones(shape))
        else:
            t = (0.1 * torch.randn(shape, generator=g, dtype=torch.float32)
                 if random_norms_and_biases else torch.zeros(shape))
        params[name] = t.float().contiguous()
    return params


# ----------------------------------------------------------------------------------------
# Model

def gelu_new(x):
    """HF "gelu_new": 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _dropout(x, name, dropout, p):
    """x after the dropout `name` of forward(): x times dropout[name] when dropout is a
    dict of masks (absent: x unchanged), torch's own F.dropout(x, p) (train mode) when
    dropout holds probabilities, else x."""
    if dropout is None:
        return x
    if isinstance(dropout, dict):
        m = dropout.get(name)
        return x if m is None else x * torch.as_tensor(np.asarray(m), dtype=x.dtype)
    return F.dropout(x, p, training=True) if p > 0 else x


def forward(params, config, idx, targets=None, pos=None, attn_mask=None, dropout=None):
    """Logits (B, T, V) and, when targets are given, the mean cross-entropy over B*T.

    idx, targets: int64 tensors (B, T). params: {name: tensor} in HF layout.
    pos: optional int64 (B, T) position of each token (wpe row; default 0..T-1 in every
    row). attn_mask: optional bool (B, T, T), True where query t may attend to key s
    (default causal). Instruction data (sft_ref.py) passes both; each row then needs at
    least one True per query.
    dropout: None (eval: no dropout), or where GPT2Model applies it in train mode
    (drop(wte + wpe); attn_dropout on the probabilities after the softmax; resid_dropout
    on the attention's and the MLP's c_proj outputs) either given masks, a dict
    {"embd": (B,T,C), "h.<i>.attn_probs": (B,H,T,T), "h.<i>.attn_resid": (B,T,C),
    "h.<i>.mlp_resid": (B,T,C)} of multipliers (0 or 1/(1-p): ctrain's debug.dump_dropout
    masks without the "mb<a>." prefix; absent names are not dropped), or torch's own
    nn.Dropout with probabilities (embd_pdrop, resid_pdrop, attn_pdrop).
    """
    _need_torch()
    c = normalize_config(config)
    C, H, eps = c["n_embd"], c["n_head"], c["eps"]
    hs = C // H
    B, T = idx.shape
    if T > c["n_ctx"]:
        raise ValueError("sequence length %d exceeds n_ctx %d" % (T, c["n_ctx"]))
    P = params
    if pos is None:
        pos = torch.arange(T, device=idx.device)
        x = F.embedding(idx, P["wte.weight"]) + F.embedding(pos, P["wpe.weight"])[None]
    else:
        if int(pos.max()) >= c["n_ctx"] or int(pos.min()) < 0:
            raise ValueError("positions must lie in [0, n_ctx %d)" % c["n_ctx"])
        x = F.embedding(idx, P["wte.weight"]) + F.embedding(pos, P["wpe.weight"])
    pe, pr, pa = (0.0, 0.0, 0.0) if dropout is None or isinstance(dropout, dict) else dropout
    x = _dropout(x, "embd", dropout, pe)
    if attn_mask is None:
        causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
    else:
        causal = attn_mask.to(torch.bool)[:, None]                                # (B,1,T,T)
    for i in range(c["n_layer"]):
        p = "h.%d." % i
        # attention sub-block
        h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = h @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]       # (B,T,3C)
        q, k, v = qkv.split(C, dim=2)
        q = q.reshape(B, T, H, hs).transpose(1, 2)                                # (B,H,T,hs)
        k = k.reshape(B, T, H, hs).transpose(1, 2)
        v = v.reshape(B, T, H, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)                           # (B,H,T,T)
        att = att.masked_fill(~causal, float("-inf"))
        att = torch.softmax(att, dim=-1)
        att = _dropout(att, p + "attn_probs", dropout, pa)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        y = y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        x = x + _dropout(y, p + "attn_resid", dropout, pr)
        # MLP sub-block
        h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        h = h @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"]
        h = gelu_new(h)
        h = h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
        x = x + _dropout(h, p + "mlp_resid", dropout, pr)
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], eps)
    logits = x @ P["wte.weight"].t()                                              # tied head
    if targets is None:
        return logits, None
    loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
    return logits, loss


def loss_on_batch(params, config, x, y, dtype=None):
    """Mean cross-entropy of one batch (x, y: int arrays (B, T)) as a Python float."""
    _need_torch()
    dtype = dtype or torch.float32
    P = {n: torch.as_tensor(np.asarray(t) if not torch.is_tensor(t) else t).to(dtype)
         for n, t in params.items()}
    with torch.no_grad():
        _, loss = forward(P, config, torch.as_tensor(np.asarray(x), dtype=torch.long),
                          torch.as_tensor(np.asarray(y), dtype=torch.long))
    return float(loss)


# ----------------------------------------------------------------------------------------
# Data

def sequential_batches(tokens, B, T):
    """Endless (x, y) int64 arrays of shape (B, T), in ctrain's `data.shuffle=false` order.

    Micro-batch m (counted across steps and accumulation) reads the window starting at
    p = m*B*T: row b is tokens[p + b*T : p + b*T + T], targets are shifted by one. When a
    window of B*T + 1 tokens no longer fits, p returns to 0 (llm.c's loader).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    n = B * T
    if len(tokens) < n + 1:
        raise ValueError("%d tokens cannot fill one batch of B*T+1 = %d" % (len(tokens), n + 1))
    p = 0
    while True:
        if p + n + 1 > len(tokens):
            p = 0
        buf = tokens[p:p + n + 1]
        yield buf[:-1].reshape(B, T).copy(), buf[1:].reshape(B, T).copy()
        p += n


SHARD_MAGIC = 20240520


def write_shard(path, tokens, version=1):
    """llm.c token shard: 256 little-endian int32 header (magic, version, ntokens, 0...),
    then the tokens as little-endian uint16 (version 1) or uint32 (version 2)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if version not in (1, 2):
        raise ValueError("shard version must be 1 or 2")
    limit = 1 << (16 if version == 1 else 32)
    if len(tokens) and (tokens.min() < 0 or tokens.max() >= limit):
        raise ValueError("token ids out of range for shard version %d" % version)
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2" if version == 1 else "<u4").tobytes())


def read_shard(path):
    """Tokens (int64 array) of an llm.c shard; checks magic, version and size."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 1024:
        raise ValueError("%s: shorter than the 1024-byte header" % path)
    header = np.frombuffer(data[:1024], dtype="<i4")
    if header[0] != SHARD_MAGIC:
        raise ValueError("%s: bad magic %d (expected %d)" % (path, header[0], SHARD_MAGIC))
    version, n = int(header[1]), int(header[2])
    if version not in (1, 2):
        raise ValueError("%s: unsupported version %d" % (path, version))
    dt = "<u2" if version == 1 else "<u4"
    body = data[1024:]
    if len(body) != n * np.dtype(dt).itemsize:
        raise ValueError("%s: header says %d tokens, file holds %d bytes of tokens" % (path, n, len(body)))
    return np.frombuffer(body, dtype=dt).astype(np.int64)


# ----------------------------------------------------------------------------------------
# safetensors (by hand: u64 LE header size, JSON header, raw little-endian data)

def f32_to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bits, round to nearest even (NaN stays NaN)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # keep it a quiet NaN
    return rounded


def bf16_bits_to_f32(bits):
    """uint16 bfloat16 bits -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_round(a):
    """float32 values rounded to the nearest bfloat16, returned as float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(a)).reshape(np.shape(a))


_ST_NP = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I64": "<i8", "I32": "<i4",
          "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def _to_numpy(t):
    if torch is not None and torch.is_tensor(t):
        return t.detach().cpu().float().numpy()
    return np.asarray(t)


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """Write {name: array/tensor} as safetensors; dtype F32, BF16 or F16 (floats converted)."""
    if dtype not in ("F32", "BF16", "F16"):
        raise ValueError("dtype must be F32, BF16 or F16")
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(_to_numpy(tensors[name]), dtype=np.float32)
        if dtype == "F32":
            raw = a.astype("<f4").tobytes()
        elif dtype == "F16":
            with np.errstate(over="ignore"):  # out-of-range values become +-inf, as in torch
                raw = a.astype("<f2").tobytes()
        else:
            raw = f32_to_bf16_bits(a).astype("<u2").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(hjson).to_bytes(8, "little"))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def read_safetensors(path, return_dtypes=False):
    """{name: numpy array} of a safetensors file. BF16 is converted (exactly) to float32,
    F16 stays float16, F32 float32. With return_dtypes, also {name: stored dtype string}."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    hlen = int.from_bytes(data[:8], "little")
    if 8 + hlen > len(data):
        raise ValueError("%s: header length %d runs past the end of the file" % (path, hlen))
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    body = memoryview(data)[8 + hlen:]
    out, dtypes = {}, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], tuple(int(s) for s in info["shape"])
        b, e = (int(v) for v in info["data_offsets"])
        if not (0 <= b <= e <= len(body)):
            raise ValueError("%s: %s: data_offsets [%d, %d] outside the data (%d bytes)"
                             % (path, name, b, e, len(body)))
        count = int(np.prod(shape)) if shape else 1
        if dt == "BF16":
            if e - b != 2 * count:
                raise ValueError("%s: %s: %d bytes for %d BF16 values" % (path, name, e - b, count))
            arr = bf16_bits_to_f32(np.frombuffer(body[b:e], dtype="<u2")).reshape(shape)
        elif dt in _ST_NP:
            npdt = np.dtype(_ST_NP[dt])
            if e - b != npdt.itemsize * count:
                raise ValueError("%s: %s: %d bytes for %d %s values" % (path, name, e - b, count, dt))
            arr = np.frombuffer(body[b:e], dtype=npdt).reshape(shape).astype(npdt.newbyteorder("="))
        else:
            raise ValueError("%s: %s: unsupported dtype %s" % (path, name, dt))
        out[name] = arr
        dtypes[name] = dt
    return (out, dtypes) if return_dtypes else out


def hf_config(config):
    """HF GPT2Config dict for our config (see normalize_config)."""
    c = normalize_config(config)
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": c["vocab_size"],
        "n_positions": c["n_ctx"],
        "n_ctx": c["n_ctx"],
        "n_embd": c["n_embd"],
        "n_layer": c["n_layer"],
        "n_head": c["n_head"],
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": c["eps"],
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "bos_token_id": c["vocab_size"] - 1,
        "eos_token_id": c["vocab_size"] - 1,
        "tie_word_embeddings": True,
    }


def save_hf_dir(path, config, params, bf16=False):
    """Write an HF GPT-2 model directory: config.json + model.safetensors (F32, or BF16)."""
    os.makedirs(path, exist_ok=True)
    shapes = param_shapes(config)
    missing = sorted(set(shapes) - set(params))
    if missing:
        raise ValueError("save_hf_dir: missing tensors %s" % missing)
    for n, shape in shapes.items():
        if tuple(np.shape(_to_numpy(params[n]))) != tuple(shape):
            raise ValueError("save_hf_dir: %s has shape %s, expected %s"
                             % (n, np.shape(_to_numpy(params[n])), shape))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config(config), f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(path, "model.safetensors"),
                      {n: params[n] for n in shapes}, dtype="BF16" if bf16 else "F32")


def load_hf_dir(path):
    """(config dict, {name: float32 array}) of an HF GPT-2 directory; strips `transformer.`,
    drops causal-mask buffers (attn.bias / attn.masked_bias) and a tied lm_head.weight."""
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    raw = read_safetensors(os.path.join(path, "model.safetensors"))
    params = {}
    for name, a in raw.items():
        n = name[len("transformer."):] if name.startswith("transformer.") else name
        if n.endswith(".attn.bias") or n.endswith(".attn.masked_bias") or n == "lm_head.weight":
            continue
        params[n] = np.asarray(a, dtype=np.float32)
    return config, params


# ----------------------------------------------------------------------------------------
# Training (the PyTorch side of the parity test)

TrainResult = namedtuple("TrainResult", "losses grad_norms grads params")


def train_torch(params, config, tokens, B, T, grad_accum, steps, lr, beta1, beta2, eps,
                weight_decay, grad_clip, grads_step=1, dtype=None):
    """Train with torch.optim.AdamW (foreach=False) on sequential batches.

    Two parameter groups: weight_decay on tensors with ndim >= 2 (matrices, wte, wpe),
    0 on biases and LayerNorm weights. Each step: zero the grads; for each of grad_accum
    micro-batches backward(loss / grad_accum); step loss = mean of the micro-batch losses;
    grad_norm = global L2 norm of all grads before clipping; clip if grad_clip > 0; step.
    Returns TrainResult(losses, grad_norms, grads, params): per-step lists of floats, the
    grads of step `grads_step` ({name: numpy}, HF layout, before clipping and the update),
    and the final parameters ({name: numpy float32}). The input params are not modified.
    """
    _need_torch()
    dtype = dtype or torch.float32
    torch.set_num_threads(1)
    names = param_names(normalize_config(config)["n_layer"])
    P = {}
    for n in names:
        t = params[n]
        t = t.detach().clone() if torch.is_tensor(t) else torch.tensor(np.asarray(t))
        P[n] = t.to(dtype).contiguous().requires_grad_(True)
    decay = [P[n] for n in names if P[n].ndim >= 2]
    no_decay = [P[n] for n in names if P[n].ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(beta1, beta2), eps=eps, foreach=False)
    plist = [P[n] for n in names]
    batches = sequential_batches(tokens, B, T)
    losses, grad_norms, grads = [], [], None
    for step in range(1, steps + 1):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for _ in range(grad_accum):
            x, y = next(batches)
            _, loss = forward(P, config, torch.from_numpy(x), torch.from_numpy(y))
            (loss / grad_accum).backward()
            total += float(loss.detach())
        losses.append(total / grad_accum)
        with torch.no_grad():
            norm = torch.norm(torch.stack([p.grad.detach().norm(2) for p in plist]), 2)
        grad_norms.append(float(norm))
        if step == grads_step:
            grads = {n: P[n].grad.detach().float().numpy().copy() for n in names}
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, grad_clip)
        opt.step()
    final = {n: P[n].detach().float().numpy().copy() for n in names}
    return TrainResult(losses, grad_norms, grads, final)
