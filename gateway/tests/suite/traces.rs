//! Traces. With `[telemetry] otlp_endpoint` pointed at an OTLP/HTTP receiver written here, a tool
//! call through `axp serve` to a real MCP server (the Python SDK's
//! `tests/fixtures/traced_server.py`, sandboxed, whose tool fetches a URL through the provider's
//! egress proxy) arrives as spans with the client's trace id and the structure request → tool call
//! → job → provider call → egress attempt, and the server was handed the provider call's context in
//! `_meta`; a resource read's provider call lies under its request. With traces off, a client's
//! `traceparent` header reaches an HTTP server unchanged, in `_meta` and as a header, on a tool
//! call, a resource read, a prompt and a completion alike, and an invalid one reaches nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::egress::{Dns, upstream};
use super::*;

/// What the receiver got: every span with its resource's `service.name`, and anything it could
/// not take (a request that is not an OTLP/HTTP protobuf export).
#[derive(Default)]
struct Received {
    spans: Vec<(String, Span)>,
    problems: Vec<String>,
}

/// An OTLP/HTTP receiver on loopback: HTTP/1.1 with keep-alive, `POST /v1/traces` with a
/// protobuf `ExportTraceServiceRequest`, answered with an empty success. Returns its base URL.
async fn receiver() -> (String, Arc<Mutex<Received>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Received::default()));
    let into = got.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(serve_exports(conn, into.clone()));
        }
    });
    (url, got)
}

async fn serve_exports(mut conn: tokio::net::TcpStream, got: Arc<Mutex<Received>>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if conn.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let header =
            |name: &str| head.lines().find_map(|l| l.strip_prefix(&format!("{name}:")).map(|v| v.trim().to_string()));
        let len: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while buf.len() < head_end + len {
            if conn.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        }
        let body: Vec<u8> = buf.drain(..head_end + len).skip(head_end).collect();
        {
            let mut got = got.lock().unwrap();
            if !head.starts_with("post /v1/traces http/1.1") {
                got.problems.push(format!("unexpected request: {head}"));
            } else if header("content-type").as_deref() != Some("application/x-protobuf") {
                got.problems.push(format!("not protobuf: {head}"));
            } else {
                match ExportTraceServiceRequest::decode(body.as_slice()) {
                    Err(e) => got.problems.push(format!("undecodable export: {e}")),
                    Ok(export) => {
                        for rs in export.resource_spans {
                            let service = rs
                                .resource
                                .as_ref()
                                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                                .and_then(|a| string_of(a.value.as_ref()?.value.as_ref()?))
                                .unwrap_or_default();
                            for ss in rs.scope_spans {
                                got.spans.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
                            }
                        }
                    }
                }
            }
        }
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if conn.write_all(ok).await.is_err() {
            return;
        }
    }
}

fn string_of(v: &Any) -> Option<String> {
    match v {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        _ => None,
    }
}

fn attr(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| string_of(a.value.as_ref()?.value.as_ref()?))
}

fn fixture() -> String {
    need(repo().join("tests/fixtures/traced_server.py"))
}

