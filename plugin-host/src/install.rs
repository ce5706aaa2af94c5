//! Install, list, inspect, remove and load plugins in a state directory. This file owns the
//! on-disk layout (`STATE/plugins/<id>/<version>/`, `STATE/plugins/plugins.lock`) and the install
//! checks in order: manifest, digest (against the manifest and `--sha256`), signature (when a
//! key is given), a trial instantiation that lists the tools, then the copy and the lockfile
//! entry. It does not lint descriptions (the gateway does, with the returned tools) and it does
//! not tell running gateways (they watch the lockfile).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axp_protocol::ToolSpec;
use axp_provider_api::{DynProvider, Launcher, ProcessPolicy};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::manifest::{MANIFEST_FILE, Manifest, ManifestError, PluginKind};
use crate::native::{DylibConfig, DylibProvider, HelperCommand};
use crate::wasm::{WasmError, WasmGrants, WasmLimits, WasmProvider, WasmRuntime};

/// The lockfile's name inside the state directory.
pub const LOCK_FILE: &str = "plugins.lock";

/// Why an install (or a load of an installed plugin) was refused.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The manifest is missing, malformed, for another ABI, or over-reaching.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The artifact's digest differs from the manifest's: it changed after it was published.
    #[error("the artifact {path} was tampered with: its sha256 is {actual}, but the manifest says {expected}")]
    Tampered { path: PathBuf, expected: String, actual: String },
    /// The artifact's digest differs from the one the operator gave with `--sha256`.
    #[error("wrong digest: --sha256 expects {expected}, but the artifact's sha256 is {actual}")]
    WrongDigest { expected: String, actual: String },
    /// The signature is missing, malformed or does not verify with the given key.
    #[error("bad signature: {0}")]
    Signature(String),
    /// The WASM component is invalid or for another ABI.
    #[error(transparent)]
    Wasm(#[from] WasmError),
    /// The native plugin could not be started or probed.
    #[error("the native plugin could not be loaded: {0}")]
    Native(String),
    /// The plugin reports an id other than its manifest's.
    #[error("the plugin calls itself `{found}` but its manifest says `{expected}`")]
    IdMismatch { expected: String, found: String },
    /// The caller's check of the plugin's tools (the gateway's registration lint) refused it.
    #[error("{0}")]
    Refused(String),
    /// The egress proxy for the plugin's `net` grants could not be started.
    #[error("cannot route the plugin's network access through the egress proxy: {0}")]
    Egress(String),
    /// No installed plugin has that id.
    #[error("no installed plugin `{0}`; hint: `axp provider list` shows what is installed")]
    NotInstalled(String),
    /// The lockfile is unreadable or malformed.
    #[error("the lockfile {path} is corrupt: {message}")]
    Lock { path: PathBuf, message: String },
    /// Reading or writing files failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> InstallError {
    let context = context.into();
    move |source| InstallError::Io { context, source }
}

/// One installed plugin, as recorded in the lockfile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Installed {
    pub id: String,
    pub version: String,
    pub kind: PluginKind,
    pub abi: String,
    pub sha256: String,
    /// Directory holding the artifact and manifest, relative to the state directory.
    pub dir: PathBuf,
    pub artifact: String,
    /// Whether a minisign signature was verified at install, and with which key.
    #[serde(default)]
    pub signed_by: Option<String>,
    pub installed_at: u64,
    /// Tool names at install time.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub capabilities: crate::manifest::Capabilities,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct LockFile {
    #[serde(default, rename = "plugin")]
    plugins: Vec<Installed>,
}

/// How to probe and run plugins: the WASM runtime, and how native plugins' helper processes
/// are started.
#[derive(Clone)]
pub struct HostContext {
    pub runtime: WasmRuntime,
    pub launcher: Arc<dyn Launcher>,
    pub helper: HelperCommand,
    /// Secret values by name; a plugin sees only those its manifest declares.
    pub secrets: BTreeMap<String, String>,
    /// Test/pinning hook passed to WASM plugins (see [`WasmGrants::resolve_override`]).
    pub resolve_override: std::collections::HashMap<String, std::net::SocketAddr>,
    /// Native plugins listed here run inside the gateway process (`trusted = true`).
    pub trusted: Vec<String>,
    pub native_timeout: Duration,
    /// Starts (or finds) the egress proxy enforcing a `net` allowlist and returns its socket;
    /// WASM plugins with `net` grants send every HTTP request through it. `None`: direct
    /// connections after the host's allowlist check (library use).
    pub egress_route: Option<EgressRoute>,
    /// The workspace that manifests' `fs` grants (workspace-relative directories) resolve
    /// against. `None`: `fs` grants are refused at load.
    pub workspace: Option<PathBuf>,
}

