//! [`McpProvider`]: the MCP server behind the [`Provider`] trait. It owns starting the
//! supervisor, a call (its progress route, deadline, cancellation and the mapping of the answer
//! or error), the pass-through of resources and prompts, and shutdown.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axp_protocol::methods::JobEventKind;
use axp_protocol::{RpcError, ToolCall, ToolOutput, ToolSpec};
#[allow(deprecated)]
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientCapabilities, ClientRequest, CompleteRequest, CompleteRequestParams,
    CustomRequest, GetPromptRequest, GetPromptRequestParams, InputRequest, InputRequests, InputResponses, LoggingLevel,
    ReadResourceRequest, ReadResourceRequestParams, RequestMetaObject, ServerCapabilities, ServerResult,
    SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use super::routing::{AbandonGuard, send_cancelled};
use super::session::{Conn, OpenError, Session};
use super::supervisor::{CompanionConn, Inner, MAX_SESSION_CONNS, SESSION_CONN_IDLE, supervise};
use super::{Handshake, McpConfig, McpStatus, McpTransport};
use crate::{
    CallerClient, CancellationToken, ClientAsk, InputAnswers, JobSink, Launcher, Provider, ProviderError,
    ProviderEvent, ProviderId,
};

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

    /// Runs one request on the connection for its caller with the call timeout, and returns
    /// its answer as JSON (rmcp's types re-serialised). A timeout names `what` in place of a
    /// tool.
    async fn passthrough<R, T, F, Fut>(&self, what: &str, f: F) -> Result<T, ProviderError>
    where
        R: serde::Serialize,
        T: serde::de::DeserializeOwned,
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<R, ServiceError>>,
    {
        let meta = axp_provider_api::REQUEST_META.try_with(Value::clone).ok();
        let conn = match &meta {
            Some(m) => self.conn_for(m).await?.0,
            None => self.conn()?,
        };
        self.passthrough_on(conn, meta, what, f).await
    }

    /// The connection that carries the methods 2026-07-28 removed (`resources/subscribe`,
    /// `logging/setLevel`): the provider's own when it speaks an earlier revision, else the
    /// `initialize` connection beside it (opened when `open`), if the server speaks that.
    async fn legacy_conn(&self, open: bool) -> Result<Option<Arc<Conn>>, ProviderError> {
        let conn = self.conn()?;
        if !conn.stateless {
            return Ok(Some(conn));
        }
        if open && self.inner.cfg.handshake == Handshake::Newest {
            return Ok(self.companion(None).await);
        }
        let shared = self.inner.companion.lock().await.conns.get(&None).map(|c| c.conn.clone());
        Ok(shared.filter(|c| !c.dead.is_cancelled()))
    }

    /// [`McpProvider::passthrough`] on a given connection.
    async fn passthrough_on<R, T, F, Fut>(
        &self,
        conn: Arc<Conn>,
        meta: Option<Value>,
        what: &str,
        f: F,
    ) -> Result<T, ProviderError>
    where
        R: serde::Serialize,
        T: serde::de::DeserializeOwned,
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<R, ServiceError>>,
    {
        let timeout = self.inner.cfg.timeout;
        let _waiting = conn.oversize.wait();
        // Served for a session outside a tool call: its server's requests of the client belong
        // to that session too.
        let _inflight = meta.map(|m| conn.inflight.enter(m));
        // Dropping rmcp's request future on timeout sends `notifications/cancelled` upstream.
        let res = tokio::select! {
            r = tokio::time::timeout(timeout, f(conn.peer.clone())) => r,
            _ = conn.dead.cancelled() => {
                return Err(self.inner.unavailable(conn.death_reason()));
            }
            () = answer_discarded(&conn) => return Err(too_large(what)),
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

    /// The connection a request for `meta`'s caller goes over: the provider's own, which
    /// speaks the newest revision the server offers, except for a client of an `initialize`
    /// revision that can be asked things (sampling, elicitation, roots). A server asks such a
    /// client with requests in the middle of a call, and a request carries nothing that says
    /// which call it belongs to, so such a client of an HTTP server gets an `initialize`
    /// connection of its own session (every request on it is that session's); and when the
    /// provider's own connection speaks 2026-07-28, which carries no such requests, such a
    /// client of any other server is served over one `initialize` connection beside it, if
    /// the server speaks that too.
    ///
    /// Also returns the caller's MCP client when it was looked up (a 2026-07-28 request names
    /// its capabilities).
    async fn conn_for(&self, meta: &Value) -> Result<(Arc<Conn>, Option<CallerClient>), ProviderError> {
        let conn = self.conn()?;
        let http = matches!(self.inner.cfg.transport, McpTransport::Http { .. });
        if !conn.stateless && !http {
            return Ok((conn, None));
        }
        let client = self.inner.cfg.relay.get().and_then(|r| r.client_of(meta));
        let asked_mid_call =
            client.as_ref().filter(|c| !c.stateless && !self.inner.cfg.client_asks.filter(&c.capabilities).is_empty());
        let key = match asked_mid_call {
            _ if self.inner.cfg.handshake == Handshake::Discover => return Ok((conn, client)),
            Some(c) if http => Some(c.session.clone()),
            Some(_) if conn.stateless && self.inner.cfg.handshake == Handshake::Newest => None,
            _ => return Ok((conn, client)),
        };
        match self.companion(key).await {
            Some(companion) => Ok((companion, client)),
            None => Ok((conn, client)),
        }
    }

    /// The `initialize` connection of one session (`Some`) or shared by all (`None`), opened
    /// on first use and kept until it dies, idles or is evicted (then opened again on the next
    /// use); `None` when the server refuses that handshake (it speaks only 2026-07-28) or
    /// cannot be reached right now. A new one is told the log level a client last set.
    async fn companion(&self, key: Option<String>) -> Option<Arc<Conn>> {
        let mut slot = self.inner.companion.lock().await;
        if slot.refused {
            return None;
        }
        slot.conns.retain(|k, c| {
            let keep = !c.conn.dead.is_cancelled() && (k.is_none() || c.used.elapsed() < SESSION_CONN_IDLE);
            if !keep {
                c.stop.cancel();
            }
            keep
        });
        if let Some(c) = slot.conns.get_mut(&key) {
            c.used = std::time::Instant::now();
            return Some(c.conn.clone());
        }
        if key.is_some() && slot.conns.keys().filter(|k| k.is_some()).count() >= MAX_SESSION_CONNS {
            let oldest =
                slot.conns.iter().filter(|(k, _)| k.is_some()).min_by_key(|(_, c)| c.used).map(|(k, _)| k.clone());
            if let Some(c) = oldest.and_then(|k| slot.conns.remove(&k)) {
                c.stop.cancel();
            }
        }
        let opened = tokio::time::timeout(
            self.inner.cfg.connect_timeout,
            Session::open_with(&self.inner, Handshake::Initialize),
        )
        .await;
        let mut session = match opened {
            Ok(Ok(session)) => session,
            Ok(Err(OpenError::Handshake(why))) => {
                tracing::debug!(provider = %self.inner.cfg.id, "the server speaks only 2026-07-28 ({why})");
                slot.refused = true;
                return None;
            }
            Ok(Err(OpenError::Start(why))) => {
                tracing::warn!(provider = %self.inner.cfg.id, "cannot open an `initialize` connection beside the provider's own: {why}");
                return None;
            }
            Err(_) => return None,
        };
        session.companion = true;
        let conn = session.conn.clone();
        let stop = CancellationToken::new();
        let inner = self.inner.clone();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let reason = tokio::select! {
                r = session.run(&inner) => r,
                _ = stopped.cancelled() => "the connection was idle or made room for another".to_string(),
            };
            tracing::debug!(provider = %inner.cfg.id, "an `initialize` connection beside the provider's own ended: {reason}");
            session.close(&reason).await;
        });
        let level = *self.inner.log_level.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(level) = level
            && conn.peer.peer_info().is_some_and(|i| i.capabilities.logging.is_some())
        {
            #[allow(deprecated)]
            let _ = conn.peer.set_level(SetLevelRequestParams::new(level)).await;
        }
        slot.conns.insert(key, CompanionConn { conn: conn.clone(), stop, used: std::time::Instant::now() });
        Some(conn)
    }

    /// The 2026-07-28 envelope a request made for a caller carries: the capabilities its
    /// client declared, less what the operator forbids, so the server asks only for what can
    /// be answered. (rmcp fills in the version and client info.)
    fn envelope(&self, client: Option<&CallerClient>) -> RequestMetaObject {
        let caps = client.map(|c| self.inner.cfg.client_asks.filter(&c.capabilities)).unwrap_or_default();
        let caps = Value::Object(caps);
        let mut envelope = RequestMetaObject::new();
        envelope.set_client_capabilities(serde_json::from_value::<ClientCapabilities>(caps).unwrap_or_default());
        let level = *self.inner.log_level.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(level) = level {
            envelope.set_log_level(level);
        }
        envelope
    }

    /// Sends one request of a call and waits for its answer, with the call's progress routed
    /// to `sink`; cancelled, timed out, cut short by the server's death or by an answer too
    /// large to take, each as its own error.
    async fn request(
        &self,
        conn: &Conn,
        request: ClientRequest,
        client: Option<&CallerClient>,
        sink: &JobSink,
        bounds: &Bounds,
        what: &str,
    ) -> Result<ServerResult, ProviderError> {
        let mut meta = if conn.stateless { Some(self.envelope(client)) } else { None };
        if let Some(trace) = &bounds.trace {
            // Read by the server (SEP-414), and sent as headers too by an HTTP transport.
            meta.get_or_insert_with(RequestMetaObject::new).extend(RequestMetaObject(trace.clone().into()));
        }
        let options = match meta {
            Some(meta) => PeerRequestOptions::no_options().with_meta(meta),
            None => PeerRequestOptions::no_options(),
        };
        let handle = match conn.peer.send_request_with_option(request, options).await {
            Ok(h) => h,
            Err(e) => return Err(self.map_error(conn, e).await),
        };
        let _route = conn.progress.register(handle.progress_token.clone(), sink.clone());
        let _waiting = conn.oversize.wait();
        let mut abandon = AbandonGuard { peer: conn.peer.clone(), id: Some(handle.id.clone()) };
        let result = tokio::select! {
            r = handle.await_response() => {
                abandon.disarm();
                r
            }
            _ = bounds.cancel.cancelled() => {
                if let Some(id) = abandon.disarm() {
                    send_cancelled(&conn.peer, id, "cancelled by the client").await;
                }
                return Err(ProviderError::Cancelled);
            }
            _ = tokio::time::sleep_until(bounds.deadline) => {
                if let Some(id) = abandon.disarm() {
                    send_cancelled(&conn.peer, id, "timed out").await;
                }
                return Err(bounds.timed_out(what));
            }
            _ = conn.dead.cancelled() => {
                abandon.disarm();
                return Err(self.inner.unavailable(conn.death_reason()));
            }
            () = answer_discarded(conn) => {
                if let Some(id) = abandon.disarm() {
                    send_cancelled(&conn.peer, id, "the answer was too large").await;
                }
                return Err(too_large(what));
            }
        };
        match result {
            Ok(r) => {
                // rmcp handles each notification in its own task: let progress notifications
                // that arrived before the answer reach the sink before the route is dropped.
                tokio::task::yield_now().await;
                tokio::task::yield_now().await;
                Ok(r)
            }
            Err(e) => Err(self.map_error(conn, e).await),
        }
    }

    /// Whether the server's tool must be called as a task (2025-11-25 `execution.taskSupport:
    /// "required"`, from its listing or from an earlier refusal; an optional one is called
    /// plainly, which every server must accept).
    fn needs_task(&self, tool: &str) -> bool {
        if self.inner.task_tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(tool) {
            return true;
        }
        let st = self.inner.lock();
        st.tools.as_ref().and_then(|ts| ts.iter().find(|t| t.name == tool)).is_some_and(|t| {
            t.execution.as_ref().and_then(|e| e.get("taskSupport")).and_then(Value::as_str) == Some("required")
        })
    }

    /// A call of a tool the server runs only as a task (MCP 2025-11-25 tasks): `tools/call`
    /// with `task` creates it, `tasks/result` waits for its result (the server's requests of
    /// the client during the task arrive meanwhile, relayed like a call's), and `tasks/get`,
    /// polled at the interval the server asks for, turns its status messages into progress.
    /// The task lives only as long as the call: a cancelled or timed-out call cancels it
    /// upstream with `tasks/cancel`. (rmcp models only the 2026 tasks extension, so these are
    /// sent as raw requests.)
    async fn call_as_task(
        &self,
        conn: &Conn,
        call: &ToolCall,
        sink: &JobSink,
        bounds: &Bounds,
    ) -> Result<ToolOutput, ProviderError> {
        let tool = call.tool.as_str();
        let raw = |method: &str, params: Value| ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
        let ttl_ms = u64::try_from(bounds.timeout.as_millis()).unwrap_or(u64::MAX);
        let create =
            raw("tools/call", serde_json::json!({"name": tool, "arguments": call.arguments, "task": {"ttl": ttl_ms}}));
        let created =
            serde_json::to_value(self.request(conn, create, None, sink, bounds, tool).await?).unwrap_or_default();
        let task = created.get("task").cloned().unwrap_or(created);
        let Some(task_id) = task.get("taskId").and_then(Value::as_str).map(str::to_string) else {
            return Err(upstream_error(format!("the server did not create a task for `{tool}`: it answered {task}")));
        };
        let poll =
            Duration::from_millis(task.get("pollInterval").and_then(Value::as_u64).unwrap_or(1000).clamp(100, 30_000));
        let cancel_upstream = || async {
            let request = raw("tasks/cancel", serde_json::json!({"taskId": task_id}));
            let _ = tokio::time::timeout(Duration::from_secs(2), conn.peer.send_request(request)).await;
        };
        let result =
            self.request(conn, raw("tasks/result", serde_json::json!({"taskId": task_id})), None, sink, bounds, tool);
        tokio::pin!(result);
        let mut ticks = tokio::time::interval(poll);
        let (mut said, mut step) = (None::<String>, 0.0);
        let outcome = loop {
            tokio::select! {
                r = &mut result => break r,
                _ = ticks.tick() => {
                    let get = conn.peer.send_request(raw("tasks/get", serde_json::json!({"taskId": task_id})));
                    let Ok(Ok(status)) = tokio::time::timeout(poll, get).await else { continue };
                    let status = serde_json::to_value(status).unwrap_or_default();
                    let message = status.get("statusMessage").and_then(Value::as_str).map(str::to_string);
                    if message.is_some() && message != said {
                        step += 1.0;
                        sink.emit(JobEventKind::Progress { progress: step, total: None, message: message.clone() });
                        said = message;
                    }
                }
            }
        };
        match outcome {
            Ok(answer) => to_output(answer),
            Err(e) => {
                if matches!(e, ProviderError::Cancelled | ProviderError::Timeout { .. }) {
                    cancel_upstream().await;
                }
                Err(e)
            }
        }
    }

    /// Answers one `input_required` round of a 2026-07-28 server: each request goes through the
    /// gateway to the client of exactly this call (its `meta`), under the server's own key,
    /// all at once so that a client asked through such a result gets them in one round.
    async fn answer_inputs(&self, meta: &Value, requests: InputRequests) -> Result<InputResponses, ProviderError> {
        if requests.is_empty() {
            return Err(upstream_error("the server answered `input_required` without naming any request".into()));
        }
        let provider = &self.inner.cfg.id;
        let relay = self.inner.cfg.relay.get();
        let asks = requests.into_iter().map(|(key, request)| {
            let relay = relay.clone();
            async move {
                let (method, params) = method_and_params(&request);
                let refused = |why: String| {
                    upstream_error(format!("the server's `{method}` request (`{key}`) cannot be answered: {why}"))
                };
                if !self.inner.cfg.client_asks.allows(&method) {
                    return Err(refused(format!("the gateway's operator does not let server `{provider}` use it")));
                }
                let Some(relay) = relay else {
                    return Err(refused("no client is attached to relay it to".into()));
                };
                let ask =
                    ClientAsk { method: method.clone(), params, during: vec![meta.clone()], key: Some(key.clone()) };
                match relay.ask(provider, ask).await {
                    Ok(answer) => Ok((key, answer)),
                    Err(e) => Err(ProviderError::Upstream(RpcError {
                        message: format!("the server's `{method}` request (`{key}`) was not answered: {}", e.message),
                        ..e
                    })),
                }
            }
        });
        futures::future::join_all(asks).await.into_iter().collect()
    }

    /// Whether the connected server declared a capability (`what` reads its
    /// `ServerCapabilities`); a server that did not is not asked, so a fleet of servers where
    /// only some offer resources lists cleanly instead of collecting -32601s.
    fn offers(&self, what: impl Fn(&ServerCapabilities) -> bool) -> Result<bool, ProviderError> {
        let conn = self.conn()?;
        Ok(conn.peer.peer_info().is_none_or(|info| what(&info.capabilities)))
    }

    /// A prompt get or resource read, which a 2026-07-28 server may answer with an
    /// `input_required` round. To a 2026-07-28 client that round is its own: it is passed
    /// through (the server's keys and `requestState`), once every request in it is one the
    /// client declared and the operator allows, and the client's retry brings `answers`, sent
    /// back with the request. For any other caller the gateway answers the round through its
    /// relay, as for a tool call, and sends the request again.
    async fn with_rounds(
        &self,
        what: &str,
        answers: Option<InputAnswers>,
        request: impl Fn(Option<InputResponses>, Option<String>) -> ClientRequest,
    ) -> Result<Value, ProviderError> {
        let meta = axp_provider_api::REQUEST_META.try_with(Value::clone).unwrap_or(Value::Null);
        let (conn, client) = self.conn_for(&meta).await?;
        if !conn.stateless && answers.is_some() {
            return Err(ProviderError::InvalidArguments(format!(
                "`inputResponses` answer no round: the server's `{what}` was not asked over MCP 2026-07-28"
            )));
        }
        let _inflight = conn.inflight.enter(meta.clone());
        let timeout = self.inner.cfg.timeout;
        let bounds = Bounds {
            cancel: CancellationToken::new(),
            deadline: tokio::time::Instant::now() + timeout,
            timeout,
            trace: trace_of(&meta),
        };
        let sink: JobSink = Arc::new(crate::NullSink);
        let (mut responses, mut state) = match answers {
            Some(a) => (Some(a.responses.into_iter().collect()), a.request_state),
            None => (None, None),
        };
        for _ in 0..=MAX_INPUT_ROUNDS {
            let answer = self
                .request(&conn, request(responses.take(), state.take()), client.as_ref(), &sink, &bounds, what)
                .await?;
            let ServerResult::InputRequiredResult(round) = answer else {
                return serde_json::to_value(answer)
                    .map_err(|e| upstream_error(format!("the server's {what} answer cannot be read: {e}")));
            };
            let requests = round.input_requests.clone().unwrap_or_default();
            if let Some(client) = client.as_ref().filter(|c| c.stateless) {
                let allowed = self.inner.cfg.client_asks.filter(&client.capabilities);
                for (key, r) in &requests {
                    let (method, _) = method_and_params(r);
                    if !super::config::capability_of(&method).is_some_and(|k| allowed.contains_key(k)) {
                        return Err(upstream_error(format!(
                            "the server's `{what}` asked for `{method}` (`{key}`), which the client did not declare or the gateway's operator does not allow"
                        )));
                    }
                }
                return serde_json::to_value(round)
                    .map_err(|e| upstream_error(format!("the server's {what} answer cannot be read: {e}")));
            }
            responses = Some(self.answer_inputs(&meta, requests).await?);
            state = round.request_state;
        }
        Err(upstream_error(format!(
            "the server asked for input {MAX_INPUT_ROUNDS} times without answering `{what}`; AXP stopped it there"
        )))
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

/// Resolves when the server wrote a message too large to take while this request was the only
/// one waiting on the connection, so that message was its answer.
async fn answer_discarded(conn: &Conn) {
    loop {
        conn.oversize.discarded().await;
        if conn.oversize.alone() {
            return;
        }
    }
}

fn too_large(what: &str) -> ProviderError {
    ProviderError::Upstream(RpcError::new(
        axp_protocol::ErrorCode::LimitExceeded,
        format!(
            "the server's answer to `{what}` was larger than {} MiB, the most AXP takes in one message; it was discarded",
            crate::MAX_MESSAGE_BYTES / (1024 * 1024)
        ),
    )
    .with_data("limit", crate::MAX_MESSAGE_BYTES))
}

fn unsupported(what: &str) -> ProviderError {
    upstream_error(format!("the server answered with {what}, which AXP does not support yet"))
}

fn upstream_error(message: String) -> ProviderError {
    ProviderError::Upstream(RpcError { code: i64::from(rmcp::model::ErrorCode::INTERNAL_ERROR.0), message, data: None })
}

/// What ends a call early: its cancellation and its deadline (`timeout` after it began); and
/// the W3C trace context its requests carry in `_meta` (`traceparent`, `tracestate`).
struct Bounds {
    cancel: CancellationToken,
    deadline: tokio::time::Instant,
    timeout: Duration,
    trace: Option<serde_json::Map<String, Value>>,
}

/// The trace context the gateway handed a call (`meta.trace`): only the two W3C keys, as
/// strings, so nothing else of the gateway's reaches the server through it.
fn trace_of(meta: &Value) -> Option<serde_json::Map<String, Value>> {
    let trace = meta.get("trace")?.as_object()?;
    let kept: serde_json::Map<String, Value> = ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|k| trace.get(k).filter(|v| v.is_string()).map(|v| (k.to_string(), v.clone())))
        .collect();
    kept.contains_key("traceparent").then_some(kept)
}

