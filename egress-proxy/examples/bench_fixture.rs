//! Benchmark fixture for `bench.sh`: a DNS server (hickory-server) that answers every A query
//! with 127.0.0.2, and an HTTP/1.1 origin on 127.0.0.2 serving `/1k` (1 KiB) and `/100m`
//! (100 MiB), with HTTP/1.1 persistent connections. Prints `dns=IP:PORT http=IP:PORT` and runs until
//! killed. Not part of the proxy; it only exists so the benchmark has real parts to talk to.

#![allow(clippy::unwrap_used)]

use std::net::Ipv4Addr;
use std::time::Duration;

use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::proto::op::Metadata;
use hickory_server::proto::rr::rdata::A;
use hickory_server::proto::rr::{Name, RData, Record, RecordType};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

struct Everything;

#[async_trait::async_trait]
impl RequestHandler for Everything {
    async fn handle_request<R: ResponseHandler, T: Time>(&self, request: &Request, mut rh: R) -> ResponseInfo {
        let info = request.request_info().unwrap();
        let mut md = Metadata::response_from_request(&request.metadata);
        md.authoritative = true;
        let owner = Name::from(info.query.name().clone());
        let records: Vec<Record> = if info.query.query_type() == RecordType::A {
            vec![Record::from_rdata(owner, 300, RData::A(A(Ipv4Addr::new(127, 0, 0, 2))))]
        } else {
            vec![]
        };
        let resp = MessageResponseBuilder::from_message_request(request).build(md, records.iter(), [], [], []);
        rh.send_response(resp).await.unwrap()
    }
}

#[tokio::main]
async fn main() {
    let mut server = Server::new(Everything);
    let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let dns = udp.local_addr().unwrap();
    server.register_socket(udp);
    server.register_listener(TcpListener::bind(dns).await.unwrap(), Duration::from_secs(5), 4096);
    let http = TcpListener::bind("127.0.0.2:0").await.unwrap();
    println!("dns={dns} http={}", http.local_addr().unwrap());
    let chunk = vec![b'x'; 1 << 20];
    let chunk: &'static [u8] = Box::leak(chunk.into_boxed_slice());
    loop {
        let (mut s, _) = http.accept().await.unwrap();
        let _ = s.set_nodelay(true);
        tokio::spawn(async move {
            // HTTP/1.1 persistence, as any real origin has it: requests are served in turn on
            // one connection until one says `Connection: close` (what the benchmark client and
            // the proxies' upstream requests for HTTP/1.0 send) or the client closes.
            let mut buf = vec![0u8; 8192];
            let mut got = Vec::new();
            loop {
                let end = loop {
                    if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                got.drain(..end);
                let close = head.contains("\r\nconnection: close") || head.contains(" http/1.0\r\n");
                let len: usize = if head.starts_with("get /100m") { 100 << 20 } else { 1024 };
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n{}\r\n",
                    if close { "Connection: close\r\n" } else { "" }
                );
                if s.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut left = len;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
                if close {
                    let _ = s.shutdown().await;
                    return;
                }
            }
        });
    }
}
