//! Real parts for the tests: a DNS server (hickory-server) serving a test zone, an HTTP upstream
//! and a TLS upstream on loopback, the proxy in-process with an audit file, and client helpers
//! (curl, raw sockets). Nothing here is a mock: every byte crosses a real socket.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_egress_proxy::{Cidr, Policy, Proxy, ProxyConfig, Rule};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{Metadata, ResponseCode};
use hickory_server::proto::rr::rdata::{A, AAAA};
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::oneshot;

/// The upstream address every ordinary test name resolves to.
pub const UP_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// The rebinding zone's first answer (upstream A) and second answer (upstream B).
pub const REBIND_A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
pub const REBIND_B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);

/// The test zone. `rebind.test` alternates between REBIND_A and REBIND_B with TTL 0.
struct Zone {
    queries: Arc<Mutex<HashMap<String, usize>>>,
    rebind_flip: AtomicUsize,
}

impl Zone {
    fn answer(&self, name: &str, qt: RecordType) -> Option<Vec<RData>> {
        let v4 = |a: Ipv4Addr| RData::A(A(a));
        let v6 = |s: &str| RData::AAAA(AAAA(s.parse().unwrap()));
        let up = v4(UP_IP);
        let (a, aaaa): (Vec<RData>, Vec<RData>) = match name {
            "allowed.test"
            | "other.test"
            | "evil.test"
            | "a.sub.test"
            | "sub.test"
            | "bad.sub.test"
            | "allowed.test.evil.test"
            | "xn--llowed-9pf.test"
            | "self.test"
            | "bulk.test" => (vec![up], vec![]),
            "private.test" => (vec![v4(Ipv4Addr::new(10, 0, 0, 1))], vec![]),
            "metadata.test" => (vec![v4(Ipv4Addr::new(169, 254, 169, 254))], vec![]),
            "cgnat.test" => (vec![v4(Ipv4Addr::new(100, 64, 0, 1))], vec![]),
            "mixed.test" => (vec![up, v4(Ipv4Addr::new(10, 0, 0, 1))], vec![]),
            "mapped.test" => (vec![], vec![v6("::ffff:10.0.0.1")]),
            "nat64.test" => (vec![], vec![v6("64:ff9b::a9fe:a9fe")]),
            "loop6.test" => (vec![], vec![v6("::1")]),
            "rebind.test" => {
                if qt == RecordType::A {
                    let n = self.rebind_flip.fetch_add(1, Ordering::SeqCst);
                    let ip = if n.is_multiple_of(2) { REBIND_A } else { REBIND_B };
                    (vec![v4(ip)], vec![])
                } else {
                    (vec![], vec![])
                }
            }
            _ => return None,
        };
        Some(if qt == RecordType::A {
            a
        } else if qt == RecordType::AAAA {
            aaaa
        } else {
            vec![]
        })
    }
}

#[async_trait::async_trait]
impl RequestHandler for Zone {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let info = request.request_info().unwrap();
        let name = info.query.name().to_string();
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let qt = info.query.query_type();
        if qt == RecordType::A {
            *self.queries.lock().unwrap().entry(name.clone()).or_default() += 1;
        }
        let mut md = Metadata::response_from_request(&request.metadata);
        md.authoritative = true;
        let owner = Name::from(info.query.name().clone());
        let builder = MessageResponseBuilder::from_message_request(request);
        match self.answer(&name, qt) {
            None => {
                md.response_code = ResponseCode::NXDomain;
                let resp = builder.build_no_records(md);
                response_handle.send_response(resp).await.unwrap()
            }
            Some(rdatas) => {
                let records: Vec<Record> =
                    rdatas.into_iter().map(|r| Record::from_rdata(owner.clone(), 0, r)).collect();
                let resp = builder.build(md, records.iter(), [], [], []);
                response_handle.send_response(resp).await.unwrap()
            }
        }
    }
}

/// A running DNS server on 127.0.0.1 (UDP and TCP on the same port).
pub struct Dns {
    pub addr: SocketAddr,
    pub queries: Arc<Mutex<HashMap<String, usize>>>,
    _server: Server<Zone>,
}

