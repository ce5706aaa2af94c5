//! The AXP conformance runner (`axp-conformance`, `conformance/axp/`) run as a separate process
//! against a real `axp serve`: on a zero-config loopback gateway with a fleet every check passes;
//! on a gateway with operators it passes with an operator's token, skips what needs a session
//! without one (and what needs `proc.spawn` for an operator who may not grant it), and fails —
//! exit 1 — when the endpoint refuses what it was given.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use serde_json::{Value, json};

use super::operators::new_operator_token;
use super::*;

/// Every check the runner makes, in the order it prints them.
const CHECKS: [&str; 29] = [
    "auth.bad-bearer",
    "session.open",
    "auth.no-credential",
    "index.list",
    "index.paging",
    "tool.choose",
    "index.query",
    "describe.tool",
    "describe.unknown",
    "job.start.tool",
    "job.replay.tool",
    "job.start.command",
    "job.replay.command",
    "job.attach.limit",
    "job.attach.sse",
    "job.status",
    "job.list",
    "job.cancel",
    "job.unknown",
    "cap.attenuate",
    "cap.attenuate.denied",
    "cap.attenuate.widen",
    "auth.forged-token",
    "bad.parse",
    "bad.batch",
    "bad.method",
    "bad.params",
    "bad.tool-arguments",
    "session.close",
];

/// The newest modification time of the files under `dir`.
fn newest(dir: &Path) -> SystemTime {
    let mut t = SystemTime::UNIX_EPOCH;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let m = if p.is_dir() { newest(&p) } else { e.metadata().unwrap().modified().unwrap() };
        t = t.max(m);
    }
    t
}

/// The runner binary. It belongs to another package, and cargo tells a package's tests only
/// where its own binaries are (`CARGO_BIN_EXE_*`), so it is found beside `axp` in the same
/// target directory: built by `cargo build --workspace --all-targets` (as `scripts/test.sh`
/// does) or `cargo build -p axp-conformance`. A binary older than its sources would test old
/// code, so that is refused.
fn runner() -> PathBuf {
    let bin = Path::new(axp()).with_file_name("axp-conformance");
    assert!(bin.exists(), "{} is missing: build it first (cargo build -p axp-conformance)", bin.display());
    // Cargo relinks the binary whenever a source file is newer than its last build, so a binary
    // older than one of them has not been rebuilt since that change.
    let built = std::fs::metadata(&bin).unwrap().modified().unwrap();
    assert!(
        built >= newest(&repo().join("conformance/axp/src")),
        "{} is older than its sources: rebuild it (cargo build -p axp-conformance)",
        bin.display()
    );
    bin
}

/// Runs the runner; returns its exit code and stdout (stderr goes into a failure's message).
fn conformance(url: &str, args: &[&str]) -> (i32, String) {
    let out =
        Command::new(runner()).arg("--url").arg(url).args(args).env_remove("AXP_OPERATOR_TOKEN").output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.trim().is_empty(), "the runner wrote to stderr:\n{stderr}\nstdout:\n{stdout}");
    (out.status.code().unwrap(), stdout)
}

/// The verdict line of check `id`: (`PASS`|`FAIL`|`SKIP`, detail).
fn verdict<'a>(out: &'a str, id: &str) -> (&'a str, &'a str) {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(id))
        .unwrap_or_else(|| panic!("no verdict line for {id} in:\n{out}"));
    let mut parts = line.splitn(3, ' ');
    let status = parts.next().unwrap();
    parts.next();
    (status, parts.next().unwrap_or(""))
}

/// Asserts every line is a verdict, each check has exactly one, in order, and the summary counts
/// them.
fn well_formed(out: &str) {
    let lines: Vec<&str> = out.lines().collect();
    let (summary, verdicts) = lines.split_last().unwrap();
    let ids: Vec<&str> = verdicts
        .iter()
        .map(|l| {
            let mut w = l.split_whitespace();
            assert!(matches!(w.next(), Some("PASS" | "FAIL" | "SKIP")), "not a verdict line: {l:?}");
            w.next().unwrap()
        })
        .collect();
    assert_eq!(ids, CHECKS, "{out}");
    let count = |s: &str| verdicts.iter().filter(|l| l.starts_with(s)).count();
    assert_eq!(
        *summary,
        format!("SUMMARY {} passed, {} failed, {} skipped", count("PASS "), count("FAIL "), count("SKIP ")),
        "{out}"
    );
}

