//! Code-mode jobs: Python, JavaScript and sh programs in the kernel sandbox that call real MCP
//! tools (server-everything, mcp-server-time) through their generated SDK, a call the job's
//! token does not allow (denied, with the JSON-RPC code inside the job and in the audit log),
//! another job's socket (unreachable from inside, and useless with the wrong token from outside),
//! and bad requests.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use serde_json::{Value, json};

use super::*;

fn tool_calls(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["kind"] == "tool_call").collect()
}

fn stderr_of(events: &[Value]) -> String {
    events.iter().filter(|e| e["kind"] == "stderr").map(|e| e["data"].as_str().unwrap()).collect()
}

async fn run(s: &mut Rpc, language: &str, source: &str) -> (String, Vec<Value>) {
    let job = s.ok("job.start", json!({"code": {"language": language, "source": source}, "timeout_s": 60})).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    let events = s.events(&id, 0).await;
    (id, events)
}

#[tokio::test]
async fn python_and_javascript_chain_real_tools_inside_the_sandbox() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().state(&tmp.path().join("state")).fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut s = Rpc::open(&gw.url, json!({})).await;

    let py = r#"
import json
echo = tools.everything__echo(message="hello")
total = tools.everything__get_sum(a=2, b=3)
now = tools.time__get_current_time({"timezone": "UTC"})
if isinstance(now, str):
    now = json.loads(now)
print("COMBINED", json.dumps({"echo": echo, "sum": total, "tz": now["timezone"]}))
import socket
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2)
    print("NET open")
except OSError:
    print("NET closed")
"#;
    let (_, events) = run(&mut s, "python", py).await;
    let out = stdout_of(&events);
    assert_eq!(exit_of(&events)["code"], 0, "{out}\n{}", stderr_of(&events));
    let line = out.lines().find(|l| l.starts_with("COMBINED ")).unwrap_or_else(|| panic!("{out}"));
    let v: Value = serde_json::from_str(&line["COMBINED ".len()..]).unwrap();
    assert_eq!(v["echo"], "Echo: hello");
    assert_eq!(v["sum"], "The sum of 2 and 3 is 5.");
    assert_eq!(v["tz"], "UTC");
    assert!(out.contains("NET closed"), "the program still has no network: {out}");
    let calls = tool_calls(&events);
    let names: Vec<&str> = calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(names, ["everything__echo", "everything__get-sum", "time__get_current_time"]);
    assert!(calls.iter().all(|c| c["ok"] == true && c["args_sha256"].as_str().unwrap().len() == 64));

    // JavaScript: concurrent calls on one connection, combined.
    let js = r#"
const [echo, sum, now] = await Promise.all([
  tools.everything__echo({ message: "from js" }),
  tools["everything__get-sum"]({ a: 40, b: 2 }),
  tools.time__get_current_time({ timezone: "Europe/Paris" }),
]);
const tz = (typeof now === "string" ? JSON.parse(now) : now).timezone;
console.log("COMBINED " + JSON.stringify({ echo, sum, tz, n: tools.names().length }));
const image = await tools.everything__get_tiny_image({});
console.log("IMAGE " + image.content.some((c) => c.type === "image"));
try { await tools.everything__get_sum({ a: "not a number", b: 1 }); console.log("NO ERROR"); }
catch (e) { console.log("INVALID " + e.code + " " + (e instanceof ToolError)); }
"#;
    let (_, events) = run(&mut s, "javascript", js).await;
    let out = stdout_of(&events);
    assert_eq!(exit_of(&events)["code"], 0, "{out}\n{}", stderr_of(&events));
    let line = out.lines().find(|l| l.starts_with("COMBINED ")).unwrap_or_else(|| panic!("{out}"));
    let v: Value = serde_json::from_str(&line["COMBINED ".len()..]).unwrap();
    assert_eq!(v["echo"], "Echo: from js");
    assert_eq!(v["sum"], "The sum of 40 and 2 is 42.");
    assert_eq!(v["tz"], "Europe/Paris");
    assert!(v["n"].as_u64().unwrap() > 5);
    assert!(out.contains("IMAGE true"), "non-text content comes back whole: {out}");
    assert!(out.contains("INVALID -32602 true"), "schema violations are ToolErrors with their code: {out}");
    let calls = tool_calls(&events);
    assert_eq!(calls.len(), 5);
    assert_eq!(calls[4]["code"], -32602);
    let st = s.ok("job.list", json!({})).await;
    assert!(st["jobs"].as_array().unwrap().iter().all(|j| j["kind"] == "code"));

    // The nested calls are in the audit log, attributed to code-mode and their job.
    drop(gw);
    let text = audit_json(&tmp.path().join("state"), &["--lines", "200"]);
    assert_eq!(text.matches("\"via\":\"code-mode\"").count(), 7, "{text}");
}

