#!/usr/bin/env python3
"""A fault-injecting, throttling HTTP/1.1 proxy on 127.0.0.1 for the remote-data tests.

It sits in front of one upstream (nginx, s3rver) and forwards each request's raw bytes
(request line, Host, Range, every x-amz-* header and the body) untouched, so S3
signatures made for the proxy's address still verify upstream. Per request it can:

  - add latency (one sleep per request, and one per new connection: an RTT) and throttle
    every byte sent back to clients to a shared rate (a link of N bytes/s);
  - inject a fault taken from a schedule, one entry per request, then "ok":
      ok            forward
      reset         read the request, then reset the connection (RST), no response
      reset_mid     forward the head and half the body, then reset
      truncate      forward the head and half the body, then close (the length says more)
      stall:S       forward the head and half the body, then sleep S seconds, then close
      delay:S       sleep S seconds, then forward
      NNN           answer HTTP NNN (503, 429, 500, 404, ...) with an S3-style XML error;
                    "503ra:N" adds Retry-After: N
    a `match` regex (on the request line) limits which requests take schedule entries;
  - verify AWS Signature Version 4 (sigv4={access key: secret}), which s3rver 3.7.1 does
    not do (it checks only that the access key exists): a bad signature gets 403
    SignatureDoesNotMatch, a missing x-amz-content-sha256 400, as S3 answers.

Leaves out: chunked request bodies (answered 411, as S3 does), HTTP/2, TLS.

Python:   with FaultProxy(upstream_port, faults=["503", "reset"]) as p: ... p.port, p.counters()
Script:   remote_proxy.py --upstream 127.0.0.1:8080 [--port 0] [--rate 50e6] [--latency 0.02]
                          [--faults ok,reset,503] [--match REGEX]
          prints "port N", then reads commands on stdin: "faults a,b,c" replaces the
          schedule, "counters" prints the counters as JSON; runs until SIGTERM or ^C,
          then prints the counters.
"""
import argparse
import hashlib
import hmac
import json
import re
import signal
import socket
import struct
import sys
import threading
import time
import urllib.parse

CHUNK = 16384


class _Closed(Exception):
    pass


def _recv_head(sock, buf):
    """Read until the end of an HTTP head. Returns (head bytes, rest) or (None, buf) on EOF."""
    while b"\r\n\r\n" not in buf:
        if len(buf) > 1 << 20:
            raise _Closed("head too large")
        d = sock.recv(CHUNK)
        if not d:
            return None, buf
        buf += d
    i = buf.index(b"\r\n\r\n") + 4
    return buf[:i], buf[i:]


def _recv_exact(sock, buf, n):
    """n bytes (buf first, then the socket). Returns (data, rest)."""
    while len(buf) < n:
        d = sock.recv(max(CHUNK, n - len(buf)) if n - len(buf) < 1 << 20 else 1 << 20)
        if not d:
            raise _Closed("eof in body")
        buf += d
    return buf[:n], buf[n:]


def _parse_head(head):
    """(first line, [(name, value)]) of an HTTP head."""
    lines = head.decode("latin-1").split("\r\n")
    hdrs = []
    for ln in lines[1:]:
        if not ln:
            continue
        k, _, v = ln.partition(":")
        hdrs.append((k.strip(), v.strip()))
    return lines[0], hdrs


def _hget(hdrs, name):
    name = name.lower()
    for k, v in hdrs:
        if k.lower() == name:
            return v
    return None


def _s3_error(status, code, message, extra=b""):
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            '</Error>' % (code, message)).encode()
    reason = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 411: "Length Required",
              429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
              503: "Service Unavailable"}.get(status, "Error")
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n%s\r\n"
            % (status, reason.encode(), len(body), extra)) + body


# ------------------------------------------------------------------ SigV4 (as S3 checks it)

def _uri_encode(s, slash_ok):
    return urllib.parse.quote(s, safe="-_.~" + ("/" if slash_ok else ""))


