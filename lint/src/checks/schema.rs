//! Input-schema checks (AXP011–AXP020): meta-schema validity (through the `jsonschema` crate),
//! an object root, typed and described properties, `required` naming real properties, arrays
//! with `items`, enum hygiene, open `additionalProperties`, and dangling local `$ref`s. Walks
//! every subschema; emits pointers relative to the tool (`/inputSchema/...`).

use axp_protocol::ToolSpec;
use serde_json::{Value, json};

use super::Raw;
use crate::{Fix, PatchOp, pointer_escape};

const ROOT: &str = "/inputSchema";
/// Meta-schema violations reported per tool; more are noise once the schema is known broken.
const MAX_META_ERRORS: usize = 5;

pub(crate) fn check(tool: &ToolSpec, out: &mut Vec<Raw>) {
    let schema = &tool.input_schema;
    let Some(obj) = schema.as_object() else {
        out.push(Raw::new(
            "AXP012",
            ROOT,
            format!("input schema is {} instead of an object schema {{\"type\":\"object\", ...}}", kind(schema)),
        ));
        return;
    };
    let mut dangling = Vec::new();
    collect_refs(schema, schema, ROOT, &mut dangling);
    let dangling_found = !dangling.is_empty();
    for (ptr, r) in dangling {
        out.push(Raw::new("AXP020", ptr, format!("`$ref: {r}` does not resolve inside the schema")));
    }
    // Every meta-schema violation (up to a few per tool), each at its own pointer; then, if
    // the schema is valid, compile it to catch bad regular expressions and references.
    let meta_errors: Vec<(String, String)> = match jsonschema::meta::validator_for(schema) {
        Err(e) => vec![(ROOT.to_string(), format!("cannot resolve its meta-schema: {e}"))],
        Ok(v) => v
            .iter_errors(schema)
            .take(MAX_META_ERRORS)
            .map(|e| (format!("{ROOT}{}", e.instance_path()), e.to_string()))
            .collect(),
    };
    for (ptr, e) in &meta_errors {
        out.push(Raw::new("AXP011", ptr.clone(), format!("input schema is not valid JSON Schema: {e}")));
    }
    if meta_errors.is_empty()
        && !dangling_found
        && let Err(e) = jsonschema::validator_for(schema)
    {
        out.push(Raw::new("AXP011", ROOT, format!("input schema does not compile: {e}")));
    }
    match obj.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        None => out.push(
            Raw::new("AXP012", ROOT, "input schema has no `type`; tool arguments must be `\"type\": \"object\"`")
                .with_fix(Fix {
                    description: "add \"type\": \"object\" at the schema root".into(),
                    edits: vec![PatchOp::Add { path: format!("{ROOT}/type"), value: json!("object") }],
                    safe: true,
                }),
        ),
        Some(other) => out.push(Raw::new(
            "AXP012",
            format!("{ROOT}/type"),
            format!("input schema root has type {other}; tool arguments must be an object"),
        )),
    }
    let props_nonempty = obj.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
    if props_nonempty && !obj.contains_key("additionalProperties") {
        out.push(
            Raw::new(
                "AXP019",
                ROOT,
                "arguments object does not set `additionalProperties`; undeclared arguments are accepted",
            )
            .with_fix(Fix {
                description: "add \"additionalProperties\": false".into(),
                edits: vec![PatchOp::Add { path: format!("{ROOT}/additionalProperties"), value: json!(false) }],
                safe: false,
            }),
        );
    }
    walk(schema, schema, ROOT, out);
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Visits `node` and every subschema below it.
fn walk(root: &Value, node: &Value, ptr: &str, out: &mut Vec<Raw>) {
    let Some(obj) = node.as_object() else { return };
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, p) in props {
            let pp = format!("{ptr}/properties/{}", pointer_escape(name));
            if let Some(po) = p.as_object() {
                let typed = ["type", "enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not", "if"]
                    .iter()
                    .any(|k| po.contains_key(*k));
                if !typed {
                    out.push(Raw::new(
                        "AXP013",
                        pp.clone(),
                        format!("argument `{name}` has no type; it accepts any JSON value"),
                    ));
                }
                let described = po.get("description").and_then(Value::as_str).is_some_and(|d| !d.trim().is_empty())
                    || ref_target(root, po.get("$ref"))
                        .and_then(|t| t.get("description"))
                        .and_then(Value::as_str)
                        .is_some_and(|d| !d.trim().is_empty());
                if !described {
                    out.push(Raw::new("AXP014", pp.clone(), format!("argument `{name}` has no description")));
                }
            }
        }
        if let Some(req) = obj.get("required").and_then(Value::as_array) {
            let keep: Vec<Value> =
                req.iter().filter(|r| r.as_str().is_some_and(|s| props.contains_key(s))).cloned().collect();
            for r in req {
                if let Some(s) = r.as_str().filter(|s| !props.contains_key(*s)) {
                    out.push(
                        Raw::new(
                            "AXP015",
                            format!("{ptr}/required"),
                            format!("`required` names `{s}`, which is not a declared property"),
                        )
                        .with_fix(Fix {
                            description: format!("remove `{s}` from `required`"),
                            edits: vec![PatchOp::Replace {
                                path: format!("{ptr}/required"),
                                value: Value::Array(keep.clone()),
                            }],
                            safe: true,
                        }),
                    );
                }
            }
        }
    } else if let Some(req) = obj.get("required").and_then(Value::as_array) {
        let names: Vec<&str> = req.iter().filter_map(Value::as_str).collect();
        if !names.is_empty() && obj.get("type").and_then(Value::as_str) == Some("object") {
            out.push(
                Raw::new(
                    "AXP015",
                    format!("{ptr}/required"),
                    format!(
                        "`required` names {} but the schema declares no properties",
                        names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
                    ),
                )
                .with_fix(Fix {
                    description: "remove the stale `required` list".into(),
                    edits: vec![PatchOp::Remove { path: format!("{ptr}/required") }],
                    safe: true,
                }),
            );
        }
    }
    let is_array = match obj.get("type") {
        Some(Value::String(t)) => t == "array",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "array"),
        _ => false,
    };
    if is_array && !obj.contains_key("items") && !obj.contains_key("prefixItems") {
        let item = infer_items(obj);
        out.push(Raw::new("AXP016", ptr.to_string(), format!("array at `{ptr}` has no `items` schema")).with_fix(
            Fix {
                description: format!("add \"items\": {item}"),
                edits: vec![PatchOp::Add { path: format!("{ptr}/items"), value: item }],
                safe: true,
            },
        ));
    }
    if let Some(vals) = obj.get("enum").and_then(Value::as_array) {
        let mut seen: Vec<&Value> = Vec::new();
        let mut dups = Vec::new();
        for v in vals {
            if seen.contains(&v) {
                dups.push(v.to_string());
            } else {
                seen.push(v);
            }
        }
        if !dups.is_empty() {
            out.push(Raw::new("AXP017", format!("{ptr}/enum"), format!("enum repeats {}", dups.join(", "))).with_fix(
                Fix {
                    description: "remove repeated enum values, keeping the first".into(),
                    edits: vec![PatchOp::Replace {
                        path: format!("{ptr}/enum"),
                        value: Value::Array(seen.iter().map(|v| (*v).clone()).collect()),
                    }],
                    safe: true,
                },
            ));
        }
        let mut kinds: Vec<&str> = vals
            .iter()
            .map(|v| match v {
                Value::Number(_) => "number",
                other => kind(other),
            })
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        if kinds.len() > 1 {
            out.push(Raw::new(
                "AXP018",
                format!("{ptr}/enum"),
                format!("enum mixes value types: {}", kinds.join(", ")),
            ));
        }
    }
    for key in ["items", "additionalProperties", "not", "if", "then", "else", "contains"] {
        if let Some(sub) = obj.get(key) {
            match sub {
                Value::Array(a) if key == "items" => {
                    for (i, s) in a.iter().enumerate() {
                        walk(root, s, &format!("{ptr}/{key}/{i}"), out);
                    }
                }
                _ => walk(root, sub, &format!("{ptr}/{key}"), out),
            }
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(a) = obj.get(key).and_then(Value::as_array) {
            for (i, s) in a.iter().enumerate() {
                walk(root, s, &format!("{ptr}/{key}/{i}"), out);
            }
        }
    }
    for key in ["properties", "$defs", "definitions", "patternProperties"] {
        if let Some(m) = obj.get(key).and_then(Value::as_object) {
            for (k, s) in m {
                walk(root, s, &format!("{ptr}/{key}/{}", pointer_escape(k)), out);
            }
        }
    }
}

