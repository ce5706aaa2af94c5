//! [`LintConfig`]: the `[lint]` table of `axp.toml`, validated. Owns selection, severity and
//! registration-mode resolution for one (rule, provider, tool); knows nothing about checks.
//!
//! ```toml
//! [lint]
//! select = ["description", "schema", "safety", "AXP021"]  # rule ids, names or families; default all
//! ignore = ["AXP019"]
//! fail_on = "error"                          # lowest severity that makes exit code 1
//! severity = { AXP003 = "error", catalog = "note" }
//! mode = { AXP037 = "deny", description = "warn" }   # registration: warn | deny
//!
//! [lint.providers.github]                    # per provider
//! ignore = ["AXP014"]
//! severity = { AXP009 = "note" }
//!
//! [lint.tools."everything/get-env"]          # per tool: "provider/tool", `*` and `?` globs
//! ignore = ["AXP036"]
//!
//! [[lint.allow]]                             # one reviewed finding, on one tool
//! tool = "circleci__download_usage_api_data" # index name <provider>__<tool>; globs allowed
//! rule = "AXP033"                            # rule id or name
//! reason = "asks for the user's message to read dates from it; reviewed"
//! ```
//!
//! An allowed finding is still reported, marked with its reason, at severity `note` and in
//! registration mode `warn`: the tool is served and `axp lint` does not fail on it.
//!
//! Unknown keys, rule ids, families, severities and modes are errors naming the nearest valid
//! value; all problems are collected before failing. Precedence: tool over provider over
//! global; within one scope a rule entry beats a family entry.

use std::collections::BTreeMap;

use toml::{Table, Value};

use crate::LintError;
use crate::rules::{self, Family, Mode, RULES, Rule, Severity};

/// Overrides for one scope (global, a provider, a tool pattern).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// Rule ids turned off here.
    pub ignore: Vec<&'static str>,
    /// Severity by rule id or family name.
    pub severity: BTreeMap<String, Severity>,
    /// Registration mode by rule id or family name.
    pub mode: BTreeMap<String, Mode>,
}

/// The validated `[lint]` configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct LintConfig {
    /// Rule ids that run; empty means every rule.
    pub select: Vec<&'static str>,
    pub global: Overrides,
    pub providers: BTreeMap<String, Overrides>,
    /// Keyed by `provider/tool` glob.
    pub tools: BTreeMap<String, Overrides>,
    /// Lowest severity that makes [`crate::Report::exit_code`] return 1.
    pub fail_on: Severity,
    /// Reviewed findings: one rule on one tool (or a glob of tools).
    pub allow: Vec<Allow>,
}

/// One `[[lint.allow]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allow {
    /// Index-name glob, `<provider>__<tool>`.
    pub tool: String,
    /// The rule id.
    pub rule: &'static str,
    /// Why the operator allows it (shown with the finding).
    pub reason: String,
}

impl Default for LintConfig {
    fn default() -> Self {
        Self {
            select: Vec::new(),
            global: Overrides::default(),
            providers: BTreeMap::new(),
            tools: BTreeMap::new(),
            fail_on: Severity::Error,
            allow: Vec::new(),
        }
    }
}

const TOP_KEYS: &[&str] = &["select", "ignore", "severity", "mode", "fail_on", "providers", "tools", "allow"];
const ALLOW_KEYS: &[&str] = &["tool", "rule", "reason"];
const SCOPE_KEYS: &[&str] = &["ignore", "severity", "mode"];

impl LintConfig {
    /// Reads the `[lint]` table of a whole `axp.toml` (absent table: defaults). Other tables are
    /// not looked at; the gateway validates those.
    pub fn from_axp_toml(text: &str) -> Result<Self, LintError> {
        let doc: Table =
            text.parse().map_err(|e: toml::de::Error| LintError::Config(format!("axp.toml is not valid TOML: {e}")))?;
        match doc.get("lint") {
            None => Ok(Self::default()),
            Some(Value::Table(t)) => Self::from_table_with_source(t, Some(text)),
            Some(_) => Err(LintError::Config("`lint` must be a table ([lint])".into())),
        }
    }

