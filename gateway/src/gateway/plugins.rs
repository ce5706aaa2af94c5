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
//!
//! On a PostgreSQL store every replica serves the same plugins: the plugin lockfile and each
//! installed plugin's files (artifact, manifest, signature) are shared files in the database
//! ([`SHARED_LOCK`], and [`SHARED_FILES`] followed by the plugin's directory and the file's
//! name), and each replica's `STATE/plugins/` is their mirror and its inbox. A plugin an
//! operator installs or removes in one replica's state directory (`axp provider add/remove`) is
//! published by that replica — its files first, then its lockfile entry — and every replica
//! polls the database's version every [`SHARED_POLL`], copies in the files of what it lacks
//! (loading re-checks each artifact's digest against the lockfile, as for a local install),
//! removes what is gone, writes its own lockfile, and mounts or unmounts as for a local change.
//! At start a replica adds to the database the plugins it has that the database lacks; for a
//! plugin both have, the database wins.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use axp_plugin_host::{HostContext, Installed};
use axp_protocol::ToolSpec;
use axp_providers::{DynProvider, Launcher, ProviderEvent, ProviderId};
use axp_store::{Store, StoreKind};
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

/// The plugin lockfile's name among a PostgreSQL store's shared files.
pub const SHARED_LOCK: &str = "plugins/plugins.lock";
/// The prefix of installed plugins' files among a PostgreSQL store's shared files.
pub const SHARED_FILES: &str = "plugins/files/";
/// How often a replica on a PostgreSQL store looks for plugins another replica changed.
pub const SHARED_POLL: Duration = Duration::from_secs(1);

/// The plugins a gateway serves, kept in step with `STATE_DIR/plugins/plugins.lock`.
pub struct Plugins {
    gw: Arc<Gateway>,
    state_dir: PathBuf,
    ctx: HostContext,
    loaded: tokio::sync::Mutex<BTreeMap<String, Loaded>>,
    /// On a PostgreSQL store: the plugins every replica shares (see the module docs).
    shared: Option<Arc<SharedPlugins>>,
}

/// The plugins in a PostgreSQL store, and what this replica last knew of them.
struct SharedPlugins {
    store: Store,
    /// The version of the database's lockfile this replica mirrored last.
    version: std::sync::atomic::AtomicU64,
    /// The plugins as this replica last wrote its own lockfile from the database's (what an
    /// operator's install or removal here is told apart from); `None` before the first sync.
    mirrored: Mutex<Option<Vec<Installed>>>,
}

fn fingerprint(p: &Installed) -> String {
    format!("{}@{}#{}", p.id, p.version, p.sha256)
}

impl Plugins {
    /// Mounts every installed plugin now, then watches the lockfile for changes.
    pub async fn start(gw: Arc<Gateway>, state_dir: PathBuf, ctx: HostContext) -> Result<Arc<Self>> {
        std::fs::create_dir_all(&state_dir).with_context(|| format!("cannot create {}", state_dir.display()))?;
        let store = gw.jobs.store().clone();
        let shared = (store.kind() == StoreKind::Postgres).then(|| {
            Arc::new(SharedPlugins { store, version: std::sync::atomic::AtomicU64::new(0), mirrored: Mutex::new(None) })
        });
        let me = Arc::new(Self { gw, state_dir, ctx, loaded: tokio::sync::Mutex::new(BTreeMap::new()), shared });
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
        if let Some(sh) = self.shared.clone() {
            let dir = self.state_dir.clone();
            match tokio::task::spawn_blocking(move || sync_shared(&sh, &dir)).await {
                Ok(Ok(false)) => return,
                Ok(Ok(true)) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "cannot bring the plugins in step with the PostgreSQL store; keeping the mounted plugins");
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %e, "the plugins' sync with the PostgreSQL store failed");
                    return;
                }
            }
        }
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
        let mut watch = crate::watch::FileWatch::new(&dir, axp_plugin_host::LOCK_FILE, "plugins lockfile")?
            .also_every(self.shared.is_some().then_some(SHARED_POLL));
        tokio::spawn(async move {
            while watch.changed().await {
                self.sync().await;
            }
        });
        Ok(())
    }
}