impl std::fmt::Debug for HostContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostContext").field("launcher", &self.launcher).field("helper", &self.helper).finish()
    }
}

impl HostContext {
    /// Default limits, the given launcher, and this executable as the native helper.
    pub fn new(launcher: Arc<dyn Launcher>) -> Result<Self, InstallError> {
        Self::with_limits(launcher, WasmLimits::default())
    }

    /// As [`HostContext::new`], with these WASM limits (the native call timeout follows the
    /// WASM call timeout).
    pub fn with_limits(launcher: Arc<dyn Launcher>, limits: WasmLimits) -> Result<Self, InstallError> {
        let native_timeout = limits.call_timeout;
        Ok(Self {
            runtime: WasmRuntime::new(limits)?,
            launcher,
            helper: HelperCommand::current_exe().map_err(io("locating the current executable"))?,
            secrets: BTreeMap::new(),
            resolve_override: Default::default(),
            trusted: Vec::new(),
            native_timeout,
            egress_route: None,
            workspace: None,
        })
    }
}

/// See [`HostContext::egress_route`].
/// Called with the plugin's id and its `net` grants; returns the socket of the egress proxy
/// that enforces them for that plugin.
pub type EgressRoute = Arc<dyn Fn(&str, &[String]) -> Result<PathBuf, String> + Send + Sync>;

/// Options of one install.
#[derive(Debug, Clone, Default)]
pub struct InstallOptions {
    /// `--sha256`: the digest the operator expects.
    pub expected_sha256: Option<String>,
    /// `--pubkey`: a minisign public key (base64, or a path to a `.pub` file). When given, the
    /// plugin must carry a signature that verifies with it.
    pub pubkey: Option<String>,
}

