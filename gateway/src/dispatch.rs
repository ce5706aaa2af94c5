//! The dispatcher: one place where every JSON-RPC request from any transport (HTTP, SSE, stdio)
//! is authenticated, authorised and routed to the registry, sessions or jobs. Both faces live
//! here — AXP's methods (`session.*`, `axp.index`, `axp.describe`, `job.*`) and MCP's
//! (`initialize`, `ping`, `tools/list`, `tools/call`, cancellation) — so they share one set of
//! checks. Transports only frame bytes; they never decide anything.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_audit::{AuditLog, Kind, digest_json};
use axp_protocol::jsonrpc::{Id, Incoming, Notification, Request, Response};
use axp_protocol::methods::{
    CommandSpec, DescribeParams, IndexParams, JobAttachParams, JobEventKind, JobRef, JobResizeParams, JobSignalParams,
    JobStartParams, JobWriteParams, SessionOpenParams,
};
use axp_protocol::{Capability, ErrorCode, MCP_PROTOCOL_VERSIONS, RpcError};
use axp_providers::{ProcessPolicy, ProcessSpec};
use axp_store::JobRecord;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::jobs::{Jobs, Work, outcome, resolve_cwd};
use crate::metrics::Metrics;
use crate::registry::{Registry, unknown_tool};
use crate::session::{Session, Sessions, unknown_session};

/// Operator options the dispatcher needs.
#[derive(Debug, Clone)]
pub struct Options {
    pub inline_tools_max: usize,
    /// Extra read-only paths every sandboxed command sees (interpreters outside /usr).
    pub extra_read: Vec<std::path::PathBuf>,
}

/// A message to push to the client while a request runs (progress, job events), with the SSE
/// event id that lets the client resume after it.
#[derive(Debug, Clone)]
pub struct Push {
    pub event_id: Option<String>,
    pub message: Value,
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
    pub operator: Option<Arc<crate::operators::Operator>>,
}

