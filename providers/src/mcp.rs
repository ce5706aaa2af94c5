//! The `mcp` provider: one upstream MCP server, reached over stdio (a child process built by the
//! gateway's [`Launcher`], so the sandbox wraps it), over Streamable HTTP, or over the legacy
//! 2024-11-05 "HTTP with SSE" transport ([`sse`]), through the `rmcp` client. It owns the connection's life: start, `tools/list` cache, `list_changed`, progress
//! routing, cancellation, per-call timeouts, crash detection and restart with backoff.
//!
//! It must never fail hard: a server that cannot start or dies leaves the provider in place,
//! reporting [`ProviderError::Unavailable`] with the reason, while a background task retries
//! with exponential backoff (capped by [`RestartPolicy::max_backoff`]). It never decides policy
//! and never spawns a process except through the launcher.
//!
//! Choices worth knowing:
//!
//! * **Tools while down.** [`Provider::tools`] returns the last list the server gave, also while
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
//!   log. Server logs therefore go to `tracing` (target `axp_providers::mcp::upstream`), never
//!   into a job.
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
//!   `ProviderError::Upstream` with code, message and data unchanged. A server that answers
//!   with an MRTR `input_required` or a task is refused with an upstream error (not supported
//!   yet).
//! * **Legacy SSE transport** (the 2024-11-05 `GET /sse` + `POST /messages` pair): rmcp 3.11
//!   has no client for it, so [`sse`] provides one as an rmcp transport. Its GET stream ending
//!   is the session ending, watched like a stdio child's exit: calls in flight fail at once
//!   with `Unavailable` and the server is reconnected with backoff. The server's `endpoint`
//!   must be on the stream's origin, or the connection is refused.
//! * Resources and prompts are passed through as raw JSON by inherent methods
//!   ([`McpProvider::list_resources`], [`McpProvider::read_resource`],
//!   [`McpProvider::list_resource_templates`], [`McpProvider::list_prompts`],
//!   [`McpProvider::get_prompt`]); the `Provider` trait has no place for them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axp_protocol::methods::JobEventKind;
use axp_protocol::{RpcError, ToolCall, ToolOutput, ToolSpec};
use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientCapabilities, ClientConfig,
    ClientRequest, GetPromptRequestParams, Implementation, PingRequest, ProgressNotificationParam, ProgressToken,
    ReadResourceRequestParams, RequestId, ServerResult,
};
// MCP logging is deprecated by SEP-2577 (protocol 2026-07-28), but the servers people run today
// (2025-06-18 and 2025-11-25) still send it, so it is handled.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RoleClient, ServiceError, serve_client_with_ct};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::sync::{broadcast, mpsc, oneshot};

pub mod sse;

use crate::process::{DEFAULT_PATH, describe_status, kill_group};
use crate::{CancellationToken, JobSink, Launcher, ProcessSpec, Provider, ProviderError, ProviderEvent, ProviderId};

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

/// Where progress notifications go: the sink of the call that owns the token.
#[derive(Default)]
struct ProgressRouter {
    state: Mutex<RouterState>,
}

#[derive(Default)]
struct RouterState {
    routes: HashMap<ProgressToken, Route>,
    /// Notifications that arrived before their call registered (the request is queued before
    /// the handle is returned, so a fast server can win that race). Bounded.
    orphans: VecDeque<ProgressNotificationParam>,
}

struct Route {
    sink: JobSink,
    last: Option<f64>,
}

const MAX_ORPHANS: usize = 64;

impl Route {
    fn deliver(&mut self, p: ProgressNotificationParam) {
        if self.last.is_some_and(|last| p.progress <= last) {
            return;
        }
        self.last = Some(p.progress);
        self.sink.emit(JobEventKind::Progress { progress: p.progress, total: p.total, message: p.message });
    }
}

impl ProgressRouter {
    fn lock(&self) -> std::sync::MutexGuard<'_, RouterState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn register(self: &Arc<Self>, token: ProgressToken, sink: JobSink) -> RouteGuard {
        let mut st = self.lock();
        let mut route = Route { sink, last: None };
        let (mine, others): (Vec<_>, Vec<_>) =
            std::mem::take(&mut st.orphans).into_iter().partition(|p| p.progress_token == token);
        st.orphans = others.into();
        let mut mine = mine;
        mine.sort_by(|a, b| a.progress.total_cmp(&b.progress));
        for p in mine {
            route.deliver(p);
        }
        st.routes.insert(token.clone(), route);
        RouteGuard { router: self.clone(), token }
    }

    fn dispatch(&self, p: ProgressNotificationParam) {
        let mut st = self.lock();
        if let Some(route) = st.routes.get_mut(&p.progress_token) {
            route.deliver(p);
        } else {
            if st.orphans.len() >= MAX_ORPHANS {
                st.orphans.pop_front();
            }
            st.orphans.push_back(p);
        }
    }
}

