//! Streamable HTTP transport (DESIGN §5) on axum: `POST /axp` (alias `/mcp`) answers with JSON or,
//! when the client accepts it and the method streams, with SSE whose event ids are resumable
//! cursors (`<job_id>:<seq>`); `GET /axp` with `Last-Event-ID` resumes after a cursor, and
//! without it opens the server-to-client notification stream; `DELETE /axp` ends the session.
//! Also `/healthz` and `/metrics`. This file frames bytes and maps HTTP to the dispatcher; it
//! decides nothing about policy.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axp_protocol::jsonrpc::{Id, Incoming, Notification, Response, parse_incoming};
use axp_protocol::methods::JobEventKind;
use axp_protocol::{ErrorCode, RpcError};
use axp_store::EventLines;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::get;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};

use crate::gateway::Gateway;
use crate::router::{Ctx, Message, Push, revision};

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const CAP_HEADER: &str = "axp-capability";

#[derive(Clone)]
struct AppState {
    gw: Arc<Gateway>,
    max_body: usize,
    /// Open `subscriptions/listen` streams (2026-07-28), capped.
    listens: super::listen::Listens,
}

pub fn router(gw: Arc<Gateway>, max_body: usize) -> Router {
    let state = AppState { gw: gw.clone(), max_body, listens: super::listen::Listens::default() };
    Router::new()
        .route("/axp", get(get_stream).post(post).delete(delete))
        .route("/mcp", get(get_stream).post(post).delete(delete))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(state)
        // The web console's static files (`/ui`).
        .merge(super::ui::router(gw.clone()))
        // The legacy 2024-11-05 transport: `GET /sse` and `POST /messages`.
        .merge(super::legacy_sse::router(gw, max_body))
}

fn ctx_from(headers: &HeaderMap) -> Ctx {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    Ctx {
        session_id: h(SESSION_HEADER),
        token: h(CAP_HEADER),
        protocol: h("mcp-protocol-version"),
        trace_header: h("traceparent").map(|p| (p, h("tracestate"))),
        transport: "http",
        ..Ctx::default()
    }
}

/// The request's context with its operator (`Authorization: Bearer`), or the 401 to send: an
/// unknown or malformed credential is refused, never ignored.
pub(super) fn authed_ctx(gw: &Gateway, headers: &HeaderMap) -> Result<Ctx, Box<HttpResponse>> {
    let mut ctx = ctx_from(headers);
    let auth = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    ctx.operator =
        gw.guard.operators.authenticate(auth).map_err(|e| Box::new(rpc_error(StatusCode::UNAUTHORIZED, e)))?;
    Ok(ctx)
}

