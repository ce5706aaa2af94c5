//! `axp-provider-api` is the seam every tool source implements: the [`Provider`] trait, the plain
//! types that cross it ([`ProviderId`], [`ProviderError`], [`ProviderEvent`], [`EventSink`],
//! [`ClientRelay`] for the requests servers make of the client,
//! [`ProcessSpec`], [`ProcessPolicy`], [`Launcher`] …), the one thread every child process is
//! forked from ([`spawn`]) and the one runner every short-lived child goes through
//! ([`process`]). **API boundary:** plugin authors, the providers and the gateway all code
//! against this crate, so it stays thin: it depends on `axp-protocol`, tokio, serde_json,
//! thiserror and `nix` (for `killpg`), and never on an MCP or HTTP client.
//!
//! A provider never decides policy and never spawns a process by itself: every child process is
//! built by the [`Launcher`] the gateway hands in, which is where the sandbox wraps it. A
//! provider streams what a call produces into a [`JobSink`] and honours a cancellation token.

pub mod process;
mod spawn;

pub use spawn::spawn;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use axp_protocol::methods::JobEventKind;
use axp_protocol::{RpcError, ToolCall, ToolOutput, ToolSpec};
use serde_json::{Map, Value};
use tokio::sync::broadcast;
pub use tokio_util::sync::CancellationToken;

/// A provider's configured name: the `<provider>` in `<provider>__<tool>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderId(pub String);

impl ProviderId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ProviderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Everything that can go wrong between the gateway and a provider.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider is not running (failed to start, crashed, restarting); the reason says which.
    #[error("provider `{provider}` is unavailable: {reason}")]
    Unavailable { provider: String, reason: String },
    /// The provider has not finished its first start yet; it announces its tools when it has.
    #[error("provider `{provider}` is still starting")]
    Starting { provider: String },
    /// The call took longer than its deadline.
    #[error("the call to `{tool}` timed out after {secs}s")]
    Timeout { tool: String, secs: u64 },
    /// The call was cancelled by the client.
    #[error("the call was cancelled")]
    Cancelled,
    /// The provider has no tool of that name.
    #[error("provider has no tool `{0}`")]
    UnknownTool(String),
    /// The provider has no resource at that URI (nor a template that matches it).
    #[error("provider has no resource `{0}`")]
    UnknownResource(String),
    /// The provider has no prompt of that name.
    #[error("provider has no prompt `{0}`")]
    UnknownPrompt(String),
    /// The provider does not offer what was asked (resource subscriptions on a server that did
    /// not declare them, …); the message says what.
    #[error("{0}")]
    Unsupported(String),
    /// The arguments were refused by the provider (after the gateway's own schema check).
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The upstream answered with a JSON-RPC error; passed through as is.
    #[error("upstream error: {0}")]
    Upstream(RpcError),
    /// The provider's configuration cannot work (bad command, bad schema …).
    #[error("configuration error: {0}")]
    Config(String),
    /// Local I/O failed (spawning, pipes).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl ProviderError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }
}

/// Something a provider tells the gateway without being asked. A provider logs its own state
/// changes, with the reason, when it sends `Unavailable` or `Available`; the gateway only
/// records them, so each change is logged once.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderEvent {
    /// The tool list changed (MCP `notifications/tools/list_changed`); call `tools()` again.
    ToolsChanged,
    /// The provider went down; its tools stay listed but unavailable.
    Unavailable { reason: String },
    /// The provider is serving again.
    Available,
    /// The resource list changed (MCP `notifications/resources/list_changed`).
    ResourcesChanged,
    /// The prompt list changed (MCP `notifications/prompts/list_changed`).
    PromptsChanged,
    /// A subscribed resource changed (MCP `notifications/resources/updated`); `uri` is the
    /// provider's own URI.
    ResourceUpdated { uri: String },
    /// A log message from the provider (MCP `notifications/message`), as sent: `level` is an
    /// RFC 5424 name (`debug` … `emergency`), `logger` optional, `data` any JSON.
    Log { level: String, logger: Option<String>, data: serde_json::Value },
}