def sigv4_check(method, target, hdrs, body, secrets):
    """None when the request's AWS SigV4 Authorization header verifies against secrets
    ({access key id: secret}); else (status, code, message) as S3 would answer."""
    auth = _hget(hdrs, "authorization")
    if not auth:
        return (403, "AccessDenied", "Anonymous access is not allowed")
    m = re.match(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request,\s*"
                 r"SignedHeaders=([^,]+),\s*Signature=([0-9a-f]{64})$", auth)
    if not m:
        return (400, "AuthorizationHeaderMalformed", "The authorization header is malformed")
    akid, date, region, service, signed, sig = m.groups()
    if akid not in secrets:
        return (403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist")
    payload = _hget(hdrs, "x-amz-content-sha256")
    if payload is None:
        return (400, "InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
    if payload != "UNSIGNED-PAYLOAD":
        if not re.fullmatch(r"[0-9a-f]{64}", payload):
            return (400, "InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD or a sha256")
        if hashlib.sha256(body).hexdigest() != payload:
            return (400, "XAmzContentSHA256Mismatch", "The provided x-amz-content-sha256 header "
                    "does not match what was computed")
    names = signed.split(";")
    if "host" not in names:
        return (403, "AccessDenied", "host must be a signed header")
    for k, _ in hdrs:
        if k.lower().startswith("x-amz-") and k.lower() not in names:
            return (403, "AccessDenied", "There were headers present in the request which were "
                    "not signed: " + k.lower())
    amzdate = _hget(hdrs, "x-amz-date") or ""
    if not amzdate.startswith(date):
        return (403, "SignatureDoesNotMatch", "x-amz-date does not match the credential scope")
    path, _, query = target.partition("?")
    canon_uri = _uri_encode(urllib.parse.unquote(path), True)
    params = []
    for part in query.split("&") if query else []:
        k, _, v = part.partition("=")
        params.append((_uri_encode(urllib.parse.unquote(k), False),
                       _uri_encode(urllib.parse.unquote(v), False)))
    canon_query = "&".join("%s=%s" % kv for kv in sorted(params))
    canon_hdrs = ""
    for n in names:
        vals = [v for k, v in hdrs if k.lower() == n]
        if not vals:
            return (403, "AccessDenied", "signed header %s is missing" % n)
        canon_hdrs += "%s:%s\n" % (n, ",".join(" ".join(v.split()) for v in vals))
    creq = "\n".join([method, canon_uri, canon_query, canon_hdrs, signed, payload])
    scope = "%s/%s/%s/aws4_request" % (date, region, service)
    sts = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope, hashlib.sha256(creq.encode()).hexdigest()])
    key = ("AWS4" + secrets[akid]).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    want = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, sig):
        return (403, "SignatureDoesNotMatch", "The request signature we calculated does not "
                "match the signature you provided. Check your key and signing method.")
    return None


# ------------------------------------------------------------------ the proxy

