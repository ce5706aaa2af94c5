//! The runner's side of the wire. Every well-formed call goes through `axp_client::Client` (the
//! one JSON-RPC client), under a deadline, with the credentials of one identity (an operator's
//! bearer, a session's token, an attenuated child token). Bytes that are deliberately not
//! JSON-RPC cannot be sent through that client, which only sends well-formed requests: for those
//! checks [`post_raw`] writes one HTTP/1.1 request on a plain TCP connection (`http://` endpoints
//! only) and reads the status and body back.

use std::time::Duration;

use axp_client::{Client, Reply};
use axp_protocol::RpcError;
use axp_protocol::jsonrpc::{Id, Request};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A call's answer: a result or a JSON-RPC error.
#[derive(Debug)]
pub(crate) enum Answer {
    Result(Value),
    Error(RpcError),
}

/// One identity's connection to the endpoint.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    client: Client,
    timeout: Duration,
}

impl Conn {
    /// A connection with no credential at all.
    pub(crate) fn new(url: &str, timeout: Duration) -> Self {
        Self { client: Client::new(url), timeout }
    }

    /// The same endpoint as an operator (`Authorization: Bearer`).
    pub(crate) fn with_bearer(mut self, bearer: Option<&str>) -> Self {
        self.client.bearer = bearer.map(str::to_string);
        self
    }

    /// The same endpoint as the holder of a capability token (and, when given, its session id).
    pub(crate) fn with_token(mut self, session_id: Option<&str>, token: &str) -> Self {
        self.client.session_id = session_id.map(str::to_string);
        self.client.cap_token = Some(token.to_string());
        self
    }

    /// The same identity on a client that accepts event streams, so `job.attach` is answered as
    /// `job.event` notifications on an SSE stream.
    pub(crate) fn streaming(&self) -> Self {
        let mut c = Client::new(self.client.url.clone()).accept_event_stream();
        c.session_id.clone_from(&self.client.session_id);
        c.cap_token.clone_from(&self.client.cap_token);
        c.bearer.clone_from(&self.client.bearer);
        Self { client: c, timeout: self.timeout }
    }

    /// The whole answer to `method`, or why there is none (unreachable, not JSON-RPC, too slow).
    pub(crate) async fn reply(&mut self, method: &str, params: Value) -> Result<Reply, String> {
        match tokio::time::timeout(self.timeout, self.client.request(method, params)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(named(method, &e)),
            Err(_) => Err(format!("`{method}` was not answered within {} s", self.timeout.as_secs())),
        }
    }

    /// Sends `method` under the id given (to check the answer carries it back).
    pub(crate) async fn request_as(&mut self, id: Id, method: &str, params: Value) -> Result<Reply, String> {
        let request = Request::new(id, method, params);
        match tokio::time::timeout(self.timeout, self.client.post(&request)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(named(method, &e)),
            Err(_) => Err(format!("`{method}` was not answered within {} s", self.timeout.as_secs())),
        }
    }

    /// The result or the JSON-RPC error of `method`.
    pub(crate) async fn answer(&mut self, method: &str, params: Value) -> Result<Answer, String> {
        let reply = self.reply(method, params).await?;
        let status = reply.status;
        let resp = reply.response().map_err(|e| format!("`{method}` (HTTP {status}): {}", chain(&e)))?;
        Ok(match resp.into_result() {
            Ok(v) => Answer::Result(v),
            Err(e) => {
                error_shape(&e).map_err(|why| format!("`{method}` answered {}, which {why}", describe(&e)))?;
                Answer::Error(e)
            }
        })
    }

    /// The result of a call that must succeed.
    pub(crate) async fn ok(&mut self, method: &str, params: Value) -> Result<Value, String> {
        match self.answer(method, params).await? {
            Answer::Result(v) => Ok(v),
            Answer::Error(e) => Err(format!("`{method}` failed: {}", describe(&e))),
        }
    }

    /// The error of a call that must fail.
    pub(crate) async fn err(&mut self, method: &str, params: Value) -> Result<RpcError, String> {
        match self.answer(method, params).await? {
            Answer::Error(e) => Ok(e),
            Answer::Result(v) => Err(format!("`{method}` succeeded where an error was due: {}", short(&v))),
        }
    }
}

/// A client error that names `method` (most say which call failed; "cannot reach" does not).
fn named(method: &str, e: &axp_client::Error) -> String {
    let text = chain(e);
    if text.contains(&format!("`{method}`")) { text } else { format!("`{method}`: {text}") }
}

