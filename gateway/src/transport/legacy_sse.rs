//! The legacy MCP "HTTP with SSE" transport (protocol 2024-11-05), server side, for clients that
//! speak nothing newer: `GET /sse` opens one connection, whose first event (`endpoint`) names
//! `/messages?session_id=<connection id>`; the client POSTs each JSON-RPC message there and gets
//! `202 Accepted`; every response, notification and server-to-client request reaches it as a
//! `message` event on the GET stream. One connection is one MCP session, as over stdio: the
//! session its `initialize` opens (or its first request that needs one) is the session of every
//! later POST, and the stream's end is the session's end (its calls in flight are cancelled and
//! the session is closed). This file owns the connections (their ids, outboxes and lifetimes)
//! and the two routes; every decision about a message is the router's.
//!
//! Security: both routes make the checks `/mcp` makes (Origin and Host against DNS rebinding,
//! the operator's bearer credential, the body size limit), and the GET also requires an
//! operator, since a connection without one could open no session. A connection id is 32 random
//! bytes, the same generator that makes session ids and bearer tokens, and it is bound to the
//! operator that opened the stream: a POST whose id names no live connection, or one of another
//! operator, gets 404 and reaches nothing. What one client can hold is bounded: at most
//! [`MAX_CONNECTIONS`] open connections, at most [`MAX_IN_FLIGHT`] requests running per
//! connection (429 beyond), and at most [`OUTBOX`] messages queued for a client that does not
//! read its stream, after which the connection is ended rather than queue without limit or
//! silently drop an answer a client would wait for forever.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axp_protocol::jsonrpc::{Incoming, parse_incoming};
use axp_protocol::{ErrorCode, RpcError};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use futures::StreamExt;
use tokio::sync::{Semaphore, broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::http::{authed_ctx, host_allowed, origin_allowed, rpc_error};
use crate::auth::operators::Operator;
use crate::gateway::Gateway;
use crate::router::{Ctx, Push};

/// Open legacy connections, gateway-wide. Each holds a task, a broadcast receiver and up to
/// [`OUTBOX`] queued messages; a client past the cap gets 503 instead of growing that set.
pub const MAX_CONNECTIONS: usize = 64;
/// Requests one connection may have running at once. A POST answers 202 before its request
/// runs, so without a cap one client could start requests faster than they finish; past it a
/// POST gets 429 and runs nothing.
pub const MAX_IN_FLIGHT: usize = 64;
/// Messages queued for one client's stream. A client that stops reading fills it, and the
/// connection is then ended: the transport has no way to resume or to say a message was lost,
/// and an answer dropped in silence would leave the client waiting on its request forever.
pub const OUTBOX: usize = 256;

/// The path the `endpoint` event names; the connection id follows as `session_id`.
const MESSAGES_PATH: &str = "/messages";

#[derive(Clone)]
struct LegacyState {
    gw: Arc<Gateway>,
    max_body: usize,
    conns: Arc<Mutex<HashMap<String, Arc<Conn>>>>,
}

impl LegacyState {
    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One open `GET /sse` stream and the MCP session it speaks for.
struct Conn {
    id: String,
    /// The operator that opened the stream: every POST must come from the same one.
    operator: Arc<Operator>,
    out: mpsc::Sender<String>,
    /// The stream's end of `out`, taken (and its queue freed) when the connection ends: a
    /// client that stops reading leaves the stream unpolled, so its end cannot wait for it.
    queued: Mutex<Option<mpsc::Receiver<String>>>,
    /// The session the connection's `initialize` (or first request needing one) opened.
    session: Mutex<Option<String>>,
    /// Set once the client has initialized: MCP has a server send it nothing unasked before.
    ready: AtomicBool,
    in_flight: Arc<Semaphore>,
    /// Cancelled when the connection ends, for whatever reason; ends the stream and the tasks.
    ended: CancellationToken,
}

impl Conn {
    fn session(&self) -> Option<String> {
        self.session.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The first session a request of this connection opened becomes the connection's; a
    /// later `session.open` returns its own token to the client and changes nothing here.
    fn adopt(&self, opened: String) {
        self.session.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(opened);
    }

    /// Queues one message for the stream, or ends the connection if the client has let
    /// [`OUTBOX`] messages pile up.
    fn send(&self, message: String) {
        match self.out.try_send(message) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!("a legacy SSE client has {OUTBOX} messages unread on its stream; ending its connection");
                self.ended.cancel();
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// Owned by the response stream: when hyper drops it (the client hung up, or the stream
/// ended), the connection ends.
struct Hangup(Arc<Conn>);

impl Drop for Hangup {
    fn drop(&mut self) {
        self.0.ended.cancel();
    }
}

/// What ending a connection does, however it ended: the connection is forgotten (its id is
/// refused from now on and its place is free), its queued messages are dropped, its calls in
/// flight are cancelled, nobody being left to hear their answers, and its session is closed.
fn close(st: &LegacyState, conn: &Conn) {
    st.conns().remove(&conn.id);
    drop(conn.queued.lock().unwrap_or_else(PoisonError::into_inner).take());
    let Some(sid) = conn.session() else { return };
    let gw = st.gw.clone();
    let jobs: Vec<String> =
        gw.inflight_lock().iter().filter(|((s, _), _)| *s == sid).map(|(_, job)| job.clone()).collect();
    for job in jobs {
        gw.jobs.cancel(&job);
    }
    close_session(gw, sid);
}

/// Closes a session that ended with its connection. Closing revokes the session's token
/// durably (a file write): off the async workers.
fn close_session(gw: Arc<Gateway>, sid: String) {
    tracing::debug!(session = %sid, "a legacy SSE connection ended; closing its session");
    tokio::task::spawn_blocking(move || {
        if let Err(e) = gw.sessions.close(&sid) {
            tracing::debug!(session = %sid, error = %e.message, "closing a legacy SSE session");
        }
    });
}

/// `GET /sse` and `POST /messages`, with their own state (the live connections).
pub fn router(gw: Arc<Gateway>, max_body: usize) -> Router {
    let st = LegacyState { gw, max_body, conns: Arc::default() };
    Router::new().route("/sse", get(open)).route(MESSAGES_PATH, post(message)).with_state(st)
}

fn forbidden(message: &str) -> HttpResponse {
    rpc_error(StatusCode::FORBIDDEN, RpcError::new(ErrorCode::Unauthorized, message))
}

/// The refusal for a request from a browser page of another origin or under a rebound name.
fn refused_origin(gw: &Gateway, headers: &HeaderMap) -> Option<HttpResponse> {
    if !origin_allowed(headers) {
        return Some(forbidden("requests from this Origin are not allowed"));
    }
    if !host_allowed(gw, headers) {
        return Some(forbidden("this gateway answers only to a loopback Host (DNS-rebinding protection)"));
    }
    None
}

async fn open(State(st): State<LegacyState>, headers: HeaderMap) -> HttpResponse {
    if let Some(refused) = refused_origin(&st.gw, &headers) {
        return refused;
    }
    let ctx = match authed_ctx(&st.gw, &headers) {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    let Some(operator) = ctx.operator else {
        return rpc_error(
            StatusCode::UNAUTHORIZED,
            RpcError::new(ErrorCode::Unauthorized, "send `Authorization: Bearer <operator token>`"),
        );
    };
    // Subscribed before the stream exists, so nothing sent after the client connects is missed.
    let notes = st.gw.notify.subscribe();
    let (out, rx) = mpsc::channel::<String>(OUTBOX);
    let conn = {
        let mut conns = st.conns();
        if conns.len() >= MAX_CONNECTIONS {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                RpcError::new(
                    ErrorCode::LimitExceeded,
                    format!("{MAX_CONNECTIONS} legacy SSE connections are open; close one or use /mcp"),
                )
                .with_data("limit", MAX_CONNECTIONS),
            );
        }
        let conn = Arc::new(Conn {
            id: crate::util::random_b64(32),
            operator,
            out,
            queued: Mutex::new(Some(rx)),
            session: Mutex::default(),
            ready: AtomicBool::new(false),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            ended: CancellationToken::new(),
        });
        conns.insert(conn.id.clone(), conn.clone());
        conn
    };
    let watched = conn.clone();
    tokio::spawn(async move {
        forward_notifications(&watched, notes).await;
        watched.ended.cancelled().await;
        close(&st, &watched);
    });
    let endpoint = Event::default().event("endpoint").data(format!("{MESSAGES_PATH}?session_id={}", conn.id));
    let messages = futures::stream::unfold(Hangup(conn), |hangup| async move {
        let conn = hangup.0.clone();
        let next =
            std::future::poll_fn(|cx| match conn.queued.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
                Some(rx) => rx.poll_recv(cx),
                None => std::task::Poll::Ready(None),
            });
        tokio::select! {
            biased;
            () = conn.ended.cancelled() => None,
            m = next => m.map(|m| (Event::default().event("message").data(m), hangup)),
        }
    });
    let events = futures::stream::once(async move { endpoint }).chain(messages).map(Ok::<_, Infallible>);
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response()
}

/// The gateway's unasked messages (list_changed, resource updates, server logs, servers'
/// requests of the client) that reach this connection's session, once it has initialized.
async fn forward_notifications(conn: &Conn, mut notes: broadcast::Receiver<crate::gateway::Outbound>) {
    loop {
        let note = tokio::select! {
            () = conn.ended.cancelled() => return,
            n = notes.recv() => n,
        };
        match note {
            Ok(n) => {
                if conn.ready.load(Ordering::SeqCst) && n.reaches(conn.session().as_deref()) {
                    conn.send(n.message.to_string());
                }
            }
            // Missed broadcasts are gone, but the connection keeps hearing the ones after them.
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "a legacy SSE connection missed notifications");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// The connection id a POST names in its query (`session_id=…`), if any.
fn connection_id(uri: &Uri) -> Option<&str> {
    uri.query()?.split('&').find_map(|kv| kv.strip_prefix("session_id=")).filter(|id| !id.is_empty())
}

async fn message(State(st): State<LegacyState>, uri: Uri, headers: HeaderMap, body: Body) -> HttpResponse {
    if let Some(refused) = refused_origin(&st.gw, &headers) {
        return refused;
    }
    let ctx = match authed_ctx(&st.gw, &headers) {
        Ok(c) => c,
        Err(resp) => return *resp,
    };
    let Some(id) = connection_id(&uri) else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            RpcError::invalid_request("`session_id` is required: POST to the endpoint the `GET /sse` stream named"),
        );
    };
    // A connection is found only by its own operator: an id that leaked to another operator
    // is as good as unknown to it.
    let conn = st.conns().get(id).cloned().filter(|c| ctx.operator.as_ref().is_some_and(|o| o.name == c.operator.name));
    let Some(conn) = conn.filter(|c| !c.ended.is_cancelled()) else {
        return rpc_error(
            StatusCode::NOT_FOUND,
            RpcError::new(
                ErrorCode::UnknownSession,
                "no open SSE connection has this session_id: open a new one with GET /sse",
            ),
        );
    };
    let bytes = match super::http::read_body(body, st.max_body).await {
        Ok(b) => b,
        Err(refused) => return *refused,
    };
    // A message that is not JSON-RPC is refused on the POST itself (400, as `/mcp` and the
    // reference SDKs' servers do): the error belongs to this HTTP request, and on the stream
    // it could name no request id the client would recognise.
    let msg = match parse_incoming(&bytes) {
        Ok(m) => m,
        Err(resp) => {
            let body = serde_json::to_vec(&resp).unwrap_or_default();
            return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/json")], body).into_response();
        }
    };
    let initialized = match &msg {
        Incoming::Notification(n) => n.method == "notifications/initialized",
        Incoming::Request(r) => r.method != "initialize",
        Incoming::Response(_) => false,
    };
    if initialized {
        conn.ready.store(true, Ordering::SeqCst);
    }
    // The connection decides the session: an `Mcp-Session-Id` header on the POST is ignored,
    // so a POST can speak only for its own connection's session.
    let ctx = Ctx { session_id: conn.session(), operator: Some(conn.operator.clone()), transport: "sse", ..ctx };
    let Incoming::Request(req) = msg else {
        // Notifications (cancellation) and the client's answers to relayed requests act at
        // once, in the order they were posted.
        st.gw.handle(msg, &ctx).await;
        return StatusCode::ACCEPTED.into_response();
    };
    let Ok(permit) = conn.in_flight.clone().try_acquire_owned() else {
        let err = RpcError::new(
            ErrorCode::LimitExceeded,
            format!("{MAX_IN_FLIGHT} requests of this connection are still running"),
        )
        .with_data("limit", MAX_IN_FLIGHT);
        let body = serde_json::to_vec(&axp_protocol::Response::err(req.id, err)).unwrap_or_default();
        return (StatusCode::TOO_MANY_REQUESTS, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    };
    let gw = st.gw.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let (push_tx, mut push_rx) = mpsc::unbounded_channel::<Push>();
        let fwd_conn = conn.clone();
        // Drained as fast as it fills, into the bounded outbox: the unbounded channel is the
        // router's interface, the outbox is the bound.
        let fwd = tokio::spawn(async move {
            while let Some(p) = push_rx.recv().await {
                fwd_conn.send(p.message.to_string());
            }
        });
        let ctx = Ctx { push: Some(push_tx), ..ctx };
        let resp = gw.handle(Incoming::Request(req), &ctx).await;
        if let Some(opened) = ctx.opened_session() {
            conn.adopt(opened.clone());
            // The connection ended while this request opened its session: it was closed
            // without that session, which nobody can use now.
            if conn.ended.is_cancelled() {
                close_session(gw.clone(), opened);
            }
        }
        drop(ctx);
        // Progress first, then the answer it led to.
        let _ = fwd.await;
        if let Some(r) = resp {
            conn.send(serde_json::to_string(&r).unwrap_or_default());
        }
    });
    StatusCode::ACCEPTED.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_id_is_read_from_the_query_only_when_present() {
        let uri: Uri = "/messages?session_id=abc&x=1".parse().unwrap();
        assert_eq!(connection_id(&uri), Some("abc"));
        let uri: Uri = "/messages?x=1&session_id=def".parse().unwrap();
        assert_eq!(connection_id(&uri), Some("def"));
        for bare in ["/messages", "/messages?session_id=", "/messages?sessionid=abc", "/messages?xsession_id=abc"] {
            assert_eq!(connection_id(&bare.parse().unwrap()), None, "{bare}");
        }
    }
}
