//! One connection to the server: the handshake over the configured transport (a stdio child
//! built by the launcher, Streamable HTTP, or legacy SSE), the first `tools/list`, the shared
//! handle calls use ([`Conn`]), and the loop that keeps the session until it dies (heartbeat,
//! re-listing on `list_changed`, pings when a call saw a transport error) and then closes it.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_protocol::ToolSpec;
use rmcp::model::{
    ClientConfig, ClientRequest, DiscoverRequest, DiscoverRequestParams, Implementation, PingRequest, ProtocolVersion,
};
use rmcp::service::{ClientLifecycleMode, Peer, RoleClient, ServiceError, serve_client_with_lifecycle_and_ct};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::sync::mpsc;

use super::child::ChildProc;
use super::config::ClientAsks;
use super::errors::{init_error_for_people, unreachable_because};
use super::oversize::{Counted, Oversize};
use super::routing::{Handler, InFlight, ProgressRouter, client_capabilities};
use super::supervisor::Inner;
use super::{Handshake, McpTransport, sse};
use crate::process::DEFAULT_PATH;
use crate::{CancellationToken, ProviderEvent};

/// A live connection, shared by the calls that use it.
pub(super) struct Conn {
    pub(super) peer: Peer<RoleClient>,
    pub(super) progress: Arc<ProgressRouter>,
    /// The calls in flight, for attributing the server's requests of the client.
    pub(super) inflight: Arc<InFlight>,
    /// Raised when a stdio server's message was too large and discarded.
    pub(super) oversize: Arc<Oversize>,
    /// Cancelled when the connection is gone; calls in flight fail at once.
    pub(super) dead: CancellationToken,
    pub(super) death: Mutex<Option<String>>,
    /// A call saw a transport error: the supervisor checks the server with a ping.
    pub(super) suspect: mpsc::UnboundedSender<()>,
    pub(super) pid: Option<u32>,
    /// The connection speaks 2026-07-28: every request carries its own envelope (so a call can
    /// name its client's capabilities), `ping` and `logging/setLevel` are gone, and the server
    /// asks the client for input in `input_required` results rather than requests.
    pub(super) stateless: bool,
}

impl Conn {
    pub(super) fn death_reason(&self) -> String {
        self.death
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "the connection to the server was lost".into())
    }

    pub(super) fn kill(&self, reason: &str) {
        let mut d = self.death.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if d.is_none() {
            *d = Some(reason.to_string());
        }
        drop(d);
        self.dead.cancel();
    }
}

/// A connected session: the rmcp service, the child (stdio), the channels the handler and the
/// calls use to reach the supervisor.
pub(super) struct Session {
    pub(super) conn: Arc<Conn>,
    pub(super) service_ct: CancellationToken,
    pub(super) waiting: std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>,
    pub(super) child: Option<ChildProc>,
    /// The GET stream of a legacy SSE session (its end is the session's end).
    pub(super) link: Option<sse::Link>,
    pub(super) relist: mpsc::UnboundedReceiver<()>,
    pub(super) suspect: mpsc::UnboundedReceiver<()>,
    pub(super) tools: Vec<ToolSpec>,
    /// A second connection beside the provider's own: its tool list is not the provider's.
    pub(super) companion: bool,
}

pub(super) fn tool_spec(tool: &rmcp::model::Tool) -> Result<ToolSpec, String> {
    serde_json::to_value(tool)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("tool `{}` cannot be read: {e}", tool.name))
}

pub(super) async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<ToolSpec>, String> {
    let tools = peer.list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))?;
    tools.iter().map(tool_spec).collect()
}

pub(super) fn client_info(asks: ClientAsks) -> ClientConfig {
    ClientConfig::new(client_capabilities(asks), Implementation::new("axp", env!("CARGO_PKG_VERSION")))
}

/// Why a connection could not be opened: before the MCP handshake (the process or the
/// connection), or in it.
pub(super) enum OpenError {
    Start(String),
    Handshake(String),
}

impl OpenError {
    pub(super) fn reason(self) -> String {
        match self {
            OpenError::Start(r) | OpenError::Handshake(r) => r,
        }
    }
}

