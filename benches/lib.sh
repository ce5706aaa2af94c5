# Shared by the gateway bench scripts (sourced, not run): a throw-away work directory, `axp serve`
# started on a free loopback port in its own process group, and a cleanup that stops it (and
# whatever it started) and deletes the directory on any exit.
#
#   bench_workdir NAME          WORK=$(mktemp -d …/NAME.XXXXXX) with state/ and ws/, cleanup trap set
#   start_gateway ARGS…         "$AXP" serve --listen 127.0.0.1:0 --state-dir "$WORK/state"
#                               --workspace "$WORK/ws" ARGS…; sets GW_PID and URL (…/axp)
#
# Optional, for the cleanup: PERF_PID (a `perf` to stop first), KIDS (pids to kill as well).

GW_PID=
PERF_PID=
KIDS=

bench_cleanup() {
  set +e
  [ -n "$PERF_PID" ] && kill -INT "$PERF_PID" 2>/dev/null && wait "$PERF_PID" 2>/dev/null
  if [ -n "$GW_PID" ]; then
    # The gateway stops its MCP servers on SIGTERM; whatever is left after 5 s is killed, by
    # process group (it runs in its own) and by the pids we saw it start.
    kill -TERM "$GW_PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$GW_PID" 2>/dev/null
    for k in $KIDS; do kill -KILL "$k" 2>/dev/null; done
    wait "$GW_PID" 2>/dev/null
  fi
  [ -n "${WORK:-}" ] && rm -rf "$WORK"
}

bench_workdir() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  mkdir -p "$WORK/state" "$WORK/ws"
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM
}

start_gateway() {
  # setsid: the gateway leads its own process group, so the cleanup can reach all of it at once.
  setsid "$AXP" serve --listen 127.0.0.1:0 --state-dir "$WORK/state" --workspace "$WORK/ws" "$@" \
    </dev/null >"$WORK/axp.out" 2>"$WORK/axp.err" &
  GW_PID=$!
  URL=
  for _ in $(seq 600); do
    URL=$(sed -n 's|.* on \(http://127\.0\.0\.1:[0-9]*/axp\).*|\1|p' "$WORK/axp.err" | head -1)
    [ -n "$URL" ] && return 0
    kill -0 "$GW_PID" 2>/dev/null || { echo "the gateway exited:" >&2; cat "$WORK/axp.err" >&2; exit 1; }
    sleep 0.1
  done
  echo "the gateway did not start within 60 s:" >&2
  cat "$WORK/axp.err" >&2
  exit 1
}
