//! The router: every JSON-RPC message from any transport (HTTP, SSE, stdio) comes in through
//! [`Gateway::handle`], which authenticates it, authorises it and sends it to its method. The
//! method table is here; the methods live beside it by face: `mcp` (initialize, tools/list,
//! tools/call and cancellation), `features` (resources, prompts, completion and logging,
//! multiplexed over every provider), `jobs` (`job.*`), `tasks` (MCP tasks, which are jobs),
//! `sessions` (which session a request speaks for). Both faces share one set of checks;
//! transports only frame bytes and never decide.

mod approvals;
mod console;
mod features;
mod jobs;
mod mcp;
pub mod revision;
mod sessions;
mod tasks;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_audit::Kind;
use axp_protocol::jsonrpc::{Incoming, Notification, Request, Response};
use axp_protocol::methods::{
    DescribeParams, IndexParams, JobAttachParams, JobRef, JobResizeParams, JobSignalParams, JobWriteParams,
    SessionOpenParams,
};
use axp_protocol::{ErrorCode, RpcError};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::gateway::Gateway;

/// A message to push to the client while a request runs (progress, job events), with the SSE
/// event id that lets the client resume after it.
#[derive(Debug, Clone)]
pub struct Push {
    pub event_id: Option<String>,
    pub message: Message,
}

/// A pushed message: a JSON value, or one already serialized (a replayed job event, passed on
/// as its log stores it rather than decoded and encoded again).
#[derive(Debug, Clone)]
pub enum Message {
    Json(Value),
    Text(String),
}

impl From<Value> for Message {
    fn from(v: Value) -> Self {
        Message::Json(v)
    }
}

impl Message {
    /// The message as JSON text.
    pub fn into_text(self) -> String {
        match self {
            Message::Json(v) => v.to_string(),
            Message::Text(t) => t,
        }
    }
}

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Message::Json(v) => v.fmt(f),
            Message::Text(t) => f.write_str(t),
        }
    }
}

/// Per-request context from the transport.
#[derive(Default)]
pub struct Ctx {
    /// `Mcp-Session-Id` header, or the stdio connection's session.
    pub session_id: Option<String>,
    /// `Axp-Capability` header.
    pub token: Option<String>,
    /// Where to push notifications while the request runs; `None` for plain JSON responses.
    pub push: Option<mpsc::UnboundedSender<Push>>,
    /// Set when the request opened a session (the transport returns it as `Mcp-Session-Id`).
    pub opened: Mutex<Option<String>>,
    /// The operator the transport authenticated (`Authorization: Bearer`, or the local one);
    /// `None` when operators are configured and the request carries no credential.
    pub operator: Option<Arc<crate::auth::operators::Operator>>,
    /// The `MCP-Protocol-Version` header, for transports that have one.
    pub protocol: Option<String>,
    /// The HTTP status the answer must carry when it is not 200 (the 2026-07-28 revision's
    /// 400 and 404), set by the router for the transport.
    pub status: Mutex<Option<u16>>,
    /// The W3C `traceparent` header and any `tracestate`, for transports that have headers (a
    /// `traceparent` in the request's `_meta` comes first; see `telemetry::incoming`).
    pub trace_header: Option<(String, Option<String>)>,
    /// The transport's name on the request's span (`http`, `stdio`, `sse`).
    pub transport: &'static str,
}

