#!/usr/bin/env bash
# Spawn-to-exit of /bin/true: bare vs axp kernel-lsm vs `unshare -rmpfn --mount-proc` vs bwrap
# with an equivalent profile. All variants run interleaved in the same run; medians and ratios
# are printed. Usage: sandbox/bench.sh [ITERATIONS]   (needs: bubblewrap, python3, util-linux)
set -euo pipefail
N="${1:-300}"
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-sandbox}"
cargo build -q --release -p axp-sandbox --bin axp-sandbox-test
BIN="$CARGO_TARGET_DIR/release/axp-sandbox-test"
command -v bwrap >/dev/null || { echo "bench.sh: install bubblewrap (apt-get install bubblewrap)" >&2; exit 1; }
WS="$(mktemp -d /tmp/axp-bench-ws.XXXXXX)"
trap 'rm -rf "$WS"' EXIT
# The gateway spawns `axp __sandbox-exec` directly with the policy in the environment; measure
# exactly that (not the test binary's `run` wrapper, which would add one exec).
POLICY="$("$BIN" run --workspace "$WS" --print-policy -- /bin/true)"
"$BIN" check >/dev/null || { echo "bench.sh: kernel-lsm unavailable here" >&2; exit 1; }

python3 - "$N" "$BIN" "$POLICY" "$WS" <<'PY'
import os, statistics, sys, time
n, bin_, policy, ws = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
env_path = "PATH=/usr/local/bin:/usr/bin:/bin"
bwrap = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
         "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
         "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
         "--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache", "--ro-bind", "/etc/nsswitch.conf", "/etc/nsswitch.conf",
         "--ro-bind", "/etc/ssl", "/etc/ssl", "--ro-bind", "/etc/alternatives", "/etc/alternatives",
         "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", ws, ws, "--chdir", ws,
         "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--cap-drop", "ALL",
         "/bin/true"]
variants = {
    "bare": (["/bin/true"], [env_path]),
    "axp kernel-lsm": ([bin_, "__sandbox-exec", "--", "/bin/true"], ["AXP_SANDBOX_POLICY=" + policy]),
    "unshare -rmpfn": (["unshare", "-rmpfn", "--mount-proc", "/bin/true"], [env_path]),
    "bwrap": (bwrap, [env_path]),
}
def which(p):
    if "/" in p: return p
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        if os.access(os.path.join(d, p), os.X_OK): return os.path.join(d, p)
    raise SystemExit(f"{p} not found")
times = {k: [] for k in variants}
for _ in range(5):  # warm-up
    for k, (argv, env) in variants.items():
        pid = os.posix_spawn(which(argv[0]), argv, dict(e.split("=", 1) for e in env))
        _, st = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(st) != 0:
            raise SystemExit(f"{k} failed with status {st}")
for _ in range(n):
    for k, (argv, env) in variants.items():
        envd = dict(e.split("=", 1) for e in env)
        t = time.perf_counter_ns()
        pid = os.posix_spawn(which(argv[0]), argv, envd)
        os.waitpid(pid, 0)
        times[k].append(time.perf_counter_ns() - t)
med = {k: statistics.median(v) / 1e6 for k, v in times.items()}
print(f"spawn-to-exit of /bin/true, {n} interleaved runs each, median ms (p10-p90)")
for k, v in times.items():
    q = statistics.quantiles(v, n=10)
    print(f"  {k:<16} {med[k]:7.3f}   ({q[0]/1e6:.3f}-{q[-1]/1e6:.3f})   x{med[k]/med['bare']:6.1f} bare   x{med[k]/med['bwrap']:5.2f} bwrap")
PY
