//! `axp-egress-policy`: every decision the egress proxy makes about bytes it has been handed,
//! as pure functions. Host, authority and URL parsing (`host`), the classes of refused addresses
//! (`ipclass`), the allowlist (`policy`), the checks on the addresses an attempt would connect
//! to, the proxy itself among them (`destination`), the TLS ClientHello reader (`tls`), HTTP/1.x
//! request and response heads with their framing and the request checks inside tunnels
//! (`http`), SOCKS5 messages (`socks`), the check on a tunnel's first bytes, SNI included
//! (`inspect`), what may pass each way of a relayed connection (`relay`: the request-body and
//! response-framing state machines), and the reason codes with the answers clients get
//! (`refusal`).
//!
//! This crate has no tokio, no sockets, no resolver and no clock: what it is given is a byte
//! slice, a string or a value, and what it returns is a parsed value or a refusal. That is what
//! lets the proxy's security decisions be unit-tested one by one and fuzzed (`fuzz/`), and it is
//! why the proxy (`axp-egress-proxy`) only orders these checks and does the I/O. Domain matching
//! is not implemented here: grants and rules match with `axp_protocol::capability::host_matches`,
//! the one matcher of the workspace, so a session grant and a proxy rule mean the same thing.

pub mod destination;
pub mod host;
pub mod http;
pub mod inspect;
pub mod ipclass;
pub mod policy;
pub mod refusal;
pub mod relay;
pub mod socks;
pub mod tls;

/// A deterministic mutation fuzz over every pure parser: no input may panic, what the host
/// parser accepts must be canonical, and every head the proxy builds (for the origin from a
/// request, for the client from a response) must parse back as one well-formed head with no
/// hop-by-hop fields, the framing it was decided on, and nothing after it. (The parsers take
/// plain byte slices and strings, so they can be wired into `cargo fuzz` targets unchanged.)
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod fuzz_smoke {
    use crate::host::{Host, Target, parse_absolute_form, parse_authority, parse_host};
    use crate::http::{
        Body, ChunkedScanner, Opening, TunnelRequests, forward_request, opening, parse_head, parse_response_head,
        relay_response,
    };
    use crate::socks::{parse_greeting, parse_request};
    use crate::tls::{build_client_hello, parse_client_hello};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn mutate(r: &mut Rng, seed: &[u8]) -> Vec<u8> {
        let mut v = seed.to_vec();
        let alphabet = b"\0\r\n .:@#%[]\\/-_0x7fAz\xff\x05\x16";
        for _ in 0..1 + r.below(4) {
            match r.below(4) {
                0 if !v.is_empty() => {
                    let i = r.below(v.len());
                    v[i] = alphabet[r.below(alphabet.len())];
                }
                1 => {
                    let i = r.below(v.len() + 1);
                    v.insert(i, alphabet[r.below(alphabet.len())]);
                }
                2 if !v.is_empty() => {
                    let i = r.below(v.len());
                    v.remove(i);
                }
                _ => {
                    let i = r.below(v.len() + 1);
                    v.truncate(i);
                }
            }
        }
        v
    }

    #[test]
    fn no_parser_panics_and_accepted_names_are_canonical() {
        let seeds: Vec<Vec<u8>> = vec![
            b"allowed.test".to_vec(),
            b"0x7f.0.0.1".to_vec(),
            b"[::ffff:127.0.0.1]:443".to_vec(),
            b"http://a.test:80/x?y".to_vec(),
            b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n".to_vec(),
            b"5\r\nhello\r\n0\r\n\r\n".to_vec(),
            b"POST http://a.test:8080/p HTTP/1.1\r\nContent-Length: 3\r\nConnection: x\r\nX: 1\r\n\r\nabc".to_vec(),
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello".to_vec(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nKeep-Alive: 5\r\n\r\n0\r\n\r\n".to_vec(),
            b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(),
            b"PUT http://a.test/ HTTP/1.1\r\nConnection: content-length, host\r\nContent-Length: 3\r\n\r\nabc".to_vec(),
            b"HTTP/1.1 200 OK\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            b"\r\nGET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\n\r\n"
                .to_vec(),
            vec![5, 1, 0, 3, 6, b'a', b'.', b't', b'e', b's', b't', 0, 80],
            build_client_hello(Some("allowed.test")),
        ];
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..40_000 {
            let seed = &seeds[r.below(seeds.len())];
            let m = mutate(&mut r, seed);
            let s = String::from_utf8_lossy(&m);
            if let Ok(Host::Name(n)) = parse_host(&s) {
                assert!(
                    n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)),
                    "{n:?}"
                );
                assert!(!n.ends_with('.') && !n.starts_with('.'), "{n:?}");
                assert_eq!(parse_host(&n), Ok(Host::Name(n.clone())));
            }
            let _ = parse_authority(&s, None);
            let _ = parse_absolute_form(&s);
            if let Ok(Some(h)) = parse_head(&m)
                && let Ok(f) = forward_request(&h)
            {
                let built = parse_head(&f.upstream_head).unwrap().unwrap();
                assert_eq!(built.len, f.upstream_head.len(), "{:?}", String::from_utf8_lossy(&f.upstream_head));
                assert_eq!(built.method, h.method);
                assert_eq!(built.values("host").count(), 1);
                assert_eq!(built.body().unwrap(), f.body);
                assert!(f.persistent == (f.body == Body::None && h.minor == 1));
                for hop in ["proxy-connection", "keep-alive", "te", "upgrade", "proxy-authorization"] {
                    assert_eq!(built.values(hop).count(), 0, "{hop}");
                }
            }
            if let Ok(Some(h)) = parse_response_head(&m) {
                for head_request in [false, true] {
                    if let Ok(r) = relay_response(&h, head_request) {
                        let built = parse_response_head(&r.client_head).unwrap().unwrap();
                        assert_eq!((built.len, built.status), (r.client_head.len(), h.status));
                        assert!(r.client_head.ends_with(b"\r\nConnection: close\r\n\r\n"));
                        assert!(!r.reusable || h.minor == 1);
                        // The client reads the body by the framing the proxy relays it by.
                        assert_eq!(relay_response(&built, head_request).unwrap().body, r.body);
                    }
                }
                let interim = h.interim_head();
                assert_eq!(parse_response_head(&interim).unwrap().unwrap().len, interim.len());
            }
            let _ = ChunkedScanner::default().feed(&m);
            if opening(&m, 1024) == Opening::Request {
                // What a tunnel's request checks release is always a prefix of what came in.
                let mut t = TunnelRequests::new(Target { host: Host::Name("a.test".into()), port: 80 }, 1024);
                let (a, b) = m.split_at(r.below(m.len() + 1));
                let mut out = t.client(a).unwrap_or_default();
                out.extend(t.client(b).unwrap_or_default());
                assert!(m.starts_with(&out));
            }
            let _ = parse_greeting(&m);
            let _ = parse_request(&m);
            let _ = parse_client_hello(&m);
        }
    }
}
