//! Shared harness: fixture paths, a running gateway process, and `Rpc`, the tests' JSON-RPC
//! client (a thin wrapper of `axp_client::Client`).

pub mod approvals;
pub mod attacks;
pub mod bad_input;
pub mod caps;
pub mod cli;
pub mod codemode;
pub mod conformance_runner;
pub mod console;
pub mod crash;
pub mod denials;
pub mod doctor;
pub mod egress;
pub mod escapes;
pub mod fleet;
pub mod hostile_upstream;
pub mod inspector;
pub mod jobs;
pub mod legacy_sse;
pub mod legacy_sse_clients;
pub mod lint;
pub mod mcp_clients;
pub mod mcp_features;
pub mod mcp_fidelity;
pub mod mcp_revisions;
pub mod mcp_tasks;
pub mod operators;
pub mod plugins;
pub mod progress;
pub mod pty;
pub mod quotas;
pub mod replicas;
pub mod runner;
pub mod sessions;
pub mod skills;
pub mod traces;
pub mod writes;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn axp() -> &'static str {
    env!("CARGO_BIN_EXE_axp")
}

pub fn need(p: PathBuf) -> String {
    assert!(p.exists(), "{} is missing: install the test fixtures first (scripts/install-test-deps.sh)", p.display());
    p.to_string_lossy().into_owned()
}

