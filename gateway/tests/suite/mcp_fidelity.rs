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
