//! `--fix`: mechanical schema fixes applied to a tools file, repeated to a fixed point, and
//! nothing else touched.

use axp_lint::{Catalog, LintConfig, fix_tools_json, lint};
use serde_json::json;

#[test]
fn fixes_schemas_in_a_tools_list() {
    let input = json!({"tools": [{
        "name": "forecast",
        "description": "Returns the forecast for a city.\u{200b}",
        "inputSchema": {
            "properties": {
                "city": {"type": "string", "description": "City."},
                "units": {"type": "string", "enum": ["C", "F", "C"], "description": "Units."},
                "hours": {"type": "array", "default": [1, 2], "description": "Hours."},
                "grid": {"type": "array", "description": "Rows.", "items": {"type": "array"}}
            },
            "required": ["city", "town"]
        }
    }]});
    let (fixed, applied) = fix_tools_json(&input).unwrap();
    let s = &fixed["tools"][0]["inputSchema"];
    assert_eq!(s["type"], "object");
    assert_eq!(s["required"], json!(["city"]));
    assert_eq!(s["properties"]["units"]["enum"], json!(["C", "F"]));
    assert_eq!(s["properties"]["hours"]["items"], json!({"type": "integer"}));
    assert_eq!(s["properties"]["grid"]["items"]["items"], json!({}));
    assert_eq!(fixed["tools"][0]["description"], "Returns the forecast for a city.");
    // additionalProperties is offered but not applied: it would refuse arguments callers send.
    assert!(s.get("additionalProperties").is_none());
    let mut rules: Vec<&str> = applied.iter().map(|a| a.rule_id.as_str()).collect();
    rules.sort_unstable();
    assert_eq!(rules, ["AXP012", "AXP015", "AXP016", "AXP016", "AXP017", "AXP026"]);
    assert!(applied.iter().any(|a| a.pointer == "/tools/0/inputSchema/properties/units/enum"));
    // Fixed output lints clean of every fixable rule, and fixing again changes nothing.
    let report = lint(&Catalog::from_json(&fixed, "tools").unwrap(), &LintConfig::default());
    assert!(report.findings.iter().all(|f| f.fix.as_ref().is_none_or(|x| !x.safe)), "{}", report.to_text());
    let (again, more) = fix_tools_json(&fixed).unwrap();
    assert_eq!(again, fixed);
    assert!(more.is_empty());
}

#[test]
fn fixes_a_fleet_file_in_place_and_keeps_other_keys() {
    let input = json!({"comment": "kept", "providers": {"a/b": {"tools": [
        {"name": "x", "description": "Returns the x value of a point.", "inputSchema": {"properties": {"p": {"type": "array", "description": "P."}}}}
    ]}}});
    let (fixed, applied) = fix_tools_json(&input).unwrap();
    assert_eq!(fixed["comment"], "kept");
    let s = &fixed["providers"]["a/b"]["tools"][0]["inputSchema"];
    assert_eq!(s["type"], "object");
    assert_eq!(s["properties"]["p"]["items"], json!({}));
    assert!(applied.iter().all(|a| a.pointer.starts_with("/providers/a~1b/tools/0/")), "{applied:?}");
    assert!(fix_tools_json(&json!({"nope": 1})).is_err());
}
