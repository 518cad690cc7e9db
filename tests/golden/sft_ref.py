#!/usr/bin/env python3
"""Reference instruction fine-tuning (SFT) in PyTorch, rebuilt from the files alone.

Reads a `ctrain prepare --format sft` directory (llm.c shards + .sft sidecars), lays its
examples out in rows as include/ctrain/loader.h ("Instruction data") specifies (data.shuffle
true or false; packing on or off; group_by_length; world 1), and trains gpt2_ref / llama_ref with
torch.optim.AdamW. Attention is an explicit boolean mask (B, T, T): causal AND same example
(the padding after the last example is one more segment), and positions restart at 0 in
each example (GPT-2: wpe[pos]; LLaMA: RoPE at pos). A step's loss is the summed
cross-entropy of every counted target (>= 0) of its grad_accum micro-batches divided by
their number (transformers >= 4.46 with num_items_in_batch). Left out: several ranks,
dropout.

usage: /usr/bin/python3 sft_ref.py --selfcheck
       /usr/bin/python3 sft_ref.py --rows DIR --T 64 [--packing 0] [--B 2 --accum 1]
       /usr/bin/python3 sft_ref.py --train DIR --init HF_DIR [--B 2 --T 64 --accum 1
                                   --steps 10 --packing 1 --group-by-length 0 --shuffle 0
                                   --seed 0 --lr 3e-3 ...]
"""

import argparse
import glob
import json
import os
import struct
import sys
from collections import namedtuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt2_ref as G  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    import llama_ref as LR
except ImportError:  # pragma: no cover - reported by the caller
    torch = None
    F = None
    LR = None

SFT_MAGIC = 20261125
GROUP_RUN = 50  # group_by_length sorts runs of GROUP_RUN * B * world examples


# ----------------------------------------------------------------------------------------
# Files

def shard_paths(spec, split="train"):
    """The shards the loader takes from a directory: <split>_*.bin, else every *.bin,
    sorted by path."""
    paths = sorted(glob.glob(os.path.join(spec, "%s_*.bin" % split)))
    return paths or sorted(glob.glob(os.path.join(spec, "*.bin")))