pub fn everything_js() -> String {
    need(repo().join("tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
}

pub fn venv_bin(name: &str) -> String {
    need(repo().join(".venv/bin").join(name))
}

/// A fleet config with server-everything and mcp-server-time (and optionally more servers).
pub fn write_fleet(dir: &Path, extra: Value) -> PathBuf {
    let mut servers = json!({
        "everything": {"command": "node", "args": [everything_js()]},
        "time": {"command": venv_bin("mcp-server-time"), "args": ["--local-timezone", "UTC"]}
    });
    if let (Some(s), Some(e)) = (servers.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    let path = dir.join("fleet.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&json!({"mcpServers": servers})).unwrap()).unwrap();
    path
}

/// A running `axp serve`. Killed on drop.
pub struct Gw {
    pub child: Child,
    pub url: String,
    pub base: String,
    pub state: PathBuf,
    pub workspace: PathBuf,
    pub stderr: mpsc::Receiver<String>,
    /// What the gateway logged before it said it was serving (the rest arrives on `stderr`).
    pub startup_log: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
}

impl Gw {
    /// Waits up to `within` for a line of the gateway's log that `matches`: the line, or every
    /// line seen meanwhile (for the failure message). A line logged before an answer can reach
    /// the test after it (stderr, then a reader thread), so a test reads the log this way
    /// rather than taking what has arrived so far.
    pub fn logged(&self, within: Duration, matches: impl Fn(&str) -> bool) -> Result<String, Vec<String>> {
        let deadline = std::time::Instant::now() + within;
        let mut seen = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
            if matches(&line) {
                return Ok(line);
            }
            seen.push(line);
        }
        Err(seen)
    }
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct GwBuilder {
    args: Vec<String>,
    state: Option<PathBuf>,
    workspace: Option<PathBuf>,
}

pub fn gateway() -> GwBuilder {
    GwBuilder { args: Vec::new(), state: None, workspace: None }
}

impl GwBuilder {
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    pub fn fleet(self, p: &Path) -> Self {
        self.arg("--mcp-config").arg(p.to_string_lossy())
    }
    pub fn state(mut self, p: &Path) -> Self {
        self.state = Some(p.to_path_buf());
        self
    }
    pub fn workspace(mut self, p: &Path) -> Self {
        self.workspace = Some(p.to_path_buf());
        self
    }

    pub fn start(self) -> Gw {
        self.start_with_env(&[])
    }

    /// Starts the gateway with extra environment variables in its own environment.
    pub fn start_with_env(self, env: &[(&str, &str)]) -> Gw {
        let tmp = tempfile::tempdir().unwrap();
        let state = self.state.clone().unwrap_or_else(|| tmp.path().join("state"));
        let workspace = self.workspace.clone().unwrap_or_else(|| {
            let w = tmp.path().join("ws");
            std::fs::create_dir_all(&w).unwrap();
            w
        });
        let mut child = Command::new(axp())
            .arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--state-dir")
            .arg(&state)
            .arg("--workspace")
            .arg(&workspace)
            .args(&self.args)
            .env("XDG_STATE_HOME", tmp.path().join("xdg"))
            .env("AXP_LOG", "axp=info,axp_providers=info,warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
                .unwrap_or_else(|_| panic!("the gateway did not start:\n{}", seen.join("\n")));
            if let Some(rest) = line.split("on http://").nth(1) {
                let base = format!("http://{}", rest.split('/').next().unwrap());
                let (url, _tmp) = (format!("{base}/axp"), Some(tmp));
                return Gw { child, url, base, state, workspace, stderr: rx, startup_log: seen, _tmp };
            }
            seen.push(line);
        }
    }
}

/// A JSON-RPC client with an optional session: `axp_client::Client` under the fields the tests
/// set directly (a session as `(session id, capability token)`, either part empty to leave it
/// out, and an operator bearer token).
pub struct Rpc {
    pub url: String,
    pub session: Option<(String, String)>,
    /// An operator bearer token sent as `Authorization: Bearer`.
    pub bearer: Option<String>,
    client: axp_client::Client,
}

impl Rpc {
    pub fn new(url: &str) -> Self {
        Self { url: url.to_string(), session: None, bearer: None, client: axp_client::Client::new(url) }
    }

    /// Opens a session with the given params and keeps it for later calls.
    pub async fn open(url: &str, params: Value) -> Self {
        let mut r = Self::new(url);
        let res = r.ok("session.open", params).await;
        r.session = Some((res["session_id"].as_str().unwrap().into(), res["cap_token"].as_str().unwrap().into()));
        r
    }

    /// The whole JSON-RPC response.
    pub async fn raw(&mut self, method: &str, params: Value) -> Value {
        let c = &mut self.client;
        c.url.clone_from(&self.url);
        c.session_id = self.session.as_ref().map(|(s, _)| s.clone());
        c.cap_token = self.session.as_ref().map(|(_, t)| t.clone());
        c.bearer.clone_from(&self.bearer);
        c.request(method, params).await.unwrap().message
    }

    pub async fn ok(&mut self, method: &str, params: Value) -> Value {
        let r = self.raw(method, params.clone()).await;
        assert!(r.get("error").is_none(), "{method} {params} failed: {r}");
        r["result"].clone()
    }

    /// The error code of a call that must fail.
    pub async fn err(&mut self, method: &str, params: Value) -> (i64, Value) {
        let r = self.raw(method, params.clone()).await;
        let e = r.get("error").unwrap_or_else(|| panic!("{method} {params} should fail, got {r}"));
        (e["code"].as_i64().unwrap(), e.clone())
    }

    /// Follows a job to its end and returns every event.
    pub async fn events(&mut self, job: &str, from: u64) -> Vec<Value> {
        let mut seq = from;
        let mut all = Vec::new();
        // Bounded by time, not by the number of attaches: a job that streams a lot in small
        // batches needs many attaches on a loaded machine without being stuck.
        let deadline = std::time::Instant::now() + Duration::from_secs(300);
        while std::time::Instant::now() < deadline {
            let r = self.ok("job.attach", json!({"job_id": job, "from_seq": seq, "wait_ms": 5000})).await;
            all.extend(r["events"].as_array().unwrap().iter().cloned());
            seq = r["next_seq"].as_u64().unwrap();
            if r["done"].as_bool() == Some(true) {
                return all;
            }
        }
        panic!("job {job} did not end within 300 s");
    }
}

/// Text of all stdout events.
pub fn stdout_of(events: &[Value]) -> String {
    events.iter().filter(|e| e["kind"] == "stdout").map(|e| e["data"].as_str().unwrap()).collect()
}

pub fn exit_of(events: &[Value]) -> Value {
    events.iter().find(|e| e["kind"] == "exit").cloned().unwrap_or(Value::Null)
}

/// Every egress proxy's own audit file under `STATE/egress/logs/`, once it holds `needle` (or after
/// 5 s). A proxy writes an attempt's record when its connection ends, from its own writer
/// thread: a test that reads at once would race it.
pub async fn egress_audit_containing(state: &Path, needle: &str) -> String {
    let read = || -> String {
        std::fs::read_dir(state.join("egress").join("logs"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect()
    };
    let mut audit = read();
    for _ in 0..100 {
        if audit.contains(needle) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        audit = read();
    }
    audit
}

/// `axp audit tail --json ARGS… --state-dir STATE`: the records, one JSON object per line.
pub fn audit_json(state: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(axp())
        .args(["audit", "tail", "--json"])
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An MCP `initialize` over HTTP, as a plain MCP client sends it; returns the `Mcp-Session-Id`.
pub async fn mcp_initialize(url: &str) -> String {
    let mut c = axp_client::Client::new(url);
    let params =
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
    let reply = c.request("initialize", params).await.unwrap();
    reply.session_id.unwrap()
}
