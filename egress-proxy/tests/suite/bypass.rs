//! The bypass battery: every attempt here must be refused, and its audit line must carry the
//! right reason. The default test proxy waives loopback (so that a mistake would actually reach
//! the upstreams on 127.0.0.x and the test would see it); refusals therefore come from the
//! grants, the parsers, the classifier for non-loopback ranges, and the tunnel checks.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::fixtures::*;

async fn setup() -> (Dns, Upstream, TestProxy) {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let p = TestProxy::default_for(&dns).await;
    (dns, up, p)
}

fn get(target: &str) -> String {
    format!("GET {target} HTTP/1.1\r\n\r\n")
}

fn connect(authority: &str) -> String {
    format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n")
}

#[tokio::test]
async fn every_ip_spelling_of_loopback_is_refused_as_a_literal() {
    let (_dns, up, p) = setup().await;
    let port = up.addr.port();
    let spellings = [
        "127.0.0.2",
        "2130706434",
        "0177.0.0.2",
        "0x7f.2",
        "127.2",
        "0x7f000002",
        "017700000002",
        "127.0.2",
        "[::ffff:127.0.0.2]",
        "[::1]",
        "[0:0:0:0:0:ffff:7f00:2]",
        "127.0.0.2.",
    ];
    let mut conn = 0;
    for s in spellings {
        let st = raw_status(p.addr, &get(&format!("http://{s}:{port}/"))).await;
        assert!(st.starts_with("HTTP/1.1 403"), "{s}: {st}");
        p.assert_denied(conn, "ip_literal").await;
        conn += 1;
        let st = raw_status(p.addr, &connect(&format!("{s}:{port}"))).await;
        assert!(st.starts_with("HTTP/1.1 403"), "{s}: {st}");
        p.assert_denied(conn, "ip_literal").await;
        conn += 1;
    }
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn every_ip_spelling_of_private_and_metadata_ranges_is_refused() {
    let (_dns, _up, p) = setup().await;
    let spellings = [
        "10.0.0.1",
        "167772161",
        "012.0.0.1",
        "0xa.1",
        "10.1",
        "192.168.0.1",
        "3232235521",
        "0xc0.0xa8.0.1",
        "172.16.0.1",
        "169.254.169.254",
        "0xa9fea9fe",
        "100.64.0.1",
        "[fd00:ec2::254]",
        "[::ffff:a9fe:a9fe]",
        "[64:ff9b::a00:1]",
        "[2002:a00:1::]",
        "[fe80::1]",
        "0.0.0.0",
        "0",
    ];
    for (i, s) in spellings.iter().enumerate() {
        let st = raw_status(p.addr, &connect(&format!("{s}:443"))).await;
        assert!(st.starts_with("HTTP/1.1 403"), "{s}: {st}");
        p.assert_denied(i as u64, "ip_literal").await;
    }
}

#[tokio::test]
async fn an_exactly_granted_private_literal_is_still_refused_by_class() {
    let dns = Dns::start().await;
    let p = TestProxy::start(config(&dns, &["10.0.0.1:80", "169.254.169.254", "[::1]"], &[], false)).await;
    for (i, (t, class)) in [
        ("http://10.0.0.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "cloud-metadata"),
        ("http://[::1]:80/", "loopback"),
    ]
    .iter()
    .enumerate()
    {
        raw_status(p.addr, &get(t)).await;
        let r = p.assert_denied(i as u64, "refused_address").await;
        assert!(r["detail"].as_str().unwrap().contains(class), "{r}");
    }
}

#[tokio::test]
async fn a_granted_name_resolving_to_private_metadata_or_cgnat_is_refused() {
    let (_dns, _up, p) = setup().await;
    for (i, (name, class)) in [
        ("private.test", "private"),
        ("metadata.test", "cloud-metadata"),
        ("cgnat.test", "cgnat"),
        ("mapped.test", "IPv4-mapped 10.0.0.1 which is private"),
        ("nat64.test", "NAT64 169.254.169.254 which is cloud-metadata"),
    ]
    .iter()
    .enumerate()
    {
        let st = raw_status(p.addr, &connect(&format!("{name}:443"))).await;
        assert!(st.starts_with("HTTP/1.1 403"), "{name}: {st}");
        let r = p.assert_denied(i as u64, "refused_address").await;
        assert!(r["detail"].as_str().unwrap().contains(class), "{r}");
        assert!(r["addr"].is_string(), "{r}");
    }
}

#[tokio::test]
async fn an_answer_mixing_a_good_and_a_private_address_is_refused_whole() {
    let (_dns, up, p) = setup().await;
    raw_status(p.addr, &connect(&format!("mixed.test:{}", up.addr.port()))).await;
    let r = p.assert_denied(0, "refused_address").await;
    assert!(r["detail"].as_str().unwrap().contains("10.0.0.1"), "{r}");
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 0);
}

/// `rebind.test` answers REBIND_A (allowed: loopback is waived for it) and then REBIND_B with TTL 0.
/// The proxy here waives only REBIND_A. A proxy that checked one lookup and connected after a
/// second would land on B; this one connects to exactly the address it checked, so B is never
/// reached, and each attempt costs exactly one A query.
#[tokio::test]
async fn dns_rebinding_between_check_and_connect_never_reaches_the_second_address() {
    let dns = Dns::start().await;
    let a = Upstream::start(REBIND_A, 0, "A").await;
    let b = Upstream::start(REBIND_B, a.addr.port(), "B").await;
    let mut cfg = config(&dns, &["rebind.test"], &[], false);
    cfg.policy.dangerously_allow_private = vec!["127.0.0.3/32".parse().unwrap()];
    let p = TestProxy::start(cfg).await;
    let url = format!("http://rebind.test:{}/r", a.addr.port());
    let mut reached_a = 0;
    for i in 0..6u64 {
        let (_, out, _) = curl(&["-x", &proxy_url(p.addr), &url]).await;
        let r = p.record(i).await;
        if r["decision"] == "allow" {
            assert_eq!(r["addr"], a.addr.to_string(), "{r}");
            assert!(out.starts_with("upstream A"), "{out}");
            reached_a += 1;
        } else {
            assert_eq!(r["reason"], "refused_address", "{r}");
            assert!(r["detail"].as_str().unwrap().contains("127.0.0.4"), "{r}");
        }
    }
    assert_eq!(reached_a, 3);
    assert_eq!(b.seen.conns.load(Ordering::SeqCst), 0, "the rebound address was reached");
    assert_eq!(dns.a_queries("rebind.test"), 6, "one lookup per attempt");
}

async fn tls_through_connect(p: &TestProxy, tls: &TlsUpstream, host: &str, sni: &str) -> bool {
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let authority = format!("{host}:{}", tls.addr.port());
    s.write_all(connect(&authority).as_bytes()).await.unwrap();
    let mut resp = [0u8; 39];
    s.read_exact(&mut resp).await.unwrap();
    assert!(resp.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&resp));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.cert_der.clone()).unwrap();
    crate::suite::fixtures::install_crypto_provider();
    let cfg = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let c = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).unwrap();
    c.connect(name, s).await.is_ok()
}