/// Waits until `/healthz` shows every provider up: the runner compares listings taken at
/// different moments, and a server that comes up between two of them would change the catalog
/// under it.
async fn all_up(base: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let health: Value = reqwest::get(format!("{base}/healthz")).await.unwrap().json().await.unwrap();
        let providers = health["providers"].as_array().unwrap();
        if !providers.is_empty() && providers.iter().all(|p| p["state"] == "up") {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the providers did not all come up: {health}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn every_check_passes_against_a_zero_config_gateway_with_a_fleet() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    all_up(&gw.base).await;
    let (code, out) = conformance(&gw.url, &[]);
    well_formed(&out);
    assert_eq!(code, 0, "{out}");
    for id in CHECKS.iter().filter(|id| **id != "auth.no-credential") {
        assert_eq!(verdict(&out, id).0, "PASS", "{id}:\n{out}");
    }
    // No operator token was given, so there is no credential to leave out.
    assert_eq!(verdict(&out, "auth.no-credential").0, "SKIP", "{out}");
    // It says which tool it called: with a fleet (and so no built-in provider), the clock.
    assert_eq!(
        verdict(&out, "tool.choose").1,
        r#"using time__get_current_time {"timezone":"UTC"} (known to be read-only and cheap)"#
    );
    // The token grants `tool(*)`, so a tool that does not exist is UnknownTool.
    assert!(verdict(&out, "describe.unknown").1.contains("-32004"), "{out}");
    assert!(verdict(&out, "job.cancel").1.contains("ended killed"), "{out}");
    assert!(out.ends_with("SUMMARY 28 passed, 0 failed, 1 skipped\n"), "{out}");

    // The same run as one JSON document.
    let (code, out) = conformance(&gw.url, &["--json"]);
    assert_eq!(code, 0, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((doc["passed"].as_u64(), doc["failed"].as_u64(), doc["skipped"].as_u64()), (Some(28), Some(0), Some(1)));
    assert_eq!(doc["tool"]["name"], "time__get_current_time");
    assert_eq!(doc["tool"]["arguments"], json!({"timezone": "UTC"}));
    assert_eq!(doc["url"], gw.url.as_str());
    let ids: Vec<&str> = doc["checks"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, CHECKS);

    // A tool named on the command line is the one called (and its schema the one contradicted).
    let (code, out) = conformance(&gw.url, &["--tool", "everything__echo", "--arguments", r#"{"message":"hi"}"#]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(verdict(&out, "tool.choose").1, r#"using everything__echo {"message":"hi"} (named by --tool)"#);
    assert!(verdict(&out, "bad.tool-arguments").1.contains("`message`"), "{out}");
}

#[test]
fn with_operators_the_runner_needs_a_token_and_respects_the_operators_ceiling() {
    let tmp = tempfile::tempdir().unwrap();
    let (admin, admin_hash) = new_operator_token();
    let (reader, reader_hash) = new_operator_token();
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[operators]]
name = "admin"
token_sha256 = "{admin_hash}"
capabilities = ["tool(*)", "proc.spawn"]

[[operators]]
name = "reader"
token_sha256 = "{reader_hash}"
capabilities = ["tool(files__list_files)", "tool(files__read_file)"]
"#
        ),
    )
    .unwrap();
    let gw = gateway().arg("--config").arg(config.to_string_lossy()).start();

    // An operator with every grant: everything passes, and the endpoint is seen to refuse a
    // session to a request without the operator's bearer.
    let (code, out) = conformance(&gw.url, &["--operator-token", &admin]);
    well_formed(&out);
    assert_eq!(code, 0, "{out}");
    for id in CHECKS {
        assert_eq!(verdict(&out, id).0, "PASS", "{id}:\n{out}");
    }
    assert!(verdict(&out, "auth.no-credential").1.contains("-32001"), "{out}");

    // No token: no session, so the checks that need one are skipped, saying why; what needs no
    // session (a forged bearer, bytes that are not JSON-RPC, an unknown method) still passes.
    let (code, out) = conformance(&gw.url, &[]);
    well_formed(&out);
    assert_eq!(code, 0, "{out}");
    let (status, detail) = verdict(&out, "session.open");
    assert_eq!(status, "SKIP", "{out}");
    assert!(detail.contains("--operator-token") && detail.contains("-32001"), "{out}");
    for id in ["auth.bad-bearer", "bad.parse", "bad.batch", "bad.method"] {
        assert_eq!(verdict(&out, id).0, "PASS", "{id}:\n{out}");
    }
    for id in ["index.list", "job.start.tool", "job.cancel", "cap.attenuate", "bad.params", "session.close"] {
        let (status, detail) = verdict(&out, id);
        assert_eq!(status, "SKIP", "{id}:\n{out}");
        assert!(detail.contains("--operator-token"), "{id}: {detail}");
    }

    // An operator who may not grant proc.spawn: the tool checks pass, the command checks are
    // skipped with the reason.
    let (code, out) = conformance(&gw.url, &["--operator-token", &reader]);
    well_formed(&out);
    assert_eq!(code, 0, "{out}");
    for id in ["job.start.command", "job.replay.command", "job.cancel"] {
        let (status, detail) = verdict(&out, id);
        assert_eq!(status, "SKIP", "{id}:\n{out}");
        assert!(detail.contains("lacks proc.spawn"), "{id}: {detail}");
    }
    for id in ["job.start.tool", "job.replay.tool", "job.attach.sse", "cap.attenuate", "cap.attenuate.denied"] {
        assert_eq!(verdict(&out, id).0, "PASS", "{id}:\n{out}");
    }
    assert!(verdict(&out, "cap.attenuate").1.contains("tool(files__read_file)"), "{out}");
    // Its grants name two tools and no pattern: a tool that does not exist is outside them, so
    // the endpoint refuses it as CapabilityDenied rather than say whether it exists.
    let (status, detail) = verdict(&out, "describe.unknown");
    assert_eq!(status, "PASS", "{out}");
    assert!(detail.contains("-32002"), "{detail}");

    // A token the endpoint does not know: the session cannot be opened, which is a failure of
    // the run (exit 1), not a skip.
    let (code, out) = conformance(&gw.url, &["--operator-token", "axpop_not-issued-by-this-gateway"]);
    well_formed(&out);
    assert_eq!(code, 1, "{out}");
    assert_eq!(verdict(&out, "session.open").0, "FAIL", "{out}");
}
