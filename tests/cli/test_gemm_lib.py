#!/usr/bin/env python3
"""run.gemm through the real program: oneDNN and OpenBLAS train the same model to
the same losses (within float rounding), oneDNN's runs resume bit-exactly (a
finished 3-step run continued to 6 equals an unbroken 6-step run), `ctrain bench
--gemm` says which library ran, and a bad word is exit 2 naming the key.
Skips the oneDNN parts when the build has no oneDNN.

usage: test_gemm_lib.py path/to/ctrain
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

CTRAIN = os.path.abspath(sys.argv[1])
failures = []


def check(label, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + label + ("" if ok else ": " + str(detail)[-800:]))
    if not ok:
        failures.append(label)


def run(*args):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def losses(d):
    out = {}
    for line in open(os.path.join(d, "metrics.jsonl")):
        m = json.loads(line)
        if m["split"] == "train":
            out[m["step"]] = m["loss"]
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="ct_gemm_")
    try:
        shard = os.path.join(tmp, "train.bin")
        rc, out = run("synth", "--out", shard, "--tokens", "20000", "--vocab", "64", "--seed", "3")
        check("synth", rc == 0, out)
        common = ["model.preset=gpt2-tiny", f"data.train={shard}", "train.batch_size=4",
                  "train.seq_len=32", "run.threads=2", "optim.lr=3e-3", "data.shuffle=true"]
        rc, out = run("train", *common, "train.steps=6", "run.gemm=mkl",
                      f"run.dir={os.path.join(tmp, 'bad')}")
        check("run.gemm=mkl: exit 2 naming the key and the words", rc == 2 and "run.gemm" in out
              and "openblas" in out, out)
        rc, out = run("bench", "gemm", "--preset", "gpt2-tiny", "--seq", "32", "--gemm", "openblas", "--json")
        check("bench --gemm openblas runs", rc == 0, out)
        ob = os.path.join(tmp, "openblas")
        rc, out_default = run("train", *common, "train.steps=6", f"run.dir={ob}")
        check("the default (OpenBLAS) trains", rc == 0, out_default)
        # auto: the library `ctrain hw` says auto runs on this machine, named at start-up
        rc, hwout = run("hw", "--json", "--no-bench")
        hw = json.loads(hwout) if rc == 0 else {}
        auto = hw.get("gemm_auto")
        au = os.path.join(tmp, "auto")
        rc, out = run("train", *common, "train.steps=2", "run.gemm=auto", f"run.dir={au}")
        said = "run.gemm=auto: oneDNN runs the GEMMs" in out
        check("run.gemm=auto (%s here) trains and says so when it runs oneDNN" % auto,
              rc == 0 and auto in ("onednn", "openblas") and said == (auto == "onednn"), out)
        # the default on a machine where auto would run oneDNN says so, once
        warned = "run.gemm=auto runs oneDNN's here" in out_default
        check("the default warns exactly when auto would run oneDNN (%s)" % auto,
              warned == (auto == "onednn"), out_default[-400:])
        rc, out = run("bench", "step", "--preset", "gpt2-tiny", "--seq", "32", "--steps", "1", "--gemm", "onednn",
                      "--json")
        if rc == 2 and "no oneDNN" in out:
            print("skip: this build has no oneDNN")
            return 1 if failures else 0
        step = json.loads(out.strip().splitlines()[-1]) if rc == 0 else {}
        check("bench step --gemm onednn says oneDNN ran", step.get("gemm") == "onednn", out)
        dn = os.path.join(tmp, "onednn")
        rc, out = run("train", *common, "train.steps=6", "run.gemm=onednn", f"run.dir={dn}")
        check("run.gemm=onednn trains, and says the plan counts its workspace",
              rc == 0 and "the plan counts its workspace" in out, out)
        a, b = losses(ob), losses(dn)
        worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a) if sorted(a) == sorted(b) else 1
        check("oneDNN and OpenBLAS give the same losses (1e-4)", worst < 1e-4 and a[6] < a[1],
              f"{a} vs {b}")
        res = os.path.join(tmp, "resumed")
        rc1, out1 = run("train", *common, "train.steps=3", "run.gemm=onednn", f"run.dir={res}")
        rc2, out2 = run("train", *common, "train.steps=6", "run.gemm=onednn", "train.resume=auto",
                        f"run.dir={res}")
        same = rc1 == 0 and rc2 == 0 and losses(res) == losses(dn) and \
            open(os.path.join(res, "model.safetensors"), "rb").read() == \
            open(os.path.join(dn, "model.safetensors"), "rb").read()
        check("oneDNN: a resumed run is bit-identical to an unbroken one", same,
              out1[-300:] + out2[-300:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