    /// Validates an already-parsed `[lint]` table.
    pub fn from_table(t: &Table) -> Result<Self, LintError> {
        Self::from_table_with_source(t, None)
    }

    fn from_table_with_source(t: &Table, source: Option<&str>) -> Result<Self, LintError> {
        let mut errs = Vec::new();
        let mut cfg = Self::default();
        let at = |key: &str| line_of(source, key).map(|l| format!("line {l}: ")).unwrap_or_default();
        for (k, v) in t {
            match k.as_str() {
                "select" => cfg.select = rule_list(v, "lint.select", &mut errs),
                "fail_on" => match v.as_str().and_then(Severity::parse) {
                    Some(s) => cfg.fail_on = s,
                    None => {
                        errs.push(format!("{}`lint.fail_on` must be \"error\", \"warning\" or \"note\"", at("fail_on")))
                    }
                },
                "ignore" | "severity" | "mode" => {}
                "allow" => cfg.allow = allow_list(v, source, &mut errs),
                "providers" | "tools" => {
                    let Some(tab) = v.as_table() else {
                        errs.push(format!("`lint.{k}` must be a table"));
                        continue;
                    };
                    for (name, scope) in tab {
                        let where_ = format!("lint.{k}.{name}");
                        let Some(st) = scope.as_table() else {
                            errs.push(format!("`{where_}` must be a table"));
                            continue;
                        };
                        for sk in st.keys() {
                            if !SCOPE_KEYS.contains(&sk.as_str()) {
                                errs.push(unknown_key(&at(sk), &where_, sk, SCOPE_KEYS));
                            }
                        }
                        let o = overrides(st, &where_, &mut errs);
                        if k == "providers" {
                            cfg.providers.insert(name.clone(), o);
                        } else {
                            if !name.contains('/') {
                                errs.push(format!("`{where_}`: tool keys are \"provider/tool\" (globs allowed), e.g. [lint.tools.\"github/create_issue\"]"));
                            }
                            cfg.tools.insert(name.clone(), o);
                        }
                    }
                }
                other => errs.push(unknown_key(&at(other), "lint", other, TOP_KEYS)),
            }
        }
        cfg.global = overrides(t, "lint", &mut errs);
        if errs.is_empty() { Ok(cfg) } else { Err(LintError::Config(errs.join("\n"))) }
    }

    fn scopes<'a>(&'a self, provider: &str, tool: &str) -> Vec<&'a Overrides> {
        // Most specific first.
        let full = format!("{provider}/{tool}");
        let mut v: Vec<&Overrides> = self
            .tools
            .iter()
            .filter(|(k, _)| axp_protocol::capability::glob_matches(k, &full))
            .map(|(_, o)| o)
            .collect();
        if let Some(p) = self.providers.get(provider) {
            v.push(p);
        }
        v.push(&self.global);
        v
    }

    /// `true` when `rule` runs for this tool.
    pub fn enabled(&self, rule: &Rule, provider: &str, tool: &str) -> bool {
        if !self.select.is_empty() && !self.select.contains(&rule.id) {
            return false;
        }
        !self.scopes(provider, tool).iter().any(|o| o.ignore.contains(&rule.id))
    }

    /// The severity `rule` reports with for this tool (`note` when an allow entry covers it).
    pub fn severity(&self, rule: &Rule, provider: &str, tool: &str) -> Severity {
        if self.allowed(rule, provider, tool).is_some() {
            return Severity::Note;
        }
        self.lookup(rule, provider, tool, |o| &o.severity).unwrap_or(rule.default_severity)
    }

    /// The registration mode of `rule` for this tool (`warn` when an allow entry covers it).
    pub fn mode(&self, rule: &Rule, provider: &str, tool: &str) -> Mode {
        if self.allowed(rule, provider, tool).is_some() {
            return Mode::Warn;
        }
        self.lookup(rule, provider, tool, |o| &o.mode).unwrap_or(rule.default_mode)
    }

    /// The allow entry that covers `rule` on this tool, if any.
    pub fn allowed(&self, rule: &Rule, provider: &str, tool: &str) -> Option<&Allow> {
        let index = crate::index_name(provider, tool);
        self.allow.iter().find(|a| a.rule == rule.id && axp_protocol::capability::glob_matches(&a.tool, &index))
    }

    fn lookup<T: Copy>(
        &self,
        rule: &Rule,
        provider: &str,
        tool: &str,
        map: impl Fn(&Overrides) -> &BTreeMap<String, T>,
    ) -> Option<T> {
        self.scopes(provider, tool).into_iter().find_map(|o| {
            let m = map(o);
            m.get(rule.id).or_else(|| m.get(rule.family.as_str())).copied()
        })
    }
}

