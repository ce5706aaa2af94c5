//! Request smuggling and vhost confusion, performed for real against [`LenientOrigin`], an
//! origin that answers every request it reads on a connection and routes each by its absolute
//! target or `Host`, as lenient real servers do: whatever reaches it as a request it acts on, so
//! a request the proxy did not check shows in its `routed` list. Plain HTTP: a `Connection`
//! header naming the framing must not make the proxy send a body the origin reads as a second
//! request, and an origin's `Connection` header naming its framing must not garble the response
//! or the kept connection. Tunnels (CONNECT, SOCKS5): every request in a plain-HTTP tunnel, not
//! only the first, must name the tunnel's host.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fixtures::*;

/// Sends `req` to the proxy on a fresh connection and reads the answer to its end.
async fn fetch(p: &TestProxy, req: &[u8]) -> String {
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(req).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.unwrap().unwrap();
    String::from_utf8_lossy(&out).to_string()
}

/// The request nobody may check on the origin's behalf: it names a host the session is not
/// granted (the origin serves it too, as a CDN serves many).
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: evil.test\r\n\r\n";

#[tokio::test]
async fn a_connection_header_naming_the_framing_never_turns_a_body_into_a_second_request() {
    let dns = Dns::start().await;
    let origin = LenientOrigin::start().await;
    let p = TestProxy::default_for(&dns).await;
    let port = origin.addr.port();
    let host = format!("allowed.test:{port}");
    // The control: an ordinary POST whose body is the same bytes reaches the origin as one
    // request with that body, so the origin below would show a smuggled one.
    let plain = format!(
        "POST http://{host}/upload HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
        SMUGGLED.len()
    );
    let resp = fetch(&p, plain.as_bytes()).await;
    assert!(resp.starts_with("HTTP/1.1 200 "), "{resp}");
    assert!(resp.ends_with(&format!("vhost={host} POST /upload HTTP/1.1\n")), "{resp}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(origin.vhosts(), vec![host.clone()]);
    let before = origin.received.lock().unwrap().len();
    // The attacks: a Connection header that names the body's framing (in any case) or the
    // destination. A proxy that removed the named field upstream would send the body unframed,
    // and this origin would read it as a request for evil.test.
    let attacks = [
        format!(
            "POST http://{host}/upload HTTP/1.1\r\nHost: {host}\r\nConnection: Content-Length\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
            SMUGGLED.len()
        ),
        format!(
            "POST http://{host}/upload HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive, transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n",
            SMUGGLED.len()
        ),
        format!(
            "GET http://{host}/x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nConnection: host\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
            SMUGGLED.len()
        ),
    ];
    for (i, attack) in attacks.iter().enumerate() {
        let resp = fetch(&p, attack.as_bytes()).await;
        assert!(resp.starts_with("HTTP/1.1 400 "), "{resp}");
        assert!(resp.contains("X-Axp-Deny-Reason: malformed\r\n"), "{resp}");
        assert!(resp.contains("the Connection header names"), "{resp}");
        let r = p.assert_denied(i as u64 + 1, "malformed").await;
        assert_eq!(r["target"].as_str(), Some(&*host), "{r}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(origin.vhosts(), vec![host.clone()], "a request nobody checked reached the origin");
    assert_eq!(origin.received.lock().unwrap().len(), before, "no byte of a refused request reaches the origin");
}

#[tokio::test]
async fn an_origins_connection_header_naming_its_framing_garbles_neither_the_body_nor_the_kept_connection() {
    let dns = Dns::start().await;
    let up = persistent_upstream(UP_IP, "ka").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    let url = |path: &str| format!("http://allowed.test:{port}{path}");
    // Chunked, with `Connection: transfer-encoding`: the client gets the chunks with their
    // Transfer-Encoding (curl decodes them); without it, it would take the chunk framing for
    // the body.
    let (code, out, err) = curl(&["-x", &proxy_url(p.addr), &url("/conn-te")]).await;
    assert_eq!((code, out.as_str()), (0, "upstream ka: /conn-te conn=1 req=1\n"), "{err}");
    // By length, with `Connection: content-length`: the client gets the length.
    let resp =
        fetch(&p, format!("GET {} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n", url("/conn-cl")).as_bytes()).await;
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert_eq!(body, "upstream ka: /conn-cl conn=1 req=2\n");
    assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())), "{head}");
    assert!(!head.to_ascii_lowercase().contains("connection: content-length"), "{head}");
    // The kept connection is where the proxy's framing left it: the next request gets its own
    // answer on it.
    let (code, out, err) = curl(&["-x", &proxy_url(p.addr), &url("/next")]).await;
    assert_eq!((code, out.as_str()), (0, "upstream ka: /next conn=1 req=3\n"), "{err}");
    for conn in [1, 2] {
        let r = p.record(conn).await;
        assert_eq!((r["decision"].as_str(), r["reused"].as_bool()), (Some("allow"), Some(true)), "{r}");
    }
}

