#!/usr/bin/env python3
"""The ready configs in configs/*.yaml load, validate and run.

usage: /usr/bin/python3 tests/cli/test_configs.py path/to/ctrain

For every configs/*.yaml:
  * `ctrain train --config F --print-config` exits 0 (it validates the config), and every
    key the file sets is printed with the file's value; the printed YAML loads back to the
    same output;
  * `ctrain plan --config F --json` sizes the model: the GPT-2 124M preset needs its 124M
    parameters and fits a CPU machine (under 8 GiB); a config whose model.init_from names
    a directory that is not there fails naming its config.json, exit 2 (print-config does
    not need it);
  * a 2-step `ctrain train --config F` with only the model size, the data, the batch shape
    and the step count overridden (a tiny model on synthetic shards) exits 0, so every
    other key of the file (schedule, resume, evaluation, checkpoints) is accepted by the
    trainer.
A config that contradicts itself (warmup longer than the run) is refused by --print-config.
A preset decides the architecture: `--print-config` of llama-demo prints arch: llama (train and
tune), and a model.arch the preset contradicts is named in a warning.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.normpath(os.path.join(HERE, "..", "..", "configs"))
CTRAIN = os.path.abspath(sys.argv[1])
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


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = prefix + str(k)
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def same_value(a, b):
    """YAML values as the file and the printout spell them (1.0e-8 vs 1e-08, 0 vs 0.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    try:
        fa, fb = float(a), float(b)
        return fa == fb or abs(fa - fb) <= 1e-12 * max(abs(fa), abs(fb))
    except (TypeError, ValueError):
        return str(a if a is not None else "") == str(b if b is not None else "")


def main():
    files = sorted(glob.glob(os.path.join(CONFIGS, "*.yaml")))
    names = [os.path.basename(f) for f in files]
    check("configs/ holds demo.yaml, gpt2-124m-brown.yaml and finetune-hf.yaml",
          {"demo.yaml", "gpt2-124m-brown.yaml", "finetune-hf.yaml"} <= set(names), str(names))
    tmp = tempfile.mkdtemp(prefix="ct_configs_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        for name, n, seed in (("tr.bin", 4000, 1), ("va.bin", 1000, 5)):
            rc, _, err = run("synth", "--out", P(name), "--tokens", str(n), "--vocab", "64", "--seed", str(seed))
            assert rc == 0, err
        rc, _, err = run("train", "model.preset=gpt2-tiny", "data.train=" + P("tr.bin"), "train.steps=0",
                         "train.batch_size=2", "train.seq_len=16", "run.dir=" + P("hf_tiny"))
        assert rc == 0, err

        for f in files:
            name = os.path.basename(f)
            with open(f) as fh:
                want = flatten(yaml.safe_load(fh) or {})
            rc, out, err = run("train", "--config", f, "--print-config")
            if not check("%s: --print-config exits 0" % name, rc == 0, err.strip()[:300]):
                continue
            got = flatten(yaml.safe_load(out))
            diff = ["%s: file %r, printed %r" % (k, v, got.get(k, "<missing>"))
                    for k, v in want.items() if k not in got or not same_value(v, got[k])]
            check("%s: all %d keys it sets are printed with its values" % (name, len(want)), not diff,
                  "; ".join(diff[:4]))
            again = P(name + ".printed.yaml")
            with open(again, "w") as fh:
                fh.write(out)
            rc2, out2, err2 = run("train", "--config", again, "--print-config")
            check("%s: the printed config loads back to the same output" % name, rc2 == 0 and out2 == out,
                  err2.strip()[:200])

            rc, out, err = run("plan", "--config", f, "--json")
            init = str(want.get("model.init_from") or "")
            if init and not os.path.isabs(init) and not os.path.isdir(init):
                check("%s: plan with the placeholder model.init_from fails naming %s/config.json (exit 2)"
                      % (name, init), rc == 2 and os.path.join(init, "config.json") in err, err.strip()[:200])
            elif check("%s: plan --json exits 0" % name, rc == 0, err.strip()[:200]):
                plan = json.loads(out)
                if want.get("model.preset") == "gpt2":
                    check("%s: 124M parameters (%d bytes of fp32 weights), total under 8 GiB (%.2f GiB)"
                          % (name, plan["params_bytes"], plan["total_bytes"] / 2 ** 30),
                          120e6 <= plan["params_bytes"] / 4 <= 130e6 and plan["total_bytes"] < 8 * 2 ** 30)

            # a real (tiny) run with the file's other keys
            over = ["data.train=" + P("tr.bin"), "data.val=" + P("va.bin"), "train.steps=2",
                    "train.batch_size=2", "train.seq_len=16", "train.grad_accum=1", "train.eval_batches=1",
                    "schedule.warmup_steps=1", "run.dir=" + P("run_" + name)]
            if init:
                over.append("model.init_from=" + P("hf_tiny"))
            else:
                over += ["model.preset=gpt2-tiny"]
            rc, out, err = run("train", "--config", f, *over)
            check("%s: a 2-step run with the file's other keys exits 0" % name, rc == 0,
                  "" if rc == 0 else err.strip()[-400:])

        rc, out, err = run("train", "--config", os.path.join(CONFIGS, "gpt2-124m-brown.yaml"),
                           "schedule.warmup_steps=301", "--print-config")
        check("a config that contradicts itself is refused by --print-config (exit 2, naming the keys)",
              rc == 2 and "schedule.warmup_steps" in err and "train.steps" in err and not out,
              err.strip()[:200])

        # a preset decides the architecture, and the printed config says which
        for cmd in ("train", "tune"):
            rc, out, err = run(cmd, "model.preset=llama-demo", "--print-config")
            got = yaml.safe_load(out)["model"] if rc == 0 else {}
            check("%s --print-config of the llama-demo preset prints arch: llama" % cmd,
                  got.get("arch") == "llama", "exit %d, arch %r: %s" % (rc, got.get("arch"), err[-200:]))
        rc, out, err = run("train", "--print-config")
        check("without a preset, arch stays gpt2", rc == 0 and yaml.safe_load(out)["model"]["arch"] == "gpt2",
              err[-200:])
        rc, out, err = run("train", "model.preset=gpt2-tiny", "model.arch=llama", "--print-config")
        check("a model.arch the preset contradicts is named in a warning and not used",
              rc == 0 and yaml.safe_load(out)["model"]["arch"] == "gpt2" and "warning" in err and
              "model.arch = llama" in err and "gpt2-tiny" in err, err[-300:])
    finally:
        if failures or os.environ.get("CT_KEEP_TMP"):
            print("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