/// Parses `[[lint.allow]]` entries, each error with its line when the source is known.
fn allow_list(v: &Value, source: Option<&str>, errs: &mut Vec<String>) -> Vec<Allow> {
    let example = "[[lint.allow]]\ntool = \"provider__tool\"\nrule = \"AXP032\"\nreason = \"...\"";
    let Some(arr) = v.as_array() else {
        let at = line_of(source, "allow").map(|l| format!("line {l}: ")).unwrap_or_default();
        errs.push(format!("{at}`lint.allow` must be an array of tables, one per allowed finding:\n{example}"));
        return Vec::new();
    };
    let headers = allow_headers(source);
    let mut out = Vec::new();
    for (i, entry) in arr.iter().enumerate() {
        let header = headers.get(i).copied();
        let at = |key: Option<&str>| -> String {
            let line = match (key, header) {
                (Some(k), Some(h)) => key_line_after(source, h, k).or(Some(h)),
                (None, h) => h,
                (Some(_), None) => None,
            };
            line.map(|l| format!("line {l}: ")).unwrap_or_default()
        };
        let where_ = format!("lint.allow[{i}]");
        let Some(t) = entry.as_table() else {
            errs.push(format!("{}`{where_}` must be a table with tool, rule and reason:\n{example}", at(None)));
            continue;
        };
        for k in t.keys() {
            if !ALLOW_KEYS.contains(&k.as_str()) {
                errs.push(unknown_key(&at(Some(k)), "[lint.allow]", k, ALLOW_KEYS));
            }
        }
        let field = |k: &str, errs: &mut Vec<String>| -> Option<String> {
            match t.get(k) {
                Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
                Some(_) => {
                    errs.push(format!("{}`{where_}.{k}` must be a non-empty string", at(Some(k))));
                    None
                }
                None => {
                    errs.push(format!(
                        "{}`{where_}` has no `{k}` (an allow entry needs tool, rule and reason)",
                        at(None)
                    ));
                    None
                }
            }
        };
        let tool = field("tool", errs);
        let rule = field("rule", errs);
        let reason = field("reason", errs);
        if let Some(tl) = &tool
            && !tl.contains("__")
            && tl != "*"
        {
            errs.push(format!(
                "{}`{where_}.tool` = \"{tl}\": tools are named by index name `<provider>__<tool>` (e.g. \"github__create_issue\"; globs allowed)",
                at(Some("tool"))
            ));
        }
        let rule = rule.and_then(|r| match rules::rule(&r).or_else(|| RULES.iter().find(|x| x.name == r)) {
            Some(x) => Some(x.id),
            None => {
                errs.push(format!("{}{}", at(Some("rule")), unknown_rule(&r, &format!("{where_}.rule"))));
                None
            }
        });
        if let (Some(tool), Some(rule), Some(reason)) = (tool, rule, reason) {
            out.push(Allow { tool, rule, reason });
        }
    }
    out
}