/// Unregisters a call's progress route when the call ends (however it ends).
struct RouteGuard {
    router: Arc<ProgressRouter>,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.router.lock().routes.remove(&self.token);
    }
}

/// Sends `notifications/cancelled` if a call's future is dropped before its answer.
struct AbandonGuard {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl AbandonGuard {
    fn disarm(&mut self) -> Option<RequestId> {
        self.id.take()
    }
}

impl Drop for AbandonGuard {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let peer = self.peer.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    send_cancelled(&peer, id, "the caller abandoned the request").await;
                });
            }
        }
    }
}

async fn send_cancelled(peer: &Peer<RoleClient>, id: RequestId, reason: &str) {
    let params = CancelledNotificationParam::new(Some(id), Some(reason.to_string()));
    // Bounded: a wedged transport must not hold up the caller's error.
    let _ = tokio::time::timeout(Duration::from_secs(2), peer.notify_cancelled(params)).await;
}

/// The rmcp client handler: routes notifications; answers nothing itself (no sampling, roots or
/// elicitation capability is declared, so servers do not ask).
struct Handler {
    info: ClientConfig,
    provider: String,
    progress: Arc<ProgressRouter>,
    relist: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Handler {
    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.dispatch(params);
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let provider = &self.provider;
        let logger = params.logger.as_deref().unwrap_or("");
        let data = &params.data;
        match params.level {
            LoggingLevel::Debug => {
                tracing::debug!(target: "axp_providers::mcp::upstream", %provider, logger, %data)
            }
            LoggingLevel::Info | LoggingLevel::Notice => {
                tracing::info!(target: "axp_providers::mcp::upstream", %provider, logger, %data)
            }
            LoggingLevel::Warning => {
                tracing::warn!(target: "axp_providers::mcp::upstream", %provider, logger, %data)
            }
            _ => tracing::error!(target: "axp_providers::mcp::upstream", %provider, logger, %data),
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.relist.send(());
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

/// A watched stdio child. Dropping it kills the child's process group.
struct ChildProc {
    pid: Option<u32>,
    /// Cancelled once the child has exited (and been reaped).
    exited: CancellationToken,
    status: Arc<Mutex<Option<String>>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

const STDERR_LINES: usize = 20;
const STDERR_LINE_MAX: usize = 2048;

impl ChildProc {
    fn watch(mut child: tokio::process::Child, stderr: Option<tokio::process::ChildStderr>, provider: String) -> Self {
        let pid = child.id();
        let exited = CancellationToken::new();
        let status = Arc::new(Mutex::new(None));
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_done = CancellationToken::new();
        if let Some(mut err) = stderr {
            let tail = stderr_tail.clone();
            let done = stderr_done.clone();
            let provider = provider.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut line: Vec<u8> = Vec::new();
                let push = |line: &mut Vec<u8>| {
                    let text = String::from_utf8_lossy(line).trim_end().to_string();
                    line.clear();
                    if text.is_empty() {
                        return;
                    }
                    tracing::debug!(target: "axp_providers::mcp::upstream", %provider, stderr = %text);
                    let mut t = tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if t.len() >= STDERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(text);
                };
                loop {
                    let n = match err.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    for &b in &buf[..n] {
                        if b == b'\n' {
                            push(&mut line);
                        } else if line.len() < STDERR_LINE_MAX {
                            line.push(b);
                        }
                    }
                }
                push(&mut line);
                done.cancel();
            });
        } else {
            stderr_done.cancel();
        }
        {
            let exited = exited.clone();
            let status = status.clone();
            tokio::spawn(async move {
                let st = child.wait().await;
                let text = match st {
                    Ok(st) => describe_status(&st),
                    Err(e) => format!("wait failed: {e}"),
                };
                // Let the stderr reader catch the last words (bounded: a grandchild may hold
                // the pipe open).
                let _ = tokio::time::timeout(Duration::from_millis(200), stderr_done.cancelled()).await;
                *status.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(text);
                exited.cancel();
            });
        }
        Self { pid, exited, status, stderr_tail }
    }

    /// `exit code 1; stderr: …last lines…`
    fn describe(&self) -> String {
        let status = self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "still running".into());
        let tail = self.stderr_tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if tail.is_empty() {
            status
        } else {
            let lines: Vec<&str> = tail.iter().rev().take(3).rev().map(String::as_str).collect();
            format!("{status}; last stderr: {}", lines.join(" | "))
        }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            kill_group(pid);
        }
    }
}

