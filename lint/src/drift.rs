//! Drift: the `axp.lock` lockfile that pins every approved tool by a SHA-256 of the canonical
//! JSON of its name, description, input schema and annotations, and [`check_drift`], which
//! reports a changed tool as a rug pull (AXP037), and new (AXP038) and removed (AXP039) tools.
//! Parsing and hashing only; reading and writing the file is the caller's job.
//!
//! Canonical JSON: object keys sorted by code point at every level, no insignificant whitespace,
//! strings and numbers as serde_json prints them (RFC 8785 differs only for floats, which tool
//! schemas rarely carry; the hash only has to be stable for this implementation).

use std::collections::BTreeMap;

use axp_protocol::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::checks::clip;
use crate::{Catalog, Finding, LintError, index_name, rules};

/// Lockfile format version written by this crate.
pub const LOCK_VERSION: u32 = 1;

/// One approved tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pin {
    pub provider: String,
    pub tool: String,
    /// SHA-256 (hex) of the canonical JSON of name + description + inputSchema + annotations.
    pub sha256: String,
    /// The approved description, kept so a reviewer (and the rug-pull message) can see the diff.
    pub description: String,
    /// The approved input schema and annotations as canonical JSON, so the gateway can keep
    /// serving the pinned version while a change awaits approval.
    pub input_schema: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<String>,
}

/// `axp.lock`: pins by index name (`<provider>__<tool>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lockfile {
    pub version: u32,
    #[serde(default)]
    pub tools: BTreeMap<String, Pin>,
}

impl Default for Lockfile {
    fn default() -> Self {
        Self { version: LOCK_VERSION, tools: BTreeMap::new() }
    }
}

/// Serialises `v` with keys sorted at every level and no whitespace.
pub fn canonical_json(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                let mut out = serde_json::Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&m[k]));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}