/// Hex SHA-256 of a byte string.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Finds the manifest for `source`: a plugin directory, a manifest file, or an artifact with a
/// manifest next to it. A bare `.wasm` without one gets a manifest with no capabilities.
fn locate(source: &Path) -> Result<(Manifest, PathBuf), InstallError> {
    let meta = std::fs::metadata(source).map_err(io(format!("cannot read {}", source.display())))?;
    let manifest_path = if meta.is_dir() {
        source.join(MANIFEST_FILE)
    } else if source.extension().is_some_and(|e| e == "toml") {
        source.to_path_buf()
    } else {
        let dir = source.parent().unwrap_or(Path::new("."));
        let sibling = dir.join(MANIFEST_FILE);
        let name = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match Manifest::load(&sibling) {
            Ok(m) if m.artifact == name => return Ok((m, dir.to_path_buf())),
            _ if source.extension().is_some_and(|e| e == "wasm") => {
                // A bare component: the least authority, and the id from its file name.
                let bytes = std::fs::read(source).map_err(io(format!("cannot read {}", source.display())))?;
                let stem = source.file_stem().map(|s| s.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
                let m = Manifest {
                    id: stem.replace('.', "-"),
                    version: "0.0.0".into(),
                    abi: crate::ABI_VERSION.into(),
                    kind: PluginKind::Wasm,
                    artifact: name,
                    sha256: sha256_hex(&bytes),
                    description: None,
                    capabilities: Default::default(),
                    signature: None,
                };
                m.validate()?;
                return Ok((m, dir.to_path_buf()));
            }
            _ => {
                return Err(InstallError::Native(format!(
                    "{} has no {MANIFEST_FILE} next to it; native plugins need a manifest",
                    source.display()
                )));
            }
        }
    };
    let m = Manifest::load(&manifest_path)?;
    let dir = manifest_path.parent().unwrap_or(Path::new(".")).to_path_buf();
    Ok((m, dir))
}

fn verify_signature(manifest: &Manifest, dir: &Path, artifact: &[u8], pubkey: &str) -> Result<String, InstallError> {
    let key = if Path::new(pubkey).is_file() {
        minisign_verify::PublicKey::from_file(pubkey)
    } else {
        minisign_verify::PublicKey::from_base64(pubkey.trim())
    }
    .map_err(|e| InstallError::Signature(format!("the public key is not a minisign key: {e}")))?;
    let sig_path = match &manifest.signature {
        Some(s) => dir.join(&s.minisign),
        None => dir.join(format!("{}.minisig", manifest.artifact)),
    };
    if !sig_path.is_file() {
        return Err(InstallError::Signature(format!(
            "a public key was given but the plugin carries no signature ({} is missing)",
            sig_path.display()
        )));
    }
    let sig = minisign_verify::Signature::from_file(&sig_path)
        .map_err(|e| InstallError::Signature(format!("{} is not a minisign signature: {e}", sig_path.display())))?;
    key.verify(artifact, &sig, false).map_err(|e| {
        InstallError::Signature(format!(
            "{} does not verify with the given key ({e}): the artifact was changed or signed by someone else",
            sig_path.display()
        ))
    })?;
    Ok(pubkey.trim().chars().take(16).collect())
}

/// The host directories of a manifest's `fs` grants: each inside the workspace after symbolic
/// links are resolved (a link pointing out of the workspace is refused), and existing.
pub fn fs_grants(manifest: &Manifest, workspace: Option<&Path>) -> Result<Vec<(PathBuf, String)>, InstallError> {
    if manifest.capabilities.fs.is_empty() {
        return Ok(Vec::new());
    }
    let refuse = |problem: String| {
        InstallError::Manifest(ManifestError::OverReach { id: manifest.id.clone(), problems: vec![problem] })
    };
    let Some(ws) = workspace else {
        return Err(refuse("fs grants need a workspace, and this host has none configured".into()));
    };
    let ws = ws.canonicalize().map_err(io(format!("cannot resolve the workspace {}", ws.display())))?;
    let mut out = Vec::new();
    for rel in &manifest.capabilities.fs {
        let host = ws
            .join(rel)
            .canonicalize()
            .map_err(|e| refuse(format!("fs `{rel}`: {} cannot be used: {e}", ws.join(rel).display())))?;
        if !host.starts_with(&ws) || !host.is_dir() {
            return Err(refuse(format!(
                "fs `{rel}` resolves to {}, which is not a directory inside the workspace {}",
                host.display(),
                ws.display()
            )));
        }
        out.push((host, rel.trim_end_matches('/').to_string()));
    }
    Ok(out)
}

async fn probe(
    ctx: &HostContext,
    manifest: &Manifest,
    artifact_path: &Path,
    bytes: &[u8],
) -> Result<(DynProvider, Vec<ToolSpec>), InstallError> {
    match manifest.kind {
        PluginKind::Wasm => {
            let mut grants = WasmGrants::from_capabilities(&manifest.capabilities, &|n| ctx.secrets.get(n).cloned());
            grants.resolve_override = ctx.resolve_override.clone();
            grants.preopens = fs_grants(manifest, ctx.workspace.as_deref())?;
            if let Some(route) = ctx.egress_route.as_ref().filter(|_| !manifest.capabilities.net.is_empty()) {
                grants.egress_proxy =
                    Some(route(&manifest.id, &manifest.capabilities.net).map_err(InstallError::Egress)?);
            }
            let p = WasmProvider::new(&ctx.runtime, &manifest.id, bytes, grants).await?;
            if p.info().id != manifest.id {
                return Err(InstallError::IdMismatch { expected: manifest.id.clone(), found: p.info().id.clone() });
            }
            let tools = axp_provider_api::Provider::tools(&p).await.unwrap_or_default();
            Ok((Arc::new(p), tools))
        }
        PluginKind::Dylib => {
            let cfg = DylibConfig {
                id: manifest.id.clone(),
                library: artifact_path.to_path_buf(),
                helper: ctx.helper.clone(),
                policy: ProcessPolicy {
                    net: manifest.capabilities.net.clone(),
                    net_scope: axp_provider_api::NetScope::Provider(manifest.id.clone()),
                    fs_read: fs_grants(manifest, ctx.workspace.as_deref())?.into_iter().map(|(host, _)| host).collect(),
                    ..Default::default()
                },
                trusted: ctx.trusted.contains(&manifest.id),
                call_timeout: ctx.native_timeout,
            };
            let p =
                DylibProvider::new(cfg, ctx.launcher.clone()).await.map_err(|e| InstallError::Native(e.to_string()))?;
            let tools = axp_provider_api::Provider::tools(&p).await.unwrap_or_default();
            Ok((Arc::new(p), tools))
        }
    }
}

/// Verifies and installs a plugin from `source` (a directory, a manifest, or an artifact) into
/// `state_dir`. `progress` receives one line per step (for the CLI's stderr).
pub async fn install(
    source: &Path,
    opts: &InstallOptions,
    state_dir: &Path,
    ctx: &HostContext,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<(Installed, Vec<ToolSpec>), InstallError> {
    install_vetted(source, opts, state_dir, ctx, progress, &|_, _| Ok(())).await
}

/// A check of a plugin's tools before install: `Err` is the reason to refuse it.
pub type VetTools<'a> = dyn Fn(&str, &[ToolSpec]) -> Result<(), String> + Send + Sync + 'a;

/// As [`install`], and `vet(id, tools)` must accept the plugin's tools before anything is
/// recorded (the gateway passes its registration lint); its error refuses the install.
pub async fn install_vetted(
    source: &Path,
    opts: &InstallOptions,
    state_dir: &Path,
    ctx: &HostContext,
    progress: &(dyn Fn(&str) + Send + Sync),
    vet: &VetTools<'_>,
) -> Result<(Installed, Vec<ToolSpec>), InstallError> {
    progress("reading the manifest");
    let (manifest, dir) = locate(source)?;
    let artifact_path = dir.join(&manifest.artifact);
    let bytes = std::fs::read(&artifact_path).map_err(io(format!("cannot read {}", artifact_path.display())))?;
    progress(&format!("verifying sha256 of {} ({} bytes)", manifest.artifact, bytes.len()));
    let actual = sha256_hex(&bytes);
    if let Some(expected) = &opts.expected_sha256
        && !expected.trim().eq_ignore_ascii_case(&actual)
    {
        return Err(InstallError::WrongDigest { expected: expected.trim().to_ascii_lowercase(), actual });
    }
    if !manifest.sha256.eq_ignore_ascii_case(&actual) {
        return Err(InstallError::Tampered {
            path: artifact_path,
            expected: manifest.sha256.to_ascii_lowercase(),
            actual,
        });
    }
    let signed_by = match &opts.pubkey {
        Some(k) => {
            progress("verifying the minisign signature");
            Some(verify_signature(&manifest, &dir, &bytes, k)?)
        }
        None => None,
    };
    // Copy first (native plugins are probed from their installed path), then probe; a failed
    // probe removes the copy.
    let rel = PathBuf::from("plugins").join(&manifest.id).join(&manifest.version);
    let dest = state_dir.join(&rel);
    if dest.exists() {
        std::fs::remove_dir_all(&dest).map_err(io(format!("cannot replace {}", dest.display())))?;
    }
    std::fs::create_dir_all(&dest).map_err(io(format!("cannot create {}", dest.display())))?;
    let installed_artifact = dest.join(&manifest.artifact);
    let copy = || -> std::io::Result<()> {
        std::fs::write(&installed_artifact, &bytes)?;
        std::fs::write(dest.join(MANIFEST_FILE), manifest.to_toml())?;
        if let Some(sig) = &manifest.signature {
            std::fs::copy(dir.join(&sig.minisign), dest.join(&sig.minisign))?;
        }
        Ok(())
    };
    copy().map_err(io(format!("cannot copy the plugin into {}", dest.display())))?;
    progress(match manifest.kind {
        PluginKind::Wasm => "compiling the component and listing its tools",
        PluginKind::Dylib => "starting the plugin host and listing its tools",
    });
    let probed = probe(ctx, &manifest, &installed_artifact, &bytes).await;
    let (provider, tools) = match probed {
        Ok(p) => p,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dest);
            return Err(e);
        }
    };
    let _ = provider.shutdown().await;
    progress(&format!("linting {} tool descriptions", tools.len()));
    if let Err(why) = vet(&manifest.id, &tools) {
        let _ = std::fs::remove_dir_all(&dest);
        return Err(InstallError::Refused(why));
    }
    let entry = Installed {
        id: manifest.id.clone(),
        version: manifest.version.clone(),
        kind: manifest.kind,
        abi: manifest.abi.clone(),
        sha256: actual,
        dir: rel,
        artifact: manifest.artifact.clone(),
        signed_by,
        installed_at: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        tools: tools.iter().map(|t| t.name.clone()).collect(),
        capabilities: manifest.capabilities.clone(),
    };
    let hold = hold_lock(state_dir)?;
    let mut lock = read_lock(state_dir)?;
    let old: Vec<Installed> = lock.plugins.iter().filter(|p| p.id == entry.id && p.dir != entry.dir).cloned().collect();
    lock.plugins.retain(|p| p.id != entry.id);
    lock.plugins.push(entry.clone());
    lock.plugins.sort_by(|a, b| a.id.cmp(&b.id));
    write_lock(state_dir, &lock)?;
    drop(hold);
    for o in old {
        let _ = std::fs::remove_dir_all(state_dir.join(&o.dir));
    }
    progress(&format!("installed {} {} ({} tools)", entry.id, entry.version, entry.tools.len()));
    Ok((entry, tools))
}

