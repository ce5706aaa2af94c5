//! HTTP/1.x as a forward proxy sees it: request heads (parsing with `httparse`, the checks that
//! keep one request to one destination: absolute-form target, `Host` agreement, unambiguous body
//! framing; the head rewritten for the origin server), response heads (where the body ends, after
//! RFC 9112 §6.3, whether the upstream connection can carry another request, and the head
//! rewritten for the client), and a scanner for chunked bodies (either direction).
//!
//! Pure functions only. This module must not perform I/O or consult the allowlist.

use crate::host::{HostError, Target, parse_absolute_form, parse_authority};

/// Most headers accepted in one request head.
pub const MAX_HEADERS: usize = 100;

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Method, e.g. `GET` or `CONNECT`.
    pub method: String,
    /// The request target as sent.
    pub target: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Header names and raw values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Length of the head in bytes, including the final CRLF CRLF.
    pub len: usize,
}

/// Why a request head was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// Not valid HTTP/1.x syntax (including NUL, bare CR or LF where they do not belong).
    #[error("malformed HTTP request: {0}")]
    Syntax(String),
    /// More than [`MAX_HEADERS`] headers.
    #[error("too many headers")]
    TooManyHeaders,
    /// The request target or a `Host` header does not parse.
    #[error("{0}")]
    Host(#[from] HostError),
    /// The `Host` header names a different destination than the request target.
    #[error("the Host header `{header}` does not match the request target `{target}`")]
    HostMismatch {
        /// What the header said.
        header: String,
        /// What the request line said.
        target: String,
    },
    /// More than one `Host` header.
    #[error("more than one Host header")]
    DuplicateHost,
    /// The body framing is ambiguous (both Content-Length and Transfer-Encoding, differing
    /// Content-Lengths, or a transfer coding other than `chunked`): a smuggling vector.
    #[error("ambiguous or unsupported body framing: {0}")]
    Framing(&'static str),
}

/// Parses a request head from the start of `buf`. `Ok(None)` means incomplete.
pub fn parse_head(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    let mut hdrs = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut hdrs);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(len)) => Ok(Some(RequestHead {
            method: req.method.unwrap_or_default().to_string(),
            target: req.path.unwrap_or_default().to_string(),
            minor: req.version.unwrap_or(1),
            headers: req.headers.iter().map(|h| (h.name.to_string(), h.value.to_vec())).collect(),
            len,
        })),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyHeaders),
        Err(e) => Err(HeadError::Syntax(e.to_string())),
    }
}

impl RequestHead {
    /// Values of every header called `name` (case-insensitive).
    pub fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        values(&self.headers, name)
    }

    /// Checks the single `Host` header (if any) names `target`; `default_port` applies when the
    /// header has no port.
    pub fn check_host(&self, target: &Target, default_port: u16) -> Result<(), HeadError> {
        let mut hosts = self.values("host");
        let Some(h) = hosts.next() else {
            return Ok(());
        };
        if hosts.next().is_some() {
            return Err(HeadError::DuplicateHost);
        }
        let text = std::str::from_utf8(h).map_err(|_| HostError::NonAscii)?;
        let parsed = parse_authority(text.trim(), Some(default_port))?;
        if &parsed != target {
            return Err(HeadError::HostMismatch { header: text.to_string(), target: target.to_string() });
        }
        Ok(())
    }

    /// The body framing, refusing the ambiguous combinations.
    pub fn body(&self) -> Result<Body, HeadError> {
        let (te, len) = framing_fields(&self.headers)?;
        if !te.is_empty() {
            if te.len() == 1 && te[0].trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Ok(Body::Chunked);
            }
            return Err(HeadError::Framing("transfer coding other than `chunked`"));
        }
        Ok(len.map_or(Body::None, Body::Length))
    }
}

/// Values of every header in `headers` called `name` (case-insensitive).
fn values<'a>(headers: &'a [(String, Vec<u8>)], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
}

