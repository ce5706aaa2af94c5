//! Shared helpers for the sandbox tests: locating the test binary, building policies, running a
//! sandboxed command with a timeout, and the attack-battery harness that reads `attacks.json`.
//! Helpers never decide whether the sandbox is right; each test states its own expectation.

mod attacks;
mod mcp;
mod net;
mod policy;
mod positive;
mod probe;
mod seccomp;
mod unprivileged;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use axp_sandbox::Policy;

/// The crate's test binary (dispatches `__sandbox-exec` like the gateway does).
pub(crate) fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_axp-sandbox-test"))
}

/// A writable workspace policy with default limits.
pub(crate) fn policy(ws: &Path) -> axp_sandbox::PolicyBuilder {
    Policy::builder(ws).fs_write(ws)
}

/// Result of one sandboxed run.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub(crate) fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub(crate) fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Spawns `cmd` with piped output and waits at most `secs`, killing it after that.
pub(crate) fn run_cmd(mut cmd: Command, secs: u64) -> Outcome {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    if cmd.get_program() != "setpriv" {
        cmd.stdin(Stdio::null());
    }
    let mut child = cmd.spawn().expect("spawn sandboxed command");
    finish(&mut child, secs)
}

/// Collects output from an already spawned child, with a deadline.
pub(crate) fn finish(child: &mut Child, secs: u64) -> Outcome {
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let st = child.wait().expect("wait after kill");
            panic!("sandboxed command timed out after {secs}s ({st:?})");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Outcome { status, stdout: t_out.join().expect("stdout thread"), stderr: t_err.join().expect("stderr thread") }
}

/// Runs `argv` under `policy` through the library API (as the gateway does).
pub(crate) fn sandboxed(policy: &Policy, argv: &[&str]) -> Outcome {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let cmd = axp_sandbox::command(&bin(), policy, &argv).expect("build command");
    run_cmd(cmd, 30)
}

/// A fresh temporary workspace (the unprivileged tests chown it to 65534).
pub(crate) fn workspace() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("axp-ws-").tempdir().expect("tempdir")
}

pub(crate) fn signal_of(o: &Outcome) -> Option<i32> {
    o.status.signal()
}
