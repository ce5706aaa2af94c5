//! Approvals and operator envelopes, end to end: a tool marked `approval = "required"` parks its
//! job in `awaiting_approval` with the request in its log; the agent cannot approve it with its
//! session token nor with a forged envelope; the parked job survives a killed gateway; `axp
//! approve` (a signed single-use envelope) runs it, a denial fails it with -32009, a replayed
//! envelope is refused even after a restart, `cap.revoke` revokes durably, and every decision is
//! in the audit log.

use std::path::Path;
use std::process::Command;

use base64::Engine;
use ring::signature::Ed25519KeyPair;
use serde_json::json;

use super::*;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// Signs an envelope exactly as docs/protocol.md describes it (independently of the gateway's
/// own code, so the documented wire shape is what is tested).
pub fn envelope(key: &Ed25519KeyPair, operator: &str, method: &str, params: Value, nonce: &str) -> Value {
    let params = params.to_string();
    let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let msg = format!("axp-envelope-v1\n{operator}\n{method}\n{ts}\n{nonce}\n{params}");
    let sig = b64().encode(key.sign(msg.as_bytes()).as_ref());
    json!({"operator": operator, "method": method, "params": params, "ts_ms": ts, "nonce": nonce, "sig": sig})
}

pub fn local_key(state: &Path) -> Ed25519KeyPair {
    let text = std::fs::read_to_string(state.join("operator.key")).unwrap();
    Ed25519KeyPair::from_pkcs8(&b64().decode(text.trim()).unwrap()).unwrap()
}

fn random_key() -> Ed25519KeyPair {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
    Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()
}

