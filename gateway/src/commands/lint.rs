//! `axp lint`: the registration rules, offline, for CI. Inputs: a JSON file of tools (a
//! `tools/list` result or `{"providers": {NAME: …}}`), an MCP fleet config (its servers are
//! started sandboxed and listed), or a running gateway (`--url`). Output as text, JSON or SARIF
//! 2.1.0. Exit 0 clean, 1 findings at the failing severity, 2 could not run.
//!
//! `--approve TOOL` without a tools file or fleet approves a change that a gateway on this
//! machine holds back: the new version comes from the gateway's record in its state directory,
//! the pin goes into the gateway's own lockfile, and the running gateway serves it at once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axp_lint::{Catalog, LintConfig};
use clap::Args;
use serde_json::{Value, json};

#[derive(Debug, Args)]
pub struct LintArgs {
    /// A JSON file of tools: a `tools/list` result, or `{"providers": {NAME: {"tools": […]}}}`.
    pub file: Option<PathBuf>,
    /// An MCP client config: its servers are started (sandboxed) and their tools linted.
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub mcp_config: Vec<PathBuf>,
    /// A running gateway to lint.
    #[arg(long)]
    pub url: Option<String>,
    #[arg(long, value_parser = ["text", "json", "sarif"], default_value = "text")]
    pub format: String,
    /// axp.toml whose [lint] table configures the rules.
    #[arg(long = "config", value_name = "AXP_TOML")]
    pub config: Option<PathBuf>,
    /// The lockfile of pinned tool hashes (drift / rug-pull detection) [default: ./axp.lock when
    /// linting a file or fleet; the gateway's STATE/axp.lock with --url or with --approve alone].
    #[arg(long)]
    pub lock: Option<PathBuf>,
    /// The state directory of the gateway whose held-back changes `--approve` approves
    /// [default: the one `axp serve` uses by default].
    #[arg(long = "state-dir", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Apply mechanical schema fixes to FILE in place.
    #[arg(long)]
    pub fix: bool,
    /// Approve the current version of a tool (`provider__tool`; `provider__*` for every change
    /// of one server) in the lockfile. Alone, it approves what a running gateway holds back.
    #[arg(long, value_name = "TOOL")]
    pub approve: Vec<String>,
    /// Pin every tool not yet in the lockfile.
    #[arg(long)]
    pub pin: bool,
    /// Explain one rule (e.g. AXP027), with the `[[lint.allow]]` entry that allows one tool, and
    /// exit.
    #[arg(long, value_name = "RULE")]
    pub explain: Option<String>,
    /// Write the report here instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// No progress on stderr while the fleet's servers start (live only on a terminal).
    #[arg(long, short)]
    pub quiet: bool,
}

