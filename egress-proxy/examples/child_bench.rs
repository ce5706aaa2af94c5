//! Benchmark for `bench-child.sh`: what running an owner's proxy as a child process
//! (`axp-egress-proxy __egress-proxy`, exactly what the gateway runs) costs against the former
//! in-process instance (a [`Proxy`] on a multi-threaded runtime in the caller's process), in
//! the same run:
//! 1. start-up: from asking for a listener to the listener being bound (in-process: `bind`;
//!    child: spawn, confine, `start`, `listen`, acknowledgement), median of 20;
//! 2. COUNT rounds of sequential 1 KiB GETs on fresh UNIX-socket connections, interleaved
//!    (in-process, child, in-process, …): requests/s and p50, plus the attempt records relayed
//!    (in-process: the observer; child: JSON lines on its stdout read and decoded as the
//!    gateway does);
//! 3. a 100 MiB download through each: MB/s.
//!
//! Prints one JSON object. Usage: `child_bench CHILD_EXE DNS_ADDR ORIGIN_ADDR COUNT`.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axp_egress_proxy::child::{CHILD_ARG, Control, Event, Listen, PROTOCOL_VERSION, Start};
use axp_egress_proxy::{AuditRecord, Budget, Observer, Policy, Proxy, ProxyConfig};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

struct Child {
    _proc: tokio::process::Child,
    _stdin: tokio::process::ChildStdin,
}

async fn start_child(exe: &Path, dir: &Path, dns: &str, key: &str, seen: Arc<AtomicU64>) -> (Child, Duration) {
    let t = Instant::now();
    let mut proc = tokio::process::Command::new(exe)
        .arg(CHILD_ARG)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = proc.stdin.take().unwrap();
    let mut lines = BufReader::new(proc.stdout.take().unwrap()).lines();
    let start = Control::Start(Start {
        version: PROTOCOL_VERSION,
        dir: dir.to_path_buf(),
        max_connections: 64,
        max_bytes: None,
        bytes_used: 0,
        idle_timeout_ms: 300_000,
        resolvers: vec![dns.parse().unwrap()],
        dangerously_allow_private: vec!["127.0.0.0/8".into()],
    });
    let listen = Control::Listen(Listen {
        key: key.into(),
        socket: dir.join(format!("{key}.sock")),
        audit: dir.join(format!("{key}.jsonl")),
        allow: vec!["bench.test".into()],
    });
    for c in [start, listen] {
        stdin.write_all(format!("{}\n", serde_json::to_string(&c).unwrap()).as_bytes()).await.unwrap();
    }
    loop {
        let line = lines.next_line().await.unwrap().unwrap();
        if matches!(serde_json::from_str(&line).unwrap(), Event::Listening { .. }) {
            break;
        }
    }
    let took = t.elapsed();
    // The gateway's side: decode every attempt and hand it on.
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(Event::Attempt(w)) = serde_json::from_str::<Event>(&line) {
                let _record: AuditRecord = (*w).into_record();
                seen.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    (Child { _proc: proc, _stdin: stdin }, took)
}

async fn start_in_process(dir: &Path, dns: &str, key: &str, seen: Arc<AtomicU64>) -> (PathBuf, Duration) {
    let t = Instant::now();
    let sock = dir.join(format!("{key}.sock"));
    let cfg = ProxyConfig {
        listen_unix: vec![sock.clone()],
        policy: Policy {
            allow: vec!["bench.test".parse().unwrap()],
            dangerously_allow_private: vec!["127.0.0.0/8".parse().unwrap()],
            ..Policy::default()
        },
        resolvers: vec![dns.parse().unwrap()],
        audit: Some(dir.join(format!("{key}.jsonl"))),
        observer: Some(Observer(Arc::new(move |_r: &AuditRecord| {
            seen.fetch_add(1, Ordering::Relaxed);
        }))),
        budget: Some(Budget::new(64, None)),
        ..ProxyConfig::default()
    };
    let proxy = Proxy::bind(cfg).await.unwrap();
    let took = t.elapsed();
    tokio::spawn(proxy.run(std::future::pending()));
    (sock, took)
}

async fn get(sock: &Path, authority: &str, path: &str, buf: &mut [u8]) -> usize {
    let mut s = UnixStream::connect(sock).await.unwrap();
    let req = format!("GET http://{authority}{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut bytes = 0;
    loop {
        let n = s.read(buf).await.unwrap();
        if n == 0 {
            break;
        }
        if bytes == 0 {
            assert!(buf.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n.min(200)]));
        }
        bytes += n;
    }
    bytes
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (exe, dns, origin, count) = (PathBuf::from(&a[1]), &a[2], &a[3], a[4].parse::<usize>().unwrap());
    let authority = format!("bench.test:{}", origin.rsplit(':').next().unwrap());
    let tmp = std::env::temp_dir().join(format!("axp-child-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let dir = tmp.canonicalize().unwrap();

    let (mut start_in, mut start_child_ms) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let (_, t) = start_in_process(&dir, dns, &format!("warm-in-{i}"), Arc::default()).await;
        start_in.push(t.as_secs_f64() * 1000.0);
        let (c, t) = start_child(&exe, &dir, dns, &format!("warm-child-{i}"), Arc::default()).await;
        start_child_ms.push(t.as_secs_f64() * 1000.0);
        drop(c);
    }

    let (seen_in, seen_child) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (in_sock, _) = start_in_process(&dir, dns, "in", seen_in.clone()).await;
    let (_child, _) = start_child(&exe, &dir, dns, "child", seen_child.clone()).await;
    let child_sock = dir.join("child.sock");
    let mut buf = vec![0u8; 256 * 1024];
    for _ in 0..50 {
        get(&in_sock, &authority, "/1k", &mut buf).await;
        get(&child_sock, &authority, "/1k", &mut buf).await;
    }
    let (mut lat_in, mut lat_child) = (Vec::new(), Vec::new());
    for _ in 0..count {
        let t = Instant::now();
        get(&in_sock, &authority, "/1k", &mut buf).await;
        lat_in.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        get(&child_sock, &authority, "/1k", &mut buf).await;
        lat_child.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (mut mb_in, mut mb_child) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        for (sock, out) in [(&in_sock, &mut mb_in), (&child_sock, &mut mb_child)] {
            let t = Instant::now();
            let n = get(sock, &authority, "/100m", &mut buf).await;
            out.push(n as f64 / t.elapsed().as_secs_f64() / 1e6);
        }
    }
    // Let the last records arrive.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rps = |l: &[f64]| l.len() as f64 / (l.iter().sum::<f64>() / 1000.0);
    let out = serde_json::json!({
        "startup_ms": {"in_process": median(start_in), "child": median(start_child_ms)},
        "requests": count,
        "req_per_s": {"in_process": rps(&lat_in), "child": rps(&lat_child)},
        "p50_ms": {"in_process": median(lat_in.clone()), "child": median(lat_child.clone())},
        "mb_per_s": {"in_process": median(mb_in), "child": median(mb_child)},
        "records": {"in_process": seen_in.load(Ordering::Relaxed), "child": seen_child.load(Ordering::Relaxed)},
    });
    println!("{out}");
    let _ = std::fs::remove_dir_all(&tmp);
}
