//! Registration lint (DESIGN §7): every tool a provider publishes — at mount, on
//! `list_changed`, at plugin install — passes the same rules `axp lint` runs before it reaches
//! the index. A rule in `deny` mode keeps the tool out; drift of a pinned tool (a "rug pull")
//! under `deny` keeps serving the pinned version until an operator approves the change with
//! `axp lint --approve`. First sightings are pinned in the lockfile automatically.
//!
//! The lockfile (`STATE/axp.lock`) is shared with the operator's `axp lint --approve`: every
//! write on either side is a read-merge-write under an advisory lock ([`update_lockfile`]), the
//! gateway writes each held-back change to `STATE/held-back.json` so the CLI can approve the
//! version the gateway actually saw, and the gateway re-reads the lockfile when it changes
//! ([`Admission::reload`]), so an approval takes effect without a restart.
//!
//! On a PostgreSQL store the pins every replica enforces are in the database (the shared file
//! [`SHARED_PINS`]), changed by read-modify-writes under its row's lock; each replica's
//! `STATE/axp.lock` becomes its mirror and its inbox. The replica writes the database's pins
//! there whenever they change (so `axp lint` and the console read what is enforced), and an
//! operator's edit of that file (`axp lint --approve` in that replica's state directory) is
//! told apart from the mirror and applied to the database, where it wins over what was there.
//! First sightings are added to the database without replacing what another replica pinned.
//! Replicas poll the database's version every [`SHARED_POLL`], so a pin recorded or approved on
//! one replica is enforced by every other within about that. At start, the file's pins that
//! the database lacks are added to it (a gateway moving to PostgreSQL keeps its pins); the
//! database wins where both have a pin, since a file left from a previous run may be stale.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axp_lint::drift::Pin;
use axp_lint::registration::lint_tools_in;
use axp_lint::{Catalog, Finding, LintConfig, Lockfile, Verdict};
use axp_protocol::ToolSpec;
use axp_store::{Store, StoreKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The pins lockfile's name in the state directory.
pub const LOCK_FILE: &str = "axp.lock";
/// The name of the pins lockfile among a PostgreSQL store's shared files.
pub const SHARED_PINS: &str = "pins/axp.lock";
/// How often a replica on a PostgreSQL store looks for pins another replica changed.
pub const SHARED_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// The record of held-back changes in the state directory: for each tool whose new version
/// waits for approval, the version the provider now publishes.
pub const HELD_FILE: &str = "held-back.json";

/// One change held back: the provider and the new version of its tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Held {
    pub provider: String,
    pub spec: ToolSpec,
    /// Rules other than drift that the new version breaks: approving lifts only the drift
    /// hold, so with any of these the gateway refuses the tool once it is approved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_breaks: Vec<String>,
}

/// The gateway's pins: the lockfile as last read or written, and the first sightings pinned
/// since, which the next write adds to whatever the file then holds.
#[derive(Default)]
struct Pins {
    lock: Lockfile,
    unsaved: BTreeSet<String>,
}

impl Pins {
    /// The file's pins plus this gateway's unsaved first sightings (the file wins elsewhere:
    /// it holds the operator's approvals).
    fn merge_from(&mut self, mut file: Lockfile) -> bool {
        for key in &self.unsaved {
            if let Some(pin) = self.lock.tools.get(key) {
                file.tools.entry(key.clone()).or_insert_with(|| pin.clone());
            }
        }
        let changed = file != self.lock;
        self.lock = file;
        changed
    }
}