/// The 1-based lines of the `[[lint.allow]]` headers, in order.
fn allow_headers(source: Option<&str>) -> Vec<usize> {
    let Some(src) = source else { return Vec::new() };
    src.lines()
        .enumerate()
        .filter(|(_, l)| {
            let c: String = l.chars().filter(|c| !c.is_whitespace()).collect();
            c.starts_with("[[lint.allow]]")
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// The line of `key = ...` in the table that opens at line `from` (before the next header).
fn key_line_after(source: Option<&str>, from: usize, key: &str) -> Option<usize> {
    source?
        .lines()
        .enumerate()
        .skip(from)
        .take_while(|(_, l)| !l.trim_start().starts_with('['))
        .find(|(_, l)| l.trim_start().strip_prefix(key).is_some_and(|r| r.trim_start().starts_with('=')))
        .map(|(i, _)| i + 1)
}

fn unknown_key(at: &str, table: &str, key: &str, valid: &[&'static str]) -> String {
    match rules::nearest(key, valid.iter().copied()) {
        Some(n) => format!("{at}unknown key `{key}` in [{table}]; did you mean `{n}`?"),
        None => format!("{at}unknown key `{key}` in [{table}]; valid keys: {}", valid.join(", ")),
    }
}

/// Resolves a rule id, rule name or family name to rule ids.
fn resolve(name: &str, at: &str, errs: &mut Vec<String>) -> Vec<&'static str> {
    if let Some(r) = rules::rule(name).or_else(|| RULES.iter().find(|r| r.name == name)) {
        return vec![r.id];
    }
    if let Some(f) = Family::ALL.iter().find(|f| f.as_str() == name) {
        return RULES.iter().filter(|r| r.family == *f).map(|r| r.id).collect();
    }
    errs.push(unknown_rule(name, at));
    Vec::new()
}

fn unknown_rule(name: &str, at: &str) -> String {
    match rules::nearest_rule_or_family(name) {
        Some(n) => {
            format!("`{at}`: unknown rule `{name}`; did you mean `{n}`? (`axp lint --explain {n}`)")
        }
        None => format!(
            "`{at}`: unknown rule `{name}`; rules are AXP001..AXP{:03} or a family ({})",
            RULES.len(),
            Family::ALL.map(|f| f.as_str()).join(", ")
        ),
    }
}

fn rule_list(v: &Value, at: &str, errs: &mut Vec<String>) -> Vec<&'static str> {
    let Some(arr) = v.as_array() else {
        errs.push(format!("`{at}` must be an array of rule ids or families"));
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in arr {
        match item.as_str() {
            Some(s) => out.extend(resolve(s, at, errs)),
            None => errs.push(format!("`{at}` entries must be strings")),
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn keyed<T>(
    t: &Table,
    key: &str,
    at: &str,
    parse: impl Fn(&str) -> Option<T>,
    valid: &str,
    errs: &mut Vec<String>,
) -> BTreeMap<String, T> {
    let mut out = BTreeMap::new();
    let Some(v) = t.get(key) else { return out };
    let Some(tab) = v.as_table() else {
        errs.push(format!("`{at}.{key}` must be a table, e.g. {key} = {{ AXP003 = \"{valid}\" }}"));
        return out;
    };
    for (k, v) in tab {
        let name = if let Some(r) = rules::rule(k).or_else(|| RULES.iter().find(|r| r.name == k)) {
            r.id.to_string()
        } else if Family::ALL.iter().any(|f| f.as_str() == k) {
            k.clone()
        } else {
            errs.push(unknown_rule(k, &format!("{at}.{key}")));
            continue;
        };
        match v.as_str().and_then(&parse) {
            Some(x) => {
                out.insert(name, x);
            }
            None => errs.push(format!("`{at}.{key}.{k}` must be one of {valid}")),
        }
    }
    out
}

fn overrides(t: &Table, at: &str, errs: &mut Vec<String>) -> Overrides {
    Overrides {
        ignore: t.get("ignore").map(|v| rule_list(v, &format!("{at}.ignore"), errs)).unwrap_or_default(),
        severity: keyed(t, "severity", at, Severity::parse, "\"error\" | \"warning\" | \"note\"", errs),
        mode: keyed(t, "mode", at, Mode::parse, "\"warn\" | \"deny\"", errs),
    }
}

/// The 1-based line where `key` is first assigned or used as a table name, if the source is known.
fn line_of(source: Option<&str>, key: &str) -> Option<usize> {
    source?
        .lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with('='))
                || l.contains(&format!(".{key}]"))
        })
        .map(|i| i + 1)
}
