#!/usr/bin/env python3
"""scripts/gpu_check.sh's stages, on any machine: timeouts, the summary, the rerun.

usage: /usr/bin/python3 tests/cli/test_gpu_check.py path/to/ctrain

The GPU checks run on a GPU machine; what must hold before one is at hand is how the
command spends its minutes. With stages replaced by fakes (GPU_CHECK_FAKE):
  * a stage that hangs is killed at its own timeout (GPU_CHECK_CAP_<stage>), its
    processes with it, and the next stage still runs;
  * summary.md is rewritten after every stage: while the hung stage runs, it already
    holds the finished stages' results and says the stage is running;
  * the summary names the command that reruns what failed, and `--rerun` on the same
    machine runs only that; a clean rerun exits 0;
  * a stage starts only with time left of the budget (GPU_CHECK_BUDGET_S): a hang
    cannot take more than what is left, and later stages are said to be skipped;
  * the hf stage without transformers is "skipped: transformers not installed";
  * the peers stage (the speed comparisons) runs only when named: a run of every stage
    leaves it out, `--stages peers` runs it;
  * a CTRAIN that is not a program fails setup, naming it, and nothing else runs;
  * when the default bf16 attention fails its kernel test where another implementation
    passes, the stages after it (and a later `--stages peers` on the machine) run that
    one, and the summary says so;
  * no OUTDIR: the usage, exit 2.
"""
import os
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check.sh")
failures = 0


