//! What may pass in each direction of a connection the proxy relays, as two state machines that
//! the proxy's byte pump feeds every read to.
//!
//! [`UpFilter`] (client → upstream): a tunnel's first bytes are held until `inspect` has decided
//! what they are, and plain HTTP inside a tunnel is checked request by request
//! (`http::TunnelRequests`); a plain-HTTP request's body passes by its framing (length or
//! chunks) and nothing after it. [`Down`] (upstream → client): a tunnel passes as it comes; a
//! plain-HTTP response is framed after RFC 9112 §6.3 (interim heads relayed, the final head
//! rewritten for the client, the body passed by its length, its chunks or the origin's close,
//! and nothing after it), and tells whether the exchange ended at a message boundary, so that
//! the upstream connection can be kept.
//!
//! Pure: no sockets, no clock, no budget. The proxy decides when to read and write; these say
//! which bytes go and when the message is over. A refusal from either ends the connection.

use crate::host::Target;
use crate::http::{self, Body, ChunkProgress, ChunkedScanner, MAX_RESPONSE_HEAD, TunnelRequests};
use crate::inspect::{Inner, inspect};
use crate::refusal::{Refuse, head_refusal, refuse};

/// What the client spoke first inside a tunnel, once known.
#[derive(Debug)]
pub enum Inspect {
    /// Still collecting bytes.
    Pending(Vec<u8>),
    /// Checked and found to be `"tls"` or `"opaque"` (not HTTP); bytes flow.
    Done(&'static str),
    /// Plain HTTP: every request is checked as it comes.
    Http(TunnelRequests),
}

/// How client → upstream bytes are limited.
#[derive(Debug)]
pub enum UpFilter {
    /// A tunnel: everything, after the first-bytes check.
    Tunnel(Inspect),
    /// Plain HTTP: exactly this many body bytes, then nothing.
    Length(u64),
    /// Plain HTTP with a chunked body.
    Chunked(ChunkedScanner),
    /// Plain HTTP after the body: client bytes are dropped.
    Closed,
}

/// What to do when the client has closed its side of a tunnel.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientEnd {
    /// Send these bytes (undecided ones, which can no longer be a request), then shut the
    /// upstream's write side; the tunnel carried something opaque ([`UpFilter::inner`]).
    Release(Vec<u8>),
    /// Bytes are held for an upgrade's answer: they go when it comes, and the upstream's write
    /// side is shut after them.
    Hold,
    /// Shut the upstream's write side now.
    Shut,
}

impl UpFilter {
    /// A tunnel whose first bytes are still to be checked.
    pub fn tunnel() -> Self {
        UpFilter::Tunnel(Inspect::Pending(Vec::new()))
    }

    /// A plain-HTTP request whose body is framed as `body`.
    pub fn request_body(body: Body) -> Self {
        match body {
            Body::None => UpFilter::Closed,
            Body::Length(n) => UpFilter::Length(n),
            Body::Chunked => UpFilter::Chunked(ChunkedScanner::default()),
        }
    }

