#!/usr/bin/env bash
# Egress proxy benchmark, all on loopback, all figures from the same run:
#   1. N (default 500) sequential 1 KiB GETs, each on a fresh connection: requests/s and p50
#      latency, direct vs through axp-egress-proxy vs through squid (Debian) with an equivalent
#      dstdomain allowlist; "added p50" = proxied p50 - direct p50.
#   2. A 100 MiB download: MB/s direct vs through axp-egress-proxy (and squid for reference).
# Both also run a fourth route, "floor": `bench_relay`, a bare copy relay on the same tokio
# runtime with no checks, no resolver, no audit and a fresh upstream connection per request
# (never a proxy to use; it shows what the extra hop alone costs on this machine). The origin
# (`bench_fixture`) keeps HTTP/1.1 connections alive as real origins do, so both proxies can
# keep theirs to it between requests (squid does by default, axp too); the clients and the
# floor ask for `Connection: close`. Routes are interleaved request by request (direct, axp, squid, floor,
# direct, …), each round starting one route later, so that other load on the machine falls on
# all of them alike and none always runs in the same place in the round.
# Both proxies resolve `bench.test` themselves (axp via its own resolver against the fixture's
# DNS server, squid via a hosts_file, since squid cannot use a DNS port other than 53); both
# write an access/audit log. PROXY_THREADS (default 1): the proxy's --threads. Requires: squid
# (apt-get install squid), python3.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
N=${N:-500}
command -v squid >/dev/null || { echo "squid is not installed: apt-get install squid" >&2; exit 1; }
(cd "$ROOT" && cargo build --release -q -p axp-egress-proxy --bins --examples)
BIN=$CARGO_TARGET_DIR/release
. "$(dirname "$0")/bench-lib.sh"
bench_workdir axp-bench
start_fixture "$BIN/examples"

"$BIN/axp-egress-proxy" --threads "${PROXY_THREADS:-1}" --listen 127.0.0.1:0 --allow bench.test --resolver "$DNS" \
  --dangerously-allow-private 127.0.0.0/8 --audit "$WORK/axp-audit.jsonl" >"$WORK/axp.out" 2>"$WORK/axp.err" & PIDS+=($!)
wait_line "$WORK/axp.out"
AXP=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["listening"][0])' "$WORK/axp.out")

start_squid "$PORT"
"$BIN/examples/bench_relay" "$ORIGIN" tokio >"$WORK/floor.out" & PIDS+=($!)
wait_line "$WORK/floor.out"
FLOOR=$(sed -n 's/relay=//p' "$WORK/floor.out")

run() { "$BIN/examples/bench_client" "bench.test:$PORT" "$ORIGIN" "$1" "$2" direct "$AXP" "$SQUID" "$FLOOR"; }
run /1k 50 >/dev/null   # warm-up (connections, resolver caches)
SMALL=$(run /1k "$N")
BIG=$(run /100m 8)
python3 - "$SMALL" "$BIG" <<'PY'
import json, sys
small = [json.loads(l) for l in sys.argv[1].splitlines()]
big = [json.loads(l) for l in sys.argv[2].splitlines()]
d, a, s, f = small
print(f"1 KiB GETs: {d['requests']} rounds of (direct, axp, squid, floor), each request on a fresh connection")
for name, r in (("direct", d), ("axp", a), ("squid", s), ("floor", f)):
    print(f"  {name:7} {r['req_per_s']:9.1f} req/s   p50 {r['p50_ms']:.3f} ms   p99 {r['p99_ms']:.3f} ms")
print(f"  added p50: axp {a['p50_ms'] - d['p50_ms']:.3f} ms, squid {s['p50_ms'] - d['p50_ms']:.3f} ms, floor {f['p50_ms'] - d['p50_ms']:.3f} ms")
print(f"  req/s: axp / squid {a['req_per_s'] / s['req_per_s']:.2f}x, axp / direct {a['req_per_s'] / d['req_per_s']:.2f}, axp / floor {a['req_per_s'] / f['req_per_s']:.2f}")
dd, da, ds, df = (r["mb_per_s"] for r in big)
print(f"100 MiB download: {big[0]['requests']} rounds, interleaved")
print(f"  direct {dd:8.1f} MB/s   axp {da:8.1f} MB/s   squid {ds:8.1f} MB/s   floor {df:8.1f} MB/s")
print(f"  throughput: axp / direct {da / dd:.2f}, squid / direct {ds / dd:.2f}, floor / direct {df / dd:.2f}")
PY