impl Ctx {
    pub fn opened_session(&self) -> Option<String> {
        self.opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The HTTP status the router chose for the answer, if not 200.
    pub fn http_status(&self) -> Option<u16> {
        *self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_status(&self, status: u16) {
        *self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(status);
    }
}

impl Gateway {
    /// Handles one message; `None` for notifications and responses (nothing to answer).
    pub async fn handle(&self, msg: Incoming, ctx: &Ctx) -> Option<Response> {
        match msg {
            Incoming::Request(req) => {
                // Each request is a span (with traces on), the child of the client's context.
                let header = ctx.trace_header.as_ref().map(|(p, s)| (p.as_str(), s.as_deref()));
                let remote = crate::telemetry::incoming(req.params.as_ref(), header);
                let span = crate::telemetry::trace_span!(
                    "request",
                    otel.kind = "server",
                    rpc.system = "jsonrpc",
                    rpc.method = %req.method,
                    axp.transport = ctx.transport,
                );
                crate::telemetry::within(remote, span, self.handle_request(req, ctx)).await
            }
            Incoming::Notification(n) => {
                self.notification(n, ctx);
                None
            }
            Incoming::Response(r) => {
                let session = ctx.session_id.clone().or_else(|| ctx.opened_session());
                self.client_answered(session.as_deref(), r);
                None
            }
        }
    }

    /// One request, to its answer (`None` when the client cancelled it).
    async fn handle_request(&self, mut req: Request, ctx: &Ctx) -> Option<Response> {
        self.metrics.requests.inc();
        let id = req.id.clone();
        let method = req.method.clone();
        let stateless = match revision::envelope(&req, ctx.protocol.as_deref()) {
            Ok(e) => e,
            Err(refused) => {
                ctx.set_status(refused.http_status);
                return Some(Response::err(id, refused.error));
            }
        };
        if let Some(envelope) = &stateless {
            if revision::removed(&method) {
                let refused = revision::not_found(&method);
                ctx.set_status(refused.http_status);
                return Some(Response::err(id, refused.error));
            }
            if let Some(p) = req.params.as_mut() {
                revision::strip_envelope(p);
            }
            if let Err(e) = self.stateless_session(envelope, ctx) {
                return Some(Response::err(id, e));
            }
        }
        let mut r = self.call(req, ctx).await;
        if stateless.is_some() {
            match &mut r {
                Ok(v) => revision::decorate(&method, v),
                Err(e) if e.code == ErrorCode::MethodNotFound.code() => ctx.set_status(404),
                Err(e) if [revision::MISSING_CLIENT_CAPABILITY, revision::HEADER_MISMATCH].contains(&e.code) => {
                    ctx.set_status(400)
                }
                Err(_) => {}
            }
        }
        if self.was_cancelled(&id, ctx) {
            // MCP: the receiver of `notifications/cancelled` sends no response.
            return None;
        }
        if let Err(e) = &r {
            crate::telemetry::failed(&tracing::Span::current(), &e.message);
            self.metrics.request_errors.inc();
            if e.kind() == Some(ErrorCode::CapabilityDenied) {
                let session = ctx.session_id.clone().or_else(|| ctx.opened_session());
                let detail = json!({"method": method, "missing": e.data.as_ref().and_then(|d| d.get("missing")), "reason": e.reason()});
                if let Err(ae) = self.audit(Kind::CapabilityDenied, session.as_deref(), detail).await {
                    return Some(Response::err(id, ae));
                }
            }
        }
        Some(Response::from_result(id, r))
    }

    fn notification(&self, n: Notification, ctx: &Ctx) {
        if n.method == "notifications/cancelled" {
            let req_id = n.params.as_ref().and_then(|p| p.get("requestId")).map(id_key);
            if let (Some(sid), Some(rid)) = (ctx.session_id.clone().or_else(|| ctx.opened_session()), req_id) {
                let key = (sid, rid);
                let job = self.inflight_lock().get(&key).cloned();
                if let Some(job) = job {
                    self.cancelled_lock().insert(key);
                    self.jobs.cancel(&job);
                }
            }
        }
    }

    /// Whether the client cancelled request `id` while it ran (forgetting it: ids are reused).
    fn was_cancelled(&self, id: &axp_protocol::jsonrpc::Id, ctx: &Ctx) -> bool {
        let Some(sid) = ctx.session_id.clone().or_else(|| ctx.opened_session()) else { return false };
        let key = (sid, id_key(&serde_json::to_value(id).unwrap_or_default()));
        self.cancelled_lock().remove(&key)
    }

    /// A 2026-07-28 request stands alone: it speaks for the session it names, or else for an
    /// implicit one opened for it, which remembers what the envelope says the client can do
    /// (a server's request of the client needs it) and at what level it wants logs.
    fn stateless_session(&self, envelope: &revision::Envelope, ctx: &Ctx) -> Result<(), RpcError> {
        let s = self.session_or_default(&Value::Null, ctx)?;
        self.remember_client(&s.id, envelope.client_capabilities.clone(), true);
        if let Some(rank) = envelope.log_level.as_deref().and_then(crate::gateway::listeners::level_rank) {
            self.listeners.set_level(s, rank);
        }
        Ok(())
    }

    /// `server/discover` (2026-07-28): the revisions spoken, what this gateway offers, who it is.
    fn discover(&self) -> Value {
        let info = json!({"name": "axp", "title": "AXP gateway", "version": env!("CARGO_PKG_VERSION")});
        json!({
            "supportedVersions": revision::supported_versions(),
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"listChanged": true, "subscribe": true},
                "prompts": {"listChanged": true},
                "completions": {},
            },
            "serverInfo": info,
            "instructions": "AXP gateway. Tools are named <provider>__<tool>; large catalogs are reached through axp_index, axp_describe and axp_call.",
            "_meta": {revision::META_SERVER_INFO: info},
        })
    }

