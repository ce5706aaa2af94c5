//! Network from inside a session's sandbox: only through the egress proxy, only to granted
//! names; direct TCP, UDP DNS and the host's loopback services are unreachable.

use serde_json::json;

use super::*;

#[tokio::test]
async fn sandboxed_jobs_reach_the_network_only_through_the_proxy() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let toml = tmp.path().join("axp.toml");
    std::fs::write(
        &toml,
        format!(
            "[session]\ncapabilities = [\"tool(*)\", \"proc.spawn\", \"fs.write({})\", \"net.connect(*.test)\"]\n",
            ws.display()
        ),
    )
    .unwrap();
    let state = tmp.path().join("state");
    let gw = gateway().workspace(&ws).state(&state).arg("--config").arg(toml.to_str().unwrap()).start();
    let port = gw.base.rsplit(':').next().unwrap().to_string();
    let mut s = Rpc::open(
        &gw.url,
        json!({"capabilities": ["proc.spawn", format!("fs.write({})", ws.display()), "net.connect(api.allowed.test)"]}),
    )
    .await;
    let script = format!(
        r#"echo "proxy=$HTTP_PROXY"
curl -s -m 5 -o /dev/null -w "ungranted=%{{http_code}}\n" http://evil.example.org/
curl -s -m 5 -o /dev/null -w "ip-literal=%{{http_code}}\n" http://169.254.169.254/latest/meta-data/
curl -s -m 3 --noproxy '*' http://93.184.216.34/ >/dev/null 2>&1 && echo direct=open || echo direct=blocked
curl -s -m 3 --noproxy '*' http://127.0.0.1:{port}/healthz >/dev/null 2>&1 && echo host-loopback=open || echo host-loopback=blocked
python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.sendto(b'x' * 12, ('8.8.8.8', 53)); s.recvfrom(512); print('udp-dns=open')
except OSError as e:
    print('udp-dns=blocked')
""#
    );
    let out = run(&mut s, &script).await;
    assert!(out.contains("proxy=http://127.0.0.1:3128"), "{out}");
    assert!(out.contains("ungranted=403"), "{out}");
    assert!(out.contains("ip-literal=403"), "{out}");
    assert!(out.contains("direct=blocked"), "{out}");
    assert!(out.contains("host-loopback=blocked"), "{out}");
    assert!(out.contains("udp-dns=blocked"), "{out}");
    // Every attempt through the proxy is in its audit file, with the reason.
    let audit = egress_audit_containing(&state, "evil.example.org").await;
    assert!(audit.contains("evil.example.org") && audit.contains("deny"), "{audit}");
    // A session without a net grant has no proxy at all.
    let mut offline = Rpc::open(&gw.url, json!({"capabilities": ["proc.spawn"]})).await;
    let job = offline.ok("job.start", json!({"command": ["sh", "-c", "echo proxy=${HTTP_PROXY:-none}; curl -s -m 3 http://evil.example.org/ || echo no-network"]})).await;
    let out = stdout_of(&offline.events(job["job_id"].as_str().unwrap(), 0).await);
    assert!(out.contains("proxy=none") && out.contains("no-network"), "{out}");
}

/// A real DNS server (hickory-server) on loopback answering a fixed table of A records, so the
/// proxy's own resolver has names to resolve; every other name is NXDOMAIN.
pub struct Dns {
    pub addr: std::net::SocketAddr,
    _server: hickory_server::Server<Table>,
}

