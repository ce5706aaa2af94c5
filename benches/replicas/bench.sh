#!/usr/bin/env bash
# Replicas sharing one PostgreSQL store, through `axp serve` (see bench.py and
# benches/README.md, "replicas"): tool-call overhead with PostgreSQL against the embedded store,
# cross-replica attach latency, and jobs started per second with one and two replicas. Starts a
# private cluster with scripts/pg-cluster.sh (in its own directory) and stops it after.
#
#   benches/replicas/bench.sh                       # release binary in target/release
#   AXP=/path/to/axp benches/replicas/bench.sh --calls 1000 --clients 8
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
AXP=${AXP:-$ROOT/target/release/axp}
[ -x "$AXP" ] || { echo "no axp binary at $AXP (cargo build --release -p axp-gateway, or set AXP)" >&2; exit 1; }
EVERYTHING=$ROOT/tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js
[ -f "$EVERYTHING" ] || { echo "server-everything is not installed at $EVERYTHING; hint: scripts/install-test-deps.sh" >&2; exit 1; }
export AXP_PG_DIR=${AXP_PG_DIR:-/tmp/axp-pg-bench}
URL=$("$ROOT/scripts/pg-cluster.sh" start)
trap '"$ROOT/scripts/pg-cluster.sh" stop >/dev/null' EXIT
SCHEMA="bench_$(date +%s)_$$"
psql "$URL" -qAtc "CREATE SCHEMA $SCHEMA"
python3 "$HERE/bench.py" --axp "$AXP" --everything "$EVERYTHING" --pg "$URL?options=-c%20search_path%3D$SCHEMA" "$@"