    /// What the tunnel was found to carry (`"tls"`, `"http"` or `"opaque"`), once that is
    /// decided; `None` while its first bytes are still awaited, and for plain HTTP. It is decided
    /// before the first request of an HTTP tunnel is checked, so a tunnel refused for that
    /// request still says it carried HTTP.
    pub fn inner(&self) -> Option<&'static str> {
        match self {
            UpFilter::Tunnel(Inspect::Done(kind)) => Some(kind),
            UpFilter::Tunnel(Inspect::Http(_)) => Some("http"),
            _ => None,
        }
    }

    /// Whether the request body has been sent whole (plain HTTP) and nothing more may go.
    pub fn is_closed(&self) -> bool {
        matches!(self, UpFilter::Closed)
    }

    /// Whether the upstream's bytes must be shown to the tunnel's request checks (an upgrade's
    /// answer is awaited), so they may not bypass the proxy through a pipe.
    pub fn watching(&self) -> bool {
        matches!(self, UpFilter::Tunnel(Inspect::Http(r)) if r.watching())
    }

    /// Whether client bytes are held back until an upgrade's answer.
    pub fn holding(&self) -> bool {
        matches!(self, UpFilter::Tunnel(Inspect::Http(r)) if r.holding())
    }

    /// Whether no more client bytes may be taken until an upgrade's answer.
    pub fn held_full(&self) -> bool {
        matches!(self, UpFilter::Tunnel(Inspect::Http(r)) if r.held_full())
    }

    /// Takes one read from the client of a connection to `target` and returns what may go to
    /// the upstream now (empty: nothing yet), or refuses it (the connection is then closed, and
    /// nothing of the read was released). `max_head` bounds a request head inside a tunnel.
    pub fn client(&mut self, target: &Target, data: Vec<u8>, max_head: usize) -> Result<Vec<u8>, Refuse> {
        let mut out = Vec::new();
        let mut finished_body = false;
        match self {
            UpFilter::Tunnel(Inspect::Pending(acc)) => {
                acc.extend_from_slice(&data);
                match inspect(target, acc, max_head)? {
                    None => {}
                    Some(Inner::Pass(kind)) => {
                        out = std::mem::take(acc);
                        *self = UpFilter::Tunnel(Inspect::Done(kind));
                    }
                    Some(Inner::Http) => {
                        let held = std::mem::take(acc);
                        let mut requests = TunnelRequests::new(target.clone(), max_head);
                        let checked = requests.client(&held);
                        *self = UpFilter::Tunnel(Inspect::Http(requests));
                        out = checked.map_err(|e| head_refusal(&e))?;
                    }
                }
            }
            UpFilter::Tunnel(Inspect::Http(requests)) => {
                out = requests.client(&data).map_err(|e| head_refusal(&e))?;
            }
            UpFilter::Tunnel(Inspect::Done(_)) => out = data,
            UpFilter::Length(left) => {
                let take = (*left).min(data.len() as u64) as usize;
                out.extend_from_slice(&data[..take]);
                *left -= take as u64;
                finished_body = *left == 0;
            }
            UpFilter::Chunked(sc) => match sc.feed(&data) {
                ChunkProgress::More => out = data,
                ChunkProgress::Done(n) => {
                    out.extend_from_slice(&data[..n]);
                    finished_body = true;
                }
                ChunkProgress::Invalid => {
                    return Err(refuse("malformed", "invalid chunked request body"));
                }
            },
            UpFilter::Closed => {}
        }
        if finished_body {
            *self = UpFilter::Closed;
        }
        Ok(out)
    }

    /// The client closed its side of a tunnel: what happens to the upstream's write side.
    /// Refused: a TLS handshake or a request head cut short.
    pub fn client_closed(&mut self) -> Result<ClientEnd, Refuse> {
        match self {
            UpFilter::Tunnel(Inspect::Pending(acc)) if acc.first() == Some(&22) => {
                Err(refuse("malformed", "the client closed mid-handshake"))
            }
            // Bytes still undecided when the client ends are not an HTTP request (no request
            // line of one is complete, and none can follow), so they go as they are.
            UpFilter::Tunnel(Inspect::Pending(acc)) if !acc.is_empty() => {
                let bytes = std::mem::take(acc);
                *self = UpFilter::Tunnel(Inspect::Done("opaque"));
                Ok(ClientEnd::Release(bytes))
            }
            UpFilter::Tunnel(Inspect::Http(requests)) if requests.mid_head() => {
                Err(refuse("malformed", "the client closed in the middle of a request head"))
            }
            f if f.holding() => Ok(ClientEnd::Hold),
            _ => Ok(ClientEnd::Shut),
        }
    }

    /// Shows one read from the upstream to a tunnel's request checks while they await the answer
    /// to an upgrade request (the bytes themselves go to the client as they are). `Some`: the
    /// answer is complete, and these held client bytes may now go to the upstream (checked as
    /// that answer decided).
    pub fn upstream(&mut self, data: &[u8]) -> Result<Option<Vec<u8>>, Refuse> {
        if let UpFilter::Tunnel(Inspect::Http(requests)) = self
            && requests.watching()
        {
            let answered = requests.upstream(data).map_err(|e| {
                refuse("upstream_malformed", format!("the upstream's answer to an upgrade request: {e}"))
            })?;
            if answered {
                return requests.client(&[]).map(Some).map_err(|e| head_refusal(&e));
            }
        }
        Ok(None)
    }
}

