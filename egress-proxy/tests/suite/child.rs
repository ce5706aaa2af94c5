//! The per-owner child (`axp-egress-proxy __egress-proxy`) as the gateway drives it: a real
//! process on real pipes, real UNIX sockets, the test zone's DNS and an HTTP upstream. What the
//! control protocol promises (acknowledged listeners, one attempt event per attempt, a clean
//! exit when stdin closes), what it refuses (paths outside its directory, bad grants, malformed
//! or foreign control lines, with a clear error and no hang), and that the process is confined.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use axp_egress_proxy::child::{CHILD_ARG, Control, Event, Listen, PROTOCOL_VERSION, Start};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::fixtures::{Dns, UP_IP, Upstream};

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    out: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl Proc {
    fn spawn() -> Proc {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_axp-egress-proxy"));
        cmd.arg(CHILD_ARG);
        Self::spawn_cmd(cmd)
    }

    /// As [`Proc::spawn`], with `path` open for reading on an inherited descriptor (as a parent
    /// that leaked one would hand it on): python opens it inheritable and execs the child.
    fn spawn_leaking(path: &Path) -> Proc {
        let mut cmd = tokio::process::Command::new("python3");
        cmd.args([
            "-c",
            "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.set_inheritable(fd, True); \
             os.execve(sys.argv[2], [sys.argv[2], sys.argv[3]], {})",
        ])
        .arg(path)
        .arg(env!("CARGO_BIN_EXE_axp-egress-proxy"))
        .arg(CHILD_ARG);
        Self::spawn_cmd(cmd)
    }

    fn spawn_cmd(mut cmd: tokio::process::Command) -> Proc {
        let mut child = cmd
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap()).lines();
        Proc { child, stdin, out }
    }

    async fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn send(&mut self, c: &Control) {
        self.send_raw(&serde_json::to_string(c).unwrap()).await;
    }

    async fn event(&mut self) -> Event {
        let line = tokio::time::timeout(Duration::from_secs(5), self.out.next_line())
            .await
            .expect("the child said nothing for 5 s")
            .unwrap()
            .expect("the child closed its stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Exit code and stderr, once the child has exited (within 5 s).
    async fn exit(mut self) -> (i32, String) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .expect("the child did not exit within 5 s")
            .unwrap();
        let mut err = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut err).await.unwrap();
        (status.code().unwrap_or(-1), err)
    }
}

fn start(dir: &Path, dns: &Dns, max_bytes: Option<u64>, bytes_used: u64) -> Control {
    Control::Start(Start {
        version: PROTOCOL_VERSION,
        dir: dir.to_path_buf(),
        max_connections: 8,
        max_bytes,
        bytes_used,
        idle_timeout_ms: 5000,
        resolvers: vec![dns.addr],
        dangerously_allow_private: vec!["127.0.0.2/32".into()],
    })
}

fn listen(dir: &Path, key: &str, allow: &[&str]) -> Control {
    Control::Listen(Listen {
        key: key.into(),
        socket: dir.join(format!("{key}.sock")),
        audit: dir.join(format!("{key}.jsonl")),
        allow: allow.iter().map(|s| s.to_string()).collect(),
    })
}

/// Sends `head` on the UNIX socket and returns the whole answer.
async fn ask(sock: &Path, head: &str) -> String {
    let mut s = tokio::net::UnixStream::connect(sock).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn elsewhere_file() -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), "the parent's secret").unwrap();
    f
}

fn get(host: &str, port: u16) -> String {
    format!("GET http://{host}:{port}/ HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n")
}

