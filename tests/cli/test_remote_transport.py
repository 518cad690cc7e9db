#!/usr/bin/env python3
"""The remote-data transport (src/data/shard/remote.c, remote_s3.c) against real servers on
loopback, through build/tests/remote_tool.

- nginx: range reads are byte-exact at odd offsets (first byte, last byte, across buffer sizes),
  whole-object GET (and its size limit), size by HEAD, PUT; a 404 fails at once (exit 2, the URL
  and the status named, one request); a range beyond the end fails at once; credentials and query
  strings in URLs never reach a message; sequential reads reuse one connection; https with a
  self-signed certificate fails at once untrusted, and works with CURL_CA_BUNDLE.
- through the fault proxy (tests/cli/remote_proxy.py): a reset, 503, 429, 500, a truncated body,
  a reset mid-body, a response delayed beyond data.timeout_s and a stalled body are each retried
  and the read succeeds, with the retries counted; Retry-After is honoured; when the retries run
  out the error names the URL, what happened and data.retries; 404 and 403 are not retried.
- s3rver behind the proxy, which checks SigV4 signatures as S3 does: PUT of a small file, a
  12 MiB file in 5 MiB parts (multipart: 1 create, 3 parts, 1 complete; the object equals the
  file), a failed part retried, a part that keeps failing aborts the upload; ranges and sizes via
  s3://, keys with spaces and symbols; a wrong secret is a 403 naming the refused credentials,
  never the secret; keys from a credentials file (HOME or AWS_SHARED_CREDENTIALS_FILE, a named
  profile), the region from AWS_REGION or the config file, a session token; no credentials at all
  is a clear error naming where it looked.

Skips (exit 0, saying why) the parts whose server is missing: nginx (apt-get install
nginx-light), node or s3rver (scripts/fetch_data.sh).

usage: test_remote_transport.py path/to/ctrain   ($REMOTE_TOOL overrides the remote_tool found
beside it, e.g. an ASan build's)
"""
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_servers as RS  # noqa: E402
from remote_proxy import FaultProxy  # noqa: E402

CTRAIN = os.path.abspath(sys.argv[1])
failures = []
checks = 0
TOOL = None
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
            "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE", "http_proxy", "HTTP_PROXY",
            "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
            "REMOTE_RETRIES", "REMOTE_TIMEOUT", "REMOTE_BACKOFF")


def check(label, ok, detail=""):
    global checks
    checks += 1
    if ok:
        print(f"ok   {label}", flush=True)
    else:
        failures.append(f"{label}: {detail}"[:1500])
        print(f"FAIL {label}: {detail}"[:1500], flush=True)
    return ok


class Run:
    def __init__(self, p, dt):
        self.rc = p.returncode
        self.out = p.stdout
        self.err = p.stderr
        self.all = p.stdout + p.stderr
        self.dt = dt
        m = re.search(r"stats requests=(\d+) retries=(\d+) failures=(\d+) bytes=(\d+)", p.stdout)
        self.requests, self.retries, self.failures, self.bytes = (
            [int(g) for g in m.groups()] if m else [-1, -1, -1, -1])

    def __str__(self):
        return f"rc={self.rc} t={self.dt:.2f}s out={self.out[-300:]!r} err={self.err[-600:]!r}"


def base_env(home):
    env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
    env["HOME"] = home  # never the real ~/.aws
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost"
    return env


def tool(*args, env, retries=5, timeout=5.0, backoff=0.02, limit=60):
    cmd = [TOOL, "--retries", str(retries), "--timeout", str(timeout), "--backoff", str(backoff),
           *[str(a) for a in args]]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit)
    return Run(p, time.time() - t0)


def rbytes(path):
    with open(path, "rb") as f:
        return f.read()


def wbytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


# ------------------------------------------------------------------ nginx

