//! MCP tasks (2025-11-25) on the gateway's jobs, end to end: a real client (the official
//! TypeScript SDK's, `tests/fixtures/mcp_tasks_client.mjs`) runs a slow tool of a real server
//! as a task, goes away, the gateway is killed and restarted on the same state directory, and
//! the client comes back for its tasks; and, with a raw HTTP client, the spec's error cases,
//! another session's tasks, cancellation, paging and the status notifications.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

const SLOW: &str = "everything__trigger-long-running-operation";

/// One run of the TypeScript SDK client: `new` or a session id, then the command and its
/// arguments. Returns `{"session", "result"}` or `{"session", "error"}`.
fn ts_client(url: &str, session: &str, args: &[&str]) -> Value {
    let out = Command::new("node")
        .arg(repo().join("tests/fixtures/mcp_tasks_client.mjs"))
        .arg(url)
        .arg(session)
        .args(args)
        .current_dir(repo().join("tests/fixtures"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!("the client printed no JSON: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr))
    })
}

/// The fleet: server-everything with a per-call limit above the slow call's length.
fn fleet(dir: &Path) -> PathBuf {
    write_fleet(dir, json!({"everything": {"command": "node", "args": [everything_js()], "timeout_s": 300}}))
}

/// Polls `tasks/get` through the SDK client until the task's status is no longer `working`.
fn wait_for(url: &str, session: &str, task: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = ts_client(url, session, &["get", task]);
        let status = &got["result"]["status"];
        if status != "working" {
            return got["result"].clone();
        }
        assert!(Instant::now() < deadline, "task {task} still working after 120 s: {got}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_task_survives_its_client_and_a_gateway_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let (state, ws) = (tmp.path().join("state"), tmp.path().join("ws"));
    std::fs::create_dir_all(&ws).unwrap();
    let fleet = fleet(tmp.path());
    let mut first = gateway().fleet(&fleet).state(&state).workspace(&ws).start();
    let url = format!("{}/mcp", first.base);

    // A new client: the gateway offers tasks, the tool may run as one, and the call is
    // answered at once with the task.
    let quick = ts_client(&url, "new", &["call", SLOW, r#"{"duration": 2, "steps": 2}"#, "60000"]);
    let session = quick["session"].as_str().unwrap_or_else(|| panic!("{quick}")).to_string();
    assert_eq!(
        quick["result"]["capability"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{quick}"
    );
    assert_eq!(quick["result"]["listed"]["execution"]["taskSupport"], "optional", "{quick}");
    let quick = quick["result"]["created"]["task"].clone();
    assert_eq!(quick["status"], "working", "{quick}");
    assert!(quick["ttl"].as_u64().unwrap() > 0 && quick["pollInterval"].as_u64().is_some(), "{quick}");
    let quick_id = quick["taskId"].as_str().unwrap().to_string();

    // A second, slow task from another run of the client on the same session; the client
    // leaves at once, without ending the session.
    let started = Instant::now();
    let slow = ts_client(&url, &session, &["call", SLOW, r#"{"duration": 120, "steps": 120}"#]);
    assert!(started.elapsed() < Duration::from_secs(20), "the task-augmented call waited for the tool");
    let slow_id = slow["result"]["created"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{slow}")).to_string();

    let done = wait_for(&url, &session, &quick_id);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(ts_client(&url, &session, &["get", &slow_id])["result"]["status"], "working");

    // The gateway dies without warning while the slow task runs, and comes back on its state.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    let second = gateway().fleet(&fleet).state(&state).workspace(&ws).start();
    let url = format!("{}/mcp", second.base);

    // The task that finished before the kill gives its result, as the plain call would have.
    let result = ts_client(&url, &session, &["result", &quick_id]);
    assert_eq!(
        result["result"]["content"][0]["text"], "Long running operation completed. Duration: 2 seconds, Steps: 2.",
        "{result}"
    );
    assert_eq!(result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], quick_id, "{result}");

    // The one the kill cut short has failed, and says why.
    let cut = ts_client(&url, &session, &["get", &slow_id]);
    assert_eq!(cut["result"]["status"], "failed", "{cut}");
    let why = cut["result"]["statusMessage"].as_str().unwrap_or_default();
    assert!(why.contains("gateway stopped") && why.contains("outcome is unknown"), "{cut}");
    let cut_result = ts_client(&url, &session, &["result", &slow_id]);
    assert_eq!(cut_result["error"]["code"], -32603, "{cut_result}");
    assert!(cut_result["error"]["message"].as_str().unwrap().contains("gateway stopped"), "{cut_result}");

    // Both are listed; a finished task cannot be cancelled.
    let listed = ts_client(&url, &session, &["list"]);
    let statuses: Vec<(String, String)> = listed["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|t| (t["taskId"].as_str().unwrap().to_string(), t["status"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(statuses, vec![(quick_id.clone(), "completed".into()), (slow_id, "failed".into())]);
    let cancel = ts_client(&url, &session, &["cancel", &quick_id]);
    assert_eq!(cancel["error"]["code"], -32602, "{cancel}");

    // Another client's session does not see them.
    let stranger = ts_client(&url, "new", &["get", &quick_id]);
    assert_eq!(stranger["error"]["code"], -32602, "{stranger}");
    assert_eq!(ts_client(&url, stranger["session"].as_str().unwrap(), &["list"])["result"]["tasks"], json!([]));

    // And the SDK's own task flow (create, poll, fetch) works end to end on the restarted gateway.
    let flow = ts_client(&url, &session, &["stream", "everything__get-sum", r#"{"a": 2, "b": 3}"#]);
    let steps: Vec<&str> = flow["result"].as_array().unwrap().iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(steps.first(), Some(&"taskCreated"), "{flow}");
    assert_eq!(steps.last(), Some(&"result"), "{flow}");
    assert_eq!(
        flow["result"].as_array().unwrap().last().unwrap()["result"]["content"][0]["text"],
        "The sum of 2 and 3 is 5."
    );
}

/// A raw MCP client of `/mcp` with its own session.
async fn mcp(url: &str) -> axp_client::Client {
    let mut c = axp_client::Client::new(url);
    let init = c
        .initialize(
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await
        .unwrap();
    assert_eq!(init["capabilities"]["tasks"]["requests"]["tools"]["call"], json!({}), "{init}");
    c
}

async fn call(c: &mut axp_client::Client, method: &str, params: Value) -> Value {
    c.request(method, params).await.unwrap().message
}

fn code(reply: &Value) -> i64 {
    reply["error"]["code"].as_i64().unwrap_or_else(|| panic!("expected an error: {reply}"))
}

async fn start_task(c: &mut axp_client::Client, tool: &str, arguments: Value) -> String {
    let r = call(c, "tools/call", json!({"name": tool, "arguments": arguments, "task": {}})).await;
    assert_eq!(r["result"]["task"]["status"], "working", "{r}");
    r["result"]["task"]["taskId"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn tasks_answer_the_spec_errors_and_stay_in_their_session() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&fleet(tmp.path())).start();
    let url = format!("{}/mcp", gw.base);
    let mut a = mcp(&url).await;
    let mut b = mcp(&url).await;

    // Unknown ids, malformed params, and tools that answer at once.
    assert_eq!(code(&call(&mut a, "tasks/get", json!({"taskId": "j_nope"})).await), -32602);
    assert_eq!(code(&call(&mut a, "tasks/result", json!({"taskId": "j_nope"})).await), -32602);
    assert_eq!(code(&call(&mut a, "tasks/cancel", json!({"taskId": "j_nope"})).await), -32602);
    assert_eq!(code(&call(&mut a, "tasks/get", json!({})).await), -32602);
    assert_eq!(code(&call(&mut a, "tasks/list", json!({"cursor": "j_nope"})).await), -32602);
    let bad = json!({"name": "everything__get-sum", "arguments": {"a": 1, "b": 2}, "task": 5});
    assert_eq!(code(&call(&mut a, "tools/call", bad).await), -32602);
    let index = json!({"name": "axp_index", "arguments": {}, "task": {}});
    assert_eq!(code(&call(&mut a, "tools/call", index).await), -32601, "axp_index has no job to make a task of");

    // A plain call's job is a job of the session, not a task.
    let plain = call(&mut a, "tools/call", json!({"name": "everything__get-sum", "arguments": {"a": 1, "b": 2}})).await;
    assert_eq!(plain["result"]["content"][0]["text"], "The sum of 1 and 2 is 3.", "{plain}");
    let jobs = call(&mut a, "job.list", json!({})).await;
    let plain_job = jobs["result"]["jobs"][0]["job_id"].as_str().unwrap_or_else(|| panic!("{jobs}")).to_string();
    assert_eq!(code(&call(&mut a, "tasks/get", json!({"taskId": plain_job})).await), -32602);

    // A running task: invisible to session B, which can neither read nor cancel it.
    let running = start_task(&mut a, SLOW, json!({"duration": 60, "steps": 60})).await;
    for m in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let r = call(&mut b, m, json!({"taskId": running})).await;
        assert_eq!(code(&r), -32602, "{m} of another session's task: {r}");
    }
    assert_eq!(call(&mut b, "tasks/list", json!({})).await["result"]["tasks"], json!([]));
    assert_eq!(call(&mut a, "tasks/get", json!({"taskId": running})).await["result"]["status"], "working");

    // Cancelled by its own session: `cancelled` in the answer and from then on; it has no
    // result; and it cannot be cancelled twice.
    let cancelled = call(&mut a, "tasks/cancel", json!({"taskId": running})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    assert_eq!(call(&mut a, "tasks/get", json!({"taskId": running})).await["result"]["status"], "cancelled");
    let result = call(&mut a, "tasks/result", json!({"taskId": running})).await;
    assert_eq!(code(&result), -32603, "{result}");
    assert_eq!(result["error"]["data"]["taskStatus"], "cancelled", "{result}");
    assert_eq!(code(&call(&mut a, "tasks/cancel", json!({"taskId": running})).await), -32602);

    // A completed task: tasks/result waits for it, and then it cannot be cancelled.
    let sum = start_task(&mut a, "everything__get-sum", json!({"a": 20, "b": 22})).await;
    let result = call(&mut a, "tasks/result", json!({"taskId": sum})).await;
    assert_eq!(result["result"]["content"][0]["text"], "The sum of 20 and 22 is 42.", "{result}");
    assert_eq!(result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], sum, "{result}");
    let refused = call(&mut a, "tasks/cancel", json!({"taskId": sum})).await;
    assert_eq!(code(&refused), -32602, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("completed"), "{refused}");
}

#[tokio::test]
async fn tasks_are_listed_a_page_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&fleet(tmp.path())).start();
    let mut a = mcp(&format!("{}/mcp", gw.base)).await;
    let mut made = Vec::new();
    for i in 0..53 {
        made.push(start_task(&mut a, "everything__get-sum", json!({"a": i, "b": 1})).await);
    }
    let mut seen = Vec::new();
    let mut cursor = Value::Null;
    let mut pages = 0;
    loop {
        let page = call(&mut a, "tasks/list", json!({"cursor": cursor})).await;
        let tasks = page["result"]["tasks"].as_array().unwrap_or_else(|| panic!("{page}"));
        seen.extend(tasks.iter().map(|t| t["taskId"].as_str().unwrap().to_string()));
        pages += 1;
        match page["result"].get("nextCursor") {
            Some(c) => cursor = c.clone(),
            None => break,
        }
    }
    assert_eq!(pages, 2);
    assert_eq!(seen, made, "every task once, oldest first");
}

/// Reads the session's standing stream (`GET /mcp`) until `done` holds for the messages read,
/// or 60 s pass.
async fn standing_stream(url: &str, session: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut resp = reqwest::Client::new()
        .get(url)
        .header("mcp-session-id", session)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut buf = String::new();
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(&seen) {
        let Ok(chunk) = tokio::time::timeout_at(deadline, resp.chunk()).await else { break };
        let Some(chunk) = chunk.unwrap() else { break };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data:")
                    && let Ok(v) = serde_json::from_str::<Value>(data.trim())
                {
                    seen.push(v);
                }
            }
        }
    }
    seen
}

#[tokio::test]
async fn a_task_reports_progress_and_its_end_on_the_sessions_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&fleet(tmp.path())).start();
    let url = format!("{}/mcp", gw.base);
    let mut a = mcp(&url).await;
    let session = a.session_id.clone().unwrap();
    let ended = |seen: &[Value]| seen.iter().any(|m| m["method"] == "notifications/tasks/status");
    let listening = tokio::spawn({
        let url = url.clone();
        async move { standing_stream(&url, &session, ended).await }
    });
    // The stream is open before the task starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let params =
        json!({"name": SLOW, "arguments": {"duration": 2, "steps": 2}, "task": {}, "_meta": {"progressToken": "p-1"}});
    let r = call(&mut a, "tools/call", params).await;
    let id = r["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{r}")).to_string();
    let seen = listening.await.unwrap();
    let progress: Vec<&Value> = seen.iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 2, "{seen:#?}");
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "p-1");
        assert_eq!(p["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], id);
    }
    let status = seen.iter().find(|m| m["method"] == "notifications/tasks/status").unwrap();
    assert_eq!(
        (&status["params"]["taskId"], &status["params"]["status"]),
        (&json!(id), &json!("completed")),
        "{status}"
    );
    assert!(status["params"]["lastUpdatedAt"].is_string() && status["params"].get("_meta").is_none(), "{status}");
}

/// A 2026-07-28 request (the revision's envelope and headers) to `/mcp`: (HTTP status, body).
async fn post_2026(url: &str, method: &str, mut params: Value, name: Option<&str>) -> (u16, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    });
    let mut req = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
    if let Some(n) = name {
        req = req.header("mcp-name", n);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

/// The 2026-07-28 revision replaced the 2025-11-25 tasks utility with an extension of another
/// shape, and says a legacy `task` parameter is ignored: a stateless client's task-augmented
/// call runs as a plain call, and the 2025 task methods are not there for it.
#[tokio::test]
async fn a_2026_client_gets_a_plain_call_and_no_2025_task_methods() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&fleet(tmp.path())).start();
    let url = format!("{}/mcp", gw.base);
    let params = json!({"name": "everything__get-sum", "arguments": {"a": 4, "b": 5}, "task": {}});
    let (status, r) = post_2026(&url, "tools/call", params, Some("everything__get-sum")).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "The sum of 4 and 5 is 9.", "{r}");
    for m in ["tasks/get", "tasks/list", "tasks/result", "tasks/cancel"] {
        let (status, r) = post_2026(&url, m, json!({"taskId": "j_x"}), None).await;
        assert_eq!((status, r["error"]["code"].as_i64()), (404, Some(-32601)), "{m}: {r}");
    }
}

