//! The MCP face: `initialize`, the adaptive `tools/list` (every tool inline up to
//! `inline_tools_max`, past it the three meta tools `axp_index`, `axp_describe`, `axp_call`),
//! `tools/call` as a job followed to its end with progress pushed to the client, and the final
//! response a resumed SSE stream replays.

use std::time::Duration;

use tokio::sync::mpsc;
use tracing::Instrument;

use axp_audit::{Kind, digest_json};
use axp_protocol::jsonrpc::{Id, Notification, Response};
use axp_protocol::methods::{JobEventKind, SessionOpenParams};
use axp_protocol::{MCP_PROTOCOL_VERSIONS, RpcError};
use axp_store::JobRecord;
use serde_json::{Map, Value, json};

use super::{Ctx, Push, id_key, object_arguments};
use crate::auth::session::{Session, denied};
use crate::execution::jobs::outcome;
use crate::gateway::Gateway;
use crate::gateway::relay::InputAsk;

const META_TOOLS: [&str; 3] = ["axp_index", "axp_describe", "axp_call"];

impl Gateway {
    pub fn initialize(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
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
        self.remember_client(&session.id, p.get("capabilities").cloned().unwrap_or_else(|| json!({})), false);
        Ok(json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {},
                "logging": {},
                "tasks": super::tasks::capability(),
            },
            "serverInfo": {"name": "axp", "title": "AXP gateway", "version": env!("CARGO_PKG_VERSION")},
            "instructions": format!(
                "AXP gateway. Tools are named <provider>__<tool>. Sandbox tier: {}. Large catalogs are reached through axp_index (search), axp_describe (schema) and axp_call.",
                session.tier
            ),
        }))
    }

    pub fn tools_list(&self, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(&Value::Null, ctx)?;
        let entries = self.registry.entries_in_server_order(&|n| s.caps.allows_tool(n));
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
                    if let Some(i) = &e.spec.icons {
                        t["icons"] = i.clone();
                    }
                    t["execution"] = super::tasks::listed_execution(e.spec.execution.as_ref());
                    if let Some(m) = &e.spec.meta {
                        t["_meta"] = m.clone();
                    }
                    t
                })
                .collect();
            return Ok(json!({"tools": tools}));
        }
        Ok(json!({"tools": meta_tools(entries.len())}))
    }

    pub fn describe(&self, s: &Session, name: &str) -> Result<Value, RpcError> {
        if !s.caps.allows_tool(name) {
            return Err(denied(&format!("tool({name})"), "describe this tool"));
        }
        Ok(serde_json::to_value(self.registry.describe(name)?).unwrap_or_default())
    }

    pub async fn tools_call(&self, req_id: &Id, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        if p.get("requestState").is_some() {
            return self.resume_call(p, ctx).await;
        }
        if self.wants_task(p, ctx) {
            // A task-augmented call (MCP tasks): the same job, answered at once (`tasks.rs`).
            return self.tools_call_task(p, ctx).await;
        }
        let started = std::time::Instant::now();
        let name = p
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("`name` (a string) is required"))?;
        let mut arguments = object_arguments(p.get("arguments"))?;
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
                arguments = object_arguments(arguments.get("arguments"))?;
            }
            _ => {}
        }
        // The call's span: the job it starts (and the provider call in it) are its children.
        let span = crate::telemetry::trace_span!("tool call", axp.tool = %name, axp.session = %s.id);
        let call = async {
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
            // A stateless (2026-07-28) client hears its server's requests of the client in an
            // `input_required` result of this call, so the call watches for them.
            let inputs = self.client_asks.is_stateless(&s.id).then(|| self.client_asks.watch(&job.id));
            let (audited, result) = tokio::join!(audited, self.follow_or_ask(&job, &name, ctx, progress_token, inputs));
            self.inflight_lock().remove(&key);
            audited?;
            let reply = result;
            // A parked job's wait for its operator is neither part: it has no provider time until
            // it ran, and then the wait would count as the gateway's.
            if job.state != axp_protocol::methods::JobState::AwaitingApproval
                && let Some((provider, times)) = self.jobs.provider_time(&job.id)
            {
                times.gateway.observe(started.elapsed().saturating_sub(provider));
            }
            reply
        };
        let reply = call.instrument(span.clone()).await;
        if let Err(e) = &reply {
            crate::telemetry::failed(&span, &e.message);
        }
        reply
    }

    /// Follows a call's job to its result; for a stateless client, until its server asks the
    /// client something first, which ends this round with an `input_required` result.
    async fn follow_or_ask(
        &self,
        job: &JobRecord,
        tool: &str,
        ctx: &Ctx,
        progress_token: Option<Value>,
        inputs: Option<mpsc::UnboundedReceiver<InputAsk>>,
    ) -> Result<Value, RpcError> {
        let to_value = |o: axp_protocol::ToolOutput| serde_json::to_value(o).unwrap_or_default();
        let Some(mut inputs) = inputs else {
            return self.follow(job, ctx, progress_token).await.map(to_value);
        };
        let followed = self.follow(job, ctx, progress_token);
        tokio::pin!(followed);
        let first = tokio::select! {
            r = &mut followed => {
                self.client_asks.unwatch(&job.id);
                return r.map(to_value);
            }
            Some(ask) = inputs.recv() => ask,
        };
        // A server that needs several answers asks for them back to back: those that arrive
        // within a moment go out in the same round, so the client answers them together.
        let mut asks = Vec::new();
        let mut next = Some(first);
        while let Some(ask) = next {
            asks.push((self.client_asks.key_for(&ask, &asks), ask));
            next = tokio::time::timeout(Duration::from_millis(100), inputs.recv()).await.ok().flatten();
        }
        Ok(self.input_required(job, tool, asks, inputs))
    }

    /// The `input_required` result of a round, parked until the client's retry.
    fn input_required(
        &self,
        job: &JobRecord,
        tool: &str,
        asks: Vec<(String, InputAsk)>,
        inputs: mpsc::UnboundedReceiver<InputAsk>,
    ) -> Value {
        let requests: Map<String, Value> =
            asks.iter().map(|(k, a)| (k.clone(), json!({"method": a.method, "params": a.params}))).collect();
        let state = self.client_asks.park(&job.id, tool, asks, inputs);
        json!({"resultType": "input_required", "inputRequests": requests, "requestState": state})
    }

    /// A stateless client's retry of a call with the answers to a round: each answer goes to the
    /// request waiting for it, and the same job is followed on. A request left unanswered is
    /// asked again; an answer that is not a result object is refused and the round kept.
    async fn resume_call(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let state = p.get("requestState").and_then(Value::as_str).ok_or_else(|| {
            RpcError::invalid_params("`requestState` must be the string an input_required result gave")
        })?;
        let responses = match p.get("inputResponses") {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "`inputResponses` must be an object of results keyed like the inputRequests",
                ));
            }
        };
        let tool = p.get("name").and_then(Value::as_str).unwrap_or_default();
        let Some(mut round) = self.client_asks.unpark(state) else {
            return Err(RpcError::invalid_params(
                "`requestState` is not one this gateway gave out, or its round has expired",
            ));
        };
        let bad = round.asks.iter().find(|(k, _)| responses.get(k).is_some_and(|v| !v.is_object()));
        if let Some((key, _)) = bad {
            let e = RpcError::invalid_params(format!("the answer under `{key}` is not a result object"));
            self.client_asks.repark(state, round);
            return Err(e);
        }
        if round.tool != tool {
            let e = RpcError::invalid_params(format!("this `requestState` belongs to a call of `{}`", round.tool));
            self.client_asks.repark(state, round);
            return Err(e);
        }
        let Some(job) = self.jobs.store().get_job(&round.job_id).ok().flatten() else {
            return Err(RpcError::internal("the call's job is gone"));
        };
        let mut missing = Vec::new();
        for (key, ask) in std::mem::take(&mut round.asks) {
            match responses.get(&key) {
                Some(v) => {
                    let _ = ask.answer.send(Ok(v.clone()));
                }
                None => missing.push((key, ask)),
            }
        }
        if !missing.is_empty() {
            return Ok(self.input_required(&job, &round.tool, missing, round.inputs));
        }
        let tool = round.tool.clone();
        self.follow_or_ask(&job, &tool, ctx, None, Some(round.inputs)).await
    }

    /// Waits for a job to end, pushing its progress to the client as it comes; returns its result.
    pub async fn follow(
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
                        message: Notification::new("notifications/progress", params).to_value().into(),
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
}

fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
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
            }, "required": ["name"], "additionalProperties": false},
            "execution": super::tasks::listed_execution(None)
        }),
    ]
}
