#!/usr/bin/env bash
# A/B comparison of two builds of axp-egress-proxy in one run, for performance work: both
# proxies (and squid, when installed) run side by side and the bench client interleaves every
# route request by request (direct, A, B, squid, direct, …, each round starting one route
# later), so that other load on the machine falls on all of them alike and A vs B is never
# compared across runs.
#   bench-ab.sh DIR_A DIR_B
# where each DIR holds an `axp-egress-proxy` binary (copy one out of target/release before
# changing the code); the fixture and client come from DIR_A. N (default 500) small GETs,
# BIG (default 5) rounds of the 100 MiB download; PROXY_THREADS as in bench.sh; ENV_A / ENV_B:
# extra environment (VAR=value …) for proxy A / B.
set -euo pipefail
A=$(cd "$1" && pwd)
B=$(cd "$2" && pwd)
N=${N:-500}
BIG=${BIG:-5}
. "$(dirname "$0")/bench-lib.sh"
bench_workdir axp-bench-ab
start_fixture "$A"

start_axp() { # DIR NAME ENV
  env $3 "$1/axp-egress-proxy" --threads "${PROXY_THREADS:-1}" --listen 127.0.0.1:0 --allow bench.test --resolver "$DNS" \
    --dangerously-allow-private 127.0.0.0/8 --audit "$WORK/$2-audit.jsonl" >"$WORK/$2.out" 2>"$WORK/$2.err" & PIDS+=($!)
  wait_line "$WORK/$2.out"
}
addr() { python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["listening"][0])' "$WORK/$1.out"; }
# Not in a command substitution: a subshell's PIDS+= would be lost and the proxy left running.
start_axp "$A" a "${ENV_A:-}"
start_axp "$B" b "${ENV_B:-}"
PA=$(addr a)
PB=$(addr b)
ROUTES=(direct "$PA" "$PB")
NAMES=(direct A B)
if command -v squid >/dev/null; then
  start_squid "$PORT"
  ROUTES+=("$SQUID")
  NAMES+=(squid)
fi
run() { "$A/bench_client" "bench.test:$PORT" "$ORIGIN" "$1" "$2" "${ROUTES[@]:0:$3}"; }
run /1k 50 "${#ROUTES[@]}" >/dev/null
SMALL=$(run /1k "$N" "${#ROUTES[@]}")
LARGE=$(run /100m "$BIG" 3)
python3 - "$SMALL" "$LARGE" "${NAMES[*]}" <<'PY'
import json, sys
small = [json.loads(l) for l in sys.argv[1].splitlines()]
big = [json.loads(l) for l in sys.argv[2].splitlines()]
names = sys.argv[3].split()
d = small[0]
for n, r in zip(names, small):
    print(f"  {n:7} {r['req_per_s']:9.1f} req/s  p50 {r['p50_ms']:.3f} ms (+{r['p50_ms'] - d['p50_ms']:.3f})  p99 {r['p99_ms']:.3f} ms")
a, b = small[1], small[2]
line = f"  req/s B/A {b['req_per_s'] / a['req_per_s']:.3f}"
if len(small) > 3:
    s = small[3]
    line += f"   A/squid {a['req_per_s'] / s['req_per_s']:.2f}x   B/squid {b['req_per_s'] / s['req_per_s']:.2f}x"
print(line)
dd, da, db = (r["mb_per_s"] for r in big)
print(f"  100 MiB: direct {dd:.0f}  A {da:.0f}  B {db:.0f} MB/s   A/direct {da / dd:.2f}  B/direct {db / dd:.2f}  B/A {db / da:.3f}")
PY
