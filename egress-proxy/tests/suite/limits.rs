//! Limits: the connection cap, byte budget and idle timeout of an instance (or of the instances
//! sharing one `Budget`, as one session's do). Each exhaustion is refused with its own audit
//! reason.

use std::time::Duration;

use axp_egress_proxy::Budget;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fixtures::*;

#[tokio::test]
async fn the_byte_budget_cuts_a_download_and_refuses_what_follows() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let mut cfg = config(&dns, GRANTS, &[], true);
    cfg.max_bytes = Some(20_000);
    let p = TestProxy::start(cfg).await;
    let url = format!("http://bulk.test:{}/bytes/100000", up.addr.port());
    let (_, out, _) = curl(&["-x", &proxy_url(p.addr), &url]).await;
    assert!(out.len() < 20_000, "{}", out.len());
    let r = p.record(0).await;
    assert_eq!((r["decision"].as_str(), r["end"].as_str()), (Some("allow"), Some("byte_limit")), "{r}");
    let total = r["bytes_up"].as_u64().unwrap() + r["bytes_down"].as_u64().unwrap();
    assert_eq!(total, 20_000, "{r}");
    let (_, out, _) = curl(&["-x", &proxy_url(p.addr), "-w", "%{http_code}", "-o", "/dev/null", &url]).await;
    assert_eq!(out, "503");
    p.assert_denied(1, "byte_limit").await;
}

/// The same cut in the middle of a download that has gone over to `splice(2)` (past its first
/// 64 KiB), over plain HTTP and through a tunnel: exactly the budget passes, not a pipe's worth
/// more.
#[tokio::test]
async fn the_byte_budget_cuts_a_spliced_download_exactly() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    for tunnel in [false, true] {
        let mut cfg = config(&dns, GRANTS, &[], true);
        cfg.max_bytes = Some(1_500_000);
        let p = TestProxy::start(cfg).await;
        let url = format!("http://bulk.test:{}/bytes/4000000", up.addr.port());
        let proxy = proxy_url(p.addr);
        let mut args = vec!["-x", &proxy, &url];
        if tunnel {
            args.insert(0, "-p");
        }
        let (_, out, _) = curl(&args).await;
        assert!(out.len() < 1_500_000 && out.len() > 1_000_000, "{}", out.len());
        let r = p.record(0).await;
        assert_eq!((r["decision"].as_str(), r["end"].as_str()), (Some("allow"), Some("byte_limit")), "{r}");
        let total = r["bytes_up"].as_u64().unwrap() + r["bytes_down"].as_u64().unwrap();
        assert_eq!(total, 1_500_000, "{r}");
    }
}

#[tokio::test]
async fn instances_sharing_a_budget_spend_it_together() {
    // One owner (a session) with two allowlists gets two instances and one budget: bytes spent
    // through the first are gone for the second, and connections held on the first count
    // against the second's cap.
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let budget = Budget::new(1, Some(20_000));
    let mut a = config(&dns, &["bulk.test"], &[], true);
    a.budget = Some(budget.clone());
    let mut b = config(&dns, &["allowed.test"], &[], true);
    b.budget = Some(budget.clone());
    let (a, b) = (TestProxy::start(a).await, TestProxy::start(b).await);
    let port = up.addr.port();
    // A tunnel held open on `a` takes the only connection.
    let mut held = TcpStream::connect(a.addr).await.unwrap();
    held.write_all(format!("CONNECT bulk.test:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut resp = [0u8; 39];
    held.read_exact(&mut resp).await.unwrap();
    assert!(resp.starts_with(b"HTTP/1.1 200"));
    let st = raw_status(b.addr, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
    assert!(st.starts_with("HTTP/1.1 503"), "{st}");
    b.assert_denied(0, "connection_limit").await;
    drop(held);
    a.wait_records(1).await;
    // The download through `a` spends the whole byte budget…
    let (_, out, _) = curl(&["-x", &proxy_url(a.addr), &format!("http://bulk.test:{port}/bytes/100000")]).await;
    assert!(out.len() < 20_000, "{}", out.len());
    assert_eq!(budget.bytes_used(), 20_000);
    // …so `b`, with its own allowlist, has none left.
    let url = format!("http://allowed.test:{port}/");
    let (_, out, _) = curl(&["-x", &proxy_url(b.addr), "-w", "%{http_code}", "-o", "/dev/null", &url]).await;
    assert_eq!(out, "503");
    b.assert_denied(1, "byte_limit").await;
}

#[tokio::test]
async fn the_connection_cap_refuses_the_next_connection() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let mut cfg = config(&dns, GRANTS, &[], true);
    cfg.max_connections = 2;
    let p = TestProxy::start(cfg).await;
    let port = up.addr.port();
    // Two tunnels held open (the upstream waits for a request that never comes).
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let mut resp = [0u8; 39];
        s.read_exact(&mut resp).await.unwrap();
        assert!(resp.starts_with(b"HTTP/1.1 200"));
        held.push(s);
    }
    let st = raw_status(p.addr, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n")).await;
    assert!(st.starts_with("HTTP/1.1 503"), "{st}");
    p.assert_denied(2, "connection_limit").await;
    drop(held);
    // Once they close, a new connection is accepted again.
    p.wait_records(3).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let url = format!("http://allowed.test:{port}/again");
    let (code, out, err) = curl(&["-x", &proxy_url(p.addr), &url]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("/again"));
}

#[tokio::test]
async fn an_idle_tunnel_is_closed() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let mut cfg = config(&dns, GRANTS, &[], true);
    cfg.idle_timeout = Duration::from_millis(300);
    let p = TestProxy::start(cfg).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(format!("CONNECT allowed.test:{} HTTP/1.1\r\n\r\n", up.addr.port()).as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await.unwrap().unwrap();
    let r = p.record(0).await;
    assert_eq!(r["end"], "idle_timeout", "{r}");
}

/// An upstream that answers slowly: a response head with no length (`head`, if given), then
/// `n` bytes one every `every`; then it holds the connection open without a word until the
/// other side closes it.
async fn trickling_upstream(head: &'static [u8], n: usize, every: Duration) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind((UP_IP, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let Ok((mut s, _)) = l.accept().await else { return };
        if s.write_all(head).await.is_err() {
            return;
        }
        for _ in 0..n {
            tokio::time::sleep(every).await;
            if s.write_all(b".").await.is_err() {
                return;
            }
        }
        let mut sink = [0u8; 1024];
        while matches!(s.read(&mut sink).await, Ok(k) if k > 0) {}
    });
    addr
}

