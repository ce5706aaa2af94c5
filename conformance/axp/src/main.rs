//! `axp-conformance`: checks the AXP methods of a running gateway endpoint over the wire —
//! sessions, the index, describe, durable jobs and their replay, cancel, attenuated tokens and
//! bad input — and prints one `PASS|FAIL|SKIP <id> <detail>` line per check, then a summary
//! (`--json`: one JSON document instead). Exit 0 when nothing failed, 1 when a check failed,
//! 2 for a usage error. It is a client of the wire protocol only (`axp-client`,
//! `axp-protocol`): it knows nothing of the gateway's code, so it judges any endpoint alike.

mod checks;
mod report;
mod tool;
mod wire;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use serde_json::{Map, Value};

use checks::{Options, Runner};
use report::Report;

/// Checks the AXP methods of a gateway endpoint over the wire and prints one verdict a line.
///
/// The runner opens a session, reads the index, calls one tool it has reason to believe is
/// read-only (or the one --tool names), runs a few short shell commands when the session holds
/// `proc.spawn`, and closes the session at the end. It contacts nothing but --url.
#[derive(Debug, Parser)]
#[command(name = "axp-conformance", version)]
struct Args {
    /// The endpoint, e.g. http://127.0.0.1:7878/axp.
    #[arg(long)]
    url: String,
    /// An operator's bearer token, for an endpoint with `[[operators]]` (without one, such an
    /// endpoint opens no session and the checks that need one are skipped).
    #[arg(long, env = "AXP_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: Option<String>,
    /// The tool the tool checks call, instead of one the runner picks from the index.
    #[arg(long)]
    tool: Option<String>,
    /// The JSON object of arguments for --tool (default `{}`).
    #[arg(long, requires = "tool", value_parser = json_object)]
    arguments: Option<Map<String, Value>>,
    /// Print the whole run as one JSON document instead of lines.
    #[arg(long)]
    json: bool,
    /// The longest one call may take, in seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout_s: u64,
    /// The longest a job the runner starts may take to end, in seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    job_timeout_s: u64,
}

fn json_object(s: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(s) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(format!("--arguments must be a JSON object, not {other}")),
        Err(e) => Err(format!("--arguments is not JSON: {e}")),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let opts = Options {
        url: args.url.clone(),
        operator_token: args.operator_token.filter(|t| !t.is_empty()),
        tool: args.tool.map(|t| (t, args.arguments.unwrap_or_default())),
        timeout: Duration::from_secs(args.timeout_s),
        job_timeout: Duration::from_secs(args.job_timeout_s),
    };
    let mut runner = Runner::new(opts, Report::new(!args.json));
    runner.run().await;
    let report = &runner.report;
    let last = if args.json {
        serde_json::to_string_pretty(&report.to_json(&args.url, &runner.tool_json())).unwrap_or_default()
    } else {
        report.summary()
    };
    // As with the verdict lines, a closed stdout does not change what the exit code says.
    let _ = writeln!(std::io::stdout(), "{last}");
    if report.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
