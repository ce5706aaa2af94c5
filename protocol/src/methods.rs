//! Parameters and results of the AXP methods (DESIGN §5), the job event model and the sandbox
//! tier names. Field names are the wire names; unknown fields are refused so a typo in a client
//! is an `InvalidParams` with the field named, not a silently ignored option.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tool::ToolOutput;

/// The isolation a session's jobs run under (DESIGN §3, sandbox tiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxTier {
    KernelLsm,
    Container,
    ProcessToken,
    DevNone,
}

impl SandboxTier {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KernelLsm => "kernel-lsm",
            Self::Container => "container",
            Self::ProcessToken => "process-token",
            Self::DevNone => "dev-none",
        }
    }
}

impl std::fmt::Display for SandboxTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SandboxTier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(Value::String(s.to_string()))
            .map_err(|_| format!("unknown sandbox tier `{s}` (kernel-lsm, container, process-token, dev-none)"))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionOpenParams {
    /// The workspace root; defaults to the operator's configured workspace.
    #[serde(default)]
    pub workspace: Option<String>,
    #[serde(default)]
    pub sandbox_tier: Option<SandboxTier>,
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    #[serde(default)]
    pub ttl_s: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionOpenResult {
    pub session_id: String,
    pub granted_tier: SandboxTier,
    pub cap_token: String,
    pub capabilities: Vec<String>,
    pub workspace: String,
    pub expires_at_ms: u64,
    /// What is actually enforced (Landlock ABI, seccomp, namespaces …), reported honestly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct IndexParams {
    #[serde(default)]
    pub query: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// One line of the compact index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub name: String,
    pub desc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unavailable: bool,
    /// With a query: the tool's score in the hybrid ranking (higher ranks first; comparable
    /// only within one answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexResult {
    pub tools: Vec<IndexEntry>,
    pub total: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescribeParams {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DescribeResult {
    pub name: String,
    pub desc: String,
    pub description: String,
    pub signature: String,
    pub schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    pub provider: String,
    pub requires: Vec<String>,
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lint: Vec<Value>,
    /// How to use the tool, when its provider has more to say than a description holds (a
    /// skill's `SKILL.md` instructions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// A command as argv (preferred) or one string run by `/bin/sh -c`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CommandSpec {
    Argv(Vec<String>),
    Shell(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeSpec {
    pub language: String,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PtySpec {
    #[serde(default = "default_rows")]
    pub rows: u16,
    #[serde(default = "default_cols")]
    pub cols: u16,
}

fn default_rows() -> u16 {
    24
}
fn default_cols() -> u16 {
    80
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct JobStartParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cap_token: Option<String>,
    #[serde(default)]
    pub command: Option<CommandSpec>,
    #[serde(default)]
    pub code: Option<CodeSpec>,
    #[serde(default)]
    pub tool: Option<String>,
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: Option<Map<String, Value>>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    pub timeout_s: Option<u64>,
    #[serde(default)]
    pub pty: Option<PtySpec>,
    /// Wait for the job to finish and return its result (a convenience for simple clients).
    #[serde(default)]
    pub wait: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRef {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cap_token: Option<String>,
    pub job_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobAttachParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cap_token: Option<String>,
    pub job_id: String,
    #[serde(default)]
    pub from_seq: u64,
    /// Wait up to this many milliseconds for new events when none are there yet.
    #[serde(default)]
    pub wait_ms: Option<u64>,
    #[serde(default)]
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobWriteParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cap_token: Option<String>,
    pub job_id: String,
    pub data: String,
    #[serde(default)]
    pub eof: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSignalParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cap_token: Option<String>,
    pub job_id: String,
    pub signal: String,
}

/// `job.resize`: a PTY job's new window size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobResizeParams {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cap_token: Option<String>,
    pub job_id: String,
    pub rows: u16,
    pub cols: u16,
}

/// The life of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Exited,
    Killed,
    Failed,
    /// The gateway stopped while the job ran; its log up to that point is intact.
    Lost,
    AwaitingApproval,
}

impl JobState {
    pub fn is_terminal(self) -> bool {
        !matches!(self, Self::Running | Self::AwaitingApproval)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Killed => "killed",
            Self::Failed => "failed",
            Self::Lost => "lost",
            Self::AwaitingApproval => "awaiting_approval",
        }
    }
}

impl std::str::FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(Value::String(s.to_string())).map_err(|_| format!("unknown job state `{s}`"))
    }
}

/// What one event of a job's log says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobEventKind {
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    Pty {
        data: String,
    },
    Progress {
        progress: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Log {
        level: String,
        data: Value,
    },
    Result {
        output: ToolOutput,
    },
    /// A tool call a code-mode job made through its SDK (one event per finished call).
    ToolCall {
        /// Per-job call number, from 1.
        call: u64,
        tool: String,
        /// SHA-256 of the canonical arguments (never the arguments themselves).
        args_sha256: String,
        ok: bool,
        /// The JSON-RPC error code when the call was refused or failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i64>,
        /// Wall time of the call in milliseconds.
        ms: u64,
    },
    Exit {
        state: JobState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Value>,
    },
}

/// One event in a job's log: `seq` is dense from 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    pub job_id: String,
    pub seq: u64,
    pub ts_ms: u64,
    #[serde(flatten)]
    pub kind: JobEventKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tier_names() {
        assert_eq!("kernel-lsm".parse::<SandboxTier>().unwrap(), SandboxTier::KernelLsm);
        assert_eq!(serde_json::to_value(SandboxTier::DevNone).unwrap(), "dev-none");
        assert!("root".parse::<SandboxTier>().is_err());
    }

    #[test]
    fn event_wire_shape() {
        let e = JobEvent { job_id: "j".into(), seq: 3, ts_ms: 1, kind: JobEventKind::Stdout { data: "hi".into() } };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["kind"], "stdout");
        assert_eq!(v["seq"], 3);
        let back: JobEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn tool_call_event_wire_shape() {
        let kind = JobEventKind::ToolCall {
            call: 1,
            tool: "everything__echo".into(),
            args_sha256: "ab".into(),
            ok: false,
            code: Some(-32002),
            ms: 3,
        };
        let v = serde_json::to_value(JobEvent { job_id: "j".into(), seq: 0, ts_ms: 1, kind }).unwrap();
        assert_eq!(v["kind"], "tool_call");
        assert_eq!(v["code"], -32002);
        assert_eq!(v["tool"], "everything__echo");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r: Result<JobStartParams, _> = serde_json::from_value(serde_json::json!({"tool": "x", "argumnets": {}}));
        assert!(r.unwrap_err().to_string().contains("argumnets"));
    }
}