/// An error and its sources, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// What protocol.md promises of every error: `data.name` is the code's name, `data.reason` a
/// sentence, and the message is `Name: reason` (what MCP clients show). Codes outside AXP's
/// list are not judged.
pub(crate) fn error_shape(e: &RpcError) -> Result<(), String> {
    let Some(kind) = e.kind() else { return Ok(()) };
    let data = e.data.as_ref();
    let name = data.and_then(|d| d.get("name")).and_then(Value::as_str);
    let reason = data.and_then(|d| d.get("reason")).and_then(Value::as_str);
    if name != Some(kind.name()) {
        return Err(format!("has data.name {name:?}, not {:?}", kind.name()));
    }
    let Some(reason) = reason.filter(|r| !r.trim().is_empty()) else {
        return Err("has no data.reason".into());
    };
    let message = format!("{}: {reason}", kind.name());
    if e.message != message {
        return Err(format!("has the message {:?}, not `Name: reason`", e.message));
    }
    Ok(())
}

/// An error as `CODE Name: reason`, for details.
pub(crate) fn describe(e: &RpcError) -> String {
    format!("{} {}", e.code, e.message)
}

/// A JSON value cut to a length that fits in a verdict line.
pub(crate) fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 200 {
        return s;
    }
    let mut end = 200;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The status and body of a raw POST.
#[derive(Debug)]
pub(crate) struct RawReply {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// The most of a raw answer read: an error response is a few hundred bytes.
const RAW_MAX: u64 = 1024 * 1024;

/// POSTs `body` as it is to an `http://` URL and returns the status and body of the answer.
pub(crate) async fn post_raw(
    url: &str,
    bearer: Option<&str>,
    body: &[u8],
    timeout: Duration,
) -> Result<RawReply, String> {
    let (authority, path) = split_http_url(url)?;
    let work = async {
        let mut conn = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        if let Some(b) = bearer {
            head.push_str(&format!("Authorization: Bearer {b}\r\n"));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        conn.write_all(&request).await.map_err(|e| format!("writing to {authority}: {e}"))?;
        let mut answer = Vec::new();
        (&mut conn)
            .take(RAW_MAX)
            .read_to_end(&mut answer)
            .await
            .map_err(|e| format!("reading from {authority}: {e}"))?;
        parse_http_response(&answer)
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("{url} did not answer a raw POST within {} s", timeout.as_secs()))?
}

/// `http://host:port/path` → (`host:port`, `/path`); port 80 when none is given.
fn split_http_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url} is not an http:// URL: raw bytes are sent on a plain TCP connection only"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let has_port = match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    };
    let authority = if has_port { authority.to_string() } else { format!("{authority}:80") };
    Ok((authority, path.to_string()))
}

/// Reads an HTTP/1.1 answer read to its end: the status, and the body (de-chunked when sent in
/// chunks).
fn parse_http_response(bytes: &[u8]) -> Result<RawReply, String> {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("the answer has no complete HTTP head: {}", String::from_utf8_lossy(bytes)))?;
    let head = String::from_utf8_lossy(&bytes[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP status line: {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            "content-length" => length = value.parse::<usize>().ok(),
            _ => {}
        }
    }
    let rest = &bytes[end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else {
        match length {
            Some(n) => {
                rest.get(..n).ok_or_else(|| format!("the body ended after {} of {n} bytes", rest.len()))?.to_vec()
            }
            None => rest.to_vec(),
        }
    };
    Ok(RawReply { status, body })
}

/// The body of a `Transfer-Encoding: chunked` answer.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").ok_or("a chunk size line has no end")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| format!("not a chunk size: {size_text:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest.get(..size).ok_or("a chunk ends early")?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or("a chunk has no line end")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_and_path() {
        assert_eq!(split_http_url("http://127.0.0.1:7878/axp").unwrap(), ("127.0.0.1:7878".into(), "/axp".into()));
        assert_eq!(split_http_url("http://[::1]:9/mcp").unwrap(), ("[::1]:9".into(), "/mcp".into()));
        assert_eq!(split_http_url("http://[::1]").unwrap(), ("[::1]:80".into(), "/".into()));
        assert_eq!(split_http_url("http://localhost/a/b").unwrap(), ("localhost:80".into(), "/a/b".into()));
        assert!(split_http_url("https://example.invalid/axp").is_err());
    }

    #[test]
    fn answers_are_read_with_a_length_or_in_chunks() {
        let r = parse_http_response(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 2\r\n\r\n{}trailing").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (400, b"{}".as_slice()));
        let r = parse_http_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\n{\"a\"\r\n3\r\n:1}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, b"{\"a\":1}".as_slice()));
        let r = parse_http_response(b"HTTP/1.1 401 Unauthorized\r\n\r\nrest").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (401, b"rest".as_slice()));
        assert!(parse_http_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_http_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{}").is_err());
    }
}
