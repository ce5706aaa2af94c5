//! [`Catalog`]: the providers and their tools that one lint run looks at, parsed from a
//! `tools/list` result (`{"tools":[...]}`, one provider) or a fleet file
//! (`{"providers": {NAME: {"tools":[...]}}}`). Parsing only; it knows nothing of rules.

use std::collections::BTreeMap;

use axp_protocol::ToolSpec;
use serde_json::Value;

use crate::LintError;

/// The provider name given to a bare `tools/list` result when the caller names none.
pub const DEFAULT_PROVIDER: &str = "tools";

/// Providers (sorted by name) to their tools (in listed order). Members of a tool that
/// `ToolSpec` does not model are dropped at parsing and not linted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    pub providers: BTreeMap<String, Vec<ToolSpec>>,
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) one provider's tools.
    pub fn insert(&mut self, provider: impl Into<String>, tools: Vec<ToolSpec>) {
        self.providers.insert(provider.into(), tools);
    }

    /// Parses either accepted shape. A bare `tools/list` result (or a bare array of tools)
    /// becomes one provider named `default_provider`. A JSON-RPC response wrapping a result
    /// (`{"result": {"tools": ...}}`) is accepted too.
    pub fn from_json(value: &Value, default_provider: &str) -> Result<Self, LintError> {
        let value = value.get("result").unwrap_or(value);
        let mut cat = Catalog::new();
        if let Some(providers) = value.get("providers") {
            let map = providers.as_object().ok_or_else(|| {
                LintError::Catalog("`providers` must be an object of NAME -> tools/list result".into())
            })?;
            for (name, list) in map {
                cat.insert(name.clone(), parse_tools(list, &format!("providers.{name}"))?);
            }
        } else if value.get("tools").is_some() || value.is_array() {
            cat.insert(default_provider, parse_tools(value, "")?);
        } else {
            return Err(LintError::Catalog(
                "expected a tools/list result {\"tools\": [...]} or a fleet {\"providers\": {NAME: {\"tools\": [...]}}}".into(),
            ));
        }
        Ok(cat)
    }

    /// [`Catalog::from_json`] from text.
    pub fn from_json_str(text: &str, default_provider: &str) -> Result<Self, LintError> {
        let v: Value = serde_json::from_str(text).map_err(|e| LintError::Catalog(format!("not valid JSON: {e}")))?;
        Self::from_json(&v, default_provider)
    }

    /// Every (provider, tool) pair, providers in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ToolSpec)> {
        self.providers.iter().flat_map(|(p, tools)| tools.iter().map(move |t| (p.as_str(), t)))
    }

    /// The tool with this index name (`<provider>__<tool>`), if any.
    pub fn find_index_name(&self, index: &str) -> Option<(&str, &ToolSpec)> {
        self.iter().find(|(p, t)| crate::index_name(p, &t.name) == index)
    }

    /// Number of tools over all providers.
    pub fn len(&self) -> usize {
        self.providers.values().map(Vec::len).sum()
    }

    /// `true` when no provider has any tool.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn parse_tools(list: &Value, at: &str) -> Result<Vec<ToolSpec>, LintError> {
    let arr = list
        .get("tools")
        .unwrap_or(list)
        .as_array()
        .ok_or_else(|| LintError::Catalog(format!("{at}: `tools` must be an array")))?;
    arr.iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::from_value::<ToolSpec>(t.clone()).map_err(|e| {
                let name = t.get("name").and_then(Value::as_str).unwrap_or("?");
                LintError::Catalog(format!("{at}tools[{i}] (`{name}`): {e}"))
            })
        })
        .collect()
}
