#!/usr/bin/env bash
# The search evaluation: builds benches/search-eval (its own Cargo project, outside the
# workspace) in release mode and prints recall@1, recall@5 and MRR of the former BM25, BM25F,
# the embeddings and the hybrid, per split and kind, then the query latency at 1,000 and 10,000
# tools. Arguments go to the binary: --split tune|heldout|all, --misses, --no-timing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${BENCH_TARGET_DIR:-$here/../../target-bench}"
CARGO_TARGET_DIR="$target" cargo build --release --quiet --manifest-path "$here/Cargo.toml"
exec "$target/release/axp-search-eval" "$@" "$here"
