//! MCP tasks (the 2025-11-25 `tasks` utility) on AXP's jobs. Every `tools/call` already runs as
//! a durable job; a task-augmented call (`params.task`) starts that same job, is answered at
//! once with a `CreateTaskResult`, and the job's id is the task's id. `tasks/get`,
//! `tasks/list`, `tasks/result` and `tasks/cancel` read and steer the job, so a task lives
//! exactly as long and as durably as its job: it survives a client that goes away and a
//! gateway restart (a job the restart cut short is `lost`, reported as `failed`). Tasks are
//! bound to the session that created them; another session's task is not found. While a task
//! runs, its progress and, at its end, a `notifications/tasks/status` go to its session's
//! standing stream. This file decides nothing about who may call what: starting the job goes
//! through the same checks, approval and audit as a plain call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axp_audit::{Kind, digest_json};
use axp_protocol::jsonrpc::Notification;
use axp_protocol::methods::{JobEventKind, JobState};
use axp_protocol::{ErrorCode, RpcError};
use axp_store::JobRecord;
use serde_json::{Value, json};

use super::object_arguments;

use super::Ctx;
use crate::auth::session::Session;
use crate::gateway::{Gateway, Outbound};

/// The `_meta` key that ties a message to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// How often a client is asked to poll a task that is still working.
const POLL_INTERVAL_MS: u64 = 1000;
/// At most this many tasks per `tasks/list` page.
const PAGE: usize = 50;
/// How long `tasks/cancel` waits for the cancelled call to stop before it answers.
const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// What a `failed` task cut short by a gateway restart says.
const LOST: &str = "the gateway stopped while this task ran (it was killed or restarted), so the tool call's outcome \
                    is unknown: it may or may not have taken effect";

/// The `tasks` capability `initialize` declares: `tools/call` may be task-augmented, and
/// tasks can be listed and cancelled.
pub(super) fn capability() -> Value {
    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
}

/// A tool's `execution` as `tools/list` shows it: what its server declared, with AXP's own
/// `taskSupport`, which is always `"optional"`.
///
/// `taskSupport` says whether the *receiver* of a `tools/call` can run it as a task, and the
/// receiver a client talks to is the gateway. The gateway runs every call as a durable job
/// whether or not a task was asked for, so it can honestly offer any tool as a task: a missing
/// `taskSupport` (which the spec reads as `"forbidden"`) and a server's `"forbidden"` become
/// `"optional"`. The server's `"forbidden"` is still kept to: it gets a plain `tools/call`.
/// (The official TypeScript SDK stamps `"forbidden"` on every tool not written as a task, so
/// passing it on would hide tasks for most servers.) A server's `"required"` becomes
/// `"optional"` too: the gateway calls such a tool through a task upstream however the client
/// called it, so a client without tasks can use it as well, and passing `"required"` on would
/// hide it from every such client.
pub(super) fn listed_execution(declared: Option<&Value>) -> Value {
    let mut x = match declared {
        Some(Value::Object(m)) => Value::Object(m.clone()),
        _ => json!({}),
    };
    x["taskSupport"] = json!("optional");
    x
}

/// The task's status and the sentence that explains it, read from its job's record.
///
/// | job state | task status |
/// | --- | --- |
/// | `running` | `working` |
/// | `awaiting_approval` | `working` (an operator, not the requestor, must act: not `input_required`) |
/// | `exited`, code 0 | `completed` |
/// | `exited`, code 1 (the result has `isError`) | `failed` |
/// | `failed` (the call raised a JSON-RPC error, or an operator denied it) | `failed` |
/// | `killed` by a cancel (`tasks/cancel`, `job.cancel`, a cancelled approval) | `cancelled` |
/// | `killed` by its time limit or the output quota | `failed` |
/// | `lost` (the gateway stopped while it ran) | `failed` |
fn status_of(j: &JobRecord) -> (&'static str, Option<String>) {
    match j.state {
        JobState::Running => ("working", None),
        JobState::AwaitingApproval => {
            ("working", Some("the call waits for an operator's approval before it runs".to_string()))
        }
        JobState::Exited if j.exit_code.unwrap_or(0) == 0 => ("completed", None),
        JobState::Exited => {
            ("failed", Some("the tool returned an error result (isError); tasks/result returns it".to_string()))
        }
        JobState::Killed => match j.signal.as_deref() {
            Some("timeout") => ("failed", Some("the call ran past its time limit and was stopped".to_string())),
            Some("quota") => ("failed", Some("the call was stopped: the session's output quota ran out".to_string())),
            _ => ("cancelled", Some("the task was cancelled before its tool call finished".to_string())),
        },
        JobState::Failed => {
            let reason = j
                .error
                .as_ref()
                .and_then(|e| serde_json::from_value::<RpcError>(e.clone()).ok())
                .map(|e| e.reason().to_string())
                .unwrap_or_else(|| "no reason was recorded".to_string());
            ("failed", Some(format!("the tool call failed: {reason}")))
        }
        JobState::Lost => ("failed", Some(LOST.to_string())),
    }
}

fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// The MCP `Task` of a job. Its `ttl` is how long it stays retrievable: jobs are never deleted,
/// but a task is reached only through its session, so it lives until the session expires.
fn task_json(session_expires_ms: u64, j: &JobRecord) -> Value {
    let (status, message) = status_of(j);
    let mut t = json!({
        "taskId": j.id,
        "status": status,
        "createdAt": crate::util::rfc3339(j.created_ms),
        "lastUpdatedAt": crate::util::rfc3339(j.ended_ms.unwrap_or(j.created_ms)),
        "ttl": session_expires_ms.saturating_sub(j.created_ms),
    });
    if let Some(m) = message {
        t["statusMessage"] = json!(m);
    }
    if !terminal(status) {
        t["pollInterval"] = json!(POLL_INTERVAL_MS);
    }
    t
}

/// Whether a job was started as an MCP task (plain calls, `job.start` jobs and commands are
/// jobs but not tasks).
fn is_task(j: &JobRecord) -> bool {
    j.kind == "tool" && j.spec.get("origin").and_then(Value::as_str) == Some("mcp") && j.spec.get("task").is_some()
}

/// The requested `ttl` of `params.task` (which must be an object), if any.
fn requested_ttl(task: &Value) -> Result<Option<u64>, RpcError> {
    let Some(t) = task.as_object() else {
        return Err(RpcError::invalid_params("`task` must be an object (`{\"ttl\": milliseconds}`, `ttl` optional)"));
    };
    match t.get("ttl") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| RpcError::invalid_params("`task.ttl` must be a whole number of milliseconds")),
    }
}

fn not_found(id: &str) -> RpcError {
    RpcError::invalid_params(format!("Failed to retrieve task: there is no task `{id}` in this session"))
}

impl Gateway {
    /// Whether a `tools/call` runs as a task: it carries `params.task`, and its client speaks
    /// the 2025-11-25 tasks utility. The 2026-07-28 revision replaced that utility with an
    /// extension of another shape (SEP-2663), which the gateway does not speak, and says that a
    /// legacy `task` parameter is ignored: such a call runs as a plain call.
    pub(super) fn wants_task(&self, p: &Value, ctx: &Ctx) -> bool {
        p.get("task").is_some_and(|t| !t.is_null()) && !self.stateless_client(ctx)
    }

    /// Whether the request comes from a 2026-07-28 (stateless) client.
    fn stateless_client(&self, ctx: &Ctx) -> bool {
        ctx.session_id.clone().or_else(|| ctx.opened_session()).is_some_and(|s| self.client_asks.is_stateless(&s))
    }

