//! The MCP provider against the Python reference server `mcp-server-time` (PyPI), over stdio.

use std::sync::Arc;
use std::time::Duration;

use axp_protocol::ToolCall;
use axp_providers::{
    CancellationToken, DirectLauncher, McpConfig, McpProvider, McpStatus, McpTransport, Provider, ProviderId,
};
use serde_json::json;

use super::support::{Recorder, args, spec, time_server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_server_answers_get_current_time() {
    let server = time_server();
    let mut cfg = McpConfig::new(
        ProviderId("time".into()),
        McpTransport::Stdio(spec(server.to_str().unwrap(), &["--local-timezone", "UTC"])),
    );
    cfg.connect_timeout = Duration::from_secs(30);
    let p = McpProvider::start(cfg, Arc::new(DirectLauncher)).await;
    assert_eq!(p.status(), McpStatus::Available);
    let tools = p.tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"get_current_time"), "{names:?}");
    assert!(names.contains(&"convert_time"), "{names:?}");
    let out = p
        .call(
            ToolCall {
                tool: "get_current_time".into(),
                arguments: args(json!({"timezone": "Europe/Paris"})),
                meta: None,
            },
            Recorder::new(),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!out.is_error, "{out:?}");
    let text = out.joined_text();
    let v: serde_json::Value = serde_json::from_str(&text).expect("the tool answers JSON");
    assert_eq!(v["timezone"], "Europe/Paris");
    assert!(v["datetime"].as_str().is_some_and(|d| d.len() >= 19), "{v}");
    p.shutdown().await.unwrap();
}
