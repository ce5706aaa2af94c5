//! cgroup v2 limits (`pids.max`, `memory.max`) for hosts that delegate a writable cgroup with
//! those controllers to the gateway's user. The exec process creates a fresh child cgroup before
//! unsharing, moves the namespace's init into it before init does anything (init waits for a go
//! byte), and removes it after the sandbox ended.
//!
//! When `probe` finds no delegated cgroup this module does nothing, and the layers report
//! `cgroups: no` with the reason; when a delegated cgroup exists but cannot be used, the sandbox
//! refuses to start rather than run without the limit it promised.

use std::path::PathBuf;

use crate::policy::Policy;

/// The cgroup created for one sandbox.
#[derive(Debug)]
pub(crate) struct Placement {
    child: PathBuf,
}

/// Creates a child cgroup with the policy's limits, when delegation is available.
pub(crate) fn create(policy: &Policy) -> Result<Option<Placement>, String> {
    let Ok(parent) = crate::probe::cgroup_dir() else {
        return Ok(None);
    };
    let child = parent.join(format!("axp-sbx-{}", std::process::id()));
    let fail = |what: &str, e: std::io::Error| format!("cgroup {}: {what}: {e}", child.display());
    std::fs::create_dir(&child).map_err(|e| fail("create", e))?;
    let w = |file: &str, v: String| std::fs::write(child.join(file), v).map_err(|e| fail(file, e));
    if let Some(p) = policy.limits.procs {
        w("pids.max", p.to_string())?;
    }
    if let Some(m) = policy.limits.memory {
        w("memory.max", m.to_string())?;
        let _ = w("memory.swap.max", "0".to_string());
    }
    Ok(Some(Placement { child }))
}

/// Moves process `pid` (the namespace's init, as seen by the exec process) into the cgroup.
pub(crate) fn place(p: &Placement, pid: libc::pid_t) -> Result<(), String> {
    std::fs::write(p.child.join("cgroup.procs"), pid.to_string())
        .map_err(|e| format!("cgroup {}: cgroup.procs: {e}", p.child.display()))
}

/// Removes the cgroup once the sandbox ended (best effort; the kernel may need a moment to
/// release the last exiting tasks).
pub(crate) fn remove(p: Option<Placement>) {
    if let Some(p) = p {
        for _ in 0..50 {
            if std::fs::remove_dir(&p.child).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
}
