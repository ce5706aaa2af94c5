//! Network plumbing inside the sandbox's network namespace: bring up `lo`, and (with
//! `NetPolicy::Proxy`) a forwarder process that listens on `127.0.0.1:PORT` and relays every TCP
//! connection to the egress proxy's pathname unix socket on the host (pathname sockets are found
//! through the filesystem, so they cross network namespaces; the socket's directory is bound
//! read-only into the root).
//!
//! The forwarder is forked by the namespace's init before the target, carries no Landlock domain
//! (so the target's scoped signals cannot reach it) and dies with init. It must not decide
//! anything: the proxy enforces the allowlist.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Sets `IFF_UP` on `lo` in the current network namespace.
pub(crate) fn loopback_up() -> Result<(), String> {
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    // SAFETY: a datagram socket used only for the two interface ioctls below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(format!("socket for lo: {}", std::io::Error::last_os_error()));
    }
    let mut req = IfReq { name: [0; 16], flags: 0, _pad: [0; 22] };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: the ioctls read and write the 40-byte ifreq-compatible local struct.
    let r = unsafe {
        let mut r = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req as *mut IfReq);
        if r == 0 {
            req.flags |= libc::IFF_UP as libc::c_short;
            r = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req as *const IfReq);
        }
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if r != 0 { Err(e) } else { Ok(()) }
    };
    r.map_err(|e| format!("bringing up lo: {e}"))
}

fn relay(tcp: TcpStream, sock: &Path) {
    let Ok(unix) = UnixStream::connect(sock) else {
        return;
    };
    let (Ok(mut tcp_r), Ok(mut unix_w)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let up = std::thread::spawn(move || {
        copy(&mut tcp_r, &mut unix_w);
        let _ = unix_w.shutdown(Shutdown::Write);
    });
    let mut unix_r = unix;
    let mut tcp_w = tcp;
    copy(&mut unix_r, &mut tcp_w);
    let _ = tcp_w.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// Copies until `from` ends or either side fails, 256 KiB a call. Measured for a 400 MiB
/// unix → TCP stream on the development VM (2026-12-02, three runs): 16 KiB calls (what this
/// was) moved 1.7-2.5 GB/s, 256 KiB calls 3.2-3.6 GB/s, and `splice(2)` through a pipe no more
/// (3.1-3.4 GB/s: a unix socket's splice still copies), so plain copying it is.
/// (`std::io::copy` would use an 8 KiB buffer between two sockets.)
fn copy(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

/// Binds the listener (so it is ready before the target starts) and forks the forwarder.
pub(crate) fn spawn_forwarder(unix_socket: &Path, port: u16) -> Result<(), String> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("forwarder cannot listen on 127.0.0.1:{port}: {e}"))?;
    let sock: PathBuf = unix_socket.to_path_buf();
    // SAFETY: the init process is single-threaded, so the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork forwarder: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let keep = listener.as_raw_fd() as u32;
        // SAFETY: prctl with integers; close_range closes everything but the listener and stdio.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            libc::prctl(libc::PR_SET_DUMPABLE, 0);
            if keep > 3 {
                libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
            }
            libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
        }
        for tcp in listener.incoming().flatten() {
            let sock = sock.clone();
            std::thread::spawn(move || relay(tcp, &sock));
        }
        // SAFETY: the accept loop only ends if the listener fails; end the helper.
        unsafe { libc::_exit(0) }
    }
    drop(listener);
    Ok(())
}
