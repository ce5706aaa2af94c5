//! Clients of the legacy 2024-11-05 HTTP+SSE transport that `axp serve` offers beside `/mcp`
//! (`GET /sse`, `POST /messages?session_id=…`): the official Python SDK's `sse_client` against
//! server-everything through the gateway (initialize, list, call, progress), one connection
//! being one session that ends with its stream, and the attacks `/mcp` already refuses, made on
//! both routes: foreign Origin, rebound Host, missing or forged operator credentials, unknown,
//! missing or another operator's connection id, malformed and oversize bodies; plus the bounds
//! on what one client holds (open connections, requests in flight, unread messages).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// The gateway's caps (`transport::legacy_sse::{MAX_CONNECTIONS, MAX_IN_FLIGHT, OUTBOX}`).
const MAX_CONNECTIONS: usize = 64;
const MAX_IN_FLIGHT: usize = 64;
const OUTBOX: usize = 256;

/// One `GET /sse` stream read with reqwest: its endpoint, and its events as they come.
struct Stream {
    resp: reqwest::Response,
    buf: String,
    /// The POST URL the `endpoint` event named, resolved against the gateway's base.
    endpoint: String,
}

impl Stream {
    async fn open(base: &str, bearer: Option<&str>) -> Stream {
        let resp = get_sse(base, &[], bearer).await;
        assert_eq!(resp.status(), 200, "GET /sse");
        let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        let mut s = Stream { resp, buf: String::new(), endpoint: String::new() };
        let (event, data) = s.next(Duration::from_secs(10)).await.expect("no endpoint event");
        assert_eq!(event, "endpoint");
        assert!(data.starts_with("/messages?session_id="), "{data}");
        s.endpoint = format!("{base}{data}");
        s
    }

    /// The connection id the endpoint names.
    fn id(&self) -> &str {
        self.endpoint.split("session_id=").nth(1).unwrap()
    }

    /// The next event `(event, data)` within `within`; `None` on timeout or the stream's end.
    async fn next(&mut self, within: Duration) -> Option<(String, String)> {
        let deadline = Instant::now() + within;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut event = "message".to_string();
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(e) = line.strip_prefix("event:") {
                        event = e.trim().to_string();
                    } else if let Some(d) = line.strip_prefix("data:") {
                        data.push(d.strip_prefix(' ').unwrap_or(d).to_string());
                    }
                }
                // Keep-alive comments carry no data.
                if !data.is_empty() {
                    return Some((event, data.join("\n")));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.resp.chunk()).await {
                Ok(Ok(Some(c))) => self.buf.push_str(&String::from_utf8_lossy(&c)),
                _ => return None,
            }
        }
    }

    /// The next JSON-RPC message on the stream (every one must be an `event: message`).
    async fn message(&mut self, within: Duration) -> Option<Value> {
        let (event, data) = self.next(within).await?;
        assert_eq!(event, "message", "{data}");
        Some(serde_json::from_str(&data).unwrap_or_else(|_| panic!("not JSON: {data}")))
    }

    /// Messages until the response with `id` (which is last), within 60 s.
    async fn until_response(&mut self, id: i64) -> Vec<Value> {
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = self.message(left).await.unwrap_or_else(|| panic!("no response {id}; saw {seen:?}"));
            let done = m["id"] == id && m.get("method").is_none();
            seen.push(m);
            if done {
                return seen;
            }
        }
    }

    /// Asserts that nothing but keep-alives arrives for `within`.
    async fn silent(&mut self, within: Duration) {
        if let Some(e) = self.next(within).await {
            panic!("the stream should have stayed silent, got {e:?}");
        }
    }
}

async fn get_sse(base: &str, headers: &[(&str, &str)], bearer: Option<&str>) -> reqwest::Response {
    let mut r = reqwest::Client::new().get(format!("{base}/sse")).header("accept", "text/event-stream");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    if let Some(b) = bearer {
        r = r.bearer_auth(b);
    }
    r.send().await.unwrap()
}

