//! Progress people can see, through the real `axp` binary with its stderr on a real
//! pseudo-terminal (and its stdout on a pipe, as a script reads it): `axp lint --mcp-config`
//! while the fleet's servers start, `axp serve` while they mount (one of them failing), and
//! `axp provider add` while a WASM component compiles. On the terminal each shows a spinner and
//! a line with its time per server or step; with stderr on a pipe there is no control sequence
//! in it; `--quiet` silences the progress; and stdout is the same bytes in every case.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

/// A pseudo-terminal: the controlling side, read by a thread that sends what it reads, and the
/// terminal side, handed to a child as its stderr.
struct Pty {
    chunks: mpsc::Receiver<Vec<u8>>,
    terminal: std::fs::File,
}

fn open_pty() -> Pty {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let terminal = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(name.to_str().unwrap())
        .unwrap();
    let size = rustix::termios::Winsize { ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 };
    rustix::termios::tcsetwinsize(&terminal, size).unwrap();
    let (tx, chunks) = mpsc::channel();
    let mut master = std::fs::File::from(master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // EIO once every holder of the terminal side has closed it.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    Pty { chunks, terminal }
}

/// `axp ARGS…` with stdout on a pipe and stderr on a terminal (`tty`) or on a pipe.
fn command(args: &[&str], cwd: &Path) -> Command {
    let mut c = Command::new(axp());
    c.args(args)
        .current_dir(cwd)
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    c
}

/// Runs `axp ARGS…` to its end with stderr on a pseudo-terminal: its exit status, its stdout,
/// and everything its terminal showed.
fn on_tty(args: &[&str], cwd: &Path) -> (Output, String) {
    let pty = open_pty();
    let child = command(args, cwd).stderr(pty.terminal.try_clone().unwrap()).spawn().unwrap();
    drop(pty.terminal);
    let out = child.wait_with_output().unwrap();
    let mut shown = Vec::new();
    while let Ok(chunk) = pty.chunks.recv_timeout(Duration::from_secs(2)) {
        shown.extend(chunk);
    }
    (out, String::from_utf8_lossy(&shown).into_owned())
}

/// Runs `axp ARGS…` to its end with stderr on a pipe.
fn on_pipe(args: &[&str], cwd: &Path) -> (Output, String) {
    let out = command(args, cwd).stderr(Stdio::piped()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, err)
}

/// What a terminal showed holds the spinner's redraws: the line cleared and drawn again.
fn redrawn(shown: &str) -> bool {
    shown.contains("\r\x1b[2K")
}

/// No control sequence, carriage return or spinner frame at all.
fn plain(text: &str) -> bool {
    !text.contains('\x1b') && !text.contains('\r') && !text.contains('⠋')
}

#[test]
fn lint_shows_each_server_start_on_a_terminal_only_and_never_on_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet.json");
    let servers = json!({"mcpServers": {
        "time": {"command": venv_bin("mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        "clock": {"command": venv_bin("mcp-server-time")}
    }});
    std::fs::write(&fleet, serde_json::to_vec(&servers).unwrap()).unwrap();
    let args = ["lint", "--mcp-config", fleet.to_str().unwrap(), "--format", "json"];

    let (tty, shown) = on_tty(&args, tmp.path());
    let code = tty.status.code();
    assert!(code == Some(0) || code == Some(1), "{shown}");
    assert!(redrawn(&shown), "no spinner on the terminal:\n{shown:?}");
    for line in ["time started in ", "clock started in ", "2 servers started in "] {
        assert!(shown.contains(line), "`{line}` missing from the terminal:\n{shown}");
    }
    let stdout = String::from_utf8(tty.stdout.clone()).unwrap();
    assert!(plain(&stdout) && !stdout.contains("started in"), "progress leaked into stdout:\n{stdout:?}");

    let (piped, err) = on_pipe(&args, tmp.path());
    assert_eq!(piped.status.code(), code, "{err}");
    assert!(plain(&err), "control sequences on a piped stderr:\n{err:?}");
    assert!(err.contains("starting 2 server(s)") && err.contains("time: ") && !err.contains("started in"), "{err}");
    let report = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).unwrap();
    assert_eq!(report(&tty.stdout), report(&piped.stdout), "stdout differs with stderr on a terminal");

    let mut quiet = args.to_vec();
    quiet.push("--quiet");
    let (q, shown) = on_tty(&quiet, tmp.path());
    assert_eq!(q.status.code(), code, "{shown}");
    assert!(!redrawn(&shown) && !shown.contains("started") && !shown.contains("starting"), "--quiet:\n{shown:?}");
    assert_eq!(report(&q.stdout), report(&piped.stdout));
}

/// A running `axp serve` with stderr on a terminal, read until it has shown each of `until` or
/// 60 s have passed.
fn serve_until(pty: Pty, mut child: Child, until: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut shown = Vec::new();
    while !until.iter().all(|u| String::from_utf8_lossy(&shown).contains(u)) && Instant::now() < deadline {
        if let Ok(chunk) = pty.chunks.recv_timeout(Duration::from_millis(200)) {
            shown.extend(chunk);
        }
    }
    // A little longer: whatever else it would print about mounting is printed by then.
    let settle = Instant::now() + Duration::from_millis(500);
    while let Ok(chunk) = pty.chunks.recv_timeout(settle.saturating_duration_since(Instant::now())) {
        shown.extend(chunk);
    }
    let _ = child.kill();
    let _ = child.wait();
    String::from_utf8_lossy(&shown).into_owned()
}

fn serve(tmp: &Path, extra: &[&str], stderr: Stdio) -> Child {
    let fleet = tmp.join("fleet.json");
    let servers = json!({"mcpServers": {
        "time": {"command": venv_bin("mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        "broken": {"command": "/bin/false"}
    }});
    std::fs::write(&fleet, serde_json::to_vec(&servers).unwrap()).unwrap();
    std::fs::create_dir_all(tmp.join("ws")).unwrap();
    let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--mcp-config", fleet.to_str().unwrap()];
    let state = tmp.join("state");
    args.extend(["--state-dir", state.to_str().unwrap(), "--workspace", "ws"]);
    args.extend(extra);
    command(&args, tmp).env("XDG_STATE_HOME", tmp.join("xdg")).stderr(stderr).spawn().unwrap()
}

#[test]
fn serve_shows_each_mount_with_its_time_and_a_summary_on_a_terminal_only() {
    let tmp = tempfile::tempdir().unwrap();
    let pty = open_pty();
    let child = serve(tmp.path(), &[], pty.terminal.try_clone().unwrap().into());
    let shown = serve_until(pty, child, &["failed: broken"]);
    assert!(redrawn(&shown), "no spinner on the terminal:\n{shown:?}");
    assert!(shown.contains("serving on http://127.0.0.1:"), "{shown}");
    let line = |needle: &str| shown.lines().find(|l| l.contains(needle)).map(str::to_string);
    let up = line("axp: time mounted in ").unwrap_or_else(|| panic!("no line for `time`:\n{shown}"));
    assert!(up.contains(" s (") && up.contains(" tools)"), "{up}");
    let down = line("axp: broken failed after ").unwrap_or_else(|| panic!("no line for `broken`:\n{shown}"));
    assert!(down.split("s: ").nth(1).is_some_and(|why| !why.trim().is_empty()), "no reason: {down}");
    let summary = line("servers mounted in").or_else(|| line("server mounted in")).unwrap();
    assert!(summary.contains("axp: 1 server mounted in ") && summary.contains(", 1 failed: broken"), "{summary}");

    // With --quiet on the same terminal: the log, and no progress.
    let tmp = tempfile::tempdir().unwrap();
    let pty = open_pty();
    let child = serve(tmp.path(), &["--quiet"], pty.terminal.try_clone().unwrap().into());
    let shown = serve_until(pty, child, &["MCP server is available", "MCP server failed to start"]);
    assert!(shown.contains("serving on") && shown.contains("broken"), "{shown}");
    assert!(!redrawn(&shown) && !shown.contains("mounted in") && !shown.contains("failed after"), "{shown:?}");
}

#[test]
fn serve_with_stderr_on_a_pipe_prints_no_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = serve(tmp.path(), &[], Stdio::piped());
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(err)).map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Both mounts have ended once the log says so; then a little longer for any progress.
    let mut log = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(log.contains("MCP server is available") && log.contains("MCP server failed to start"))
        && Instant::now() < deadline
    {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            log.push_str(&line);
            log.push('\n');
        }
    }
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(700)) {
        log.push_str(&line);
        log.push('\n');
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(log.contains("MCP server is available"), "the server never came up:\n{log}");
    assert!(plain(&log) && !log.contains("mounted in") && !log.contains("failed after"), "{log:?}");
}