/// rmcp's lifecycle for a handshake.
fn lifecycle(handshake: Handshake) -> ClientLifecycleMode {
    match handshake {
        Handshake::Newest => {
            ClientLifecycleMode::Auto { preferred_versions: vec![ProtocolVersion::V_2026_07_28], legacy_version: None }
        }
        Handshake::Initialize => ClientLifecycleMode::Initialize,
        Handshake::Discover => {
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] }
        }
    }
}

impl Session {
    /// Opens a connection with the configured handshake. With [`Handshake::Newest`], a probe
    /// that fails in a way rmcp's own fallback cannot recover from (a server that closes its
    /// stdio or answers the probe's POST with an HTTP error) is followed at once by a fresh
    /// connection with `initialize`; if that one works, the provider keeps using it. (An old
    /// server may also exit on a request before `initialize`: it is started again.)
    pub(super) async fn open(inner: &Inner) -> Result<Session, String> {
        let handshake = inner.handshake();
        match Self::open_with(inner, handshake).await {
            Ok(s) => Ok(s),
            Err(OpenError::Handshake(probe)) if handshake == Handshake::Newest => {
                tracing::debug!(provider = %inner.cfg.id, "the 2026-07-28 probe failed ({probe}); connecting with initialize");
                match Self::open_with(inner, Handshake::Initialize).await {
                    Ok(s) => {
                        inner.settle_on_initialize();
                        Ok(s)
                    }
                    // The `initialize` failure is the one a server of the earlier revisions
                    // explains; the probe's is in the debug log.
                    Err(e) => Err(e.reason()),
                }
            }
            Err(e) => Err(e.reason()),
        }
    }

