//! `--fix`: applies the safe mechanical fixes of a lint run to a tools JSON file (a
//! `tools/list` result, a fleet file, a bare array or a JSON-RPC response) and says what it
//! changed. Edits only the JSON value it is given; writing the file back is the caller's job.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Catalog, LintConfig, LintError, PatchOp, lint, pointer_escape};

/// One fix that was applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedFix {
    pub rule_id: String,
    pub provider: String,
    pub tool: String,
    /// JSON pointer into the whole file.
    pub pointer: String,
    pub description: String,
}

/// Where each provider's tool array sits in the file.
fn tools_base(value: &Value, provider: &str, default_provider: &str) -> Option<String> {
    let (prefix, v) = match value.get("result") {
        Some(r) => ("/result".to_string(), r),
        None => (String::new(), value),
    };
    if v.get("providers").is_some() {
        Some(format!("{prefix}/providers/{}/tools", pointer_escape(provider)))
    } else if provider == default_provider {
        Some(if v.is_array() { prefix } else { format!("{prefix}/tools") })
    } else {
        None
    }
}

/// Applies every safe fix (the ones `Fix::safe` marks) to `value`, repeating until nothing
/// more applies (a fix can reveal another, e.g. adding `items` to an array of arrays), and
/// returns the fixed value with the list of applied fixes. The default config is used: `--fix`
/// repairs what is mechanical regardless of which rules a project reports.
pub fn fix_tools_json(value: &Value) -> Result<(Value, Vec<AppliedFix>), LintError> {
    const PROVIDER: &str = crate::catalog::DEFAULT_PROVIDER;
    let mut v = value.clone();
    let mut applied: Vec<AppliedFix> = Vec::new();
    for _round in 0..4 {
        let catalog = Catalog::from_json(&v, PROVIDER)?;
        let report = lint(&catalog, &LintConfig::default());
        let mut changed = false;
        for f in &report.findings {
            let Some(fix) = f.fix.as_ref().filter(|x| x.safe) else {
                continue;
            };
            let Some(base) = tools_base(&v, &f.provider, PROVIDER) else {
                continue;
            };
            let Some(idx) = catalog.providers.get(&f.provider).and_then(|ts| ts.iter().position(|t| t.name == f.tool))
            else {
                continue;
            };
            let tool_ptr = format!("{base}/{idx}");
            let mut ok = true;
            let mut local = v.clone();
            for e in &fix.edits {
                if apply(&mut local, e, &tool_ptr).is_err() {
                    ok = false;
                    break;
                }
            }
            if ok && local != v {
                v = local;
                changed = true;
                applied.push(AppliedFix {
                    rule_id: f.rule_id.clone(),
                    provider: f.provider.clone(),
                    tool: f.tool.clone(),
                    pointer: format!("{tool_ptr}{}", f.pointer),
                    description: fix.description.clone(),
                });
            }
        }
        if !changed {
            break;
        }
    }
    Ok((v, applied))
}

/// Applies one edit whose path is relative to `base`.
pub(crate) fn apply(root: &mut Value, op: &PatchOp, base: &str) -> Result<(), String> {
    let split = |path: &str| -> Result<(String, String), String> {
        let full = format!("{base}{path}");
        let (parent, last) = full.rsplit_once('/').ok_or("empty pointer")?;
        Ok((parent.to_string(), last.replace("~1", "/").replace("~0", "~")))
    };
    match op {
        PatchOp::Replace { path, value } => {
            let slot = root.pointer_mut(&format!("{base}{path}")).ok_or("no such member")?;
            *slot = value.clone();
        }
        PatchOp::Add { path, value } => {
            let (parent, key) = split(path)?;
            match root.pointer_mut(&parent).ok_or("no such parent")? {
                Value::Object(m) => {
                    m.insert(key, value.clone());
                }
                Value::Array(a) => {
                    if key == "-" {
                        a.push(value.clone());
                    } else {
                        let i: usize = key.parse().map_err(|_| "bad index")?;
                        if i > a.len() {
                            return Err("index out of range".into());
                        }
                        a.insert(i, value.clone());
                    }
                }
                _ => return Err("parent is not a container".into()),
            }
        }
        PatchOp::Remove { path } => {
            let (parent, key) = split(path)?;
            match root.pointer_mut(&parent).ok_or("no such parent")? {
                Value::Object(m) => {
                    m.shift_remove(&key).ok_or("no such member")?;
                }
                Value::Array(a) => {
                    let i: usize = key.parse().map_err(|_| "bad index")?;
                    if i >= a.len() {
                        return Err("index out of range".into());
                    }
                    a.remove(i);
                }
                _ => return Err("parent is not a container".into()),
            }
        }
    }
    Ok(())
}
