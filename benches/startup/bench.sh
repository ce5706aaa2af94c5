#!/usr/bin/env bash
# Start-up against catalog size: for each N (default 100 1000 10000) tools in static-form
# providers of 20 tools, how long `axp serve` takes to answer /healthz and to have all N tools in
# its index (`axp.index` total, plus the tools the registration lint refused), against the same gateway with no catalog at all, measured in the
# same run (the ratio is what the catalog adds). Loopback only; every gateway is stopped.
#
# usage: benches/startup/bench.sh [AXP_BINARY] [N ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
axp=${1:-target/release/axp}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100 1000 10000)
[ -x "$axp" ] || { echo "no $axp: build it first (cargo build --release -p axp-gateway)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=7990

now() { date +%s.%N; }

# run NAME FLEET_DIR: prints seconds to /healthz and to the full index.
run() {
    local dir=$1 want=$2 args=() f
    for f in "$dir"/p*.json; do [ -e "$f" ] && args+=(--mcp-config "$f"); done
    port=$((port + 1))
    rm -rf "$work/state"; mkdir -p "$work/ws"
    local t0 t1 t2 pid
    t0=$(now)
    "$axp" serve --no-builtin --listen "127.0.0.1:$port" --state-dir "$work/state" --workspace "$work/ws" "${args[@]}" \
        >"$work/log" 2>&1 &
    pid=$!
    until curl -sf "127.0.0.1:$port/healthz" >/dev/null; do sleep 0.005; done
    t1=$(now)
    # One poller process (a process per poll cost more than a poll's interval): the session's
    # `axp.index` total, plus the tools the registration lint refused, which are registered too
    # and listed in /healthz (the generated word salad trips a safety rule now and then, as a real
    # catalog may).
    python3 - "$port" "$want" <<'PY'
import json, sys, time, urllib.request
port, want = sys.argv[1], int(sys.argv[2])
def post(body, headers={}):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/axp", json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **headers})
    return json.load(urllib.request.urlopen(req))["result"]
s = post({"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {}})
auth = {"Mcp-Session-Id": s["session_id"], "Axp-Capability": s["cap_token"]}
while True:
    total = post({"jsonrpc": "2.0", "id": 2, "method": "axp.index", "params": {"limit": 1}}, auth)["total"]
    refused = len(json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz")).get("refused", []))
    if total + refused >= want:
        break
    time.sleep(0.005)
PY
    t2=$(now)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    python3 -c "print(f'{$t1-$t0:.3f} {$t2-$t0:.3f}')"
}

mkdir -p "$work/empty"
read -r base_h base_i < <(run "$work/empty" 0)
echo "binary: $axp"
echo "baseline (no catalog): /healthz after ${base_h} s"
printf '%8s %12s %14s %16s\n' tools healthz_s all_indexed_s indexed/baseline
for n in "${sizes[@]}"; do
    rm -rf "$work/cat"; mkdir -p "$work/cat"
    python3 benches/startup/gen_catalog.py "$work/cat" "$n"
    read -r h i < <(run "$work/cat" "$n")
    python3 -c "print(f'{$n:8d} {$h:12.3f} {$i:14.3f} {$i/$base_h:15.1f}x')"
done