impl Dns {
    pub async fn start() -> Dns {
        let queries = Arc::new(Mutex::new(HashMap::new()));
        let zone = Zone { queries: queries.clone(), rebind_flip: AtomicUsize::new(0) };
        let mut server = Server::new(zone);
        // UDP and TCP on one port: the port UDP got may be taken for TCP, so try a few.
        let mut bound = None;
        for _ in 0..20 {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let addr = udp.local_addr().unwrap();
            if let Ok(tcp) = TcpListener::bind(addr).await {
                bound = Some((udp, addr, tcp));
                break;
            }
        }
        let (udp, addr, tcp) = bound.expect("no port free for both UDP and TCP in 20 tries");
        server.register_socket(udp);
        server.register_listener(tcp, Duration::from_secs(5), 4096);
        Dns { addr, queries, _server: server }
    }

    pub fn a_queries(&self, name: &str) -> usize {
        self.queries.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

/// What an upstream saw.
#[derive(Default)]
pub struct Seen {
    /// Every raw request (head + body + anything after it within a short grace period).
    pub raw: Mutex<Vec<Vec<u8>>>,
    pub conns: AtomicUsize,
}

/// A tiny HTTP/1.1 origin: answers one request per connection, then closes. `/bytes/N` returns
/// N bytes, `/pattern/N` N bytes of [`pattern`]; anything else returns a line naming the
/// upstream, the path and the Host header.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Seen>,
}

/// `n` bytes that count through 0..251 again and again: a reordered, lost or repeated chunk
/// anywhere in a transfer shows.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn find_head_end(b: &[u8]) -> Option<usize> {
    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

async fn serve_http<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S, name: &str, seen: &Seen) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    let head_end = loop {
        match s.read(&mut tmp).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
        if let Some(e) = find_head_end(&buf) {
            break e;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let lower = head.to_ascii_lowercase();
    if let Some(cl) =
        lower.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse::<usize>().ok())
    {
        while buf.len() < head_end + cl {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
    } else if lower.contains("transfer-encoding: chunked") {
        while !buf[head_end..].windows(5).any(|w| w == b"0\r\n\r\n") {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
    }
    // A short grace period catches anything a proxy forwards after the request (smuggling).
    if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(150), s.read(&mut tmp)).await {
        buf.extend_from_slice(&tmp[..n]);
    }
    seen.raw.lock().unwrap().push(buf.clone());
    let first = head.lines().next().unwrap_or("").to_string();
    let path = first.split(' ').nth(1).unwrap_or("/").to_string();
    let host = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("host").then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    let body: Vec<u8> = if let Some(n) = path.strip_prefix("/bytes/") {
        vec![b'x'; n.parse().unwrap_or(0)]
    } else if let Some(n) = path.strip_prefix("/pattern/") {
        pattern(n.parse().unwrap_or(0))
    } else {
        format!("upstream {name}: {path} host={host}\n").into_bytes()
    };
    let _ = s
        .write_all(format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).as_bytes())
        .await;
    let _ = s.write_all(&body).await;
    let _ = s.shutdown().await;
}

/// An HTTP/1.1 origin with persistent connections, as real ones have them: it answers requests
/// in turn on one connection until a request says `Connection: close` or the client closes.
/// Its answers name the upstream, the path, and the connection's number and request count
/// (`conn=C req=R`), so a test sees which connection carried what. Paths that misbehave:
/// `/split` sends a second, forged response right after the first one's body (response
/// splitting); `/chunked` answers `hello` in two chunks; `/conn-te` and `/conn-cl` answer the
/// same way chunked and by length, with a `Connection` header that names that framing (a
/// recipient that removed the named field would read the body otherwise); `/then-close` answers and then closes
/// without saying so first (an origin's keep-alive timeout); `/then-drop-next` answers, and
/// closes at the next request on the connection without answering it (the race an origin's
/// timeout makes with a request already on the way); `/until-close` has no length, so only its
/// close ends it; `/pattern/N` answers N bytes of [`pattern`]. `HEAD` answers with the length a
/// `GET` would have and no body, and
/// `Expect: 100-continue` gets a `100 Continue` before the body is read.
pub async fn persistent_upstream(ip: Ipv4Addr, name: &'static str) -> Upstream {
    Upstream::serve(ip, 0, name, true).await
}