#[tokio::test]
async fn sh_code_mode_calls_tools_with_axp_call() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let sh = r#"
a=$(everything__echo '{"message": "sh"}')
b=$(axp-call everything__get-sum '{"a": 1, "b": 1}')
echo "GOT [$a] [$b]"
axp-call no_such__tool '{}'
echo "status $?"
axp-call everything__get-sum 'not json'
echo "usage $?"
"#;
    let (_, events) = run(&mut s, "sh", sh).await;
    let out = stdout_of(&events);
    assert!(out.contains("GOT [Echo: sh] [The sum of 1 and 1 is 2.]"), "{out}\n{}", stderr_of(&events));
    assert!(out.contains("status 3"), "{out}");
    assert!(out.contains("usage 2"), "{out}");
    assert!(stderr_of(&events).contains("-32004"), "unknown tool code on stderr: {}", stderr_of(&events));
    let calls = tool_calls(&events);
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[2]["ok"], false);
    assert_eq!(calls[2]["code"], -32004);
}

#[tokio::test]
async fn a_call_the_token_does_not_allow_is_denied_inside_the_job() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let gw = gateway().state(&state).fleet(&write_fleet(tmp.path(), json!({}))).start();
    // The session may call everything; the token presented to job.start only time__*.
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let token = s.session.clone().unwrap().1;
    let narrow =
        s.ok("cap.attenuate", json!({"cap_token": token, "capabilities": ["tool(time__*)", "proc.spawn"]})).await;
    s.session.as_mut().unwrap().1 = narrow["cap_token"].as_str().unwrap().to_string();
    let py = r#"
print("NAMES", sorted(tools.names()))
print("TIME", type(tools.time__get_current_time(timezone="UTC")).__name__)
try:
    tools.everything__echo(message="x")
except AttributeError as e:
    print("NOATTR", e)
try:
    call("everything__echo", message="x")
except ToolError as e:
    print("DENIED", e.code, e.message)
"#;
    let (_, events) = run(&mut s, "python", py).await;
    let out = stdout_of(&events);
    assert_eq!(exit_of(&events)["code"], 0, "{out}\n{}", stderr_of(&events));
    assert!(out.contains("NAMES ['time__convert_time', 'time__get_current_time']"), "{out}");
    assert!(out.contains("TIME str") || out.contains("TIME dict"), "{out}");
    assert!(out.contains("NOATTR no tool `everything__echo`"), "{out}");
    assert!(out.contains("DENIED -32002"), "the job sees CapabilityDenied: {out}");
    let calls = tool_calls(&events);
    assert_eq!(calls.last().unwrap()["code"], -32002);

    // JavaScript sees the same code on its exception.
    let js = r#"
try { await call("everything__echo", { message: "x" }); console.log("NOT DENIED"); }
catch (e) { console.log("DENIED " + e.code + " " + (e instanceof ToolError)); }
"#;
    let (_, events) = run(&mut s, "javascript", js).await;
    assert!(stdout_of(&events).contains("DENIED -32002 true"), "{}", stdout_of(&events));

    drop(gw);
    let text = audit_json(&state, &["--lines", "200"]);
    assert!(
        text.lines()
            .any(|l| l.contains("capability.denied") && l.contains("everything__echo") && l.contains("code-mode")),
        "{text}"
    );
}

