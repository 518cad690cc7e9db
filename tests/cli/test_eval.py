#!/usr/bin/env python3
"""`ctrain eval` through the real program.

usage: /usr/bin/python3 tests/cli/test_eval.py path/to/ctrain

A gpt2-tiny model is trained for 8 steps on a synthetic shard (`ctrain synth`) with a
validation pass at steps 4 and 8 and a checkpoint at step 4. Then:
  * `ctrain eval` on the run directory and on the step-4 checkpoint, with the trainer's
    validation batches, gives the trainer's "val" loss of that step in metrics.jsonl
    (relative 1e-6), with perplexity == exp(loss) and the tokens and batches scored;
  * every full window once (the default), the default batch shape, a batch count that
    wraps past the end of the data, and a directory, glob or --split choice of shards all
    score the windows they should: the mean loss equals PyTorch's (tests/golden/gpt2_ref.py,
    the same weights and windows) to 1e-5 relative;
  * bad input exits 2 naming the file: a missing model directory or weights file, missing
    data, a shard shorter than one batch, tokens >= the vocabulary, a sequence longer than
    the context, a corrupt checkpoint; bad options exit 2 too.
"""
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "golden"))
try:
    import numpy as np
    import torch
except ImportError as e:  # torch is a declared test dependency (scripts/bootstrap.sh)
    print("FAIL: %s; install python3-torch and run with /usr/bin/python3" % e)
    sys.exit(1)
import gpt2_ref as R  # noqa: E402

CTRAIN = os.path.abspath(sys.argv[1])
B, T, EVAL_BATCHES = 4, 16, 5
failures = []


def check(label, ok, detail=""):
    print("%s %s%s" % ("PASS" if ok else "FAIL", label, (": " + detail) if detail else ""), flush=True)
    if not ok:
        failures.append(label)
    return ok


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=300, env=env)
    return p.returncode, p.stdout, p.stderr


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def eval_json(label, *args):
    rc, out, err = run("eval", *args, "--json")
    if not check("%s: exit status 0" % label, rc == 0, err.strip()[-400:]):
        return None
    try:
        return json.loads(out)
    except ValueError as e:
        check("%s: stdout is one JSON object" % label, False, "%s: %r" % (e, out[:200]))
        return None


def torch_mean_loss(model_dir, tokens, b, t, n):
    """Mean over the first n sequential windows (wrapping like the loader) in torch."""
    config, params = R.load_hf_dir(model_dir)
    gen = R.sequential_batches(tokens, b, t)
    return sum(R.loss_on_batch(params, config, *next(gen)) for _ in range(n)) / n


def expect_fail(label, args, must_contain):
    rc, out, err = run(*args)
    missing = [s for s in must_contain if s not in err]
    ok = rc == 2 and not missing and not out.strip()
    detail = err.strip().splitlines()[0][:200] if err.strip() else ""
    if not ok:
        detail = "exit %d, message lacks %s, stdout %r; stderr: %s" % (rc, missing, out[:100], err.strip()[:400])
    check("bad input: %s" % label, ok, detail)


def val_losses(run_dir):
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("split") == "val":
                out[rec["step"]] = float(rec["loss"])
    return out