pub struct Admission {
    config: LintConfig,
    lock: Arc<Mutex<Pins>>,
    lock_path: PathBuf,
    /// Changes held back, by index name, as written to [`HELD_FILE`].
    held: Mutex<BTreeMap<String, Held>>,
    /// The `axp lint --approve` line the held-back warning gives the operator.
    approve_hint: String,
    /// Set while a write of the lockfile is scheduled (see [`Admission::admit`]).
    save_pending: Arc<AtomicBool>,
    /// On a PostgreSQL store: the pins every replica shares (see the module docs).
    shared: Option<Arc<SharedPins>>,
    /// The catalog's tokenised descriptions, kept from one registration to the next.
    memo: Mutex<axp_lint::CatalogMemo>,
    /// Prompts and resources the lint refused, by (provider, name or URI): each is logged once,
    /// and a prompt refused in a list is refused by name too.
    refused_offerings: Mutex<BTreeSet<(String, String)>>,
    /// Tools the lint refused at their provider's last registration, by index name: shown by
    /// `/healthz`, so a refusal is found where an operator looks, not only in the log.
    refused_tools: Mutex<BTreeMap<String, Refused>>,
}

/// The pins in a PostgreSQL store, and what this replica last knew of them.
struct SharedPins {
    store: Store,
    /// The version of the database's pins this replica merged last.
    version: AtomicU64,
    /// The pins as this replica last wrote them to its own lockfile (what an operator's edit
    /// of that file is told apart from); `None` before the first sync.
    mirrored: Mutex<Option<Lockfile>>,
}

/// A tool the registration lint refused, with why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Refused {
    pub tool: String,
    pub provider: String,
    pub reasons: Vec<String>,
}

/// How long new pins wait before the lockfile is written: providers register one at a time at
/// start-up, and writing the whole lockfile for each of them made start-up quadratic in the
/// catalog. Pins are first sightings, so the worst a crash in this window loses is that the
/// same tools are pinned again, as first sightings, at the next start.
const SAVE_DELAY: std::time::Duration = std::time::Duration::from_millis(200);

/// What registration decided for one provider's tool list.
pub struct Admitted {
    /// The tools to publish (for a held-back rug pull, the pinned version).
    pub publish: Vec<ToolSpec>,
    /// Findings per provider tool name, shown by `axp.describe`.
    pub findings: HashMap<String, Vec<Value>>,
    /// One summary for the audit log.
    pub audit: Value,
}

impl Admission {
    /// `[lint]` from the settings (absent: defaults) and the lockfile in `state_dir` (absent:
    /// empty). `approve_with` is what the operator adds to `axp lint --approve TOOL` to reach
    /// this state directory (empty for the default one).
    /// On a PostgreSQL `store` the pins are the database's (see the module docs).
    pub fn load(
        lint_table: Option<&toml::Value>,
        state_dir: &Path,
        approve_with: &str,
        store: &Store,
    ) -> anyhow::Result<Self> {
        let lock_path = state_dir.join(LOCK_FILE);
        let lock_path = lock_path.as_path();
        let config = match lint_table {
            Some(toml::Value::Table(t)) => LintConfig::from_table(t).map_err(|e| anyhow::anyhow!("[lint]: {e}"))?,
            Some(_) => anyhow::bail!("[lint] must be a table"),
            None => LintConfig::default(),
        };
        let shared = (store.kind() == StoreKind::Postgres).then(|| {
            Arc::new(SharedPins { store: store.clone(), version: AtomicU64::new(0), mirrored: Mutex::new(None) })
        });
        let lock = match &shared {
            Some(sh) => sync_shared(sh, lock_path, Vec::new())?,
            None => read_lockfile(lock_path)?,
        };
        // What was held back before a restart is seen again at the first registration.
        let _ = std::fs::remove_file(state_dir.join(HELD_FILE));
        Ok(Self {
            config,
            lock: Arc::new(Mutex::new(Pins { lock, unsaved: BTreeSet::new() })),
            lock_path: lock_path.to_path_buf(),
            held: Mutex::default(),
            approve_hint: approve_with.to_string(),
            save_pending: Arc::default(),
            shared,
            memo: Mutex::default(),
            refused_offerings: Mutex::default(),
            refused_tools: Mutex::default(),
        })
    }

