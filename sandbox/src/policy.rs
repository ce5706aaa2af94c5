//! The compiled sandbox policy: pure data that the supervisor builds from a session's grants and
//! hands to the `__sandbox-exec` process, plus its byte encoding.
//!
//! This module owns *what* is allowed; it performs no I/O and never touches the kernel
//! (enforcement lives in `exec`). The agent never authors a `Policy`: the gateway compiles one
//! with [`PolicyBuilder`] from capabilities it has already verified.
//!
//! Encoding: a small hand-written, length-prefixed binary format (magic `AXPSBX3`, then each field
//! in a fixed order; byte strings as `u32` length + bytes, integers as little-endian `u64`). It is
//! hand-rolled because the enforcement path may depend on libc, landlock and seccompiler only (no
//! serde), paths and environment values are arbitrary non-NUL bytes (not UTF-8), and a fixed field
//! order with an explicit version makes a truncated or foreign blob fail loudly instead of being
//! half-read. The version is part of the magic: a blob of another version (`AXPSBX1` had no
//! hidden paths, `AXPSBX2` no nice value) is refused, never read with the wrong field order.
//! [`Policy::to_env_value`] hex-encodes it so it can travel in one environment variable.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Environment variable that carries the hex-encoded policy from [`crate::command`] to
/// [`crate::exec_main`]. It is the only variable the exec process receives and it is never passed
/// on to the target, whose environment is exactly [`Policy::env`].
pub const POLICY_ENV: &str = "AXP_SANDBOX_POLICY";

/// The workspace's one default `PATH`: what a sandboxed target gets when its environment names
/// none ([`Policy::builder`], the `execvp`-style lookup in `__sandbox-exec`), where
/// [`crate::discover::find_program`] looks when not given one, and what the gateway's command
/// jobs and the providers' tools start from when their configuration sets none. It is the
/// conventional root `PATH` of a Linux system, `sbin` directories included, so a program
/// installed only there resolves as it does in an operator's shell; and it holds every directory
/// of the shorter `/usr/local/bin:/usr/bin:/bin`, in the same order, so nothing that resolved on
/// that one stops resolving. It grants nothing: which of these directories a sandboxed process
/// can see is the policy's decision, not the `PATH`'s.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const MAGIC: &[u8; 8] = b"AXPSBX3\0";

/// How the sandboxed process may reach the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetPolicy {
    /// A fresh network namespace with only `lo`; nothing outside is reachable, and Landlock
    /// (ABI >= 4) refuses every TCP connect.
    None,
    /// As `None`, plus a forwarder listening on `127.0.0.1:listen_port` inside the namespace that
    /// relays each TCP connection to the host's egress proxy at the pathname unix socket
    /// `unix_socket`. The proxy environment variables point at it, and Landlock allows TCP
    /// connect to `listen_port` only.
    Proxy {
        /// Host path of the egress proxy's unix socket; its directory is bound read-only inside.
        unix_socket: PathBuf,
        /// Loopback port of the in-namespace forwarder (and of the proxy variables).
        listen_port: u16,
    },
}

/// Resource limits applied with `setrlimit` (and cgroup v2 where delegated). `None` leaves the
/// inherited limit in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum number of processes: `RLIMIT_NPROC`, the pid namespace's `pid_max` (never below
    /// the kernel minimum of 301) and cgroup `pids.max` when delegated.
    pub procs: Option<u64>,
    /// Maximum private writable memory per process in bytes (`RLIMIT_DATA`, which unlike
    /// `RLIMIT_AS` does not count address space that runtimes merely reserve), and cgroup
    /// `memory.max` when delegated.
    pub memory: Option<u64>,
    /// Largest file a process may write, in bytes (`RLIMIT_FSIZE`).
    pub file_size: Option<u64>,
    /// Maximum open file descriptors (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// CPU seconds per process (`RLIMIT_CPU`).
    pub cpu_secs: Option<u64>,
    /// The tree's nice value (0–19, `setpriority`): a lower CPU priority than whoever started
    /// it, for work that must yield the CPUs when they are contended. The seccomp filter stops
    /// the tree from changing it back. `None` keeps the parent's.
    pub nice: Option<u64>,
}

