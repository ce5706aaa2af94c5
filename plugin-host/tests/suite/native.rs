//! The dylib provider with real native libraries in real helper processes: calls, a panic
//! turned into an error, a segfault that kills only the helper, and the trusted in-process path;
//! and hostile helper processes (a shell script in the helper's place) that flood the gateway
//! with a reply line that never ends, or answer a call after it was cancelled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axp_plugin_host::{DylibConfig, DylibProvider, InstallOptions};
use axp_protocol::{ErrorCode, ToolCall, ToolOutput};
use axp_provider_api::{CancellationToken, DirectLauncher, NullSink, Provider, ProviderError};
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
    assert!(matches!(events.recv().await.unwrap(), axp_provider_api::ProviderEvent::Unavailable { .. }));
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

/// The most the host reads of one reply line (`native::MAX_REPLY_BYTES`, the cap on one MCP
/// answer elsewhere in the gateway).
const CAP: usize = 16 << 20;

/// A helper that speaks just enough of the helper protocol to be loaded, in `/bin/sh`. It
/// appends its pid to the file `$1` when it starts. `flood` writes 1 MiB more than the cap with
/// no newline and then hangs, holding the pipe open (as a broken or hostile plugin would);
/// `mute` closes its stdout and hangs; `slow` answers after a second; anything else answers
/// `"ok answer"` at once. Each reply carries its request's id.
const HOSTILE_HELPER: &str = r##"
PATH=/usr/bin:/bin
echo $$ >> "$1"
while IFS= read -r line; do
  id=${line#*\"id\":}; id=${id%%,*}
  case "$line" in
    *'"method":"info"'*) result='{"status":"ok","json":"{\"id\":\"hostile-helper\",\"version\":\"0.1.0\",\"abi\":\"0.1.0\",\"description\":\"Misbehaves.\"}"}' ;;
    *'"method":"list_tools"'*) result='{"status":"ok","json":"[{\"name\":\"flood\"},{\"name\":\"slow\"},{\"name\":\"mute\"},{\"name\":\"ok\"}]"}' ;;
    *'"name":"flood"'*) head -c FLOOD_BYTES /dev/zero | tr '\0' a; exec sleep 60 ;;
    *'"name":"mute"'*) exec sleep 60 >&- ;;
    *'"name":"slow"'*) sleep 1; result='{"status":"ok","json":"\"slow answer\""}' ;;
    *) result='{"status":"ok","json":"\"ok answer\""}' ;;
  esac
  printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$result"
done
"##;

/// The hostile helper as a dylib provider; the file its pids are written to.
async fn hostile_helper(dir: &std::path::Path) -> (DylibProvider, std::path::PathBuf) {
    let pids = dir.join("pids");
    let script = HOSTILE_HELPER.replace("FLOOD_BYTES", &(CAP + (1 << 20)).to_string());
    let cfg = DylibConfig {
        id: "hostile-helper".into(),
        // Never opened: the script stands in for `axp __plugin-host`, which would load it.
        library: dir.join("unused.so"),
        helper: axp_plugin_host::HelperCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script, "hostile-helper".into(), pids.to_string_lossy().into_owned()],
        },
        policy: Default::default(),
        trusted: false,
        call_timeout: Duration::from_secs(10),
    };
    (DylibProvider::new(cfg, Arc::new(DirectLauncher)).await.unwrap(), pids)
}

fn started_pids(pids: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(pids).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect()
}

/// The attack: a helper writes a reply line that never ends. The host stops reading at the cap,
/// fails the call with a limit error well before the call's timeout, kills that helper, and
/// starts a fresh one for the next call; it never buffers the flood whole.
#[tokio::test]
async fn a_reply_line_past_the_cap_fails_the_call_and_kills_the_helper() {
    let dir = tempfile::tempdir().unwrap();
    let (p, pids) = hostile_helper(dir.path()).await;
    let mut events = p.events().unwrap();
    let t = Instant::now();
    let err = call(&p, "flood", json!({})).await.unwrap_err();
    let ProviderError::Upstream(e) = &err else { panic!("{err}") };
    assert_eq!(e.kind(), Some(ErrorCode::LimitExceeded), "{err}");
    assert!(e.reason().contains("16 MiB"), "{}", e.reason());
    assert!(t.elapsed() < Duration::from_secs(5), "the host waited for the flood to end: {:?}", t.elapsed());
    assert!(matches!(events.recv().await.unwrap(), axp_provider_api::ProviderEvent::Unavailable { .. }));
    let first = started_pids(&pids)[0];
    assert!(!std::path::Path::new(&format!("/proc/{first}")).exists(), "the flooding helper {first} still runs");

    assert_eq!(call(&p, "ok", json!({})).await.unwrap().joined_text(), "\"ok answer\"");
    assert_eq!(started_pids(&pids).len(), 2, "the next call did not get a fresh helper");
    p.shutdown().await.unwrap();
}

/// A call cancelled while its helper works must not leave that helper's late reply to be read
/// as the answer to the next call (possibly another session's): the abandoned helper is killed
/// and the next call gets a fresh one, and its own answer.
#[tokio::test]
async fn a_cancelled_calls_late_reply_is_never_the_next_calls_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (p, pids) = hostile_helper(dir.path()).await;
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        c2.cancel();
    });
    let err = p
        .call(ToolCall { tool: "slow".into(), arguments: Default::default(), meta: None }, Arc::new(NullSink), cancel)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Cancelled), "{err}");
    assert_eq!(call(&p, "ok", json!({})).await.unwrap().joined_text(), "\"ok answer\"");
    assert_eq!(started_pids(&pids).len(), 2, "the abandoned helper was asked again");
    p.shutdown().await.unwrap();
}

/// A helper that closes its stdout but keeps running is stopped, not waited on for ever: the
/// call fails at once, and the plugin's next call gets a fresh helper instead of queueing
/// behind one that will never exit.
#[tokio::test]
async fn a_helper_that_closes_its_output_and_lingers_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let (p, pids) = hostile_helper(dir.path()).await;
    let err = tokio::time::timeout(Duration::from_secs(5), call(&p, "mute", json!({})))
        .await
        .expect("the host waited on a helper that never exits")
        .unwrap_err();
    let ProviderError::Unavailable { reason, .. } = &err else { panic!("{err}") };
    assert!(reason.contains("closed its output and was stopped"), "{reason}");
    let first = started_pids(&pids)[0];
    assert!(!std::path::Path::new(&format!("/proc/{first}")).exists(), "the mute helper {first} still runs");
    assert_eq!(call(&p, "ok", json!({})).await.unwrap().joined_text(), "\"ok answer\"");
    p.shutdown().await.unwrap();
}
