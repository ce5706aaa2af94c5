//! HTTP/1.x as a forward proxy sees it: request heads (parsing with `httparse`, the checks that
//! keep one request to one destination: absolute-form target, `Host` agreement, unambiguous body
//! framing, a `Connection` header that removes nothing end-to-end; the head rewritten for the
//! origin server), response heads (where the body ends, after RFC 9112 §6.3, whether the upstream
//! connection can carry another request, and the head rewritten for the client), a scanner for
//! chunked bodies (either direction), and the request stream inside a plain-HTTP tunnel
//! ([`opening`] tells it apart, [`TunnelRequests`] checks every request in it).
//!
//! Pure functions only. This module must not perform I/O or consult the allowlist.

use crate::host::{HostError, Target, parse_absolute_form, parse_absolute_form_with_port, parse_authority};

/// Most headers accepted in one request head.
pub const MAX_HEADERS: usize = 100;

/// Largest response head accepted from an upstream.
pub const MAX_RESPONSE_HEAD: usize = 64 * 1024;

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
    /// The `Connection` header names a field that is end-to-end (`Content-Length`,
    /// `Transfer-Encoding`, `Host`): a proxy that obeyed it would send the message framed or
    /// addressed otherwise than it read it, so that the body it forwards by its own framing
    /// became, for the next hop, a second request nobody checked.
    #[error(
        "the Connection header names `{0}`, which is end-to-end: removing it would frame or address the request differently for the origin than the proxy read it (request smuggling)"
    )]
    ConnectionNamesEndToEnd(String),
    /// A request inside a tunnel has no `Host` header, so the origin would route it to whatever
    /// host it serves by default.
    #[error("the request has no Host header; inside a tunnel every request must name the tunnel's host")]
    MissingHost,
    /// A request inside a tunnel names another destination in its absolute-form target.
    #[error("the request target `{named}` names another destination than the tunnel to `{tunnel}`")]
    TargetMismatch {
        /// What the request line said.
        named: String,
        /// Where the tunnel goes.
        tunnel: String,
    },
    /// A head larger than the limit given.
    #[error("the request head exceeds {0} bytes")]
    TooLarge(usize),
    /// Something a tunnel's request stream may not carry (see [`TunnelRequests`]).
    #[error("{0}")]
    Unsupported(&'static str),
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

    /// Refuses a `Connection` header that names a field in [`NEVER_HOP_BY_HOP`] (see
    /// [`HeadError::ConnectionNamesEndToEnd`]).
    pub fn check_connection(&self) -> Result<(), HeadError> {
        match connection_tokens(&self.headers).into_iter().find(|t| NEVER_HOP_BY_HOP.contains(&t.as_str())) {
            Some(t) => Err(HeadError::ConnectionNamesEndToEnd(t)),
            None => Ok(()),
        }
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

/// Fields a `Connection` header never removes, in either direction: the framing of the message
/// and, in a request, where it goes. The proxy forwards a body by the framing it read; were it
/// to drop that framing from the head it forwards, the next hop would read the body as something
/// else (for a request: as a second request, which nobody checked and which can name any host).
/// Requests that list one are refused ([`RequestHead::check_connection`]); a response that does is
/// relayed with its framing intact, since that is the framing the proxy relays it by.
const NEVER_HOP_BY_HOP: &[&str] = &["content-length", "transfer-encoding", "host"];

/// The field names a `Connection` header lists (lower case): hop-by-hop as well.
fn connection_tokens(headers: &[(String, Vec<u8>)]) -> Vec<String> {
    values(headers, "connection")
        .flat_map(|v| v.split(|b| *b == b','))
        .filter_map(|t| std::str::from_utf8(t).ok())
        .map(|t| t.trim().to_ascii_lowercase())
        .collect()
}

/// Appends every end-to-end header (hop-by-hop ones and those `Connection` lists left out, except
/// the [`NEVER_HOP_BY_HOP`] ones, which are always kept: the head sent on is framed exactly as
/// the proxy frames the body it sends after it).
fn end_to_end(out: &mut Vec<u8>, headers: &[(String, Vec<u8>)]) -> bool {
    let listed = connection_tokens(headers);
    let mut saw_host = false;
    for (n, v) in headers {
        let lower = n.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str())
            || (listed.contains(&lower) && !NEVER_HOP_BY_HOP.contains(&lower.as_str()))
        {
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
    head.check_connection()?;
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

/// What a tunnel's first bytes are, as far as HTTP goes (see [`opening`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// Not enough bytes to tell yet.
    NeedMore,
    /// An HTTP request, or something an origin could read as one: it is checked as a request.
    Request,
    /// Not HTTP.
    Other,
}

/// Methods every origin knows. A line that starts with one of them and a space is taken for a
/// request line whatever follows, an HTTP/0.9 `GET /path` (which has no `Host` at all) included.
const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT", "PRI"];

/// A `tchar` of RFC 9110 §5.6.2: what a method is made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Whether a tunnel's first bytes open an HTTP request as a lenient origin reads one, so that
/// nothing an origin would route by its `Host` header passes the tunnel as opaque: empty lines
/// before the request line are skipped (servers ignore them, RFC 9112 §2.2), and a line made of
/// a token and a space (or tab) is a request when the token is a well-known method, or, whatever
/// the method, when the line names an HTTP version (origins route unknown methods by `Host` as
/// well). Anything else (TLS is told apart before this, SSH, binary protocols) is [`Opening::Other`].
/// `max`: past this many bytes with no answer the bytes are taken for a request, whose head is
/// then refused as too large.
pub fn opening(b: &[u8], max: usize) -> Opening {
    let undecided = if b.len() > max { Opening::Request } else { Opening::NeedMore };
    let Some(start) = b.iter().position(|c| !matches!(c, b'\r' | b'\n')) else {
        return undecided;
    };
    let line = &b[start..];
    let Some(m) = line.iter().position(|c| !is_tchar(*c)) else {
        return undecided;
    };
    if m == 0 || !matches!(line[m], b' ' | b'\t') {
        return Opening::Other;
    }
    if METHODS.iter().any(|k| k.as_bytes().eq_ignore_ascii_case(&line[..m])) {
        return Opening::Request;
    }
    let Some(end) = line.iter().position(|c| *c == b'\n') else {
        return undecided;
    };
    if line[..end].windows(5).any(|w| w.eq_ignore_ascii_case(b"HTTP/")) { Opening::Request } else { Opening::Other }
}

/// The client's side of a plain-HTTP tunnel (a CONNECT or SOCKS5 tunnel whose first bytes are a
/// request, see [`opening`]), request by request. Every request head must name the tunnel's
/// destination: exactly one `Host`, equal to it; an absolute-form target only if it names it too;
/// never `CONNECT`. Its body must be framed unambiguously, with a `Connection` header that names
/// no framing field ([`RequestHead::check_connection`]), and is passed by that framing, so the
/// next head is looked for where the origin looks for it. Bytes are released only once they are
/// known to belong to a checked request: an incomplete head is held back, never sent.
///
/// A protocol switch ends what can be checked, so it is allowed once and narrowly: only on the
/// tunnel's first request, only to `websocket` (which carries no further requests, unlike `h2c`,
/// whose streams name any authority), and the client's bytes after that request are held until
/// the origin's answer ([`TunnelRequests::upstream`]) says whether it switched (101: the rest of
/// the tunnel is opaque) or not (the stream stays HTTP and every request in it is checked).
#[derive(Debug)]
pub struct TunnelRequests {
    target: Target,
    max_head: usize,
    state: TunnelState,
    /// Client bytes received and not yet released.
    held: Vec<u8>,
    /// Request heads released so far.
    requests: u64,
    upgrade: Upgrade,
    /// The origin's bytes while its answer to an upgrade is awaited.
    answer: Vec<u8>,
}

/// Where the client's byte stream is in a plain-HTTP tunnel.
#[derive(Debug)]
enum TunnelState {
    /// A request head comes next.
    Head,
    /// This many body bytes are still to come.
    Length(u64),
    /// A chunked body.
    Chunked(ChunkedScanner),
    /// After an upgrade request: the origin's answer is awaited.
    Answer,
    /// The origin switched protocols: everything passes.
    Switched,
}

/// Whether the tunnel's first request asked for a protocol switch, and how it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upgrade {
    /// None asked, or it was declined.
    None,
    /// Asked; the origin's answer is awaited.
    Asked,
    /// The origin switched (101).
    Accepted,
}

impl TunnelRequests {
    /// A tunnel to `target`; request heads over `max_head` bytes are refused.
    pub fn new(target: Target, max_head: usize) -> Self {
        Self {
            target,
            max_head,
            state: TunnelState::Head,
            held: Vec::new(),
            requests: 0,
            upgrade: Upgrade::None,
            answer: Vec::new(),
        }
    }

    /// Takes bytes from the client and returns those that may go to the origin now, or refuses
    /// the request they belong to. After a refusal the tunnel must be closed: nothing of that
    /// read was released, and no later byte may be, since where the next request starts is no
    /// longer known.
    pub fn client(&mut self, data: &[u8]) -> Result<Vec<u8>, HeadError> {
        self.held.extend_from_slice(data);
        self.release()
    }

    /// Whether the origin's bytes must be shown to [`TunnelRequests::upstream`]: the answer to an
    /// upgrade request is awaited.
    pub fn watching(&self) -> bool {
        self.upgrade == Upgrade::Asked
    }

    /// Whether a request head has begun and is not complete (held back, nothing of it sent).
    pub fn mid_head(&self) -> bool {
        matches!(self.state, TunnelState::Head) && !self.held.is_empty()
    }

    /// Whether client bytes are held back until the origin answers an upgrade request.
    pub fn holding(&self) -> bool {
        matches!(self.state, TunnelState::Answer) && !self.held.is_empty()
    }

    /// Whether as many client bytes are held back for an upgrade's answer as a request head may
    /// have: the caller stops reading from the client until the origin answers, so a client
    /// cannot make the proxy hold more.
    pub fn held_full(&self) -> bool {
        matches!(self.state, TunnelState::Answer) && self.held.len() >= self.max_head
    }

    /// Takes bytes the origin sent (they go to the client unchanged; this only reads them) while
    /// [`TunnelRequests::watching`]. `Ok(true)` once the answer to the upgrade request is complete
    /// (interim 1xx skipped): the held client bytes may then be released with
    /// [`TunnelRequests::client`] (with no new bytes), and are checked as that decided. Refuses
    /// an answer that is not an HTTP response head.
    pub fn upstream(&mut self, data: &[u8]) -> Result<bool, HeadError> {
        if !self.watching() {
            return Ok(false);
        }
        self.answer.extend_from_slice(data);
        loop {
            let Some(head) = parse_response_head(&self.answer)? else {
                if self.answer.len() > MAX_RESPONSE_HEAD {
                    return Err(HeadError::TooLarge(MAX_RESPONSE_HEAD));
                }
                return Ok(false);
            };
            if head.is_interim() {
                self.answer.drain(..head.len);
                continue;
            }
            self.answer = Vec::new();
            self.upgrade = if head.status == 101 { Upgrade::Accepted } else { Upgrade::None };
            if matches!(self.state, TunnelState::Answer) {
                self.state = self.after_message();
            }
            return Ok(true);
        }
    }

    /// Where the stream goes once a request has ended.
    fn after_message(&self) -> TunnelState {
        match self.upgrade {
            Upgrade::None => TunnelState::Head,
            Upgrade::Asked => TunnelState::Answer,
            Upgrade::Accepted => TunnelState::Switched,
        }
    }

    /// Releases what of the held bytes belongs to checked requests.
    fn release(&mut self) -> Result<Vec<u8>, HeadError> {
        let mut out = Vec::new();
        while !self.held.is_empty() {
            match &mut self.state {
                TunnelState::Answer => break,
                TunnelState::Switched => out.append(&mut self.held),
                TunnelState::Length(left) => {
                    let take = (*left).min(self.held.len() as u64);
                    *left -= take;
                    out.extend(self.held.drain(..take as usize));
                    if *left == 0 {
                        self.state = self.after_message();
                    }
                }
                TunnelState::Chunked(sc) => match sc.feed(&self.held) {
                    ChunkProgress::More => out.append(&mut self.held),
                    ChunkProgress::Done(n) => {
                        out.extend(self.held.drain(..n));
                        self.state = self.after_message();
                    }
                    ChunkProgress::Invalid => return Err(HeadError::Framing("invalid chunked request body")),
                },
                TunnelState::Head => {
                    let Some(head) = parse_head(&self.held)? else {
                        if self.held.len() > self.max_head {
                            return Err(HeadError::TooLarge(self.max_head));
                        }
                        break;
                    };
                    if head.len > self.max_head {
                        return Err(HeadError::TooLarge(self.max_head));
                    }
                    let body = self.check(&head)?;
                    out.extend(self.held.drain(..head.len));
                    self.requests += 1;
                    self.state = match body {
                        Body::None | Body::Length(0) => self.after_message(),
                        Body::Length(n) => TunnelState::Length(n),
                        Body::Chunked => TunnelState::Chunked(ChunkedScanner::default()),
                    };
                }
            }
        }
        Ok(out)
    }

    /// The checks of one request head in the tunnel; its body framing if it passes.
    fn check(&mut self, head: &RequestHead) -> Result<Body, HeadError> {
        if head.method.eq_ignore_ascii_case("CONNECT") {
            return Err(HeadError::Unsupported("CONNECT inside a tunnel (it would open a tunnel of its own)"));
        }
        if !(head.target.starts_with('/') || head.target == "*") {
            let (named, _) = parse_absolute_form_with_port(&head.target, self.target.port)?;
            if named != self.target {
                return Err(HeadError::TargetMismatch { named: head.target.clone(), tunnel: self.target.to_string() });
            }
        }
        if head.values("host").next().is_none() {
            return Err(HeadError::MissingHost);
        }
        head.check_host(&self.target, self.target.port)?;
        head.check_connection()?;
        let body = head.body()?;
        let mut upgrade = head.values("upgrade").peekable();
        if upgrade.peek().is_some() {
            if self.requests > 0 {
                return Err(HeadError::Unsupported(
                    "a protocol upgrade on a tunnel's second or later request (only the first may switch protocols)",
                ));
            }
            let websocket = upgrade
                .flat_map(|v| v.split(|b| *b == b','))
                .map(<[u8]>::trim_ascii)
                .filter(|p| !p.is_empty())
                .all(|p| p.split(|b| *b == b'/').next().is_some_and(|n| n.eq_ignore_ascii_case(b"websocket")));
            if !websocket {
                return Err(HeadError::Unsupported(
                    "a protocol upgrade to anything but websocket inside a tunnel (h2c and the like carry requests for any host)",
                ));
            }
            self.upgrade = Upgrade::Asked;
        }
        Ok(body)
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
    fn a_connection_header_never_removes_framing_or_host() {
        // Requests that list them are refused, in any case and position of the token.
        for listed in ["content-length", "Transfer-Encoding", "close, HOST ", "keep-alive,content-length"] {
            let h = head(&format!(
                "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nConnection: {listed}\r\nContent-Length: 3\r\n\r\n"
            ));
            let e = forward_request(&h).unwrap_err();
            assert!(matches!(e, HeadError::ConnectionNamesEndToEnd(_)), "{listed}: {e:?}");
        }
        // A response that lists them keeps them for the client: it is relayed by that framing.
        let r = response(
            "HTTP/1.1 200 OK\r\nConnection: keep-alive, transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap();
        assert_eq!(r.body, ResponseBody::Chunked);
        assert_eq!(
            String::from_utf8(r.client_head).unwrap(),
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        let r = response("HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 2\r\n\r\n", false).unwrap();
        assert_eq!(
            String::from_utf8(r.client_head).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn tunnel_openings_that_an_origin_reads_as_requests_are_requests() {
        let o = |b: &str| opening(b.as_bytes(), 1000);
        for req in [
            "GET / HTTP/1.1\r\n",
            "get ",
            "\r\n\r\nPOST ",
            "PURGE / HTTP/1.1\r\n",
            "M-SEARCH * http/1.1\r\n",
            "FOO\t/ HTTP/1.0\n",
        ] {
            assert_eq!(o(req), Opening::Request, "{req:?}");
        }
        for more in ["", "\r\n", "G", "PURGE", "PURGE / HTTP/1.1"] {
            assert_eq!(o(more), Opening::NeedMore, "{more:?}");
        }
        for other in ["SSH-2.0-OpenSSH_9.2\r\n", "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", "\0\0\0\x08", "PING\r\n", " GET"]
        {
            assert_eq!(o(other), Opening::Other, "{other:?}");
        }
        assert_eq!(opening(&[b'A'; 1001], 1000), Opening::Request, "undecided past the limit: checked, then refused");
    }

    fn tunnel() -> TunnelRequests {
        TunnelRequests::new(parse_authority("allowed.test:8080", None).unwrap(), 4096)
    }

    #[test]
    fn every_request_in_a_tunnel_is_checked_and_bodies_pass_by_their_framing() {
        let mut t = tunnel();
        let a = "GET / HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n";
        // A body that looks like a request is a body.
        let smuggled = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n";
        let b =
            format!("POST /p HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: {}\r\n\r\n{smuggled}", smuggled.len());
        let c = "PUT http://allowed.test:8080/c HTTP/1.1\r\nHost: allowed.test:8080\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        let all = format!("{a}{b}{c}");
        // Byte by byte: nothing of a head is released before it is whole and checked.
        let mut out = Vec::new();
        for (i, byte) in all.bytes().enumerate() {
            let got = t.client(&[byte]).unwrap();
            if i + 1 < a.len() {
                assert!(got.is_empty());
            }
            out.extend(got);
        }
        assert_eq!(out, all.as_bytes());
        assert!(!t.mid_head() && !t.watching());
        // Then a request that names another host, however it names it.
        for bad in [
            "GET / HTTP/1.1\r\nHost: evil.test:8080\r\n\r\n",
            "GET http://evil.test:8080/ HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n",
            "GET http://allowed.test:9/ HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: allowed.test:8080\r\nHost: allowed.test:8080\r\n\r\n",
            "CONNECT allowed.test:8080 HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n",
            "GET allowed.test:8080 HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n",
            "GET https://allowed.test:8080/ HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n",
            "POST / HTTP/1.1\r\nHost: allowed.test:8080\r\nConnection: content-length\r\nContent-Length: 1\r\n\r\nx",
            "POST / HTTP/1.1\r\nHost: allowed.test:8080\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: allowed.test:8080\r\nUpgrade: websocket\r\n\r\n",
        ] {
            let mut t = tunnel();
            t.client(a.as_bytes()).unwrap();
            assert!(t.client(bad.as_bytes()).is_err(), "{bad}");
            // And as the first request (an upgrade to websocket is allowed there).
            if !bad.contains("Upgrade") {
                assert!(tunnel().client(bad.as_bytes()).is_err(), "{bad}");
            }
        }
        let mut t = tunnel();
        assert!(matches!(t.client(&[b'X'; 5000]), Err(HeadError::TooLarge(4096))));
    }

    #[test]
    fn a_websocket_upgrade_holds_the_client_until_the_origin_answers() {
        let up = "GET /ws HTTP/1.1\r\nHost: allowed.test:8080\r\nUpgrade: websocket\r\n\r\n";
        let after = "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n";
        // Switched: the held bytes are the new protocol's and pass.
        let mut t = tunnel();
        assert_eq!(t.client(format!("{up}{after}").as_bytes()).unwrap(), up.as_bytes());
        assert!(t.watching() && t.holding());
        assert_eq!(t.upstream(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching"), Ok(false));
        assert_eq!(t.upstream(b" Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x00"), Ok(true));
        assert_eq!(t.client(b"").unwrap(), after.as_bytes());
        assert_eq!(t.client(b"\x81\x05hello").unwrap(), b"\x81\x05hello");
        // Declined: they are requests, checked as any.
        let mut t = tunnel();
        t.client(format!("{up}{after}").as_bytes()).unwrap();
        assert_eq!(t.upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), Ok(true));
        assert!(matches!(t.client(b""), Err(HeadError::HostMismatch { .. })));
        // Only to websocket.
        let h2c = "GET / HTTP/1.1\r\nHost: allowed.test:8080\r\nUpgrade: h2c, websocket\r\n\r\n";
        assert!(matches!(tunnel().client(h2c.as_bytes()), Err(HeadError::Unsupported(_))));
        // What is held is bounded: at a head's worth the proxy stops reading from the client.
        let mut t = tunnel();
        assert_eq!(t.client(up.as_bytes()).unwrap(), up.as_bytes());
        assert_eq!(t.client(&[b'x'; 4095]).unwrap(), b"");
        assert!(t.holding() && !t.held_full());
        assert_eq!(t.client(b"x").unwrap(), b"");
        assert!(t.held_full());
        // An answer that is not HTTP closes the tunnel.
        assert!(t.upstream(b"SSH-2.0-x\r\n\r\n").is_err());
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
