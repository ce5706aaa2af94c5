//! The bridge between the gateway and `axp-sandbox`: probing whether `kernel-lsm` can be
//! enforced on this host, and the [`SandboxLauncher`] that wraps every process the gateway
//! starts (command jobs, stdio MCP servers, CLI tools) in it. Policy is compiled here, by the
//! supervisor, from a [`ProcessSpec`]'s grants — never from anything the agent wrote.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axp_protocol::methods::JobStartParams;
use axp_protocol::{Capability, ErrorCode, RpcError};
use axp_providers::{ArgvTrust, Launcher, ProcessPolicy, ProcessSpec, ProviderError};
use axp_sandbox::{Layers, Policy};

use crate::auth::session::{Session, denied};
use crate::execution::egress::{Egress, SANDBOX_PROXY_PORT};
use crate::execution::jobs::resolve_cwd;
use serde_json::{Value, json};

/// The layers in force, or why `kernel-lsm` cannot be granted; and its launcher.
/// `protect` is the state directory, which no process the launcher starts may see.
pub fn kernel_lsm(
    extra_read: &[PathBuf],
    egress: Arc<Egress>,
    protect: Option<&Path>,
) -> (Result<Value, String>, Option<Arc<dyn Launcher>>) {
    let host = axp_sandbox::probe();
    match host.kernel_lsm_available() {
        Ok(layers) => match std::env::current_exe() {
            Ok(exe) => {
                let launcher: Arc<dyn Launcher> = Arc::new(SandboxLauncher {
                    exe,
                    extra_read: extra_read.to_vec(),
                    egress,
                    protect: protect.map(crate::auth::grants::resolve_path),
                });
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
    /// The state directory (resolved): never exposed to a sandboxed process.
    pub protect: Option<PathBuf>,
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
///
/// Every path the policy mounts is the resolved one, so the sandbox, which never follows a
/// symlink while it mounts, sees the directory that was checked. The spec's own grants were
/// resolved when they were granted (session open, config load); one that resolves elsewhere now
/// has had a symlink put in its way since, and is refused rather than followed. Paths found by
/// discovery are the supervisor's own and are resolved here. Nothing may expose `protect` (the
/// state directory: keys, audit log, store) or anything above it, except what the gateway itself
/// shows sandboxes from it (see [`check_protected`]).
pub fn compile(
    spec: &ProcessSpec,
    extra_read: &[PathBuf],
    argv: &[String],
    egress: &Egress,
    protect: Option<&Path>,
) -> Result<Policy, String> {
    let workspace = crate::auth::grants::resolve_path(&workspace_of(spec));
    let mut b = Policy::builder(&workspace).clear_env();
    for (k, v) in &spec.env {
        b = b.env(k, v);
    }
    let granted = |p: &PathBuf| -> Result<Option<PathBuf>, String> {
        if !p.exists() {
            return Ok(None);
        }
        let r = crate::auth::grants::resolve_path(p);
        if &r != p {
            return Err(format!(
                "the granted path {} now resolves to {} (a symlink was put in its place since it was granted); \
                 refusing to expose it",
                p.display(),
                r.display()
            ));
        }
        Ok(Some(r))
    };
    let mut reads: Vec<PathBuf> = Vec::new();
    for p in spec.policy.fs_read.iter().chain(extra_read) {
        reads.extend(granted(p)?);
    }
    let trusted = match spec.policy.argv_trust {
        ArgvTrust::None => &argv[..0],
        ArgvTrust::Program => &argv[..argv.len().min(1)],
        ArgvTrust::All => argv,
    };
    // The program's own files, found from the trusted part of the argv only. Names on `#!` lines
    // are looked up on the spec's PATH only when the operator wrote the whole command (and so
    // its environment); otherwise on the default PATH, since an agent may write the environment.
    let path_env = match spec.policy.argv_trust {
        ArgvTrust::All => spec.env.get("PATH").map(OsStr::new),
        ArgvTrust::None | ArgvTrust::Program => None,
    };
    let found = axp_sandbox::discover::read_paths_for(trusted, path_env);
    reads.extend(found.iter().filter(|p| p.exists()).map(|p| crate::auth::grants::resolve_path(p)));
    let mut writes = Vec::new();
    for p in &spec.policy.fs_write {
        writes.extend(granted(p)?);
    }
    if let Some(state) = protect {
        for p in reads.iter().chain(&writes) {
            check_protected(p, state)?;
        }
    }
    for p in reads.iter().filter(|p| !is_system(p)) {
        b = b.fs_read(p);
    }
    for p in &writes {
        b = b.fs_write(p);
    }
    if let Some(cwd) = &spec.cwd {
        b = b.cwd(cwd);
    }
    if let Some(nice) = spec.policy.nice {
        b = b.limits(axp_sandbox::Limits { nice: Some(nice.into()), ..axp_sandbox::Limits::default() });
    }
    // Network: nothing (loopback only) unless granted, and then only through the proxy of the
    // grants' owner (the session or provider) that enforces exactly these grants.
    if !spec.policy.net.is_empty() {
        let sock = egress.socket_for(&spec.policy.net_scope, &spec.policy.net)?;
        b = b.net_proxy(sock, SANDBOX_PROXY_PORT);
    }
    b.build().map_err(|e| e.to_string())
}

/// Refuses a path that is the state directory, lies above it, or lies inside it anywhere but
/// where the gateway keeps what it shows sandboxes itself: a job's own code-mode directory
/// (`STATE/codemode/<job>`) and an installed plugin's verified files
/// (`STATE/plugins/<id>/<version>`), for its sandboxed helper. Keys, the audit log, the store,
/// the egress logs and the lockfiles sit elsewhere in it.
fn check_protected(p: &Path, state: &Path) -> Result<(), String> {
    let exposable = p.strip_prefix(state).is_ok_and(|rel| {
        let parts: Vec<_> = rel.components().collect();
        matches!(
            (parts.first().and_then(|c| c.as_os_str().to_str()), parts.len()),
            (Some("codemode"), 2) | (Some("plugins"), 3)
        )
    });
    if state.starts_with(p) || (p.starts_with(state) && !exposable) {
        return Err(format!(
            "{} would expose the gateway's state directory {} (its keys, audit log and job store) to a \
             sandboxed process; refusing",
            p.display(),
            state.display()
        ));
    }
    Ok(())
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
        // the directories it needs are known to be readable). Callers whose environment comes
        // from an agent but whose program must be trusted (code-mode) pass an absolute program.
        if !spec.program.contains('/') {
            let path_env = spec.env.get("PATH").map(OsStr::new);
            if let Some(found) = axp_sandbox::discover::find_program(&spec.program, path_env) {
                argv[0] = found.to_string_lossy().into_owned();
            }
        }
        let mut policy = compile(spec, &self.extra_read, &argv, &self.egress, self.protect.as_deref())
            .map_err(ProviderError::Config)?;
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

/// The process of a command or code-mode job: `argv` in the session's workspace (or a `cwd`
/// inside it), with the session's environment and sandbox policy. Needs `proc.spawn`.
pub fn command_spec(
    extra_read: &[PathBuf],
    s: &Session,
    argv: Vec<String>,
    params: &JobStartParams,
) -> Result<ProcessSpec, RpcError> {
    if !s.caps.allows_spawn() {
        return Err(denied("proc.spawn", "start a command"));
    }
    let asked = resolve_cwd(&s.workspace, params.cwd.as_deref());
    // Resolved, like a grant: a `cwd` through a symlink is where the symlink points.
    let cwd = crate::auth::grants::resolve_path(&asked);
    let cwd_str = asked.to_string_lossy();
    if cwd_str.split('/').any(|c| c == "..")
        || !axp_protocol::capability::path_within(
            &cwd.to_string_lossy(),
            &crate::auth::grants::resolve_path(&s.workspace).to_string_lossy(),
        )
    {
        return Err(RpcError::new(
            ErrorCode::CapabilityDenied,
            format!("cwd `{cwd_str}` is outside the session's workspace `{}`", s.workspace.display()),
        ));
    }
    let mut env = base_env(&s.workspace);
    for (k, v) in params.env.iter().flatten() {
        let Some(v) = v.as_str() else {
            return Err(RpcError::invalid_params(format!("env `{k}` must be a string")));
        };
        env.insert(k.clone(), v.to_string());
    }
    Ok(ProcessSpec {
        program: argv[0].clone(),
        args: argv[1..].to_vec(),
        env,
        cwd: Some(cwd),
        policy: session_policy(s, extra_read)?,
    })
}

/// The nice value of a session's jobs (see [`session_policy`]). 10 gives a CPU-bound job about a
/// tenth of the weight of a process at the default priority (CFS weights 110 against 1024).
pub const JOB_NICE: u8 = 10;

/// The policy a session's processes run under, compiled from its grants (never from the agent).
/// Every `fs.*` path is resolved again now and must still lie within what the session was
/// granted at open: a directory inside a grant that has since become a symlink is refused here,
/// and the policy carries only resolved paths, which the sandbox mounts without following links.
pub fn session_policy(s: &Session, extra_read: &[std::path::PathBuf]) -> Result<ProcessPolicy, RpcError> {
    let caps = crate::auth::grants::resolve_within(&s.caps, &s.granted).map_err(|o| o.to_rpc("the session"))?;
    // The session's own egress proxy (its limits, its audit attribution; stopped at close).
    // An agent's jobs run below the gateway's CPU priority, so that however busy they keep the
    // CPUs, the gateway still answers promptly (index, attach, cancel, other sessions' calls).
    // Without contention the nice value changes nothing.
    let mut policy = ProcessPolicy {
        net_scope: axp_providers::NetScope::Session(s.id.clone()),
        nice: Some(JOB_NICE),
        ..ProcessPolicy::default()
    };
    for c in caps.iter() {
        match c {
            Capability::FsRead(p) => policy.fs_read.push(p.into()),
            Capability::FsWrite(p) => policy.fs_write.push(p.into()),
            Capability::NetConnect { host, port } => {
                policy.net.push(port.map_or_else(|| host.clone(), |p| format!("{host}:{p}")))
            }
            _ => {}
        }
    }
    policy.fs_read.extend(extra_read.iter().cloned());
    Ok(policy)
}

/// The environment every command job starts from (nothing of the gateway's own leaks in).
pub fn base_env(workspace: &Path) -> std::collections::BTreeMap<String, String> {
    [
        ("PATH", axp_sandbox::DEFAULT_PATH.to_string()),
        ("HOME", workspace.to_string_lossy().into_owned()),
        ("LANG", "C.UTF-8".to_string()),
        ("TERM", "dumb".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}
