//! The `bridge` provider: the static form of the AXP draft,
//! `{"provider": "p", "bridge": {"command": "…", "args": […]}, "tools": [{name, description,
//! inputSchema?}]}`. The tools are exactly the declared ones; a call runs
//! `command args… call PROVIDER TOOL PARAMS_JSON` by argv through the launcher. Its stdout is the
//! result: an MCP `CallToolResult` JSON object is used as is, anything else is text. A non-zero
//! exit makes the result an error. stderr is streamed into the job as it comes.
//!
//! It owns the static form's data model and the result mapping; it must not run anything except
//! through `process.rs`, and never through a shell.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axp_protocol::{ToolCall, ToolOutput, ToolSpec};
use serde::Deserialize;
use serde_json::Value;

use crate::process::{self, Capture, DEFAULT_PATH, RunOptions};
use crate::{CancellationToken, JobSink, Launcher, ProcessPolicy, ProcessSpec, Provider, ProviderError, ProviderId};

/// The most of a bridge's stdout that is read as its result. A bridge that prints more gets an
/// error result rather than a silently cut JSON document.
pub const BRIDGE_MAX_STDOUT: usize = 16 * 1024 * 1024;

/// How much of the bridge's stderr is kept for an error result.
const STDERR_TAIL: usize = 16 * 1024;

/// The static form as it appears in a configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeConfig {
    /// The provider name passed to the bridge (and, by default, the provider's id).
    pub provider: String,
    pub bridge: BridgeCommand,
    /// The declared tools (`inputSchema` defaults to `{"type": "object"}`).
    pub tools: Vec<ToolSpec>,
}

/// The bridge program and its leading arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BridgeCommand {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
}

/// How bridge processes run: not part of the static form, set by the gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecOptions {
    /// Deadline for one call; the process group is killed when it passes.
    pub timeout: Duration,
    /// The complete environment (`PATH` defaults to the usual system directories).
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub policy: ProcessPolicy,
}

impl Default for ExecOptions {
    fn default() -> Self {
        Self { timeout: Duration::from_secs(60), env: BTreeMap::new(), cwd: None, policy: ProcessPolicy::default() }
    }
}

/// A bridge behind the [`Provider`] trait.
pub struct BridgeProvider {
    id: ProviderId,
    cfg: BridgeConfig,
    exec: ExecOptions,
    launcher: Arc<dyn Launcher>,
}

impl std::fmt::Debug for BridgeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeProvider").field("id", &self.id).field("bridge", &self.cfg.bridge).finish()
    }
}

impl BridgeProvider {
    /// Checks the declaration (a command, at least one tool, unique names) and builds the
    /// provider; its id is `cfg.provider`.
    pub fn new(cfg: BridgeConfig, exec: ExecOptions, launcher: Arc<dyn Launcher>) -> Result<Self, ProviderError> {
        let mut problems = Vec::new();
        if cfg.provider.is_empty() {
            problems.push("`provider` is empty".to_string());
        }
        if cfg.bridge.command.is_empty() {
            problems.push("`bridge.command` is empty".to_string());
        }
        if cfg.tools.is_empty() {
            problems.push("`tools` declares no tool".to_string());
        }
        let mut names = std::collections::BTreeSet::new();
        for t in &cfg.tools {
            if t.name.is_empty() {
                problems.push("a tool has an empty name".to_string());
            } else if !names.insert(t.name.as_str()) {
                problems.push(format!("tool `{}` is declared twice", t.name));
            }
        }
        if !problems.is_empty() {
            return Err(ProviderError::Config(format!("bridge provider `{}`: {}", cfg.provider, problems.join("; "))));
        }
        Ok(Self { id: ProviderId(cfg.provider.clone()), cfg, exec, launcher })
    }
}

/// Maps a finished bridge run to a result (see the module docs).
fn bridge_output(f: &process::Finished) -> ToolOutput {
    let ok = f.status.success();
    if f.stdout.truncated() {
        return ToolOutput::error_text(format!(
            "the bridge printed more than {BRIDGE_MAX_STDOUT} bytes ({} in all); the result was discarded",
            f.stdout.total
        ));
    }
    let parsed = serde_json::from_slice::<Value>(&f.stdout.bytes)
        .ok()
        .filter(|v| v.get("content").is_some_and(Value::is_array))
        .and_then(|v| serde_json::from_value::<ToolOutput>(v).ok());
    let mut out = parsed.unwrap_or_else(|| ToolOutput::text(f.stdout.text(false)));
    if !ok {
        out.is_error = true;
        let mut note = format!("[bridge failed: {}]", f.describe_status());
        if f.stderr.total > 0 {
            note.push_str(&format!("\nstderr:\n{}", f.stderr.text(true)));
        }
        out.content.push(serde_json::json!({"type": "text", "text": note}));
    }
    out
}

#[async_trait]
impl Provider for BridgeProvider {
    fn id(&self) -> &ProviderId {
        &self.id
    }

    async fn tools(&self) -> Result<Vec<ToolSpec>, ProviderError> {
        Ok(self.cfg.tools.clone())
    }

    async fn call(
        &self,
        call: ToolCall,
        sink: JobSink,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ProviderError> {
        if !self.cfg.tools.iter().any(|t| t.name == call.tool) {
            return Err(ProviderError::UnknownTool(call.tool));
        }
        let params =
            serde_json::to_string(&call.arguments).map_err(|e| ProviderError::InvalidArguments(e.to_string()))?;
        let mut args = self.cfg.bridge.args.clone();
        args.extend(["call".to_string(), self.cfg.provider.clone(), call.tool.clone(), params]);
        let mut env = self.exec.env.clone();
        env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
        let spec = ProcessSpec {
            program: self.cfg.bridge.command.clone(),
            args,
            env,
            cwd: self.exec.cwd.clone(),
            policy: self.exec.policy.clone(),
        };
        let how = RunOptions {
            tool: &call.tool,
            timeout: crate::call_timeout(&call, self.exec.timeout),
            // stdout is the result, parsed whole: keep it (bounded), do not stream it.
            stdout: Capture { emit: false, keep: BRIDGE_MAX_STDOUT, tail: false, chunk: process::READ_CHUNK },
            stderr: Capture { emit: true, keep: STDERR_TAIL, tail: true, chunk: process::READ_CHUNK },
        };
        let finished = process::run(&self.launcher, &spec, &how, sink, cancel).await?;
        Ok(bridge_output(&finished))
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        Ok(())
    }
}