fn hex_sha256(s: &str) -> String {
    Sha256::digest(s.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// The pinned hash of a tool.
pub fn tool_hash(spec: &ToolSpec) -> String {
    let v = serde_json::json!({
        "name": spec.name,
        "description": spec.description,
        "inputSchema": spec.input_schema,
        "annotations": spec.annotations.clone().unwrap_or(Value::Null),
    });
    hex_sha256(&canonical_json(&v))
}

/// How a live tool compares with its pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinStatus {
    /// Pinned and unchanged.
    Match,
    /// Pinned with a different hash.
    Changed,
    /// Not pinned.
    New,
}

impl Lockfile {
    /// Parses `axp.lock` text.
    pub fn parse(text: &str) -> Result<Self, LintError> {
        let lock: Lockfile = toml::from_str(text).map_err(|e| LintError::Lockfile(e.to_string()))?;
        if lock.version != LOCK_VERSION {
            return Err(LintError::Lockfile(format!(
                "version {} is not supported (this axp writes version {LOCK_VERSION})",
                lock.version
            )));
        }
        Ok(lock)
    }

    /// The text to write to `axp.lock`.
    pub fn to_toml_string(&self) -> Result<String, LintError> {
        let body = toml::to_string(self).map_err(|e| LintError::Lockfile(e.to_string()))?;
        Ok(format!(
            "# axp.lock: approved tool descriptions, pinned by SHA-256. Update with `axp lint --approve TOOL`.\n{body}"
        ))
    }

    /// Pins (or re-pins) one tool: the operator's approval.
    pub fn pin(&mut self, provider: &str, spec: &ToolSpec) {
        self.tools.insert(
            index_name(provider, &spec.name),
            Pin {
                provider: provider.to_string(),
                tool: spec.name.clone(),
                sha256: tool_hash(spec),
                description: spec.description.clone(),
                input_schema: canonical_json(&spec.input_schema),
                annotations: spec.annotations.as_ref().map(canonical_json),
            },
        );
    }

    /// Approves the current version of the catalog's tool `index` (`<provider>__<tool>`).
    pub fn approve(&mut self, catalog: &Catalog, index: &str) -> Result<(), LintError> {
        let (p, spec) = catalog.find_index_name(index).ok_or_else(|| LintError::UnknownTool(index.to_string()))?;
        let (p, spec) = (p.to_string(), spec.clone());
        self.pin(&p, &spec);
        Ok(())
    }

    /// Pins every catalog tool that has no pin yet and returns their index names. Changed tools
    /// are left alone: a rug pull is approved one tool at a time with [`Lockfile::approve`].
    pub fn pin_all(&mut self, catalog: &Catalog) -> Vec<String> {
        let mut added = Vec::new();
        for (p, t) in catalog.iter() {
            let key = index_name(p, &t.name);
            if !self.tools.contains_key(&key) {
                self.pin(p, t);
                added.push(key);
            }
        }
        added
    }

    /// How `spec` compares with its pin.
    pub fn status(&self, provider: &str, spec: &ToolSpec) -> PinStatus {
        match self.tools.get(&index_name(provider, &spec.name)) {
            None => PinStatus::New,
            Some(pin) if pin.sha256 == tool_hash(spec) => PinStatus::Match,
            Some(_) => PinStatus::Changed,
        }
    }

    /// The approved version of a tool, for the gateway to keep serving while a change waits.
    pub fn pinned_spec(&self, index: &str) -> Option<ToolSpec> {
        let pin = self.tools.get(index)?;
        let mut spec =
            ToolSpec::new(pin.tool.clone(), pin.description.clone(), serde_json::from_str(&pin.input_schema).ok()?);
        spec.annotations = match &pin.annotations {
            Some(a) => Some(serde_json::from_str(a).ok()?),
            None => None,
        };
        Some(spec)
    }
}

fn finding(rule: &str, provider: &str, tool: &str, pointer: &str, message: String) -> Finding {
    let sev = rules::rule(rule).map(|r| r.default_severity).unwrap_or(crate::Severity::Error);
    Finding {
        rule_id: rule.to_string(),
        severity: sev,
        message,
        provider: provider.to_string(),
        tool: tool.to_string(),
        pointer: pointer.to_string(),
        fix: None,
        span: None,
        allowed: None,
    }
}

/// Describes what changed between a pin and the live tool.
fn describe_change(pin: &Pin, spec: &ToolSpec) -> (String, String) {
    let mut parts = Vec::new();
    let mut pointer = String::new();
    if pin.description != spec.description {
        pointer = "/description".into();
        let old = &pin.description;
        let new = &spec.description;
        if let Some(added) = new.strip_prefix(old.as_str()) {
            parts.push(format!("description gained \"{}\"", clip(added, 160)));
        } else if let Some(added) = new.strip_suffix(old.as_str()) {
            parts.push(format!("description gained a prefix \"{}\"", clip(added, 160)));
        } else {
            parts.push(format!("description changed from \"{}\" to \"{}\"", clip(old, 80), clip(new, 160)));
        }
    }
    if pin.input_schema != canonical_json(&spec.input_schema) {
        if pointer.is_empty() {
            pointer = "/inputSchema".into();
        }
        parts.push("input schema changed".into());
    }
    if pin.annotations != spec.annotations.as_ref().map(canonical_json) {
        if pointer.is_empty() {
            pointer = "/annotations".into();
        }
        parts.push("annotations changed".into());
    }
    if parts.is_empty() {
        parts.push("hash changed".into());
    }
    (parts.join("; "), pointer)
}

/// Compares the catalog with the lockfile. Findings carry default severities; the report
/// applies the configuration. Removed pins are reported only for providers in the catalog, so
/// linting one provider never reports every other provider's tools as removed.
pub fn check_drift(lock: &Lockfile, catalog: &Catalog) -> Vec<Finding> {
    let mut out = Vec::new();
    for (p, t) in catalog.iter() {
        let key = index_name(p, &t.name);
        match lock.tools.get(&key) {
            None => out.push(finding(
                "AXP038",
                p,
                &t.name,
                "",
                format!("`{key}` is not pinned in axp.lock; review it and run `axp lint --approve {key}`"),
            )),
            Some(pin) if pin.sha256 != tool_hash(t) => {
                let (what, ptr) = describe_change(pin, t);
                out.push(finding(
                    "AXP037",
                    p,
                    &t.name,
                    &ptr,
                    format!(
                        "`{key}` changed since it was approved (possible rug pull): {what}; review it and run `axp lint --approve {key}`"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    for (key, pin) in &lock.tools {
        if catalog.providers.contains_key(&pin.provider) && catalog.find_index_name(key).is_none() {
            out.push(finding(
                "AXP039",
                &pin.provider,
                &pin.tool,
                "",
                format!("`{key}` is pinned in axp.lock but no longer offered"),
            ));
        }
    }
    out
}