    /// Re-reads the lockfile after it changed on disk (an operator's approval) and keeps this
    /// gateway's unsaved first sightings. Returns the providers with a held-back tool whose new
    /// version is now pinned: they are registered again.
    ///
    /// On a PostgreSQL store it also brings in the database's pins, and sends an operator's
    /// edit of the file to the database; called every [`SHARED_POLL`] too, it does nothing
    /// (one query, one small read) when neither changed.
    pub fn reload(&self) -> Vec<String> {
        let read = match &self.shared {
            None => read_lockfile(&self.lock_path),
            Some(sh) => {
                if !shared_changed(sh, &self.lock_path) {
                    return Vec::new();
                }
                sync_shared(sh, &self.lock_path, Vec::new())
            }
        };
        let file = match read {
            Ok(f) => f,
            Err(e) => {
                tracing::error!(error = %e, "the pins lockfile changed but cannot be read; keeping the pins in force");
                return Vec::new();
            }
        };
        let mut pins = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pins.merge_from(file);
        // Whether the pins changed just now is not the question: this gateway's own delayed
        // write of first sightings may already have merged an approval into memory. A held
        // tool whose new version is now the pinned one is approved, whoever merged it.
        let held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let providers: BTreeSet<String> = held
            .values()
            .filter(|h| pins.lock.status(&h.provider, &h.spec) == axp_lint::drift::PinStatus::Match)
            .map(|h| h.provider.clone())
            .collect();
        providers.into_iter().collect()
    }

    /// Lints `tools` of `provider` against the rest of the catalog (`others`).
    /// Whether a prompt or resource (raw MCP JSON) of `provider` may be offered: the lint's prose
    /// rules in their configured modes, as for a tool's description. `Err` has the reasons; a
    /// refusal is logged once.
    pub fn admit_offering(&self, provider: &str, item: &str, value: &Value) -> Result<(), Vec<String>> {
        let found = axp_lint::lint_offering(provider, item, value, &self.config);
        let verdict = Verdict::decide(found, &self.config);
        if verdict.is_publish() {
            return Ok(());
        }
        let reasons = verdict.reasons_text();
        let first = self
            .refused_offerings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((provider.to_string(), item.to_string()));
        if first {
            tracing::warn!(provider, item, reasons = %reasons.join("; "), "the registration lint refused what a server offers; it is not listed");
        }
        Err(reasons)
    }

