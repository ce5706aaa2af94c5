//! Benchmark client for `bench.sh`: N sequential GETs, each on a fresh TCP connection, either
//! straight to the origin or through an HTTP proxy (absolute-form), reporting requests/s, p50 and
//! p99 latency and throughput. Usage:
//! `bench_client (direct|PROXY_ADDR) HOST:PORT ORIGIN_ADDR PATH COUNT`.

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (via, authority, origin, path, count) =
        (&a[1], &a[2], &a[3], &a[4], a[5].parse::<usize>().unwrap());
    let mut lat = Vec::with_capacity(count);
    let mut bytes = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    let start = Instant::now();
    for _ in 0..count {
        let t = Instant::now();
        let (addr, target) = if via == "direct" {
            (origin.clone(), path.clone())
        } else {
            (via.clone(), format!("http://{authority}{path}"))
        };
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        let req =
            format!("GET {target} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut first = true;
        loop {
            let n = s.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            if first {
                assert!(
                    buf.starts_with(b"HTTP/1.1 200"),
                    "{}",
                    String::from_utf8_lossy(&buf[..n.min(200)])
                );
                first = false;
            }
            bytes += n;
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let total = start.elapsed().as_secs_f64();
    lat.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let p = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{{\"requests\":{count},\"seconds\":{total:.4},\"req_per_s\":{:.1},\"p50_ms\":{:.4},\"p99_ms\":{:.4},\"mb_per_s\":{:.1}}}",
        count as f64 / total,
        p(0.5),
        p(0.99),
        bytes as f64 / total / 1e6
    );
}