/// The framing fields of a head, with the ambiguities refused that request and response share:
/// the `Transfer-Encoding` values, and the one length every `Content-Length` agrees on. Both
/// kinds at once, a value that is not a plain number, or two that differ are smuggling vectors.
fn framing_fields(headers: &[(String, Vec<u8>)]) -> Result<(Vec<&[u8]>, Option<u64>), HeadError> {
    let te: Vec<&[u8]> = values(headers, "transfer-encoding").collect();
    let mut cl = values(headers, "content-length").peekable();
    if !te.is_empty() && cl.peek().is_some() {
        return Err(HeadError::Framing("both Content-Length and Transfer-Encoding"));
    }
    let mut len = None;
    for v in cl {
        let s = std::str::from_utf8(v)
            .ok()
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(HeadError::Framing("Content-Length is not a number"))?;
        if len.is_some_and(|l| l != s) {
            return Err(HeadError::Framing("differing Content-Length headers"));
        }
        len = Some(s);
    }
    Ok((te, len))
}

/// How a request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// No body.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A plain-HTTP proxy request, checked: where it goes and the head to send there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRequest {
    /// The destination.
    pub target: Target,
    /// The head to send upstream (origin-form, hop-by-hop headers removed; persistent only
    /// when [`ForwardRequest::persistent`], else with `Connection: close`).
    pub upstream_head: Vec<u8>,
    /// The body framing.
    pub body: Body,
    /// Whether the upstream connection is left persistent, so that the proxy may keep it after
    /// the exchange: an HTTP/1.1 request without a body. A request with a body asks the origin
    /// to close after it: if the origin read the body's end differently than the proxy's framing
    /// (a parser differential), what it took for a second request would then never be read, so
    /// no request the proxy did not check can ride a kept connection.
    pub persistent: bool,
    /// Whether the request may go over an upstream connection kept from an earlier one: a
    /// bodiless `GET`, `HEAD` or `OPTIONS`, which is safe to send again on a fresh connection
    /// if the kept one turns out to have been closed by the origin (RFC 9110 §9.2.2).
    pub may_reuse: bool,
}

/// Hop-by-hop fields (RFC 9110 §7.6.1, and the `Proxy-*` and `Keep-Alive` of older practice):
/// they describe one connection, so a proxy never forwards them.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// The field names a `Connection` header lists (lower case): hop-by-hop as well.
fn connection_tokens(headers: &[(String, Vec<u8>)]) -> Vec<String> {
    values(headers, "connection")
        .flat_map(|v| v.split(|b| *b == b','))
        .filter_map(|t| std::str::from_utf8(t).ok())
        .map(|t| t.trim().to_ascii_lowercase())
        .collect()
}

