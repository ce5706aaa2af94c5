//! The operator's methods, and the parking of calls that wait for one. A tool call that needs
//! approval is parked instead of started ([`park`]); these methods decide it (all audited):
//! * `job.approve {envelope}` / `job.deny {envelope}` — a signed operator envelope whose params
//!   are `{job_id}` / `{job_id, reason?}`; an agent's session token can never decide a job, not
//!   even its own.
//! * `cap.revoke {envelope}` — params `{token_id}` or `{cap_token}`: that token and every token
//!   attenuated from it fail from the next request on; durable across restarts.
//! * `job.pending {envelope}` — the jobs awaiting approval across sessions, with their
//!   arguments (an operator's read, so it is signed too).
//!
//! A parked job keeps `{tool, arguments, workspace, timeout_s}` in its stored spec, so it can be
//! approved after a gateway restart; its job log's first event is the request itself. Replicas
//! sharing a PostgreSQL store: a decision may arrive at any replica; that replica takes the job
//! over from the one holding it before deciding it (`Jobs::hold_parked`), so exactly one
//! replica decides, and the job runs there.

use std::time::Duration;

use axp_audit::{Kind, digest_json};
use axp_protocol::methods::JobState;
use axp_protocol::{ErrorCode, RpcError};
use axp_store::JobRecord;
use serde_json::{Map, Value, json};

use crate::auth::session::Session;
use crate::catalog::registry::unknown_tool;
use crate::execution::jobs::Work;
use crate::gateway::Gateway;
use crate::util::{internal, now_ms};

/// Parks a tool call that needs approval (the dispatcher calls this instead of starting it).
pub fn park(
    gw: &Gateway,
    s: &Session,
    tool: &str,
    arguments: Map<String, Value>,
    idempotency_key: Option<String>,
    timeout: Option<Duration>,
    mut spec: Value,
) -> Result<JobRecord, RpcError> {
    spec["workspace"] = json!(s.workspace);
    spec["timeout_s"] = json!(timeout.map(|t| t.as_secs()));
    let request = json!({
        "awaiting": "operator approval",
        "tool": tool,
        "arguments": arguments,
        "args_sha256": digest_json(&Value::Object(arguments.clone())),
        "hint": "an operator decides with `axp approve JOB` or `axp deny JOB --reason …`",
    });
    let job = gw.jobs.park(&s.id, "tool", spec, idempotency_key, request)?;
    tracing::warn!(job = %job.id, session = %s.id, %tool, "a call awaits operator approval: `axp approve {}`", job.id);
    Ok(job)
}

/// `job.approve`, `job.deny`, `cap.revoke`, `job.pending`.
pub async fn call(gw: &Gateway, method: &str, p: &Value) -> Result<Value, RpcError> {
    let raw = p.get("envelope").ok_or_else(|| {
        RpcError::new(
            ErrorCode::Unauthorized,
            format!("`{method}` changes policy and needs a signed operator `envelope`; a session token cannot do it (use `axp approve`, `axp deny` or `axp revoke`)"),
        )
    })?;
    let (operator, params) = gw.guard.operators.open_envelope(raw, method, now_ms())?;
    match method {
        "job.pending" => pending(gw, &operator),
        "cap.revoke" => revoke(gw, &operator, &params).await,
        "job.approve" => approve(gw, &operator, &params).await,
        "job.deny" => deny(gw, &operator, &params).await,
        other => Err(RpcError::method_not_found(other)),
    }
}

/// Lists every session's parked jobs with their arguments, so it is an operator's read: it takes
/// an envelope like the decisions, never a session token.
fn pending(gw: &Gateway, operator: &str) -> Result<Value, RpcError> {
    let jobs =
        gw.jobs.store().jobs_in_state(JobState::AwaitingApproval).map_err(|e| internal("listing parked jobs", e))?;
    let list: Vec<Value> = jobs
        .iter()
        .map(|j| {
            json!({"job_id": j.id, "session_id": j.session_id, "tool": j.spec.get("tool"),
                   "arguments": j.spec.get("arguments"), "created_ms": j.created_ms})
        })
        .collect();
    tracing::debug!(%operator, "listed pending approvals");
    Ok(json!({"jobs": list}))
}