/// Where a running call writes what it produces. The gateway's implementation appends each
/// event to the job's durable log before any client sees it.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: JobEventKind);
}

/// Shared handle to an [`EventSink`].
pub type JobSink = Arc<dyn EventSink>;

/// A sink that drops everything (for listing-time calls and tests that only want the result).
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: JobEventKind) {}
}

/// What the gateway lets a provider's process touch, from the provider's `sandbox` config
/// block. The gateway's launcher compiles it into kernel policy; providers only pass it along.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessPolicy {
    /// Which parts of the argv the launcher may read paths from to make the program's own files
    /// readable. Only argv the operator wrote may widen what a process can read: an agent that
    /// names `/home/me/.ssh/id_rsa` as an argument must not get its directory mounted.
    pub argv_trust: ArgvTrust,
    pub fs_read: Vec<PathBuf>,
    pub fs_write: Vec<PathBuf>,
    /// Domains (`api.example.com`, `*.example.com:443`) reachable through the egress proxy.
    pub net: Vec<String>,
    /// Whose egress proxy `net` goes through: each owner has its own, with its own limits, and
    /// its attempts are audited under its name.
    pub net_scope: NetScope,
    /// A nice value (0–19) for the whole process tree: work that must yield the CPUs to the
    /// gateway when they are contended. `None` runs at the gateway's own priority.
    pub nice: Option<u8>,
}

/// The owner of a process's network access (see [`ProcessPolicy::net_scope`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NetScope {
    /// No owner named: processes with the same `net` share one proxy (one-off runs, library use).
    #[default]
    Shared,
    /// A session's jobs, by session id; the proxy stops when the session closes or expires.
    Session(String),
    /// An operator-configured provider (MCP server, bridge, plugin), by name.
    Provider(String),
}

/// How far the launcher may trust a process's argv when deciding what it must be able to read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ArgvTrust {
    /// Nothing: agent-written commands (system paths and explicit grants only).
    #[default]
    None,
    /// The program only (a CLI tool's literal program; its arguments come from agents).
    Program,
    /// The whole argv (an MCP server or bridge command written by the operator).
    All,
}

/// A process a provider wants to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessSpec {
    pub program: String,
    pub args: Vec<String>,
    /// The complete environment of the child (nothing is inherited unless listed here).
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    pub policy: ProcessPolicy,
}

/// Turns a [`ProcessSpec`] into a ready-to-spawn command. The gateway supplies a sandboxing
/// implementation; [`DirectLauncher`] runs the process as is (tier `dev-none`).
pub trait Launcher: Send + Sync + std::fmt::Debug {
    fn command(&self, spec: &ProcessSpec) -> Result<tokio::process::Command, ProviderError>;
    /// Like [`Launcher::command`], for a process whose stdin is a pseudo-terminal that must
    /// become its controlling terminal (PTY jobs, `pty.open`). Launchers that cannot set that
    /// up in a fresh session refuse, which is the default.
    fn terminal_command(&self, spec: &ProcessSpec) -> Result<tokio::process::Command, ProviderError> {
        let _ = spec;
        Err(ProviderError::Config(format!("the `{}` tier cannot give a job a terminal", self.tier())))
    }
    /// The tier this launcher enforces, for reports (`kernel-lsm`, `dev-none`).
    fn tier(&self) -> &'static str;
}

/// Runs processes without any confinement. Only for `dev-none`, which the operator must opt into.
#[derive(Debug, Default, Clone, Copy)]
pub struct DirectLauncher;

impl Launcher for DirectLauncher {
    fn command(&self, spec: &ProcessSpec) -> Result<tokio::process::Command, ProviderError> {
        let mut cmd = tokio::process::Command::new(&spec.program);
        cmd.args(&spec.args).env_clear().envs(&spec.env).kill_on_drop(true);
        if let Some(cwd) = &spec.cwd {
            cmd.current_dir(cwd);
        }
        Ok(cmd)
    }

    fn tier(&self) -> &'static str {
        "dev-none"
    }
}

/// The one interface behind which MCP servers, CLIs, skills and plugins all sit (DESIGN §4).
#[async_trait]
pub trait Provider: Send + Sync {
    fn id(&self) -> &ProviderId;