/// POSTs `body` to `url`; the status and the body (JSON when there is one).
async fn post_raw(url: &str, body: impl Into<reqwest::Body>, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut r = reqwest::Client::new().post(url).header("content-type", "application/json").body(body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn post(url: &str, msg: Value, headers: &[(&str, &str)]) -> (u16, Value) {
    post_raw(url, msg.to_string(), headers).await
}

fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize(id: i64) -> Value {
    request(
        id,
        "initialize",
        json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "0"}}),
    )
}

fn python_sse_client(url: &str, bearer: Option<&str>) -> Value {
    let mut cmd = Command::new(venv_bin("python"));
    cmd.arg(repo().join("tests/fixtures/mcp_sse_client.py")).args([
        url,
        "everything__get-sum",
        "everything__trigger-long-running-operation",
    ]);
    cmd.args(bearer);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "the Python SSE client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[tokio::test]
async fn python_sdk_over_legacy_sse() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let url = format!("{}/sse", gw.base);
    let r = tokio::task::spawn_blocking(move || python_sse_client(&url, None)).await.unwrap();
    assert_eq!(r["server"], "axp", "{r}");
    // A 32-byte random id, base64url: nothing a client could guess.
    assert_eq!(r["connection"].as_str().unwrap().len(), 43, "{r}");
    let tools: Vec<&str> = r["tools"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(tools.contains(&"everything__get-sum") && tools.contains(&"time__get_current_time"), "{tools:?}");
    assert_eq!(r["sum"]["content"][0]["text"], "The sum of 20 and 22 is 42.", "{r}");
    assert!(r["slow"]["content"][0]["text"].as_str().unwrap().contains("Long running operation completed"), "{r}");
    // Progress reached the client on the stream, before the answer it led to.
    let progress = r["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "{r}");
    assert_eq!(progress.last().unwrap()["total"], 3.0, "{r}");
}

#[tokio::test]
async fn one_connection_is_one_session_that_ends_with_its_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut a = Stream::open(&gw.base, None).await;
    let mut b = Stream::open(&gw.base, None).await;
    assert_ne!(a.id(), b.id());
    assert_eq!(post(&a.endpoint, initialize(1), &[]).await.0, 202);
    let init = a.until_response(1).await;
    assert_eq!(init.last().unwrap()["result"]["serverInfo"]["name"], "axp", "{init:?}");
    assert_eq!(init.last().unwrap()["result"]["protocolVersion"], "2024-11-05");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&a.endpoint, initialized, &[]).await.0, 202);
    assert_eq!(post(&a.endpoint, request(2, "tools/list", json!({})), &[]).await.0, 202);
    let list = a.until_response(2).await;
    assert!(list.last().unwrap()["result"]["tools"].as_array().unwrap().len() > 10, "{list:?}");
    let call = json!({"name": "everything__trigger-long-running-operation", "arguments": {"duration": 1, "steps": 2},
        "_meta": {"progressToken": "p-1"}});
    assert_eq!(post(&a.endpoint, request(3, "tools/call", call), &[]).await.0, 202);
    let got = a.until_response(3).await;
    let progress: Vec<&Value> = got.iter().filter(|m| m["method"] == "notifications/progress").collect();
    assert!(!progress.is_empty() && progress.iter().all(|p| p["params"]["progressToken"] == "p-1"), "{got:?}");
    let done = &got.last().unwrap()["result"]["content"][0]["text"];
    assert!(done.as_str().unwrap().contains("Long running operation completed"), "{got:?}");
    // Nothing of `a`'s traffic reached `b`.
    b.silent(Duration::from_millis(300)).await;

    // Every request of the connection spoke for the one session its initialize opened.
    let opened: Vec<Value> = audit_json(&gw.state, &["--kind", "session.open"])
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(opened.len(), 1, "{opened:?}");
    let session = opened[0]["session"].as_str().unwrap_or_else(|| panic!("{opened:?}")).to_string();
    let mut mcp = axp_client::Client::new(format!("{}/mcp", gw.base));
    mcp.session_id = Some(session.clone());
    assert!(mcp.request("ping", json!({})).await.unwrap().message.get("result").is_some());

    // The stream's end is the session's end: the connection id and the session are gone.
    let endpoint = a.endpoint.clone();
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = post(&endpoint, request(4, "ping", json!({})), &[]).await;
        if status == 404 {
            assert_eq!(body["error"]["code"], -32006, "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "the connection outlived its stream ({status})");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = mcp.request("tools/list", json!({})).await;
        if reply.as_ref().map(|r| r.message["error"]["code"] == -32006).unwrap_or(true) {
            break;
        }
        assert!(Instant::now() < deadline, "the session outlived its stream: {:?}", reply.map(|r| r.message));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // `b` lives on.
    assert_eq!(post(&b.endpoint, request(5, "ping", json!({})), &[]).await.0, 202);
    assert_eq!(b.until_response(5).await.last().unwrap()["result"], json!({}));
}

#[tokio::test]
async fn legacy_sse_refuses_what_mcp_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("axp.toml");
    std::fs::write(&config, "[serve]\nmax_body_bytes = 65536\n").unwrap();
    let gw = gateway().arg("--config").arg(config.to_string_lossy()).start();
    let port = gw.base.rsplit(':').next().unwrap().to_string();
    let evil_host = format!("evil.example:{port}");

    // DNS rebinding, on the GET: a page of another origin, or under a rebound name.
    let r = get_sse(&gw.base, &[("origin", "http://evil.example")], None).await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], -32001);
    assert_eq!(get_sse(&gw.base, &[("host", &evil_host)], None).await.status(), 403);
    // An `Authorization` header the gateway does not know is refused, not ignored.
    assert_eq!(get_sse(&gw.base, &[], Some("forged")).await.status(), 401);

    let mut a = Stream::open(&gw.base, None).await;
    // The same on the POST, with the live connection's own id: nothing runs.
    let (status, body) = post(&a.endpoint, request(66, "ping", json!({})), &[("origin", "http://evil.example")]).await;
    assert_eq!((status, body["error"]["code"].clone()), (403, json!(-32001)), "{body}");
    assert_eq!(post(&a.endpoint, request(67, "ping", json!({})), &[("host", &evil_host)]).await.0, 403);
    assert_eq!(post(&a.endpoint, request(68, "ping", json!({})), &[("authorization", "Bearer forged")]).await.0, 401);
    // An id that names no connection, or none at all, reaches none.
    let guessed = format!("{}/messages?session_id={}", gw.base, "A".repeat(43));
    let (status, body) = post(&guessed, request(69, "ping", json!({})), &[]).await;
    assert_eq!((status, body["error"]["code"].clone()), (404, json!(-32006)), "{body}");
    let (status, body) = post(&format!("{}/messages", gw.base), request(70, "ping", json!({})), &[]).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!(-32600)), "{body}");
    let mangled = format!("{}x", a.endpoint);
    assert_eq!(post(&mangled, request(71, "ping", json!({})), &[]).await.0, 404);
    // A body that is not JSON is refused on the POST with a JSON-RPC parse error: it belongs
    // to that HTTP request, and on the stream it could name no request the client knows.
    let (status, body) = post_raw(&a.endpoint, "{\"jsonrpc\": \"2.0\", \"id\": 72, \"method\"", &[]).await;
    assert_eq!((status, body["error"]["code"].clone()), (400, json!(-32700)), "{body}");
    // A body beyond the limit is refused before it is parsed or run.
    let big = request(73, "ping", json!({"pad": "x".repeat(70_000)}));
    let (status, body) = post(&a.endpoint, big, &[]).await;
    assert_eq!((status, body["error"]["code"].clone()), (413, json!(-32007)), "{body}");
    assert_eq!(body["error"]["data"]["limit"], 65536, "{body}");
    // None of it reached the stream; a well-formed POST does, and is the first thing there.
    assert_eq!(post(&a.endpoint, request(74, "ping", json!({})), &[]).await.0, 202);
    let got = a.until_response(74).await;
    assert_eq!(got.len(), 1, "{got:?}");
    a.silent(Duration::from_millis(500)).await;
}

