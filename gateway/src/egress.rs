//! Egress for sandboxed processes (DESIGN §3, network egress): each owner of network grants — a
//! session, or an operator-configured provider — gets its own `axp-egress-proxy` instance on a
//! UNIX socket under the state dir, which the sandbox's in-namespace forwarder connects to. The
//! proxy resolves names itself, refuses private and metadata addresses and checks SNI; this
//! module only starts it with the supervisor-compiled allowlist, hands its socket to the
//! launcher, attributes its audit records to the owner, and stops a session's instances when
//! the session closes or expires.
//!
//! The proxies run in the gateway's process, as their own tasks (decision 0003): an instance
//! shares no state with the gateway but its allowlist, its owner's [`Budget`] and its audit sink.
//! Instances are keyed by (owner, allowlist): a session whose requests carry attenuated tokens
//! with narrower `net.connect` grants gets one instance per distinct allowlist, all drawing on the
//! session's one budget, so `[egress]` limits hold per session whatever the token. A provider's
//! instance lives as long as the gateway; `NetScope::Shared` (one-off `axp sandbox run`, library
//! use) is keyed by allowlist alone.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axp_egress_proxy::{AuditRecord, Budget, Cidr, Observer, Policy, Proxy, ProxyConfig, Rule};
use axp_providers::NetScope;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// The port the forwarder listens on inside every sandbox.
pub const SANDBOX_PROXY_PORT: u16 = 3128;

/// Operator settings every proxy instance shares (`[egress]` in axp.toml).
#[derive(Debug, Clone, Default)]
pub struct EgressOptions {
    /// DNS servers the proxies ask; empty means the system's (`/etc/resolv.conf`).
    pub resolvers: Vec<std::net::SocketAddr>,
    /// Networks exempt from the private/loopback/metadata address check (labs and tests only).
    pub dangerously_allow_private: Vec<Cidr>,
    /// What each owner may use.
    pub limits: EgressLimits,
}

/// Per-owner limits (`[egress] max_connections`, `max_bytes`, `idle_timeout_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressLimits {
    /// Connections one owner may have open at once, over all its instances.
    pub max_connections: usize,
    /// Bytes (both directions) one session may move over its life. Providers and shared
    /// instances live as long as the gateway, so a lifetime budget would cut them off for good:
    /// they have none.
    pub max_bytes: Option<u64>,
    /// A connection with no traffic either way for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for EgressLimits {
    fn default() -> Self {
        Self { max_connections: 64, max_bytes: Some(1 << 30), idle_timeout: Duration::from_secs(300) }
    }
}

/// Receives every attempt of every instance, with the instance's owner (the gateway folds them
/// into its hash-chained audit log and metrics). Runs on the connection's task: keep it short.
pub type AttemptSink = Arc<dyn Fn(&NetScope, &AuditRecord) + Send + Sync>;

/// A session's expiry (ms since the epoch), or `None` when it is closed or unknown. Asked once,
/// before a session's first instance starts.
pub type SessionExpiry = Arc<dyn Fn(&str) -> Option<u64> + Send + Sync>;

/// One owner's running instances.
struct Owner {
    budget: Budget,
    /// Stops every instance of this owner (a child of the gateway-wide shutdown token).
    stop: CancellationToken,
    /// Allowlist key → socket.
    sockets: HashMap<String, PathBuf>,
}

type Owners = Arc<Mutex<HashMap<NetScope, Owner>>>;