def check(ok, what):
    global failures
    print(("PASS: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures += 1


def row(summary, stage):
    for line in summary.splitlines():
        if line.startswith("| %s |" % stage):
            return line.split("|")[3].strip()
    return None


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


with tempfile.TemporaryDirectory() as tmp:
    work, out = os.path.join(tmp, "work"), os.path.join(tmp, "out")
    env = dict(os.environ, CTRAIN=CTRAIN, GPU_CHECK_WORK=work, GPU_CHECK_FAKE="kernels:hang",
               GPU_CHECK_CAP_kernels="3")
    env.pop("CTRAIN_DEVICE", None)
    t0 = time.time()
    p = subprocess.Popen(["bash", SCRIPT, "--stages", "env,kernels,hf", out], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    during = None
    while p.poll() is None and time.time() - t0 < 120:
        try:
            s = open(os.path.join(out, "summary.md")).read()
            if (row(s, "kernels") or "").startswith("running"):
                during = s
        except OSError:
            pass
        time.sleep(0.1)
    rc = p.wait(timeout=60)
    took = time.time() - t0
    s = open(os.path.join(out, "summary.md")).read()
    print(s)
    check(during is not None and row(during, "env") == "ok" and row(during, "hf") is None,
          "while the kernels stage hangs, summary.md holds env's result and says kernels runs")
    k = row(s, "kernels") or ""
    check(k.startswith("TIMEOUT: killed after 3 s"), "the hung stage is killed at its timeout "
          "(%s)" % k)
    pid_file = os.path.join(work, "fake_hang.pid")
    pid = int(open(pid_file).read()) if os.path.exists(pid_file) else 0
    check(pid > 0 and not alive(pid), "its process is gone (pid %d)" % pid)
    h = row(s, "hf") or ""
    has_hf = subprocess.run([sys.executable, "-c", "import transformers"],
                            capture_output=True).returncode == 0
    check(h.startswith("skipped: transformers not installed") or (has_hf and h),
          "the next stage still runs: hf %s" % h)
    check(all(row(s, st) is None for st in ("sync", "sanitize", "training", "bench")),
          "stages not asked for do not run")
    check(rc == 1 and took < 90, "a timeout fails the check (exit %d, %.0f s)" % (rc, took))
    check("scripts/gpu_check.sh --stages kernels " in s, "the summary names the rerun")

    env["GPU_CHECK_FAKE"] = "kernels:pass"
    rc = subprocess.run(["bash", SCRIPT, "--rerun", out], env=env, capture_output=True,
                        timeout=120).returncode
    s = open(os.path.join(out, "summary.md")).read()
    check(rc == 0 and row(s, "kernels") == "ok (fake)" and row(s, "hf") is None
          and "rerun what failed" not in s,
          "--rerun runs the failed stage only, and passes (exit %d)" % rc)
    check(not os.path.exists(os.path.join(work, "last_failed")), "nothing is left to rerun")

    # the budget: a hang takes what is left, and the stages after it are skipped
    out2 = os.path.join(tmp, "out2")
    env.update(GPU_CHECK_FAKE="env:pass,kernels:hang", GPU_CHECK_BUDGET_S="12")
    env.pop("GPU_CHECK_CAP_kernels")
    t0 = time.time()
    rc = subprocess.run(["bash", SCRIPT, "--stages", "kernels,hf", out2], env=env,
                        capture_output=True, timeout=120).returncode
    took = time.time() - t0
    s = open(os.path.join(out2, "summary.md")).read()
    k, h = row(s, "kernels") or "", row(s, "hf") or ""
    check(k.startswith("TIMEOUT") and "left of the budget" in h and rc == 1 and took < 30,
          "within a 12 s budget the hang is cut short (%s) and hf is skipped (%s), %.0f s"
          % (k, h, took))
    check("--stages kernels,hf" in s, "the rerun names both")

    # peers: not part of "every stage", run when named
    out3 = os.path.join(tmp, "out3")
    env.update(GPU_CHECK_BUDGET_S="60", GPU_CHECK_FAKE=",".join(
        "%s:pass" % st for st in ("env", "setup", "sync", "kernels", "sanitize", "training",
                                  "bench", "hf", "peers")))
    rc = subprocess.run(["bash", SCRIPT, out3], env=env, capture_output=True,
                        timeout=120).returncode
    s = open(os.path.join(out3, "summary.md")).read()
    check(rc == 0 and row(s, "bench") == "ok (fake)" and row(s, "peers") is None,
          "every stage but peers runs when none are named (exit %d, peers %s)"
          % (rc, row(s, "peers")))
    rc = subprocess.run(["bash", SCRIPT, "--stages", "peers", out3], env=env,
                        capture_output=True, timeout=120).returncode
    s = open(os.path.join(out3, "summary.md")).read()
    check(rc == 0 and row(s, "peers") == "ok (fake)" and row(s, "bench") is None,
          "--stages peers runs it (exit %d, peers %s)" % (rc, row(s, "peers")))

    # a CTRAIN that is not a program: setup says so and nothing else runs
    out4 = os.path.join(tmp, "out4")
    env4 = dict(env, CTRAIN=os.path.join(tmp, "no-such-ctrain"), GPU_CHECK_FAKE="env:pass")
    rc = subprocess.run(["bash", SCRIPT, "--stages", "kernels", out4], env=env4,
                        capture_output=True, timeout=120).returncode
    s = open(os.path.join(out4, "summary.md")).read()
    su, k = row(s, "setup") or "", row(s, "kernels") or ""
    check(rc == 1 and su.startswith("FAIL") and "not an executable" in su and
          k.startswith("not run"), "a missing CTRAIN fails setup by name (%s; kernels %s)"
          % (su, k))

    # the default bf16 attention fails its kernel test where WMMA passes: the later
    # stages, and a later --stages peers, run WMMA; once the default passes, none do
    fb = os.path.join(tmp, "fb")
    os.makedirs(fb)
    def fake(name, body):
        path = os.path.join(fb, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body + "\n")
        os.chmod(path, 0o755)
    fake("ctrain", "exit 0")
    fake("test_kernels_llama", 'echo "attention ${CT_CUDA_ATTENTION:-auto}" >>"$FB_LOG"\n'
         '[ "${CT_CUDA_ATTENTION:-auto}" = wmma ] || [ -e "$FB_FIXED" ] && exit 0\n'
         'echo "FAIL: flash out differs"; exit 1')
    out5, fixed = os.path.join(tmp, "out5"), os.path.join(tmp, "fixed")
    env5 = dict(env, CTRAIN=os.path.join(fb, "ctrain"), FB_LOG=os.path.join(tmp, "fb.log"),
                FB_FIXED=fixed, GPU_CHECK_FAKE="env:pass,bench:pass,peers:pass")
    env5.pop("CT_CUDA_ATTENTION", None)
    rc = subprocess.run(["bash", SCRIPT, "--stages", "kernels,bench", "--tests",
                         "test_kernels_llama", out5], env=env5, capture_output=True,
                        timeout=120).returncode
    s = open(os.path.join(out5, "summary.md")).read()
    ran = sorted(open(env5["FB_LOG"]).read().split("\n"))
    k = row(s, "kernels") or ""
    check(rc == 1 and k.startswith("FAIL: test_kernels_llama test_kernels_llama_mma1 (1 of 3")
          and ran == ["", "attention auto", "attention mma1", "attention wmma"],
          "the default and mma1 fail, wmma passes: the stage fails (%s)" % k)
    bench_part = s.split("\nbench:\n", 1)[-1]
    check("FALLBACK" in s and "CT_CUDA_ATTENTION=wmma passed" in s and
          "CT_CUDA_ATTENTION=wmma: the default" in bench_part,
          "the summary names the fallback, and the bench stage runs under it")
    rc = subprocess.run(["bash", SCRIPT, "--stages", "peers", out5], env=env5,
                        capture_output=True, timeout=120).returncode
    s = open(os.path.join(out5, "summary.md")).read()
    check(rc == 0 and "CT_CUDA_ATTENTION=wmma: the default" in s,
          "a later --stages peers on the same machine runs under it too")
    open(fixed, "w").close()
    rc = subprocess.run(["bash", SCRIPT, "--stages", "kernels,bench", "--tests",
                         "test_kernels_llama", out5], env=env5, capture_output=True,
                        timeout=120).returncode
    s = open(os.path.join(out5, "summary.md")).read()
    check(rc == 0 and "CT_CUDA_ATTENTION" not in s and
          not os.path.exists(os.path.join(work, "attention_fallback")),
          "once the default passes, no stage runs under a fallback (exit %d)" % rc)

    p = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=30)
    check(p.returncode == 2 and "OUTDIR" in p.stdout, "no OUTDIR: usage, exit 2")

print("%d failure(s)" % failures)
sys.exit(1 if failures else 0)