/// Appends every end-to-end header (hop-by-hop ones and those `Connection` lists left out).
fn end_to_end(out: &mut Vec<u8>, headers: &[(String, Vec<u8>)]) -> bool {
    let listed = connection_tokens(headers);
    let mut saw_host = false;
    for (n, v) in headers {
        let lower = n.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || listed.contains(&lower) {
            continue;
        }
        saw_host |= lower == "host";
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    saw_host
}

/// Checks an absolute-form request and builds the head for the origin server. One request per
/// client connection: the proxy answers with `Connection: close` and reads nothing after the
/// request's body, so a second request on the same client connection can never reach an origin
/// under the first one's checks. Upstream, a bodiless HTTP/1.1 request leaves the connection
/// persistent (the proxy may keep it for a later request to the same destination; see
/// `proxy.rs`); HTTP/1.0 and requests with a body ask for `Connection: close`.
pub fn forward_request(head: &RequestHead) -> Result<ForwardRequest, HeadError> {
    let (target, path) = parse_absolute_form(&head.target)?;
    head.check_host(&target, 80)?;
    let body = head.body()?;
    let mut out = Vec::with_capacity(head.len + 64);
    out.extend_from_slice(head.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(if head.minor == 0 { b" HTTP/1.0\r\n" } else { b" HTTP/1.1\r\n" });
    if !end_to_end(&mut out, &head.headers) {
        out.extend_from_slice(format!("Host: {}\r\n", host_header(&target)).as_bytes());
    }
    let persistent = head.minor == 1 && body == Body::None;
    out.extend_from_slice(if persistent { b"\r\n" } else { b"Connection: close\r\n\r\n" });
    let may_reuse = body == Body::None && ["GET", "HEAD", "OPTIONS"].contains(&head.method.as_str());
    Ok(ForwardRequest { target, upstream_head: out, body, persistent, may_reuse })
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// The reason phrase as sent (may be empty).
    pub reason: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Header names and raw values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Length of the head in bytes, including the final CRLF CRLF.
    pub len: usize,
}

/// Parses a response head from the start of `buf`. `Ok(None)` means incomplete.
pub fn parse_response_head(buf: &[u8]) -> Result<Option<ResponseHead>, HeadError> {
    let mut hdrs = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut hdrs);
    match resp.parse(buf) {
        Ok(httparse::Status::Partial) => Ok(None),
        Ok(httparse::Status::Complete(len)) => Ok(Some(ResponseHead {
            status: resp.code.unwrap_or_default(),
            reason: resp.reason.unwrap_or_default().to_string(),
            minor: resp.version.unwrap_or(1),
            headers: resp.headers.iter().map(|h| (h.name.to_string(), h.value.to_vec())).collect(),
            len,
        })),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyHeaders),
        Err(e) => Err(HeadError::Syntax(e.to_string())),
    }
}

/// How a response body is delimited (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseBody {
    /// No body (a `HEAD` request, 204, 304).
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Everything until the origin closes the connection.
    UntilClose,
}

/// A final response as the proxy relays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayedResponse {
    /// Where its body ends.
    pub body: ResponseBody,
    /// Whether the upstream connection can carry another request once the body has ended:
    /// HTTP/1.1, a delimited body, and no `Connection: close`.
    pub reusable: bool,
    /// The head to send the client: HTTP/1.1, hop-by-hop headers removed, `Connection: close`.
    pub client_head: Vec<u8>,
}

impl ResponseHead {
    /// Whether this is an interim (1xx) response, which a final one follows. 101 is not: the
    /// proxy never forwards `Upgrade`, so [`relay_response`] refuses it.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }

    /// The head to send the client for an interim response (hop-by-hop headers removed).
    pub fn interim_head(&self) -> Vec<u8> {
        let mut out = self.status_line();
        end_to_end(&mut out, &self.headers);
        out.extend_from_slice(b"\r\n");
        out
    }

    fn status_line(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len + 32);
        out.extend_from_slice(format!("HTTP/1.1 {:03} {}\r\n", self.status, self.reason).as_bytes());
        out
    }
}

/// Decides where a final response's body ends and whether its connection can be kept, and
/// builds the head for the client. `head_request`: the request was `HEAD` (no body follows,
/// whatever the headers say). Refused as smuggling or response-splitting vectors: both
/// `Content-Length` and `Transfer-Encoding`, differing or non-numeric `Content-Length`s,
/// `chunked` other than last, and a 101 to a request that asked for no upgrade.
pub fn relay_response(head: &ResponseHead, head_request: bool) -> Result<RelayedResponse, HeadError> {
    if head.status == 101 {
        return Err(HeadError::Framing("101 Switching Protocols, but no upgrade was asked for"));
    }
    let (te, len) = framing_fields(&head.headers)?;
    let codings: Vec<String> = te
        .iter()
        .flat_map(|v| v.split(|b| *b == b','))
        .map(|c| String::from_utf8_lossy(c).trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty())
        .collect();
    if codings.iter().rev().skip(1).any(|c| c == "chunked") {
        return Err(HeadError::Framing("chunked is not the last transfer coding"));
    }
    let body = if head_request || head.status == 204 || head.status == 304 {
        ResponseBody::None
    } else if !codings.is_empty() {
        if codings.last().is_some_and(|c| c == "chunked") { ResponseBody::Chunked } else { ResponseBody::UntilClose }
    } else {
        len.map_or(ResponseBody::UntilClose, ResponseBody::Length)
    };
    let close = connection_tokens(&head.headers).iter().any(|t| t == "close");
    let reusable = head.minor == 1 && body != ResponseBody::UntilClose && !close;
    let mut client_head = head.status_line();
    end_to_end(&mut client_head, &head.headers);
    client_head.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(RelayedResponse { body, reusable, client_head })
}

