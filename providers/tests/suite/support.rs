//! Shared test helpers: where the real servers are installed (with a clear message when they
//! are not), a sink that records events, and event waiting with deadlines.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_protocol::methods::JobEventKind;
use axp_providers::{EventSink, ProcessSpec, ProviderEvent};
use tokio::sync::broadcast;

pub(super) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the providers crate sits in the repository root")
        .to_path_buf()
}

pub(super) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn require(path: PathBuf, how: &str) -> PathBuf {
    assert!(path.exists(), "{} is missing; install the test servers first: {how}", path.display());
    path
}

const NPM_HINT: &str = "`npm ci --prefix tests/fixtures` (from the repository root)";
const PIP_HINT: &str =
    "`python3 -m venv .venv && .venv/bin/pip install -r tests/fixtures/requirements.txt` (from the repository root)";

/// `@modelcontextprotocol/server-everything`'s entry script.
pub(super) fn everything_js() -> PathBuf {
    require(
        repo_root().join("tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        NPM_HINT,
    )
}

/// The TypeScript SDK's ESM build, for `fixture_server.mjs`.
pub(super) fn sdk_esm() -> PathBuf {
    require(repo_root().join("tests/fixtures/node_modules/@modelcontextprotocol/sdk/dist/esm"), NPM_HINT)
}

pub(super) fn time_server() -> PathBuf {
    require(repo_root().join(".venv/bin/mcp-server-time"), PIP_HINT)
}

/// The environment children get: the launcher passes nothing else.
pub(super) fn base_env() -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for key in ["PATH", "HOME", "LANG"] {
        if let Ok(v) = std::env::var(key) {
            env.insert(key.to_string(), v);
        }
    }
    env
}

pub(super) fn spec(program: &str, args: &[&str]) -> ProcessSpec {
    ProcessSpec {
        program: program.to_string(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: base_env(),
        ..Default::default()
    }
}

/// server-everything over stdio.
pub(super) fn everything_spec() -> ProcessSpec {
    let js = everything_js();
    spec("node", &[js.to_str().expect("utf-8 path"), "stdio"])
}

/// `fixture_server.mjs` over stdio.
pub(super) fn fixture_spec() -> ProcessSpec {
    let js = fixtures().join("fixture_server.mjs");
    let mut s = spec("node", &[js.to_str().expect("utf-8 path")]);
    s.env.insert("MCP_SDK_ESM".into(), sdk_esm().to_str().expect("utf-8 path").into());
    s
}

/// Records every event a call emits.
#[derive(Debug, Default)]
pub(super) struct Recorder(Mutex<Vec<JobEventKind>>);

impl EventSink for Recorder {
    fn emit(&self, event: JobEventKind) {
        self.0.lock().unwrap().push(event);
    }
}

impl Recorder {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub(super) fn events(&self) -> Vec<JobEventKind> {
        self.0.lock().unwrap().clone()
    }

    pub(super) fn progress(&self) -> Vec<(f64, Option<f64>)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                JobEventKind::Progress { progress, total, .. } => Some((progress, total)),
                _ => None,
            })
            .collect()
    }

    pub(super) fn stdout(&self) -> String {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                JobEventKind::Stdout { data } => Some(data),
                _ => None,
            })
            .collect()
    }

    pub(super) fn stderr(&self) -> String {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                JobEventKind::Stderr { data } => Some(data),
                _ => None,
            })
            .collect()
    }
}

/// Waits for the first event matching `want`, failing after `within`.
pub(super) async fn wait_event(
    rx: &mut broadcast::Receiver<ProviderEvent>,
    within: Duration,
    want: impl Fn(&ProviderEvent) -> bool,
) -> ProviderEvent {
    tokio::time::timeout(within, async {
        loop {
            match rx.recv().await {
                Ok(e) if want(&e) => return e,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("event channel closed"),
            }
        }
    })
    .await
    .expect("the expected provider event did not come in time")
}

/// Polls `cond` every 20 ms for up to `within`.
pub(super) async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cond()
}

pub(super) fn args(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        other => panic!("arguments must be an object, got {other}"),
    }
}
