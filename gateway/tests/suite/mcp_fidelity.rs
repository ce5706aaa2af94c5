//! What an MCP client sees exactly as the server sent it, and the protocol's rules at the
//! edges: a tool's `title`, `icons` and `_meta` pass through; a request the client cancels gets
//! no response; a session that was deleted answers HTTP 404.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;

/// A raw MCP client over HTTP: one session, JSON answers.
struct Raw {
    http: reqwest::Client,
    url: String,
    session: String,
}

impl Raw {
    async fn start(url: &str) -> Raw {
        Raw { http: reqwest::Client::new(), url: url.to_string(), session: mcp_initialize(url).await }
    }

    async fn post(&self, body: Value) -> reqwest::Response {
        self.http
            .post(&self.url)
            .header("mcp-session-id", &self.session)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn tool_title_icons_and_meta_pass_through() {
    let tmp = tempfile::tempdir().unwrap();
    let notes = repo().join("tests/fixtures/notes_server.py");
    let fleet = write_fleet(tmp.path(), json!({"notes": {"command": venv_bin("python"), "args": [notes]}}));
    let gw = gateway().fleet(&fleet).start();
    let c = Raw::start(&format!("{}/mcp", gw.base)).await;
    let listed: Value = c.post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await.json().await.unwrap();
    let shout = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "notes__shout")
        .unwrap_or_else(|| panic!("notes__shout missing: {listed}"))
        .clone();
    assert_eq!(shout["title"], "Shout", "{shout}");
    assert_eq!(shout["icons"][0]["src"], "https://example.com/shout.png", "{shout}");
    assert_eq!(shout["_meta"]["example.com/owner"], "notes", "{shout}");
}

#[tokio::test]
async fn a_cancelled_request_gets_no_response_and_its_work_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let c = Raw::start(&format!("{}/mcp", gw.base)).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "everything__trigger-long-running-operation", "arguments": {"duration": 30, "steps": 30}}});
    let started = std::time::Instant::now();
    let pending = c.post(call);
    let cancel = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let r = c
            .post(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7, "reason": "user"}}))
            .await;
        assert_eq!(r.status(), 202);
    };
    let (resp, ()) = tokio::join!(pending, cancel);
    assert_eq!(resp.status(), 202, "a cancelled request is answered with no JSON-RPC response");
    assert_eq!(resp.text().await.unwrap(), "");
    assert!(started.elapsed() < Duration::from_secs(20), "the call stopped when cancelled, not after 30 s");
    // The same id may be used again, and gets its answer.
    let again: Value = c
        .post(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "everything__get-sum", "arguments": {"a": 1, "b": 2}}}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["result"]["content"][0]["text"], "The sum of 1 and 2 is 3.", "{again}");
}

#[tokio::test]
async fn a_deleted_session_answers_404() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let c = Raw::start(&format!("{}/mcp", gw.base)).await;
    let ok = c.post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
    assert_eq!(ok.status(), 200);
    let deleted = c.http.delete(&c.url).header("mcp-session-id", &c.session).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    let gone = c.post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    assert_eq!(gone.status(), 404, "MCP: a request with a deleted session's id gets 404");
    let body: Value = gone.json().await.unwrap();
    assert_eq!((body["id"].as_i64(), body["error"]["code"].as_i64()), (Some(2), Some(-32006)), "{body}");
    let note = c.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    assert_eq!(note.status(), 404);
    // A new initialize starts over.
    let fresh = Raw::start(&c.url).await;
    assert_eq!(fresh.post(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})).await.status(), 200);
}

