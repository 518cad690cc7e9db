#!/usr/bin/env python3
"""Training from remote shards, end to end, with real servers on loopback.

nginx (HTTP, byte ranges) serves `ctrain prepare` outputs; s3rver (S3) takes an
upload from `ctrain prepare --out s3://...`, behind the test's proxy, which checks
SigV4 signatures and injects faults. For each, through the real program:

- data.train / data.val at http:// and s3:// train exactly as the same shards on
  disk: per-step losses and the final weights are bit-identical (shuffled and
  sequential orders, several shards of several blocks);
- a warm cache reads no shard bytes again; a corrupted cache block is dropped and
  fetched again (the run stays identical); a single shard's URL works;
- resets, 503s, truncated bodies and stalls past data.timeout_s are retried, counted
  in metrics.jsonl's "remote" lines, and change nothing;
- a shard that keeps failing (503 past data.retries) stops the run with exit 2
  naming the URL and the status, after a checkpoint of the last whole step, and
  train.resume=auto with a cold cache then finishes bit-identically to an
  unbroken run;
- a 404, a vocabulary the model cannot take and a cache smaller than the
  read-ahead are clear errors with exit 2;
- the manifest is cached with the blocks: data.offline=true trains from a warm
  cache with no request at all; with the server gone, a warm cache trains
  bit-identically with one warning per data key (URL, reason, the copy's age),
  a cache without the train split's blocks stops with exit 2 saying the server
  cannot be reached and how many blocks it held, a cold cache says nothing of
  the dataset is cached, and data.offline=true without a copy names it;
- S3 credentials appear nowhere in the output, config.yaml or metrics.

usage: test_remote_data.py path/to/ctrain
"""
import glob
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers  # noqa: E402
from remote_proxy import FaultProxy  # noqa: E402

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = remote_servers.ROOT
failures = []


def check(label, ok, detail=""):
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500])


def run(*args, env=None, timeout=300):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout + p.stderr


def metrics(run_dir, split="train"):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if m.get("split") == split:
                out[m["step"]] = m
    return out


def weights(run_dir):
    with open(os.path.join(run_dir, "model.safetensors"), "rb") as f:
        return f.read()


def same_run(a, b):
    ma, mb = metrics(a), metrics(b)
    if sorted(ma) != sorted(mb) or not ma:
        return False, f"steps {sorted(ma)} vs {sorted(mb)}"
    diff = [(s, ma[s]["loss"], mb[s]["loss"]) for s in ma if ma[s]["loss"] != mb[s]["loss"]]
    if diff:
        return False, f"losses differ: {diff[:4]}"
    va, vb = metrics(a, "val"), metrics(b, "val")
    if {s: v["loss"] for s, v in va.items()} != {s: v["loss"] for s, v in vb.items()}:
        return False, f"val losses differ: {va} vs {vb}"
    if weights(a) != weights(b):
        return False, "final weights differ"
    return True, ""


def last_remote(run_dir):
    r = metrics(run_dir, "remote")
    return r[max(r)] if r else {}


