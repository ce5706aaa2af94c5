#!/usr/bin/env bash
# What running an owner's proxy as a child process costs against the former in-process instance
# (decision 0003), all on loopback, both measured in the same run by examples/child_bench.rs:
# start-up to a bound listener, N (default 500) sequential 1 KiB GETs on fresh UNIX-socket
# connections (interleaved request by request), and a 100 MiB download. The child is exactly
# what the gateway runs (`axp-egress-proxy __egress-proxy` = `axp __egress-proxy`), confined as
# there, with its attempts decoded from its stdout as the gateway does. Requires: python3.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
N=${N:-500}
(cd "$ROOT" && cargo build --release -q -p axp-egress-proxy --bins --examples)
BIN=$CARGO_TARGET_DIR/release
WORK=$(mktemp -d /tmp/axp-bench-child.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
"$BIN/examples/bench_fixture" >"$WORK/fixture.out" & PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/fixture.out" ] && break; sleep 0.1; done
DNS=$(sed -n 's/.*dns=\([^ ]*\).*/\1/p' "$WORK/fixture.out")
ORIGIN=$(sed -n 's/.*http=\([^ ]*\).*/\1/p' "$WORK/fixture.out")
OUT=$("$BIN/examples/child_bench" "$BIN/axp-egress-proxy" "$DNS" "$ORIGIN" "$N")
python3 - "$OUT" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
s, q, p, m, n = r["startup_ms"], r["req_per_s"], r["p50_ms"], r["mb_per_s"], r["records"]
print(f"start-up to a bound listener (median of 20): in-process {s['in_process']:.2f} ms, child {s['child']:.2f} ms")
print(f"1 KiB GETs on fresh connections, {r['requests']} each, interleaved:")
print(f"  in-process {q['in_process']:8.1f} req/s  p50 {p['in_process']:.3f} ms")
print(f"  child      {q['child']:8.1f} req/s  p50 {p['child']:.3f} ms")
print(f"  child / in-process req/s {q['child'] / q['in_process']:.2f}, added p50 {p['child'] - p['in_process']:+.3f} ms")
print(f"100 MiB download: in-process {m['in_process']:.1f} MB/s, child {m['child']:.1f} MB/s ({m['child'] / m['in_process']:.2f})")
print(f"attempt records relayed: in-process {n['in_process']}, child {n['child']}")
PY
