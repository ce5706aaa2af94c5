//! Which tool the runner calls, and with what. The runner has no fixture of its own: it calls a
//! tool the endpoint lists, and only one it has reason to believe is cheap and changes nothing —
//! one it knows by name (the built-in `files__list_files`, the reference servers' clock and echo),
//! one the caller names with `--tool`, or one whose provider annotates it `readOnlyHint` and that
//! needs no argument. The arguments of deliberately mistyped calls are made here too. Pure
//! functions over the described schema; nothing here talks to the endpoint.

use axp_protocol::methods::DescribeResult;
use serde_json::{Map, Value, json};

/// The tool the tool checks call.
#[derive(Debug, Clone)]
pub(crate) struct Choice {
    pub(crate) name: String,
    pub(crate) arguments: Map<String, Value>,
    /// Its input schema, as `axp.describe` gave it.
    pub(crate) schema: Value,
    /// Why this one (said in the verdict line).
    pub(crate) why: String,
}

/// Tools the runner knows by name to be cheap and read-only, with arguments that work on any
/// host: the built-in provider's listing of the workspace, mcp-server-time's clock and
/// server-everything's echo. Earlier entries are preferred.
pub(crate) fn known_arguments(name: &str) -> Option<Map<String, Value>> {
    let args = match name {
        "files__list_files" => json!({"path": "."}),
        "time__get_current_time" => json!({"timezone": "UTC"}),
        "everything__echo" => json!({"message": "axp-conformance"}),
        _ => return None,
    };
    args.as_object().cloned()
}

/// The preference order of [`known_arguments`].
pub(crate) const KNOWN: [&str; 3] = ["files__list_files", "time__get_current_time", "everything__echo"];

/// Arguments for a tool this runner does not know: only a tool its provider marks read-only
/// (`annotations.readOnlyHint: true`) and whose schema requires nothing is called, with `{}`.
pub(crate) fn generic_arguments(d: &DescribeResult) -> Option<Map<String, Value>> {
    let read_only = d.annotations.as_ref().and_then(|a| a.get("readOnlyHint")).and_then(Value::as_bool) == Some(true);
    let requires_nothing = d.schema.get("required").and_then(Value::as_array).is_none_or(|r| r.is_empty());
    (read_only && requires_nothing && d.available).then(Map::new)
}

/// A copy of `arguments` with one property of `schema` set to a value of the wrong JSON type
/// (a number for a string, a string for a number, …), and that property's name. A property the
/// arguments already set is preferred, so the rest of the call stays valid. `None` when no
/// property has one plain `type` to contradict.
pub(crate) fn mistyped(schema: &Value, arguments: &Map<String, Value>) -> Option<(String, Map<String, Value>)> {
    let props = schema.get("properties")?.as_object()?;
    let wrong = |p: &Value| -> Option<Value> {
        Some(match p.get("type")?.as_str()? {
            "string" => json!(12345),
            "integer" | "number" => json!("not a number"),
            "boolean" => json!("not a boolean"),
            "array" => json!("not an array"),
            "object" => json!("not an object"),
            _ => return None,
        })
    };
    let mut names: Vec<&String> = props.keys().collect();
    // Properties already in the arguments first, then the rest in name order.
    names.sort_by_key(|n| (!arguments.contains_key(*n), n.as_str()));
    names.into_iter().find_map(|n| {
        let bad = wrong(&props[n])?;
        let mut args = arguments.clone();
        args.insert(n.clone(), bad);
        Some((n.clone(), args))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(schema: Value, annotations: Option<Value>) -> DescribeResult {
        DescribeResult {
            name: "p__t".into(),
            desc: String::new(),
            description: String::new(),
            signature: "t(): string".into(),
            schema,
            output_schema: None,
            provider: "p".into(),
            requires: Vec::new(),
            available: true,
            annotations,
            lint: Vec::new(),
            instructions: None,
        }
    }

    #[test]
    fn known_tools_have_arguments_in_preference_order() {
        for name in KNOWN {
            assert!(known_arguments(name).is_some(), "{name}");
        }
        assert!(known_arguments("files__run_command").is_none());
    }

    #[test]
    fn only_read_only_tools_that_need_nothing_are_called_blind() {
        let ro = Some(json!({"readOnlyHint": true}));
        assert!(generic_arguments(&described(json!({"type": "object"}), ro.clone())).is_some());
        assert!(generic_arguments(&described(json!({"type": "object", "required": []}), ro.clone())).is_some());
        assert!(generic_arguments(&described(json!({"type": "object", "required": ["x"]}), ro)).is_none());
        assert!(generic_arguments(&described(json!({"type": "object"}), None)).is_none());
        let writes = Some(json!({"readOnlyHint": false}));
        assert!(generic_arguments(&described(json!({"type": "object"}), writes)).is_none());
    }

    #[test]
    fn a_mistyped_call_contradicts_one_property_and_keeps_the_rest() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "path": {"type": "string"}, "z": {"anyOf": [{"type": "string"}]}
        }});
        let args = json!({"path": "."}).as_object().cloned().unwrap();
        let (name, bad) = mistyped(&schema, &args).unwrap();
        assert_eq!((name.as_str(), &bad["path"]), ("path", &json!(12345)));
        let (name, bad) = mistyped(&schema, &Map::new()).unwrap();
        assert_eq!((name.as_str(), &bad["a"]), ("a", &json!("not a number")));
        assert!(mistyped(&json!({"type": "object", "properties": {"z": {"enum": [1]}}}), &Map::new()).is_none());
        assert!(mistyped(&json!({"type": "object"}), &Map::new()).is_none());
    }
}
