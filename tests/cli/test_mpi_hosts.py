#!/usr/bin/env python3
"""Data parallel across two "hosts": network namespaces joined by a veth pair.

Two network namespaces, each with its own host name (a UTS namespace) and one
end of a veth pair, stand for two machines on a network. mpirun runs in the
first and starts the second's rank through a launch agent that enters the
namespace (where a cluster would use ssh); ranks talk over TCP only (the tcp
and self transports, on the veth's subnet). run.dir is one directory both
see, as on a shared filesystem.

- 2 hosts x batch 2 equal 1 process x batch 4 in every step's loss and grad
  norm (to 1e-5), and the startup line names both hosts.
- The link cut (`ip link set ... down`) while the job trains: rank 0 exits
  within dist.timeout_s (plus 2 s of slack: the step under way, and
  MPI_Abort) with a message naming rank 1
  and its host; once the link is back (and the other host's leftovers are
  gone, as after its reboot), train.resume=auto on both hosts resumes from
  the last checkpoint, and every step's loss and the final weights equal an
  uninterrupted run's bit for bit.
- With Open MPI's TCP keepalive turned short, mpirun itself notices the lost
  host and ends the job within seconds (without it, mpirun waits on the lost
  daemon for as long as TCP retries: the test then stops it).
- The other host's rank killed (SIGKILL): the job ends within 30 s naming rank
  1, and resumes bit-exactly.

Needs root (network namespaces), `ip`, `unshare`, mpirun and a ctrain built
with MPI; skips (exit 0, saying why) without them.

usage: test_mpi_hosts.py path/to/ctrain
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

CTRAIN = os.path.abspath(sys.argv[1])
PID = os.getpid()
NS = (f"ct{PID}a", f"ct{PID}b")
VETH = (f"cv{PID}a", f"cv{PID}b")
NET = f"10.{200 + (PID >> 16) % 50}.{(PID >> 8) % 256}"  # a /24 of this test's own
ADDR = (f"{NET}.1", f"{NET}.2")
HOST = ("hosta", "hostb")
TIMEOUT_S = 4
failures = []
checks = 0

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_hwloc_base_binding_policy": "none",
    "OMPI_MCA_pml": "ob1",
    "OMPI_MCA_btl": "tcp,self",
    "OMPI_MCA_btl_tcp_if_include": f"{NET}.0/24",
    "OMPI_MCA_oob_tcp_if_include": f"{NET}.0/24",
}


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}")
    else:
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500])


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def ns_pids(ns):
    out = sh("ip", "netns", "pids", ns).stdout.split()
    return [int(p) for p in out if p.isdigit()]


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def kill_ns(ns):
    """Every process in the namespace, SIGKILLed: the host 'reboots'."""
    for _ in range(20):
        pids = ns_pids(ns)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, 9)
            except OSError:
                pass
        time.sleep(0.1)


def teardown():
    for ns in NS:
        kill_ns(ns)
        sh("ip", "netns", "del", ns)


def setup(tmp):
    """The two namespaces, the veth pair, and the launch agent; None or why not."""
    if os.geteuid() != 0:
        return "not root (network namespaces need it; CI runs as root)"
    for tool in ("ip", "unshare", "mpirun"):
        if not shutil.which(tool):
            return f"{tool} not found (scripts/bootstrap.sh installs iproute2 and openmpi-bin)"
    r = sh("ip", "netns", "add", NS[0])
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    steps = [["ip", "netns", "add", NS[1]],
             ["ip", "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1]]]
    for i in (0, 1):
        steps += [["ip", "link", "set", VETH[i], "netns", NS[i]],
                  ["ip", "-n", NS[i], "addr", "add", f"{ADDR[i]}/24", "dev", VETH[i]],
                  ["ip", "-n", NS[i], "link", "set", "lo", "up"],
                  ["ip", "-n", NS[i], "link", "set", VETH[i], "up"]]
    for s in steps:
        r = sh(*s)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(s)}: {r.stderr.strip()}")
    # the agent is called as ssh would be: [options] HOST COMMAND...
    agent = os.path.join(tmp, "agent.sh")
    with open(agent, "w") as f:
        f.write("#!/bin/sh\n"
                "while [ $# -gt 0 ]; do case \"$1\" in -*) shift;; *) break;; esac; done\n"
                "host=$1; shift\n"
                "case \"$host\" in\n"
                f"  {ADDR[0]}) ns={NS[0]}; name={HOST[0]};;\n"
                f"  {ADDR[1]}) ns={NS[1]}; name={HOST[1]};;\n"
                "  *) echo \"agent: unknown host $host\" >&2; exit 255;;\n"
                "esac\n"
                "exec ip netns exec \"$ns\" unshare --uts /bin/sh -c \"hostname $name && exec $*\"\n")
    os.chmod(agent, 0o755)
    MPI_ENV["OMPI_MCA_plm_rsh_agent"] = agent
    return None


def mpirun_argv(args):
    """mpirun in host A's namespace (named hosta), one rank per host."""
    inner = " ".join(["exec", "mpirun", "--host", f"{ADDR[0]}:1,{ADDR[1]}:1", "-np", "2",
                      CTRAIN, "train", *args])
    return ["ip", "netns", "exec", NS[0], "unshare", "--uts", "/bin/sh", "-c",
            f"hostname {HOST[0]} && {inner}"]