/// The `items` schema the fix proposes: the common type of the default/examples elements if
/// they agree, else `{}` (explicitly "anything", for the author to narrow).
fn infer_items(obj: &serde_json::Map<String, Value>) -> Value {
    let mut samples: Vec<&Value> = Vec::new();
    if let Some(Value::Array(d)) = obj.get("default") {
        samples.extend(d.iter());
    }
    if let Some(Value::Array(ex)) = obj.get("examples") {
        for e in ex {
            if let Value::Array(inner) = e {
                samples.extend(inner.iter());
            }
        }
    }
    let types: Vec<&str> = samples
        .iter()
        .map(|v| match v {
            Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Bool(_) => "boolean",
            Value::Object(_) => "object",
            Value::Array(_) => "array",
            Value::Null => "null",
        })
        .collect();
    match types.first() {
        Some(first) if types.iter().all(|t| t == first) => json!({"type": first}),
        _ => json!({}),
    }
}

/// Resolves a local `$ref` (`#`, `#/pointer`, `#anchor`) against `root`.
fn ref_target<'a>(root: &'a Value, r: Option<&Value>) -> Option<&'a Value> {
    let r = r?.as_str()?;
    let frag = r.strip_prefix('#')?;
    if frag.is_empty() {
        return Some(root);
    }
    if frag.starts_with('/') {
        let decoded = percent_decode(frag);
        return root.pointer(&decoded);
    }
    find_anchor(root, frag)
}

fn find_anchor<'a>(node: &'a Value, anchor: &str) -> Option<&'a Value> {
    match node {
        Value::Object(m) => {
            if m.get("$anchor").and_then(Value::as_str) == Some(anchor) {
                return Some(node);
            }
            m.values().find_map(|v| find_anchor(v, anchor))
        }
        Value::Array(a) => a.iter().find_map(|v| find_anchor(v, anchor)),
        _ => None,
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(n) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            {
                out.push(n);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every local `$ref` in `node` that does not resolve.
fn collect_refs(root: &Value, node: &Value, ptr: &str, out: &mut Vec<(String, String)>) {
    match node {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref")
                && r.starts_with('#')
                && ref_target(root, m.get("$ref")).is_none()
            {
                out.push((format!("{ptr}/$ref"), r.clone()));
            }
            for (k, v) in m {
                // Only descend where subschemas live; `enum`/`const`/`default`/`examples` hold data.
                if matches!(k.as_str(), "enum" | "const" | "default" | "examples") {
                    continue;
                }
                collect_refs(root, v, &format!("{ptr}/{}", pointer_escape(k)), out);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                collect_refs(root, v, &format!("{ptr}/{i}"), out);
            }
        }
        _ => {}
    }
}
