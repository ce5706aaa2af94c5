//! Benchmark floor for `bench.sh`: what a bare userspace HTTP forward relay does on this
//! machine. Blocking std sockets, one connection at a time, no allowlist, no resolver, no
//! audit, no timeouts, a fresh upstream connection per request: read the request head, connect
//! to the fixed origin, send the origin-form request (`Connection: close`), copy the response
//! through a 512 KiB buffer (the proxy's largest; the tokio variant grows to it from 16 KiB, as
//! the proxy's copy path does), close. It shows how much of a relay's cost is the extra hop
//! itself (two more sockets, two more copies, more wake-ups) rather than checks; it must never
//! be used as a proxy. Prints `relay=IP:PORT`. Usage:
//! `bench_relay ORIGIN_ADDR [tokio|threads|splice|splice2]`: `tokio` runs the same relay on a
//! current-thread tokio runtime (task per connection, as the proxy does), which separates the
//! cost of the runtime's readiness machinery from the proxy's own work; `threads` copies the
//! response on two threads (one reads the origin while the other writes the client); `splice`
//! moves it through a 1 MiB pipe with `splice(2)`, never through user memory, and `splice2`
//! does that with one thread filling the pipe and another draining it.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};

/// The path of `GET http://host:port/path HTTP/1.1`, once the head is complete.
fn origin_request(head: &[u8]) -> Option<String> {
    let line = String::from_utf8_lossy(head);
    let path = line.split(' ').nth(1)?.splitn(4, '/').nth(3)?;
    Some(format!("GET /{path} HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n"))
}

async fn on_tokio(origin: String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("relay={}", l.local_addr().unwrap());
    loop {
        let Ok((mut c, _)) = l.accept().await else { continue };
        let origin = origin.clone();
        tokio::spawn(async move {
            let _ = c.set_nodelay(true);
            // Grows like the proxy's (16 KiB doubling to 512 KiB): a large buffer zeroed per
            // connection would cost more than everything else on a 1 KiB GET.
            let mut buf = vec![0u8; 16 * 1024];
            let mut head = Vec::new();
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let Some(req) = origin_request(&head) else { return };
            let Ok(mut u) = tokio::net::TcpStream::connect(&origin).await else { return };
            let _ = u.set_nodelay(true);
            if u.write_all(req.as_bytes()).await.is_err() {
                return;
            }
            loop {
                match u.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if c.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        if n == buf.len() && n < 512 * 1024 {
                            buf.resize(n * 2, 0);
                        }
                    }
                }
            }
            let _ = c.shutdown().await;
        });
    }
}

/// Upstream → client with the reading and the writing on two threads and two 512 KiB buffers,
/// so that one socket is read while the other is written (a single loop does one, then the
/// other).
fn copy_on_two_threads(u: &mut TcpStream, c: &TcpStream) {
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(1);
    let (empty_tx, empty_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
    for _ in 0..2 {
        empty_tx.send(vec![0u8; 512 * 1024]).unwrap();
    }
    let mut c = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        while let Ok((b, n)) = full_rx.recv() {
            if c.write_all(&b[..n]).is_err() || empty_tx.send(b).is_err() {
                break;
            }
        }
    });
    while let Ok(mut b) = empty_rx.recv() {
        match u.read(&mut b) {
            Ok(n) if n > 0 && full_tx.send((b, n)).is_ok() => {}
            _ => break,
        }
    }
    drop(full_tx);
    let _ = writer.join();
}

/// Upstream → client through a pipe with `splice(2)`, never through user memory. `two`: one
/// thread fills the pipe while another drains it.
fn splice_through_pipe(u: &TcpStream, c: &TcpStream, two: bool) {
    use rustix::pipe::{SpliceFlags, fcntl_setpipe_size, pipe, splice};
    let (r, w) = pipe().unwrap();
    let _ = fcntl_setpipe_size(&w, 1 << 20);
    let fill = move |u: &TcpStream, w: &rustix::fd::OwnedFd| splice(u, None, w, None, 1 << 20, SpliceFlags::MOVE);
    if two {
        let c = c.try_clone().unwrap();
        let drain = std::thread::spawn(move || {
            while matches!(splice(&r, None, &c, None, 1 << 20, SpliceFlags::MOVE), Ok(n) if n > 0) {}
        });
        while matches!(fill(u, &w), Ok(n) if n > 0) {}
        drop(w);
        let _ = drain.join();
        return;
    }
    while let Ok(mut n) = fill(u, &w) {
        if n == 0 {
            break;
        }
        while n > 0 {
            match splice(&r, None, c, None, n, SpliceFlags::MOVE) {
                Ok(m) if m > 0 => n -= m,
                _ => return,
            }
        }
    }
}

fn main() {
    let origin = std::env::args().nth(1).unwrap();
    if std::env::args().nth(2).as_deref() == Some("tokio") {
        return tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(on_tokio(origin));
    }
    let mode = std::env::args().nth(2).unwrap_or_default();
    let threads = mode == "threads";
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("relay={}", l.local_addr().unwrap());
    let mut buf = vec![0u8; 512 * 1024];
    for c in l.incoming() {
        let Ok(mut c) = c else { continue };
        let _ = c.set_nodelay(true);
        let mut head = Vec::new();
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match c.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let Some(req) = origin_request(&head) else { continue };
        let Ok(mut u) = TcpStream::connect(&origin) else { continue };
        let _ = u.set_nodelay(true);
        if u.write_all(req.as_bytes()).is_err() {
            continue;
        }
        if threads {
            copy_on_two_threads(&mut u, &c);
        } else if mode.starts_with("splice") {
            splice_through_pipe(&u, &c, mode == "splice2");
        } else {
            loop {
                match u.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
        }
        let _ = c.shutdown(Shutdown::Write);
    }
}
