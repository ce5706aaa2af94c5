# Shared by egress-proxy/bench.sh and bench-ab.sh (sourced, not run): small waits, a free port,
# and squid started with the dstdomain allowlist the benchmark compares against.
#
#   bench_workdir NAME    WORK=$(mktemp -d /tmp/NAME.XXXXXX), PIDS=(), and a cleanup on exit that
#                         kills every pid in PIDS and deletes WORK
#   start_fixture DIR     DIR/bench_fixture (DNS server + origin); sets DNS, ORIGIN and PORT
#   wait_line FILE        wait (10 s at most) until FILE is not empty
#   free_port             print a free loopback TCP port
#   start_squid PORT      squid on a free port allowing bench.test:PORT (resolved to 127.0.0.2
#                         through a hosts_file, as squid cannot use a DNS port other than 53);
#                         needs WORK and PIDS; sets SQUID=127.0.0.1:SQPORT

bench_cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }

bench_workdir() {
  WORK=$(mktemp -d "/tmp/$1.XXXXXX")
  chmod 777 "$WORK"
  PIDS=()
  trap bench_cleanup EXIT
}

start_fixture() {
  "$1/bench_fixture" >"$WORK/fixture.out" & PIDS+=($!)
  wait_line "$WORK/fixture.out"
  DNS=$(sed -n 's/.*dns=\([^ ]*\).*/\1/p' "$WORK/fixture.out")
  ORIGIN=$(sed -n 's/.*http=\([^ ]*\).*/\1/p' "$WORK/fixture.out")
  PORT=${ORIGIN##*:}
}

wait_line() { for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "timeout waiting for $1" >&2; exit 1; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

start_squid() {
  local sqport
  sqport=$(free_port)
  echo "127.0.0.2 bench.test" >"$WORK/hosts"
  cat >"$WORK/squid.conf" <<CONF
http_port 127.0.0.1:$sqport
acl allowed dstdomain bench.test
acl Safe_ports port $1
http_access deny !Safe_ports
http_access allow allowed
http_access deny all
hosts_file $WORK/hosts
cache deny all
access_log stdio:$WORK/squid-access.log
cache_log $WORK/squid-cache.log
pid_filename $WORK/squid.pid
coredump_dir $WORK
cache_effective_user proxy
shutdown_lifetime 0 seconds
CONF
  squid -N -f "$WORK/squid.conf" & PIDS+=($!)
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$sqport) 2>/dev/null && break; sleep 0.1; done
  SQUID=127.0.0.1:$sqport
}