def read_sidecar(path, ntok):
    """(offsets int64 (N+1,), mask uint8 (ntok,)) of a .sft sidecar (src/data/shard/sft_shard.c)."""
    with open(path, "rb") as f:
        raw = f.read()
    magic, version, n, t, counted = struct.unpack("<iiqqq", raw[:32])
    if magic != SFT_MAGIC or version != 1:
        raise ValueError("%s: not a version-1 SFT sidecar (magic %d, version %d)" % (path, magic, version))
    if t != ntok:
        raise ValueError("%s: %d tokens, its shard holds %d" % (path, t, ntok))
    if len(raw) != 32 + 8 * (n + 1) + (t + 7) // 8:
        raise ValueError("%s: %d bytes, expected %d" % (path, len(raw), 32 + 8 * (n + 1) + (t + 7) // 8))
    offs = np.frombuffer(raw[32:32 + 8 * (n + 1)], dtype="<i8").astype(np.int64)
    if offs[0] != 0 or offs[-1] != t or np.any(np.diff(offs) <= 0):
        raise ValueError("%s: bad offsets" % path)
    bits = np.frombuffer(raw[32 + 8 * (n + 1):], dtype=np.uint8)
    mask = np.unpackbits(bits, bitorder="little")[:t]
    if int(mask.sum()) != counted:
        raise ValueError("%s: %d mask bits set, header says %d" % (path, int(mask.sum()), counted))
    return offs, mask


def read_examples(spec, split="train"):
    """[(ids int64, mask uint8)] of every example of split: shards in sorted order, each
    shard's examples in order (numbered 0..E-1 as the loader numbers them)."""
    paths = shard_paths(spec, split)
    if not paths:
        raise ValueError("%s: no %s shards" % (spec, split))
    out = []
    for p in paths:
        ids = G.read_shard(p)
        offs, mask = read_sidecar(p[:-4] + ".sft", len(ids))
        for a, b in zip(offs[:-1], offs[1:]):
            out.append((ids[a:b].copy(), mask[a:b].copy()))
    return out


# ----------------------------------------------------------------------------------------
# Rows and batches (loader.h, "Instruction data")

Row = namedtuple("Row", "inputs targets pos examples")  # examples: [(index, column, length)]


M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(x):
    """splitmix64's finaliser, mod 2^64."""
    z = (x + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def shuffled(E, seed, epoch):
    """data.shuffle=true: loader.h's permutation of 0..E-1 for (seed, epoch)."""
    state = mix64(mix64(mix64(seed & M64) ^ (epoch & M64)) ^ 0)
    order = list(range(E))
    for i in range(E - 1, 0, -1):
        state = (state + GOLDEN) & M64
        j = mix64(state) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def epoch_order(examples, B, T, world=1, group_by_length=False, shuffle=False, seed=0, epoch=0):
    """Example indices in epoch order: 0..E-1, or shuffled(E, seed, epoch). group_by_length:
    runs of 50*B*world examples, each sorted by length min(tokens, T), longest first, stable."""
    order = shuffled(len(examples), seed, epoch) if shuffle else list(range(len(examples)))
    if not group_by_length:
        return order
    run = GROUP_RUN * B * world
    out = []
    for a in range(0, len(order), run):
        chunk = order[a:a + run]
        out += sorted(chunk, key=lambda i: -min(len(examples[i][0]), T))  # sorted() is stable
    return out


def empty_row(T):
    """All padding: input 0, target -1, pos 0, 1, 2, ..."""
    return Row(np.zeros(T, np.int64), np.full(T, -1, np.int64), np.arange(T, dtype=np.int64), [])


def place(row, col, ids, mask):
    """Put one (already truncated) example at column col: inputs, pos and its targets
    (x_{k+1} when token k+1's mask bit is set, else -1)."""
    n = len(ids)
    row.inputs[col:col + n] = ids
    row.pos[col:col + n] = np.arange(n)
    tg = np.full(n, -1, np.int64)
    tg[:-1] = np.where(mask[1:] != 0, ids[1:], -1)
    row.targets[col:col + n] = tg


def finish_row(row, used, T):
    """Padding after the last example: pos 0, 1, 2, ... from the first padding column."""
    row.pos[used:] = np.arange(T - used)


def build_rows(examples, order, T, packing):
    """The epoch's rows (before the empty ones) from examples taken in `order`. packing:
    greedily, an example joins the current row when it fits in what is left of its T
    tokens, else it starts the next row. Examples longer than T keep their first T."""
    rows, row, used = [], None, 0
    for i in order:
        ids, mask = examples[i]
        ids, mask = ids[:T], mask[:T]
        n = len(ids)
        if row is None or not packing or n > T - used:
            if row is not None:
                finish_row(row, used, T)
                rows.append(row)
            row, used = empty_row(T), 0
        place(row, used, ids, mask)
        row.examples.append((i, used, n))
        used += n
    if row is not None:
        finish_row(row, used, T)
        rows.append(row)
    return rows


class SftBatches:
    """The loader's micro-batches for world = 1: each epoch's rows, then empty rows up to a
    multiple of B*accum; micro-batch m of an epoch is rows [m*B, m*B+B); then the next
    epoch (the same rows unless shuffle, whose epochs may even differ in row count)."""

    def __init__(self, examples, B, T, accum=1, packing=True, group_by_length=False, world=1,
                 shuffle=False, seed=0):
        if world != 1:
            raise ValueError("the reference covers world = 1 only")
        self.B, self.T, self.accum, self.world = B, T, accum, world
        self.packing, self.group_by_length, self.shuffle, self.seed = packing, group_by_length, shuffle, seed
        self.examples = examples
        self.truncated = sum(1 for ids, _ in examples if len(ids) > T)
        self._plans = {}
        self.order, self.rows, self.all_rows = self.plan(0)
        self.nrows = len(self.all_rows)
        self.batches_per_epoch = self.nrows // B   # of epoch 0

    def plan(self, epoch):
        """(order, rows, rows with the empty ones) of an epoch."""
        if epoch not in self._plans:
            order = epoch_order(self.examples, self.B, self.T, self.world, self.group_by_length,
                                self.shuffle, self.seed, epoch)
            rows = build_rows(self.examples, order, self.T, self.packing)
            per = self.B * self.world * self.accum
            n = -(-len(rows) // per) * per
            self._plans[epoch] = (order, rows, rows + [empty_row(self.T) for _ in range(n - len(rows))])
        return self._plans[epoch]

    def batch(self, g):
        """Micro-batch g (counted over epochs): (inputs, targets, pos) int64 (B, T), rows."""
        e = 0
        while g >= len(self.plan(e)[2]) // self.B:
            g -= len(self.plan(e)[2]) // self.B
            e += 1
        rows = self.plan(e)[2][g * self.B:(g + 1) * self.B]
        return (np.stack([r.inputs for r in rows]), np.stack([r.targets for r in rows]),
                np.stack([r.pos for r in rows]), rows)

    def step(self, s):
        """The accum micro-batches of optimizer step s (1-based)."""
        return [self.batch((s - 1) * self.accum + k) for k in range(self.accum)]


def segments(pos):
    """Segment id of each token (B, T): a new segment starts wherever pos is 0."""
    pos = np.asarray(pos)
    return np.cumsum(pos == 0, axis=1)


def attention_mask(pos):
    """bool (B, T, T): query t may attend to key s when s <= t and both lie in the same
    segment (example, or the padding after the last one)."""
    seg = segments(pos)
    T = seg.shape[1]
    causal = np.tril(np.ones((T, T), dtype=bool))
    return (seg[:, :, None] == seg[:, None, :]) & causal[None]


def attention_mask_from_pos(pos):
    """The same mask written as model.h states it: token t attends to [t - pos[t], t]."""
    pos = np.asarray(pos)
    T = pos.shape[1]
    t = np.arange(T)[None, :, None]
    s = np.arange(T)[None, None, :]
    return (s <= t) & (s >= t - pos[:, :, None])


# ----------------------------------------------------------------------------------------
# Models

def model_names(arch, cfg):
    if arch == "gpt2":
        return G.param_names(G.normalize_config(cfg)["n_layer"])
    return list(LR.param_shapes(cfg))


def model_logits(arch, P, cfg, x, pos=None, mask=None):
    """Logits (B, T, V) of int64 tensors x (B, T); pos (B, T) and bool mask (B, T, T) or
    None (positions 0..T-1, causal)."""
    if arch == "gpt2":
        logits, _ = G.forward(P, cfg, x, pos=pos, attn_mask=mask)
    else:
        logits, _ = LR.forward(P, cfg, x, pos=pos, attn_mask=mask)
    return logits


def token_losses(arch, P, cfg, x, y, pos=None, mask=None):
    """Per-token cross-entropy (B, T); 0 where the target is < 0."""
    logits = model_logits(arch, P, cfg, x, pos, mask)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V).float(), y.reshape(-1), ignore_index=-1,
                           reduction="none").reshape(y.shape)


def as_params(arch, cfg, params):
    names = model_names(arch, cfg)
    return {n: (params[n].detach().clone() if torch.is_tensor(params[n]) else torch.tensor(np.asarray(params[n])))
            .float().contiguous().requires_grad_(True) for n in names}


TrainResult = namedtuple("TrainResult", "losses grad_norms counted grads params")


def train(arch, params, cfg, data, steps, lr, beta1, beta2, eps, weight_decay, grad_clip,
          grads_step=1):
    """AdamW (foreach=False; weight decay on tensors of rank >= 2) over data's batches
    (an SftBatches). Per step: zero the grads; n = counted targets of the step's accum
    micro-batches; each micro-batch backpropagates sum(CE of its counted targets) / n;
    loss = the total / n; pre-clip global grad norm (float64); clip when grad_clip > 0
    (torch's clip_grad_norm_); step.
    Returns per-step losses, norms and counted targets, the grads of grads_step and the
    final parameters ({name: numpy float32})."""
    torch.set_num_threads(1)
    names = model_names(arch, cfg)
    P = as_params(arch, cfg, params)
    decay = [P[n] for n in names if P[n].ndim >= 2]
    no_decay = [P[n] for n in names if P[n].ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(beta1, beta2), eps=eps, foreach=False)
    plist = [P[n] for n in names]
    losses, norms, counted, grads = [], [], [], None
    for step in range(1, steps + 1):
        mbs = data.step(step)
        n = int(sum((y >= 0).sum() for _, y, _, _ in mbs))
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for x, y, pos, _ in mbs:
            mask = torch.from_numpy(attention_mask(pos))
            tl = token_losses(arch, P, cfg, torch.from_numpy(x), torch.from_numpy(y),
                              torch.from_numpy(pos), mask)
            s = tl.sum()
            if n > 0:
                (s / n).backward()
            total += float(s.detach())
        losses.append(total / n if n > 0 else 0.0)
        counted.append(n)
        with torch.no_grad():
            # in float64: a float32 norm of a 50k-row embedding's gradient is off by ~1e-4
            norms.append(float(sum(p.grad.double().pow(2).sum() for p in plist)) ** 0.5)
        if step == grads_step:
            grads = {k: P[k].grad.detach().numpy().copy() for k in names}
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(plist, grad_clip)
        opt.step()
    return TrainResult(losses, norms, counted, grads, {k: P[k].detach().numpy().copy() for k in names})


def step_loss(arch, params, cfg, data, step, plain=False):
    """The loss of one step's batches under params, without training; plain=True drops
    the mask and the positions (causal over the whole row, 0..T-1): what a trainer that
    ignored the example boundaries would compute."""
    P = {n: torch.as_tensor(np.asarray(params[n]) if not torch.is_tensor(params[n]) else params[n]).float()
         for n in model_names(arch, cfg)}
    tot, n = 0.0, 0
    with torch.no_grad():
        for x, y, pos, _ in data.step(step):
            if plain:
                tl = token_losses(arch, P, cfg, torch.from_numpy(x), torch.from_numpy(y))
            else:
                tl = token_losses(arch, P, cfg, torch.from_numpy(x), torch.from_numpy(y),
                                  torch.from_numpy(pos), torch.from_numpy(attention_mask(pos)))
            tot += float(tl.sum())
            n += int((y >= 0).sum())
    return tot / max(n, 1)


def load_hf_dir(path):
    """(arch, config, {name: float32 array}) of a single-file HF GPT-2 or LLaMA directory."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") == "gpt2":
        c, params = G.load_hf_dir(path)
        return "gpt2", G.normalize_config(c), params
    params = {n: np.asarray(a, np.float32) for n, a in
              G.read_safetensors(os.path.join(path, "model.safetensors")).items()}
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "tie_word_embeddings")
    c = {k: cfg[k] for k in keys if k in cfg}
    c.setdefault("num_key_value_heads", c["num_attention_heads"])
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("tie_word_embeddings", False)
    return "llama", c, params


# ----------------------------------------------------------------------------------------
# Self-check: the reference against itself

def _check(ok, label, detail=""):
    print("%s  %s%s" % ("PASS" if ok else "FAIL", label, (": " + detail) if detail else ""), flush=True)
    return bool(ok)


def selfcheck_rows():
    """build_rows / SftBatches / masks against rows written out by hand from loader.h."""
    ok = True
    ex = [(np.array([10, 11, 12]), np.array([0, 1, 1], np.uint8)),
          (np.array([20, 21, 22, 23]), np.array([0, 0, 1, 1], np.uint8)),
          (np.array([30, 31, 32, 33, 34]), np.array([0, 0, 0, 1, 1], np.uint8)),
          (np.arange(40, 50), np.array([0] + [1] * 9, np.uint8))]          # 10 > T: truncated
    T = 8
    d = SftBatches(ex, B=2, T=T, accum=2, packing=True)
    want = [([10, 11, 12, 20, 21, 22, 23, 0], [11, 12, -1, -1, 22, 23, -1, -1], [0, 1, 2, 0, 1, 2, 3, 0]),
            ([30, 31, 32, 33, 34, 0, 0, 0], [-1, -1, 33, 34, -1, -1, -1, -1], [0, 1, 2, 3, 4, 0, 1, 2]),
            (list(range(40, 48)), list(range(41, 48)) + [-1], list(range(8))),
            ([0] * 8, [-1] * 8, list(range(8)))]
    got = [(r.inputs.tolist(), r.targets.tolist(), r.pos.tolist()) for r in d.all_rows]
    ok &= _check(got == want and d.batches_per_epoch == 2 and d.truncated == 1,
                 "rows: packing, targets from the mask, padding pos 0,1,..., truncation to T, "
                 "empty rows up to a multiple of B*accum", "" if got == want else "got %s" % got)
    x, y, pos, _ = d.batch(3)  # epoch 1, micro-batch 1: rows 2, 3 again
    ok &= _check(x.tolist() == [want[2][0], want[3][0]] and y.tolist() == [want[2][1], want[3][1]],
                 "batches: micro-batch 3 is epoch 1's second (rows 2..3)")
    d = SftBatches(ex, B=2, T=T, accum=1, packing=False)
    got = [r.inputs.tolist() for r in d.all_rows]
    ok &= _check(got == [[10, 11, 12, 0, 0, 0, 0, 0], [20, 21, 22, 23, 0, 0, 0, 0],
                         [30, 31, 32, 33, 34, 0, 0, 0], list(range(40, 48))]
                 and [r.pos.tolist()[:5] for r in d.all_rows][0] == [0, 1, 2, 0, 1],
                 "rows: packing=false, one example per row", str(got))
    ex2 = ex + [(np.array([50, 51, 52]), np.array([0, 1, 1], np.uint8))]
    order = epoch_order(ex2, B=2, T=T, group_by_length=True)
    ok &= _check(order == [3, 2, 1, 0, 4], "group_by_length: longest first (truncated length), stable",
                 str(order))
    order = epoch_order([(np.zeros(k), None) for k in [3, 5, 4] * 150], B=1, T=T, group_by_length=True)
    ok &= _check(order[:50] == [i for i in range(50) if i % 3 == 1] + [i for i in range(50) if i % 3 == 2]
                 + [i for i in range(50) if i % 3 == 0] and sorted(order[50:100]) == list(range(50, 100)),
                 "group_by_length: runs of 50*B examples sorted separately")
    perms = [shuffled(40, 7, e) for e in range(3)]
    ok &= _check(all(sorted(p) == list(range(40)) for p in perms) and perms[0] != perms[1] != perms[2]
                 and shuffled(40, 8, 0) != perms[0] and shuffled(40, 7, 0) == perms[0],
                 "shuffle: a permutation per (seed, epoch), reproducible")
    rng = np.random.default_rng(3)
    exs = [(rng.integers(0, 50, n), np.r_[0, rng.integers(0, 2, n - 1)].astype(np.uint8))
           for n in rng.integers(1, 20, 40)]
    d = SftBatches(exs, B=2, T=24, packing=True, shuffle=True, seed=7)
    n = [len(d.plan(e)[2]) // 2 for e in range(4)]
    seen = [sorted(i for r in d.plan(e)[1] for i, _, _ in r.examples) for e in range(4)]
    got = [d.batch(g)[0].tolist() for g in (n[0] - 1, n[0], n[0] + n[1])]
    want = [np.stack([r.inputs for r in d.plan(e)[2][2 * k:2 * k + 2]]).tolist()
            for e, k in ((0, n[0] - 1), (1, 0), (2, 0))]
    ok &= _check(all(x == list(range(40)) for x in seen) and got == want,
                 "shuffle: every example once per epoch; batches walk epochs of %s micro-batches" % n)
    d = SftBatches(exs, B=4, T=24, packing=True)
    pos = np.stack([r.pos for r in d.all_rows])
    ok &= _check(np.array_equal(attention_mask(pos), attention_mask_from_pos(pos)),
                 "mask: causal AND same segment == model.h's [t - pos[t], t]")
    return ok


def selfcheck_model(arch):
    """A packed batch's logits, per-token losses and gradients equal those of each example
    run alone (the plain causal forward, positions 0..n-1): masking and positions are right."""
    torch.manual_seed(0)
    V = 61
    if arch == "gpt2":
        cfg = dict(vocab_size=V, n_ctx=32, n_embd=32, n_layer=2, n_head=4)
        params = G.init_params(cfg, seed=5, random_norms_and_biases=True)
    else:
        cfg = dict(vocab_size=V, hidden_size=32, intermediate_size=72, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                   rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
        params = LR.init_params(cfg, seed=5)
    rng = np.random.default_rng(11)
    lens = [5, 9, 3, 7, 12, 4]   # T=16: rows [5, 9 | pad 2], [3, 7 | pad 6], [12, 4] (full)
    exs = [(rng.integers(0, V, n), np.r_[0, rng.integers(0, 2, n - 1)].astype(np.uint8)) for n in lens]
    d = SftBatches(exs, B=3, T=16, packing=True)
    x, y, pos, rows = d.batch(0)
    layout = [[(i, c, n) for i, c, n in r.examples] for r in rows]
    ok = _check(len(d.rows) == 3 and [len(r) for r in layout] == [2, 2, 2] and layout[2][1][1] + 4 == 16,
                "%s: the packed batch holds 2 examples per row, the last row full" % arch, str(layout))
    P = as_params(arch, cfg, params)
    xt, yt, pt = torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(pos)
    mt = torch.from_numpy(attention_mask(pos))
    logits = model_logits(arch, P, cfg, xt, pt, mt)
    tl = token_losses(arch, P, cfg, xt, yt, pt, mt)
    dl, dt, ds = 0.0, 0.0, 0.0
    alone_sum = 0.0
    for b, r in enumerate(rows):
        for i, c, n in r.examples:
            xa = xt[b:b + 1, c:c + n]
            ya = yt[b:b + 1, c:c + n]
            la = model_logits(arch, P, cfg, xa)                      # default path: no pos, no mask
            ta = token_losses(arch, P, cfg, xa, ya)
            dl = max(dl, float((la[0] - logits[b, c:c + n]).abs().max()))
            dt = max(dt, float((ta[0] - tl[b, c:c + n]).abs().max()))
            alone_sum = alone_sum + ta.sum()
    ok &= _check(dl < 2e-5 and dt < 2e-5,
                 "%s: logits and per-token losses of the packed rows == each example alone" % arch,
                 "max |diff| logits %.2e, losses %.2e" % (dl, dt))
    # gradients: the packed sum vs the sum of the examples alone
    g_packed = torch.autograd.grad(tl.sum(), list(P.values()), retain_graph=True)
    g_alone = torch.autograd.grad(alone_sum, list(P.values()))
    worst = max(float((a - b).abs().max()) / (float(b.abs().max()) + 1e-12) for a, b in zip(g_packed, g_alone))
    ok &= _check(worst < 1e-4, "%s: gradients of the packed loss == sum over the examples alone" % arch,
                 "worst relative diff %.2e" % worst)
    # negative control: without the mask and positions the later examples' logits change
    plain = model_logits(arch, P, cfg, xt)
    shift = float((plain - logits).abs().max())
    ok &= _check(shift > 1e-2, "%s: control: without mask/pos the packed logits differ (by %.3f)" % (arch, shift))
    # positions alone (mask kept) and the mask alone (positions kept) each matter
    only_pos = float((model_logits(arch, P, cfg, xt, pt, None) - logits).abs().max())
    only_mask = float((model_logits(arch, P, cfg, xt, None, mt) - logits).abs().max())
    ok &= _check(only_pos > 1e-3, "%s: control: positions without the mask differ (by %.3f)" % (arch, only_pos))
    if arch == "gpt2":
        ok &= _check(only_mask > 1e-3, "%s: control: the mask without positions differs (by %.3f)" % (arch, only_mask))
    else:
        # RoPE scores depend on position differences only: inside one example, shifting
        # every position by the example's column changes nothing but rounding.
        ok &= _check(only_mask < 1e-4, "%s: control: the mask without positions agrees (RoPE is relative; "
                     "max |diff| %.2e)" % (arch, only_mask))
    return ok


def selfcheck():
    torch.set_num_threads(1)
    ok = selfcheck_rows()
    ok &= selfcheck_model("gpt2")
    ok &= selfcheck_model("llama")
    print("RESULT: %s" % ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


# ----------------------------------------------------------------------------------------

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--selfcheck", action="store_true")
    ap.add_argument("--rows", metavar="DIR")
    ap.add_argument("--train", metavar="DIR")
    ap.add_argument("--init", metavar="HF_DIR")
    ap.add_argument("--split", default="train")
    ap.add_argument("--B", type=int, default=2)
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--accum", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--packing", type=int, default=1)
    ap.add_argument("--group-by-length", type=int, default=0)
    ap.add_argument("--shuffle", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    a = ap.parse_args(argv[1:])
    if a.selfcheck:
        return selfcheck()
    spec = a.rows or a.train
    if not spec:
        ap.print_help()
        return 2
    d = SftBatches(read_examples(spec, a.split), a.B, a.T, a.accum, bool(a.packing), bool(a.group_by_length),
                   shuffle=bool(a.shuffle), seed=a.seed)
    if a.rows:
        print("%d examples (%d truncated), %d rows (+%d empty), %d micro-batches per epoch"
              % (len(d.examples), d.truncated, len(d.rows), d.nrows - len(d.rows), d.batches_per_epoch))
        for k, r in enumerate(d.all_rows):
            print("row %d: examples %s, counted %d" % (k, [(i, c, n) for i, c, n in r.examples],
                                                        int((r.targets >= 0).sum())))
            print("  inputs  %s\n  targets %s\n  pos     %s" % (r.inputs.tolist(), r.targets.tolist(), r.pos.tolist()))
        return 0
    arch, cfg, params = load_hf_dir(a.init)
    res = train(arch, params, cfg, d, a.steps, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_clip)
    print("%4s  %12s  %10s  %7s" % ("step", "loss", "grad_norm", "counted"))
    for s, (l, g, n) in enumerate(zip(res.losses, res.grad_norms, res.counted), 1):
        print("%4d  %12.8f  %10.6f  %7d" % (s, l, g, n))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
