//! The WASM provider with real components: deadline, memory limit, traps, HTTP allowlist
//! against a real server on loopback, 100 concurrent calls, and `fs` grants that a directory
//! swapped for a symbolic link cannot widen.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axp_plugin_host::{WasmGrants, WasmProvider};
use axp_protocol::{ErrorCode, ToolCall, ToolOutput};
use axp_provider_api::{CancellationToken, NullSink, Provider, ProviderError};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::common::*;

async fn provider(name: &str, grants: WasmGrants) -> WasmProvider {
    let bytes = std::fs::read(dist(name).join(format!("{name}.wasm"))).unwrap();
    let runtime = axp_plugin_host::WasmRuntime::new(limits()).unwrap();
    WasmProvider::new(&runtime, name, &bytes, grants).await.unwrap()
}

async fn call(p: &dyn Provider, tool: &str, a: serde_json::Value) -> Result<ToolOutput, ProviderError> {
    p.call(ToolCall { tool: tool.into(), arguments: args(a), meta: None }, Arc::new(NullSink), CancellationToken::new())
        .await
}

#[tokio::test]
async fn infinite_loop_is_stopped_at_its_deadline() {
    let p = provider("hostile", WasmGrants::default()).await;
    let t = Instant::now();
    let err = call(&p, "spin", json!({})).await.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
    // The plugin still serves other calls.
    let err = call(&p, "nope", json!({})).await.unwrap_err();
    assert!(matches!(err, ProviderError::UnknownTool(_)), "{err}");
}

/// The epoch ticker runs only while a call does: an idle runtime does not wake every 5 ms, and a
/// call still gets the ticks its deadline needs.
#[tokio::test]
async fn the_epoch_ticker_sleeps_while_no_call_runs() {
    let bytes = std::fs::read(dist("hostile").join("hostile.wasm")).unwrap();
    let runtime = axp_plugin_host::WasmRuntime::new(limits()).unwrap();
    let p = WasmProvider::new(&runtime, "hostile", &bytes, WasmGrants::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let idle = runtime.epoch_ticks();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(runtime.epoch_ticks(), idle, "the ticker ran with no call in flight");
    let err = call(&p, "spin", json!({})).await.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err}");
    let after = runtime.epoch_ticks();
    assert!(after > idle + 10, "a spinning call saw only {} ticks", after - idle);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let settled = runtime.epoch_ticks();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(runtime.epoch_ticks(), settled, "the ticker kept running after the call");
}

#[tokio::test]
async fn unbounded_allocation_is_stopped_at_its_memory_limit() {
    let p = provider("hostile", WasmGrants::default()).await;
    let err = call(&p, "hog", json!({})).await.unwrap_err();
    let ProviderError::Upstream(e) = &err else { panic!("{err}") };
    assert_eq!(e.kind(), Some(ErrorCode::LimitExceeded), "{err}");
    assert!(e.reason().contains("memory limit of 32 MiB"), "{}", e.reason());
}

#[tokio::test]
async fn a_panic_is_a_trap_reported_as_a_crash() {
    let p = provider("hostile", WasmGrants::default()).await;
    let err = call(&p, "boom", json!({})).await.unwrap_err();
    let ProviderError::Upstream(e) = &err else { panic!("{err}") };
    assert!(e.reason().contains("crashed (trapped) in `boom`"), "{}", e.reason());
    // A fresh instance per call: the next call is unaffected.
    let err = call(&p, "hog", json!({})).await.unwrap_err();
    assert!(err.to_string().contains("upstream"), "{err}");
}

#[tokio::test]
async fn hundred_concurrent_calls_all_succeed() {
    let p = Arc::new(provider("hello", WasmGrants::default()).await);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..100 {
        let p = p.clone();
        set.spawn(async move {
            let out = call(p.as_ref(), "echo", json!({"message": format!("m{i}")})).await.unwrap();
            assert_eq!(out.structured_content, Some(json!({"message": format!("m{i}")})));
        });
    }
    let mut n = 0;
    while let Some(r) = set.join_next().await {
        r.unwrap();
        n += 1;
    }
    assert_eq!(n, 100);
}

/// A one-shot HTTP/1.1 server on 127.0.0.1 that answers every request with a fixed body and
/// reports the Host header it saw.
async fn http_server() -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let host = head
                .lines()
                .find_map(|l| l.strip_prefix("host: ").or_else(|| l.strip_prefix("Host: ")))
                .unwrap_or_default()
                .to_string();
            let _ = tx.send(host);
            let body = "hello from the test server";
            let resp = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    (port, rx)
}

