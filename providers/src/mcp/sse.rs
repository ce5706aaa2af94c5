//! The legacy MCP "HTTP with SSE" transport (protocol 2024-11-05), client side, as an rmcp
//! [`Transport`]: `GET <url>` with `Accept: text/event-stream` opens the session; the server's
//! first event, `endpoint`, names the URL every client message is POSTed to; every server
//! message arrives as an SSE `message` event on the GET stream. The stream ending is the
//! session ending (the transport has no resumption), which [`Link`] reports so the provider can
//! fail calls in flight at once and restart the server with backoff.
//!
//! Why hand-rolled: rmcp 3.11 ships only a Streamable HTTP client (its `client-side-sse`
//! feature is the response-stream reader of that transport, not the 2024-11-05 pair). The glue
//! here is small and uses the crates rmcp itself uses: `reqwest` for HTTP and `sse-stream` for
//! SSE framing.
//!
//! Security: the endpoint URL is resolved against the GET URL and must be on the **same
//! origin** (scheme, host, port). A server that names another origin is refused: it would
//! otherwise make the gateway POST every message, with the operator's configured `headers`
//! (often credentials), to a host of its choosing. Redirects are followed only within the
//! origin, and only with 307/308 (which keep a POST's body), as rmcp's own Streamable HTTP
//! client does. One SSE event may be at most [`MAX_EVENT_BYTES`]: a server that never ends an
//! event cannot grow the gateway's memory without bound (the stream fails, the session ends).
//!
//! Ordering: rmcp starts each outgoing message's send future in order but runs them
//! concurrently; a single writer task POSTs them one after another, so the server sees them in
//! the order they were sent (`notifications/initialized` before the first request, a
//! cancellation after the request it cancels).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use sse_stream::SseStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// How long one POST of a client message may take.
const POST_TIMEOUT: Duration = Duration::from_secs(30);
/// Most of an error body quoted in a message.
const ERROR_BODY_MAX: usize = 512;
/// Most of a successful POST's body read (and discarded) so the connection can be reused.
const DRAIN_MAX: usize = 64 * 1024;
/// Same-origin redirects followed for one request.
const MAX_REDIRECTS: usize = 10;
/// Server messages buffered between the GET stream and the rmcp service loop.
const INBOX: usize = 256;
/// Largest SSE event (or, over Streamable HTTP, JSON answer) accepted from a remote MCP server,
/// on either HTTP transport: a tool result with images can be large, but not unbounded.
pub const MAX_EVENT_BYTES: usize = axp_provider_api::MAX_MESSAGE_BYTES;

/// Why the legacy SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    /// The configuration cannot be used (URL, header name or value).
    #[error("{0}")]
    Config(String),
    /// The `GET` that opens the SSE stream failed or was answered with something other than
    /// an event stream.
    #[error("cannot open the SSE stream at {url}: {reason}")]
    Connect { url: String, reason: String },
    /// The stream ended or failed before the server named its message endpoint.
    #[error("the server at {url} sent no `endpoint` event: {reason}")]
    NoEndpoint { url: String, reason: String },
    /// The `endpoint` event's URL is not a URL relative to (or on the same origin as) the
    /// stream's.
    #[error("the server's `endpoint` event `{endpoint}` is not a usable URL: {reason}")]
    BadEndpoint { endpoint: String, reason: String },
    /// The `endpoint` event names another origin: refused, so our messages and the configured
    /// headers never go to a host the server picked.
    #[error(
        "refusing the server's message endpoint {endpoint}: it is on origin {endpoint_origin}, not on the SSE stream's origin {stream_origin} (a server must not redirect our messages and the configured headers to another host)"
    )]
    ForeignEndpoint { endpoint: String, endpoint_origin: String, stream_origin: String },
    /// A `POST` of one client message failed.
    #[error("POST to the message endpoint failed: {0}")]
    Post(String),
    /// The transport is closed (the stream ended or the client closed it).
    #[error("the SSE connection is closed")]
    Closed,
}

/// A handle on the GET stream's life, for the provider's supervisor: `ended()` is cancelled
/// when the stream ends or fails, and `reason()` says why.
#[derive(Clone, Debug, Default)]
pub struct Link {
    ended: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
}

impl Link {
    /// Cancelled once the SSE stream is over.
    pub fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }

    /// Why the stream ended (or a generic text while it has not).
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "the SSE connection to the server was lost".into())
    }

    fn end(&self, reason: String) {
        let mut r = self.reason.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if r.is_none() {
            *r = Some(reason);
        }
        drop(r);
        self.ended.cancel();
    }
}