impl Default for Limits {
    /// Defaults generous enough for interpreters and package managers, small enough to stop a
    /// runaway job: 256 processes, 2 GiB data, 1 GiB files, 1024 fds, no CPU limit.
    fn default() -> Self {
        Limits {
            procs: Some(256),
            memory: Some(2 << 30),
            file_size: Some(1 << 30),
            open_files: Some(1024),
            cpu_secs: None,
            nice: None,
        }
    }
}

/// The compiled policy for one sandboxed process tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The workspace root, bound at the same absolute path inside.
    pub workspace: PathBuf,
    /// Whether the workspace is bound read-write (else read-only).
    pub workspace_writable: bool,
    /// Extra host paths bound read-only at the same path (interpreter installs, config files).
    pub read_only: Vec<PathBuf>,
    /// Extra host paths bound read-write at the same path.
    pub read_write: Vec<PathBuf>,
    /// Host paths that must not be visible inside even where a bound path contains them. Each
    /// is resolved on the host and, wherever it is visible inside, covered by an empty
    /// read-only mask (an empty directory, or an empty file for anything else). Grants below a
    /// hidden path are still bound, on top of its mask; a grant of the hidden path itself is
    /// masked with it.
    pub hide: Vec<PathBuf>,
    /// The child's complete environment, in order; nothing is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory inside the sandbox.
    pub cwd: PathBuf,
    /// Resource limits.
    pub limits: Limits,
    /// Size of the private `/tmp` (and `/dev/shm`) tmpfs in bytes.
    pub tmp_size: u64,
    /// Network reachability.
    pub net: NetPolicy,
    /// Whether a private devpts (`/dev/pts`, `/dev/ptmx`) is mounted so the job can open PTYs,
    /// and a terminal passed as stdin becomes the target's controlling terminal (PTY jobs).
    pub allow_pty: bool,
}

/// Why a policy could not be built or decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyError {
    /// A path was not absolute, contained `..`, or contained a NUL byte.
    BadPath {
        /// The offending path.
        path: PathBuf,
        /// Why it was refused.
        reason: &'static str,
    },
    /// An environment entry had an empty name, `=` in its name, or a NUL byte.
    BadEnv {
        /// The offending variable name.
        name: OsString,
    },
    /// The working directory is not inside any path the sandbox can see.
    CwdNotVisible(PathBuf),
    /// The encoded policy is malformed (truncated, wrong magic, bad hex, trailing bytes).
    Decode(&'static str),
    /// A nice value outside 0–19.
    BadNice(u64),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::BadPath { path, reason } => {
                write!(f, "invalid sandbox path `{}`: {reason}", path.display())
            }
            PolicyError::BadEnv { name } => {
                write!(f, "invalid environment variable name {name:?}")
            }
            PolicyError::BadNice(n) => write!(f, "nice value {n} is outside 0-19"),
            PolicyError::CwdNotVisible(p) => {
                write!(f, "working directory `{}` is not inside the workspace or a granted path", p.display())
            }
            PolicyError::Decode(why) => write!(f, "malformed sandbox policy: {why}"),
        }
    }
}

impl std::error::Error for PolicyError {}

fn check_path(p: &Path) -> Result<PathBuf, PolicyError> {
    let bad = |reason| Err(PolicyError::BadPath { path: p.to_path_buf(), reason });
    if !p.is_absolute() {
        return bad("not absolute");
    }
    if p.as_os_str().as_bytes().contains(&0) {
        return bad("contains a NUL byte");
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => return bad("contains `..`"),
            Component::Prefix(_) => return bad("has a prefix"),
        }
    }
    if out == Path::new("/") {
        return bad("the root directory cannot be granted");
    }
    if RESERVED.iter().any(|r| out.starts_with(r)) {
        return bad("/proc, /dev and /sys are managed by the sandbox");
    }
    Ok(out)
}

/// Paths the sandbox builds itself; no grant may name them.
pub(crate) const RESERVED: [&str; 3] = ["/proc", "/dev", "/sys"];

/// Builds a [`Policy`] from capability-like inputs: the workspace, `fs.read` / `fs.write` paths,
/// network on (through the proxy) or off, PTY on or off.
#[derive(Debug, Clone)]
pub struct PolicyBuilder {
    workspace: PathBuf,
    workspace_writable: bool,
    reads: Vec<PathBuf>,
    writes: Vec<PathBuf>,
    hide: Vec<PathBuf>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    limits: Limits,
    tmp_size: u64,
    net: NetPolicy,
    allow_pty: bool,
}

