//! The proxy itself: listeners (TCP and UNIX), protocol detection (HTTP absolute-form and
//! CONNECT vs SOCKS5 by the first byte), the decision for each attempt (allowlist, own DNS
//! resolution, address classification, self-connection, limits), the TLS first-bytes check and
//! the request-by-request HTTP check inside tunnels, the byte pump with idle timeout and byte
//! budget (and, for plain HTTP, the response framing that tells where a response ends), the pool
//! of upstream connections kept between plain-HTTP requests, and the audit record.
//!
//! All parsing and policy is delegated to the pure modules (`host`, `policy`, `ipclass`, `tls`,
//! `http`, `socks`); this module owns I/O and ordering only. It must never open a connection to an
//! address it has not checked, and never look a name up twice for one attempt: the address the
//! resolver returned and the classifier passed is the address it connects to.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver, TokioResolver};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::audit::{AuditLog, AuditRecord};
use crate::host::{Host, Target, parse_authority, parse_host};
use crate::http::{self, Body, ChunkProgress, ChunkedScanner, HeadError, MAX_RESPONSE_HEAD, Opening, TunnelRequests};
use crate::policy::Policy;
use crate::socks::{self, SocksError};
use crate::splice::{self, PIPE_SIZE, Pipe, SpliceTarget};
use crate::tls::{self, HelloParse};

/// Everything one proxy instance needs. One instance serves one allowlist of one owner (a
/// session or a provider); instances of the same owner can share one [`Budget`], so the owner's
/// limits hold across all of them.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// TCP listen addresses (port 0 picks a free port; see [`Proxy::local_addrs`]).
    pub listen: Vec<SocketAddr>,
    /// UNIX socket paths to listen on (a stale socket at the path is replaced).
    pub listen_unix: Vec<PathBuf>,
    /// The allowlist.
    pub policy: Policy,
    /// DNS servers to ask; empty means the system's (`/etc/resolv.conf`).
    pub resolvers: Vec<SocketAddr>,
    /// Audit log file (appended); `None` writes the lines to stderr.
    pub audit: Option<PathBuf>,
    /// Serve Prometheus text on this address (any path). Also refused as a CONNECT target.
    pub metrics: Option<SocketAddr>,
    /// Most connections open at once (ignored when [`ProxyConfig::budget`] is given).
    pub max_connections: usize,
    /// Most bytes (both directions, all connections) over the instance's lifetime (ignored when
    /// [`ProxyConfig::budget`] is given).
    pub max_bytes: Option<u64>,
    /// A connection and byte budget shared with other instances (one owner's instances for
    /// different allowlists). `None`: the instance has its own, from `max_connections` and
    /// `max_bytes`.
    pub budget: Option<Budget>,
    /// A connection with no traffic in either direction for this long is closed.
    pub idle_timeout: Duration,
    /// Budget for resolving and connecting to the upstream.
    pub connect_timeout: Duration,
    /// Largest request head (HTTP) accepted.
    pub max_header_bytes: usize,
    /// Also receives every audit record (see [`crate::audit::Observer`]).
    pub observer: Option<crate::audit::Observer>,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            listen: Vec::new(),
            listen_unix: Vec::new(),
            policy: Policy::default(),
            resolvers: Vec::new(),
            audit: None,
            metrics: None,
            max_connections: 256,
            max_bytes: None,
            budget: None,
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            max_header_bytes: 32 * 1024,
            observer: None,
        }
    }
}

/// How many connections may be open at once and how many bytes may pass, over every instance
/// that holds a clone of it. Cloning shares the budget; it is never refilled.
#[derive(Debug, Clone)]
pub struct Budget(Arc<BudgetInner>);

#[derive(Debug)]
struct BudgetInner {
    permits: Arc<Semaphore>,
    max_connections: usize,
    bytes_used: AtomicU64,
    max_bytes: Option<u64>,
}

impl Budget {
    /// At most `max_connections` open at once and `max_bytes` (both directions) in all.
    pub fn new(max_connections: usize, max_bytes: Option<u64>) -> Self {
        Self(Arc::new(BudgetInner {
            permits: Arc::new(Semaphore::new(max_connections)),
            max_connections,
            bytes_used: AtomicU64::new(0),
            max_bytes,
        }))
    }

    /// Bytes charged so far.
    pub fn bytes_used(&self) -> u64 {
        self.0.bytes_used.load(Ordering::Relaxed)
    }

    /// Counts `n` bytes as already spent: an owner's proxy that is restarted after a crash
    /// goes on from what its predecessor used rather than from a fresh budget.
    pub fn spend(&self, n: u64) {
        self.charge(n);
    }

    /// Takes up to `n` bytes from the budget; returns how many were granted.
    fn charge(&self, n: u64) -> u64 {
        let Some(max) = self.0.max_bytes else {
            return n;
        };
        let used = &self.0.bytes_used;
        let mut now = used.load(Ordering::Relaxed);
        loop {
            let take = n.min(max.saturating_sub(now));
            match used.compare_exchange_weak(now, now + take, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return take,
                Err(seen) => now = seen,
            }
        }
    }

    fn spent(&self) -> Option<u64> {
        self.0.max_bytes.filter(|max| self.bytes_used() >= *max)
    }
}

/// Why the proxy could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A listen address or socket path could not be bound.
    #[error("cannot listen on {what}: {source}")]
    Bind {
        /// The address or path.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// No listener was configured.
    #[error("no listener configured (give --listen or --listen-unix)")]
    NoListener,
    /// The resolver configuration could not be read.
    #[error("cannot set up the DNS resolver: {0}")]
    Resolver(String),
    /// The audit log could not be opened.
    #[error("cannot open the audit log: {0}")]
    Audit(std::io::Error),
}

/// A bound, not yet running proxy.
pub struct Proxy {
    tcp: Vec<TcpListener>,
    unix: Vec<(UnixListener, PathBuf)>,
    metrics: Option<TcpListener>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").field("listen", &self.local_addrs()).finish_non_exhaustive()
    }
}

struct Shared {
    cfg: ProxyConfig,
    resolver: TokioResolver,
    audit: AuditLog,
    self_addrs: Vec<SocketAddr>,
    budget: Budget,
    conn_seq: AtomicU64,
    dns_cache: std::sync::Mutex<std::collections::HashMap<String, (Vec<IpAddr>, Instant)>>,
    pool: std::sync::Mutex<Vec<Kept>>,
}