impl Ctx {
    pub fn opened_session(&self) -> Option<String> {
        self.opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

pub struct Gateway {
    pub registry: Registry,
    pub sessions: Sessions,
    pub jobs: Jobs,
    pub metrics: Arc<Metrics>,
    /// Server-wide notifications (`notifications/tools/list_changed`) for every connected client.
    pub notify: broadcast::Sender<Value>,
    pub options: Options,
    pub audit: AuditLog,
    /// The registration lint every published tool passes.
    pub admission: crate::admission::Admission,
    /// MCP request ids of running `tools/call`s, so `notifications/cancelled` finds their job.
    inflight: Mutex<HashMap<(String, String), String>>,
    /// Operators, approvals and quotas (`guard.rs`).
    pub guard: crate::guard::Guard,
    /// This gateway, for tasks that outlive a request (code-mode's SDK sockets); see [`Gateway::shared`].
    pub(crate) me: std::sync::Weak<Gateway>,
}

const META_TOOLS: [&str; 3] = ["axp_index", "axp_describe", "axp_call"];

impl Gateway {
    pub fn new(
        registry: Registry,
        sessions: Sessions,
        jobs: Jobs,
        metrics: Arc<Metrics>,
        options: Options,
        audit: AuditLog,
        admission: crate::admission::Admission,
    ) -> Self {
        let (notify, _) = broadcast::channel(64);
        Self {
            registry,
            sessions,
            jobs,
            metrics,
            notify,
            options,
            audit,
            admission,
            inflight: Mutex::new(HashMap::new()),
            guard: crate::guard::Guard::default(),
            me: std::sync::Weak::new(),
        }
    }

    pub fn with_guard(mut self, guard: crate::guard::Guard) -> Self {
        self.guard = guard;
        self
    }

    /// Opens a session for the request's operator, within that operator's ceiling and tiers.
    fn open_for(
        &self,
        ctx: &Ctx,
        params: SessionOpenParams,
        id_is_bearer: bool,
    ) -> Result<axp_protocol::methods::SessionOpenResult, RpcError> {
        let op = ctx.operator.clone().ok_or_else(|| crate::operators::operator_required("opening a session"))?;
        op.check_tier(params.sandbox_tier, self.sessions.tiers().default)?;
        let r = self.sessions.open_as(params, id_is_bearer, op.ceiling.as_ref().map(|c| (op.name.as_str(), c)))?;
        if id_is_bearer {
            // Sessions opened implicitly (MCP `initialize`, stateless requests) are audited here,
            // synchronously: these paths are not async, and an open is rare (once per client).
            let detail = json!({
                "workspace": r.workspace, "tier": r.granted_tier, "capabilities": r.capabilities,
                "via": "mcp", "operator": op.name,
            });
            let append = || self.audit.append(Kind::SessionOpen, Some(&r.session_id), "gateway", detail);
            let written = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(append),
                _ => append(),
            };
            written.map_err(|e| crate::util::internal("writing the audit log", e))?;
        }
        Ok(r)
    }

    /// The gateway behind an `Arc` that knows itself (code-mode serves SDK calls from tasks of
    /// its own).
    pub fn shared(mut self) -> Arc<Self> {
        Arc::new_cyclic(|me| {
            self.me = me.clone();
            self
        })
    }

    /// Tells every connected client that the tool list changed.
    pub fn tools_changed(&self) {
        self.metrics.list_changed_sent.inc();
        let _ = self.notify.send(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
    }

    /// Handles one message; `None` for notifications and responses (nothing to answer).
    pub async fn handle(&self, msg: Incoming, ctx: &Ctx) -> Option<Response> {
        match msg {
            Incoming::Request(req) => {
                self.metrics.requests.inc();
                let id = req.id.clone();
                let method = req.method.clone();
                let r = self.call(req, ctx).await;
                if let Err(e) = &r {
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
            Incoming::Notification(n) => {
                self.notification(n, ctx);
                None
            }
            Incoming::Response(_) => None,
        }
    }

    fn notification(&self, n: Notification, ctx: &Ctx) {
        if n.method == "notifications/cancelled" {
            let req_id = n.params.as_ref().and_then(|p| p.get("requestId")).map(id_key);
            if let (Some(sid), Some(rid)) = (ctx.session_id.clone().or_else(|| ctx.opened_session()), req_id) {
                let job = self.inflight_lock().get(&(sid, rid)).cloned();
                if let Some(job) = job {
                    self.jobs.cancel(&job);
                }
            }
        }
    }

    async fn call(&self, req: Request, ctx: &Ctx) -> Result<Value, RpcError> {
        let p = req.params.clone().unwrap_or(Value::Object(Map::new()));
        if matches!(
            req.method.as_str(),
            "initialize" | "tools/list" | "tools/call" | "axp.index" | "axp.describe" | "job.start"
        ) {
            // Right after start-up, the first requests that read the catalog wait (a bounded
            // while) for servers still starting, so a client that connects at once sees them.
            self.registry.settle().await;
        }
        match req.method.as_str() {
            "ping" => Ok(json!({})),
            "initialize" => self.initialize(&p, ctx),
            "tools/list" => self.tools_list(ctx),
            "tools/call" => self.tools_call(&req.id, &p, ctx).await,
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
            "job.approve" | "job.deny" | "job.pending" | "cap.revoke" => {
                crate::guard::call(self, &req.method, &p).await
            }
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
                crate::pty::check_size(r.rows, r.cols).map_err(RpcError::invalid_params)?;
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
            m if m.starts_with("notifications/") => {
                Err(RpcError::invalid_request(format!("`{m}` is a notification; send it without an `id`")))
            }
            m => Err(RpcError::method_not_found(m)),
        }
    }

    fn inflight_lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.inflight.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The session a request names (param or header), authenticated.
    fn session(&self, p: &Value, ctx: &Ctx) -> Result<Arc<Session>, RpcError> {
        let id = p
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| ctx.session_id.clone())
            .or_else(|| ctx.opened_session());
        let token = p.get("cap_token").and_then(Value::as_str).map(str::to_string).or_else(|| ctx.token.clone());
        if id.is_none() && token.is_none() {
            return Err(RpcError::new(
                ErrorCode::UnknownSession,
                "this method needs a session: open one with `session.open` (or MCP `initialize`) and send its token as `cap_token` or the `Axp-Capability` header",
            ));
        }
        self.sessions.authenticate(id.as_deref(), token.as_deref())
    }

    /// Like [`Gateway::session`], but a request without any session gets a fresh session with
    /// the operator's default profile (MCP's stateless mode).
    fn session_or_default(&self, p: &Value, ctx: &Ctx) -> Result<Arc<Session>, RpcError> {
        let named = p.get("session_id").is_some()
            || p.get("cap_token").is_some()
            || ctx.session_id.is_some()
            || ctx.token.is_some()
            || ctx.opened_session().is_some();
        if named {
            return self.session(p, ctx);
        }
        let params = SessionOpenParams { workspace: None, sandbox_tier: None, capabilities: None, ttl_s: Some(600) };
        let r = self.open_for(ctx, params, true)?;
        *ctx.opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r.session_id.clone());
        self.sessions.authenticate(Some(&r.session_id), Some(&r.cap_token))
    }

    fn initialize(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let asked = p.get("protocolVersion").and_then(Value::as_str).unwrap_or(MCP_PROTOCOL_VERSIONS[0]);
        let version = if MCP_PROTOCOL_VERSIONS.contains(&asked) { asked } else { MCP_PROTOCOL_VERSIONS[0] };
        // Over stdio the connection already has its session; over HTTP each initialize opens one.
        let existing = ctx.session_id.clone().or_else(|| ctx.opened_session());
        let session = match existing.and_then(|id| self.sessions.authenticate(Some(&id), ctx.token.as_deref()).ok()) {
            Some(s) => s,
            None => {
                let params = SessionOpenParams { workspace: None, sandbox_tier: None, capabilities: None, ttl_s: None };
                let r = self.open_for(ctx, params, true)?;
                self.metrics.sessions_opened.inc();
                *ctx.opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r.session_id.clone());
                self.sessions.authenticate(Some(&r.session_id), Some(&r.cap_token))?
            }
        };
        Ok(json!({
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "axp", "title": "AXP gateway", "version": env!("CARGO_PKG_VERSION")},
            "instructions": format!(
                "AXP gateway. Tools are named <provider>__<tool>. Sandbox tier: {}. Large catalogs are reached through axp_index (search), axp_describe (schema) and axp_call.",
                session.tier
            ),
        }))
    }

