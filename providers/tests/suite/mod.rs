//! Integration tests of the providers, grouped by provider.

mod bridge;
mod cli;
mod mcp_http;
mod mcp_stdio;
mod mcp_time;
mod skill;
mod support;