/// An upstream connection kept after a plain-HTTP exchange that ended cleanly at a message
/// boundary, for a later request to the same destination.
///
/// The pool belongs to one proxy instance, so it never crosses owners (each session or
/// provider has its own instance, and so its own pool). A kept connection is only taken by a
/// request whose own decision has just passed (allowlist, fresh resolution, every address
/// classified) and whose resolved addresses include the one the connection goes to: reuse skips
/// the TCP connect, never a check. Only bodiless `GET`, `HEAD` and `OPTIONS` take one, so that
/// a connection the origin closed meanwhile can be replaced and the request sent again.
struct Kept {
    target: Target,
    addr: SocketAddr,
    conn: TcpStream,
    since: Instant,
}

/// Most upstream connections one instance keeps idle.
const POOL_MAX: usize = 32;
/// Longest an upstream connection is kept idle (less if the instance's idle timeout is less).
const POOL_IDLE: Duration = Duration::from_secs(30);
/// A download goes through a pipe with `splice(2)` (`splice.rs`) once this much has come down
/// the connection by copying: small exchanges, most of them, never pay for the pipe's
/// descriptors.
const SPLICE_AFTER: u64 = 64 * 1024;

/// What one wait in [`Shared::pump`] brought.
enum Event {
    /// A read from the client.
    Client(std::io::Result<usize>),
    /// A read from the upstream into the buffer.
    Up(std::io::Result<usize>),
    /// Bytes spliced from the upstream into the pipe.
    Spliced(std::io::Result<usize>),
    /// Nothing moved for the idle timeout.
    Idle,
}

/// Whether a kept connection can carry a request: the origin has neither closed it nor sent
/// anything unasked. One non-blocking `recv(MSG_PEEK)`; tokio's own `try_read` only knows what
/// its driver last saw, which can be older than the origin's FIN.
fn still_open(conn: &TcpStream) -> bool {
    use rustix::net::{RecvFlags, recv};
    let mut b = [0u8; 1];
    matches!(recv(conn, &mut b[..], RecvFlags::PEEK | RecvFlags::DONTWAIT), Err(e) if e == rustix::io::Errno::AGAIN)
}

/// Binds every listener in `config` and runs until `shutdown` completes.
pub async fn serve(config: ProxyConfig, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
    Proxy::bind(config).await?.run(shutdown).await
}

fn build_resolver(servers: &[SocketAddr]) -> Result<TokioResolver, ProxyError> {
    let mut builder = if servers.is_empty() {
        Resolver::builder_tokio().map_err(|e| ProxyError::Resolver(e.to_string()))?
    } else {
        let mut rc = ResolverConfig::from_parts(None, vec![], vec![]);
        for s in servers {
            let mut ns = NameServerConfig::udp_and_tcp(s.ip());
            for c in &mut ns.connections {
                c.port = s.port();
            }
            rc.add_name_server(ns);
        }
        Resolver::builder_with_config(rc, TokioRuntimeProvider::default())
    };
    let o = builder.options_mut();
    // The hosts file is the operator's, not DNS: a proxy that honours it would let a local
    // entry decide where a granted name goes. Names are always queried as absolute names, so
    // search domains and ndots never apply either.
    o.use_hosts_file = ResolveHosts::Never;
    o.ip_strategy = LookupIpStrategy::Ipv4thenIpv6;
    o.ndots = 0;
    builder.build().map_err(|e| ProxyError::Resolver(e.to_string()))
}

impl Proxy {
    /// Binds the listeners, opens the audit log and builds the resolver.
    pub async fn bind(cfg: ProxyConfig) -> Result<Self, ProxyError> {
        if cfg.listen.is_empty() && cfg.listen_unix.is_empty() {
            return Err(ProxyError::NoListener);
        }
        // What can fail without leaving anything behind comes first; then the listeners, whose
        // socket files are removed again if a later one cannot be bound.
        let resolver = build_resolver(&cfg.resolvers)?;
        let audit =
            AuditLog::open(cfg.audit.as_deref()).map_err(ProxyError::Audit)?.with_observer(cfg.observer.clone());
        let mut unix = Vec::new();
        let listeners = async {
            let mut tcp = Vec::new();
            for a in &cfg.listen {
                let l =
                    TcpListener::bind(a).await.map_err(|source| ProxyError::Bind { what: a.to_string(), source })?;
                tcp.push(l);
            }
            for p in &cfg.listen_unix {
                if let Ok(md) = std::fs::symlink_metadata(p) {
                    use std::os::unix::fs::FileTypeExt;
                    if md.file_type().is_socket() {
                        let _ = std::fs::remove_file(p);
                    }
                }
                let l = UnixListener::bind(p)
                    .map_err(|source| ProxyError::Bind { what: p.display().to_string(), source })?;
                unix.push((l, p.clone()));
            }
            let metrics = match cfg.metrics {
                Some(a) => Some(
                    TcpListener::bind(a).await.map_err(|source| ProxyError::Bind { what: a.to_string(), source })?,
                ),
                None => None,
            };
            Ok::<_, ProxyError>((tcp, metrics))
        };
        let (tcp, metrics) = match listeners.await {
            Ok(l) => l,
            Err(e) => {
                for (_, p) in &unix {
                    let _ = std::fs::remove_file(p);
                }
                return Err(e);
            }
        };
        let mut self_addrs: Vec<SocketAddr> = tcp.iter().filter_map(|l| l.local_addr().ok()).collect();
        self_addrs.extend(metrics.iter().filter_map(|l| l.local_addr().ok()));
        let budget = cfg.budget.clone().unwrap_or_else(|| Budget::new(cfg.max_connections, cfg.max_bytes));
        Ok(Self {
            tcp,
            unix,
            metrics,
            shared: Arc::new(Shared {
                cfg,
                resolver,
                audit,
                self_addrs,
                budget,
                conn_seq: AtomicU64::new(0),
                dns_cache: std::sync::Mutex::default(),
                pool: std::sync::Mutex::default(),
            }),
        })
    }

