//! The `axp-egress-proxy` command: parses flags into a [`ProxyConfig`], prints the bound
//! addresses as one JSON line on stdout (so a supervisor that asked for port 0 learns the port),
//! and serves until SIGINT or SIGTERM. Run as `axp-egress-proxy __egress-proxy` it is instead
//! the gateway's per-owner child (`axp_egress_proxy::child`). It owns no policy of its own;
//! every check lives in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use axp_egress_proxy::{Cidr, Policy, Proxy, ProxyConfig, Rule};
use clap::Parser;

/// Domain-allowlisting egress proxy: HTTP absolute-form, CONNECT and SOCKS5 on every listener.
/// Default deny: only hosts granted with --allow are reachable, and never at loopback, private,
/// link-local, CGNAT, metadata or other special addresses.
#[derive(Debug, Parser)]
#[command(name = "axp-egress-proxy", version)]
struct Args {
    /// TCP address to listen on (repeatable). HTTP and SOCKS5 are told apart by the first byte.
    #[arg(long, value_name = "ADDR")]
    listen: Vec<SocketAddr>,
    /// Another TCP listener, for clients configured with a separate SOCKS port (same
    /// protocol detection as --listen).
    #[arg(long, value_name = "ADDR")]
    socks_listen: Vec<SocketAddr>,
    /// UNIX socket path to listen on (repeatable).
    #[arg(long, value_name = "PATH")]
    listen_unix: Vec<PathBuf>,
    /// Grant DOMAIN[:PORT] (`*.example.com` = sub-domains only; no port = every port). An IP
    /// literal is reachable only when granted exactly.
    #[arg(long, value_name = "DOMAIN[:PORT]", num_args = 1..)]
    allow: Vec<String>,
    /// Deny DOMAIN[:PORT]; deny wins over allow.
    #[arg(long, value_name = "DOMAIN[:PORT]", num_args = 1..)]
    deny: Vec<String>,
    /// Read more grants from a file: one DOMAIN[:PORT] a line, `!DOMAIN` to deny, `#` comments.
    #[arg(long, value_name = "FILE")]
    allow_file: Vec<PathBuf>,
    /// DNS server to use (repeatable); default: the system's /etc/resolv.conf.
    #[arg(long, value_name = "IP:PORT")]
    resolver: Vec<SocketAddr>,
    /// Append audit lines (JSON) to FILE; default: stderr.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Serve Prometheus text metrics on ADDR.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// Most connections open at once.
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// Most bytes (both directions, all connections) over the proxy's lifetime.
    #[arg(long, value_name = "BYTES")]
    max_bytes: Option<u64>,
    /// Close a connection idle in both directions for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    idle_timeout: u64,
    /// Seconds allowed for resolving and connecting to an upstream.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    connect_timeout: u64,
    /// Exempt CIDR from the address classifier (e.g. 127.0.0.0/8 for a test upstream on
    /// loopback). Weakens the proxy; never set by default.
    #[arg(long, value_name = "CIDR")]
    dangerously_allow_private: Vec<String>,
    /// Runtime threads: 1 (the default) runs everything on one thread, which gives the lowest
    /// latency per connection; more spread connections over that many threads.
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
}

fn build(args: Args) -> anyhow::Result<ProxyConfig> {
    let mut problems = Vec::new();
    let mut allow = Vec::new();
    let mut deny = Vec::new();
    for a in &args.allow {
        match a.parse::<Rule>() {
            Ok(r) => allow.push(r),
            Err(e) => problems.push(e.to_string()),
        }
    }
    for d in &args.deny {
        match d.parse::<Rule>() {
            Ok(r) => deny.push(r),
            Err(e) => problems.push(e.to_string()),
        }
    }
    for f in &args.allow_file {
        let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (list, rule) = match line.strip_prefix('!') {
                Some(r) => (&mut deny, r.trim()),
                None => (&mut allow, line),
            };
            match rule.parse::<Rule>() {
                Ok(r) => list.push(r),
                Err(e) => problems.push(format!("{}:{}: {e}", f.display(), i + 1)),
            }
        }
    }
    let mut private = Vec::new();
    for c in &args.dangerously_allow_private {
        match c.parse::<Cidr>() {
            Ok(c) => private.push(c),
            Err(e) => problems.push(e.to_string()),
        }
    }
    if !problems.is_empty() {
        bail!("invalid configuration:\n  {}", problems.join("\n  "));
    }
    let mut listen = args.listen;
    listen.extend(args.socks_listen);
    Ok(ProxyConfig {
        listen,
        listen_unix: args.listen_unix,
        policy: Policy { allow, deny, dangerously_allow_private: private },
        resolvers: args.resolver,
        audit: args.audit,
        metrics: args.metrics,
        max_connections: args.max_connections,
        max_bytes: args.max_bytes,
        idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
        connect_timeout: Duration::from_secs(args.connect_timeout.max(1)),
        ..ProxyConfig::default()
    })
}

fn main() -> std::process::ExitCode {
    // The per-owner child the gateway runs (see `axp_egress_proxy::child`); hidden from --help,
    // and dispatched before anything else so it can confine itself before any thread starts.
    if std::env::args_os().nth(1).is_some_and(|a| a == axp_egress_proxy::child::CHILD_ARG) {
        std::process::exit(axp_egress_proxy::child::child_main());
    }
    let args = Args::parse();
    let rt = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()
    };
    let result = match rt {
        Ok(rt) => rt.block_on(run(args)),
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The message without a backtrace: it is for the operator, not a developer.
            eprintln!("axp-egress-proxy: error: {e:#}");
            eprintln!("hint: `axp-egress-proxy --help` lists the flags and the rule syntax");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let cfg = build(args)?;
    if !cfg.policy.dangerously_allow_private.is_empty() {
        eprintln!(
            "axp-egress-proxy: warning: the address classifier is waived for {}",
            cfg.policy.dangerously_allow_private.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        );
    }
    let unix = cfg.listen_unix.clone();
    let proxy = Proxy::bind(cfg).await?;
    let ready = serde_json::json!({
        "listening": proxy.local_addrs().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "listening_unix": unix,
        "metrics": proxy.metrics_addr().map(|a| a.to_string()),
    });
    println!("{ready}");
    let shutdown = async {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    proxy.run(shutdown).await?;
    Ok(())
}
