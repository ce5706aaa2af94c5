//! Requests a server makes of the client (`sampling/createMessage`, `elicitation/create`,
//! `roots/list`), relayed to the client session whose call caused them, and their answers
//! routed back.
//!
//! A server's request carries no link to the call that caused it (over stdio nothing ties the
//! two), so the provider hands over every call to that server in flight, and the gateway finds
//! their sessions through their jobs. Exactly one session must come out: a request made while
//! two sessions' calls run on one shared server could belong to either, and sending one
//! session's prompt or data to another's client would be a leak, so it is refused. The session's
//! client must have declared the capability in its `initialize`; the request goes out on its
//! standing stream (`GET /mcp`, or stdout over stdio) with an id of the gateway's own, and the
//! client's answer, POSTed back as a JSON-RPC response by that same session, is the server's
//! answer. Each relay is audited with its outcome.
//!
//! A 2026-07-28 client takes no requests on a stream: its `tools/call` is answered with an
//! `input_required` result instead, listing what the server asked under keys of the gateway's
//! own, with an unguessable `requestState` that names this round. The call's job keeps running
//! meanwhile (its server waits for the answer); the client's retry of the call with
//! `inputResponses` and that `requestState` hands each answer to the waiting request and then
//! follows the same job on, to its result or to the next round. A round the client never
//! resumes is dropped after the same time a client has to answer.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use axp_audit::Kind;
use axp_protocol::jsonrpc::{Id, Request, Response};
use axp_protocol::{ErrorCode, RpcError};
use axp_providers::{CallerClient, ClientAsk, ClientRelay, ProviderId};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::gateway::Gateway;

/// How long a client has to answer: sampling and elicitation may wait on a person.
const ANSWER_WITHIN: Duration = Duration::from_secs(600);

type Answer = Result<Value, RpcError>;

/// The requests sent to clients and not yet answered, and what each client said it can do.
#[derive(Default)]
pub struct ClientAsks {
    next: AtomicU64,
    /// Our request id → (the session that must answer, where the answer goes).
    pending: Mutex<HashMap<String, (String, oneshot::Sender<Answer>)>>,
    /// Session id → the capabilities its client declared (in `initialize`, or in a 2026-07-28
    /// request's envelope) and whether it is such a stateless client.
    clients: Mutex<HashMap<String, (Value, bool)>>,
    /// Job id → where the `tools/call` of a stateless client that follows it hears its server's
    /// requests of the client.
    watching: Mutex<HashMap<String, mpsc::UnboundedSender<InputAsk>>>,
    /// `requestState` → a round of requests waiting for the client's retry.
    parked: Mutex<HashMap<String, Parked>>,
}

/// One request of a stateless client, waiting for the client's answer in its retry.
pub struct InputAsk {
    pub method: String,
    pub params: Value,
    /// The server's own key for it, when it asked in an `input_required` result of its own.
    pub key: Option<String>,
    pub answer: oneshot::Sender<Answer>,
}

/// A round of `input_required`: the job, the tool, the requests under their keys, and where the
/// job's later requests arrive.
pub struct Parked {
    pub job_id: String,
    pub tool: String,
    pub asks: Vec<(String, InputAsk)>,
    pub inputs: mpsc::UnboundedReceiver<InputAsk>,
    since: std::time::Instant,
}

impl ClientAsks {
    fn pending(&self) -> MutexGuard<'_, HashMap<String, (String, oneshot::Sender<Answer>)>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn clients(&self) -> MutexGuard<'_, HashMap<String, (Value, bool)>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn watching(&self) -> MutexGuard<'_, HashMap<String, mpsc::UnboundedSender<InputAsk>>> {
        self.watching.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn parked_lock(&self) -> MutexGuard<'_, HashMap<String, Parked>> {
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a session's client speaks the stateless revision.
    pub fn is_stateless(&self, session: &str) -> bool {
        self.clients().get(session).is_some_and(|(_, stateless)| *stateless)
    }

