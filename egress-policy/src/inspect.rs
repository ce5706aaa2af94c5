//! What a client names, checked before anything is connected or relayed: the request head a
//! proxy client sends first (bounded in size; a `CONNECT` authority and its `Host` header must
//! name one destination), and a tunnel's first bytes (`CONNECT` or SOCKS5), before any of them
//! reaches the upstream: a TLS ClientHello must name the tunnel's host in its SNI and carry no
//! Encrypted Client Hello; bytes an origin would read as an HTTP request are handed to the
//! request-by-request checks (`http::TunnelRequests`); anything else passes as opaque.
//!
//! Pure: the caller feeds everything the client has sent so far and is told to read more, to
//! let the bytes pass (and what they were), to check them as HTTP, or to refuse.

use crate::host::{Host, Target, parse_authority, parse_host};
use crate::http::{self, Opening, RequestHead};
use crate::refusal::{Refuse, head_refusal, refuse};
use crate::tls::{self, HelloParse};

/// What a tunnel's first bytes turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inner {
    /// Passes as it is (`"tls"`, or `"opaque"` for bytes that are neither TLS nor HTTP).
    Pass(&'static str),
    /// Plain HTTP: a request stream to check request by request.
    Http,
}

/// The request head at the start of `buf`, at most `max` bytes long. `Ok(None)`: incomplete,
/// read more (`buf` is not over `max` yet).
pub fn request_head(buf: &[u8], max: usize) -> Result<Option<RequestHead>, Refuse> {
    let too_large = || refuse("header_too_large", format!("the request head exceeds {max} bytes"));
    match http::parse_head(buf) {
        Ok(Some(h)) if h.len > max => Err(too_large()),
        Ok(Some(h)) => Ok(Some(h)),
        Ok(None) if buf.len() > max => Err(too_large()),
        Ok(None) => Ok(None),
        Err(e) => Err(head_refusal(&e)),
    }
}

/// The destination of a `CONNECT` request: its authority, which any `Host` header must agree
/// with (a `Host` without a port means the authority's port). On refusal, the target when the
/// authority itself parsed (the audit record names it).
pub fn connect_target(head: &RequestHead) -> Result<Target, (Option<Target>, Refuse)> {
    let target = parse_authority(&head.target, None).map_err(|e| (None, refuse("invalid_host", e.to_string())))?;
    match head.check_host(&target, target.port) {
        Ok(()) => Ok(target),
        Err(e) => Err((Some(target), head_refusal(&e))),
    }
}

/// Checks the first bytes `b` of a tunnel to `target`. `Ok(None)`: need more bytes.
/// `Ok(Some(inner))`: what they are (TLS with a matching SNI, or not HTTP: pass; plain HTTP:
/// check every request). `max_head` bounds how long an HTTP request line may take to be told
/// apart.
pub fn inspect(target: &Target, b: &[u8], max_head: usize) -> Result<Option<Inner>, Refuse> {
    if b.is_empty() {
        return Ok(None);
    }
    if b.first() == Some(&22) {
        return match tls::parse_client_hello(b) {
            HelloParse::NeedMore if b.len() > tls::MAX_HELLO + 1024 => {
                Err(refuse("tls_malformed", "ClientHello too large"))
            }
            HelloParse::NeedMore => Ok(None),
            HelloParse::NotTls => Ok(Some(Inner::Pass("opaque"))),
            HelloParse::Malformed(m) => Err(refuse("tls_malformed", m)),
            HelloParse::Hello(h) => {
                if h.ech {
                    return Err(refuse("tls_ech", "Encrypted Client Hello hides the real server name; it is refused"));
                }
                check_sni(target, h.sni.as_deref()).map(|()| Some(Inner::Pass("tls")))
            }
        };
    }
    // Bytes that an origin could read as an HTTP request are checked as one, request by
    // request (`TunnelRequests`): a request that only a lenient origin would parse must not
    // slip through as "opaque".
    Ok(match http::opening(b, max_head) {
        Opening::NeedMore => None,
        Opening::Request => Some(Inner::Http),
        Opening::Other => Some(Inner::Pass("opaque")),
    })
}

