//! The MCP provider over stdio against real servers: `@modelcontextprotocol/server-everything`
//! and `fixture_server.mjs` (the official TypeScript SDK), through `DirectLauncher`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axp_protocol::ToolCall;
use axp_providers::{
    CancellationToken, DirectLauncher, McpConfig, McpProvider, McpStatus, McpTransport, ProcessSpec, Provider,
    ProviderError, ProviderEvent, ProviderId, RestartPolicy,
};
use serde_json::json;

use super::support::{Recorder, args, eventually, everything_spec, fixture_spec, spec, wait_event};

fn config(name: &str, spec: ProcessSpec) -> McpConfig {
    let mut c = McpConfig::new(ProviderId(name.into()), McpTransport::Stdio(spec));
    c.timeout = Duration::from_secs(10);
    c.connect_timeout = Duration::from_secs(20);
    c.heartbeat = Duration::from_millis(500);
    c.heartbeat_timeout = Duration::from_secs(5);
    c.restart = RestartPolicy { initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(1) };
    c
}

async fn start(name: &str, spec: ProcessSpec) -> Arc<McpProvider> {
    let p = McpProvider::start(config(name, spec), Arc::new(DirectLauncher)).await;
    assert_eq!(p.status(), McpStatus::Available, "{name} did not start");
    p
}