type Outgoing = (TxJsonRpcMessage<RoleClient>, oneshot::Sender<Result<(), SseError>>);

/// A connected legacy SSE session, ready for `rmcp::serve_client`.
pub struct LegacySseTransport {
    inbox: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    outbox: mpsc::UnboundedSender<Outgoing>,
    link: Link,
    reader: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
    endpoint: Url,
}

impl std::fmt::Debug for LegacySseTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacySseTransport").field("endpoint", &self.endpoint.as_str()).finish()
    }
}

/// Only same-origin 307/308 redirects, like rmcp's Streamable HTTP client: a 301/302/303
/// turns a POST into a bodyless GET, and a cross-origin hop would carry the configured headers
/// to another host.
pub(super) fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    })
}

fn header_map(headers: &BTreeMap<String, String>) -> Result<HeaderMap, SseError> {
    let mut map = HeaderMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| SseError::Config(format!("bad header name `{k}`: {e}")))?;
        let value =
            HeaderValue::from_str(v).map_err(|e| SseError::Config(format!("bad value for header `{k}`: {e}")))?;
        map.insert(name, value);
    }
    Ok(map)
}

/// The operator's headers with ours set (replacing theirs: `RequestBuilder::header` would add
/// a second value).
fn with(headers: &HeaderMap, name: HeaderName, value: &'static str) -> HeaderMap {
    let mut h = headers.clone();
    h.insert(name, HeaderValue::from_static(value));
    h
}

/// The origin of `url` as `scheme://host:port`.
fn origin_text(url: &Url) -> String {
    url.origin().ascii_serialization()
}

/// Resolves the `endpoint` event's data against the stream's URL and checks it stays on the
/// stream's origin.
pub fn resolve_endpoint(stream: &Url, data: &str) -> Result<Url, SseError> {
    let data = data.trim();
    if data.is_empty() {
        return Err(SseError::BadEndpoint { endpoint: String::new(), reason: "it is empty".into() });
    }
    let endpoint =
        stream.join(data).map_err(|e| SseError::BadEndpoint { endpoint: data.to_string(), reason: e.to_string() })?;
    if endpoint.origin() != stream.origin() {
        return Err(SseError::ForeignEndpoint {
            endpoint: endpoint.to_string(),
            endpoint_origin: origin_text(&endpoint),
            stream_origin: origin_text(stream),
        });
    }
    Ok(endpoint)
}

/// Reads at most `max` bytes of a response body.
async fn read_capped(mut resp: reqwest::Response, max: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < max {
        match resp.chunk().await {
            Ok(Some(c)) => out.extend_from_slice(&c[..c.len().min(max - out.len())]),
            Ok(None) | Err(_) => break,
        }
    }
    out
}

/// `status: first part of the body`, for error messages.
async fn describe_failure(resp: reqwest::Response) -> String {
    let status = resp.status();
    let body = read_capped(resp, ERROR_BODY_MAX).await;
    let body = String::from_utf8_lossy(&body);
    let body = body.trim();
    if body.is_empty() { format!("HTTP {status}") } else { format!("HTTP {status}: {body}") }
}

