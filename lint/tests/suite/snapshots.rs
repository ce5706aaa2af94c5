//! Output snapshots and SARIF structure. The text, JSON and SARIF renderings of
//! `tests/fixtures/fleet.json` are compared byte for byte with `tests/snapshots/fleet.*`
//! (regenerate with `UPDATE_SNAPSHOTS=1 cargo test -p axp-lint`, then review the diff). The SARIF
//! output is also validated against the official SARIF 2.1.0 JSON schema
//! (`tests/fixtures/sarif-2.1.0.json`, copied from @microsoft/sarif-multitool-linux 5.7.0, MIT)
//! and checked for what GitHub code scanning relies on.

use std::collections::BTreeSet;
use std::path::PathBuf;

use axp_lint::{Catalog, LintConfig, RULES, Report, lint};
use serde_json::Value;

const URI: &str = "lint/tests/fixtures/fleet.json";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests")
}

fn source() -> String {
    std::fs::read_to_string(dir().join("fixtures/fleet.json")).unwrap()
}

fn report() -> Report {
    let cat = Catalog::from_json_str(&source(), "unused").unwrap();
    lint(&cat, &LintConfig::default())
}

fn check_snapshot(name: &str, actual: &str) {
    let path = dir().join("snapshots").join(name);
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!("{} is missing: run `UPDATE_SNAPSHOTS=1 cargo test -p axp-lint` and review it", path.display())
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from the snapshot at line {}:\n  expected: {:?}\n  actual:   {:?}\n(rerun with UPDATE_SNAPSHOTS=1 if the change is intended)",
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap();
    s.push('\n');
    s
}

#[test]
fn text_output_matches_the_snapshot() {
    check_snapshot("fleet.txt", &report().to_text());
}

#[test]
fn json_output_matches_the_snapshot() {
    check_snapshot("fleet.json", &pretty(&report().to_json()));
}

#[test]
fn sarif_output_matches_the_snapshot() {
    check_snapshot("fleet.sarif", &pretty(&report().to_sarif(URI, Some(&source()))));
}

#[test]
fn sarif_is_valid_against_the_sarif_2_1_0_schema() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("fixtures/sarif-2.1.0.json")).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let sarif = report().to_sarif(URI, Some(&source()));
    let errors: Vec<String> =
        validator.iter_errors(&sarif).map(|e| format!("{} at {}", e, e.instance_path())).collect();
    assert!(errors.is_empty(), "SARIF schema violations:\n{}", errors.join("\n"));
    // The schema must actually be able to fail: a result without a message is refused.
    let mut broken = sarif.clone();
    broken["runs"][0]["results"][0].as_object_mut().unwrap().remove("message");
    assert!(!validator.is_valid(&broken));
}

