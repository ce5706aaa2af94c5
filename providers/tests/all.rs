//! The providers crate's one integration-test binary (one binary keeps link time down on a
//! 2-core machine); the tests live in `suite/`. They run real MCP servers, real commands and a
//! real bridge script through `DirectLauncher`, never mocks.

// Tests state their expectations with unwrap/expect.
#![allow(clippy::unwrap_used)]

mod suite;