#[tokio::test]
async fn sni_differing_from_the_connect_host_is_refused() {
    let (_dns, _up, p) = setup().await;
    let tls = TlsUpstream::start().await;
    // Control: the same client with a matching SNI completes its handshake.
    assert!(tls_through_connect(&p, &tls, "allowed.test", "allowed.test").await);
    // Domain fronting: CONNECT to the granted host, SNI for another name the server also serves.
    assert!(!tls_through_connect(&p, &tls, "allowed.test", "other.test").await);
    let r = p.assert_denied(1, "sni_mismatch").await;
    assert!(r["detail"].as_str().unwrap().contains("other.test"), "{r}");
}

#[tokio::test]
async fn a_client_hello_without_sni_is_refused_for_a_named_tunnel() {
    let (_dns, up, p) = setup().await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(connect(&format!("allowed.test:{}", up.addr.port())).as_bytes()).await.unwrap();
    s.write_all(&axp_egress_proxy::tls::build_client_hello(None)).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    p.assert_denied(0, "sni_missing").await;
    assert!(up.seen.raw.lock().unwrap().is_empty(), "no byte may reach the upstream");
}

#[tokio::test]
async fn a_host_header_differing_from_the_target_is_refused() {
    let (_dns, up, p) = setup().await;
    let port = up.addr.port();
    // Plain HTTP: curl with an overriding Host header.
    let url = format!("http://allowed.test:{port}/");
    let (_, out, _) =
        curl(&["-x", &proxy_url(p.addr), "-H", "Host: evil.test", "-w", "%{http_code}", "-o", "/dev/null", &url]).await;
    assert_eq!(out, "400");
    p.assert_denied(0, "host_mismatch").await;
    // Inside a CONNECT tunnel: plain HTTP whose Host names another site.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(connect(&format!("allowed.test:{port}")).as_bytes()).await.unwrap();
    let mut resp = [0u8; 39];
    s.read_exact(&mut resp).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    p.assert_denied(1, "host_mismatch").await;
    // A head only a lenient origin would parse (space before the colon) is not waved through.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(connect(&format!("allowed.test:{port}")).as_bytes()).await.unwrap();
    s.read_exact(&mut resp).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost : evil.test\r\n\r\n").await.unwrap();
    let _ = s.read_to_end(&mut out).await;
    p.assert_denied(2, "malformed").await;
    // The CONNECT request's own Host header must agree with its authority too.
    let st =
        raw_status(p.addr, &format!("CONNECT allowed.test:{port} HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n")).await;
    assert!(st.starts_with("HTTP/1.1 400"), "{st}");
    p.assert_denied(3, "host_mismatch").await;
    assert!(up.seen.raw.lock().unwrap().is_empty());
}

