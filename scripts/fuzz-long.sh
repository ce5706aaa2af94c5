#!/usr/bin/env bash
# Long fuzzing runs, by hand or on a spare machine: every cargo-fuzz target (or the ones named)
# for MINUTES each, one target after another, with AXP_FUZZ_WORKERS libFuzzer processes per
# target (default: the number of cores, at most 2). The corpus each target grows is kept in
# fuzz/corpus-work/TARGET/ (not committed; the committed seeds in fuzz/corpus/TARGET/ are only
# read), so a later run starts where this one stopped. Crashing inputs land in
# fuzz/artifacts/TARGET/. At the end it prints, per target, the executions, the CPU seconds
# spent (user + system of every fuzzing process) and whether it found a crash, and exits 1 if
# any target did.
#
# Usage: scripts/fuzz-long.sh [MINUTES] [TARGET...]     (MINUTES defaults to 10)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
# shellcheck source=../fuzz/toolchain.sh
. ./toolchain.sh
axp_fuzz_select_toolchain

minutes="${1:-10}"
shift || true
seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 }')
cores=$(nproc)
workers="${AXP_FUZZ_WORKERS:-$((cores < 2 ? cores : 2))}"
flags=(--sanitizer none --debug-assertions)

nice cargo "+$AXP_FUZZ_TOOLCHAIN" fuzz build "${flags[@]}" >&2
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo "+$AXP_FUZZ_TOOLCHAIN" fuzz list)
fi
target_dir=$(cargo "+$AXP_FUZZ_TOOLCHAIN" metadata --format-version 1 --no-deps |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
host=$(rustup run "$AXP_FUZZ_TOOLCHAIN" rustc -vV | sed -n 's/^host: //p')
bin_dir="$target_dir/$host/release"

# Seconds of CPU in bash's `times` format (`1m2.500s`).
to_seconds() { awk -v t="$1" 'BEGIN { split(t, a, "m"); sub("s", "", a[2]); printf "%.1f", a[1] * 60 + a[2] }'; }

fuzz_dir=$PWD
summary=()
crashed=0
for t in "${targets[@]}"; do
  logs="$fuzz_dir/corpus-work/logs/$t"
  mkdir -p "$fuzz_dir/corpus-work/$t" "$fuzz_dir/corpus/$t" "$fuzz_dir/artifacts/$t" "$logs"
  rm -f "$logs"/*.log
  before=$(find "$fuzz_dir/artifacts/$t" -type f | wc -l)
  args=(-max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1
    "-artifact_prefix=$fuzz_dir/artifacts/$t/")
  if [ -f "dict/$t.dict" ]; then
    args+=("-dict=$fuzz_dir/dict/$t.dict")
  fi
  if [ "$workers" -gt 1 ]; then
    # One job per worker, each for the whole time; libFuzzer writes each job's log (fuzz-N.log)
    # into the current directory, hence the `cd` below.
    args+=("-jobs=$workers" "-workers=$workers")
  fi
  # The first corpus directory receives new inputs; the committed seeds are only read.
  args+=("$fuzz_dir/corpus-work/$t" "$fuzz_dir/corpus/$t")
  echo "fuzz long: $t for $minutes min with $workers worker(s)" >&2
  # A fresh bash runs the fuzzer so that its `times` counts exactly the processes it waited
  # for, libFuzzer's workers included (a $(...) subshell of this script reports zero).
  cpu=$(cd "$logs" && bash -c '"$@" >main.log 2>&1; times' fuzz nice "$bin_dir/$t" "${args[@]}" | tail -1)
  user=$(to_seconds "${cpu%% *}")
  sys=$(to_seconds "${cpu##* }")
  runs=$(cat "$logs"/*.log | sed -n 's/^Done \([0-9]*\) runs in .*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
  found=$(($(find "$fuzz_dir/artifacts/$t" -type f | wc -l) - before))
  if [ "$found" -gt 0 ]; then
    crashed=1
    verdict="CRASH ($found new input(s) in fuzz/artifacts/$t/)"
  else
    verdict="no crash"
  fi
  summary+=("$(awk -v t="$t" -v r="$runs" -v u="$user" -v s="$sys" -v v="$verdict" \
    'BEGIN { printf "%-16s %12d runs %9.1f CPU s  %s", t, r, u + s, v }')")
done

echo
echo "fuzz long: $minutes min per target, $workers worker(s); logs in fuzz/corpus-work/logs/"
printf '%s\n' "${summary[@]}"
exit "$crashed"
