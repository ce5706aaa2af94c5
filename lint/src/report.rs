//! [`lint`] and the [`Report`] it returns: runs every check over a catalog, applies the
//! configuration (selection, severity overrides), orders findings deterministically, and renders
//! them as text, JSON or SARIF 2.1.0. Rendering never reads files: the caller passes the input's
//! URI (and optionally its text, to point SARIF results at the right line).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::checks::{self, Context, Raw};
use crate::rules::{self, Family, RULES, Severity};
use crate::{Catalog, Finding, LintConfig, Lockfile};

/// The result of one lint run.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// Number of providers and tools looked at.
    pub providers: usize,
    pub tools: usize,
    /// Lowest severity that fails the run (from the config).
    pub fail_on: Severity,
}

/// Lints every tool of `catalog` under `config` (no drift: see [`lint_with_lock`]).
pub fn lint(catalog: &Catalog, config: &LintConfig) -> Report {
    let mut raws: Vec<(String, String, Raw)> = Vec::new();
    let ctx = Context::of(catalog);
    for (p, t) in catalog.iter() {
        for r in checks::check_tool(p, t, &ctx) {
            raws.push((p.to_string(), t.name.clone(), r));
        }
    }
    raws.extend(checks::catalog::check_catalog(catalog));
    let findings = raws.into_iter().filter_map(|(p, t, r)| to_finding(&p, &t, r, config)).collect();
    let mut report =
        Report { findings, providers: catalog.providers.len(), tools: catalog.len(), fail_on: config.fail_on };
    report.sort(catalog);
    report
}

/// [`lint`] plus [`crate::check_drift`] against `lock`.
pub fn lint_with_lock(catalog: &Catalog, config: &LintConfig, lock: &Lockfile) -> Report {
    let mut report = lint(catalog, config);
    report.add_findings(crate::check_drift(lock, catalog), config);
    report.sort(catalog);
    report
}

pub(crate) fn to_finding(provider: &str, tool: &str, r: Raw, config: &LintConfig) -> Option<Finding> {
    let rule = rules::rule(r.rule)?;
    if !config.enabled(rule, provider, tool) {
        return None;
    }
    Some(Finding {
        rule_id: rule.id.to_string(),
        severity: config.severity(rule, provider, tool),
        message: r.message,
        provider: provider.to_string(),
        tool: tool.to_string(),
        pointer: r.pointer,
        fix: r.fix,
        span: r.span.map(|(start, end)| crate::Span { start, end }),
        allowed: config.allowed(rule, provider, tool).map(|a| a.reason.clone()),
    })
}

impl Report {
    /// Adds findings made elsewhere (e.g. drift), re-applying `config`'s selection and severity.
    pub fn add_findings(&mut self, findings: Vec<Finding>, config: &LintConfig) {
        for f in findings {
            let Some(rule) = rules::rule(&f.rule_id) else {
                continue;
            };
            if !config.enabled(rule, &f.provider, &f.tool) {
                continue;
            }
            let severity = config.severity(rule, &f.provider, &f.tool);
            let allowed = config.allowed(rule, &f.provider, &f.tool).map(|a| a.reason.clone());
            self.findings.push(Finding { severity, allowed, ..f });
        }
    }

    fn sort(&mut self, catalog: &Catalog) {
        let order: BTreeMap<(&str, &str), usize> =
            catalog.iter().enumerate().map(|(i, (p, t))| ((p, t.name.as_str()), i)).collect();
        let mut keyed: Vec<(usize, Finding)> = std::mem::take(&mut self.findings)
            .into_iter()
            .map(|f| {
                let k = order.get(&(f.provider.as_str(), f.tool.as_str())).copied().unwrap_or(usize::MAX);
                (k, f)
            })
            .collect();
        keyed.sort_by(|(ka, a), (kb, b)| {
            (&a.provider, ka, &a.tool, &a.rule_id, &a.pointer).cmp(&(&b.provider, kb, &b.tool, &b.rule_id, &b.pointer))
        });
        self.findings = keyed.into_iter().map(|(_, f)| f).collect();
    }

    /// Findings of exactly this severity.
    pub fn count(&self, s: Severity) -> usize {
        self.findings.iter().filter(|f| f.severity == s).count()
    }

    /// 1 when a finding is at or above the configured `fail_on` severity (default: error), else 0.
    /// (2, "could not run", is the CLI's to return.)
    pub fn exit_code(&self) -> i32 {
        i32::from(self.findings.iter().any(|f| f.severity >= self.fail_on))
    }

    fn summary_line(&self) -> String {
        let plural = |n: usize, w: &str| format!("{n} {w}{}", if n == 1 { "" } else { "s" });
        format!(
            "{} in {}: {}, {}, {}",
            plural(self.tools, "tool"),
            plural(self.providers, "provider"),
            plural(self.count(Severity::Error), "error"),
            plural(self.count(Severity::Warning), "warning"),
            plural(self.count(Severity::Note), "note"),
        )
    }