#[tokio::test]
async fn connect_to_the_proxy_itself_or_its_metrics_is_refused() {
    let dns = Dns::start().await;
    let mut cfg = config(&dns, &["self.test", "127.0.0.1"], &[], true);
    cfg.metrics = Some("127.0.0.1:0".parse().unwrap());
    let p = TestProxy::start(cfg).await;
    let own = p.addr.port();
    let metrics = p.metrics.unwrap().port();
    for (i, a) in [
        format!("127.0.0.1:{own}"),
        format!("self.test:{own}"),
        format!("127.0.0.1:{metrics}"),
        format!("self.test:{metrics}"),
    ]
    .iter()
    .enumerate()
    {
        let st = raw_status(p.addr, &connect(a)).await;
        assert!(st.starts_with("HTTP/1.1 403"), "{a}: {st}");
        p.assert_denied(i as u64, "self_connect").await;
    }
}

#[tokio::test]
async fn a_granted_domain_on_an_ungranted_port_is_refused() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "plain").await;
    let p = TestProxy::start(config(&dns, &["allowed.test:443"], &[], true)).await;
    let url = format!("http://allowed.test:{}/", up.addr.port());
    let (_, out, _) = curl(&["-x", &proxy_url(p.addr), "-w", "%{http_code}", "-o", "/dev/null", &url]).await;
    assert_eq!(out, "403");
    p.assert_denied(0, "port_not_granted").await;
}

