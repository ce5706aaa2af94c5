//! The per-job SDK socket: newline-delimited JSON-RPC 2.0 on a pathname unix socket that only
//! this job's sandbox can see. Methods: `tools/call {name, arguments, cap_token}` (the result is
//! the MCP `CallToolResult`) and `ping`. Requests on one connection may be in flight together
//! (answered by `id`, in completion order). Lines are read and answered through
//! `axp_protocol::jsonrpc`, under the same rules as the HTTP endpoint.
//!
//! Every request must carry the job's own token, byte for byte: a process that reached the
//! socket of another job (it should not be able to: the socket is mounted only into its own
//! job) still could not use it. The token is then verified like any request's (expiry,
//! revocation), and the call goes through the dispatcher's checks (grant, availability,
//! schema), the audit log (`ToolCall`, or `CapabilityDenied`) and the job's log (`tool_call`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use axp_audit::{Kind, digest_json};
use axp_protocol::jsonrpc::{self, Id, Incoming, Response};
use axp_protocol::methods::JobEventKind;
use axp_protocol::{ErrorCode, RpcError, ToolCall};
use axp_providers::{CancellationToken, EventSink};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::codec::{FramedRead, LinesCodec};

use crate::execution::jobs::provider_error_to_rpc;
use crate::gateway::Gateway;

/// Longest request line (the arguments of one call).
const MAX_LINE: usize = 8 << 20;
/// Calls one job may have in flight at once.
const MAX_IN_FLIGHT: usize = 32;

/// What a socket belongs to.
pub struct Binding {
    pub job_id: String,
    pub session_id: String,
    pub token: String,
    pub token_id: String,
    pub dir: PathBuf,
}

/// Serves a job's socket while it lives; dropping it closes the socket, ends every call in
/// flight, removes the job's directory and revokes its token.
pub struct Companion {
    task: tokio::task::JoinHandle<()>,
    cancel: CancellationToken,
    gw: Weak<Gateway>,
    token_id: String,
    dir: PathBuf,
}

impl Drop for Companion {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(gw) = self.gw.upgrade() {
            gw.sessions.revoke_token(&self.token_id);
        }
    }
}

/// Binds the socket (owner-only permissions; the directory is private too).
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    let l = UnixListener::bind(path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Starts answering on `listener` for `binding`'s job.
pub fn serve(gw: Weak<Gateway>, binding: Binding, listener: UnixListener) -> Companion {
    let cancel = CancellationToken::new();
    let token_id = binding.token_id.clone();
    let dir = binding.dir.clone();
    let shared = Arc::new(Shared {
        binding,
        calls: AtomicU64::new(0),
        slots: Semaphore::new(MAX_IN_FLIGHT),
        cancel: cancel.clone(),
    });
    let g = gw.clone();
    let task = tokio::spawn(async move {
        // Connections (and their calls) live in this set: aborting the task drops them all.
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        conns.spawn(connection(g.clone(), shared.clone(), stream));
                    }
                    Err(e) => {
                        tracing::warn!(job = %shared.binding.job_id, error = %e, "code-mode socket accept failed");
                        break;
                    }
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    });
    Companion { task, cancel, gw, token_id, dir }
}

struct Shared {
    binding: Binding,
    calls: AtomicU64,
    slots: Semaphore,
    cancel: CancellationToken,
}

