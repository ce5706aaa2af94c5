//! The transports: how bytes from a client become JSON-RPC messages for the router and back.
//! `http` serves `/axp` and `/mcp` (JSON or SSE answers, resumable streams, the legacy SSE
//! endpoint, `/healthz` and `/metrics`); `stdio` serves one client on the gateway's own stdin
//! and stdout. They frame and carry; every decision is the router's.

pub mod http;
pub mod stdio;