pub async fn run(a: LintArgs) -> Result<i32> {
    if let Some(rule) = &a.explain {
        match axp_lint::explain(rule) {
            Some(text) => {
                println!("{text}");
                return Ok(0);
            }
            None => match axp_lint::rules::nearest_rule_or_family(rule)
                .and_then(|n| axp_lint::RULES.iter().find(|r| r.id == n || r.name == n))
                .map(|r| r.id)
            {
                Some(near) => {
                    bail!("no rule `{rule}`; did you mean `{near}`? (rules are AXP001…AXP{:03})", axp_lint::RULES.len())
                }
                None => bail!("no rule `{rule}`; rules are AXP001…AXP{:03}", axp_lint::RULES.len()),
            },
        }
    }
    let config = match &a.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
            LintConfig::from_axp_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
        }
        None => LintConfig::default(),
    };
    // Without a tools file or a fleet, the tools are a gateway's: its state directory's
    // lockfile is the one to read and approve into.
    let gateway_side = a.file.is_none() && a.mcp_config.is_empty();
    let state_dir = a.state_dir.clone().unwrap_or_else(crate::commands::serve::default_state_dir);
    let lock_path = match &a.lock {
        Some(p) => p.clone(),
        None if gateway_side => state_dir.join(crate::catalog::admission::LOCK_FILE),
        None => PathBuf::from(crate::catalog::admission::LOCK_FILE),
    };
    if gateway_side && a.pin {
        bail!("--pin needs a tools file or --mcp-config: a running gateway pins the tools it sees first by itself");
    }
    if gateway_side && !a.approve.is_empty() {
        approve_held(&a.approve, &state_dir, &lock_path)?;
        if a.url.is_none() {
            return Ok(0);
        }
    }
    let (catalog, source, uri) = if let Some(file) = &a.file {
        let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
        if a.fix {
            let value: Value =
                serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
            let (fixed, applied) = axp_lint::fix_tools_json(&value).map_err(|e| anyhow::anyhow!("{e}"))?;
            std::fs::write(file, serde_json::to_string_pretty(&fixed)? + "\n")?;
            for f in &applied {
                eprintln!("fixed: {f:?}");
            }
            eprintln!("{} fix(es) applied to {}", applied.len(), file.display());
        }
        let text = std::fs::read_to_string(file)?;
        let default = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "tools".into());
        let cat = Catalog::from_json_str(&text, &default).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        (cat, Some(text), file.to_string_lossy().into_owned())
    } else if !a.mcp_config.is_empty() {
        let cat = from_fleet(&a.mcp_config, a.quiet).await?;
        let uri = a.mcp_config[0].to_string_lossy().into_owned();
        (cat, std::fs::read_to_string(&a.mcp_config[0]).ok(), uri)
    } else if let Some(url) = &a.url {
        (from_gateway(url).await?, None, url.clone())
    } else {
        bail!(
            "nothing to lint: give a tools JSON file, --mcp-config FILE or --url URL \
             (or --approve TOOL alone, to approve a change a running gateway holds back)"
        );
    };
    let lock = if !gateway_side && (!a.approve.is_empty() || a.pin) {
        let mut outcome = Ok(());
        let lock = crate::catalog::admission::update_lockfile(&lock_path, |lock| {
            for t in &a.approve {
                if let Err(e) = lock.approve(&catalog, t) {
                    outcome = Err(anyhow::anyhow!("{e}"));
                    return;
                }
                eprintln!("approved {t}");
            }
            if a.pin {
                let pinned = lock.pin_all(&catalog);
                eprintln!("pinned {} new tool(s)", pinned.len());
            }
        })
        .with_context(|| format!("cannot update {}", lock_path.display()))?;
        outcome?;
        lock
    } else {
        crate::catalog::admission::read_lockfile(&lock_path)?
    };
    let report = axp_lint::report::lint_with_lock(&catalog, &config, &lock);
    let out = match a.format.as_str() {
        "json" => serde_json::to_string_pretty(&report.to_json())? + "\n",
        "sarif" => serde_json::to_string_pretty(&report.to_sarif(&uri, source.as_deref()))? + "\n",
        _ => report.to_text(),
    };
    match &a.output {
        Some(p) => std::fs::write(p, out).with_context(|| format!("cannot write {}", p.display()))?,
        None => print!("{out}"),
    }
    Ok(report.exit_code())
}

/// Approves, in the lockfile at `lock_path`, the versions of the tools matching `patterns` that
/// the gateway using `state_dir` holds back. The gateway sees the lockfile change and serves
/// them at once.
fn approve_held(patterns: &[String], state_dir: &std::path::Path, lock_path: &std::path::Path) -> Result<()> {
    let held = crate::catalog::admission::read_held(state_dir)?;
    let mut chosen = Vec::new();
    for pattern in patterns {
        let found: Vec<_> =
            held.iter().filter(|(name, _)| axp_protocol::capability::glob_matches(pattern, name)).collect();
        if found.is_empty() {
            let now = if held.is_empty() {
                "nothing is held back there".to_string()
            } else {
                format!("held back there: {}", held.keys().cloned().collect::<Vec<_>>().join(", "))
            };
            bail!(
                "`{pattern}` is not held back by the gateway whose state is in {} ({now})\n  \
                 hint: pass --state-dir DIR for a gateway with another state directory, or lint a \
                 tools file or --mcp-config to approve what they list",
                state_dir.display()
            );
        }
        chosen.extend(found);
    }
    crate::catalog::admission::update_lockfile(lock_path, |lock| {
        for (_, h) in &chosen {
            lock.pin(&h.provider, &h.spec);
        }
    })
    .with_context(|| format!("cannot update {}", lock_path.display()))?;
    for (name, h) in &chosen {
        eprintln!("approved {name}");
        if !h.also_breaks.is_empty() {
            eprintln!(
                "  note: its new version also breaks {}; the gateway refuses it rather than serve it \
                 (approving lifts only the hold on a changed tool)",
                h.also_breaks.join("; ")
            );
        }
    }
    eprintln!(
        "{} pinned in {}; a gateway serving from {} uses the new version now",
        if chosen.len() == 1 { "it is" } else { "they are" },
        lock_path.display(),
        state_dir.display()
    );
    Ok(())
}

