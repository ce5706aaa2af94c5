//! Test fixture (not product code): starts a real stdio MCP server process and speaks
//! newline-delimited JSON-RPC to it: `initialize`, `notifications/initialized`, `tools/list`,
//! `tools/call`. Notifications the server sends are kept, so a test can see `list_changed`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The repository root (`lint/..`).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A path under the repository root that must exist, or a panic saying how to install it.
pub(crate) fn require(rel: &str, how: &str) -> PathBuf {
    let p = repo_root().join(rel);
    assert!(p.exists(), "{} is missing: {how}", p.display());
    p
}

pub(crate) const NPM_HINT: &str = "install the npm fixtures: `cd tests/fixtures && npm ci`";
pub(crate) const PIP_HINT: &str =
    "create the venv: `python3 -m venv .venv && .venv/bin/pip install -r tests/fixtures/requirements.txt`";
pub(crate) const WRONG_HINT: &str = "mcp-server-everything-wrong 0.2.1 imports FastMCP, which mcp 2.x removed, so it needs its own venv: `python3 -m venv .venv-wrong && .venv-wrong/bin/pip install -r lint/tests/fixtures/requirements-everything-wrong.txt`";

/// A running MCP server.
pub(crate) struct Server {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<Value>,
    next_id: i64,
    /// Notifications received so far (method names and params).
    pub(crate) notifications: Vec<Value>,
    name: String,
}

const TIMEOUT: Duration = Duration::from_secs(30);

impl Server {
    /// Starts `argv` and completes the MCP handshake.
    pub(crate) fn start(argv: &[&str]) -> Server {
        let mut child = Command::new(argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let mut s = Server { child, stdin, rx, next_id: 1, notifications: Vec::new(), name: argv.join(" ") };
        s.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "axp-lint-tests", "version": "0"}
            }),
        );
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and waits for its response's `result` (panics on an error response).
    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(m) if m.get("id") == Some(&json!(id)) && m.get("method").is_none() => {
                    if let Some(e) = m.get("error") {
                        panic!("{}: {method} failed: {e}", self.name);
                    }
                    return m["result"].clone();
                }
                Ok(m) if m.get("method").is_some() && m.get("id").is_none() => self.notifications.push(m),
                Ok(m) if m.get("method").is_some() => {
                    // A server-to-client request (ping, roots/list...): answer with an empty result.
                    let rid = m["id"].clone();
                    self.send(json!({"jsonrpc": "2.0", "id": rid, "result": {}}));
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{}: no answer to {method} within {TIMEOUT:?}", self.name)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("{}: exited before answering {method}", self.name)
                }
            }
        }
    }

    /// `tools/list` (all pages) as a `{"tools": [...]}` value.
    pub(crate) fn list_tools(&mut self) -> Value {
        let mut tools = Vec::new();
        let mut cursor: Option<Value> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let r = self.request("tools/list", params);
            tools.extend(r["tools"].as_array().cloned().unwrap_or_default());
            match r.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => break,
            }
        }
        json!({"tools": tools})
    }

    /// `tools/call`.
    pub(crate) fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// Waits (briefly) for a notification with this method, returning whether it came.
    pub(crate) fn wait_notification(&mut self, method: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if self.notifications.iter().any(|n| n["method"] == method) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(m) if m.get("method").is_some() && m.get("id").is_none() => self.notifications.push(m),
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
