//! Self-confinement for the gateway's own helper processes that must keep the host's network:
//! today the per-owner egress proxy (`axp __egress-proxy`). Such a helper parses bytes from
//! sandboxed jobs, so it gets what this host allows short of a namespace: no inherited
//! descriptors, death with its parent, no capabilities, no new privileges, a Landlock domain
//! that can write only below its own directories and read only the files it names (and can bind
//! no TCP port, reach no abstract unix socket and signal nobody outside itself), and the
//! sandbox's seccomp allow list, and no `execve`.
//!
//! Why not [`crate::command`]: every policy it compiles puts the process in a network namespace
//! with loopback only, and the proxy needs the host's network to reach upstreams. The helper
//! therefore confines itself, in its own `main`, before it starts any thread; nothing here runs
//! in the gateway. Like the rest of this crate it knows nothing about tokio or the proxy.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::probe::{MAX_LANDLOCK_ABI, landlock_abi};

/// What a helper may touch once confined.
#[derive(Debug, Clone, Default)]
pub struct HelperPolicy {
    /// Directories the helper may create, write and remove files and sockets below.
    pub write_dirs: Vec<PathBuf>,
    /// Files (or directories) the helper may read, e.g. `/etc/resolv.conf` for its resolver.
    pub read_paths: Vec<PathBuf>,
}

/// What [`confine`] could apply on this host. Each layer that is missing says why, so the caller
/// can report it instead of stating a guarantee the kernel does not give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    /// Capabilities dropped (effective, permitted, inheritable, bounding, ambient).
    pub capabilities_dropped: bool,
    /// `fully enforced (ABI n)`, `partially enforced (ABI n)`, or why not.
    pub landlock: String,
    /// Whether the seccomp filters are installed.
    pub seccomp: bool,
}

impl std::fmt::Display for Confinement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "landlock {}; seccomp {}; capabilities {}",
            self.landlock,
            if self.seccomp { "on" } else { "off" },
            if self.capabilities_dropped { "dropped" } else { "kept" }
        )
    }
}

/// The first thing a helper's `main` calls, before it opens anything or starts a thread: dies
/// with the thread that spawned it (`PR_SET_PDEATHSIG`, SIGKILL; the parent must spawn it from a
/// long-lived thread) and closes every descriptor above stderr it inherited (a gateway started
/// by a parent that leaked descriptors would otherwise pass them on). Returns how many it
/// closed.
pub fn early() -> usize {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let inherited: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(d) => d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).filter(|fd| *fd > 2).collect(),
        Err(_) => Vec::new(),
    };
    // The directory handle used for the listing is closed by now (it is among `inherited`, and
    // closing it again fails harmlessly with EBADF).
    let mut closed = 0;
    for fd in inherited {
        // SAFETY: called first in `main`, single-threaded: nothing in this process owns or
        // borrows a descriptor above 2 yet, so closing them cannot invalidate a live handle.
        if unsafe { libc::close(fd) } == 0 {
            closed += 1;
        }
    }
    closed
}

/// Confines the calling thread and every thread and process it creates later (call it before
/// starting any thread). Layers the kernel lacks are skipped and reported; a layer that fails
/// for another reason is an error.
pub fn confine(policy: &HelperPolicy) -> Result<Confinement, String> {
    // SAFETY: setrlimit reads a local struct. A helper has nothing worth a core dump, and a core
    // file would be written outside its Landlock domain anyway.
    unsafe {
        let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &zero);
    }
    // A gateway running as root would otherwise hand its capabilities on. Securebits are left
    // alone: they need CAP_SETPCAP, and this process can never execve (seccomp, Landlock).
    let capabilities_dropped = crate::exec::drop_capabilities(false).is_ok();
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!("PR_SET_NO_NEW_PRIVS: {}", std::io::Error::last_os_error()));
    }
    let landlock = restrict(policy)?;
    let mut filters = crate::seccomp::filters()?;
    filters.push(no_exec_filter()?);
    for f in &filters {
        seccompiler::apply_filter(f).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(Confinement { capabilities_dropped, landlock, seccomp: true })
}

/// Landlock: writes only below `write_dirs`, reads only `read_paths`, no execution anywhere, no
/// TCP bind (ABI >= 4; outgoing connects stay open: upstreams use any granted port), abstract
/// unix sockets and signals scoped (ABI >= 6).
fn restrict(policy: &HelperPolicy) -> Result<String, String> {
    let n = match landlock_abi() {
        Ok(n) if n > 0 => n.min(MAX_LANDLOCK_ABI),
        Ok(_) => return Ok("unavailable".into()),
        Err(why) => return Ok(format!("unavailable ({why})")),
    };
    let abi = crate::landlock_rules::abi_of(n);
    fn e(what: &'static str) -> impl Fn(landlock::RulesetError) -> String {
        move |err| format!("landlock {what}: {err}")
    }
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(e("handle fs"))?;
    if n >= 4 {
        rs = rs.handle_access(AccessNet::BindTcp).map_err(e("handle net"))?;
    }
    if n >= 6 {
        rs = rs.scope(Scope::AbstractUnixSocket | Scope::Signal).map_err(e("scope"))?;
    }
    let mut rs = rs.create().map_err(e("create"))?;
    let fd = |p: &Path| PathFd::new(p).map_err(|err| format!("landlock open {}: {err}", p.display()));
    let write = AccessFs::from_all(abi) & !AccessFs::Execute;
    for d in &policy.write_dirs {
        rs = rs.add_rule(PathBeneath::new(fd(d)?, write)).map_err(e("rule write"))?;
    }
    for p in policy.read_paths.iter().filter(|p| p.exists()) {
        let access = if p.is_dir() { AccessFs::from_read(abi) & !AccessFs::Execute } else { AccessFs::ReadFile.into() };
        rs = rs.add_rule(PathBeneath::new(fd(p)?, access)).map_err(e("rule read"))?;
    }
    let status = rs.restrict_self().map_err(e("restrict_self"))?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => format!("fully enforced (ABI {n})"),
        RulesetStatus::PartiallyEnforced => format!("partially enforced (ABI {n})"),
        RulesetStatus::NotEnforced => "not enforced".into(),
    })
}

/// `execve` and `execveat` fail with EPERM: a helper never starts another program.
fn no_exec_filter() -> Result<seccompiler::BpfProgram, String> {
    use std::collections::BTreeMap;
    let mut deny: BTreeMap<i64, Vec<seccompiler::SeccompRule>> = BTreeMap::new();
    deny.insert(libc::SYS_execve, Vec::new());
    deny.insert(libc::SYS_execveat, Vec::new());
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp arch: {e}"))?;
    let f = seccompiler::SeccompFilter::new(
        deny,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    seccompiler::BpfProgram::try_from(f).map_err(|e| format!("seccomp compile: {e}"))
}
