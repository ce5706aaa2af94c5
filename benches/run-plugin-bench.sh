#!/usr/bin/env bash
# Plugin call overhead, every figure from the same run:
#  1. in-process (cargo bench -p axp-plugin-host --bench overhead): a direct Rust function, WASM
#     instantiation alone, a no-op WASM call (fresh instance + call + JSON), a native plugin call
#     through its helper process;
#  2. through `axp serve` over HTTP (one keep-alive connection, one MCP session): `ping` (the
#     gateway alone) against `tools/call hello__noop` (the gateway + a no-op WASM plugin call) and
#     `tools/call hello-native__echo` (the gateway + the sandboxed native helper).
# Prints microseconds and ratios; asserts nothing.
#
# Needs: plugins/build-examples.sh, a release gateway (`cargo build --release -p axp-gateway`),
# python3. Environment: AXP (default $CARGO_TARGET_DIR/release/axp or target/release/axp),
# N (calls per gateway row, default 2000), IN_PROCESS=0 to skip part 1.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
AXP=${AXP:-${CARGO_TARGET_DIR:-$ROOT/target}/release/axp}
N=${N:-2000}
DIST=$ROOT/plugins/examples/dist
[ -f "$DIST/hello/axp-plugin.toml" ] || { echo "example plugins not built; hint: plugins/build-examples.sh" >&2; exit 1; }

if [ "${IN_PROCESS:-1}" = 1 ]; then
  echo "== in process (same run)"
  cargo bench -q -p axp-plugin-host --bench overhead 2>/dev/null | grep -v '^$'
fi

[ -x "$AXP" ] || { echo "no release gateway at $AXP; hint: cargo build --release -p axp-gateway (or set AXP=...)" >&2; exit 1; }
. "$HERE/lib.sh"
bench_workdir axp-plugin-bench
"$AXP" provider add "$DIST/hello" --state-dir "$WORK/state" >/dev/null 2>&1
"$AXP" provider add "$DIST/hello-native" --state-dir "$WORK/state" >/dev/null 2>&1
start_gateway --no-builtin

echo "== through axp serve over HTTP ($N calls per row, rows interleaved in rounds; load:$(uptime | sed 's/.*load average//'))"
python3 - "$URL" "$N" <<'PY'
import http.client, json, statistics, sys, time, urllib.parse
url, n = urllib.parse.urlparse(sys.argv[1]), int(sys.argv[2])
conn = http.client.HTTPConnection(url.hostname, url.port)
def post(body, sid=None):
    h = {"Content-Type": "application/json", "Accept": "application/json"}
    if sid: h["Mcp-Session-Id"] = sid
    conn.request("POST", url.path, json.dumps(body), h)
    r = conn.getresponse(); data = r.read()
    return r, json.loads(data)
r, _ = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
sid = r.getheader("Mcp-Session-Id")
rows = {
    "ping": {"method": "ping", "params": {}},
    "tools/call hello__noop (WASM)": {"method": "tools/call", "params": {"name": "hello__noop", "arguments": {}}},
    "tools/call hello-native__echo (native helper)": {"method": "tools/call", "params": {"name": "hello-native__echo", "arguments": {"message": "x"}}},
}
lat = {k: [] for k in rows}
for k, req in rows.items():  # warm up, and check every row works
    for i in range(50):
        _, res = post({"jsonrpc": "2.0", "id": i, **req}, sid)
        assert "error" not in res and not res.get("result", {}).get("isError"), res
rounds = 5
for _ in range(rounds):
    for k, req in rows.items():
        for i in range(n // rounds):
            t = time.perf_counter()
            post({"jsonrpc": "2.0", "id": i, **req}, sid)
            lat[k].append((time.perf_counter() - t) * 1e6)
p50 = {k: statistics.median(v) for k, v in lat.items()}
base = p50["ping"]
for k, v in lat.items():
    v.sort()
    print(f"{k:<48} p50 {p50[k]:>8.0f} µs  p99 {v[int(len(v) * 0.99)]:>8.0f} µs  ({p50[k] / base:.1f}x ping; +{p50[k] - base:.0f} µs)")
PY
