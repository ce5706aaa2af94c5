#!/usr/bin/env python3
"""Large job output through `axp serve`: a job writing SIZE bytes to stdout against the same
producer piped into `cat > file` on the same file system, the gateway's RSS while it runs, and
`job.attach` replay from seq 0. Standard library only; run by bench.sh, which starts the gateway
(benches/lib.sh) and passes its URL, pid and work directory.

It reports, it never fails on a figure; it fails only if the output is not what was written.
"""

import argparse
import http.client
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

CLK_TCK = os.sysconf("SC_CLK_TCK")

# A 64-character text line (63 characters and the newline), the kind of output jobs log.
LINE = "axp large-output bench: text line of sixty-four bytes 0123456789"


def producers(size):
    return {
        "text": f"yes '{LINE}' | head -c {size}",
        "zeros": f"head -c {size} /dev/zero",
    }


class Rpc:
    """One keep-alive HTTP connection to /axp, with the session's headers."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path
        self.conn = http.client.HTTPConnection(self.host, self.port)
        self.headers = {"Content-Type": "application/json"}
        self.id = 0

    def raw(self, method, params, accept=None):
        """Sends one request; returns the response object (the body is not read yet)."""
        self.id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        headers = dict(self.headers)
        if accept:
            headers["Accept"] = accept
        self.conn.request("POST", self.path, body, headers)
        return self.conn.getresponse()

    def call(self, method, params):
        r = json.loads(self.raw(method, params).read())
        if "error" in r:
            raise SystemExit(f"{method} failed: {r['error']}")
        return r["result"]

    def open(self):
        res = self.call("session.open", {})
        self.headers["Mcp-Session-Id"] = res["session_id"]
        self.headers["Axp-Capability"] = res["cap_token"]
        return res


def proc_cpu(pid):
    """(self user+sys, reaped children user+sys) of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14-17 of proc(5), counted from the state (field 3) at index 0.
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime) / CLK_TCK, (cutime + cstime) / CLK_TCK


