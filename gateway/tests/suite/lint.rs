//! `axp lint` as CI runs it: a real poisoned server flagged in SARIF with a failing exit code, a
//! clean tools file passing, and rule explanations.

use std::process::Command;

use serde_json::{Value, json};

use super::*;

fn lint(args: &[&str], cwd: &std::path::Path) -> (i32, String, String) {
    let out = Command::new(axp()).arg("lint").args(args).current_dir(cwd).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_poisoned_fleet_fails_ci_with_sarif_and_a_clean_file_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet.json");
    let wrong = need(repo().join(".venv-wrong/bin/mcp-server-everything-wrong"));
    std::fs::write(
        &fleet,
        serde_json::to_vec(&json!({"mcpServers": {
            "wrong": {"command": wrong},
            "time": {"command": venv_bin("mcp-server-time")}
        }}))
        .unwrap(),
    )
    .unwrap();
    let (code, out, err) = lint(&["--mcp-config", fleet.to_str().unwrap(), "--format", "sarif"], tmp.path());
    assert_eq!(code, 1, "{err}");
    let sarif: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    let ids: Vec<&str> = results.iter().map(|r| r["ruleId"].as_str().unwrap()).collect();
    for expected in ["AXP027", "AXP035", "AXP034"] {
        assert!(ids.contains(&expected), "{expected} missing from {ids:?}");
    }
    assert!(results.iter().all(|r| !r["partialFingerprints"].as_object().unwrap().is_empty()));
    // The well-made server has no error-level findings.
    assert!(
        !results.iter().any(|r| r["level"] == "error" && r.to_string().contains("\"time\"")),
        "mcp-server-time should raise no errors"
    );

    let clean = tmp.path().join("tools.json");
    std::fs::write(&clean, serde_json::to_vec(&json!({"tools": [{
        "name": "get_forecast",
        "description": "Get the weather forecast for a city for the next 1-7 days. Read-only; returns temperatures in Celsius.",
        "inputSchema": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "How many days to forecast"}
        }, "required": ["city"], "additionalProperties": false},
        "annotations": {"readOnlyHint": true}
    }]})).unwrap())
    .unwrap();
    let (code, out, err) = lint(&[clean.to_str().unwrap()], tmp.path());
    assert_eq!(code, 0, "{out}{err}");

    let (code, out, _) = lint(&["--explain", "AXP027"], tmp.path());
    assert_eq!(code, 0);
    assert!(out.starts_with("AXP027") && out.contains("bidirectional"), "{out}");
    let (code, _, err) = lint(&["--explain", "AXP999"], tmp.path());
    assert_eq!(code, 2, "{err}");
}

/// `axp lint --url` lints what a running gateway publishes (here, the built-in tools).
#[test]
fn lint_a_running_gateway_by_url() {
    let gw = gateway().start();
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(axp())
        .args(["lint", "--url", &gw.url, "--format", "json"])
        .env("XDG_STATE_HOME", tmp.path())
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    assert!(code == 0 || code == 1, "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.to_string().contains("files"), "the gateway's tools were linted: {report}");
}
