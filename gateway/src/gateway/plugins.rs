//! Installed plugins in a running gateway: mounts every plugin recorded in the state dir's
//! `plugins.lock` as a provider (WASM in-process under wasmtime's limits, native libraries in
//! the sandboxed `axp __plugin-host` helper started by the gateway's launcher, with the
//! manifest's `net`/`fs` grants compiled into its policy), and keeps the registry in step with
//! the lockfile while the gateway runs: `axp provider add/remove` in another process changes the
//! lockfile, this module's watcher sees it, mounts or unmounts, and tells clients through
//! `notifications/tools/list_changed`. Plugin tools pass the registration lint like every tool.
//!
//! It applies the `[plugins]` table of `axp.toml` (read by `settings`) and owns the install-time
//! lint verdict. It never
//! installs or verifies artifacts itself (that is `axp-plugin-host`), and never gives a plugin
//! more than its manifest grants.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axp_plugin_host::{HostContext, Installed};
use axp_protocol::ToolSpec;
use axp_providers::{DynProvider, Launcher, ProviderEvent, ProviderId};
use tokio_util::sync::CancellationToken;

use crate::catalog::registry::Mount;
use crate::config::fleet::PrefixMode;
use crate::config::settings::PluginSettings;
use crate::execution::egress::Egress;
use crate::gateway::Gateway;

/// A host context with the limits `[plugins]` asks for, grants resolved against `workspace`, and WASM HTTP
/// routed through the gateway's egress proxy for the plugin's `net` allowlist (native
/// plugins reach it through their sandbox's forwarder, like every sandboxed process).
pub fn host_context(
    settings: &PluginSettings,
    launcher: Arc<dyn Launcher>,
    workspace: &Path,
    egress: Arc<Egress>,
) -> Result<HostContext> {
    let mut ctx = HostContext::with_limits(launcher, settings.limits()).context("cannot start the plugin runtime")?;
    ctx.trusted = settings.dangerously_trusted.clone();
    for name in &settings.secrets_from_env {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') {
            anyhow::bail!("[plugins] secrets_from_env: `{name}` is not a secret name (A-Z, 0-9 and _)");
        }
        match std::env::var(name) {
            Ok(v) => {
                ctx.secrets.insert(name.clone(), v);
            }
            Err(_) => tracing::warn!(secret = %name, "[plugins] secrets_from_env names a variable that is not set"),
        }
    }
    ctx.workspace = Some(workspace.to_path_buf());
    // Each plugin gets a proxy of its own, like a configured provider, so its attempts are
    // audited under its id.
    ctx.egress_route = Some(Arc::new(move |id: &str, net: &[String]| {
        egress.socket_for(&axp_providers::NetScope::Provider(id.to_string()), net)
    }));
    Ok(ctx)
}

/// The registration lint's verdict on a plugin's tools, before it is installed: `Err` names
/// every refused tool and why. The same rules run again when a gateway mounts it.
pub fn lint_at_install(
    lint_table: Option<&toml::Value>,
    id: &str,
    tools: &[ToolSpec],
) -> std::result::Result<(), String> {
    let config = match lint_table {
        Some(toml::Value::Table(t)) => axp_lint::LintConfig::from_table(t).map_err(|e| format!("[lint]: {e}"))?,
        Some(_) => return Err("[lint] must be a table".into()),
        None => axp_lint::LintConfig::default(),
    };
    let lock = axp_lint::Lockfile::default();
    let mut refused = Vec::new();
    for (i, spec) in tools.iter().enumerate() {
        // Catalog-wide rules (near-duplicates) compare a tool with its siblings.
        let mut others = axp_lint::Catalog::new();
        others.insert(
            id.to_string(),
            tools.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, t)| t.clone()).collect(),
        );
        let found = axp_lint::registration::lint_tool_in(id, spec, &config, &lock, &others);
        let verdict = axp_lint::Verdict::decide(found, &config);
        if !verdict.is_publish() {
            refused.push(format!("`{}__{}`: {}", id, spec.name, verdict.reasons_text().join("; ")));
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "refused by the registration lint (a poisoned or unusable tool description):\n  {}\nhint: `axp lint --explain RULE` says what each rule checks",
            refused.join("\n  ")
        ))
    }
}

/// One mounted plugin: what it was loaded from, and the token that ends its event loop.
struct Loaded {
    fingerprint: String,
    stop: CancellationToken,
}

/// The plugins a gateway serves, kept in step with `STATE_DIR/plugins/plugins.lock`.
pub struct Plugins {
    gw: Arc<Gateway>,
    state_dir: PathBuf,
    ctx: HostContext,
    loaded: tokio::sync::Mutex<BTreeMap<String, Loaded>>,
}

