//! Egress for sandboxed processes (DESIGN §3, network egress): each owner of network grants — a
//! session, or an operator-configured provider — gets its own egress proxy process, listening on
//! UNIX sockets under the state dir, which the sandbox's in-namespace forwarder connects to. The
//! proxy resolves names itself, refuses private and metadata addresses and checks SNI; this
//! module only starts and supervises it with the supervisor-compiled allowlists, hands its socket
//! to the launcher, attributes its audit records to the owner, and stops a session's proxy when
//! the session closes or expires.
//!
//! Each owner's proxy is a child process (decision 0003): `axp __egress-proxy`, the same binary
//! re-executed (`axp_egress_proxy::child`), spawned on the owner's first use, confined by itself
//! before it starts a thread, and driven over its stdin (`start`, then one `listen` per
//! allowlist, each acknowledged before [`Egress::socket_for`] returns). It reports every attempt
//! on its stdout; a supervisor task per owner hands them to the [`AttemptSink`] with the owner,
//! and restarts a child that dies (with backoff) on the same sockets and allowlists, so running
//! sandboxes recover. Instances are keyed by (owner, allowlist): a session whose requests carry
//! attenuated tokens with narrower `net.connect` grants gets one listener per distinct
//! allowlist, all in the session's one process and drawing on its one budget, so `[egress]`
//! limits hold per session whatever the token. A provider's proxy lives as long as the gateway;
//! `NetScope::Shared` (one-off `axp sandbox run`, library use) is keyed by allowlist alone.

use axp_protocol::now_ms;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axp_egress_proxy::child::{CHILD_ARG, Control, Event, Listen, MAX_LINE, PROTOCOL_VERSION, Start};
use axp_egress_proxy::{AuditRecord, Cidr, Rule};
use axp_providers::NetScope;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;

use crate::config::settings::EgressSettings;

/// The port the forwarder listens on inside every sandbox.
pub const SANDBOX_PROXY_PORT: u16 = 3128;

/// How long [`Egress::socket_for`] waits for a proxy to bind a socket (a child that dies or
/// answers nonsense is reported at once; this bounds a child that hangs).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a stopped owner's child has to stop its listeners and report its last attempts
/// after its stdin closes, before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Operator settings every proxy shares (`[egress]` in axp.toml).
#[derive(Debug, Clone, Default)]
pub struct EgressOptions {
    /// DNS servers the proxies ask; empty means the system's (`/etc/resolv.conf`).
    pub resolvers: Vec<std::net::SocketAddr>,
    /// Networks exempt from the private/loopback/metadata address check (labs and tests only).
    pub dangerously_allow_private: Vec<Cidr>,
    /// What each owner may use.
    pub limits: EgressLimits,
    /// The executable run as `EXE __egress-proxy` for each owner; `None` is this process's own
    /// (the `axp` binary). Set in code only (tests, library use with `axp-egress-proxy`), never
    /// from a config file.
    pub proxy_exe: Option<PathBuf>,
}

/// Per-owner limits (`[egress] max_connections`, `max_bytes`, `idle_timeout_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressLimits {
    /// Connections one owner may have open at once, over all its allowlists.
    pub max_connections: usize,
    /// Bytes (both directions) one session may move over its life. Providers and shared
    /// proxies live as long as the gateway, so a lifetime budget would cut them off for good:
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

/// Receives every attempt of every proxy, with the proxy's owner (the gateway folds them into
/// its hash-chained audit log and metrics). Runs on the owner's supervisor task: keep it short.
pub type AttemptSink = Arc<dyn Fn(&NetScope, &AuditRecord) + Send + Sync>;

/// A session's expiry (ms since the epoch), or `None` when it is closed or unknown. Asked once,
/// before a session's proxy starts.
pub type SessionExpiry = Arc<dyn Fn(&str) -> Option<u64> + Send + Sync>;

/// Who waits for a `listen` to be answered.
type Reply = oneshot::Sender<Result<(), String>>;

/// A `listen` for an owner's supervisor, answered once the child has bound the socket.
struct ListenReq {
    listen: Listen,
    reply: Reply,
}

/// One owner's proxy, as the gateway sees it.
struct Owner {
    /// Tells a late answer for a stopped owner from one for its successor.
    id: u64,
    /// Stops the owner's supervisor and child (a child of the gateway-wide shutdown token).
    stop: CancellationToken,
    requests: mpsc::UnboundedSender<ListenReq>,
    /// Allowlist key → socket, for the listeners the child acknowledged.
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
    spawner: Mutex<Option<Spawner>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress").field("dir", &self.dir).field("options", &self.options).finish_non_exhaustive()
    }
}

