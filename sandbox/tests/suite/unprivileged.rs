//! The unprivileged path: CI runs as root, so these tests drop to uid/gid 65534 with `setpriv`
//! (a world-executable copy of the test binary in a 0755 directory) and check that the sandbox
//! still starts, allowed work still succeeds, and the whole attack battery still fails.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::Command;

use super::attacks::{NOBODY, Runner, load, run_attack};
use super::{bin, run_cmd, workspace};

/// Copies the test binary where uid 65534 can execute it, once per test run. The directory is
/// leaked on purpose (a few MB in /tmp) so concurrent tests never race on its removal.
fn unprivileged_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(copy_bin).clone()
}

fn copy_bin() -> PathBuf {
    let dir = tempfile::Builder::new().prefix("axp-unpriv-bin-").tempdir().expect("tempdir").keep();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let dst = dir.join("axp-sandbox-test");
    std::fs::copy(bin(), &dst).expect("copy binary");
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).expect("chmod bin");
    // Another test thread may fork while the copy's write descriptor is open; that child holds
    // it until its own exec, and executing the copy meanwhile fails with ETXTBSY. Wait it out.
    for _ in 0..100 {
        match Command::new(&dst).arg("--version-probe").output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => break,
        }
    }
    dst
}

fn chown_nobody(p: &std::path::Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: chown on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), NOBODY, NOBODY) }, 0, "chown");
}

#[test]
fn unprivileged_user_runs_the_sandbox() {
    let b = unprivileged_bin();
    let ws = workspace();
    chown_nobody(ws.path());
    let out = ws.path().join("made-by-nobody");
    let script = format!(
        "id -u; echo ok > {}; seq 1 100 | sort -rn | head -1; python3 -c 'print(2+2)'; cat /proc/self/status | grep -E '^(NoNewPrivs|Seccomp):'",
        out.display()
    );
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&b)
        .args(["run", "--workspace"])
        .arg(ws.path())
        .args(["--", "sh", "-c", &script]);
    let o = run_cmd(c, 20);
    assert_eq!(o.code(), Some(0), "{o:?}");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[..3], ["65534", "100", "4"], "{o:?}");
    assert!(o.stdout.contains("NoNewPrivs:\t1") && o.stdout.contains("Seccomp:\t2"), "{o:?}");
    let meta = std::fs::metadata(&out).expect("file written in the workspace");
    assert_eq!(meta.uid(), NOBODY, "the file keeps the user's uid on the host");
}

#[test]
fn unprivileged_user_attack_battery() {
    let runner = Runner::Unprivileged { bin: unprivileged_bin() };
    let attacks = load();
    let failures: Vec<String> = attacks.iter().filter_map(|a| run_attack(&runner, a).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} attacks were not stopped for an unprivileged user:\n{}",
        failures.len(),
        attacks.len(),
        failures.join("\n---\n")
    );
}

#[test]
fn unprivileged_check_grants_kernel_lsm() {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(unprivileged_bin()).arg("check");
    let o = run_cmd(c, 10);
    assert_eq!(o.code(), Some(0), "{o:?}");
    assert!(o.stdout.contains("tier kernel-lsm: available"), "{o:?}");
}

#[test]
fn unprivileged_user_reaches_the_proxy_through_the_forwarder() {
    use std::io::{Read, Write};
    let dir = tempfile::Builder::new().prefix("axp-proxy-").tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let sock = dir.path().join("proxy.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).expect("chmod sock");
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 16];
            if let Ok(n) = s.read(&mut buf) {
                // One write: the client reads its answer with a single recv.
                let _ = s.write_all(&[b"via-proxy:".as_slice(), &buf[..n]].concat());
            }
        }
    });
    let ws = workspace();
    chown_nobody(ws.path());
    let code = "import socket; s=socket.create_connection(('127.0.0.1',18080),timeout=5); s.sendall(b'hi'); print(s.recv(64).decode())";
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(unprivileged_bin())
        .args(["run", "--workspace"])
        .arg(ws.path())
        .arg("--proxy")
        .arg(format!("{}:18080", sock.display()))
        .args(["--", "python3", "-c", code]);
    let o = run_cmd(c, 20);
    assert_eq!(o.code(), Some(0), "{o:?}");
    assert_eq!(o.stdout.trim(), "via-proxy:hi", "{o:?}");
}