fn job_id(params: &Value) -> Result<String, RpcError> {
    params
        .get("job_id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| RpcError::invalid_params("the envelope's params need `job_id`"))
}

fn parked_job(gw: &Gateway, id: &str) -> Result<JobRecord, RpcError> {
    let job = gw
        .jobs
        .store()
        .get_job(id)
        .map_err(|e| internal("reading a job", e))?
        .ok_or_else(|| RpcError::new(ErrorCode::UnknownJob, format!("no job `{id}`")))?;
    if job.state != JobState::AwaitingApproval {
        return Err(RpcError::invalid_params(format!("job `{id}` is `{}`, not awaiting approval", job.state.as_str())));
    }
    Ok(job)
}

async fn approve(gw: &Gateway, operator: &str, params: &Value) -> Result<Value, RpcError> {
    let id = job_id(params)?;
    parked_job(gw, &id)?;
    gw.jobs.hold_parked(&id).await?;
    let job = parked_job(gw, &id)?;
    let tool = job.spec.get("tool").and_then(Value::as_str).unwrap_or_default().to_string();
    let arguments = job.spec.get("arguments").and_then(Value::as_object).cloned().unwrap_or_default();
    // The session must still be open: approving work for a closed session would run it with
    // authority nobody holds any more.
    let session = gw.jobs.store().get_session(&job.session_id).map_err(|e| internal("reading a session", e))?;
    let gone = match &session {
        None => Some("its session no longer exists"),
        Some(s) if s.closed => Some("its session was closed"),
        Some(s) if s.expires_ms <= now_ms() => Some("its session expired"),
        Some(_) => None,
    };
    if let Some(why) = gone {
        let err = RpcError::new(ErrorCode::UnknownSession, format!("job `{id}` cannot run: {why}"));
        decided(gw, &job, json!({"job_id": id, "decision": "failed", "operator": operator, "reason": why})).await?;
        gw.jobs.fail_parked(&id, JobState::Failed, err.clone())?;
        return Err(err);
    }
    let resolved = gw.registry.resolve(&tool).ok_or_else(|| unknown_tool(&gw.registry, &tool))?;
    if !resolved.available {
        return Err(RpcError::new(
            ErrorCode::ProviderUnavailable,
            format!(
                "provider `{}` is unavailable right now; the job stays parked, approve it again later",
                resolved.entry.provider
            ),
        ));
    }
    gw.registry.validate(&resolved.entry, &Value::Object(arguments.clone()))?;
    decided(
        gw,
        &job,
        json!({"job_id": id, "decision": "approved", "operator": operator, "tool": tool,
               "args_sha256": digest_json(&Value::Object(arguments.clone()))}),
    )
    .await?;
    let cwd = job.spec.get("workspace").and_then(Value::as_str).map(std::path::PathBuf::from);
    let timeout = job.spec.get("timeout_s").and_then(Value::as_u64).map(Duration::from_secs);
    gw.jobs.resume(&job, Work::Tool { resolved: Box::new(resolved), arguments, cwd }, timeout)?;
    Ok(json!({"job_id": id, "state": "running", "approved_by": operator}))
}

/// Claims the parked job's decision, then records it durably; only then may the caller act on
/// it. A concurrent decision loses the claim (and records nothing); a record that cannot be
/// written gives the claim back.
async fn decided(gw: &Gateway, job: &JobRecord, detail: Value) -> Result<(), RpcError> {
    gw.jobs.claim_parked(&job.id)?;
    if let Err(e) = gw.audit(Kind::Approval, Some(&job.session_id), detail).await {
        gw.jobs.release_parked(&job.id);
        return Err(e);
    }
    Ok(())
}

async fn deny(gw: &Gateway, operator: &str, params: &Value) -> Result<Value, RpcError> {
    let id = job_id(params)?;
    parked_job(gw, &id)?;
    gw.jobs.hold_parked(&id).await?;
    let job = parked_job(gw, &id)?;
    let reason = params.get("reason").and_then(Value::as_str).unwrap_or("no reason given").to_string();
    decided(
        gw,
        &job,
        json!({"job_id": id, "decision": "denied", "operator": operator, "reason": reason, "tool": job.spec.get("tool")}),
    )
    .await?;
    let err = RpcError::new(ErrorCode::ApprovalRequired, format!("operator `{operator}` denied this call: {reason}"))
        .with_data("decision", "denied");
    gw.jobs.fail_parked(&id, JobState::Failed, err)?;
    Ok(json!({"job_id": id, "state": "failed", "denied_by": operator}))
}

async fn revoke(gw: &Gateway, operator: &str, params: &Value) -> Result<Value, RpcError> {
    let token_id =
        match (params.get("token_id").and_then(Value::as_str), params.get("cap_token").and_then(Value::as_str)) {
            (Some(id), _) => id.to_string(),
            (None, Some(t)) => axp_caps::Token::parse(t).map_err(|e| e.to_rpc_error())?.token_id().to_string(),
            (None, None) => {
                return Err(RpcError::invalid_params("the envelope's params need `token_id` or `cap_token`"));
            }
        };
    // Revoked first (the safe order for a revocation), then recorded; a failed record fails
    // the request, and the revocation stands.
    let newly = gw.sessions.revoke(&token_id)?;
    gw.audit(Kind::TokenRevoke, None, json!({"token_id": token_id, "operator": operator, "already": !newly})).await?;
    Ok(json!({"token_id": token_id, "revoked": true, "already": !newly}))
}