def rss_kib(pid, key="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


class RssSampler(threading.Thread):
    """Samples a process's VmRSS every `period` seconds until stopped."""

    def __init__(self, pid, period=0.5):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.samples = []
        self.stop = threading.Event()

    def run(self):
        while True:
            self.samples.append(rss_kib(self.pid))
            if self.stop.wait(self.period):
                self.samples.append(rss_kib(self.pid))
                return


class Perf:
    """`perf record` of the gateway around one phase, when a directory for the data is given."""

    def __init__(self, out_dir, gw_pid, name):
        self.proc = None
        if out_dir:
            path = os.path.join(out_dir, f"{name}.data")
            self.proc = subprocess.Popen(
                ["perf", "record", "-F", "999", "-g", "-p", str(gw_pid), "-o", path],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # perf attaches before the phase starts

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait()


def mb_s(nbytes, secs):
    return nbytes / secs / 1e6 if secs > 0 else float("inf")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def baseline(cmd, out_path, size):
    """The producer piped into `cat > file` on the state dir's file system: seconds taken, and
    the CPU seconds of the whole pipeline (producer and cat)."""
    subprocess.run(["rm", "-f", out_path], check=True)
    subprocess.run(["sync"], check=True)
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    subprocess.run(["sh", "-c", f"{cmd} | cat > '{out_path}'"], check=True)
    took = time.perf_counter() - t0
    cpu = children_cpu() - cpu0
    got = os.path.getsize(out_path)
    if got != size:
        raise SystemExit(f"baseline wrote {got} bytes, not {size}")
    os.remove(out_path)
    return took, cpu


def run_job(rpc, gw_pid, cmd):
    """Starts a command job running `cmd`, waits for its end; returns timings, RSS, CPU."""
    subprocess.run(["sync"], check=True)
    sampler = RssSampler(gw_pid)
    cpu0 = proc_cpu(gw_pid)
    sampler.start()
    t0 = time.perf_counter()
    job = rpc.call("job.start", {"command": ["sh", "-c", cmd]})["job_id"]
    # Poll the job's record every 100 ms (one SQLite read each): attaching at the log's head
    # would return at every appended event and load the gateway with the client's own calls.
    while True:
        st = rpc.call("job.status", {"job_id": job})
        if st["state"] != "running":
            break
        time.sleep(0.1)
    took = time.perf_counter() - t0
    cpu1 = proc_cpu(gw_pid)
    sampler.stop.set()
    sampler.join()
    if st["state"] != "exited" or st.get("code") != 0:
        raise SystemExit(f"the job did not exit 0: {st}")
    return {
        "job": job,
        "secs": took,
        "gateway_secs": (st["ended_ms"] - st["created_ms"]) / 1e3,
        "next_seq": st["next_seq"],
        "rss": sampler.samples,
        "gw_cpu": cpu1[0] - cpu0[0],
        "child_cpu": cpu1[1] - cpu0[1],
    }


TAIL = re.compile(rb'"next_seq":(\d+),"done":(true|false)')


def replay_raw(rpc, gw_pid, job):
    """job.attach from seq 0 to the end, 1000 events a call, without decoding the events: what
    the gateway serves, with the client's cost kept to reading bytes."""
    seq, wire, calls = 0, 0, 0
    cpu0, c0 = proc_cpu(gw_pid)[0], time.process_time()
    t0 = time.perf_counter()
    while True:
        body = rpc.raw("job.attach", {"job_id": job, "from_seq": seq, "limit": 1000}).read()
        wire += len(body)
        calls += 1
        m = TAIL.search(body, max(0, len(body) - 200))
        if not m:
            raise SystemExit(f"unexpected job.attach answer: {body[:300]!r}…{body[-300:]!r}")
        seq = int(m.group(1))
        if m.group(2) == b"true":
            break
    took = time.perf_counter() - t0
    return {"secs": took, "wire": wire, "calls": calls, "next_seq": seq,
            "gw_cpu": proc_cpu(gw_pid)[0] - cpu0, "client_cpu": time.process_time() - c0}


def replay_parsed(rpc, gw_pid, job):
    """The same, every event decoded and checked: seqs dense from 0, and the payload counted."""
    seq, payload, wire = 0, 0, 0
    cpu0, c0 = proc_cpu(gw_pid)[0], time.process_time()
    t0 = time.perf_counter()
    exit_seen = None
    while True:
        body = rpc.raw("job.attach", {"job_id": job, "from_seq": seq, "limit": 1000}).read()
        wire += len(body)
        r = json.loads(body)["result"]
        for e in r["events"]:
            if e["seq"] != seq:
                raise SystemExit(f"expected seq {seq}, got {e['seq']}")
            seq += 1
            if e["kind"] == "stdout":
                payload += len(e["data"])
            elif e["kind"] == "exit":
                exit_seen = e
        if r["done"]:
            break
    took = time.perf_counter() - t0
    return {"secs": took, "wire": wire, "payload": payload, "next_seq": seq, "exit": exit_seen,
            "gw_cpu": proc_cpu(gw_pid)[0] - cpu0, "client_cpu": time.process_time() - c0}


def replay_sse(url, headers, gw_pid, job):
    """job.attach from seq 0 as one SSE stream (Accept: text/event-stream), bytes only."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "job.attach",
                       "params": {"job_id": job, "from_seq": 0}})
    h = dict(headers, Accept="text/event-stream")
    cpu0, c0 = proc_cpu(gw_pid)[0], time.process_time()
    t0 = time.perf_counter()
    conn.request("POST", u.path, body, h)
    resp = conn.getresponse()
    wire, tail = 0, b""
    while True:
        chunk = resp.read1(1 << 20)
        if not chunk:
            break
        wire += len(chunk)
        tail = (tail + chunk)[-400:]
    took = time.perf_counter() - t0
    m = TAIL.search(tail)
    if not m or m.group(2) != b"true":
        raise SystemExit(f"the SSE stream did not end with the final response: {tail!r}")
    return {"secs": took, "wire": wire, "next_seq": int(m.group(1)),
            "gw_cpu": proc_cpu(gw_pid)[0] - cpu0, "client_cpu": time.process_time() - c0}


def log_bytes(state, job):
    total = 0
    for root, _, files in os.walk(os.path.join(state, "jobs")):
        for f in files:
            if f.startswith(job + "."):
                total += os.path.getsize(os.path.join(root, f))
    return total


def one_round(args, rpc, name, cmd, r):
    """Baseline, then the job through the gateway, then its replays; prints and returns them."""
    size, gw = args.size, args.gw_pid
    state = os.path.join(args.work, "state")
    tag = f"{name}-{r}"
    print(f"\n== producer `{name}`, round {r}: {cmd}")
    base, base_cpu = baseline(cmd, os.path.join(args.work, "baseline.out"), size)
    print(f"baseline `| cat > file`: {base:.2f} s, {mb_s(size, base):.0f} MB/s; CPU of the pipeline {base_cpu:.2f} s")
    with Perf(args.perf, gw, f"{tag}-job"):
        j = run_job(rpc, gw, cmd)
    rss = j["rss"]
    logb = log_bytes(state, j["job"])
    print(f"gateway job: {j['secs']:.2f} s start to exit as the client saw it ({j['gateway_secs']:.2f} s "
          f"created to ended in the gateway), {mb_s(size, j['secs']):.0f} MB/s; ratio to cat "
          f"{base / j['secs']:.2f}; {j['next_seq']} events, log {logb / 2**30:.2f} GiB on disk")
    print(f"  CPU during the job: gateway {j['gw_cpu']:.2f} s, the job's processes (reaped children) "
          f"{j['child_cpu']:.2f} s")
    print(f"  gateway RSS (MiB, every 0.5 s, {len(rss)} samples): start {rss[0] / 1024:.1f}, "
          f"max {max(rss) / 1024:.1f}, end {rss[-1] / 1024:.1f}; VmHWM {rss_kib(gw, 'VmHWM') / 1024:.1f}")
    # The gateway's RSS while it replays (all three replays).
    replay_rss = RssSampler(gw)
    replay_rss.start()
    with Perf(args.perf, gw, f"{tag}-replay"):
        raw = replay_raw(rpc, gw, j["job"])
    if raw["next_seq"] != j["next_seq"]:
        raise SystemExit(f"replay ended at seq {raw['next_seq']}, the job has {j['next_seq']}")
    print(f"replay job.attach (1000 a call, not decoded): {raw['secs']:.2f} s, {raw['calls']} calls, "
          f"payload {mb_s(size, raw['secs']):.0f} MB/s, wire {mb_s(raw['wire'], raw['secs']):.0f} MB/s; "
          f"CPU gateway {raw['gw_cpu']:.2f} s, client {raw['client_cpu']:.2f} s")
    with Perf(args.perf, gw, f"{tag}-sse"):
        sse = replay_sse(args.url, rpc.headers, gw, j["job"])
    if sse["next_seq"] != j["next_seq"]:
        raise SystemExit(f"SSE replay ended at seq {sse['next_seq']}, the job has {j['next_seq']}")
    print(f"replay job.attach SSE stream (not decoded): {sse['secs']:.2f} s, payload "
          f"{mb_s(size, sse['secs']):.0f} MB/s, wire {mb_s(sse['wire'], sse['secs']):.0f} MB/s; "
          f"CPU gateway {sse['gw_cpu']:.2f} s, client {sse['client_cpu']:.2f} s")
    parsed = replay_parsed(rpc, gw, j["job"])
    if parsed["payload"] != size or parsed["next_seq"] != j["next_seq"] or not parsed["exit"]:
        raise SystemExit(f"replay returned {parsed['payload']} payload bytes, {parsed['next_seq']} events; "
                         f"expected {size} and {j['next_seq']} ending with the exit")
    replay_rss.stop.set()
    replay_rss.join()
    print(f"replay job.attach decoded and checked: {parsed['secs']:.2f} s, payload "
          f"{mb_s(size, parsed['secs']):.0f} MB/s (all {size} bytes, seqs dense); "
          f"CPU gateway {parsed['gw_cpu']:.2f} s, client {parsed['client_cpu']:.2f} s")
    r = replay_rss.samples
    print(f"  gateway RSS during the three replays (MiB): start {r[0] / 1024:.1f}, max {max(r) / 1024:.1f}, "
          f"end {r[-1] / 1024:.1f}")
    j["replay_rss"] = r
    return {"base": base, "base_cpu": base_cpu, "job": j, "raw": raw, "sse": sse, "parsed": parsed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--gw-pid", type=int, required=True)
    ap.add_argument("--work", required=True, help="the bench's work dir (holds state/)")
    ap.add_argument("--size", type=int, default=1 << 30)
    ap.add_argument("--producers", default="text:3,zeros:1",
                    help="NAME[:ROUNDS],… of " + ", ".join(producers(0)))
    ap.add_argument("--perf", default="", help="directory for `perf record` data, one file per phase")
    args = ap.parse_args()
    size = args.size
    state = os.path.join(args.work, "state")
    fs = subprocess.run(["df", "--output=source,fstype", state], capture_output=True, text=True).stdout.split("\n")[1]
    print(f"size {size} bytes ({size / 2**30:.2f} GiB); state dir and baseline file on {fs.strip()}")
    print(f"load before: {open('/proc/loadavg').read().strip()}")

    rpc = Rpc(args.url)
    rpc.open()
    table = []
    for spec in args.producers.split(","):
        name, _, n = spec.partition(":")
        cmd = producers(size)[name]
        rounds = [one_round(args, rpc, name, cmd, r + 1) for r in range(int(n or 1))]
        table.append((name, rounds))

    print(f"\nload after: {open('/proc/loadavg').read().strip()}")
    print("\nMedians over the rounds (each round: baseline, then the job, then its replays):\n")
    print("| producer | rounds | cat MB/s | gateway MB/s | ratio (goal >= 0.5) | gateway RSS MiB first / max / last | "
          "replay MB/s: attach / SSE / decoded (goal >= 1000) | CPU s per GiB: cat pipeline / job's processes + "
          "gateway | gateway CPU s per GiB: attach / SSE |")
    print("|---|---|---|---|---|---|---|---|---|")
    gib = size / 2**30
    med = statistics.median
    for name, rounds in table:
        ratios = [x["base"] / x["job"]["secs"] for x in rounds]
        ratio = med(ratios)
        # Over the whole producer's run: every job and every replay.
        rss_start = rounds[0]["job"]["rss"][0]
        rss_max = max(max(x["job"]["rss"] + x["job"]["replay_rss"]) for x in rounds)
        rss_end = rounds[-1]["job"]["replay_rss"][-1]
        rate = {k: med(mb_s(size, x[k]["secs"]) for x in rounds) for k in ("raw", "sse", "parsed")}
        cpu = {k: med(x[k]["gw_cpu"] / gib for x in rounds) for k in ("job", "raw", "sse")}
        base_cpu = med(x["base_cpu"] / gib for x in rounds)
        child_cpu = med(x["job"]["child_cpu"] / gib for x in rounds)
        spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
        print(f"| {name} | {len(rounds)} | {med(mb_s(size, x['base']) for x in rounds):.0f} | "
              f"{med(mb_s(size, x['job']['secs']) for x in rounds):.0f} | {ratio:.2f}{spread} "
              f"{'met' if ratio >= 0.5 else 'NOT met'} | {rss_start / 1024:.0f} / {rss_max / 1024:.0f} / "
              f"{rss_end / 1024:.0f} | {rate['raw']:.0f} / {rate['sse']:.0f} / {rate['parsed']:.0f} "
              f"{'met' if max(rate.values()) >= 1000 else 'NOT met'} | "
              f"{base_cpu:.2f} / {child_cpu:.2f} + {cpu['job']:.2f} | {cpu['raw']:.2f} / {cpu['sse']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