#[tokio::test]
async fn a_connection_belongs_to_the_operator_that_opened_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (ops, ops_hash) = super::operators::new_operator_token();
    let (other, other_hash) = super::operators::new_operator_token();
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        format!(
            "[[operators]]\nname = \"ops\"\ntoken_sha256 = \"{ops_hash}\"\ncapabilities = [\"tool(*)\"]\n\n\
             [[operators]]\nname = \"other\"\ntoken_sha256 = \"{other_hash}\"\ncapabilities = [\"tool(*)\"]\n"
        ),
    )
    .unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).arg("--config").arg(config.to_string_lossy()).start();
    // With operators configured, a stream needs one.
    let r = get_sse(&gw.base, &[], None).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], -32001);
    assert_eq!(get_sse(&gw.base, &[], Some("forged")).await.status(), 401);

    let mut a = Stream::open(&gw.base, Some(&ops)).await;
    let as_other = format!("Bearer {other}");
    let as_ops = format!("Bearer {ops}");
    // Another operator holding the id, or a request with no credential, reaches nothing.
    let (status, body) = post(&a.endpoint, initialize(1), &[("authorization", &as_other)]).await;
    assert_eq!((status, body["error"]["code"].clone()), (404, json!(-32006)), "{body}");
    assert_eq!(post(&a.endpoint, initialize(2), &[]).await.0, 404);
    // Its own operator's messages run, as that operator.
    assert_eq!(post(&a.endpoint, initialize(3), &[("authorization", &as_ops)]).await.0, 202);
    let got = a.until_response(3).await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["result"]["serverInfo"]["name"], "axp", "{got:?}");
    let opened = audit_json(&gw.state, &["--kind", "session.open"]);
    assert!(opened.contains("\"operator\":\"ops\"") && !opened.contains("\"operator\":\"other\""), "{opened}");

    // The Python SDK with the operator's bearer header.
    let url = format!("{}/sse", gw.base);
    let r = tokio::task::spawn_blocking(move || python_sse_client(&url, Some(&ops))).await.unwrap();
    assert_eq!(r["sum"]["content"][0]["text"], "The sum of 20 and 22 is 42.", "{r}");
}