#[tokio::test]
async fn a_child_serves_acknowledged_listeners_reports_each_attempt_and_cleans_up_at_eof() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "up").await;
    let port = up.addr.port();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    // Its parent leaked a descriptor on a file outside its directory; the child closes it.
    let leaked = elsewhere_file();
    let mut p = Proc::spawn_leaking(leaked.path());
    p.send(&start(&dir, &dns, None, 0)).await;
    let Event::Ready { pid, confinement } = p.event().await else { panic!("no ready event") };
    // (At least that one: a test harness leaks some of its own too.)
    let closed: usize = confinement.rsplit("; ").next().unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(closed >= 1, "{confinement}");
    assert_eq!(Some(pid), p.child.id());
    // This host (Landlock ABI >= 6, seccomp) confines the child fully; a weaker host says so here.
    assert!(confinement.starts_with("landlock fully enforced"), "{confinement}");
    assert!(confinement.contains("seccomp on"), "{confinement}");

    p.send(&listen(&dir, "a", &["allowed.test"])).await;
    assert_eq!(p.event().await, Event::Listening { key: "a".into() });
    // Its attempt log is its owner's alone: created 0600.
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(dir.join("a.jsonl")).unwrap().permissions());
    assert_eq!(mode & 0o7777, 0o600);
    // Refused listeners say why and leave the child serving.
    let mut outside = listen(&dir, "b", &["allowed.test"]);
    if let Control::Listen(l) = &mut outside {
        l.socket = std::env::temp_dir().join("b.sock");
    }
    p.send(&outside).await;
    let Event::Failed { key, error } = p.event().await else { panic!("a socket outside the dir was accepted") };
    assert_eq!(key, "b");
    assert!(error.contains("is not inside the egress directory"), "{error}");
    p.send(&listen(&dir, "c", &["allowed.test:99999"])).await;
    let Event::Failed { error, .. } = p.event().await else { panic!("a bad grant was accepted") };
    assert!(error.starts_with("network grant `allowed.test:99999`"), "{error}");

    // A symlink planted in its directory does not lead the child out of it: Landlock refuses
    // the write at the link's target.
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("outside.jsonl");
    std::os::unix::fs::symlink(&target, dir.join("d.jsonl")).unwrap();
    p.send(&listen(&dir, "d", &["allowed.test"])).await;
    let Event::Failed { error, .. } = p.event().await else { panic!("the child wrote through a symlink") };
    assert!(error.contains("cannot open the audit log") && error.contains("Permission denied"), "{error}");
    assert!(!target.exists());
    // An attempt log that others may read (as the proxy once created them) is made its owner's
    // alone before anything is written to it.
    let shared = dir.join("e.jsonl");
    std::fs::write(&shared, "").unwrap();
    std::fs::set_permissions(&shared, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    p.send(&listen(&dir, "e", &["allowed.test"])).await;
    assert_eq!(p.event().await, Event::Listening { key: "e".into() });
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&shared).unwrap().permissions());
    assert_eq!(mode & 0o7777, 0o600);

    let sock = dir.join("a.sock");
    let ok = ask(&sock, &get("allowed.test", port)).await;
    assert!(ok.starts_with("HTTP/1.1 200") && ok.contains("upstream up"), "{ok}");
    let Event::Attempt(r) = p.event().await else { panic!("no attempt event") };
    assert_eq!((r.decision.as_str(), r.reason.as_str()), ("allow", "granted"), "{r:?}");
    assert_eq!(r.target.as_deref(), Some(format!("allowed.test:{port}").as_str()));
    let denied = ask(&sock, &get("evil.test", port)).await;
    assert!(denied.starts_with("HTTP/1.1 403"), "{denied}");
    let Event::Attempt(r) = p.event().await else { panic!("no attempt event") };
    assert_eq!((r.decision.as_str(), r.reason.as_str()), ("deny", "not_granted"), "{r:?}");

    // The process is confined: no new privileges, seccomp filtering, no capabilities, nothing
    // of the parent's environment, and no descriptor on a file outside its directory.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for want in ["NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000"] {
        assert!(status.lines().any(|l| l == want), "{want} missing:\n{status}");
    }
    assert!(std::fs::read(format!("/proc/{pid}/environ")).unwrap().is_empty());
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().flatten() {
        let Ok(to) = std::fs::read_link(fd.path()) else { continue };
        let to = to.to_string_lossy().into_owned();
        let kernel_object = ["pipe:", "socket:", "anon_inode:", "/dev/null"].iter().any(|k| to.starts_with(k));
        assert!(kernel_object || to.starts_with(&*dir.to_string_lossy()), "fd {:?} -> {to}", fd.file_name());
        assert!(!to.starts_with(&*leaked.path().to_string_lossy()), "the leaked descriptor survived");
    }

    // Stdin closes: the child stops its listeners, removes their sockets and exits 0; the
    // attempt log stays (the gateway decides about it).
    let (code, err) = p.exit().await;
    assert_eq!(code, 0, "{err}");
    assert!(!sock.exists());
    let log = std::fs::read_to_string(dir.join("a.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 2, "{log}");
}

/// A restarted child is told what its predecessor spent: a crash does not refill the budget.
#[tokio::test]
async fn a_budget_spent_before_a_restart_stays_spent() {
    let dns = Dns::start().await;
    let up = Upstream::start(UP_IP, 0, "up").await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let mut p = Proc::spawn();
    p.send(&start(&dir, &dns, Some(1000), 1000)).await;
    assert!(matches!(p.event().await, Event::Ready { .. }));
    p.send(&listen(&dir, "a", &["allowed.test"])).await;
    assert_eq!(p.event().await, Event::Listening { key: "a".into() });
    let answer = ask(&dir.join("a.sock"), &get("allowed.test", up.addr.port())).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let Event::Attempt(r) = p.event().await else { panic!("no attempt event") };
    assert_eq!((r.decision.as_str(), r.reason.as_str()), ("deny", "byte_limit"), "{r:?}");
}

#[tokio::test]
async fn a_malformed_or_foreign_control_line_is_a_clear_error_not_a_hang() {
    let dns = Dns::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let cases: Vec<(String, &str)> = vec![
        ("hello".into(), "malformed control line ("),
        (
            serde_json::to_string(&listen(tmp.path(), "a", &["a.test"])).unwrap(),
            "the first control line must be `start`",
        ),
        (
            serde_json::to_string(&start(tmp.path(), &dns, None, 0))
                .unwrap()
                .replace(&format!("\"version\":{PROTOCOL_VERSION}"), "\"version\":99"),
            "control protocol version 99, this build speaks 1",
        ),
        (
            serde_json::to_string(&start(&tmp.path().join("missing"), &dns, None, 0)).unwrap(),
            "is not an existing absolute directory",
        ),
    ];
    for (line, want) in cases {
        let mut p = Proc::spawn();
        p.send_raw(&line).await;
        let (code, err) = p.exit().await;
        assert_eq!(code, 2, "{line}: {err}");
        assert!(err.starts_with("axp __egress-proxy: error: ") && err.contains(want), "{line}: {err}");
    }
    // After a good start, a malformed line ends the child the same way.
    let mut p = Proc::spawn();
    p.send(&start(tmp.path(), &dns, None, 0)).await;
    assert!(matches!(p.event().await, Event::Ready { .. }));
    p.send_raw("{\"op\":\"listen\"}").await;
    let (code, err) = p.exit().await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("malformed control line"), "{err}");
}
