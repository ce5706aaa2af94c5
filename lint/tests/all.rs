//! The single integration-test binary of `axp-lint` (one binary keeps link time down): the
//! rule corpus, output snapshots, SARIF structure, configuration, drift, `--fix`, and the real
//! MCP servers.

#![allow(clippy::unwrap_used, reason = "tests fail loudly by design")]

mod suite;
