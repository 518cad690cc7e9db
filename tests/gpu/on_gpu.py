#!/usr/bin/env python3
"""Run one of the training tests on the GPU: on_gpu.py path/to/ctrain path/to/test.py

The test runs as it does on the CPU, with CTRAIN_DEVICE=cuda (the default run.device of
every ctrain command it starts). Without a GPU, or with a ctrain built without the CUDA
backend, it says why and exits 77, which ctest reports as skipped; with CT_GPU_REQUIRED=1
(`make test-gpu`) that is a failure (exit 1) instead.
"""
import os
import subprocess
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    ctrain, test = sys.argv[1], sys.argv[2]
    required = os.environ.get("CT_GPU_REQUIRED", "0") not in ("", "0")
    # ctrain itself says whether it can train on a GPU here: the config check
    # refuses run.device=cuda in a build without CUDA, and `ctrain hw` names the GPUs
    # the CUDA backend sees (none: no device, with the driver's reason)
    p = subprocess.run([ctrain, "hw", "--json", "--no-bench"], capture_output=True, text=True, timeout=120)
    why = None
    try:
        import json
        hw = json.loads(p.stdout)
        if not hw.get("cuda_built"):
            why = "this ctrain was built without the CUDA backend"
        elif not hw.get("cuda_devices"):
            why = "no CUDA device: %s" % hw.get("cuda_error", "the driver sees none")
    except ValueError:
        why = "ctrain hw --json failed: %s" % (p.stderr.strip()[-300:] or p.returncode)
    if why:
        print("%s: %s" % ("FAIL" if required else "skip", why))
        return 1 if required else 77
    env = dict(os.environ, CTRAIN_DEVICE="cuda")
    return subprocess.call([sys.executable, test, ctrain], env=env)


if __name__ == "__main__":
    sys.exit(main())
