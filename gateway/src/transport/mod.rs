//! The transports: how bytes from a client become JSON-RPC messages for the router and back.
//! `http` serves `/axp` and `/mcp` (JSON or SSE answers, resumable streams, `/healthz` and
//! `/metrics`); `legacy_sse` serves MCP's 2024-11-05 HTTP+SSE transport (`GET /sse`, `POST
//! /messages`) for clients that speak nothing newer, one stream per session; `listen` serves a
//! stateless (2026-07-28) client's `subscriptions/listen` stream; `stdio` serves one
//! client on the gateway's own stdin and stdout; `ui` serves the web console's embedded files at
//! `/ui`. They frame and carry; every decision is the
//! router's.

pub mod http;
pub mod legacy_sse;
pub mod listen;
pub mod stdio;
pub mod ui;