fn host_header(t: &Target) -> String {
    if t.port == 80 { t.host.to_string() } else { t.to_string() }
}

/// Incremental scanner for a chunked body: tells where the message ends so that nothing after it
/// (a smuggled second request) is forwarded.
#[derive(Debug, Clone, Default)]
pub struct ChunkedScanner {
    state: ChunkState,
    size: u64,
    line_len: usize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    Trailer,
    TrailerLf,
    FinalLf,
    Done,
}

/// Outcome of feeding bytes to a [`ChunkedScanner`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkProgress {
    /// Every byte belongs to the body; more is needed.
    More,
    /// The body ends after this many bytes of the input.
    Done(usize),
    /// The framing is invalid.
    Invalid,
}

impl ChunkedScanner {
    /// Feeds `data`; see [`ChunkProgress`].
    pub fn feed(&mut self, data: &[u8]) -> ChunkProgress {
        use ChunkState::*;
        let mut i = 0;
        while i < data.len() {
            let b = data[i];
            match self.state {
                Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        self.line_len += 1;
                        if self.line_len > 16 {
                            return ChunkProgress::Invalid;
                        }
                        let d = u64::from(char::from(b).to_digit(16).unwrap_or(0));
                        self.size = self.size * 16 + d;
                    }
                    b';' if self.line_len > 0 => self.state = Ext,
                    b'\r' if self.line_len > 0 => self.state = SizeLf,
                    _ => return ChunkProgress::Invalid,
                },
                Ext => match b {
                    b'\r' => self.state = SizeLf,
                    b'\n' | 0 => return ChunkProgress::Invalid,
                    _ => {
                        self.line_len += 1;
                        if self.line_len > 4096 {
                            return ChunkProgress::Invalid;
                        }
                    }
                },
                SizeLf => {
                    if b != b'\n' {
                        return ChunkProgress::Invalid;
                    }
                    self.line_len = 0;
                    self.state = if self.size == 0 { TrailerStart } else { Data };
                }
                Data => {
                    let take = (self.size).min((data.len() - i) as u64) as usize;
                    self.size -= take as u64;
                    i += take;
                    if self.size == 0 {
                        self.state = DataCr;
                    }
                    continue;
                }
                DataCr => {
                    if b != b'\r' {
                        return ChunkProgress::Invalid;
                    }
                    self.state = DataLf;
                }
                DataLf => {
                    if b != b'\n' {
                        return ChunkProgress::Invalid;
                    }
                    self.state = Size;
                }
                TrailerStart => {
                    if b == b'\r' {
                        self.state = FinalLf;
                    } else if b == b'\n' || b == 0 {
                        return ChunkProgress::Invalid;
                    } else {
                        self.line_len = 1;
                        self.state = Trailer;
                    }
                }
                Trailer => match b {
                    b'\r' => self.state = TrailerLf,
                    b'\n' | 0 => return ChunkProgress::Invalid,
                    _ => {
                        self.line_len += 1;
                        if self.line_len > 8192 {
                            return ChunkProgress::Invalid;
                        }
                    }
                },
                TrailerLf => {
                    if b != b'\n' {
                        return ChunkProgress::Invalid;
                    }
                    self.state = TrailerStart;
                }
                FinalLf => {
                    if b != b'\n' {
                        return ChunkProgress::Invalid;
                    }
                    self.state = Done;
                    return ChunkProgress::Done(i + 1);
                }
                Done => return ChunkProgress::Done(i),
            }
            i += 1;
        }
        if self.state == Done { ChunkProgress::Done(0) } else { ChunkProgress::More }
    }
}

