//! Upstream connections kept between plain-HTTP requests: which requests may take one, what
//! keeps one from being kept, and that reuse never skips a check, never crosses destinations,
//! and never carries bytes from one response into another. Each test runs a real HTTP/1.1
//! origin with persistent connections (`persistent_upstream`) whose answers name the
//! connection and request number that carried them.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fixtures::*;

/// Sends `req` to the proxy on a fresh connection and reads the answer to its end.
async fn fetch(p: &TestProxy, req: &str) -> String {
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    String::from_utf8(out).unwrap()
}

fn get(host: &str, port: u16, path: &str) -> String {
    format!("GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
}

/// The body of an answer from `fetch`, checked to be a 200 with `Connection: close`.
fn body(resp: &str) -> &str {
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head: {resp:?}"));
    assert!(head.starts_with("HTTP/1.1 200 "), "{resp}");
    assert!(head.contains("\r\nConnection: close"), "the client is told the connection ends: {head}");
    body
}

#[tokio::test]
async fn sequential_requests_share_one_upstream_connection_each_checked_and_audited() {
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    let url = format!("http://allowed.test:{port}/hello");
    for req in 1..=3 {
        let (code, out, err) = curl(&["-x", &proxy_url(p.addr), &url]).await;
        assert_eq!(code, 0, "{err}");
        assert_eq!(out, format!("upstream ka: /hello conn=1 req={req}\n"));
    }
    // A denied request in between is refused as ever and leaves the kept connection alone.
    let denied = fetch(&p, &get("evil.test", port, "/x")).await;
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/hello")).await), "upstream ka: /hello conn=1 req=4\n");
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 1);
    for (conn, reused) in [(0, false), (1, true), (2, true), (4, true)] {
        let r = p.record(conn).await;
        assert_eq!((r["decision"].as_str(), r["addr"].as_str()), (Some("allow"), Some(&*up.addr.to_string())), "{r}");
        assert_eq!(r["reused"].as_bool().unwrap_or(false), reused, "{r}");
        assert_eq!(r["end"], "closed", "{r}");
    }
    p.assert_denied(3, "not_granted").await;
    // The upstream got persistent HTTP/1.1 requests in origin-form, with no proxy headers.
    let raw = String::from_utf8(up.seen.raw.lock().unwrap()[1].clone()).unwrap();
    assert!(raw.starts_with("GET /hello HTTP/1.1\r\n"), "{raw}");
    assert!(!raw.to_ascii_lowercase().contains("connection:"), "{raw}");
    assert!(!raw.to_ascii_lowercase().contains("proxy-"), "{raw}");
}

#[tokio::test]
async fn other_destinations_and_requests_with_bodies_get_their_own_connections() {
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/a")).await), "upstream ka: /a conn=1 req=1\n");
    // Another granted name at the same address: its own connection, never the first name's.
    assert_eq!(body(&fetch(&p, &get("a.sub.test", port, "/b")).await), "upstream ka: /b conn=2 req=1\n");
    // A request with a body never takes a kept connection (it could not be sent again if the
    // origin had closed it), and asks the origin to close after it, so its connection is not
    // kept either.
    let post = format!(
        "POST http://allowed.test:{port}/post HTTP/1.1\r\nHost: allowed.test:{port}\r\nContent-Length: 3\r\n\r\nabc"
    );
    assert_eq!(body(&fetch(&p, &post).await), "upstream ka: /post conn=3 req=1\n");
    let raw = up.seen.raw.lock().unwrap()[2].clone();
    assert!(raw.ends_with(b"\r\nConnection: close\r\n\r\nabc"), "{}", String::from_utf8_lossy(&raw));
    // An HTTP/1.0 GET may take a kept connection, but asks the origin to close it after.
    let old = format!("GET http://allowed.test:{port}/old HTTP/1.0\r\n\r\n");
    assert_eq!(body(&fetch(&p, &old).await), "upstream ka: /old conn=1 req=2\n");
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/c")).await), "upstream ka: /c conn=4 req=1\n");
    assert_eq!(body(&fetch(&p, &get("a.sub.test", port, "/d")).await), "upstream ka: /d conn=2 req=2\n");
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 4);
}

