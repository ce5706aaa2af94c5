//! The proxy as a child process of the gateway (`axp __egress-proxy`, or `axp-egress-proxy
//! __egress-proxy`): one process per owner of network grants (a session, a provider, or the
//! shared one-off owner), so a proxy that parses bytes from sandboxed jobs never shares the
//! gateway's address space, memory, descriptors or limits (the gateway holds the token signing
//! key).
//!
//! This module owns both ends' wire format and the child's side of it. The control channel is
//! the child's stdin, one JSON object a line: first [`Control::Start`] with the owner's limits
//! and resolver settings, then any number of [`Control::Listen`] (one per allowlist; all of an
//! owner's listeners draw on one [`Budget`]), each answered by [`Event::Listening`] or
//! [`Event::Failed`]. Every attempt goes out on stdout as [`Event::Attempt`], in the order the
//! proxy recorded them. The child exits when its stdin closes (the gateway stopped the owner, or
//! is gone), after stopping its listeners and removing their sockets; it also dies with the
//! thread that spawned it. Before it starts any thread it confines itself with
//! [`axp_sandbox::harden`]: writes only below the egress directory, reads only the resolver's
//! configuration, no exec, no capabilities. Policy and parsing stay in the pure modules; this
//! module only wires a [`Proxy`] per `listen` to the channel.

use std::collections::HashSet;
use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::audit::{AuditRecord, Observer};
use crate::policy::{Cidr, Policy, Rule};
use crate::proxy::{Budget, Proxy, ProxyConfig};

/// The hidden first argument that makes `axp` (or `axp-egress-proxy`) run [`child_main`].
pub const CHILD_ARG: &str = "__egress-proxy";

/// Bumped on any incompatible change to [`Control`] or [`Event`]; a child refuses a `start` of
/// another version (e.g. a stale binary at the configured path) with a clear error.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest control or event line either side accepts.
pub const MAX_LINE: usize = 1 << 20;

/// A line from the gateway to the child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Control {
    /// The owner's settings; exactly once, first.
    Start(Start),
    /// Serve one allowlist on one UNIX socket.
    Listen(Listen),
}

/// The owner-level settings a child starts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Start {
    /// Must be [`PROTOCOL_VERSION`].
    pub version: u32,
    /// The only directory the child may write to: its sockets and audit files live here.
    pub dir: PathBuf,
    /// Connections open at once, over all listeners.
    pub max_connections: usize,
    /// Bytes over the owner's life, over all listeners; `None`: unlimited.
    pub max_bytes: Option<u64>,
    /// Bytes already spent by this owner's earlier children (after a restart).
    #[serde(default)]
    pub bytes_used: u64,
    /// A connection idle in both directions this long is closed.
    pub idle_timeout_ms: u64,
    /// DNS servers; empty means the system's `/etc/resolv.conf`.
    #[serde(default)]
    pub resolvers: Vec<SocketAddr>,
    /// CIDRs exempt from the address classifier (labs and tests only).
    #[serde(default)]
    pub dangerously_allow_private: Vec<String>,
}

/// One listener: an allowlist on a socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    /// The gateway's name for it, echoed in the answer.
    pub key: String,
    /// UNIX socket path, inside [`Start::dir`] (directly, or one directory down).
    pub socket: PathBuf,
    /// JSON-lines attempt log, inside [`Start::dir`] (directly, or one directory down).
    pub audit: PathBuf,
    /// `host[:port]` / `*.domain` rules.
    pub allow: Vec<String>,
}

/// A line from the child to the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Confined and reading commands.
    Ready {
        /// The child's process id.
        pid: u32,
        /// What confinement this host allowed (see [`axp_sandbox::harden::Confinement`]).
        confinement: String,
    },
    /// The listener `key` is bound and serving.
    Listening {
        /// As in [`Listen::key`].
        key: String,
    },
    /// The listener `key` could not start.
    Failed {
        /// As in [`Listen::key`].
        key: String,
        /// Why.
        error: String,
    },
    /// One connection attempt.
    Attempt(Box<WireRecord>),
}

