#!/usr/bin/env python3
"""Data parallel training under mpirun, through the real program.

- 2 ranks x B equal 1 rank x 2B in every step's loss and grad norm (to 1e-5)
  and in the validation losses, with gradient accumulation and allreduces in
  several buckets; the bucketed allreduce overlapped with the backward equals
  the one started after it bit for bit; only rank 0 writes run.dir, and
  metrics.jsonl carries t_comm_ms.
- With dropout on (model.dropout=0.1, gradient accumulation 2), 2 ranks x B
  equal 1 rank x 2B to 1e-5: the masks follow the global row, not the rank;
  and the losses differ from those without dropout.
- ZeRO-1 on 2 ranks equals ZeRO off bit for bit (losses, final weights, the
  checkpoint's optimizer state), and the AdamW moments per rank are halved
  (the ranks' own count, and `ctrain plan dist.world=2 dist.zero=1`); on 3
  ranks, which do not divide the parameter count, the shards are padded.
- A run whose rank 1 is killed after step 10's checkpoint resumes under 2
  ranks with bit-identical losses and weights (ZeRO on), and so does a
  shuffled run from its checkpoint; the sequential checkpoint
  resumes on 1 process at twice the batch (to 1e-5); another global batch is
  refused.
- Failures end every rank within a bounded time, never as a hang: a rank
  killed with SIGKILL, a rank that hangs (dist.timeout_s), configs that
  differ between ranks, a shard missing on one rank (ranks started in
  different directories, as on two machines), a bad key on one rank, and
  dist.world without mpirun; bad input writes nothing.

Skips (exit 0, saying why) only when mpirun is absent or ctrain was built
without MPI. Every mpirun command line comes from mpirun_cmd() below: the
flags that make Open MPI run as root, oversubscribed and inside containers.

usage: test_mpi.py path/to/ctrain
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
checks = 0

# Open MPI settings for tests: root is allowed (CI runs as root), more ranks
# than cores, no binding (a 2-core machine shared with other jobs), shared
# memory only, and no single-copy (CMA needs ptrace, often missing in
# containers). Environment variables reach every rank of an MPMD line too.
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_hwloc_base_binding_policy": "none",
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
}


def mpirun_cmd(np, *args):
    """mpirun of np ranks of ctrain with args; see MPI_ENV for the settings."""
    return ["mpirun", "-np", str(np), CTRAIN, *args]


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500])


def run_cmd(cmd, timeout=120, cwd=None):
    env = dict(os.environ, **MPI_ENV)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
        return p.returncode, p.stdout + p.stderr, time.time() - t0
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(
            errors="replace")
        return None, out, time.time() - t0


def mpi(np, *args, timeout=120):
    rc, out, _ = run_cmd(mpirun_cmd(np, "train", *args), timeout)
    return rc, out


def single(*args):
    rc, out, _ = run_cmd([CTRAIN, "train", *args])
    return rc, out


def metrics(run_dir, split="train"):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m["split"] == split:
                out[m["step"]] = m
    return out


def read(path):
    with open(path, "rb") as f:
        return f.read()


def close(a, b, tol=1e-5):
    return abs(a - b) <= tol * max(1.0, abs(a))


def ckpt(run_dir, step):
    return os.path.join(run_dir, "checkpoints", "step_%08d" % step)


def base(shard, B, steps=8, extra=()):
    return ["model.preset=gpt2-tiny", f"data.train={shard}", f"train.steps={steps}",
            f"train.batch_size={B}", "train.seq_len=16", "run.threads=1", "optim.lr=3e-3",
            "optim.weight_decay=0.1", "schedule.name=cosine", "schedule.warmup_steps=2",
            "data.prefetch=2", *extra]


def equivalence(tmp, shard, val):
    extra = ["train.grad_accum=2", f"data.val={val}", "train.eval_every=4", "train.eval_batches=2",
             "dist.bucket_mb=0.004"]  # ~1000 floats per bucket: 9 buckets for 8128 parameters
    one = os.path.join(tmp, "one_2B")
    rc, out = single(*base(shard, 4, extra=extra), f"run.dir={one}")
    check("1 process x batch 4 trains", rc == 0, out[-500:])
    two = os.path.join(tmp, "two_B")
    rc, out = mpi(2, *base(shard, 2, extra=extra), f"run.dir={two}")
    check("2 ranks x batch 2 train", rc == 0 and "data parallel: 2 ranks on 1 host(s)" in out and
          ") x batch 2 = 4 sequences" in out,
          out[-800:])
    if rc != 0:
        return
    a, b = metrics(one), metrics(two)
    check("2x2 and 1x4: the same 8 steps", sorted(a) == sorted(b) == list(range(1, 9)),
          f"{sorted(a)} {sorted(b)}")
    bad = [(s, a[s]["loss"], b[s]["loss"], a[s]["grad_norm"], b[s]["grad_norm"]) for s in a
           if s in b and not (close(a[s]["loss"], b[s]["loss"]) and
                              close(a[s]["grad_norm"], b[s]["grad_norm"]))]
    check("2 ranks x B = 1 rank x 2B: per-step losses and grad norms to 1e-5", not bad, str(bad))
    check("the comparison has teeth: the loss moves", a[8]["loss"] < a[1]["loss"] - 1e-3,
          f"{a[1]['loss']} -> {a[8]['loss']}")
    va, vb = metrics(one, "val"), metrics(two, "val")
    check("validation losses equal (the ranks split the validation rows)",
          sorted(va) == sorted(vb) == [4, 8] and
          all(close(va[s]["loss"], vb[s]["loss"]) for s in va), f"{va} {vb}")
    check("metrics.jsonl has t_comm_ms, > 0 under 2 ranks",
          all("t_comm_ms" in b[s] and b[s]["t_comm_ms"] > 0 for s in b) and
          all(a[s]["t_comm_ms"] == 0 for s in a), str(b[1]))
    check("tokens_per_s counts both ranks' tokens", b[8]["tokens_per_s"] > 0)
    # overlap off: the same buckets, summed after the backward instead of during it
    off = os.path.join(tmp, "two_B_nooverlap")
    rc, out = mpi(2, *base(shard, 2, extra=extra), "dist.overlap=false", f"run.dir={off}")
    c = metrics(off) if rc == 0 else {}
    check("allreduce during the backward = after it, bit for bit",
          rc == 0 and all(c[s]["loss"] == b[s]["loss"] and c[s]["grad_norm"] == b[s]["grad_norm"]
                          for s in b), out[-300:])
    lines = [json.loads(x) for x in read(os.path.join(two, "metrics.jsonl")).splitlines()]
    check("only rank 0 writes run.dir (one metrics line per step; alerts aside)",
          sum(1 for m in lines if m["split"] in ("train", "val")) == 8 + 2,
          str([(m["step"], m["split"]) for m in lines]))


def one_vs_two(tmp, label, args, variant, variant_what):
    """1 process at batch 4 against 2 ranks at batch 2 (to 1e-5), and 2 ranks
    against 2 ranks with `variant` set (bit for bit). Returns the run dirs of
    the 2-rank runs, or None when a run failed."""
    one, two = os.path.join(tmp, label + "_one"), os.path.join(tmp, label + "_two")
    var = os.path.join(tmp, label + "_variant")
    rc1, out1 = single(*args, "train.batch_size=4", f"run.dir={one}")
    rc2, out2 = mpi(2, *args, "train.batch_size=2", f"run.dir={two}")
    rc3, out3 = mpi(2, *args, "train.batch_size=2", variant, f"run.dir={var}")
    check(f"{label} trains on 1 process and on 2 ranks (and with {variant})",
          rc1 == 0 and rc2 == 0 and rc3 == 0, out1[-300:] + out2[-300:] + out3[-300:])
    if rc1 or rc2 or rc3:
        return None
    a, b, c = metrics(one), metrics(two), metrics(var)
    check(f"{label}: 2 ranks x B = 1 rank x 2B to 1e-5",
          all(close(a[s]["loss"], b[s]["loss"]) and close(a[s]["grad_norm"], b[s]["grad_norm"])
              for s in range(1, 5)), f"{a} {b}")
    check(f"{label}: {variant_what}, bit for bit",
          all(b[s]["loss"] == c[s]["loss"] and b[s]["grad_norm"] == c[s]["grad_norm"]
              for s in range(1, 5)), f"{b} {c}")
    return two, var


def llama_equivalence(tmp, shard):
    """LLaMA's backward reports spans that include its unnamed k, v and up
    projections and the untied head: tiny buckets must still all be summed
    during the backward, and the numbers must match one process at 2B."""
    args = ["model.preset=llama-tiny", f"data.train={shard}", "train.steps=4", "train.seq_len=16",
            "run.threads=1", "optim.lr=3e-3", "optim.grad_clip=1.0", "dist.bucket_mb=0.002"]
    one_vs_two(tmp, "llama-tiny", args, "dist.overlap=false",
               "allreduce during the backward = after it")


def lora_equivalence(tmp, shard):
    """LoRA under 2 ranks: only the adapters train, so their gradients (not the
    frozen base's spans) are what is averaged and what ZeRO shards."""
    args = ["model.preset=llama-tiny", f"data.train={shard}", "train.steps=4", "train.seq_len=16",
            "run.threads=1", "optim.lr=1e-2", "lora.r=4", "lora.targets=q_proj,v_proj,down_proj"]
    dirs = one_vs_two(tmp, "LoRA", args, "dist.zero=1", "ZeRO-1 = ZeRO off")
    if dirs:
        adapter = [read(os.path.join(d, "adapter_model.safetensors")) for d in dirs]
        check("LoRA under 2 ranks writes the adapter once, in rank 0's run.dir",
              adapter[0] == adapter[1])


def dropout_equivalence(tmp, shard):
    """Dropout under 2 ranks: rank r's micro-batch a holds the global rows
    (2a + r)*B.., and the masks are drawn by global row, so 2 ranks x B with
    accumulation draw the masks of 1 process x 2B."""
    args = ["model.preset=gpt2-tiny", f"data.train={shard}", "train.steps=4", "train.seq_len=16",
            "run.threads=1", "optim.lr=3e-3", "train.grad_accum=2", "model.dropout=0.1"]
    dirs = one_vs_two(tmp, "dropout", args, "dist.overlap=false",
                      "allreduce during the backward = after it")
    if not dirs:
        return
    plain = os.path.join(tmp, "dropout_none")
    rc, out = single(*args, "model.dropout=0", "train.batch_size=4", f"run.dir={plain}")
    a, b = (metrics(plain) if rc == 0 else {}), metrics(dirs[0])
    check("dropout: the comparison has teeth (losses differ from model.dropout=0)",
          rc == 0 and all(a[s]["loss"] != b[s]["loss"] for s in range(1, 5)), out[-300:])


def zero(tmp, shard):
    extra = ["run.checkpoint_every=6", "optim.grad_clip=0.5"]
    off, on = os.path.join(tmp, "zero_off"), os.path.join(tmp, "zero_on")
    rc1, out1 = mpi(2, *base(shard, 2, steps=6, extra=extra), f"run.dir={off}")
    rc2, out2 = mpi(2, *base(shard, 2, steps=6, extra=extra), "dist.zero=1", f"run.dir={on}")
    check("ZeRO off and on both train under 2 ranks", rc1 == 0 and rc2 == 0,
          out1[-300:] + out2[-300:])
    if rc1 or rc2:
        return
    a, b = metrics(off), metrics(on)
    check("ZeRO-1 = ZeRO off: losses and grad norms bit-identical",
          all(a[s]["loss"] == b[s]["loss"] and a[s]["grad_norm"] == b[s]["grad_norm"]
              for s in range(1, 7)), f"{a} {b}")
    check("ZeRO-1 = ZeRO off: final weights bit-identical",
          read(os.path.join(off, "model.safetensors")) == read(os.path.join(on,
                                                                            "model.safetensors")))
    check("ZeRO-1 checkpoint holds the whole optimizer state (rank 0 gathered it)",
          read(os.path.join(ckpt(off, 6), "optimizer.bin")) ==
          read(os.path.join(ckpt(on, 6), "optimizer.bin")))

    def per_rank(out):
        for line in out.splitlines():
            if "AdamW moments per rank:" in line:
                return [int(x) for x in line.split("per rank:")[1].split("bytes")[0].split()]
        return []
    full, shard_bytes = per_rank(out1), per_rank(out2)
    numel = 8128  # gpt2-tiny
    check("ZeRO off: every rank holds all the moments", full == [2 * 4 * numel] * 2, str(full))
    check("ZeRO-1: the moments per rank are halved", shard_bytes == [4 * numel] * 2,
          str(shard_bytes))
    # precision bf16: with ZeRO off AdamW writes the GEMMs' bf16 weight copies as it
    # updates (no second pass); with ZeRO-1 they are made after the all-gather. The
    # same bits either way (a rank whose copies went stale would differ from step 2)
    bf = ["train.precision=bf16", "debug.emulate_bf16=true"]
    offb, onb = os.path.join(tmp, "zero_off_bf16"), os.path.join(tmp, "zero_on_bf16")
    rc1, o1 = mpi(2, *base(shard, 2, steps=6, extra=extra + bf), f"run.dir={offb}")
    rc2, o2 = mpi(2, *base(shard, 2, steps=6, extra=extra + bf), "dist.zero=1",
                  f"run.dir={onb}")
    check("bf16: ZeRO off and on both train under 2 ranks", rc1 == 0 and rc2 == 0,
          o1[-300:] + o2[-300:])
    if rc1 == 0 and rc2 == 0:
        a, b, f = metrics(offb), metrics(onb), metrics(off)
        check("bf16: ZeRO-1 = ZeRO off, losses and final weights bit-identical (and bf16 "
              "in effect: the losses differ from fp32's)",
              all(a[s]["loss"] == b[s]["loss"] for s in range(1, 7)) and
              read(os.path.join(offb, "model.safetensors")) ==
              read(os.path.join(onb, "model.safetensors")) and
              any(a[s]["loss"] != f[s]["loss"] for s in range(2, 7)), f"{a} {b}")
    # 3 ranks: 8128 parameters do not split evenly; the shards are padded
    z3, o3 = os.path.join(tmp, "zero3_on"), os.path.join(tmp, "zero3_off")
    rc1, out1 = mpi(3, *base(shard, 2, steps=3), "dist.zero=1", f"run.dir={z3}")
    rc2, out2 = mpi(3, *base(shard, 2, steps=3), f"run.dir={o3}")
    check("ZeRO-1 on 3 ranks: shards of ceil(8128 / 3) = 2710, the last 2708",
          rc1 == 0 and rc2 == 0 and per_rank(out1) == [8 * 2710, 8 * 2710, 8 * 2708],
          f"{per_rank(out1)} {out1[-300:]}")
    check("ZeRO-1 on 3 ranks = ZeRO off: final weights bit-identical",
          rc1 == 0 and rc2 == 0 and read(os.path.join(z3, "model.safetensors")) ==
          read(os.path.join(o3, "model.safetensors")))
    # the planner knows, without mpirun
    plans = []
    for args in ([], ["dist.world=2"], ["dist.world=2", "dist.zero=1"],
                 ["dist.world=3", "dist.zero=1"]):
        rc, out, _ = run_cmd([CTRAIN, "plan", "model.preset=gpt2-tiny", "train.batch_size=2",
                              "train.seq_len=16", *args, "--json"])
        plans.append(json.loads(out) if rc == 0 else {})
    o = [p.get("optim_bytes") for p in plans]
    check("ctrain plan: dist.zero=1 on 2 ranks halves optim_bytes, 3 ranks pad the shards",
          o == [8 * numel, 8 * numel, 4 * numel, 8 * ((numel + 2) // 3)], str(o))
    # the process's own measured baseline (process_bytes) moves by a few pages
    # from one `ctrain plan` to the next: the rest of the total must follow exactly
    fixed = [p.get("total_bytes", 0) - p.get("process_bytes", 0) for p in plans]
    check("ctrain plan: total_bytes follows", fixed[0] - fixed[2] == 4 * numel, str(plans))


def resume(tmp, shard):
    extra = ["run.checkpoint_every=10", "dist.zero=1", "train.grad_accum=2"]
    ref = os.path.join(tmp, "res_ref")
    rc, out = mpi(2, *base(shard, 2, steps=16, extra=extra), f"run.dir={ref}")
    check("resume: uninterrupted 2-rank run", rc == 0, out[-300:])
    killed = os.path.join(tmp, "res_killed")
    rc, out = mpi(2, *base(shard, 2, steps=16, extra=extra), "debug.kill_step=12",
                  "debug.rank=1", "debug.sleep_ms=20", f"run.dir={killed}")
    check("resume: rank 1 killed after step 12 ends the job", rc not in (0, None),
          f"exit {rc}: {out[-300:]}")
    check("resume: step 10's checkpoint survived",
          os.path.exists(os.path.join(ckpt(killed, 10), "MANIFEST.json")))
    rc, out = mpi(2, *base(shard, 2, steps=16, extra=extra), "train.resume=auto",
                  f"run.dir={killed}")
    check("resume: train.resume=auto under 2 ranks continues from step 10",
          rc == 0 and "step_00000010" in out, out[-400:])
    if rc == 0:
        a, b = metrics(ref), metrics(killed)
        check("resume under 2 ranks is exact: steps 1-16 bit-identical",
              sorted(b) == list(range(1, 17)) and
              all(a[s]["loss"] == b[s]["loss"] and a[s]["grad_norm"] == b[s]["grad_norm"]
                  for s in range(1, 17)), f"{a} {b}")
        check("resume under 2 ranks: final weights bit-identical",
              read(os.path.join(ref, "model.safetensors")) ==
              read(os.path.join(killed, "model.safetensors")))
    # the ZeRO checkpoint on one process at twice the batch
    one = os.path.join(tmp, "res_one")
    rc, out = single(*base(shard, 4, steps=16, extra=extra), "dist.zero=0",
                     f"train.resume={ckpt(ref, 10)}", f"run.dir={one}")
    check("resume: the 2-rank checkpoint continues on 1 process x batch 4",
          rc == 0 and "resuming a run of 2 rank(s) on 1" in out, out[-400:])
    if rc == 0:
        a, c = metrics(ref), metrics(one)
        bad = [s for s in range(11, 17) if not close(a[s]["loss"], c[s]["loss"])]
        check("resume on 1 process: steps 11-16 equal the 2-rank run's to 1e-5", not bad,
              str([(s, a[s]["loss"], c[s]["loss"]) for s in bad]))
    # shuffled data: every rank's loader position comes back from rank 0's
    sh = ["data.shuffle=true", "run.checkpoint_every=4"]
    sref, sres = os.path.join(tmp, "shuf_ref"), os.path.join(tmp, "shuf_res")
    rc1, out1 = mpi(2, *base(shard, 2, steps=8, extra=sh), f"run.dir={sref}")
    rc2, out2 = mpi(2, *base(shard, 2, steps=8, extra=sh), f"train.resume={ckpt(sref, 4)}",
                    f"run.dir={sres}")
    ok = rc1 == 0 and rc2 == 0
    if ok:
        a, b = metrics(sref), metrics(sres)
        ok = sorted(b) == [5, 6, 7, 8] and all(a[s]["loss"] == b[s]["loss"] for s in b)
    check("resume of shuffled data under 2 ranks is exact", ok, out1[-300:] + out2[-300:])
    rc, out = mpi(2, *base(shard, 1, steps=16, extra=extra), f"train.resume={ckpt(ref, 10)}",
                  f"run.dir={os.path.join(tmp, 'res_other')}")
    check("resume with another global batch is refused, naming both",
          rc == 2 and "train.batch_size = 1 on 2 rank(s)" in out and
          "train.batch_size = 2 on 2 rank(s)" in out, out[-500:])


def failures_end_every_rank(tmp, shard):
    # a killed rank: mpirun ends the job; the survivors never hang
    d = os.path.join(tmp, "kill")
    rc, out, dt = run_cmd(mpirun_cmd(2, "train", *base(shard, 2, steps=200),
                                     "debug.kill_step=3", "debug.rank=1", f"run.dir={d}"),
                          timeout=60)
    check("a rank killed with SIGKILL: the job exits non-zero", rc not in (0, None),
          f"exit {rc}: {out[-400:]}")
    check("a rank killed with SIGKILL: the job ends within 30 s", dt < 30, f"{dt:.1f} s")
    steps = sorted(metrics(d)) if os.path.exists(os.path.join(d, "metrics.jsonl")) else []
    check("a rank killed: training stopped there", steps and max(steps) < 200, str(steps[-3:]))
    # a hung rank: the others time out and abort the job
    d = os.path.join(tmp, "hang")
    rc, out, dt = run_cmd(mpirun_cmd(2, "train", *base(shard, 2, steps=200),
                                     "debug.hang_step=3", "debug.rank=1", "dist.timeout_s=2",
                                     f"run.dir={d}"), timeout=60)
    check("a hung rank: the job exits non-zero", rc not in (0, None), f"exit {rc}: {out[-400:]}")
    check("a hung rank: the job ends within 30 s (dist.timeout_s=2)", dt < 30, f"{dt:.1f} s")
    check("a hung rank: rank 0 names the timeout and the rank that does not answer",
          "dist.timeout_s" in out and "no answer for 2 s" in out and
          "lost: rank 1 (host " in out, out[-600:])

    # configs that differ: every rank says where, nothing is written
    d = os.path.join(tmp, "mismatch")
    common = base(shard, 2, steps=4)
    rc, out, dt = run_cmd(["mpirun", "-np", "1", CTRAIN, "train", *common, "optim.lr=1e-3",
                           f"run.dir={d}", ":", "-np", "1", CTRAIN, "train", *common,
                           "optim.lr=2e-3", f"run.dir={d}"], timeout=60)
    msg = "the ranks were given different configurations"
    check("different configs: exit 2 on every rank with the differing key",
          rc == 2 and out.count(msg) == 2 and "optim.lr" in out and "0.001" in out and
          "0.002" in out, out[-800:])
    check("different configs: nothing written", not os.path.exists(d))

    # a shard missing on one rank: ranks started in two directories, as on
    # two machines; the same relative data.train
    a_dir, b_dir = os.path.join(tmp, "machine_a"), os.path.join(tmp, "machine_b")
    os.makedirs(a_dir)
    os.makedirs(b_dir)
    shutil.copy(shard, os.path.join(a_dir, "train.bin"))
    d = os.path.join(tmp, "missing")
    common = [x for x in base("train.bin", 2, steps=4)] + [f"run.dir={d}"]
    rc, out, dt = run_cmd(["mpirun", "-np", "1", "-wdir", a_dir, CTRAIN, "train", *common, ":",
                           "-np", "1", "-wdir", b_dir, CTRAIN, "train", *common], timeout=60)
    check("a shard missing on rank 1: exit 2, rank 1 names the file, rank 0 says rank 1 failed",
          rc == 2 and "ctrain train (rank 1): error: data.train: train.bin" in out and
          "rank 1 failed (setup)" in out, out[-800:])
    check("a shard missing on rank 1: nothing written", not os.path.exists(d))

    # a bad key on one rank only
    d = os.path.join(tmp, "badkey")
    rc, out, dt = run_cmd(["mpirun", "-np", "1", CTRAIN, "train", *common[:-1], f"run.dir={d}",
                           ":", "-np", "1", CTRAIN, "train", *common[:-1], f"run.dir={d}",
                           "optim.lrr=3"], timeout=60)
    check("a bad key on rank 1: exit 2 on every rank with the reason",
          rc == 2 and "unknown config key 'optim.lrr'" in out and
          "rank 1 failed (reading the configuration)" in out, out[-600:])
    check("a bad key on rank 1: nothing written", not os.path.exists(d))

    rc, out = single(*base(shard, 2, steps=2), "dist.world=2",
                     f"run.dir={os.path.join(tmp, 'noworld')}")
    check("dist.world=2 without mpirun is refused", rc == 2 and "dist.world = 2" in out and
          "mpirun -np 2" in out, out[-300:])
    rc, out = mpi(2, *base(shard, 2, steps=2), "dist.world=3",
                  f"run.dir={os.path.join(tmp, 'world3')}")
    check("dist.world=3 under 2 ranks is refused", rc == 2 and "mpirun started 2 ranks" in out,
          out[-300:])


def main():
    if not shutil.which("mpirun"):
        print("skip: mpirun not found (install openmpi-bin and libopenmpi-dev: "
              "scripts/bootstrap.sh)")
        return 0
    tmp = tempfile.mkdtemp(prefix="ct_mpi_")
    try:
        shard, val = os.path.join(tmp, "train.bin"), os.path.join(tmp, "val.bin")
        for path, tokens, seed in ((shard, 30000, 1), (val, 4000, 2)):
            rc, out, _ = run_cmd([CTRAIN, "synth", "--out", path, "--tokens", str(tokens),
                                  "--vocab", "64", "--seed", str(seed)])
            if rc != 0:
                print(f"FAIL synth: {out}")
                return 1
        # is this ctrain built with MPI? (the one-process build refuses 2 ranks)
        rc, out = mpi(2, *base(shard, 2, steps=1), f"run.dir={os.path.join(tmp, 'probe')}")
        if "built without MPI" in out:
            print("skip: this ctrain was built without MPI (CT_MPI=OFF or no libopenmpi-dev)")
            return 0
        equivalence(tmp, shard, val)
        llama_equivalence(tmp, shard)
        lora_equivalence(tmp, shard)
        dropout_equivalence(tmp, shard)
        zero(tmp, shard)
        resume(tmp, shard)
        failures_end_every_rank(tmp, shard)
    finally:
        if failures:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks - len(failures)}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
