//! The soak client's side of the wire to `axp serve`: JSON-RPC requests POSTed to `/axp` by
//! the workspace's one client, `axp-client`, on a shared pool of keep-alive loop-back
//! connections, one gateway session per `Mcp-Session-Id` (opened by MCP `initialize`), and the
//! three ways a client reads a job's events: a JSON `job.attach` long-poll, a `job.attach` POST
//! answered as an SSE stream, and a `GET /axp` resumed with `Last-Event-ID: JOB:SEQ`.
//!
//! `axp-client` reads an event stream whole, up to its response, and only POSTs; the soak must
//! read events one at a time, hang up in the middle, and resume with a `GET`. So the two streamed
//! reads send their request with reqwest here, on the same pool, and split the stream into events
//! themselves; every envelope, sent or read, is still built and parsed by `axp_protocol::jsonrpc`.
//! What to call, when to hang up and what to check is the soak's business (`soak.rs`).

use std::cell::{Cell, RefCell};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use axp_client::{Client, SESSION_HEADER};
use axp_protocol::jsonrpc::{self, Id, Incoming, Request};
use serde_json::{Value, json};

const PROTOCOL_VERSION: &str = "2025-06-18";

fn http_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(10))
        .build()?)
}

/// The gateway's endpoint and a connection pool shared by every task of the client.
pub struct Gw {
    /// Replaced by [`Gw::close_idle`]; a `reqwest::Client` is a cheap handle to its pool, and
    /// every [`Client`] made from it shares that pool.
    http: RefCell<reqwest::Client>,
    url: String,
    next_id: Cell<i64>,
}

impl Gw {
    pub fn new(url: &str) -> Result<Self> {
        // No proxy: the traffic must stay on loop-back whatever the environment says. Idle
        // connections are closed after a while so the gateway's descriptor count follows the
        // load instead of the peak.
        Ok(Self { http: RefCell::new(http_client()?), url: url.to_string(), next_id: Cell::new(1) })
    }

    fn http(&self) -> reqwest::Client {
        self.http.borrow().clone()
    }

    /// A client on the shared pool that speaks for `session` (none: before `initialize`).
    fn client(&self, session: Option<&str>) -> Client {
        let mut c = Client::with_http(self.http(), &self.url);
        c.session_id = session.map(str::to_string);
        c
    }

    /// Closes every idle pooled connection (by starting a new pool), so that the gateway's
    /// descriptor count that follows is its own, not the client's keep-alive connections.
    pub fn close_idle(&self) -> Result<()> {
        *self.http.borrow_mut() = http_client()?;
        Ok(())
    }

    /// The gateway's base URL (`http://127.0.0.1:PORT`).
    pub fn base(&self) -> &str {
        self.url.strip_suffix("/axp").unwrap_or(&self.url)
    }

    fn id(&self) -> Id {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        Id::Num(id)
    }

    /// MCP `initialize` (which opens a gateway session) and `notifications/initialized`;
    /// returns the session id.
    pub async fn initialize(&self) -> Result<String> {
        let mut c = self.client(None);
        c.initialize(json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                            "clientInfo": {"name": "soak-client", "version": "0"}}))
            .await?;
        c.notify("notifications/initialized", json!({})).await?;
        c.session_id.context("the answer to initialize has no Mcp-Session-Id header")
    }

    /// One request answered with JSON; a JSON-RPC error comes back as an
    /// [`axp_client::Error::Rpc`].
    pub async fn call(&self, session: &str, method: &str, params: Value) -> Result<Value> {
        let request = Request::new(self.id(), method, params);
        Ok(self.client(Some(session)).post(&request).await?.into_result()?)
    }

    /// `job.attach` POSTed with `Accept: text/event-stream`: every event from `from_seq` as a
    /// `job.event` notification, then the final response once the job has ended.
    pub async fn attach_sse(&self, session: &str, job: &str, from_seq: u64) -> Result<EventStream> {
        let request = Request::new(self.id(), "job.attach", json!({"job_id": job, "from_seq": from_seq}));
        let resp = self
            .http()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(SESSION_HEADER, session)
            .body(request.to_bytes())
            .send()
            .await?;
        EventStream::open(resp).await
    }

    /// `GET /axp` with `Last-Event-ID: JOB:SEQ`: every event after `SEQ`; the stream ends after
    /// the job's exit event.
    pub async fn resume(&self, session: &str, job: &str, after_seq: u64) -> Result<EventStream> {
        let resp = self
            .http()
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header(SESSION_HEADER, session)
            .header("last-event-id", format!("{job}:{after_seq}"))
            .send()
            .await?;
        EventStream::open(resp).await
    }

    /// The gateway's own `/healthz` text (for the readiness wait).
    pub async fn healthz(&self) -> Result<String> {
        Ok(self.http().get(format!("{}/healthz", self.base())).send().await?.text().await?)
    }
}