/// A parser differential on a request body: this origin does not implement chunked bodies, so
/// on a persistent connection it would read the chunk's bytes as a second request, one the
/// proxy never checked (here for a host it does not grant). A request with a body asks the
/// origin to close after it, so the origin never reads past its first request.
#[tokio::test]
async fn a_body_the_origin_reads_differently_never_becomes_a_second_request() {
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    let smuggled = "GET /smuggled HTTP/1.1\r\nHost: evil.test\r\n\r\n";
    let put = format!(
        "PUT http://allowed.test:{port}/put HTTP/1.1\r\nHost: allowed.test:{port}\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{smuggled}\r\n0\r\n\r\n",
        smuggled.len()
    );
    assert_eq!(body(&fetch(&p, &put).await), "upstream ka: /put conn=1 req=1\n");
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/next")).await), "upstream ka: /next conn=2 req=1\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = up.seen.raw.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "the origin read a request nobody checked: {seen:?}");
    assert!(!seen.iter().any(|r| String::from_utf8_lossy(r).contains("smuggled")), "{seen:?}");
}

#[tokio::test]
async fn a_connection_the_origin_closed_is_replaced_and_the_request_still_answered() {
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    // The origin closes after answering, without saying so: the kept connection is seen to be
    // closed before it is used.
    assert_eq!(
        body(&fetch(&p, &get("allowed.test", port, "/then-close")).await),
        "upstream ka: /then-close conn=1 req=1\n"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/x")).await), "upstream ka: /x conn=2 req=1\n");
    // The origin closes as the next request arrives on a kept connection (an origin's timeout
    // racing the request): the proxy sends the bodiless GET again on a fresh connection.
    assert_eq!(
        body(&fetch(&p, &get("allowed.test", port, "/then-drop-next")).await),
        "upstream ka: /then-drop-next conn=2 req=2\n"
    );
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/y")).await), "upstream ka: /y conn=3 req=1\n");
    let r = p.record(3).await;
    assert_eq!((r["decision"].as_str(), r["reused"].as_bool()), (Some("allow"), None), "{r}");
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_forged_second_response_reaches_no_one() {
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    // The origin sends a second response straight after the first one's body. The client gets
    // exactly the first; the connection, with bytes nobody asked for, is not kept, so the next
    // request cannot be answered with the forged one.
    let first = fetch(&p, &get("allowed.test", port, "/split")).await;
    assert_eq!(body(&first), "upstream ka: /split conn=1 req=1\n");
    let second = fetch(&p, &get("allowed.test", port, "/next")).await;
    assert_eq!(body(&second), "upstream ka: /next conn=2 req=1\n");
    assert!(!first.contains("forged") && !second.contains("forged"));
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn chunked_head_and_close_delimited_responses_end_where_their_framing_says() {
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    let url = |path: &str| format!("http://allowed.test:{port}{path}");
    // Chunked: relayed as chunks (curl decodes them), and the connection kept after the last.
    let (code, out, err) = curl(&["-x", &proxy_url(p.addr), &url("/chunked")]).await;
    assert_eq!((code, out.as_str()), (0, "upstream ka: /chunked conn=1 req=1\n"), "{err}");
    // HEAD: the length a GET would have, no body, and the connection kept.
    let (code, out, err) = curl(&["-x", &proxy_url(p.addr), "-I", &url("/h")]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Content-Length: 29"), "{out}");
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/after")).await), "upstream ka: /after conn=1 req=3\n");
    // No length: only the origin's close ends the body, so that connection is not kept.
    let (code, out, err) = curl(&["-x", &proxy_url(p.addr), &url("/until-close")]).await;
    assert_eq!((code, out.as_str()), (0, "upstream ka: /until-close conn=1 req=4\n"), "{err}");
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/last")).await), "upstream ka: /last conn=2 req=1\n");
}

/// A long body goes through the proxy's pipe (`splice(2)`) after its first 64 KiB, and the pipe
/// never takes more than the rest of its `Content-Length`: the body arrives whole and the
/// connection, at the exact end of the message, carries the next request.
#[tokio::test]
async fn a_spliced_body_ends_at_its_length_and_its_connection_is_kept() {
    const N: usize = 3 << 20;
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(get("allowed.test", port, &format!("/pattern/{N}")).as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    let end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(out[end..] == pattern(N), "{} body bytes", out.len() - end);
    assert_eq!(body(&fetch(&p, &get("allowed.test", port, "/next")).await), "upstream ka: /next conn=1 req=2\n");
}

#[tokio::test]
async fn an_interim_100_continue_is_relayed_before_the_body_is_sent() {
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let head = format!(
        "PUT http://allowed.test:{port}/put HTTP/1.1\r\nHost: allowed.test:{port}\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut interim = [0u8; 25];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut interim)).await.unwrap().unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"hello").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    assert_eq!(body(&String::from_utf8(out).unwrap()), "upstream ka: /put conn=1 req=1\n");
    assert!(up.seen.raw.lock().unwrap()[0].ends_with(b"\r\n\r\nhello"));
}

/// An origin that answers every connection with `answer` and closes.
async fn answering(answer: &'static [u8]) -> std::net::SocketAddr {
    let l = tokio::net::TcpListener::bind((UP_IP, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut b = [0u8; 4096];
            let _ = s.read(&mut b).await;
            let _ = s.write_all(answer).await;
            let _ = s.shutdown().await;
        }
    });
    addr
}

#[tokio::test]
async fn a_response_that_is_not_http_or_frames_its_body_two_ways_is_a_502() {
    let dns = Dns::start().await;
    let p = TestProxy::default_for(&dns).await;
    let cases: [(&[u8], &str); 3] = [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "upstream_malformed"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
            "upstream_malformed",
        ),
        (b"", "upstream_failed"),
    ];
    for (conn, (answer, reason)) in cases.into_iter().enumerate() {
        let up = answering(answer).await;
        let resp = fetch(&p, &get("allowed.test", up.port(), "/")).await;
        assert!(resp.starts_with("HTTP/1.1 502 "), "{resp}");
        assert!(resp.contains(&format!("X-Axp-Deny-Reason: {reason}\r\n")), "{resp}");
        assert!(!resp.contains("abc") && !resp.contains("SSH"), "{resp}");
        let r = p.record(conn as u64).await;
        assert_eq!((r["decision"].as_str(), r["reason"].as_str()), (Some("error"), Some(reason)), "{r}");
    }
}

/// `rebind.test` answers REBIND_A and REBIND_B in turn (TTL 0); only A is waived. A connection
/// kept to A is taken only by a request whose own lookup answered A: the lookup in between,
/// which answers B, is refused although a connection to the same name is kept.
#[tokio::test]
async fn a_kept_connection_is_taken_only_after_a_fresh_lookup_passes() {
    let dns = Dns::start().await;
    let up = persistent_upstream(REBIND_A, "A").await;
    let mut cfg = config(&dns, &["rebind.test"], &[], false);
    cfg.policy.dangerously_allow_private = vec!["127.0.0.3/32".parse().unwrap()];
    let p = TestProxy::start(cfg).await;
    let port = up.addr.port();
    assert_eq!(body(&fetch(&p, &get("rebind.test", port, "/1")).await), "upstream A: /1 conn=1 req=1\n");
    let refused = fetch(&p, &get("rebind.test", port, "/2")).await;
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    p.assert_denied(1, "refused_address").await;
    assert_eq!(body(&fetch(&p, &get("rebind.test", port, "/3")).await), "upstream A: /3 conn=1 req=2\n");
    assert_eq!(dns.a_queries("rebind.test"), 3, "one lookup per request, kept connection or not");
}
