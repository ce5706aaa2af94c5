//! The bridge between the gateway and `axp-sandbox`: probing whether `kernel-lsm` can be
//! enforced on this host, and the [`SandboxLauncher`] that wraps every process the gateway
//! starts (command jobs, stdio MCP servers, CLI tools) in it. Policy is compiled here, by the
//! supervisor, from a [`ProcessSpec`]'s grants — never from anything the agent wrote.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axp_providers::{ArgvTrust, Launcher, ProcessSpec, ProviderError};
use axp_sandbox::{Layers, Policy};

use crate::egress::{Egress, SANDBOX_PROXY_PORT};
use serde_json::{Value, json};

/// The layers in force, or why `kernel-lsm` cannot be granted; and its launcher.
pub fn kernel_lsm(extra_read: &[PathBuf], egress: Arc<Egress>) -> (Result<Value, String>, Option<Arc<dyn Launcher>>) {
    let host = axp_sandbox::probe();
    match host.kernel_lsm_available() {
        Ok(layers) => match std::env::current_exe() {
            Ok(exe) => {
                let launcher: Arc<dyn Launcher> =
                    Arc::new(SandboxLauncher { exe, extra_read: extra_read.to_vec(), egress });
                (Ok(layers_json(&layers)), Some(launcher))
            }
            Err(e) => (Err(format!("cannot find the gateway's own executable to re-execute: {e}")), None),
        },
        Err(why) => (Err(why), None),
    }
}

pub fn layers_json(l: &Layers) -> Value {
    json!({
        "landlock_abi": l.landlock_abi,
        "landlock_net": l.landlock_net,
        "landlock_scoping": l.landlock_scoping,
        "seccomp": l.seccomp,
        "namespaces": l.namespaces,
        "cgroups": l.cgroups,
        "cgroups_reason": l.cgroups_reason,
        "summary": l.to_string(),
    })
}

/// Runs processes under the `kernel-lsm` tier by re-executing the gateway as `__sandbox-exec`.
#[derive(Debug)]
pub struct SandboxLauncher {
    pub exe: PathBuf,
    pub extra_read: Vec<PathBuf>,
    pub egress: Arc<Egress>,
}

/// The directory a process's policy is centred on: the grant that contains its working
/// directory (write grants first), else the working directory itself.
fn workspace_of(spec: &ProcessSpec) -> PathBuf {
    let cwd = spec.cwd.clone();
    let inside = |grants: &[PathBuf]| -> Option<PathBuf> {
        let cwd = cwd.as_ref()?;
        grants.iter().find(|g| cwd.starts_with(g)).cloned()
    };
    inside(&spec.policy.fs_write)
        .or_else(|| inside(&spec.policy.fs_read))
        .or(cwd)
        .or_else(|| spec.policy.fs_write.first().cloned())
        .unwrap_or_else(std::env::temp_dir)
}

/// Compiles the kernel policy for one process.
pub fn compile(spec: &ProcessSpec, extra_read: &[PathBuf], argv: &[String], egress: &Egress) -> Result<Policy, String> {
    let workspace = workspace_of(spec);
    let mut b = Policy::builder(&workspace).clear_env();
    for (k, v) in &spec.env {
        b = b.env(k, v);
    }
    let mut reads: Vec<PathBuf> = spec.policy.fs_read.clone();
    reads.extend(extra_read.iter().cloned());
    let path_env = spec.env.get("PATH").map(OsStr::new);
    let trusted = match spec.policy.argv_trust {
        ArgvTrust::None => &argv[..0],
        ArgvTrust::Program => &argv[..argv.len().min(1)],
        ArgvTrust::All => argv,
    };
    reads.extend(axp_sandbox::discover::read_paths_for(trusted, path_env));
    for p in reads.iter().filter(|p| p.exists() && !is_system(p)) {
        b = b.fs_read(p);
    }
    for p in spec.policy.fs_write.iter().filter(|p| p.exists()) {
        b = b.fs_write(p);
    }
    if let Some(cwd) = &spec.cwd {
        b = b.cwd(cwd);
    }
    // Network: nothing (loopback only) unless granted, and then only through the proxy of the
    // grants' owner (the session or provider) that enforces exactly these grants.
    if !spec.policy.net.is_empty() {
        let sock = egress.socket_for(&spec.policy.net_scope, &spec.policy.net)?;
        b = b.net_proxy(sock, SANDBOX_PROXY_PORT);
    }
    b.build().map_err(|e| e.to_string())
}

/// Paths the sandbox always mounts read-only (or refuses to grant): no need to list them.
fn is_system(p: &Path) -> bool {
    matches!(p.to_str(), Some("/" | "/usr" | "/bin" | "/lib" | "/lib64" | "/proc" | "/dev" | "/sys"))
}

impl SandboxLauncher {
    fn build(&self, spec: &ProcessSpec, terminal: bool) -> Result<tokio::process::Command, ProviderError> {
        let mut argv = vec![spec.program.clone()];
        argv.extend(spec.args.iter().cloned());
        // Resolve the program on the spec's PATH now, so the sandbox executes a real file (and
        // the directories it needs are known to be readable).
        if !spec.program.contains('/') {
            let path_env = spec.env.get("PATH").map(OsStr::new);
            if let Some(found) = axp_sandbox::discover::find_program(&spec.program, path_env) {
                argv[0] = found.to_string_lossy().into_owned();
            }
        }
        let mut policy = compile(spec, &self.extra_read, &argv, &self.egress).map_err(ProviderError::Config)?;
        policy.allow_pty = terminal;
        let std_cmd = axp_sandbox::command(&self.exe, &policy, &argv)
            .map_err(|e| ProviderError::io("preparing the sandbox", e))?;
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.kill_on_drop(true);
        Ok(cmd)
    }
}

impl Launcher for SandboxLauncher {
    fn command(&self, spec: &ProcessSpec) -> Result<tokio::process::Command, ProviderError> {
        self.build(spec, false)
    }

    /// The target's stdin (a PTY slave) becomes its controlling terminal, and it gets a private
    /// devpts of its own (`pty.open`).
    fn terminal_command(&self, spec: &ProcessSpec) -> Result<tokio::process::Command, ProviderError> {
        self.build(spec, true)
    }

    fn tier(&self) -> &'static str {
        "kernel-lsm"
    }
}
