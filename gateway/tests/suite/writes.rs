//! File writes by jobs land in the audit log: a command job and the built-in
//! `files__run_command` tool each create, modify and delete workspace files; every change is a
//! `file.write` record with the job, path, size and SHA-256, written before the job's end is
//! visible; read-only tools leave no such record.

use std::process::Command;

use serde_json::json;

use super::*;

#[tokio::test]
async fn files_written_by_commands_and_the_builtin_tool_are_audited() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let gw = gateway().state(&state).start();
    std::fs::write(gw.workspace.join("old.txt"), "old").unwrap();
    std::fs::write(gw.workspace.join("doomed.txt"), "x").unwrap();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let j = s
        .ok("job.start", json!({"command": ["sh", "-c", "mkdir -p d && printf hello > d/new.txt && echo more >> old.txt && rm doomed.txt"]}))
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    s.events(&j, 0).await;
    let t = s
        .ok(
            "job.start",
            json!({"tool": "files__run_command", "arguments": {"argv": ["touch", "by-tool.txt"]}, "wait": true}),
        )
        .await;
    let tool_job = t["job_id"].as_str().unwrap().to_string();
    s.ok("tools/call", json!({"name": "files__read_file", "arguments": {"path": "old.txt"}})).await;
    // Audit records are durable before the job's end is visible, so no waiting is needed here.
    let out = Command::new(axp())
        .args(["audit", "tail", "--json", "--lines", "100", "--kind", "file.write", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    let recs: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let find = |job: &str, file: &str| {
        recs.iter()
            .find(|r| r["detail"]["job_id"] == job && r["detail"]["path"].as_str().unwrap().ends_with(file))
            .unwrap_or_else(|| panic!("no record of {file} by {job} in:\n{out}"))
            .clone()
    };
    let new = find(&j, "d/new.txt");
    assert_eq!((new["detail"]["change"].as_str(), new["detail"]["size"].as_u64()), (Some("created"), Some(5)));
    // sha256("hello")
    assert_eq!(new["detail"]["sha256"], "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
    assert_eq!(new["session"], s.session.clone().unwrap().0);
    assert_eq!(find(&j, "old.txt")["detail"]["change"], "modified");
    assert_eq!(find(&j, "doomed.txt")["detail"]["change"], "deleted");
    assert_eq!(find(&tool_job, "by-tool.txt")["detail"]["change"], "created");
    assert_eq!(recs.len(), 4, "nothing else was written, and the read-only call recorded nothing:\n{out}");
}