/// A live connection, shared by the calls that use it.
struct Conn {
    peer: Peer<RoleClient>,
    progress: Arc<ProgressRouter>,
    /// Cancelled when the connection is gone; calls in flight fail at once.
    dead: CancellationToken,
    death: Mutex<Option<String>>,
    /// A call saw a transport error: the supervisor checks the server with a ping.
    suspect: mpsc::UnboundedSender<()>,
    pid: Option<u32>,
}

impl Conn {
    fn death_reason(&self) -> String {
        self.death
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "the connection to the server was lost".into())
    }

    fn kill(&self, reason: &str) {
        let mut d = self.death.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if d.is_none() {
            *d = Some(reason.to_string());
        }
        drop(d);
        self.dead.cancel();
    }
}

struct State {
    conn: Option<Arc<Conn>>,
    reason: String,
    tools: Option<Vec<ToolSpec>>,
    /// A launched provider whose first attempt has not ended yet.
    starting: bool,
}

struct Inner {
    cfg: McpConfig,
    launcher: Arc<dyn Launcher>,
    state: Mutex<State>,
    events: broadcast::Sender<ProviderEvent>,
    shutdown: CancellationToken,
}

impl Inner {
    /// A provider's shared state before its first attempt; `starting` for a launched one.
    fn new(cfg: McpConfig, launcher: Arc<dyn Launcher>, starting: bool) -> Arc<Inner> {
        let (events, _) = broadcast::channel(64);
        Arc::new(Inner {
            cfg,
            launcher,
            state: Mutex::new(State { conn: None, reason: "the server is starting".into(), tools: None, starting }),
            events,
            shutdown: CancellationToken::new(),
        })
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn unavailable(&self, reason: String) -> ProviderError {
        ProviderError::Unavailable { provider: self.cfg.id.to_string(), reason }
    }

    fn send(&self, e: ProviderEvent) {
        // No receiver is fine: nobody is listening yet.
        let _ = self.events.send(e);
    }

    /// Stores a new tool list; `true` when it differs from the previous one.
    fn set_tools(&self, tools: Vec<ToolSpec>) -> bool {
        let mut st = self.lock();
        let changed = st.tools.as_ref() != Some(&tools);
        st.tools = Some(tools);
        changed
    }
}

/// A connected session: the rmcp service, the child (stdio), the channels the handler and the
/// calls use to reach the supervisor.
struct Session {
    conn: Arc<Conn>,
    service_ct: CancellationToken,
    waiting: std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>,
    child: Option<ChildProc>,
    /// The GET stream of a legacy SSE session (its end is the session's end).
    link: Option<sse::Link>,
    relist: mpsc::UnboundedReceiver<()>,
    suspect: mpsc::UnboundedReceiver<()>,
    tools: Vec<ToolSpec>,
}

fn tool_spec(tool: &rmcp::model::Tool) -> Result<ToolSpec, String> {
    serde_json::to_value(tool)
        .and_then(serde_json::from_value)
        .map_err(|e| format!("tool `{}` cannot be read: {e}", tool.name))
}

async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<ToolSpec>, String> {
    let tools = peer.list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))?;
    tools.iter().map(tool_spec).collect()
}

fn client_info() -> ClientConfig {
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("axp", env!("CARGO_PKG_VERSION")))
}

