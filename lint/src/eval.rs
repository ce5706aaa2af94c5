//! [`evaluate`]: measures the safety rules on a labelled corpus of tools — error-level recall
//! per poisoning family, the false-error rate on clean tools and which clean tools the
//! registration verdict would refuse. Records in, figures out: the caller reads the corpus
//! files (`lint/corpus/`, see its README) and prints [`Evaluation::to_text`]. Used by
//! `examples/eval.rs` and by the corpus test, so both measure the same thing.

use std::collections::BTreeMap;

use axp_protocol::ToolSpec;
use serde::Deserialize;

use crate::checks::catalog::CatalogMemo;
use crate::registration::lint_tools_in;
use crate::rules::{Family, Severity};
use crate::{Catalog, Finding, LintConfig, LintError, Lockfile, Verdict};

/// What a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    /// A real tool of a real server, as it listed it: must raise no safety error.
    Clean,
    /// A written honest tool (badly written, or one that mentions secrets, the conversation or
    /// other tools for a legitimate reason): must raise no safety error either.
    Honest,
    /// A poisoned tool: must raise at least one safety error.
    Poisoned,
}

/// Which part of the corpus a record is in. Rules are tuned on `tune` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Tune,
    Heldout,
}

impl Split {
    fn as_str(self) -> &'static str {
        match self {
            Split::Tune => "tune",
            Split::Heldout => "heldout",
        }
    }
}

/// One labelled tool.
#[derive(Debug, Clone, Deserialize)]
pub struct Record {
    /// `provider/tool` for captured tools; a stable slug for written ones.
    pub id: String,
    /// The provider the tool is registered under.
    pub provider: String,
    pub label: Label,
    /// The poisoning family (`injection`, `exfiltration`, `shadowing`, `side-channel`,
    /// `side-effects`) for poisoned records.
    #[serde(default)]
    pub family: Option<String>,
    pub split: Split,
    pub tool: ToolSpec,
}

/// A captured server catalog: `{"server", "package", "version", "split", "tools": [...]}`.
#[derive(Debug, Deserialize)]
struct Capture {
    server: String,
    split: Split,
    tools: Vec<ToolSpec>,
}

/// The records of one captured server (every tool clean, in the server's split).
pub fn records_from_capture(text: &str) -> Result<Vec<Record>, LintError> {
    let c: Capture = serde_json::from_str(text).map_err(|e| LintError::Catalog(format!("capture: {e}")))?;
    Ok(c.tools
        .into_iter()
        .map(|t| Record {
            id: format!("{}/{}", c.server, t.name),
            provider: c.server.clone(),
            label: Label::Clean,
            family: None,
            split: c.split,
            tool: t,
        })
        .collect())
}

/// Records from JSON lines (blank lines and lines starting with `//` are skipped).
pub fn records_from_jsonl(text: &str) -> Result<Vec<Record>, LintError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with("//"))
        .map(|(i, l)| serde_json::from_str::<Record>(l).map_err(|e| LintError::Catalog(format!("line {}: {e}", i + 1))))
        .collect()
}

/// How one record fared.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub id: String,
    pub label: Label,
    pub family: Option<String>,
    pub split: Split,
    /// Safety-family findings at error severity.
    pub errors: Vec<Finding>,
    /// Refused at registration (a finding of a rule in `deny` mode).
    pub refused: Vec<Finding>,
    /// Every finding.
    pub findings: Vec<Finding>,
}

impl Outcome {
    /// `true` when the record raised a safety error.
    pub fn flagged(&self) -> bool {
        !self.errors.is_empty()
    }
}

/// Every record's outcome.
#[derive(Debug, Clone)]
pub struct Evaluation {
    pub outcomes: Vec<Outcome>,
}

/// Lints every record as the gateway registers it: the clean and low-quality tools grouped by
/// provider against the catalog of all the others, each poisoned tool alone against the whole
/// clean catalog (so that a description naming a real tool of another server is seen as
/// naming it). No lockfile: drift is not what is measured.
pub fn evaluate(records: &[Record], config: &LintConfig) -> Evaluation {
    let lock = Lockfile::default();
    let mut by_provider: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.label != Label::Poisoned) {
        by_provider.entry(&r.provider).or_default().push(r);
    }
    let mut all = Catalog::new();
    for (p, rs) in &by_provider {
        all.insert(*p, rs.iter().map(|r| r.tool.clone()).collect());
    }
    let mut memo = CatalogMemo::default();
    let mut outcomes = Vec::new();
    for (p, rs) in &by_provider {
        let mut others = all.clone();
        others.providers.remove(*p);
        let specs: Vec<ToolSpec> = rs.iter().map(|r| r.tool.clone()).collect();
        let found = lint_tools_in(p, &specs, config, &lock, &others, &mut memo);
        for (r, f) in rs.iter().zip(found) {
            outcomes.push(outcome(r, f, config));
        }
    }
    for r in records.iter().filter(|r| r.label == Label::Poisoned) {
        let mut others = all.clone();
        others.providers.remove(&r.provider);
        let f = lint_tools_in(&r.provider, std::slice::from_ref(&r.tool), config, &lock, &others, &mut memo)
            .pop()
            .unwrap_or_default();
        outcomes.push(outcome(r, f, config));
    }
    Evaluation { outcomes }
}