    /// From now on the server's requests of the client made during `job` arrive on the
    /// returned receiver (the stateless client's `tools/call` is following the job).
    pub fn watch(&self, job: &str) -> mpsc::UnboundedReceiver<InputAsk> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.watching().insert(job.to_string(), tx);
        rx
    }

    /// The job has ended: nobody waits for its requests any more.
    pub fn unwatch(&self, job: &str) {
        self.watching().remove(job);
    }

    /// Parks a round until the client's retry; returns its `requestState`. Rounds older than a
    /// client has to answer are dropped, which fails their requests.
    pub fn park(
        &self,
        job_id: &str,
        tool: &str,
        asks: Vec<(String, InputAsk)>,
        inputs: mpsc::UnboundedReceiver<InputAsk>,
    ) -> String {
        let state = crate::util::random_b64(24);
        let mut parked = self.parked_lock();
        parked.retain(|_, p| p.since.elapsed() < ANSWER_WITHIN);
        let round = Parked {
            job_id: job_id.to_string(),
            tool: tool.to_string(),
            asks,
            inputs,
            since: std::time::Instant::now(),
        };
        parked.insert(state.clone(), round);
        state
    }

    /// Puts back a round a retry could not use (a refused answer), under the same state.
    pub fn repark(&self, state: &str, round: Parked) {
        self.parked_lock().insert(state.to_string(), round);
    }

    /// Takes the round a client's retry names.
    pub fn unpark(&self, state: &str) -> Option<Parked> {
        self.parked_lock().remove(state)
    }

    /// The key of `ask` in a round that already has `taken`: the server's own key when it
    /// gave one that is free (so a client sees the names the server chose), else a fresh one.
    pub fn key_for(&self, ask: &InputAsk, taken: &[(String, InputAsk)]) -> String {
        match &ask.key {
            Some(k) if !taken.iter().any(|(t, _)| t == k) => k.clone(),
            _ => format!("r{}", self.next.fetch_add(1, Ordering::Relaxed)),
        }
    }
}

/// The client capability a request needs, as a path into its `initialize` capabilities.
fn needed(method: &str, params: &Value) -> Option<&'static [&'static str]> {
    match method {
        "sampling/createMessage" => Some(&["sampling"]),
        "roots/list" => Some(&["roots"]),
        // Form mode is the default; an `elicitation: {}` from a 2025-06-18 client means form.
        "elicitation/create" if params.get("mode").and_then(Value::as_str) == Some("url") => {
            Some(&["elicitation", "url"])
        }
        "elicitation/create" => Some(&["elicitation"]),
        _ => None,
    }
}

fn declared(caps: &Value, path: &[&str]) -> bool {
    path.iter().try_fold(caps, |v, k| v.get(*k)).is_some()
}

fn refused(why: String) -> RpcError {
    RpcError { code: ErrorCode::MethodNotFound.code(), message: why, data: None }
}

impl Gateway {
    /// Remembers what a session's client can be asked (from its `initialize`).
    pub fn remember_client(&self, session: &str, capabilities: Value, stateless: bool) {
        self.client_asks.clients().insert(session.to_string(), (capabilities, stateless));
    }

    /// A JSON-RPC response a client sent: the answer to one of our requests, if it is one and
    /// comes from the session it was sent to (anything else is dropped).
    pub fn client_answered(&self, session: Option<&str>, resp: Response) {
        let Id::Str(key) = &resp.id else { return };
        let key = key.clone();
        let mut pending = self.client_asks.pending();
        let Some((owner, _)) = pending.get(&key) else { return };
        if Some(owner.as_str()) != session {
            tracing::warn!(request = %key, "a response to a relayed request came from another session; dropped");
            return;
        }
        let Some((_, tx)) = pending.remove(&key) else { return };
        drop(pending);
        let answer = match (resp.error, resp.result) {
            (Some(e), _) => Err(e),
            (None, Some(r)) => Ok(r),
            (None, None) => Err(RpcError::internal("the client answered with neither a result nor an error")),
        };
        let _ = tx.send(answer);
    }

    /// The MCP client of one call (`during`: the call's `meta`, which names its job or, outside
    /// a tool call, its session): its declared capabilities and revision. `None` when the
    /// session did not come over MCP.
    pub fn client_during(&self, during: &Value) -> Option<CallerClient> {
        let session = self.session_of(during)?;
        let (capabilities, stateless) = self.client_asks.clients().get(&session).cloned()?;
        Some(CallerClient { capabilities, stateless, session })
    }

    /// The session of a call's `meta`: its job's (a tool call), or the one it names (a request
    /// served outside a tool call). The session id itself is never put in a tool call's `meta`:
    /// providers hand that to plugins, and an MCP session id is a credential.
    fn session_of(&self, meta: &Value) -> Option<String> {
        match meta.get("job_id").and_then(Value::as_str) {
            Some(job) => self.jobs.session_of(job),
            None => meta.get("session_id").and_then(Value::as_str).map(str::to_string),
        }
    }

    /// Relays `ask` from `provider` to the one session whose call caused it; audits it.
    pub async fn ask_client(&self, provider: &ProviderId, ask: ClientAsk) -> Answer {
        let sessions: BTreeSet<String> = ask.during.iter().filter_map(|m| self.session_of(m)).collect();
        let answer = match sessions.len() {
            0 => Err(refused(format!(
                "no client call to `{provider}` is running, so no client is attached to answer `{}`",
                ask.method
            ))),
            1 => {
                let jobs: Vec<&str> =
                    ask.during.iter().filter_map(|m| m.get("job_id").and_then(Value::as_str)).collect();
                self.send_to_client(sessions.iter().next().map(String::as_str).unwrap_or(""), &jobs, &ask).await
            }
            n => Err(RpcError::internal(format!(
                "`{}` cannot be relayed: calls of {n} sessions to `{provider}` are running and the request does not say whose it is \
                 (give `{provider}` \"isolation\": \"per-session\" in the fleet file for a server of each session's own)",
                ask.method
            ))),
        };
        let outcome = match &answer {
            Ok(_) => "answered".to_string(),
            Err(e) => format!("refused: {}", e.message),
        };
        let session = (sessions.len() == 1).then(|| sessions.iter().next().cloned()).flatten();
        let detail = json!({"provider": provider.as_str(), "method": ask.method, "outcome": outcome});
        self.audit(Kind::Other("client_request".into()), session.as_deref(), detail).await?;
        answer
    }