impl Session {
    async fn open(inner: &Inner) -> Result<Session, String> {
        let progress = Arc::new(ProgressRouter::default());
        let (relist_tx, relist_rx) = mpsc::unbounded_channel();
        let (suspect_tx, suspect_rx) = mpsc::unbounded_channel();
        let handler = Handler {
            info: client_info(),
            provider: inner.cfg.id.to_string(),
            progress: progress.clone(),
            relist: relist_tx,
        };
        let service_ct = CancellationToken::new();
        let mut link = None;
        let (running, child) = match &inner.cfg.transport {
            McpTransport::Stdio(spec) => {
                let mut spec = spec.clone();
                spec.env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
                let mut cmd = inner.launcher.command(&spec).map_err(|e| e.to_string())?;
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0)
                    .kill_on_drop(true);
                let mut child = crate::spawn(cmd).await.map_err(|e| format!("cannot start `{}`: {e}", spec.program))?;
                let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                    return Err("the child's stdio pipes are missing".into());
                };
                let stderr = child.stderr.take();
                let proc = ChildProc::watch(child, stderr, inner.cfg.id.to_string());
                let running = tokio::select! {
                    r = serve_client_with_ct(handler, (stdout, stdin), service_ct.clone()) => r,
                    _ = proc.exited.cancelled() => {
                        return Err(format!("the server exited during the MCP handshake ({})", proc.describe()));
                    }
                };
                match running {
                    Ok(r) => (r, Some(proc)),
                    Err(e) => {
                        // The usual cause is the process dying: wait briefly for its status, and
                        // say it in the same words as when the exit is seen first.
                        let _ = tokio::time::timeout(Duration::from_millis(500), proc.exited.cancelled()).await;
                        if proc.exited.is_cancelled() {
                            return Err(format!("the server exited during the MCP handshake ({})", proc.describe()));
                        }
                        return Err(format!("MCP handshake failed: {e} ({})", proc.describe()));
                    }
                }
            }
            McpTransport::Http { url, headers } => {
                let mut map = HashMap::new();
                for (k, v) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| format!("bad header name `{k}`: {e}"))?;
                    let value = reqwest::header::HeaderValue::from_str(v)
                        .map_err(|e| format!("bad value for header `{k}`: {e}"))?;
                    map.insert(name, value);
                }
                // Our limits, not the library's defaults: one SSE event and one JSON answer are
                // held whole while parsed, so a hostile server must not be able to grow them
                // (tested in gateway/tests/suite/hostile_upstream.rs).
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(map);
                config.max_sse_event_size = sse::MAX_EVENT_BYTES;
                config.max_json_response_size = sse::MAX_EVENT_BYTES;
                let transport = StreamableHttpClientTransport::from_config(config);
                let running = match serve_client_with_ct(handler, transport, service_ct.clone()).await {
                    Ok(r) => r,
                    Err(e) => {
                        let why = match unreachable_because(url).await {
                            Some(cause) => cause,
                            None => init_error_for_people(&e),
                        };
                        return Err(format!("cannot connect to {url}: {why}"));
                    }
                };
                (running, None)
            }
            McpTransport::LegacySse { url, headers } => {
                let transport = sse::LegacySseTransport::connect(url, headers).await.map_err(|e| e.to_string())?;
                link = Some(transport.link());
                let running = serve_client_with_ct(handler, transport, service_ct.clone())
                    .await
                    .map_err(|e| format!("MCP handshake with {url} (legacy SSE) failed: {e}"))?;
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
        let conn = Arc::new(Conn {
            peer,
            progress,
            dead: CancellationToken::new(),
            death: Mutex::new(None),
            suspect: suspect_tx,
            pid,
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
        };
        let peer = session.conn.peer.clone();
        session.tools = session.or_death(list_tools(&peer)).await??;
        Ok(session)
    }

    /// Runs `fut` unless the connection dies first (then `Err(reason)`).
    async fn or_death<F: std::future::Future>(&mut self, fut: F) -> Result<F::Output, String> {
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
    async fn closed_reason(child: Option<&ChildProc>, link: Option<&sse::Link>, closed: String) -> String {
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

    fn exit_reason(&self) -> String {
        match (&self.child, &self.link) {
            (Some(c), _) => format!("the server process exited ({})", c.describe()),
            (None, Some(l)) => l.reason(),
            (None, None) => "the server went away".into(),
        }
    }

    /// Cancelled when the server is known to be gone: the stdio child exited, or the legacy
    /// SSE stream ended. (Never, for Streamable HTTP: the heartbeat finds that out.)
    fn gone(&self) -> CancellationToken {
        match (&self.child, &self.link) {
            (Some(c), _) => c.exited.clone(),
            (None, Some(l)) => l.ended(),
            (None, None) => CancellationToken::new(),
        }
    }

    /// Serves until the connection dies or the provider shuts down; returns why.
    async fn run(&mut self, inner: &Inner) -> String {
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

    /// Pings the server; `Some(reason)` when it is gone or does not answer within `within`.
    async fn check(&mut self, within: Duration) -> Option<String> {
        let peer = self.conn.peer.clone();
        let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
        match self.or_death(tokio::time::timeout(within, ping)).await {
            Err(reason) => Some(reason),
            Ok(Ok(Ok(_))) => None,
            Ok(Ok(Err(e))) => Some(format!("the server stopped answering (ping failed: {e})")),
            Ok(Err(_)) => {
                Some(format!("the server stopped answering (no answer to ping within {}s)", within.as_secs_f64()))
            }
        }
    }

    /// Ends the session: fails calls in flight, stops the client, closes stdin and gives the
    /// child a moment to exit on its own before its process group is killed.
    async fn close(self, reason: &str) {
        self.conn.kill(reason);
        self.service_ct.cancel();
        if let Some(child) = self.child {
            let _ = tokio::time::timeout(Duration::from_millis(500), child.exited.cancelled()).await;
            drop(child);
        }
    }
}

async fn supervise(inner: Arc<Inner>, first: Option<oneshot::Sender<()>>) {
    let mut first = first;
    let mut failures: u32 = 0;
    // The last start failure logged: a server down for a while fails the same way at every
    // retry, and a warning each time buried everything else in the log.
    let mut last_failure: Option<String> = None;
    loop {
        if inner.shutdown.is_cancelled() {
            break;
        }
        let connect_timeout = inner.cfg.connect_timeout;
        let attempt = tokio::select! {
            r = tokio::time::timeout(connect_timeout, Session::open(&inner)) => match r {
                Ok(r) => r,
                Err(_) => Err(format!(
                    "the server did not complete start-up (handshake and tools/list) within {}s",
                    connect_timeout.as_secs_f64()
                )),
            },
            _ = inner.shutdown.cancelled() => break,
        };
        match attempt {
            Ok(mut session) => {
                last_failure = None;
                let up_since = Instant::now();
                {
                    let mut st = inner.lock();
                    st.conn = Some(session.conn.clone());
                    st.tools = Some(std::mem::take(&mut session.tools));
                    st.reason.clear();
                    st.starting = false;
                }
                tracing::info!(provider = %inner.cfg.id, "MCP server is available");
                match first.take() {
                    Some(f) => {
                        let _ = f.send(());
                    }
                    None => {
                        inner.send(ProviderEvent::Available);
                        inner.send(ProviderEvent::ToolsChanged);
                    }
                }
                let reason = session.run(&inner).await;
                {
                    let mut st = inner.lock();
                    st.conn = None;
                    st.reason = reason.clone();
                }
                session.close(&reason).await;
                if inner.shutdown.is_cancelled() {
                    break;
                }
                tracing::warn!(provider = %inner.cfg.id, "MCP server is unavailable: {reason}");
                inner.send(ProviderEvent::Unavailable { reason });
                if up_since.elapsed() >= inner.cfg.restart.max_backoff {
                    failures = 0;
                }
            }
            Err(reason) => {
                let attempts = failures + 1;
                if last_failure.as_deref() != Some(reason.as_str()) {
                    tracing::warn!(provider = %inner.cfg.id, "MCP server failed to start: {reason}");
                } else if attempts.is_power_of_two() {
                    tracing::warn!(provider = %inner.cfg.id, "MCP server still failing to start after {attempts} attempts: {reason}");
                } else {
                    tracing::debug!(provider = %inner.cfg.id, attempts, "MCP server failed to start again: {reason}");
                }
                last_failure = Some(reason.clone());
                let was_starting = {
                    let mut st = inner.lock();
                    st.reason = reason.clone();
                    std::mem::replace(&mut st.starting, false)
                };
                match first.take() {
                    Some(f) => {
                        let _ = f.send(());
                    }
                    // A launched provider's first failure is news: until now it was starting.
                    None if was_starting => inner.send(ProviderEvent::Unavailable { reason }),
                    None => {}
                }
            }
        }
        let delay = inner.cfg.restart.delay(failures);
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = inner.shutdown.cancelled() => break,
        }
    }
    if let Some(f) = first.take() {
        let _ = f.send(());
    }
}

/// An MCP server behind the [`Provider`] trait.
pub struct McpProvider {
    inner: Arc<Inner>,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for McpProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpProvider").field("id", &self.inner.cfg.id).field("status", &self.status()).finish()
    }
}

impl McpProvider {
    /// Starts the server and waits for the first attempt (bounded by
    /// [`McpConfig::connect_timeout`]). Never fails: if the server cannot start, the provider
    /// is returned unavailable and keeps retrying in the background.
    pub async fn start(cfg: McpConfig, launcher: Arc<dyn Launcher>) -> Arc<McpProvider> {
        let inner = Inner::new(cfg, launcher, false);
        let (first_tx, first_rx) = oneshot::channel();
        let handle = tokio::spawn(supervise(inner.clone(), Some(first_tx)));
        let _ = first_rx.await;
        Arc::new(McpProvider { inner, supervisor: Mutex::new(Some(handle)) })
    }

    /// Like [`McpProvider::start`], without waiting for the first attempt: `tools()` answers
    /// [`ProviderError::Starting`] until it ends, and then the provider announces the outcome
    /// through `events()` (`Available` and `ToolsChanged`, or `Unavailable` with the reason). A
    /// gateway mounts its fleet this way so that it listens at once and one slow or hung server
    /// delays nobody.
    pub fn launch(cfg: McpConfig, launcher: Arc<dyn Launcher>) -> Arc<McpProvider> {
        let inner = Inner::new(cfg, launcher, true);
        let handle = tokio::spawn(supervise(inner.clone(), None));
        Arc::new(McpProvider { inner, supervisor: Mutex::new(Some(handle)) })
    }

    /// Serving or not, and why not.
    pub fn status(&self) -> McpStatus {
        let st = self.inner.lock();
        match &st.conn {
            Some(_) => McpStatus::Available,
            None => McpStatus::Unavailable { reason: st.reason.clone() },
        }
    }

    /// The pid of the current stdio child (the process the launcher built, which may be a
    /// sandbox wrapper), for diagnostics.
    pub fn server_pid(&self) -> Option<u32> {
        self.inner.lock().conn.as_ref().and_then(|c| c.pid)
    }

    /// `resources/list` (every page), raw MCP `Resource` objects.
    pub async fn list_resources(&self) -> Result<Vec<Value>, ProviderError> {
        self.passthrough("resources/list", |peer| async move { peer.list_all_resources().await }).await
    }

    /// `resources/templates/list` (every page), raw MCP `ResourceTemplate` objects.
    pub async fn list_resource_templates(&self) -> Result<Vec<Value>, ProviderError> {
        self.passthrough("resources/templates/list", |peer| async move { peer.list_all_resource_templates().await })
            .await
    }

    /// `resources/read`, the raw `ReadResourceResult` (`{"contents": [...]}`).
    pub async fn read_resource(&self, uri: &str) -> Result<Value, ProviderError> {
        let params = ReadResourceRequestParams::new(uri);
        self.passthrough("resources/read", |peer| async move { peer.read_resource(params).await }).await
    }

    /// `prompts/list` (every page), raw MCP `Prompt` objects.
    pub async fn list_prompts(&self) -> Result<Vec<Value>, ProviderError> {
        self.passthrough("prompts/list", |peer| async move { peer.list_all_prompts().await }).await
    }

    /// `prompts/get`, the raw `GetPromptResult` (`{"description"?, "messages": [...]}`).
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: serde_json::Map<String, Value>,
    ) -> Result<Value, ProviderError> {
        let params = GetPromptRequestParams::new(name).with_arguments(arguments);
        self.passthrough("prompts/get", |peer| async move { peer.get_prompt(params).await }).await
    }

    /// Runs one request on the live connection with the call timeout, and returns its answer
    /// as JSON (rmcp's types re-serialised). A timeout names `what` in place of a tool.
    async fn passthrough<R, T, F, Fut>(&self, what: &str, f: F) -> Result<T, ProviderError>
    where
        R: serde::Serialize,
        T: serde::de::DeserializeOwned,
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<R, ServiceError>>,
    {
        let conn = self.conn()?;
        let timeout = self.inner.cfg.timeout;
        // Dropping rmcp's request future on timeout sends `notifications/cancelled` upstream.
        let res = tokio::select! {
            r = tokio::time::timeout(timeout, f(conn.peer.clone())) => r,
            _ = conn.dead.cancelled() => {
                return Err(self.inner.unavailable(conn.death_reason()));
            }
        };
        match res {
            Err(_) => Err(ProviderError::Timeout { tool: what.to_string(), secs: timeout.as_secs_f64().ceil() as u64 }),
            Ok(Err(e)) => Err(self.map_error(&conn, e).await),
            Ok(Ok(r)) => serde_json::to_value(r).and_then(serde_json::from_value).map_err(|e| {
                ProviderError::Upstream(RpcError {
                    code: i64::from(rmcp::model::ErrorCode::INTERNAL_ERROR.0),
                    message: format!("the server's {what} answer cannot be read: {e}"),
                    data: None,
                })
            }),
        }
    }

    fn conn(&self) -> Result<Arc<Conn>, ProviderError> {
        let st = self.inner.lock();
        match &st.conn {
            Some(c) if !c.dead.is_cancelled() => Ok(c.clone()),
            Some(c) => Err(self.inner.unavailable(c.death_reason())),
            None => Err(self.inner.unavailable(st.reason.clone())),
        }
    }

    /// Maps an rmcp error for a call on `conn`.
    async fn map_error(&self, conn: &Conn, e: ServiceError) -> ProviderError {
        match e {
            ServiceError::McpError(ed) => ProviderError::Upstream(RpcError {
                code: i64::from(ed.code.0),
                message: ed.message.into_owned(),
                data: ed.data,
            }),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                // If the process died, its watcher says so within moments: prefer that reason.
                let _ = conn.suspect.send(());
                let _ = tokio::time::timeout(Duration::from_millis(300), conn.dead.cancelled()).await;
                let reason = if conn.dead.is_cancelled() {
                    conn.death_reason()
                } else {
                    format!("the connection to the server failed: {e}")
                };
                self.inner.unavailable(reason)
            }
            other => ProviderError::Upstream(RpcError {
                code: i64::from(rmcp::model::ErrorCode::INTERNAL_ERROR.0),
                message: other.to_string(),
                data: None,
            }),
        }
    }
}

