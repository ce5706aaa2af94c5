//! The command line (clap derive; doc comments are the help text). One subcommand per file under
//! `commands/`. Internal entries (`__sandbox-exec`, `__plugin-host`, `__egress-proxy`) are
//! dispatched in `main` before clap runs.

use clap::{Args, Parser, Subcommand};

/// AXP: a gateway that gives AI agents a sandboxed, streaming place to run code and use tools.
#[derive(Debug, Parser)]
#[command(
    name = "axp",
    version,
    about = "Serve MCP servers, CLIs, skills and plugins to AI agents, each in a kernel sandbox behind a domain allowlist, through one index / describe / job surface.",
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format on stderr.
    #[arg(long, global = true, value_parser = ["text", "json"], default_value = "text")]
    pub log_format: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve tools to agents over HTTP (`/axp`, MCP-compatible) or stdio.
    Serve(crate::commands::serve::ServeArgs),
    /// List tools of a running gateway, or search them with QUERY.
    Index(IndexArgs),
    /// Show a tool's full description, signature and schema.
    Describe(DescribeArgs),
    /// Call a tool and stream its job's output.
    Call(CallArgs),
    /// List this client's jobs on a running gateway.
    Jobs(ClientArgs),
    /// Re-read a job's event log from a sequence number, following it until it ends.
    Attach(AttachArgs),
    /// Inspect or use the kernel sandbox directly.
    #[command(subcommand)]
    Sandbox(crate::commands::sandbox::SandboxCommand),
    /// Lint tool descriptions and schemas (quality and safety), offline; SARIF for CI.
    Lint(crate::commands::lint::LintArgs),
    /// Inspect capability tokens.
    #[command(subcommand)]
    Token(crate::commands::token::TokenCommand),
    /// Verify or read the tamper-evident audit log.
    #[command(subcommand)]
    Audit(crate::commands::audit::AuditCommand),
    /// Install, list, inspect and remove provider plugins (WASM components, native libraries).
    Provider(crate::commands::provider::ProviderArgs),
    /// Approve a job awaiting an operator (sends a signed single-use envelope).
    Approve(crate::commands::operator::DecideArgs),
    /// Deny a job awaiting an operator.
    Deny(crate::commands::operator::DecideArgs),
    /// Revoke a capability token and every token attenuated from it.
    Revoke(crate::commands::operator::RevokeArgs),
    /// List the jobs awaiting an operator's approval.
    Pending(crate::commands::operator::PendingArgs),
    /// Make operator credentials (bearer tokens, signing keys).
    #[command(subcommand)]
    Operator(crate::commands::operator::OperatorCommand),
}

#[derive(Debug, Args, Clone)]
pub struct ClientArgs {
    /// The gateway's endpoint.
    #[arg(long, env = "AXP_URL", default_value = "http://127.0.0.1:7878/axp")]
    pub url: String,
    /// Print raw JSON.
    #[arg(long)]
    pub json: bool,
    /// An operator bearer token for opening the session (when the gateway has [[operators]]).
    #[arg(long = "operator-token", env = "AXP_OPERATOR_TOKEN", hide_env_values = true)]
    pub operator_token: Option<String>,
}

#[derive(Debug, Args)]
pub struct IndexArgs {
    /// Words to search for (BM25 over names, descriptions and parameters).
    pub query: Vec<String>,
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    pub name: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct CallArgs {
    pub name: String,
    /// Arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    pub args: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    pub job_id: String,
    /// First sequence number to read.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    #[command(flatten)]
    pub client: ClientArgs,
}
