//! The command line (clap derive; doc comments are the help text). One subcommand per file under
//! `commands/`. Internal entries (`__sandbox-exec`, `__plugin-host`, `__egress-proxy`) are
//! dispatched in `main` before clap runs.

use clap::{Parser, Subcommand};

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
    Index(crate::commands::client::IndexArgs),
    /// Show a tool's full description, signature and schema.
    Describe(crate::commands::client::DescribeArgs),
    /// Call a tool and stream its job's output.
    Call(crate::commands::client::CallArgs),
    /// List this client's jobs on a running gateway.
    Jobs(crate::commands::client::ClientArgs),
    /// Re-read a job's event log from a sequence number, following it until it ends.
    Attach(crate::commands::client::AttachArgs),
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
    /// Check that this host, the configuration, the state directory and each server's command
    /// are ready for `axp serve`, and say what to fix (exit 1 when a check fails).
    Doctor(crate::commands::doctor::DoctorArgs),
    /// Print a shell completion script to stdout (bash, zsh, fish, elvish, powershell).
    Completions(crate::commands::completions::CompletionsArgs),
    /// Print the man page (roff) to stdout (e.g. `axp man | man -l -`).
    Man(crate::commands::completions::ManArgs),
}