/// The JSON the fixture's `fetch` answers with.
fn echoed(result: &Value) -> Value {
    let text = result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {result}"));
    serde_json::from_str(text).unwrap()
}

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_PARENT: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_tool_calls_spans_reach_the_collector_under_the_clients_trace_with_their_parents() {
    let (collector, got) = receiver().await;
    let up_ip = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let dns = Dns::start(vec![("api.allowed.test", up_ip)]).await;
    let port = upstream(up_ip, "hello through the proxy").await;
    let tmp = tempfile::tempdir().unwrap();
    let toml = tmp.path().join("axp.toml");
    std::fs::write(
        &toml,
        format!(
            "[session]\ncapabilities = [\"tool(*)\", \"resource(*)\"]\n\
             [egress]\nresolvers = [\"{dns}\"]\ndangerously_allow_private = [\"127.0.0.2/32\"]\n\
             [telemetry]\notlp_endpoint = \"{collector}\"\n",
            dns = dns.addr
        ),
    )
    .unwrap();
    let fleet = tmp.path().join("fleet.json");
    let server = json!({"command": venv_bin("python"), "args": [fixture()], "sandbox": {"net": ["api.allowed.test"]}});
    std::fs::write(&fleet, json!({"mcpServers": {"traced": server}}).to_string()).unwrap();
    let gw = gateway()
        .arg("--config")
        .arg(toml.to_str().unwrap())
        .fleet(&fleet)
        .start_with_env(&[("OTEL_BSP_SCHEDULE_DELAY", "100")]);

    let mut s = Rpc::open(&gw.url, json!({"capabilities": ["tool(*)", "resource(*)"]})).await;
    wait_for_tool(&mut s, &gw, "traced__fetch").await;
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_PARENT}-01");
    let url = format!("http://api.allowed.test:{port}/");
    let r = s
        .ok(
            "tools/call",
            json!({"name": "traced__fetch", "arguments": {"url": url}, "_meta": {"traceparent": traceparent}}),
        )
        .await;
    let seen = echoed(&r);
    assert_eq!(seen["body"], "hello through the proxy", "{seen}");

    // Every span of the call, once the egress attempt (reported when its connection ends) is in.
    let spans = spans_of(&got, CLIENT_TRACE, &["request", "tool call", "job", "provider call", "egress attempt"]).await;
    let id = |name: &str| hex::encode(&spans[name].span_id);
    let parent = |name: &str| hex::encode(&spans[name].parent_span_id);
    assert_eq!(parent("request"), CLIENT_PARENT, "the request span is the client's span's child");
    assert_eq!(attr(&spans["request"], "rpc.method").as_deref(), Some("tools/call"));
    assert_eq!(attr(&spans["request"], "axp.transport").as_deref(), Some("http"));
    assert_eq!(parent("tool call"), id("request"));
    assert_eq!(attr(&spans["tool call"], "axp.tool").as_deref(), Some("traced__fetch"));
    assert_eq!(parent("job"), id("tool call"));
    assert_eq!(attr(&spans["job"], "axp.job.kind").as_deref(), Some("tool"));
    assert_eq!(parent("provider call"), id("job"));
    assert_eq!(attr(&spans["provider call"], "axp.provider").as_deref(), Some("traced"));
    assert_eq!(parent("egress attempt"), id("provider call"), "the attempt belongs to the call that made it");
    let attempt = &spans["egress attempt"];
    assert_eq!(attr(attempt, "axp.egress.decision").as_deref(), Some("allow"));
    assert_eq!(attr(attempt, "server.address"), Some(format!("api.allowed.test:{port}")));
    // Kinds: the request is served, the provider call and the attempt are clients.
    let (server_kind, client_kind) = (2, 3);
    assert_eq!(spans["request"].kind, server_kind);
    assert_eq!(spans["provider call"].kind, client_kind);
    assert_eq!(attempt.kind, client_kind);
    // Each child lies within its parent's time.
    for (child, parent) in [("tool call", "request"), ("provider call", "job"), ("egress attempt", "provider call")] {
        let (c, p) = (&spans[child], &spans[parent]);
        assert!(c.start_time_unix_nano + 1_000_000 >= p.start_time_unix_nano, "{child} starts before {parent}");
        if child != "egress attempt" {
            assert!(c.end_time_unix_nano <= p.end_time_unix_nano + 1_000_000, "{child} ends after {parent}");
        }
    }
    // The server was handed the provider call's context: the client's trace, that span's id.
    assert_eq!(seen["meta"]["traceparent"], format!("00-{CLIENT_TRACE}-{}-01", id("provider call")), "{seen}");

    // A resource read, in a trace of its own: its provider call lies under its request, and
    // the server was handed that span's context.
    let read_trace = "5cf92f3577b34da6a3ce929d0e0e4737";
    let templates = s.ok("resources/templates/list", json!({})).await;
    let template = templates["resourceTemplates"][0]["uriTemplate"].as_str().unwrap().to_string();
    let r = s
        .ok(
            "resources/read",
            json!({"uri": template.replace("{name}", "x"), "_meta": {"traceparent": format!("00-{read_trace}-{CLIENT_PARENT}-01")}}),
        )
        .await;
    let seen: Value = serde_json::from_str(r["contents"][0]["text"].as_str().unwrap()).unwrap();
    let spans = spans_of(&got, read_trace, &["request", "provider call"]).await;
    let call = &spans["provider call"];
    assert_eq!(attr(&spans["request"], "rpc.method").as_deref(), Some("resources/read"));
    assert_eq!(hex::encode(&call.parent_span_id), hex::encode(&spans["request"].span_id));
    assert_eq!(attr(call, "axp.provider").as_deref(), Some("traced"));
    assert_eq!(attr(call, "axp.method").as_deref(), Some("resources/read"));
    assert_eq!(call.kind, client_kind);
    assert_eq!(seen["meta"]["traceparent"], format!("00-{read_trace}-{}-01", hex::encode(&call.span_id)), "{seen}");
}

/// The `axp` spans of trace `trace` by name, once every one of `names` has arrived (20 s bound).
async fn spans_of(got: &Mutex<Received>, trace: &str, names: &[&str]) -> HashMap<String, Span> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now: HashMap<String, Span> = {
            let got = got.lock().unwrap();
            assert!(got.problems.is_empty(), "{:?}", got.problems);
            got.spans
                .iter()
                .filter(|(service, s)| service == "axp" && hex::encode(&s.trace_id) == trace)
                .map(|(_, s)| (s.name.clone(), s.clone()))
                .collect()
        };
        if names.iter().all(|n| now.contains_key(*n)) {
            return now;
        }
        assert!(Instant::now() < deadline, "spans of trace {trace} so far: {:?}", now.keys().collect::<Vec<_>>());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the (sandboxed, slow to start) server's tool is listed; shows the gateway's log
