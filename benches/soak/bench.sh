#!/usr/bin/env bash
# Soak of `axp serve`: 1,000 sessions, ~200 concurrent command jobs (attached to, hung up on and
# re-attached from a seq, cancelled), tool calls to server-everything and `axp.index` calls, for
# 10 minutes by default, all on loopback with real processes. Prints the gateway's RSS and
# descriptors (start, end, max: are they flat?), axp.index p50/p99/max, memory per idle session,
# and whether every event acknowledged to a client is found again, identical, in a full replay.
#
# Needs: scripts/install-test-deps.sh (server-everything under tests/fixtures/node_modules) and a
# release build of the gateway. Builds the soak client itself (benches/soak/client, its own Cargo
# project and lock, outside the workspace) into target-bench/.
#
# Environment: AXP_BIN (the axp binary; default $CARGO_TARGET_DIR/release/axp or
# target/release/axp), BENCH_TARGET_DIR (default target-bench/), SOAK_OUT (where the CSV of
# samples, the JSON summary and the printed table go; default a new directory under /tmp),
# AUDIT_SYNC=each|interval (the gateway's `[audit] sync`; default: the gateway's default).
# Arguments go to the client: `--duration 60` for a short run, `--sessions`, `--jobs`, … (see
# `target-bench/release/soak-client --help`).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BENCHES=$(cd "$HERE/.." && pwd)
ROOT=$(cd "$BENCHES/.." && pwd)
AXP=${AXP_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/axp}
EVERYTHING=$ROOT/tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js

[ -x "$AXP" ] || { echo "no gateway binary at $AXP; hint: cargo build --release -p axp-gateway (or set AXP_BIN=...)" >&2; exit 1; }
[ -f "$EVERYTHING" ] || { echo "server-everything is not installed at $EVERYTHING; hint: scripts/install-test-deps.sh" >&2; exit 1; }
command -v node >/dev/null || { echo "node is not installed; hint: scripts/install-test-deps.sh" >&2; exit 1; }

BENCH_TARGET=${BENCH_TARGET_DIR:-$ROOT/target-bench}
CARGO_TARGET_DIR=$BENCH_TARGET cargo build --release -q --manifest-path "$HERE/client/Cargo.toml"
CLIENT=$BENCH_TARGET/release/soak-client

OUT=${SOAK_OUT:-${TMPDIR:-/tmp}/axp-soak-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"

. "$BENCHES/lib.sh"
bench_workdir axp-soak

descendants() { local p; for p in $(pgrep -P "$1" || true); do echo "$p"; descendants "$p"; done; }

# What was below the gateway at the end, checked again once the cleanup has run: nothing the
# soak started may outlive it.
LAST_TREE=
soak_cleanup() {
  local rc=$?
  [ -n "$GW_PID" ] && LAST_TREE="$LAST_TREE $(descendants "$GW_PID" | tr '\n' ' ')"
  [ -n "${WORK:-}" ] && [ -f "$WORK/axp.err" ] && cp "$WORK/axp.err" "$OUT/gateway.stderr" 2>/dev/null
  local work=${WORK:-}
  bench_cleanup
  sleep 0.5
  local left=
  for p in $GW_PID $LAST_TREE; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
  if [ -n "$work" ]; then left="$left $(pgrep -f -- "$work" | tr '\n' ' ')"; fi
  left=$(echo "$left" | xargs)
  if [ -n "$left" ]; then
    echo "LEFTOVER processes after the cleanup:" >&2
    ps -o pid,ppid,pgid,etime,args -p "$(echo "$left" | tr ' ' ',')" >&2 || true
    rc=1
  else
    echo "cleanup: no process of the soak is left (gateway, its $(echo "$LAST_TREE" | wc -w) descendants at the end, nothing naming the work dir)"
  fi
  exit "$rc"
}
trap soak_cleanup EXIT

cat >"$WORK/fleet.json" <<JSON
{"mcpServers": {"everything": {"command": "node", "args": ["$EVERYTHING"]}}}
JSON
: >"$WORK/axp.toml"
if [ -n "${AUDIT_SYNC:-}" ]; then printf '[audit]\nsync = "%s"\n' "$AUDIT_SYNC" >"$WORK/axp.toml"; fi

echo "machine: $(nproc) CPUs; load before:$(uptime | sed 's/.*load average//'); rustc processes running: $(pgrep -c -x rustc || true)"
start_gateway --config "$WORK/axp.toml" --mcp-config "$WORK/fleet.json"
for _ in $(seq 40); do grep -q 'runtime worker thread' "$WORK/axp.err" && break; sleep 0.05; done
echo "gateway: $AXP (pid $GW_PID, built $(date -u -r "$AXP" +%FT%TZ)) at $URL; $(sed -n 's/^axp: \([0-9]* runtime worker threads*\)$/\1/p' "$WORK/axp.err" | head -1); audit sync: ${AUDIT_SYNC:-default}"
echo "results: $OUT"

set +e
"$CLIENT" --url "$URL" --gateway-pid "$GW_PID" --csv "$OUT/samples.csv" --summary "$OUT/summary.json" "$@" | tee "$OUT/report.txt"
RC=${PIPESTATUS[0]}
set -e
LAST_TREE=$(descendants "$GW_PID" | tr '\n' ' ')
echo "load after:$(uptime | sed 's/.*load average//'); rustc processes running: $(pgrep -c -x rustc || true)"
exit "$RC"