    /// Whether the lint refused this prompt or resource when it was listed.
    pub fn offering_refused(&self, provider: &str, item: &str) -> bool {
        self.refused_offerings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&(provider.to_string(), item.to_string()))
    }

    pub fn admit(&self, provider: &str, tools: Vec<ToolSpec>, others: &Catalog) -> Admitted {
        let mut pins = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let held_before = held.clone();
        let mut publish = Vec::new();
        let mut findings = HashMap::new();
        let mut refused = Vec::new();
        let mut held_back = Vec::new();
        let mut pinned = Vec::new();
        let mut warnings = 0usize;
        let mut memo = self.memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let all_found = lint_tools_in(provider, &tools, &self.config, &pins.lock, others, &mut memo);
        drop(memo);
        for (spec, found) in tools.into_iter().zip(all_found) {
            let index = axp_lint::index_name(provider, &spec.name);
            match Verdict::decide(found, &self.config) {
                Verdict::Publish { warnings: w } => {
                    held.remove(&index);
                    if w.iter().any(|f| f.rule_id == "AXP038") {
                        pins.lock.pin(provider, &spec);
                        pins.unsaved.insert(index.clone());
                        pinned.push(index);
                    }
                    warnings += w.len();
                    findings.insert(spec.name.clone(), w.iter().map(finding_json).collect());
                    publish.push(spec);
                }
                refuse @ Verdict::Refuse { .. } => {
                    let reasons = refuse.reasons_text();
                    let Verdict::Refuse { reasons: fs } = &refuse else { continue };
                    let drift = fs.iter().any(|f| f.rule_id == "AXP037");
                    match pins.lock.pinned_spec(&index).filter(|_| drift) {
                        Some(old) => {
                            tracing::warn!(tool = %index, "tool changed since it was pinned; serving the pinned version until `axp lint --approve {index}{}`", self.approve_hint);
                            let also_breaks = reasons.iter().filter(|r| !r.starts_with("AXP037")).cloned().collect();
                            let new = Held { provider: provider.to_string(), spec: spec.clone(), also_breaks };
                            held.insert(index.clone(), new);
                            findings.insert(old.name.clone(), fs.iter().map(finding_json).collect());
                            held_back.push(json!({"tool": index, "reasons": reasons}));
                            publish.push(old);
                        }
                        None => {
                            refused.push(Refused { tool: index, provider: provider.to_string(), reasons });
                        }
                    }
                }
            }
        }
        drop(pins);
        self.note_refused(provider, &refused);
        // Tools of this provider that are gone are no longer held back.
        held.retain(|index, h| {
            h.provider != provider || publish.iter().any(|s| &axp_lint::index_name(provider, &s.name) == index)
        });
        if *held != held_before {
            write_held(&held, &self.lock_path.with_file_name(HELD_FILE));
        }
        drop(held);
        if !pinned.is_empty() {
            self.schedule_save();
        }
        Admitted {
            publish,
            findings,
            audit: json!({"provider": provider, "refused": refused.iter().map(|r| json!({"tool": r.tool, "reasons": r.reasons})).collect::<Vec<_>>(), "held_back": held_back, "pinned": pinned, "warnings": warnings}),
        }
    }

    /// Replaces `provider`'s refused tools with `refused`, and says so loudly: one error line per
    /// registration that refuses anything, naming each tool, its rules and how to allow one.
    fn note_refused(&self, provider: &str, refused: &[Refused]) {
        let mut all = self.refused_tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.retain(|_, r| r.provider != provider);
        for r in refused {
            all.insert(r.tool.clone(), r.clone());
        }
        drop(all);
        if refused.is_empty() {
            return;
        }
        let list: Vec<String> = refused.iter().map(|r| format!("{} ({})", r.tool, rule_ids(&r.reasons))).collect();
        tracing::error!(
            provider,
            refused = %list.join(", "),
            "the registration lint refused {} tool{} of `{provider}`; they are not served. \
             `axp lint --explain RULE` says why and how to allow one tool (a [[lint.allow]] entry); /healthz lists them",
            refused.len(),
            if refused.len() == 1 { "" } else { "s" },
        );
        for r in refused {
            tracing::warn!(tool = %r.tool, reasons = ?r.reasons, "tool refused by the registration lint");
        }
    }

    /// The tools the registration lint refused, in name order.
    pub fn refused_tools(&self) -> Vec<Refused> {
        self.refused_tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values().cloned().collect()
    }

    /// Writes the lockfile [`SAVE_DELAY`] from now, with every pin made until then, unless a
    /// write is already scheduled.
    fn schedule_save(&self) {
        if self.save_pending.swap(true, Ordering::SeqCst) {
            return;
        }
        let (lock, path, pending) = (self.lock.clone(), self.lock_path.clone(), self.save_pending.clone());
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new().name("axp-lock-save".into()).spawn(move || {
            std::thread::sleep(SAVE_DELAY);
            // Cleared before the copy is taken: a pin made from here on schedules a new write.
            pending.store(false, Ordering::SeqCst);
            save(&lock, &path, shared.as_deref());
        });
        if spawned.is_err() {
            self.save_pending.store(false, Ordering::SeqCst);
            save(&self.lock, &self.lock_path, self.shared.as_deref());
        }
    }

    /// Writes the lockfile now if a write is scheduled (at shutdown).
    pub fn flush(&self) {
        if self.save_pending.swap(false, Ordering::SeqCst) {
            save(&self.lock, &self.lock_path, self.shared.as_deref());
        }
    }

    /// Whether the pins are a PostgreSQL store's, shared with other replicas (then
    /// [`Admission::reload`] is due every [`SHARED_POLL`]).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }
}

