//! `axp sandbox check` (what this host can enforce, and why not where not) and
//! `axp sandbox run -- CMD…` (one command under the same boundary sessions get).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use axp_providers::{ProcessPolicy, ProcessSpec};
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Print what this host supports (user namespaces, Landlock ABI, seccomp, cgroups) and why not.
    Check,
    /// Run one command under the kernel-lsm boundary.
    Run(SandboxRunArgs),
}

#[derive(Debug, Args)]
pub struct SandboxRunArgs {
    /// The directory the command runs in (read-only unless --writable) [default: current dir].
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Make the workspace writable.
    #[arg(long)]
    pub writable: bool,
    /// Also allow reading below this path. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub allow_read: Vec<PathBuf>,
    /// Also allow writing below this path. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// Allow egress to this domain through the egress proxy. Repeatable.
    #[arg(long, value_name = "DOMAIN")]
    pub allow_net: Vec<String>,
    /// The command and its arguments.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub fn run(cmd: SandboxCommand) -> Result<i32> {
    match cmd {
        SandboxCommand::Check => {
            let host = axp_sandbox::probe();
            println!("{host}");
            match host.kernel_lsm_available() {
                Ok(layers) => {
                    println!("\nkernel-lsm: available — {layers}");
                    Ok(0)
                }
                Err(why) => {
                    println!("\nkernel-lsm: UNAVAILABLE — {why}");
                    Ok(1)
                }
            }
        }
        SandboxCommand::Run(a) => run_one(a),
    }
}

fn run_one(a: SandboxRunArgs) -> Result<i32> {
    if a.command.is_empty() {
        bail!("nothing to run: give the command after `--`, e.g. `axp sandbox run -- ls -la`");
    }
    let host = axp_sandbox::probe();
    if let Err(why) = host.kernel_lsm_available() {
        bail!("the kernel-lsm sandbox is unavailable on this host: {why}\nhint: `axp sandbox check` shows every layer");
    }
    let workspace: PathBuf =
        a.workspace.map_or_else(std::env::current_dir, Ok)?.canonicalize().context("the workspace cannot be used")?;
    let canon = |p: &PathBuf| p.canonicalize().with_context(|| format!("{} cannot be used", p.display()));
    let mut fs_write = a.allow_write.iter().map(canon).collect::<Result<Vec<_>>>()?;
    if a.writable {
        fs_write.push(workspace.clone());
    }
    let spec = ProcessSpec {
        program: a.command[0].clone(),
        args: a.command[1..].to_vec(),
        env: crate::execution::sandboxing::base_env(&workspace),
        cwd: Some(workspace.clone()),
        // The operator typed this command: its argv may make the program's own files readable.
        policy: ProcessPolicy {
            argv_trust: axp_providers::ArgvTrust::All,
            fs_read: a.allow_read.iter().map(canon).collect::<Result<_>>()?,
            fs_write,
            net: a.allow_net.clone(),
            // A one-off run: its own proxy, stopped when the command ends.
            net_scope: axp_providers::NetScope::Shared,
            nice: None,
        },
    };
    let mut argv = a.command.clone();
    if let Some(found) = axp_sandbox::discover::find_program(&argv[0], spec.env.get("PATH").map(std::ffi::OsStr::new)) {
        argv[0] = found.to_string_lossy().into_owned();
    }
    // The egress proxy (only started when --allow-net is given) runs on this runtime's threads
    // while the command runs in the foreground.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let _guard = rt.enter();
    let egress_dir = std::env::temp_dir().join(format!("axp-egress-{}", std::process::id()));
    let egress = crate::execution::egress::Egress::new(egress_dir.clone());
    let ran = (|| {
        let policy = crate::execution::sandboxing::compile(&spec, &[], &argv, &egress, None)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let exe = std::env::current_exe().context("cannot find the axp executable to re-execute")?;
        axp_sandbox::run(&exe, &policy, &argv).context("cannot start the sandbox")
    })();
    // The proxy's socket and its attempt log are this run's alone.
    let _ = std::fs::remove_dir_all(&egress_dir);
    let status = ran?;
    use std::os::unix::process::ExitStatusExt;
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}
