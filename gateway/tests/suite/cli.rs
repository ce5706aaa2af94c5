//! The human CLI against a running gateway: `axp index`, `describe`, `call` (streams the job's
//! output), `jobs` and `attach`, sharing one remembered session per gateway URL.

use std::process::Command;

use super::*;

fn axp_cli(gw: &Gw, xdg: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(axp()).args(args).env("AXP_URL", &gw.url).env("XDG_STATE_HOME", xdg).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn index_describe_call_jobs_attach_from_the_command_line() {
    let gw = gateway().start();
    let xdg = tempfile::tempdir().unwrap();
    std::fs::write(gw.workspace.join("hello.txt"), "hello from the workspace\n").unwrap();
    let (code, out, _) = axp_cli(&gw, xdg.path(), &["index"]);
    assert_eq!(code, 0);
    assert!(out.contains("files__read_file") && out.lines().count() == 4, "{out}");
    let (code, out, _) = axp_cli(&gw, xdg.path(), &["index", "search", "for", "text"]);
    assert_eq!(code, 0);
    assert!(out.lines().next().unwrap().starts_with("1. files__search_files"), "{out}");
    let (code, out, _) = axp_cli(&gw, xdg.path(), &["describe", "files__read_file"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("files__read_file(args: { path: string })"), "{out}");
    let (code, out, err) =
        axp_cli(&gw, xdg.path(), &["call", "files__read_file", "--args", r#"{"path": "hello.txt"}"#]);
    assert_eq!(code, 0, "{err}");
    // Printed once: the tool streams its output and also returns it as the result's text.
    assert_eq!(out, "hello from the workspace\n", "{out}");
    let job = err.lines().find_map(|l| l.strip_prefix("job ")).unwrap().to_string();
    let (code, out, err) = axp_cli(
        &gw,
        xdg.path(),
        &["call", "files__run_command", "--args", r#"{"argv": ["sh", "-c", "echo out; exit 4"]}"#],
    );
    assert_eq!(code, 1, "a failing tool call fails the command: {out}{err}");
    let (code, out, _) = axp_cli(&gw, xdg.path(), &["jobs"]);
    assert_eq!(code, 0);
    assert!(out.contains(&job), "the same session sees its jobs: {out}");
    let (code, out, _) = axp_cli(&gw, xdg.path(), &["attach", &job, "--from", "0"]);
    assert_eq!(code, 0);
    assert!(out.contains("hello from the workspace"), "{out}");
    let (code, _, err) = axp_cli(&gw, xdg.path(), &["call", "files__read_file", "--args", "not json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--args must be a JSON object"), "{err}");
}
