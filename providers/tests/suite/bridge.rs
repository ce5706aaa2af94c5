//! The bridge provider (the AXP draft's static form) against `fixtures/bridge.sh`.

use std::sync::Arc;
use std::time::Duration;

use axp_protocol::ToolCall;
use axp_providers::{
    BridgeConfig, BridgeProvider, CancellationToken, DirectLauncher, ExecOptions, Provider, ProviderError,
};
use serde_json::json;

use super::support::{Recorder, args, base_env, fixtures};

fn provider(mode: &str) -> BridgeProvider {
    let cfg: BridgeConfig = serde_json::from_value(json!({
        "provider": "p",
        "bridge": {"command": fixtures().join("bridge.sh"), "args": [mode]},
        "tools": [
            {"name": "greet", "description": "Greets someone.",
             "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}}},
            {"name": "bare", "description": "No schema declared."}
        ]
    }))
    .unwrap();
    let exec = ExecOptions { timeout: Duration::from_secs(5), env: base_env(), ..Default::default() };
    BridgeProvider::new(cfg, exec, Arc::new(DirectLauncher)).unwrap()
}

fn greet() -> ToolCall {
    ToolCall { tool: "greet".into(), arguments: args(json!({"name": "Ada"})), meta: None }
}

#[tokio::test]
async fn declared_tools_are_listed() {
    let p = provider("text");
    assert_eq!(p.id().as_str(), "p");
    let tools = p.tools().await.unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0].input_schema["properties"]["name"]["type"], "string");
    assert_eq!(tools[1].input_schema, json!({"type": "object"}));
}

#[tokio::test]
async fn plain_stdout_is_text_and_argv_carries_provider_tool_params() {
    let out = provider("text").call(greet(), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert!(!out.is_error);
    assert_eq!(out.joined_text(), "provider=p tool=greet params={\"name\":\"Ada\"}\n");
}

#[tokio::test]
async fn call_tool_result_json_is_used_as_is() {
    let out = provider("json").call(greet(), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "from json");
    assert_eq!(out.structured_content, Some(json!({"tool": "greet"})));
}

#[tokio::test]
async fn non_zero_exit_is_an_error_result() {
    let sink = Recorder::new();
    let out = provider("fail").call(greet(), sink.clone(), CancellationToken::new()).await.unwrap();
    assert!(out.is_error);
    let text = out.joined_text();
    assert!(text.contains("partial output"), "{text}");
    assert!(text.contains("exit code 3"), "{text}");
    assert!(text.contains("something broke"), "{text}");
    assert_eq!(sink.stderr(), "something broke\n");
}

#[tokio::test]
async fn stderr_streams_and_stdout_stays_the_result() {
    let sink = Recorder::new();
    let out = provider("stderr").call(greet(), sink.clone(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "done\n");
    assert_eq!(sink.stderr(), "working\n");
    assert_eq!(sink.stdout(), "", "stdout is the result, not a stream");
}

#[tokio::test]
async fn unknown_tools_and_bad_declarations_are_refused() {
    let err = provider("text")
        .call(
            ToolCall { tool: "other".into(), arguments: Default::default(), meta: None },
            Recorder::new(),
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::UnknownTool(_)));

    let typo = serde_json::from_value::<BridgeConfig>(json!({
        "provider": "p", "bridge": {"command": "x", "argz": []}, "tools": []
    }))
    .unwrap_err();
    assert!(typo.to_string().contains("argz"), "{typo}");

    let empty: BridgeConfig = serde_json::from_value(json!({
        "provider": "p", "bridge": {"command": "x"}, "tools": []
    }))
    .unwrap();
    let err = BridgeProvider::new(empty, ExecOptions::default(), Arc::new(DirectLauncher)).unwrap_err();
    assert!(err.to_string().contains("no tool"), "{err}");
}