fn fingerprint(p: &Installed) -> String {
    format!("{}@{}#{}", p.id, p.version, p.sha256)
}

impl Plugins {
    /// Mounts every installed plugin now, then watches the lockfile for changes.
    pub async fn start(gw: Arc<Gateway>, state_dir: PathBuf, ctx: HostContext) -> Result<Arc<Self>> {
        std::fs::create_dir_all(&state_dir).with_context(|| format!("cannot create {}", state_dir.display()))?;
        let me = Arc::new(Self { gw, state_dir, ctx, loaded: tokio::sync::Mutex::new(BTreeMap::new()) });
        // In a task: starting a plugin's egress proxy blocks in place, which only a runtime
        // worker may do.
        let first = me.clone();
        tokio::spawn(async move { first.sync().await }).await.context("loading the installed plugins failed")?;
        me.clone().watch()?;
        Ok(me)
    }

    /// Brings the mounted set in line with the lockfile; tells clients when anything changed.
    pub async fn sync(&self) {
        let mut loaded = self.loaded.lock().await;
        let wanted = match axp_plugin_host::list(&self.state_dir) {
            Ok(w) => w,
            Err(e) => {
                // A half-edited or corrupt lockfile keeps what is mounted rather than dropping it.
                tracing::error!(error = %e, "plugins lockfile unreadable; keeping the mounted plugins");
                return;
            }
        };
        let wanted_fp: BTreeMap<String, String> = wanted.iter().map(|p| (p.id.clone(), fingerprint(p))).collect();
        let mut changed = false;
        let gone: Vec<String> = loaded
            .iter()
            .filter(|(id, l)| wanted_fp.get(*id) != Some(&l.fingerprint))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some(l) = loaded.remove(&id) {
                l.stop.cancel();
            }
            if let Some(p) = self.gw.registry.unmount(&ProviderId(id.clone())) {
                let _ = tokio::time::timeout(Duration::from_secs(3), p.shutdown()).await;
            }
            tracing::info!(plugin = %id, "plugin unmounted");
            changed = true;
        }
        for entry in &wanted {
            if loaded.contains_key(&entry.id) {
                continue;
            }
            let pid = ProviderId(entry.id.clone());
            if self.gw.registry.provider(&pid).is_some() {
                tracing::error!(plugin = %entry.id, "plugin not mounted: a configured provider already has that name");
                continue;
            }
            let provider = match axp_plugin_host::load_one(&self.state_dir, entry, &self.ctx).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::error!(plugin = %entry.id, error = %e, "installed plugin not loaded");
                    continue;
                }
            };
            let kind = match entry.kind {
                axp_plugin_host::PluginKind::Wasm => "wasm",
                axp_plugin_host::PluginKind::Dylib => "dylib",
            };
            let stop = CancellationToken::new();
            self.mount(Mount { provider, kind, prefix: PrefixMode::Always }, stop.clone()).await;
            loaded.insert(entry.id.clone(), Loaded { fingerprint: fingerprint(entry), stop });
            tracing::info!(plugin = %entry.id, kind, "plugin mounted");
            changed = true;
        }
        if changed {
            self.gw.tools_changed();
        }
    }

    /// Mounts one provider, lists (and lints) its tools before returning, and follows its
    /// events until `stop`.
    async fn mount(&self, m: Mount, stop: CancellationToken) {
        let provider: DynProvider = m.provider.clone();
        self.gw.registry.mount(m);
        crate::gateway::catalog::refresh(&self.gw, &provider).await;
        let Some(mut rx) = provider.events() else { return };
        let gw = self.gw.clone();
        tokio::spawn(async move {
            let id = provider.id().clone();
            loop {
                let ev = tokio::select! {
                    ev = rx.recv() => ev,
                    () = stop.cancelled() => return,
                };
                match ev {
                    Ok(ProviderEvent::Unavailable { reason }) => {
                        // A native helper that crashed is restarted on the next call, so the
                        // plugin stays callable; the reason is kept for describe and logs.
                        tracing::warn!(plugin = %id, %reason, "plugin host process failed");
                    }
                    Ok(ProviderEvent::ToolsChanged | ProviderEvent::Available) => {
                        crate::gateway::catalog::refresh(&gw, &provider).await;
                        gw.tools_changed();
                    }
                    Ok(other) => gw.relay_event(&id, other),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    /// Watches the plugins dir for the lockfile being replaced, and re-syncs after each change.
    fn watch(self: Arc<Self>) -> Result<()> {
        let dir = axp_plugin_host::plugins_dir(&self.state_dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut watch = crate::watch::FileWatch::new(&dir, axp_plugin_host::LOCK_FILE, "plugins lockfile")?;
        tokio::spawn(async move {
            while watch.changed().await {
                self.sync().await;
            }
        });
        Ok(())
    }
}