pub struct Table(Vec<(&'static str, std::net::Ipv4Addr)>);

#[async_trait::async_trait]
impl hickory_server::server::RequestHandler for Table {
    async fn handle_request<R: hickory_server::server::ResponseHandler, T: hickory_server::net::runtime::Time>(
        &self,
        request: &hickory_server::server::Request,
        mut response: R,
    ) -> hickory_server::server::ResponseInfo {
        use hickory_server::proto::op::{Metadata, ResponseCode};
        use hickory_server::proto::rr::{Name, RData, Record, RecordType, rdata::A};
        let info = request.request_info().unwrap();
        let asked = info.query.name().to_string().trim_end_matches('.').to_ascii_lowercase();
        let mut md = Metadata::response_from_request(&request.metadata);
        md.authoritative = true;
        let builder = hickory_server::zone_handler::MessageResponseBuilder::from_message_request(request);
        let hit = self.0.iter().find(|(n, _)| *n == asked).map(|(_, ip)| *ip);
        match hit {
            None => {
                md.response_code = ResponseCode::NXDomain;
                response.send_response(builder.build_no_records(md)).await.unwrap()
            }
            Some(ip) => {
                let records: Vec<Record> = if info.query.query_type() == RecordType::A {
                    vec![Record::from_rdata(Name::from(info.query.name().clone()), 0, RData::A(A(ip)))]
                } else {
                    vec![]
                };
                response.send_response(builder.build(md, records.iter(), [], [], [])).await.unwrap()
            }
        }
    }
}

impl Dns {
    pub async fn start(table: Vec<(&'static str, std::net::Ipv4Addr)>) -> Dns {
        let mut server = hickory_server::Server::new(Table(table));
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = udp.local_addr().unwrap();
        server.register_socket(udp);
        Dns { addr, _server: server }
    }
}

/// A real HTTP/1.1 upstream on `ip`: answers every request with `body` and closes.
pub async fn upstream(ip: std::net::Ipv4Addr, body: &'static str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = c.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn a_granted_name_is_reached_through_the_proxy_and_every_attempt_is_audited() {
    // The operator points the proxy at the test zone and waives the loopback check for the one
    // address the upstream listens on; the grant itself still comes from the session.
    let lab = Lab::start("hello from upstream", "").await;
    let (gw, state, port) = (&lab.gw, &lab.state, lab.port);
    let mut s = lab.session().await;
    // The granted name works from the job and from a grandchild it starts (a second process
    // relaying the request); the same upstream under an ungranted name, and the upstream's
    // address directly, do not.
    let script = format!(
        r#"curl -s -m 5 http://api.allowed.test:{port}/ ; echo
curl -s -m 5 -o /dev/null -w "other=%{{http_code}}\n" http://other.allowed.test:{port}/
curl -s -m 3 --noproxy '*' http://127.0.0.2:{port}/ >/dev/null 2>&1 && echo direct=open || echo direct=blocked
python3 -c "
import os, subprocess, sys
out = subprocess.run(['python3', '-c', 'import urllib.request; print(\'relay=\' + urllib.request.urlopen(\'http://api.allowed.test:{port}/\', timeout=5).read().decode())'], capture_output=True, text=True)
print(out.stdout.strip() or 'relay-failed: ' + out.stderr.strip()[-200:])
""#
    );
    let out = run(&mut s, &script).await;
    assert!(out.contains("hello from upstream\n"), "{out}");
    assert!(out.contains("other=403"), "{out}");
    assert!(out.contains("direct=blocked"), "{out}");
    assert!(out.contains("relay=hello from upstream"), "{out}");

    // The attempts are in the gateway's hash-chained audit log, allowed and denied, with reasons
    // (written before the answer under `sync = "interval"`, so readable at once).
    let tail = std::process::Command::new(axp())
        .args([
            "audit",
            "tail",
            "--json",
            "--kind",
            "net.attempt",
            "-n",
            "1000",
            "--state-dir",
            state.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let records: Vec<serde_json::Value> = String::from_utf8_lossy(&tail.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|r: &serde_json::Value| r["kind"] == "net.attempt")
        .collect();
    let target = format!("api.allowed.test:{port}");
    assert!(
        records.iter().any(|r| r["detail"]["decision"] == "allow" && r["detail"]["target"] == target.as_str()),
        "{records:#?}"
    );
    assert!(
        records.iter().any(|r| r["detail"]["decision"] == "deny" && r["detail"]["reason"] == "not_granted"),
        "{records:#?}"
    );
    let verify = std::process::Command::new(axp())
        .args(["audit", "verify", "--state-dir", state.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stderr));
    // …and counted in the gateway's metrics.
    let metrics = reqwest::get(format!("{}/metrics", gw.base)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("axp_egress_attempts_total{decision=\"allow\"} "), "{metrics}");
    assert!(!metrics.contains("axp_egress_attempts_total{decision=\"allow\"} 0\n"), "{metrics}");
}

/// A gateway whose sessions may be granted `net.connect(*.allowed.test)`, with the test zone
/// (`api.allowed.test` and `other.allowed.test` → an upstream on 127.0.0.2 answering `body`) and
/// `extra` `[egress]` lines.
struct Lab {
    gw: Gw,
    state: std::path::PathBuf,
    ws: std::path::PathBuf,
    port: u16,
    _dns: Dns,
    _tmp: tempfile::TempDir,
}

impl Lab {
    async fn start(body: &'static str, extra: &str) -> Lab {
        Self::start_with(body, extra, |_| None).await
    }

    /// As [`Lab::start`], plus the static (bridge) provider `provider(port)` returns, if any.
    async fn start_with(body: &'static str, extra: &str, provider: impl Fn(u16) -> Option<serde_json::Value>) -> Lab {
        let up_ip = std::net::Ipv4Addr::new(127, 0, 0, 2);
        // `other.allowed.test` is the same upstream under a name sessions are not granted.
        let dns = Dns::start(vec![("api.allowed.test", up_ip), ("other.allowed.test", up_ip)]).await;
        let port = upstream(up_ip, body).await;
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let ws = ws.canonicalize().unwrap();
        let toml = tmp.path().join("axp.toml");
        std::fs::write(
            &toml,
            format!(
                "[session]\ncapabilities = [\"tool(*)\", \"proc.spawn\", \"fs.write({ws})\", \"net.connect(*.allowed.test)\"]\n\
                 [egress]\nresolvers = [\"{dns}\"]\ndangerously_allow_private = [\"127.0.0.2/32\"]\n{extra}\n\
                 [audit]\nsync = \"interval\"\n",
                ws = ws.display(),
                dns = dns.addr
            ),
        )
        .unwrap();
        let state = tmp.path().join("state");
        let mut gw = gateway().workspace(&ws).state(&state).arg("--config").arg(toml.to_str().unwrap());
        if let Some(p) = provider(port) {
            let file = tmp.path().join("provider.json");
            std::fs::write(&file, p.to_string()).unwrap();
            gw = gw.fleet(&file);
        }
        let gw = gw.start();
        Lab { gw, state, ws, port, _dns: dns, _tmp: tmp }
    }

    /// A session granted exactly `net.connect(api.allowed.test)`.
    async fn session(&self) -> Rpc {
        Rpc::open(
            &self.gw.url,
            json!({"capabilities": ["proc.spawn", format!("fs.write({})", self.ws.display()), "net.connect(api.allowed.test)"]}),
        )
        .await
    }

    /// The egress proxy sockets of sessions: `STATE/egress/session-*/p.sock`, one directory each.
    fn session_sockets(&self) -> std::collections::BTreeSet<std::path::PathBuf> {
        std::fs::read_dir(self.state.join("egress"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("session-"))
                    .map(|p| p.join("p.sock"))
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `net.attempt` records of `session` (all of them for `""`) in the hash-chained audit log,
    /// once `done` holds for them (a proxy writes an attempt's record when its connection ends;
    /// waits up to 5 s).
    async fn attempts_of(&self, session: &str, done: impl Fn(&[serde_json::Value]) -> bool) -> Vec<serde_json::Value> {
        let mut records = Vec::new();
        for _ in 0..100 {
            let mut args = vec!["--kind", "net.attempt", "-n", "1000"];
            if !session.is_empty() {
                args.extend(["--session", session]);
            }
            records = audit_json(&self.state, &args).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
            if done(&records) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        records
    }
}

fn session_id(s: &Rpc) -> String {
    s.session.as_ref().unwrap().0.clone()
}

/// Runs `script` with `sh -c` in `s` and returns its stdout.
async fn run(s: &mut Rpc, script: &str) -> String {
    let job = s.ok("job.start", json!({"command": ["sh", "-c", script]})).await;
    stdout_of(&s.events(job["job_id"].as_str().unwrap(), 0).await)
}

/// Two sessions with the same grant have separate proxies: one spending its byte budget does not
/// touch the other's; each session's attempts carry its id in the audit log; and a closed
/// session's proxy is gone while the other's keeps working.
#[tokio::test]
async fn each_session_has_its_own_proxy_budget_and_audit_trail_and_loses_it_at_close() {
    // 2,000-byte answers and a 3,000-byte budget per session: the first fetch fits, the second
    // is cut short, the third is refused.
    let body: &'static str = Box::leak("x".repeat(2000).into_boxed_str());
    let lab = Lab::start(body, "max_bytes = 3000").await;
    let url = format!("http://api.allowed.test:{}/", lab.port);
    let fetch = |n: &str| format!("curl -s -m 5 -o /dev/null -w '{n}=%{{http_code}}:%{{size_download}}\\n' {url}\n");
    let (mut a, mut b) = (lab.session().await, lab.session().await);
    let (a_id, b_id) = (session_id(&a), session_id(&b));

    let out = run(&mut a, &format!("{}{}{}", fetch("one"), fetch("two"), fetch("three"))).await;
    assert!(out.contains("one=200:2000\n"), "{out}");
    let two: u64 = out.split("two=200:").nth(1).and_then(|r| r.lines().next()).unwrap().parse().unwrap();
    assert!(two < 2000, "the second download should be cut at the budget: {out}");
    assert!(out.contains("three=503:"), "{out}");
    let a_sockets = lab.session_sockets();
    assert_eq!(a_sockets.len(), 1, "{a_sockets:?}");

    // Session B, same grant, same upstream: its own budget is untouched.
    let out = run(&mut b, &fetch("b")).await;
    assert!(out.contains("b=200:2000\n"), "{out}");
    let all = lab.session_sockets();
    assert_eq!(all.len(), 2, "each session gets its own proxy: {all:?}");
    let b_socket = all.difference(&a_sockets).next().unwrap().clone();

    // The audit log says whose attempt each one was.
    let a_recs = lab
        .attempts_of(&a_id, |r| {
            r.iter().any(|r| r["detail"]["reason"] == "byte_limit" && r["detail"]["decision"] == "deny")
        })
        .await;
    assert!(
        a_recs.iter().any(|r| r["detail"]["decision"] == "allow" && r["detail"]["end"] == "byte_limit"),
        "{a_recs:#?}"
    );
    assert!(
        a_recs.iter().any(|r| r["detail"]["reason"] == "byte_limit" && r["detail"]["decision"] == "deny"),
        "{a_recs:#?}"
    );
    assert_eq!(a_recs.len(), 3, "{a_recs:#?}");
    assert!(
        a_recs.iter().all(|r| r["session"] == a_id.as_str() && r["detail"]["session"] == a_id.as_str()),
        "{a_recs:#?}"
    );
    let b_recs = lab.attempts_of(&b_id, |r| !r.is_empty()).await;
    assert_eq!(b_recs.len(), 1, "{b_recs:#?}");
    assert_eq!(b_recs[0]["detail"]["session"], b_id.as_str(), "{b_recs:#?}");
    assert_eq!(b_recs[0]["detail"]["decision"], "allow", "{b_recs:#?}");

    // Closing A stops its proxy (its socket goes); B's keeps serving.
    a.ok("session.close", json!({})).await;
    let mut left = lab.session_sockets();
    for _ in 0..100 {
        if left.len() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        left = lab.session_sockets();
    }
    assert_eq!(left.into_iter().collect::<Vec<_>>(), vec![b_socket.clone()], "only B's proxy should remain");
    // A's JSON-lines attempt log went with it (its records are in the hash-chained log, above);
    // B's is still written.
    for sock in &a_sockets {
        assert!(!log_of(sock).exists(), "{} should be gone", log_of(sock).display());
    }
    assert!(log_of(&b_socket).exists());
    let out = run(&mut b, &fetch("again")).await;
    assert!(out.contains("again=200:"), "{out}");
}

/// The attempt log of the listener whose socket is `sock`: `STATE/egress/logs/<its dir>.jsonl`.
fn log_of(sock: &std::path::Path) -> std::path::PathBuf {
    let dir = sock.parent().unwrap();
    let key = dir.file_name().unwrap().to_string_lossy();
    dir.parent().unwrap().join("logs").join(format!("{key}.jsonl"))
}

/// A session holding its `max_connections` tunnels is refused the next one, while another
/// session with the same grant still connects: the cap is per session.
#[tokio::test]
async fn a_session_at_its_connection_cap_is_refused_and_another_session_is_not() {
    let lab = Lab::start("hello from upstream", "max_connections = 2").await;
    let port = lab.port;
    let (mut a, mut b) = (lab.session().await, lab.session().await);
    let a_id = session_id(&a);
    // Two tunnels held open (the upstream waits for a request that never comes), a third
    // refused; then the job waits for the test's signal before letting go.
    let script = format!(
        r#"python3 -c "
import os, socket, time
def tunnel():
    s = socket.create_connection(('127.0.0.1', 3128), timeout=5)
    s.sendall(b'CONNECT api.allowed.test:{port} HTTP/1.1\r\nHost: api.allowed.test:{port}\r\n\r\n')
    return s, s.recv(4096).decode(errors='replace')
held = []
for i in range(2):
    s, r = tunnel(); held.append(s); print('held=' + r.split(chr(13))[0], flush=True)
s, r = tunnel()
print('third=' + r.split(chr(13))[0] + ' ' + ('connection_limit' if 'connection_limit' in r else '?'), flush=True)
end = time.time() + 20
while not os.path.exists('release') and time.time() < end:
    time.sleep(0.05)
print('released', flush=True)
""#
    );
    let job = a.ok("job.start", json!({"command": ["sh", "-c", script]})).await;
    let job = job["job_id"].as_str().unwrap().to_string();
    // Follow A's job until it reports the refusal (it is still holding its two tunnels).
    let (mut seq, mut out) = (0, String::new());
    for _ in 0..30 {
        let r = a.ok("job.attach", json!({"job_id": job, "from_seq": seq, "wait_ms": 1000})).await;
        out.push_str(&stdout_of(r["events"].as_array().unwrap()));
        seq = r["next_seq"].as_u64().unwrap();
        if out.contains("third=") || r["done"] == true {
            break;
        }
    }
    assert_eq!(out.matches("held=HTTP/1.1 200").count(), 2, "{out}");
    assert!(out.contains("third=HTTP/1.1 503 Service Unavailable connection_limit"), "{out}");
    // Meanwhile session B, same grant, connects.
    let b_out = run(&mut b, &format!("curl -s -m 5 http://api.allowed.test:{port}/")).await;
    std::fs::write(lab.ws.join("release"), "").unwrap();
    let rest = stdout_of(&a.events(&job, seq).await);
    assert!(rest.contains("released"), "{rest}");
    assert_eq!(b_out, "hello from upstream", "B must not be held to A's connections");
    let recs = lab.attempts_of(&a_id, |r| r.iter().any(|r| r["detail"]["reason"] == "connection_limit")).await;
    assert!(
        recs.iter().any(|r| r["detail"]["reason"] == "connection_limit" && r["session"] == a_id.as_str()),
        "{recs:#?}"
    );
}

/// A session's proxy also ends at the session's expiry, with nobody closing it. (The TTL leaves
/// the job a few seconds to fetch before the session, and with it the proxy, goes.)
#[tokio::test]
async fn an_expired_sessions_proxy_stops() {
    let lab = Lab::start("hello from upstream", "").await;
    let mut s = Rpc::open(
        &lab.gw.url,
        json!({"capabilities": ["proc.spawn", format!("fs.write({})", lab.ws.display()), "net.connect(api.allowed.test)"], "ttl_s": 3}),
    )
    .await;
    let out = run(&mut s, &format!("curl -s -m 5 http://api.allowed.test:{}/", lab.port)).await;
    assert_eq!(out, "hello from upstream");
    assert_eq!(lab.session_sockets().len(), 1);
    let mut left = lab.session_sockets();
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        left = lab.session_sockets();
    }
    assert!(left.is_empty(), "the expired session's proxy is still listening: {left:?}");
}

/// An operator-configured provider's processes get the provider's own proxy (its `sandbox.net`
/// allowlist), and their attempts are audited under the provider's name, not a session's.
#[tokio::test]
async fn a_providers_attempts_are_audited_under_its_name() {
    let lab = Lab::start_with("hello from upstream", "", |port| {
        Some(json!({
            "provider": "fetcher",
            "bridge": {"command": "sh", "args": ["-c", format!("curl -s -m 5 http://api.allowed.test:{port}/"), "bridge"]},
            "tools": [{"name": "fetch", "description": "Fetches the test upstream's greeting over HTTP."}],
            "sandbox": {"net": ["api.allowed.test"]}
        }))
    })
    .await;
    let mut s = Rpc::open(&lab.gw.url, json!({"capabilities": ["tool(*)"]})).await;
    let tools = s.ok("tools/list", json!({})).await;
    let name = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .find(|n| n.ends_with("fetch"))
        .unwrap_or_else(|| panic!("{tools}"))
        .to_string();
    let r = s.ok("tools/call", json!({"name": name, "arguments": {}})).await;
    assert!(r.to_string().contains("hello from upstream"), "{r}");
    let recs = lab.attempts_of("", |r| r.iter().any(|r| r["detail"]["provider"] == "fetcher")).await;
    let rec = recs.iter().find(|r| r["detail"]["provider"] == "fetcher").unwrap_or_else(|| panic!("{recs:#?}"));
    assert_eq!(rec["detail"]["decision"], "allow", "{rec:#}");
    assert!(rec["session"].is_null() && rec["detail"]["session"].is_null(), "{rec:#}");
    assert!(lab.session_sockets().is_empty(), "the provider's proxy is not a session's");
}

/// `axp sandbox run --allow-net` goes through the same proxy path (a one-off instance of its
/// own): the proxy is the only way out, and it refuses what was not allowed.
#[test]
fn sandbox_run_allow_net_goes_through_the_proxy() {
    let tmp = tempfile::tempdir().unwrap();
    // Its own temp dir, to see what the run leaves behind there.
    let scratch = tmp.path().join("tmp");
    std::fs::create_dir(&scratch).unwrap();
    let out = std::process::Command::new(axp())
        .env("TMPDIR", &scratch)
        .args(["sandbox", "run", "--allow-net", "api.allowed.test", "--workspace"])
        .arg(tmp.path())
        .args(["--", "sh", "-c"])
        .arg(
            "echo proxy=$HTTP_PROXY; curl -s -m 5 -D - -o /dev/null http://evil.example.org/ | tr -d '\\r' | grep -i '^x-axp-deny-reason'; \
             curl -s -m 3 --noproxy '*' http://93.184.216.34/ >/dev/null 2>&1 && echo direct=open || echo direct=blocked",
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("proxy=http://127.0.0.1:3128"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.to_ascii_lowercase().contains("x-axp-deny-reason: not_granted"), "{stdout}");
    assert!(stdout.contains("direct=blocked"), "{stdout}");
    // The run's proxy socket and attempt log went with it.
    let left: Vec<_> = std::fs::read_dir(&scratch).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "axp sandbox run left {left:?} behind");
}

/// The egress proxy processes the gateway `gw_pid` runs (its children started as
/// `axp __egress-proxy`), by pid.
fn proxy_children(gw_pid: u32) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            let after = stat.rsplit(") ").next().unwrap_or("");
            let mut f = after.split(' ');
            let (state, ppid) = (f.next(), f.next().and_then(|p| p.parse::<u32>().ok()));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            state != Some("Z") && ppid == Some(gw_pid) && String::from_utf8_lossy(&cmdline).contains("__egress-proxy")
        })
        .collect();
    pids.sort();
    pids
}

/// The inode of the listening UNIX socket bound at `path` (from `/proc/net/unix`).
fn listening_inode(path: &std::path::Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 = listening.
        (f.len() == 8 && f[3] == "00010000" && std::path::Path::new(f[7]) == path).then(|| f[6].to_string())
    })
}

/// Where the descriptors of process `pid` point.
fn fd_targets(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.flatten().filter_map(|e| std::fs::read_link(e.path()).ok()).map(|t| t.display().to_string()).collect()
        })
        .unwrap_or_default()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit(") ").next().unwrap_or("").starts_with('Z'))
}