impl Policy {
    /// Starts a policy for `workspace` (read-only until [`PolicyBuilder::fs_write`] covers it),
    /// with no network, no PTY, default limits, a 64 MiB `/tmp` and the environment
    /// `PATH=`[`DEFAULT_PATH`], `HOME=/tmp`, `LANG=C.UTF-8`.
    pub fn builder(workspace: impl Into<PathBuf>) -> PolicyBuilder {
        PolicyBuilder {
            workspace: workspace.into(),
            workspace_writable: false,
            reads: Vec::new(),
            writes: Vec::new(),
            hide: Vec::new(),
            env: vec![
                ("PATH".into(), DEFAULT_PATH.into()),
                ("HOME".into(), "/tmp".into()),
                ("LANG".into(), "C.UTF-8".into()),
            ],
            cwd: None,
            limits: Limits::default(),
            tmp_size: 64 << 20,
            net: NetPolicy::None,
            allow_pty: false,
        }
    }
}

impl PolicyBuilder {
    /// Grants read access below `path` (`fs.read(PATH)`); inside the workspace this is implied.
    pub fn fs_read(mut self, path: impl Into<PathBuf>) -> Self {
        self.reads.push(path.into());
        self
    }

    /// Grants read-write access below `path` (`fs.write(PATH)`); the workspace itself becomes
    /// writable when `path` is the workspace root.
    pub fn fs_write(mut self, path: impl Into<PathBuf>) -> Self {
        self.writes.push(path.into());
        self
    }

    /// Hides `path` (and everything below it) even where the workspace or a grant contains it:
    /// it is covered by an empty read-only mask inside. Grants below it stay visible on top of
    /// the mask, so `.hide(state).fs_read(state.join("codemode/job"))` shows only that job's
    /// directory of `state`.
    pub fn hide(mut self, path: impl Into<PathBuf>) -> Self {
        self.hide.push(path.into());
        self
    }

    /// Network off (`false`, the default) or through the egress proxy at `unix_socket`,
    /// reachable inside on `127.0.0.1:listen_port` (`true` via [`Self::net_proxy`]).
    pub fn net_proxy(mut self, unix_socket: impl Into<PathBuf>, listen_port: u16) -> Self {
        self.net = NetPolicy::Proxy { unix_socket: unix_socket.into(), listen_port };
        self
    }

    /// Sets the network policy directly.
    pub fn net(mut self, net: NetPolicy) -> Self {
        self.net = net;
        self
    }

    /// Whether the job may open pseudo-terminals (`pty.open`).
    pub fn pty(mut self, allow: bool) -> Self {
        self.allow_pty = allow;
        self
    }