/// A fixed proxy response with a reason header and a one-line body.
pub fn response(status: u16, text: &str, reason: &str, detail: &str) -> Vec<u8> {
    let body = format!("axp-egress-proxy: {reason}: {detail}\n");
    format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Axp-Deny-Reason: {reason}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn head(s: &str) -> RequestHead {
        parse_head(s.as_bytes()).unwrap().unwrap()
    }

    #[test]
    fn rewrites_to_origin_form_without_hop_by_hop_headers() {
        let h = head(
            "GET http://allowed.test:8080/a?b HTTP/1.1\r\nHost: allowed.test:8080\r\nProxy-Connection: keep-alive\r\nConnection: x-foo\r\nX-Foo: 1\r\nAccept: */*\r\n\r\n",
        );
        let f = forward_request(&h).unwrap();
        assert_eq!(f.target.to_string(), "allowed.test:8080");
        assert_eq!(
            String::from_utf8(f.upstream_head).unwrap(),
            "GET /a?b HTTP/1.1\r\nHost: allowed.test:8080\r\nAccept: */*\r\n\r\n"
        );
        assert!(f.may_reuse && f.persistent);
        // HTTP/1.0 is not persistent by default: the origin is asked to close.
        let f = forward_request(&head("GET http://a.test/ HTTP/1.0\r\n\r\n")).unwrap();
        assert_eq!(
            String::from_utf8(f.upstream_head).unwrap(),
            "GET / HTTP/1.0\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        );
        assert!(!f.persistent);
        // Nor is a request with a body, even an empty one: a kept connection only ever carries
        // heads the proxy built.
        for req in [
            "POST http://a.test/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "PUT http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            let f = forward_request(&head(req)).unwrap();
            assert!(!f.persistent, "{req}");
            assert!(String::from_utf8(f.upstream_head).unwrap().ends_with("\r\nConnection: close\r\n\r\n"), "{req}");
        }
    }

    #[test]
    fn only_bodiless_safe_requests_may_take_a_kept_connection() {
        let reuse = |s: &str| forward_request(&head(s)).unwrap().may_reuse;
        assert!(reuse("HEAD http://a.test/ HTTP/1.1\r\n\r\n"));
        assert!(reuse("OPTIONS http://a.test/ HTTP/1.1\r\n\r\n"));
        assert!(!reuse("POST http://a.test/ HTTP/1.1\r\n\r\n"));
        assert!(!reuse("DELETE http://a.test/ HTTP/1.1\r\n\r\n"));
        assert!(!reuse("GET http://a.test/ HTTP/1.1\r\nContent-Length: 2\r\n\r\n"));
        assert!(!reuse("GET http://a.test/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
    }

    fn response(s: &str, head_request: bool) -> Result<RelayedResponse, HeadError> {
        relay_response(&parse_response_head(s.as_bytes()).unwrap().unwrap(), head_request)
    }

    #[test]
    fn response_framing_follows_rfc_9112() {
        let r = response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false).unwrap();
        assert_eq!((r.body, r.reusable), (ResponseBody::Length(5), true));
        let r = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false).unwrap();
        assert_eq!((r.body, r.reusable), (ResponseBody::Chunked, true));
        // A body that ends when the origin closes: the connection cannot carry another request.
        let r = response("HTTP/1.1 200 OK\r\n\r\n", false).unwrap();
        assert_eq!((r.body, r.reusable), (ResponseBody::UntilClose, false));
        let r = response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false).unwrap();
        assert_eq!((r.body, r.reusable), (ResponseBody::UntilClose, false));
        // No body after HEAD, 204 or 304, whatever Content-Length says.
        let r = response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true).unwrap();
        assert_eq!((r.body, r.reusable), (ResponseBody::None, true));
        assert_eq!(response("HTTP/1.1 204 No Content\r\n\r\n", false).unwrap().body, ResponseBody::None);
        assert_eq!(
            response("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", false).unwrap().body,
            ResponseBody::None
        );
        // The origin's close, HTTP/1.0, and keep-alive tokens in any case.
        assert!(
            !response("HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n", false)
                .unwrap()
                .reusable
        );
        assert!(!response("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false).unwrap().reusable);
    }

    #[test]
    fn ambiguous_responses_are_refused() {
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
        ] {
            assert!(matches!(response(bad, false), Err(HeadError::Framing(_))), "{bad}");
        }
        assert!(parse_response_head(b"HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n").is_err());
        assert!(parse_response_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
    }

    #[test]
    fn the_client_gets_connection_close_and_no_hop_by_hop_headers() {
        let r = response(
            "HTTP/1.1 200 Fine\r\nConnection: keep-alive, x-hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nContent-Length: 2\r\nX-End: 2\r\n\r\n",
            false,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(r.client_head).unwrap(),
            "HTTP/1.1 200 Fine\r\nContent-Length: 2\r\nX-End: 2\r\nConnection: close\r\n\r\n"
        );
        let h = parse_response_head(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap().unwrap();
        assert!(h.is_interim());
        assert_eq!(h.interim_head(), b"HTTP/1.1 100 Continue\r\n\r\n");
        assert!(!parse_response_head(b"HTTP/1.1 101 S\r\n\r\n").unwrap().unwrap().is_interim());
    }

    #[test]
    fn host_header_must_agree() {
        let h = head("GET http://allowed.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n");
        assert!(matches!(forward_request(&h), Err(HeadError::HostMismatch { .. })));
        let h = head("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test:81\r\n\r\n");
        assert!(matches!(forward_request(&h), Err(HeadError::HostMismatch { .. })));
        let h = head("GET http://allowed.test/ HTTP/1.1\r\nHost: ALLOWED.test.\r\n\r\n");
        assert!(forward_request(&h).is_ok());
        let h = head("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n");
        assert_eq!(forward_request(&h), Err(HeadError::DuplicateHost));
    }

    #[test]
    fn injection_is_a_syntax_error() {
        assert!(parse_head(b"GET http://a.test/ HTTP/1.1\r\nX: a\0b\r\n\r\n").is_err());
        assert!(parse_head(b"GET http://a.test/\0 HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_head(b"CONNECT a.test\r.evil:443 HTTP/1.1\r\n\r\n").is_err());
        assert_eq!(parse_head(b"GET http://a.test/ HTTP/1.1\r\nHost: a"), Ok(None));
    }

    #[test]
    fn framing_is_unambiguous() {
        let h = head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert!(matches!(h.body(), Err(HeadError::Framing(_))));
        let h = head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n");
        assert!(matches!(h.body(), Err(HeadError::Framing(_))));
        let h = head("POST http://a.test/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
        assert!(matches!(h.body(), Err(HeadError::Framing(_))));
        let h = head("POST http://a.test/ HTTP/1.1\r\nContent-Length: 3\r\n\r\n");
        assert_eq!(h.body(), Ok(Body::Length(3)));
    }

    #[test]
    fn chunked_scanner_stops_at_the_end() {
        let body = b"5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\nGET http://evil/ HTTP/1.1\r\n\r\n";
        let end = body.len() - "GET http://evil/ HTTP/1.1\r\n\r\n".len();
        let mut s = ChunkedScanner::default();
        assert_eq!(s.feed(body), ChunkProgress::Done(end));
        // Byte at a time.
        let mut s = ChunkedScanner::default();
        let mut done = None;
        for (i, b) in body.iter().enumerate() {
            if let ChunkProgress::Done(n) = s.feed(std::slice::from_ref(b)) {
                done = Some(i + n);
                break;
            }
        }
        assert_eq!(done, Some(end));
        assert_eq!(ChunkedScanner::default().feed(b"zz\r\n"), ChunkProgress::Invalid);
        assert_eq!(ChunkedScanner::default().feed(b"3\r\nabcX"), ChunkProgress::Invalid);
    }
}