#[tokio::test]
async fn open_connections_are_capped_and_freed_when_they_end() {
    let gw = gateway().start();
    let mut open = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        open.push(Stream::open(&gw.base, None).await);
    }
    let r = get_sse(&gw.base, &[], None).await;
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!((body["error"]["code"].clone(), body["error"]["data"]["limit"].clone()), (json!(-32007), json!(64)));
    // Every one of them still works.
    let last = open.last_mut().unwrap();
    assert_eq!(post(&last.endpoint, request(1, "ping", json!({})), &[]).await.0, 202);
    last.until_response(1).await;
    // A client that hangs up frees its place.
    drop(open.remove(0));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = get_sse(&gw.base, &[], None).await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        assert!(Instant::now() < deadline, "a closed connection kept its place");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn requests_in_flight_per_connection_are_capped() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut a = Stream::open(&gw.base, None).await;
    assert_eq!(post(&a.endpoint, initialize(0), &[]).await.0, 202);
    a.until_response(0).await;
    let slow = json!({"name": "everything__trigger-long-running-operation", "arguments": {"duration": 4, "steps": 1}});
    for i in 1..=MAX_IN_FLIGHT as i64 {
        assert_eq!(post(&a.endpoint, request(i, "tools/call", slow.clone()), &[]).await.0, 202, "request {i}");
    }
    let (status, body) = post(&a.endpoint, request(1000, "ping", json!({})), &[]).await;
    assert_eq!((status, body["error"]["code"].clone()), (429, json!(-32007)), "{body}");
    assert_eq!(body["id"], 1000, "{body}");
    // Each running request is answered, and then the connection takes requests again.
    let mut answered = std::collections::BTreeSet::new();
    while answered.len() < MAX_IN_FLIGHT {
        let m = a.message(Duration::from_secs(60)).await.expect("a running request was never answered");
        if m.get("method").is_some() {
            continue; // list_changed, as the servers finish mounting
        }
        assert!(m["result"]["content"][0]["text"].as_str().unwrap().contains("completed"), "{m}");
        answered.insert(m["id"].as_i64().unwrap());
    }
    assert_eq!(post(&a.endpoint, request(1001, "ping", json!({})), &[]).await.0, 202);
    assert_eq!(a.until_response(1001).await.len(), 1);
}

