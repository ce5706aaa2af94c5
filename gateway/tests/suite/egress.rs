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
    let audit: String = std::fs::read_dir(state.join("egress"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(audit.contains("evil.example.org") && audit.contains("deny"), "{audit}");
    // A session without a net grant has no proxy at all.
    let mut offline = Rpc::open(&gw.url, json!({"capabilities": ["proc.spawn"]})).await;
    let job = offline.ok("job.start", json!({"command": ["sh", "-c", "echo proxy=${HTTP_PROXY:-none}; curl -s -m 3 http://evil.example.org/ || echo no-network"]})).await;
    let out = stdout_of(&offline.events(job["job_id"].as_str().unwrap(), 0).await);
    assert!(out.contains("proxy=none") && out.contains("no-network"), "{out}");
}
