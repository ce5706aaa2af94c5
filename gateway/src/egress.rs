//! Egress for sandboxed processes (DESIGN §3, network egress): for each distinct set of
//! `net.connect` grants, one `axp-egress-proxy` instance listening on a UNIX socket under the
//! state dir, which the sandbox's in-namespace forwarder connects to. The proxy resolves names
//! itself, refuses private and metadata addresses and checks SNI; this module only starts it with
//! the supervisor-compiled allowlist and hands its socket to the launcher.
//!
//! The proxy runs in the gateway's process, as its own tasks (decision 0003): it shares no state
//! with the gateway but the allowlist it was started with and its audit file. Instances are keyed
//! by their allowlist, so connection and byte limits apply per allowlist, not per session.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use axp_egress_proxy::{Cidr, Observer, Policy, Proxy, ProxyConfig, Rule};
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
}

#[derive(Debug)]
pub struct Egress {
    dir: PathBuf,
    options: EgressOptions,
    running: Mutex<HashMap<String, PathBuf>>,
    /// Receives every proxy's audit records (set once the gateway's audit log is open).
    observer: Mutex<Option<Observer>>,
    shutdown: CancellationToken,
}

impl Egress {
    pub fn new(dir: PathBuf) -> Self {
        Self::with_options(dir, EgressOptions::default())
    }

    pub fn with_options(dir: PathBuf, options: EgressOptions) -> Self {
        Self {
            dir,
            options,
            running: Mutex::new(HashMap::new()),
            observer: Mutex::new(None),
            shutdown: CancellationToken::new(),
        }
    }

    /// Hands every attempt of proxies started from now on to `observer` as well as to their
    /// own audit files. The gateway sets this before any sandboxed process can start.
    pub fn set_observer(&self, observer: Observer) {
        *self.observer.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(observer);
    }

    /// The socket of a proxy enforcing exactly `rules` (`host[:port]`, `*.domain`), started on
    /// first use. Needs a tokio runtime (the gateway's, or one `axp sandbox run` creates).
    pub fn socket_for(&self, rules: &[String]) -> Result<PathBuf, String> {
        let mut sorted = rules.to_vec();
        sorted.sort();
        sorted.dedup();
        let digest = Sha256::digest(sorted.join("\n").as_bytes());
        let key: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let mut running = self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sock) = running.get(&key) {
            return Ok(sock.clone());
        }
        let allow = sorted
            .iter()
            .map(|r| r.parse::<Rule>().map_err(|e| format!("network grant `{r}`: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        std::fs::create_dir_all(&self.dir).map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let sock = self.dir.join(format!("{key}.sock"));
        let cfg = ProxyConfig {
            listen_unix: vec![sock.clone()],
            policy: Policy {
                allow,
                dangerously_allow_private: self.options.dangerously_allow_private.clone(),
                ..Policy::default()
            },
            resolvers: self.options.resolvers.clone(),
            audit: Some(self.dir.join(format!("{key}.jsonl"))),
            observer: self.observer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone(),
            ..ProxyConfig::default()
        };
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| "the egress proxy needs a running runtime".to_string())?;
        let bind = || handle.block_on(Proxy::bind(cfg));
        // Inside a runtime task we must tell tokio this thread blocks; outside one, block_on is fine.
        let proxy = if tokio::task::try_id().is_some() { tokio::task::block_in_place(bind) } else { bind() }
            .map_err(|e| format!("cannot start the egress proxy: {e}"))?;
        let stop = self.shutdown.clone();
        handle.spawn(async move {
            if let Err(e) = proxy.run(stop.cancelled_owned()).await {
                tracing::error!(error = %e, "egress proxy stopped");
            }
        });
        running.insert(key, sock.clone());
        Ok(sock)
    }
}
