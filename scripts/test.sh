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
cargo test --workspace --no-fail-fast -- --test-threads="${AXP_TEST_THREADS:-4}"
# The official MCP conformance suite through `axp serve`, with the fixture server direct as the
# control in the same run; fails on any scenario the control passes and axp fails unless
# conformance/expected-failures.txt lists it with its reason.
conformance/run.sh
# Fuzzing smoke: every cargo-fuzz target in fuzz/ for a short bounded time from its seed corpus
# (scripts/fuzz-smoke.sh; about 20 s per target plus one build), failing on any crash.
scripts/fuzz-smoke.sh
