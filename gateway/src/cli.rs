//! The command line (clap derive; doc comments are the help text). One subcommand per file under
//! `commands/`. Internal entries (`__sandbox-exec`, `__plugin-host`, `__egress-proxy`) are
//! dispatched in `main` before clap runs.

use std::path::PathBuf;

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
    Serve(ServeArgs),
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
    Sandbox(SandboxCommand),
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

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Print what this host supports (user namespaces, Landlock ABI, seccomp, cgroups) and why not.
    Check,
    /// Run one command under the kernel-lsm boundary.
    Run(SandboxRunArgs),
}

#[derive(Debug, Args)]
pub struct SandboxRunArgs {
    /// The directory the command runs in (read-only unless --writable) [default: current dir].
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Make the workspace writable.
    #[arg(long)]
    pub writable: bool,
    /// Also allow reading below this path. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub allow_read: Vec<PathBuf>,
    /// Also allow writing below this path. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub allow_write: Vec<PathBuf>,
    /// Allow egress to this domain through the egress proxy. Repeatable.
    #[arg(long, value_name = "DOMAIN")]
    pub allow_net: Vec<String>,
    /// The command and its arguments.
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// An MCP client config (Claude Desktop / Cursor / VS Code / AXP static form). Repeatable.
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub mcp_config: Vec<PathBuf>,
    /// Static tool: provider name (with --mcp-tool, --mcp-desc and --mcp-bridge).
    #[arg(long)]
    pub mcp_provider: Option<String>,
    /// Static tool: tool name.
    #[arg(long)]
    pub mcp_tool: Option<String>,
    /// Static tool: description.
    #[arg(long)]
    pub mcp_desc: Option<String>,
    /// Static tool: bridge command, run as `BRIDGE… call PROVIDER TOOL PARAMS_JSON`.
    #[arg(long)]
    pub mcp_bridge: Option<String>,
    /// Address to listen on [default: 127.0.0.1:7878, or `listen` in axp.toml]. Other than
    /// loopback needs `[[operators]]`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Speak MCP over stdin/stdout instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
    /// Where sessions, jobs and job logs are kept [default: $XDG_STATE_HOME/axp].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Operator settings file.
    #[arg(long = "config", value_name = "AXP_TOML")]
    pub config: Option<PathBuf>,
    /// The workspace sessions are bound to [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// A skill folder, or a folder of skill folders (Agent Skills format). Repeatable.
    #[arg(long = "skills", value_name = "DIR")]
    pub skills: Vec<PathBuf>,
    /// Do not mount the built-in file and command tools (they are mounted only when nothing else
    /// is configured).
    #[arg(long)]
    pub no_builtin: bool,
    /// Refuse to start when any server's config cannot be resolved (an unset `${VAR}`), instead
    /// of serving the others and reporting that server as down.
    #[arg(long)]
    pub strict_config: bool,
    /// Allow sessions without any sandbox (tier dev-none). Processes then run with your authority.
    #[arg(long)]
    pub dangerously_allow_dev_none: bool,
    /// Worker threads of the gateway's async runtime [default: half the CPUs, at least 1]. The
    /// gateway's own work per call is small next to its providers' (separate processes, which
    /// keep the other cores), and fewer workers hand work between threads less often
    /// (decision 0007).
    #[arg(long, value_name = "N", env = "AXP_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
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