fn unsupported(what: &str) -> ProviderError {
    ProviderError::Upstream(RpcError {
        code: i64::from(rmcp::model::ErrorCode::INTERNAL_ERROR.0),
        message: format!("the server answered with {what}, which AXP does not support yet"),
        data: None,
    })
}

/// Maps a `tools/call` answer to a [`ToolOutput`].
fn to_output(result: ServerResult) -> Result<ToolOutput, ProviderError> {
    let value = match result {
        ServerResult::CallToolResult(r) => serde_json::to_value(r),
        ServerResult::InputRequiredResult(_) => {
            return Err(unsupported("an MRTR `input_required` result"));
        }
        ServerResult::CreateTaskResult(_) => return Err(unsupported("a task")),
        // rmcp decodes a content-less result as one of the other shapes; read it as ours.
        other => serde_json::to_value(other),
    };
    value.and_then(serde_json::from_value::<ToolOutput>).map_err(|e| {
        ProviderError::Upstream(RpcError {
            code: i64::from(rmcp::model::ErrorCode::INTERNAL_ERROR.0),
            message: format!("the server's tools/call result cannot be read: {e}"),
            data: None,
        })
    })
}

impl Drop for McpProvider {
    fn drop(&mut self) {
        // Stops the supervisor, which closes the session and kills the child's group.
        self.inner.shutdown.cancel();
    }
}