/// DNS rebinding's other half: a page on `evil.example` whose name now resolves to 127.0.0.1
/// sends `Host: evil.example`. In zero-config local mode (no operator credentials, loopback
/// only) the Host must be a loopback name; with operators configured, credentials guard it.
pub(super) fn host_allowed(gw: &Gateway, headers: &HeaderMap) -> bool {
    if gw.guard.operators.configured() {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    is_loopback_authority(host)
}

/// DNS-rebinding protection the MCP spec asks of local servers: a browser page from another
/// origin must not drive the gateway. Requests without `Origin` (non-browser clients) pass.
pub(super) fn origin_allowed(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let authority = origin.split("://").nth(1).unwrap_or("").split('/').next().unwrap_or("");
    is_loopback_authority(authority)
}

/// `localhost` or a loopback IP literal, with or without a port (`[::1]:7878`).
fn is_loopback_authority(authority: &str) -> bool {
    let name = if authority.starts_with('[') {
        authority.split(']').next().map(|h| format!("{h}]")).unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or("").to_string()
    };
    let name = name.to_ascii_lowercase();
    name == "localhost"
        || name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

pub(super) fn json_response(status: StatusCode, body: &impl serde::Serialize, session: Option<String>) -> HttpResponse {
    let mut resp = (status, [(header::CONTENT_TYPE, "application/json")], serde_json::to_vec(body).unwrap_or_default())
        .into_response();
    if let Some(s) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        resp.headers_mut().insert(SESSION_HEADER, s);
    }
    resp
}

pub(super) fn rpc_error(status: StatusCode, err: RpcError) -> HttpResponse {
    json_response(status, &Response::err(Id::Null, err), None)
}

async fn post(State(st): State<AppState>, headers: HeaderMap, body: Body) -> HttpResponse {
    if !origin_allowed(&headers) {
        return rpc_error(
            StatusCode::FORBIDDEN,
            RpcError::new(ErrorCode::Unauthorized, "requests from this Origin are not allowed"),
        );
    }
    if !host_allowed(&st.gw, &headers) {
        return rpc_error(
            StatusCode::FORBIDDEN,
            RpcError::new(
                ErrorCode::Unauthorized,
                "this gateway answers only to a loopback Host (DNS-rebinding protection)",
            ),
        );
    }
    let ctx = match authed_ctx(&st.gw, &headers) {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    let bytes = match read_body(body, st.max_body).await {
        Ok(b) => b,
        Err(refused) => return *refused,
    };
    let msg = match parse_incoming(&bytes) {
        Ok(m) => m,
        Err(resp) => return json_response(StatusCode::BAD_REQUEST, &resp, None),
    };
    // A session that was deleted or has expired is gone for good: MCP has the client start
    // over with a new `initialize` when it gets 404.
    let initialize = matches!(&msg, Incoming::Request(r) if r.method == "initialize");
    if let (Some(sid), false) = (&ctx.session_id, initialize)
        && let Err(e) = st.gw.sessions.authenticate(Some(sid), ctx.token.as_deref())
        && e.kind() == Some(ErrorCode::UnknownSession)
    {
        let id = match &msg {
            Incoming::Request(r) => r.id.clone(),
            _ => Id::Null,
        };
        return json_response(StatusCode::NOT_FOUND, &Response::err(id, e), None);
    }
    let Incoming::Request(req) = msg else {
        st.gw.handle(msg, &ctx).await;
        return StatusCode::ACCEPTED.into_response();
    };
    // The 2026-07-28 revision: a request that stands alone, whose headers must agree with its
    // body (checked here, before anything runs or a stream opens), and which gets no session.
    let stateless = match revision::envelope(&req, ctx.protocol.as_deref()) {
        Ok(e) => e.is_some(),
        Err(refused) => {
            let status = StatusCode::from_u16(refused.http_status).unwrap_or(StatusCode::BAD_REQUEST);
            return json_response(status, &Response::err(req.id, refused.error), None);
        }
    };
    if stateless && let Some(e) = header_mismatch(&st.gw, &headers, &req) {
        return json_response(StatusCode::BAD_REQUEST, &Response::err(req.id, e), None);
    }
    if stateless && req.method == "subscriptions/listen" {
        if ctx.operator.is_none() {
            return rpc_error(StatusCode::UNAUTHORIZED, crate::auth::operators::operator_required("listening"));
        }
        return super::listen::serve(st.gw.clone(), &st.listens, req, &ctx).await;
    }
    let accepts_sse =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/event-stream"));
    let streams = match req.method.as_str() {
        "tools/call" => req.params.as_ref().and_then(|p| p.get("_meta")).and_then(|m| m.get("progressToken")).is_some(),
        "job.attach" => true,
        _ => false,
    };
    if !(accepts_sse && streams) {
        let resp = st.gw.handle(Incoming::Request(req), &ctx).await;
        let session = if stateless { None } else { ctx.opened_session() };
        let status = ctx.http_status().and_then(|c| StatusCode::from_u16(c).ok()).unwrap_or(StatusCode::OK);
        return match resp {
            Some(resp) => json_response(status, &resp, session),
            // The client cancelled the request: MCP has no response sent for it.
            None => StatusCode::ACCEPTED.into_response(),
        };
    }
    if req.method == "job.attach" {
        return attach_stream(st.gw.clone(), ctx, req).await;
    }
    // A streaming tools/call: progress notifications, then the response, on one SSE stream.
    let (tx, rx) = mpsc::unbounded_channel::<Push>();
    let ctx = Ctx { push: Some(tx.clone()), ..ctx };
    let gw = st.gw.clone();
    tokio::spawn(async move {
        // `None`: the client cancelled the request, and the stream ends without a response.
        if let Some(resp) = gw.handle(Incoming::Request(req), &ctx).await {
            let _ = tx.send(Push { event_id: None, message: serde_json::to_value(resp).unwrap_or_default().into() });
        }
    });
    sse(UnboundedReceiverStream::new(rx))
}

/// SEP-2243: a 2026-07-28 request names its method in `Mcp-Method`, the tool, prompt or
/// resource it addresses in `Mcp-Name`, and each argument a tool marks with `x-mcp-header` in
/// `Mcp-Param-<Name>` (literal, or `=?base64?…?=`), so that proxies can route on headers; a
/// header that is missing or disagrees with the body is refused (-32020, HTTP 400), or a proxy
/// and the gateway would act on different requests. Header values are compared after trimming
/// the whitespace HTTP allows around them.
fn header_mismatch(gw: &Gateway, headers: &HeaderMap, req: &axp_protocol::Request) -> Option<RpcError> {
    let get = |name: &str| headers.get(name).map(|v| v.to_str().map(str::trim).unwrap_or("\u{0}"));
    let mismatch = |what: String| Some(RpcError { code: revision::HEADER_MISMATCH, message: what, data: None });
    match get("mcp-method") {
        Some(m) if m == req.method => {}
        Some(m) => return mismatch(format!("the Mcp-Method header names `{m}` but the body calls `{}`", req.method)),
        None => return mismatch("the Mcp-Method header is missing".into()),
    }
    let params = req.params.as_ref();
    let named = match req.method.as_str() {
        "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
        "resources/read" => params.and_then(|p| p.get("uri")),
        _ => None,
    };
    if let Some(body) = named.and_then(Value::as_str) {
        match get("mcp-name") {
            Some(h) if h == body => {}
            Some(h) => return mismatch(format!("the Mcp-Name header names `{h}` but the body names `{body}`")),
            None => return mismatch(format!("the Mcp-Name header is missing (the body names `{body}`)")),
        }
    }
    if req.method != "tools/call" {
        return None;
    }
    let name = named.and_then(Value::as_str)?;
    let entry = gw.registry.resolve(name)?.entry;
    let props = entry.spec.input_schema.get("properties").and_then(Value::as_object)?;
    let args = params.and_then(|p| p.get("arguments"));
    for (prop, schema) in props {
        let Some(h) = schema.get("x-mcp-header").and_then(Value::as_str) else { continue };
        let body = args.and_then(|a| a.get(prop)).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        let header = get(&format!("mcp-param-{}", h.to_ascii_lowercase()));
        let header = match header.map(decode_param) {
            None => None,
            Some(Ok(v)) => Some(v),
            Some(Err(why)) => return mismatch(format!("the Mcp-Param-{h} header {why}")),
        };
        match (header, body) {
            (None, None) => {}
            (Some(hv), Some(bv)) if hv == bv => {}
            (None, Some(_)) => {
                return mismatch(format!("the Mcp-Param-{h} header is missing (the body sets `{prop}`)"));
            }
            (Some(_), _) => return mismatch(format!("the Mcp-Param-{h} header disagrees with the body's `{prop}`")),
        }
    }
    None
}

/// An `Mcp-Param-*` value: `=?base64?<strict base64>?=` decoded to UTF-8, anything else literal.
fn decode_param(v: &str) -> Result<String, &'static str> {
    use base64::Engine;
    let Some(b64) = v.strip_prefix("=?base64?").and_then(|r| r.strip_suffix("?=")) else {
        return Ok(v.to_string());
    };
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|_| "is not valid Base64")?;
    String::from_utf8(bytes).map_err(|_| "is not UTF-8 once decoded")
}

