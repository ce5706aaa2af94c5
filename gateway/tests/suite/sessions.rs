//! Sessions: honest tiers, capability enforcement at the gateway, forged tokens, workspace bounds.

use serde_json::json;

use super::*;

#[tokio::test]
async fn tiers_are_reported_honestly_and_never_downgraded() {
    let gw = gateway().start();
    let mut c = Rpc::new(&gw.url);
    let s = c.ok("session.open", json!({"sandbox_tier": "kernel-lsm"})).await;
    assert_eq!(s["granted_tier"], "kernel-lsm");
    assert!(s["layers"]["landlock_abi"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(s["layers"]["seccomp"], true);
    // dev-none was not allowed by the operator: refused, not granted quietly.
    let (code, e) = c.err("session.open", json!({"sandbox_tier": "dev-none"})).await;
    assert_eq!(code, -32003, "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("dangerously-allow-dev-none"));
    let (code, _) = c.err("session.open", json!({"sandbox_tier": "container"})).await;
    assert_eq!(code, -32003);
    let (code, _) = c.err("session.open", json!({"sandbox_tier": "chroot"})).await;
    assert_eq!(code, -32602);
}

#[tokio::test]
async fn capabilities_are_enforced_at_the_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut narrow = Rpc::open(&gw.url, json!({"capabilities": ["tool(time__*)"]})).await;
    let idx = narrow.ok("axp.index", json!({})).await;
    assert_eq!(idx["total"], 2, "the index shows only what the token allows: {idx}");
    let (code, e) = narrow.err("tools/call", json!({"name": "everything__echo", "arguments": {"message": "x"}})).await;
    assert_eq!(code, -32002);
    assert_eq!(e["data"]["missing"], "tool(everything__echo)");
    let (code, e) = narrow.err("job.start", json!({"command": ["true"]})).await;
    assert_eq!(code, -32002);
    assert_eq!(e["data"]["missing"], "proc.spawn");
    narrow.ok("tools/call", json!({"name": "time__get_current_time", "arguments": {"timezone": "UTC"}})).await;
    // Asking for more than the operator's profile is refused.
    let mut c = Rpc::new(&gw.url);
    let (code, _) = c.err("session.open", json!({"capabilities": ["fs.write(/etc)"]})).await;
    assert_eq!(code, -32002);
    let (code, _) = c.err("session.open", json!({"capabilities": ["fs.write(relative)"]})).await;
    assert_eq!(code, -32602);
}

#[tokio::test]
async fn forged_and_foreign_tokens_and_unknown_sessions_are_rejected() {
    let gw = gateway().start();
    let a = Rpc::open(&gw.url, json!({})).await;
    let b = Rpc::open(&gw.url, json!({})).await;
    let mut forged = Rpc::new(&gw.url);
    forged.session = Some((a.session.clone().unwrap().0, "axp0.forged".into()));
    let (code, _) = forged.err("job.list", json!({})).await;
    assert_eq!(code, -32001);
    let mut cross = Rpc::new(&gw.url);
    cross.session = Some((a.session.clone().unwrap().0, b.session.clone().unwrap().1));
    let (code, _) = cross.err("job.list", json!({})).await;
    assert_eq!(code, -32001);
    let mut ghost = Rpc::new(&gw.url);
    ghost.session = Some(("s_nope".into(), String::new()));
    let (code, _) = ghost.err("job.list", json!({})).await;
    assert_eq!(code, -32006);
    // A session from session.open needs its token: the id alone is not enough.
    let mut id_only = Rpc::new(&gw.url);
    id_only.session = Some((a.session.clone().unwrap().0, String::new()));
    let (code, _) = id_only.err("job.list", json!({})).await;
    assert_eq!(code, -32001);
    // Jobs of one session are invisible to another.
    let mut a = a;
    let job = a.ok("job.start", json!({"command": ["true"]})).await;
    let mut b = b;
    let (code, _) = b.err("job.status", json!({"job_id": job["job_id"]})).await;
    assert_eq!(code, -32005);
    // A closed session is gone, and its token was revoked with it.
    a.ok("session.close", json!({})).await;
    let (code, e) = a.err("job.list", json!({})).await;
    assert_eq!(code, -32001, "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("revoked"), "{e}");
    let mut id_only = Rpc::new(&gw.url);
    id_only.session = Some((a.session.clone().unwrap().0, String::new()));
    assert_eq!(id_only.err("job.list", json!({})).await.0, -32006);
}

#[tokio::test]
async fn commands_cannot_leave_the_workspace() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let (code, _) = s.err("job.start", json!({"command": ["ls"], "cwd": "/etc"})).await;
    assert_eq!(code, -32002);
    let (code, _) = s.err("job.start", json!({"command": ["ls"], "cwd": "../.."})).await;
    assert_eq!(code, -32002);
    let mut c = Rpc::new(&gw.url);
    let (code, _) = c.err("session.open", json!({"workspace": "/"})).await;
    assert_eq!(code, -32002);
    // Inside the sandbox: the workspace is writable, the host is not visible.
    let job = s
        .ok("job.start", json!({"command": ["sh", "-c", "echo data > made.txt && cat made.txt && cat /etc/shadow; ls /root; echo end"]}))
        .await;
    let ev = s.events(job["job_id"].as_str().unwrap(), 0).await;
    assert_eq!(stdout_of(&ev), "data\nend\n", "{ev:?}");
    assert_eq!(std::fs::read_to_string(gw.workspace.join("made.txt")).unwrap(), "data\n");
}