/// Where upstream → client bytes are in the response.
#[derive(Debug)]
pub enum Down {
    /// A tunnel: everything passes as it comes.
    Raw,
    /// Plain HTTP: the response head is still being collected (`head_request`: the request was
    /// `HEAD`, so no body follows).
    Head {
        /// The response bytes so far.
        acc: Vec<u8>,
        /// The request was `HEAD`.
        head_request: bool,
    },
    /// Plain HTTP: this many body bytes are still to come.
    Length(u64),
    /// Plain HTTP: a chunked body.
    Chunked(ChunkedScanner),
    /// Plain HTTP: the body ends when the upstream closes.
    UntilClose,
    /// Plain HTTP: the response is complete; nothing more is forwarded.
    Done,
}

/// What of one read from the upstream goes to the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Advance {
    /// The read's first this-many bytes, as they are.
    Pass(usize),
    /// These bytes (a rewritten head and the start of its body).
    Send(Vec<u8>),
}

/// What the upstream's close means for a plain-HTTP response.
#[derive(Debug, PartialEq, Eq)]
pub enum UpstreamClosed {
    /// A kept connection was closed before any byte of the response: send the request again on
    /// a fresh one.
    Stale,
    /// No complete response came and nothing has reached the client: answer it with this.
    Failed(Refuse),
    /// The response is as complete as it will be (a close-delimited body ended); the client's
    /// side is shut.
    Finish,
}

impl Down {
    /// The response to a plain-HTTP request (`head_request`: it was `HEAD`).
    pub fn response(head_request: bool) -> Self {
        Down::Head { acc: Vec::new(), head_request }
    }

    /// Whether this is a tunnel (bytes pass unframed).
    pub fn is_tunnel(&self) -> bool {
        matches!(self, Down::Raw)
    }

    /// Whether the response is complete.
    pub fn is_done(&self) -> bool {
        matches!(self, Down::Done)
    }

    /// Takes one read from the upstream; `keep` is cleared when the exchange can no longer end
    /// at a message boundary (the origin sent more than its response, or framed it so that only
    /// its close can end it).
    pub fn advance(&mut self, data: &[u8], keep: &mut bool) -> Result<Advance, Refuse> {
        let Down::Head { acc, head_request } = self else {
            return self.body_part(data, keep).map(Advance::Pass);
        };
        acc.extend_from_slice(data);
        let mut out = Vec::new();
        loop {
            let head = match http::parse_response_head(acc) {
                Ok(None) if acc.len() > MAX_RESPONSE_HEAD => {
                    return Err(refuse(
                        "upstream_malformed",
                        format!("the upstream's response head exceeds {MAX_RESPONSE_HEAD} bytes"),
                    ));
                }
                Ok(None) => return Ok(Advance::Send(out)),
                Ok(Some(h)) => h,
                Err(e) => return Err(refuse("upstream_malformed", format!("the upstream's response: {e}"))),
            };
            if head.is_interim() {
                out.extend_from_slice(&head.interim_head());
                acc.drain(..head.len);
                continue;
            }
            let relayed = http::relay_response(&head, *head_request)
                .map_err(|e| refuse("upstream_malformed", format!("the upstream's response: {e}")))?;
            *keep &= relayed.reusable;
            out.extend_from_slice(&relayed.client_head);
            let rest = acc.split_off(head.len);
            *self = match relayed.body {
                http::ResponseBody::None | http::ResponseBody::Length(0) => Down::Done,
                http::ResponseBody::Length(n) => Down::Length(n),
                http::ResponseBody::Chunked => Down::Chunked(ChunkedScanner::default()),
                http::ResponseBody::UntilClose => Down::UntilClose,
            };
            let k = self.body_part(&rest, keep)?;
            out.extend_from_slice(&rest[..k]);
            return Ok(Advance::Send(out));
        }
    }