/// if it never is.
async fn wait_for_tool(s: &mut Rpc, gw: &Gw, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tools = s.ok("tools/list", json!({})).await;
        if tools["tools"].as_array().unwrap().iter().any(|t| t["name"] == name) {
            return;
        }
        if Instant::now() > deadline {
            let log: Vec<String> = gw.stderr.try_iter().collect();
            panic!("no tool `{name}` in {tools}\n{}\n{}", gw.startup_log.join("\n"), log.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Streamable HTTP server (the same fixture), stopped on drop.
struct HttpServer(std::process::Child);

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn http_server() -> (HttpServer, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = std::process::Command::new(venv_bin("python"))
        .arg(fixture())
        .args(["--http", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = HttpServer(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        assert!(Instant::now() < deadline, "the HTTP fixture server did not listen on {port}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (server, port)
}

#[tokio::test]
async fn with_traces_off_a_clients_traceparent_header_reaches_an_http_server_unchanged() {
    let (_server, port) = http_server().await;
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet.json");
    let server = json!({"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")});
    std::fs::write(&fleet, json!({"mcpServers": {"traced": server}}).to_string()).unwrap();
    let gw = gateway().fleet(&fleet).start();
    let s = Rpc::open(&gw.url, json!({"capabilities": ["tool(*)", "resource(*)", "prompt(*)"]})).await;
    let (session, token) = s.session.clone().unwrap();
    let send = |method: &'static str, params: Value, traceparent: &'static str| {
        let (url, session, token) = (gw.url.clone(), session.clone(), token.clone());
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
            let reply: Value = reqwest::Client::new()
                .post(&url)
                .header("mcp-session-id", session)
                .header("axp-capability", token)
                .header("traceparent", traceparent)
                .header("tracestate", "congo=t61rcWkgMzE")
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert!(reply.get("error").is_none(), "{method}: {reply}");
            reply["result"].clone()
        }
    };
    // The fixture's resource template, as the gateway offers it to the client.
    let templates =
        send("resources/templates/list", json!({}), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").await;
    let template = templates["resourceTemplates"]
        .as_array()
        .and_then(|t| t.iter().find_map(|t| t["uriTemplate"].as_str().filter(|u| u.contains("context/"))))
        .unwrap_or_else(|| panic!("no context template in {templates}"))
        .to_string();
    let uri = template.replace("{name}", "x");
    // A tool call, a resource read and a prompt each hand the server the client's context.
    let tool_call = |traceparent| send("tools/call", json!({"name": "traced__fetch", "arguments": {}}), traceparent);
    let read = |traceparent| {
        let uri = uri.clone();
        async move {
            let r = send("resources/read", json!({"uri": uri}), traceparent).await;
            let text = r["contents"][0]["text"].as_str().unwrap_or_else(|| panic!("no text in {r}"));
            serde_json::from_str::<Value>(text).unwrap()
        }
    };
    let prompt = |traceparent| async move {
        let r = send("prompts/get", json!({"name": "traced__context"}), traceparent).await;
        let text = r["messages"][0]["content"]["text"].as_str().unwrap_or_else(|| panic!("no text in {r}"));
        serde_json::from_str::<Value>(text).unwrap()
    };
    // The fixture completes with what the request carried, as its one value.
    let complete = |traceparent| {
        let template = template.clone();
        async move {
            let params =
                json!({"ref": {"type": "ref/resource", "uri": template}, "argument": {"name": "name", "value": ""}});
            let r = send("completion/complete", params, traceparent).await;
            let text = r["completion"]["values"][0].as_str().unwrap_or_else(|| panic!("no value in {r}"));
            serde_json::from_str::<Value>(text).unwrap()
        }
    };
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let invalid = "00-00000000000000000000000000000000-b7ad6b7169203331-01";
    // What the server was handed on each kind of request.
    let every = |traceparent| async move {
        [
            ("tools/call", echoed(&tool_call(traceparent).await)),
            ("resources/read", read(traceparent).await),
            ("prompts/get", prompt(traceparent).await),
            ("completion/complete", complete(traceparent).await),
        ]
    };
    for (what, seen) in every(traceparent).await {
        assert_eq!(seen["meta"]["traceparent"], traceparent, "{what}: {seen}");
        assert_eq!(seen["meta"]["tracestate"], "congo=t61rcWkgMzE", "{what}: {seen}");
        assert_eq!(seen["headers"]["traceparent"], traceparent, "{what}: {seen}");
        assert_eq!(seen["headers"]["tracestate"], "congo=t61rcWkgMzE", "{what}: {seen}");
    }
    // An invalid context (an all-zero trace id) is dropped, not passed on.
    for (what, seen) in every(invalid).await {
        assert!(seen["meta"].get("traceparent").is_none(), "{what}: {seen}");
        assert!(seen["headers"]["traceparent"].is_null(), "{what}: {seen}");
    }
}