/// The directory holding the lockfile and the installed plugins. Gateways watch it (not the
/// state dir, whose database and audit files change on every call: watching those cost ~5% of
/// a busy gateway's CPU in inotify events nobody wanted).
pub fn plugins_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("plugins")
}

fn lock_path(state_dir: &Path) -> PathBuf {
    plugins_dir(state_dir).join(LOCK_FILE)
}

/// The file whose exclusive `flock(2)` every read-modify-write of the lockfile holds: `axp
/// provider add` and `remove` in any number of processes, and a replica writing its copy of a
/// shared store's lockfile. Without it, a writer that read the lockfile before another wrote it
/// dropped the other's entry when it wrote its own.
const HOLD_FILE: &str = ".plugins.lock.hold";

/// An exclusive hold on the plugin lockfile, released when dropped.
#[derive(Debug)]
pub struct LockHold(#[allow(dead_code, reason = "held for its lock, released on drop")] std::fs::File);

/// Waits for, and takes, the exclusive hold on `state_dir`'s plugin lockfile. Hold it from
/// reading the lockfile to writing it back, and no longer (other writers wait meanwhile).
pub fn hold_lock(state_dir: &Path) -> Result<LockHold, InstallError> {
    let dir = plugins_dir(state_dir);
    std::fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let path = dir.join(HOLD_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(format!("cannot open {}", path.display())))?;
    file.lock().map_err(io(format!("cannot lock {}", path.display())))?;
    Ok(LockHold(file))
}

fn read_lock(state_dir: &Path) -> Result<LockFile, InstallError> {
    let path = lock_path(state_dir);
    // Lockfiles written before it moved into `plugins/` are moved there on first read.
    let legacy = state_dir.join(LOCK_FILE);
    if !path.exists() && legacy.exists() {
        std::fs::create_dir_all(plugins_dir(state_dir)).map_err(io(format!("cannot create {}", path.display())))?;
        std::fs::rename(&legacy, &path).map_err(io(format!(
            "cannot move {} to {}",
            legacy.display(),
            path.display()
        )))?;
    }
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_lock(&text)
            .map(|plugins| LockFile { plugins })
            .map_err(|e| InstallError::Lock { path, message: e.to_string() }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LockFile::default()),
        Err(e) => Err(io(format!("cannot read {}", path.display()))(e)),
    }
}