/// An [`AuditRecord`] on the wire (owned strings, so the gateway can read it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRecord {
    /// See [`AuditRecord::ts_ms`].
    pub ts_ms: u64,
    /// See [`AuditRecord::conn`].
    pub conn: u64,
    /// See [`AuditRecord::client`].
    pub client: String,
    /// See [`AuditRecord::proto`].
    pub proto: String,
    /// See [`AuditRecord::requested`].
    pub requested: Option<String>,
    /// See [`AuditRecord::target`].
    pub target: Option<String>,
    /// See [`AuditRecord::addr`].
    pub addr: Option<String>,
    /// See [`AuditRecord::decision`].
    pub decision: String,
    /// See [`AuditRecord::reason`].
    pub reason: String,
    /// See [`AuditRecord::detail`].
    pub detail: String,
    /// See [`AuditRecord::inner`].
    pub inner: Option<String>,
    /// See [`AuditRecord::end`].
    pub end: Option<String>,
    /// See [`AuditRecord::reused`].
    #[serde(default)]
    pub reused: bool,
    /// See [`AuditRecord::bytes_up`].
    pub bytes_up: u64,
    /// See [`AuditRecord::bytes_down`].
    pub bytes_down: u64,
    /// See [`AuditRecord::duration_ms`].
    pub duration_ms: u64,
}

impl From<&AuditRecord> for WireRecord {
    fn from(r: &AuditRecord) -> Self {
        Self {
            ts_ms: r.ts_ms,
            conn: r.conn,
            client: r.client.clone(),
            proto: r.proto.into(),
            requested: r.requested.clone(),
            target: r.target.clone(),
            addr: r.addr.clone(),
            decision: r.decision.into(),
            reason: r.reason.into(),
            detail: r.detail.clone(),
            inner: r.inner.map(Into::into),
            end: r.end.map(Into::into),
            reused: r.reused,
            bytes_up: r.bytes_up,
            bytes_down: r.bytes_down,
            duration_ms: r.duration_ms,
        }
    }
}

/// The record's code fields (`decision`, `reason`, `proto`, …) are `&'static str` in
/// [`AuditRecord`]. A code read back from a child is kept once and reused; at most 256
/// distinct codes of at most 64 `[a-z0-9_-]` bytes, so a misbehaving child cannot grow the
/// gateway's memory through them (anything else reads `invalid`, and codes past the cap `other`).
fn intern(s: &str) -> &'static str {
    static SEEN: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    if s.is_empty() || s.len() > 64 || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return "invalid";
    }
    let mut seen = SEEN.get_or_init(Mutex::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = seen.get(s) {
        return known;
    }
    if seen.len() >= 256 {
        return "other";
    }
    let kept: &'static str = Box::leak(s.to_owned().into_boxed_str());
    seen.insert(kept);
    kept
}

impl WireRecord {
    /// The record as the proxy library's type (what the gateway's attempt sink takes).
    pub fn into_record(self) -> AuditRecord {
        AuditRecord {
            ts_ms: self.ts_ms,
            conn: self.conn,
            client: self.client,
            proto: intern(&self.proto),
            requested: self.requested,
            target: self.target,
            addr: self.addr,
            decision: intern(&self.decision),
            reason: intern(&self.reason),
            detail: self.detail,
            inner: self.inner.as_deref().map(intern),
            end: self.end.as_deref().map(intern),
            reused: self.reused,
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
            duration_ms: self.duration_ms,
        }
    }
}

/// Why a child could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// A control line was not valid JSON of the expected shape, or came out of order.
    #[error("{0}")]
    Protocol(String),
    /// The gateway speaks another protocol version (a different build at the proxy path).
    #[error("control protocol version {got}, this build speaks {PROTOCOL_VERSION}")]
    Version {
        /// The version in `start`.
        got: u32,
    },
    /// The settings in `start` are unusable.
    #[error("invalid start settings: {0}")]
    Config(String),
    /// Self-confinement failed for a reason other than a missing kernel feature.
    #[error("cannot confine the egress proxy: {0}")]
    Confine(String),
    /// Reading stdin, or building the runtime or a thread, failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads one control line; `None` at end of input.
pub fn read_control(r: &mut impl BufRead) -> Result<Option<Control>, ChildError> {
    let mut line = Vec::new();
    let n = r.by_ref().take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > MAX_LINE {
        return Err(ChildError::Protocol(format!("control line longer than {MAX_LINE} bytes")));
    }
    serde_json::from_slice(&line).map(Some).map_err(|e| {
        ChildError::Protocol(format!("malformed control line ({e}): {}", crate::audit::escaped(line.trim_ascii())))
    })
}

/// The child's `main`: returns the process exit code (0 when stdin closed, 2 on an error, which
/// is printed as one `axp __egress-proxy: error: …` line on stderr).
pub fn child_main() -> i32 {
    // Before anything opens a descriptor or starts a thread.
    let inherited = axp_sandbox::harden::early();
    match run_child(inherited) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("axp {CHILD_ARG}: error: {e}");
            2
        }
    }
}

