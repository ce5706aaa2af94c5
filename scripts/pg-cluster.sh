#!/usr/bin/env bash
# A private PostgreSQL cluster for the tests of the PostgreSQL store, run as an unprivileged
# user on a loopback port. Installs PostgreSQL from Debian's packages if it is missing.
#
#   scripts/pg-cluster.sh start   # idempotent; prints the URL when the cluster is up
#   scripts/pg-cluster.sh url     # prints postgres://axp:PASSWORD@127.0.0.1:PORT/axp
#   scripts/pg-cluster.sh ca      # prints the path of the CA certificate that signed the server's
#   scripts/pg-cluster.sh stop    # stops the cluster and removes its directory; idempotent
#   scripts/pg-cluster.sh halt    # stops the server and keeps the cluster (`start` resumes it)
#
# Typical use: export AXP_TEST_PG_URL="$(scripts/pg-cluster.sh start)"
#
# Settings (environment):
#   AXP_PG_DIR   where the cluster lives (default /tmp/axp-pg-cluster); owned by the OS user
#   AXP_PG_PORT  the TCP port on 127.0.0.1 (default: 54329 if free, else a free one)
#   AXP_PG_USER  the unprivileged OS user that runs the server (default axp-pg, created if absent)
#
# The server listens on 127.0.0.1 only; TCP logins need the password of the `axp` role
# (SCRAM), which is random per cluster and kept in $AXP_PG_DIR/password (0600). The Unix socket
# sits in a directory only the OS user can enter, with peer authentication. The server accepts
# TLS too (and plain TCP): its certificate, for 127.0.0.1 and localhost, is signed by a CA made
# for this cluster ($AXP_PG_DIR/tls/ca.pem), so the store's `sslmode=verify-full` is tested
# against a real handshake.
set -euo pipefail

DIR="${AXP_PG_DIR:-/tmp/axp-pg-cluster}"
OS_USER="${AXP_PG_USER:-axp-pg}"
ROLE=axp
DB=axp
WAIT_S=30

die() { echo "pg-cluster: $*" >&2; exit 1; }

as_user() { runuser -u "$OS_USER" -- "$@"; }

# The newest installed server's bin directory (Debian keeps them in /usr/lib/postgresql/N/bin).
find_bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && echo "$d"; done \
    | sort -t/ -k5,5n | tail -n1
}

install_postgres() {
  command -v apt-get >/dev/null || die "PostgreSQL is not installed and apt-get is not available; install the postgresql server package"
  echo "pg-cluster: installing PostgreSQL from Debian's packages" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1; then
    apt-get update -qq >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null \
      || die "apt-get install postgresql failed"
  fi
}

ensure_user() {
  if ! id -u "$OS_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$OS_USER" \
      || die "cannot create the OS user $OS_USER"
  fi
  [ "$(id -u "$OS_USER")" != 0 ] || die "AXP_PG_USER must not be root"
}

