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
    let job = s.ok("job.start", json!({"command": ["sh", "-c", script]})).await;
    let out = stdout_of(&s.events(job["job_id"].as_str().unwrap(), 0).await);
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
    let up_ip = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let dns = Dns::start(vec![("api.allowed.test", up_ip), ("other.allowed.test", up_ip)]).await;
    let port = upstream(up_ip, "hello from upstream").await;
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let toml = tmp.path().join("axp.toml");
    // The operator points the proxy at the test zone and waives the loopback check for the one
    // address the upstream listens on; the grant itself still comes from the session.
    std::fs::write(
        &toml,
        format!(
            "[session]\ncapabilities = [\"tool(*)\", \"proc.spawn\", \"fs.write({ws})\", \"net.connect(*.allowed.test)\"]\n\
             [egress]\nresolvers = [\"{dns}\"]\ndangerously_allow_private = [\"127.0.0.2/32\"]\n\
             [audit]\nsync = \"interval\"\n",
            ws = ws.display(),
            dns = dns.addr
        ),
    )
    .unwrap();
    let state = tmp.path().join("state");
    let gw = gateway().workspace(&ws).state(&state).arg("--config").arg(toml.to_str().unwrap()).start();
    let mut s = Rpc::open(
        &gw.url,
        json!({"capabilities": ["proc.spawn", format!("fs.write({})", ws.display()), "net.connect(api.allowed.test)"]}),
    )
    .await;
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
    let job = s.ok("job.start", json!({"command": ["sh", "-c", script]})).await;
    let out = stdout_of(&s.events(job["job_id"].as_str().unwrap(), 0).await);
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
