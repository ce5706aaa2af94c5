//! Registration-time linting for the gateway: [`lint_tool`] runs the same rules as `axp lint`
//! on one tool (plus its drift against the lockfile), [`lint_offering`] the prose rules on a
//! prompt or resource, and [`Verdict::decide`] turns the findings
//! into publish-or-refuse under the configured `warn`/`deny` modes. It decides nothing about
//! what the gateway then serves, audits or shows; it only says why.

use axp_protocol::ToolSpec;

use crate::checks::catalog::CatalogMemo;
use crate::checks::{self, Context};
use crate::report::to_finding;
use crate::rules::{self, Mode};
use crate::{Catalog, Finding, LintConfig, Lockfile, check_drift};

/// The outcome of registering one tool.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// Publish the tool; record these findings and show them in `axp.describe`.
    Publish { warnings: Vec<Finding> },
    /// Do not publish (for drift: keep serving the pinned version); every reason is a finding of
    /// a rule in `deny` mode.
    Refuse { reasons: Vec<Finding> },
}

impl Verdict {
    /// Refuse when any finding belongs to a rule whose mode for that tool is `deny`.
    pub fn decide(findings: Vec<Finding>, config: &LintConfig) -> Verdict {
        let (deny, warn): (Vec<Finding>, Vec<Finding>) = findings
            .into_iter()
            .partition(|f| rules::rule(&f.rule_id).is_some_and(|r| config.mode(r, &f.provider, &f.tool) == Mode::Deny));
        if deny.is_empty() { Verdict::Publish { warnings: warn } } else { Verdict::Refuse { reasons: deny } }
    }

    /// `true` for [`Verdict::Publish`].
    pub fn is_publish(&self) -> bool {
        matches!(self, Verdict::Publish { .. })
    }

    /// One sentence per reason, for the refusal message and the audit log.
    pub fn reasons_text(&self) -> Vec<String> {
        match self {
            Verdict::Publish { .. } => Vec::new(),
            Verdict::Refuse { reasons } => reasons
                .iter()
                .map(|f| format!("{} {}: {}", f.rule_id, f.rule().map(|r| r.name).unwrap_or(""), f.message))
                .collect(),
        }
    }
}

/// Lints a prompt or a resource (or resource template) an MCP server offers, as raw MCP JSON:
/// the safety rules that read prose (hidden Unicode, injection markup, instruction overrides,
/// concealment, secret paths, exfiltration) over every string of it. The schema, naming and
/// catalog rules are about tools and are not run. `item` names it in the findings (the prompt's
/// name, the resource's URI).
pub fn lint_offering(provider: &str, item: &str, value: &serde_json::Value, config: &LintConfig) -> Vec<Finding> {
    let mut raw = Vec::new();
    checks::safety::check_prose(value, &mut raw);
    raw.into_iter().filter_map(|r| to_finding(provider, item, r, config)).collect()
}

/// Lints one tool being registered: per-tool rules and its drift against `lock` (a change is
/// AXP037; an unpinned tool is AXP038, after which the gateway pins it on publish).
pub fn lint_tool(provider: &str, spec: &ToolSpec, config: &LintConfig, lock: &Lockfile) -> Vec<Finding> {
    lint_tool_in(provider, spec, config, lock, &Catalog::new())
}

/// [`lint_tool`] with the rest of the gateway's catalog, so that shadowing of, and
/// near-duplicates with, already-registered tools are found too.
pub fn lint_tool_in(
    provider: &str,
    spec: &ToolSpec,
    config: &LintConfig,
    lock: &Lockfile,
    others: &Catalog,
) -> Vec<Finding> {
    let mut memo = CatalogMemo::default();
    lint_tools_in(provider, std::slice::from_ref(spec), config, lock, others, &mut memo).pop().unwrap_or_default()
}

/// [`lint_tool_in`] for a provider's whole tool list at once, one list of findings per tool in
/// order. The catalog is prepared and compared once for the list rather than once per tool:
/// registering a provider costs its tools times the catalog, which keeps start-up with
/// thousands of tools in seconds rather than hours.
///
/// `memo` keeps the catalog's tokenised descriptions from one registration to the next; pass
/// the same one for a catalog that changes a provider at a time.
pub fn lint_tools_in(
    provider: &str,
    specs: &[ToolSpec],
    config: &LintConfig,
    lock: &Lockfile,
    others: &Catalog,
    memo: &mut CatalogMemo,
) -> Vec<Vec<Finding>> {
    let ctx = Context::of(others);
    let mut out: Vec<Vec<Finding>> = specs
        .iter()
        .map(|spec| {
            checks::check_tool(provider, spec, &ctx)
                .into_iter()
                .filter_map(|r| to_finding(provider, &spec.name, r, config))
                .collect()
        })
        .collect();
    // Catalog rules against the others: run them over the others with this provider's list in
    // place of what it had, and keep what concerns this provider's tools.
    if !others.is_empty() {
        for (p, t, r) in checks::catalog::check_catalog_for(others, provider, specs, memo) {
            // A finding names its tool; a name listed twice gets it on its later listing.
            if let Some(i) = specs.iter().rposition(|s| s.name == t) {
                out[i].extend(to_finding(&p, &t, r, config));
            }
        }
    }
    for (spec, found) in specs.iter().zip(out.iter_mut()) {
        let mut single = Catalog::new();
        single.insert(provider, vec![spec.clone()]);
        for f in check_drift(lock, &single) {
            if f.rule_id == "AXP039" {
                continue;
            }
            let Some(rule) = rules::rule(&f.rule_id) else {
                continue;
            };
            if config.enabled(rule, provider, &spec.name) {
                let severity = config.severity(rule, provider, &spec.name);
                let allowed = config.allowed(rule, provider, &spec.name).map(|a| a.reason.clone());
                found.push(Finding { severity, allowed, ..f });
            }
        }
    }
    out
}