    /// Current tools; a provider may change them and signal through [`Provider::events`].
    async fn tools(&self) -> Result<Vec<ToolSpec>, ProviderError>;

    /// One call. Streams progress/log chunks into `sink`, honours `cancel`.
    async fn call(&self, call: ToolCall, sink: JobSink, cancel: CancellationToken)
    -> Result<ToolOutput, ProviderError>;

    /// The MCP revision the provider's own connection to its server speaks (`"2026-07-28"`,
    /// `"2025-11-25"`, …), for reports; `None` for providers that are not MCP connections or
    /// are not connected.
    fn revision(&self) -> Option<String> {
        None
    }

    /// Unsolicited events (tool list changes, availability).
    fn events(&self) -> Option<broadcast::Receiver<ProviderEvent>> {
        None
    }

    /// Instructions for using `tool` that are too long for its description and belong in
    /// `axp.describe` (a skill's `SKILL.md` body). `None` for most providers.
    fn instructions(&self, tool: &str) -> Option<String> {
        let _ = tool;
        None
    }

    /// Current resources, as raw MCP `Resource` objects (every page; URIs are the provider's
    /// own). Providers without resources answer an empty list, never an error.
    async fn resources(&self) -> Result<Vec<Value>, ProviderError> {
        Ok(Vec::new())
    }

    /// Current resource templates, as raw MCP `ResourceTemplate` objects.
    async fn resource_templates(&self) -> Result<Vec<Value>, ProviderError> {
        Ok(Vec::new())
    }

    /// `resources/read`: the raw `ReadResourceResult` (`{"contents": [...]}`), or a server's
    /// `input_required` round for a 2026-07-28 client to answer; `answers` are that client's
    /// answers to the round it was given, sent back with the request.
    async fn read_resource(&self, uri: &str, answers: Option<InputAnswers>) -> Result<Value, ProviderError> {
        let _ = answers;
        Err(ProviderError::UnknownResource(uri.to_string()))
    }

    /// Starts (`on`) or stops change notifications for one resource; they arrive as
    /// [`ProviderEvent::ResourceUpdated`].
    async fn subscribe_resource(&self, uri: &str, on: bool) -> Result<(), ProviderError> {
        let _ = (uri, on);
        Err(ProviderError::Unsupported(format!("provider `{}` does not support resource subscriptions", self.id())))
    }

    /// Current prompts, as raw MCP `Prompt` objects (names are the provider's own).
    async fn prompts(&self) -> Result<Vec<Value>, ProviderError> {
        Ok(Vec::new())
    }

    /// `prompts/get`: the raw `GetPromptResult` (`{"description"?, "messages": [...]}`), or a
    /// server's `input_required` round, as for [`Provider::read_resource`].
    async fn get_prompt(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        answers: Option<InputAnswers>,
    ) -> Result<Value, ProviderError> {
        let _ = (arguments, answers);
        Err(ProviderError::UnknownPrompt(name.to_string()))
    }

    /// `completion/complete` with the raw params (`ref` in the provider's own names): the raw
    /// `CompleteResult`. Providers that complete nothing answer no values.
    async fn complete(&self, params: Value) -> Result<Value, ProviderError> {
        let _ = params;
        Ok(serde_json::json!({"completion": {"values": [], "hasMore": false}}))
    }

    /// `logging/setLevel`: from now on send log messages at `level` (an RFC 5424 name) and
    /// above. Providers that send no logs ignore it.
    async fn set_log_level(&self, level: &str) -> Result<(), ProviderError> {
        let _ = level;
        Ok(())
    }

    /// Stops the provider's processes and connections.
    async fn shutdown(&self) -> Result<(), ProviderError>;
}

/// Shared handle to a provider.
pub type DynProvider = Arc<dyn Provider>;

