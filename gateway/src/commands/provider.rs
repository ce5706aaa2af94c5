//! `axp provider add|list|inspect|remove`: install and manage plugins in the state directory.
//! This file owns the CLI surface (clap structs, stderr progress, stdout data); verification,
//! copying and the lockfile belong to `axp-plugin-host`. It does not talk to a running gateway:
//! a gateway picks up changes by watching `plugins.lock`.
//!
//! Runs its own small tokio runtime, so `main` dispatches it before the shared runtime starts
//! (like `axp sandbox`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use axp_plugin_host::InstallOptions;
use axp_providers::Launcher;
use clap::{Args, Subcommand};

use crate::config::settings::Settings;
use crate::execution::egress::Egress;

/// Install, list, inspect and remove provider plugins (WASM components and native libraries).
#[derive(Debug, Args)]
pub struct ProviderArgs {
    #[command(subcommand)]
    pub command: ProviderCommand,
    /// The state directory holding installed plugins [default: `state_dir` of --config, else
    /// $XDG_STATE_HOME/axp]; use the one `axp serve` uses.
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Operator settings: its `state_dir`, `workspace`, `[plugins]` limits and `[lint]` policy
    /// apply to the install's checks as they will when a gateway mounts the plugin.
    #[arg(long = "config", global = true, value_name = "AXP_TOML")]
    pub config: Option<PathBuf>,
    /// No progress on stderr while a plugin is verified and compiled (live only on a terminal).
    #[arg(long, short, global = true)]
    pub quiet: bool,
}

#[derive(Debug, Subcommand)]
pub enum ProviderCommand {
    /// Verify and install a plugin: a directory with axp-plugin.toml, the manifest itself, or a
    /// .wasm component (installed with no capabilities when it has no manifest).
    Add(AddArgs),
    /// List installed plugins.
    List(ListArgs),
    /// Show one installed plugin: manifest, capabilities, tools, digest.
    Inspect(InspectArgs),
    /// Remove an installed plugin.
    Remove(RemoveArgs),
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The plugin directory, manifest or artifact.
    pub path: PathBuf,
    /// Refuse unless the artifact's SHA-256 is this (hex).
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Require a minisign signature that verifies with this public key (base64 or a .pub file).
    #[arg(long, value_name = "KEY")]
    pub pubkey: Option<String>,
    /// Probe a native plugin without the kernel sandbox when this host has none.
    #[arg(long)]
    pub dangerously_unsandboxed: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The plugin id.
    pub id: String,
}

#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The plugin id.
    pub id: String,
}

/// Runs one `axp provider` subcommand; returns the exit code.
pub fn run(args: ProviderArgs) -> Result<i32> {
    let settings = match &args.config {
        Some(p) => crate::config::settings::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => crate::config::settings::Settings::default(),
    };
    let state_dir = args
        .state_dir
        .clone()
        .or_else(|| settings.state_dir.clone())
        .unwrap_or_else(crate::commands::serve::default_state_dir);
    // Private and resolved, as `axp serve` makes it: the paths of installed plugins derive from it.
    let state_dir = crate::commands::serve::private_state_dir(&state_dir)?;
    match args.command {
        ProviderCommand::Add(a) => add(a, state_dir, &settings, args.quiet),
        ProviderCommand::List(a) => {
            let installed = axp_plugin_host::list(&state_dir)?;
            if a.json {
                println!("{}", serde_json::to_string_pretty(&installed)?);
            } else if installed.is_empty() {
                eprintln!("no plugins installed in {}", state_dir.display());
            } else {
                println!("{:<20} {:<10} {:<6} {:<6} TOOLS", "ID", "VERSION", "KIND", "SIGNED");
                for p in installed {
                    println!(
                        "{:<20} {:<10} {:<6} {:<6} {}",
                        p.id,
                        p.version,
                        p.kind.to_string(),
                        if p.signed_by.is_some() { "yes" } else { "no" },
                        p.tools.join(", ")
                    );
                }
            }
            Ok(0)
        }
        ProviderCommand::Inspect(a) => {
            let (entry, manifest) = axp_plugin_host::inspect(&state_dir, &a.id)?;
            let out = serde_json::json!({
                "installed": entry,
                "manifest": serde_json::to_value(&manifest)?,
                "path": state_dir.join(&entry.dir),
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(0)
        }
        ProviderCommand::Remove(a) => {
            let removed = axp_plugin_host::remove(&state_dir, &a.id)?;
            eprintln!("removed {} {}", removed.id, removed.version);
            Ok(0)
        }
    }
}

fn add(a: AddArgs, state_dir: PathBuf, settings: &Settings, quiet: bool) -> Result<i32> {
    let egress_options = crate::execution::egress::EgressOptions::from_settings(&settings.egress)
        .map_err(|e| anyhow::anyhow!("invalid `[egress]` setting: {e}"))?;
    let egress = Arc::new(Egress::with_options(state_dir.join("egress"), egress_options));
    let (_, sandboxed) =
        crate::execution::sandboxing::kernel_lsm(&settings.sandbox.extra_read, egress.clone(), Some(&state_dir));
    let launcher: Arc<dyn Launcher> = match sandboxed {
        Some(l) => l,
        None if a.dangerously_unsandboxed => Arc::new(axp_providers::DirectLauncher),
        // WASM plugins never need a process; a native one is refused at its probe.
        None => Arc::new(RefuseLauncher),
    };
    let workspace = match settings.workspace.clone() {
        Some(w) => w,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let ctx = crate::gateway::plugins::host_context(&settings.plugins, launcher, &workspace, egress)?;
    let opts = InstallOptions { expected_sha256: a.sha256, pubkey: a.pubkey };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let lint = settings.lint.clone();
    let path = a.path.clone();
    // Inside a task (not `block_on`'s own future): the egress proxy of a native plugin with
    // `net` grants starts from a runtime worker.
    let steps = Arc::new(crate::commands::progress::Steps::new(quiet));
    let task = rt.spawn({
        let steps = steps.clone();
        async move {
            let progress = |line: &str| steps.step(line);
            let vet = |id: &str, tools: &[axp_protocol::ToolSpec]| {
                crate::gateway::plugins::lint_at_install(lint.as_ref(), id, tools)
            };
            axp_plugin_host::install_vetted(&path, &opts, &state_dir, &ctx, &progress, &vet)
                .await
                .map(|(entry, tools)| (entry, tools, state_dir))
        }
    });
    let result = rt.block_on(task).context("the install task failed")?;
    steps.finish(result.is_ok());
    match result {
        Ok((entry, tools, state_dir)) => {
            eprintln!("installed `{}` {} into {}", entry.id, entry.version, state_dir.join(&entry.dir).display());
            for t in tools {
                let first = t.description.lines().next().unwrap_or_default();
                println!("{}__{}\t{}", entry.id, t.name, first);
            }
            Ok(0)
        }
        Err(e) => bail!("cannot install {}: {e}", a.path.display()),
    }
}

/// Used when no sandbox is available: native plugins are refused rather than run unconfined.
#[derive(Debug)]
struct RefuseLauncher;

impl Launcher for RefuseLauncher {
    fn command(
        &self,
        _spec: &axp_providers::ProcessSpec,
    ) -> Result<tokio::process::Command, axp_providers::ProviderError> {
        Err(axp_providers::ProviderError::Config(
            "no kernel sandbox is available on this host to confine the native plugin host; \
             hint: run `axp sandbox check`, or pass --dangerously-unsandboxed"
                .into(),
        ))
    }

    fn tier(&self) -> &'static str {
        "none"
    }
}
