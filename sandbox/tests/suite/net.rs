//! Network plumbing: with `NetPolicy::Proxy`, the in-namespace forwarder on 127.0.0.1:PORT
//! relays to a host unix socket (a tiny test-only echo or HTTP server stands in for the egress
//! proxy), the proxy variables point at it, and every other TCP port stays refused.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::sync::mpsc;

use super::{policy, sandboxed, workspace};

const PORT: u16 = 18080;

fn unix_server(
    handler: impl Fn(std::os::unix::net::UnixStream) + Send + 'static,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new().prefix("axp-proxy-").tempdir().expect("tempdir");
    let sock = dir.path().join("proxy.sock");
    let listener = UnixListener::bind(&sock).expect("bind unix socket");
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            handler(s);
        }
    });
    (dir, sock)
}

#[test]
fn forwarder_relays_tcp_to_the_host_unix_socket() {
    let (_dir, sock) = unix_server(|mut s| {
        let mut buf = [0u8; 64];
        if let Ok(n) = s.read(&mut buf) {
            // One write: a client's single recv() must see the whole reply (two writes could
            // arrive as two TCP segments and make the test flaky).
            let _ = s.write_all(&[b"echo:".as_slice(), &buf[..n]].concat());
        }
    });
    let ws = workspace();
    let p = policy(ws.path()).net_proxy(&sock, PORT).build().expect("policy");
    let code = format!(
        "import socket,os\n\
         s=socket.create_connection(('127.0.0.1',{PORT}),timeout=5)\n\
         s.sendall(b'ping'); print(s.recv(64).decode())\n\
         print(os.environ['HTTP_PROXY'], repr(os.environ['NO_PROXY']))\n\
         try:\n    socket.create_connection(('127.0.0.1',{}),timeout=2)\n\
         except OSError as e: print('other port:', e.strerror)",
        PORT + 1
    );
    let o = sandboxed(&p, &["python3", "-c", &code]);
    assert_eq!(o.code(), Some(0), "{o:?}");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], "echo:ping", "{o:?}");
    assert_eq!(lines[1], format!("http://127.0.0.1:{PORT} ''"), "{o:?}");
    assert_eq!(lines[2], "other port: Permission denied", "{o:?}");
}

#[test]
fn http_clients_go_through_the_proxy_variables() {
    let (tx, rx) = mpsc::channel::<String>();
    let (_dir, sock) = unix_server(move |s| {
        let mut r = BufReader::new(s.try_clone().expect("clone"));
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        let _ = tx.send(line.trim_end().to_string());
        let mut s = s;
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nproxied");
    });
    let ws = workspace();
    let p = policy(ws.path()).net_proxy(&sock, PORT).build().expect("policy");
    let code =
        "import urllib.request; print(urllib.request.urlopen('http://example.com/axp', timeout=5).read().decode())";
    let o = sandboxed(&p, &["python3", "-c", code]);
    assert_eq!(o.code(), Some(0), "{o:?}");
    assert_eq!(o.stdout.trim(), "proxied");
    let request = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("request");
    assert_eq!(request, "GET http://example.com/axp HTTP/1.1");
}

#[test]
fn without_proxy_no_tcp_connect_is_allowed_even_on_loopback() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let code = "import socket\ns=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); port=s.getsockname()[1]\ntry:\n    socket.create_connection(('127.0.0.1',port),timeout=2)\nexcept OSError as e: print(e.strerror)";
    let o = sandboxed(&p, &["python3", "-c", code]);
    assert_eq!(o.code(), Some(0), "{o:?}");
    assert_eq!(o.stdout.trim(), "Permission denied");
}