fn cli(args: &[&str], url: &str, state: &Path) -> (i32, String) {
    let out = Command::new(axp()).args(args).arg("--url").arg(url).arg("--state-dir").arg(state).output().unwrap();
    (
        out.status.code().unwrap(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

fn start(state: &Path, ws: &Path, config: &Path) -> Gw {
    gateway().state(state).workspace(ws).arg("--config").arg(config.to_string_lossy()).start()
}

#[tokio::test]
async fn a_parked_call_survives_a_restart_and_only_an_operator_decides_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (state, ws) = (tmp.path().join("state"), workspace_in(&tmp));
    let config = tmp.path().join("axp.toml");
    std::fs::write(&config, format!("{NO_SPAWN}[approval]\nrequired = [\"files__run_command\"]\n")).unwrap();
    let gw = start(&state, &ws, &config);
    let mut agent = Rpc::open(&gw.url, json!({"capabilities": ["tool(files__*)"]})).await;

    // Read-only tools run at once; the one that needs approval parks.
    agent.ok("tools/call", json!({"name": "files__list_files", "arguments": {"path": "."}})).await;
    let write = json!({"argv": ["sh", "-c", "echo approved > out.txt"]});
    let job = agent.ok("job.start", json!({"tool": "files__run_command", "arguments": write})).await;
    assert_eq!(job["state"], "awaiting_approval", "{job}");
    let job = job["job_id"].as_str().unwrap().to_string();
    let other = agent
        .ok("job.start", json!({"tool": "files__run_command", "arguments": {"argv": ["touch", "denied.txt"]}}))
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The request is the first event of the job's log; nothing ran.
    let first = agent.ok("job.attach", json!({"job_id": job, "from_seq": 0, "wait_ms": 300})).await;
    assert_eq!(first["done"], false);
    let ev = &first["events"][0];
    assert_eq!((ev["kind"].as_str(), ev["level"].as_str()), (Some("log"), Some("approval")), "{first}");
    assert_eq!(ev["data"]["tool"], "files__run_command");
    assert_eq!(ev["data"]["arguments"], write);
    assert!(!ws.join("out.txt").exists());

    // Attacks: the agent's own token cannot decide its job, nor can a forged or misdirected
    // envelope.
    let (code, e) = agent.err("job.approve", json!({"job_id": job})).await;
    assert_eq!(code, -32001, "{e}");
    let forged = envelope(&random_key(), "local", "job.approve", json!({"job_id": job}), "forged-nonce-000000001");
    let (code, e) = agent.err("job.approve", json!({"envelope": forged})).await;
    assert_eq!(code, -32001, "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("signature"), "{e}");
    let key = local_key(&state);
    let for_deny = envelope(&key, "local", "job.deny", json!({"job_id": job}), "misdirected-nonce-0001");
    assert_eq!(agent.err("job.approve", json!({"envelope": for_deny})).await.0, -32001, "signed for another method");
    let mut tampered = envelope(&key, "local", "job.approve", json!({"job_id": other}), "tampered-nonce-0000001");
    tampered["params"] = json!(json!({"job_id": job}).to_string());
    assert_eq!(agent.err("job.approve", json!({"envelope": tampered})).await.0, -32001, "params are signed");
    assert_eq!(agent.ok("job.status", json!({"job_id": job})).await["state"], "awaiting_approval");

    // The operator denies the other job with a signed envelope.
    let deny =
        envelope(&key, "local", "job.deny", json!({"job_id": other, "reason": "no touching"}), "deny-nonce-0000000001");
    let mut op = Rpc::new(&gw.url);
    op.ok("job.deny", json!({"envelope": deny.clone()})).await;
    let evs = agent.events(&other, 0).await;
    let exit = exit_of(&evs);
    assert_eq!((exit["state"].as_str(), exit["error"]["code"].as_i64()), (Some("failed"), Some(-32009)), "{exit}");
    assert!(exit["error"]["data"]["reason"].as_str().unwrap().contains("no touching"));
    assert!(!ws.join("denied.txt").exists());

    // Kill the gateway; the parked job survives.
    let mut gw = gw;
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    drop(gw);
    let gw = start(&state, &ws, &config);
    agent.url = gw.url.clone();
    assert_eq!(agent.ok("job.status", json!({"job_id": job})).await["state"], "awaiting_approval");
    // The deny envelope cannot be replayed, not even after the restart.
    let mut op = Rpc::new(&gw.url);
    let (code, e) = op.err("job.deny", json!({"envelope": deny})).await;
    assert_eq!(code, -32001, "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("replayed"), "{e}");
    // The operator lists and approves it with the CLI; the call runs and writes its file.
    let (code, out) = cli(&["pending"], &gw.url, &state);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&job) && !out.contains(&other), "{out}");
    let (code, out) = cli(&["approve", &job], &gw.url, &state);
    assert_eq!(code, 0, "{out}");
    let evs = agent.events(&job, 0).await;
    assert_eq!(exit_of(&evs)["state"], "exited", "{evs:?}");
    assert_eq!(std::fs::read_to_string(ws.join("out.txt")).unwrap(), "approved\n");
    let (code, out) = cli(&["approve", &job], &gw.url, &state);
    assert_ne!(code, 0, "a decided job cannot be approved twice: {out}");

    // Every decision is audited, with its operator, and the chain verifies.
    drop(gw);
    let out = audit_json(&state, &["--kind", "approval"]);
    assert!(out.contains("\"decision\":\"denied\"") && out.contains("\"decision\":\"approved\""), "{out}");
    assert!(out.contains("\"operator\":\"local\""), "{out}");
    let v = Command::new(axp()).args(["audit", "verify", "--state-dir"]).arg(&state).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}

#[tokio::test]
async fn an_mcp_tools_call_waits_for_approval_and_revocation_is_durable() {
    let tmp = tempfile::tempdir().unwrap();
    let (state, ws) = (tmp.path().join("state"), workspace_in(&tmp));
    let config = tmp.path().join("axp.toml");
    std::fs::write(&config, format!("{NO_SPAWN}[approval]\nrequired = [\"files__read_*\"]\n")).unwrap();
    std::fs::write(ws.join("a.txt"), "hello").unwrap();
    let gw = start(&state, &ws, &config);
    let mut agent = Rpc::open(&gw.url, json!({"capabilities": ["tool(files__*)"]})).await;
    // An MCP client's tools/call blocks until the operator decides.
    let url = gw.url.clone();
    let session = agent.session.clone();
    let call = tokio::spawn(async move {
        let mut c = Rpc::new(&url);
        c.session = session;
        c.raw("tools/call", json!({"name": "files__read_file", "arguments": {"path": "a.txt"}})).await
    });
    let mut pending = Vec::new();
    for _ in 0..50 {
        let (_, out) = cli(&["pending", "--json"], &gw.url, &state);
        let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        pending = v["jobs"].as_array().cloned().unwrap_or_default();
        if !pending.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let job = pending[0]["job_id"].as_str().unwrap().to_string();
    assert!(!call.is_finished());
    let (code, out) = cli(&["approve", &job], &gw.url, &state);
    assert_eq!(code, 0, "{out}");
    let r = call.await.unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "hello", "{r}");

    // cap.revoke: the agent attenuates a child; the operator revokes the child by id.
    let parent = agent.session.clone().unwrap().1;
    let child =
        agent.ok("cap.attenuate", json!({"cap_token": parent, "capabilities": ["tool(files__list_files)"]})).await;
    let child = child["cap_token"].as_str().unwrap().to_string();
    let mut sub = Rpc::new(&gw.url);
    sub.session = Some((String::new(), child.clone()));
    sub.ok("axp.index", json!({})).await;
    // The agent cannot revoke with its token; the operator can.
    assert_eq!(agent.err("cap.revoke", json!({"cap_token": child})).await.0, -32001);
    let (code, out) = cli(&["revoke", &child], &gw.url, &state);
    assert_eq!(code, 0, "{out}");
    assert_eq!(sub.err("axp.index", json!({})).await.0, -32001);
    agent.ok("axp.index", json!({})).await; // the parent still works
    drop(gw);
    let gw = start(&state, &ws, &config);
    let mut sub = Rpc::new(&gw.url);
    sub.session = Some((String::new(), child));
    assert_eq!(sub.err("axp.index", json!({})).await.0, -32001, "revocation survives a restart");
    drop(gw);
    let out = audit_json(&state, &["--kind", "token.revoke"]);
    assert!(out.contains("\"operator\":\"local\""));
}

#[tokio::test]
async fn an_mcp_server_marked_approval_required_waits_and_axp_deny_fails_the_call() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let fleet = write_fleet(tmp.path(), json!({}));
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&fleet).unwrap()).unwrap();
    doc["mcpServers"]["time"]["approval"] = json!("required");
    std::fs::write(&fleet, doc.to_string()).unwrap();
    let gw = gateway().state(&state).fleet(&fleet).start();
    let mut agent = Rpc::open(&gw.url, json!({"capabilities": ["tool(*)"]})).await;
    // everything's tools run at once; time's wait.
    agent.ok("tools/call", json!({"name": "everything__echo", "arguments": {"message": "hi"}})).await;
    let job = agent.ok("job.start", json!({"tool": "time__get_current_time", "arguments": {"timezone": "UTC"}})).await;
    assert_eq!(job["state"], "awaiting_approval");
    let job = job["job_id"].as_str().unwrap();
    let (code, out) = cli(&["deny", job, "--reason", "not during the freeze"], &gw.url, &state);
    assert_eq!(code, 0, "{out}");
    let exit = exit_of(&agent.events(job, 0).await);
    assert_eq!(exit["error"]["code"], -32009, "{exit}");
    assert!(exit["error"]["data"]["reason"].as_str().unwrap().contains("not during the freeze"), "{exit}");

    // Racing decisions: of an approve and a deny sent at once, exactly one wins, and only the
    // winner is in the audit log.
    let raced =
        agent.ok("job.start", json!({"tool": "time__get_current_time", "arguments": {"timezone": "UTC"}})).await;
    let raced = raced["job_id"].as_str().unwrap().to_string();
    let key = local_key(&state);
    let approve = envelope(&key, "local", "job.approve", json!({"job_id": raced}), "race-approve-nonce-0001");
    let deny = envelope(&key, "local", "job.deny", json!({"job_id": raced}), "race-deny-nonce-0000001");
    let (mut a, mut d) = (Rpc::new(&gw.url), Rpc::new(&gw.url));
    let (ra, rd) =
        tokio::join!(a.raw("job.approve", json!({"envelope": approve})), d.raw("job.deny", json!({"envelope": deny})));
    assert_eq!([&ra, &rd].iter().filter(|r| r.get("result").is_some()).count(), 1, "{ra}\n{rd}");
    agent.events(&raced, 0).await;
    drop(gw);
    let out = audit_json(&state, &["--kind", "approval"]);
    let records = out.lines().filter(|l| l.contains(&raced)).count();
    assert_eq!(records, 1, "only the winning decision is recorded");

    // A typo in the setting is an error naming the valid values, not a silently unguarded server.
    doc["mcpServers"]["time"]["approval"] = json!("requird");
    std::fs::write(&fleet, doc.to_string()).unwrap();
    let out = Command::new(axp())
        .args(["serve", "--listen", "127.0.0.1:0", "--mcp-config"])
        .arg(&fleet)
        .arg("--state-dir")
        .arg(tmp.path().join("state2"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("requird") && err.contains("required"), "{err}");
}

