//! `axp-providers` holds the implementations of the [`Provider`] seam: `mcp` (one upstream MCP
//! server), `cli` (declared commands), `bridge` (a command speaking a line protocol) and `skill`
//! (Agent Skills folders). The seam itself — the trait, its plain types, the spawner thread and
//! the process runner — lives in `axp-provider-api`; its trait and types are re-exported here so
//! that code written against `axp_providers::…` keeps working (the runner itself is reached
//! as `axp_provider_api::process`).
//!
//! A provider never decides policy and never spawns a process by itself: every child process is
//! built by the [`Launcher`] the gateway hands in, which is where the sandbox wraps it. A
//! provider streams what a call produces into a [`JobSink`] and honours a cancellation token.

pub mod bridge;
pub mod cli;
pub mod mcp;
mod process;
pub mod skill;

pub use axp_provider_api::{
    ArgvTrust, CallerClient, CancellationToken, ClientAsk, ClientRelay, DirectLauncher, DynProvider, EventSink,
    InputAnswers, JobSink, Launcher, MAX_MESSAGE_BYTES, NetScope, NullSink, ProcessPolicy, ProcessSpec, Provider,
    ProviderError, ProviderEvent, ProviderId, REQUEST_META, RelayLink, call_timeout, spawn,
};

pub use bridge::{BridgeCommand, BridgeConfig, BridgeProvider, ExecOptions};
pub use cli::{ArgvTemplate, CliProvider, CliToolConfig};
pub use mcp::{Handshake, McpConfig, McpProvider, McpStatus, McpTransport, RestartPolicy};
pub use skill::{SkillDirsConfig, SkillError, SkillInfo, SkillProvider};
