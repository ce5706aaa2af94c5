#!/usr/bin/env bash
# What `axp serve` adds to an MCP tool call, all on loopback, all figures from the same run:
# server-everything's `echo` driven (a) directly over stdio and (b) through `axp serve` over
# HTTP, with 1 client and with 8 concurrent clients, plus `ping` / `axp.index` through the
# gateway alone. Prints calls/s, p50, p99, CPU per call and the gateway/direct ratios.
#
# Needs: scripts/install-test-deps.sh (server-everything under tests/fixtures/node_modules) and a
# release build of the gateway (`cargo build --release -p axp-gateway`). Builds the bench client
# itself (benches/gateway-bench, its own Cargo project and lock, outside the workspace).
#
# Environment: AXP (the axp binary; default $CARGO_TARGET_DIR/release/axp or target/release/axp),
# BENCH_TARGET_DIR (default target-bench/), PERF_STAT=1 to also run `perf stat` on the gateway,
# AUDIT_SYNC=each|interval (the gateway's `[audit] sync`; default: the gateway's default).
# Arguments are passed to the bench client (`--seq 2000 --clients 8 --per-client 2000 ...`).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
AXP=${AXP:-${CARGO_TARGET_DIR:-$ROOT/target}/release/axp}
EVERYTHING=$ROOT/tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js

[ -x "$AXP" ] || { echo "no gateway binary at $AXP; hint: cargo build --release -p axp-gateway (or set AXP=...)" >&2; exit 1; }
[ -f "$EVERYTHING" ] || { echo "server-everything is not installed at $EVERYTHING; hint: scripts/install-test-deps.sh" >&2; exit 1; }
command -v node >/dev/null || { echo "node is not installed; hint: scripts/install-test-deps.sh" >&2; exit 1; }

CARGO_TARGET_DIR=${BENCH_TARGET_DIR:-$ROOT/target-bench} \
  cargo build --release -q --manifest-path "$HERE/gateway-bench/Cargo.toml"
BENCH=${BENCH_TARGET_DIR:-$ROOT/target-bench}/release/gateway-bench

. "$HERE/lib.sh"
bench_workdir axp-gateway-bench

cat >"$WORK/fleet.json" <<JSON
{"mcpServers": {"everything": {"command": "node", "args": ["$EVERYTHING"]}}}
JSON

descendants() { local p; for p in $(pgrep -P "$1" || true); do echo "$p"; descendants "$p"; done; }

: >"$WORK/axp.toml"
if [ -n "${AUDIT_SYNC:-}" ]; then printf '[audit]\nsync = "%s"\n' "$AUDIT_SYNC" >"$WORK/axp.toml"; fi

start_gateway --config "$WORK/axp.toml" --mcp-config "$WORK/fleet.json"
KIDS=$(descendants "$GW_PID")

echo "gateway: $AXP (pid $GW_PID) at $URL; MCP server: node $(node --version) server-everything $(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$(dirname "$EVERYTHING")/../package.json" | head -1)"
# The gateway prints its worker count right after the line start_gateway waited for.
for _ in $(seq 40); do grep -q 'runtime worker thread' "$WORK/axp.err" && break; sleep 0.05; done
echo "audit sync: ${AUDIT_SYNC:-default}; $(sed -n 's/^axp: \([0-9]* runtime worker threads*\)$/\1/p' "$WORK/axp.err" | head -1)"
echo "machine: $(nproc) CPUs; load before:$(uptime | sed 's/.*load average//')"
if [ "${PERF_STAT:-0}" = 1 ] && command -v perf >/dev/null; then
  perf stat -e task-clock,context-switches,cpu-migrations,page-faults -p "$GW_PID" -o "$WORK/perf.txt" &
  PERF_PID=$!
fi

"$BENCH" --node node --everything "$EVERYTHING" --url "$URL" --gateway-pid "$GW_PID" --sandbox-axp "$AXP" "$@"

echo "load after:$(uptime | sed 's/.*load average//')"
if [ -n "$PERF_PID" ]; then
  kill -INT "$PERF_PID" 2>/dev/null; wait "$PERF_PID" 2>/dev/null || true; PERF_PID=
  echo "perf stat of the gateway process over the whole run:"; sed -n '/Performance/,$p' "$WORK/perf.txt"
fi
