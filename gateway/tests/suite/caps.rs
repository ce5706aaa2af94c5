//! Capability tokens and the audit log, end to end: attenuation hands a sub-agent strictly less,
//! closing a session revokes its tokens, and `axp audit verify` passes on the real log and fails
//! on a tampered copy.

use std::process::Command;

use serde_json::json;

use super::*;

#[tokio::test]
async fn an_attenuated_token_can_do_strictly_less() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut agent = Rpc::open(&gw.url, json!({"capabilities": ["tool(*)", "proc.spawn"]})).await;
    let parent = agent.session.clone().unwrap().1;
    let child =
        agent.ok("cap.attenuate", json!({"cap_token": parent, "capabilities": ["tool(time__*)"], "ttl_s": 60})).await;
    let child_token = child["cap_token"].as_str().unwrap().to_string();
    // The sub-agent holds only the child token (no session id).
    let mut sub = Rpc::new(&gw.url);
    sub.session = Some((String::new(), child_token.clone()));
    let ok = sub.ok("tools/call", json!({"name": "time__get_current_time", "arguments": {"timezone": "UTC"}})).await;
    assert_eq!(ok["structuredContent"]["timezone"], "UTC");
    let (code, e) = sub.err("tools/call", json!({"name": "everything__echo", "arguments": {"message": "x"}})).await;
    assert_eq!((code, e["data"]["missing"].as_str()), (-32002, Some("tool(everything__echo)")));
    let (code, _) = sub.err("job.start", json!({"command": ["true"]})).await;
    assert_eq!(code, -32002);
    assert_eq!(sub.ok("axp.index", json!({})).await["total"], 2);
    // It cannot widen its own token again.
    let (code, e) = sub.err("cap.attenuate", json!({"cap_token": child_token, "capabilities": ["tool(*)"]})).await;
    assert_eq!(code, -32002, "{e}");
    // A tampered child is rejected.
    let mut forged = child_token.clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let mut bad = Rpc::new(&gw.url);
    bad.session = Some((String::new(), forged));
    assert_eq!(bad.err("axp.index", json!({})).await.0, -32001);
    // Closing the session revokes the whole chain.
    agent.ok("session.close", json!({})).await;
    let (code, _) = sub.err("axp.index", json!({})).await;
    assert_eq!(code, -32001);
}

fn audit(args: &[&str], state: &std::path::Path) -> (i32, String) {
    let out = Command::new(axp()).arg("audit").args(args).arg("--state-dir").arg(state).output().unwrap();
    (
        out.status.code().unwrap(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[tokio::test]
async fn every_action_is_audited_and_tampering_is_detected() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let gw = gateway().state(&state).start();
    let mut s = Rpc::open(&gw.url, json!({"capabilities": ["tool(files__*)", "proc.spawn"]})).await;
    let job = s.ok("job.start", json!({"command": ["echo", "hi"]})).await;
    s.events(job["job_id"].as_str().unwrap(), 0).await;
    s.ok("tools/call", json!({"name": "files__list_files", "arguments": {"path": "."}})).await;
    let mut narrow = Rpc::open(&gw.url, json!({"capabilities": ["tool(files__read_file)"]})).await;
    narrow.err("job.start", json!({"command": ["true"]})).await;
    drop(gw);
    let (code, out) = audit(&["tail", "--json", "--lines", "100"], &state);
    assert_eq!(code, 0, "{out}");
    for kind in ["session.open", "command", "tool.call", "capability.denied"] {
        assert!(out.contains(&format!("\"kind\":\"{kind}\"")), "no {kind} record in:\n{out}");
    }
    assert!(out.contains("args_sha256"), "tool calls record a digest of their arguments");
    let (code, out) = audit(&["verify"], &state);
    assert_eq!(code, 0, "{out}");
    // Tamper with a copy: change one character of a middle record.
    let copy = tmp.path().join("copy");
    std::fs::create_dir_all(copy.join("audit")).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(state.join("audit")).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    for f in &files {
        std::fs::copy(f, copy.join("audit").join(f.file_name().unwrap())).unwrap();
    }
    let seg = files.iter().find(|f| f.extension().is_some_and(|e| e == "jsonl")).expect("an audit segment");
    let target = copy.join("audit").join(seg.file_name().unwrap());
    let text = std::fs::read_to_string(&target).unwrap();
    let tampered = text.replacen("\"command\"", "\"commanD\"", 1);
    assert_ne!(text, tampered);
    std::fs::write(&target, tampered).unwrap();
    let (code, out) = audit(&["verify"], &copy);
    assert_ne!(code, 0, "a tampered log must fail verification:\n{out}");
}
