//! What arrives from the server without being asked, and where it goes: progress notifications
//! routed by token to the sink of the call that owns them (in order, early arrivals adopted),
//! server logs to `tracing` and out as events, the server's requests of the client (sampling,
//! elicitation, roots) to the gateway's relay with the calls then in flight, resource and prompt changes out as events, tool `list_changed` to the supervisor; and the guards that unregister a
//! call's route and send `notifications/cancelled` for a call abandoned half-way.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_protocol::methods::JobEventKind;
use rmcp::ClientHandler;
use rmcp::model::{
    CancelledNotificationParam, ClientConfig, ProgressNotificationParam, ProgressToken, RequestId,
    ResourceUpdatedNotificationParam,
};
// MCP logging is deprecated by SEP-2577 (protocol 2026-07-28), but the servers people run today
// (2025-06-18 and 2025-11-25) still send it, so it is handled.
use rmcp::ErrorData as McpError;
#[allow(deprecated)]
use rmcp::model::{CreateMessageRequestParams, CreateMessageResult, ListRootsResult};
use rmcp::model::{ElicitRequestParams, ElicitResult};
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleClient};
use tokio::sync::{broadcast, mpsc};

use super::config::ClientAsks;
use crate::{ClientAsk, JobSink, ProviderEvent, ProviderId, RelayLink};

/// Where progress notifications go: the sink of the call that owns the token.
#[derive(Default)]
pub(super) struct ProgressRouter {
    pub(super) state: Mutex<RouterState>,
}

#[derive(Default)]
pub(super) struct RouterState {
    pub(super) routes: HashMap<ProgressToken, Route>,
    /// Notifications that arrived before their call registered (the request is queued before
    /// the handle is returned, so a fast server can win that race). Bounded.
    pub(super) orphans: VecDeque<ProgressNotificationParam>,
}

pub(super) struct Route {
    pub(super) sink: JobSink,
    pub(super) last: Option<f64>,
}

pub(super) const MAX_ORPHANS: usize = 64;

impl Route {
    pub(super) fn deliver(&mut self, p: ProgressNotificationParam) {
        if self.last.is_some_and(|last| p.progress <= last) {
            return;
        }
        self.last = Some(p.progress);
        self.sink.emit(JobEventKind::Progress { progress: p.progress, total: p.total, message: p.message });
    }
}

impl ProgressRouter {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, RouterState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn register(self: &Arc<Self>, token: ProgressToken, sink: JobSink) -> RouteGuard {
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

    pub(super) fn dispatch(&self, p: ProgressNotificationParam) {
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
pub(super) struct RouteGuard {
    pub(super) router: Arc<ProgressRouter>,
    pub(super) token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.router.lock().routes.remove(&self.token);
    }
}

/// Sends `notifications/cancelled` if a call's future is dropped before its answer.
pub(super) struct AbandonGuard {
    pub(super) peer: Peer<RoleClient>,
    pub(super) id: Option<RequestId>,
}

impl AbandonGuard {
    pub(super) fn disarm(&mut self) -> Option<RequestId> {
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

pub(super) async fn send_cancelled(peer: &Peer<RoleClient>, id: RequestId, reason: &str) {
    let params = CancelledNotificationParam::new(Some(id), Some(reason.to_string()));
    // Bounded: a wedged transport must not hold up the caller's error.
    let _ = tokio::time::timeout(Duration::from_secs(2), peer.notify_cancelled(params)).await;
}

/// The calls to this server in flight, by their `ToolCall::meta`: a request the server makes of
/// the client belongs to one of them, and the gateway decides whose client that is.
#[derive(Default)]
pub(super) struct InFlight {
    calls: Mutex<HashMap<u64, serde_json::Value>>,
    next: std::sync::atomic::AtomicU64,
}

impl InFlight {
    /// Records a call until the guard is dropped.
    pub(super) fn enter(self: &Arc<Self>, meta: serde_json::Value) -> InFlightGuard {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, meta);
        InFlightGuard { calls: self.clone(), id }
    }

    fn metas(&self) -> Vec<serde_json::Value> {
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values().cloned().collect()
    }
}

/// Removes a call from [`InFlight`] when it ends, however it ends.
pub(super) struct InFlightGuard {
    calls: Arc<InFlight>,
    id: u64,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.calls.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.id);
    }
}

/// The rmcp client handler: routes notifications, and relays the server's requests of the
/// client (sampling, elicitation, roots) through the gateway to the client whose call caused
/// them, if the operator allows that kind for this server.
pub(super) struct Handler {
    pub(super) info: ClientConfig,
    pub(super) provider: ProviderId,
    pub(super) progress: Arc<ProgressRouter>,
    pub(super) relist: mpsc::UnboundedSender<()>,
    /// The provider's events: list changes, resource updates and logs go out here.
    pub(super) events: broadcast::Sender<ProviderEvent>,
    pub(super) inflight: Arc<InFlight>,
    pub(super) asks: ClientAsks,
    pub(super) relay: RelayLink,
}

impl Handler {
    /// Relays one request of the client and reads the answer as `T`.
    async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<T, McpError> {
        if !self.asks.allows(method) {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("the gateway's operator does not let server `{}` use `{method}`", self.provider),
                None,
            ));
        }
        let Some(relay) = self.relay.get() else {
            return Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("no client is attached to relay `{method}` to"),
                None,
            ));
        };
        let ask = ClientAsk { method: method.to_string(), params, during: self.inflight.metas(), key: None };
        let answer = relay.ask(&self.provider, ask).await.map_err(|e| {
            McpError::new(rmcp::model::ErrorCode(i32::try_from(e.code).unwrap_or(-32603)), e.message, e.data)
        })?;
        serde_json::from_value(answer).map_err(|e| {
            McpError::new(
                rmcp::model::ErrorCode::INTERNAL_ERROR,
                format!("the client's answer to `{method}` cannot be read: {e}"),
                None,
            )
        })
    }
}

/// The capabilities declared to the server on the client's behalf: only those the operator
/// allows, so a server hides what it could not use.
pub(super) fn client_capabilities(asks: ClientAsks) -> rmcp::model::ClientCapabilities {
    let mut caps = serde_json::Map::new();
    if asks.sampling {
        caps.insert("sampling".into(), serde_json::json!({}));
    }
    if asks.elicitation {
        caps.insert("elicitation".into(), serde_json::json!({"form": {}, "url": {}}));
    }
    if asks.roots {
        caps.insert("roots".into(), serde_json::json!({}));
    }
    serde_json::from_value(serde_json::Value::Object(caps)).unwrap_or_default()
}

impl ClientHandler for Handler {
    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let params = serde_json::to_value(params).unwrap_or_default();
        self.ask("sampling/createMessage", params).await
    }

    #[allow(deprecated)]
    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, McpError> {
        self.ask("roots/list", serde_json::json!({})).await
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let params = serde_json::to_value(params).unwrap_or_default();
        self.ask("elicitation/create", params).await
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        self.progress.dispatch(params);
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let provider = self.provider.as_str();
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
        let level = serde_json::to_value(params.level).ok().and_then(|v| v.as_str().map(str::to_string));
        let _ = self.events.send(ProviderEvent::Log {
            level: level.unwrap_or_else(|| "info".into()),
            logger: params.logger,
            data: params.data,
        });
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.relist.send(());
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(ProviderEvent::ResourcesChanged);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.events.send(ProviderEvent::PromptsChanged);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.events.send(ProviderEvent::ResourceUpdated { uri: params.uri });
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axp_protocol::methods::JobEventKind;

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
