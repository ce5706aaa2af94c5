#!/usr/bin/env python3
"""Replicas sharing one PostgreSQL store, measured through `axp serve` (standard library only;
run by bench.sh, which starts a private PostgreSQL cluster and passes its URL).

* tool-call overhead: `tools/call` of server-everything's `echo` (an MCP server the gateway
  keeps running, so no process starts per call), one client, on a gateway with the embedded
  store and on one with PostgreSQL (mean and p50, and the ratio), two rounds alternating;
* cross-replica attach latency: a job on replica A prints a line every 20 ms; a client attached
  on replica B measures when each event arrives against the time its owner appended it
  (`ts_ms`), p50/p99 — and the same with the client on A, for comparison;
* jobs started per second: C clients calling `job.start` (a command job) for T seconds, all on
  one replica, then split over two.

It reports figures; it fails only if a call fails.
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

KEY = "5a1b7c3d9e8f00112233445566778899aabbccddeeff00112233445566778899"


class Rpc:
    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.path = u.path
        self.conn = http.client.HTTPConnection(u.hostname, u.port)
        self.headers = {"Content-Type": "application/json"}
        self.id = 0

    def call(self, method, params):
        self.id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        self.conn.request("POST", self.path, body, self.headers)
        r = json.loads(self.conn.getresponse().read())
        if "error" in r:
            raise SystemExit(f"{method} failed: {r['error']}")
        return r["result"]

    def open(self):
        res = self.call("session.open", {})
        self.use(res)
        return res

    def use(self, res):
        self.headers["Mcp-Session-Id"] = res["session_id"]
        self.headers["Axp-Capability"] = res["cap_token"]


class Gateway:
    """One `axp serve` in its own process group, on a free loopback port."""

    def __init__(self, axp, work, name, ws, fleet, store=None):
        state = os.path.join(work, name)
        os.makedirs(state, mode=0o700, exist_ok=True)
        key = os.path.join(state, "token-root.key")
        if not os.path.exists(key):
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, (KEY + "\n").encode())
            os.close(fd)
        args = [axp, "serve", "--listen", "127.0.0.1:0", "--state-dir", state, "--workspace", ws,
                "--mcp-config", fleet]
        if store:
            args += ["--store", store]
        self.err = open(os.path.join(work, name + ".err"), "w+")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.err, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            self.err.seek(0)
            for line in self.err.read().splitlines():
                if " on http://127.0.0.1:" in line:
                    self.url = line.split(" on ", 1)[1].split("/axp", 1)[0] + "/axp"
                    return
            if self.proc.poll() is not None:
                self.err.seek(0)
                raise SystemExit(f"{name} exited:\n{self.err.read()}")
            time.sleep(0.1)
        raise SystemExit(f"{name} did not start")

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except Exception:
            os.killpg(self.proc.pid, signal.SIGKILL)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def wait_for_tool(r, name):
    """Waits (up to 120 s) until the gateway serves `name`: MCP servers mount after it listens."""
    deadline = time.time() + 120
    while time.time() < deadline:
        if any(t["name"] == name for t in r.call("axp.index", {"query": name})["tools"]):
            return
        time.sleep(0.5)
    raise SystemExit(f"{name} was not served within 120 s")


def tool_calls(url, n):
    r = Rpc(url)
    r.open()
    wait_for_tool(r, "everything__echo")
    params = {"name": "everything__echo", "arguments": {"message": "hi"}}
    for _ in range(20):
        r.call("tools/call", params)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r.call("tools/call", params)
        times.append(time.perf_counter() - t0)
    return statistics.mean(times) * 1e6, pct(times, 0.5) * 1e6


def attach_latency(owner_url, reader_url, events):
    a = Rpc(owner_url)
    session = a.open()
    job = a.call("job.start", {"command": ["sh", "-c",
                                           f"for i in $(seq 1 {events}); do echo $i; sleep 0.02; done"]})
    job = job["job_id"]
    b = Rpc(reader_url)
    b.use(session)
    lat, seq, done = [], 0, False
    while not done:
        batch = b.call("job.attach", {"job_id": job, "from_seq": seq, "wait_ms": 10000})
        now = time.time() * 1000
        for e in batch["events"]:
            if e["kind"] == "stdout":
                lat.append(now - e["ts_ms"])
        seq, done = batch["next_seq"], batch["done"]
    return pct(lat, 0.5), pct(lat, 0.99), len(lat)


def starts_per_second(urls, clients, seconds):
    session = Rpc(urls[0]).open()
    counts = [0] * clients
    stop = time.time() + seconds

    def run(i):
        r = Rpc(urls[i % len(urls)])
        r.use(session)
        while time.time() < stop:
            r.call("job.start", {"command": ["true"]})
            counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.time() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--axp", required=True)
    ap.add_argument("--pg", required=True, help="postgres:// URL of an empty database or schema")
    ap.add_argument("--everything", required=True, help="server-everything's dist/index.js")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--events", type=int, default=200)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="axp-replicas-bench.")
    ws = os.path.join(work, "ws")
    os.makedirs(ws)
    fleet = os.path.join(work, "fleet.json")
    with open(fleet, "w") as f:
        json.dump({"mcpServers": {"everything": {"command": "node", "args": [os.path.abspath(a.everything)]}}}, f)
    gws = []
    try:
        sqlite = Gateway(a.axp, work, "sqlite", ws, fleet)
        gws.append(sqlite)
        ra = Gateway(a.axp, work, "a", ws, fleet, a.pg)
        gws.append(ra)
        print(f"axp {a.axp}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}")
        for rnd in range(2):
            s_mean, s_p50 = tool_calls(sqlite.url, a.calls)
            p_mean, p_p50 = tool_calls(ra.url, a.calls)
            print(f"tools/call ({a.calls}, round {rnd + 1}): embedded mean {s_mean:.0f} us p50 {s_p50:.0f} us; "
                  f"postgres mean {p_mean:.0f} us p50 {p_p50:.0f} us; ratio mean {p_mean / s_mean:.2f}, "
                  f"p50 {p_p50 / s_p50:.2f}")
        sqlite.stop()
        gws.remove(sqlite)
        one = starts_per_second([ra.url], a.clients, a.seconds)
        print(f"job.start, {a.clients} clients, {a.seconds:.0f} s, one replica: {one:.0f} jobs/s")
        rb = Gateway(a.axp, work, "b", ws, fleet, a.pg)
        gws.append(rb)
        p50, p99, n = attach_latency(ra.url, ra.url, a.events)
        print(f"attach on the job's own replica: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({n} events)")
        p50, p99, n = attach_latency(ra.url, rb.url, a.events)
        print(f"attach from another replica:     p50 {p50:.1f} ms, p99 {p99:.1f} ms ({n} events)")
        two = starts_per_second([ra.url, rb.url], a.clients, a.seconds)
        print(f"job.start, {a.clients} clients, {a.seconds:.0f} s, two replicas: {two:.0f} jobs/s "
              f"(ratio {two / one:.2f})")
    finally:
        for g in gws:
            g.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
