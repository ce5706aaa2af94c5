//! End-to-end tests of the real `axp` binary against real MCP servers (server-everything from
//! npm, mcp-server-time and mcp-server-everything-wrong from PyPI), a real kernel sandbox and a
//! real state directory. One test binary (modules under `suite/`) keeps link time down.

#![allow(clippy::unwrap_used, clippy::zombie_processes, unreachable_pub, dead_code)]

mod suite;