/// Checks the SNI a ClientHello carried (as sent, not normalised) against the tunnel's target:
/// a tunnel to a name needs an SNI that parses to that same name; a tunnel to an address needs
/// none, since a name there would be a name nobody checked.
pub fn check_sni(target: &Target, sni: Option<&str>) -> Result<(), Refuse> {
    match (&target.host, sni) {
        (Host::Name(n), Some(sni)) => match parse_host(sni) {
            Ok(Host::Name(s)) if &s == n => Ok(()),
            _ => Err(refuse(
                "sni_mismatch",
                format!("TLS SNI `{}` differs from the tunnel host `{n}`", sni.escape_default()),
            )),
        },
        (Host::Name(n), None) => {
            Err(refuse("sni_missing", format!("the ClientHello names no server, but the tunnel is to `{n}`")))
        }
        (Host::Ip(_), None) => Ok(()),
        (Host::Ip(ip), Some(sni)) => Err(refuse(
            "sni_mismatch",
            format!("TLS SNI `{}` sent through a tunnel to the address {ip}", sni.escape_default()),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::host::parse_authority;
    use crate::tls::build_client_hello;

    fn code(target: &str, b: &[u8]) -> Result<Option<Inner>, &'static str> {
        inspect(&parse_authority(target, None).unwrap(), b, 1024).map_err(|r| r.0)
    }

    #[test]
    fn request_heads_are_bounded_and_connect_names_one_destination() {
        let head = |s: &str| request_head(s.as_bytes(), 64).map(|h| h.map(|h| h.len)).map_err(|r| r.0);
        assert_eq!(head("CONNECT a.test:443 HTTP/1.1\r\n"), Ok(None));
        assert_eq!(head("CONNECT a.test:443 HTTP/1.1\r\n\r\n"), Ok(Some(31)));
        assert_eq!(head(&format!("CONNECT a.test:443 HTTP/1.1\r\nX: {}", "a".repeat(40))), Err("header_too_large"));
        assert_eq!(head(&format!("CONNECT a.test:443 HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(28))), Ok(Some(64)));
        assert_eq!(
            head(&format!("CONNECT a.test:443 HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(29))),
            Err("header_too_large")
        );
        assert_eq!(head("CONNECT a.test:443 HTTP/1.1\r\nX: \0\r\n\r\n"), Err("malformed"));

        let connect = |s: &str| {
            let h = request_head(s.as_bytes(), 1024).unwrap().unwrap();
            connect_target(&h).map(|t| t.to_string()).map_err(|(t, r)| (t.map(|t| t.to_string()), r.0))
        };
        assert_eq!(connect("CONNECT A.test.:443 HTTP/1.1\r\nHost: a.test\r\n\r\n"), Ok("a.test:443".into()));
        assert_eq!(connect("CONNECT a.test HTTP/1.1\r\n\r\n"), Err((None, "invalid_host")));
        assert_eq!(connect("CONNECT a.test@b.test:443 HTTP/1.1\r\n\r\n"), Err((None, "invalid_host")));
        assert_eq!(
            connect("CONNECT a.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n"),
            Err((Some("a.test:443".into()), "host_mismatch"))
        );
        assert_eq!(
            connect("CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:80\r\n\r\n"),
            Err((Some("a.test:443".into()), "host_mismatch"))
        );
    }

    #[test]
    fn the_sni_must_name_the_tunnel_host() {
        let hello = build_client_hello(Some("allowed.test"));
        assert_eq!(code("allowed.test:443", &hello), Ok(Some(Inner::Pass("tls"))));
        // The SNI goes through the same host parser: case and one trailing dot do not matter.
        assert_eq!(code("allowed.test:443", &build_client_hello(Some("ALLOWED.test."))), Ok(Some(Inner::Pass("tls"))));
        assert_eq!(code("allowed.test:443", &build_client_hello(Some("evil.test"))), Err("sni_mismatch"));
        assert_eq!(code("allowed.test:443", &build_client_hello(Some("evil.test\0allowed.test"))), Err("sni_mismatch"));
        assert_eq!(code("allowed.test:443", &build_client_hello(None)), Err("sni_missing"));
        assert_eq!(code("203.0.113.7:443", &build_client_hello(None)), Ok(Some(Inner::Pass("tls"))));
        assert_eq!(code("203.0.113.7:443", &build_client_hello(Some("allowed.test"))), Err("sni_mismatch"));
        assert_eq!(code("203.0.113.7:443", &build_client_hello(Some("203.0.113.7"))), Err("sni_mismatch"));
    }

    #[test]
    fn a_hello_is_awaited_whole_and_bounded() {
        let hello = build_client_hello(Some("allowed.test"));
        for cut in [1, 5, hello.len() - 1] {
            assert_eq!(code("allowed.test:443", &hello[..cut]), Ok(None), "{cut}");
        }
        // A hello announced at the largest size and sent one byte per record never completes
        // in a bounded buffer: it is refused once it outgrows any real one, not awaited.
        let mut huge = vec![22, 3, 1, 0, 4, 1, 1, 0, 0];
        while huge.len() <= tls::MAX_HELLO + 1024 {
            huge.extend_from_slice(&[22, 3, 1, 0, 1, 0]);
        }
        assert_eq!(code("allowed.test:443", &huge[..huge.len() - 6]), Ok(None));
        assert_eq!(code("allowed.test:443", &huge), Err("tls_malformed"));
    }

    #[test]
    fn encrypted_client_hello_is_refused() {
        // The ECH extension (0xfe0d) spliced into a hello that otherwise names the right host.
        let mut hello = build_client_hello(Some("allowed.test"));
        let ext = [0xfe, 0x0d, 0, 0];
        hello.extend_from_slice(&ext);
        let grow = |b: &mut Vec<u8>, at: usize, width: usize| {
            let mut n = 0usize;
            for i in 0..width {
                n = n << 8 | usize::from(b[at + i]);
            }
            n += ext.len();
            for i in 0..width {
                b[at + width - 1 - i] = (n >> (8 * i)) as u8;
            }
        };
        grow(&mut hello, 3, 2); // record length
        grow(&mut hello, 6, 3); // handshake length
        // Record header 5, handshake header 4, version 2, random 32, session id 1, suites 4,
        // compression 2: the extensions' length comes next.
        let exts_at = 5 + 4 + 2 + 32 + 1 + 4 + 2;
        grow(&mut hello, exts_at, 2); // extensions length
        assert_eq!(code("allowed.test:443", &hello), Err("tls_ech"));
    }

    #[test]
    fn http_is_checked_and_other_bytes_are_opaque() {
        assert_eq!(code("a.test:80", b"GET / HTTP/1.1\r\n"), Ok(Some(Inner::Http)));
        assert_eq!(code("a.test:80", b"GE"), Ok(None));
        assert_eq!(code("a.test:22", b"SSH-2.0-OpenSSH_9.6\r\n"), Ok(Some(Inner::Pass("opaque"))));
        assert_eq!(code("a.test:80", b""), Ok(None));
        // The first byte of a TLS handshake record must be followed by TLS: it is never opaque.
        assert_eq!(code("a.test:443", &[22, 9, 9, 9, 9, 9]), Err("tls_malformed"));
    }
}
