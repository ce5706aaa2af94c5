//! TypeScript-style signatures generated from JSON Schema, for `axp.describe` and the compact
//! index: `time__convert(args: { time: string; target_timezone?: string }): unknown`. Models
//! read TypeScript well and it costs far fewer tokens than the schema. Unknown constructs
//! degrade to `unknown`, never to something that claims more than the schema says.

use serde_json::Value;

const MAX_DEPTH: usize = 6;

/// The signature of a tool named `name` taking arguments described by `schema`.
pub fn signature(name: &str, schema: &Value, output_schema: Option<&Value>) -> String {
    let out = output_schema.map_or_else(|| "unknown".to_string(), |s| ts_type(s, 0));
    format!("{name}(args: {}): {out}", ts_type(schema, 0))
}

/// The TypeScript type for one schema.
pub fn ts_type(schema: &Value, depth: usize) -> String {
    if depth > MAX_DEPTH {
        return "unknown".into();
    }
    let Value::Object(s) = schema else {
        return match schema {
            Value::Bool(false) => "never".into(),
            _ => "unknown".into(),
        };
    };
    if let Some(c) = s.get("const") {
        return literal(c);
    }
    if let Some(Value::Array(options)) = s.get("enum") {
        return union(options.iter().map(literal).collect());
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(options)) = s.get(key) {
            return union(options.iter().map(|o| ts_type(o, depth + 1)).collect());
        }
    }
    match s.get("type") {
        Some(Value::String(t)) => single(t, s, depth),
        Some(Value::Array(ts)) => union(ts.iter().filter_map(Value::as_str).map(|t| single(t, s, depth)).collect()),
        _ if s.contains_key("properties") => single("object", s, depth),
        _ => "unknown".into(),
    }
}

fn single(t: &str, s: &serde_json::Map<String, Value>, depth: usize) -> String {
    match t {
        "string" => "string".into(),
        "number" | "integer" => "number".into(),
        "boolean" => "boolean".into(),
        "null" => "null".into(),
        "array" => {
            let item = s.get("items").map_or_else(|| "unknown".into(), |i| ts_type(i, depth + 1));
            if item.contains(' ') { format!("Array<{item}>") } else { format!("{item}[]") }
        }
        "object" => object(s, depth),
        _ => "unknown".into(),
    }
}

fn object(s: &serde_json::Map<String, Value>, depth: usize) -> String {
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |r| r.iter().filter_map(Value::as_str).collect());
    let mut fields = Vec::new();
    if let Some(Value::Object(props)) = s.get("properties") {
        for (k, v) in props {
            let opt = if required.contains(&k.as_str()) { "" } else { "?" };
            let key = if k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !k.is_empty() {
                k.clone()
            } else {
                serde_json::to_string(k).unwrap_or_default()
            };
            fields.push(format!("{key}{opt}: {}", ts_type(v, depth + 1)));
        }
    }
    match s.get("additionalProperties") {
        Some(Value::Object(_)) | Some(Value::Bool(true)) if fields.is_empty() => {
            let v = s.get("additionalProperties").map_or_else(|| "unknown".into(), |a| ts_type(a, depth + 1));
            let v = if v == "never" { "unknown".into() } else { v };
            return format!("Record<string, {v}>");
        }
        _ => {}
    }
    if fields.is_empty() { "{}".into() } else { format!("{{ {} }}", fields.join("; ")) }
}

fn literal(v: &Value) -> String {
    match v {
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => v.to_string(),
        _ => "unknown".into(),
    }
}

fn union(mut parts: Vec<String>) -> String {
    parts.dedup();
    match parts.len() {
        0 => "never".into(),
        1 => parts.remove(0),
        _ => parts.join(" | "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn object_with_required_and_optional() {
        let s = json!({"type": "object", "properties": {
            "timezone": {"type": "string"},
            "count": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["a", "b"]},
            "nested": {"type": "object", "properties": {"x": {"type": ["number", "null"]}}, "required": ["x"]}
        }, "required": ["timezone"]});
        assert_eq!(
            signature("time__now", &s, None),
            "time__now(args: { timezone: string; count?: number; tags?: string[]; mode?: \"a\" | \"b\"; nested?: { x: number | null } }): unknown"
        );
    }

    #[test]
    fn odd_schemas_degrade_honestly() {
        assert_eq!(ts_type(&json!({}), 0), "unknown");
        assert_eq!(ts_type(&json!({"type": "object"}), 0), "{}");
        assert_eq!(
            ts_type(&json!({"type": "object", "additionalProperties": {"type": "string"}}), 0),
            "Record<string, string>"
        );
        assert_eq!(ts_type(&json!({"anyOf": [{"type": "string"}, {"type": "number"}]}), 0), "string | number");
        assert_eq!(
            ts_type(&json!({"type": "object", "properties": {"a-b": {"type": "string"}}}), 0),
            "{ \"a-b\"?: string }"
        );
        assert_eq!(ts_type(&json!({"$ref": "#/defs/x"}), 0), "unknown");
    }
}