#[tokio::test]
async fn http_is_allowed_only_to_granted_domains() {
    let (port, mut seen) = http_server().await;
    let mut grants = WasmGrants { net: vec!["api.example.test".into()], ..Default::default() };
    grants.resolve_override.insert("api.example.test".into(), format!("127.0.0.1:{port}").parse().unwrap());
    grants.resolve_override.insert("evil.example.test".into(), format!("127.0.0.1:{port}").parse().unwrap());
    let p = provider("hello", grants).await;

    let out = call(&p, "fetch", json!({"url": format!("http://api.example.test:{port}/x")})).await.unwrap();
    assert!(!out.is_error, "{out:?}");
    let v = out.structured_content.unwrap();
    assert_eq!(v["status"], 200);
    assert_eq!(v["body"], "hello from the test server");
    assert_eq!(seen.recv().await.unwrap(), format!("api.example.test:{port}"));

    // Not granted: refused before any connection (the server sees nothing).
    let out = call(&p, "fetch", json!({"url": format!("http://evil.example.test:{port}/x")})).await.unwrap();
    assert!(out.is_error, "{out:?}");
    assert!(out.joined_text().contains("HttpRequestDenied"), "{}", out.joined_text());
    let out = call(&p, "fetch", json!({"url": format!("http://127.0.0.1:{port}/x")})).await.unwrap();
    assert!(out.is_error && out.joined_text().contains("HttpRequestDenied"), "{out:?}");
    assert!(seen.try_recv().is_err(), "a denied request reached the server");
}

/// The call's deadline holds while the plugin waits in a host call: a server that accepts the
/// request and never answers ends the call at `call_timeout` (500 ms here), not at the
/// 600 s HTTP timeout, and the connection is dropped with it.
#[tokio::test]
async fn a_call_waiting_for_an_http_answer_that_never_comes_ends_at_its_deadline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (closed_tx, mut closed) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let tx = closed_tx.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                // Read the request, answer nothing, and report when the client hangs up.
                let mut buf = [0u8; 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                let _ = tx.send(());
            });
        }
    });
    let mut grants = WasmGrants { net: vec!["slow.example.test".into()], ..Default::default() };
    grants.resolve_override.insert("slow.example.test".into(), format!("127.0.0.1:{port}").parse().unwrap());
    let p = provider("hello", grants).await;
    let started = std::time::Instant::now();
    let err = call(&p, "fetch", json!({"url": format!("http://slow.example.test:{port}/never")})).await.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "the call ended after {:?}", started.elapsed());
    tokio::time::timeout(Duration::from_secs(5), closed.recv())
        .await
        .expect("the plugin's connection is closed when its call ends")
        .unwrap();
}

#[tokio::test]
async fn cancellation_drops_the_instance() {
    let p = provider("hostile", WasmGrants::default()).await;
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c2.cancel();
    });
    let t = Instant::now();
    let err = p
        .call(ToolCall { tool: "spin".into(), arguments: Default::default(), meta: None }, Arc::new(NullSink), cancel)
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::Cancelled), "{err}");
    assert!(t.elapsed() < Duration::from_millis(400), "{:?}", t.elapsed());
}

/// A real `axp-egress-proxy` on a UNIX socket allowing `allow`; with `waive_loopback` it may
/// reach 127.0.0.0/8 (which it refuses by default, like every private address).
async fn egress_proxy(dir: &std::path::Path, allow: &str, waive_loopback: bool) -> std::path::PathBuf {
    use axp_egress_proxy::{Policy, Proxy, ProxyConfig};
    let sock = dir.join("proxy.sock");
    let cfg = ProxyConfig {
        listen_unix: vec![sock.clone()],
        policy: Policy {
            allow: vec![allow.parse().unwrap()],
            dangerously_allow_private: if waive_loopback { vec!["127.0.0.0/8".parse().unwrap()] } else { vec![] },
            ..Policy::default()
        },
        audit: Some(dir.join("audit.jsonl")),
        ..ProxyConfig::default()
    };
    let proxy = Proxy::bind(cfg).await.unwrap();
    tokio::spawn(proxy.run(std::future::pending::<()>()));
    sock
}

#[tokio::test]
async fn http_goes_through_the_egress_proxy_and_its_policy() {
    let (port, mut seen) = http_server().await;
    let target = format!("127.0.0.1:{port}");
    let url = format!("http://{target}/via-proxy");

    // The proxy allows it: the request reaches the upstream through the proxy.
    let open = tempfile::tempdir().unwrap();
    let grants = WasmGrants {
        net: vec![target.clone()],
        egress_proxy: Some(egress_proxy(open.path(), &target, true).await),
        ..Default::default()
    };
    let p = provider("hello", grants).await;
    let out = call(&p, "fetch", json!({"url": url})).await.unwrap();
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.structured_content.unwrap()["body"], "hello from the test server");
    assert_eq!(seen.recv().await.unwrap(), target);
    let audit = audit_containing(&open.path().join("audit.jsonl"), &port.to_string()).await;
    assert!(audit.contains(&port.to_string()), "the proxy saw and recorded it: {audit}");

    // Same grant in the host, but the proxy's own checks refuse loopback: nothing goes around
    // the proxy, for plain HTTP or for HTTPS (CONNECT).
    let strict = tempfile::tempdir().unwrap();
    let grants = WasmGrants {
        net: vec![target.clone()],
        egress_proxy: Some(egress_proxy(strict.path(), &target, false).await),
        ..Default::default()
    };
    let p = provider("hello", grants).await;
    let out = call(&p, "fetch", json!({"url": url})).await.unwrap();
    let v = out.structured_content.clone().unwrap_or_default();
    assert!(out.is_error || v["status"] == 403, "{out:?}");
    let out = call(&p, "fetch", json!({"url": format!("https://{target}/x")})).await.unwrap();
    assert!(out.is_error && out.joined_text().contains("HttpRequestDenied"), "{out:?}");
    assert!(seen.try_recv().is_err(), "a request refused by the proxy reached the server");
    let audit = audit_containing(&strict.path().join("audit.jsonl"), "deny").await;
    assert!(audit.contains("deny"), "{audit}");
}