def start(args, env_extra=None, log=None):
    env = dict(os.environ, **MPI_ENV, **(env_extra or {}))
    return subprocess.Popen(mpirun_argv(args), stdout=log or subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def run(args, timeout=120, env_extra=None):
    p = start(args, env_extra)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        return None, out


def metrics(run_dir):
    out = {}
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            try:
                m = json.loads(line)
            except ValueError:
                continue  # a line being written
            if m.get("split") == "train":
                out[m["step"]] = m
    return out


def read(path):
    with open(path, "rb") as f:
        return f.read()


def base(shard, B, steps, extra=()):
    return ["model.preset=gpt2-tiny", f"data.train={shard}", f"train.steps={steps}",
            f"train.batch_size={B}", "train.seq_len=16", "run.threads=1", "optim.lr=3e-3",
            "optim.weight_decay=0.1", "schedule.name=cosine", "schedule.warmup_steps=2",
            f"dist.timeout_s={TIMEOUT_S}", *extra]


def same_run(ref, got, steps):
    a, b = metrics(ref), metrics(got)
    bad = [s for s in range(1, steps + 1)
           if s not in a or s not in b or a[s]["loss"] != b[s]["loss"]
           or a[s]["grad_norm"] != b[s]["grad_norm"]]
    same_w = read(os.path.join(ref, "model.safetensors")) == \
        read(os.path.join(got, "model.safetensors"))
    return not bad and same_w, f"steps differing: {bad[:5]}, weights same: {same_w}"


def equivalence(tmp, shard):
    one = os.path.join(tmp, "one")
    p = subprocess.run([CTRAIN, "train", *base(shard, 4, 8), f"run.dir={one}"],
                       capture_output=True, text=True)
    check("1 process x batch 4 trains", p.returncode == 0, p.stdout[-300:] + p.stderr[-300:])
    two = os.path.join(tmp, "two")
    rc, out = run(base(shard, 2, 8) + [f"run.dir={two}"])
    check("2 hosts x batch 2 train, over TCP, and the startup line names both hosts",
          rc == 0 and f"2 ranks on 2 host(s) ({HOST[0]}, {HOST[1]})" in out, out[-800:])
    if rc != 0 or p.returncode != 0:
        return
    a, b = metrics(one), metrics(two)
    bad = [s for s in range(1, 9) if abs(a[s]["loss"] - b[s]["loss"]) > 1e-5 * max(1, a[s]["loss"])
           or abs(a[s]["grad_norm"] - b[s]["grad_norm"]) > 1e-5 * max(1, a[s]["grad_norm"])]
    check("2 hosts x batch 2 = 1 process x batch 4 (losses and grad norms to 1e-5)", not bad,
          str([(s, a[s]["loss"], b[s]["loss"]) for s in bad]))


def wait_step(run_dir, step, proc, limit=60):
    t0 = time.time()
    while time.time() - t0 < limit and proc.poll() is None:
        m = metrics(run_dir)
        if m and max(m) >= step:
            return True
        time.sleep(0.02)
    return False


def rank0_pid():
    for p in ns_pids(NS[0]):
        if comm(p) == "ctrain":
            return p
    return None


def link_cut(tmp, shard, ref, steps, ckpt_extra):
    d = os.path.join(tmp, "cut")
    log = open(os.path.join(tmp, "cut.log"), "w+")
    proc = start(base(shard, 2, steps, ckpt_extra) + [f"run.dir={d}"], log=log)
    reached = wait_step(d, 12, proc)
    check("link cut: the job reaches step 12 (past step 10's checkpoint)", reached)
    r0 = rank0_pid()
    t_cut = time.time()
    sh("ip", "-n", NS[1], "link", "set", VETH[1], "down")
    gone = None
    while time.time() - t_cut < TIMEOUT_S + 30:
        if r0 is None or not os.path.exists(f"/proc/{r0}") or comm(r0) != "ctrain":
            gone = time.time() - t_cut
            break
        time.sleep(0.05)
    # the slack: the step under way, and MPI_Abort (the daemon ends the rank)
    check(f"link cut: rank 0 exits within dist.timeout_s={TIMEOUT_S} (+2 s): {gone} s",
          gone is not None and gone <= TIMEOUT_S + 2, f"{gone}")
    time.sleep(0.5)  # its last words through mpirun
    # mpirun waits on the lost daemon as long as TCP retries (minutes): stop it
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    log.seek(0)
    out = log.read()
    log.close()
    check("link cut: rank 0 names the lost rank and its host, and the timeout",
          f"rank 0 on {HOST[0]}" in out and f"lost: rank 1 (host {HOST[1]})" in out and
          "dist.timeout_s" in out, out[-1200:])
    # the host comes back: its leftovers gone, the link up
    kill_ns(NS[1])
    kill_ns(NS[0])
    sh("ip", "-n", NS[1], "link", "set", VETH[1], "up")
    rc, out = run(base(shard, 2, steps, ckpt_extra) + ["train.resume=auto", f"run.dir={d}"])
    check("link cut: train.resume=auto on both hosts continues from a checkpoint",
          rc == 0 and "resum" in out, out[-600:])
    if rc == 0:
        ok, why = same_run(ref, d, steps)
        check("link cut: the resumed run equals an uninterrupted one bit for bit", ok, why)


def keepalive(tmp, shard, steps):
    """mpirun with a short TCP keepalive notices the lost host by itself."""
    d = os.path.join(tmp, "keepalive")
    env = {"OMPI_MCA_oob_tcp_keepalive_time": "1", "OMPI_MCA_oob_tcp_keepalive_intvl": "1",
           "OMPI_MCA_oob_tcp_keepalive_probes": "2"}
    proc = start(base(shard, 2, steps) + ["dist.timeout_s=60", f"run.dir={d}"], env_extra=env)
    reached = wait_step(d, 3, proc)
    t_cut = time.time()
    sh("ip", "-n", NS[1], "link", "set", VETH[1], "down")
    try:
        out, _ = proc.communicate(timeout=30)
        dt = time.time() - t_cut
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        dt = None
    check("keepalive 1+1x2 s: mpirun ends the job within 15 s of the cut, naming the host",
          reached and dt is not None and dt < 15 and proc.returncode != 0 and
          "lost communication with a remote daemon" in out and ADDR[1] in out,
          f"{dt} s, exit {proc.returncode}: {out[-600:]}")
    kill_ns(NS[1])
    kill_ns(NS[0])
    sh("ip", "-n", NS[1], "link", "set", VETH[1], "up")


def rank_killed(tmp, shard, ref, steps, ckpt_extra):
    d = os.path.join(tmp, "killed")
    t0 = time.time()
    rc, out = run(base(shard, 2, steps, ckpt_extra) +
                  ["debug.kill_step=12", "debug.rank=1", f"run.dir={d}"], timeout=60)
    dt = time.time() - t0
    check("host b's rank killed: the job exits non-zero within 30 s naming rank 1",
          rc not in (0, None) and dt < 30 and "rank 1" in out, f"exit {rc}, {dt:.1f} s: "
          f"{out[-600:]}")
    kill_ns(NS[1])
    rc, out = run(base(shard, 2, steps, ckpt_extra) + ["train.resume=auto", f"run.dir={d}"])
    check("host b's rank killed: resume=auto continues", rc == 0 and "resum" in out, out[-400:])
    if rc == 0:
        ok, why = same_run(ref, d, steps)
        check("host b's rank killed: the resumed run equals an uninterrupted one bit for bit",
              ok, why)


def main():
    tmp = tempfile.mkdtemp(prefix="ct_hosts_")
    os.chmod(tmp, 0o755)
    try:
        why = setup(tmp)
        if why:
            print(f"skip: {why}")
            return 0
        shard = os.path.join(tmp, "train.bin")
        p = subprocess.run([CTRAIN, "synth", "--out", shard, "--tokens", "30000", "--vocab", "64",
                            "--seed", "1"], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL synth: {p.stderr}")
            return 1
        rc, out = run(base(shard, 2, 1) + [f"run.dir={os.path.join(tmp, 'probe')}"])
        if "built without MPI" in out:
            print("skip: this ctrain was built without MPI")
            return 0
        equivalence(tmp, shard)
        steps, ckpt_extra = 60, ["run.checkpoint_every=10", "debug.sleep_ms=25"]
        ref = os.path.join(tmp, "ref")
        rc, out = run(base(shard, 2, steps, ckpt_extra) + [f"run.dir={ref}"])
        check("the uninterrupted 2-host reference run", rc == 0, out[-400:])
        if rc == 0:
            link_cut(tmp, shard, ref, steps, ckpt_extra)
            keepalive(tmp, shard, 400)
            rank_killed(tmp, shard, ref, steps, ckpt_extra)
    finally:
        teardown()
        if failures:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks - len(failures)}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