/// Brings this replica's plugins and the database's together (see the module docs): an
/// operator's install or removal in this state directory since the last sync goes to the
/// database (files first), then what the database lists is copied in, what it does not is
/// removed, and the local lockfile becomes the database's. `false` when neither side changed
/// since the last sync (one query, one small read).
fn sync_shared(sh: &SharedPlugins, state_dir: &Path) -> anyhow::Result<bool> {
    // From reading the local lockfile to writing the database's over it: an `axp provider add`
    // that wrote in between would otherwise be overwritten, unseen.
    let hold = axp_plugin_host::hold_lock(state_dir)?;
    let local = axp_plugin_host::list(state_dir)?;
    let version = sh.store.shared_versions(SHARED_LOCK)?.iter().find(|(n, _)| n == SHARED_LOCK).map_or(0, |(_, v)| *v);
    let mut mirrored = sh.mirrored.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let unchanged_here = mirrored.as_ref() == Some(&local);
    if unchanged_here && version == sh.version.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(false);
    }
    // What the operator changed here: every local plugin before the first sync (added only
    // where the database has none of that id), and later the entries that differ from the
    // mirror (added or replaced) and the ids gone from it (removed).
    let first = mirrored.is_none();
    let (upserts, removed): (Vec<Installed>, Vec<Installed>) = match mirrored.as_ref() {
        None => {
            let db = match sh.store.read_shared(SHARED_LOCK)? {
                Some(f) => parse_lock(&f.body)?,
                None => Vec::new(),
            };
            (local.iter().filter(|l| !db.iter().any(|d| d.id == l.id)).cloned().collect(), Vec::new())
        }
        Some(m) => (
            local.iter().filter(|e| !m.contains(e)).cloned().collect(),
            m.iter().filter(|e| !local.iter().any(|l| l.id == e.id)).cloned().collect(),
        ),
    };
    for e in &upserts {
        publish_files(&sh.store, state_dir, e)?;
    }
    let mut replaced: Vec<Installed> = Vec::new();
    let db = if upserts.is_empty() && removed.is_empty() {
        match sh.store.read_shared(SHARED_LOCK)? {
            Some(f) => (parse_lock(&f.body)?, f.version),
            None => (Vec::new(), 0),
        }
    } else {
        let (ups, gone) = (upserts.clone(), removed.clone());
        let parse = |body: &[u8]| parse_lock(body).map_err(|e| e.to_string());
        crate::util::update_shared_as(
            &sh.store,
            SHARED_LOCK,
            parse,
            |list| axp_plugin_host::render_lock(list).ok(),
            move |list: &mut Vec<Installed>| {
                for e in ups {
                    match list.iter().position(|p| p.id == e.id) {
                        Some(_) if first => {}
                        Some(i) => list[i] = e,
                        None => list.push(e),
                    }
                }
                list.retain(|p| !gone.iter().any(|g| g.id == p.id));
                list.sort_by(|a, b| a.id.cmp(&b.id));
            },
        )?
        .map_err(|e| anyhow::anyhow!("the plugin lockfile in the PostgreSQL store is unreadable: {e}"))?
    };
    let (db, db_version) = db;
    if !first {
        // The files of versions this replica removed or replaced are no longer needed.
        replaced.extend(removed);
        if let Some(m) = mirrored.as_ref() {
            replaced.extend(m.iter().filter(|o| upserts.iter().any(|u| u.id == o.id && u.dir != o.dir)).cloned());
        }
        for old in &replaced {
            forget_files(&sh.store, old);
        }
    }
    // The database's plugins here: copy in what is missing or different, remove what is gone.
    for e in &db {
        if !files_in_place(state_dir, e) {
            fetch_files(&sh.store, state_dir, e)?;
        }
    }
    for e in &local {
        if !db.iter().any(|d| d.id == e.id && d.dir == e.dir) && safe_dir(&e.dir) {
            let _ = std::fs::remove_dir_all(state_dir.join(&e.dir));
        }
    }
    if local != db {
        axp_plugin_host::replace_list(state_dir, &hold, db.clone())?;
    }
    *mirrored = Some(db);
    sh.version.store(db_version, std::sync::atomic::Ordering::SeqCst);
    Ok(true)
}