async fn serve_persistent(mut s: TcpStream, name: &str, conn: usize, seen: &Seen) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    let mut drop_next = false;
    for req in 1.. {
        let head_end = loop {
            if let Some(e) = find_head_end(&buf) {
                break e;
            }
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        if drop_next {
            return;
        }
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let lower = head.to_ascii_lowercase();
        if lower.contains("\r\nexpect: 100-continue") {
            let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
        }
        let cl = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + cl {
            match s.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        seen.raw.lock().unwrap().push(buf[..head_end + cl].to_vec());
        buf.drain(..head_end + cl);
        let path = head.lines().next().unwrap_or("").split(' ').nth(1).unwrap_or("/").to_string();
        let close = lower.contains("\r\nconnection: close") || lower.contains(" http/1.0\r\n");
        let body = format!("upstream {name}: {path} conn={conn} req={req}\n");
        let mut out = match path.as_str() {
            "/chunked" => {
                let (a, b) = body.split_at(5);
                format!(
                    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                    b.len()
                )
            }
            "/conn-te" => {
                let (a, b) = body.split_at(5);
                format!(
                    "HTTP/1.1 200 OK\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                    b.len()
                )
            }
            "/conn-cl" => {
                format!("HTTP/1.1 200 OK\r\nConnection: content-length\r\nContent-Length: {}\r\n\r\n{body}", body.len())
            }
            "/until-close" => format!("HTTP/1.1 200 OK\r\n\r\n{body}"),
            _ => format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n{}\r\n{}",
                body.len(),
                if close { "Connection: close\r\n" } else { "" },
                if lower.starts_with("head ") { "" } else { body.as_str() }
            ),
        };
        if path == "/split" {
            out.push_str("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nforged\n");
        }
        if let Some(n) = path.strip_prefix("/pattern/") {
            let n = n.parse().unwrap_or(0);
            out = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n");
            if s.write_all(out.as_bytes()).await.is_err() || s.write_all(&pattern(n)).await.is_err() {
                return;
            }
            continue;
        }
        if s.write_all(out.as_bytes()).await.is_err() {
            return;
        }
        drop_next = path == "/then-drop-next";
        if close || path == "/then-close" || path == "/until-close" {
            let _ = s.shutdown().await;
            return;
        }
    }
}

/// One request as [`LenientOrigin`] routed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    /// The virtual host it went to (RFC 9112 §3.2.2: the absolute-form target's authority if
    /// there is one, else the `Host` header, else `(default)`).
    pub vhost: String,
    /// The request line.
    pub line: String,
}

/// An origin as lenient as some real servers are, for the smuggling tests. On each connection it
/// reads requests one after another until the client closes: it processes every request it has
/// read, ignoring `Connection: close` (as servers that answer pipelined requests eagerly do);
/// it skips empty lines before a request line and accepts any method; it frames a body by
/// `Content-Length` and reads a request without one as bodiless (it does not implement chunked
/// bodies); and it routes each request to a virtual host as RFC 9112 §3.2.2 says (see
/// [`Routed::vhost`]), answering with a line naming it. `/ws` with `Upgrade: websocket` is
/// switched (101) and then echoes every byte; an upgrade anywhere else is declined (the request
/// is answered as usual). Every byte it received is kept in `received`.
pub struct LenientOrigin {
    pub addr: SocketAddr,
    pub routed: Arc<Mutex<Vec<Routed>>>,
    pub received: Arc<Mutex<Vec<u8>>>,
}

impl LenientOrigin {
    pub async fn start() -> LenientOrigin {
        let l = TcpListener::bind((UP_IP, 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        let routed = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (r2, b2) = (routed.clone(), received.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let (r3, b3) = (r2.clone(), b2.clone());
                tokio::spawn(async move { serve_lenient(s, &r3, &b3).await });
            }
        });
        LenientOrigin { addr, routed, received }
    }

    /// The virtual hosts requests were routed to, in order.
    pub fn vhosts(&self) -> Vec<String> {
        self.routed.lock().unwrap().iter().map(|r| r.vhost.clone()).collect()
    }
}

