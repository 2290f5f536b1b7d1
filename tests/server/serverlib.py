"""Helpers for tests that launch `penstock serve` on 127.0.0.1 with an ephemeral port (stdlib only)."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

BINARY = os.environ.get("PENSTOCK_BINARY", "build/penstock")


def tools_venv():
    """The virtual environment tools/setup.sh installs the third-party Python clients (openai, aiperf) into."""
    if os.environ.get("PENSTOCK_TOOLS_VENV"):
        return os.environ["PENSTOCK_TOOLS_VENV"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "penstock", "tools-venv")


def reexec_in_tools_venv():
    """Re-runs the calling test script with the tools venv's python when this interpreter lacks a client package
    (ctest starts the tests with the system python 3). Returns only when there is no such venv (or it was tried)."""
    python = os.path.join(tools_venv(), "bin", "python")
    if os.environ.get("PENSTOCK_IN_TOOLS_VENV") or not os.access(python, os.X_OK):
        return
    if os.path.realpath(sys.prefix) == os.path.realpath(tools_venv()):
        return
    os.environ["PENSTOCK_IN_TOOLS_VENV"] = "1"
    sys.stdout.flush()
    os.execv(python, [python, *sys.argv])


def find_tool(name):
    """An executable installed by tools/setup.sh: the tools venv, ~/.local/bin (pip --user), then PATH."""
    for d in (os.path.join(tools_venv(), "bin"), os.path.join(os.path.expanduser("~"), ".local", "bin")):
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return shutil.which(name)


class Server:
    """A `penstock serve --port 0` subprocess; the bound port (and the serving process's pid) are read from its
    "listening on" stdout line. `launcher` prefixes the command (e.g. mpirun -np 2): `proc` is then the launcher and
    `pid` the serving process, global rank 0."""

    def __init__(self, *flags, threads=2, launcher=()):
        self.proc = subprocess.Popen(
            [*launcher, BINARY, "serve", "--port", "0", "--threads", str(threads), *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.head = []  # stdout lines up to the listening line
        m = None
        while m is None:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.head.append(line)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+).*?(?:pid (\d+))?\)$", line.rstrip())
        if not m:
            # stdout at its end: the process is exiting (a launcher may still be passing its ranks' stderr on), so
            # collect its stderr up to its exit rather than polling once (a race that lost the reason).
            try:
                _, err = self.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                _, err = self.proc.communicate()
            raise RuntimeError(f"server did not start: {''.join(self.head)!r} {err!r}")
        self.port = int(m.group(1))
        self.pid = int(m.group(2)) if m.group(2) else self.proc.pid

    def request(self, method, path, body=None, headers=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        return resp.status, dict(resp.getheaders()), payload

    def post(self, path, body, **kw):
        status, headers, payload = self.request("POST", path, body, **kw)
        try:
            return status, headers, json.loads(payload)
        except ValueError:
            return status, headers, payload

    def sse(self, path, body, headers=None, timeout=60):
        """POSTs a streaming request; returns (status, [parsed data frames], saw_done)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        conn.request("POST", path, body=json.dumps(body), headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read().decode("utf-8", "replace")
        conn.close()
        frames, done = [], False
        for ev in raw.split("\n\n"):
            if not ev.startswith("data: "):
                continue
            data = ev[len("data: "):]
            if data == "[DONE]":
                done = True
            else:
                frames.append(json.loads(data))
        return resp.status, frames, done

    def metrics(self):
        _, _, payload = self.request("GET", "/metrics")
        out = {}
        for line in payload.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def raw(self, data, read=True, timeout=10):
        """Sends raw bytes on a fresh socket; returns the response status code (0 when none)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(data)
            if not read:
                return s
            buf = b""
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
            m = re.match(rb"HTTP/1\.[01] (\d+)", buf)
            return int(m.group(1)) if m else 0
        finally:
            if read:
                s.close()

    def wait_metric(self, name, pred, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            v = self.metrics().get(name, 0.0)
            if pred(v):
                return v
            time.sleep(0.05)
        return self.metrics().get(name, 0.0)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