/// Opens a CONNECT tunnel to `authority` and reads the proxy's 200.
async fn tunnel(p: &TestProxy, authority: &str) -> TcpStream {
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes()).await.unwrap();
    let mut resp = [0u8; 39];
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(&resp, b"HTTP/1.1 200 Connection established\r\n\r\n");
    s
}

/// Reads one response from the tunnel: its head and, if it has a Content-Length, its body.
async fn response(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut b = [0u8; 1];
    let read = async {
        while !out.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).await.unwrap();
            out.push(b[0]);
        }
        let head = String::from_utf8_lossy(&out).to_ascii_lowercase();
        let len: usize =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).map_or(0, |v| v.trim().parse().unwrap());
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.unwrap();
        out.extend_from_slice(&body);
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.expect("no response in the tunnel");
    String::from_utf8(out).unwrap()
}

/// Waits for the proxy to close the tunnel; returns what came before.
async fn closed(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("the proxy did not close the tunnel")
        .unwrap_or_default();
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn every_request_in_a_plain_http_tunnel_must_name_the_tunnel_host() {
    let dns = Dns::start().await;
    let origin = LenientOrigin::start().await;
    let p = TestProxy::default_for(&dns).await;
    let port = origin.addr.port();
    let host = format!("allowed.test:{port}");
    let good = format!("GET /ok HTTP/1.1\r\nHost: {host}\r\n\r\n");
    // First requests that reach another virtual host, or the default one.
    let first: Vec<(String, &str)> = vec![
        // Absolute form wins over Host at the origin (RFC 9112 §3.2.2).
        (format!("GET http://evil.test/ HTTP/1.1\r\nHost: {host}\r\n\r\n"), "host_mismatch"),
        (format!("GET http://evil.test:{port}/ HTTP/1.1\r\nHost: {host}\r\n\r\n"), "host_mismatch"),
        // No Host: the origin's default virtual host.
        ("GET / HTTP/1.1\r\n\r\n".to_string(), "host_mismatch"),
        ("GET / HTTP/1.0\r\n\r\n".to_string(), "host_mismatch"),
        ("GET /\r\n\r\n".to_string(), "malformed"),
        // What the origin reads as a request though it does not start with a known method.
        ("\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n".to_string(), "host_mismatch"),
        ("PURGE / HTTP/1.1\r\nHost: evil.test\r\n\r\n".to_string(), "host_mismatch"),
        // A protocol switch to one whose streams name any authority.
        (format!("GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"), "unsupported"),
        (format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n"), "unsupported"),
    ];
    let mut conn = 0;
    for (req, reason) in &first {
        let mut s = tunnel(&p, &host).await;
        s.write_all(req.as_bytes()).await.unwrap();
        let _ = closed(s).await;
        let r = p.assert_denied(conn, reason).await;
        assert_eq!(r["inner"], "http", "{r}");
        conn += 1;
    }
    // Later requests: a granted first request, answered, then one for another host.
    let later = [
        format!("GET / HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n"),
        format!("GET http://evil.test/ HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        "GET / HTTP/1.1\r\n\r\n".to_string(),
        format!("GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"),
    ];
    let mut granted = 0;
    for req in &later {
        let mut s = tunnel(&p, &host).await;
        s.write_all(good.as_bytes()).await.unwrap();
        assert!(response(&mut s).await.ends_with(&format!("vhost={host} GET /ok HTTP/1.1\n")));
        granted += 1;
        s.write_all(req.as_bytes()).await.unwrap();
        let _ = closed(s).await;
        p.assert_denied(conn, if req.contains("Upgrade") { "unsupported" } else { "host_mismatch" }).await;
        conn += 1;
    }
    // Pipelined behind a granted one, in the same write: nothing of that write goes.
    let mut s = tunnel(&p, &host).await;
    s.write_all(format!("{good}{SMUGGLED}").as_bytes()).await.unwrap();
    let _ = closed(s).await;
    p.assert_denied(conn, "host_mismatch").await;
    conn += 1;
    // The same through SOCKS5.
    let (code, mut s) = socks(p.addr, 3, b"allowed.test", port).await;
    assert_eq!(code, 0);
    s.write_all(format!("GET http://evil.test/ HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()).await.unwrap();
    let _ = closed(s).await;
    p.assert_denied(conn, "host_mismatch").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(origin.vhosts(), vec![host.clone(); granted], "{:#?}", origin.routed.lock().unwrap());
}

#[tokio::test]
async fn requests_naming_the_tunnel_host_pass_one_after_another_with_their_bodies() {
    let dns = Dns::start().await;
    let origin = LenientOrigin::start().await;
    let p = TestProxy::default_for(&dns).await;
    let port = origin.addr.port();
    let host = format!("allowed.test:{port}");
    let mut s = tunnel(&p, &host).await;
    // A body that looks like a request is a body: passed by its length, never checked as a
    // request, and read by the origin as the body it is.
    let requests = [
        (format!("GET /a HTTP/1.1\r\nHost: {host}\r\n\r\n"), host.clone()),
        (
            format!("POST /b HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n{SMUGGLED}", SMUGGLED.len()),
            host.clone(),
        ),
        (format!("GET http://{host}/c HTTP/1.1\r\nHost: {host}\r\n\r\n"), host.clone()),
        // No port: the tunnel's, as for a Host header.
        ("GET http://ALLOWED.test./d HTTP/1.1\r\nHost: allowed.test\r\n\r\n".to_string(), "ALLOWED.test.".to_string()),
    ];
    for (req, vhost) in &requests {
        s.write_all(req.as_bytes()).await.unwrap();
        let line = req.lines().next().unwrap();
        let resp = response(&mut s).await;
        assert!(resp.ends_with(&format!("\r\n\r\nvhost={vhost} {line}\n")), "{resp}");
    }
    // Pipelined, in one write, split anywhere.
    let both = format!("GET /e HTTP/1.1\r\nHost: {host}\r\n\r\nGET /f HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let (a, b) = both.split_at(30);
    s.write_all(a.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.write_all(b.as_bytes()).await.unwrap();
    assert!(response(&mut s).await.ends_with(&format!("vhost={host} GET /e HTTP/1.1\n")));
    assert!(response(&mut s).await.ends_with(&format!("vhost={host} GET /f HTTP/1.1\n")));
    drop(s);
    let routed = origin.routed.lock().unwrap().clone();
    assert_eq!(routed.len(), 6, "{routed:#?}");
    assert!(routed.iter().take(3).chain(routed.iter().skip(4)).all(|r| r.vhost == host), "{routed:#?}");
    assert_eq!(routed[3].vhost, "ALLOWED.test.", "{routed:#?}");
    let r = p.record(0).await;
    assert_eq!((r["decision"].as_str(), r["inner"].as_str()), (Some("allow"), Some("http")), "{r}");
}

#[tokio::test]
async fn a_websocket_upgrade_makes_a_tunnel_opaque_only_when_the_origin_switches() {
    let dns = Dns::start().await;
    let origin = LenientOrigin::start().await;
    let p = TestProxy::default_for(&dns).await;
    let port = origin.addr.port();
    let host = format!("allowed.test:{port}");
    let upgrade = |path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
    };
    // Switched: what follows is the new protocol (here an echo), whatever it looks like.
    let mut s = tunnel(&p, &host).await;
    s.write_all(upgrade("/ws").as_bytes()).await.unwrap();
    assert!(response(&mut s).await.starts_with("HTTP/1.1 101 "));
    let frames = format!("\u{1}frame {SMUGGLED}");
    s.write_all(frames.as_bytes()).await.unwrap();
    let mut echo = vec![0u8; frames.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut echo)).await.unwrap().unwrap();
    assert_eq!(echo, frames.as_bytes());
    drop(s);
    // Declined: the stream stays HTTP. A request sent straight behind the upgrade request (held
    // until the origin answered) is checked like any other.
    let mut s = tunnel(&p, &host).await;
    s.write_all(format!("{}{SMUGGLED}", upgrade("/chat")).as_bytes()).await.unwrap();
    assert!(response(&mut s).await.ends_with(&format!("vhost={host} GET /chat HTTP/1.1\n")));
    let _ = closed(s).await;
    p.assert_denied(1, "host_mismatch").await;
    // And a granted one after a declined upgrade passes.
    let mut s = tunnel(&p, &host).await;
    s.write_all(format!("{}GET /next HTTP/1.1\r\nHost: {host}\r\n\r\n", upgrade("/chat")).as_bytes()).await.unwrap();
    assert!(response(&mut s).await.ends_with(&format!("vhost={host} GET /chat HTTP/1.1\n")));
    assert!(response(&mut s).await.ends_with(&format!("vhost={host} GET /next HTTP/1.1\n")));
    drop(s);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(origin.vhosts(), vec![host.clone(); 4]);
    let r = p.record(0).await;
    assert_eq!((r["decision"].as_str(), r["inner"].as_str()), (Some("allow"), Some("http")), "{r}");
}