def main():
    why = remote_servers.missing()
    if why:
        print(f"skip: {why}")
        return 0
    tmp = tempfile.mkdtemp(prefix="ct_remote_")
    try:
        return body(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def prepare(out, files, *extra, env=None):
    rc, out_text = run("prepare", "--tokenizer", os.path.join(ROOT, "data", "gpt2-tokenizer"),
                       "--out", out, "--no-cache", *extra, *files, env=env)
    return rc, out_text


def body(tmp):
    brown = sorted(glob.glob(os.path.join(ROOT, "data", "brown", "text", "*.txt")))
    www = os.path.join(tmp, "www")
    big = os.path.join(www, "big")  # train shards of 1.2 MB (two blocks each) and val
    small = os.path.join(www, "small")  # shards of 20,000 tokens: a sequential run crosses them
    rc, out = prepare(big, brown, "--shard-tokens", "600000", "--val-tokens", "20000")
    check("prepare the multi-block dataset", rc == 0, out[-500:])
    rc, out = prepare(small, brown[:40], "--shard-tokens", "20000", "--val-tokens", "5000")
    check("prepare the small-shard dataset", rc == 0, out[-500:])
    if failures:
        return 1
    man = json.load(open(os.path.join(big, "manifest.json")))
    sh = [s for s in man["shards"] if s["split"] == "train"]
    check("manifest lists bytes, a hash and per-block hashes of every shard",
          len(sh) >= 2 and all(s["bytes"] == os.path.getsize(os.path.join(big, s["file"])) and
                               len(s["xxh3_128"]) == 32 and s["block_bytes"] == 1 << 20 and
                               len(s["blocks"]) == -(-s["bytes"] // (1 << 20)) for s in sh) and
          any(len(s["blocks"]) >= 2 for s in sh), json.dumps(sh)[:600])

    model = ["model.preset=gpt2-tiny", "model.vocab_size=50257", "run.threads=2",
             "optim.lr=3e-3", "train.batch_size=2", "train.seq_len=32", "train.eval_every=5",
             "train.eval_batches=2"]

    def train(run_dir, data, *extra, env=None):
        return run("train", *model, f"data.train={data}", f"data.val={data}",
                   f"run.dir={run_dir}", *extra, env=env)

    cache = os.path.join(tmp, "cache")
    small_cache = ["data.readahead=1MB", "data.cache_limit=64MB"]
    with remote_servers.Nginx(www) as ng:
        base = ng.url
        # --- the same run from disk and over HTTP
        for shuffle in ("true", "false"):
            common = ["train.steps=12", f"data.shuffle={shuffle}", "data.prefetch=2"]
            local = os.path.join(tmp, f"local_{shuffle}")
            rc, out = train(local, big, *common)
            check(f"shuffle={shuffle}: local run", rc == 0, out[-500:])
            remote = os.path.join(tmp, f"http_{shuffle}")
            shutil.rmtree(cache, ignore_errors=True)
            rc, out = train(remote, f"{base}/big/", *common, f"data.cache_dir={cache}",
                            *small_cache)
            check(f"shuffle={shuffle}: run from http://", rc == 0, out[-800:])
            ok, why = same_run(local, remote)
            check(f"shuffle={shuffle}: losses and weights bit-identical to the local run", ok, why)
            r = last_remote(remote)
            check(f"shuffle={shuffle}: metrics.jsonl has remote lines with the bytes fetched",
                  r.get("bytes_fetched", 0) > 0 and r.get("requests", 0) > 0, str(r))
        # --- warm cache: no shard bytes fetched again
        warm = os.path.join(tmp, "http_warm")
        rc, out = train(warm, f"{base}/big/", "train.steps=12", "data.shuffle=false",
                        f"data.cache_dir={cache}", *small_cache)
        r = last_remote(warm)
        check("a warm cache fetches no shard bytes", rc == 0 and r.get("bytes_fetched") == 0 and
              r.get("disk_hits", 0) > 0, f"{r} {out[-300:]}")
        ok, why = same_run(os.path.join(tmp, "local_false"), warm)
        check("the warm-cache run is bit-identical", ok, why)
        # --- a corrupted cached block is dropped and fetched again
        blocks = sorted(glob.glob(os.path.join(cache, "*", "*.blk")))
        check("the cache holds block files", len(blocks) >= 2, str(blocks[:4]))
        for b in blocks:
            with open(b, "r+b") as f:
                f.seek(100)
                c = f.read(1)
                f.seek(100)
                f.write(bytes([c[0] ^ 0xFF]))
        bad = os.path.join(tmp, "http_corrupt")
        rc, out = train(bad, f"{base}/big/", "train.steps=12", "data.shuffle=false",
                        f"data.cache_dir={cache}", *small_cache)
        r = last_remote(bad)
        check("corrupted cache blocks are fetched again", rc == 0 and r.get("bytes_fetched", 0) > 0,
              f"{r} {out[-300:]}")
        ok, why = same_run(os.path.join(tmp, "local_false"), bad)
        check("the run over a corrupted cache is bit-identical", ok, why)
        # --- the manifest is cached with the blocks: data.offline=true asks the server nothing
        off_cache = os.path.join(tmp, "cache_off")
        off = ["data.shuffle=false", f"data.cache_dir={off_cache}", *small_cache]
        rc, out = train(os.path.join(tmp, "off_warm"), f"{base}/big/", "train.steps=12", *off)
        check("a second cache is warmed", rc == 0, out[-300:])
        off_up = os.path.join(tmp, "off_up")
        rc, out = train(off_up, f"{base}/big/", "train.steps=12", *off, "data.offline=true")
        r = last_remote(off_up)
        check("data.offline=true with the server up: no request at all, bit-identical",
              rc == 0 and r.get("requests", 0) == 0 and
              same_run(os.path.join(tmp, "local_false"), off_up)[0], f"{r} {out[-400:]}")
        # only the val split of the small dataset is cached (eval reads val)
        xdg_off = os.path.join(tmp, "xdg_off")
        rc, out = run("eval", "--model", os.path.join(tmp, "local_false"), "--data",
                      f"{base}/small/", "--batches", "1", "--batch-size", "2", "--seq-len", "32",
                      env={"XDG_CACHE_HOME": xdg_off})
        check("eval caches the small dataset's val split", rc == 0, out[-300:])

        # --- ctrain eval scores the URL as the directory (its cache under XDG_CACHE_HOME)
        ev = []
        for data in (big, f"{base}/big/"):
            rc, out = run("eval", "--model", os.path.join(tmp, "local_false"), "--data", data,
                          "--batches", "8", "--batch-size", "2", "--seq-len", "32", "--json",
                          env={"XDG_CACHE_HOME": os.path.join(tmp, "xdg")})
            ev.append(json.loads(out.strip().splitlines()[-1]) if rc == 0 else out[-300:])
        check("ctrain eval --data URL scores exactly as the local directory",
              isinstance(ev[0], dict) and ev[0] == ev[1] and
              glob.glob(os.path.join(tmp, "xdg", "ctrain", "shards", "*", "*.blk")), str(ev))
        # --- one shard's URL
        one_local, one_remote = os.path.join(tmp, "one_local"), os.path.join(tmp, "one_http")
        rc1, out1 = run("train", *model, f"data.train={big}/train_000001.bin", "train.steps=4",
                        f"run.dir={one_local}")
        rc2, out2 = run("train", *model, f"data.train={base}/big/train_000001.bin",
                        "train.steps=4", f"run.dir={one_remote}", f"data.cache_dir={cache}",
                        *small_cache)
        check("a single shard's URL trains as the file does", rc1 == 0 and rc2 == 0 and
              same_run(one_local, one_remote)[0], out1[-300:] + out2[-300:])
        # --- the plan counts what a remote loader holds, not the data
        rc, out = run("plan", *model, f"data.train={base}/big/", f"data.val={base}/big/",
                      "--json")
        plan = json.loads(out[out.index("{"):]) if rc == 0 and "{" in out else {}
        check("ctrain plan: remote shards count their loaders' buffers (25 MiB each)",
              plan.get("shards_bytes") == 2 * 25 * (1 << 20), out[-300:])
        # --- clear errors
        t0 = time.time()
        rc, out = train(os.path.join(tmp, "e404"), f"{base}/nothing/", "train.steps=2",
                        f"data.cache_dir={cache}")
        check("a missing dataset: exit 2 naming the URL and 404, without retries",
              rc == 2 and "/nothing/manifest.json" in out and "404" in out and
              time.time() - t0 < 20, f"exit {rc} in {time.time() - t0:.1f}s: {out[-500:]}")
        rc, out = run("train", "model.preset=gpt2-tiny", "train.seq_len=32",
                      f"data.train={base}/big/",
                      f"run.dir={os.path.join(tmp, 'evocab')}", "train.steps=2",
                      f"data.cache_dir={cache}")
        check("shards of a larger vocabulary: exit 2 naming both sizes", rc == 2 and
              "50257" in out and "vocab_size" in out, out[-500:])
        rc, out = train(os.path.join(tmp, "elimit"), f"{base}/big/", "train.steps=2",
                        f"data.cache_dir={cache}", "data.readahead=64MB", "data.cache_limit=32MB")
        check("a cache smaller than the read-ahead: exit 2 naming data.cache_limit",
              rc == 2 and "data.cache_limit" in out and "data.readahead" in out, out[-500:])

        # --- two ranks under mpirun read their own windows from the URL
        if shutil.which("mpirun"):
            mpi_env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                       "OMPI_MCA_rmaps_base_oversubscribe": "1",
                       "OMPI_MCA_hwloc_base_binding_policy": "none", "OMPI_MCA_btl": "self,vader",
                       "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
            outs = []
            for tag, data in (("local", big), ("http", f"{base}/big/")):
                d = os.path.join(tmp, f"mpi_{tag}")
                e = dict(os.environ, **mpi_env)
                p = subprocess.run(["mpirun", "-np", "2", CTRAIN, "train", *model,
                                    "run.threads=1", "train.steps=8", "data.shuffle=true",
                                    f"data.train={data}", f"run.dir={d}",
                                    f"data.cache_dir={cache}_mpi", *small_cache],
                                   capture_output=True, text=True, env=e, timeout=300)
                outs.append((p.returncode, (p.stdout + p.stderr)[-600:]))
            if "built without MPI" in outs[0][1]:
                print("skip: mpirun: this ctrain was built without MPI")
            else:
                ok, why = (same_run(os.path.join(tmp, "mpi_local"), os.path.join(tmp, "mpi_http"))
                           if outs[0][0] == 0 and outs[1][0] == 0 else (False, str(outs)))
                check("mpirun -np 2 from http:// is bit-identical to the same on disk", ok, why)

        # --- faults through the proxy: retried, counted, harmless
        with FaultProxy(ng.port) as px:
            purl = f"http://127.0.0.1:{px.port}"
            px.set_faults(["reset", "503", "truncate", "stall:3", "500", "reset_mid"],
                          match=r"GET /big/train_")
            flaky = os.path.join(tmp, "http_flaky")
            shutil.rmtree(cache, ignore_errors=True)
            rc, out = train(flaky, f"{purl}/big/", "train.steps=12", "data.shuffle=false",
                            f"data.cache_dir={cache}", *small_cache, "data.timeout_s=1",
                            "data.retries=8")
            r = last_remote(flaky)
            served = sum(n for f, n in px.counters()["faults"].items() if f != "ok")
            check("resets, 5xx, truncation and a stall are retried, each counted", rc == 0 and
                  # (libcurl resends a request once by itself when a kept-alive
                  # connection is reset before answering: that one is not ours to count)
                  served >= 4 and served - 1 <= r.get("retries", -9) <= served and
                  r.get("failures") == 0,
                  f"exit {rc}: {served} faults served, {r} {out[-600:]}")
            ok, why = same_run(os.path.join(tmp, "local_false"), flaky)
            check("the run through the faults is bit-identical", ok, why)
            rc, out = run("report", flaky)
            html = open(os.path.join(flaky, "report.html")).read() if rc == 0 else out
            check("the report sums the remote counters", "remote data" in html and
                  f"{r.get('retries')} retried" in html, html[-300:] if rc else "")

            # --- retries run out mid-run: checkpoint, exit 2, resume bit-exactly
            common = ["train.steps=120", "data.shuffle=false", "train.batch_size=8",
                      "train.seq_len=32", "train.eval_every=0", "run.checkpoint_every=0"]
            ref = os.path.join(tmp, "small_local")
            rc, out = train(ref, small, *common)
            check("small shards: local run", rc == 0, out[-400:])
            px.set_faults(["503"] * 10000, match=r"GET /small/train_000001\.bin")
            broken = os.path.join(tmp, "small_broken")
            shutil.rmtree(cache, ignore_errors=True)
            rc, out = train(broken, f"{purl}/small/", *common, f"data.cache_dir={cache}",
                            *small_cache, "data.retries=2")
            steps = sorted(metrics(broken))
            ck = sorted(os.listdir(os.path.join(broken, "checkpoints"))) if os.path.isdir(
                os.path.join(broken, "checkpoints")) else []
            check("a shard failing past data.retries: exit 2 naming the URL and 503",
                  rc == 2 and "train_000001.bin" in out and "503" in out, f"exit {rc}: {out[-800:]}")
            check("... after a checkpoint of the last whole step",
                  steps and 0 < steps[-1] < 120 and ck == ["step_%08d" % steps[-1]],
                  f"steps ..{steps[-1:]} checkpoints {ck}")
            px.set_faults([])
            shutil.rmtree(cache, ignore_errors=True)
            rc, out = train(broken, f"{purl}/small/", *common, f"data.cache_dir={cache}",
                            *small_cache, "train.resume=auto")
            check("train.resume=auto with a cold cache finishes", rc == 0, out[-500:])
            ok, why = same_run(ref, broken)
            check("the resumed run is bit-identical to the unbroken one", ok, why)

        # --- a shard the manifest lists but the server lost: at once, exit 2
        os.rename(os.path.join(small, "train_000001.bin"), os.path.join(tmp, "moved.bin"))
        t0 = time.time()
        shutil.rmtree(cache, ignore_errors=True)
        rc, out = train(os.path.join(tmp, "lost"), f"{base}/small/", "train.steps=120",
                        "data.shuffle=false", "train.batch_size=8", "train.seq_len=32",
                        f"data.cache_dir={cache}", *small_cache)
        check("a lost shard: exit 2 naming its URL and 404, without retries",
              rc == 2 and "train_000001.bin" in out and "404" in out and time.time() - t0 < 60,
              f"exit {rc} in {time.time() - t0:.1f}s: {out[-500:]}")
        os.rename(os.path.join(tmp, "moved.bin"), os.path.join(small, "train_000001.bin"))

    # --- the server gone: a warm cache trains on alone, with one warning per data key;
    #     what the cache lacks is named, never "the URL must name a ctrain prepare output"
    t0 = time.time()
    down = os.path.join(tmp, "off_down")
    rc, out = train(down, f"{base}/big/", "train.steps=12", *off)
    took = time.time() - t0
    warns = [l for l in out.splitlines() if "cannot be reached" in l]
    check("server down, cache warm: trains from the cache, one warning per data key naming the "
          "URL, the reason and the copy's age",
          rc == 0 and len(warns) == 2 and all(f"{base}/big/manifest.json" in w and " old" in w and
                                              "cannot connect" in w and "blocks" in w for w in warns)
          and "data.train" in warns[0] + warns[1] and "data.val" in warns[0] + warns[1],
          f"exit {rc} in {took:.1f}s: {out[-800:]}")
    ok, why = same_run(os.path.join(tmp, "local_false"), down)
    check("... bit-identical to the run from disk, without waiting out data.retries",
          ok and took < 60, f"{why} ({took:.1f}s)")
    rc, out = train(os.path.join(tmp, "off_part"), f"{base}/small/", "train.steps=4",
                    "data.shuffle=false", f"data.cache_dir={os.path.join(xdg_off, 'ctrain', 'shards')}",
                    *small_cache)
    check("server down, only val cached: exit 2 saying the server cannot be reached and how much "
          "the cache holds", rc == 2 and "cannot be reached" in out and
          re.search(r"held 0 of the \d+ blocks of data\.train", out) and
          "must name a ctrain prepare output" not in out, f"exit {rc}: {out[-800:]}")
    rc, out = train(os.path.join(tmp, "off_cold"), f"{base}/big/", "train.steps=2",
                    f"data.cache_dir={os.path.join(tmp, 'cache_none')}", *small_cache,
                    "data.retries=1")
    check("server down, nothing cached: exit 2, unreachable, nothing of the dataset cached",
          rc == 2 and "nothing of this dataset is in the disk cache" in out and
          "must name a ctrain prepare output" not in out, f"exit {rc}: {out[-600:]}")
    rc, out = train(os.path.join(tmp, "off_none"), f"{base}/big/", "train.steps=2",
                    f"data.cache_dir={os.path.join(tmp, 'cache_none2')}", *small_cache,
                    "data.offline=true")
    check("data.offline=true without a cached copy: exit 2 naming data.offline and the manifest",
          rc == 2 and "data.offline" in out and "manifest.json" in out, f"exit {rc}: {out[-600:]}")

    # --- S3: upload with prepare, train from it; keys appear nowhere
    secret = "S3RVER"
    with remote_servers.S3rver(os.path.join(tmp, "s3"), "ctbucket") as s3, \
            FaultProxy(s3.port, sigv4=remote_servers.S3RVER_KEYS) as px:
        env = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": secret,
               "AWS_ENDPOINT_URL": f"http://127.0.0.1:{px.port}", "AWS_REGION": "us-east-1",
               "HOME": tmp}
        rc, out = prepare("s3://ctbucket/ds/big/", brown, "--shard-tokens", "600000",
                          "--val-tokens", "20000", env=env)
        check("prepare --out s3:// uploads", rc == 0 and "uploaded" in out, out[-600:])
        methods = px.counters()["methods"]
        check("... with signed PUTs the server accepted", methods.get("PUT", 0) >= 4,
              str(px.counters()))
        rc, out = prepare("s3://ctbucket/ds/big/", brown[:10], env=env)
        check("prepare --out s3:// over a dataset: exit 2 without --overwrite",
              rc == 2 and "already exists" in out, out[-400:])
        s3run = os.path.join(tmp, "s3_run")
        shutil.rmtree(cache, ignore_errors=True)
        rc, out = train(s3run, "s3://ctbucket/ds/big/", "train.steps=12", "data.shuffle=false",
                        f"data.cache_dir={cache}", *small_cache, env=env)
        check("training from s3://", rc == 0, out[-800:])
        ok, why = same_run(os.path.join(tmp, "local_false"), s3run)
        check("the S3 run is bit-identical to the local one", ok, why)
        leaked = [p for p in glob.glob(os.path.join(s3run, "*")) if os.path.isfile(p) and
                  b"S3RVER" in open(p, "rb").read()]
        check("no credentials in run.dir or the output",
              not leaked and "S3RVER" not in out, str(leaked))
        bad_env = dict(env, AWS_SECRET_ACCESS_KEY="wrong-secret-value")
        rc, out = train(os.path.join(tmp, "s3_bad"), "s3://ctbucket/ds/big/", "train.steps=2",
                        f"data.cache_dir={cache}", env=bad_env)
        check("a wrong secret: exit 2, 403, the secret not printed",
              rc == 2 and "403" in out and "wrong-secret-value" not in out, out[-500:])

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