#[test]
fn provider_add_shows_each_step_with_its_time_on_a_terminal_only() {
    let hello = repo().join("plugins/examples/dist/hello");
    assert!(hello.join("axp-plugin.toml").is_file(), "run plugins/build-examples.sh first");
    let tmp = tempfile::tempdir().unwrap();
    let add = |state: &str, quiet: bool, tty: bool| {
        let dir = tmp.path().join(state);
        let mut args = vec!["provider", "add", hello.to_str().unwrap(), "--state-dir", dir.to_str().unwrap()];
        if quiet {
            args.push("--quiet");
        }
        if tty { on_tty(&args, tmp.path()) } else { on_pipe(&args, tmp.path()) }
    };
    let (tty, shown) = add("a", false, true);
    assert!(tty.status.success(), "{shown}");
    assert!(redrawn(&shown), "no spinner on the terminal:\n{shown:?}");
    assert!(shown.contains("  compiling the component and listing its tools ("), "{shown}");
    assert!(shown.contains(" in all)"), "no total time:\n{shown}");

    let (piped, err) = add("b", false, false);
    assert!(piped.status.success(), "{err}");
    assert!(plain(&err) && err.contains("  verifying sha256") && !err.contains(" in all)"), "{err:?}");
    assert_eq!(tty.stdout, piped.stdout, "stdout differs with stderr on a terminal");

    let (q, shown) = add("c", true, true);
    assert!(q.status.success(), "{shown}");
    assert!(!redrawn(&shown) && !shown.contains("verifying") && !shown.contains("compiling"), "{shown:?}");
    assert!(shown.contains("installed `hello`"), "the result is still said:\n{shown}");
    assert_eq!(q.stdout, piped.stdout);
}
