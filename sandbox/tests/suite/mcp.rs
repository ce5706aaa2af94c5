//! Real MCP stdio servers speak through the sandbox unchanged: the `initialize` handshake of
//! `mcp-server-time` (Python, from the repository's .venv over the pyenv install) and of
//! `@modelcontextprotocol/server-everything` (node), with only their install dirs exposed.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::{bin, policy, workspace};

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"axp-sandbox-test","version":"0"}}}"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repository root").to_path_buf()
}

/// Sends `initialize` and returns the first stdout line that is a JSON-RPC response.
fn handshake(p: &axp_sandbox::Policy, argv: &[String]) -> String {
    let mut cmd = axp_sandbox::command(&bin(), p, argv).expect("command");
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = cmd.spawn().expect("spawn MCP server in the sandbox");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(stdin, "{INIT}").expect("write initialize");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("\"jsonrpc\"") {
                let _ = tx.send(line);
                return;
            }
        }
    });
    let line = rx.recv_timeout(Duration::from_secs(20));
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    line.expect("no initialize response from the sandboxed MCP server")
}

#[test]
fn mcp_server_time_answers_initialize_through_the_sandbox() {
    let venv = repo().join(".venv");
    let server = venv.join("bin/mcp-server-time");
    assert!(
        server.exists(),
        "{} missing: install it with `python3 -m venv .venv && .venv/bin/pip install mcp-server-time==2026.10.19`",
        server.display()
    );
    // The venv's interpreter is a symlink into its base install, which must be exposed too:
    // discovery finds both from the `#!` line and pyvenv.cfg.
    let argv = [server.to_string_lossy().into_owned()];
    let reads = axp_sandbox::discover::read_paths_for(&argv, None);
    let base = std::fs::canonicalize(venv.join("bin/python"))
        .expect("venv python")
        .parent()
        .and_then(Path::parent)
        .expect("base install")
        .to_path_buf();
    assert_eq!(reads, {
        let mut v = vec![venv.clone(), base];
        v.sort();
        v
    });
    let ws = workspace();
    let mut b = policy(ws.path());
    for r in reads {
        b = b.fs_read(r);
    }
    let p = b.build().expect("policy");
    let line = handshake(&p, &argv);
    assert!(line.contains("\"serverInfo\"") && line.contains("mcp-time"), "{line}");
}

#[test]
fn mcp_server_everything_answers_initialize_through_the_sandbox() {
    let modules = repo().join("tests/fixtures/node_modules");
    let server = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    assert!(server.exists(), "{} missing: run `npm ci` in tests/fixtures", server.display());
    let argv = ["node".to_string(), server.to_string_lossy().into_owned()];
    assert_eq!(
        axp_sandbox::discover::read_paths_for(&argv, None),
        vec![modules.clone()],
        "node is a system binary; the script needs its node_modules"
    );
    let ws = workspace();
    let p = policy(ws.path()).fs_read(&modules).build().expect("policy");
    let line = handshake(&p, &argv);
    assert!(line.contains("\"serverInfo\"") && line.contains("everything"), "{line}");
}
