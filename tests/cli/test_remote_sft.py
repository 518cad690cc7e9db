#!/usr/bin/env python3
"""Instruction data (`ctrain prepare --format sft`) trained from URLs, end to end, with real
servers on loopback: nginx (HTTP, byte ranges) and s3rver (S3) behind the test's proxy, which
checks SigV4 signatures.

- data.train / data.val at http:// train exactly as the same directory on disk: per-step
  losses, grad norms, counted targets, validation losses and the final weights are
  bit-identical, packed and shuffled with grad_accum 2, and one example per row in order;
  examples sit at random offsets of shards of two blocks each;
- the sidecars come through the disk cache: a second run fetches no bytes, and
  data.offline=true with a warm cache asks the server nothing and trains bit-identically;
- exact resume: a run stopped after 3 steps and continued from http:// with a cold cache
  (train.resume=auto) gives the unbroken local run's losses and weights;
- two ranks under mpirun read their own rows from the URL as from the disk;
- a sidecar changed on the server after prepare (same size) fails with exit 2 naming its URL
  and the manifest's hash; a lost sidecar fails with exit 2 naming its URL and 404;
- `prepare --format sft --out s3://...` uploads shards, sidecars and the manifest; training
  from s3:// is bit-identical to the local run, and `ctrain eval --data s3://...` scores the
  counted targets exactly as the local directory.

usage: test_remote_sft.py path/to/ctrain
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers  # noqa: E402
from remote_proxy import FaultProxy  # noqa: E402

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = remote_servers.ROOT
GPT2 = os.path.join(ROOT, "data", "gpt2-tokenizer")
failures = []

WORDS = ("alpha beta gamma delta river stone light cloud green small quick brown fox jumps over the "
         "lazy dog north south east west seven eleven paper glass water fire").split()
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_hwloc_base_binding_policy": "none",
           "OMPI_MCA_btl": "self,vader", "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def check(label, ok, detail=""):
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500])
    return ok


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


def same_run(a, b):
    """Bit-identical runs: every train line's loss, grad norm and counted targets, every
    validation loss, and the final weights."""
    keys = ("loss", "grad_norm", "counted_tokens")
    ma, mb = metrics(a), metrics(b)
    if sorted(ma) != sorted(mb) or not ma:
        return False, f"steps {sorted(ma)} vs {sorted(mb)}"
    diff = [(s, [ma[s].get(k) for k in keys], [mb[s].get(k) for k in keys]) for s in ma
            if any(ma[s].get(k) != mb[s].get(k) for k in keys)]
    if diff:
        return False, f"train lines differ: {diff[:3]}"
    if any(ma[s].get("counted_tokens", 0) <= 0 for s in ma):
        return False, "a train line without counted_tokens"
    # (a run in two parts also validated where its first part ended)
    va, vb = metrics(a, "val"), metrics(b, "val")
    if not va or any(s not in vb or vb[s]["loss"] != v["loss"] for s, v in va.items()):
        return False, f"val losses differ: {va} vs {vb}"
    with open(os.path.join(a, "model.safetensors"), "rb") as fa, \
            open(os.path.join(b, "model.safetensors"), "rb") as fb:
        if fa.read() != fb.read():
            return False, "final weights differ"
    return True, ""


def last_remote(run_dir):
    r = metrics(run_dir, "remote")
    return r[max(r)] if r else {}


def write_examples(path, n):
    with open(path, "w") as f:
        for i in range(n):
            p = " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(3 + i % 9))
            c = " ".join(WORDS[(i * 5 + k * 11) % len(WORDS)] for k in range(2 + (i * 3) % 13))
            f.write(json.dumps({"prompt": f"Q{i}: {p}?\nA:", "completion": " " + c}) + "\n")


def main():
    why = remote_servers.missing()
    if why:
        print(f"skip: {why}")
        return 0
    if not os.path.isdir(GPT2):
        print(f"skip: {GPT2} missing (scripts/fetch_data.sh)")
        return 0
    tmp = tempfile.mkdtemp(prefix="ct_remote_sft_")
    try:
        return body(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def body(tmp):
    src = os.path.join(tmp, "ex.jsonl")
    write_examples(src, 40000)
    www = os.path.join(tmp, "www")
    data = os.path.join(www, "sft")  # ~1M tokens: shards of two 1 MiB blocks, and val
    prep = ["--format", "sft", "--tokenizer", GPT2, "--val-examples", "200", "--max-len", "64",
            "--shard-tokens", "600000", "--quiet", src]
    rc, out = run("prepare", "--out", data, *prep)
    if not check("prepare --format sft (the multi-block dataset)", rc == 0, out[-600:]):
        return 1
    man = json.load(open(os.path.join(data, "manifest.json")))
    tr = [s for s in man["shards"] if s["split"] == "train"]
    check("the manifest lists each shard's blocks and its sidecar (bytes, xxh3_128)",
          len(tr) >= 2 and any(len(s["blocks"]) >= 2 for s in tr) and
          all(s["sidecar"]["file"].endswith(".sft") and len(s["sidecar"]["xxh3_128"]) == 32
              for s in tr), json.dumps(tr)[:500])

    model = ["model.preset=gpt2-tiny", "model.vocab_size=50257", "model.n_ctx=64", "run.threads=2",
             "optim.lr=3e-3", "train.batch_size=2", "train.seq_len=64", "train.seed=7",
             "model.dropout=0", "schedule.name=constant", "train.eval_every=4",
             "train.eval_batches=2"]
    small_cache = ["data.readahead=1MB", "data.cache_limit=64MB"]

    def train(run_dir, where, *extra, env=None, cache=None):
        c = [f"data.cache_dir={cache}", *small_cache] if cache else []
        return run("train", *model, f"data.train={where}", f"data.val={where}", f"run.dir={run_dir}",
                   *c, *extra, env=env)

    packed = ["train.steps=10", "train.grad_accum=2", "data.shuffle=true", "data.prefetch=2"]
    unpacked = ["train.steps=6", "data.packing=false", "data.shuffle=false"]
    local_p, local_u = os.path.join(tmp, "local_packed"), os.path.join(tmp, "local_unpacked")
    rc, out = train(local_p, data, *packed)
    check("packed, shuffled: the local run", rc == 0 and "instruction data:" in out, out[-600:])
    rc, out = train(local_u, data, *unpacked)
    check("one example per row, in order: the local run", rc == 0, out[-600:])
    if failures:
        return 1

    cache = os.path.join(tmp, "cache")
    with remote_servers.Nginx(www) as ng:
        url = f"{ng.url}/sft/"
        # --- the same runs over HTTP
        r1 = os.path.join(tmp, "http_packed")
        rc, out = train(r1, url, *packed, cache=cache)
        check("packed, shuffled, from http://: trains (instruction data announced)",
              rc == 0 and "instruction data:" in out, out[-800:])
        ok, why = same_run(local_p, r1) if rc == 0 else (False, "")
        check("... bit-identical to the local run (losses, counted targets, val, weights)", ok, why)
        r = last_remote(r1)
        check("... with remote lines counting what it fetched", r.get("bytes_fetched", 0) > 0, str(r))
        r2 = os.path.join(tmp, "http_unpacked")
        rc, out = train(r2, url, *unpacked, cache=os.path.join(tmp, "cache2"))
        ok, why = same_run(local_u, r2) if rc == 0 else (False, out[-600:])
        check("one example per row, in order, from http://: bit-identical to the local run", ok, why)

        # --- the disk cache holds the sidecars too
        warm = os.path.join(tmp, "http_warm")
        rc, out = train(warm, url, *packed, cache=cache)
        r = last_remote(warm)
        check("a warm cache: no bytes fetched, bit-identical",
              rc == 0 and r.get("bytes_fetched") == 0 and r.get("disk_hits", 0) > 0 and
              same_run(local_p, warm)[0], f"{r} {out[-300:]}")
        off = os.path.join(tmp, "http_offline")
        rc, out = train(off, url, *packed, "data.offline=true", cache=cache)
        r = last_remote(off)
        check("data.offline=true with a warm cache: no request, bit-identical",
              rc == 0 and r.get("requests", -1) == 0 and same_run(local_p, off)[0],
              f"{r} {out[-400:]}")

        # --- exact resume from the URL, cold cache
        part = os.path.join(tmp, "http_resume")
        cold = os.path.join(tmp, "cache_resume")
        rc, out = train(part, url, "train.steps=3", "train.grad_accum=2", "data.shuffle=true",
                        "run.checkpoint_every=3", cache=cold)
        check("the first 3 steps from http://", rc == 0, out[-600:])
        shutil.rmtree(cold, ignore_errors=True)
        rc, out = train(part, url, *packed, "train.resume=auto", cache=cold)
        check("train.resume=auto from http:// with a cold cache", rc == 0 and "resuming from" in out,
              out[-600:])
        ok, why = same_run(local_p, part) if rc == 0 else (False, "")
        check("... the resumed run equals the unbroken local one, bit for bit", ok, why)

        # --- two ranks read their own rows from the URL
        if shutil.which("mpirun"):
            outs = []
            for tag, where in (("local", data), ("http", url)):
                d = os.path.join(tmp, f"mpi_{tag}")
                p = subprocess.run(["mpirun", "-np", "2", CTRAIN, "train", *model, "run.threads=1",
                                    "train.steps=6", "data.shuffle=true", f"data.train={where}",
                                    f"data.val={where}", f"run.dir={d}",
                                    f"data.cache_dir={cache}_mpi", *small_cache],
                                   capture_output=True, text=True, timeout=300,
                                   env=dict(os.environ, **MPI_ENV))
                outs.append((p.returncode, (p.stdout + p.stderr)[-600:]))
            if "built without MPI" in outs[0][1]:
                print("skip: mpirun: this ctrain was built without MPI")
            else:
                ok, why = (same_run(os.path.join(tmp, "mpi_local"), os.path.join(tmp, "mpi_http"))
                           if outs[0][0] == 0 and outs[1][0] == 0 else (False, str(outs)))
                check("mpirun -np 2 from http:// is bit-identical to the same on disk", ok, why)

        # --- a sidecar that changed after prepare, and one that is gone
        side = os.path.join(data, tr[0]["sidecar"]["file"])
        keep = open(side, "rb").read()
        with open(side, "r+b") as f:
            f.seek(len(keep) - 1)
            f.write(bytes([keep[-1] ^ 0x01]))
        rc, out = train(os.path.join(tmp, "bad_side"), url, "train.steps=2", "data.retries=1",
                        cache=os.path.join(tmp, "cache_bad"))
        check("a sidecar changed on the server: exit 2 naming its URL and the manifest's hash",
              rc == 2 and tr[0]["sidecar"]["file"] in out and "do not match the manifest" in out,
              f"exit {rc}: {out[-600:]}")
        os.rename(side, side + ".moved")
        rc, out = train(os.path.join(tmp, "lost_side"), url, "train.steps=2",
                        cache=os.path.join(tmp, "cache_lost"))
        check("a lost sidecar: exit 2 naming its URL and 404",
              rc == 2 and tr[0]["sidecar"]["file"] in out and "404" in out, f"exit {rc}: {out[-600:]}")
        os.rename(side + ".moved", side)
        with open(side, "wb") as f:
            f.write(keep)

    # --- S3: prepare uploads the sidecars; training and eval read them
    with remote_servers.S3rver(os.path.join(tmp, "s3"), "ctbucket") as s3, \
            FaultProxy(s3.port, sigv4=remote_servers.S3RVER_KEYS) as px:
        env = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER",
               "AWS_ENDPOINT_URL": f"http://127.0.0.1:{px.port}", "AWS_REGION": "us-east-1",
               "HOME": tmp}
        rc, out = run("prepare", "--out", "s3://ctbucket/ds/sft/", *prep, env=env)
        check("prepare --format sft --out s3:// uploads", rc == 0 and "s3://ctbucket/ds/sft/" in out,
              out[-600:])
        s3run = os.path.join(tmp, "s3_packed")
        rc, out = train(s3run, "s3://ctbucket/ds/sft/", *packed, env=env,
                        cache=os.path.join(tmp, "cache_s3"))
        check("training from s3://", rc == 0, out[-800:])
        ok, why = same_run(local_p, s3run) if rc == 0 else (False, "")
        check("... bit-identical to the local run", ok, why)
        ev = []
        for where in (data, "s3://ctbucket/ds/sft/"):
            rc, out = run("eval", "--model", local_p, "--data", where, "--batches", "6",
                          "--batch-size", "2", "--seq-len", "64", "--json",
                          env=dict(env, XDG_CACHE_HOME=os.path.join(tmp, "xdg")))
            ev.append(json.loads(out.strip().splitlines()[-1]) if rc == 0 else out[-300:])
        check("ctrain eval --data s3://... scores the counted targets as the local directory",
              isinstance(ev[0], dict) and ev[0] == ev[1] and ev[0].get("tokens", 0) < 6 * 2 * 64,
              str(ev))

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