    /// Sets (or replaces) one environment variable of the child.
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        let name = name.into();
        self.env.retain(|(n, _)| *n != name);
        self.env.push((name, value.into()));
        self
    }

    /// Removes every environment variable, including the defaults.
    pub fn clear_env(mut self) -> Self {
        self.env.clear();
        self
    }

    /// Working directory inside the sandbox (default: the workspace).
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Resource limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Size of the private `/tmp` in bytes.
    pub fn tmp_size(mut self, bytes: u64) -> Self {
        self.tmp_size = bytes;
        self
    }

    /// Validates every path and variable and produces the policy.
    pub fn build(self) -> Result<Policy, PolicyError> {
        let workspace = check_path(&self.workspace)?;
        let mut workspace_writable = self.workspace_writable;
        let mut read_write = Vec::new();
        for w in &self.writes {
            let w = check_path(w)?;
            if w == workspace {
                workspace_writable = true;
            } else if !read_write.contains(&w) {
                read_write.push(w);
            }
        }
        let mut hide = Vec::new();
        for h in &self.hide {
            let h = check_path(h)?;
            if !hide.contains(&h) {
                hide.push(h);
            }
        }
        let mut read_only = Vec::new();
        for r in &self.reads {
            let r = check_path(r)?;
            // A read below a hidden path is not covered by the grant above it: the mask hides it
            // there, so it needs its own bind on top of the mask.
            let covered = (r.starts_with(&workspace) || read_write.iter().any(|w| r.starts_with(w)))
                && !hide.iter().any(|h| r.starts_with(h));
            if !covered && !read_only.contains(&r) {
                read_only.push(r);
            }
        }
        for (name, value) in &self.env {
            let n = name.as_bytes();
            if n.is_empty() || n.contains(&b'=') || n.contains(&0) || value.as_bytes().contains(&0) {
                return Err(PolicyError::BadEnv { name: name.clone() });
            }
        }
        let cwd = match &self.cwd {
            Some(c) => check_path(c)?,
            None => workspace.clone(),
        };
        let visible = cwd.starts_with(&workspace)
            || cwd.starts_with("/tmp")
            || read_only.iter().chain(&read_write).any(|p| cwd.starts_with(p));
        if !visible {
            return Err(PolicyError::CwdNotVisible(cwd));
        }
        if let NetPolicy::Proxy { unix_socket, .. } = &self.net {
            check_path(unix_socket)?;
        }
        if let Some(n) = self.limits.nice.filter(|n| *n > 19) {
            return Err(PolicyError::BadNice(n));
        }
        Ok(Policy {
            workspace,
            workspace_writable,
            read_only,
            read_write,
            hide,
            env: self.env,
            cwd,
            limits: self.limits,
            tmp_size: self.tmp_size,
            net: self.net,
            allow_pty: self.allow_pty,
        })
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(&(b.len() as u32).to_le_bytes());
        self.0.extend_from_slice(b);
    }
    fn path(&mut self, p: &Path) {
        self.bytes(p.as_os_str().as_bytes());
    }
    fn opt(&mut self, v: Option<u64>) {
        match v {
            Some(v) => {
                self.0.push(1);
                self.u64(v);
            }
            None => self.0.push(0),
        }
    }
    fn paths(&mut self, ps: &[PathBuf]) {
        self.u64(ps.len() as u64);
        for p in ps {
            self.path(p);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], PolicyError> {
        if self.0.len() < n {
            return Err(PolicyError::Decode("truncated"));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, PolicyError> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, PolicyError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn bytes(&mut self) -> Result<&'a [u8], PolicyError> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        let n = u32::from_le_bytes(b) as usize;
        self.take(n)
    }
    fn os(&mut self) -> Result<OsString, PolicyError> {
        let b = self.bytes()?;
        if b.contains(&0) {
            return Err(PolicyError::Decode("NUL byte in a string"));
        }
        Ok(OsString::from_vec(b.to_vec()))
    }
    fn path(&mut self) -> Result<PathBuf, PolicyError> {
        let p = PathBuf::from(self.os()?);
        if !p.is_absolute() {
            return Err(PolicyError::Decode("relative path"));
        }
        Ok(p)
    }
    fn count(&mut self) -> Result<usize, PolicyError> {
        let n = self.u64()?;
        // Every element takes at least four bytes, which bounds a forged count.
        if n > (self.0.len() / 4) as u64 {
            return Err(PolicyError::Decode("element count exceeds the data"));
        }
        Ok(n as usize)
    }
    fn paths(&mut self) -> Result<Vec<PathBuf>, PolicyError> {
        let n = self.count()?;
        (0..n).map(|_| self.path()).collect()
    }
    fn opt(&mut self) -> Result<Option<u64>, PolicyError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.u64()?)),
            _ => Err(PolicyError::Decode("bad option tag")),
        }
    }
    fn bool(&mut self) -> Result<bool, PolicyError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(PolicyError::Decode("bad boolean")),
        }
    }
}

