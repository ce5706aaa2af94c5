#!/usr/bin/env bash
# A job writing 1 GiB to stdout through `axp serve`, against the same producer piped into
# `cat > file` on the state dir's file system; the gateway's RSS while it runs; `job.attach`
# replay from seq 0 (see benches/README.md, "large-output"). The client is bench.py (standard
# library only); the gateway is started and stopped by benches/lib.sh.
#
#   benches/large-output/bench.sh                      # 1 GiB, producers `text` and `zeros`
#   SIZE=268435456 benches/large-output/bench.sh       # 256 MiB
#   AXP=/path/to/axp benches/large-output/bench.sh --producers text
#   PERF=1 benches/large-output/bench.sh --producers text   # also `perf record` the gateway
#                                                       # per phase (job, replay, SSE replay);
#                                                       # PERF_KEEP=DIR keeps the perf data
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
AXP=${AXP:-$ROOT/target/release/axp}
SIZE=${SIZE:-1073741824}
[ -x "$AXP" ] || { echo "no axp binary at $AXP (cargo build --release -p axp-gateway, or set AXP)" >&2; exit 1; }
# shellcheck source=../lib.sh
. "$ROOT/benches/lib.sh"
bench_workdir axp-large-output
start_gateway
echo "axp: $AXP ($(stat -c %y "$AXP" | cut -d. -f1)); gateway pid $GW_PID; $(nproc) CPUs"
PERF_ARGS=()
if [ "${PERF:-}" = 1 ]; then
  mkdir -p "$WORK/perf"
  PERF_ARGS=(--perf "$WORK/perf")
fi
python3 "$HERE/bench.py" --url "$URL" --gw-pid "$GW_PID" --work "$WORK" --size "$SIZE" "${PERF_ARGS[@]}" "$@"
if [ "${PERF:-}" = 1 ]; then
  for data in "$WORK"/perf/*.data; do
    phase=$(basename "$data" .data)
    echo; echo "perf, $phase: samples by process (the gateway is pid $GW_PID; the job's processes are inherited)"
    { perf report -i "$data" --sort pid --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -8; } || true
    echo "perf, $phase: the gateway's own hottest symbols (self time, all its threads)"
    { perf report -i "$data" --pid "$GW_PID" --no-children --sort dso,symbol --stdio 2>/dev/null \
      | grep -E '^ +[0-9]' | head -25; } || true
  done
  if [ -n "${PERF_KEEP:-}" ]; then mkdir -p "$PERF_KEEP" && cp "$WORK"/perf/*.data "$PERF_KEEP"/; fi
fi
