//! Registration lint (DESIGN §7): every tool a provider publishes — at mount, on
//! `list_changed`, at plugin install — passes the same rules `axp lint` runs before it reaches
//! the index. A rule in `deny` mode keeps the tool out; drift of a pinned tool (a "rug pull")
//! under `deny` keeps serving the pinned version until an operator approves the change with
//! `axp lint --approve`. First sightings are pinned in the lockfile automatically.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axp_lint::registration::lint_tools_in;
use axp_lint::{Catalog, Finding, LintConfig, Lockfile, Verdict};
use axp_protocol::ToolSpec;
use serde_json::{Value, json};

pub struct Admission {
    config: LintConfig,
    lock: Arc<Mutex<Lockfile>>,
    lock_path: PathBuf,
    /// Set while a write of the lockfile is scheduled (see [`Admission::admit`]).
    save_pending: Arc<AtomicBool>,
    /// The catalog's tokenised descriptions, kept from one registration to the next.
    memo: Mutex<axp_lint::CatalogMemo>,
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
    /// `[lint]` from the settings (absent: defaults) and the lockfile (absent: empty).
    pub fn load(lint_table: Option<&toml::Value>, lock_path: &Path) -> anyhow::Result<Self> {
        let config = match lint_table {
            Some(toml::Value::Table(t)) => LintConfig::from_table(t).map_err(|e| anyhow::anyhow!("[lint]: {e}"))?,
            Some(_) => anyhow::bail!("[lint] must be a table"),
            None => LintConfig::default(),
        };
        let lock = match std::fs::read_to_string(lock_path) {
            Ok(text) => Lockfile::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", lock_path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Lockfile::default(),
            Err(e) => anyhow::bail!("cannot read {}: {e}", lock_path.display()),
        };
        Ok(Self {
            config,
            lock: Arc::new(Mutex::new(lock)),
            lock_path: lock_path.to_path_buf(),
            save_pending: Arc::default(),
            memo: Mutex::default(),
        })
    }

    /// Lints `tools` of `provider` against the rest of the catalog (`others`).
    pub fn admit(&self, provider: &str, tools: Vec<ToolSpec>, others: &Catalog) -> Admitted {
        let mut lock = self.lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut publish = Vec::new();
        let mut findings = HashMap::new();
        let mut refused = Vec::new();
        let mut held_back = Vec::new();
        let mut pinned = Vec::new();
        let mut warnings = 0usize;
        let mut memo = self.memo.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let all_found = lint_tools_in(provider, &tools, &self.config, &lock, others, &mut memo);
        drop(memo);
        for (spec, found) in tools.into_iter().zip(all_found) {
            let index = axp_lint::index_name(provider, &spec.name);
            match Verdict::decide(found, &self.config) {
                Verdict::Publish { warnings: w } => {
                    if w.iter().any(|f| f.rule_id == "AXP038") {
                        lock.pin(provider, &spec);
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
                    match lock.pinned_spec(&index).filter(|_| drift) {
                        Some(old) => {
                            tracing::warn!(tool = %index, "tool changed since it was pinned; serving the pinned version until `axp lint --approve {index}`");
                            findings.insert(old.name.clone(), fs.iter().map(finding_json).collect());
                            held_back.push(json!({"tool": index, "reasons": reasons}));
                            publish.push(old);
                        }
                        None => {
                            tracing::warn!(tool = %index, reasons = ?reasons, "tool refused by the registration lint");
                            refused.push(json!({"tool": index, "reasons": reasons}));
                        }
                    }
                }
            }
        }
        drop(lock);
        if !pinned.is_empty() {
            self.schedule_save();
        }
        Admitted {
            publish,
            findings,
            audit: json!({"provider": provider, "refused": refused, "held_back": held_back, "pinned": pinned, "warnings": warnings}),
        }
    }

    /// Writes the lockfile [`SAVE_DELAY`] from now, with every pin made until then, unless a
    /// write is already scheduled.
    fn schedule_save(&self) {
        if self.save_pending.swap(true, Ordering::SeqCst) {
            return;
        }
        let (lock, path, pending) = (self.lock.clone(), self.lock_path.clone(), self.save_pending.clone());
        let spawned = std::thread::Builder::new().name("axp-lock-save".into()).spawn(move || {
            std::thread::sleep(SAVE_DELAY);
            // Cleared before the copy is taken: a pin made from here on schedules a new write.
            pending.store(false, Ordering::SeqCst);
            save(&lock, &path);
        });
        if spawned.is_err() {
            self.save_pending.store(false, Ordering::SeqCst);
            save(&self.lock, &self.lock_path);
        }
    }

    /// Writes the lockfile now if a write is scheduled (at shutdown).
    pub fn flush(&self) {
        if self.save_pending.swap(false, Ordering::SeqCst) {
            save(&self.lock, &self.lock_path);
        }
    }
}

fn save(lock: &Mutex<Lockfile>, path: &Path) {
    let text = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner).to_toml_string();
    let written = text.map_err(|e| anyhow::anyhow!("{e}")).and_then(|text| {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("lock.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    });
    if let Err(e) = written {
        tracing::error!(error = %e, path = %path.display(), "cannot write the lockfile");
    }
}

fn finding_json(f: &Finding) -> Value {
    json!({"rule": f.rule_id, "severity": f.severity, "message": f.message, "pointer": f.pointer})
}
