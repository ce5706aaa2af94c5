//! Granted traffic works: plain HTTP, HTTPS through CONNECT, SOCKS5 with proxy-side resolution,
//! python's urllib, the binary over TCP and a UNIX socket with metrics (and its audit log private
//! to its owner), and a chunked upload.
//! Each positive path needs the loopback waiver (the upstreams live on 127.0.0.x); the last
//! test shows the same target is refused without it.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fixtures::*;

#[tokio::test]
async fn http_absolute_form_reaches_a_granted_host_with_curl() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let p = TestProxy::default_for(&dns).await;
    let url = format!("http://allowed.test:{}/hello", up.addr.port());
    let (code, out, err) = curl(&["-x", &proxy_url(p.addr), &url]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("upstream plain: /hello host=allowed.test:{}\n", up.addr.port()));
    let r = p.record(0).await;
    assert_eq!(r["decision"], "allow");
    assert_eq!(r["reason"], "granted");
    assert_eq!(r["proto"], "http");
    assert_eq!(r["addr"], up.addr.to_string());
    assert!(r["bytes_down"].as_u64().unwrap() > 40, "{r}");
    // The upstream got origin-form, persistent (HTTP/1.1's default), and no proxy headers.
    let raw = String::from_utf8(up.seen.raw.lock().unwrap()[0].clone()).unwrap();
    assert!(raw.starts_with("GET /hello HTTP/1.1\r\n"), "{raw}");
    assert!(!raw.to_ascii_lowercase().contains("connection:"), "{raw}");
    assert!(!raw.to_ascii_lowercase().contains("proxy-"), "{raw}");
}

#[tokio::test]
async fn https_through_connect_reaches_a_granted_host_with_curl() {
    let dns = Dns::start().await;
    let tls = TlsUpstream::start().await;
    let p = TestProxy::default_for(&dns).await;
    let url = format!("https://allowed.test:{}/secure", tls.addr.port());
    let cacert = tls.cert_pem.to_str().unwrap();
    let (code, out, err) = curl(&["-x", &proxy_url(p.addr), "--cacert", cacert, &url]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("upstream tls: /secure"), "{out}");
    let r = p.record(0).await;
    assert_eq!((r["proto"].as_str(), r["decision"].as_str()), (Some("connect"), Some("allow")));
    assert_eq!(r["inner"], "tls");
    assert_eq!(r["end"], "closed");
}

#[tokio::test]
async fn socks5_hostname_reaches_a_granted_host_with_curl() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let tls = TlsUpstream::start().await;
    let p = TestProxy::default_for(&dns).await;
    let socks = format!("socks5h://{}", p.addr);
    let url = format!("http://allowed.test:{}/s", up.addr.port());
    let (code, out, err) = curl(&["-x", &socks, &url]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("upstream plain: /s"), "{out}");
    let url = format!("https://allowed.test:{}/s", tls.addr.port());
    let cacert = tls.cert_pem.to_str().unwrap();
    let (code, out, err) = curl(&["-x", &socks, "--cacert", cacert, &url]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("upstream tls: /s"), "{out}");
    let recs = p.wait_records(2).await;
    for r in &recs {
        assert_eq!((r["proto"].as_str(), r["decision"].as_str()), (Some("socks5"), Some("allow")), "{r}");
    }
    let inner: Vec<&str> = recs.iter().map(|r| r["inner"].as_str().unwrap()).collect();
    assert!(inner.contains(&"http") && inner.contains(&"tls"), "{inner:?}");
    // The proxy resolved the name itself: the zone saw the queries.
    assert!(dns.a_queries("allowed.test") >= 2);
}

#[tokio::test]
async fn python_urllib_uses_the_proxy() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let p = TestProxy::default_for(&dns).await;
    let script = format!(
        "import urllib.request as u\n\
         o = u.build_opener(u.ProxyHandler({{'http': 'http://{}'}}))\n\
         print(o.open('http://a.sub.test:{}/py', timeout=10).read().decode(), end='')\n",
        p.addr,
        up.addr.port()
    );
    let out = tokio::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .await
        .expect("python3 is required for this test");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("upstream plain: /py host=a.sub.test"), "{text}");
    assert_eq!(p.record(0).await["detail"], "granted by `*.sub.test`");
}

