//! The one integration-test binary of `axp-store` (one binary per crate keeps link time down).
//! Every test works on a real state directory in a fresh temp dir; the crash test kills a real
//! child process with SIGKILL.

#![allow(clippy::unwrap_used, reason = "tests fail loudly by design")]

mod suite;