/// A request body, whole, or the 413 to send when it is larger than `max` bytes.
pub(super) async fn read_body(body: Body, max: usize) -> Result<Bytes, Box<HttpResponse>> {
    axum::body::to_bytes(body, max).await.map_err(|_| {
        Box::new(rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            RpcError::new(ErrorCode::LimitExceeded, format!("the request body is larger than {max} bytes"))
                .with_data("limit", max),
        ))
    })
}

pub(super) fn sse(stream: impl Stream<Item = Push> + Send + 'static) -> HttpResponse {
    let events = stream.map(|p| {
        let mut e = Event::default().data(p.message.into_text());
        if let Some(id) = p.event_id {
            e = e.id(id);
        }
        Ok::<_, Infallible>(e)
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

/// Streams a job's events as `job.event` notifications (ids `<job>:<seq>`), then the final
/// `job.attach` response once the job has ended.
async fn attach_stream(gw: Arc<Gateway>, ctx: Ctx, req: axp_protocol::Request) -> HttpResponse {
    let p = req.params.clone().unwrap_or(Value::Null);
    let prepared = (|| {
        // Checked as the JSON path checks them: a streamed attach is no laxer about its params.
        let a: axp_protocol::methods::JobAttachParams = crate::router::params(&p)?;
        let session_id = a.session_id.or(ctx.session_id.clone());
        let token = a.cap_token.or(ctx.token.clone());
        let s = gw.sessions.authenticate(session_id.as_deref(), token.as_deref())?;
        Ok::<_, RpcError>((gw.jobs.get(&s.id, &a.job_id)?, a.from_seq))
    })();
    let (job, from) = match prepared {
        Ok(x) => x,
        Err(e) => return json_response(StatusCode::OK, &Response::err(req.id, e), None),
    };
    let (tx, rx) = mpsc::channel::<Push>(REPLAY_AHEAD);
    tokio::spawn(async move {
        let next = replay(&gw, &job, from, &tx, false).await;
        let resp = Response::ok(req.id, json!({"next_seq": next, "done": true}));
        let _ = tx.send(Push { event_id: None, message: serde_json::to_value(resp).unwrap_or_default().into() }).await;
    });
    sse(ReceiverStream::new(rx))
}

/// How many events a replay reads ahead of the client. The channel is bounded so that a client
/// that stops reading (or reads slowly) stops the replay instead of making the gateway load the
/// whole log into memory: a job's log can be gigabytes.
const REPLAY_AHEAD: usize = 64;

/// Sends every event of `job` from `from` until its exit; returns the next seq. With
/// `progress_only`, only progress events are sent, as MCP progress notifications.
async fn replay(
    gw: &Gateway,
    job: &axp_store::JobRecord,
    from: u64,
    tx: &mpsc::Sender<Push>,
    progress_only: bool,
) -> u64 {
    if progress_only {
        return replay_progress(gw, job, from, tx).await;
    }
    // The events go out as their log stores them, inside a `job.event` envelope: a replay of a
    // large log is a copy per event, not a decode and an encode.
    let mut seq = from;
    loop {
        let Ok(batch) = gw.jobs.attach_as::<EventLines>(job, seq, Duration::from_secs(15), 1000).await else {
            return seq;
        };
        for (event_seq, line) in batch.events.iter() {
            let mut text = String::with_capacity(line.len() + JOB_EVENT_HEAD.len() + 1);
            text.push_str(JOB_EVENT_HEAD);
            text.push_str(line);
            text.push('}');
            let id = Some(format!("{}:{event_seq}", job.id));
            if tx.send(Push { event_id: id, message: Message::Text(text) }).await.is_err() {
                return seq;
            }
        }
        seq = batch.next_seq;
        if batch.done {
            return seq;
        }
    }
}

/// A `job.event` notification up to its params; the event's JSON and a `}` complete it.
const JOB_EVENT_HEAD: &str = r#"{"jsonrpc":"2.0","method":"job.event","params":"#;

/// [`replay`] of a job's progress events only, as MCP progress notifications.
async fn replay_progress(gw: &Gateway, job: &axp_store::JobRecord, from: u64, tx: &mpsc::Sender<Push>) -> u64 {
    let token = job.spec.get("progress_token").cloned();
    let mut seq = from;
    loop {
        let Ok(batch) = gw.jobs.attach(job, seq, Duration::from_secs(15), 1000).await else {
            return seq;
        };
        for e in &batch.events {
            let (JobEventKind::Progress { progress, total, message }, Some(t)) = (&e.kind, &token) else { continue };
            let message = Notification::new(
                "notifications/progress",
                json!({"progressToken": t, "progress": progress, "total": total, "message": message}),
            )
            .to_value();
            let id = Some(format!("{}:{}", job.id, e.seq));
            if tx.send(Push { event_id: id, message: message.into() }).await.is_err() {
                return seq;
            }
        }
        seq = batch.next_seq;
        if batch.done {
            return seq;
        }
    }
}

async fn get_stream(State(st): State<AppState>, headers: HeaderMap) -> HttpResponse {
    if !origin_allowed(&headers) || !host_allowed(&st.gw, &headers) {
        return StatusCode::FORBIDDEN.into_response();
    }
    let ctx = match authed_ctx(&st.gw, &headers) {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    let session = match st.gw.resume_session(&ctx) {
        Ok(s) => s,
        Err(e) => return rpc_error(StatusCode::NOT_FOUND, e),
    };
    let last = headers.get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(cursor) = last {
        let Some((job_id, seq)) =
            cursor.rsplit_once(':').and_then(|(j, s)| s.parse::<u64>().ok().map(|s| (j.to_string(), s)))
        else {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                RpcError::invalid_params(format!("`{cursor}` is not an event id this gateway issued")),
            );
        };
        let job = match st.gw.jobs.get(&session.id, &job_id) {
            Ok(j) => j,
            Err(e) => return rpc_error(StatusCode::NOT_FOUND, e),
        };
        let (tx, rx) = mpsc::channel::<Push>(REPLAY_AHEAD);
        let gw = st.gw.clone();
        tokio::spawn(async move {
            let from_mcp = job.spec.get("origin").and_then(Value::as_str) == Some("mcp");
            replay(&gw, &job, seq + 1, &tx, from_mcp).await;
            if from_mcp && let Some(resp) = gw.final_response(&job).await {
                let _ = tx
                    .send(Push { event_id: None, message: serde_json::to_value(resp).unwrap_or_default().into() })
                    .await;
            }
        });
        return sse(ReceiverStream::new(rx));
    }
    // The standing notification stream of this session: what every client hears
    // (list_changed) and what is for this session alone (resource updates, server logs).
    let rx = st.gw.notify.subscribe();
    let me = session.id.clone();
    let stream = tokio_stream::wrappers::BroadcastStream::new(rx)
        .filter_map(|m| m.ok())
        .filter(move |o| o.reaches(Some(&me)))
        .map(|o| Push { event_id: None, message: o.message.into() });
    sse(stream)
}

async fn delete(State(st): State<AppState>, headers: HeaderMap) -> HttpResponse {
    if !origin_allowed(&headers) || !host_allowed(&st.gw, &headers) {
        return StatusCode::FORBIDDEN.into_response();
    }
    let ctx = match authed_ctx(&st.gw, &headers) {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    match st.gw.resume_session(&ctx).and_then(|s| st.gw.sessions.close(&s.id)) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => rpc_error(StatusCode::NOT_FOUND, e),
    }
}

/// Who may read `/healthz` in full and `/metrics`: what they say (provider names, why one is
/// down, traffic) is for the operators. Requests from a foreign browser origin or a rebound
/// host name are refused as on `/axp`. Where operators are configured, an operator's bearer
/// token is required; with none configured (loopback only), any local client is the operator.
/// `Err` carries the refusal to send.
fn observer(gw: &Gateway, headers: &HeaderMap) -> Result<(), Box<HttpResponse>> {
    if !origin_allowed(headers) || !host_allowed(gw, headers) {
        return Err(Box::new(StatusCode::FORBIDDEN.into_response()));
    }
    match authed_ctx(gw, headers)?.operator {
        Some(_) => Ok(()),
        None => Err(Box::new(rpc_error(
            StatusCode::UNAUTHORIZED,
            RpcError::new(ErrorCode::Unauthorized, "send `Authorization: Bearer <operator token>`"),
        ))),
    }
}

/// Liveness for anyone who can reach the port (`{"status": "ok"}`, so an orchestrator's probe
/// needs no credential); the providers and their state for operators only (see [`observer`]).
async fn healthz(State(st): State<AppState>, headers: HeaderMap) -> HttpResponse {
    match observer(&st.gw, &headers) {
        Ok(()) => {}
        Err(_) if headers.get(header::AUTHORIZATION).is_none() && origin_allowed(&headers) => {
            return json_response(StatusCode::OK, &json!({"status": "ok"}), None);
        }
        Err(refused) => return *refused,
    }
    let providers: Vec<Value> = st
        .gw
        .registry
        .providers()
        .into_iter()
        .map(|(id, kind, up, reason, tools)| {
            let state = crate::catalog::registry::state_name(up, reason.as_deref());
            let protocol = st.gw.registry.mount_of(&id).and_then(|(m, _)| m.provider.revision());
            let mut p =
                json!({"id": id.0, "kind": kind, "state": state, "available": up, "reason": reason, "tools": tools});
            if let Some(v) = protocol {
                p["protocol"] = json!(v);
            }
            p
        })
        .collect();
    let refused = st.gw.admission.refused_tools();
    json_response(
        StatusCode::OK,
        &json!({"status": "ok", "providers": providers, "tools": st.gw.registry.len(), "refused": refused}),
        None,
    )
}

async fn metrics(State(st): State<AppState>, headers: HeaderMap) -> HttpResponse {
    if let Err(refused) = observer(&st.gw, &headers) {
        return *refused;
    }
    let providers: Vec<(String, bool, usize)> =
        st.gw.registry.providers().into_iter().map(|(id, _, up, _, n)| (id.0, up, n)).collect();
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.gw.metrics.render(&providers))
        .into_response()
}
