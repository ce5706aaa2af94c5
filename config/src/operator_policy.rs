//! The operator-policy sections of `axp.toml`: `[[operators]]` (who may open sessions, with
//! what ceiling, and who may sign policy changes), `[approval]` (tools whose calls wait for an
//! operator) and `[quotas]` (per-session limits). Raw serde structs only; they refuse unknown
//! keys like the rest of the file, and the gateway's `operators`, `approvals` and
//! `quotas` modules validate and apply them.

use serde::Deserialize;

/// One operator credential.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorSettings {
    /// A name for the audit log and for signed envelopes (`[A-Za-z0-9_.-]`).
    pub name: String,
    /// SHA-256 (hex) of the operator's bearer token (`axp operator token` makes one). The token
    /// itself is never stored.
    pub token_sha256: Option<String>,
    /// The name of an environment variable holding the bearer token (hashed when read).
    pub token_env: Option<String>,
    /// The operator's Ed25519 public key (base64, `axp operator keygen` makes one): envelopes
    /// signed with its private key may approve, deny and revoke.
    pub public_key: Option<String>,
    /// The most any session this operator opens may hold (the default grant too).
    pub capabilities: Option<Vec<String>>,
    /// The sandbox tiers this operator may ask for (default: any the gateway grants).
    pub tiers: Option<Vec<String>>,
}

/// `[approval]`: tools (by index-name glob) whose calls park until an operator decides.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSettings {
    /// Index-name globs, e.g. `["files__run_command", "github__delete_*"]`.
    #[serde(default)]
    pub required: Vec<String>,
    /// Also every tool whose MCP annotations say `destructiveHint: true` (explicitly).
    #[serde(default)]
    pub destructive: bool,
}

/// `[quotas]`: per-session limits; absent means unlimited.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSettings {
    /// Tool calls and job starts per rolling minute.
    pub calls_per_minute: Option<u32>,
    /// Jobs running (or awaiting approval) at once.
    pub concurrent_jobs: Option<u32>,
    /// Bytes of stdout/stderr all the session's jobs may write in total.
    pub job_output_bytes: Option<u64>,
}

/// A provider's or tool's `approval` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Every call parks in `awaiting_approval` until an operator approves or denies it.
    Required,
    /// Calls run at once (the default).
    Never,
}