    async fn send_to_client(&self, session: &str, jobs: &[&str], ask: &ClientAsk) -> Answer {
        let client = self.client_asks.clients().get(session).cloned();
        let Some((caps, stateless)) = client else {
            return Err(refused(format!(
                "the session's client did not connect over MCP `initialize`, so it cannot be asked `{}`",
                ask.method
            )));
        };
        let Some(path) = needed(&ask.method, &ask.params) else {
            return Err(refused(format!("`{}` is not a request a server may make of a client", ask.method)));
        };
        if !declared(&caps, path) {
            return Err(refused(format!("the client did not declare the `{}` capability", path.join("."))));
        }
        if stateless {
            return self.ask_in_result(jobs, ask).await;
        }
        let Some(s) = self.sessions.authenticate(Some(session), None).ok() else {
            return Err(refused("the client's session has ended".into()));
        };
        let id = format!("axp-{}", self.client_asks.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.client_asks.pending().insert(id.clone(), (session.to_string(), tx));
        let request = Request::new(Id::Str(id.clone()), ask.method.clone(), ask.params.clone());
        self.notify_sessions(&[s], serde_json::to_value(request).unwrap_or_default());
        let answer = match tokio::time::timeout(ANSWER_WITHIN, rx).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => Err(RpcError::internal("the gateway dropped the request")),
            Err(_) => Err(RpcError::internal(format!(
                "the client did not answer `{}` within {}s",
                ask.method,
                ANSWER_WITHIN.as_secs()
            ))),
        };
        self.client_asks.pending().remove(&id);
        answer
    }
}

impl Gateway {
    /// A stateless client's answer: the request goes to the `tools/call` following one of the
    /// jobs, which returns it to the client as `input_required`; the answer comes with the
    /// client's retry.
    async fn ask_in_result(&self, jobs: &[&str], ask: &ClientAsk) -> Answer {
        let watcher = jobs.iter().find_map(|j| self.client_asks.watching().get(*j).cloned());
        let Some(watcher) = watcher else {
            return Err(refused(format!("no call of the client is waiting to return `{}` to it", ask.method)));
        };
        let (tx, rx) = oneshot::channel();
        let input =
            InputAsk { method: ask.method.clone(), params: ask.params.clone(), key: ask.key.clone(), answer: tx };
        if watcher.send(input).is_err() {
            return Err(refused(format!("the client's call ended before `{}` could reach it", ask.method)));
        }
        match tokio::time::timeout(ANSWER_WITHIN, rx).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => {
                Err(RpcError::internal(format!("the client did not resume its call to answer `{}`", ask.method)))
            }
            Err(_) => Err(RpcError::internal(format!(
                "the client did not answer `{}` within {}s",
                ask.method,
                ANSWER_WITHIN.as_secs()
            ))),
        }
    }
}

/// The [`ClientRelay`] the gateway hands to its providers.
pub struct Relay(pub Weak<Gateway>);

#[async_trait]
impl ClientRelay for Relay {
    async fn ask(&self, provider: &ProviderId, ask: ClientAsk) -> Answer {
        match self.0.upgrade() {
            Some(gw) => gw.ask_client(provider, ask).await,
            None => Err(refused("the gateway is shutting down".into())),
        }
    }

    fn client_of(&self, during: &Value) -> Option<CallerClient> {
        self.0.upgrade()?.client_during(during)
    }
}

/// Shared handle, for [`axp_providers::RelayLink::set`].
pub fn relay(gw: &Arc<Gateway>) -> Arc<dyn ClientRelay> {
    Arc::new(Relay(Arc::downgrade(gw)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_needs_its_capability() {
        let caps = json!({"sampling": {}, "elicitation": {"form": {}}});
        let need = |m: &str, p: Value| declared(&caps, needed(m, &p).unwrap());
        assert!(need("sampling/createMessage", json!({})));
        assert!(need("elicitation/create", json!({"mode": "form"})));
        assert!(need("elicitation/create", json!({})));
        assert!(!need("elicitation/create", json!({"mode": "url"})), "url mode needs elicitation.url");
        assert!(!need("roots/list", json!({})));
        assert!(needed("tools/call", &json!({})).is_none());
    }
}