/// A 2026-07-28 request: the envelope in `_meta`, the revision's headers.
async fn post_2026(url: &str, method: &str, params: Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    });
    let mut req = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .json(&json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params}));
    if !headers.iter().any(|(k, _)| *k == "mcp-method") {
        req = req.header("mcp-method", method);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn both_revisions_are_served_on_one_endpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let url = format!("{}/mcp", gw.base);
    let (status, d) = post_2026(&url, "server/discover", json!({}), &[]).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["result"]["supportedVersions"][0], "2026-07-28", "{d}");
    assert!(d["result"]["supportedVersions"].as_array().unwrap().contains(&json!("2025-11-25")));
    assert_eq!(d["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "axp");
    // Results say their type, and lists carry cache hints.
    let (status, l) = post_2026(&url, "tools/list", json!({}), &[]).await;
    assert_eq!(status, 200, "{l}");
    assert_eq!(
        (l["result"]["resultType"].as_str(), l["result"]["cacheScope"].as_str()),
        (Some("complete"), Some("private"))
    );
    assert_eq!(l["result"]["ttlMs"], 0);
    // A stateless call runs without any session, and no session header comes back.
    let (status, c) = post_2026(
        &url,
        "tools/call",
        json!({"name": "everything__get-sum", "arguments": {"a": 2, "b": 3}}),
        &[("mcp-name", "everything__get-sum")],
    )
    .await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["result"]["content"][0]["text"], "The sum of 2 and 3 is 5.", "{c}");
    assert_eq!(c["result"]["resultType"], "complete");
    // Methods the revision removed answer 404; a bad envelope or disagreeing headers 400.
    let (status, e) = post_2026(&url, "initialize", json!({}), &[]).await;
    assert_eq!((status, e["error"]["code"].as_i64()), (404, Some(-32601)), "{e}");
    let (status, e) = post_2026(&url, "tools/list", json!({}), &[("mcp-method", "prompts/list")]).await;
    assert_eq!((status, e["error"]["code"].as_i64(), e["id"].as_i64()), (400, Some(-32020), Some(9)), "{e}");
    let (status, e) = post_2026(&url, "tools/call", json!({"name": "everything__get-sum", "arguments": {}}), &[]).await;
    assert_eq!((status, e["error"]["code"].as_i64()), (400, Some(-32020)), "a missing Mcp-Name is refused: {e}");
    let bare = reqwest::Client::new()
        .post(&url)
        .header("mcp-protocol-version", "2026-07-28")
        .json(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 400);
    let body: Value = bare.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32602, "{body}");
    // The 2025-11-25 lifecycle on the same endpoint is unchanged.
    let c = Raw::start(&url).await;
    let listed: Value = c.post(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await.json().await.unwrap();
    assert!(listed["result"].get("resultType").is_none(), "{listed}");
    assert!(!listed["result"]["tools"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn a_stateless_client_answers_the_servers_request_in_a_retry_of_its_call() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let url = format!("{}/mcp", gw.base);
    let call = |extra: Value| {
        let mut params =
            json!({"name": "everything__trigger-sampling-request", "arguments": {"prompt": "2+2?", "maxTokens": 5}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
        });
        let url = url.clone();
        async move {
            let r: Value = reqwest::Client::new()
                .post(&url)
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "everything__trigger-sampling-request")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            r["result"].clone()
        }
    };
    // Round one: the server's sampling request comes back as an input_required result.
    let first = call(json!({})).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let (key, request) = first["inputRequests"].as_object().unwrap().iter().next().unwrap();
    assert_eq!(request["method"], "sampling/createMessage", "{first}");
    assert!(request["params"]["messages"].to_string().contains("2+2?"), "{request}");
    let state = first["requestState"].as_str().unwrap().to_string();
    // A forged state is refused and does not consume the real one.
    let answer = json!({"role": "assistant", "content": {"type": "text", "text": "four"}, "model": "m", "stopReason": "endTurn"});
    let forged = reqwest::Client::new()
        .post(&url)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "everything__trigger-sampling-request")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "everything__trigger-sampling-request", "arguments": {}, "requestState": format!("{state}x"),
            "inputResponses": {key.clone(): answer.clone()},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}))
        .send()
        .await
        .unwrap();
    let forged: Value = forged.json().await.unwrap();
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    // Answers that are not result objects are refused, and the round is kept.
    let bad = call(json!({"requestState": state, "inputResponses": {key.clone(): 7}})).await;
    assert!(bad.is_null(), "a bad answer is an error, not a result: {bad}");
    // The retry with the answer finishes the same call.
    let done = call(json!({"requestState": state, "inputResponses": {key.clone(): answer}})).await;
    assert_eq!(done["resultType"], "complete", "{done}");
    assert!(done["content"][0]["text"].as_str().unwrap().contains("four"), "{done}");
}

/// Reads SSE `data:` frames from a response as JSON, one per event.
pub async fn next_frame(
    body: &mut (impl futures::Stream<Item = reqwest::Result<axum::body::Bytes>> + Unpin),
    buf: &mut String,
) -> Option<Value> {
    use futures::StreamExt;
    loop {
        if let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data:")) {
                return serde_json::from_str(data.trim()).ok();
            }
            continue;
        }
        let chunk = body.next().await?.ok()?;
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn a_stateless_client_listens_for_the_changes_it_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let python = need(repo().join(".venv-wrong/bin/python"));
    let server = repo().join("tests/fixtures/upgrading_server.py");
    let fleet = tmp.path().join("fleet.json");
    std::fs::write(&fleet, json!({"mcpServers": {"up": {"command": python, "args": [server]}}}).to_string()).unwrap();
    let gw = gateway().fleet(&fleet).start();
    let listen = |id: i64, filter: Value| super::mcp_revisions::listen(&gw.base, id, filter);
    let (mut tools, mut tools_buf) = (Box::pin(listen(42, json!({"toolsListChanged": true})).await), String::new());
    let (mut prompts, mut prompts_buf) =
        (Box::pin(listen(43, json!({"promptsListChanged": true})).await), String::new());
    let ack = next_frame(&mut tools, &mut tools_buf).await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged": true}));
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
    let ack = next_frame(&mut prompts, &mut prompts_buf).await.unwrap();
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 43);
    // The server changes its tools after its first call and says so: the tools stream hears it.
    let mut c = Rpc::open(&gw.url, json!({})).await;
    c.ok("tools/call", json!({"name": "up__status", "arguments": {}})).await;
    let change = tokio::time::timeout(Duration::from_secs(20), next_frame(&mut tools, &mut tools_buf))
        .await
        .expect("the tools stream heard the change")
        .unwrap();
    assert_eq!(change["method"], "notifications/tools/list_changed", "{change}");
    assert_eq!(change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
    // The prompts-only stream did not.
    let leaked = tokio::time::timeout(Duration::from_secs(2), next_frame(&mut prompts, &mut prompts_buf)).await;
    assert!(leaked.is_err(), "a stream filtered to prompts got {leaked:?}");
    // A filter naming nothing the gateway honours is answered at once, and a missing one refused.
    let mut none = Box::pin(listen(44, json!({"resourceSubscriptions": ["x://y"]})).await);
    let mut buf = String::new();
    let ack = next_frame(&mut none, &mut buf).await.unwrap();
    assert_eq!(ack["params"]["notifications"], json!({}));
    let done = next_frame(&mut none, &mut buf).await.unwrap();
    assert_eq!((done["id"].as_i64(), done["result"]["resultType"].as_str()), (Some(44), Some("complete")), "{done}");
}
