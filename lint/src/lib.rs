//! `axp-lint`: tool-description quality and safety rules, run offline, used by the gateway at
//! registration and by `axp lint` in CI (DESIGN §7). It takes a [`Catalog`] of
//! [`ToolSpec`]s and returns a [`Report`] of [`Finding`]s with stable rule ids, severities,
//! JSON-pointer locations and, where mechanical, a [`Fix`]. It never starts servers, opens
//! sockets or reads files on its own: callers hand it JSON and TOML text and write results.
//!
//! Entry points: [`lint`] (a whole catalog), [`lint_tool`] + [`Verdict`] (registration),
//! [`check_drift`] with a [`Lockfile`] (rug pulls), [`fix_tools_json`] (`--fix`),
//! [`LintConfig`] (the `[lint]` table), [`explain`] (`--explain`).

pub mod catalog;
mod checks;
pub mod config;
pub mod drift;
pub mod eval;
pub mod fix;
pub mod registration;
pub mod report;
pub mod rules;
mod text;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use axp_protocol::ToolSpec;
pub use catalog::Catalog;
pub use checks::catalog::CatalogMemo;
pub use config::{Allow, LintConfig};
pub use drift::{Lockfile, check_drift};
pub use fix::{AppliedFix, fix_tools_json};
pub use registration::{Verdict, lint_offering, lint_tool};
pub use report::{Report, lint};
pub use rules::{Family, Mode, RULES, Rule, Severity, explain, rule};

/// Every way this crate can fail. Findings are not errors: these are inputs it cannot use.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// The input was not JSON, or not a tools list of a known shape.
    #[error("cannot read the tool catalog: {0}")]
    Catalog(String),
    /// The `[lint]` table is wrong; the message names the key and the nearest valid one.
    #[error("invalid [lint] configuration: {0}")]
    Config(String),
    /// `axp.lock` could not be parsed or written.
    #[error("invalid lockfile: {0}")]
    Lockfile(String),
    /// `--approve` named a tool that is not in the catalog.
    #[error("no tool named `{0}` in the catalog (index names are `<provider>__<tool>`)")]
    UnknownTool(String),
}

/// One JSON-Patch (RFC 6902) style operation; `path` is a JSON pointer relative to the tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum PatchOp {
    /// Insert or set a member (`path` ends in the new key).
    Add { path: String, value: Value },
    /// Replace an existing value.
    Replace { path: String, value: Value },
    /// Delete a member or array element.
    Remove { path: String },
}

/// A mechanical fix for a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fix {
    /// What the fix does, in words.
    pub description: String,
    /// The edits, applied in order to the tool object.
    pub edits: Vec<PatchOp>,
    /// `true` when applying it cannot change what valid callers may send; `--fix` applies only
    /// safe fixes (closing `additionalProperties` is offered but not applied).
    pub safe: bool,
}

/// One problem found in one tool (or one catalog-level pair).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub rule_id: String,
    pub severity: Severity,
    pub message: String,
    pub provider: String,
    pub tool: String,
    /// JSON pointer into the tool object (`/inputSchema/properties/debug/description`); empty
    /// for the whole tool.
    pub pointer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<Fix>,
    /// The part of the string at `pointer` the finding is about, when it is one sentence of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<Span>,
    /// The reason of the `[[lint.allow]]` entry that covers this finding, if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed: Option<String>,
}

/// A range of characters (Unicode scalar values, 0-based, end exclusive) in one string of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Finding {
    /// The rule's metadata (always present for findings this crate creates).
    pub fn rule(&self) -> Option<&'static Rule> {
        rules::rule(&self.rule_id)
    }
}

/// The name the gateway indexes a tool under before any shortening: `<provider>__<tool>`.
pub fn index_name(provider: &str, tool: &str) -> String {
    format!("{provider}__{tool}")
}

/// Escapes one JSON-pointer reference token (RFC 6901).
pub fn pointer_escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