/// Adds this gateway's unsaved first sightings to the lockfile on disk (or, on a PostgreSQL
/// store, to the database's pins and then the file), keeping everything there (an operator's
/// approval made meanwhile included).
fn save(pins: &Mutex<Pins>, path: &Path, shared: Option<&SharedPins>) {
    if let Some(sh) = shared {
        let new: Vec<(String, Pin)> = {
            let pins = pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            pins.unsaved.iter().filter_map(|k| pins.lock.tools.get(k).map(|p| (k.clone(), p.clone()))).collect()
        };
        match sync_shared(sh, path, new.clone()) {
            Ok(db) => {
                let mut pins = pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                pins.merge_from(db);
                for (k, _) in &new {
                    pins.unsaved.remove(k);
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot record new pins in the PostgreSQL store"),
        }
        return;
    }
    let written = update_lockfile(path, |file| {
        let mut pins = pins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pins.merge_from(file.clone());
        pins.unsaved.clear();
        *file = pins.lock.clone();
    });
    if let Err(e) = written {
        tracing::error!(error = %e, path = %path.display(), "cannot write the lockfile");
    }
}

/// Whether the database's pins or this replica's lockfile changed since the last sync.
fn shared_changed(sh: &SharedPins, path: &Path) -> bool {
    let version = match sh.store.shared_versions(SHARED_PINS) {
        Ok(v) => v.iter().find(|(n, _)| n == SHARED_PINS).map_or(0, |(_, v)| *v),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the version of the pins in the PostgreSQL store");
            return false;
        }
    };
    if version != sh.version.load(Ordering::SeqCst) {
        return true;
    }
    let mirrored = sh.mirrored.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match (read_lockfile(path), mirrored.as_ref()) {
        (Ok(file), Some(m)) => file != *m,
        // An unreadable file is the operator's to fix; nothing to sync until then.
        (Err(_), _) => false,
        (Ok(_), None) => true,
    }
}

/// Brings the database's pins and this replica's lockfile at `path` together, under the
/// lockfile's advisory lock (so an operator's `axp lint --approve` waits): the file's edits
/// since this replica last mirrored it win in the database, then `first_sightings` are added
/// where the database has no pin, then the file becomes the database's pins. Before the first
/// sync every pin of the file counts as a first sighting. Returns the pins now in force.
fn sync_shared(sh: &SharedPins, path: &Path, first_sightings: Vec<(String, Pin)>) -> anyhow::Result<Lockfile> {
    let mut out = Err(anyhow::anyhow!("the lockfile was not read"));
    update_lockfile_if_changed(path, |file| {
        let mut mirrored = sh.mirrored.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut edits: Vec<(String, Option<Pin>)> = Vec::new();
        let mut added = first_sightings;
        match mirrored.as_ref() {
            None => added.extend(file.tools.iter().map(|(k, p)| (k.clone(), p.clone()))),
            Some(m) => {
                for (k, p) in &file.tools {
                    if m.tools.get(k) != Some(p) {
                        edits.push((k.clone(), Some(p.clone())));
                    }
                }
                edits.extend(m.tools.keys().filter(|k| !file.tools.contains_key(*k)).map(|k| (k.clone(), None)));
            }
        }
        let changed = update_shared_pins(&sh.store, move |db| {
            for (k, p) in edits {
                match p {
                    Some(p) => db.tools.insert(k, p),
                    None => db.tools.remove(&k),
                };
            }
            for (k, p) in added {
                db.tools.entry(k).or_insert(p);
            }
        });
        match changed {
            Ok((db, version)) => {
                *file = db.clone();
                *mirrored = Some(db.clone());
                sh.version.store(version, Ordering::SeqCst);
                out = Ok(db);
            }
            Err(e) => out = Err(e),
        }
    })?;
    out
}

/// Changes the pins in the database with `change` (a read-modify-write under the row's lock),
/// and returns them as they are then, with their version (0: none recorded).
fn update_shared_pins(
    store: &Store,
    change: impl FnOnce(&mut Lockfile) + Send + 'static,
) -> anyhow::Result<(Lockfile, u64)> {
    crate::util::update_shared_as(store, SHARED_PINS, parse_pins, |l| l.to_toml_string().ok(), change)?.map_err(|e| {
        anyhow::anyhow!(
            "the pins in the PostgreSQL store are unreadable ({e}); fix or delete the shared file `{SHARED_PINS}`"
        )
    })
}

fn parse_pins(body: &[u8]) -> Result<Lockfile, String> {
    let text = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    Lockfile::parse(text).map_err(|e| e.to_string())
}

/// Reads a lockfile; a missing one is empty.
pub fn read_lockfile(path: &Path) -> anyhow::Result<Lockfile> {
    match std::fs::read_to_string(path) {
        Ok(text) => Lockfile::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Lockfile::default()),
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
    }
}