impl Bounds {
    fn timed_out(&self, tool: &str) -> ProviderError {
        ProviderError::Timeout { tool: tool.to_string(), secs: self.timeout.as_secs_f64().ceil() as u64 }
    }
}

/// The most `input_required` rounds one call may take: a server that keeps asking is stuck.
const MAX_INPUT_ROUNDS: usize = 16;

/// The method and params of one request in an `input_required` round, as on the wire.
fn method_and_params(request: &InputRequest) -> (String, Value) {
    let mut request = serde_json::to_value(request).unwrap_or_default();
    let method = request.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
    let params = request.get_mut("params").map(Value::take).unwrap_or_else(|| serde_json::json!({}));
    (method, params)
}

/// Whether a tool's answer is its server's refusal to run it except as a task.
fn refused_without_task(output: &ToolOutput) -> bool {
    output.is_error
        && output
            .content
            .first()
            .and_then(|c| c.get("text"))
            .and_then(Value::as_str)
            .is_some_and(|t| t.contains("-32601") && (t.contains("task augmentation") || t.contains("taskSupport")))
}

/// Maps a `tools/call` answer to a [`ToolOutput`].
fn to_output(result: ServerResult) -> Result<ToolOutput, ProviderError> {
    let value = match result {
        ServerResult::CallToolResult(r) => serde_json::to_value(r),
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
        let meta = call.meta.clone().unwrap_or_default();
        let (conn, client) = self.conn_for(&meta).await?;
        // Entered before the request is sent: a server may ask the client at once.
        let _inflight = conn.inflight.enter(meta.clone());
        let timeout = crate::call_timeout(&call, self.inner.cfg.timeout);
        let bounds =
            Bounds { cancel, deadline: tokio::time::Instant::now() + timeout, timeout, trace: trace_of(&meta) };
        let tool = call.tool.clone();
        if !conn.stateless && self.needs_task(&call.tool) {
            return self.call_as_task(&conn, &call, &sink, &bounds).await;
        }
        let mut params = CallToolRequestParams::new(call.tool).with_arguments(call.arguments);
        let mut rounds = 0;
        loop {
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
            let answer = self.request(&conn, request, client.as_ref(), &sink, &bounds, &tool).await?;
            let ServerResult::InputRequiredResult(round) = answer else {
                let output = to_output(answer)?;
                // The spec's answer to a plain call of a task-only tool is -32601; SDKs that
                // turn a handler's error into a result (the TypeScript one) say it in the text.
                // The server ran nothing, so the call is made again as a task.
                if !conn.stateless && refused_without_task(&output) {
                    self.inner
                        .task_tools
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(tool.clone());
                    return self
                        .call_as_task(
                            &conn,
                            &ToolCall {
                                tool: tool.clone(),
                                arguments: params.arguments.clone().unwrap_or_default(),
                                meta: None,
                            },
                            &sink,
                            &bounds,
                        )
                        .await;
                }
                return Ok(output);
            };
            rounds += 1;
            if !conn.stateless {
                return Err(unsupported("an `input_required` result on a 2025 connection"));
            }
            if rounds > MAX_INPUT_ROUNDS {
                return Err(upstream_error(format!(
                    "the server asked for input {MAX_INPUT_ROUNDS} times without finishing the call; AXP stopped it there"
                )));
            }
            let answers = tokio::select! {
                a = self.answer_inputs(&meta, round.input_requests.unwrap_or_default()) => a?,
                _ = bounds.cancel.cancelled() => return Err(ProviderError::Cancelled),
                _ = tokio::time::sleep_until(bounds.deadline) => return Err(bounds.timed_out(&tool)),
                _ = conn.dead.cancelled() => return Err(self.inner.unavailable(conn.death_reason())),
            };
            params.input_responses = Some(answers);
            params.request_state = round.request_state;
        }
    }

    fn events(&self) -> Option<broadcast::Receiver<ProviderEvent>> {
        Some(self.inner.events.subscribe())
    }

    fn revision(&self) -> Option<String> {
        let conn = self.inner.lock().conn.clone()?;
        conn.peer.peer_info().map(|i| i.protocol_version.to_string())
    }

    async fn resources(&self) -> Result<Vec<Value>, ProviderError> {
        if !self.offers(|c| c.resources.is_some())? {
            return Ok(Vec::new());
        }
        self.passthrough("resources/list", |peer| async move { peer.list_all_resources().await }).await
    }

    async fn resource_templates(&self) -> Result<Vec<Value>, ProviderError> {
        if !self.offers(|c| c.resources.is_some())? {
            return Ok(Vec::new());
        }
        self.passthrough("resources/templates/list", |peer| async move { peer.list_all_resource_templates().await })
            .await
    }

    async fn read_resource(&self, uri: &str, answers: Option<InputAnswers>) -> Result<Value, ProviderError> {
        if !self.offers(|c| c.resources.is_some())? {
            return Err(ProviderError::UnknownResource(uri.to_string()));
        }
        let request = |responses: Option<InputResponses>, state: Option<String>| {
            let mut params = ReadResourceRequestParams::new(uri);
            params.input_responses = responses;
            params.request_state = state;
            ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params))
        };
        self.with_rounds("resources/read", answers, request).await
    }

    #[allow(deprecated)]
    async fn subscribe_resource(&self, uri: &str, on: bool) -> Result<(), ProviderError> {
        if !self.offers(|c| c.resources.as_ref().is_some_and(|r| r.subscribe == Some(true)))? {
            return Err(ProviderError::Unsupported(format!(
                "server `{}` does not support resource subscriptions (it did not declare `resources.subscribe`)",
                self.inner.cfg.id
            )));
        }
        // 2026-07-28 moved subscriptions into `subscriptions/listen`, which AXP does not open
        // upstream yet: a server that speaks only that revision cannot be subscribed to.
        let Some(conn) = self.legacy_conn(true).await? else {
            return Err(ProviderError::Unsupported(format!(
                "server `{}` speaks only MCP 2026-07-28, whose resource subscriptions (`subscriptions/listen`) AXP does not relay yet",
                self.inner.cfg.id
            )));
        };
        let meta = axp_provider_api::REQUEST_META.try_with(Value::clone).ok();
        let uri = uri.to_string();
        if on {
            let params = SubscribeRequestParams::new(uri);
            self.passthrough_on::<_, Value, _, _>(conn, meta, "resources/subscribe", |peer| async move {
                peer.subscribe(params).await
            })
            .await?;
        } else {
            let params = UnsubscribeRequestParams::new(uri);
            self.passthrough_on::<_, Value, _, _>(conn, meta, "resources/unsubscribe", |peer| async move {
                peer.unsubscribe(params).await
            })
            .await?;
        }
        Ok(())
    }

    async fn prompts(&self) -> Result<Vec<Value>, ProviderError> {
        if !self.offers(|c| c.prompts.is_some())? {
            return Ok(Vec::new());
        }
        self.passthrough("prompts/list", |peer| async move { peer.list_all_prompts().await }).await
    }

    async fn get_prompt(
        &self,
        name: &str,
        arguments: serde_json::Map<String, Value>,
        answers: Option<InputAnswers>,
    ) -> Result<Value, ProviderError> {
        if !self.offers(|c| c.prompts.is_some())? {
            return Err(ProviderError::UnknownPrompt(name.to_string()));
        }
        let request = |responses: Option<InputResponses>, state: Option<String>| {
            let mut params = GetPromptRequestParams::new(name).with_arguments(arguments.clone());
            params.input_responses = responses;
            params.request_state = state;
            ClientRequest::GetPromptRequest(GetPromptRequest::new(params))
        };
        let got = self.with_rounds("prompts/get", answers, request).await;
        // Servers word an unknown name as they like (a 2026-07-28 Python server says only
        // "Internal server error"): when the server does not list the prompt, say that.
        if let Err(ProviderError::Upstream(_)) = &got
            && let Ok(listed) = self.prompts().await
            && !listed.iter().any(|p| p.get("name").and_then(Value::as_str) == Some(name))
        {
            return Err(ProviderError::UnknownPrompt(name.to_string()));
        }
        got
    }

    async fn complete(&self, params: Value) -> Result<Value, ProviderError> {
        if !self.offers(|c| c.completions.is_some())? {
            return Ok(serde_json::json!({"completion": {"values": [], "hasMore": false}}));
        }
        let params: CompleteRequestParams = serde_json::from_value(params)
            .map_err(|e| ProviderError::InvalidArguments(format!("completion/complete: {e}")))?;
        // The request's trace context, as a tool call's requests carry it: in `_meta` (SEP-414),
        // and as headers over Streamable HTTP, which read it from the request's options.
        let options = match axp_provider_api::REQUEST_META.try_with(trace_of).ok().flatten() {
            Some(trace) => PeerRequestOptions::no_options().with_meta(RequestMetaObject(trace.into())),
            None => PeerRequestOptions::no_options(),
        };
        let request = ClientRequest::CompleteRequest(CompleteRequest::new(params));
        self.passthrough("completion/complete", |peer| async move {
            peer.send_request_with_option(request, options).await?.await_response().await
        })
        .await
    }

    #[allow(deprecated)]
    async fn set_log_level(&self, level: &str) -> Result<(), ProviderError> {
        let level: LoggingLevel = serde_json::from_value(Value::String(level.to_string()))
            .map_err(|e| ProviderError::InvalidArguments(format!("`{level}` is not a log level: {e}")))?;
        *self.inner.log_level.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(level);
        // 2026-07-28 has no `logging/setLevel` (a request names its log level in its
        // envelope): the level reaches the connections that speak an earlier revision, the
        // provider's own when it does and the `initialize` ones beside it.
        let own = self.conn()?;
        let mut targets: Vec<Arc<Conn>> =
            self.inner.companion.lock().await.conns.values().map(|c| c.conn.clone()).collect();
        if !own.stateless {
            targets.insert(0, own);
        }
        let meta = axp_provider_api::REQUEST_META.try_with(Value::clone).ok();
        for conn in targets {
            if conn.dead.is_cancelled() || conn.peer.peer_info().is_some_and(|info| info.capabilities.logging.is_none())
            {
                continue;
            }
            let params = SetLevelRequestParams::new(level);
            self.passthrough_on::<_, Value, _, _>(conn, meta.clone(), "logging/setLevel", |peer| async move {
                peer.set_level(params).await
            })
            .await?;
        }
        Ok(())
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