/// A client that opens a stream and never reads it, over a raw socket with a small receive
/// buffer, while its requests keep producing answers: once the socket buffers are full, the
/// gateway queues at most `OUTBOX` messages and then ends the connection, instead of holding
/// every answer in memory for a reader that never comes.
#[tokio::test]
async fn a_client_that_does_not_read_is_disconnected() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let addr: std::net::SocketAddr = gw.base.trim_start_matches("http://").parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut conn = sock.connect(addr).await.unwrap();
    conn.write_all(format!("GET /sse HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let opened = tokio::time::timeout(Duration::from_secs(10), async {
        while !String::from_utf8_lossy(&head).contains("session_id=") || !head.ends_with(b"\n\n") {
            conn.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
    })
    .await;
    assert!(opened.is_ok(), "no endpoint event: {}", String::from_utf8_lossy(&head));
    let head = String::from_utf8_lossy(&head).into_owned();
    let path = head.split("data: ").nth(1).unwrap().lines().next().unwrap().to_string();
    let endpoint = format!("{}{path}", gw.base);
    assert_eq!(post(&endpoint, initialize(0), &[]).await.0, 202);

    // Answers of 64 KiB each: a few hundred fill the loopback socket's buffers, then the
    // outbox. The client reads nothing from here on.
    let echo = json!({"name": "everything__echo", "arguments": {"message": "x".repeat(64 * 1024)}});
    let mut next = 1;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let ended = loop {
        let (status, _) = post(&endpoint, request(next, "tools/call", echo.clone()), &[]).await;
        *statuses.entry(status).or_default() += 1;
        match status {
            202 => next += 1,
            429 => tokio::time::sleep(Duration::from_millis(20)).await,
            404 => break true,
            s => panic!("unexpected status {s}"),
        }
        if Instant::now() > deadline {
            break false;
        }
    };
    assert!(ended, "the connection was not ended after {next} unread answers: {statuses:?}");
    let warned =
        gw.logged(Duration::from_secs(10), |l| l.contains("messages unread on its stream; ending its connection"));
    assert!(warned.is_ok(), "{warned:?}");
    // At least the outbox's worth of answers was queued before the gateway gave up on it.
    assert!(next as usize > OUTBOX, "{next} {statuses:?}");
    // The stream was ended: reading now drains what was already written and reaches the
    // response's last chunk, with no more than the socket buffers and the outbox in between.
    let mut sink = vec![0u8; 1 << 16];
    let mut tail = Vec::new();
    let mut total = 0usize;
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match conn.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    total += n;
                    tail.extend_from_slice(&sink[..n]);
                    tail.drain(..tail.len().saturating_sub(8));
                    if tail.ends_with(b"\r\n0\r\n\r\n") {
                        return;
                    }
                }
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the ended stream never ended ({total} bytes read)");
    // The gateway serves on.
    let mut fresh = Stream::open(&gw.base, None).await;
    assert_eq!(post(&fresh.endpoint, request(1, "ping", json!({})), &[]).await.0, 202);
    fresh.until_response(1).await;
}
