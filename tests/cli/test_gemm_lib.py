#!/usr/bin/env python3
"""run.gemm through the real program: oneDNN and OpenBLAS train the same model to
the same losses (within float rounding), oneDNN's runs resume bit-exactly (a
finished 3-step run continued to 6 equals an unbroken 6-step run), `ctrain bench
--gemm` says which library ran, and a bad word is exit 2 naming the key. The
default is auto: its start-up line names the library `ctrain hw` says auto runs
and why, and it never warns of a faster library unused; run.gemm=openblas warns
exactly where auto would run oneDNN (checked both ways here: OPENBLAS_CORETYPE=
Prescott holds OpenBLAS to SSE kernels on any x86-64, where auto runs oneDNN).
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


def run(*args, env=None):
    p = subprocess.run([CTRAIN, *args], capture_output=True, text=True, timeout=600, env=env)
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
        rc, out = run("train", *common, "train.steps=6", "run.gemm=openblas", f"run.dir={ob}")
        check("run.gemm=openblas trains", rc == 0, out)
        # the default, auto: the library `ctrain hw` says auto runs here, named at
        # start-up with the reason hw gives
        rc, hwout = run("hw", "--json", "--no-bench")
        hw = json.loads(hwout) if rc == 0 else {}
        auto = hw.get("gemm_auto")
        check("hw: the default is auto, and says why it runs %s" % auto,
              hw.get("gemm_default") == "auto" and auto in ("onednn", "openblas") and
              hw.get("gemm_auto_why"), hw)
        au = os.path.join(tmp, "auto")
        rc, out = run("train", *common, "train.steps=2", f"run.dir={au}")
        name = {"onednn": "oneDNN", "openblas": "OpenBLAS"}.get(auto, "?")
        check("the default (auto, %s here) trains and its start-up line says which and why" % auto,
              rc == 0 and ("run.gemm=auto: %s runs the GEMMs (%s" % (name, hw.get("gemm_auto_why")))
              in out, out)
        check("the default never warns of a faster library unused",
              "runs oneDNN's here" not in out, out[-400:])
        # where OpenBLAS runs narrower kernels than the cores (held to SSE here), auto
        # runs oneDNN and an explicit openblas is warned about
        narrow = dict(os.environ, OPENBLAS_CORETYPE="Prescott")
        rc, hwn = run("hw", "--json", "--no-bench", env=narrow)
        hwn = json.loads(hwn) if rc == 0 else {}
        if hw.get("onednn_built") and hwn.get("blas_corename") == "Prescott":
            check("hw: with OpenBLAS's SSE kernels auto runs oneDNN", hwn.get("gemm_auto") == "onednn",
                  hwn)
            rc, out = run("train", *common, "train.steps=1", f"run.dir={au}n", env=narrow)
            check("... the default runs oneDNN, without a warning",
                  rc == 0 and "run.gemm=auto: oneDNN runs the GEMMs" in out and
                  "runs oneDNN's here" not in out, out[-400:])
            rc, out = run("train", *common, "train.steps=1", "run.gemm=openblas",
                          f"run.dir={au}o", env=narrow)
            check("... and run.gemm=openblas warns that auto runs oneDNN's kernels here",
                  rc == 0 and "run.gemm=auto (the default) runs oneDNN's here" in out, out[-400:])
        else:
            print("skip: no oneDNN, or OPENBLAS_CORETYPE is not honoured by this OpenBLAS")
        # train.precision=bf16: where its GEMMs are native it runs oneDNN's bf16 matmul
        # even when run.gemm names OpenBLAS; elsewhere train and plan refuse it naming the
        # path that would run, and debug.emulate_bf16 runs it with a warning saying so
        bf = os.path.join(tmp, "bf16")
        if hw.get("bf16_precision_allowed"):
            rc, out = run("train", *common, "train.steps=1", "train.precision=bf16",
                          "run.gemm=openblas", f"run.dir={bf}")
            check("bf16 on a bf16 CPU runs oneDNN's bf16 matmul whatever run.gemm names, and "
                  "the bf16 head (the start-up line says the logits are bf16)",
                  rc == 0 and "oneDNN runs the GEMMs" in out and
                  ("bf16 GEMMs: AMX" in out or "bf16 GEMMs: AVX512_BF16" in out) and
                  "the head's logits bf16" in out, out[-600:])
            rc, out = run("train", *common, "train.steps=1", "train.precision=bf16",
                          "debug.fp32_logits=true", f"run.dir={bf}x")
            check("debug.fp32_logits: the start-up line says the logits are fp32",
                  rc == 0 and "the head's logits fp32" in out, out[-600:])
            # the plan counts the head as it runs: GPT-2 124M's 1024-row chunk, whose fp32
            # gradient the GEMM layer rounds into its buffer (103 MB, of which the linears'
            # own copies, the part's largest otherwise, are 6 MB) only with fp32 logits
            g2 = ["model.preset=gpt2", "train.batch_size=4", "train.seq_len=256",
                  "train.precision=bf16", "--json"]
            plans = []
            for extra in ([], ["debug.fp32_logits=true"]):
                rc, out = run("plan", *g2, *extra)
                try:
                    plans.append(json.loads(out.split("\n", 1)[0]) if rc == 0 else {})
                except ValueError:
                    plans.append({})
            a, b = plans
            check("plan: logits bf16 on a bf16 CPU, fp32 with debug.fp32_logits, whose GEMM "
                  "workspace holds the rounded gradient of the head's chunk",
                  a.get("logits_dtype") == "bf16" and b.get("logits_dtype") == "fp32" and
                  b.get("gemm_workspace_bytes", 0) - a.get("gemm_workspace_bytes", 0) >=
                  0.9 * 1024 * 50257 * 2, "%s %s" % ({k: a.get(k) for k in ("logits_dtype",
                  "gemm_workspace_bytes")}, {k: b.get(k) for k in ("logits_dtype",
                                                                  "gemm_workspace_bytes")}))
        else:
            path = hw.get("bf16_gemm")
            rc, out = run("train", *common, "train.steps=1", "train.precision=bf16",
                          f"run.dir={bf}")
            rcp, outp = run("plan", *common, "train.precision=bf16")
            check("no bf16 instructions: train and plan exit 2 naming the path (%s) and why" % path,
                  rc == 2 and rcp == 2 and all(("would run no bf16 instructions" in o and
                                                path + ":" in o and "no speed-up" in o)
                                               for o in (out, outp)) and not os.path.exists(bf),
                  out[-500:] + outp[-300:])
            rc, out = run("train", *common, "train.steps=1", "train.precision=bf16",
                          "debug.emulate_bf16=true", f"run.dir={bf}")
            check("debug.emulate_bf16 runs it, the start-up line warns which path, and the "
                  "head keeps fp32 logits there",
                  rc == 0 and ("warning: train.precision=bf16: bf16 GEMMs: %s:" % path) in out and
                  "the head's logits fp32" in out, out[-600:])
            rc, out = run("plan", *common, "train.precision=bf16", "debug.emulate_bf16=true",
                          "--json")
            check("plan: emulated bf16 keeps fp32 logits",
                  rc == 0 and '"logits_dtype": "fp32"' in out, out[-300:])
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
