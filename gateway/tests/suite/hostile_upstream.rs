//! Remote MCP servers that attack the gateway's memory: a server that, once connected, streams an
//! SSE event that never ends. Both HTTP transports must stop reading at the per-event cap
//! (16 MiB: rmcp's `max_sse_event_size` for Streamable HTTP, `mcp::sse::MAX_EVENT_BYTES` for
//! legacy SSE), mark the provider unavailable, and keep the gateway serving with bounded memory.
//! The servers here are raw loopback listeners that speak just enough HTTP/1.1 and MCP to get to
//! the attack; each counts the bytes the gateway actually accepted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// What the flood tries to send per connection: far beyond any cap, so that a gateway without
/// one would visibly hold it.
const FLOOD: u64 = 512 << 20;

/// Bytes of flood the gateway has taken: over all its connections, and the most on one.
#[derive(Default)]
struct Counts {
    total: AtomicU64,
    most: AtomicU64,
}
type Taken = Arc<Counts>;

/// Reads one request (head and `Content-Length` body); `None` when the peer closed.
async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut tmp).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match sock.read(&mut tmp).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
    let body = buf[head_end..head_end + len].to_vec();
    buf.drain(..head_end + len);
    Some((head, body))
}

/// Writes `data: ` and then an endless run of `x` (no line end, so the event never completes)
/// until [`FLOOD`] bytes or the gateway stops reading, counting what the kernel accepted.
async fn flood(sock: &mut TcpStream, taken: &Taken) {
    if sock.write_all(b"data: ").await.is_err() {
        return;
    }
    let chunk = vec![b'x'; 256 << 10];
    let mut sent = 0;
    while sent < FLOOD {
        match tokio::time::timeout(Duration::from_secs(5), sock.write_all(&chunk)).await {
            Ok(Ok(())) => {
                sent += chunk.len() as u64;
                taken.total.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                taken.most.fetch_max(sent, Ordering::Relaxed);
            }
            // Closed by the gateway, or it stopped reading: either way the attack is over.
            _ => return,
        }
    }
}

/// Listens on a free loopback port and runs `conn` on each connection, with the flood counters.
async fn listen<F, Fut>(conn: F) -> (u16, Taken)
where
    F: Fn(TcpStream, Taken) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let taken: Taken = Arc::default();
    let t = taken.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(conn(sock, t.clone()));
        }
    });
    (port, taken)
}

/// A Streamable HTTP MCP server that answers `initialize` properly and every `tools/list` with
/// an SSE response whose first event never ends.
async fn streamable_flooder() -> (u16, Taken) {
    listen(|mut sock, taken| async move {
        let mut buf = Vec::new();
        while let Some((head, body)) = read_request(&mut sock, &mut buf).await {
            let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let reply = if !head.starts_with("post ") {
                // No server-initiated stream (GET) and nothing to delete.
                "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n".to_string()
            } else if msg["method"] == "initialize" {
                let result = json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "protocolVersion": msg["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "flooder", "version": "1"}}})
                .to_string();
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: s1\r\nContent-Length: {}\r\n\r\n{result}",
                    result.len()
                )
            } else if msg.get("id").is_none() {
                "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n".to_string()
            } else {
                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
                if sock.write_all(head.as_bytes()).await.is_ok() {
                    flood(&mut sock, &taken).await;
                }
                return;
            };
            if sock.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
        }
    })
    .await
}

/// A legacy HTTP+SSE MCP server whose stream sends its `endpoint` event and then an event that
/// never ends (the client is still waiting for the `initialize` answer on that stream).
async fn legacy_flooder() -> (u16, Taken) {
    listen(|mut sock, taken| async move {
        let mut buf = Vec::new();
        let Some((head, _)) = read_request(&mut sock, &mut buf).await else { return };
        if head.starts_with("get ") {
            let open = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\nevent: endpoint\ndata: /message\n\n";
            if sock.write_all(open.as_bytes()).await.is_ok() {
                // Give the client time to POST `initialize`, then answer with the flood.
                tokio::time::sleep(Duration::from_millis(200)).await;
                flood(&mut sock, &taken).await;
            }
        } else {
            let _ = sock.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n").await;
        }
    })
    .await
}

/// Peak resident memory of a process (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches(" kB");
    kb.trim().parse::<u64>().unwrap() * 1024
}

async fn provider_state(gw: &Gw, id: &str) -> Value {
    let h: Value = reqwest::get(format!("{}/healthz", gw.base)).await.unwrap().json().await.unwrap();
    h["providers"].as_array().unwrap().iter().find(|p| p["id"] == id).cloned().unwrap_or(Value::Null)
}

/// Starts a gateway on a one-server fleet, lets the flooder hit it until it has refused at least
/// two floods (the supervisor reconnects with backoff), and checks the outcome.
async fn survives(server: Value, taken: &Taken) {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(tmp.path(), json!({"flood": server}));
    let gw = gateway().fleet(&fleet).start();
    let pid = gw.child.id();
    // The cap is 16 MiB per event; a few MiB more sit in socket buffers. Wait for two attempts.
    for _ in 0..150 {
        if taken.total.load(Ordering::Relaxed) >= 32 << 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (took, most) = (taken.total.load(Ordering::Relaxed), taken.most.load(Ordering::Relaxed));
    assert!(took >= 16 << 20, "the flood never reached the cap ({took} bytes): the test did not attack");
    let p = provider_state(&gw, "flood").await;
    assert_eq!(p["available"], false, "{p}");
    // The gateway kept serving, and never held anything near a whole flood.
    let (code, _) = Rpc::new(&gw.url).err("tools/call", json!({"name": "flood__x", "arguments": {}})).await;
    assert_ne!(code, 0);
    let peak = peak_rss(pid);
    // Against the same binary idle (its own pages and the built-in catalog), so that the bound
    // is about the flood and not about how large a debug build is: 112 MiB of growth covers a
    // capped 16 MiB event read twice and what socket buffers hold, far from the 512 MiB flood.
    let idle = gateway().start();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = peak_rss(idle.child.id());
    assert!(
        peak < base + (112 << 20),
        "the gateway's peak RSS reached {} MiB, {} MiB over an idle gateway",
        peak >> 20,
        (peak - base.min(peak)) >> 20
    );
    // Each connection was cut near the cap: 16 MiB of event plus what socket buffers hold,
    // never the 512 MiB the server tried to send.
    assert!(most < 48 << 20, "one connection took {} MiB of a single event", most >> 20);
}

// Multi-threaded: the listeners must answer while the test thread blocks starting the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_event_from_a_streamable_http_server_is_cut_at_the_cap() {
    let (port, taken) = streamable_flooder().await;
    survives(json!({"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")}), &taken).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_event_from_a_legacy_sse_server_is_cut_at_the_cap() {
    let (port, taken) = legacy_flooder().await;
    survives(json!({"type": "sse", "url": format!("http://127.0.0.1:{port}/sse")}), &taken).await;
}
