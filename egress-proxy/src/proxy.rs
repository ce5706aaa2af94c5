//! The proxy itself: configuration, budget, listeners (TCP and UNIX), and the accept loops; each
//! connection is told apart by its first byte (SOCKS5 or HTTP) and handed to its stage, one file
//! each below `proxy/`: `request` (plain HTTP and `CONNECT`), `socks5`, `upstream` (the decision
//! for a target: allowlist, own DNS resolution, every address checked, self-connection; the
//! connection, and the pool of upstream connections kept between plain-HTTP requests), and
//! `relay` (the byte pump with idle timeout and byte budget). Every attempt ends as one audit
//! record.
//!
//! All parsing and every decision are functions of the pure crate `axp-egress-policy` (`host`,
//! `policy`, `ipclass`, `destination`, `inspect`, `tls`, `http`, `relay`, `socks`,
//! `refusal`); this module and its stages own I/O and the order of the checks only. They must
//! never open a connection to an address that has not been checked, and never look a name up
//! twice for one attempt: the address the resolver returned and the checks passed is the
//! address they connect to.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axp_egress_policy::refusal::{Refuse, decision, refuse};
use hickory_resolver::TokioResolver;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use crate::audit::{AuditLog, AuditRecord};
use crate::policy::Policy;
use crate::splice::SpliceTarget;

mod relay;
mod request;
mod socks5;
mod upstream;

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
    pool: std::sync::Mutex<Vec<upstream::Kept>>,
}

/// Binds every listener in `config` and runs until `shutdown` completes.
pub async fn serve(config: ProxyConfig, shutdown: impl Future<Output = ()>) -> Result<(), ProxyError> {
    Proxy::bind(config).await?.run(shutdown).await
}

impl Proxy {
    /// Binds the listeners, opens the audit log and builds the resolver.
    pub async fn bind(cfg: ProxyConfig) -> Result<Self, ProxyError> {
        if cfg.listen.is_empty() && cfg.listen_unix.is_empty() {
            return Err(ProxyError::NoListener);
        }
        // What can fail without leaving anything behind comes first; then the listeners, whose
        // socket files are removed again if a later one cannot be bound.
        let resolver = upstream::build_resolver(&cfg.resolvers)?;
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
            rec.decision = decision(code);
            rec.reason = code;
            rec.detail = detail;
        }
        drop(permit);
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
