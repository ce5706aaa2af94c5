//! The dylib provider with real native libraries in real helper processes: calls, a panic
//! turned into an error, a segfault that kills only the helper, and the trusted in-process path.

use std::sync::Arc;
use std::time::Duration;

use axp_plugin_host::{DylibConfig, DylibProvider, InstallOptions};
use axp_protocol::{ToolCall, ToolOutput};
use axp_providers::{CancellationToken, DirectLauncher, NullSink, Provider, ProviderError};
use serde_json::json;

use super::common::*;

async fn call(p: &dyn Provider, tool: &str, a: serde_json::Value) -> Result<ToolOutput, ProviderError> {
    p.call(ToolCall { tool: tool.into(), arguments: args(a), meta: None }, Arc::new(NullSink), CancellationToken::new())
        .await
}

fn cfg(name: &str, lib: &str, trusted: bool) -> DylibConfig {
    let c = ctx();
    DylibConfig {
        id: name.into(),
        library: dist(name).join(lib),
        helper: c.helper,
        policy: Default::default(),
        trusted,
        call_timeout: Duration::from_secs(10),
    }
}

#[tokio::test]
async fn native_plugin_installs_and_answers_from_its_helper() {
    let state = tempfile::tempdir().unwrap();
    let ctx = ctx();
    let (entry, tools) =
        axp_plugin_host::install(&dist("hello-native"), &InstallOptions::default(), state.path(), &ctx, &quiet)
            .await
            .unwrap();
    assert_eq!(entry.kind, axp_plugin_host::PluginKind::Dylib);
    assert_eq!(tools.len(), 2);
    let p = axp_plugin_host::load_one(state.path(), &entry, &ctx).await.unwrap();
    let out = call(p.as_ref(), "add", json!({"a": 40, "b": 2})).await.unwrap();
    assert_eq!(out.structured_content, Some(json!({"sum": 42})));
    let err = call(p.as_ref(), "add", json!({"a": "x"})).await.unwrap_err();
    assert!(matches!(err, ProviderError::InvalidArguments(_)), "{err}");
    p.shutdown().await.unwrap();
}

#[tokio::test]
async fn panic_and_segfault_leave_the_host_serving() {
    let p =
        DylibProvider::new(cfg("hostile-native", "hostile_native.so", false), Arc::new(DirectLauncher)).await.unwrap();
    let mut events = p.events().unwrap();
    let err = call(&p, "panic", json!({})).await.unwrap_err();
    let ProviderError::Upstream(e) = &err else { panic!("{err}") };
    assert!(e.reason().contains("panicked in `panic`: hostile-native panics on purpose"), "{}", e.reason());
    // The SDK caught the panic: the same helper still answers.
    assert_eq!(call(&p, "ok", json!({})).await.unwrap().joined_text(), "\"still here\"");

    let err = call(&p, "segv", json!({})).await.unwrap_err();
    let ProviderError::Unavailable { reason, .. } = &err else { panic!("{err}") };
    assert!(reason.contains("SIGSEGV"), "{reason}");
    assert!(matches!(events.recv().await.unwrap(), axp_providers::ProviderEvent::Unavailable { .. }));
    // This process is alive, and the next call gets a fresh helper.
    assert_eq!(call(&p, "ok", json!({})).await.unwrap().joined_text(), "\"still here\"");
    p.shutdown().await.unwrap();
}

#[tokio::test]
async fn trusted_plugin_runs_in_process() {
    let p = DylibProvider::new(cfg("hello-native", "hello_native.so", true), Arc::new(DirectLauncher)).await.unwrap();
    let out = call(&p, "echo", json!({"message": "inside"})).await.unwrap();
    assert_eq!(out.structured_content, Some(json!({"message": "inside"})));
}

#[tokio::test]
async fn a_library_without_the_symbol_is_refused() {
    // The WASM artifact is not a shared library at all: the helper exits with the reason.
    let mut c = cfg("hello-native", "hello_native.so", false);
    c.library = dist("hello").join("hello.wasm");
    let err = DylibProvider::new(c, Arc::new(DirectLauncher)).await.unwrap_err();
    assert!(err.to_string().contains("exited with code 3"), "{err}");
}
