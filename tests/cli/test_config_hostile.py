#!/usr/bin/env python3
"""The YAML config reader and writer against hostile input, through the CLI.

usage: /usr/bin/python3 tests/cli/test_config_hostile.py path/to/ctrain

  * string values with newlines, control characters, quotes, backslashes,
    leading or trailing spaces, '#', ': ', YAML indicators, words YAML reads as
    bools, nulls or numbers, and Unicode line breaks, set with key=value:
    `ctrain train --print-config` prints YAML that PyYAML reads back as the
    same strings, and that `--config` loads back to the same printout;
  * a value that is not UTF-8 is refused (exit 2, naming the key);
  * keys nested 7, 8, 9 and 50 deep, a sequence or mapping where a key belongs,
    and a NUL in a value (a \\0 escape or a raw byte) are refused by train, plan
    and tune with exit 2 and a message naming the file, the line and the key
    path (no corrupted key path at depth 8).
"""
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

CTRAIN = os.path.abspath(sys.argv[1])
failures = []


def check(label, ok, detail=""):
    print("%s %s%s" % ("PASS" if ok else "FAIL", label, (": " + detail) if detail and not ok else ""),
          flush=True)
    if not ok:
        failures.append(label)
    return ok


def run(*args):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([CTRAIN, *args], capture_output=True, timeout=120, env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


HOSTILE = [
    "a\nb", "line\n", "\n", "tab\there", "crlf\r\n", "cr\r", "\x01\x1b\x7f", "\"quoted\"", "'single'",
    "back\\slash", "\\", " lead", "trail ", " ", "a  b", "#hash", "a #b", "key: value", "a:b", ":",
    "-", "- x", "? x", "---", "...", "[a, b]", "{a: 1}", "&anchor", "*alias", "!tag", "|", ">",
    "%pct", "@at", "`tick`", "=", "<<", "~", "true", "No", "on", "OFF", "y", "null", "Null", "1",
    "-1", "1.5", "1e3", ".inf", ".nan", "0x1F", "0o17", "1_000", "2024-01-01", "12:30:00",
    "64x128", "./x", "/abs/path", "donn\u00e9es", "nel\u0085", "ls\u2028ps\u2029", "\ufeffbom",
    "c1\u0080\u009f", "\uffff", "emoji \U0001F600", "", "a\\\nb\"c'd#e: f",
]
KEYS = ["run.dir", "data.train", "data.val", "lora.targets", "model.init_from", "debug.bad_steps"]


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + str(k) + "."))
        else:
            out[prefix + str(k)] = v
    return out


def main():
    tmp = tempfile.mkdtemp(prefix="ct_cfg_hostile_")
    P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
    try:
        # ------------------------------------------------ writer -> reader round trip
        bad = []
        for i, s in enumerate(HOSTILE):
            key = KEYS[i % len(KEYS)]
            over = [key + "=" + s]
            if key == "run.dir" and not s:
                over = ["data.val=" + s]  # run.dir must not be empty
                key = "data.val"
            rc, out, err = run("train", *over, "--print-config")
            if rc != 0:
                bad.append("%s=%r: --print-config exit %d: %s" % (key, s, rc, err.strip()[:120]))
                continue
            try:
                got = flat(yaml.safe_load(out)).get(key)
            except yaml.YAMLError as e:
                bad.append("%s=%r: PyYAML cannot read the printout: %s" % (key, s, str(e)[:120]))
                continue
            if got != s:
                bad.append("%s=%r: PyYAML reads back %r" % (key, s, got))
            f = P("printed%d.yaml" % i)
            with open(f, "w", encoding="utf-8", newline="") as fh:
                fh.write(out)
            rc2, out2, err2 = run("train", "--config", f, "--print-config")
            if rc2 != 0 or out2 != out:
                bad.append("%s=%r: --config of the printout %s" % (
                    key, s, "exit %d: %s" % (rc2, err2.strip()[:120]) if rc2 else "prints another config"))
        check("%d hostile strings: --print-config reads back (PyYAML and --config) unchanged"
              % len(HOSTILE), not bad, "; ".join(bad[:6]))

        p = subprocess.run([CTRAIN, "train", os.fsencode("run.dir=runs/") + b"\xff\xfe", "--print-config"],
                           capture_output=True, timeout=60)
        err = p.stderr.decode("utf-8", "replace")
        check("a value that is not UTF-8 is refused naming the key (exit 2)",
              p.returncode == 2 and "run.dir = 'runs/\\xFF\\xFE': expected UTF-8 text" in err, err.strip()[:200])

        # ------------------------------------------------ hostile files: train, plan, tune
        def nested(depth):
            return "".join("%s%s:%s\n" % ("  " * (d - 1), "k%d" % d, " 1" if d == depth else "")
                           for d in range(1, depth + 1))

        def path(n):
            return ".".join("k%d" % d for d in range(1, n + 1))

        cases = [
            ("depth7.yaml", nested(7).encode(), "depth7.yaml:7: unknown config key '%s'" % path(7)),
            ("depth8.yaml", nested(8).encode(), "depth8.yaml:8: unknown config key '%s'" % path(8)),
            ("depth9.yaml", nested(9).encode(),
             "depth9.yaml:9: %s: mappings nested deeper than 8 levels" % path(8)),
            ("depth50.yaml", nested(50).encode(),
             "depth50.yaml:9: %s: mappings nested deeper than 8 levels" % path(8)),
            ("seqkey.yaml", b"{[a, b]: 1}\n", "seqkey.yaml:1: a key must be a plain scalar, found a sequence"),
            ("cplxkey.yaml", b"train:\n  steps: 2\n  ? [a]\n  : 1\n",
             "cplxkey.yaml:3: train: a key must be a plain scalar, found a sequence"),
            ("mapkey.yaml", b"{{a: 1}: 2}\n", "mapkey.yaml:1: a key must be a plain scalar, found a mapping"),
            ("nulesc.yaml", b"run:\n  dir: \"ab\\0cd\"\n",
             "nulesc.yaml:2: run.dir: the value holds a NUL character"),
            ("nulraw.yaml", b"train:\n  steps: 2\nrun:\n  dir: ab\0cd\n",
             "nulraw.yaml:4: run.dir: the value holds a NUL character"),
        ]
        for name, text, want in cases:
            with open(P(name), "wb") as fh:
                fh.write(text)
            for cmd in ("train", "plan", "tune"):
                rc, out, err = run(cmd, "--config", P(name))
                check("%s %s: exit 2 naming the file, line and key" % (cmd, name),
                      rc == 2 and want in err, "exit %d: %s" % (rc, err.strip()[:300]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
