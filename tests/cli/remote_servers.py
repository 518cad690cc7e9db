#!/usr/bin/env python3
"""Local object stores for the remote-data tests: nginx over a directory, and s3rver.

  Nginx(root_dir, tls=False)   static files (byte ranges, HEAD) and WebDAV PUT under root_dir;
                               its nginx.conf, pid, logs and temp paths live in a temp dir;
                               `daemon off; master_process off;` as a child process, so it
                               runs the same as root and as another user. tls=True serves
                               https with a self-signed certificate for 127.0.0.1 (.ca_file).
  S3rver(data_dir, bucket)     s3rver (npm, deps/npm/node_modules/s3rver) on a free port with
                               `bucket` created; its keys are S3RVER / S3RVER. s3rver 3.7.1
                               checks the access key of a SigV4 request but not the signature:
                               put remote_proxy.FaultProxy(sigv4=S3RVER_KEYS) in front to
                               have signatures checked as S3 does.

Each has .port, .url, start(), stop() and is a context manager. Both listen on 127.0.0.1
only. missing() says why the servers cannot run here (None when they can), for a test to
print "skip: ..." and exit 0, as the other tests in tests/cli do.

Also: find_tool(ctrain) finds the test-only build/tests/remote_tool next to ctrain.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
S3RVER_JS = os.path.join(ROOT, "deps", "npm", "node_modules", "s3rver", "bin", "s3rver.js")
S3RVER_KEYS = {"S3RVER": "S3RVER"}


def nginx_path():
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx")
                                          if os.access(p, os.X_OK)), None)


def missing(nginx=True, s3rver=True):
    """Why the servers cannot run here, or None."""
    why = []
    if nginx and not nginx_path():
        why.append("nginx not found (apt-get install nginx-light)")
    if s3rver and not shutil.which("node"):
        why.append("node not found (apt-get install nodejs)")
    if s3rver and not os.path.exists(S3RVER_JS):
        why.append("%s not found (scripts/fetch_data.sh installs s3rver)" % S3RVER_JS)
    return "; ".join(why) or None


def find_tool(ctrain, name="remote_tool"):
    """build/tests/<name> beside build/ctrain ($REMOTE_TOOL overrides)."""
    env = os.environ.get("REMOTE_TOOL")
    if env:
        return os.path.abspath(env)
    d = os.path.dirname(os.path.abspath(ctrain))
    for p in (os.path.join(d, "tests", name), os.path.join(d, name)):
        if os.access(p, os.X_OK):
            return p
    raise FileNotFoundError("%s not found beside %s (build the tests)" % (name, ctrain))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, timeout, what, log=None):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            text = ""
            if log and os.path.exists(log):
                with open(log, errors="replace") as f:
                    text = f.read()[-2000:]
            raise RuntimeError("%s exited with %s: %s" % (what, proc.returncode, text))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("%s did not listen on port %d within %d s" % (what, port, timeout))


class _Server:
    proc = None
    port = None
    scheme = "http"

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Nginx(_Server):
    def __init__(self, root_dir, tls=False):
        self.root = os.path.abspath(root_dir)
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self.tmp = None
        self.ca_file = None

    def _conf(self, port):
        t = self.tmp
        listen = "listen 127.0.0.1:%d%s;" % (port, " ssl" if self.tls else "")
        ssl = ""
        if self.tls:
            ssl = "ssl_certificate %s/cert.pem; ssl_certificate_key %s/key.pem;" % (t, t)
        return """
daemon off;
master_process off;
worker_processes 1;
pid %(t)s/nginx.pid;
error_log %(t)s/error.log warn;
events { worker_connections 256; }
http {
    log_format ct '$request $status $body_bytes_sent $http_range';
    access_log %(t)s/access.log ct;
    client_body_temp_path %(t)s/body;
    proxy_temp_path %(t)s/proxy;
    fastcgi_temp_path %(t)s/fastcgi;
    uwsgi_temp_path %(t)s/uwsgi;
    scgi_temp_path %(t)s/scgi;
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 60;
    keepalive_requests 100000;
    server {
        %(listen)s
        %(ssl)s
        root %(root)s;
        location / {
            dav_methods PUT;
            create_full_put_path on;
            client_max_body_size 0;
        }
    }
}
""" % {"t": t, "listen": listen, "ssl": ssl, "root": self.root}

    def start(self):
        exe = nginx_path()
        if not exe:
            raise RuntimeError(missing(s3rver=False))
        self.tmp = tempfile.mkdtemp(prefix="ct_nginx_")
        if self.tls:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", os.path.join(self.tmp, "key.pem"),
                            "-out", os.path.join(self.tmp, "cert.pem")],
                           check=True, capture_output=True)
            self.ca_file = os.path.join(self.tmp, "cert.pem")
        for attempt in range(5):  # a free port can be taken before nginx binds it
            port = free_port()
            conf = os.path.join(self.tmp, "nginx.conf")
            with open(conf, "w") as f:
                f.write(self._conf(port))
            err = os.path.join(self.tmp, "error.log")
            self.proc = subprocess.Popen([exe, "-p", self.tmp, "-c", conf, "-e", err],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            try:
                wait_port(port, self.proc, 10, "nginx", err)
                self.port = port
                return self
            except RuntimeError:
                self.stop()
                if attempt == 4:
                    raise
        return self

    def access_log(self):
        try:
            with open(os.path.join(self.tmp, "access.log")) as f:
                return f.read().splitlines()
        except OSError:
            return []

    def stop(self):
        super().stop()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


class S3rver(_Server):
    def __init__(self, data_dir, bucket):
        self.dir = os.path.abspath(data_dir)
        self.bucket = bucket
        self.keys = dict(S3RVER_KEYS)

    def start(self):
        why = missing(nginx=False)
        if why:
            raise RuntimeError(why)
        os.makedirs(self.dir, exist_ok=True)
        # port 0: s3rver binds a free port and prints it ("S3rver listening on ADDR:PORT")
        self.proc = subprocess.Popen(["node", S3RVER_JS, "--directory", self.dir, "--address",
                                      "127.0.0.1", "--port", "0", "--configure-bucket",
                                      self.bucket, "--silent"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        t0 = time.time()
        out = []
        while time.time() - t0 < 30:
            line = self.proc.stdout.readline()
            if not line:
                break
            out.append(line)
            if "listening on" in line:
                self.port = int(line.strip().rsplit(":", 1)[1])
                # drain the rest so s3rver never blocks on a full pipe
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()
                wait_port(self.port, self.proc, 10, "s3rver")
                return self
        self.stop()
        raise RuntimeError("s3rver did not start: " + "".join(out)[-2000:])