    /// Human-readable output, one block per finding and a summary line.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for f in &self.findings {
            let name = f.rule().map(|r| r.name).unwrap_or("");
            let span = f.span.map(|sp| format!(" chars {}..{}", sp.start, sp.end)).unwrap_or_default();
            s.push_str(&format!(
                "{}[{}] {}/{}: {}\n  --> {}{span} ({})\n",
                f.severity,
                f.rule_id,
                f.provider,
                f.tool,
                f.message,
                if f.pointer.is_empty() { "/" } else { &f.pointer },
                name
            ));
            if let Some(reason) = &f.allowed {
                s.push_str(&format!("  allowed by [[lint.allow]]: {reason}\n"));
            }
            if let Some(fix) = &f.fix {
                s.push_str(&format!(
                    "  fix{}: {}\n",
                    if fix.safe { "" } else { " (not applied by --fix)" },
                    fix.description
                ));
            }
        }
        s.push_str(&self.summary_line());
        s.push('\n');
        s
    }

    /// Machine-readable output: `{version, summary, findings[]}`.
    pub fn to_json(&self) -> Value {
        json!({
            "version": 1,
            "tool": "axp-lint",
            "summary": {
                "providers": self.providers,
                "tools": self.tools,
                "errors": self.count(Severity::Error),
                "warnings": self.count(Severity::Warning),
                "notes": self.count(Severity::Note),
                "exit_code": self.exit_code(),
            },
            "findings": self.findings.iter().map(|f| {
                let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
                if let (Some(o), Some(r)) = (v.as_object_mut(), f.rule()) {
                    o.insert("rule_name".into(), json!(r.name));
                }
                v
            }).collect::<Vec<_>>(),
        })
    }

    /// SARIF 2.1.0 for GitHub code scanning. `artifact_uri` is the linted input as the caller
    /// names it (relative to the repository root for GitHub); `source` is its text, used to put
    /// each result on the line of its tool's `"name"` (line 1 when absent or not found).
    pub fn to_sarif(&self, artifact_uri: &str, source: Option<&str>) -> Value {
        let rules: Vec<Value> = RULES
            .iter()
            .map(|r| {
                let mut props = json!({"tags": [r.family.as_str()]});
                if r.family == Family::Safety || r.family == Family::Drift {
                    props["tags"] = json!([r.family.as_str(), "security"]);
                    props["security-severity"] = json!(match r.default_severity {
                        Severity::Error => "8.0",
                        Severity::Warning => "5.0",
                        Severity::Note => "2.0",
                    });
                }
                json!({
                    "id": r.id,
                    "name": r.name,
                    "shortDescription": {"text": r.summary},
                    "fullDescription": {"text": r.explanation},
                    "help": {
                        "text": format!("{}\n\nExample: {}", r.explanation, r.example),
                        "markdown": format!("{}\n\n**Example:** `{}`\n\nRun `axp lint --explain {}` for details.", r.explanation, r.example.replace('`', "'"), r.id),
                    },
                    "defaultConfiguration": {"level": r.default_severity.sarif_level()},
                    "properties": props,
                })
            })
            .collect();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let results: Vec<Value> = self
            .findings
            .iter()
            .map(|f| {
                let key = format!("{}|{}|{}|{}", f.rule_id, f.provider, f.tool, f.pointer);
                let n = seen.entry(key.clone()).or_default();
                let occurrence = *n;
                *n += 1;
                let digest = Sha256::digest(format!("{key}|{occurrence}").as_bytes());
                let fp: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
                let line = source.and_then(|s| line_of_tool(s, &f.provider, &f.tool)).unwrap_or(1);
                let mut props = json!({"pointer": f.pointer, "provider": f.provider, "tool": f.tool});
                if let Some(fix) = &f.fix {
                    props["fix"] = serde_json::to_value(fix).unwrap_or(Value::Null);
                }
                if let Some(reason) = &f.allowed {
                    props["allowed"] = json!(reason);
                }
                if let Some(sp) = f.span {
                    props["span"] = json!({"start": sp.start, "end": sp.end});
                }
                json!({
                    "ruleId": f.rule_id,
                    "ruleIndex": rules::rule_index(&f.rule_id),
                    "level": f.severity.sarif_level(),
                    "message": {"text": format!("{}/{}: {}", f.provider, f.tool, f.message)},
                    "locations": [{
                        "physicalLocation": {
                            "artifactLocation": {"uri": artifact_uri},
                            "region": {"startLine": line},
                        },
                        "logicalLocations": [
                            {"name": f.tool, "fullyQualifiedName": format!("{}/{}", f.provider, f.tool), "kind": "function"},
                            {"name": f.provider, "kind": "module"},
                        ],
                    }],
                    "partialFingerprints": {"axpLintFinding/v1": fp},
                    "properties": props,
                })
            })
            .collect();
        json!({
            "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
            "version": "2.1.0",
            "runs": [{
                "tool": {"driver": {
                    "name": "axp-lint",
                    "informationUri": env!("CARGO_PKG_REPOSITORY"),
                    "semanticVersion": env!("CARGO_PKG_VERSION"),
                    "rules": rules,
                }},
                "results": results,
                "columnKind": "unicodeCodePoints",
            }],
        })
    }
}

/// The 1-based line of `"name": "<tool>"` in a pretty-printed tools file, after the line that
/// opens `"<provider>":` when the file is a fleet.
fn line_of_tool(source: &str, provider: &str, tool: &str) -> Option<usize> {
    let tool_json = serde_json::to_string(tool).ok()?;
    let prov_key = format!("{}:", serde_json::to_string(provider).ok()?);
    let fleet = source.contains("\"providers\"");
    let mut in_provider = !fleet;
    for (i, l) in source.lines().enumerate() {
        let compact: String = l.chars().filter(|c| !c.is_whitespace()).collect();
        if fleet && compact.starts_with(&prov_key) {
            in_provider = true;
        }
        if in_provider && compact.contains("\"name\":") && compact.contains(&format!("\"name\":{tool_json}")) {
            return Some(i + 1);
        }
    }
    None
}