/// The idle timeout counts from the last byte moved, not from the start: a response that
/// trickles in for four times the timeout is relayed whole, and the connection is closed only
/// once the upstream falls silent.
#[tokio::test]
async fn the_idle_timeout_waits_while_bytes_move_down_and_fires_after() {
    let dns = Dns::start().await;
    let up = trickling_upstream(b"HTTP/1.1 200 OK\r\n\r\n", 12, Duration::from_millis(100)).await;
    let mut cfg = config(&dns, GRANTS, &[], true);
    cfg.idle_timeout = Duration::from_millis(300);
    let p = TestProxy::start(cfg).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let port = up.port();
    let head = format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    let head = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
    assert_eq!(out, [&head[..], &[b'.'; 12]].concat(), "{}", String::from_utf8_lossy(&out));
    let r = p.record(0).await;
    assert_eq!(r["end"], "idle_timeout", "{r}");
    assert_eq!(r["bytes_down"], out.len(), "{r}");
    // 12 bytes 100 ms apart, then 300 ms of silence.
    assert!(r["duration_ms"].as_u64().unwrap() >= 1400, "{r}");
}

/// The same for bytes the client sends up a tunnel while the upstream says nothing: the
/// tunnel stays open as long as they keep coming, and closes normally when the client ends it.
#[tokio::test]
async fn the_idle_timeout_waits_while_bytes_move_up() {
    let dns = Dns::start().await;
    let up = trickling_upstream(b"", 0, Duration::ZERO).await;
    let mut cfg = config(&dns, GRANTS, &[], true);
    cfg.idle_timeout = Duration::from_millis(300);
    let p = TestProxy::start(cfg).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(format!("CONNECT allowed.test:{} HTTP/1.1\r\n\r\n", up.port()).as_bytes()).await.unwrap();
    let mut ok = [0u8; 39];
    s.read_exact(&mut ok).await.unwrap();
    assert!(ok.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&ok));
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.write_all(b"x").await.unwrap();
    }
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    let r = p.record(0).await;
    assert_eq!(r["end"], "closed", "{r}");
    assert_eq!((r["inner"].as_str(), r["bytes_up"].as_u64()), (Some("opaque"), Some(12)), "{r}");
    assert!(r["duration_ms"].as_u64().unwrap() >= 1200, "{r}");
}

/// A client that stops reading while the upstream keeps sending: once the socket buffers are
/// full the proxy's write to the client moves nothing, which counts as idle, so the tunnel is
/// closed after the idle timeout instead of holding its connection (and a slot of the cap) for
/// as long as the client likes.
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_after_the_idle_timeout() {
    let dns = Dns::start().await;
    let l = tokio::net::TcpListener::bind((UP_IP, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let Ok((mut s, _)) = l.accept().await else { return };
        let chunk = vec![b'z'; 64 << 10];
        // Bounded: 256 MiB at most, far past any socket buffer, stops at the first error.
        for _ in 0..4096 {
            if s.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut cfg = config(&dns, GRANTS, &[], true);
    cfg.idle_timeout = Duration::from_millis(300);
    let p = TestProxy::start(cfg).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(format!("CONNECT allowed.test:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let mut ok = [0u8; 39];
    s.read_exact(&mut ok).await.unwrap();
    assert!(ok.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&ok));
    // Read nothing more; the record must come anyway.
    let r =
        tokio::time::timeout(Duration::from_secs(10), p.record(0)).await.expect("the stalled tunnel was never closed");
    assert_eq!(r["end"], "idle_timeout", "{r}");
    assert!(r["bytes_down"].as_u64().unwrap() > 0, "{r}");
    drop(s);
}

/// A proxy that cannot start leaves no socket file behind: not when its audit file cannot be
/// opened (checked before anything is bound), and not when a later listener fails after an
/// earlier one was bound (the bound ones are removed again).
#[tokio::test]
async fn a_failed_start_leaves_no_socket_behind() {
    use axp_egress_proxy::{Proxy, ProxyConfig};
    let tmp = tempfile::tempdir().unwrap();
    let first = tmp.path().join("first.sock");
    let cfg = ProxyConfig {
        listen_unix: vec![first.clone()],
        audit: Some(tmp.path().join("no-such-dir").join("audit.jsonl")),
        ..ProxyConfig::default()
    };
    assert!(Proxy::bind(cfg).await.is_err());
    assert!(!first.exists(), "an unusable audit file left {} behind", first.display());

    let cfg = ProxyConfig {
        listen_unix: vec![first.clone(), tmp.path().join("no-such-dir").join("second.sock")],
        ..ProxyConfig::default()
    };
    let Err(err) = Proxy::bind(cfg).await else { panic!("the second socket cannot be bound") };
    assert!(err.to_string().contains("second.sock"), "{err}");
    assert!(!first.exists(), "a failed second listener left {} behind", first.display());
}