    async fn call(&self, req: Request, ctx: &Ctx) -> Result<Value, RpcError> {
        let p = req.params.clone().unwrap_or(Value::Object(Map::new()));
        let m = req.method.as_str();
        if matches!(m, "initialize" | "tools/list" | "tools/call" | "axp.index" | "axp.describe" | "job.start")
            || ["resources/", "prompts/", "completion/", "logging/"].iter().any(|f| m.starts_with(f))
        {
            // Right after start-up, the first requests that read the catalog wait (a bounded
            // while) for servers still starting, so a client that connects at once sees them.
            self.registry.settle().await;
        }
        match req.method.as_str() {
            "ping" => Ok(json!({})),
            "server/discover" => Ok(self.discover()),
            "initialize" => self.initialize(&p, ctx),
            "tools/list" => self.tools_list(ctx),
            "tools/call" => self.tools_call(&req.id, &p, ctx).await,
            "resources/list" => self.resources_list(&p, ctx).await,
            "resources/templates/list" => self.resource_templates_list(&p, ctx).await,
            "resources/read" => self.resources_read(&p, ctx).await,
            "resources/subscribe" => self.resources_subscribe(&p, ctx, true).await,
            "resources/unsubscribe" => self.resources_subscribe(&p, ctx, false).await,
            "prompts/list" => self.prompts_list(&p, ctx).await,
            "prompts/get" => self.prompts_get(&p, ctx).await,
            "completion/complete" => self.complete(&p, ctx).await,
            "logging/setLevel" => self.set_log_level(&p, ctx).await,
            "session.open" => {
                let params: SessionOpenParams = params(&p)?;
                let r = self.open_for(ctx, params, false)?;
                self.metrics.sessions_opened.inc();
                self.audit(Kind::SessionOpen, Some(&r.session_id), json!({
                    "workspace": r.workspace, "tier": r.granted_tier, "capabilities": r.capabilities, "via": "session.open",
                    "operator": ctx.operator.as_ref().map(|o| o.name.clone()),
                }))
                .await?;
                *ctx.opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r.session_id.clone());
                Ok(serde_json::to_value(r).map_err(|e| crate::util::internal("encoding a session", e))?)
            }
            "session.close" => {
                let s = self.session(&p, ctx)?;
                self.sessions.close(&s.id)?;
                self.audit(Kind::SessionClose, Some(&s.id), json!({"token_root": s.token_root})).await?;
                Ok(json!({}))
            }
            "cap.attenuate" => {
                let parent = p
                    .get("cap_token")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| ctx.token.clone())
                    .ok_or_else(|| RpcError::invalid_params("`cap_token` (the parent token) is required"))?;
                let caps: Vec<String> = match p.get("capabilities") {
                    Some(v) => serde_json::from_value(v.clone())
                        .map_err(|_| RpcError::invalid_params("`capabilities` must be an array of strings"))?,
                    None => return Err(RpcError::invalid_params("`capabilities` is required")),
                };
                let ttl = p.get("ttl_s").and_then(Value::as_u64);
                let (child, parent_v) = self.sessions.attenuate(&parent, &caps, ttl)?;
                self.audit(
                    Kind::TokenAttenuate,
                    Some(&parent_v.session_id),
                    json!({"parent": parent_v.token_id, "capabilities": caps}),
                )
                .await?;
                Ok(json!({"cap_token": child, "capabilities": caps}))
            }
            "axp.index" => {
                let s = self.session_or_default(&p, ctx)?;
                let params: IndexParams = params_without_auth(&p)?;
                let limit = params.limit.unwrap_or(50).clamp(1, 500);
                let inline = self.registry.len() <= self.options.inline_tools_max;
                let r = self.registry.index(
                    params.query.as_deref(),
                    params.provider.as_deref(),
                    limit,
                    params.offset.unwrap_or(0),
                    inline,
                    &|n| s.caps.allows_tool(n),
                );
                Ok(serde_json::to_value(r).unwrap_or_default())
            }
            "axp.describe" => {
                let s = self.session_or_default(&p, ctx)?;
                let params: DescribeParams = params_without_auth(&p)?;
                self.describe(&s, &params.name)
            }
            "job.start" => self.job_start(&p, ctx).await,
            "job.approve" | "job.deny" | "job.pending" | "cap.revoke" => approvals::call(self, &req.method, &p).await,
            m if m.starts_with("console.") => console::call(self, m, &p).await,
            "job.attach" => {
                let s = self.session(&p, ctx)?;
                let a: JobAttachParams = params(&p)?;
                let job = self.jobs.get(&s.id, &a.job_id)?;
                let wait = Duration::from_millis(a.wait_ms.unwrap_or(0).min(60_000));
                let batch = self.jobs.attach(&job, a.from_seq, wait, a.limit.unwrap_or(1000)).await?;
                Ok(serde_json::to_value(batch).unwrap_or_default())
            }
            "job.status" => {
                let s = self.session(&p, ctx)?;
                let r: JobRef = params(&p)?;
                let job = self.jobs.get(&s.id, &r.job_id)?;
                Ok(self.job_status(&job))
            }
            "job.list" => {
                let s = self.session(&p, ctx)?;
                let jobs = self.jobs.list(&s.id)?;
                Ok(json!({"jobs": jobs.iter().map(|j| self.job_status(j)).collect::<Vec<_>>()}))
            }
            "job.cancel" => {
                let s = self.session(&p, ctx)?;
                let r: JobRef = params(&p)?;
                let job = self.jobs.get(&s.id, &r.job_id)?;
                let cancelled = self.jobs.cancel(&job.id);
                Ok(json!({"cancelled": cancelled}))
            }
            "job.signal" => {
                let s = self.session(&p, ctx)?;
                let r: JobSignalParams = params(&p)?;
                self.jobs.get(&s.id, &r.job_id)?;
                self.jobs.signal(&r.job_id, &r.signal)?;
                Ok(json!({}))
            }
            "job.resize" => {
                let s = self.session(&p, ctx)?;
                let r: JobResizeParams = params(&p)?;
                self.jobs.get(&s.id, &r.job_id)?;
                crate::execution::pty::check_size(r.rows, r.cols).map_err(RpcError::invalid_params)?;
                self.jobs.resize(&r.job_id, r.rows, r.cols)?;
                Ok(json!({}))
            }
            "job.write" => {
                let s = self.session(&p, ctx)?;
                let r: JobWriteParams = params(&p)?;
                self.jobs.get(&s.id, &r.job_id)?;
                self.jobs.write(&r.job_id, r.data.into_bytes(), r.eof).await?;
                Ok(json!({}))
            }
            m if m.starts_with("tasks/") => self.tasks_call(m, &p, ctx).await,
            m if m.starts_with("notifications/") => {
                Err(RpcError::invalid_request(format!("`{m}` is a notification; send it without an `id`")))
            }
            m => Err(RpcError::method_not_found(m)),
        }
    }
}

pub(crate) fn id_key(v: &Value) -> String {
    v.to_string()
}

/// Deserialises params, naming the offending field on failure (`-32602`).
pub fn params<T: DeserializeOwned>(p: &Value) -> Result<T, RpcError> {
    serde_path_to_error::deserialize(p.clone()).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let hint = crate::config::unknown_field_hint(&inner).map(|h| format!(" ({h})")).unwrap_or_default();
        let at = if path.is_empty() || path == "." { String::new() } else { format!("`{path}`: ") };
        RpcError::invalid_params(format!("invalid params: {at}{inner}{hint}")).with_data("pointer", path)
    })
}

/// A tool call's `arguments`: an object, or nothing (an empty one).
pub(crate) fn object_arguments(v: Option<&Value>) -> Result<Map<String, Value>, RpcError> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(RpcError::invalid_params("`arguments` must be an object")),
    }
}

/// Like [`params`] for methods whose structs do not carry `session_id`/`cap_token`.
fn params_without_auth<T: DeserializeOwned>(p: &Value) -> Result<T, RpcError> {
    let mut p = p.clone();
    if let Value::Object(m) = &mut p {
        m.remove("session_id");
        m.remove("cap_token");
    }
    params(&p)
}
