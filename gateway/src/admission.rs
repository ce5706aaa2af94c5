//! Registration lint (DESIGN §7): every tool a provider publishes — at mount, on
//! `list_changed`, at plugin install — passes the same rules `axp lint` runs before it reaches
//! the index. A rule in `deny` mode keeps the tool out; drift of a pinned tool (a "rug pull")
//! under `deny` keeps serving the pinned version until an operator approves the change with
//! `axp lint --approve`. First sightings are pinned in the lockfile automatically.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use axp_lint::registration::lint_tool_in;
use axp_lint::{Catalog, Finding, LintConfig, Lockfile, Verdict};
use axp_protocol::ToolSpec;
use serde_json::{Value, json};

pub struct Admission {
    config: LintConfig,
    lock: Mutex<Lockfile>,
    lock_path: PathBuf,
}

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
        Ok(Self { config, lock: Mutex::new(lock), lock_path: lock_path.to_path_buf() })
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
        for spec in tools {
            let found = lint_tool_in(provider, &spec, &self.config, &lock, others);
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
        if !pinned.is_empty()
            && let Err(e) = self.save(&lock)
        {
            tracing::error!(error = %e, "cannot write the lockfile");
        }
        Admitted {
            publish,
            findings,
            audit: json!({"provider": provider, "refused": refused, "held_back": held_back, "pinned": pinned, "warnings": warnings}),
        }
    }

    fn save(&self, lock: &Lockfile) -> anyhow::Result<()> {
        let text = lock.to_toml_string().map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(dir) = self.lock_path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self.lock_path.with_extension("lock.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.lock_path)?;
        Ok(())
    }
}

fn finding_json(f: &Finding) -> Value {
    json!({"rule": f.rule_id, "severity": f.severity, "message": f.message, "pointer": f.pointer})
}