#[test]
fn sarif_has_what_github_code_scanning_needs() {
    let src = source();
    let r = report();
    let sarif = r.to_sarif(URI, Some(&src));
    assert_eq!(sarif["version"], "2.1.0");
    assert!(sarif["$schema"].as_str().unwrap().contains("sarif-2.1.0"));
    let run = &sarif["runs"][0];
    let driver = &run["tool"]["driver"];
    assert_eq!(driver["name"], "axp-lint");
    assert!(!driver["informationUri"].as_str().unwrap().is_empty());
    let rules = driver["rules"].as_array().unwrap();
    assert_eq!(rules.len(), RULES.len(), "every rule is listed, fired or not");
    let levels = ["none", "note", "warning", "error"];
    for (rule, meta) in rules.iter().zip(RULES) {
        assert_eq!(rule["id"], meta.id);
        for k in ["shortDescription", "fullDescription", "help"] {
            assert!(!rule[k]["text"].as_str().unwrap().is_empty(), "{} lacks {k}", meta.id);
        }
        assert!(levels.contains(&rule["defaultConfiguration"]["level"].as_str().unwrap()));
    }
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), r.findings.len());
    assert!(!results.is_empty());
    let mut fingerprints = BTreeSet::new();
    let lines: Vec<&str> = src.lines().collect();
    for res in results {
        let id = res["ruleId"].as_str().unwrap();
        let idx = res["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[idx]["id"], id, "ruleIndex points at the rule");
        assert!(levels.contains(&res["level"].as_str().unwrap()));
        assert!(!res["message"]["text"].as_str().unwrap().is_empty());
        let loc = &res["locations"][0];
        assert_eq!(loc["physicalLocation"]["artifactLocation"]["uri"], URI);
        let line = loc["physicalLocation"]["region"]["startLine"].as_u64().unwrap() as usize;
        let tool = loc["logicalLocations"][0]["name"].as_str().unwrap();
        assert!(
            lines[line - 1].contains(&format!("\"name\": \"{tool}\"")),
            "result for {tool} points at line {line}: {}",
            lines[line - 1]
        );
        let fp = res["partialFingerprints"]["axpLintFinding/v1"].as_str().unwrap();
        assert!(fingerprints.insert(fp.to_string()), "duplicate fingerprint {fp}");
    }
    // Stable across runs, and independent of the other findings around them.
    let again = report().to_sarif(URI, Some(&src));
    assert_eq!(sarif, again);
    let cfg = LintConfig::from_axp_toml("[lint]\nignore = [\"schema\", \"description\"]\n").unwrap();
    let fewer = lint(&Catalog::from_json_str(&src, "unused").unwrap(), &cfg).to_sarif(URI, Some(&src));
    for res in fewer["runs"][0]["results"].as_array().unwrap() {
        let fp = res["partialFingerprints"]["axpLintFinding/v1"].as_str().unwrap();
        assert!(fingerprints.contains(fp), "fingerprint changed when other findings were dropped");
        let idx = res["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(fewer["runs"][0]["tool"]["driver"]["rules"][idx]["id"], res["ruleId"]);
    }
}

#[test]
fn exit_codes_follow_fail_on() {
    let r = report();
    assert_eq!(r.exit_code(), 1);
    let src = source();
    let cat = Catalog::from_json_str(&src, "unused").unwrap();
    let lenient = LintConfig::from_axp_toml(
        "[lint]\nignore = [\"safety\", \"schema\", \"catalog\"]\nseverity = { description = \"warning\" }\n",
    )
    .unwrap();
    let r = lint(&cat, &lenient);
    assert!(r.count(axp_lint::Severity::Warning) > 0);
    assert_eq!(r.exit_code(), 0, "warnings alone pass by default");
    let strict =
        LintConfig::from_axp_toml("[lint]\nignore = [\"safety\", \"schema\", \"catalog\"]\nfail_on = \"warning\"\n")
            .unwrap();
    assert_eq!(lint(&cat, &strict).exit_code(), 1);
    let clean = Catalog::from_json(&serde_json::json!({"tools": []}), "x").unwrap();
    assert_eq!(lint(&clean, &LintConfig::default()).exit_code(), 0);
}

/// Runs Microsoft's SARIF Multitool (`validate` with the SARIF and GitHub ingestion rule kinds)
/// on the SARIF output: the closest offline stand-in for uploading it to GitHub code scanning.
#[test]
fn sarif_passes_the_sarif_multitool_github_rules() {
    use std::os::unix::fs::PermissionsExt;
    let pkg = dir().join("sarif-validator/node_modules/@microsoft/sarif-multitool-linux");
    let bin = pkg.join("Sarif.Multitool");
    assert!(bin.exists(), "{} is missing: install it with `npm ci --prefix lint/tests/sarif-validator`", bin.display());
    // npm may skip the package's postinstall (`chmod u+x`) when install scripts are not approved.
    let mut perm = std::fs::metadata(&bin).unwrap().permissions();
    if perm.mode() & 0o100 == 0 {
        perm.set_mode(perm.mode() | 0o755);
        std::fs::set_permissions(&bin, perm).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = |sarif: &Value| -> Vec<String> {
        let input = tmp.path().join("in.sarif");
        let output = tmp.path().join("out.sarif");
        let _ = std::fs::remove_file(&output);
        std::fs::write(&input, serde_json::to_string_pretty(sarif).unwrap()).unwrap();
        let st = std::process::Command::new(&bin)
            .args(["validate", "--rule-kind", "Gh;Sarif", "--output"])
            .arg(&output)
            .arg(&input)
            .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "Sarif.Multitool failed to run");
        let out: Value = serde_json::from_str(&std::fs::read_to_string(&output).unwrap()).unwrap();
        out["runs"][0]["results"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|r| r["level"] == "error" || r["level"] == "warning")
            .map(|r| format!("{} {}", r["ruleId"], r["message"]))
            .collect()
    };
    let sarif = report().to_sarif(URI, Some(&source()));
    let problems = run(&sarif);
    assert!(problems.is_empty(), "SARIF Multitool objects:\n{}", problems.join("\n"));
    // The validator can fail: a result without locations breaks GitHub's rules.
    let mut broken = sarif.clone();
    broken["runs"][0]["results"][0].as_object_mut().unwrap().remove("locations");
    assert!(run(&broken).iter().any(|p| p.starts_with("\"GH")), "validator accepted a broken log");
}