def http_plain(tmp, www, ng, env, data):
    url = ng.url + "/d/train_000000.bin"
    out = os.path.join(tmp, "out.bin")
    n = len(data)
    bad = []
    for off, ln in ((0, 1), (1, 1023), (12345, 77777), (n - 1, 1), (n - 4097, 4097), (3, 262147),
                    (0, n)):
        r = tool("get", url, off, ln, out, env=env)
        if r.rc != 0 or rbytes(out) != data[off:off + ln] or r.requests != 1 or r.retries != 0:
            bad.append(f"[{off}, +{ln}): {r}")
    check("nginx: range reads byte-exact at odd offsets, one request each", not bad, "; ".join(bad))
    r = tool("size", url, env=env)
    check("nginx: size by HEAD", r.rc == 0 and f"size {n}\n" in r.out and r.requests == 1, str(r))
    r = tool("cat", url, out, env=env)
    check("nginx: whole-object GET", r.rc == 0 and rbytes(out) == data and r.bytes == n, str(r))
    r = tool("cat", url, out, 1000, env=env)
    check("nginx: a whole-object GET over its limit fails at once",
          r.rc == 2 and f"{n} bytes, more than the 1000-byte limit" in r.err and r.requests == 1, str(r))

    missing = ng.url + "/d/train_000099.bin"
    r = tool("get", missing, 0, 10, out, env=env)
    check("nginx: 404 exits 2 naming the URL and the status, not retried",
          r.rc == 2 and f"{missing}: HTTP 404 Not Found" in r.err and "hint:" in r.err and
          r.requests == 1 and r.retries == 0 and r.failures == 1, str(r))
    r = tool("size", missing, env=env)
    check("nginx: size of a missing object: 404, not retried",
          r.rc == 2 and "HTTP 404" in r.err and missing in r.err and r.requests == 1, str(r))
    r = tool("get", url, n - 10, 100, out, env=env)
    check("nginx: a range running past the end fails at once, saying so",
          r.rc == 2 and f"lie beyond the end of the {n}-byte object" in r.err and r.requests == 1, str(r))
    r = tool("get", url, n + 10, 100, out, env=env)
    check("nginx: a range starting past the end: 416, not retried",
          r.rc == 2 and "HTTP 416" in r.err and r.requests == 1, str(r))

    # credentials and presigned query strings stay out of every message
    host = ng.url.split("://")[1]
    secret_url = f"http://user:pw-Sekrit1@{host}/d/nope.bin?X-Amz-Signature=QuerySekrit2&x=1"
    r = tool("get", secret_url, 0, 10, out, env=env)
    check("a URL's user:password and query string are never printed",
          r.rc == 2 and "Sekrit" not in r.all and f"http://{host}/d/nope.bin: HTTP 404" in r.err, str(r))
    r = tool("display", "https://u:p@h.example:8443/a/b.bin?sig=abc#frag", env=env)
    check("ct_remote_display drops user:password, query and fragment",
          r.rc == 0 and r.out.startswith("https://h.example:8443/a/b.bin\n"), str(r))

    # PUT (nginx WebDAV), from memory and from a file
    up = os.path.join(tmp, "up.bin")
    wbytes(up, data[:300001])
    r = tool("putmem", up, ng.url + "/up/mem.bin", env=env)
    r2 = tool("put", up, ng.url + "/up/file.bin", env=env)
    check("nginx: PUT from memory and from a file",
          r.rc == 0 and r2.rc == 0 and rbytes(os.path.join(www, "up", "mem.bin")) == data[:300001] and
          rbytes(os.path.join(www, "up", "file.bin")) == data[:300001], f"{r} | {r2}")

    # keep-alive: sequential reads share one connection, threads one each
    with FaultProxy(ng.port) as p:
        r = tool("read", p.url + "/d/train_000000.bin", 65536, out, 1, env=env)
        c = p.counters()
        nreq = (n + 65535) // 65536 + 1
        check("sequential range reads reuse one kept-alive connection",
              r.rc == 0 and rbytes(out) == data and c["requests"] == nreq and c["connections"] == 1,
              f"{r} {c}")
        p.reset_counters()
        r = tool("read", p.url + "/d/train_000000.bin", 32768, out, 4, env=env)
        c = p.counters()
        check("4 threads read byte-exact over at most 5 connections",
              r.rc == 0 and rbytes(out) == data and c["connections"] <= 5, f"{r} {c}")


def https(tmp, www, env, data):
    if not shutil.which("openssl"):
        print("skip (https part): openssl not found")
        return
    out = os.path.join(tmp, "out.bin")
    with RS.Nginx(www, tls=True) as ng:
        url = ng.url + "/d/train_000000.bin"
        r = tool("get", url, 0, 10, out, env=env)
        check("https: an untrusted certificate fails at once, hinting CURL_CA_BUNDLE",
              r.rc == 2 and url in r.err and "TLS" in r.err and "CURL_CA_BUNDLE" in r.err and
              r.requests == 1, str(r))
        tenv = dict(env, CURL_CA_BUNDLE=ng.ca_file)
        r = tool("get", url, 999, 100001, out, env=tenv)
        r2 = tool("size", url, env=tenv)
        check("https: with CURL_CA_BUNDLE, range reads and size work",
              r.rc == 0 and rbytes(out) == data[999:101000] and r2.rc == 0 and
              f"size {len(data)}" in r2.out, f"{r} | {r2}")