async fn serve_lenient(mut s: TcpStream, routed: &Mutex<Vec<Routed>>, received: &Mutex<Vec<u8>>) {
    let mut buf = Vec::new();
    // Reads more into `buf` (and `received`); `false` at the end of the connection.
    async fn read(s: &mut TcpStream, buf: &mut Vec<u8>, received: &Mutex<Vec<u8>>) -> bool {
        let mut tmp = [0u8; 16384];
        match s.read(&mut tmp).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                received.lock().unwrap().extend_from_slice(&tmp[..n]);
                buf.extend_from_slice(&tmp[..n]);
                true
            }
        }
    }
    loop {
        while buf.first().is_some_and(|b| *b == b'\r' || *b == b'\n') {
            buf.remove(0);
        }
        let Some(head_end) = find_head_end(&buf) else {
            if !read(&mut s, &mut buf, received).await {
                return;
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let line = lines.next().unwrap_or("").to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let mut words = line.split_ascii_whitespace();
        let (_method, target) = (words.next().unwrap_or(""), words.next().unwrap_or("/").to_string());
        let vhost = match target.split_once("://") {
            Some((_, rest)) => rest.split(['/', '?']).next().unwrap_or("").to_string(),
            None => header("host").unwrap_or_else(|| "(default)".to_string()),
        };
        let cl: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while buf.len() < head_end + cl {
            if !read(&mut s, &mut buf, received).await {
                return;
            }
        }
        buf.drain(..head_end + cl);
        routed.lock().unwrap().push(Routed { vhost: vhost.clone(), line: line.clone() });
        let switch = target == "/ws" && header("upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
        if switch {
            let _ = s
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                .await;
            // The new protocol: an echo of every byte, those already read included.
            if s.write_all(&buf).await.is_err() {
                return;
            }
            loop {
                buf.clear();
                if !read(&mut s, &mut buf, received).await || s.write_all(&buf).await.is_err() {
                    return;
                }
            }
        }
        let body = format!("vhost={vhost} {line}\n");
        let out = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        if s.write_all(out.as_bytes()).await.is_err() {
            return;
        }
    }
}

impl Upstream {
    pub async fn start(ip: Ipv4Addr, port: u16, name: &'static str) -> Upstream {
        Upstream::serve(ip, port, name, false).await
    }

    /// One request per connection, or `persistent` ones (see [`persistent_upstream`]).
    async fn serve(ip: Ipv4Addr, port: u16, name: &'static str, persistent: bool) -> Upstream {
        let l = TcpListener::bind((ip, port)).await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let s2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else { return };
                let conn = s2.conns.fetch_add(1, Ordering::SeqCst) + 1;
                let s3 = s2.clone();
                if persistent {
                    tokio::spawn(async move { serve_persistent(s, name, conn, &s3).await });
                    continue;
                }
                tokio::spawn(async move { serve_http(s, name, &s3).await });
            }
        });
        Upstream { addr, seen }
    }
}

/// A TLS origin (rustls) with a self-signed certificate for `allowed.test` and `other.test`.
pub struct TlsUpstream {
    pub addr: SocketAddr,
    pub cert_pem: PathBuf,
    pub cert_der: rustls::pki_types::CertificateDer<'static>,
    _dir: tempfile::TempDir,
}

impl TlsUpstream {
    pub async fn start() -> TlsUpstream {
        let ck =
            rcgen::generate_simple_self_signed(vec!["allowed.test".to_string(), "other.test".to_string()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cert_pem = dir.path().join("cert.pem");
        std::fs::write(&cert_pem, ck.cert.pem()).unwrap();
        let cert_der = ck.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).unwrap();
        crate::suite::fixtures::install_crypto_provider();
        let cfg = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert_der.clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let l = TcpListener::bind((UP_IP, 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else { return };
                let acc = acceptor.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acc.accept(s).await {
                        serve_http(tls, "tls", &seen).await;
                    }
                });
            }
        });
        TlsUpstream { addr, cert_pem, cert_der, _dir: dir }
    }
}