async fn connection(gw: Weak<Gateway>, shared: Arc<Shared>, stream: tokio::net::UnixStream) {
    let (rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(mut line) = rx.recv().await {
            line.push('\n');
            if wr.write_all(line.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    let mut lines = FramedRead::new(rd, LinesCodec::new_with_max_length(MAX_LINE));
    let mut calls = JoinSet::new();
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                let err = RpcError::new(ErrorCode::ParseError, format!("cannot read the request: {e}"));
                let _ = tx.send(Response::err(Id::Null, err).to_string());
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let (gw, shared, tx) = (gw.clone(), shared.clone(), tx.clone());
        calls.spawn(async move {
            if let Some(reply) = answer(&gw, &shared, &line).await {
                let _ = tx.send(reply.to_string());
            }
        });
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
    drop(tx);
    let _ = writer.await;
}

/// The reply to one request line (`None` for a notification, and for a response: the socket
/// asks the script nothing). The line is read by `axp_protocol::jsonrpc`, as the HTTP endpoint
/// reads a body; a malformed message gets its error response.
async fn answer(gw: &Weak<Gateway>, shared: &Shared, line: &str) -> Option<Response> {
    let msg = match serde_json::from_str(line) {
        Ok(v) => jsonrpc::parse_value(v),
        Err(e) => Err(Response::err(Id::Null, RpcError::parse(format!("the request is not JSON: {e}")))),
    };
    let req = match msg {
        Ok(Incoming::Request(r)) => r,
        Ok(Incoming::Notification(_) | Incoming::Response(_)) => return None,
        Err(refusal) => return Some(refusal),
    };
    let result = match req.method.as_str() {
        "ping" => Ok(json!({})),
        "tools/call" => match gw.upgrade() {
            Some(gw) => nested_call(&gw, shared, req.params.as_ref().unwrap_or(&Value::Null)).await,
            None => Err(RpcError::new(ErrorCode::ProviderUnavailable, "the gateway is shutting down")),
        },
        m => Err(RpcError::method_not_found(m)),
    };
    Some(Response::from_result(req.id, result))
}

/// Compares two tokens without an early exit on the first differing byte.
fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

struct Discard;
impl EventSink for Discard {
    fn emit(&self, _: JobEventKind) {}
}

async fn nested_call(gw: &Gateway, shared: &Shared, params: &Value) -> Result<Value, RpcError> {
    let b = &shared.binding;
    let started = Instant::now();
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("`name` (a string) is required"))?
        .to_string();
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(RpcError::invalid_params("`arguments` must be an object")),
    };
    let token = params.get("cap_token").and_then(Value::as_str).unwrap_or("");
    if !same_token(token, &b.token) {
        return Err(RpcError::new(
            ErrorCode::Unauthorized,
            "this socket answers only the token of the job it belongs to (`AXP_TOKEN`)",
        ));
    }
    let call_no = shared.calls.fetch_add(1, Ordering::SeqCst) + 1;
    let digest = digest_json(&Value::Object(arguments.clone()));
    let record = |ok: bool, code: Option<i64>| JobEventKind::ToolCall {
        call: call_no,
        tool: name.clone(),
        args_sha256: digest.clone(),
        ok,
        code,
        ms: started.elapsed().as_millis() as u64,
    };
    let _slot = shared.slots.acquire().await.map_err(|_| RpcError::internal("the job is ending"))?;
    let outcome = async {
        let s = gw.sessions.authenticate(Some(&b.session_id), Some(token))?;
        let resolved = match gw.ready_tool(&s, &name, &arguments) {
            Ok(r) => r,
            Err(e) => {
                if e.kind() == Some(ErrorCode::CapabilityDenied) {
                    let detail = json!({"method": "tools/call", "tool": name, "missing": format!("tool({name})"),
                        "job_id": b.job_id, "via": "code-mode", "reason": e.reason()});
                    gw.audit(Kind::CapabilityDenied, Some(&b.session_id), detail).await?;
                }
                return Err(e);
            }
        };
        // A program gets no more than a direct call would: a tool an operator must approve is
        // refused here (it cannot wait for a decision mid-program), and every nested call
        // counts against the session's call quota.
        if gw.guard.approvals.required(&name, resolved.entry.provider.as_str(), &resolved.entry.spec) {
            return Err(RpcError::new(
                ErrorCode::ApprovalRequired,
                format!("`{name}` needs an operator's approval; call it with `tools/call` or `job.start {{tool}}`, not from code-mode"),
            ));
        }
        gw.guard.quotas.admit(&s.id, || 0)?;
        let call = ToolCall {
            tool: resolved.entry.spec.name.clone(),
            arguments,
            meta: Some(json!({"job_id": b.job_id, "cwd": s.workspace})),
        };
        let detail =
            json!({"tool": name, "args_sha256": digest, "job_id": b.job_id, "call": call_no, "via": "code-mode"});
        let cancel = shared.cancel.child_token();
        // As for `tools/call`: the audit record's fsync overlaps the call, and the answer waits
        // for both, so no result reaches the job before its record is durable.
        let (audited, result) = tokio::join!(
            gw.audit(Kind::ToolCall, Some(&b.session_id), detail),
            resolved.provider.call(call, Arc::new(Discard), cancel)
        );
        audited?;
        let output = result.map_err(|e| provider_error_to_rpc(&e))?;
        serde_json::to_value(output).map_err(|e| crate::util::internal("encoding a tool result", e))
    }
    .await;
    let event = match &outcome {
        Ok(v) => record(!v.get("isError").and_then(Value::as_bool).unwrap_or(false), None),
        Err(e) => record(false, Some(e.code)),
    };
    // Once the job's process has ended its exit event is next; a call still finishing then is
    // not recorded after it.
    if !shared.cancel.is_cancelled() {
        gw.jobs.emit(&b.job_id, event);
    }
    outcome
}
