#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it: install the pinned test dependencies, build every
# target once, then run every test of every crate.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast -- --test-threads="${AXP_TEST_THREADS:-4}"
# Fuzzing smoke: every cargo-fuzz target in fuzz/ for a short bounded time from its seed corpus
# (scripts/fuzz-smoke.sh; about 20 s per target plus one build), failing on any crash.
scripts/fuzz-smoke.sh