    /// `tools/call` with `params.task`: starts the call's job as a plain call would, and
    /// answers at once with the `CreateTaskResult`.
    pub(super) async fn tools_call_task(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let requested = requested_ttl(p.get("task").unwrap_or(&Value::Null))?;
        let mut name = p
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("`name` (a string) is required"))?
            .to_string();
        let mut arguments = object_arguments(p.get("arguments"))?;
        let s = self.session_or_default(p, ctx)?;
        match name.as_str() {
            // They answer from the catalog at once: there is no job to make a task of.
            "axp_index" | "axp_describe" => {
                return Err(RpcError::new(
                    ErrorCode::MethodNotFound,
                    format!("`{name}` answers at once and cannot run as a task; call it without `task`"),
                ));
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
        let progress_token = p.get("_meta").and_then(|m| m.get("progressToken")).cloned();
        // No `request_id`: the request that created the task has been answered already, so a
        // resumed stream must not replay the job's outcome as its response.
        let spec = json!({"tool": name, "arguments": arguments, "origin": "mcp", "task": {"ttl": requested}});
        let digest = digest_json(&Value::Object(arguments.clone()));
        let job = self.start_tool_job(&s, &name, arguments, spec, None, None)?;
        let detail = json!({"tool": name, "args_sha256": digest, "job_id": job.id, "via": "tools/call", "task": true});
        self.audit(Kind::ToolCall, Some(&s.id), detail).await?;
        self.watch_task(&s, &job, progress_token);
        Ok(json!({"task": task_json(s.expires_ms, &job)}))
    }

    /// Follows a task's job in the background: its progress (with the client's token) and, once
    /// it ends, its final status go to the session's standing stream. Both are best effort, as
    /// the spec allows: a client that is not listening polls `tasks/get` instead.
    fn watch_task(&self, s: &Arc<Session>, job: &JobRecord, progress_token: Option<Value>) {
        let (jobs, notify, job) = (self.jobs.clone(), self.notify.clone(), job.clone());
        let (to, expires_ms) = (Arc::new(vec![s.id.clone()]), s.expires_ms);
        let send = move |message: Value| {
            let _ = notify.send(Outbound { to: Some(to.clone()), message });
        };
        tokio::spawn(async move {
            let mut seq = 0;
            loop {
                let Ok(batch) = jobs.attach(&job, seq, Duration::from_secs(30), 1000).await else { return };
                for e in &batch.events {
                    if let (Some(token), JobEventKind::Progress { progress, total, message }) =
                        (&progress_token, &e.kind)
                    {
                        let mut params = json!({
                            "progressToken": token, "progress": progress,
                            "_meta": {RELATED_TASK: {"taskId": job.id}},
                        });
                        if let Some(t) = total {
                            params["total"] = json!(t);
                        }
                        if let Some(m) = message {
                            params["message"] = json!(m);
                        }
                        send(Notification::new("notifications/progress", params).to_value());
                    }
                }
                seq = batch.next_seq;
                if batch.done {
                    break;
                }
            }
            if let Ok(Some(ended)) = jobs.store().get_job(&job.id) {
                send(Notification::new("notifications/tasks/status", task_json(expires_ms, &ended)).to_value());
            }
        });
    }

    /// `tasks/get`, `tasks/list`, `tasks/result` and `tasks/cancel` (2025-11-25).
    pub(super) async fn tasks_call(&self, method: &str, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        if self.stateless_client(ctx) {
            // These are the 2025-11-25 methods; a 2026-07-28 client has no tasks here (above).
            return Err(RpcError::method_not_found(method));
        }
        let s = self.session(p, ctx)?;
        match method {
            "tasks/get" => Ok(task_json(s.expires_ms, &self.task_of(&s, p)?)),
            "tasks/list" => self.tasks_list(&s, p),
            "tasks/result" => self.task_result(&s, p).await,
            "tasks/cancel" => self.task_cancel(&s, p).await,
            m => Err(RpcError::method_not_found(m)),
        }
    }

    /// The task `params.taskId` names, if it is one of this session's.
    fn task_of(&self, s: &Session, p: &Value) -> Result<JobRecord, RpcError> {
        let id = p
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("`taskId` (a string) is required"))?;
        match self.jobs.get(&s.id, id) {
            Ok(j) if is_task(&j) => Ok(j),
            Ok(_) => Err(not_found(id)),
            Err(e) if e.kind() == Some(ErrorCode::UnknownJob) => Err(not_found(id)),
            Err(e) => Err(e),
        }
    }