    /// The bound TCP proxy addresses, in the order given.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.tcp.iter().filter_map(|l| l.local_addr().ok()).collect()
    }

    /// The bound metrics address, if any.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` completes; then stops accepting, closes every open connection and
    /// removes the UNIX socket files.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
        // Connections are spawned straight from the accept loops (no hand-off, which shows in
        // the per-connection latency); a watch channel tells them all to stop at shutdown.
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = self.shared;
        let mut accepters = JoinSet::new();
        for l in self.tcp {
            let (sh, stop) = (shared.clone(), stop_rx.clone());
            let inherited = nodelay_for_accepted(&l);
            accepters.spawn(async move {
                loop {
                    match l.accept().await {
                        Ok((s, peer)) => {
                            if !inherited {
                                let _ = s.set_nodelay(true);
                            }
                            spawn_conn(&sh, &stop, Conn::Tcp(s), peer.to_string());
                        }
                        Err(_) => accept_backoff().await,
                    }
                }
            });
        }
        let mut paths = Vec::new();
        for (l, p) in self.unix {
            let (sh, stop) = (shared.clone(), stop_rx.clone());
            let name = format!("unix:{}", p.display());
            paths.push(p);
            accepters.spawn(async move {
                loop {
                    match l.accept().await {
                        Ok((s, _)) => spawn_conn(&sh, &stop, Conn::Unix(s), name.clone()),
                        Err(_) => accept_backoff().await,
                    }
                }
            });
        }
        if let Some(l) = self.metrics {
            let sh = shared.clone();
            accepters.spawn(async move {
                loop {
                    let Ok((mut s, _)) = l.accept().await else {
                        accept_backoff().await;
                        continue;
                    };
                    let body = sh.audit.metrics.render();
                    tokio::spawn(async move {
                        let mut b = [0u8; 1024];
                        let _ = tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await;
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = s.write_all(resp.as_bytes()).await;
                    });
                }
            });
        }
        {
            // Kept upstream connections that outlive their time are closed even when no request
            // comes to look at the pool.
            let sh = shared.clone();
            accepters.spawn(async move {
                let mut tick = tokio::time::interval(sh.pool_idle().max(Duration::from_secs(1)));
                loop {
                    tick.tick().await;
                    sh.pool_sweep();
                }
            });
        }
        shutdown.await;
        accepters.abort_all();
        if let Ok(mut p) = shared.pool.lock() {
            p.clear();
        }
        let _ = stop_tx.send(true);
        // Let the stopped connections unwind and release their sockets before returning.
        tokio::task::yield_now().await;
        shared.audit.sync();
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
        Ok(())
    }
}

/// Runs one connection until it ends or the proxy stops.
fn spawn_conn(sh: &Arc<Shared>, stop: &watch::Receiver<bool>, c: Conn, name: String) {
    let sh = sh.clone();
    let mut stop = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = sh.handle(c, name) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    });
}

/// Sets `TCP_NODELAY` on a listener, which Linux copies to every socket it accepts (the
/// accepted socket is a clone of the listener), saving a `setsockopt` per connection. `false`:
/// it could not be set, so each accepted socket needs its own.
fn nodelay_for_accepted(l: &TcpListener) -> bool {
    rustix::net::sockopt::set_tcp_nodelay(l, true).is_ok()
}

/// After a failed accept (e.g. out of file descriptors), wait a little instead of spinning.
async fn accept_backoff() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// Most bytes one [`Shared::read_more`] takes from the client.
const READ_MORE: usize = 8192;