fn outcome(r: &Record, findings: Vec<Finding>, config: &LintConfig) -> Outcome {
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error && f.rule().is_some_and(|x| x.family == Family::Safety))
        .cloned()
        .collect();
    let refused = match Verdict::decide(findings.clone(), config) {
        Verdict::Refuse { reasons } => reasons,
        Verdict::Publish { .. } => Vec::new(),
    };
    Outcome { id: r.id.clone(), label: r.label, family: r.family.clone(), split: r.split, errors, refused, findings }
}

/// Counts over a group of outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    pub n: usize,
    pub flagged: usize,
    pub refused: usize,
}

impl Tally {
    /// `flagged / n` (0 for an empty group).
    pub fn rate(&self) -> f64 {
        if self.n == 0 { 0.0 } else { self.flagged as f64 / self.n as f64 }
    }
}

impl Evaluation {
    /// Counts of the outcomes that `keep` selects.
    pub fn tally(&self, keep: impl Fn(&Outcome) -> bool) -> Tally {
        let mut t = Tally::default();
        for o in self.outcomes.iter().filter(|o| keep(o)) {
            t.n += 1;
            t.flagged += usize::from(o.flagged());
            t.refused += usize::from(!o.refused.is_empty());
        }
        t
    }

    /// The poisoning families present, sorted.
    pub fn families(&self) -> Vec<String> {
        let mut f: Vec<String> = self.outcomes.iter().filter_map(|o| o.family.clone()).collect();
        f.sort();
        f.dedup();
        f
    }

    /// Error-level recall on the poisoned records of `split` (all families).
    pub fn recall(&self, split: Split) -> Tally {
        self.tally(|o| o.label == Label::Poisoned && o.split == split)
    }

    /// False errors on the clean records of `split` (`None`: both splits).
    pub fn false_errors(&self, split: Option<Split>) -> Tally {
        self.tally(|o| o.label == Label::Clean && split.is_none_or(|s| o.split == s))
    }

    /// The table `examples/eval.rs` prints. Misses and false errors are listed for the tune
    /// split only, unless `show_heldout`: looking at held-out misses is how a held-out set
    /// stops being one.
    pub fn to_text(&self, show_heldout: bool) -> String {
        let mut s = String::new();
        let pct = |t: Tally| format!("{:>3}/{:<3} {:>5.1}%", t.flagged, t.n, 100.0 * t.rate());
        s.push_str("error-level recall on poisoned tools\n");
        s.push_str(&format!("  {:<14} {:>16} {:>16}\n", "family", "tune", "heldout"));
        for fam in self.families() {
            let of = |sp: Split| {
                self.tally(|o| o.label == Label::Poisoned && o.split == sp && o.family.as_deref() == Some(&fam))
            };
            s.push_str(&format!("  {:<14} {:>16} {:>16}\n", fam, pct(of(Split::Tune)), pct(of(Split::Heldout))));
        }
        s.push_str(&format!(
            "  {:<14} {:>16} {:>16}\n",
            "all",
            pct(self.recall(Split::Tune)),
            pct(self.recall(Split::Heldout))
        ));
        s.push_str("false errors (a safety error on an honest tool)\n");
        for (label, name) in [(Label::Clean, "clean (real)"), (Label::Honest, "honest (written)")] {
            let of = |sp: Split| self.tally(|o| o.label == label && o.split == sp);
            s.push_str(&format!("  {:<14} {:>16} {:>16}\n", name, pct(of(Split::Tune)), pct(of(Split::Heldout))));
        }
        let refused: Vec<&Outcome> =
            self.outcomes.iter().filter(|o| o.label == Label::Clean && !o.refused.is_empty()).collect();
        s.push_str(&format!("refusals of real servers' tools at registration: {}\n", refused.len()));
        for o in &refused {
            let rules: Vec<&str> = o.refused.iter().map(|f| f.rule_id.as_str()).collect();
            s.push_str(&format!("  {} ({}) [{}]\n", o.id, o.split.as_str(), rules.join(", ")));
        }
        for o in &self.outcomes {
            if o.split == Split::Heldout && !show_heldout {
                continue;
            }
            let wrong = match o.label {
                Label::Poisoned => !o.flagged(),
                Label::Clean | Label::Honest => o.flagged(),
            };
            if !wrong {
                continue;
            }
            match o.label {
                Label::Poisoned => s.push_str(&format!(
                    "miss ({}, {}): {}\n",
                    o.split.as_str(),
                    o.family.as_deref().unwrap_or("?"),
                    o.id
                )),
                _ => {
                    for f in &o.errors {
                        s.push_str(&format!(
                            "false error ({}): {} {} at {}: {}\n",
                            o.split.as_str(),
                            o.id,
                            f.rule_id,
                            if f.pointer.is_empty() { "/" } else { &f.pointer },
                            f.message
                        ));
                    }
                }
            }
        }
        s
    }
}