/// Written to a temporary file and renamed, so a reader never sees half a lockfile.
fn write_lock(state_dir: &Path, lock: &LockFile) -> Result<(), InstallError> {
    let dir = plugins_dir(state_dir);
    std::fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let path = lock_path(state_dir);
    let tmp = dir.join(format!(".{LOCK_FILE}.tmp"));
    let text =
        render_lock(&lock.plugins).map_err(|e| InstallError::Lock { path: path.clone(), message: e.to_string() })?;
    std::fs::write(&tmp, text).map_err(io(format!("cannot write {}", tmp.display())))?;
    std::fs::rename(&tmp, &path).map_err(io(format!("cannot write {}", path.display())))
}

/// Replaces `state_dir`'s lockfile with `plugins`, as [`install`] and [`remove`] write it. For a
/// replica mirroring a shared store's list; `_hold` shows that the caller holds the lockfile
/// (see [`hold_lock`]) from its read to this write.
pub fn replace_list(state_dir: &Path, _hold: &LockHold, plugins: Vec<Installed>) -> Result<(), InstallError> {
    write_lock(state_dir, &LockFile { plugins })
}

/// The lockfile's text for `plugins`: what this state directory's lockfile holds, and what a
/// PostgreSQL store shares between replicas, in one format.
pub fn render_lock(plugins: &[Installed]) -> Result<String, toml::ser::Error> {
    #[derive(Serialize)]
    struct View<'a> {
        #[serde(rename = "plugin")]
        plugins: &'a [Installed],
    }
    let text = toml::to_string_pretty(&View { plugins })?;
    Ok(format!("# Installed AXP plugins; written by `axp provider` (or copied from the shared store).\n{text}"))
}