#[tokio::test]
async fn chunked_upload_is_forwarded_and_a_smuggled_request_is_not() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    let req = format!(
        "POST http://allowed.test:{port}/up HTTP/1.1\r\nHost: allowed.test:{port}\r\nTransfer-Encoding: chunked\r\n\r\n\
         5\r\nhello\r\n0\r\n\r\nGET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"
    );
    let out = raw(p.addr, req.as_bytes()).await;
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200 OK"));
    let seen = String::from_utf8(up.seen.raw.lock().unwrap()[0].clone()).unwrap();
    assert!(seen.ends_with("5\r\nhello\r\n0\r\n\r\n"), "{seen:?}");
    assert!(!seen.contains("evil"), "{seen:?}");
}

#[tokio::test]
async fn the_binary_serves_tcp_and_unix_sockets_and_metrics() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("proxy.sock");
    let audit = dir.path().join("audit.jsonl");
    let grants = dir.path().join("grants.txt");
    std::fs::write(&grants, "# session grants\nallowed.test\n!evil.test  # explicit deny\n").unwrap();
    // An audit log left readable by everyone (as the proxy once created them): it names every
    // URL a session asks for, so the proxy makes it its owner's alone before writing to it.
    std::fs::write(&audit, "").unwrap();
    std::fs::set_permissions(&audit, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_axp-egress-proxy"))
        .args(["--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
        .args(["--allow-file", grants.to_str().unwrap()])
        .args(["--listen-unix", sock.to_str().unwrap()])
        .args(["--resolver", &dns.addr.to_string()])
        .args(["--dangerously-allow-private", "127.0.0.0/8"])
        .args(["--audit", audit.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while stdout.read(&mut b).await.unwrap() == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let ready: serde_json::Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(std::fs::metadata(&audit).unwrap().permissions().mode() & 0o7777, 0o600);
    let addr = ready["listening"][0].as_str().unwrap().to_string();
    let metrics = ready["metrics"].as_str().unwrap().to_string();
    let url = format!("http://allowed.test:{}/tcp", up.addr.port());
    let (code, out, err) = curl(&["-x", &format!("http://{addr}"), &url]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("upstream plain: /tcp"));
    // Over the UNIX socket, as the sandbox's forwarder would connect.
    let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
    let req = format!("GET http://allowed.test:{0}/unix HTTP/1.1\r\nHost: allowed.test:{0}\r\n\r\n", up.addr.port());
    s.write_all(req.as_bytes()).await.unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).await.unwrap();
    assert!(resp.contains("upstream plain: /unix"), "{resp}");
    // A denial, then the counters.
    let (_, code, _) =
        curl(&["-x", &format!("http://{addr}"), "-w", "%{http_code}", "-o", "/dev/null", "http://evil.test/"]).await;
    assert_eq!(code, "403");
    let (code, text, _) = curl(&[&format!("http://{metrics}/metrics")]).await;
    assert_eq!(code, 0);
    assert!(text.contains("axp_egress_attempts_total{decision=\"allow\",reason=\"granted\"} 2"), "{text}");
    assert!(text.contains("axp_egress_attempts_total{decision=\"deny\",reason=\"denied_by_rule\"} 1"), "{text}");
    let lines = std::fs::read_to_string(&audit).unwrap();
    assert!(lines.lines().any(|l| l.contains("\"client\":\"unix:")), "{lines}");
    // SIGTERM stops it and removes the socket.
    let pid = child.id().unwrap();
    std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    let st = tokio::time::timeout(Duration::from_secs(5), child.wait()).await.unwrap().unwrap();
    assert!(st.success());
    assert!(!sock.exists());
}

#[tokio::test]
async fn the_same_loopback_target_is_refused_without_the_waiver() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let p = TestProxy::start(config(&dns, GRANTS, &[], false)).await;
    let url = format!("http://allowed.test:{}/hello", up.addr.port());
    let (code, out, _) = curl(&["-x", &proxy_url(p.addr), "-w", "%{http_code}", "-o", "/dev/null", &url]).await;
    assert_eq!((code, out.as_str()), (0, "403"));
    let r = p.assert_denied(0, "refused_address").await;
    assert!(r["detail"].as_str().unwrap().contains("loopback"), "{r}");
    assert_eq!(up.seen.conns.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// The request head is read in pieces of at most 8 KiB (and however the client splits it): a
/// 20 KiB head that arrives in one write, and a head that dribbles in over several writes,
/// both reach the upstream intact.
#[tokio::test]
async fn a_request_head_larger_than_one_read_or_split_over_writes_is_forwarded_whole() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let p = TestProxy::default_for(&dns).await;
    let port = up.addr.port();
    let big = "b".repeat(20 * 1024);
    let head =
        format!("GET http://allowed.test:{port}/big HTTP/1.1\r\nHost: allowed.test:{port}\r\nX-Big: {big}\r\n\r\n");
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert!(out.ends_with(format!("/big host=allowed.test:{port}\n").as_bytes()), "{}", String::from_utf8_lossy(&out));

    let head = format!("GET http://allowed.test:{port}/split HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    for piece in head.as_bytes().chunks(7) {
        s.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert!(
        out.ends_with(format!("/split host=allowed.test:{port}\n").as_bytes()),
        "{}",
        String::from_utf8_lossy(&out)
    );

    let seen = up.seen.raw.lock().unwrap();
    let first = String::from_utf8_lossy(&seen[0]);
    assert!(first.starts_with("GET /big HTTP/1.1\r\n") && first.contains(&format!("X-Big: {big}\r\n")), "{first}");
    assert!(String::from_utf8_lossy(&seen[1]).starts_with("GET /split HTTP/1.1\r\n"));
}

/// The value of counter `name` in the proxy's metrics.
async fn counter(p: &TestProxy, name: &str) -> u64 {
    let (code, text, err) = curl(&[&format!("http://{}/metrics", p.metrics.unwrap())]).await;
    assert_eq!(code, 0, "{err}");
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("{text}"));
    line[name.len() + 1..].parse().unwrap()
}

/// Large downloads to a TCP client go through the proxy's pipe (`splice(2)`) once past their
/// first 64 KiB; to a UNIX-socket client they are copied (splicing into one measured slower).
/// Either way they arrive whole and in order: over plain HTTP from a TCP and from a UNIX-socket
/// client, through a CONNECT tunnel with TLS, and through SOCKS5; the counters show which went
/// through the pipe.
#[tokio::test]
async fn large_downloads_arrive_whole_and_in_order_by_every_route() {
    const N: usize = 8 << 20;
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let tls = TlsUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("p.sock");
    let mut cfg = config(&dns, GRANTS, &[], true);
    cfg.listen_unix = vec![sock.clone()];
    cfg.metrics = Some("127.0.0.1:0".parse().unwrap());
    let p = TestProxy::start(cfg).await;
    let want = pattern(N);
    let body_of = |resp: &[u8]| -> Vec<u8> {
        let end = resp.windows(4).position(|w| w == b"\r\n\r\n").expect("a head") + 4;
        assert!(resp.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&resp[..end]));
        resp[end..].to_vec()
    };
    let spliced = || counter(&p, "axp_egress_bytes_spliced_total");
    let port = up.addr.port();
    let req = format!("GET http://allowed.test:{port}/pattern/{N} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n");
    // Plain HTTP, TCP client: through the pipe.
    assert!(body_of(&raw(p.addr, req.as_bytes()).await) == want, "plain HTTP over TCP");
    let after_tcp = spliced().await;
    assert!(after_tcp >= N as u64 - (1 << 20), "{after_tcp}");
    // Plain HTTP, UNIX-socket client (as the sandbox's forwarder connects): copied.
    let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut resp)).await.unwrap().unwrap();
    assert!(body_of(&resp) == want, "plain HTTP over a UNIX socket");
    assert_eq!(spliced().await, after_tcp);
    // TLS through CONNECT, and plain HTTP through SOCKS5, with curl writing to a file.
    let out = dir.path().join("out");
    let cacert = tls.cert_pem.to_str().unwrap();
    let tls_url = format!("https://allowed.test:{}/pattern/{N}", tls.addr.port());
    let socks_url = format!("http://allowed.test:{port}/pattern/{N}");
    let socks = format!("socks5h://{}", p.addr);
    for args in [vec!["-x", &proxy_url(p.addr), "--cacert", cacert, &tls_url], vec!["-x", &socks, &socks_url]] {
        let before = spliced().await;
        let (code, _, err) = curl(&[args.clone(), vec!["-o", out.to_str().unwrap()]].concat()).await;
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(std::fs::read(&out).unwrap() == want, "{args:?}");
        assert!(spliced().await - before >= N as u64 - (1 << 20), "{args:?}");
    }
    let records = p.wait_records(4).await;
    assert!(records.iter().all(|r| r["decision"] == "allow" && r["end"] == "closed"), "{records:#?}");
    assert!(spliced().await <= counter(&p, "axp_egress_bytes_down_total").await);
}