#[tokio::test]
async fn a_job_cannot_reach_another_jobs_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    // Job A waits (stdin) and tells where its socket is.
    let a = s
        .ok(
            "job.start",
            json!({"code": {"language": "python", "source": "import os,sys\nprint('SOCK', os.environ['AXP_SOCKET'], flush=True)\nsys.stdin.readline()\n"}, "timeout_s": 60}),
        )
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut sock = String::new();
    let mut seq = 0;
    for _ in 0..100 {
        let r = s.ok("job.attach", json!({"job_id": a, "from_seq": seq, "wait_ms": 2000})).await;
        seq = r["next_seq"].as_u64().unwrap();
        let out = stdout_of(r["events"].as_array().unwrap());
        if let Some(l) = out.lines().find(|l| l.starts_with("SOCK ")) {
            sock = l[5..].to_string();
            break;
        }
    }
    assert!(sock.ends_with("/s") && std::path::Path::new(&sock).exists(), "job A's socket: {sock:?}");

    // Job B tries A's socket from inside its sandbox: it does not exist there.
    let src = format!(
        r#"
import socket, json, os
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({sock:?})
    s.sendall(json.dumps({{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {{"name": "everything__echo", "arguments": {{"message": "x"}}, "cap_token": os.environ["AXP_TOKEN"]}}}}).encode() + b"\n")
    print("REACHED", s.recv(4096))
except OSError as e:
    print("BLOCKED", e.errno)
print("OWN", os.environ["AXP_SOCKET"] != {sock:?})
"#
    );
    let (_, events) = run(&mut s, "python", &src).await;
    let out = stdout_of(&events);
    assert!(
        out.contains("BLOCKED 2"),
        "ENOENT: another job's socket is not in this sandbox: {out}\n{}",
        stderr_of(&events)
    );
    assert!(out.contains("OWN True"), "{out}");

    // From the host, A's socket refuses any token but A's own (here: the session's root token).
    let token = s.session.clone().unwrap().1;
    let mut c = UnixStream::connect(&sock).unwrap();
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "everything__echo", "arguments": {"message": "x"}, "cap_token": token}});
    c.write_all(format!("{req}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(c.try_clone().unwrap()).read_line(&mut line).unwrap();
    let reply: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["error"]["code"], -32001, "{reply}");
    // Garbage gets a parse error, not a hang.
    c.write_all(b"{not json\n").unwrap();
    let mut line = String::new();
    BufReader::new(c).read_line(&mut line).unwrap();
    assert!(line.contains("-32700"), "{line}");

    // When A ends, its socket and directory are gone.
    s.ok("job.write", json!({"job_id": a, "data": "\n"})).await;
    let events = s.events(&a, 0).await;
    assert_eq!(exit_of(&events)["code"], 0);
    assert!(!std::path::Path::new(&sock).exists(), "the socket is removed with its job");
}

#[tokio::test]
async fn bad_code_requests_get_clear_errors() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let (code, e) = s.err("job.start", json!({"code": {"language": "ruby", "source": "puts 1"}})).await;
    assert_eq!(code, -32602);
    assert!(e["data"]["reason"].as_str().unwrap().contains("ruby"), "{e}");
    let (code, e) = s.err("job.start", json!({"code": {"language": "python"}})).await;
    assert_eq!(code, -32602, "{e}");
    let (code, _) = s.err("job.start", json!({"code": {"language": "python", "source": "x".repeat(1_100_000)}})).await;
    assert!(code == -32007 || code == -32602, "oversize program refused: {code}");
    let mut no_spawn = Rpc::open(&gw.url, json!({"capabilities": ["tool(*)"]})).await;
    let (code, _) = no_spawn.err("job.start", json!({"code": {"language": "python", "source": "print(1)"}})).await;
    assert_eq!(code, -32002, "code-mode needs proc.spawn");
    let (code, _) = s
        .err("job.start", json!({"code": {"language": "sh", "source": "true"}, "pty": {"rows": 24, "cols": 80}}))
        .await;
    assert_eq!(code, -32602);
    // A Python error is the job's own failure, with its traceback.
    let (_, events) = run(&mut s, "python", "raise ValueError('boom')").await;
    assert_eq!(exit_of(&events)["code"], 1);
    assert!(stderr_of(&events).contains("ValueError: boom"));
}
