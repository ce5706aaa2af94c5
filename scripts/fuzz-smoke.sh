#!/usr/bin/env bash
# The fuzzing smoke run CI does after the cargo tests: builds every cargo-fuzz target of fuzz/
# once, then runs each target that `cargo fuzz list` names (so targets added later are picked up
# with no change here) for a short bounded time from its committed seed corpus, and fails when
# any target crashes, times out or runs out of memory. New inputs go to a temporary directory,
# never into the committed corpus. The long runs are scripts/fuzz-long.sh; fuzz/README.md says
# how to reproduce a crash.
#
# AXP_FUZZ_SMOKE_SECONDS sets the time per target (default 20).
#
# Built without a sanitizer and with debug assertions: the code under test is safe Rust (the
# workspace denies `unsafe_code`), so AddressSanitizer would mostly instrument dependencies, for
# a slower build and fewer executions per second, while panics, overflow checks and the targets'
# own assertions are what find bugs here. 16 codegen units instead of cargo-fuzz's 1: the build
# is most of the smoke's time, and a little slower code costs nothing in 20 seconds of fuzzing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
# shellcheck source=../fuzz/toolchain.sh
. ./toolchain.sh
axp_fuzz_select_toolchain

seconds="${AXP_FUZZ_SMOKE_SECONDS:-20}"
flags=(--sanitizer none --debug-assertions --codegen-units 16)
start=$SECONDS

echo "fuzz smoke: building every target with $AXP_FUZZ_TOOLCHAIN"
nice cargo "+$AXP_FUZZ_TOOLCHAIN" fuzz build "${flags[@]}"
echo "fuzz smoke: built in $((SECONDS - start)) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
mapfile -t targets < <(cargo "+$AXP_FUZZ_TOOLCHAIN" fuzz list)
for t in "${targets[@]}"; do
  mkdir -p "$work/$t" corpus/"$t"
  extra=()
  if [ -f "dict/$t.dict" ]; then
    extra+=("-dict=dict/$t.dict")
  fi
  # The first corpus directory receives new inputs; the committed seeds are only read.
  if nice cargo "+$AXP_FUZZ_TOOLCHAIN" fuzz run "${flags[@]}" "$t" "$work/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${extra[@]}" \
    >"$work/$t.log" 2>&1; then
    done_line=$(grep -E '^Done [0-9]+ runs' "$work/$t.log" | tail -1)
    echo "fuzz smoke: $t ok (${done_line:-no summary line})"
  else
    echo "fuzz smoke: $t FAILED; the end of its log:" >&2
    tail -n 60 "$work/$t.log" >&2
    failed+=("$t")
  fi
done

echo "fuzz smoke: ${#targets[@]} targets in $((SECONDS - start)) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz smoke: crashed: ${failed[*]} (inputs under fuzz/artifacts/; fuzz/README.md says how to reproduce)" >&2
  exit 1
fi