/// server-everything's `simulate-research-query` runs only as a task
/// (`execution.taskSupport: "required"`): the gateway creates the task upstream, turns its
/// status messages into the job's progress, and takes the result with `tasks/result`. Its
/// ambiguous variant asks the client to clarify during the task; a session with no MCP client
/// to ask is refused, and the server carries on with its default.
#[tokio::test]
async fn a_tool_the_server_runs_only_as_a_task_is_called_through_its_task() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut c = Rpc::open(&gw.url, json!({})).await;
    let mut listed = false;
    for _ in 0..300 {
        let r = c.ok("axp.index", json!({"query": "simulate research query", "limit": 50})).await;
        if r.to_string().contains("everything__simulate-research-query") {
            listed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(listed, "server-everything never mounted");
    let job = c
        .ok("job.start", json!({"tool": "everything__simulate-research-query", "arguments": {"topic": "tide pools"}}))
        .await;
    let id = job["job_id"].as_str().unwrap().to_string();
    let events = c.events(&id, 0).await;
    let said: Vec<String> = events
        .iter()
        .filter(|e| e["kind"] == "progress")
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect();
    assert!(
        said.iter().any(|m| m.contains("Gathering sources")),
        "the task's status became progress: {said:?} in {events:?}"
    );
    let result = events.iter().find(|e| e["kind"] == "result").unwrap_or_else(|| panic!("no result: {events:?}"));
    assert!(result.to_string().contains("Research Report: tide pools"), "{result}");

    let r = c
        .ok(
            "tools/call",
            json!({"name": "everything__simulate-research-query", "arguments": {"topic": "python", "ambiguous": true}}),
        )
        .await;
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("elicitation unavailable"), "{text}");
}
