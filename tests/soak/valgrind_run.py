#!/usr/bin/env python3
"""Run CLI tests with ctrain under valgrind's memcheck (`make valgrind`).

Each chosen tests/cli/test_NAME.py gets tests/soak/valgrind_ctrain.sh as its
ctrain path, so every process it starts runs under
`valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite`
with one log per process. At the end the logs are read: every memory error
and definite leak is reported once per place (kind and the first frame in
the project's sources, as file:line), with how often, the command of one
process that hit it, its log and its stack. Exit status: 0 when every test
passed and no log holds an error, 1 otherwise, 2 on bad usage.

The default tests cover train, resume (SIGKILL, signals, damaged
checkpoints, a full disk), prepare, tokenize, eval, sample, plan, report,
merge, LoRA, LLaMA, the guard and bad or hostile input; "smoke"
(tests/soak/valgrind_smoke.py) adds the paths those reach only through
refusals (a sample that succeeds, eval --json, plan of the 124M preset, hw,
tokenize --decode, report). Left out: the tests that time processes or
measure their memory (bench*, hf_hostile, plan_rss, monitor_alerts,
progress, trace, tune, hw, soak), mpirun's (mpi), lora_text (a 32,000-token
vocabulary: one of its runs passes its own 300 s limit under valgrind) and
the config sweeps (configs, config_hostile): valgrind makes every process
20-50 times slower and larger, which they would read as failures.

usage: valgrind_run.py [--ctrain PATH] [--jobs N] [--logs DIR] [TEST ...]
       TEST: a name such as resume or test_resume, or smoke (default: the list below)
"""
import argparse
import collections
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WRAPPER = os.path.join(ROOT, "tests", "soak", "valgrind_ctrain.sh")
DEFAULT_TESTS = ["resume", "prepare", "eval", "bad_input", "lora_resume", "report",
                 "memory_limit", "hostile_files", "llama_bad_input", "llama_resume", "guard",
                 "lora_setup", "smoke"]


def script_of(name):
    """tests/cli/test_NAME.py, or for "smoke" tests/soak/valgrind_smoke.py."""
    if name == "smoke":
        return os.path.join(ROOT, "tests", "soak", "valgrind_smoke.py")
    return os.path.join(ROOT, "tests", "cli", f"test_{name}.py")

# first lines of memcheck's error reports (not its warnings)
ERROR_KINDS = re.compile(
    r"^(Invalid (read|write|free|address)|Mismatched free|Conditional jump or move depends on "
    r"uninitialised|Use of uninitialised value|Syscall param .* (uninitialised|unaddressable)|"
    r"Source and destination overlap|Argument '.*' of function .* has a fishy|Jump to the "
    r"invalid address|.* bytes in .* blocks are definitely lost|Invalid .*|.*realloc\(\) with "
    r"size 0)")
FRAME = re.compile(r"^(?:at|by) 0x[0-9A-F]+: (.*?) \((?:in )?([^():]+)(?::(\d+))?\)$")


def project_files():
    names = {}
    for top in ("src", "cli", "include"):
        for root, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                names.setdefault(f, os.path.relpath(os.path.join(root, f), ROOT))
    return names


def parse_log(path):
    """(command, [error blocks: list of lines without the ==PID== prefix], complete?)"""
    with open(path, errors="replace") as f:
        lines = [re.sub(r"^==\d+== ?", "", line.rstrip("\n")) for line in f]
    cmd = next((line[len("Command: "):] for line in lines if line.startswith("Command: ")), "?")
    blocks, cur = [], []
    for line in lines + [""]:
        if line.strip():
            cur.append(line)
        elif cur:
            blocks.append(cur)
            cur = []
    errors = [b for b in blocks if ERROR_KINDS.match(b[0])]
    contexts = [int(m.group(1).replace(",", "")) for m in
                (re.match(r"ERROR SUMMARY: [\d,]+ errors from ([\d,]+) contexts", line)
                 for line in lines) if m]
    if contexts and contexts[-1] > len(errors):  # kinds this script does not know
        errors.append([f"{contexts[-1] - len(errors)} error context(s) of a kind not "
                       f"recognised here (see the log)"])
    return cmd, errors, bool(contexts)


def place(block, files):
    """The first frame in the project's sources: 'src/x.c:123 (func)'."""
    for line in block[1:]:
        m = FRAME.match(line.strip())
        if m and m.group(3) and os.path.basename(m.group(2)) in files:
            return f"{files[os.path.basename(m.group(2))]}:{m.group(3)} ({m.group(1)})"
    frames = [m for m in (FRAME.match(line.strip()) for line in block[1:]) if m]
    for m in frames:  # outside the project: the first frame with a line, else not valgrind's
        if m.group(3):
            return f"{m.group(2)}:{m.group(3)} ({m.group(1)})"
    for m in frames:
        if "vgpreload" not in m.group(2):
            return f"{m.group(2)} ({m.group(1)})"
    return "?"