impl LegacySseTransport {
    /// Opens the SSE stream at `url` with `headers` on every request, and waits for the
    /// server's `endpoint` event. The caller bounds the wait (the provider's connect timeout).
    /// `Accept` (on the GET) and `Content-Type` (on POSTs) are ours and replace the operator's.
    pub async fn connect(url: &str, headers: &BTreeMap<String, String>) -> Result<Self, SseError> {
        let stream_url = Url::parse(url).map_err(|e| SseError::Config(format!("`{url}` is not a URL: {e}")))?;
        if !matches!(stream_url.scheme(), "http" | "https") {
            return Err(SseError::Config(format!("`{url}` is not an http(s) URL")));
        }
        let headers = header_map(headers)?;
        let client = reqwest::Client::builder()
            .redirect(redirect_policy())
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| SseError::Config(format!("cannot build the HTTP client: {e}")))?;
        let connect_err = |reason: String| SseError::Connect { url: url.to_string(), reason };
        let resp = client
            .get(stream_url.clone())
            .headers(with(&headers, ACCEPT, "text/event-stream"))
            .send()
            .await
            .map_err(|e| connect_err(error_chain(&e)))?;
        if !resp.status().is_success() {
            return Err(connect_err(describe_failure(resp).await));
        }
        let content_type =
            resp.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
        if !content_type.starts_with("text/event-stream") {
            return Err(connect_err(format!(
                "the answer is `{}`, not an event stream (is this a Streamable HTTP server? then use \"type\": \"http\")",
                if content_type.is_empty() { "without a content type" } else { &content_type }
            )));
        }
        // Redirects stay on the origin, so the final URL is the base for relative endpoints.
        let base = resp.url().clone();
        let mut events = SseStream::from_bytes_stream(bounded(resp.bytes_stream(), MAX_EVENT_BYTES));
        let link = Link::default();
        let (inbox_tx, inbox) = mpsc::channel(INBOX);
        // Messages a server sends before naming its endpoint are kept, not lost.
        let mut early = Vec::new();
        let endpoint = loop {
            let no_endpoint = |reason: String| SseError::NoEndpoint { url: url.to_string(), reason };
            match events.next().await {
                None => return Err(no_endpoint("the stream ended".into())),
                Some(Err(e)) => return Err(no_endpoint(format!("the stream failed: {e}"))),
                Some(Ok(ev)) => match ev.event.as_deref() {
                    Some("endpoint") => break resolve_endpoint(&base, ev.data.as_deref().unwrap_or(""))?,
                    None | Some("message") => early.extend(ev.data.as_deref().and_then(parse_message)),
                    Some(_) => {}
                },
            }
        };
        tracing::debug!(stream = %base, endpoint = %endpoint, "legacy SSE session open");
        for m in early {
            let _ = inbox_tx.try_send(m);
        }
        let reader = tokio::spawn(read_stream(events, inbox_tx, link.clone()));
        let (outbox, out_rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_messages(client, endpoint.clone(), headers, out_rx, link.clone()));
        Ok(Self { inbox, outbox, link, reader, writer, endpoint })
    }

    /// The stream's life, for the supervisor.
    pub fn link(&self) -> Link {
        self.link.clone()
    }

    /// Where client messages are POSTed.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }
}

/// Fails the byte stream once one SSE event (the bytes between blank lines) passes `max`:
/// `sse-stream` buffers an event until its blank line, so a server that never sends one would
/// otherwise grow the gateway's memory without bound. Counting needs only the line ends
/// (`\n`, `\r`, `\r\n`), not a second parser.
fn bounded<S, E>(stream: S, max: usize) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut in_event = 0usize;
    let mut line_start = true;
    let mut prev = 0u8;
    stream.map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        for &b in chunk.iter() {
            match b {
                b'\n' if prev == b'\r' => {}
                b'\n' | b'\r' => {
                    if line_start {
                        in_event = 0;
                    }
                    line_start = true;
                }
                _ => {
                    line_start = false;
                    in_event += 1;
                }
            }
            prev = b;
        }
        if in_event > max {
            return Err(std::io::Error::other(format!("an SSE event is larger than {max} bytes")));
        }
        Ok(chunk)
    })
}

/// `e` and its sources, `: `-joined (reqwest's top-level message alone says little).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

fn parse_message(data: &str) -> Option<RxJsonRpcMessage<RoleClient>> {
    match serde_json::from_str(data) {
        Ok(m) => Some(m),
        Err(e) => {
            let head: String = data.chars().take(200).collect();
            tracing::warn!("ignoring an SSE message that is not a JSON-RPC message ({e}): {head}");
            None
        }
    }
}

async fn read_stream<S>(mut events: S, inbox: mpsc::Sender<RxJsonRpcMessage<RoleClient>>, link: Link)
where
    S: futures::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Unpin,
{
    let reason = loop {
        match events.next().await {
            None => break "the server closed the SSE stream (legacy SSE: the session is over)".to_string(),
            Some(Err(e)) => break format!("the SSE stream failed: {}", error_chain(&e)),
            Some(Ok(ev)) => match ev.event.as_deref() {
                // The SSE default event type is `message`.
                None | Some("message") => {
                    if let Some(m) = ev.data.as_deref().and_then(parse_message)
                        && inbox.send(m).await.is_err()
                    {
                        break "the client closed the session".to_string();
                    }
                }
                Some("endpoint") => {
                    tracing::warn!("ignoring a second `endpoint` event: the message endpoint is fixed for a session")
                }
                Some(other) => tracing::debug!("ignoring an SSE event of type `{other}`"),
            },
        }
    };
    link.end(reason);
}

async fn write_messages(
    client: reqwest::Client,
    endpoint: Url,
    headers: HeaderMap,
    mut outbox: mpsc::UnboundedReceiver<Outgoing>,
    link: Link,
) {
    while let Some((message, done)) = outbox.recv().await {
        if link.ended.is_cancelled() {
            let _ = done.send(Err(SseError::Closed));
            continue;
        }
        let _ = done.send(post(&client, &endpoint, &headers, &message).await);
    }
}