def http_faults(tmp, ng, env, data):
    out = os.path.join(tmp, "out.bin")
    off, ln = 4097, 300001
    want = data[off:off + ln]
    with FaultProxy(ng.port) as p:
        url = p.url + "/d/train_000000.bin"
        for fault, extra in (("reset", {}), ("503", {}), ("429", {}), ("500", {}), ("truncate", {}),
                             ("reset_mid", {}), ("delay:2.5", {"timeout": 1}),
                             ("stall:2.5", {"timeout": 1})):
            p.set_faults([fault])
            p.reset_counters()
            r = tool("get", url, off, ln, out, env=env, **extra)
            c = p.counters()
            check(f"proxy {fault}: retried, then the bytes are exact (1 retry counted)",
                  r.rc == 0 and rbytes(out) == want and r.requests == 2 and r.retries == 1 and
                  c["requests"] == 2, f"{r} {c}")
        p.set_faults(["reset", "503", "truncate", "reset_mid"])
        r = tool("get", url, off, ln, out, env=env)
        check("proxy reset, 503, truncate, reset_mid in a row: 4 retries, exact bytes",
              r.rc == 0 and rbytes(out) == want and r.retries == 4 and r.requests == 5, str(r))
        p.set_faults(["503"])
        r = tool("size", url, env=env)
        check("proxy 503 on HEAD: size retried", r.rc == 0 and f"size {len(data)}" in r.out and
              r.retries == 1, str(r))
        p.set_faults(["503ra:1"])
        r = tool("get", url, off, ln, out, env=env, backoff=0.01)
        check("Retry-After: 1 is waited for instead of a 0.01 s backoff",
              r.rc == 0 and r.retries == 1 and r.dt >= 0.95, str(r))

        # retries run out
        p.set_faults(["503"] * 10)
        p.reset_counters()
        r = tool("get", url, off, ln, out, env=env, retries=2)
        check("503 until the retries run out: exit 2, URL, status and data.retries named",
              r.rc == 2 and f"{url}: HTTP 503 Service Unavailable" in r.err and
              "after 3 attempts (data.retries=2)" in r.err and "hint:" in r.err and
              p.counters()["requests"] == 3 and r.failures == 1, str(r))
        p.set_faults(["reset"] * 10)
        r = tool("get", url, off, ln, out, env=env, retries=1)
        check("resets until the retries run out: 'connection reset after 2 attempts'",
              r.rc == 2 and f"{url}: connection reset after 2 attempts (data.retries=1)" in r.err, str(r))
        p.set_faults(["truncate"] * 10)
        r = tool("get", url, off, ln, out, env=env, retries=1)
        check("truncated bodies until the retries run out: 'truncated body: N of M bytes'",
              r.rc == 2 and re.search(r"truncated body: \d+ of %d bytes after 2 attempts" % ln, r.err)
              is not None, str(r))
        p.set_faults(["delay:2.5"] * 10)
        r = tool("get", url, off, ln, out, env=env, retries=1, timeout=1)
        check("timeouts until the retries run out: 'timed out after 1 s (data.timeout_s)'",
              r.rc == 2 and "timed out after 1 s (data.timeout_s), on each of 2 attempts" in r.err and
              r.dt < 6, str(r))
        p.set_faults(["404"])
        p.reset_counters()
        r = tool("get", url, off, ln, out, env=env)
        check("an injected 404 is not retried", r.rc == 2 and "HTTP 404" in r.err and
              p.counters()["requests"] == 1, str(r))
        p.set_faults(["403"])
        r = tool("get", url, off, ln, out, env=env)
        check("an injected 403 is not retried, 'access denied'", r.rc == 2 and
              "HTTP 403 Forbidden: access denied" in r.err and r.requests == 1, str(r))
        p.set_faults(["400"])
        r = tool("get", url, off, ln, out, env=env)
        check("an injected 400 is not retried, its S3 code and message are shown", r.rc == 2 and
              "HTTP 400 Bad Request (Injected: injected by remote_proxy)" in r.err and
              r.requests == 1, str(r))
        p.set_faults([])
    port = RS.free_port()
    r = tool("get", f"http://127.0.0.1:{port}/x.bin", 0, 10, out, env=env, retries=1)
    check("connection refused: retried, then exit 2 'cannot connect'",
          r.rc == 2 and "cannot connect" in r.err and "after 2 attempts" in r.err and
          r.requests == 2, str(r))


