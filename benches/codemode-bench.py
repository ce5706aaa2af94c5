"""Client of codemode-bench.sh (see there): N `everything__echo` calls from one code-mode job vs.
N separate `tools/call` requests, same gateway, alternating rounds; prints medians and ratios.
Standard library only (http.client keeps one connection alive for the external client)."""
import http.client
import json
import statistics
import sys
import time
import urllib.parse

url, calls, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
u = urllib.parse.urlparse(url)
conn = http.client.HTTPConnection(u.hostname, u.port)
headers = {"Content-Type": "application/json"}
next_id = 0


def rpc(method, params):
    """One request; returns (result, request bytes, response bytes)."""
    global next_id
    next_id += 1
    body = json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}).encode()
    conn.request("POST", u.path, body, headers)
    resp = conn.getresponse()
    data = resp.read()
    reply = json.loads(data)
    if "error" in reply:
        raise SystemExit(f"{method} failed: {reply['error']}")
    return reply["result"], len(body), len(data)


opened, _, _ = rpc("session.open", {})
headers["Mcp-Session-Id"] = opened["session_id"]
headers["Axp-Capability"] = opened["cap_token"]

PROGRAMS = {
    "python": f"""
last = None
for i in range({calls}):
    last = tools.everything__echo(message="m%d" % i)
print({calls}, "calls; last:", last)
""",
    "javascript": f"""
let last = null;
for (let i = 0; i < {calls}; i++) last = await tools.everything__echo({{ message: "m" + i }});
console.log({calls}, "calls; last:", last);
""",
}


def external():
    t0 = time.perf_counter()
    sent = recv = 0
    for i in range(calls):
        r, a, b = rpc("tools/call", {"name": "everything__echo", "arguments": {"message": f"m{i}"}})
        assert r["content"][0]["text"] == f"Echo: m{i}", r
        sent, recv = sent + a, recv + b
    return time.perf_counter() - t0, sent + recv, sent + recv


def code(language):
    t0 = time.perf_counter()
    started, sent, recv = rpc("job.start", {"code": {"language": language, "source": PROGRAMS[language]}})
    job, seq, done, stdout, per_call = started["job_id"], 0, False, "", []
    while not done:
        r, a, b = rpc("job.attach", {"job_id": job, "from_seq": seq, "wait_ms": 10000})
        sent, recv = sent + a, recv + b
        for e in r["events"]:
            if e["kind"] == "stdout":
                stdout += e["data"]
            elif e["kind"] == "tool_call":
                per_call.append(e["ms"])
            elif e["kind"] == "exit" and e.get("code") != 0:
                raise SystemExit(f"{language} job failed: {e}")
        seq, done = r["next_seq"], r["done"]
    wall = time.perf_counter() - t0
    assert f"last: Echo: m{calls - 1}" in stdout and len(per_call) == calls, (stdout, len(per_call))
    start_req = len(json.dumps({"code": {"language": language, "source": PROGRAMS[language]}}))
    return wall, start_req + len(stdout), sent + recv, statistics.median(per_call)


# Warm-up: interpreters' files in the page cache, the MCP server's first call done.
external()
code("python")
code("javascript")

rows = {"external": [], "python": [], "javascript": []}
for _ in range(rounds):
    rows["external"].append(external())
    rows["python"].append(code("python"))
    rows["javascript"].append(code("javascript"))

ext_wall = statistics.median(r[0] for r in rows["external"])
ext_bytes = rows["external"][0][1]
print(f"\n{calls} calls to everything__echo, median of {rounds} rounds (alternating)\n")
print(f"{'variant':<36}{'wall ms':>10}{'vs ext':>8}{'context bytes':>15}{'vs ext':>9}{'transcript B':>14}{'per-call ms':>12}")
print(f"{'external client, N x tools/call':<36}{ext_wall * 1000:>10.1f}{1.0:>8.2f}{ext_bytes:>15}{1.0:>9.3f}{ext_bytes:>14}{ext_wall * 1000 / calls:>12.2f}")
for lang in ("python", "javascript"):
    wall = statistics.median(r[0] for r in rows[lang])
    ctx = rows[lang][0][1]
    transcript = rows[lang][0][2]
    per = statistics.median(r[3] for r in rows[lang])
    print(f"{'code-mode ' + lang + ', 1 job':<36}{wall * 1000:>10.1f}{wall / ext_wall:>8.2f}{ctx:>15}{ctx / ext_bytes:>9.3f}{transcript:>14}{per:>12.2f}")
print(
    "\ncontext bytes: external = every tools/call request + response body (each is a model turn);"
    "\ncode-mode = the job.start params + the program's stdout. transcript B = every byte of the"
    "\nHTTP bodies exchanged (code-mode: job.start + job.attach, including the N tool_call events)."
    "\nper-call ms: external = wall / N; code-mode = median `ms` of the job's tool_call events."
)