/// The proxy's audit file once it holds `needle` (or after 5 s): the proxy writes a record when
/// the connection ends, from its own writer thread, so a test reading at once would race it.
async fn audit_containing(path: &std::path::Path, needle: &str) -> String {
    let mut text = String::new();
    for _ in 0..100 {
        text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    text
}

/// `fs-reader` (a fixture of this crate) with `preopens`, reading `path`: the file's text, or
/// the tool's error message.
async fn read_file(p: &dyn Provider, path: &str) -> Result<String, String> {
    let out = call(p, "read", json!({"path": path})).await.unwrap();
    if out.is_error {
        return Err(out.joined_text());
    }
    Ok(out.structured_content.unwrap()["text"].as_str().unwrap().to_string())
}

async fn fs_reader(preopens: Vec<(std::path::PathBuf, String)>) -> Result<WasmProvider, axp_plugin_host::WasmError> {
    let runtime = axp_plugin_host::WasmRuntime::new(limits()).unwrap();
    WasmProvider::new(&runtime, "fs-reader", &fixture_wasm("fs-reader"), WasmGrants { preopens, ..Default::default() })
        .await
}

/// A workspace with a granted `data/note.txt` and an ungranted `secret/note.txt`.
fn workspace_with_a_secret() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("data")).unwrap();
    std::fs::write(ws.path().join("data/note.txt"), "public note").unwrap();
    std::fs::create_dir(ws.path().join("secret")).unwrap();
    std::fs::write(ws.path().join("secret/note.txt"), "TOP SECRET").unwrap();
    ws
}

/// The attack: whoever can write in the workspace (an agent's sandboxed job, say) moves the
/// granted directory away between two calls and puts a symbolic link to another directory in
/// its place. The grant is the directory opened when the plugin was loaded, so the next call
/// still reads that directory (wherever it now is) and never the link's target.
#[tokio::test]
async fn a_granted_directory_swapped_for_a_symlink_between_calls_exposes_nothing_else() {
    let ws = workspace_with_a_secret();
    let data = ws.path().canonicalize().unwrap().join("data");
    std::os::unix::fs::symlink("../secret/note.txt", data.join("escape")).unwrap();
    let p = fs_reader(vec![(data.clone(), "data".into())]).await.unwrap();
    assert_eq!(read_file(&p, "data/note.txt").await.unwrap(), "public note");
    // A link inside the grant that points out of it does not lead out either.
    let err = read_file(&p, "data/escape").await.unwrap_err();
    assert!(!err.contains("TOP SECRET"), "{err}");

    std::fs::rename(&data, ws.path().join("data-moved")).unwrap();
    std::os::unix::fs::symlink(ws.path().join("secret"), &data).unwrap();
    assert_eq!(std::fs::read_to_string(data.join("note.txt")).unwrap(), "TOP SECRET", "the swap is in place");
    let read = read_file(&p, "data/note.txt").await;
    assert_eq!(read, Ok("public note".to_string()), "the plugin read through the swapped-in link");
    // Every later call too: each instance gets the same open directory.
    for _ in 0..3 {
        assert_eq!(read_file(&p, "data/note.txt").await, Ok("public note".to_string()));
    }
}

/// A grant is opened without following any symbolic link, in any component of its path: the
/// installer grants canonical paths, so a link there means the tree changed under it.
#[tokio::test]
async fn a_granted_directory_reached_through_a_symlink_is_refused_at_load() {
    let ws = workspace_with_a_secret();
    let root = ws.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(root.join("secret"), root.join("link")).unwrap();
    std::fs::create_dir(root.join("secret/inner")).unwrap();
    for granted in [root.join("link"), root.join("link/inner")] {
        let err = fs_reader(vec![(granted.clone(), "data".into())]).await.unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{}: {err}", granted.display());
        assert!(err.contains(&root.join("link").display().to_string()), "{err}");
    }
    // The same directories by their real paths load and read.
    let p = fs_reader(vec![(root.join("data"), "data".into())]).await.unwrap();
    assert_eq!(read_file(&p, "data/note.txt").await.unwrap(), "public note");
}