    pub(super) async fn open_with(inner: &Inner, handshake: Handshake) -> Result<Session, OpenError> {
        let lifecycle = lifecycle(handshake);
        let progress = Arc::new(ProgressRouter::default());
        let (relist_tx, relist_rx) = mpsc::unbounded_channel();
        let (suspect_tx, suspect_rx) = mpsc::unbounded_channel();
        let inflight = Arc::new(InFlight::default());
        let handler = Handler {
            info: client_info(inner.cfg.client_asks),
            provider: inner.cfg.id.clone(),
            progress: progress.clone(),
            relist: relist_tx,
            events: inner.events.clone(),
            inflight: inflight.clone(),
            asks: inner.cfg.client_asks,
            relay: inner.cfg.relay.clone(),
        };
        let service_ct = CancellationToken::new();
        let oversize = Arc::new(Oversize::default());
        let mut link = None;
        let (running, child) = match &inner.cfg.transport {
            McpTransport::Stdio(spec) => {
                let mut spec = spec.clone();
                spec.env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
                let mut cmd = inner.launcher.command(&spec).map_err(|e| OpenError::Start(e.to_string()))?;
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0)
                    .kill_on_drop(true);
                let mut child = crate::spawn(cmd)
                    .await
                    .map_err(|e| OpenError::Start(format!("cannot start `{}`: {e}", spec.program)))?;
                let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                    return Err(OpenError::Start("the child's stdio pipes are missing".into()));
                };
                let stderr = child.stderr.take();
                let proc = ChildProc::watch(child, stderr, inner.cfg.id.to_string());
                let running = tokio::select! {
                    r = serve_client_with_lifecycle_and_ct(handler, (Counted::new(stdout, crate::MAX_MESSAGE_BYTES, oversize.clone()), stdin), lifecycle, service_ct.clone()) => r,
                    _ = proc.exited.cancelled() => {
                        return Err(OpenError::Handshake(format!("the server exited during the MCP handshake ({})", proc.describe())));
                    }
                };
                match running {
                    Ok(r) => (r, Some(proc)),
                    Err(e) => {
                        // The usual cause is the process dying: wait briefly for its status, and
                        // say it in the same words as when the exit is seen first.
                        let _ = tokio::time::timeout(Duration::from_millis(500), proc.exited.cancelled()).await;
                        if proc.exited.is_cancelled() {
                            return Err(OpenError::Handshake(format!(
                                "the server exited during the MCP handshake ({})",
                                proc.describe()
                            )));
                        }
                        return Err(OpenError::Handshake(format!("MCP handshake failed: {e} ({})", proc.describe())));
                    }
                }
            }
            McpTransport::Http { url, headers } => {
                let mut map = HashMap::new();
                for (k, v) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| OpenError::Start(format!("bad header name `{k}`: {e}")))?;
                    let value = reqwest::header::HeaderValue::from_str(v)
                        .map_err(|e| OpenError::Start(format!("bad value for header `{k}`: {e}")))?;
                    map.insert(name, value);
                }
                // Our limits, not the library's defaults: one SSE event and one JSON answer are
                // held whole while parsed, so a hostile server must not be able to grow them
                // (tested in gateway/tests/suite/hostile_upstream.rs).
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map);
                config.max_sse_event_size = sse::MAX_EVENT_BYTES;
                config.max_json_response_size = sse::MAX_EVENT_BYTES;
                let client = super::traced_http::TracedHttp::new().map_err(OpenError::Start)?;
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let running =
                    match serve_client_with_lifecycle_and_ct(handler, transport, lifecycle, service_ct.clone()).await {
                        Ok(r) => r,
                        Err(e) => {
                            return Err(match unreachable_because(url).await {
                                // Nothing answers there: no other handshake would do better.
                                Some(cause) => OpenError::Start(format!("cannot connect to {url}: {cause}")),
                                None => OpenError::Handshake(format!(
                                    "cannot connect to {url}: {}",
                                    init_error_for_people(&e)
                                )),
                            });
                        }
                    };
                (running, None)
            }
            McpTransport::LegacySse { url, headers } => {
                let transport = sse::LegacySseTransport::connect(url, headers)
                    .await
                    .map_err(|e| OpenError::Start(e.to_string()))?;
                link = Some(transport.link());
                // A legacy SSE server predates `server/discover`: it is never probed.
                let running = serve_client_with_lifecycle_and_ct(
                    handler,
                    transport,
                    ClientLifecycleMode::Initialize,
                    service_ct.clone(),
                )
                .await
                .map_err(|e| OpenError::Start(format!("MCP handshake with {url} (legacy SSE) failed: {e}")))?;
                (running, None)
            }
        };
        let peer = running.peer().clone();
        let waiting = Box::pin(async move {
            match running.waiting().await {
                Ok(reason) => format!("the connection to the server closed ({reason:?})"),
                Err(e) => format!("the MCP client task failed: {e}"),
            }
        });
        let pid = child.as_ref().and_then(|c| c.pid);
        let stateless = peer.peer_info().is_some_and(|i| i.protocol_version == ProtocolVersion::V_2026_07_28);
        let conn = Arc::new(Conn {
            peer,
            progress,
            inflight,
            oversize,
            dead: CancellationToken::new(),
            death: Mutex::new(None),
            suspect: suspect_tx,
            pid,
            stateless,
        });
        let mut session = Session {
            conn,
            service_ct,
            waiting,
            child,
            link,
            relist: relist_rx,
            suspect: suspect_rx,
            tools: Vec::new(),
            companion: false,
        };
        let peer = session.conn.peer.clone();
        session.tools = session.or_death(list_tools(&peer)).await.and_then(|r| r).map_err(OpenError::Start)?;
        Ok(session)
    }

    /// Runs `fut` unless the connection dies first (then `Err(reason)`).
    pub(super) async fn or_death<F: std::future::Future>(&mut self, fut: F) -> Result<F::Output, String> {
        let exited = self.gone();
        tokio::select! {
            out = fut => Ok(out),
            _ = exited.cancelled() => Err(self.exit_reason()),
            reason = &mut self.waiting => Err(Self::closed_reason(self.child.as_ref(), self.link.as_ref(), reason).await),
        }
    }

    /// The connection closed. For a child that is exiting, rmcp usually sees EOF on stdout a
    /// moment before the exit is reaped; wait for it briefly, since the exit status and stderr
    /// say far more than "closed".
    pub(super) async fn closed_reason(child: Option<&ChildProc>, link: Option<&sse::Link>, closed: String) -> String {
        if let Some(l) = link {
            // The reader ends the link before rmcp sees the inbox close.
            let _ = tokio::time::timeout(Duration::from_millis(200), l.ended().cancelled()).await;
            return if l.ended().is_cancelled() { l.reason() } else { closed };
        }
        match child {
            Some(c) => {
                let exited = tokio::time::timeout(Duration::from_secs(1), c.exited.cancelled()).await;
                if exited.is_ok() {
                    format!("the server process exited ({})", c.describe())
                } else {
                    format!("{closed}; the server process closed its stdout")
                }
            }
            None => closed,
        }
    }

    pub(super) fn exit_reason(&self) -> String {
        match (&self.child, &self.link) {
            (Some(c), _) => format!("the server process exited ({})", c.describe()),
            (None, Some(l)) => l.reason(),
            (None, None) => "the server went away".into(),
        }
    }

    /// Cancelled when the server is known to be gone: the stdio child exited, or the legacy
    /// SSE stream ended. (Never, for Streamable HTTP: the heartbeat finds that out.)
    pub(super) fn gone(&self) -> CancellationToken {
        match (&self.child, &self.link) {
            (Some(c), _) => c.exited.clone(),
            (None, Some(l)) => l.ended(),
            (None, None) => CancellationToken::new(),
        }
    }

    /// Serves until the connection dies or the provider shuts down; returns why.
    pub(super) async fn run(&mut self, inner: &Inner) -> String {
        let exited = self.gone();
        let mut heartbeat =
            tokio::time::interval_at(tokio::time::Instant::now() + inner.cfg.heartbeat, inner.cfg.heartbeat);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = inner.shutdown.cancelled() => return "the provider was shut down".into(),
                _ = exited.cancelled() => return self.exit_reason(),
                reason = &mut self.waiting => return Self::closed_reason(self.child.as_ref(), self.link.as_ref(), reason).await,
                Some(()) = self.relist.recv() => {
                    while self.relist.try_recv().is_ok() {}
                    if self.companion {
                        continue;
                    }
                    // Bounded like a ping: this loop is also what runs the heartbeat, so a
                    // server that stops answering here is a hung server.
                    let within = inner.cfg.heartbeat_timeout;
                    let peer = self.conn.peer.clone();
                    let listed = self
                        .or_death(tokio::time::timeout(within, list_tools(&peer)))
                        .await;
                    match listed {
                        Err(reason) => return reason,
                        Ok(Ok(Ok(tools))) => {
                            if inner.set_tools(tools) {
                                inner.send(ProviderEvent::ToolsChanged);
                            }
                        }
                        Ok(Ok(Err(e))) => tracing::warn!(provider = %inner.cfg.id, "re-listing tools after list_changed failed: {e}"),
                        Ok(Err(_)) => return format!(
                            "the server stopped answering (tools/list after list_changed took over {}s)",
                            within.as_secs_f64()
                        ),
                    }
                }
                Some(()) = self.suspect.recv() => {
                    while self.suspect.try_recv().is_ok() {}
                    if let Some(reason) = self.check(inner.cfg.heartbeat_timeout).await {
                        return reason;
                    }
                }
                _ = heartbeat.tick() => {
                    if let Some(reason) = self.check(inner.cfg.heartbeat_timeout).await {
                        return reason;
                    }
                }
            }
        }
    }

    /// Pings the server (2026-07-28 has no `ping`: there it is a `server/discover`, sent
    /// past rmcp's response cache); `Some(reason)` when it is gone or does not answer within
    /// `within`.
    pub(super) async fn check(&mut self, within: Duration) -> Option<String> {
        let peer = self.conn.peer.clone();
        let request = if self.conn.stateless {
            ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {}))
        } else {
            ClientRequest::PingRequest(PingRequest::default())
        };
        let ping = peer.send_request(request);
        match self.or_death(tokio::time::timeout(within, ping)).await {
            Err(reason) => Some(reason),
            Ok(Ok(Ok(_))) => None,
            Ok(Ok(Err(e))) => {
                let failed = format!("the server stopped answering (ping failed: {e})");
                // A ping fails at once on a closed connection, which for a dying child is usually
                // a moment before its exit is reaped: its exit status says more.
                if matches!(e, ServiceError::TransportClosed | ServiceError::TransportSend(_)) {
                    Some(Self::closed_reason(self.child.as_ref(), self.link.as_ref(), failed).await)
                } else {
                    Some(failed)
                }
            }
            Ok(Err(_)) => {
                Some(format!("the server stopped answering (no answer to ping within {}s)", within.as_secs_f64()))
            }
        }
    }

    /// Ends the session: fails calls in flight, stops the client, closes stdin and gives the
    /// child a moment to exit on its own before its process group is killed.
    pub(super) async fn close(self, reason: &str) {
        self.conn.kill(reason);
        self.service_ct.cancel();
        if let Some(child) = self.child {
            let _ = tokio::time::timeout(Duration::from_millis(500), child.exited.cancelled()).await;
            drop(child);
        }
    }
}