/// What an SSE stream of job events yields.
pub enum Item {
    /// One job event (`params` of a `job.event` notification).
    Event(Value),
    /// The final JSON-RPC result of a POSTed `job.attach` (`{next_seq, done}`).
    End(Value),
}

/// An open SSE response. Dropping it closes the connection: that is how the soak hangs up in the
/// middle of an attach.
pub struct EventStream {
    resp: reqwest::Response,
    buf: Vec<u8>,
    /// Events already framed but not yet handed out.
    ready: std::collections::VecDeque<Item>,
    /// The last bytes received, for error messages.
    tail: Vec<u8>,
}

impl EventStream {
    async fn open(resp: reqwest::Response) -> Result<Self> {
        let status = resp.status();
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if !is_sse {
            // An error is answered as plain JSON.
            let bytes = resp.bytes().await?;
            let refused = jsonrpc::parse_response(&bytes)
                .map_err(anyhow::Error::from)
                .and_then(|r| r.into_result().map_err(anyhow::Error::from));
            refused.with_context(|| format!("HTTP {status}: {}", String::from_utf8_lossy(&bytes)))?;
            bail!("HTTP {status}: an attach answered without a stream: {}", String::from_utf8_lossy(&bytes));
        }
        Ok(Self { resp, buf: Vec::new(), ready: Default::default(), tail: Vec::new() })
    }

    /// The next item; `None` once the server has closed the stream. Waits at most `idle` for
    /// bytes (keep-alive comments count), so a stalled stream is an error, not a hang.
    pub async fn next(&mut self, idle: Duration) -> Result<Option<Item>> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Ok(Some(item));
            }
            let chunk = tokio::time::timeout(idle, self.resp.chunk())
                .await
                .map_err(|_| anyhow!("the event stream was silent for {} s", idle.as_secs()))??;
            let Some(chunk) = chunk else {
                return Ok(None);
            };
            self.buf.extend_from_slice(&chunk);
            self.tail.extend_from_slice(&chunk);
            if self.tail.len() > 600 {
                self.tail.drain(..self.tail.len() - 600);
            }
            self.frame()?;
        }
    }

    /// The last few hundred bytes received (for error messages).
    pub fn tail(&self) -> String {
        String::from_utf8_lossy(&self.tail).into_owned()
    }

    /// Moves every complete SSE event in the buffer to `ready`.
    fn frame(&mut self) -> Result<()> {
        while let Some(end) = find_blank_line(&self.buf) {
            let block: Vec<u8> = self.buf.drain(..end.0 + end.1).collect();
            let text = std::str::from_utf8(&block[..end.0]).context("an SSE event that is not UTF-8")?;
            let mut data = String::new();
            for line in text.lines() {
                if let Some(d) = line.strip_prefix("data:") {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(d.strip_prefix(' ').unwrap_or(d));
                }
            }
            if data.is_empty() {
                continue; // a keep-alive comment
            }
            let msg: Value =
                serde_json::from_str(&data).with_context(|| format!("an SSE data line that is not JSON: {data}"))?;
            match jsonrpc::parse_value(msg) {
                Ok(Incoming::Notification(n)) if n.method == "job.event" => {
                    let ev = n.params.ok_or_else(|| anyhow!("a job.event without params"))?;
                    self.ready.push_back(Item::Event(ev));
                }
                Ok(Incoming::Response(r)) => self.ready.push_back(Item::End(r.into_result()?)),
                // Other notifications (and requests, which the gateway does not send on these
                // streams) are not the soak's business.
                Ok(Incoming::Notification(_) | Incoming::Request(_)) => {}
                Err(refusal) => bail!("an SSE message that is not JSON-RPC: {data} ({refusal})"),
            }
        }
        Ok(())
    }
}

/// The end of the first event in `buf`: (offset of the blank line, its length).
fn find_blank_line(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}