#[tokio::test]
async fn a_configured_operator_signs_with_its_own_key() {
    let tmp = tempfile::tempdir().unwrap();
    let (state, ws) = (tmp.path().join("state"), workspace_in(&tmp));
    let key_file = tmp.path().join("alice.key");
    let out = Command::new(axp()).args(["operator", "keygen", "--out"]).arg(&key_file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let public = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let again = Command::new(axp()).args(["operator", "keygen", "--out"]).arg(&key_file).output().unwrap();
    assert!(!again.status.success(), "keygen never overwrites a key");
    let (token, hash) = super::operators::new_operator_token();
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        format!(
            "{NO_SPAWN}[approval]\nrequired = [\"files__run_command\"]\n[[operators]]\nname = \"alice\"\ntoken_sha256 = \"{hash}\"\npublic_key = \"{public}\"\ncapabilities = [\"tool(files__*)\"]\n"
        ),
    )
    .unwrap();
    let gw = start(&state, &ws, &config);
    let mut op = Rpc::new(&gw.url);
    op.bearer = Some(token);
    let r = op.ok("session.open", json!({})).await;
    let mut agent = Rpc::new(&gw.url);
    agent.session = Some((r["session_id"].as_str().unwrap().into(), r["cap_token"].as_str().unwrap().into()));
    let job = agent.ok("job.start", json!({"tool": "files__run_command", "arguments": {"argv": ["touch", "a"]}})).await;
    let job = job["job_id"].as_str().unwrap();
    // Alice's key signing as someone else does not verify.
    let text = std::fs::read_to_string(&key_file).unwrap();
    let alice = Ed25519KeyPair::from_pkcs8(&b64().decode(text.trim()).unwrap()).unwrap();
    let spoof = envelope(&alice, "local", "job.approve", json!({"job_id": job}), "spoofed-nonce-00000001");
    assert_eq!(agent.err("job.approve", json!({"envelope": spoof})).await.0, -32001);
    let out = Command::new(axp())
        .args(["approve", job, "--key"])
        .arg(&key_file)
        .args(["--operator", "alice", "--url", &gw.url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(exit_of(&agent.events(job, 0).await)["state"], "exited");
    assert!(ws.join("a").exists());
    drop(gw);
    let out = audit_json(&state, &["--kind", "approval"]);
    assert!(out.contains("\"operator\":\"alice\""));
}

#[test]
fn approval_required_tools_are_refused_on_a_stdio_only_gateway() {
    // Over stdio the peer is the agent host and no operator could reach the gateway to decide,
    // so a parked call would wait forever: refuse to start instead.
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("axp.toml");
    std::fs::write(&config, format!("{NO_SPAWN}[approval]\nrequired = [\"files__run_command\"]\n")).unwrap();
    let out = Command::new(axp())
        .args(["serve", "--stdio", "--config"])
        .arg(&config)
        .arg("--state-dir")
        .arg(tmp.path().join("state"))
        .arg("--workspace")
        .arg(workspace_in(&tmp))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot be served over stdio"), "{err}");
}

/// A session profile without `proc.spawn`: approval rules are refused while sessions may start
/// processes, since a process could do whatever a tool that waits for approval does.
const NO_SPAWN: &str = "[session]\ncapabilities = [\"tool(*)\"]\n";

/// A workspace beside (never around) the test's state dir.
fn workspace_in(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    let w = tmp.path().join("ws");
    std::fs::create_dir_all(&w).unwrap();
    w
}