async fn post(
    client: &reqwest::Client,
    endpoint: &Url,
    headers: &HeaderMap,
    message: &TxJsonRpcMessage<RoleClient>,
) -> Result<(), SseError> {
    let body = serde_json::to_vec(message).map_err(|e| SseError::Post(format!("cannot encode the message: {e}")))?;
    let resp = client
        .post(endpoint.clone())
        .headers(with(headers, CONTENT_TYPE, "application/json"))
        .timeout(POST_TIMEOUT)
        .body(body)
        .send()
        .await
        .map_err(|e| SseError::Post(error_chain(&e)))?;
    if !resp.status().is_success() {
        return Err(SseError::Post(describe_failure(resp).await));
    }
    // Read the (usually tiny, `Accepted`) body so the connection can be reused.
    read_capped(resp, DRAIN_MAX).await;
    Ok(())
}

impl Transport<RoleClient> for LegacySseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Queued now, in call order; the writer task POSTs in that order.
        let (done, result) = oneshot::channel();
        let queued = self.outbox.send((item, done)).map_err(|_| SseError::Closed);
        async move {
            queued?;
            result.await.map_err(|_| SseError::Closed)?
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inbox.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.writer.abort();
        self.link.end("the client closed the session".into());
        Ok(())
    }
}

impl Drop for LegacySseTransport {
    fn drop(&mut self) {
        // Dropping the GET ends the session on the server too.
        self.reader.abort();
        self.writer.abort();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("http://127.0.0.1:3001/sse").unwrap()
    }

    #[test]
    fn relative_and_same_origin_endpoints_resolve() {
        let e = resolve_endpoint(&base(), "/message?sessionId=abc").unwrap();
        assert_eq!(e.as_str(), "http://127.0.0.1:3001/message?sessionId=abc");
        let e = resolve_endpoint(&base(), " messages/?session_id=1\n").unwrap();
        assert_eq!(e.as_str(), "http://127.0.0.1:3001/messages/?session_id=1");
        let e = resolve_endpoint(&base(), "http://127.0.0.1:3001/m").unwrap();
        assert_eq!(e.path(), "/m");
    }

    #[test]
    fn endpoints_on_another_origin_are_refused() {
        for other in [
            "http://evil.example/collect",
            "//evil.example/collect",
            "http://127.0.0.1:3002/message",
            "https://127.0.0.1:3001/message",
            "http://localhost:3001/message",
            "file:///etc/passwd",
        ] {
            match resolve_endpoint(&base(), other) {
                Err(SseError::ForeignEndpoint { .. }) => {}
                r => panic!("{other} should be refused as foreign, got {r:?}"),
            }
        }
        let msg = resolve_endpoint(&base(), "http://evil.example/x").unwrap_err().to_string();
        assert!(msg.contains("http://evil.example") && msg.contains("http://127.0.0.1:3001"), "{msg}");
        assert!(matches!(resolve_endpoint(&base(), "  "), Err(SseError::BadEndpoint { .. })));
    }

    async fn parse(chunks: Vec<&'static str>, max: usize) -> Vec<Result<Option<String>, String>> {
        let stream = futures::stream::iter(
            chunks.into_iter().map(|c| Ok::<_, std::io::Error>(bytes::Bytes::from_static(c.as_bytes()))),
        );
        SseStream::from_bytes_stream(bounded(stream, max))
            .map(|r| r.map(|e| e.data).map_err(|e| error_chain(&e)))
            .collect()
            .await
    }

    #[tokio::test]
    async fn events_within_the_bound_pass_and_an_endless_one_is_cut_off() {
        // Many events, each under the bound, in total far over it; CRLF and split chunks.
        let ok = parse(vec!["data: 0123456789\r\n\r\n", "data: 0123", "456789\n", "\n", "data: x\r\r"], 20).await;
        let data: Vec<_> = ok.into_iter().map(Result::unwrap).collect();
        assert_eq!(data, vec![Some("0123456789".into()), Some("0123456789".into()), Some("x".into())]);
        // One event whose data lines never end with a blank line.
        let cut = parse(vec!["data: 0123456789\n", "data: 0123456789\n", "data: 0123456789\n"], 30).await;
        let err = cut.last().unwrap().clone().unwrap_err();
        assert!(err.contains("larger than 30 bytes"), "{err}");
    }

    #[test]
    fn bad_header_names_are_config_errors() {
        let h = BTreeMap::from([("bad header".to_string(), "x".to_string())]);
        assert!(matches!(header_map(&h), Err(SseError::Config(m)) if m.contains("bad header name")));
    }
}
