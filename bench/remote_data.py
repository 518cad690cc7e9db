#!/usr/bin/env python3
"""Step time from a throttled remote server against the same shards on disk.

Serves a `ctrain prepare` output with nginx on 127.0.0.1, behind the test proxy
(tests/cli/remote_proxy.py) throttled to --rate bytes/s with --latency seconds per
request and per connection (50 MB/s and 20 ms by default), and trains the same run
from the local directory and from the URL, in turns (--rounds pairs; the remote run
starts each round with an empty cache). Reports, over the steps after --warmup:
median step time of each, their ratio, the remote run's data wait as a share of its
step time, and what it fetched.

  python3 bench/remote_data.py                       # gpt2-demo, B=8, T=128, 3 rounds
  python3 bench/remote_data.py --steps 80 --rounds 5 --json-out r.json

Prepares the Brown corpus (data/brown/text, from scripts/fetch_data.sh) into a temp
directory unless --data names a prepared one.
"""
import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "cli"))
import remote_servers  # noqa: E402
from remote_proxy import FaultProxy  # noqa: E402


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def steps_of(run_dir, split="train"):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("split") == split:
                out[m["step"]] = m
    return out


def train(ctrain, run_dir, data, a, extra):
    cmd = [ctrain, "train", f"model.preset={a.preset}", "model.vocab_size=50257",
           f"data.train={data}", f"train.steps={a.steps}", f"train.batch_size={a.batch}",
           f"train.seq_len={a.seq}", f"run.threads={a.threads}", "data.shuffle=true",
           "run.checkpoint_every=0", f"run.dir={run_dir}", *extra]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"remote_data: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ctrain", default=os.path.join(ROOT, "build", "ctrain"))
    ap.add_argument("--data", help="a prepared directory (default: prepare the Brown corpus)")
    ap.add_argument("--preset", default="gpt2-demo")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rate", type=float, default=50e6, help="bytes/s (default 50e6)")
    ap.add_argument("--latency", type=float, default=0.02, help="seconds (default 0.02)")
    ap.add_argument("--readahead", default="256MB")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    why = remote_servers.missing(s3rver=False)
    if why:
        sys.exit(f"remote_data: {why}")
    tmp = tempfile.mkdtemp(prefix="ct_bench_remote_")
    try:
        www = os.path.join(tmp, "www")
        data = os.path.join(www, "ds")
        if a.data:
            shutil.copytree(a.data, data)
        else:
            files = sorted(glob.glob(os.path.join(ROOT, "data", "brown", "text", "*.txt")))
            p = subprocess.run([a.ctrain, "prepare", "--tokenizer",
                                os.path.join(ROOT, "data", "gpt2-tokenizer"), "--out", data,
                                "--shard-tokens", "500000", "--quiet", *files],
                               capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"remote_data: prepare failed:\n{p.stderr[-2000:]}")
        size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(data, "train_*.bin")))
        rows = {"local": [], "remote": []}
        waits, fetched = [], []
        with remote_servers.Nginx(www) as ng, \
                FaultProxy(ng.port, rate=a.rate, latency=a.latency) as px:
            url = f"http://127.0.0.1:{px.port}/ds/"
            for r in range(a.rounds):
                for side in ("local", "remote"):
                    run_dir = os.path.join(tmp, f"{side}_{r}")
                    cache = os.path.join(tmp, "cache")
                    shutil.rmtree(cache, ignore_errors=True)
                    extra = [] if side == "local" else [f"data.cache_dir={cache}",
                                                        f"data.readahead={a.readahead}"]
                    train(a.ctrain, run_dir, data if side == "local" else url, a, extra)
                    st = steps_of(run_dir)
                    timed = [st[s] for s in sorted(st) if s > a.warmup]
                    rows[side] += [m["step_ms"] for m in timed]
                    if side == "remote":
                        waits.append(sum(m["data_wait_ms"] for m in timed) /
                                     sum(m["step_ms"] for m in timed))
                        rem = steps_of(run_dir, "remote")
                        fetched.append(rem[max(rem)]["bytes_fetched"] if rem else 0)
        med = {k: statistics.median(v) for k, v in rows.items()}
        ratio = med["remote"] / med["local"]
        print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs; load average "
              f"{os.getloadavg()[0]:.2f}")
        print(f"data: {size / 1e6:.1f} MB of train shards; link {a.rate / 1e6:.0f} MB/s, "
              f"{a.latency * 1e3:.0f} ms per request; {a.preset} B={a.batch} T={a.seq}, "
              f"{a.steps} steps ({a.warmup} warm-up), {a.rounds} rounds, cold cache each")
        print("| source | median step ms | ratio | data wait share | fetched MB |")
        print("|---|---|---|---|---|")
        print(f"| local files | {med['local']:.1f} | 1.00 | | |")
        print(f"| http (throttled) | {med['remote']:.1f} | {ratio:.3f} | "
              f"{100 * statistics.median(waits):.2f}% | {statistics.median(fetched) / 1e6:.1f} |")
        if a.json_out:
            with open(a.json_out, "w") as f:
                json.dump({"args": vars(a), "step_ms": rows, "median": med, "ratio": ratio,
                           "wait_share": waits, "bytes_fetched": fetched}, f, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