def main():
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="ct_eval_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        for name, n, seed in (("tr.bin", 20000, 1), ("va.bin", 3000, 5)):
            rc, _, err = run("synth", "--out", P(name), "--tokens", str(n), "--vocab", "64",
                             "--seed", str(seed))
            assert rc == 0, err
        va = R.read_shard(P("va.bin"))
        tr = R.read_shard(P("tr.bin"))
        rc, _, err = run("train", "model.preset=gpt2-tiny", "data.train=" + P("tr.bin"),
                         "data.val=" + P("va.bin"), "train.steps=8", "train.batch_size=%d" % B,
                         "train.seq_len=%d" % T, "train.eval_every=4",
                         "train.eval_batches=%d" % EVAL_BATCHES, "optim.lr=1e-2",
                         "run.checkpoint_every=4", "run.dir=" + P("run"))
        if not check("ctrain train (8 steps, val at 4 and 8, checkpoint at 4)", rc == 0, err[-400:]):
            return 1
        vals = val_losses(P("run"))
        check("metrics.jsonl has val losses at steps 4 and 8", sorted(vals) == [4, 8], str(vals))
        if sorted(vals) != [4, 8]:
            return 1
        check("the two val losses differ (the weights moved)", rel(vals[4], vals[8]) > 1e-4,
              "%.9g vs %.9g" % (vals[4], vals[8]))

        # --- the trainer's validation batches -------------------------------------------
        same = ["--data", P("va.bin"), "--batch-size", str(B), "--seq-len", str(T),
                "--batches", str(EVAL_BATCHES)]
        r = eval_json("final weights", "--model", P("run"), *same)
        if r:
            check("final weights: loss == trainer's val loss at step 8 (rel 1e-6)",
                  rel(r["loss"], vals[8]) <= 1e-6, "eval %.9g trainer %.9g" % (r["loss"], vals[8]))
            check("final weights: perplexity == exp(loss)",
                  rel(r["perplexity"], math.exp(r["loss"])) <= 1e-12,
                  "%.17g vs exp %.17g" % (r["perplexity"], math.exp(r["loss"])))
            check("final weights: tokens == batches*B*T and batches == %d" % EVAL_BATCHES,
                  r["tokens"] == EVAL_BATCHES * B * T and r["batches"] == EVAL_BATCHES, str(r))
            check("--json prints exactly loss, perplexity, tokens, batches",
                  set(r) == {"loss", "perplexity", "tokens", "batches"}, str(sorted(r)))
        ckpts = [d for d in glob.glob(P("run", "checkpoints", "step_*"))
                 if re.fullmatch(r"step_0*4", os.path.basename(d))]
        if check("run.dir/checkpoints holds the step-4 checkpoint", len(ckpts) == 1,
                 str(os.listdir(P("run", "checkpoints")) if os.path.isdir(P("run", "checkpoints")) else [])):
            ck = ckpts[0]
            r = eval_json("checkpoint of step 4", "--model", ck, *same)
            if r:
                check("checkpoint: loss == trainer's val loss at step 4 (rel 1e-6)",
                      rel(r["loss"], vals[4]) <= 1e-6, "eval %.9g trainer %.9g" % (r["loss"], vals[4]))
            rc, out, err = run("eval", "--model", ck, *same)
            m = re.search(r"^loss\s+([0-9.]+)$", out, re.M)
            check("text output: model, data, tokens scored, loss and perplexity lines",
                  rc == 0 and m and abs(float(m.group(1)) - vals[4]) < 2e-6
                  and re.search(r"^perplexity\s+[0-9.]+$", out, re.M)
                  and "%d tokens" % (EVAL_BATCHES * B * T) in out and ck in out, out + err)
            if os.path.isfile(os.path.join(ck, "MANIFEST.json")):
                # a checkpoint with a manifest is verified: flip one byte of its weights
                bad = P("ck_bad")
                shutil.copytree(ck, bad)
                wpath = os.path.join(bad, "model.safetensors")
                with open(wpath, "r+b") as f:
                    f.seek(os.path.getsize(wpath) - 3)
                    c = f.read(1)
                    f.seek(-1, 1)
                    f.write(bytes([c[0] ^ 0x40]))
                expect_fail("checkpoint whose weights do not match its manifest",
                            ["eval", "--model", bad, *same], ["model.safetensors"])
                # a run directory without final weights scores its newest valid checkpoint
                rd = P("run_ckpt_only")
                shutil.copytree(P("run", "checkpoints"), os.path.join(rd, "checkpoints"))
                r = eval_json("run directory with checkpoints only", "--model", rd, *same)
                if r:
                    # checkpoints at step 4 and at the end (step 8): the newest is scored
                    check("run directory without final weights: newest checkpoint scored",
                          rel(r["loss"], vals[8]) <= 1e-6, "%.9g vs step-8 val %.9g" % (r["loss"], vals[8]))

        # --- which windows: against PyTorch on the same weights ----------------------------
        n_all = (len(va) - 1) // (B * T)
        r = eval_json("every window once", "--model", P("run"), "--data", P("va.bin"),
                      "--batch-size", str(B), "--seq-len", str(T))
        ref_all = torch_mean_loss(P("run"), va, B, T, n_all)
        if r:
            check("default --batches: every full window once (%d batches, %d tokens)" % (n_all, n_all * B * T),
                  r["batches"] == n_all and r["tokens"] == n_all * B * T, str(r))
            check("every window once: loss == torch's mean over the same windows (rel 1e-5)",
                  rel(r["loss"], ref_all) <= 1e-5, "ctrain %.9g torch %.9g (rel %.1e)"
                  % (r["loss"], ref_all, rel(r["loss"], ref_all)))
        # a model directory without a run's config.yaml: T = its context
        os.makedirs(P("hf"))
        for f in ("config.json", "model.safetensors"):
            shutil.copy(P("run", f), P("hf", f))
        r = eval_json("default batch shape", "--model", P("hf"), "--data", P("va.bin"))
        n_def = (len(va) - 1) // 32
        if r:
            ref = torch_mean_loss(P("run"), va, 1, 32, n_def)
            check("default shape B=1, T=n_ctx=32: %d batches, loss == torch (rel 1e-5)" % n_def,
                  r["batches"] == n_def and r["tokens"] == n_def * 32 and rel(r["loss"], ref) <= 1e-5,
                  "%s torch %.9g" % (r, ref))
        # a run directory: T = the run's train.seq_len
        r = eval_json("a run's default shape", "--model", P("run"), "--data", P("va.bin"))
        n_run = (len(va) - 1) // T
        if r:
            ref = torch_mean_loss(P("run"), va, 1, T, n_run)
            check("a run's default shape B=1, T=train.seq_len=%d: loss == torch (rel 1e-5)" % T,
                  r["batches"] == n_run and r["tokens"] == n_run * T and rel(r["loss"], ref) <= 1e-5,
                  "%s torch %.9g" % (r, ref))
        r = eval_json("batches past the end", "--model", P("run"), "--data", P("va.bin"),
                      "--batch-size", str(B), "--seq-len", str(T), "--batches", str(n_all + 3))
        if r:
            ref = torch_mean_loss(P("run"), va, B, T, n_all + 3)
            check("--batches %d wraps to the start like the trainer: loss == torch (rel 1e-5)" % (n_all + 3),
                  r["batches"] == n_all + 3 and rel(r["loss"], ref) <= 1e-5, "%s torch %.9g" % (r, ref))
        d = P("shards")
        os.makedirs(d)
        shutil.copy(P("tr.bin"), os.path.join(d, "train_000000.bin"))
        shutil.copy(P("va.bin"), os.path.join(d, "val_000000.bin"))
        shape = ["--batch-size", str(B), "--seq-len", str(T)]
        r = eval_json("directory", "--model", P("run"), "--data", d, *shape)
        if r:
            check("a directory: val_*.bin preferred (same as the val shard itself)",
                  r["batches"] == n_all and rel(r["loss"], ref_all) <= 1e-5, str(r))
        r = eval_json("glob", "--model", P("run"), "--data", os.path.join(d, "val_*.bin"), *shape)
        if r:
            check("a glob: same as the val shard", r["batches"] == n_all and rel(r["loss"], ref_all) <= 1e-5,
                  str(r))
        r = eval_json("--split train", "--model", P("run"), "--data", d, "--split", "train", *shape,
                      "--batches", "20")
        if r:
            ref = torch_mean_loss(P("run"), tr, B, T, 20)
            check("--split train takes train_*.bin: loss == torch on the train shard (rel 1e-5)",
                  rel(r["loss"], ref) <= 1e-5 and rel(ref, ref_all) > 1e-4, "%s torch %.9g" % (r, ref))

        # --- bad input ----------------------------------------------------------------------
        nomodel = P("nomodel")
        expect_fail("missing model directory", ["eval", "--model", nomodel, "--data", P("va.bin")],
                    [nomodel])
        noweights = P("noweights")
        os.makedirs(noweights)
        shutil.copy(P("run", "config.json"), noweights)
        expect_fail("model directory without model.safetensors",
                    ["eval", "--model", noweights, "--data", P("va.bin")],
                    [os.path.join(noweights, "model.safetensors")])
        empty = P("empty")
        os.makedirs(empty)
        expect_fail("directory without config.json", ["eval", "--model", empty, "--data", P("va.bin")],
                    [os.path.join(empty, "config.json")])
        expect_fail("missing data", ["eval", "--model", P("run"), "--data", P("nope.bin")], [P("nope.bin")])
        R.write_shard(P("short.bin"), va[:B * T])   # one token short of a batch
        expect_fail("shard shorter than one batch",
                    ["eval", "--model", P("run"), "--data", P("short.bin"), *shape],
                    [P("short.bin"), "%d" % (B * T + 1)])
        big = va.copy()
        big[100] = 64
        R.write_shard(P("big.bin"), big)
        expect_fail("token >= vocab_size", ["eval", "--model", P("run"), "--data", P("big.bin"), *shape],
                    [P("big.bin"), "64", "index 100", "vocab_size"])
        expect_fail("--seq-len above n_ctx",
                    ["eval", "--model", P("run"), "--data", P("va.bin"), "--seq-len", "33"],
                    ["--seq-len", "n_ctx = 32"])
        expect_fail("no --data", ["eval", "--model", P("run")], ["--data"])
        expect_fail("no --model", ["eval", "--data", P("va.bin")], ["--model"])
        expect_fail("--batches 0", ["eval", "--model", P("run"), "--data", P("va.bin"), "--batches", "0"],
                    ["--batches"])
        expect_fail("unknown option", ["eval", "--model", P("run"), "--data", P("va.bin"), "--bogus", "1"],
                    ["--bogus"])
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
