//! The web console's operator methods (`console.*`): every session with its grants, token id,
//! expiry and quota use; every job across sessions, its log (replayed from any seq) and its
//! cancellation or signal; the audit log's filtered tail with the chain's verify status; and the
//! catalog as an operator sees it (each tool's provider, lint findings and pin state, each
//! provider's health and why it is down).
//!
//! Like `job.pending`, every method here takes one param, a signed operator `envelope`, and
//! nothing else: what they show spans every session (other sessions' arguments and output), so
//! neither a session token nor an operator's bearer token — which the clients that open
//! sessions hold — reaches them. This file only reads what the gateway keeps and asks the job
//! registry to stop or signal a job; it decides no policy.

use std::collections::VecDeque;
use std::time::Duration;

use axp_audit::{Filter, Kind};
use axp_protocol::methods::{JobAttachParams, JobRef, JobSignalParams};
use axp_protocol::{ErrorCode, RpcError};
use axp_store::JobRecord;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::catalog::admission::{HELD_FILE, LOCK_FILE, read_held, read_lockfile};
use crate::catalog::registry::state_name;
use crate::gateway::Gateway;
use crate::util::{internal, now_ms};

/// The methods this file answers.
const METHODS: [&str; 7] = [
    "console.sessions",
    "console.jobs",
    "console.attach",
    "console.cancel",
    "console.signal",
    "console.audit",
    "console.catalog",
];

/// At most this many of the newest sessions are listed (and searched for jobs).
const MAX_SESSIONS: usize = 200;

/// How far back from the end of the audit log a filtered tail looks for matching records.
const AUDIT_SCAN: u64 = 20_000;

/// `console.*`: opens the envelope (method, operator key, signature, time window, single-use
/// nonce) and answers with the operator's view.
pub async fn call(gw: &Gateway, method: &str, p: &Value) -> Result<Value, RpcError> {
    if !METHODS.contains(&method) {
        return Err(RpcError::method_not_found(method));
    }
    let raw = p.get("envelope").ok_or_else(|| {
        RpcError::new(
            ErrorCode::Unauthorized,
            format!(
                "`{method}` is an operator's read across every session and needs a signed operator `envelope`; a session or bearer token cannot make one"
            ),
        )
    })?;
    let (operator, params) = gw.guard.operators.open_envelope(raw, method, now_ms())?;
    match method {
        "console.sessions" => sessions(gw),
        "console.jobs" => jobs(gw, &params),
        "console.attach" => attach(gw, &params).await,
        "console.cancel" => cancel(gw, &operator, &params).await,
        "console.signal" => signal(gw, &operator, &params).await,
        "console.audit" => audit(gw, &params).await,
        _ => catalog(gw),
    }
}

/// The newest sessions first, at most [`MAX_SESSIONS`].
fn recent_sessions(gw: &Gateway) -> Result<Vec<axp_store::SessionRecord>, RpcError> {
    let mut all = gw.jobs.store().list_sessions().map_err(|e| internal("listing sessions", e))?;
    all.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then_with(|| b.id.cmp(&a.id)));
    all.truncate(MAX_SESSIONS);
    Ok(all)
}

