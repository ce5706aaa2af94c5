//! The `axp` binary. `main` first dispatches the hidden internal entries that must run before
//! any thread exists (`__sandbox-exec`, re-executed by the gateway to confine a process;
//! `__plugin-host`, the native plugin helper; `__egress-proxy`, one owner's egress proxy), then
//! parses the command line and runs one subcommand on a tokio runtime. Errors are printed as
//! `error: …` with any `hint:` lines, and map to exit code 2 (could not run).

// A binary crate: `pub` items are module-internal API, never exported.
#![allow(unreachable_pub)]

/// mimalloc rather than glibc's malloc: a tool call makes many small, short-lived allocations
/// across tokio's worker threads, and glibc's allocator was 12-14 % of a busy gateway's CPU
/// samples (`benches/README.md`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod admission;
mod cli;
mod codemode;
mod commands;
mod config;
mod dispatch;
mod egress;
mod envelope;
mod grants;
mod guard;
mod http;
mod jobs;
mod metrics;
mod mount;
mod operators;
mod plugins;
mod pty;
mod quotas;
mod registry;
mod sandboxing;
mod search;
mod session;
mod signature;
mod stdio;
mod tiers;
mod util;
mod writes;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // The sandbox entry must run before any thread or runtime exists.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == axp_sandbox::EXEC_ARG) {
        axp_sandbox::exec_main(&args);
    }
    // The native plugin helper (run inside the sandbox by the gateway) loads one library and
    // answers on stdio; it needs neither clap nor a runtime.
    if args.get(1).is_some_and(|a| a == axp_plugin_host::PLUGIN_HOST_ARG) {
        axp_plugin_host::plugin_host_main(args.into_iter().skip(1));
    }
    // The per-owner egress proxy child (spawned by `egress`) confines itself before any thread.
    if args.get(1).is_some_and(|a| a == axp_egress_proxy::child::CHILD_ARG) {
        std::process::exit(axp_egress_proxy::child::child_main());
    }
    let cli = cli::Cli::parse();
    // Synchronous commands run without a runtime (`audit tail --follow` sleeps between polls).
    let command = match cli.command {
        cli::Command::Sandbox(cmd) => return exit(commands::sandbox::run(cmd)),
        cli::Command::Token(cmd) => return exit(commands::token::run(cmd)),
        cli::Command::Audit(cmd) => return exit(commands::audit::run(cmd)),
        // `provider` builds its own small runtime around the install.
        cli::Command::Provider(cmd) => return exit(commands::provider::run(cmd)),
        cli::Command::Operator(cmd) => return exit(commands::operator::run_sync(cmd)),
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
            Sandbox(_) | Token(_) | Audit(_) | Operator(_) | Provider(_) => Ok(0),
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
    // rmcp's transport worker logs an ERROR of its own for each failed connection attempt, with
    // Rust types in it; the gateway already says what failed, once per attempt, in words.
    let filter = tracing_subscriber::EnvFilter::try_from_env("AXP_LOG")
        .unwrap_or_else(|_| "axp=info,rmcp::transport::worker=off,warn".into());
    // Colours only for a terminal that wants them: a log redirected to a file, or `NO_COLOR`
    // set, gets plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}