fn parse_lock(body: &[u8]) -> anyhow::Result<Vec<Installed>> {
    Ok(axp_plugin_host::parse_lock(std::str::from_utf8(body)?)?)
}

/// Whether `dir` (a plugin's directory, relative to the state directory) stays inside
/// `plugins/`: only plain components, so no name from the database reaches elsewhere.
fn safe_dir(dir: &Path) -> bool {
    dir.starts_with("plugins")
        && dir.components().count() >= 2
        && dir.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The shared file that holds `file` of the plugin installed in `dir`.
fn shared_name(dir: &Path, file: &str) -> String {
    format!("{SHARED_FILES}{}/{file}", dir.display())
}

/// Whether plugin `e`'s artifact is here with the digest the lockfile records.
fn files_in_place(state_dir: &Path, e: &Installed) -> bool {
    let dir = state_dir.join(&e.dir);
    dir.join(axp_plugin_host::MANIFEST_FILE).is_file()
        && std::fs::read(dir.join(&e.artifact)).is_ok_and(|b| axp_plugin_host::sha256_hex(&b) == e.sha256)
}

/// Stores every file of plugin `e`'s directory in the database.
fn publish_files(store: &Store, state_dir: &Path, e: &Installed) -> anyhow::Result<()> {
    anyhow::ensure!(safe_dir(&e.dir), "plugin `{}` has a directory outside plugins/: {}", e.id, e.dir.display());
    let dir = state_dir.join(&e.dir);
    for f in std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let f = f?;
        if !f.file_type()?.is_file() {
            continue;
        }
        let name = f.file_name().to_string_lossy().into_owned();
        let body = std::fs::read(f.path()).with_context(|| format!("cannot read {}", f.path().display()))?;
        store.update_shared(
            &shared_name(&e.dir, &name),
            Box::new(move |now| (now != Some(&body[..])).then_some(body)),
        )?;
    }
    Ok(())
}

/// Writes plugin `e`'s files from the database into its directory here (replaced whole).
fn fetch_files(store: &Store, state_dir: &Path, e: &Installed) -> anyhow::Result<()> {
    anyhow::ensure!(safe_dir(&e.dir), "plugin `{}` has a directory outside plugins/: {}", e.id, e.dir.display());
    let prefix = shared_name(&e.dir, "");
    let names = store.shared_versions(&prefix)?;
    anyhow::ensure!(!names.is_empty(), "the PostgreSQL store has no files of plugin `{}` {}", e.id, e.version);
    let dir = state_dir.join(&e.dir);
    let tmp = PathBuf::from(format!("{}.incoming", dir.display()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    for (name, _) in names {
        let file = &name[prefix.len()..];
        if file.is_empty() || file.contains('/') || file.starts_with('.') {
            anyhow::bail!("plugin `{}` has a file with an unusable name in the PostgreSQL store: {name}", e.id);
        }
        let Some(body) = store.read_shared(&name)? else { continue };
        std::fs::write(tmp.join(file), body.body)
            .with_context(|| format!("cannot write {}", tmp.join(file).display()))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir).with_context(|| format!("cannot write {}", dir.display()))?;
    Ok(())
}

/// Forgets plugin `e`'s files in the database (its version was removed or replaced).
fn forget_files(store: &Store, e: &Installed) {
    let names = match store.shared_versions(&shared_name(&e.dir, "")) {
        Ok(n) => n,
        Err(err) => {
            tracing::warn!(plugin = %e.id, error = %err, "cannot list a removed plugin's files in the PostgreSQL store");
            return;
        }
    };
    for (name, _) in names {
        if let Err(err) = store.delete_shared(&name) {
            tracing::warn!(plugin = %e.id, error = %err, "cannot forget a removed plugin's file in the PostgreSQL store");
        }
    }
}