/// The plugins a lockfile's text lists ([`render_lock`]'s inverse).
pub fn parse_lock(text: &str) -> Result<Vec<Installed>, toml::de::Error> {
    Ok(toml::from_str::<LockFile>(text)?.plugins)
}

/// Every installed plugin.
pub fn list(state_dir: &Path) -> Result<Vec<Installed>, InstallError> {
    Ok(read_lock(state_dir)?.plugins)
}

/// One installed plugin with its manifest.
pub fn inspect(state_dir: &Path, id: &str) -> Result<(Installed, Manifest), InstallError> {
    let entry =
        list(state_dir)?.into_iter().find(|p| p.id == id).ok_or_else(|| InstallError::NotInstalled(id.to_string()))?;
    let manifest = Manifest::load(&state_dir.join(&entry.dir).join(MANIFEST_FILE))?;
    Ok((entry, manifest))
}

/// Removes a plugin's files and lockfile entry.
pub fn remove(state_dir: &Path, id: &str) -> Result<Installed, InstallError> {
    let hold = hold_lock(state_dir)?;
    let mut lock = read_lock(state_dir)?;
    let Some(pos) = lock.plugins.iter().position(|p| p.id == id) else {
        return Err(InstallError::NotInstalled(id.to_string()));
    };
    let entry = lock.plugins.remove(pos);
    write_lock(state_dir, &lock)?;
    drop(hold);
    let dir = state_dir.join("plugins").join(&entry.id);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io(format!("cannot remove {}", dir.display())))?;
    }
    Ok(entry)
}

/// Loads one installed plugin, re-checking its digest (a file changed after install is refused).
pub async fn load_one(state_dir: &Path, entry: &Installed, ctx: &HostContext) -> Result<DynProvider, InstallError> {
    let dir = state_dir.join(&entry.dir);
    let manifest = Manifest::load(&dir.join(MANIFEST_FILE))?;
    let artifact = dir.join(&manifest.artifact);
    let bytes = std::fs::read(&artifact).map_err(io(format!("cannot read {}", artifact.display())))?;
    let actual = sha256_hex(&bytes);
    if actual != entry.sha256 {
        return Err(InstallError::Tampered { path: artifact, expected: entry.sha256.clone(), actual });
    }
    Ok(probe(ctx, &manifest, &artifact, &bytes).await?.0)
}

/// Loads every installed plugin; one that fails is reported and skipped, never fatal.
pub async fn load_installed_with(
    state_dir: &Path,
    ctx: &HostContext,
) -> Vec<(String, Result<DynProvider, InstallError>)> {
    let entries = match list(state_dir) {
        Ok(e) => e,
        Err(e) => return vec![(LOCK_FILE.to_string(), Err(e))],
    };
    let mut out = Vec::new();
    for entry in &entries {
        out.push((entry.id.clone(), load_one(state_dir, entry, ctx).await));
    }
    out
}

/// Loads every installed plugin with default limits and this executable as the native helper;
/// failures are logged and skipped.
pub async fn load_installed(state_dir: &Path, launcher: Arc<dyn Launcher>) -> Vec<DynProvider> {
    let ctx = match HostContext::new(launcher) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("plugins not loaded: {e}");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (id, r) in load_installed_with(state_dir, &ctx).await {
        match r {
            Ok(p) => out.push(p),
            Err(e) => tracing::error!(plugin = %id, "installed plugin not loaded: {e}"),
        }
    }
    out
}