impl Policy {
    /// Encodes the policy in the format described in the module documentation.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(MAGIC.to_vec());
        w.path(&self.workspace);
        w.0.push(self.workspace_writable as u8);
        w.paths(&self.read_only);
        w.paths(&self.read_write);
        w.paths(&self.hide);
        w.u64(self.env.len() as u64);
        for (k, v) in &self.env {
            w.bytes(k.as_bytes());
            w.bytes(v.as_bytes());
        }
        w.path(&self.cwd);
        let l = &self.limits;
        for v in [l.procs, l.memory, l.file_size, l.open_files, l.cpu_secs, l.nice] {
            w.opt(v);
        }
        w.u64(self.tmp_size);
        match &self.net {
            NetPolicy::None => w.0.push(0),
            NetPolicy::Proxy { unix_socket, listen_port } => {
                w.0.push(1);
                w.path(unix_socket);
                w.u64(u64::from(*listen_port));
            }
        }
        w.0.push(self.allow_pty as u8);
        w.0
    }

    /// Decodes bytes produced by [`Policy::encode`]; anything else is an error.
    pub fn decode(bytes: &[u8]) -> Result<Policy, PolicyError> {
        let mut r = Reader(bytes);
        if r.take(MAGIC.len())? != MAGIC {
            return Err(PolicyError::Decode("wrong magic or version"));
        }
        let workspace = r.path()?;
        let workspace_writable = r.bool()?;
        let read_only = r.paths()?;
        let read_write = r.paths()?;
        let hide = r.paths()?;
        let n = r.count()?;
        let mut env = Vec::with_capacity(n);
        for _ in 0..n {
            let k = r.os()?;
            let v = r.os()?;
            if k.is_empty() || k.as_bytes().contains(&b'=') {
                return Err(PolicyError::Decode("bad environment name"));
            }
            env.push((k, v));
        }
        let cwd = r.path()?;
        let limits = Limits {
            procs: r.opt()?,
            memory: r.opt()?,
            file_size: r.opt()?,
            open_files: r.opt()?,
            cpu_secs: r.opt()?,
            nice: r.opt()?,
        };
        if limits.nice.is_some_and(|n| n > 19) {
            return Err(PolicyError::Decode("nice out of range"));
        }
        let tmp_size = r.u64()?;
        let net = match r.u8()? {
            0 => NetPolicy::None,
            1 => {
                let unix_socket = r.path()?;
                let port = r.u64()?;
                let listen_port = u16::try_from(port).map_err(|_| PolicyError::Decode("port out of range"))?;
                NetPolicy::Proxy { unix_socket, listen_port }
            }
            _ => return Err(PolicyError::Decode("bad network tag")),
        };
        let allow_pty = r.bool()?;
        if !r.0.is_empty() {
            return Err(PolicyError::Decode("trailing bytes"));
        }
        Ok(Policy {
            workspace,
            workspace_writable,
            read_only,
            read_write,
            hide,
            env,
            cwd,
            limits,
            tmp_size,
            net,
            allow_pty,
        })
    }

    /// The encoding as lowercase hex, for the [`POLICY_ENV`] variable.
    pub fn to_env_value(&self) -> OsString {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = self.encode();
        let mut out = Vec::with_capacity(bytes.len() * 2);
        for b in bytes {
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        }
        OsString::from_vec(out)
    }

    /// Decodes the value of [`POLICY_ENV`].
    pub fn from_env_value(v: &OsStr) -> Result<Policy, PolicyError> {
        let s = v.as_bytes();
        if !s.len().is_multiple_of(2) {
            return Err(PolicyError::Decode("odd hex length"));
        }
        let nib = |c: u8| match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'a'..=b'f' => Ok(c - b'a' + 10),
            _ => Err(PolicyError::Decode("bad hex digit")),
        };
        let bytes =
            s.chunks(2).map(|p| Ok((nib(p[0])? << 4) | nib(p[1])?)).collect::<Result<Vec<u8>, PolicyError>>()?;
        Policy::decode(&bytes)
    }

    /// The environment the target actually receives: [`Policy::env`] plus, with
    /// [`NetPolicy::Proxy`], the proxy variables (upper and lower case) and an empty `NO_PROXY`
    /// so nothing bypasses the proxy.
    pub fn effective_env(&self) -> Vec<(OsString, OsString)> {
        let mut env = self.env.clone();
        if let NetPolicy::Proxy { listen_port, .. } = &self.net {
            let url = format!("http://127.0.0.1:{listen_port}");
            for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
                for n in [name.to_string(), name.to_ascii_lowercase()] {
                    env.retain(|(k, _)| k.as_bytes() != n.as_bytes());
                    env.push((n.into(), url.clone().into()));
                }
            }
            for n in ["NO_PROXY", "no_proxy"] {
                env.retain(|(k, _)| k.as_bytes() != n.as_bytes());
                env.push((n.into(), OsString::new()));
            }
        }
        env
    }
}