fn call(tool: &str, a: serde_json::Value) -> ToolCall {
    ToolCall { tool: tool.into(), arguments: args(a), meta: None }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_lists_tools_and_answers_echo_and_get_sum() {
    let p = start("everything", everything_spec()).await;
    let tools = p.tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for want in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert_eq!(
        echo.input_schema["properties"]["message"]["type"], "string",
        "the schema passes through: {}",
        echo.input_schema
    );
    assert_eq!(echo.annotation("readOnlyHint"), Some(true));

    let out =
        p.call(call("echo", json!({"message": "hello axp"})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "Echo: hello axp");
    assert!(!out.is_error);

    let sum =
        p.call(call("get-sum", json!({"a": 2, "b": 40})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(sum.joined_text(), "The sum of 2 and 40 is 42.");

    // The server reports an unknown tool as a tool error; that passes through unchanged.
    let unknown = p.call(call("no-such-tool", json!({})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert!(unknown.is_error);
    assert!(unknown.joined_text().contains("not found"), "{unknown:?}");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_running_operation_streams_progress_into_the_sink() {
    let p = start("everything", everything_spec()).await;
    let sink = Recorder::new();
    let out = p
        .call(
            call("trigger-long-running-operation", json!({"duration": 1, "steps": 4})),
            sink.clone(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(out.joined_text().contains("Steps: 4"), "{out:?}");
    let progress = sink.progress();
    assert!(progress.len() >= 3, "expected the step notifications, got {progress:?}");
    assert!(progress.windows(2).all(|w| w[0].0 < w[1].0), "{progress:?}");
    assert!(progress.iter().all(|(_, total)| *total == Some(4.0)));
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_mid_way_returns_cancelled_and_the_server_keeps_serving() {
    let p = start("everything", everything_spec()).await;
    let sink = Recorder::new();
    let cancel = CancellationToken::new();
    let task = {
        let (p, sink, cancel) = (p.clone(), sink.clone(), cancel.clone());
        tokio::spawn(async move {
            p.call(call("trigger-long-running-operation", json!({"duration": 10, "steps": 20})), sink, cancel).await
        })
    };
    assert!(eventually(Duration::from_secs(5), || !sink.progress().is_empty()).await, "no progress before cancelling");
    let t0 = Instant::now();
    cancel.cancel();
    let res = task.await.unwrap();
    assert!(matches!(res, Err(ProviderError::Cancelled)), "{res:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    let out = p
        .call(call("echo", json!({"message": "still here"})), Recorder::new(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.joined_text(), "Echo: still here");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_timeout_reach_the_server_as_notifications_cancelled() {
    let mut cfg = config("fixture", fixture_spec());
    cfg.timeout = Duration::from_millis(700);
    let p = McpProvider::start(cfg, Arc::new(DirectLauncher)).await;
    assert_eq!(p.status(), McpStatus::Available);
    let count = |p: Arc<McpProvider>| async move {
        p.call(call("cancelled-count", json!({})), Recorder::new(), CancellationToken::new())
            .await
            .unwrap()
            .joined_text()
    };

    // Cancel: the server's handler sees its abort signal.
    let sink = Recorder::new();
    let cancel = CancellationToken::new();
    let task = {
        let (p, sink, cancel) = (p.clone(), sink.clone(), cancel.clone());
        tokio::spawn(async move { p.call(call("slow", json!({})), sink, cancel).await })
    };
    assert!(eventually(Duration::from_secs(5), || !sink.progress().is_empty()).await);
    cancel.cancel();
    assert!(matches!(task.await.unwrap(), Err(ProviderError::Cancelled)));
    let mut seen = String::new();
    for _ in 0..50 {
        seen = count(p.clone()).await;
        if seen == "1" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, "1", "the server never saw the cancellation");

    // Timeout: same, and the error names the tool.
    let t0 = Instant::now();
    let res = p.call(call("slow", json!({})), Recorder::new(), CancellationToken::new()).await;
    match res {
        Err(ProviderError::Timeout { tool, secs }) => {
            assert_eq!(tool, "slow");
            assert_eq!(secs, 1);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(3));
    for _ in 0..50 {
        seen = count(p.clone()).await;
        if seen == "2" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen, "2", "the timed-out request was not cancelled upstream");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_rpc_errors_pass_through_as_upstream() {
    let p = start("fixture", fixture_spec()).await;
    let res = p.call(call("rpc-error", json!({})), Recorder::new(), CancellationToken::new()).await;
    match res {
        Err(ProviderError::Upstream(e)) => {
            assert_eq!(e.code, -32042);
            // The TypeScript SDK puts "MCP error <code>: " in front on the wire.
            assert_eq!(e.message, "MCP error -32042: the fixture refuses");
            assert_eq!(e.data, Some(json!({"why": "asked to"})));
        }
        other => panic!("expected an upstream error, got {other:?}"),
    }
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_relists_and_emits_tools_changed() {
    let p = start("fixture", fixture_spec()).await;
    let mut events = p.events().expect("the mcp provider has events");
    let before = p.tools().await.unwrap();
    assert!(!before.iter().any(|t| t.name == "extra-1"));
    p.call(call("add-tool", json!({})), Recorder::new(), CancellationToken::new()).await.unwrap();
    wait_event(&mut events, Duration::from_secs(5), |e| *e == ProviderEvent::ToolsChanged).await;
    let after = p.tools().await.unwrap();
    assert!(after.iter().any(|t| t.name == "extra-1"), "{after:?}");
    assert_eq!(after.len(), before.len() + 1);
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_fails_the_call_promptly_and_comes_back() {
    let p = start("everything", everything_spec()).await;
    let mut events = p.events().unwrap();
    let tools_before = p.tools().await.unwrap();
    let pid = p.server_pid().expect("a stdio server has a pid");
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
    assert!(eventually(Duration::from_secs(5), || !sink.progress().is_empty()).await);
    let t0 = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let res = task.await.unwrap();
    let failed_after = t0.elapsed();
    match &res {
        Err(ProviderError::Unavailable { provider, reason }) => {
            assert_eq!(provider, "everything");
            assert!(reason.contains("signal 9"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(failed_after < Duration::from_secs(1), "took {failed_after:?}");

    let down =
        wait_event(&mut events, Duration::from_secs(5), |e| matches!(e, ProviderEvent::Unavailable { .. })).await;
    assert!(matches!(down, ProviderEvent::Unavailable { reason } if reason.contains("signal 9")));
    // While down, the last known tools stay listed.
    wait_event(&mut events, Duration::from_secs(15), |e| *e == ProviderEvent::Available).await;
    wait_event(&mut events, Duration::from_secs(5), |e| *e == ProviderEvent::ToolsChanged).await;
    assert_eq!(p.status(), McpStatus::Available);
    assert_ne!(p.server_pid(), Some(pid));
    assert_eq!(p.tools().await.unwrap().len(), tools_before.len());
    let out =
        p.call(call("echo", json!({"message": "back"})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "Echo: back");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_leaves_an_unavailable_provider() {
    let t0 = Instant::now();
    let p = McpProvider::start(config("missing", spec("/nonexistent/mcp-server", &[])), Arc::new(DirectLauncher)).await;
    assert!(t0.elapsed() < Duration::from_secs(5));
    match p.status() {
        McpStatus::Unavailable { reason } => assert!(reason.contains("cannot start"), "{reason}"),
        McpStatus::Available => panic!("a missing program cannot be available"),
    }
    assert!(matches!(p.tools().await, Err(ProviderError::Unavailable { .. })));
    let res = p.call(call("x", json!({})), Recorder::new(), CancellationToken::new()).await;
    assert!(matches!(res, Err(ProviderError::Unavailable { .. })), "{res:?}");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_at_start_is_reported_with_its_stderr() {
    let p = McpProvider::start(
        config("crashy", spec("sh", &["-c", "echo 'fatal: no config found' >&2; exit 3"])),
        Arc::new(DirectLauncher),
    )
    .await;
    match p.status() {
        McpStatus::Unavailable { reason } => {
            assert!(reason.contains("exit code 3"), "{reason}");
            assert!(reason.contains("fatal: no config found"), "{reason}");
        }
        McpStatus::Available => panic!("it exited"),
    }
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_the_server_process() {
    let p = start("everything", everything_spec()).await;
    let pid = p.server_pid().unwrap();
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    assert!(proc_dir.exists());
    p.shutdown().await.unwrap();
    assert!(eventually(Duration::from_secs(3), || !proc_dir.exists()).await, "pid {pid} still exists after shutdown");
    assert!(matches!(p.status(), McpStatus::Unavailable { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_is_noticed_by_the_heartbeat_and_restarted() {
    let mut cfg = config("everything", everything_spec());
    cfg.heartbeat_timeout = Duration::from_secs(1);
    let p = McpProvider::start(cfg, Arc::new(DirectLauncher)).await;
    assert_eq!(p.status(), McpStatus::Available);
    let mut events = p.events().unwrap();
    let pid = p.server_pid().unwrap();
    // SIGSTOP: the process lives on but answers nothing, like a wedged event loop.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGSTOP).unwrap();
    let t0 = Instant::now();
    let res = p.call(call("echo", json!({"message": "anyone?"})), Recorder::new(), CancellationToken::new()).await;
    match &res {
        Err(ProviderError::Unavailable { reason, .. }) => {
            assert!(reason.contains("stopped answering"), "{reason}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(4), "took {:?}", t0.elapsed());
    wait_event(&mut events, Duration::from_secs(15), |e| *e == ProviderEvent::Available).await;
    assert_ne!(p.server_pid(), Some(pid));
    assert!(
        eventually(Duration::from_secs(3), || !std::path::Path::new(&format!("/proc/{pid}")).exists()).await,
        "the stopped server was not killed"
    );
    let out = p.call(call("echo", json!({"message": "hi"})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "Echo: hi");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_noticed_by_the_heartbeat_and_restarted() {
    let mut cfg = config("fixture", fixture_spec());
    cfg.heartbeat_timeout = Duration::from_secs(1);
    let p = McpProvider::start(cfg, Arc::new(DirectLauncher)).await;
    assert_eq!(p.status(), McpStatus::Available);
    let mut events = p.events().unwrap();
    let pid = p.server_pid().unwrap();
    let t0 = Instant::now();
    let res = p.call(call("freeze", json!({})), Recorder::new(), CancellationToken::new()).await;
    match &res {
        Err(ProviderError::Unavailable { reason, .. }) => {
            assert!(reason.contains("stopped answering"), "{reason}")
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(4), "took {:?}", t0.elapsed());
    wait_event(&mut events, Duration::from_secs(15), |e| *e == ProviderEvent::Available).await;
    assert_ne!(p.server_pid(), Some(pid));
    assert!(
        eventually(Duration::from_secs(3), || !std::path::Path::new(&format!("/proc/{pid}")).exists()).await,
        "the frozen server was not killed"
    );
    let out = p.call(call("cancelled-count", json!({})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "0");
    p.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_and_prompts_pass_through() {
    let p = start("everything", everything_spec()).await;
    let resources = p.resources().await.unwrap();
    let first = resources.iter().find_map(|r| r["uri"].as_str()).expect("server-everything lists static resources");
    let read = p.read_resource(first, None).await.unwrap();
    assert_eq!(read["contents"][0]["uri"], first, "{read}");
    let templates = p.resource_templates().await.unwrap();
    assert!(!templates.is_empty());
    assert!(templates.iter().all(|t| t["uriTemplate"].is_string()));

    let prompts = p.prompts().await.unwrap();
    let names: Vec<&str> = prompts.iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(names.contains(&"args-prompt"), "{names:?}");
    let got = p.get_prompt("args-prompt", args(json!({"city": "Lyon"})), None).await.unwrap();
    let text = got["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("Lyon"), "{got}");
    // A server-side error keeps its JSON-RPC code.
    let err = p.read_resource("demo://no/such/thing", None).await.unwrap_err();
    assert!(matches!(err, ProviderError::Upstream(_)), "{err:?}");
    p.shutdown().await.unwrap();
    assert!(matches!(p.prompts().await, Err(ProviderError::Unavailable { .. })));
}
