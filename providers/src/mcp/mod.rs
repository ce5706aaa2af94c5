//! The `mcp` provider: one upstream MCP server, reached over stdio (a child process built by the
//! gateway's [`Launcher`](crate::Launcher), so the sandbox wraps it), over Streamable HTTP, or over the legacy
//! 2024-11-05 "HTTP with SSE" transport ([`sse`]), through the `rmcp` client. It owns the connection's life: start, `tools/list` cache, `list_changed`, progress
//! routing, cancellation, per-call timeouts, crash detection and restart with backoff, split by
//! concern: `config.rs` (plain configuration), `session.rs` (one connection: handshake,
//! requests, its life), `routing.rs` (notifications: progress, logs, `list_changed`),
//! `child.rs` (the stdio child's watch), `oversize.rs` (noticing a stdio message too large to take), `supervisor.rs` (start, backoff, restart,
//! availability events), `provider.rs` (the [`Provider`](crate::Provider) impl), `errors.rs` (failures for
//! people) and [`sse`] (the legacy SSE transport).
//!
//! It must never fail hard: a server that cannot start or dies leaves the provider in place,
//! reporting [`ProviderError::Unavailable`](crate::ProviderError::Unavailable) with the reason, while a background task retries
//! with exponential backoff (capped by [`RestartPolicy::max_backoff`]). It never decides policy
//! and never spawns a process except through the launcher.
//!
//! Choices worth knowing:
//!
//! * **Tools while down.** [`Provider::tools`](crate::Provider::tools) returns the last list the server gave, also while
//!   it is down (the gateway shows them as unavailable and calls fail with `Unavailable`). Only
//!   when no list was ever obtained does it return `Unavailable`. [`McpProvider::status`] says
//!   which state the provider is in.
//! * **Events.** Up → down sends `Unavailable{reason}` (once, not for every failed retry); down
//!   → up sends `Available` then `ToolsChanged`. A `notifications/tools/list_changed` re-lists
//!   and sends `ToolsChanged` only when the list really differs.
//! * **Progress.** Every request carries a `progressToken` (rmcp sets one); progress for a call
//!   becomes `JobEventKind::Progress` in that call's sink. rmcp handles each notification in its
//!   own task, so their order is not guaranteed: a notification whose `progress` is not above
//!   the last one delivered is dropped, which keeps the job log monotonic as MCP requires.
//! * **Logging.** MCP `notifications/message` carries no request id, and over stdio nothing ties
//!   it to a call, so attributing it to one job could leak one session's data into another's
//!   log. Server logs therefore go to `tracing` (target `axp_providers::mcp::upstream`) and out
//!   as [`ProviderEvent::Log`](crate::ProviderEvent::Log) for the gateway to forward to the
//!   sessions that may see this server, never into a job.
//! * **Cancel and timeout** send `notifications/cancelled` for the request, then return
//!   `Cancelled` / `Timeout`. A call future dropped before its answer also sends it.
//! * **Crash or hang.** A stdio child is watched directly: when it exits, every call in flight
//!   fails at once with `Unavailable` (rmcp alone would only notice after its drain timeouts).
//!   Every session is also pinged ([`McpConfig::heartbeat`]); a failed or unanswered ping ends
//!   the session the same way. That is the only way to notice an HTTP server that died during a
//!   call: rmcp 3.11 keeps the request pending on a broken SSE response stream rather than
//!   failing it. A transport error seen by a call triggers an immediate ping.
//! * **Results** pass through as `CallToolResult` (`content`, `structuredContent`, `isError`).
//!   rmcp parses content blocks into its own types and re-serialises them, so a field rmcp
//!   does not model (e.g. a block's `_meta`) is lost. JSON-RPC errors become
//!   `ProviderError::Upstream` with code, message and data unchanged. A tool the server runs
//!   only as a task (2025-11-25 tasks) is called through one (`McpProvider::call_as_task`:
//!   `tools/call` with `task`, `tasks/get` polled into progress, `tasks/result`, `tasks/cancel`
//!   when the call is cancelled); a 2026 tasks-extension `CreateTaskResult` is refused with an
//!   upstream error (not supported yet).
//! * **Revisions.** A connection opens with the newest revision the server offers
//!   ([`Handshake::Newest`]: a 2026-07-28 `server/discover` probe, falling back to
//!   `initialize`), or the one the operator pinned. Over 2026-07-28 each call carries its
//!   client's declared capabilities (less what the operator forbids) and the last log level
//!   set, the heartbeat is a `server/discover` (there is no `ping`), and an `input_required`
//!   result is answered through the gateway's relay, each request attributed to exactly that
//!   call and named by the server's key, then the call is sent again with the answers and the
//!   server's `requestState` (at most 16 rounds); a prompt get's or resource read's round is
//!   passed through to a 2026-07-28 client as the server gave it.
//! * **Connections beside the provider's own** (`provider.rs`, `McpProvider::conn_for`;
//!   `supervisor.rs`, `Companions`). A server asks an `initialize` client in the middle of a
//!   call, and the request names no call. So a client of an `initialize` revision that can
//!   be asked things gets an `initialize` connection of its own session from an HTTP server
//!   (every request on it is that session's; at most 32 per server, closed when idle), and,
//!   when the provider's own connection speaks 2026-07-28 (which carries no such requests),
//!   one shared `initialize` connection to any other server. The shared one also takes
//!   `resources/subscribe` and `logging/setLevel`, which 2026-07-28 removed.
//! * **Legacy SSE transport** (the 2024-11-05 `GET /sse` + `POST /messages` pair): rmcp 3.11
//!   has no client for it, so [`sse`] provides one as an rmcp transport. Its GET stream ending
//!   is the session ending, watched like a stdio child's exit: calls in flight fail at once
//!   with `Unavailable` and the server is reconnected with backoff. The server's `endpoint`
//!   must be on the stream's origin, or the connection is refused.
//! * **Resources, prompts, completion and logging** pass through as raw JSON (rmcp's types
//!   re-serialised) by the [`Provider`](crate::Provider) methods. A server is asked only for
//!   what it declared in its `initialize` capabilities: one that declared no resources lists
//!   none (and a read names the resource unknown), never an upstream -32601.
//!   `resources/list_changed`, `prompts/list_changed`, `resources/updated` and
//!   `notifications/message` become [`ProviderEvent`](crate::ProviderEvent)s; logs also go to
//!   `tracing`.
//! * **Trace context.** A call whose `meta.trace` holds a W3C `traceparent` (and `tracestate`),
//!   as the gateway sets it, sends them in the `_meta` of each of its requests (SEP-414), and
//!   over Streamable HTTP also as headers (`traced_http.rs`).

mod child;
mod config;
mod errors;
mod oversize;
mod provider;
mod routing;
mod session;
pub mod sse;
mod supervisor;
mod traced_http;

pub use config::{ClientAsks, Handshake, McpConfig, McpStatus, McpTransport, RestartPolicy};
pub use provider::McpProvider;