class FaultProxy:
    """See the module docstring. Thread-safe: the schedule may be replaced while it runs."""

    def __init__(self, upstream_port, upstream_host="127.0.0.1", rate=0.0, latency=0.0,
                 faults=None, match=None, sigv4=None, port=0):
        self.upstream = (upstream_host, int(upstream_port))
        self.rate = float(rate)         # bytes/s back to the clients, all together; 0: unlimited
        self.latency = float(latency)   # seconds per request and per new connection
        self.sigv4 = dict(sigv4) if sigv4 else None
        self._lock = threading.Lock()
        self._faults = list(faults or [])
        self._match = re.compile(match) if match else None
        self._next_send = 0.0
        self._counts = {"requests": 0, "connections": 0, "bytes_down": 0, "bytes_up": 0,
                        "sigv4_ok": 0, "sigv4_refused": 0, "faults": {}, "methods": {},
                        "regions": []}
        self._want_port = port
        self._srv = None
        self._socks = set()
        self._stop = threading.Event()
        self.port = None

    # -- control
    def set_faults(self, faults, match=None):
        with self._lock:
            self._faults = list(faults)
            self._match = re.compile(match) if match else None

    def counters(self):
        with self._lock:
            c = dict(self._counts)
            c["faults"] = dict(c["faults"])
            c["methods"] = dict(c["methods"])
            c["regions"] = list(c["regions"])
            c["pending_faults"] = len(self._faults)
            return c

    def reset_counters(self):
        with self._lock:
            for k in ("requests", "connections", "bytes_down", "bytes_up", "sigv4_ok",
                      "sigv4_refused"):
                self._counts[k] = 0
            self._counts["faults"] = {}
            self._counts["methods"] = {}
            self._counts["regions"] = []

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(("127.0.0.1", self._want_port))
        self._srv.listen(64)
        self._srv.settimeout(0.2)
        self.port = self._srv.getsockname()[1]
        threading.Thread(target=self._accept_loop, daemon=True).start()
        return self

    def stop(self):
        self._stop.set()
        if self._srv:
            self._srv.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- internals
    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                c, _ = self._srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._counts["connections"] += 1
                self._socks.add(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _take_fault(self, reqline):
        with self._lock:
            self._counts["requests"] += 1
            m = reqline.split(" ", 1)[0]
            self._counts["methods"][m] = self._counts["methods"].get(m, 0) + 1
            if self._faults and (self._match is None or self._match.search(reqline)):
                f = self._faults.pop(0)
            else:
                f = "ok"
            self._counts["faults"][f] = self._counts["faults"].get(f, 0) + 1
            return f

    def _send(self, sock, data):
        """Send to a client, throttled to self.rate (shared by every connection): a token
        bucket that lets up to 2 ms of sending catch up, so sleeps that overshoot do not
        lower the rate."""
        step = 65536 if self.rate > 0 else len(data) or 1
        for i in range(0, len(data), step):
            piece = data[i:i + step]
            if self.rate > 0:
                with self._lock:
                    now = time.monotonic()
                    start = max(now - 0.002, self._next_send)
                    self._next_send = start + len(piece) / self.rate
                    wait = self._next_send - now
                if wait > 0:
                    time.sleep(wait)
            sock.sendall(piece)
            with self._lock:
                self._counts["bytes_down"] += len(piece)

    @staticmethod
    def _rst(sock):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass

    def _serve(self, client):
        up = None
        cbuf = b""
        try:
            if self.latency:
                time.sleep(self.latency)  # the TCP handshake's round trip
            while not self._stop.is_set():
                head, cbuf = _recv_head(client, cbuf)
                if head is None:
                    return
                reqline, hdrs = _parse_head(head)
                method, target = (reqline.split(" ") + ["", ""])[:2]
                if (_hget(hdrs, "transfer-encoding") or "").lower() == "chunked":
                    client.sendall(_s3_error(411, "MissingContentLength", "You must provide the "
                                             "Content-Length HTTP header.", b"Connection: close\r\n"))
                    return
                if (_hget(hdrs, "expect") or "").lower() == "100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    head = re.sub(rb"(?im)^expect:[^\r\n]*\r\n", b"", head)
                n = int(_hget(hdrs, "content-length") or 0)
                body, cbuf = _recv_exact(client, cbuf, n)
                with self._lock:
                    self._counts["bytes_up"] += len(head) + len(body)
                fault = self._take_fault(reqline)
                if self.latency:
                    time.sleep(self.latency)
                if self.sigv4 is not None:
                    bad = sigv4_check(method, target, hdrs, body, self.sigv4)
                    m = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/", _hget(hdrs, "authorization") or "")
                    with self._lock:
                        if m and m.group(1) not in self._counts["regions"]:
                            self._counts["regions"].append(m.group(1))
                        self._counts["sigv4_refused" if bad else "sigv4_ok"] += 1
                    if bad:
                        self._send(client, _s3_error(*bad))
                        continue
                if fault == "reset":
                    self._rst(client)
                    return
                m = re.fullmatch(r"(\d{3})(?:ra:(\d+))?", fault)
                if m:
                    st = int(m.group(1))
                    extra = b"Retry-After: %s\r\n" % m.group(2).encode() if m.group(2) else b""
                    code = {503: "SlowDown", 500: "InternalError", 404: "NoSuchKey",
                            403: "AccessDenied"}.get(st, "Injected")
                    resp = _s3_error(st, code, "injected by remote_proxy", extra)
                    if method == "HEAD":
                        resp = resp[:resp.index(b"\r\n\r\n") + 4]
                    self._send(client, resp)
                    continue
                if fault.startswith("delay:"):
                    time.sleep(float(fault[6:]))
                if up is None:
                    try:
                        up = socket.create_connection(self.upstream, timeout=60)
                    except OSError as e:
                        self._send(client, _s3_error(502, "BadGateway", "upstream %s:%d: %s" % (
                            self.upstream[0], self.upstream[1], e), b"Connection: close\r\n"))
                        return
                    up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    with self._lock:
                        self._socks.add(up)
                up.sendall(head + body)
                keep = self._relay(client, up, method, fault)
                if not keep:
                    return
        except (_Closed, OSError):
            return
        finally:
            with self._lock:
                self._socks.discard(client)
                if up is not None:
                    self._socks.discard(up)
            if up is not None:
                up.close()
            client.close()

    def _relay(self, client, up, method, fault):
        """Forward one response from up to client. Returns whether both stay open."""
        ubuf = b""
        while True:
            head, ubuf = _recv_head(up, ubuf)
            if head is None:
                raise _Closed("upstream closed")
            status_line, hdrs = _parse_head(head)
            status = int(status_line.split(" ")[1])
            if status >= 200:
                break
            self._send(client, head)  # 1xx: pass on, read the real head
        te = (_hget(hdrs, "transfer-encoding") or "").lower()
        cl = _hget(hdrs, "content-length")
        close = (_hget(hdrs, "connection") or "").lower() == "close"
        if method == "HEAD" or status in (204, 304):
            body, length_known = b"", True
        elif te == "chunked":
            body = b""
            while True:  # relay the chunked body as it is, after reading it whole
                line, ubuf = self._line(up, ubuf)
                size = int(line.split(b";")[0], 16)
                data, ubuf = _recv_exact(up, ubuf, size + 2)
                body += line + data
                if size == 0:
                    # trailers end with an empty line; the chunk's CRLF was that line
                    break
            length_known = True
        elif cl is not None:  # streamed: the head and each piece as it arrives
            n = int(cl)
            cut = n // 2 if fault in ("truncate", "reset_mid") or fault.startswith("stall:") else n
            self._send(client, head)
            sent = 0
            while sent < n:
                if not ubuf:
                    ubuf = up.recv(1 << 20)
                    if not ubuf:
                        raise _Closed("upstream closed in a body")
                piece, ubuf = ubuf[:n - sent], ubuf[n - sent:]
                if sent < cut:
                    self._send(client, piece[:cut - sent])
                sent += len(piece)
            if cut < n:
                return self._fault_end(client, fault)
            return not close
        else:
            body = ubuf
            while True:
                d = up.recv(1 << 20)
                if not d:
                    break
                body += d
            length_known, close = False, True
        if fault in ("truncate", "reset_mid") or fault.startswith("stall:"):
            self._send(client, head + body[:len(body) // 2])
            return self._fault_end(client, fault)
        self._send(client, head + body)
        return length_known and not close

    def _fault_end(self, client, fault):
        """After half a body: stall, reset or just close. Returns False (close)."""
        if fault.startswith("stall:"):
            time.sleep(float(fault[6:]))
        if fault == "reset_mid":
            self._rst(client)
        return False

    @staticmethod
    def _line(sock, buf):
        while b"\r\n" not in buf:
            d = sock.recv(CHUNK)
            if not d:
                raise _Closed("eof in chunked body")
            buf += d
        i = buf.index(b"\r\n") + 2
        return buf[:i], buf[i:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rate", type=float, default=0.0, help="bytes/s (0: unlimited)")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    ap.add_argument("--faults", default="", help="comma-separated schedule")
    ap.add_argument("--match", default=None, help="regex on the request line")
    a = ap.parse_args()
    host, _, port = a.upstream.rpartition(":")
    p = FaultProxy(int(port), host or "127.0.0.1", rate=a.rate, latency=a.latency,
                   faults=[f for f in a.faults.split(",") if f], match=a.match, port=a.port)
    p.start()
    print("port %d" % p.port, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "faults":
                p.set_faults([f for f in arg.split(",") if f])
            elif cmd == "counters":
                print(json.dumps(p.counters()), flush=True)
        # EOF on stdin: keep serving until a signal (run it with </dev/null & to background)
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        print(json.dumps(p.counters()), flush=True)
        p.stop()


if __name__ == "__main__":
    main()
