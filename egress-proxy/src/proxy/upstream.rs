//! The way to the upstream: the decision for one target (limits, the allowlist rule, one lookup
//! of the name and the check of every address it returned, as `axp_egress_policy::destination`
//! decides it), the connection to an address that passed, the resolver with its small TTL cache,
//! and the pool of upstream connections kept between plain-HTTP requests.
//!
//! It must never open a connection to an address it has not checked, and never look a name up
//! twice for one attempt: the address the resolver returned and the checks passed is the address
//! it connects to, and a kept connection is taken only after the same checks passed again.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axp_egress_policy::destination::check_addresses;
use axp_egress_policy::host::{Host, Target};
use axp_egress_policy::refusal::{Refuse, refuse};
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver, TokioResolver};
use tokio::net::TcpStream;

use super::{ProxyError, Shared};
use crate::audit::AuditRecord;

/// An upstream connection kept after a plain-HTTP exchange that ended cleanly at a message
/// boundary, for a later request to the same destination.
///
/// The pool belongs to one proxy instance, so it never crosses owners (each session or
/// provider has its own instance, and so its own pool). A kept connection is only taken by a
/// request whose own decision has just passed (allowlist, fresh resolution, every address
/// classified) and whose resolved addresses include the one the connection goes to: reuse skips
/// the TCP connect, never a check. Only bodiless `GET`, `HEAD` and `OPTIONS` take one, so that
/// a connection the origin closed meanwhile can be replaced and the request sent again.
pub(super) struct Kept {
    target: Target,
    addr: SocketAddr,
    conn: TcpStream,
    since: Instant,
}

/// Most upstream connections one instance keeps idle.
const POOL_MAX: usize = 32;
/// Longest an upstream connection is kept idle (less if the instance's idle timeout is less).
const POOL_IDLE: Duration = Duration::from_secs(30);

/// Whether a kept connection can carry a request: the origin has neither closed it nor sent
/// anything unasked. One non-blocking `recv(MSG_PEEK)`; tokio's own `try_read` only knows what
/// its driver last saw, which can be older than the origin's FIN.
fn still_open(conn: &TcpStream) -> bool {
    use rustix::net::{RecvFlags, recv};
    let mut b = [0u8; 1];
    matches!(recv(conn, &mut b[..], RecvFlags::PEEK | RecvFlags::DONTWAIT), Err(e) if e == rustix::io::Errno::AGAIN)
}

pub(super) fn build_resolver(servers: &[SocketAddr]) -> Result<TokioResolver, ProxyError> {
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

/// Marks the record as allowed by `rule`.
pub(super) fn granted(rec: &mut AuditRecord, rule: &str) {
    rec.decision = "allow";
    rec.reason = "granted";
    rec.detail = format!("granted by `{rule}`");
}

impl Shared {
    /// The whole decision for one target, then the connection to the address that passed.
    pub(super) async fn decide_and_connect(
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
    pub(super) async fn decide(
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
        if let Err(r) = check_addresses(&self.cfg.policy, &self.self_addrs, &ips, target.port) {
            if let Some(sa) = r.addr {
                rec.addr = Some(sa.to_string());
            }
            return Err(r.refusal);
        }
        Ok((rule, ips))
    }

    /// Connects to the first of `ips` (all checked by [`Shared::decide`]) that answers.
    pub(super) async fn connect(
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

    pub(super) fn pool_idle(&self) -> Duration {
        POOL_IDLE.min(self.cfg.idle_timeout)
    }

    /// A kept connection for `target` to one of `ips` that is still open, if there is one (the
    /// newest first: the least likely to have been closed by the origin).
    pub(super) fn pool_take(&self, target: &Target, ips: &[IpAddr]) -> Option<(SocketAddr, TcpStream)> {
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
    pub(super) fn pool_put(&self, target: &Target, addr: SocketAddr, conn: TcpStream) {
        let Ok(mut pool) = self.pool.lock() else { return };
        if pool.len() >= POOL_MAX
            && let Some(oldest) = pool.iter().enumerate().min_by_key(|(_, k)| k.since).map(|(i, _)| i)
        {
            pool.swap_remove(oldest);
        }
        pool.push(Kept { target: target.clone(), addr, conn, since: Instant::now() });
    }

    /// Closes kept connections past their time or closed by the origin.
    pub(super) fn pool_sweep(&self) {
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
    pub(super) fn charge(&self, n: u64) -> u64 {
        self.budget.charge(n)
    }
}
