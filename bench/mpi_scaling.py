#!/usr/bin/env python3
"""Data-parallel scaling on one machine: 2 ranks x 1 thread against 1 rank x 2
threads at the same global batch (ranks x batch), with ctrain's own
per-step figures from metrics.jsonl.

For every configuration it runs `ctrain train` on a synthetic shard (rounds
times, alternating the configurations so that load drifts hit all of them) and
reports, over the steps after --warmup of every round pooled: the median step
time and tokens/s of the whole job, the median time per step spent in
communication (t_comm_ms: the part of the gradient allreduce the backward did
not hide, plus the small exchanges), and the efficiency of 2 x 1 against
1 x 2 (tokens/s ratio). Configurations:
  1x2          one process, 2 threads, batch 2B
  2x1          two ranks, 1 thread each, batch B each (dist.overlap on)
  2x1-nooverlap  the same, allreduce started after the backward
  2x1-zero     the same as 2x1 with dist.zero=1
  1x1          one process, 1 thread, batch B (the unit the others scale)

usage: bench/mpi_scaling.py [--ctrain build/ctrain] [--steps 12] [--rounds 2]
         [--batch B] [--seq T] [--layers L] [--embd C] [--vocab V]
         [--json-out FILE] [--markdown FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# As in tests/cli/test_mpi.py: root allowed, no binding (threads placed by
# the OS), shared memory. Single-copy transfers are left to Open MPI's
# default here (they are what a real run would use).
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_hwloc_base_binding_policy": "none",
    "OMPI_MCA_btl": "self,vader",
}


def run(cmd, env):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{(p.stdout + p.stderr)[-2000:]}")
    return time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctrain", default="build/ctrain")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4, help="per-rank batch B")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--json-out")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    ctrain = os.path.abspath(a.ctrain)
    if not shutil.which("mpirun"):
        sys.exit("mpirun not found: install openmpi-bin and libopenmpi-dev")
    env = dict(os.environ, **MPI_ENV)
    tmp = tempfile.mkdtemp(prefix="ct_mpibench_")
    shard = os.path.join(tmp, "train.bin")
    tokens = max(200000, 4 * a.batch * a.seq * (a.steps + 2))
    run([ctrain, "synth", "--out", shard, "--tokens", str(tokens), "--vocab", str(a.vocab)], env)
    model = [f"model.n_layer={a.layers}", f"model.n_head={max(1, a.embd // 64)}",
             f"model.n_embd={a.embd}", f"model.vocab_size={a.vocab}", f"model.n_ctx={a.seq}",
             f"data.train={shard}", f"train.seq_len={a.seq}", f"train.steps={a.steps}",
             "optim.lr=1e-3", "run.checkpoint_every=0", "data.prefetch=2"]
    B = a.batch
    configs = {
        "1x2": ([ctrain, "train", *model, f"train.batch_size={2 * B}", "run.threads=2"], 2 * B),
        "2x1": (["mpirun", "-np", "2", ctrain, "train", *model, f"train.batch_size={B}",
                 "run.threads=1"], 2 * B),
        "2x1-nooverlap": (["mpirun", "-np", "2", ctrain, "train", *model,
                           f"train.batch_size={B}", "run.threads=1", "dist.overlap=false"],
                          2 * B),
        "2x1-zero": (["mpirun", "-np", "2", ctrain, "train", *model, f"train.batch_size={B}",
                      "run.threads=1", "dist.zero=1"], 2 * B),
        "1x1": ([ctrain, "train", *model, f"train.batch_size={B}", "run.threads=1"], B),
    }
    load = os.getloadavg()[0]
    pooled = {k: {"step_ms": [], "tokens_per_s": [], "t_comm_ms": []} for k in configs}
    for r in range(a.rounds):
        for name, (cmd, _) in configs.items():
            d = os.path.join(tmp, f"{name}_{r}")
            run([*cmd, f"run.dir={d}"], env)
            with open(os.path.join(d, "metrics.jsonl")) as f:
                for line in f:
                    m = json.loads(line)
                    if m["split"] == "train" and m["step"] > a.warmup:
                        for k in pooled[name]:
                            pooled[name][k].append(m.get(k, 0.0))
    res = {}
    for name, vals in pooled.items():
        res[name] = {k: statistics.median(v) for k, v in vals.items()}
    base = res["1x2"]["tokens_per_s"]
    for name in res:
        res[name]["vs_1x2"] = res[name]["tokens_per_s"] / base
        res[name]["comm_share"] = res[name]["t_comm_ms"] / res[name]["step_ms"]
    eff = res["2x1"]["tokens_per_s"] / base
    lines = [f"model: {a.layers} layers, C={a.embd}, V={a.vocab}; T={a.seq}; global batch "
             f"{2 * B} ({B} per rank); {a.rounds} round(s) x {a.steps - a.warmup} timed steps; "
             f"load average before: {load:.2f}", "",
             "| config | step ms | tokens/s | vs 1x2 | comm ms/step | comm share |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, v in res.items():
        lines.append(f"| {name} | {v['step_ms']:.1f} | {v['tokens_per_s']:.0f} | "
                     f"{v['vs_1x2']:.2f} | {v['t_comm_ms']:.2f} | {100 * v['comm_share']:.1f}% |")
    lines.append("")
    lines.append(f"efficiency of 2 ranks x 1 thread against 1 rank x 2 threads: {eff:.2f}; "
                 f"2x1 against 1x1 (ideal 2): {res['2x1']['tokens_per_s'] / res['1x1']['tokens_per_s']:.2f}")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": vars(a), "load_average": load, "results": res,
                       "samples": pooled}, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