# ------------------------------------------------------------------ s3rver

def s3_direct(s3, key):
    """The object as s3rver holds it: an anonymous GET straight to s3rver (no proxy, no signing)."""
    with urllib.request.urlopen(f"{s3.url}/{s3.bucket}/{urllib.request.quote(key)}", timeout=30) as f:
        return f.read()


def s3_tests(tmp, s3, data):
    home = os.path.join(tmp, "home")
    os.makedirs(home, exist_ok=True)
    out = os.path.join(tmp, "out.bin")
    small = os.path.join(tmp, "small.bin")
    wbytes(small, data[:100003])
    big = os.path.join(tmp, "big.bin")
    rnd = random.Random(7)
    big_data = bytes(rnd.getrandbits(8) for _ in range(1 << 16)) * 192  # 12 MiB
    wbytes(big, big_data)
    secret_outputs = []
    with FaultProxy(s3.port, sigv4=RS.S3RVER_KEYS) as p:
        env = base_env(home)
        env.update(AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER", AWS_ENDPOINT_URL=p.url)
        b = s3.bucket

        r = tool("put", small, f"s3://{b}/d/small.bin", env=env)
        check("s3: PUT of a small file, signed (the proxy verified it)",
              r.rc == 0 and s3_direct(s3, "d/small.bin") == data[:100003] and
              p.counters()["sigv4_refused"] == 0, str(r))
        r = tool("putmem", small, f"s3://{b}/d/mem.bin", env=env)
        check("s3: PUT from memory", r.rc == 0 and s3_direct(s3, "d/mem.bin") == data[:100003], str(r))

        p.reset_counters()
        r = tool("put", big, f"s3://{b}/d/big.bin", 5 << 20, env=env)
        c = p.counters()
        check("s3: a 12 MiB file in 5 MiB parts goes up as a multipart upload equal to the file",
              r.rc == 0 and c["methods"] == {"POST": 2, "PUT": 3} and c["sigv4_refused"] == 0 and
              s3_direct(s3, "d/big.bin") == big_data, f"{r} {c}")

        bad = []
        for off, ln in ((0, 1), (5 << 20, 3), ((5 << 20) - 1, 2), (777777, 1234567),
                        (len(big_data) - 1, 1), (12345, 5 << 20)):
            r = tool("get", f"s3://{b}/d/big.bin", off, ln, out, env=env)
            if r.rc != 0 or rbytes(out) != big_data[off:off + ln]:
                bad.append(f"[{off}, +{ln}): {r}")
        check("s3: range reads of the multipart object are byte-exact", not bad, "; ".join(bad))
        r = tool("size", f"s3://{b}/d/big.bin", env=env)
        check("s3: size by a signed HEAD", r.rc == 0 and f"size {len(big_data)}\n" in r.out, str(r))
        r = tool("cat", f"s3://{b}/d/small.bin", out, env=env)
        check("s3: whole-object GET", r.rc == 0 and rbytes(out) == data[:100003], str(r))

        key = "d/odd key+=&;,@ü~.bin"
        r = tool("put", small, f"s3://{b}/{key}", env=env)
        r2 = tool("get", f"s3://{b}/{key}", 17, 1000, out, env=env)
        check("s3: a key with spaces and symbols is encoded and signed right",
              r.rc == 0 and r2.rc == 0 and rbytes(out) == data[17:1017] and
              s3_direct(s3, key) == data[:100003], f"{r} | {r2}")

        p.set_faults(["503", "reset"])
        p.reset_counters()
        r = tool("get", f"s3://{b}/d/big.bin", 99, 200000, out, env=env)
        # the reset hits the connection the 503 kept alive: libcurl itself sends the request
        # again once on a new one (a reused connection that died), so 3 reach the proxy
        c = p.counters()
        check("s3: 503 and a reset are retried", r.rc == 0 and rbytes(out) == big_data[99:200099] and
              r.retries >= 1 and c["requests"] == 3 and c["pending_faults"] == 0, f"{r} {c}")
        p.set_faults(["500"], match=r"partNumber=2&")
        p.reset_counters()
        r = tool("put", big, f"s3://{b}/d/big2.bin", 5 << 20, env=env)
        check("s3: a part that fails once is retried, the upload completes",
              r.rc == 0 and r.retries == 1 and p.counters()["methods"] == {"POST": 2, "PUT": 4} and
              s3_direct(s3, "d/big2.bin") == big_data, f"{r} {p.counters()}")
        p.set_faults(["503"] * 10, match=r"partNumber=2&")
        p.reset_counters()
        r = tool("put", big, f"s3://{b}/d/big3.bin", 5 << 20, env=env, retries=1)
        c = p.counters()
        check("s3: a part that keeps failing: exit 2 naming the part, and the upload is aborted",
              r.rc == 2 and f"s3://{b}/d/big3.bin (part 2 of 3): HTTP 503" in r.err and
              c["methods"].get("DELETE") == 1 and c["methods"].get("POST") == 1, f"{r} {c}")
        p.set_faults([])
        p.reset_counters()
        r = tool("put", small, f"s3://{b}/d/small2.bin", 5 << 20, env=env)
        check("s3: a file no larger than a part is one PUT", r.rc == 0 and
              p.counters()["methods"] == {"PUT": 1}, f"{r} {p.counters()}")
        r = tool("put", small, f"s3://{b}/d/small3.bin", 1 << 20, env=env)
        check("s3: a part size under 5 MiB is refused", r.rc == 2 and "5 MiB" in r.err and
              r.requests == 0, str(r))

        r = tool("get", f"s3://{b}/d/nope.bin", 0, 10, out, env=env)
        check("s3: a missing key: 404 (NoSuchKey) naming the s3:// URL, not retried",
              r.rc == 2 and f"s3://{b}/d/nope.bin: HTTP 404 Not Found (NoSuchKey)" in r.err and
              r.requests == 1, str(r))
        r = tool("size", "s3://no-such-bucket/x.bin", env=env)
        check("s3: a missing bucket: 404", r.rc == 2 and "s3://no-such-bucket/x.bin: HTTP 404" in r.err,
              str(r))

        # refused credentials: never printed
        wrong = dict(env, AWS_SECRET_ACCESS_KEY="wrong-Secret-Xq7")
        r = tool("get", f"s3://{b}/d/small.bin", 0, 10, out, env=wrong)
        secret_outputs.append(r.all)
        check("s3: a wrong secret: 403, the credentials refused (SignatureDoesNotMatch), not retried",
              r.rc == 2 and f"s3://{b}/d/small.bin: HTTP 403 Forbidden: the credentials were refused "
              "(SignatureDoesNotMatch)" in r.err and r.requests == 1 and "AWS_ACCESS_KEY_ID" in r.err,
              str(r))
        r = tool("put", small, f"s3://{b}/d/x.bin", env=wrong)
        secret_outputs.append(r.all)
        check("s3: a wrong secret on PUT: 403", r.rc == 2 and "HTTP 403" in r.err, str(r))
        r = tool("size", f"s3://{b}/d/small.bin", env=dict(env, AWS_ACCESS_KEY_ID="NOBODY-Xq7"))
        secret_outputs.append(r.all)
        check("s3: an unknown access key: 403", r.rc == 2 and "HTTP 403" in r.err, str(r))

        # a session token is sent and signed
        p.reset_counters()
        r = tool("get", f"s3://{b}/d/small.bin", 5, 10, out,
                 env=dict(env, AWS_SESSION_TOKEN="tok-Secret-Xq7/+=="))
        secret_outputs.append(r.all)
        check("s3: AWS_SESSION_TOKEN goes as a signed x-amz-security-token",
              r.rc == 0 and rbytes(out) == data[5:15] and p.counters()["sigv4_ok"] == 1, str(r))

        # region: AWS_REGION, else the config file's profile
        p.reset_counters()
        r = tool("size", f"s3://{b}/d/small.bin", env=dict(env, AWS_REGION="eu-west-3"))
        check("s3: AWS_REGION is the signing region", r.rc == 0 and
              p.counters()["regions"] == ["eu-west-3"], f"{r} {p.counters()}")

        # credentials from files
        fenv = base_env(home)
        fenv["AWS_ENDPOINT_URL"] = p.url
        awsdir = os.path.join(home, ".aws")
        os.makedirs(awsdir, exist_ok=True)
        with open(os.path.join(awsdir, "credentials"), "w") as f:
            f.write("# test\n[default]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n\n"
                    "[other]\naws_access_key_id=S3RVER\naws_secret_access_key=wrong-Secret-Xq7\n")
        with open(os.path.join(awsdir, "config"), "w") as f:
            f.write("[default]\nregion = ap-south-1\n[profile cfg]\nregion=ca-central-1\n"
                    "aws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n")
        p.reset_counters()
        r = tool("get", f"s3://{b}/d/small.bin", 5, 10, out, env=fenv)
        check("s3: keys from ~/.aws/credentials, region from ~/.aws/config",
              r.rc == 0 and rbytes(out) == data[5:15] and p.counters()["regions"] == ["ap-south-1"],
              f"{r} {p.counters()}")
        r = tool("size", f"s3://{b}/d/small.bin", env=dict(fenv, AWS_PROFILE="other"))
        secret_outputs.append(r.all)
        check("s3: AWS_PROFILE picks the profile (its wrong secret: 403 naming the profile)",
              r.rc == 2 and "HTTP 403" in r.err and 'profile "other"' in r.err, str(r))
        p.reset_counters()
        r = tool("size", f"s3://{b}/d/small.bin", env=dict(fenv, AWS_PROFILE="cfg"))
        check("s3: keys and region of a [profile NAME] in the config file",
              r.rc == 0 and p.counters()["regions"] == ["ca-central-1"], f"{r} {p.counters()}")
        alt = os.path.join(tmp, "alt_credentials")
        with open(alt, "w") as f:
            f.write("[default]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n")
        empty_home = os.path.join(tmp, "empty_home")
        os.makedirs(empty_home, exist_ok=True)
        aenv = base_env(empty_home)
        aenv.update(AWS_ENDPOINT_URL=p.url, AWS_SHARED_CREDENTIALS_FILE=alt)
        r = tool("size", f"s3://{b}/d/small.bin", env=aenv)
        check("s3: AWS_SHARED_CREDENTIALS_FILE names the credentials file", r.rc == 0, str(r))

        # no credentials at all
        nenv = base_env(empty_home)
        nenv["AWS_ENDPOINT_URL"] = p.url
        p.reset_counters()
        r = tool("get", f"s3://{b}/d/small.bin", 0, 10, out, env=nenv)
        check("s3: no credentials: exit 2, says what was looked for, no request made",
              r.rc == 2 and "no AWS credentials" in r.err and "AWS_ACCESS_KEY_ID" in r.err and
              os.path.join(empty_home, ".aws", "credentials") in r.err and "not found" in r.err and
              p.counters()["requests"] == 0 and r.requests == 0, str(r))
        r = tool("size", f"s3://{b}/d/small.bin", env=dict(nenv, AWS_ACCESS_KEY_ID="S3RVER"))
        check("s3: only AWS_ACCESS_KEY_ID set: says AWS_SECRET_ACCESS_KEY is missing",
              r.rc == 2 and "AWS_SECRET_ACCESS_KEY is not" in r.err, str(r))
        r = tool("size", f"s3://{b}", env=env)
        check("s3: a URL without a key is refused", r.rc == 2 and "s3://BUCKET/KEY" in r.err, str(r))
        r = tool("size", f"s3://{b}/d/small.bin", env=dict(env, AWS_ENDPOINT_URL="ftp://x"))
        check("s3: a bad AWS_ENDPOINT_URL is named", r.rc == 2 and "AWS_ENDPOINT_URL" in r.err, str(r))
    leaked = [o for o in secret_outputs if "Xq7" in o]
    check("no secret, token or key id of a failing call appears in any output", not leaked,
          " | ".join(leaked)[:600])


def main():
    global TOOL
    TOOL = RS.find_tool(CTRAIN)
    no_nginx = RS.missing(s3rver=False)
    no_s3 = RS.missing(nginx=False)
    if no_nginx and no_s3:
        print(f"skip: {no_nginx}; {no_s3}")
        return 0
    tmp = tempfile.mkdtemp(prefix="ct_remote_")
    t0 = time.time()
    try:
        rnd = random.Random(1234)
        data = bytes(rnd.getrandbits(8) for _ in range(1 << 20)) + b"tail"
        www = os.path.join(tmp, "www")
        wbytes(os.path.join(www, "d", "train_000000.bin"), data)
        env = base_env(os.path.join(tmp, "home"))
        if no_nginx:
            print(f"skip (nginx parts): {no_nginx}")
        else:
            with RS.Nginx(www) as ng:
                http_plain(tmp, www, ng, env, data)
                http_faults(tmp, ng, env, data)
            https(tmp, www, env, data)
        if no_s3:
            print(f"skip (s3 parts): {no_s3}")
        else:
            with RS.S3rver(os.path.join(tmp, "s3"), "ctrain-data") as s3:
                s3_tests(tmp, s3, data)
    finally:
        if failures:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks - len(failures)}/{checks} checks passed in {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
