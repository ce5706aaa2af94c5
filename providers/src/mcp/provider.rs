//! [`McpProvider`]: the MCP server behind the [`Provider`] trait. It owns starting the
//! supervisor, a call (its progress route, deadline, cancellation and the mapping of the answer
//! or error), the pass-through of resources and prompts, and shutdown.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axp_protocol::{RpcError, ToolCall, ToolOutput, ToolSpec};
#[allow(deprecated)]
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, CompleteRequestParams, GetPromptRequestParams, LoggingLevel,
    ReadResourceRequestParams, ServerCapabilities, ServerResult, SetLevelRequestParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use super::routing::{AbandonGuard, send_cancelled};
use super::session::Conn;
use super::supervisor::{Inner, supervise};
use super::{McpConfig, McpStatus};
use crate::{CancellationToken, JobSink, Launcher, Provider, ProviderError, ProviderEvent, ProviderId};

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
        let _waiting = conn.oversize.wait();
        // Served for a session outside a tool call: its server's requests of the client belong
        // to that session too.
        let _inflight = axp_provider_api::REQUEST_META.try_with(|m| conn.inflight.enter(m.clone())).ok();
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

    /// Whether the connected server declared a capability (`what` reads its
    /// `ServerCapabilities`); a server that did not is not asked, so a fleet of servers where
    /// only some offer resources lists cleanly instead of collecting -32601s.
    fn offers(&self, what: impl Fn(&ServerCapabilities) -> bool) -> Result<bool, ProviderError> {
        let conn = self.conn()?;
        Ok(conn.peer.peer_info().is_none_or(|info| what(&info.capabilities)))
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
        // Entered before the request is sent: a server may ask the client at once.
        let _inflight = conn.inflight.enter(call.meta.clone().unwrap_or_default());
        let timeout = crate::call_timeout(&call, self.inner.cfg.timeout);
        let tool = call.tool.clone();
        let params = CallToolRequestParams::new(call.tool).with_arguments(call.arguments);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = match conn.peer.send_request_with_option(request, PeerRequestOptions::no_options()).await {
            Ok(h) => h,
            Err(e) => return Err(self.map_error(&conn, e).await),
        };
        let _route = conn.progress.register(handle.progress_token.clone(), sink);
        let _waiting = conn.oversize.wait();
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
            () = answer_discarded(&conn) => {
                if let Some(id) = abandon.disarm() {
                    send_cancelled(&conn.peer, id, "the answer was too large").await;
                }
                return Err(too_large(&tool));
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

    async fn read_resource(&self, uri: &str) -> Result<Value, ProviderError> {
        if !self.offers(|c| c.resources.is_some())? {
            return Err(ProviderError::UnknownResource(uri.to_string()));
        }
        let params = ReadResourceRequestParams::new(uri);
        self.passthrough("resources/read", |peer| async move { peer.read_resource(params).await }).await
    }

    #[allow(deprecated)]
    async fn subscribe_resource(&self, uri: &str, on: bool) -> Result<(), ProviderError> {
        if !self.offers(|c| c.resources.as_ref().is_some_and(|r| r.subscribe == Some(true)))? {
            return Err(ProviderError::Unsupported(format!(
                "server `{}` does not support resource subscriptions (it did not declare `resources.subscribe`)",
                self.inner.cfg.id
            )));
        }
        let uri = uri.to_string();
        if on {
            let params = SubscribeRequestParams::new(uri);
            self.passthrough::<_, Value, _, _>(
                "resources/subscribe",
                |peer| async move { peer.subscribe(params).await },
            )
            .await?;
        } else {
            let params = UnsubscribeRequestParams::new(uri);
            self.passthrough::<_, Value, _, _>("resources/unsubscribe", |peer| async move {
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

    async fn get_prompt(&self, name: &str, arguments: serde_json::Map<String, Value>) -> Result<Value, ProviderError> {
        if !self.offers(|c| c.prompts.is_some())? {
            return Err(ProviderError::UnknownPrompt(name.to_string()));
        }
        let params = GetPromptRequestParams::new(name).with_arguments(arguments);
        self.passthrough("prompts/get", |peer| async move { peer.get_prompt(params).await }).await
    }

    async fn complete(&self, params: Value) -> Result<Value, ProviderError> {
        if !self.offers(|c| c.completions.is_some())? {
            return Ok(serde_json::json!({"completion": {"values": [], "hasMore": false}}));
        }
        let params: CompleteRequestParams = serde_json::from_value(params)
            .map_err(|e| ProviderError::InvalidArguments(format!("completion/complete: {e}")))?;
        self.passthrough("completion/complete", |peer| async move { peer.complete(params).await }).await
    }

    #[allow(deprecated)]
    async fn set_log_level(&self, level: &str) -> Result<(), ProviderError> {
        if !self.offers(|c| c.logging.is_some())? {
            return Ok(());
        }
        let level: LoggingLevel = serde_json::from_value(Value::String(level.to_string()))
            .map_err(|e| ProviderError::InvalidArguments(format!("`{level}` is not a log level: {e}")))?;
        let params = SetLevelRequestParams::new(level);
        self.passthrough::<_, Value, _, _>("logging/setLevel", |peer| async move { peer.set_level(params).await })
            .await?;
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
