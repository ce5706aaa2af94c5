//! Landlock rules that mirror the mount tree: read and execute everywhere below `/` (which only
//! holds what the policy exposes), full access below the writable grants, `/tmp` and `/dev/shm`,
//! file access to the device nodes, TCP connect only to the egress forwarder's port (ABI >= 4),
//! and scoping of abstract unix sockets and signals (ABI >= 6).
//!
//! Applied by the target process itself just before seccomp and execve; it must not be called in
//! any other process (Landlock domains are per thread and inherited by children).

use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
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

/// Restricts the calling thread (and its future children) with the policy's Landlock ruleset,
/// at the best ABI the kernel offers (capped at [`MAX_LANDLOCK_ABI`]). Fails unless the ruleset
/// is fully enforced.
pub(crate) fn restrict(policy: &Policy) -> Result<(), String> {
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
    let fd = |p: &Path| PathFd::new(p).map_err(|err| format!("landlock open {}: {err}", p.display()));

    rs = rs.add_rule(PathBeneath::new(fd(Path::new("/"))?, AccessFs::from_read(abi))).map_err(e("rule /"))?;
    let mut writable: Vec<&Path> = vec![Path::new("/tmp"), Path::new("/dev/shm")];
    if policy.workspace_writable {
        writable.push(&policy.workspace);
    }
    writable.extend(policy.read_write.iter().map(|p| p.as_path()));
    for p in writable {
        rs = rs.add_rule(PathBeneath::new(fd(p)?, AccessFs::from_all(abi))).map_err(e("rule rw"))?;
    }
    let mut devices = vec!["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"];
    if policy.allow_pty {
        devices.push("/dev/pts");
    }
    for d in devices.into_iter().filter(|d| Path::new(d).exists()) {
        let access = if d == "/dev/pts" {
            AccessFs::from_read(abi) | AccessFs::from_file(abi)
        } else {
            AccessFs::from_file(abi)
        };
        rs = rs.add_rule(PathBeneath::new(fd(Path::new(d))?, access)).map_err(e("rule dev"))?;
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