/// Starts every server of the fleet (sandboxed when the host allows), lists their tools. They
/// start together, each launched in the background, so that progress can say which have
/// started (and how long each took) while the others are still starting.
async fn from_fleet(files: &[PathBuf], quiet: bool) -> Result<Catalog> {
    use crate::config::env::ProcessEnv;
    let mut fleet = crate::config::fleet::Fleet::default();
    for f in files {
        let part = crate::config::fleet::load(f, &ProcessEnv).map_err(|e| anyhow::anyhow!("{e}"))?;
        fleet.merge(part, f).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let tmp = std::env::temp_dir().join(format!("axp-lint-{}", std::process::id()));
    let egress = Arc::new(crate::execution::egress::Egress::new(tmp.join("egress")));
    let (kernel, launcher) = crate::execution::sandboxing::kernel_lsm(&[], egress, None);
    let launcher: Arc<dyn axp_providers::Launcher> = match launcher {
        Some(l) => l,
        None => bail!(
            "cannot start the fleet's servers sandboxed: {}; lint a tools/list JSON file instead",
            kernel.err().unwrap_or_default()
        ),
    };
    let workspace = std::env::current_dir()?;
    let mounts = crate::catalog::providers::fleet(
        &fleet,
        &Default::default(),
        &workspace,
        launcher,
        false,
        &axp_providers::RelayLink::default(),
    )
    .await?;
    let mode = crate::commands::progress::Mode::detect(quiet);
    let progress = crate::commands::progress::Servers::new(mode, "started", "", Some(mounts.len()));
    let listed = futures::future::join_all(mounts.iter().map(|m| {
        let id = m.provider.id().to_string();
        progress.waiting(&id);
        let progress = &progress;
        async move {
            let tools = match tokio::time::timeout(Duration::from_secs(60), first_tools(&m.provider)).await {
                Ok(Ok(tools)) => {
                    progress.settled(&id, Ok(tools.len()));
                    Ok(tools)
                }
                Ok(Err(e)) => {
                    let why = match &e {
                        axp_providers::ProviderError::Unavailable { reason, .. } => reason.clone(),
                        other => other.to_string(),
                    };
                    progress.settled(&id, Err(&why));
                    Err(anyhow::anyhow!("`{id}`: {e}"))
                }
                Err(_) => {
                    progress.settled(&id, Err("did not list its tools within 60 s"));
                    Err(anyhow::anyhow!("`{id}` did not list its tools within 60 s"))
                }
            };
            (id, tools)
        }
    }))
    .await;
    progress.finish();
    for m in &mounts {
        let _ = m.provider.shutdown().await;
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let mut cat = Catalog::new();
    for (id, tools) in listed {
        cat.insert(id, tools?);
    }
    Ok(cat)
}

/// A launched provider's tools once its first start has ended (its error if that failed).
async fn first_tools(
    provider: &axp_providers::DynProvider,
) -> Result<Vec<axp_protocol::ToolSpec>, axp_providers::ProviderError> {
    loop {
        match provider.tools().await {
            Err(axp_providers::ProviderError::Starting { .. }) => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            other => return other,
        }
    }
}

/// Lists a running gateway's tools through `axp.index` + `axp.describe`.
async fn from_gateway(url: &str) -> Result<Catalog> {
    let mut c = crate::commands::client::Client::new(&crate::commands::client::ClientArgs {
        url: url.to_string(),
        json: false,
        operator_token: std::env::var("AXP_OPERATOR_TOKEN").ok(),
    });
    let idx = c.call("axp.index", json!({"limit": 500})).await?;
    let mut by_provider: std::collections::BTreeMap<String, Vec<axp_protocol::ToolSpec>> = Default::default();
    for t in idx["tools"].as_array().into_iter().flatten() {
        let d = c.call("axp.describe", json!({"name": t["name"]})).await?;
        let provider = d["provider"].as_str().unwrap_or("gateway").to_string();
        let name = d["name"].as_str().unwrap_or_default();
        let own = name.strip_prefix(&format!("{provider}__")).unwrap_or(name).to_string();
        let mut spec =
            axp_protocol::ToolSpec::new(own, d["description"].as_str().unwrap_or_default(), d["schema"].clone());
        spec.annotations = d.get("annotations").cloned().filter(|v| !v.is_null());
        spec.output_schema = d.get("output_schema").cloned().filter(|v| !v.is_null());
        by_provider.entry(provider).or_default().push(spec);
    }
    let mut cat = Catalog::new();
    for (p, tools) in by_provider {
        cat.insert(p, tools);
    }
    Ok(cat)
}
