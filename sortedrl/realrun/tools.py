"""A built-in tool environment for multi-turn runs: a calculator served over local HTTP.

Agentic RL rollouts wait on tools (a code sandbox, a search engine) between turns, and that wait
is a bubble of its own. To record it for real, a multi-turn run talks to a tool server in a
separate local process, as a rollout worker talks to a sandbox pool:

* ``POST /call`` with ``{"op": "sort", "args": "7 3 9"}`` answers ``{"output": "3 7 9"}`` after
  ``latency_s`` seconds (plus a seeded uniform jitter of up to ``jitter_s``) with the seconds it
  waited for a sandbox (``queued_s``), so the wait is real
  wall-clock time on the loopback interface, not a sleep inside the runner;
* at most ``pool`` calls run at once (a pool of sandboxes); the others queue, which the caller
  sees as a longer call, as with a saturated SandboxFusion;
* ``GET /health`` answers once the server is up.

The operations are deliberately tiny (a sort and a sum over digits) because the tiny test
model's vocabulary is digits and a few words: what matters here is the timing and the token
flow (the tool's output is appended to the context before the next turn), not the tool.

:class:`ToolServer` starts and stops the process (``python -m sortedrl.realrun.tools``);
:class:`ToolClient` calls it from a thread pool so the engine keeps stepping while calls wait.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sortedrl.errors import ConfigError


def run_op(op: str, args: str) -> str:
    """The tool's answer: ``sort`` orders the digits of ``args``, ``sum`` adds them."""
    digits = [int(w) for w in args.split() if w.isdigit()]
    if op == "sort":
        return " ".join(str(d) for d in sorted(digits))
    if op == "sum":
        return " ".join(str(sum(digits)))  # one word per digit, as the tiny vocabulary has them
    raise ValueError(f"unknown op {op!r} (known: sort, sum)")


# -- the server process ----------------------------------------------------------------------


def serve(port: int, latency_s: float, jitter_s: float, pool: int, seed: int) -> None:
    """Serve until stdin closes (the runner's end of the pipe), printing the port first."""
    slots = threading.BoundedSemaphore(pool)
    rng = random.Random(seed)
    rng_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet: the runner's stdout is its own
            pass

        def _reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._reply(200 if self.path == "/health" else 404, {"ok": self.path == "/health"})

        def do_POST(self) -> None:
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                output = run_op(str(body["op"]), str(body["args"]))
            except (ValueError, KeyError, TypeError) as e:
                self._reply(400, {"error": str(e)})
                return
            with rng_lock:
                wait = latency_s + rng.uniform(0.0, jitter_s)
            t0 = time.monotonic()
            with slots:  # a sandbox of the pool is busy for the whole call
                queued = time.monotonic() - t0
                time.sleep(wait)
            # the sandbox reports its own run time, as an execution sandbox reports a run's
            self._reply(200, {"output": output, "queued_s": queued, "held_s": wait})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # returns when the parent closes the pipe (or exits)
    server.shutdown()


class ToolServer:
    """The tool server as a child process on 127.0.0.1; ``url`` once started."""

    def __init__(self, latency_s: float = 0.05, jitter_s: float = 0.0, pool: int = 8,
                 seed: int = 0) -> None:
        if latency_s < 0 or jitter_s < 0:
            raise ConfigError(f"tool latency must be >= 0 s, got {latency_s} (jitter {jitter_s})")
        if pool < 1:
            raise ConfigError(f"tool pool must be >= 1 sandbox, got {pool}")
        self.latency_s, self.jitter_s, self.pool, self.seed = latency_s, jitter_s, pool, seed
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> ToolServer:
        cmd = [sys.executable, "-m", "sortedrl.realrun.tools", "--latency", str(self.latency_s),
               "--jitter", str(self.jitter_s), "--pool", str(self.pool), "--seed", str(self.seed)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8",
                                     env=env)
        port = self.proc.stdout.readline().strip()
        if not port.isdigit():
            self.stop()
            raise ConfigError("the tool server did not start (no port on its stdout)")
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # the server exits when its stdin closes
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
            self.proc = None

    def __enter__(self) -> ToolServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- the client ------------------------------------------------------------------------------


class ToolClient:
    """Calls the server from a thread pool; finished calls are collected with :meth:`done`."""

    def __init__(self, url: str, threads: int = 64, timeout_s: float = 60.0) -> None:
        self.url, self.timeout_s = url, timeout_s
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tool")
        self.results: queue.Queue = queue.Queue()
        self.pending = 0

    def call(self, key: object, op: str, args: str) -> None:
        """Start a call; ``(key, output, seconds, queued_s, held_s)`` appears in :meth:`done`
        when it returns: the call's wall-clock seconds, those it waited for a free sandbox, and
        those it held one (the rest is the HTTP round trip)."""
        self.pending += 1
        self.pool.submit(self._call, key, op, args)

    def _call(self, key: object, op: str, args: str) -> None:
        t0 = time.monotonic()
        data = json.dumps({"op": op, "args": args}).encode()
        req = urllib.request.Request(self.url + "/call", data=data,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read())
        except Exception as e:  # noqa: BLE001 (reported to the runner's thread, raised there)
            self.results.put((key, e, time.monotonic() - t0, 0.0, 0.0))
            return
        self.results.put((key, body["output"], time.monotonic() - t0, float(body["queued_s"]),
                          float(body["held_s"])))

    def done(self, wait_s: float = 0.0) -> list[tuple[object, str, float, float, float]]:
        """Calls finished so far; waits up to ``wait_s`` for the first when none has."""
        out = []
        try:
            out.append(self.results.get(timeout=wait_s) if wait_s > 0 else self.results.get_nowait())
        except queue.Empty:
            return out
        while True:
            try:
                out.append(self.results.get_nowait())
            except queue.Empty:
                break
        self.pending -= len(out)
        for key, output, *_ in out:
            if isinstance(output, Exception):
                raise ConfigError(f"tool call for {key}: {output}")
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--jitter", type=float, default=0.0)
    ap.add_argument("--pool", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    serve(a.port, a.latency, a.jitter, a.pool, a.seed)


if __name__ == "__main__":
    main()
