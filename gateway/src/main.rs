//! The `axp` binary. `main` first dispatches the hidden internal entries that must run before
//! any thread exists (`__sandbox-exec`, re-executed by the gateway to confine a process;
//! `__plugin-host`, the native plugin helper; `__egress-proxy`, one owner's egress proxy), then
//! parses the command line and hands it to [`axp_gateway::run`], the library that is the gateway.

/// mimalloc rather than glibc's malloc: a tool call makes many small, short-lived allocations
/// across tokio's worker threads, and glibc's allocator was 12-14 % of a busy gateway's CPU
/// samples (`benches/README.md`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    axp_gateway::run(axp_gateway::cli::Cli::parse())
}