    fn tools_list(&self, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(&Value::Null, ctx)?;
        let entries = self.registry.entries(&|n| s.caps.allows_tool(n));
        if entries.len() <= self.options.inline_tools_max {
            let tools: Vec<Value> = entries
                .iter()
                .map(|(e, available)| {
                    let mut t = json!({
                        "name": e.name,
                        "description": if *available { e.spec.description.clone() } else { format!("[unavailable] {}", e.spec.description) },
                        "inputSchema": e.spec.input_schema,
                    });
                    if let Some(title) = &e.spec.title {
                        t["title"] = json!(title);
                    }
                    if let Some(o) = &e.spec.output_schema {
                        t["outputSchema"] = o.clone();
                    }
                    if let Some(a) = &e.spec.annotations {
                        t["annotations"] = a.clone();
                    }
                    t
                })
                .collect();
            return Ok(json!({"tools": tools}));
        }
        Ok(json!({"tools": meta_tools(entries.len())}))
    }

    fn describe(&self, s: &Session, name: &str) -> Result<Value, RpcError> {
        if !s.caps.allows_tool(name) {
            return Err(denied(&format!("tool({name})"), "describe this tool"));
        }
        Ok(serde_json::to_value(self.registry.describe(name)?).unwrap_or_default())
    }

    async fn tools_call(&self, req_id: &Id, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let started = std::time::Instant::now();
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("`name` (a string) is required"))?;
        let mut arguments = match p.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(RpcError::invalid_params("`arguments` must be an object")),
        };
        let s = self.session_or_default(p, ctx)?;
        let mut name = name.to_string();
        match name.as_str() {
            "axp_index" => {
                let limit = arguments.get("limit").and_then(Value::as_u64).unwrap_or(20) as usize;
                let r = self.registry.index(
                    arguments.get("query").and_then(Value::as_str),
                    arguments.get("provider").and_then(Value::as_str),
                    limit.clamp(1, 200),
                    0,
                    true,
                    &|n| s.caps.allows_tool(n),
                );
                return Ok(text_result(&serde_json::to_string_pretty(&r).unwrap_or_default()));
            }
            "axp_describe" => {
                let n = arguments
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcError::invalid_params("`name` is required"))?;
                let d = self.describe(&s, n)?;
                return Ok(text_result(&serde_json::to_string_pretty(&d).unwrap_or_default()));
            }
            "axp_call" => {
                name = arguments
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| RpcError::invalid_params("`name` is required"))?
                    .to_string();
                arguments = match arguments.get("arguments") {
                    None | Some(Value::Null) => Map::new(),
                    Some(Value::Object(m)) => m.clone(),
                    Some(_) => {
                        return Err(RpcError::invalid_params("`arguments` must be an object"));
                    }
                };
            }
            _ => {}
        }
        let progress_token = p.get("_meta").and_then(|m| m.get("progressToken")).cloned();
        let spec = json!({"tool": name, "arguments": arguments, "origin": "mcp", "request_id": req_id});
        let digest = digest_json(&Value::Object(arguments.clone()));
        let job = self.start_tool_job(&s, &name, arguments, spec, None, None)?;
        let detail = json!({"tool": name, "args_sha256": digest, "job_id": job.id, "via": "tools/call"});
        let key = (s.id.clone(), id_key(&serde_json::to_value(req_id).unwrap_or_default()));
        self.inflight_lock().insert(key.clone(), job.id.clone());
        // The audit record is written (and, by default, fsynced) while the provider works: one
        // yield first lets the job's task send the call, so the record's write follows the
        // dispatch instead of delaying it. The reply still waits for both, so no result is
        // acknowledged before its record is durable; and a call that a crash cuts short between
        // the two is still on record, as the job row inserted before dispatch (`lost` after
        // the restart).
        let audited = async {
            tokio::task::yield_now().await;
            self.audit(Kind::ToolCall, Some(&s.id), detail).await
        };
        let (audited, result) = tokio::join!(audited, self.follow(&job, ctx, progress_token));
        self.inflight_lock().remove(&key);
        audited?;
        let reply = result.map(|o| serde_json::to_value(o).unwrap_or_default());
        // A parked job's wait for its operator is neither part: it has no provider time until
        // it ran, and then the wait would count as the gateway's.
        if job.state != axp_protocol::methods::JobState::AwaitingApproval
            && let Some((provider, times)) = self.jobs.provider_time(&job.id)
        {
            times.gateway.observe(started.elapsed().saturating_sub(provider));
        }
        reply
    }

    /// Waits for a job to end, pushing its progress to the client as it comes; returns its result.
    async fn follow(
        &self,
        job: &JobRecord,
        ctx: &Ctx,
        progress_token: Option<Value>,
    ) -> Result<axp_protocol::ToolOutput, RpcError> {
        let mut seq = 0u64;
        let mut tail = Vec::new();
        loop {
            let batch = self.jobs.attach(job, seq, Duration::from_secs(30), 1000).await?;
            for e in &batch.events {
                if let (Some(push), Some(token), JobEventKind::Progress { progress, total, message }) =
                    (&ctx.push, &progress_token, &e.kind)
                {
                    let mut params = json!({"progressToken": token, "progress": progress});
                    if let Some(t) = total {
                        params["total"] = json!(t);
                    }
                    if let Some(m) = message {
                        params["message"] = json!(m);
                    }
                    let _ = push.send(Push {
                        event_id: Some(format!("{}:{}", job.id, e.seq)),
                        message: json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}),
                    });
                }
                if matches!(e.kind, JobEventKind::Result { .. } | JobEventKind::Exit { .. }) {
                    tail.push(e.clone());
                }
            }
            seq = batch.next_seq;
            if batch.done {
                break;
            }
        }
        outcome(&tail).unwrap_or_else(|| Err(RpcError::internal("the job ended without an exit event")))
    }

    fn start_tool_job(
        &self,
        s: &Session,
        name: &str,
        arguments: Map<String, Value>,
        spec: Value,
        idempotency_key: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<JobRecord, RpcError> {
        let resolved = self.ready_tool(s, name, &arguments)?;
        self.guard.quotas.admit(&s.id, || self.jobs.live_count(&s.id))?;
        if self.guard.approvals.required(name, resolved.entry.provider.as_str(), &resolved.entry.spec) {
            return crate::guard::park(self, s, name, arguments, idempotency_key, timeout, spec);
        }
        let (job, _) = self.jobs.start(
            &s.id,
            "tool",
            spec,
            idempotency_key,
            timeout,
            Work::Tool { resolved: Box::new(resolved), arguments, cwd: Some(s.workspace.clone()) },
        )?;
        Ok(job)
    }

    /// A tool the session may call, available and given valid arguments.
    pub(crate) fn ready_tool(
        &self,
        s: &Session,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<crate::registry::Resolved, RpcError> {
        if !s.caps.allows_tool(name) {
            return Err(denied(&format!("tool({name})"), &format!("call `{name}`")));
        }
        let resolved = self.registry.resolve(name).ok_or_else(|| unknown_tool(&self.registry, name))?;
        if !resolved.available {
            return Err(RpcError::new(
                ErrorCode::ProviderUnavailable,
                format!(
                    "provider `{}` is unavailable ({}); its tools come back when it restarts",
                    resolved.entry.provider,
                    resolved.reason.clone().unwrap_or_else(|| "down".into())
                ),
            ));
        }
        self.registry.validate(&resolved.entry, &Value::Object(arguments.clone()))?;
        Ok(resolved)
    }

    async fn job_start(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session(p, ctx)?;
        let params: JobStartParams = params(p)?;
        let timeout = params.timeout_s.map(Duration::from_secs);
        let given =
            [params.command.is_some(), params.code.is_some(), params.tool.is_some()].iter().filter(|x| **x).count();
        if given != 1 {
            return Err(RpcError::invalid_params("give exactly one of `command`, `code` or `tool`"));
        }
        if params.pty.is_some() && params.command.is_none() {
            return Err(RpcError::invalid_params("`pty` goes with `command` (a terminal for a program you start)"));
        }
        let job = if let Some(tool) = &params.tool {
            let arguments = params.arguments.clone().unwrap_or_default();
            let spec = json!({"tool": tool, "arguments": arguments, "origin": "axp"});
            let digest = digest_json(&Value::Object(arguments.clone()));
            let job = self.start_tool_job(&s, tool, arguments, spec, params.idempotency_key.clone(), timeout)?;
            let detail = json!({"tool": tool, "args_sha256": digest, "job_id": job.id, "via": "job.start"});
            self.audit(Kind::ToolCall, Some(&s.id), detail).await?;
            job
        } else if let Some(command) = &params.command {
            let job = self.start_command(&s, command, &params, timeout)?;
            self.audit(
                Kind::Command,
                Some(&s.id),
                json!({"job_id": job.id, "command": job.spec.get("command"), "cwd": job.spec.get("cwd")}),
            )
            .await?;
            job
        } else if let Some(code) = &params.code {
            let presented =
                p.get("cap_token").and_then(Value::as_str).map(str::to_string).or_else(|| ctx.token.clone());
            if !s.caps.allows_spawn() {
                return Err(denied("proc.spawn", "run a program"));
            }
            self.guard.quotas.admit(&s.id, || self.jobs.live_count(&s.id))?;
            let job = crate::codemode::start(self, &s, presented.as_deref(), code, &params, timeout)?;
            self.audit(
                Kind::Command,
                Some(&s.id),
                json!({"job_id": job.id, "code": job.spec.get("code"), "cwd": job.spec.get("cwd")}),
            )
            .await?;
            job
        } else {
            return Err(RpcError::invalid_params("give exactly one of `command`, `code` or `tool`"));
        };
        if params.wait == Some(true) {
            let out = self.follow(&job, ctx, None).await?;
            return Ok(json!({"job_id": job.id, "result": out}));
        }
        Ok(json!({"job_id": job.id, "state": job.state}))
    }

    fn start_command(
        &self,
        s: &Session,
        command: &CommandSpec,
        params: &JobStartParams,
        timeout: Option<Duration>,
    ) -> Result<JobRecord, RpcError> {
        self.guard.quotas.admit(&s.id, || self.jobs.live_count(&s.id))?;
        let argv = match command {
            CommandSpec::Argv(v) if !v.is_empty() => v.clone(),
            CommandSpec::Argv(_) => {
                return Err(RpcError::invalid_params("`command` must not be empty"));
            }
            CommandSpec::Shell(sh) => vec!["/bin/sh".into(), "-c".into(), sh.clone()],
        };
        let spec = self.command_spec(s, argv.clone(), params)?;
        let launcher = self.sessions.tiers().launcher(s.tier)?;
        let mut record = json!({"command": argv, "cwd": spec.cwd, "origin": "axp"});
        let work = match &params.pty {
            None => Work::Command { spec, launcher },
            Some(pty) => {
                if !s.caps.allows_pty() {
                    return Err(denied("pty.open", "give a job a terminal"));
                }
                crate::pty::check_size(pty.rows, pty.cols).map_err(RpcError::invalid_params)?;
                record["pty"] = json!({"rows": pty.rows, "cols": pty.cols});
                Work::Pty { spec, launcher, rows: pty.rows, cols: pty.cols }
            }
        };
        let (job, _) = self.jobs.start(&s.id, "command", record, params.idempotency_key.clone(), timeout, work)?;
        Ok(job)
    }

    /// The process of a command or code-mode job: `argv` in the session's workspace (or a `cwd`
    /// inside it), with the session's environment and sandbox policy. Needs `proc.spawn`.
    pub(crate) fn command_spec(
        &self,
        s: &Session,
        argv: Vec<String>,
        params: &JobStartParams,
    ) -> Result<ProcessSpec, RpcError> {
        if !s.caps.allows_spawn() {
            return Err(denied("proc.spawn", "start a command"));
        }
        let asked = resolve_cwd(&s.workspace, params.cwd.as_deref());
        // Resolved, like a grant: a `cwd` through a symlink is where the symlink points.
        let cwd = crate::grants::resolve_path(&asked);
        let cwd_str = asked.to_string_lossy();
        if cwd_str.split('/').any(|c| c == "..")
            || !axp_protocol::capability::path_within(
                &cwd.to_string_lossy(),
                &crate::grants::resolve_path(&s.workspace).to_string_lossy(),
            )
        {
            return Err(RpcError::new(
                ErrorCode::CapabilityDenied,
                format!("cwd `{cwd_str}` is outside the session's workspace `{}`", s.workspace.display()),
            ));
        }
        let mut env = base_env(&s.workspace);
        for (k, v) in params.env.iter().flatten() {
            let Some(v) = v.as_str() else {
                return Err(RpcError::invalid_params(format!("env `{k}` must be a string")));
            };
            env.insert(k.clone(), v.to_string());
        }
        Ok(ProcessSpec {
            program: argv[0].clone(),
            args: argv[1..].to_vec(),
            env,
            cwd: Some(cwd),
            policy: session_policy(s, &self.options.extra_read)?,
        })
    }

    pub fn job_status(&self, j: &JobRecord) -> Value {
        let mut v = json!({
            "job_id": j.id,
            "kind": j.kind,
            "state": j.state,
            "next_seq": self.jobs.next_seq(&j.id),
            "created_ms": j.created_ms,
        });
        if let Some(c) = j.exit_code {
            v["code"] = json!(c);
        }
        if let Some(s) = &j.signal {
            v["signal"] = json!(s);
        }
        if let Some(e) = &j.error {
            v["error"] = e.clone();
        }
        if let Some(t) = j.ended_ms {
            v["ended_ms"] = json!(t);
        }
        if let Some(t) = j.spec.get("tool") {
            v["tool"] = t.clone();
        }
        if let Some(c) = j.spec.get("command") {
            v["command"] = c.clone();
        }
        v
    }

    /// For a resumed SSE stream of a `tools/call`: the final response, if the job has ended.
    pub async fn final_response(&self, job: &JobRecord) -> Option<Response> {
        let req_id: Id = serde_json::from_value(job.spec.get("request_id")?.clone()).ok()?;
        let mut seq = 0;
        let mut tail = Vec::new();
        loop {
            let b = self.jobs.attach(job, seq, Duration::ZERO, 1000).await.ok()?;
            tail.extend(
                b.events
                    .into_iter()
                    .filter(|e| matches!(e.kind, JobEventKind::Result { .. } | JobEventKind::Exit { .. })),
            );
            if b.done || b.next_seq == seq {
                break;
            }
            seq = b.next_seq;
        }
        outcome(&tail).map(|r| Response::from_result(req_id, r.map(|o| serde_json::to_value(o).unwrap_or_default())))
    }

    /// The session of an HTTP `GET` resume, checked like any request.
    pub fn resume_session(&self, ctx: &Ctx) -> Result<Arc<Session>, RpcError> {
        if ctx.session_id.is_none() && ctx.token.is_none() {
            return Err(unknown_session("(none)"));
        }
        self.sessions.authenticate(ctx.session_id.as_deref(), ctx.token.as_deref())
    }

    /// Appends one audit record and waits until it is durable; a request whose record cannot
    /// be written fails rather than going unrecorded.
    pub async fn audit(&self, kind: Kind, session: Option<&str>, detail: Value) -> Result<(), RpcError> {
        if self.audit.durability() != axp_audit::Durability::EachAppend {
            // Only a `write(2)` into the page cache: not worth a hop to the blocking pool.
            self.audit
                .append(kind, session, "gateway", detail)
                .map_err(|e| crate::util::internal("writing the audit log", e))?;
            return Ok(());
        }
        let log = self.audit.clone();
        let session = session.map(str::to_string);
        tokio::task::spawn_blocking(move || log.append(kind, session.as_deref(), "gateway", detail))
            .await
            .map_err(|e| crate::util::internal("writing the audit log", e))?
            .map_err(|e| crate::util::internal("writing the audit log", e))?;
        Ok(())
    }
}

/// The policy a session's processes run under, compiled from its grants (never from the agent).
/// Every `fs.*` path is resolved again now and must still lie within what the session was
/// granted at open: a directory inside a grant that has since become a symlink is refused here,
/// and the policy carries only resolved paths, which the sandbox mounts without following links.
pub fn session_policy(s: &Session, extra_read: &[std::path::PathBuf]) -> Result<ProcessPolicy, RpcError> {
    let caps = crate::grants::resolve_within(&s.caps, &s.granted).map_err(|o| o.to_rpc("the session"))?;
    // The session's own egress proxy (its limits, its audit attribution; stopped at close).
    let mut policy =
        ProcessPolicy { net_scope: axp_providers::NetScope::Session(s.id.clone()), ..ProcessPolicy::default() };
    for c in caps.iter() {
        match c {
            Capability::FsRead(p) => policy.fs_read.push(p.into()),
            Capability::FsWrite(p) => policy.fs_write.push(p.into()),
            Capability::NetConnect { host, port } => {
                policy.net.push(port.map_or_else(|| host.clone(), |p| format!("{host}:{p}")))
            }
            _ => {}
        }
    }
    policy.fs_read.extend(extra_read.iter().cloned());
    Ok(policy)
}

/// The environment every command job starts from (nothing of the gateway's own leaks in).
pub fn base_env(workspace: &Path) -> std::collections::BTreeMap<String, String> {
    [
        ("PATH", "/usr/local/bin:/usr/bin:/bin".to_string()),
        ("HOME", workspace.to_string_lossy().into_owned()),
        ("LANG", "C.UTF-8".to_string()),
        ("TERM", "dumb".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

pub(crate) fn denied(grant: &str, what: &str) -> RpcError {
    RpcError::new(
        ErrorCode::CapabilityDenied,
        format!("the session's token does not grant `{grant}`, needed to {what}"),
    )
    .with_data("missing", grant)
}

fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

fn id_key(v: &Value) -> String {
    v.to_string()
}

fn meta_tools(total: usize) -> Vec<Value> {
    let _ = META_TOOLS;
    vec![
        json!({
            "name": "axp_index",
            "description": format!("Search the {total} tools this gateway offers; returns names with one-line descriptions and signatures. Use it first to find a tool."),
            "inputSchema": {"type": "object", "properties": {
                "query": {"type": "string", "description": "Words describing what you want to do"},
                "provider": {"type": "string", "description": "Only tools of this provider"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "At most this many results (default 20)"}
            }, "additionalProperties": false},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "axp_describe",
            "description": "Get the full description, TypeScript signature and JSON Schema of one tool found with axp_index.",
            "inputSchema": {"type": "object", "properties": {
                "name": {"type": "string", "description": "The tool's name as axp_index gave it"}
            }, "required": ["name"], "additionalProperties": false},
            "annotations": {"readOnlyHint": true}
        }),
        json!({
            "name": "axp_call",
            "description": "Call one tool by name with its arguments, as described by axp_describe.",
            "inputSchema": {"type": "object", "properties": {
                "name": {"type": "string", "description": "The tool's name"},
                "arguments": {"type": "object", "description": "Arguments matching the tool's schema"}
            }, "required": ["name"], "additionalProperties": false}
        }),
    ]
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

/// Like [`params`] for methods whose structs do not carry `session_id`/`cap_token`.
fn params_without_auth<T: DeserializeOwned>(p: &Value) -> Result<T, RpcError> {
    let mut p = p.clone();
    if let Value::Object(m) = &mut p {
        m.remove("session_id");
        m.remove("cap_token");
    }
    params(&p)
}