impl Drop for Egress {
    /// Every supervisor stops its child (they are also killed when their handles drop, and by
    /// the kernel when the spawner thread ends).
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A short, filesystem-safe name for (owner, allowlist): the socket and the listener's own
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

/// Stops `scope`'s proxy: its child is told to stop (open connections are cut) and its socket
/// files are removed now, so nothing can connect in between.
fn stop_owner(owners: &Owners, scope: &NetScope) -> bool {
    let Some(owner) = lock(owners).remove(scope) else {
        return false;
    };
    owner.stop.cancel();
    // A stopped session is never restarted, so no later proxy can own the same paths. Their
    // JSON-lines attempt logs go too: every attempt is also in the hash-chained audit log, and
    // one file per session that ever used the network would otherwise pile up in the state dir.
    for sock in owner.sockets.values() {
        let _ = std::fs::remove_file(sock);
        if let Some(dir) = sock.parent() {
            let _ = std::fs::remove_dir(dir);
            if let (Some(key), Some(egress)) = (dir.file_name(), dir.parent()) {
                let mut log = egress.join("logs").join(key);
                log.set_extension("jsonl");
                let _ = std::fs::remove_file(log);
            }
        }
    }
    true
}

/// Creates `dir` if needed and makes it private to this user (0700).
fn private_dir(dir: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn closed(scope: &NetScope) -> String {
    match scope {
        NetScope::Session(id) => format!("session `{id}` is closed"),
        _ => "the egress proxy was stopped".into(),
    }
}

impl Egress {
    pub fn new(dir: PathBuf) -> Self {
        Self::with_options(dir, EgressOptions::default())
    }

    pub fn with_options(dir: PathBuf, options: EgressOptions) -> Self {
        // The child is told this directory and confines its writes to it: make it absolute.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        Self {
            dir,
            options,
            owners: Arc::default(),
            sink: Mutex::new(None),
            session_expiry: Mutex::new(None),
            shutdown: CancellationToken::new(),
            spawner: Mutex::new(None),
            next_id: AtomicU64::new(0),
        }
    }

    /// Hands every attempt of proxies started from now on to `sink` as well as to their own
    /// audit files. The gateway sets this before any sandboxed process can start.
    pub fn set_observer(&self, sink: AttemptSink) {
        *lock(&self.sink) = Some(sink);
    }

    /// How to learn whether a session is open and when it expires: a session's proxy is refused
    /// for a closed or expired session, and stops at its expiry.
    pub fn set_session_expiry(&self, expiry: SessionExpiry) {
        *lock(&self.session_expiry) = Some(expiry);
    }

    /// Stops session `id`'s proxy (after `session.close`). `false` when it had none.
    pub fn stop_session(&self, id: &str) -> bool {
        stop_owner(&self.owners, &NetScope::Session(id.to_string()))
    }

    /// The socket of `scope`'s proxy enforcing exactly `rules` (`host[:port]`, `*.domain`),
    /// started on first use; returns once the proxy listens on it. Needs a tokio runtime (the
    /// gateway's, or one `axp sandbox run` creates).
    pub fn socket_for(&self, scope: &NetScope, rules: &[String]) -> Result<PathBuf, String> {
        let mut sorted = rules.to_vec();
        sorted.sort();
        sorted.dedup();
        let key = instance_key(scope, &sorted);
        let (answer, owner_id, sock, handle) = {
            // Held while the owner is set up: a `session.close` that lands meanwhile either
            // finds the owner and stops it, or has already closed the session (refused below).
            let mut owners = lock(&self.owners);
            if let Some(sock) = owners.get(scope).and_then(|o| o.sockets.get(&key)) {
                return Ok(sock.clone());
            }
            for r in &sorted {
                r.parse::<Rule>().map_err(|e| format!("network grant `{r}`: {e}"))?;
            }
            let handle = tokio::runtime::Handle::try_current()
                .map_err(|_| "the egress proxy needs a running runtime".to_string())?;
            // Each listener's socket sits alone in a private directory of its own, which is what
            // a sandbox is shown: no job sees another owner's socket (or another allowlist of its
            // own owner's), nor any attempt log, which live in `logs/`.
            let sock_dir = self.dir.join(&key);
            let logs = self.dir.join("logs");
            for d in [&self.dir, &logs, &sock_dir] {
                private_dir(d)?;
            }
            if !owners.contains_key(scope) {
                let owner = self.new_owner(scope, &handle)?;
                owners.insert(scope.clone(), owner);
            }
            let Some(owner) = owners.get(scope) else {
                return Err("the egress owner vanished while starting".into());
            };
            let sock = sock_dir.join("p.sock");
            let listen = Listen {
                key: key.clone(),
                socket: sock.clone(),
                audit: logs.join(format!("{key}.jsonl")),
                allow: sorted.clone(),
            };
            let (reply, answer) = oneshot::channel();
            owner.requests.send(ListenReq { listen, reply }).map_err(|_| closed(scope))?;
            (answer, owner.id, sock, handle)
        };
        let wait = || handle.block_on(tokio::time::timeout(LISTEN_TIMEOUT, answer));
        // Inside a runtime task we must tell tokio this thread blocks; outside one, block_on is fine.
        let answer = if tokio::task::try_id().is_some() { tokio::task::block_in_place(wait) } else { wait() };
        match answer {
            Err(_) => Err(format!("the egress proxy did not answer within {} s", LISTEN_TIMEOUT.as_secs())),
            // The supervisor dropped the request: the owner was stopped meanwhile.
            Ok(Err(_)) => Err(closed(scope)),
            Ok(Ok(Err(e))) => Err(format!("cannot start the egress proxy: {e}")),
            Ok(Ok(Ok(()))) => match lock(&self.owners).get_mut(scope) {
                Some(o) if o.id == owner_id => {
                    o.sockets.insert(key, sock.clone());
                    Ok(sock)
                }
                _ => Err(closed(scope)),
            },
        }
    }

    /// Sets up `scope`'s supervisor (its child starts with the first `listen`). Refused for a
    /// closed or expired session; a session's proxy is stopped at its expiry.
    fn new_owner(&self, scope: &NetScope, handle: &tokio::runtime::Handle) -> Result<Owner, String> {
        let exe = match &self.options.proxy_exe {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find the axp executable to run the egress proxy: {e}"))?,
        };
        let spawner = {
            let mut s = lock(&self.spawner);
            match &*s {
                Some(sp) => sp.clone(),
                None => {
                    let sp = Spawner::start(handle.clone())
                        .map_err(|e| format!("cannot start the egress spawner thread: {e}"))?;
                    *s = Some(sp.clone());
                    sp
                }
            }
        };
        let limits = self.options.limits;
        let stop = self.shutdown.child_token();
        let mut max_bytes = None;
        if let NetScope::Session(id) = scope {
            max_bytes = limits.max_bytes;
            let expiry = lock(&self.session_expiry).clone();
            if let Some(expiry) = expiry {
                let at = expiry(id).ok_or_else(|| format!("session `{id}` is closed"))?;
                let left = at.saturating_sub(now_ms());
                if left == 0 {
                    return Err(format!("session `{id}` has expired"));
                }
                // The session's proxy ends with it, also when nobody closes it.
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
        let start = Start {
            version: PROTOCOL_VERSION,
            dir: self.dir.clone(),
            max_connections: limits.max_connections,
            max_bytes,
            bytes_used: 0,
            idle_timeout_ms: limits.idle_timeout.as_millis() as u64,
            resolvers: self.options.resolvers.clone(),
            dangerously_allow_private: self.options.dangerously_allow_private.iter().map(ToString::to_string).collect(),
        };
        let (requests, inbox) = mpsc::unbounded_channel();
        let supervisor = Supervisor {
            scope: scope.clone(),
            exe,
            start,
            sink: lock(&self.sink).clone(),
            spawner,
            listeners: BTreeMap::new(),
            pending: HashMap::new(),
        };
        handle.spawn(supervisor.run(inbox, stop.clone()));
        Ok(Owner { id: self.next_id.fetch_add(1, Ordering::Relaxed), stop, requests, sockets: HashMap::new() })
    }
}

type SpawnRequest = (Command, oneshot::Sender<std::io::Result<Child>>);

/// Spawns the children from one long-lived thread. A child dies with the thread that spawned it
/// (`PR_SET_PDEATHSIG` follows the parent *thread*), and a runtime's threads come and go, so
/// they are all spawned here; the thread ends, and with it every child, when the [`Egress`] and
/// every supervisor are gone.
#[derive(Clone)]
struct Spawner(std::sync::mpsc::Sender<SpawnRequest>);

impl Spawner {
    fn start(handle: tokio::runtime::Handle) -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new().name("axp-egress-spawn".into()).spawn(move || {
            // tokio's child handling needs the runtime's context.
            let _rt = handle.enter();
            while let Ok((mut cmd, reply)) = rx.recv() {
                let _ = reply.send(cmd.spawn());
            }
        })?;
        Ok(Self(tx))
    }

    async fn spawn(&self, cmd: Command) -> std::io::Result<Child> {
        let gone = || std::io::Error::other("the egress spawner thread is gone");
        let (reply, answer) = oneshot::channel();
        self.0.send((cmd, reply)).map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }
}

/// How a child's run ended.
enum Ended {
    /// The owner was stopped.
    Stopped,
    /// The child died or broke the protocol; why.
    Died(String),
}

/// One owner's supervisor: runs its child, restarts it when it dies, relays its attempts.
struct Supervisor {
    scope: NetScope,
    exe: PathBuf,
    /// The `start` line; its `bytes_used` follows the attempts, so a restarted child goes on
    /// from the owner's budget as spent (less what open connections moved when it died).
    start: Start,
    sink: Option<AttemptSink>,
    spawner: Spawner,
    /// Acknowledged listeners by key, restored on every restart.
    listeners: BTreeMap<String, Listen>,
    /// Sent or to be sent, not yet answered: key → (listen, who waits).
    pending: HashMap<String, (Listen, Vec<Reply>)>,
}

async fn send(stdin: &mut ChildStdin, c: &Control) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(c).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stdin.write_all(&line).await?;
    stdin.flush().await
}

impl Supervisor {
    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<ListenReq>, stop: CancellationToken) {
        let mut quick_deaths = 0u32;
        loop {
            if self.listeners.is_empty() && self.pending.is_empty() {
                // Nothing to serve yet (or a child that never got going): wait for a request.
                tokio::select! {
                    () = stop.cancelled() => break,
                    req = inbox.recv() => match req {
                        Some(req) => {
                            self.queue(req);
                        }
                        None => break,
                    },
                }
            }
            let born = Instant::now();
            match self.run_child(&mut inbox, &stop).await {
                Ended::Stopped => break,
                Ended::Died(why) => {
                    for (_, (_, waiters)) in self.pending.drain() {
                        for w in waiters {
                            let _ = w.send(Err(why.clone()));
                        }
                    }
                    if self.listeners.is_empty() {
                        tracing::error!(owner = ?self.scope, error = %why, "the egress proxy could not start");
                        continue;
                    }
                    // Sandboxes still use the sockets: restart, backing off while it keeps dying.
                    quick_deaths = if born.elapsed() > Duration::from_secs(30) { 0 } else { quick_deaths + 1 };
                    let delay = Duration::from_millis(50 << quick_deaths.min(7)).min(Duration::from_secs(5));
                    tracing::warn!(
                        owner = ?self.scope,
                        error = %why,
                        delay_ms = delay.as_millis() as u64,
                        "the egress proxy died; restarting it on its sockets"
                    );
                    tokio::select! {
                        () = stop.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
        // The gateway removed the acknowledged sockets already; these may have been bound since.
        for l in self.listeners.values().chain(self.pending.values().map(|(l, _)| l)) {
            let _ = std::fs::remove_file(&l.socket);
            if matches!(self.scope, NetScope::Session(_)) {
                let _ = std::fs::remove_file(&l.audit);
            }
        }
    }

    /// Files `req`; returns the `listen` to send when it is new.
    fn queue(&mut self, req: ListenReq) -> Option<Listen> {
        let key = req.listen.key.clone();
        if self.listeners.contains_key(&key) {
            let _ = req.reply.send(Ok(()));
            return None;
        }
        if let Some((_, waiters)) = self.pending.get_mut(&key) {
            waiters.push(req.reply);
            return None;
        }
        self.pending.insert(key, (req.listen.clone(), vec![req.reply]));
        Some(req.listen)
    }

    /// Handles one line of the child's stdout.
    fn on_event(&mut self, line: &str) -> Result<(), String> {
        match serde_json::from_str::<Event>(line).map_err(|e| e.to_string())? {
            Event::Ready { pid, confinement } => {
                tracing::info!(owner = ?self.scope, pid, %confinement, "egress proxy started");
            }
            Event::Listening { key } => {
                if let Some((listen, waiters)) = self.pending.remove(&key) {
                    self.listeners.insert(key, listen);
                    for w in waiters {
                        let _ = w.send(Ok(()));
                    }
                }
            }
            Event::Failed { key, error } => {
                if let Some((_, waiters)) = self.pending.remove(&key) {
                    for w in waiters {
                        let _ = w.send(Err(error.clone()));
                    }
                } else if self.listeners.contains_key(&key) {
                    tracing::error!(owner = ?self.scope, %key, %error, "the restarted egress proxy cannot listen again");
                }
            }
            Event::Attempt(w) => {
                self.start.bytes_used = self.start.bytes_used.saturating_add(w.bytes_up).saturating_add(w.bytes_down);
                if let Some(sink) = &self.sink {
                    sink(&self.scope, &(*w).into_record());
                }
            }
        }
        Ok(())
    }

    /// Starts a child, restores the listeners and sends what is pending, then relays until the
    /// child dies or the owner stops.
    async fn run_child(&mut self, inbox: &mut mpsc::UnboundedReceiver<ListenReq>, stop: &CancellationToken) -> Ended {
        let mut cmd = Command::new(&self.exe);
        // Nothing of the gateway's environment (operator tokens, secrets) reaches the child, nor
        // any descriptor but the three pipes (std opens everything close-on-exec, and the
        // child closes whatever leaked through anyway); its own process group keeps a terminal's
        // ^C for the gateway, which stops it in order.
        cmd.arg(CHILD_ARG)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let mut child = match self.spawner.spawn(cmd).await {
            Ok(c) => c,
            Err(e) => return Ended::Died(format!("cannot run `{} {CHILD_ARG}`: {e}", self.exe.display())),
        };
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Ended::Died("the egress proxy was started without pipes".into());
        };
        let mut out = FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE));
        let mut err = FramedRead::new(stderr, LinesCodec::new_with_max_length(4096));
        let mut tail = VecDeque::new();
        let mut lines = vec![Control::Start(self.start.clone())];
        lines.extend(self.listeners.values().cloned().map(Control::Listen));
        lines.extend(self.pending.values().map(|(l, _)| Control::Listen(l.clone())));
        for c in &lines {
            // A child that is gone fails the write; its stdout then ends and says why.
            if send(&mut stdin, c).await.is_err() {
                break;
            }
        }
        let mut err_open = true;
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    self.stop_child(child, stdin, &mut out).await;
                    return Ended::Stopped;
                }
                req = inbox.recv() => match req {
                    Some(req) => {
                        if let Some(listen) = self.queue(req) {
                            let _ = send(&mut stdin, &Control::Listen(listen)).await;
                        }
                    }
                    None => {
                        self.stop_child(child, stdin, &mut out).await;
                        return Ended::Stopped;
                    }
                },
                line = out.next() => match line {
                    Some(Ok(line)) => {
                        if let Err(e) = self.on_event(&line) {
                            let _ = child.kill().await;
                            return Ended::Died(format!("the egress proxy sent a malformed line ({e})"));
                        }
                    }
                    Some(Err(e)) => {
                        let _ = child.kill().await;
                        return Ended::Died(format!("the egress proxy's output is unreadable ({e})"));
                    }
                    None => {
                        // Its stdout closed: the child is exiting. What it said last is on stderr.
                        let status = match tokio::time::timeout(Duration::from_secs(2), child.wait()).await {
                            Ok(Ok(s)) => s.to_string(),
                            _ => {
                                let _ = child.kill().await;
                                "killed after closing its output".into()
                            }
                        };
                        if err_open {
                            let rest = async {
                                while let Some(Ok(l)) = err.next().await {
                                    push_tail(&mut tail, l);
                                }
                            };
                            let _ = tokio::time::timeout(Duration::from_secs(1), rest).await;
                        }
                        let said: Vec<String> = tail.into_iter().collect();
                        let said = if said.is_empty() { String::new() } else { format!(": {}", said.join(" / ")) };
                        return Ended::Died(format!("the egress proxy exited ({status}){said}"));
                    }
                },
                line = err.next(), if err_open => match line {
                    Some(Ok(l)) => {
                        tracing::warn!(owner = ?self.scope, "egress proxy: {l}");
                        push_tail(&mut tail, l);
                    }
                    _ => err_open = false,
                },
            }
        }
    }

    /// Closes the child's stdin (it stops its listeners, which cuts their connections and
    /// removes their sockets), relays the attempts it still reports, and kills it if it takes
    /// longer than [`STOP_GRACE`].
    async fn stop_child(&mut self, mut child: Child, stdin: ChildStdin, out: &mut FramedRead<ChildStdout, LinesCodec>) {
        drop(stdin);
        let drain = async {
            while let Some(Ok(line)) = out.next().await {
                let _ = self.on_event(&line);
            }
        };
        let _ = tokio::time::timeout(STOP_GRACE, drain).await;
        if !matches!(tokio::time::timeout(Duration::from_millis(200), child.wait()).await, Ok(Ok(_))) {
            let _ = child.kill().await;
        }
    }
}

