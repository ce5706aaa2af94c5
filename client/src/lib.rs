//! `axp-client` is the one JSON-RPC-over-HTTP client of the gateway's `/axp` and `/mcp`
//! endpoints: the CLI, the operator commands, the end-to-end tests and the benches all talk to
//! a gateway through [`Client`]. It owns the HTTP side of a call (the POST, the session and
//! credential headers, reading a JSON or an event-stream answer); the envelopes themselves are
//! built and read by `axp_protocol::jsonrpc`, so no caller writes or parses JSON-RPC by hand.
//!
//! What a caller keeps for itself: where a session is remembered between runs (the CLI's state
//! file), how an operator's envelope is signed, and what an error means to a person.

mod sse;

use axp_protocol::RpcError;
use axp_protocol::jsonrpc::{self, Id, Notification, Request, Response, ResponseError};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::Value;

/// The MCP session header: the gateway sets it on the answer to `initialize` and `session.open`
/// and reads it on every later call.
pub const SESSION_HEADER: &str = "Mcp-Session-Id";
/// The header that carries a session's capability token.
pub const CAPABILITY_HEADER: &str = "Axp-Capability";

/// Why a call did not come back with a result.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP client could not be built (a TLS backend or resolver failed to start).
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    /// The request could not be sent: nothing listens there, or the connection broke.
    #[error("cannot reach {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The answer's body broke off while it was read.
    #[error("reading the answer to `{method}` failed")]
    Read {
        method: String,
        #[source]
        source: reqwest::Error,
    },
    /// The body of the answer is not JSON.
    #[error("`{method}` answered HTTP {status} with a body that is not JSON: {body}")]
    NotJson { method: String, status: u16, body: String },
    /// The body is JSON but not a JSON-RPC response.
    #[error("`{method}` answered HTTP {status} with something else than a response")]
    NotAResponse {
        method: String,
        status: u16,
        #[source]
        source: ResponseError,
    },
    /// An event stream ended before the response it was to carry.
    #[error("the event stream answering `{method}` ended before its response")]
    StreamEnded { method: String },
    /// A notification was refused (any status but 2xx).
    #[error("`{method}` answered HTTP {status}")]
    Refused { method: String, status: u16 },
    /// The answer to `initialize` or `session.open` named no session.
    #[error("the answer to `{method}` names no session ({what} is missing)")]
    NoSession { method: String, what: &'static str },
    /// The gateway answered with a JSON-RPC error.
    #[error("{0}")]
    Rpc(RpcError),
}

impl Error {
    /// The JSON-RPC error the gateway answered with, if that is what this is.
    pub fn rpc(&self) -> Option<&RpcError> {
        match self {
            Error::Rpc(e) => Some(e),
            _ => None,
        }
    }
}

/// What came back for one request.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The `Mcp-Session-Id` header of the answer, when it has one.
    pub session_id: Option<String>,
    /// The response message exactly as sent, whatever its shape (tests look at malformed
    /// answers too; [`Reply::response`] reads it as JSON-RPC).
    pub message: Value,
    /// Notifications that came before the response on an event stream, in order.
    pub notifications: Vec<Notification>,
    method: String,
}

impl Reply {
    /// The message read as a JSON-RPC response.
    pub fn response(&self) -> Result<Response, Error> {
        jsonrpc::parse_response_value(self.message.clone()).map_err(|source| self.not_a_response(source))
    }

    /// The call's result, or [`Error::Rpc`] with the error it answered.
    pub fn into_result(self) -> Result<Value, Error> {
        let status = self.status;
        let method = self.method;
        jsonrpc::parse_response_value(self.message)
            .map_err(|source| Error::NotAResponse { method, status, source })?
            .into_result()
            .map_err(Error::Rpc)
    }

    fn not_a_response(&self, source: ResponseError) -> Error {
        Error::NotAResponse { method: self.method.clone(), status: self.status, source }
    }
}

/// A JSON-RPC client of one gateway endpoint. The session and credential fields are sent with
/// every request while they are set; callers may change them (and the URL) between calls.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The endpoint, e.g. `http://127.0.0.1:7878/axp`.
    pub url: String,
    /// Sent as `Mcp-Session-Id` (not when empty).
    pub session_id: Option<String>,
    /// Sent as `Axp-Capability` (not when empty).
    pub cap_token: Option<String>,
    /// Sent as `Authorization: Bearer` (an operator's token).
    pub bearer: Option<String>,
    next_id: i64,
    event_stream: bool,
}

/// Says which credentials are set, never what they are: a client may end up in a log.
impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |o: &Option<String>| if o.is_some() { "<set>" } else { "<none>" };
        f.debug_struct("Client")
            .field("url", &self.url)
            .field("session_id", &self.session_id)
            .field("cap_token", &set(&self.cap_token))
            .field("bearer", &set(&self.bearer))
            .field("next_id", &self.next_id)
            .field("event_stream", &self.event_stream)
            .finish()
    }
}