/// Polls `cond` every 50 ms for up to 5 s.
async fn eventually(cond: impl Fn() -> bool) -> bool {
    for _ in 0..100 {
        if cond() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    cond()
}

/// The proxy that parses a session's traffic is a process of its own, not the gateway (which
/// holds the token signing key): a child of the gateway holds the session's listening socket,
/// confined (no new privileges, seccomp, no capabilities, none of the gateway's environment or
/// files, its own process group), one per session, and gone when its session closes.
#[tokio::test]
async fn each_sessions_proxy_is_a_confined_process_of_its_own_that_ends_with_the_session() {
    let lab = Lab::start("hello from upstream", "").await;
    let gw_pid = lab.gw.child.id();
    assert!(proxy_children(gw_pid).is_empty(), "no proxy runs before anything uses the network");
    let (mut a, mut b) = (lab.session().await, lab.session().await);
    let fetch = format!("curl -s -m 5 http://api.allowed.test:{}/", lab.port);
    assert_eq!(run(&mut a, &fetch).await, "hello from upstream");
    let children = proxy_children(gw_pid);
    assert_eq!(children.len(), 1, "{children:?}");
    let a_pid = children[0];
    let a_sock = lab.session_sockets().into_iter().next().unwrap();
    let inode = format!("socket:[{}]", listening_inode(&a_sock).expect("nothing listens on the session's socket"));
    assert!(fd_targets(a_pid).contains(&inode), "the child does not hold {inode}: {:?}", fd_targets(a_pid));
    assert!(!fd_targets(gw_pid).contains(&inode), "the gateway itself holds the proxy's socket");

    let status = std::fs::read_to_string(format!("/proc/{a_pid}/status")).unwrap();
    for want in ["NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000"] {
        assert!(status.lines().any(|l| l == want), "{want} missing:\n{status}");
    }
    assert!(std::fs::read(format!("/proc/{a_pid}/environ")).unwrap().is_empty(), "the gateway's environment leaked");
    let egress_dir = lab.state.join("egress").canonicalize().unwrap();
    for t in fd_targets(a_pid) {
        let file = t.starts_with('/') && t != "/dev/null";
        assert!(!file || t.starts_with(&*egress_dir.to_string_lossy()), "the child holds {t}");
    }
    let stat = std::fs::read_to_string(format!("/proc/{a_pid}/stat")).unwrap();
    let pgrp = stat.rsplit(") ").next().unwrap().split(' ').nth(2).unwrap().to_string();
    assert_eq!(pgrp, a_pid.to_string(), "the child should lead its own process group");
    let started = lab.gw.logged(std::time::Duration::from_secs(10), |l| {
        l.contains("egress proxy started") && l.contains("landlock fully enforced")
    });
    assert!(started.is_ok(), "{started:#?}");

    assert_eq!(run(&mut b, &fetch).await, "hello from upstream");
    let both = proxy_children(gw_pid);
    assert_eq!(both.len(), 2, "each session gets its own process: {both:?}");
    let b_pid = *both.iter().find(|p| **p != a_pid).unwrap();

    a.ok("session.close", json!({})).await;
    assert!(eventually(|| !alive(a_pid)).await, "session A's proxy outlived its session");
    assert!(!a_sock.exists());
    assert!(alive(b_pid), "closing A stopped B's proxy");
    assert_eq!(run(&mut b, &fetch).await, "hello from upstream");
}

/// A proxy that dies mid-session (killed here; a crash on hostile input alike) is restarted by
/// the gateway on the same socket with the same allowlist, so the session's sandbox recovers
/// without being told; the restart goes on from the session's spent byte budget, and every
/// attempt is still audited under the session.
#[tokio::test]
async fn a_killed_proxy_is_restarted_on_its_socket_and_the_sessions_next_request_works() {
    let body: &'static str = Box::leak("x".repeat(2000).into_boxed_str());
    let lab = Lab::start(body, "max_bytes = 3000").await;
    let gw_pid = lab.gw.child.id();
    let url = format!("http://api.allowed.test:{}/", lab.port);
    let fetch = |n: &str| format!("curl -s -m 5 -o /dev/null -w '{n}=%{{http_code}}:%{{size_download}}\\n' {url}\n");
    let mut s = lab.session().await;
    let id = session_id(&s);
    let out = run(&mut s, &fetch("one")).await;
    assert!(out.contains("one=200:2000\n"), "{out}");
    let sock = lab.session_sockets().into_iter().next().unwrap();
    let old = proxy_children(gw_pid);
    assert_eq!(old.len(), 1, "{old:?}");

    let killed = std::process::Command::new("kill").args(["-KILL", &old[0].to_string()]).status().unwrap();
    assert!(killed.success());
    // The gateway starts a new child, which listens on the same path again.
    let restarted = eventually(|| {
        let now = proxy_children(gw_pid);
        now.len() == 1
            && now[0] != old[0]
            && listening_inode(&sock).is_some_and(|i| fd_targets(now[0]).contains(&format!("socket:[{i}]")))
    })
    .await;
    assert!(restarted, "no new proxy listens on {}: {:?}", sock.display(), proxy_children(gw_pid));
    let out = run(&mut s, &fetch("two")).await;
    let two: u64 =
        out.split("two=200:").nth(1).and_then(|r| r.lines().next()).unwrap_or_else(|| panic!("{out}")).parse().unwrap();
    assert!(two < 2000, "the restarted proxy should go on from the spent budget and cut this download: {out}");
    assert_eq!(lab.session_sockets().into_iter().collect::<Vec<_>>(), vec![sock]);
    let recs = lab.attempts_of(&id, |r| r.len() >= 2).await;
    assert_eq!(recs.len(), 2, "{recs:#?}");
    assert!(recs.iter().all(|r| r["detail"]["decision"] == "allow" && r["session"] == id.as_str()), "{recs:#?}");
    let restarted = lab.gw.logged(std::time::Duration::from_secs(10), |l| {
        l.contains("the egress proxy died; restarting it on its sockets")
    });
    assert!(restarted.is_ok(), "{restarted:#?}");
}

/// The proxies die with the gateway, even when it is killed and cannot stop them.
#[tokio::test]
async fn the_proxies_die_with_a_killed_gateway() {
    let mut lab = Lab::start("hello from upstream", "").await;
    let gw_pid = lab.gw.child.id();
    let mut s = lab.session().await;
    assert_eq!(
        run(&mut s, &format!("curl -s -m 5 http://api.allowed.test:{}/", lab.port)).await,
        "hello from upstream"
    );
    let children = proxy_children(gw_pid);
    assert_eq!(children.len(), 1, "{children:?}");
    lab.gw.child.kill().unwrap();
    lab.gw.child.wait().unwrap();
    assert!(eventually(|| !alive(children[0])).await, "the proxy outlived its gateway");
}