/// Changes the lockfile at `path` as one read-merge-write under an exclusive advisory lock
/// (`flock` on a `.flock` file beside it), so the gateway's writes of new pins and an
/// operator's `axp lint --approve` never overwrite each other. The file is replaced by rename,
/// so a reader never sees half of it. A lockfile that does not parse is left alone: it is the
/// operator's to fix.
pub fn update_lockfile(path: &Path, change: impl FnOnce(&mut Lockfile)) -> anyhow::Result<Lockfile> {
    change_lockfile(path, change, true)
}

/// [`update_lockfile`], leaving a file that exists alone when `change` changed nothing (a
/// rewrite would wake every watcher of the file for nothing).
fn update_lockfile_if_changed(path: &Path, change: impl FnOnce(&mut Lockfile)) -> anyhow::Result<Lockfile> {
    change_lockfile(path, change, false)
}

fn change_lockfile(path: &Path, change: impl FnOnce(&mut Lockfile), always: bool) -> anyhow::Result<Lockfile> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let guard_path = path.with_extension("lock.flock");
    let guard = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&guard_path)
        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", guard_path.display()))?;
    rustix::fs::flock(&guard, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| anyhow::anyhow!("cannot lock {}: {e}", guard_path.display()))?;
    let mut lock = read_lockfile(path)?;
    let before = lock.clone();
    change(&mut lock);
    if always || lock != before || !path.exists() {
        let text = lock.to_toml_string().map_err(|e| anyhow::anyhow!("{e}"))?;
        replace_file(path, text.as_bytes())?;
    }
    // The advisory lock is released when `guard` is closed, after the rename.
    drop(guard);
    Ok(lock)
}

/// Replaces `path` with `body` through a temporary file beside it and a rename, so a reader
/// (the other side of the lockfile, the watcher) never sees half of it.
fn replace_file(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path)
}

/// Writes the held-back record (replaced by rename); an empty record removes the file.
fn write_held(held: &BTreeMap<String, Held>, path: &Path) {
    let result = if held.is_empty() {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    } else {
        serde_json::to_vec_pretty(held).map_err(anyhow::Error::from).and_then(|body| Ok(replace_file(path, &body)?))
    };
    if let Err(e) = result {
        tracing::error!(error = %e, path = %path.display(), "cannot write the record of held-back tools");
    }
}

/// Reads the held-back record a gateway wrote in its state directory; none is an empty record.
pub fn read_held(state_dir: &Path) -> anyhow::Result<BTreeMap<String, Held>> {
    let path = state_dir.join(HELD_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
    }
}

fn finding_json(f: &Finding) -> Value {
    json!({"rule": f.rule_id, "severity": f.severity, "message": f.message, "pointer": f.pointer})
}

/// The rule ids at the start of each reason (`AXP032 name: …`), joined.
fn rule_ids(reasons: &[String]) -> String {
    let mut ids: Vec<&str> = reasons.iter().filter_map(|r| r.split_whitespace().next()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.join(", ")
}