/// A request a provider's server makes of the client: MCP `sampling/createMessage`,
/// `elicitation/create` or `roots/list`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientAsk {
    pub method: String,
    pub params: Value,
    /// The `meta` of every call to this provider in flight when the server asked (the gateway
    /// puts the job id there): the server's request belongs to one of them, and the gateway
    /// decides whose client it may reach.
    pub during: Vec<Value>,
    /// The server's own name for the request, when it asked in a 2026-07-28 `input_required`
    /// result (the key its retry's `inputResponses` must use). A client that is itself asked
    /// through such a result sees the same key where it can.
    pub key: Option<String>,
}

tokio::task_local! {
    /// Who a provider method serves when it is not a tool call (a prompt get, a resource read, a
    /// completion): `{"session_id": …, "trace"?: {"traceparent", "tracestate"?}}`, set by the
    /// gateway around the call. A provider whose server may ask the client something meanwhile
    /// counts the request in flight with it, as a tool call counts with its `ToolCall::meta`, so
    /// [`ClientAsk::during`] names its session; `trace` is the W3C context to hand the server, as
    /// in a tool call's `meta`.
    pub static REQUEST_META: Value;
}

/// Where providers send their servers' requests of the client; the gateway implements it and
/// relays each request to the session whose call caused it.
#[async_trait]
pub trait ClientRelay: Send + Sync {
    /// The client's answer (the raw MCP result), or the error to give the server.
    async fn ask(&self, provider: &ProviderId, ask: ClientAsk) -> Result<Value, RpcError>;

    /// The MCP client of one call (`during`: that call's `meta`), if it has one: what it
    /// declared it can be asked, and which revision it speaks. A provider whose server speaks
    /// several revisions reaches it the way the client would, and tells a 2026-07-28 server
    /// (which reads capabilities per request) what the client can answer.
    fn client_of(&self, during: &Value) -> Option<CallerClient> {
        let _ = during;
        None
    }
}

/// A 2026-07-28 client's answers to a server's `input_required` round of a prompt get or a
/// resource read: its `inputResponses` (by the server's keys) and the server's `requestState`,
/// both sent back to the server with the same request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputAnswers {
    pub responses: Map<String, Value>,
    pub request_state: Option<String>,
}

/// What a call's MCP client said about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct CallerClient {
    /// Its declared capabilities (`{"sampling": {}, "elicitation": {"form": {}}, …}`).
    pub capabilities: Value,
    /// It speaks 2026-07-28 (every request stands alone); otherwise an `initialize` revision.
    pub stateless: bool,
    /// The session it is, which a provider may give a connection of its own.
    pub session: String,
}

/// A [`ClientRelay`] set once, after the providers were built (the gateway that relays exists
/// only once its providers are mounted). Until it is set, every request is refused.
#[derive(Clone, Default)]
pub struct RelayLink(Arc<std::sync::OnceLock<Arc<dyn ClientRelay>>>);

impl RelayLink {
    /// Connects the link; a second call is ignored.
    pub fn set(&self, relay: Arc<dyn ClientRelay>) {
        let _ = self.0.set(relay);
    }

    pub fn get(&self) -> Option<Arc<dyn ClientRelay>> {
        self.0.get().cloned()
    }
}

impl PartialEq for RelayLink {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for RelayLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayLink").field("set", &self.0.get().is_some()).finish()
    }
}

/// The deadline of one call: `call.meta.timeout_ms` (a positive number, e.g. from
/// `job.start`'s `timeout_s`) when the gateway sets it, else the provider's configured default.
/// Every provider in this crate honours it; on expiry the call fails with
/// [`ProviderError::Timeout`] after stopping the work (process group killed, or
/// `notifications/cancelled` sent upstream).
pub fn call_timeout(call: &ToolCall, default: std::time::Duration) -> std::time::Duration {
    call.meta
        .as_ref()
        .and_then(|m| m.get("timeout_ms"))
        .and_then(serde_json::Value::as_f64)
        .filter(|ms| ms.is_finite() && *ms > 0.0)
        .map(|ms| std::time::Duration::from_secs_f64(ms / 1000.0))
        .unwrap_or(default)
}

/// The largest single message the gateway accepts from a provider in one piece: one SSE event
/// or JSON response of a remote MCP server, one reply line of a native plugin's helper. A tool
/// result with images can be large, but no upstream may make the gateway buffer without limit.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
