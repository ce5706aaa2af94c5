//! The `[lint]` table: selection, severities, modes, per-provider and per-tool overrides, and
//! errors that name the nearest valid key or rule.

use axp_lint::{Catalog, LintConfig, Mode, Severity, lint, rule};
use serde_json::json;

fn cat() -> Catalog {
    Catalog::from_json(
        &json!({"providers": {
            "a": {"tools": [{"name": "t1", "description": "Stuff.", "inputSchema": {"type": "object"}}]},
            "b": {"tools": [{"name": "t2", "description": "Stuff.", "inputSchema": {"type": "object"}},
                            {"name": "t3", "description": "Stuff.", "inputSchema": {"type": "object"}}]}
        }}),
        "x",
    )
    .unwrap()
}

fn ids(cfg: &LintConfig) -> Vec<String> {
    lint(&cat(), cfg)
        .findings
        .iter()
        .map(|f| format!("{}:{}/{}:{}", f.rule_id, f.provider, f.tool, f.severity))
        .collect()
}

#[test]
fn defaults_and_an_absent_table() {
    let cfg = LintConfig::from_axp_toml("[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    assert_eq!(cfg, LintConfig::default());
    assert_eq!(
        ids(&cfg),
        [
            "AXP002:a/t1:warning",
            "AXP005:a/t1:warning",
            "AXP002:b/t2:warning",
            "AXP005:b/t2:warning",
            "AXP002:b/t3:warning",
            "AXP005:b/t3:warning"
        ]
    );
}

#[test]
fn select_ignore_severity_and_scopes() {
    let cfg = LintConfig::from_axp_toml(
        r#"
[lint]
select = ["description"]
ignore = ["AXP005"]
severity = { AXP002 = "error" }

[lint.providers.b]
severity = { description = "note" }

[lint.tools."b/t3"]
ignore = ["description-too-short"]
"#,
    )
    .unwrap();
    assert_eq!(ids(&cfg), ["AXP002:a/t1:error", "AXP002:b/t2:note"]);
    // A rule entry beats a family entry in the same scope; tool beats provider beats global.
    let cfg = LintConfig::from_axp_toml(
        "[lint]\nseverity = { AXP002 = \"error\", description = \"note\" }\n[lint.tools.\"*/t2\"]\nseverity = { AXP002 = \"warning\" }\n",
    )
    .unwrap();
    let r = rule("AXP002").unwrap();
    assert_eq!(cfg.severity(r, "a", "t1"), Severity::Error);
    assert_eq!(cfg.severity(r, "b", "t2"), Severity::Warning);
    assert_eq!(cfg.severity(rule("AXP005").unwrap(), "a", "t1"), Severity::Note);
}

#[test]
fn modes_default_to_deny_for_safety_errors_and_can_be_overridden() {
    let d = LintConfig::default();
    assert_eq!(d.mode(rule("AXP029").unwrap(), "p", "t"), Mode::Deny);
    assert_eq!(d.mode(rule("AXP037").unwrap(), "p", "t"), Mode::Deny);
    assert_eq!(d.mode(rule("AXP036").unwrap(), "p", "t"), Mode::Warn);
    assert_eq!(d.mode(rule("AXP002").unwrap(), "p", "t"), Mode::Warn);
    let cfg = LintConfig::from_axp_toml(
        "[lint]\nmode = { safety = \"warn\", AXP002 = \"deny\" }\n[lint.providers.trusted]\nmode = { AXP037 = \"warn\" }\n",
    )
    .unwrap();
    assert_eq!(cfg.mode(rule("AXP029").unwrap(), "p", "t"), Mode::Warn);
    assert_eq!(cfg.mode(rule("AXP002").unwrap(), "p", "t"), Mode::Deny);
    assert_eq!(cfg.mode(rule("AXP037").unwrap(), "trusted", "t"), Mode::Warn);
    assert_eq!(cfg.mode(rule("AXP037").unwrap(), "other", "t"), Mode::Deny);
}

fn err(text: &str) -> String {
    LintConfig::from_axp_toml(text).unwrap_err().to_string()
}

#[test]
fn mistakes_are_errors_naming_the_nearest_valid_value() {
    let e = err("[lint]\nselct = [\"AXP001\"]\n");
    assert!(e.contains("line 2") && e.contains("unknown key `selct`") && e.contains("did you mean `select`"), "{e}");
    let e = err("[lint]\nignore = [\"AXP0299\"]\n");
    assert!(e.contains("unknown rule `AXP0299`") && e.contains("did you mean `AXP029`"), "{e}");
    let e = err("[lint]\nseverity = { AXP003 = \"fatal\" }\n");
    assert!(e.contains("must be one of"), "{e}");
    let e = err("[lint]\nmode = { saftey = \"deny\" }\n");
    assert!(e.contains("did you mean `safety`"), "{e}");
    let e = err("[lint.providers.x]\nignroe = [\"AXP001\"]\n");
    assert!(e.contains("did you mean `ignore`"), "{e}");
    let e = err("[lint.tools.t1]\nignore = [\"AXP001\"]\n");
    assert!(e.contains("\"provider/tool\""), "{e}");
    // Every problem is reported at once.
    let e = err("[lint]\nselct = []\nignore = [\"AXP999\"]\nfail_on = \"fatal\"\n");
    assert_eq!(e.lines().count(), 3, "{e}");
    assert!(err("not toml [").contains("not valid TOML"));
}