    /// The session's tasks, oldest first, a page at a time; the cursor is the last task of the
    /// previous page (tasks are never removed while their session lives, so it stays valid).
    fn tasks_list(&self, s: &Session, p: &Value) -> Result<Value, RpcError> {
        let jobs = self.jobs.list(&s.id)?;
        let tasks: Vec<&JobRecord> = jobs.iter().filter(|j| is_task(j)).collect();
        let start = match p.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(Value::String(c)) => tasks.iter().position(|j| j.id == *c).map(|i| i + 1).ok_or_else(|| {
                RpcError::invalid_params(format!("`{c}` is not a cursor this gateway gave for this session"))
            })?,
            Some(_) => return Err(RpcError::invalid_params("`cursor` must be a string")),
        };
        let page = &tasks[start..tasks.len().min(start + PAGE)];
        let mut r = json!({"tasks": page.iter().map(|j| task_json(s.expires_ms, j)).collect::<Vec<_>>()});
        if start + PAGE < tasks.len()
            && let Some(last) = page.last()
        {
            r["nextCursor"] = json!(last.id);
        }
        Ok(r)
    }

    /// `tasks/result`: waits for the job to end, then answers what the plain `tools/call` would
    /// have: its `CallToolResult` (tied to the task by `_meta`) or its JSON-RPC error. A task
    /// that was cancelled or that a restart cut short has no such answer, and gets an error
    /// that says which.
    async fn task_result(&self, s: &Session, p: &Value) -> Result<Value, RpcError> {
        let job = self.task_of(s, p)?;
        let outcome = self.follow(&job, &Ctx::default(), None).await;
        let ended = self.jobs.get(&s.id, &job.id)?;
        let (status, message) = status_of(&ended);
        if status == "cancelled" || ended.state == JobState::Lost {
            let reason = message.unwrap_or_default();
            return Err(RpcError::internal(reason).with_data("taskStatus", status));
        }
        let mut v = serde_json::to_value(outcome?).map_err(|e| crate::util::internal("encoding a result", e))?;
        let meta = v.as_object_mut().map(|o| o.entry("_meta").or_insert_with(|| json!({})));
        if let Some(Value::Object(m)) = meta {
            m.insert(RELATED_TASK.into(), json!({"taskId": job.id}));
        }
        Ok(v)
    }

    /// `tasks/cancel`: cancels the job and answers once it has stopped, with the task now
    /// `cancelled`. A task that had already ended, or that ends otherwise before the cancel
    /// takes hold, is refused with -32602 as the spec asks: its status never changes again.
    async fn task_cancel(&self, s: &Session, p: &Value) -> Result<Value, RpcError> {
        let job = self.task_of(s, p)?;
        let already = |j: &JobRecord| {
            let (status, _) = status_of(j);
            RpcError::invalid_params(format!("Cannot cancel task: already in terminal status '{status}'"))
        };
        if terminal(status_of(&job).0) {
            return Err(already(&job));
        }
        if !self.jobs.cancel(&job.id) {
            // It ended between the read above and the cancel.
            let now = self.jobs.get(&s.id, &job.id)?;
            return Err(if terminal(status_of(&now).0) {
                already(&now)
            } else {
                RpcError::internal("the task's call is not running in this gateway, so it cannot be cancelled")
            });
        }
        let deadline = Instant::now() + CANCEL_WAIT;
        let mut seq = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RpcError::internal(format!(
                    "the cancellation was sent, but the tool call did not stop within {} s; tasks/get shows when it does",
                    CANCEL_WAIT.as_secs()
                )));
            }
            let batch = self.jobs.attach(&job, seq, left, 1000).await?;
            if batch.done {
                break;
            }
            if batch.events.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            seq = batch.next_seq;
        }
        let ended = self.jobs.get(&s.id, &job.id)?;
        if status_of(&ended).0 != "cancelled" {
            return Err(already(&ended));
        }
        Ok(task_json(s.expires_ms, &ended))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: JobState, code: Option<i32>, signal: Option<&str>, error: Option<Value>) -> JobRecord {
        JobRecord {
            id: "j_1".into(),
            session_id: "s".into(),
            kind: "tool".into(),
            spec: json!({"tool": "t", "origin": "mcp", "task": {"ttl": null}}),
            state,
            exit_code: code,
            signal: signal.map(str::to_string),
            error,
            created_ms: 1_000,
            ended_ms: state.is_terminal().then_some(3_500),
            idempotency_key: None,
        }
    }

    #[test]
    fn every_job_state_maps_to_a_task_status() {
        let denied = serde_json::to_value(RpcError::new(ErrorCode::ApprovalRequired, "denied by alice")).unwrap();
        let lost = json!({"reason": "the gateway stopped while this job was running"});
        for (j, status) in [
            (job(JobState::Running, None, None, None), "working"),
            (job(JobState::AwaitingApproval, None, None, None), "working"),
            (job(JobState::Exited, Some(0), None, None), "completed"),
            (job(JobState::Exited, Some(1), None, None), "failed"),
            (job(JobState::Failed, None, None, Some(denied)), "failed"),
            (job(JobState::Killed, None, Some("cancel"), None), "cancelled"),
            (job(JobState::Killed, None, None, None), "cancelled"),
            (job(JobState::Killed, None, Some("timeout"), None), "failed"),
            (job(JobState::Killed, None, Some("quota"), None), "failed"),
            (job(JobState::Lost, None, None, Some(lost)), "failed"),
        ] {
            assert_eq!(status_of(&j).0, status, "{:?} {:?}", j.state, j.signal);
            let t = task_json(61_000, &j);
            assert_eq!(t["status"], status);
            assert_eq!(t["ttl"], 60_000, "retained until the session expires");
            assert_eq!(t["createdAt"], "1970-01-01T00:00:01.000Z");
            assert_eq!(t.get("pollInterval").is_some(), !terminal(status), "{t}");
            if j.state.is_terminal() {
                assert_eq!(t["lastUpdatedAt"], "1970-01-01T00:00:03.500Z");
            }
        }
        let failed = status_of(&job(
            JobState::Failed,
            None,
            None,
            Some(serde_json::to_value(RpcError::new(ErrorCode::ApprovalRequired, "denied by alice")).unwrap()),
        ));
        assert_eq!(failed.1.as_deref(), Some("the tool call failed: denied by alice"));
        assert!(status_of(&job(JobState::Lost, None, None, None)).1.unwrap().contains("gateway stopped"));
    }

    #[test]
    fn every_tool_is_offered_as_a_task_and_as_a_plain_call() {
        assert_eq!(listed_execution(None), json!({"taskSupport": "optional"}));
        assert_eq!(listed_execution(Some(&json!({}))), json!({"taskSupport": "optional"}));
        assert_eq!(
            listed_execution(Some(&json!({"taskSupport": "forbidden", "other": 1}))),
            json!({"taskSupport": "optional", "other": 1}),
            "the server's own refusal concerns calls it never gets"
        );
        for declared in ["optional", "required"] {
            assert_eq!(
                listed_execution(Some(&json!({"taskSupport": declared, "other": 1}))),
                json!({"taskSupport": "optional", "other": 1}),
                "the gateway makes the task upstream when the server needs one"
            );
        }
    }

    #[test]
    fn only_mcp_task_jobs_are_tasks() {
        let mut j = job(JobState::Running, None, None, None);
        assert!(is_task(&j));
        j.spec = json!({"tool": "t", "origin": "mcp", "request_id": 1});
        assert!(!is_task(&j), "a plain tools/call is a job, not a task");
        j.spec = json!({"tool": "t", "origin": "axp", "task": {}});
        assert!(!is_task(&j));
    }

    #[test]
    fn task_params_are_checked() {
        assert_eq!(requested_ttl(&json!({})).unwrap(), None);
        assert_eq!(requested_ttl(&json!({"ttl": 60000})).unwrap(), Some(60_000));
        assert_eq!(requested_ttl(&json!({"ttl": null})).unwrap(), None);
        for bad in [json!(true), json!({"ttl": -1}), json!({"ttl": "1s"}), json!({"ttl": 1.5})] {
            assert_eq!(requested_ttl(&bad).unwrap_err().code, -32602, "{bad}");
        }
    }

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(crate::util::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(crate::util::rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(crate::util::rfc3339(1_795_910_400_000), "2026-11-29T00:00:00.000Z");
    }
}