fn push_tail(tail: &mut VecDeque<String>, line: String) {
    tail.push_back(line);
    if tail.len() > 4 {
        tail.pop_front();
    }
}

impl EgressOptions {
    /// The options `[egress]` asks for, or an error naming the bad entry.
    pub fn from_settings(s: &EgressSettings) -> Result<Self, String> {
        let resolvers = s
            .resolvers
            .iter()
            .map(|r| r.parse().map_err(|e| format!("`egress.resolvers` entry `{r}` is not an ip:port ({e})")))
            .collect::<Result<_, _>>()?;
        let dangerously_allow_private = s
            .dangerously_allow_private
            .iter()
            .map(|c| c.parse().map_err(|e| format!("`egress.dangerously_allow_private` entry `{c}`: {e}")))
            .collect::<Result<_, _>>()?;
        let d = EgressLimits::default();
        // Values are read as TOML values and checked here, so a wrong type is reported with the
        // entry's name too, not only its position.
        let int_in = |name: &str, v: &toml::Value, max: i64| match v {
            toml::Value::Integer(n) if (1..=max).contains(n) => Ok(*n as u64),
            v => Err(format!("`egress.{name}` must be a whole number between 1 and {max}, not {v}")),
        };
        let max_connections = match &s.max_connections {
            None => d.max_connections,
            Some(v) => int_in("max_connections", v, 100_000)? as usize,
        };
        let max_bytes = match &s.max_bytes {
            None => d.max_bytes,
            Some(toml::Value::Integer(n)) if *n > 0 => Some(*n as u64),
            Some(toml::Value::String(s)) if s == "unlimited" => None,
            Some(v) => {
                return Err(format!("`egress.max_bytes` must be a positive number of bytes or \"unlimited\", not {v}"));
            }
        };
        let idle_timeout = match &s.idle_timeout_s {
            None => d.idle_timeout,
            Some(v) => std::time::Duration::from_secs(int_in("idle_timeout_s", v, 86_400)?),
        };
        let limits = EgressLimits { max_connections, max_bytes, idle_timeout };
        Ok(EgressOptions { resolvers, dangerously_allow_private, limits, proxy_exe: None })
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

    /// `socket_for` with `exe` as the proxy: the error, and how long it took.
    async fn start_with(exe: &std::path::Path) -> (String, Duration) {
        let exe = exe.to_path_buf();
        // As the gateway calls it: from a task on the runtime.
        tokio::spawn(async move { start_blocking(&exe) }).await.unwrap()
    }

    fn start_blocking(exe: &std::path::Path) -> (String, Duration) {
        let tmp = tempfile::tempdir().unwrap();
        let options = EgressOptions { proxy_exe: Some(exe.to_path_buf()), ..EgressOptions::default() };
        let egress = Egress::with_options(tmp.path().join("egress"), options);
        let began = Instant::now();
        let err = egress.socket_for(&NetScope::Shared, &["api.example.test".into()]).unwrap_err();
        (err, began.elapsed())
    }

    fn script(dir: &std::path::Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("proxy.sh");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// A proxy that cannot start, dies at start, or answers nonsense is reported at once with
    /// what went wrong, not after a timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_child_that_cannot_start_or_breaks_the_protocol_is_a_clear_error_not_a_hang() {
        let tmp = tempfile::tempdir().unwrap();
        let (err, took) = start_with(&tmp.path().join("missing")).await;
        assert!(
            err.starts_with("cannot start the egress proxy: cannot run `") && err.contains("No such file"),
            "{err}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");

        let dies = script(tmp.path(), "read start; echo 'axp __egress-proxy: error: no luck today' >&2; exit 2");
        let (err, took) = start_with(&dies).await;
        assert!(
            err.contains("the egress proxy exited (exit status: 2): axp __egress-proxy: error: no luck today"),
            "{err}"
        );
        assert!(took < Duration::from_secs(5), "{took:?}");

        let babbles = script(tmp.path(), "read start; echo 'this is not an event'; sleep 30");
        let (err, took) = start_with(&babbles).await;
        assert!(err.contains("the egress proxy sent a malformed line ("), "{err}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}