#[tokio::test]
async fn a_granted_name_as_a_prefix_of_another_domain_is_refused() {
    let (_dns, up, p) = setup().await;
    let url = format!("http://allowed.test.evil.test:{}/", up.addr.port());
    let (_, out, _) = curl(&["-x", &proxy_url(p.addr), "-w", "%{http_code}", "-o", "/dev/null", &url]).await;
    assert_eq!(out, "403");
    p.assert_denied(0, "not_granted").await;
    // And a wildcard covers sub-domains only, not the apex; deny rules win.
    raw_status(p.addr, &connect(&format!("sub.test:{}", up.addr.port()))).await;
    p.assert_denied(1, "not_granted").await;
    raw_status(p.addr, &connect(&format!("bad.sub.test:{}", up.addr.port()))).await;
    p.assert_denied(2, "denied_by_rule").await;
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn userinfo_and_fragment_tricks_are_refused() {
    let (_dns, up, p) = setup().await;
    let port = up.addr.port();
    let attempts = [
        get(&format!("http://evil.test#@allowed.test:{port}/")),
        get(&format!("http://allowed.test:{port}@evil.test/")),
        get(&format!("http://evil.test\\@allowed.test:{port}/")),
        connect(&format!("evil.test#@allowed.test:{port}")),
        connect(&format!("user@allowed.test:{port}")),
    ];
    for (i, a) in attempts.iter().enumerate() {
        let st = raw_status(p.addr, a).await;
        assert!(st.starts_with("HTTP/1.1 400"), "{a}: {st}");
        let r = p.record(i as u64).await;
        assert_eq!(r["decision"], "deny", "{r}");
        assert!(["invalid_host", "malformed"].contains(&r["reason"].as_str().unwrap()), "{r}");
    }
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn trailing_dots_are_normalised_once_and_never_widen_a_grant() {
    let (_dns, up, p) = setup().await;
    let port = up.addr.port();
    // One trailing dot is the same DNS name: allowed, and the Host header may carry it too.
    let st =
        raw_status(p.addr, &format!("GET http://allowed.test.:{port}/ HTTP/1.1\r\nHost: allowed.test.:{port}\r\n\r\n"))
            .await;
    assert!(st.starts_with("HTTP/1.1 200"), "{st}");
    assert_eq!(p.record(0).await["decision"], "allow");
    // Two dots are not a name; an ungranted name with a dot is still ungranted.
    raw_status(p.addr, &connect(&format!("allowed.test..:{port}"))).await;
    p.assert_denied(1, "invalid_host").await;
    raw_status(p.addr, &connect(&format!("evil.test.:{port}"))).await;
    p.assert_denied(2, "not_granted").await;
    raw_status(p.addr, &connect(&format!(".allowed.test:{port}"))).await;
    p.assert_denied(3, "invalid_host").await;
}

#[tokio::test]
async fn nul_and_crlf_injection_is_refused() {
    let (_dns, up, p) = setup().await;
    let port = up.addr.port();
    let attempts: Vec<Vec<u8>> = vec![
        format!("CONNECT allowed.test\0.evil.test:{port} HTTP/1.1\r\n\r\n").into_bytes(),
        format!("GET http://allowed.test:{port}/ HTTP/1.1\r\nHost: allowed.test\0evil\r\n\r\n").into_bytes(),
        format!("GET http://allowed.test%00.evil.test:{port}/ HTTP/1.1\r\n\r\n").into_bytes(),
        format!("GET http://allowed.test%0d%0aHost:evil.test:{port}/ HTTP/1.1\r\n\r\n").into_bytes(),
        format!("CONNECT evil.test\r.allowed.test:{port} HTTP/1.1\r\n\r\n").into_bytes(),
    ];
    for (i, a) in attempts.iter().enumerate() {
        let out = raw(p.addr, a).await;
        assert!(out.starts_with(b"HTTP/1.1 400"), "{}", String::from_utf8_lossy(&out));
        let r = p.record(i as u64).await;
        assert_eq!(r["decision"], "deny", "{r}");
        assert!(["invalid_host", "malformed"].contains(&r["reason"].as_str().unwrap()), "{r}");
    }
    // The SOCKS5 domain form carries raw bytes: NUL and CRLF inside it.
    for (k, name) in [&b"allowed.test\0.evil"[..], b"allowed.test\r\n"].iter().enumerate() {
        let (code, _) = socks(p.addr, 3, name, port).await;
        assert_eq!(code, 2);
        let r = p.assert_denied(5 + k as u64, "invalid_host").await;
        // The audit line keeps what was asked for, escaped.
        assert_eq!(r["requested"], name.escape_ascii().to_string(), "{r}");
    }
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn punycode_and_unicode_look_alikes_are_refused() {
    let (_dns, up, p) = setup().await;
    let port = up.addr.port();
    // The punycode of a Cyrillic look-alike resolves, but only a literal grant would cover it.
    raw_status(p.addr, &connect(&format!("xn--llowed-9pf.test:{port}"))).await;
    p.assert_denied(0, "not_granted").await;
    // Raw UTF-8 is refused before any lookup (SOCKS5 carries it byte for byte).
    let (code, _) = socks(p.addr, 3, "аllowed.test".as_bytes(), port).await;
    assert_eq!(code, 2);
    p.assert_denied(1, "invalid_host").await;
    let out = raw(p.addr, format!("CONNECT аllowed.test:{port} HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert!(out.starts_with(b"HTTP/1.1 400"));
    assert_eq!(p.record(2).await["decision"], "deny");
}

#[tokio::test]
async fn socks5_with_ip_literals_is_refused() {
    let (_dns, up, p) = setup().await;
    let port = up.addr.port();
    let (code, _) = socks(p.addr, 1, &[127, 0, 0, 2], port).await;
    assert_eq!(code, 2);
    p.assert_denied(0, "ip_literal").await;
    let mut v6 = [0u8; 16];
    v6[10] = 0xff;
    v6[11] = 0xff;
    v6[12..].copy_from_slice(&[127, 0, 0, 2]);
    let (code, _) = socks(p.addr, 4, &v6, port).await;
    assert_eq!(code, 2);
    p.assert_denied(1, "ip_literal").await;
    let (code, _) = socks(p.addr, 3, b"0x7f.2", port).await;
    assert_eq!(code, 2);
    p.assert_denied(2, "ip_literal").await;
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn socks5_to_an_ungranted_domain_and_other_commands_are_refused() {
    let (_dns, up, p) = setup().await;
    let (code, _) = socks(p.addr, 3, b"evil.test", up.addr.port()).await;
    assert_eq!(code, 2);
    p.assert_denied(0, "not_granted").await;
    // UDP ASSOCIATE (a way around a TCP-only filter) is not supported.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0]).await.unwrap();
    let mut rep = [0u8; 12];
    s.read_exact(&mut rep).await.unwrap();
    assert_eq!(&rep[..4], &[5, 0, 5, 7]);
    p.assert_denied(1, "unsupported").await;
    // Username/password only: no acceptable method.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(&[5, 1, 2]).await.unwrap();
    let mut rep = [0u8; 2];
    s.read_exact(&mut rep).await.unwrap();
    assert_eq!(rep, [5, 0xff]);
    p.assert_denied(2, "unsupported").await;
}

#[tokio::test]
async fn oversize_headers_are_refused() {
    let (_dns, up, p) = setup().await;
    let big = "a".repeat(40 * 1024);
    let req = format!("GET http://allowed.test:{}/ HTTP/1.1\r\nX-Big: {big}\r\n\r\n", up.addr.port());
    let st = raw_status(p.addr, &req).await;
    assert!(st.starts_with("HTTP/1.1 431"), "{st}");
    p.assert_denied(0, "header_too_large").await;
    let many: String = (0..200).map(|i| format!("X-{i}: v\r\n")).collect();
    let req = format!("GET http://allowed.test:{}/ HTTP/1.1\r\n{many}\r\n", up.addr.port());
    let st = raw_status(p.addr, &req).await;
    assert!(st.starts_with("HTTP/1.1 431"), "{st}");
    p.assert_denied(1, "header_too_large").await;
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn ambiguous_body_framing_is_refused() {
    let (_dns, up, p) = setup().await;
    let port = up.addr.port();
    let req = format!(
        "POST http://allowed.test:{port}/ HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    );
    let st = raw_status(p.addr, &req).await;
    assert!(st.starts_with("HTTP/1.1 400"), "{st}");
    p.assert_denied(0, "malformed").await;
}

#[tokio::test]
async fn an_ungranted_domain_and_origin_form_requests_are_refused() {
    let (_dns, up, p) = setup().await;
    let url = format!("http://evil.test:{}/", up.addr.port());
    let (_, out, _) = curl(&["-x", &proxy_url(p.addr), "-w", "%{http_code}", "-o", "/dev/null", &url]).await;
    assert_eq!(out, "403");
    p.assert_denied(0, "not_granted").await;
    // A request to the proxy as if it were the origin (no absolute form) goes nowhere.
    let st = raw_status(p.addr, &format!("GET / HTTP/1.1\r\nHost: allowed.test:{}\r\n\r\n", up.addr.port())).await;
    assert!(st.starts_with("HTTP/1.1 501"), "{st}");
    p.assert_denied(1, "unsupported").await;
    assert_eq!(up.seen.conns.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn ipv6_only_names_resolving_to_loopback_are_refused_without_a_v6_waiver() {
    let (_dns, _up, p) = setup().await;
    raw_status(p.addr, &connect("loop6.test:443")).await;
    let r = p.assert_denied(0, "refused_address").await;
    assert!(r["detail"].as_str().unwrap().contains("loopback"), "{r}");
}