impl Client {
    /// A client with reqwest's default HTTP settings.
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_http(reqwest::Client::new(), url)
    }

    /// A client for measuring calls: one kept-alive connection, no proxy, no Nagle delay, so
    /// each call costs one request on an open socket.
    pub fn keep_alive(url: impl Into<String>) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(1)
            .build()
            .map_err(Error::Build)?;
        Ok(Self::with_http(http, url))
    }

    /// A client on an HTTP client the caller set up.
    pub fn with_http(http: reqwest::Client, url: impl Into<String>) -> Self {
        Self { http, url: url.into(), session_id: None, cap_token: None, bearer: None, next_id: 1, event_stream: false }
    }

    /// Says (in `Accept`) that an event stream is welcome as well as JSON, as MCP clients do;
    /// the gateway then streams `job.attach` and `tools/call` with a progress token.
    pub fn accept_event_stream(mut self) -> Self {
        self.event_stream = true;
        self
    }

    /// The id for the next request (1, 2, …).
    pub fn next_id(&mut self) -> Id {
        let id = Id::Num(self.next_id);
        self.next_id += 1;
        id
    }

    /// Sends `method` with the next id and returns the whole answer.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Reply, Error> {
        let request = Request::new(self.next_id(), method, params);
        self.post(&request).await
    }

    /// Sends `method` with the next id and returns its result ([`Error::Rpc`] for an error).
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, Error> {
        self.request(method, params).await?.into_result()
    }

    /// Sends one request as it is (its id included) and returns the whole answer.
    pub async fn post(&self, request: &Request) -> Result<Reply, Error> {
        let resp = self.send(request.to_bytes()).await?;
        read_reply(resp, &request.method).await
    }

    /// Sends a notification; any 2xx status (the gateway says 202) is success.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), Error> {
        let resp = self.send(Notification::new(method, params).to_bytes()).await?;
        let status = resp.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(Error::Refused { method: method.to_string(), status: status.as_u16() })
        }
    }

    /// MCP's `initialize` with `params`; keeps the `Mcp-Session-Id` it answers with for every
    /// later call and returns the result.
    pub async fn initialize(&mut self, params: Value) -> Result<Value, Error> {
        let reply = self.request("initialize", params).await?;
        let session =
            reply.session_id.clone().ok_or(Error::NoSession { method: "initialize".into(), what: SESSION_HEADER })?;
        let result = reply.into_result()?;
        self.session_id = Some(session);
        Ok(result)
    }

    /// AXP's `session.open` with `params`; keeps the session id and capability token it
    /// answers with for every later call and returns the whole result.
    pub async fn open_session(&mut self, params: Value) -> Result<Value, Error> {
        let result = self.call("session.open", params).await?;
        let field = |name: &'static str| {
            result
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or(Error::NoSession { method: "session.open".into(), what: name })
        };
        let (session, token) = (field("session_id")?, field("cap_token")?);
        self.session_id = Some(session);
        self.cap_token = Some(token);
        Ok(result)
    }

    async fn send(&self, body: Vec<u8>) -> Result<reqwest::Response, Error> {
        let mut req = self.http.post(&self.url).header(CONTENT_TYPE, "application/json").body(body);
        if self.event_stream {
            req = req.header(ACCEPT, "application/json, text/event-stream");
        }
        if let Some(s) = self.session_id.as_deref().filter(|s| !s.is_empty()) {
            req = req.header(SESSION_HEADER, s);
        }
        if let Some(t) = self.cap_token.as_deref().filter(|t| !t.is_empty()) {
            req = req.header(CAPABILITY_HEADER, t);
        }
        if let Some(b) = &self.bearer {
            req = req.bearer_auth(b);
        }
        req.send().await.map_err(|source| Error::Unreachable { url: self.url.clone(), source })
    }
}

/// Reads the answer to `method`: a JSON body, or an event stream that carries notifications
/// and then the response.
async fn read_reply(mut resp: reqwest::Response, method: &str) -> Result<Reply, Error> {
    let status = resp.status().as_u16();
    let session_id = resp.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let streamed = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"));
    let read_err = |source| Error::Read { method: method.to_string(), source };
    if !streamed {
        let bytes = resp.bytes().await.map_err(read_err)?;
        let message = serde_json::from_slice(&bytes).map_err(|_| Error::NotJson {
            method: method.to_string(),
            status,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        })?;
        return Ok(Reply { status, session_id, message, notifications: Vec::new(), method: method.to_string() });
    }
    // The stream is read only as far as the response: the gateway may keep it open a while
    // (keep-alive comments) after its last event.
    let mut events = sse::Events::default();
    let mut notifications = Vec::new();
    loop {
        for data in events.drain() {
            let value: Value = serde_json::from_str(&data).map_err(|_| Error::NotJson {
                method: method.to_string(),
                status,
                body: data.clone(),
            })?;
            match jsonrpc::parse_value(value.clone()) {
                Ok(jsonrpc::Incoming::Notification(n)) => notifications.push(n),
                // A request from the gateway (none is sent on these streams) is not the answer.
                Ok(jsonrpc::Incoming::Request(_)) => {}
                // The response, or a malformed message where it was due: either ends the call,
                // and the caller reads it with `Reply::response`.
                Ok(jsonrpc::Incoming::Response(_)) | Err(_) => {
                    return Ok(Reply { status, session_id, message: value, notifications, method: method.to_string() });
                }
            }
        }
        match resp.chunk().await.map_err(read_err)? {
            Some(chunk) => events.push(&chunk),
            None => return Err(Error::StreamEnded { method: method.to_string() }),
        }
    }
}