/// `true` when `p` is directly inside `dir` or inside one directory directly inside it: the
/// gateway gives each listener a directory of its own, so a sandbox that is shown one socket's
/// directory sees that socket alone.
fn inside(dir: &Path, p: &Path) -> bool {
    p.strip_prefix(dir).is_ok_and(|rel| {
        let n = rel.components().count();
        (1..=2).contains(&n) && rel.components().all(|c| matches!(c, std::path::Component::Normal(_)))
    })
}

fn run_child(inherited: usize) -> Result<(), ChildError> {
    let start = match read_control(&mut std::io::stdin().lock())? {
        None => return Ok(()),
        Some(Control::Start(s)) => s,
        Some(Control::Listen(_)) => return Err(ChildError::Protocol("the first control line must be `start`".into())),
    };
    if start.version != PROTOCOL_VERSION {
        return Err(ChildError::Version { got: start.version });
    }
    if !start.dir.is_absolute() || !start.dir.is_dir() {
        return Err(ChildError::Config(format!("`{}` is not an existing absolute directory", start.dir.display())));
    }
    let private = start
        .dangerously_allow_private
        .iter()
        .map(|c| c.parse::<Cidr>().map_err(|e| ChildError::Config(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    // The resolver reads the system's configuration (and whatever it links to) only when no
    // resolver is given; it never reads the hosts file.
    let mut read_paths = Vec::new();
    if start.resolvers.is_empty() {
        let conf = Path::new("/etc/resolv.conf");
        read_paths.push(conf.canonicalize().unwrap_or_else(|_| conf.to_path_buf()));
        read_paths.push(conf.to_path_buf());
    }
    let policy = axp_sandbox::harden::HelperPolicy { write_dirs: vec![start.dir.clone()], read_paths };
    let confinement = axp_sandbox::harden::confine(&policy).map_err(ChildError::Confine)?;

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (ev_tx, ev_rx) = std::sync::mpsc::channel::<Event>();
    let writer = std::thread::Builder::new().name("egress-events".into()).spawn(move || write_events(ev_rx))?;
    let _ = ev_tx.send(Event::Ready {
        pid: std::process::id(),
        confinement: format!("{confinement}; {inherited} inherited descriptors closed"),
    });
    let (cmd_tx, cmd_rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::Builder::new().name("egress-control".into()).spawn(move || {
        let mut input = std::io::stdin().lock();
        loop {
            let next = read_control(&mut input);
            let last = !matches!(next, Ok(Some(_)));
            if cmd_tx.send(next).is_err() || last {
                return;
            }
        }
    })?;
    let result = rt.block_on(serve(start, private, cmd_rx, ev_tx));
    // Every proxy (and with it every clone of the event sender) is gone with the runtime; the
    // writer then drains what is queued and ends.
    drop(rt);
    let _ = writer.join();
    result
}

/// Writes events as JSON lines, batching what is queued into one write.
fn write_events(rx: std::sync::mpsc::Receiver<Event>) {
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(ev) = next {
            if serde_json::to_writer(&mut buf, &ev).is_ok() {
                buf.push(b'\n');
            }
            next = rx.try_recv().ok();
        }
        if out.write_all(&buf).and_then(|()| out.flush()).is_err() {
            // The gateway is gone; stdin closes too and the child ends.
            return;
        }
        buf.clear();
    }
}

type Commands = tokio::sync::mpsc::UnboundedReceiver<Result<Option<Control>, ChildError>>;

async fn serve(
    start: Start,
    private: Vec<Cidr>,
    mut commands: Commands,
    events: std::sync::mpsc::Sender<Event>,
) -> Result<(), ChildError> {
    let budget = Budget::new(start.max_connections, start.max_bytes);
    budget.spend(start.bytes_used);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut running = tokio::task::JoinSet::new();
    let mut keys = HashSet::new();
    let outcome = loop {
        let listen = match commands.recv().await {
            None | Some(Ok(None)) => break Ok(()),
            Some(Err(e)) => break Err(e),
            Some(Ok(Some(Control::Start(_)))) => break Err(ChildError::Protocol("`start` was sent twice".into())),
            Some(Ok(Some(Control::Listen(l)))) => l,
        };
        if keys.contains(&listen.key) {
            let _ = events.send(Event::Listening { key: listen.key });
            continue;
        }
        match bind(&start, &private, &budget, &listen, &events).await {
            Ok(proxy) => {
                let mut stop = stop_rx.clone();
                running.spawn(proxy.run(async move {
                    let _ = stop.wait_for(|s| *s).await;
                }));
                keys.insert(listen.key.clone());
                let _ = events.send(Event::Listening { key: listen.key });
            }
            Err(error) => {
                let _ = events.send(Event::Failed { key: listen.key, error });
            }
        }
    };
    // Stop every listener: open connections are cut, sockets removed, audit files synced.
    let _ = stop_tx.send(true);
    while running.join_next().await.is_some() {}
    outcome
}

async fn bind(
    start: &Start,
    private: &[Cidr],
    budget: &Budget,
    l: &Listen,
    events: &std::sync::mpsc::Sender<Event>,
) -> Result<Proxy, String> {
    for p in [&l.socket, &l.audit] {
        if !inside(&start.dir, p) {
            return Err(format!(
                "`{}` is not inside the egress directory {} (directly, or in a directory directly inside it)",
                p.display(),
                start.dir.display()
            ));
        }
    }
    let allow = l
        .allow
        .iter()
        .map(|r| r.parse::<Rule>().map_err(|e| format!("network grant `{r}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let events = events.clone();
    let observer = Observer(Arc::new(move |r: &AuditRecord| {
        let _ = events.send(Event::Attempt(Box::new(WireRecord::from(r))));
    }));
    let cfg = ProxyConfig {
        listen_unix: vec![l.socket.clone()],
        policy: Policy { allow, dangerously_allow_private: private.to_vec(), ..Policy::default() },
        resolvers: start.resolvers.clone(),
        audit: Some(l.audit.clone()),
        observer: Some(observer),
        budget: Some(budget.clone()),
        idle_timeout: Duration::from_millis(start.idle_timeout_ms.max(1)),
        ..ProxyConfig::default()
    };
    Proxy::bind(cfg).await.map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn control_lines_round_trip_and_bad_ones_say_why() {
        let listen = Control::Listen(Listen {
            key: "session-1".into(),
            socket: "/s/egress/session-1.sock".into(),
            audit: "/s/egress/session-1.jsonl".into(),
            allow: vec!["api.example.test".into()],
        });
        let line = format!("{}\n", serde_json::to_string(&listen).unwrap());
        assert!(line.starts_with(r#"{"op":"listen","key":"session-1""#), "{line}");
        assert_eq!(read_control(&mut line.as_bytes()).unwrap(), Some(listen));
        assert_eq!(read_control(&mut &b""[..]).unwrap(), None);
        let bad = read_control(&mut &b"{\"op\":\"listen\",\"key\":1}\n"[..]).unwrap_err().to_string();
        assert!(bad.starts_with("malformed control line ("), "{bad}");
        let unknown = read_control(&mut &b"{\"op\":\"start\",\"version\":1,\"dir\":\"/x\",\"max_connections\":1,\"max_bytes\":null,\"idle_timeout_ms\":1,\"surprise\":1}\n"[..]);
        assert!(unknown.unwrap_err().to_string().contains("surprise"));
        let long = vec![b'x'; MAX_LINE + 10];
        assert!(read_control(&mut &long[..]).unwrap_err().to_string().contains("longer than"));
    }

    #[test]
    fn records_survive_the_wire_and_odd_codes_cannot_grow_memory() {
        let r = AuditRecord {
            conn: 3,
            client: "unix:/x".into(),
            proto: "connect",
            target: Some("a.test:443".into()),
            decision: "deny",
            reason: "sni_mismatch",
            detail: "SNI b.test".into(),
            inner: Some("tls"),
            bytes_up: 5,
            ..AuditRecord::default()
        };
        let wire = serde_json::to_string(&Event::Attempt(Box::new(WireRecord::from(&r)))).unwrap();
        let Event::Attempt(back) = serde_json::from_str::<Event>(&wire).unwrap() else { panic!("{wire}") };
        let back = (*back).into_record();
        assert_eq!(serde_json::to_value(&back).unwrap(), serde_json::to_value(&r).unwrap());
        // (One test: the cap below is process-wide.)
        let odd = WireRecord { decision: "x".repeat(100), reason: "a b".into(), ..WireRecord::default() }.into_record();
        assert_eq!((odd.decision, odd.reason, odd.proto), ("invalid", "invalid", "invalid"));
        for i in 0..300 {
            let _ = intern(&format!("code_{i}"));
        }
        assert_eq!(intern("never_seen_before_code"), "other");
        assert_eq!(intern("code_0"), "code_0");
    }
}
