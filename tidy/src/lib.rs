//! Tidy: the workspace's mechanical rules, checked by this crate's tests in the style of
//! rust-analyzer's `tidy`. The rules are the Architecture Invariants of `docs/ARCHITECTURE.md`
//! that a machine can check: every source file opens with a `//!` paragraph, `unsafe` appears
//! only in the crates the map names, every crate depends only on crates below it, the gateway's
//! top-level modules import one another without a circle, and no comment cites a tracker issue
//! instead of saying its reason. The library is empty; the checks are in `tests/tidy.rs`.
