//! The MCP provider over Streamable HTTP against server-everything's `streamableHttp` mode,
//! bound to 127.0.0.1 by the `loopback.cjs` preload.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axp_protocol::ToolCall;
use axp_providers::{
    CancellationToken, DirectLauncher, McpConfig, McpProvider, McpStatus, McpTransport, Provider, ProviderEvent,
    ProviderId, RestartPolicy,
};
use serde_json::json;

use super::support::{Recorder, args, base_env, everything_js, fixtures, wait_event};

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts server-everything over HTTP on `port` and waits until it accepts connections.
async fn serve_http(port: u16) -> tokio::process::Child {
    let child = tokio::process::Command::new("node")
        .arg("--require")
        .arg(fixtures().join("loopback.cjs"))
        .arg(everything_js())
        .arg("streamableHttp")
        .env_clear()
        .envs(base_env())
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node must be installed");
    let ready = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(ready.is_ok(), "server-everything did not listen on {port}");
    child
}

fn config(port: u16, headers: BTreeMap<String, String>) -> McpConfig {
    let mut c = McpConfig::new(
        ProviderId("web".into()),
        McpTransport::Http { url: format!("http://127.0.0.1:{port}/mcp"), headers },
    );
    c.timeout = Duration::from_secs(10);
    c.connect_timeout = Duration::from_secs(10);
    c.heartbeat = Duration::from_millis(500);
    c.heartbeat_timeout = Duration::from_secs(5);
    c.restart = RestartPolicy { initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_millis(500) };
    c
}

fn call(tool: &str, a: serde_json::Value) -> ToolCall {
    ToolCall { tool: tool.into(), arguments: args(a), meta: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_lists_calls_and_streams_progress() {
    let port = free_port();
    let _server = serve_http(port).await;
    let headers = BTreeMap::from([("X-Axp-Test".to_string(), "1".to_string())]);
    let p = McpProvider::start(config(port, headers), Arc::new(DirectLauncher)).await;
    assert_eq!(p.status(), McpStatus::Available);
    assert_eq!(p.server_pid(), None);
    let tools = p.tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "get-sum"));
    let out =
        p.call(call("echo", json!({"message": "over http"})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "Echo: over http");

    let sink = Recorder::new();
    let out = p
        .call(
            call("trigger-long-running-operation", json!({"duration": 1, "steps": 3})),
            sink.clone(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(out.joined_text().contains("Steps: 3"));
    assert!(sink.progress().len() >= 2, "{:?}", sink.events());
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_that_appears_later_is_picked_up_by_the_retry_loop() {
    let port = free_port();
    let p = McpProvider::start(config(port, BTreeMap::new()), Arc::new(DirectLauncher)).await;
    let mut events = p.events().unwrap();
    assert!(matches!(p.status(), McpStatus::Unavailable { .. }));
    let _server = serve_http(port).await;
    wait_event(&mut events, Duration::from_secs(10), |e| *e == ProviderEvent::Available).await;
    let out =
        p.call(call("get-sum", json!({"a": 1, "b": 2})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "The sum of 1 and 2 is 3.");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_headers_are_reported_not_fatal() {
    let headers = BTreeMap::from([("bad header".to_string(), "x".to_string())]);
    let p = McpProvider::start(config(free_port(), headers), Arc::new(DirectLauncher)).await;
    match p.status() {
        McpStatus::Unavailable { reason } => {
            assert!(reason.contains("bad header name"), "{reason}")
        }
        McpStatus::Available => panic!("a malformed header cannot connect"),
    }
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_server_killed_mid_call_fails_the_call_and_recovers_on_restart() {
    let port = free_port();
    let mut server = serve_http(port).await;
    let p = McpProvider::start(config(port, BTreeMap::new()), Arc::new(DirectLauncher)).await;
    assert_eq!(p.status(), McpStatus::Available);
    let mut events = p.events().unwrap();
    let sink = Recorder::new();
    let task = {
        let (p, sink) = (p.clone(), sink.clone());
        tokio::spawn(async move {
            p.call(
                call("trigger-long-running-operation", json!({"duration": 10, "steps": 20})),
                sink,
                CancellationToken::new(),
            )
            .await
        })
    };
    assert!(super::support::eventually(Duration::from_secs(5), || !sink.progress().is_empty()).await);
    let t0 = std::time::Instant::now();
    server.kill().await.unwrap();
    let res = task.await.unwrap();
    assert!(matches!(res, Err(axp_providers::ProviderError::Unavailable { .. })), "{res:?}");
    assert!(t0.elapsed() < Duration::from_secs(3), "took {:?}", t0.elapsed());
    wait_event(&mut events, Duration::from_secs(5), |e| matches!(e, ProviderEvent::Unavailable { .. })).await;
    let _server = serve_http(port).await;
    wait_event(&mut events, Duration::from_secs(10), |e| *e == ProviderEvent::Available).await;
    let out =
        p.call(call("echo", json!({"message": "again"})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "Echo: again");
    p.shutdown().await.unwrap();
}