#[async_trait]
impl Provider for McpProvider {
    fn id(&self) -> &ProviderId {
        &self.inner.cfg.id
    }

    async fn tools(&self) -> Result<Vec<ToolSpec>, ProviderError> {
        let st = self.inner.lock();
        match &st.tools {
            Some(t) => Ok(t.clone()),
            None if st.starting => Err(ProviderError::Starting { provider: self.inner.cfg.id.to_string() }),
            None => Err(self.inner.unavailable(st.reason.clone())),
        }
    }

    async fn call(
        &self,
        call: ToolCall,
        sink: JobSink,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ProviderError> {
        let conn = self.conn()?;
        let timeout = crate::call_timeout(&call, self.inner.cfg.timeout);
        let tool = call.tool.clone();
        let params = CallToolRequestParams::new(call.tool).with_arguments(call.arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match conn.peer.send_request_with_option(request, PeerRequestOptions::no_options()).await {
            Ok(h) => h,
            Err(e) => return Err(self.map_error(&conn, e).await),
        };
        let _route = conn.progress.register(handle.progress_token.clone(), sink);
        let mut abandon = AbandonGuard { peer: conn.peer.clone(), id: Some(handle.id.clone()) };
        let result = tokio::select! {
            r = handle.await_response() => {
                abandon.disarm();
                r
            }
            _ = cancel.cancelled() => {
                if let Some(id) = abandon.disarm() {
                    send_cancelled(&conn.peer, id, "cancelled by the client").await;
                }
                return Err(ProviderError::Cancelled);
            }
            _ = tokio::time::sleep(timeout) => {
                if let Some(id) = abandon.disarm() {
                    send_cancelled(&conn.peer, id, "timed out").await;
                }
                return Err(ProviderError::Timeout {
                    tool,
                    secs: timeout.as_secs_f64().ceil() as u64,
                });
            }
            _ = conn.dead.cancelled() => {
                abandon.disarm();
                return Err(self.inner.unavailable(conn.death_reason()));
            }
        };
        match result {
            Ok(r) => {
                // rmcp handles each notification in its own task: let progress notifications
                // that arrived before the answer reach the sink before the route is dropped.
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                to_output(r)
            }
            Err(e) => Err(self.map_error(&conn, e).await),
        }
    }

    fn events(&self) -> Option<broadcast::Receiver<ProviderEvent>> {
        Some(self.inner.events.subscribe())
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        self.inner.shutdown.cancel();
        let handle = self.supervisor.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(h) = handle {
            let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
        }
        Ok(())
    }
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

    #[derive(Default)]
    struct Collect(Mutex<Vec<JobEventKind>>);
    impl crate::EventSink for Collect {
        fn emit(&self, e: JobEventKind) {
            self.0.lock().unwrap().push(e);
        }
    }

    fn progress(token: i64, p: f64) -> ProgressNotificationParam {
        serde_json::from_value(serde_json::json!({"progressToken": token, "progress": p})).unwrap()
    }

    #[test]
    fn progress_routes_by_token_keeps_order_and_adopts_early_arrivals() {
        let router = Arc::new(ProgressRouter::default());
        // Arrives before its call registered.
        router.dispatch(progress(7, 1.0));
        let sink = Arc::new(Collect::default());
        let token: ProgressToken = serde_json::from_value(serde_json::json!(7)).unwrap();
        let guard = router.register(token, sink.clone());
        router.dispatch(progress(7, 3.0));
        router.dispatch(progress(7, 2.0)); // out of order: dropped
        router.dispatch(progress(8, 1.0)); // someone else's
        let got: Vec<f64> = sink
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|e| match e {
                JobEventKind::Progress { progress, .. } => *progress,
                _ => -1.0,
            })
            .collect();
        assert_eq!(got, vec![1.0, 3.0]);
        drop(guard);
        assert!(router.lock().routes.is_empty());
        assert_eq!(router.lock().orphans.len(), 1);
    }
}

/// A failed MCP handshake as a person wants to read it. rmcp's transport variant does not name
/// its transport error as its `source`, so the chain is walked from that error instead, down to
/// its innermost cause (`Connection refused`).
fn init_error_for_people(e: &rmcp::service::ClientInitializeError) -> String {
    match e {
        rmcp::service::ClientInitializeError::TransportError { error, .. } => for_people(error),
        other => for_people(other),
    }
}

/// Why `url` cannot be reached at all, if it cannot: the HTTP client's error does not carry
/// the socket's cause through rmcp ("error sending request" is all it says), so one plain TCP
/// connection to the same host and port, bounded at 3 s, finds it (`connection refused`,
/// an unknown host, a timeout). `None` when the host answers: the failure was above TCP, and the
/// client's own message says more.
async fn unreachable_because(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = parsed.port_or_known_default()?;
    match tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect((host.as_str(), port))).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Some(format!("connection refused (nothing listens on {host}:{port})"))
        }
        Ok(Err(e)) if e.to_string().contains("lookup") || e.to_string().contains("resolve") => {
            Some(format!("cannot resolve the host `{host}`"))
        }
        Ok(Err(e)) => Some(for_people(&e).to_lowercase()),
        Err(_) => Some(format!("no answer from {host}:{port} within 3 s")),
    }
}

/// An error as a person wants to read it: the innermost cause of the chain (`Connection
/// refused (os error 111)`), which says what went wrong, rather than the outer layers, whose
/// messages name library types (`rmcp::transport::worker::WorkerTransport<…>`).
fn for_people(e: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest: &dyn std::error::Error = e;
    while let Some(next) = deepest.source() {
        deepest = next;
    }
    let text = deepest.to_string();
    // Without a chain to walk, drop bracketed Rust paths from the one message there is.
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else { break };
        let inner = &rest[open + 1..open + close];
        out.push_str(&rest[..open]);
        if !inner.contains("::") {
            out.push_str(&rest[open..=open + close]);
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod for_people_tests {
    use super::for_people;

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Send message error Transport [rmcp::transport::worker::WorkerTransport<X>] error")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn the_innermost_cause_and_no_type_names() {
        let e = Outer(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(for_people(&e), "connection refused");
        let alone = std::io::Error::other("Transport [rmcp::x::Y<z::W>] closed [at 3]");
        assert_eq!(for_people(&alone), "Transport closed [at 3]");
    }
}