/// The proxy under test, in-process, with its audit file.
pub struct TestProxy {
    pub addr: SocketAddr,
    pub metrics: Option<SocketAddr>,
    pub audit: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

/// The grants every test proxy has, unless a test builds its own.
pub const GRANTS: &[&str] = &[
    "allowed.test",
    "*.sub.test",
    "self.test",
    "rebind.test",
    "private.test",
    "metadata.test",
    "cgnat.test",
    "mixed.test",
    "mapped.test",
    "nat64.test",
    "loop6.test",
    "bulk.test",
];

pub fn config(dns: &Dns, allow: &[&str], deny: &[&str], waive_loopback: bool) -> ProxyConfig {
    ProxyConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        policy: Policy {
            allow: allow.iter().map(|s| s.parse::<Rule>().unwrap()).collect(),
            deny: deny.iter().map(|s| s.parse::<Rule>().unwrap()).collect(),
            dangerously_allow_private: if waive_loopback {
                vec!["127.0.0.0/8".parse::<Cidr>().unwrap()]
            } else {
                vec![]
            },
        },
        resolvers: vec![dns.addr],
        idle_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(3),
        ..ProxyConfig::default()
    }
}

impl TestProxy {
    pub async fn start(mut cfg: ProxyConfig) -> TestProxy {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit.jsonl");
        cfg.audit = Some(audit.clone());
        let proxy = Proxy::bind(cfg).await.unwrap();
        let addr = proxy.local_addrs()[0];
        let metrics = proxy.metrics_addr();
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            proxy
                .run(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        TestProxy { addr, metrics, audit, stop: Some(tx), _dir: dir }
    }

    /// The default proxy: GRANTS, the zone's resolver, loopback waived (upstreams live there).
    pub async fn default_for(dns: &Dns) -> TestProxy {
        TestProxy::start(config(dns, GRANTS, &["bad.sub.test"], true)).await
    }

    pub fn records(&self) -> Vec<Value> {
        // Only complete lines: the proxy may be writing the next one right now.
        let text = std::fs::read_to_string(&self.audit).unwrap_or_default();
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        complete.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// Waits (up to 5 s) for `n` audit records and returns them.
    pub async fn wait_records(&self, n: usize) -> Vec<Value> {
        for _ in 0..250 {
            let r = self.records();
            if r.len() >= n {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("expected {n} audit records, got {:#?}", self.records());
    }

    /// Waits for the record of connection number `conn`.
    pub async fn record(&self, conn: u64) -> Value {
        for _ in 0..250 {
            if let Some(r) = self.records().into_iter().find(|r| r["conn"] == conn) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("no audit record for conn {conn}: {:#?}", self.records());
    }

    /// Asserts that the audit record `conn` is a denial with `reason`.
    pub async fn assert_denied(&self, conn: u64, reason: &str) -> Value {
        let r = self.record(conn).await;
        assert_eq!(r["decision"], "deny", "{r:#}");
        assert_eq!(r["reason"], reason, "{r:#}");
        r
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Runs curl with a 10 s limit; returns (exit code, stdout, stderr).
pub async fn curl(args: &[&str]) -> (i32, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(15),
        tokio::process::Command::new("curl")
            .args(["-sS", "--max-time", "10"])
            .args(args)
            .env_remove("http_proxy")
            .env_remove("https_proxy")
            .env_remove("HTTPS_PROXY")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .output(),
    )
    .await
    .expect("curl timed out")
    .expect("curl is not installed: apt-get install curl");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Sends raw bytes to the proxy and returns everything it answers until it closes.
pub async fn raw(proxy: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    out
}

/// Sends an HTTP request head and returns the status line.
pub async fn raw_status(proxy: SocketAddr, head: &str) -> String {
    let out = raw(proxy, head.as_bytes()).await;
    String::from_utf8_lossy(&out).lines().next().unwrap_or("").to_string()
}

/// A SOCKS5 CONNECT with the given ATYP and address bytes; returns the reply code and stream.
pub async fn socks(proxy: SocketAddr, atyp: u8, addr: &[u8], port: u16) -> (u8, TcpStream) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0]);
    let mut req = vec![5, 1, 0, atyp];
    if atyp == 3 {
        req.push(addr.len() as u8);
    }
    req.extend_from_slice(addr);
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep).await.unwrap();
    (rep[1], s)
}

pub fn proxy_url(p: SocketAddr) -> String {
    format!("http://{p}")
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// Selects rustls's ring provider for this test process. In a workspace build another crate
/// (reqwest) enables aws-lc-rs too, and rustls then refuses to guess which one to use.
pub(crate) fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