/// A client connection of either kind.
enum Conn {
    Tcp(TcpStream),
    Unix(tokio::net::UnixStream),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static + SpliceTarget {}
impl Io for TcpStream {}
impl Io for tokio::net::UnixStream {}

/// A refusal: reason code and a sentence.
type Refuse = (&'static str, String);

fn refuse(code: &'static str, detail: impl Into<String>) -> Refuse {
    (code, detail.into())
}

/// Marks the record as allowed by `rule`.
fn granted(rec: &mut AuditRecord, rule: &str) {
    rec.decision = "allow";
    rec.reason = "granted";
    rec.detail = format!("granted by `{rule}`");
}

fn http_status(code: &str) -> (u16, &'static str) {
    match code {
        "malformed" | "invalid_host" | "host_mismatch" => (400, "Bad Request"),
        "header_too_large" => (431, "Request Header Fields Too Large"),
        "connection_limit" | "byte_limit" => (503, "Service Unavailable"),
        "resolve_failed" | "upstream_failed" | "upstream_malformed" => (502, "Bad Gateway"),
        "unsupported" => (501, "Not Implemented"),
        "idle_timeout" => (408, "Request Timeout"),
        _ => (403, "Forbidden"),
    }
}

fn socks_code(code: &str) -> u8 {
    match code {
        "resolve_failed" => socks::reply::HOST_UNREACHABLE,
        "upstream_failed" => socks::reply::REFUSED,
        "connection_limit" | "byte_limit" => socks::reply::FAILURE,
        _ => socks::reply::NOT_ALLOWED,
    }
}

fn head_refusal(e: &HeadError) -> Refuse {
    use crate::host::HostError;
    let code = match e {
        HeadError::HostMismatch { .. }
        | HeadError::DuplicateHost
        | HeadError::MissingHost
        | HeadError::TargetMismatch { .. } => "host_mismatch",
        HeadError::Host(HostError::NotAbsolute)
        | HeadError::Host(HostError::BadScheme(_))
        | HeadError::Unsupported(_) => "unsupported",
        HeadError::Host(_) => "invalid_host",
        HeadError::TooManyHeaders | HeadError::TooLarge(_) => "header_too_large",
        HeadError::Syntax(_) | HeadError::Framing(_) | HeadError::ConnectionNamesEndToEnd(_) => "malformed",
    };
    refuse(code, e.to_string())
}

/// What the client spoke first inside a tunnel, once known.
enum Inspect {
    /// Still collecting bytes.
    Pending(Vec<u8>),
    /// Checked (TLS, or not HTTP); bytes flow.
    Done,
    /// Plain HTTP: every request is checked as it comes.
    Http(TunnelRequests),
}

/// What a tunnel's first bytes turned out to be.
enum Inner {
    /// Passes as it is (`tls` or `opaque`).
    Pass(&'static str),
    /// Plain HTTP: a request stream to check request by request.
    Http,
}

/// How client → upstream bytes are limited in the pump.
enum UpFilter {
    /// A tunnel: everything, after the first-bytes check.
    Tunnel(Inspect),
    /// Plain HTTP: exactly this many body bytes, then nothing.
    Length(u64),
    /// Plain HTTP with a chunked body.
    Chunked(ChunkedScanner),
    /// Plain HTTP after the body: client bytes are dropped.
    Closed,
}

impl UpFilter {
    /// Whether the upstream's bytes must be shown to the tunnel's request checks (an upgrade's
    /// answer is awaited), so they may not bypass the proxy through the pipe.
    fn watching(&self) -> bool {
        matches!(self, UpFilter::Tunnel(Inspect::Http(r)) if r.watching())
    }

    /// Whether client bytes are held back until an upgrade's answer.
    fn holding(&self) -> bool {
        matches!(self, UpFilter::Tunnel(Inspect::Http(r)) if r.holding())
    }

    /// Whether no more client bytes may be taken until an upgrade's answer.
    fn held_full(&self) -> bool {
        matches!(self, UpFilter::Tunnel(Inspect::Http(r)) if r.held_full())
    }
}

/// Where upstream → client bytes are in the response.
enum Down {
    /// A tunnel: everything passes as it comes.
    Raw,
    /// Plain HTTP: the response head is still being collected (`head_request`: the request was
    /// `HEAD`, so no body follows).
    Head { acc: Vec<u8>, head_request: bool },
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
enum Advance {
    /// The read's first this-many bytes, as they are.
    Pass(usize),
    /// These bytes (a rewritten head and the start of its body).
    Send(Vec<u8>),
}

impl Down {
    /// Takes one read from the upstream; `keep` is cleared when the exchange can no longer end
    /// at a message boundary (the origin sent more than its response, or framed it so that only
    /// its close can end it).
    fn advance(&mut self, data: &[u8], keep: &mut bool) -> Result<Advance, Refuse> {
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
    /// the pipe: a tunnel, or a body delimited by its length or the origin's close.
    fn opaque(&self) -> bool {
        matches!(self, Down::Raw | Down::Length(_) | Down::UntilClose)
    }

    /// At most how many bytes may be taken from the upstream now (the rest of a length).
    fn room(&self, max: usize) -> usize {
        match self {
            Down::Length(left) => (*left).min(max as u64) as usize,
            _ => max,
        }
    }

    /// Counts `n` bytes of an [`Down::opaque`] body that went by without being looked at.
    fn passed(&mut self, n: usize) {
        if let Down::Length(left) = self {
            *left -= (n as u64).min(*left);
            if *left == 0 {
                *self = Down::Done;
            }
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

/// How a pump ended, for the caller's upstream connection.
enum PumpEnd {
    /// The connection is finished with (dropped).
    Closed,
    /// Plain HTTP: the exchange ended at a message boundary; the connection can be kept.
    Keep(TcpStream),
    /// Plain HTTP over a kept connection: it turned out closed before any response byte, so the
    /// request can be sent again on a fresh one.
    Stale,
}

impl Shared {
    async fn handle(self: Arc<Self>, c: Conn, client: String) {
        let m = &self.audit.metrics;
        m.accepted.fetch_add(1, Ordering::Relaxed);
        m.active.fetch_add(1, Ordering::Relaxed);
        let conn = self.conn_seq.fetch_add(1, Ordering::Relaxed);
        let mut rec = AuditRecord { conn, client, proto: "unknown", ..AuditRecord::default() };
        let start = Instant::now();
        // A permit is taken at accept; the attempt is refused (in its own protocol) when none is
        // left. A hard cap on unpermitted sockets keeps a flood from holding memory.
        let permit = self.budget.0.permits.clone().try_acquire_owned().ok();
        let flood =
            permit.is_none() && m.active.load(Ordering::Relaxed) > (self.budget.0.max_connections as u64) * 2 + 16;
        if flood {
            rec.decision = "deny";
            rec.reason = "connection_limit";
            rec.detail = "too many connections; dropped without reading".into();
        } else {
            match c {
                Conn::Tcp(s) => self.handle_io(s, permit, &mut rec).await,
                Conn::Unix(s) => self.handle_io(s, permit, &mut rec).await,
            }
        }
        rec.duration_ms = start.elapsed().as_millis() as u64;
        m.active.fetch_sub(1, Ordering::Relaxed);
        self.audit.record(rec);
    }

    /// Appends what the client sends next (at most 8 KiB) to `buf`.
    async fn read_more<S: Io>(&self, s: &mut S, buf: &mut Vec<u8>) -> Result<usize, Refuse> {
        // Read straight into the request buffer's spare capacity, at most 8 KiB a read. An 8 KiB
        // array here instead lives inside every connection's future (it is held across the
        // await), which made that future ~9.7 KiB, zeroed and moved (memset/memmove) on every
        // connection; a profile of back-to-back 1 KiB GETs showed about half as many
        // memmove+memset samples per request without it.
        buf.reserve(READ_MORE);
        let mut limited = (&mut *s).take(READ_MORE as u64);
        match tokio::time::timeout(self.cfg.idle_timeout, limited.read_buf(buf)).await {
            Err(_) => Err(refuse("idle_timeout", "the client sent no complete request in time")),
            Ok(Err(e)) => Err(refuse("malformed", format!("read error: {e}"))),
            Ok(Ok(0)) => Err(refuse("malformed", "the client closed before a complete request")),
            Ok(Ok(n)) => Ok(n),
        }
    }

    async fn handle_io<S: Io>(&self, mut s: S, permit: Option<OwnedSemaphorePermit>, rec: &mut AuditRecord) {
        let mut buf = Vec::with_capacity(READ_MORE);
        let res = match self.read_more(&mut s, &mut buf).await {
            Err(r) => Err(r),
            Ok(_) if buf[0] == 5 => {
                rec.proto = "socks5";
                self.socks(&mut s, buf, permit.is_some(), rec).await
            }
            Ok(_) => self.http(&mut s, buf, permit.is_some(), rec).await,
        };
        if let Err((code, detail)) = res {
            // A refusal after the allow decision (a tunnel's first bytes failed their check)
            // turns the record into a denial.
            rec.decision = if matches!(code, "upstream_failed" | "upstream_malformed") { "error" } else { "deny" };
            rec.reason = code;
            rec.detail = detail;
        }
        drop(permit);
    }

    async fn http<S: Io>(
        &self,
        s: &mut S,
        mut buf: Vec<u8>,
        has_permit: bool,
        rec: &mut AuditRecord,
    ) -> Result<(), Refuse> {
        rec.proto = "http";
        let parsed = loop {
            match http::parse_head(&buf) {
                Ok(Some(h)) => break Ok(h),
                Ok(None) if buf.len() > self.cfg.max_header_bytes => {
                    break Err(refuse(
                        "header_too_large",
                        format!("the request head exceeds {} bytes", self.cfg.max_header_bytes),
                    ));
                }
                Ok(None) => {
                    self.read_more(s, &mut buf).await?;
                }
                Err(e) => break Err(head_refusal(&e)),
            }
        };
        let head = match parsed {
            Ok(h) if h.len > self.cfg.max_header_bytes => {
                Err(refuse("header_too_large", format!("the request head exceeds {} bytes", self.cfg.max_header_bytes)))
            }
            other => other,
        };
        let head = match head {
            Ok(h) => h,
            Err(r) => return self.http_deny(s, r).await,
        };
        rec.requested = Some(crate::audit::escaped(head.target.as_bytes()));
        if head.method.eq_ignore_ascii_case("CONNECT") {
            rec.proto = "connect";
            let target = match parse_authority(&head.target, None) {
                Ok(t) => t,
                Err(e) => {
                    return self.http_deny(s, refuse("invalid_host", e.to_string())).await;
                }
            };
            if let Err(e) = head.check_host(&target, target.port) {
                rec.target = Some(target.to_string());
                return self.http_deny(s, head_refusal(&e)).await;
            }
            rec.target = Some(target.to_string());
            let upstream = match self.decide_and_connect(&target, has_permit, rec).await {
                Ok(u) => u,
                Err(r) => return self.http_deny(s, r).await,
            };
            s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .map_err(|e| refuse("malformed", format!("client went away: {e}")))?;
            let leftover = buf.split_off(head.len);
            let filter = UpFilter::Tunnel(Inspect::Pending(Vec::new()));
            return self.pump(s, upstream, &target, leftover, filter, Down::Raw, rec).await.map(drop);
        }
        let fwd = match http::forward_request(&head) {
            Ok(f) => f,
            Err(e) => {
                if let Ok((t, _)) = crate::host::parse_absolute_form(&head.target) {
                    rec.target = Some(t.to_string());
                }
                return self.http_deny(s, head_refusal(&e)).await;
            }
        };
        rec.target = Some(fwd.target.to_string());
        let (rule, ips) = match self.decide(&fwd.target, has_permit, rec).await {
            Ok(d) => d,
            Err(r) => return self.http_deny(s, r).await,
        };
        let mut leftover = buf.split_off(head.len);
        let mut kept = if fwd.may_reuse { self.pool_take(&fwd.target, &ips) } else { None };
        loop {
            let reused = kept.is_some();
            let (addr, mut upstream) = match kept.take() {
                Some(k) => {
                    rec.addr = Some(k.0.to_string());
                    granted(rec, &rule);
                    k
                }
                None => match self.connect(&ips, fwd.target.port, &rule, rec).await {
                    Ok(c) => c,
                    Err(r) => return self.http_deny(s, r).await,
                },
            };
            rec.reused = reused;
            let n = self.charge(fwd.upstream_head.len() as u64);
            if n < fwd.upstream_head.len() as u64 {
                return self.http_deny(s, refuse("byte_limit", "the session's byte budget is spent")).await;
            }
            rec.bytes_up += n;
            if let Err(e) = upstream.write_all(&fwd.upstream_head).await {
                if reused {
                    continue;
                }
                return self.http_deny(s, refuse("upstream_failed", format!("writing to upstream: {e}"))).await;
            }
            let filter = match fwd.body {
                Body::None => UpFilter::Closed,
                Body::Length(n) => UpFilter::Length(n),
                Body::Chunked => UpFilter::Chunked(ChunkedScanner::default()),
            };
            let down = Down::Head { acc: Vec::new(), head_request: head.method == "HEAD" };
            let exchange = self.pump(s, upstream, &fwd.target, std::mem::take(&mut leftover), filter, down, rec);
            match exchange.await? {
                // A request with a body asked the origin to close (see `forward_request`); its
                // connection is never kept, whatever the origin answered.
                PumpEnd::Keep(_) if !fwd.persistent => return Ok(()),
                // Only a kept connection ends as stale, and only a bodiless request takes one,
                // so nothing of the client's is lost by sending the head again.
                PumpEnd::Stale => {}
                PumpEnd::Keep(conn) => {
                    self.pool_put(&fwd.target, addr, conn);
                    return Ok(());
                }
                PumpEnd::Closed => return Ok(()),
            }
        }
    }

    async fn http_deny<S: Io>(&self, s: &mut S, r: Refuse) -> Result<(), Refuse> {
        let (status, text) = http_status(r.0);
        let _ = s.write_all(&http::response(status, text, r.0, &r.1)).await;
        let _ = s.shutdown().await;
        Err(r)
    }

    async fn socks<S: Io>(
        &self,
        s: &mut S,
        mut buf: Vec<u8>,
        has_permit: bool,
        rec: &mut AuditRecord,
    ) -> Result<(), Refuse> {
        let used = loop {
            match socks::parse_greeting(&buf) {
                Ok(Some(n)) => break n,
                Ok(None) if buf.len() > 300 => {
                    return Err(refuse("malformed", "oversize greeting"));
                }
                Ok(None) => {
                    self.read_more(s, &mut buf).await?;
                }
                Err(e) => {
                    let _ = s.write_all(&[5, 0xff]).await;
                    let code = if e == SocksError::NoAcceptableMethod { "unsupported" } else { "malformed" };
                    return Err(refuse(code, e.to_string()));
                }
            }
        };
        buf.drain(..used);
        s.write_all(&[5, 0]).await.map_err(|e| refuse("malformed", e.to_string()))?;
        let (target, used) = loop {
            if buf.len() > 5 && buf[3] == 3 {
                let end = buf.len().min(5 + usize::from(buf[4]));
                rec.requested = Some(crate::audit::escaped(&buf[5..end]));
            }
            match socks::parse_request(&buf) {
                Ok(Some(x)) => break x,
                Ok(None) if buf.len() > 600 => return Err(refuse("malformed", "oversize request")),
                Ok(None) => {
                    self.read_more(s, &mut buf).await?;
                }
                Err(e) => {
                    let _ = s.write_all(&socks::reply_bytes(e.reply_code())).await;
                    let code = match e {
                        SocksError::Host(_) | SocksError::Port => "invalid_host",
                        SocksError::Command(_) | SocksError::AddressType(_) => "unsupported",
                        _ => "malformed",
                    };
                    return Err(refuse(code, e.to_string()));
                }
            }
        };
        buf.drain(..used);
        rec.target = Some(target.to_string());
        let upstream = match self.decide_and_connect(&target, has_permit, rec).await {
            Ok(u) => u,
            Err(r) => {
                let _ = s.write_all(&socks::reply_bytes(socks_code(r.0))).await;
                return Err(r);
            }
        };
        s.write_all(&socks::reply_bytes(socks::reply::OK)).await.map_err(|e| refuse("malformed", e.to_string()))?;
        let filter = UpFilter::Tunnel(Inspect::Pending(Vec::new()));
        self.pump(s, upstream, &target, buf, filter, Down::Raw, rec).await.map(drop)
    }

    fn is_self(&self, sa: SocketAddr) -> bool {
        self.self_addrs.iter().any(|l| {
            l.port() == sa.port()
                && (l.ip() == sa.ip()
                    || l.ip().is_unspecified()
                    || sa.ip().is_unspecified()
                    || (l.ip().is_loopback() && sa.ip().is_loopback()))
        })
    }

    /// The whole decision for one target, then the connection to the address that passed.
    async fn decide_and_connect(
        &self,
        target: &Target,
        has_permit: bool,
        rec: &mut AuditRecord,
    ) -> Result<TcpStream, Refuse> {
        let (rule, ips) = self.decide(target, has_permit, rec).await?;
        self.connect(&ips, target.port, &rule, rec).await.map(|(_, c)| c)
    }

    /// The whole decision for one target: limits, the allowlist rule that grants it, and the
    /// addresses it resolves to, every one of which has passed the address checks.
    async fn decide(
        &self,
        target: &Target,
        has_permit: bool,
        rec: &mut AuditRecord,
    ) -> Result<(String, Vec<IpAddr>), Refuse> {
        if !has_permit {
            return Err(refuse(
                "connection_limit",
                format!("the session already has {} connections open", self.budget.0.max_connections),
            ));
        }
        if let Some(max) = self.budget.spent() {
            return Err(refuse("byte_limit", format!("the session's byte budget ({max} bytes) is spent")));
        }
        let rule = self.cfg.policy.check_target(target).map_err(|d| refuse(d.code(), d.to_string()))?.to_string();
        let ips: Vec<IpAddr> = match &target.host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(n) => {
                if let Some(ips) = self.cached(n) {
                    ips
                } else {
                    self.resolve(n).await?
                }
            }
        };
        if ips.is_empty() {
            return Err(refuse("resolve_failed", "the name has no addresses"));
        }
        // Every address must pass: an answer that mixes a public and a private address is
        // refused whole rather than filtered, so an attacker's zone cannot steer a retry.
        for ip in &ips {
            let sa = SocketAddr::new(*ip, target.port);
            if self.is_self(sa) {
                rec.addr = Some(sa.to_string());
                return Err(refuse("self_connect", format!("{sa} is this proxy (or its metrics endpoint)")));
            }
            if let Err(d) = self.cfg.policy.check_addr(*ip, target.port) {
                rec.addr = Some(sa.to_string());
                return Err(refuse(d.code(), d.to_string()));
            }
        }
        Ok((rule, ips))
    }

    /// Connects to the first of `ips` (all checked by [`Shared::decide`]) that answers.
    async fn connect(
        &self,
        ips: &[IpAddr],
        port: u16,
        rule: &str,
        rec: &mut AuditRecord,
    ) -> Result<(SocketAddr, TcpStream), Refuse> {
        let mut last = String::new();
        for ip in ips {
            let sa = SocketAddr::new(*ip, port);
            rec.addr = Some(sa.to_string());
            match tokio::time::timeout(self.cfg.connect_timeout, TcpStream::connect(sa)).await {
                Ok(Ok(u)) => {
                    let _ = u.set_nodelay(true);
                    granted(rec, rule);
                    return Ok((sa, u));
                }
                Ok(Err(e)) => last = format!("connecting to {sa}: {e}"),
                Err(_) => last = format!("connecting to {sa} timed out"),
            }
        }
        Err(refuse("upstream_failed", last))
    }

    fn pool_idle(&self) -> Duration {
        POOL_IDLE.min(self.cfg.idle_timeout)
    }

    /// A kept connection for `target` to one of `ips` that is still open, if there is one (the
    /// newest first: the least likely to have been closed by the origin).
    fn pool_take(&self, target: &Target, ips: &[IpAddr]) -> Option<(SocketAddr, TcpStream)> {
        let idle = self.pool_idle();
        let mut pool = self.pool.lock().ok()?;
        while let Some(i) =
            pool.iter().rposition(|k| &k.target == target && ips.contains(&k.addr.ip()) && k.since.elapsed() < idle)
        {
            let k = pool.swap_remove(i);
            if still_open(&k.conn) {
                self.audit.metrics.upstream_reused.fetch_add(1, Ordering::Relaxed);
                return Some((k.addr, k.conn));
            }
        }
        None
    }

    /// Keeps `conn` for a later request to `target`; the oldest kept one makes room if the pool
    /// is full.
    fn pool_put(&self, target: &Target, addr: SocketAddr, conn: TcpStream) {
        let Ok(mut pool) = self.pool.lock() else { return };
        if pool.len() >= POOL_MAX
            && let Some(oldest) = pool.iter().enumerate().min_by_key(|(_, k)| k.since).map(|(i, _)| i)
        {
            pool.swap_remove(oldest);
        }
        pool.push(Kept { target: target.clone(), addr, conn, since: Instant::now() });
    }

    /// Closes kept connections past their time or closed by the origin.
    fn pool_sweep(&self) {
        let idle = self.pool_idle();
        if let Ok(mut pool) = self.pool.lock() {
            pool.retain(|k| k.since.elapsed() < idle && still_open(&k.conn));
        }
    }

    /// A still-valid answer for `name` from this instance's small TTL-bounded cache (in front of
    /// hickory's, which costs more per hit). A TTL of 0 is never cached.
    fn cached(&self, name: &str) -> Option<Vec<IpAddr>> {
        let cache = self.dns_cache.lock().ok()?;
        let (ips, until) = cache.get(name)?;
        (*until > Instant::now()).then(|| ips.clone())
    }

    /// One lookup (the absolute name: no search domains), remembered until its TTL runs out.
    async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, Refuse> {
        let fqdn = format!("{name}.");
        let looked = tokio::time::timeout(self.cfg.connect_timeout, self.resolver.lookup_ip(fqdn.as_str())).await;
        let lookup = match looked {
            Err(_) => {
                return Err(refuse("resolve_failed", format!("resolving {name} timed out")));
            }
            Ok(Err(e)) => return Err(refuse("resolve_failed", format!("resolving {name}: {e}"))),
            Ok(Ok(l)) => l,
        };
        let ips: Vec<IpAddr> = lookup.iter().collect();
        let until = lookup.valid_until();
        if until > Instant::now()
            && let Ok(mut cache) = self.dns_cache.lock()
        {
            if cache.len() >= 4096 {
                cache.clear();
            }
            cache.insert(name.to_string(), (ips.clone(), until));
        }
        Ok(ips)
    }

    /// Takes up to `n` bytes from the session's budget; returns how many were granted.
    fn charge(&self, n: u64) -> u64 {
        self.budget.charge(n)
    }

    /// Checks the first bytes of a tunnel. `Ok(None)`: need more bytes. `Ok(Some(inner))`: what
    /// they are (TLS with a matching SNI, or not HTTP: pass; plain HTTP: check every request).
    fn inspect(&self, target: &Target, b: &[u8]) -> Result<Option<Inner>, Refuse> {
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
                        return Err(refuse(
                            "tls_ech",
                            "Encrypted Client Hello hides the real server name; it is refused",
                        ));
                    }
                    match (&target.host, h.sni.as_deref()) {
                        (Host::Name(n), Some(sni)) => match parse_host(sni) {
                            Ok(Host::Name(s)) if &s == n => Ok(Some(Inner::Pass("tls"))),
                            _ => Err(refuse(
                                "sni_mismatch",
                                format!("TLS SNI `{}` differs from the tunnel host `{n}`", sni.escape_default()),
                            )),
                        },
                        (Host::Name(n), None) => Err(refuse(
                            "sni_missing",
                            format!("the ClientHello names no server, but the tunnel is to `{n}`"),
                        )),
                        (Host::Ip(_), None) => Ok(Some(Inner::Pass("tls"))),
                        (Host::Ip(ip), Some(sni)) => Err(refuse(
                            "sni_mismatch",
                            format!("TLS SNI `{}` sent through a tunnel to the address {ip}", sni.escape_default()),
                        )),
                    }
                }
            };
        }
        // Bytes that an origin could read as an HTTP request are checked as one, request by
        // request (`TunnelRequests`): a request that only a lenient origin would parse must not
        // slip through as "opaque".
        Ok(match http::opening(b, self.cfg.max_header_bytes) {
            Opening::NeedMore => None,
            Opening::Request => Some(Inner::Http),
            Opening::Other => Some(Inner::Pass("opaque")),
        })
    }

    /// Writes all of `data` to `to`, or gives up with the connection's end reason: `"error"`, or
    /// `"idle_timeout"` when the peer stops reading for the idle timeout (a write blocked on a
    /// full socket moves no bytes, so it counts as idle; without this a client that never reads
    /// would hold its connection, and a slot of the connection cap, for ever).
    async fn write_within_idle<W: AsyncWrite + Unpin>(&self, to: &mut W, data: &[u8]) -> Result<(), &'static str> {
        match tokio::time::timeout(self.cfg.idle_timeout, to.write_all(data)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err("error"),
            Err(_) => Err("idle_timeout"),
        }
    }

    /// Takes up to `n` bytes for the client from the budget and counts what was granted.
    fn charge_down(&self, n: usize, rec: &mut AuditRecord) -> u64 {
        let k = self.charge(n as u64);
        rec.bytes_down += k;
        self.audit.metrics.bytes_down.fetch_add(k, Ordering::Relaxed);
        k
    }

    /// Writes `data` to the client, charged to the budget: `Err` with the end reason when the
    /// write fails or the budget runs out (after what it still granted was written).
    /// `last`: nothing follows but the end of the connection, so the bytes are sent with
    /// `MSG_MORE` and leave with the FIN of the shutdown that comes next (one segment, and one
    /// wake-up of the client instead of two).
    async fn to_client<S: Io>(
        &self,
        client: &mut S,
        data: &[u8],
        last: bool,
        rec: &mut AuditRecord,
    ) -> Result<(), &'static str> {
        if data.is_empty() {
            return Ok(());
        }
        let k = self.charge_down(data.len(), rec);
        let mut granted = &data[..k as usize];
        if last && let Ok(n) = client.try_send_more(granted) {
            granted = &granted[n..];
        }
        self.write_within_idle(client, granted).await?;
        if k < data.len() as u64 {
            return Err("byte_limit");
        }
        Ok(())
    }

    /// Writes `data` to the upstream, charged to the budget: `Err` with the end reason when the
    /// write fails or the budget runs out (after what it still granted was written).
    async fn to_upstream(&self, up: &mut TcpStream, data: &[u8], rec: &mut AuditRecord) -> Result<(), &'static str> {
        let n = self.charge(data.len() as u64);
        rec.bytes_up += n;
        self.audit.metrics.bytes_up.fetch_add(n, Ordering::Relaxed);
        self.write_within_idle(up, &data[..n as usize]).await?;
        if n < data.len() as u64 {
            return Err("byte_limit");
        }
        Ok(())
    }