def kind(first):
    first = re.sub(r"\d[\d,]* bytes in [\d,]+ blocks", "N bytes in N blocks", first)
    first = re.sub(r" in loss record \d+ of \d+", "", first)
    return re.sub(r"of size \d+", "of size N", first) if first.startswith("Invalid") else first


def run_test(name, a, logs):
    script = script_of(name)
    d = os.path.join(logs, name)
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ, CT_VALGRIND_CTRAIN=a.ctrain, CT_VALGRIND_LOGS=d)
    t0 = time.time()
    with open(os.path.join(logs, f"{name}.out"), "wb") as out:
        try:
            p = subprocess.run(["/usr/bin/python3", script, WRAPPER], stdout=out,
                               stderr=subprocess.STDOUT, env=env, cwd=a.cwd,
                               timeout=a.timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return name, rc, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tests", nargs="*", help=f"default: {' '.join(DEFAULT_TESTS)}")
    ap.add_argument("--ctrain", default=os.path.join(ROOT, "build-valgrind", "ctrain"))
    ap.add_argument("--jobs", type=int, default=2, help="tests at a time (default 2)")
    ap.add_argument("--logs", default=os.path.join(ROOT, "build-valgrind", "valgrind-logs"),
                    help="logs and test outputs (emptied first)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per test")
    a = ap.parse_args()
    if not shutil.which("valgrind"):
        print("valgrind_run: valgrind is not installed (Debian/Ubuntu: apt-get install "
              "valgrind); nothing was run")
        return 2
    a.ctrain = os.path.abspath(a.ctrain)
    if not os.access(a.ctrain, os.X_OK):
        print(f"valgrind_run: {a.ctrain} is not an executable (make valgrind builds it)")
        return 2
    tests = [t[5:] if t.startswith("test_") else t for t in (a.tests or DEFAULT_TESTS)]
    tests = [t[:-3] if t.endswith(".py") else t for t in tests]
    for t in tests:
        if not os.path.exists(script_of(t)):
            print(f"valgrind_run: no {os.path.relpath(script_of(t), ROOT)}")
            return 2
    logs = os.path.abspath(a.logs)
    shutil.rmtree(logs, ignore_errors=True)
    os.makedirs(logs)
    a.cwd = logs
    print(f"valgrind_run: {len(tests)} tests, {a.jobs} at a time, ctrain {a.ctrain}, "
          f"logs in {logs}", flush=True)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for name, rc, dt in ex.map(lambda t: run_test(t, a, logs), tests):
            results[name] = rc
            print(f"  {name:<20} {'passed' if rc == 0 else 'FAILED (%s)' % rc:<14} "
                  f"{dt:7.1f} s", flush=True)

    files = project_files()
    found = collections.OrderedDict()  # (kind, place) -> [count, test, cmd, log, block]
    n_logs = n_killed = 0
    for name in tests:
        d = os.path.join(logs, name)
        for log in sorted(os.listdir(d), key=lambda n: int(re.sub(r"\D", "", n) or 0)):
            n_logs += 1
            cmd, errors, complete = parse_log(os.path.join(d, log))
            n_killed += not complete
            for b in errors:
                key = (kind(b[0]), place(b, files))
                if key not in found:
                    found[key] = [0, name, cmd, os.path.join(d, log), b]
                found[key][0] += 1
    failed = [t for t in tests if results[t] != 0]
    silent = [t for t in tests if not os.listdir(os.path.join(logs, t))]
    if silent:  # the wrapper never ran valgrind: no verdict at all
        failed += [t for t in silent if t not in failed]
        print(f"valgrind_run: no valgrind log from {', '.join(silent)}: ctrain never ran "
              f"under valgrind there")
    print(f"valgrind_run: {len(tests) - len(failed)}/{len(tests)} tests passed under valgrind"
          + (f"; failed: {', '.join(failed)} (outputs: {logs}/NAME.out)"
             if failed else ""))
    print(f"valgrind_run: {n_logs} processes checked ({n_killed} ended by a signal before "
          f"valgrind's summary, as the tests kill some on purpose); "
          f"{len(found)} distinct error{'s' if len(found) != 1 else ''}")
    for i, ((k, where), (count, name, cmd, log, block)) in enumerate(found.items(), 1):
        print(f"\n[{i}] {k}\n    at {where}\n    {count} time(s); first in {name}: {cmd}\n"
              f"    log: {log}")
        for line in block[1:25]:
            print("      " + line)
    ok = not failed and not found
    print(f"\nvalgrind_run: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
