//! The gateway as a library: every module of `axp serve` and the CLI, and [`run`], which runs one
//! parsed command line. The `axp` binary (`main.rs`) only dispatches the internal entries that
//! must run before any thread exists and parses the arguments; tests and tools can drive the
//! same code in process through this crate.

// The modules are the binary's internals: inside them `pub` marks a module's API to the rest of
// the crate. The library's own API is `cli` and `run`.
#![allow(unreachable_pub)]

mod auth;
mod catalog;
pub mod cli;
mod codemode;
mod commands;
mod config;
mod execution;
mod gateway;
mod metrics;
mod router;
mod telemetry;
mod transport;
mod util;
mod watch;

use std::process::ExitCode;

/// Runs one parsed command line: the synchronous commands directly, the rest on a tokio
/// runtime. Errors are printed as `error: …` with any `hint:` lines, and map to exit code 2
/// (could not run).
pub fn run(cli: cli::Cli) -> ExitCode {
    // Synchronous commands run without a runtime (`audit tail --follow` sleeps between polls).
    let command = match cli.command {
        cli::Command::Sandbox(cmd) => return exit(commands::sandbox::run(cmd)),
        cli::Command::Token(cmd) => return exit(commands::token::run(cmd)),
        cli::Command::Audit(cmd) => return exit(commands::audit::run(cmd)),
        // `provider` builds its own small runtime around the install.
        cli::Command::Provider(cmd) => return exit(commands::provider::run(cmd)),
        cli::Command::Operator(cmd) => return exit(commands::operator::run_sync(cmd)),
        cli::Command::Doctor(a) => return exit(commands::doctor::run(a)),
        cli::Command::Completions(a) => {
            return exit(commands::completions::completions(<cli::Cli as clap::CommandFactory>::command(), a));
        }
        cli::Command::Man(a) => {
            return exit(commands::completions::man(<cli::Cli as clap::CommandFactory>::command(), a));
        }
        other => other,
    };
    init_tracing(&cli.log_format);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let cli::Command::Serve(a) = &command {
        builder.worker_threads(a.threads.map_or_else(default_workers, usize::from));
    }
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = rt.block_on(async move {
        use cli::Command::*;
        match command {
            Serve(a) => commands::serve::run(a).await.map(|()| 0),
            Index(a) => commands::client::index(a).await,
            Describe(a) => commands::client::describe(a).await,
            Call(a) => commands::client::call(a).await,
            Jobs(a) => commands::client::jobs(a).await,
            Attach(a) => commands::client::attach(a).await,
            Lint(a) => commands::lint::run(a).await,
            Approve(a) => commands::operator::approve(a).await,
            Deny(a) => commands::operator::deny(a).await,
            Revoke(a) => commands::operator::revoke(a).await,
            Pending(a) => commands::operator::pending(a).await,
            Sandbox(_) | Token(_) | Audit(_) | Operator(_) | Provider(_) | Doctor(_) | Completions(_) | Man(_) => Ok(0),
        }
    });
    exit(result)
}

/// `axp serve`'s runtime workers without `--threads`: half the CPUs, at least one (decision
/// 0007: the providers, separate processes, get the other half; measured on 2 CPUs, one worker
/// did the same calls per second with less CPU per call than two).
fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

/// The process exit code for a command's outcome: its own code, or 2 (could not run).
fn exit(result: anyhow::Result<i32>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code.clamp(0, 255)).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing(format: &str) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // rmcp's transport worker logs an ERROR of its own for each failed connection attempt, with
    // Rust types in it; the gateway already says what failed, once per attempt, in words.
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("AXP_LOG")
        .unwrap_or_else(|_| "axp=info,rmcp::transport::worker=off,warn".into());
    // The trace spans are for the exporter (`telemetry`), not the log: a log line reads the same
    // with traces on or off.
    if let Ok(d) = format!("{}=off", telemetry::TARGET).parse() {
        filter = filter.add_directive(d);
    }
    // Colours only for a terminal that wants them: a log redirected to a file, or `NO_COLOR`
    // set, gets plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let log = if format == "json" { log.json().boxed() } else { log.boxed() };
    tracing_subscriber::registry().with(log.with_filter(filter)).with(telemetry::layer()).init();
}