    /// Moves bytes both ways until both sides are done, the idle timeout fires, the budget is
    /// spent, or the tunnel's first bytes fail their check. For plain HTTP (`down` is not
    /// [`Down::Raw`]) it ends when the response does, and hands the upstream connection back
    /// when the exchange ended at a message boundary.
    #[allow(clippy::too_many_arguments)]
    async fn pump<S: Io>(
        &self,
        client: &mut S,
        mut up: TcpStream,
        target: &Target,
        initial: Vec<u8>,
        mut filter: UpFilter,
        mut down: Down,
        rec: &mut AuditRecord,
    ) -> Result<PumpEnd, Refuse> {
        let plain_http = !matches!(down, Down::Raw);
        // Plain HTTP: whether the upstream connection can carry another request afterwards.
        let mut keep = plain_http;
        // Buffers start small (most connections move a few KiB, and zeroing a large buffer per
        // connection shows in the latency) and double up to 512 KiB while reads fill them.
        const START: usize = 16 * 1024;
        const MAX: usize = 512 * 1024;
        let mut cbuf = vec![0u8; START];
        let mut ubuf = vec![0u8; START];
        let mut client_open = true;
        let mut up_open = true;
        let mut up_write_open = true;
        let mut client_shut = false;
        let mut pending = Some(initial);
        // Client bytes held back by a tunnel's request checks and released by the upstream's
        // answer to an upgrade request (see `TunnelRequests`).
        let mut released: Vec<u8> = Vec::new();
        // The pipe for large downloads to a TCP client, made when first needed; `can_splice`
        // goes false for good if this kernel or policy refuses it.
        let mut pipe: Option<Pipe> = None;
        let mut can_splice = S::SPLICES_WELL;
        let metrics = &self.audit.metrics;
        let end: &'static str = loop {
            // Client → upstream: bytes an upgrade's answer released, then new ones, through the
            // filter.
            if !released.is_empty() && up_write_open {
                let data = std::mem::take(&mut released);
                if let Err(end) = self.to_upstream(&mut up, &data, rec).await {
                    break end;
                }
                if !client_open && !filter.holding() {
                    // The client closed while its last bytes were held; they are sent now.
                    let _ = up.shutdown().await;
                    up_write_open = false;
                }
            }
            if let Some(data) = pending.take() {
                let mut out: Vec<u8> = Vec::new();
                let mut finished_body = false;
                match &mut filter {
                    UpFilter::Tunnel(Inspect::Pending(acc)) => {
                        acc.extend_from_slice(&data);
                        match self.inspect(target, acc)? {
                            None => {}
                            Some(Inner::Pass(kind)) => {
                                rec.inner = Some(kind);
                                out = std::mem::take(acc);
                                filter = UpFilter::Tunnel(Inspect::Done);
                            }
                            Some(Inner::Http) => {
                                rec.inner = Some("http");
                                let mut requests = TunnelRequests::new(target.clone(), self.cfg.max_header_bytes);
                                out = requests.client(acc).map_err(|e| head_refusal(&e))?;
                                filter = UpFilter::Tunnel(Inspect::Http(requests));
                            }
                        }
                    }
                    UpFilter::Tunnel(Inspect::Http(requests)) => {
                        out = requests.client(&data).map_err(|e| head_refusal(&e))?;
                    }
                    UpFilter::Tunnel(Inspect::Done) => out = data,
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
                    filter = UpFilter::Closed;
                }
                if !out.is_empty()
                    && up_write_open
                    && let Err(end) = self.to_upstream(&mut up, &out, rec).await
                {
                    break end;
                }
            }
            if matches!(down, Down::Done) {
                break "closed";
            }
            if !client_open && !up_write_open && !up_open {
                break "closed";
            }
            if !up_open && (plain_http || !client_open) {
                break "closed";
            }
            // Large downloads go through the pipe once there is nothing left to inspect.
            let mut splicing = can_splice && rec.bytes_down >= SPLICE_AFTER && down.opaque() && !filter.watching();
            if splicing && pipe.is_none() {
                match Pipe::new() {
                    Ok(p) => pipe = Some(p),
                    Err(_) => (can_splice, splicing) = (false, false),
                }
            }
            let event = tokio::select! {
                r = client.read(&mut cbuf), if client_open && !filter.held_full() => Event::Client(r),
                r = async {
                    if splicing { up.readable().await.map(|()| None) } else { up.read(&mut ubuf).await.map(Some) }
                }, if up_open => match r {
                    Ok(Some(n)) => Event::Up(Ok(n)),
                    Err(e) => Event::Up(Err(e)),
                    Ok(None) => Event::Spliced(match &pipe {
                        Some(p) => p.fill(&up, down.room(PIPE_SIZE)),
                        None => Err(std::io::ErrorKind::WouldBlock.into()),
                    }),
                },
                () = tokio::time::sleep(self.cfg.idle_timeout) => Event::Idle,
            };
            // Nothing has reached the client yet: a failure can still be answered with a 502.
            let nothing_sent = rec.bytes_down == 0;
            match event {
                Event::Spliced(Err(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Event::Spliced(Err(e)) if splice::unsupported(&e) => can_splice = false,
                Event::Client(Ok(0) | Err(_)) => {
                    client_open = false;
                    if !plain_http && up_write_open {
                        match &mut filter {
                            UpFilter::Tunnel(Inspect::Pending(acc)) if acc.first() == Some(&22) => {
                                return Err(refuse("malformed", "the client closed mid-handshake"));
                            }
                            // Bytes still undecided when the client ends are not an HTTP request
                            // (no request line of one is complete, and none can follow), so they
                            // go as they are, and the upstream's write side is shut after them.
                            UpFilter::Tunnel(Inspect::Pending(acc)) if !acc.is_empty() => {
                                released = std::mem::take(acc);
                                rec.inner = Some("opaque");
                                filter = UpFilter::Tunnel(Inspect::Done);
                            }
                            UpFilter::Tunnel(Inspect::Http(requests)) if requests.mid_head() => {
                                return Err(refuse("malformed", "the client closed in the middle of a request head"));
                            }
                            // Bytes held for an upgrade's answer go when it comes, and the
                            // upstream's write side is shut after them.
                            f if f.holding() => {}
                            _ => {
                                let _ = up.shutdown().await;
                                up_write_open = false;
                            }
                        }
                    }
                }
                Event::Client(Ok(n)) => {
                    pending = Some(cbuf[..n].to_vec());
                    if n == cbuf.len() && n < MAX {
                        cbuf.resize(n * 2, 0);
                    }
                }
                Event::Up(Ok(0) | Err(_)) | Event::Spliced(Ok(0) | Err(_)) => {
                    up_open = false;
                    keep = false;
                    match down {
                        Down::Head { ref acc, .. } if acc.is_empty() && nothing_sent && rec.reused => {
                            return Ok(PumpEnd::Stale);
                        }
                        Down::Head { .. } if nothing_sent => {
                            let r = refuse("upstream_failed", "the upstream closed without a complete response");
                            return self.http_deny(client, r).await.map(|()| PumpEnd::Closed);
                        }
                        Down::UntilClose => down = Down::Done,
                        _ => {}
                    }
                    client_shut = true;
                    let _ = client.shutdown().await;
                }
                Event::Up(Ok(n)) => {
                    let sent = match down.advance(&ubuf[..n], &mut keep) {
                        Ok(Advance::Pass(k)) => {
                            self.to_client(client, &ubuf[..k], matches!(down, Down::Done), rec).await
                        }
                        Ok(Advance::Send(bytes)) => {
                            self.to_client(client, &bytes, matches!(down, Down::Done), rec).await
                        }
                        Err(r) if nothing_sent => return self.http_deny(client, r).await.map(|()| PumpEnd::Closed),
                        Err(r) => return Err(r),
                    };
                    if let Err(end) = sent {
                        break end;
                    }
                    // A tunnel's upgrade request: the origin's answer (relayed above as it is)
                    // decides whether the client's next bytes are requests (checked) or the new
                    // protocol (passed).
                    if let UpFilter::Tunnel(Inspect::Http(requests)) = &mut filter
                        && requests.watching()
                    {
                        let answered = requests.upstream(&ubuf[..n]).map_err(|e| {
                            refuse("upstream_malformed", format!("the upstream's answer to an upgrade request: {e}"))
                        })?;
                        if answered {
                            released = requests.client(&[]).map_err(|e| head_refusal(&e))?;
                        }
                    }
                    if n == ubuf.len() && n < MAX {
                        ubuf.resize(n * 2, 0);
                    }
                }
                Event::Spliced(Ok(n)) => {
                    let k = self.charge_down(n, rec);
                    metrics.bytes_spliced.fetch_add(k, Ordering::Relaxed);
                    if let Some(p) = &pipe {
                        match tokio::time::timeout(self.cfg.idle_timeout, p.drain(&*client, k as usize)).await {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => break "error",
                            Err(_) => break "idle_timeout",
                        }
                    }
                    if k < n as u64 {
                        break "byte_limit";
                    }
                    down.passed(n);
                }
                Event::Idle => break "idle_timeout",
            }
        };
        rec.end = Some(end);
        // Each write side is shut once (a second shutdown is a wasted syscall on every
        // connection); dropping the sockets then closes them.
        if !client_shut {
            let _ = client.shutdown().await;
        }
        // The exchange ended at a message boundary: the whole response was read (and nothing
        // after it), the whole request body was sent, and neither side asked to close.
        if keep
            && end == "closed"
            && up_open
            && up_write_open
            && matches!(down, Down::Done)
            && matches!(filter, UpFilter::Closed)
        {
            return Ok(PumpEnd::Keep(up));
        }
        if up_write_open {
            let _ = up.shutdown().await;
        }
        Ok(PumpEnd::Closed)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// What lets the accept loop skip `set_nodelay`: an accepted socket has `TCP_NODELAY` from
    /// its listener (without it, a response written in pieces can wait out the client's
    /// delayed ACK).
    #[tokio::test]
    async fn accepted_sockets_inherit_nodelay_from_the_listener() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        assert!(nodelay_for_accepted(&l));
        let _c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        assert!(s.nodelay().unwrap());
        let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _c = TcpStream::connect(plain.local_addr().unwrap()).await.unwrap();
        let (s, _) = plain.accept().await.unwrap();
        assert!(!s.nodelay().unwrap(), "the check above would pass without the listener's option");
    }
}