pub struct Egress {
    dir: PathBuf,
    options: EgressOptions,
    owners: Owners,
    sink: Mutex<Option<AttemptSink>>,
    session_expiry: Mutex<Option<SessionExpiry>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress").field("dir", &self.dir).field("options", &self.options).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A short, filesystem-safe name for (owner, allowlist): the socket and the instance's own
/// audit file are named after it (UNIX socket paths are limited to 108 bytes).
fn instance_key(scope: &NetScope, sorted_rules: &[String]) -> String {
    let (kind, owner) = match scope {
        NetScope::Shared => ("shared", ""),
        NetScope::Session(id) => ("session", id.as_str()),
        NetScope::Provider(name) => ("provider", name.as_str()),
    };
    let mut h = Sha256::new();
    h.update(kind.as_bytes());
    h.update([0]);
    h.update(owner.as_bytes());
    h.update([0]);
    h.update(sorted_rules.join("\n").as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{kind}-{hex}")
}

/// Stops `scope`'s instances: no new connections, open ones cut, socket files removed.
fn stop_owner(owners: &Owners, scope: &NetScope) -> bool {
    let Some(owner) = lock(owners).remove(scope) else {
        return false;
    };
    owner.stop.cancel();
    // The instances remove their sockets once their tasks see the cancellation; remove them
    // now as well, so nothing can connect in between (a stopped session is never restarted,
    // so no later instance can own the same path). Their JSON-lines attempt logs go too: every
    // attempt is also in the hash-chained audit log (the observer appends it as it happens), and one
    // file per session that ever used the network would otherwise pile up in the state dir.
    for sock in owner.sockets.values() {
        let _ = std::fs::remove_file(sock);
        let _ = std::fs::remove_file(sock.with_extension("jsonl"));
    }
    true
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Egress {
    pub fn new(dir: PathBuf) -> Self {
        Self::with_options(dir, EgressOptions::default())
    }

    pub fn with_options(dir: PathBuf, options: EgressOptions) -> Self {
        Self {
            dir,
            options,
            owners: Arc::default(),
            sink: Mutex::new(None),
            session_expiry: Mutex::new(None),
            shutdown: CancellationToken::new(),
        }
    }

    /// Hands every attempt of proxies started from now on to `sink` as well as to their own
    /// audit files. The gateway sets this before any sandboxed process can start.
    pub fn set_observer(&self, sink: AttemptSink) {
        *lock(&self.sink) = Some(sink);
    }

    /// How to learn whether a session is open and when it expires: a session's first instance
    /// is refused for a closed or expired session, and its instances stop at its expiry.
    pub fn set_session_expiry(&self, expiry: SessionExpiry) {
        *lock(&self.session_expiry) = Some(expiry);
    }

    /// Stops session `id`'s instances (after `session.close`). `false` when it had none.
    pub fn stop_session(&self, id: &str) -> bool {
        stop_owner(&self.owners, &NetScope::Session(id.to_string()))
    }

    /// The socket of `scope`'s proxy enforcing exactly `rules` (`host[:port]`, `*.domain`),
    /// started on first use. Needs a tokio runtime (the gateway's, or one `axp sandbox run`
    /// creates).
    pub fn socket_for(&self, scope: &NetScope, rules: &[String]) -> Result<PathBuf, String> {
        let mut sorted = rules.to_vec();
        sorted.sort();
        sorted.dedup();
        let key = instance_key(scope, &sorted);
        // Held while the instance starts: a `session.close` that lands meanwhile either finds
        // the instance and stops it, or has already closed the session, which is refused below.
        let mut owners = lock(&self.owners);
        if let Some(sock) = owners.get(scope).and_then(|o| o.sockets.get(&key)) {
            return Ok(sock.clone());
        }
        let allow = sorted
            .iter()
            .map(|r| r.parse::<Rule>().map_err(|e| format!("network grant `{r}`: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| "the egress proxy needs a running runtime".to_string())?;
        let limits = self.options.limits;
        if !owners.contains_key(scope) {
            let mut budget_bytes = None;
            let stop = self.shutdown.child_token();
            if let NetScope::Session(id) = scope {
                budget_bytes = limits.max_bytes;
                let expiry = lock(&self.session_expiry).clone();
                if let Some(expiry) = expiry {
                    let at = expiry(id).ok_or_else(|| format!("session `{id}` is closed"))?;
                    let left = at.saturating_sub(now_ms());
                    if left == 0 {
                        return Err(format!("session `{id}` has expired"));
                    }
                    // The session's instances end with it, also when nobody closes it.
                    let (owners, scope, stop) = (self.owners.clone(), scope.clone(), stop.clone());
                    handle.spawn(async move {
                        tokio::select! {
                            () = tokio::time::sleep(Duration::from_millis(left)) => {
                                if stop_owner(&owners, &scope) {
                                    tracing::info!(?scope, "session expired: its egress proxy stopped");
                                }
                            }
                            () = stop.cancelled() => {}
                        }
                    });
                }
            }
            let budget = Budget::new(limits.max_connections, budget_bytes);
            owners.insert(scope.clone(), Owner { budget, stop, sockets: HashMap::new() });
        }
        let Some(owner) = owners.get_mut(scope) else {
            return Err("the egress owner vanished while starting".into());
        };
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let sock = self.dir.join(format!("{key}.sock"));
        let observer = lock(&self.sink).clone().map(|sink| {
            let scope = scope.clone();
            Observer(Arc::new(move |r: &AuditRecord| sink(&scope, r)))
        });
        let cfg = ProxyConfig {
            listen_unix: vec![sock.clone()],
            policy: Policy {
                allow,
                dangerously_allow_private: self.options.dangerously_allow_private.clone(),
                ..Policy::default()
            },
            resolvers: self.options.resolvers.clone(),
            audit: Some(self.dir.join(format!("{key}.jsonl"))),
            observer,
            budget: Some(owner.budget.clone()),
            idle_timeout: limits.idle_timeout,
            ..ProxyConfig::default()
        };
        let bind = || handle.block_on(Proxy::bind(cfg));
        // Inside a runtime task we must tell tokio this thread blocks; outside one, block_on is fine.
        let proxy = if tokio::task::try_id().is_some() { tokio::task::block_in_place(bind) } else { bind() }
            .map_err(|e| format!("cannot start the egress proxy: {e}"))?;
        let stop = owner.stop.clone();
        handle.spawn(async move {
            if let Err(e) = proxy.run(stop.cancelled_owned()).await {
                tracing::error!(error = %e, "egress proxy stopped");
            }
        });
        owner.sockets.insert(key, sock.clone());
        Ok(sock)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn instance_names_separate_owners_and_fit_a_socket_path() {
        let rules = vec!["api.example.test".to_string()];
        let a = instance_key(&NetScope::Session("a".into()), &rules);
        let b = instance_key(&NetScope::Session("b".into()), &rules);
        let p = instance_key(&NetScope::Provider("a".into()), &rules);
        assert!(a != b && a != p && b != p, "{a} {b} {p}");
        assert_eq!(a, instance_key(&NetScope::Session("a".into()), &rules));
        let long = instance_key(&NetScope::Session("x".repeat(500)), &rules);
        assert!(long.len() < 40, "{long}");
        assert!(long.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{long}");
    }
}
