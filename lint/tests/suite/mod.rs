//! Test modules; `mcp` is the stdio MCP client fixture shared by the real-server tests.

mod config;
mod corpus;
mod corpus_eval;
mod drift;
mod fix;
pub(crate) mod mcp;
mod real_servers;
mod snapshots;