    /// Whether the proxy has nothing left to look at in what comes down, so it may go through
    /// a pipe: a tunnel, or a body delimited by its length or the origin's close.
    pub fn opaque(&self) -> bool {
        matches!(self, Down::Raw | Down::Length(_) | Down::UntilClose)
    }

    /// At most how many bytes may be taken from the upstream now (the rest of a length).
    pub fn room(&self, max: usize) -> usize {
        match self {
            Down::Length(left) => (*left).min(max as u64) as usize,
            _ => max,
        }
    }

    /// Counts `n` bytes of an [`Down::opaque`] body that went by without being looked at.
    pub fn passed(&mut self, n: usize) {
        if let Down::Length(left) = self {
            *left -= (n as u64).min(*left);
            if *left == 0 {
                *self = Down::Done;
            }
        }
    }

    /// The upstream closed (or failed). `nothing_sent`: no byte has reached the client yet;
    /// `reused`: the connection was kept from an earlier exchange.
    pub fn upstream_closed(&mut self, nothing_sent: bool, reused: bool) -> UpstreamClosed {
        match self {
            Down::Head { acc, .. } if acc.is_empty() && nothing_sent && reused => UpstreamClosed::Stale,
            Down::Head { .. } if nothing_sent => {
                UpstreamClosed::Failed(refuse("upstream_failed", "the upstream closed without a complete response"))
            }
            Down::UntilClose => {
                *self = Down::Done;
                UpstreamClosed::Finish
            }
            _ => UpstreamClosed::Finish,
        }
    }

    /// How many of `data`'s bytes belong to the body; moves to `Done` at its end.
    fn body_part(&mut self, data: &[u8], keep: &mut bool) -> Result<usize, Refuse> {
        let (k, done) = match self {
            Down::Raw | Down::UntilClose => (data.len(), false),
            Down::Length(left) => {
                let k = (*left).min(data.len() as u64);
                *left -= k;
                (k as usize, *left == 0)
            }
            Down::Chunked(sc) => match sc.feed(data) {
                ChunkProgress::More => (data.len(), false),
                ChunkProgress::Done(k) => (k, true),
                ChunkProgress::Invalid => {
                    return Err(refuse("upstream_malformed", "the upstream's chunked body is invalid"));
                }
            },
            Down::Done | Down::Head { .. } => (0, true),
        };
        if k < data.len() {
            *keep = false;
        }
        if done {
            *self = Down::Done;
        }
        Ok(k)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::host::Host;
    use crate::tls::build_client_hello;

    fn target() -> Target {
        Target { host: Host::Name("a.test".into()), port: 80 }
    }

    /// Feeds `reads` to a fresh response machine; returns what reached the client, whether the
    /// connection may be kept, and whether the response is complete.
    fn relay(head_request: bool, reads: &[&[u8]]) -> Result<(Vec<u8>, bool, bool), &'static str> {
        let mut down = Down::response(head_request);
        let mut keep = true;
        let mut out = Vec::new();
        for r in reads {
            match down.advance(r, &mut keep).map_err(|e| e.0)? {
                Advance::Pass(k) => out.extend_from_slice(&r[..k]),
                Advance::Send(b) => out.extend_from_slice(&b),
            }
        }
        Ok((out, keep, down.is_done()))
    }

    fn one_byte_reads(b: &[u8]) -> Vec<&[u8]> {
        b.chunks(1).collect()
    }

