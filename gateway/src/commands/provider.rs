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
use axp_plugin_host::{HostContext, InstallOptions};
use axp_providers::Launcher;
use clap::{Args, Subcommand};

/// Install, list, inspect and remove provider plugins (WASM components and native libraries).
#[derive(Debug, Args)]
pub struct ProviderArgs {
    #[command(subcommand)]
    pub command: ProviderCommand,
    /// The state directory holding installed plugins [default: $XDG_STATE_HOME/axp].
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
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
    let state_dir = args.state_dir.clone().unwrap_or_else(crate::commands::serve::default_state_dir);
    match args.command {
        ProviderCommand::Add(a) => add(a, state_dir),
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

fn add(a: AddArgs, state_dir: PathBuf) -> Result<i32> {
    let (_, sandboxed) = crate::sandboxing::kernel_lsm(&[]);
    let launcher: Arc<dyn Launcher> = match sandboxed {
        Some(l) => l,
        None if a.dangerously_unsandboxed => Arc::new(axp_providers::DirectLauncher),
        None => {
            // WASM plugins never need a process; a native one is refused at its probe below.
            Arc::new(RefuseLauncher)
        }
    };
    let ctx = HostContext::new(launcher).context("cannot prepare the plugin host")?;
    let opts = InstallOptions { expected_sha256: a.sha256, pubkey: a.pubkey };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let progress = |line: &str| eprintln!("  {line}");
    let result = rt.block_on(axp_plugin_host::install(&a.path, &opts, &state_dir, &ctx, &progress));
    match result {
        Ok((entry, tools)) => {
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
