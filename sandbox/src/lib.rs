//! `axp-sandbox`: AXP's `kernel-lsm` tier on Linux — the policy model ([`Policy`], pure data
//! compiled by the gateway from a session's grants), host probing ([`probe()`]), and the
//! enforcement entry ([`exec_main`]) that the gateway's own binary runs as `__sandbox-exec`.
//!
//! Enforcement never runs in the caller: [`command`] builds a [`std::process::Command`] that
//! re-executes the gateway binary, and that fresh single-threaded process enters namespaces,
//! builds a minimal root, applies rlimits, Landlock and seccomp, and only then `execve()`s the
//! target; a running job is signalled only through that process, with [`signal_job`]. This
//! crate knows nothing about tokio, HTTP, MCP or capability tokens; it depends on
//! libc, landlock and seccompiler only. Unsafe code is allowed here (and only here in the
//! workspace); every block carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

mod cgroup;
pub mod discover;
mod exec;
pub mod harden;
mod landlock_rules;
mod mounts;
mod net;
pub mod policy;
pub mod probe;
mod seccomp;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitStatus};

pub use exec::{EXIT_CANNOT_EXEC, EXIT_NOT_FOUND, EXIT_SETUP, RELAYED_SIGNALS, exec_main};
pub use policy::{DEFAULT_PATH, Limits, NetPolicy, POLICY_ENV, Policy, PolicyBuilder, PolicyError};
pub use probe::{HostSupport, Layers, probe};
pub use seccomp::denied_syscalls;

/// The hidden subcommand that dispatches to [`exec_main`].
pub const EXEC_ARG: &str = "__sandbox-exec";

/// Largest encoded policy that fits in one environment string (Linux `MAX_ARG_STRLEN`, 128 KiB,
/// minus the variable name).
const MAX_ENV_VALUE: usize = 128 * 1024 - 64;

/// Builds the command that runs `argv` under `policy`: `exe __sandbox-exec -- argv…` with an
/// environment holding only the encoded policy. The caller may set stdin/stdout/stderr (pipes
/// work as usual, e.g. for MCP stdio servers), convert it to `tokio::process::Command`, and
/// spawn it; it must not add environment variables or a `pre_exec` hook (the target's
/// environment is exactly [`Policy::env`], and the working directory comes from the policy).
///
/// `exe` must be a binary whose `main()` calls [`exec_main`] first when `argv[1]` is
/// [`EXEC_ARG`] (the `axp` gateway, or this crate's `axp-sandbox-test`).
pub fn command(exe: &Path, policy: &Policy, argv: &[String]) -> std::io::Result<Command> {
    if argv.is_empty() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command to run in the sandbox"));
    }
    let encoded: OsString = policy.to_env_value();
    if encoded.len() > MAX_ENV_VALUE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("sandbox policy too large ({} bytes encoded, limit {MAX_ENV_VALUE})", encoded.len()),
        ));
    }
    let mut cmd = Command::new(exe);
    cmd.arg(EXEC_ARG).arg("--").args(argv).env_clear().env(POLICY_ENV, encoded).current_dir("/");
    Ok(cmd)
}

/// Sends `signal` into a running job through its exec process, `exec_pid`: the child that
/// [`command`] spawned, which the caller has not reaped yet (so the pid is still that process).
/// This is the only way a caller should signal a job, PTY jobs included: never a pid or process
/// group read elsewhere, such as the terminal's foreground group, whose number is the host's and
/// may belong to an unrelated process once that group has ended.
///
/// The exec process relays the signal to the job's init, which sends it, inside the job's own
/// pid namespace, to the foreground process group of the job's terminal when the policy allows a
/// PTY and the target has a terminal, else to the target. `signal` is one of
/// [`RELAYED_SIGNALS`] (TERM, INT, HUP, QUIT, USR1, USR2, WINCH, CONT, ALRM), or `SIGKILL` or
/// `SIGSTOP`: those two cannot be caught, so the exec process would die or stop instead of
/// relaying them, and they travel as real-time signals (`SIGRTMIN+1`, `SIGRTMIN+2`) that init
/// turns back into them. Anything else is `InvalidInput`. Killing the exec process itself with
/// `SIGKILL` remains the way to end the whole job at once.
pub fn signal_job(exec_pid: u32, signal: i32) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(exec_pid)
        .ok()
        .filter(|p| *p > 1)
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a process id"))?;
    let sent = if RELAYED_SIGNALS.contains(&signal) {
        signal
    } else if signal == libc::SIGKILL {
        exec::kill_carrier()
    } else if signal == libc::SIGSTOP {
        exec::stop_carrier()
    } else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("signal {signal} is not relayed into sandboxed jobs"),
        ));
    };
    // SAFETY: kill with integer arguments; `pid` is positive, so it names one process.
    if unsafe { libc::kill(pid, sent) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `argv` under `policy` with inherited stdio and waits for it (for `axp sandbox run`).
/// A sandbox that could not be set up exits with [`EXIT_SETUP`] after one `axp-sandbox:` line on
/// stderr.
pub fn run(exe: &Path, policy: &Policy, argv: &[String]) -> std::io::Result<ExitStatus> {
    command(exe, policy, argv)?.status()
}