    #[test]
    fn a_response_ends_at_its_length_however_it_is_split() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n\r\n";
        let whole = relay(false, &[raw]).unwrap();
        assert_eq!(whole.0, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
        // What the origin sent after its response is neither relayed nor left on a kept
        // connection for the next request to read.
        assert_eq!((whole.1, whole.2), (false, true));
        let split = relay(false, &one_byte_reads(raw)).unwrap();
        assert_eq!(split, whole);
        let exact = relay(false, &one_byte_reads(&raw[..raw.len() - 19])).unwrap();
        assert_eq!((exact.0, exact.1, exact.2), (whole.0, true, true));
    }

    #[test]
    fn chunked_interim_head_and_close_delimited_responses() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        let (out, keep, done) = relay(false, &one_byte_reads(raw)).unwrap();
        assert!(
            out.starts_with(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert!(out.ends_with(b"5\r\nhello\r\n0\r\n\r\n"));
        assert!(keep && done);
        // A HEAD response has no body, whatever its length says.
        let (_, keep, done) = relay(true, &[b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"]).unwrap();
        assert!(keep && done);
        // A body without framing ends only with the origin's close, so the connection goes too.
        let mut down = Down::response(false);
        let mut keep = true;
        down.advance(b"HTTP/1.1 200 OK\r\n\r\nsome", &mut keep).unwrap();
        assert!(!keep && !down.is_done() && down.opaque());
        assert_eq!(down.upstream_closed(false, false), UpstreamClosed::Finish);
        assert!(down.is_done());
    }

    #[test]
    fn responses_that_are_not_http_or_framed_two_ways_are_refused() {
        assert_eq!(relay(false, &[b"SSH-2.0-x\r\n\r\n"]), Err("upstream_malformed"));
        assert_eq!(
            relay(false, &[b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"]),
            Err("upstream_malformed")
        );
        assert_eq!(relay(false, &[b"HTTP/1.1 101 Switching Protocols\r\n\r\n"]), Err("upstream_malformed"));
        assert_eq!(
            relay(false, &[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]),
            Err("upstream_malformed")
        );
        let endless = vec![b'a'; MAX_RESPONSE_HEAD + 1];
        assert_eq!(relay(false, &[&b"HTTP/1.1 200 OK\r\nX: "[..], &endless[..]]), Err("upstream_malformed"));
    }

    #[test]
    fn an_upstream_that_closes_early_is_stale_or_failed() {
        let mut d = Down::response(false);
        assert_eq!(d.upstream_closed(true, true), UpstreamClosed::Stale);
        assert_eq!(d.upstream_closed(true, false).failed_code(), Some("upstream_failed"));
        let mut keep = true;
        d.advance(b"HTTP/1.1 20", &mut keep).unwrap();
        // Part of a head came: the request may have been acted on, so it is never sent again.
        assert_eq!(d.upstream_closed(true, true).failed_code(), Some("upstream_failed"));
        assert_eq!(d.upstream_closed(false, true), UpstreamClosed::Finish);
    }

    impl UpstreamClosed {
        fn failed_code(&self) -> Option<&'static str> {
            match self {
                UpstreamClosed::Failed(r) => Some(r.0),
                _ => None,
            }
        }
    }

    #[test]
    fn a_spliced_length_body_counts_down_to_done() {
        let mut d = Down::Length(10);
        assert_eq!(d.room(4), 4);
        d.passed(4);
        assert_eq!(d.room(100), 6);
        d.passed(6);
        assert!(d.is_done());
    }

    #[test]
    fn a_request_body_passes_by_its_framing_and_nothing_after_it() {
        let t = target();
        let mut f = UpFilter::request_body(Body::Length(3));
        assert_eq!(f.client(&t, b"ab".to_vec(), 1024).unwrap(), b"ab");
        assert_eq!(f.client(&t, b"cGET /smuggled".to_vec(), 1024).unwrap(), b"c");
        assert!(f.is_closed() && f.inner().is_none());
        assert_eq!(f.client(&t, b"more".to_vec(), 1024).unwrap(), b"");
        let mut f = UpFilter::request_body(Body::Chunked);
        assert_eq!(f.client(&t, b"1\r\na\r\n0\r\n\r\nGET /".to_vec(), 1024).unwrap(), b"1\r\na\r\n0\r\n\r\n");
        assert!(f.is_closed());
        let mut f = UpFilter::request_body(Body::Chunked);
        assert_eq!(f.client(&t, b"x\r\n".to_vec(), 1024).map_err(|e| e.0), Err("malformed"));
        assert!(UpFilter::request_body(Body::None).is_closed());
    }

    #[test]
    fn a_tunnel_holds_its_first_bytes_until_they_are_decided() {
        let t = target();
        let hello = build_client_hello(Some("a.test"));
        let mut f = UpFilter::tunnel();
        let (a, b) = hello.split_at(7);
        assert_eq!(f.client(&t, a.to_vec(), 1024).unwrap(), b"");
        assert_eq!(f.inner(), None);
        assert_eq!(f.client(&t, b.to_vec(), 1024).unwrap(), hello);
        assert_eq!(f.inner(), Some("tls"));
        assert_eq!(f.client(&t, b"anything".to_vec(), 1024).unwrap(), b"anything");
        assert_eq!(f.client_closed(), Ok(ClientEnd::Shut));

        let mut f = UpFilter::tunnel();
        let wrong = build_client_hello(Some("b.test"));
        assert_eq!(f.client(&t, wrong, 1024).map_err(|e| e.0), Err("sni_mismatch"));
        assert_eq!(f.inner(), None);

        let mut f = UpFilter::tunnel();
        let out = f.client(&t, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHo".to_vec(), 1024).unwrap();
        assert_eq!((out.as_slice(), f.inner()), (&b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"[..], Some("http")));
        assert_eq!(f.client(&t, b"st: b.test\r\n\r\n".to_vec(), 1024).map_err(|e| e.0), Err("host_mismatch"));

        // A tunnel whose very first request is refused still says it carried HTTP.
        let mut f = UpFilter::tunnel();
        let refused = f.client(&t, b"GET / HTTP/1.1\r\nHost: b.test\r\n\r\n".to_vec(), 1024);
        assert_eq!((refused.map_err(|e| e.0), f.inner()), (Err("host_mismatch"), Some("http")));
    }

    #[test]
    fn a_client_that_closes_early_releases_only_what_cannot_be_a_request() {
        let t = target();
        let mut f = UpFilter::tunnel();
        f.client(&t, build_client_hello(Some("a.test"))[..9].to_vec(), 1024).unwrap();
        assert_eq!(f.client_closed().map_err(|e| e.0), Err("malformed"));
        let mut f = UpFilter::tunnel();
        f.client(&t, b"GE".to_vec(), 1024).unwrap();
        assert_eq!(f.client_closed(), Ok(ClientEnd::Release(b"GE".to_vec())));
        assert_eq!(f.inner(), Some("opaque"));
        let mut f = UpFilter::tunnel();
        f.client(&t, b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HT".to_vec(), 1024).unwrap();
        assert_eq!(f.client_closed().map_err(|e| e.0), Err("malformed"));
        assert_eq!(UpFilter::tunnel().client_closed(), Ok(ClientEnd::Shut));
    }

    #[test]
    fn an_upgrade_holds_the_client_until_the_origin_answers() {
        let t = target();
        let mut f = UpFilter::tunnel();
        let req = b"GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n";
        let mut first = req.to_vec();
        first.extend_from_slice(b"frame");
        assert_eq!(f.client(&t, first, 1024).unwrap(), req);
        assert!(f.watching() && f.holding());
        assert_eq!(f.client_closed(), Ok(ClientEnd::Hold));
        assert_eq!(f.upstream(b"HTTP/1.1 101 Switching").unwrap(), None);
        assert_eq!(f.upstream(b" Protocols\r\n\r\n").unwrap(), Some(b"frame".to_vec()));
        assert!(!f.watching());
        let mut f = UpFilter::tunnel();
        f.client(&t, req.to_vec(), 1024).unwrap();
        assert_eq!(f.upstream(b"garbage\r\n\r\n").map_err(|e| e.0), Err("upstream_malformed"));
    }
}
