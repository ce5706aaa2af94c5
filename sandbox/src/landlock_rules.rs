//! Landlock rules that mirror the mount tree: read and execute everywhere below `/` (which only
//! holds what the policy exposes), full access below the writable grants, `/tmp` and `/dev/shm`,
//! file access to the device nodes, TCP connect only to the egress forwarder's port (ABI >= 4),
//! and scoping of abstract unix sockets and signals (ABI >= 6).
//!
//! Applied by the target process itself just before seccomp and execve; it must not be called in
//! any other process (Landlock domains are per thread and inherited by children).
//!
//! A rule goes on the very directory that was mounted, never on what a symlink points to: the
//! writable grants' rules use the descriptors of the mounted clones themselves (kept from
//! `mounts::build_root`), and the sandbox's own paths (`/`, `/tmp`, `/dev/shm`, the devices) are
//! opened one component at a time without following a symlink.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::policy::{NetPolicy, Policy};
use crate::probe::{MAX_LANDLOCK_ABI, landlock_abi};

pub(crate) fn abi_of(n: u32) -> ABI {
    match n {
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        _ => ABI::V6,
    }
}

/// Opens a path the sandbox laid out itself, never through a symlink; `None` if it is absent.
fn open_exact(root: &OwnedFd, p: &Path) -> Result<Option<OwnedFd>, String> {
    match crate::mounts::walk(root.as_fd(), p, None) {
        Ok((_, libc::S_IFLNK)) => Err(format!("landlock: {} is a symbolic link", p.display())),
        Ok((fd, _)) => Ok(Some(fd)),
        Err(crate::mounts::Refusal::Missing(_)) => Ok(None),
        Err(e) => Err(format!("landlock open {}: {e:?}", p.display())),
    }
}

/// Restricts the calling thread (and its future children) with the policy's Landlock ruleset,
/// at the best ABI the kernel offers (capped at [`MAX_LANDLOCK_ABI`]). `writable` holds the
/// mounted writable grants (the workspace when writable, and every `read_write` path). Fails
/// unless the ruleset is fully enforced.
pub(crate) fn restrict(policy: &Policy, writable: &[OwnedFd]) -> Result<(), String> {
    let n = landlock_abi()?.min(MAX_LANDLOCK_ABI);
    if n == 0 {
        return Err("Landlock is unavailable".into());
    }
    let abi = abi_of(n);
    fn e(what: &'static str) -> impl Fn(landlock::RulesetError) -> String {
        move |err| format!("landlock {what}: {err}")
    }
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(e("handle fs"))?;
    if n >= 4 {
        rs = rs.handle_access(AccessNet::ConnectTcp).map_err(e("handle net"))?;
    }
    if n >= 6 {
        rs = rs.scope(Scope::AbstractUnixSocket | Scope::Signal).map_err(e("scope"))?;
    }
    let mut rs = rs.create().map_err(e("create"))?;
    let root = crate::mounts::open_dir("/")?;

    rs = rs.add_rule(PathBeneath::new(root.as_fd(), AccessFs::from_read(abi))).map_err(e("rule /"))?;
    for p in ["/tmp", "/dev/shm"] {
        let fd = open_exact(&root, Path::new(p))?.ok_or_else(|| format!("landlock: {p} is missing"))?;
        rs = rs.add_rule(PathBeneath::new(fd, AccessFs::from_all(abi))).map_err(e("rule rw"))?;
    }
    for fd in writable {
        rs = rs.add_rule(PathBeneath::new(fd.as_fd(), AccessFs::from_all(abi))).map_err(e("rule rw"))?;
    }
    let mut devices = vec!["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"];
    if policy.allow_pty {
        devices.push("/dev/pts");
    }
    for d in devices {
        let Some(fd) = open_exact(&root, Path::new(d))? else { continue };
        let access = if d == "/dev/pts" {
            AccessFs::from_read(abi) | AccessFs::from_file(abi)
        } else {
            AccessFs::from_file(abi)
        };
        rs = rs.add_rule(PathBeneath::new(fd, access)).map_err(e("rule dev"))?;
    }
    if let (true, NetPolicy::Proxy { listen_port, .. }) = (n >= 4, &policy.net) {
        rs = rs.add_rule(NetPort::new(*listen_port, AccessNet::ConnectTcp)).map_err(e("rule port"))?;
    }
    let status = rs.restrict_self().map_err(e("restrict_self"))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!("Landlock ruleset not fully enforced ({:?})", status.ruleset));
    }
    Ok(())
}
