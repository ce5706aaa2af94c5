#!/usr/bin/env bash
# Code-mode vs. tool calls from the agent: N calls to server-everything's `echo` made (a) by one
# code-mode job (Python and JavaScript) through its SDK socket, and (b) as N separate `tools/call`
# requests from an external client over one keep-alive HTTP connection — same gateway, same run,
# rounds alternating. Prints the wall time of each and the bytes an agent's context would carry:
# for (b) every request and response body (each call is a tool-use turn of the model); for (a) the
# `job.start` request plus what the agent reads back (the program's stdout, and separately the
# whole `job.attach` transcript including the N `tool_call` events).
#
# Needs: scripts/install-test-deps.sh (server-everything), python3, node, and a gateway build.
# Environment: AXP (default $CARGO_TARGET_DIR/release/axp, else .../debug/axp), CALLS (100),
# ROUNDS (3).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
TD=${CARGO_TARGET_DIR:-$ROOT/target}
AXP=${AXP:-}
if [ -z "$AXP" ]; then
  if [ -x "$TD/release/axp" ]; then AXP=$TD/release/axp; else AXP=$TD/debug/axp; fi
fi
EVERYTHING=$ROOT/tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js
[ -x "$AXP" ] || { echo "no gateway binary at $AXP; hint: cargo build --release -p axp-gateway (or set AXP=...)" >&2; exit 1; }
[ -f "$EVERYTHING" ] || { echo "server-everything is not installed at $EVERYTHING; hint: scripts/install-test-deps.sh" >&2; exit 1; }

. "$HERE/lib.sh"
bench_workdir axp-codemode-bench
cat >"$WORK/fleet.json" <<JSON
{"mcpServers": {"everything": {"command": "node", "args": ["$EVERYTHING"]}}}
JSON
start_gateway --mcp-config "$WORK/fleet.json"
echo "gateway: $AXP at $URL; $(nproc) CPUs; load before:$(uptime | sed 's/.*load average//')"
python3 "$HERE/codemode-bench.py" "$URL" "${CALLS:-100}" "${ROUNDS:-3}"
echo "load after:$(uptime | sed 's/.*load average//')"