port_free() { # port_free PORT: nothing listens on 127.0.0.1:PORT
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_port() {
  if [ -n "${AXP_PG_PORT:-}" ]; then
    port_free "$AXP_PG_PORT" || die "port $AXP_PG_PORT on 127.0.0.1 is in use (AXP_PG_PORT)"
    echo "$AXP_PG_PORT"; return
  fi
  local p
  for p in 54329 $(shuf -i 40000-60000 -n 50); do
    if port_free "$p"; then echo "$p"; return; fi
  done
  die "no free port found on 127.0.0.1"
}

running() { [ -n "${BIN:-}" ] && [ -f "$DIR/data/PG_VERSION" ] && as_user "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; }

url() {
  [ -f "$DIR/port" ] && [ -f "$DIR/password" ] || die "no cluster in $DIR; run scripts/pg-cluster.sh start"
  echo "postgres://$ROLE:$(cat "$DIR/password")@127.0.0.1:$(cat "$DIR/port")/$DB"
}

psql_admin() { # runs SQL as the cluster's superuser over the private socket
  as_user "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR/sock" -p "$(cat "$DIR/port")" -d postgres "$@"
}

# A CA of this cluster's own and a server certificate it signs, for 127.0.0.1 and localhost.
make_tls() {
  command -v openssl >/dev/null || die "openssl is needed to make the cluster's TLS certificate (Debian: apt-get install openssl)"
  local t="$DIR/tls"
  install -d -m 0700 -o "$OS_USER" "$t"
  {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
      -subj "/CN=axp test cluster CA" -keyout "$t/ca.key" -out "$t/ca.pem"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/CN=localhost" -keyout "$t/server.key" -out "$t/server.csr"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >"$t/server.ext"
    openssl x509 -req -in "$t/server.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial -days 30 \
      -extfile "$t/server.ext" -out "$t/server.pem"
  } >"$DIR/tls.log" 2>&1 || die "making the TLS certificate failed; see $DIR/tls.log"
  rm -f "$t/ca.key" "$t/server.csr" "$t/server.ext"
  chown "$OS_USER" "$t"/*
  chmod 0600 "$t/server.key"
  chmod 0644 "$t/ca.pem" "$t/server.pem"
}

start() {
  BIN=$(find_bindir)
  if [ -z "$BIN" ]; then
    install_postgres
    BIN=$(find_bindir)
    [ -n "$BIN" ] || die "PostgreSQL was installed but no initdb was found under /usr/lib/postgresql"
  fi
  ensure_user
  if [ ! -f "$DIR/data/PG_VERSION" ]; then
    # A half-made directory (an interrupted start) is started over.
    rm -rf "$DIR"
    install -d -m 0700 -o "$OS_USER" "$DIR" "$DIR/sock"
    pick_port > "$DIR/port"
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$DIR/password"
    chmod 0600 "$DIR/password" "$DIR/port"
    chown "$OS_USER" "$DIR/port" "$DIR/password"
    as_user "$BIN/initdb" -D "$DIR/data" -U "$OS_USER" --auth-local=peer --auth-host=scram-sha-256 \
      -E UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 \
      || die "initdb failed; see $DIR/initdb.log"
    make_tls
    cat >>"$DIR/data/postgresql.conf" <<EOF

# scripts/pg-cluster.sh
listen_addresses = '127.0.0.1'
port = $(cat "$DIR/port")
unix_socket_directories = '$DIR/sock'
max_connections = 200
shared_buffers = 64MB
password_encryption = 'scram-sha-256'
ssl = on
ssl_cert_file = '$DIR/tls/server.pem'
ssl_key_file = '$DIR/tls/server.key'
EOF
  fi
  if ! running; then
    port_free "$(cat "$DIR/port")" || die "port $(cat "$DIR/port") on 127.0.0.1 is taken by something else; run scripts/pg-cluster.sh stop, then start"
    as_user "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t "$WAIT_S" start >/dev/null \
      || die "the server did not start within ${WAIT_S}s; see $DIR/server.log"
  fi
  # The role and database, created once; the password is (re)set every start so the file and
  # the role agree.
  local pw; pw=$(cat "$DIR/password")
  psql_admin <<EOF
SELECT format('CREATE ROLE %I LOGIN', '$ROLE') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$ROLE')\gexec
ALTER ROLE $ROLE PASSWORD '$pw';
SELECT format('CREATE DATABASE %I OWNER %I', '$DB', '$ROLE') WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$DB')\gexec
EOF
  url
}

stop() {
  BIN=$(find_bindir)
  if running; then
    as_user "$BIN/pg_ctl" -D "$DIR/data" -m fast -w -t "$WAIT_S" stop >/dev/null \
      || die "the server did not stop within ${WAIT_S}s; see $DIR/server.log"
  fi
  # Only ever remove a directory this script made.
  if [ -d "$DIR" ]; then
    [ -f "$DIR/port" ] || [ -f "$DIR/data/PG_VERSION" ] || [ -z "$(ls -A "$DIR")" ] \
      || die "$DIR does not look like a cluster made by this script; not removing it"
    rm -rf "$DIR"
  fi
}

halt() {
  BIN=$(find_bindir)
  if running; then
    as_user "$BIN/pg_ctl" -D "$DIR/data" -m fast -w -t "$WAIT_S" stop >/dev/null \
      || die "the server did not stop within ${WAIT_S}s; see $DIR/server.log"
  fi
}

# runuser, useradd and the cluster's files (0700, owned by $OS_USER) need root.
[ "$(id -u)" = 0 ] || die "run this as root: it runs the server as the unprivileged user $OS_USER"

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  halt) halt ;;
  url) BIN=$(find_bindir); running || die "the cluster in $DIR is not running; run scripts/pg-cluster.sh start"; url ;;
  ca) [ -f "$DIR/tls/ca.pem" ] || die "no cluster CA in $DIR/tls; run scripts/pg-cluster.sh stop, then start"; echo "$DIR/tls/ca.pem" ;;
  *) echo "usage: $0 start|stop|halt|url|ca" >&2; exit 2 ;;
esac