/// Every session (newest first) with its tier, grants, root token id, expiry and what it uses of
/// its quotas: live jobs (against `concurrent_jobs`) and the jobs it started in the last minute
/// (tool calls and job starts, against `calls_per_minute`).
fn sessions(gw: &Gateway) -> Result<Value, RpcError> {
    let now = now_ms();
    let mut out = Vec::new();
    for s in recent_sessions(gw)? {
        let jobs = gw.jobs.list(&s.id)?;
        let live = jobs.iter().filter(|j| !j.state.is_terminal()).count();
        let last_minute = jobs.iter().filter(|j| j.created_ms + 60_000 > now).count();
        let state = if s.closed {
            "closed"
        } else if s.expires_ms <= now {
            "expired"
        } else {
            "open"
        };
        out.push(json!({
            "session_id": s.id, "workspace": s.workspace, "tier": s.tier, "capabilities": s.capabilities,
            "created_ms": s.created_ms, "expires_ms": s.expires_ms, "state": state, "token_id": s.token_id,
            "mcp": s.id_is_bearer, "jobs": jobs.len(),
            "quota_use": {"live_jobs": live, "calls_last_minute": last_minute},
        }));
    }
    Ok(json!({"sessions": out, "now_ms": now}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsParams {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    limit: Option<usize>,
}

/// Jobs across sessions (or one session's), newest first, each as `job.status` shows it plus
/// its session and, for a tool call, its arguments.
fn jobs(gw: &Gateway, p: &Value) -> Result<Value, RpcError> {
    let p: JobsParams = super::params(p)?;
    let limit = p.limit.unwrap_or(100).clamp(1, 1000);
    let mut all: Vec<JobRecord> = match &p.session_id {
        Some(s) => gw.jobs.list(s)?,
        None => {
            let mut v = Vec::new();
            for s in recent_sessions(gw)? {
                v.extend(gw.jobs.list(&s.id)?);
            }
            v
        }
    };
    all.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then_with(|| b.id.cmp(&a.id)));
    all.truncate(limit);
    let list: Vec<Value> = all
        .iter()
        .map(|j| {
            let mut v = gw.job_status(j);
            v["session_id"] = json!(j.session_id);
            if let Some(a) = j.spec.get("arguments") {
                v["arguments"] = a.clone();
            }
            v
        })
        .collect();
    Ok(json!({"jobs": list}))
}

fn job(gw: &Gateway, id: &str) -> Result<JobRecord, RpcError> {
    gw.jobs
        .store()
        .get_job(id)
        .map_err(|e| internal("reading a job", e))?
        .ok_or_else(|| RpcError::new(ErrorCode::UnknownJob, format!("no job `{id}`")))
}

/// Any job's events from any seq, as `job.attach` answers a session for its own jobs.
async fn attach(gw: &Gateway, p: &Value) -> Result<Value, RpcError> {
    let a: JobAttachParams = super::params(p)?;
    let job = job(gw, &a.job_id)?;
    // Bounded below the envelope window: an envelope is signed for one long poll, not a stream.
    let wait = Duration::from_millis(a.wait_ms.unwrap_or(0).min(30_000));
    let batch = gw.jobs.attach(&job, a.from_seq, wait, a.limit.unwrap_or(1000)).await?;
    let mut v = serde_json::to_value(batch).map_err(|e| internal("encoding events", e))?;
    v["state"] = json!(gw.jobs.store().get_job(&job.id).ok().flatten().map_or(job.state, |j| j.state));
    Ok(v)
}

/// Stops any session's job; recorded in the audit log with the operator who asked.
async fn cancel(gw: &Gateway, operator: &str, p: &Value) -> Result<Value, RpcError> {
    let r: JobRef = super::params(p)?;
    let job = job(gw, &r.job_id)?;
    let cancelled = gw.jobs.cancel(&job.id);
    let detail = json!({"job_id": job.id, "operator": operator, "cancelled": cancelled, "via": "console"});
    gw.audit(Kind::Other("job.cancel".into()), Some(&job.session_id), detail).await?;
    Ok(json!({"cancelled": cancelled}))
}

/// Signals any session's job (as `job.signal` does for its own session); audited.
async fn signal(gw: &Gateway, operator: &str, p: &Value) -> Result<Value, RpcError> {
    let r: JobSignalParams = super::params(p)?;
    let job = job(gw, &r.job_id)?;
    gw.jobs.signal(&job.id, &r.signal)?;
    let detail = json!({"job_id": job.id, "operator": operator, "signal": r.signal, "via": "console"});
    gw.audit(Kind::Other("job.signal".into()), Some(&job.session_id), detail).await?;
    Ok(json!({}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditParams {
    #[serde(default)]
    limit: Option<usize>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    kinds: Vec<String>,
    /// Only records whose JSON line contains this text.
    #[serde(default)]
    text: Option<String>,
}

/// The newest matching records of the last [`AUDIT_SCAN`] (newest first), and whether the whole
/// chain verifies now.
async fn audit(gw: &Gateway, p: &Value) -> Result<Value, RpcError> {
    let p: AuditParams = super::params(p)?;
    let limit = p.limit.unwrap_or(100).clamp(1, 1000);
    let dir = gw.audit.dir().to_path_buf();
    let from = gw.audit.next_seq().saturating_sub(AUDIT_SCAN);
    let filter = Filter {
        session: p.session.clone(),
        kinds: p.kinds.iter().map(|k| k.parse().unwrap_or(Kind::Other(k.clone()))).collect(),
    };
    let text = p.text.filter(|t| !t.is_empty());
    // Reading and hashing the log is file I/O of unbounded length: the blocking pool's work.
    let read = tokio::task::spawn_blocking(move || {
        let verify = match axp_audit::verify(&dir) {
            Ok(r) => json!({"ok": true, "records": r.records, "last_hash": r.last_hash,
                            "unanchored": r.unanchored, "segments": r.segments}),
            Err(e) => json!({"ok": false, "error": e.to_string()}),
        };
        let mut kept: VecDeque<Value> = VecDeque::with_capacity(limit);
        let mut problem = None;
        for r in axp_audit::tail(&dir, from, filter) {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    problem = Some(e.to_string());
                    break;
                }
            };
            let v = serde_json::to_value(&r).unwrap_or_default();
            if text.as_deref().is_some_and(|t| !v.to_string().contains(t)) {
                continue;
            }
            if kept.len() == limit {
                kept.pop_front();
            }
            kept.push_back(v);
        }
        (verify, kept, problem)
    })
    .await
    .map_err(|e| internal("reading the audit log", e))?;
    let (verify, kept, problem) = read;
    let records: Vec<Value> = kept.into_iter().rev().collect();
    Ok(json!({"records": records, "verify": verify, "read_error": problem, "scanned_from": from}))
}

/// Every served tool with its provider, availability, lint findings and pin state (pinned and
/// matching, pinned but a new version held back for approval, or not pinned yet); the tools
/// the lint refused; and every provider's state with why it is down.
fn catalog(gw: &Gateway) -> Result<Value, RpcError> {
    let state_dir = gw.jobs.store().dir().to_path_buf();
    let lock = read_lockfile(&state_dir.join(LOCK_FILE)).map_err(|e| internal("reading the lockfile", e))?;
    let held = read_held(&state_dir).map_err(|e| internal(&format!("reading {HELD_FILE}"), e))?;
    let tools: Vec<Value> = gw
        .registry
        .entries(&|_| true)
        .into_iter()
        .map(|(e, available)| {
            let pin = lock.tools.values().find(|p| p.provider == e.provider.0 && p.tool == e.spec.name);
            let pin_state = match (pin, held.contains_key(&e.name)) {
                (_, true) => "held",
                (Some(p), false) if p.sha256 == axp_lint::drift::tool_hash(&e.spec) => "pinned",
                (Some(_), false) => "pinned (changed)",
                (None, false) => "unpinned",
            };
            json!({"name": e.name, "provider": e.provider.0, "desc": e.desc, "available": available,
                   "lint": e.lint, "pin": pin_state, "sha256": pin.map(|p| p.sha256.clone())})
        })
        .collect();
    let providers: Vec<Value> = gw
        .registry
        .providers()
        .into_iter()
        .map(|(id, kind, up, reason, n)| {
            json!({"id": id.0, "kind": kind, "state": state_name(up, reason.as_deref()), "reason": reason, "tools": n})
        })
        .collect();
    Ok(
        json!({"tools": tools, "providers": providers, "refused": gw.admission.refused_tools(), "problems": gw.registry.problems()}),
    )
}
