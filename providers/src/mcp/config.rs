//! What configures one MCP provider: how its server is reached ([`McpTransport`]), its
//! restart backoff ([`RestartPolicy`]), its deadlines and heartbeat ([`McpConfig`]), and the
//! state it reports ([`McpStatus`]). Plain data, no connection.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{ProcessSpec, ProviderId, RelayLink};

/// How the server is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout. Its stderr is
    /// logged (and its last lines quoted when it dies). `PATH` defaults to the usual system
    /// directories when the spec's environment has none.
    Stdio(ProcessSpec),
    /// A Streamable HTTP endpoint, with extra headers on every request (e.g. `Authorization`).
    /// `Accept`, `Mcp-Session-Id` and `Last-Event-Id` are managed by the client and refused.
    Http { url: String, headers: BTreeMap<String, String> },
    /// A legacy (2024-11-05) "HTTP with SSE" server: `url` is the SSE stream (`GET`), whose
    /// `endpoint` event names where messages are POSTed (same origin only). `headers` go on
    /// both; `Accept` and `Content-Type` are set by the client.
    LegacySse { url: String, headers: BTreeMap<String, String> },
}

/// Restart backoff: the n-th consecutive failure waits `initial_backoff * 2^n`, at most
/// `max_backoff`. A connection that stayed up at least `max_backoff` resets the count.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self { initial_backoff: Duration::from_millis(250), max_backoff: Duration::from_secs(30) }
    }
}

impl RestartPolicy {
    /// The wait before the next attempt after `failures` consecutive failures.
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.min(16));
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// One MCP server's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct McpConfig {
    pub id: ProviderId,
    pub transport: McpTransport,
    /// Deadline of one `tools/call`; when it passes the request is cancelled upstream and the
    /// call fails with `Timeout`.
    pub timeout: Duration,
    /// Deadline for starting: spawn or connect, MCP handshake and the first `tools/list`.
    pub connect_timeout: Duration,
    /// How often a connected server is pinged. A failed ping, or none answered within
    /// `heartbeat_timeout`, counts as a crash: calls in flight fail with `Unavailable` and the
    /// server is restarted. This is what notices a hung server, and an HTTP server that went
    /// away (rmcp keeps waiting on a broken response stream instead of failing the request).
    pub heartbeat: Duration,
    pub heartbeat_timeout: Duration,
    pub restart: RestartPolicy,
    /// Which requests of the client the server may make. Only these are declared in the
    /// handshake (so a server hides the tools that need the others), and only these are relayed.
    pub client_asks: ClientAsks,
    /// Where those requests go (the gateway, which finds the client whose call caused them).
    pub relay: RelayLink,
    /// Which protocol revision to open the connection with.
    pub handshake: Handshake,
}

/// How the connection to the server is opened, and so which MCP revision it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handshake {
    /// The newest revision the server offers: probe with 2026-07-28's `server/discover`, and
    /// fall back to the `initialize` handshake (2025-11-25 and earlier) when the server answers
    /// the probe with an error or not at all. A server that fails the probe in a way the
    /// fallback cannot recover from (it closed the connection, or the HTTP exchange failed) is
    /// connected again at once with `initialize`, and keeps that handshake until the provider
    /// is rebuilt.
    #[default]
    Newest,
    /// Only the `initialize` handshake (2025-11-25 and earlier).
    Initialize,
    /// Only `server/discover` (2026-07-28); a server that does not speak it fails to connect.
    Discover,
}

/// The client capabilities AXP declares to a server on the client's behalf, each relayed to
/// the client whose call caused the request. An operator turns sampling or elicitation off
/// per server in the fleet config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAsks {
    pub sampling: bool,
    pub elicitation: bool,
    pub roots: bool,
}

impl Default for ClientAsks {
    fn default() -> Self {
        Self { sampling: true, elicitation: true, roots: true }
    }
}

/// The client capability a server's request of the client needs (`None`: not such a request).
pub(super) fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

impl ClientAsks {
    /// Whether the operator lets the server make this request of the client.
    pub fn allows(&self, method: &str) -> bool {
        match capability_of(method) {
            Some("sampling") => self.sampling,
            Some("elicitation") => self.elicitation,
            Some("roots") => self.roots,
            _ => false,
        }
    }

    /// The part of a client's declared capabilities the server may use: only the kinds of
    /// request the operator allows, each as the client declared it.
    pub fn filter(&self, declared: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        let allowed = [("sampling", self.sampling), ("elicitation", self.elicitation), ("roots", self.roots)];
        allowed
            .into_iter()
            .filter(|(_, on)| *on)
            .filter_map(|(k, _)| declared.get(k).map(|v| (k.to_string(), v.clone())))
            .collect()
    }
}

impl McpConfig {
    /// A configuration with the defaults: 60 s per call, 30 s to connect, a ping every 5 s
    /// (10 s to answer), default backoff.
    pub fn new(id: ProviderId, transport: McpTransport) -> Self {
        Self {
            id,
            transport,
            timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(30),
            heartbeat: Duration::from_secs(5),
            heartbeat_timeout: Duration::from_secs(10),
            restart: RestartPolicy::default(),
            client_asks: ClientAsks::default(),
            relay: RelayLink::default(),
            handshake: Handshake::default(),
        }
    }
}

/// Whether the server is serving right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpStatus {
    Available,
    /// Not connected (starting, failed to start, crashed, restarting); why.
    Unavailable {
        reason: String,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let p = RestartPolicy { initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(1) };
        assert_eq!(p.delay(0), Duration::from_millis(100));
        assert_eq!(p.delay(1), Duration::from_millis(200));
        assert_eq!(p.delay(3), Duration::from_millis(800));
        assert_eq!(p.delay(4), Duration::from_secs(1));
        assert_eq!(p.delay(u32::MAX), Duration::from_secs(1));
    }
}
