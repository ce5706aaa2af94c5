//! gateway-bench: measures what `axp serve` adds to an MCP tool call. It drives
//! server-everything's `echo` tool (a) directly over stdio with its own minimal newline-delimited
//! JSON-RPC client (8 in-flight requests multiplexed by id over the one pipe for concurrency) and
//! (b) through a running `axp serve` over HTTP with `axp_client`, the workspace's JSON-RPC
//! client, on keep-alive connections (one connection per client), sequentially and with N
//! concurrent clients, in the same run, and prints calls/s, p50 and p99 of each and their
//! ratios. It also times `ping` and `axp.index` through the gateway (no upstream involved) to
//! separate HTTP+dispatch cost from MCP proxying, and reports CPU time per call of the client,
//! the gateway and the MCP server from /proc.
//!
//! The same run also measures a floor: this binary re-run as `--relay`, a minimal axum server
//! that forwards each JSON-RPC body to its own server-everything over stdio and returns the
//! answer (ids rewritten, nothing else: no sessions, jobs, logs, audit or sandbox). What it adds
//! over direct stdio is the least any HTTP → stdio MCP gateway on this HTTP stack pays on this
//! machine: one more process hop and an HTTP round trip.
//!
//! It must not start the gateway (run-gateway-bench.sh does, and cleans it up) and must not
//! assert on timings: it reports figures, it never fails on them. It fails only when a call
//! returns something other than the echoed message.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio as ProcStdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use axp_client::{Client, Reply};
use axp_protocol::jsonrpc::{Id, Request};
use clap::Parser;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

/// Benchmark everything__echo directly over stdio and through `axp serve` over HTTP.
#[derive(Debug, Parser)]
struct Args {
    /// The node binary that runs server-everything for the direct measurement.
    #[arg(long, default_value = "node")]
    node: String,
    /// server-everything's dist/index.js.
    #[arg(long)]
    everything: PathBuf,
    /// The running gateway's endpoint (`http://127.0.0.1:PORT/axp`); its fleet must mount
    /// server-everything as provider `everything`.
    #[arg(long, required_unless_present = "relay")]
    url: Option<String>,
    /// The gateway's pid, for CPU accounting of it and its children (the MCP server).
    #[arg(long)]
    gateway_pid: Option<u32>,
    /// An `axp` binary: also measure the direct path with server-everything started under
    /// `axp sandbox run` (the same kernel-lsm boundary the gateway puts its providers in), which
    /// splits what the gateway adds into the sandbox's share and the gateway's own.
    #[arg(long)]
    sandbox_axp: Option<PathBuf>,
    /// Run as the floor relay (internal: the bench starts itself this way) and print the
    /// address it listens on.
    #[arg(long, hide = true)]
    relay: bool,
    /// Skip the floor relay phases.
    #[arg(long)]
    no_floor: bool,
    /// Calls in each sequential (1 client) phase.
    #[arg(long, default_value_t = 2000)]
    seq: usize,
    /// Concurrent clients (HTTP connections; in-flight requests on the stdio pipe).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Calls per client in each concurrent phase.
    #[arg(long, default_value_t = 2000)]
    per_client: usize,
    /// Calls through the gateway without a session (each opens one, as a stateless MCP client).
    #[arg(long, default_value_t = 300)]
    stateless: usize,
    /// Untimed calls before measuring, on each path.
    #[arg(long, default_value_t = 300)]
    warmup: usize,
    /// Each phase stops after this many seconds even if its calls are not all done.
    #[arg(long, default_value_t = 60)]
    phase_limit_s: u64,
}

const SANDBOXED_1: &str = "direct stdio, sandboxed, 1 client";
const SANDBOXED_N: &str = "direct stdio, sandboxed,";
const FLOOR_1: &str = "floor relay HTTP, 1 client";
const FLOOR_N: &str = "floor relay HTTP,";

const MESSAGE: &str = "the quick brown fox jumps over the lazy dog";
const PROTOCOL_VERSION: &str = "2025-06-18";

// ---------------------------------------------------------------------------------------------
// Direct stdio client.
// ---------------------------------------------------------------------------------------------

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

/// A minimal MCP stdio client: newline-delimited JSON-RPC, responses matched to requests by id so
/// several requests can be in flight on the one pipe. Hand-rolled (not rmcp) on purpose: the
/// baseline should be the cheapest possible client, so that what the gateway adds is not hidden
/// behind a heavier client's own overhead.
struct StdioClient {
    child: Child,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    pending: Pending,
    next_id: AtomicU64,
}

impl StdioClient {
    async fn spawn(program: &std::ffi::OsStr, args: &[&std::ffi::OsStr]) -> Result<Self> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(ProcStdio::piped())
            .stdout(ProcStdio::piped())
            .stderr(ProcStdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start `{}` {args:?}", program.to_string_lossy()))?;
        let mut stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        let pending: Pending = Arc::default();
        let p = pending.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                // Server notifications and server-to-client requests are not answers.
                if msg.get("method").is_some() {
                    continue;
                }
                let Some(id) = msg.get("id").and_then(Value::as_u64) else {
                    continue;
                };
                let waiter = lock(&p).remove(&id);
                if let Some(w) = waiter {
                    let _ = w.send(msg);
                }
            }
            // The server is gone: dropping the senders fails every waiting call.
            lock(&p).clear();
        });
        Ok(Self { child, tx, pending, next_id: AtomicU64::new(1) })
    }

    fn send(&self, msg: &Value) -> Result<()> {
        let mut line = serde_json::to_vec(msg)?;
        line.push(b'\n');
        self.tx.send(line).map_err(|_| anyhow!("the MCP server's stdin is closed"))
    }

    /// A fresh request id and the receiver of its answer.
    fn register(&self) -> (u64, oneshot::Receiver<Value>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        (id, rx)
    }

    async fn request(&self, method: &str, params: Value) -> Result<Value> {
        let (id, rx) = self.register();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let resp = rx.await.map_err(|_| anyhow!("the MCP server exited before answering `{method}`"))?;
        take_result(resp)
    }

    async fn initialize(&self) -> Result<()> {
        self.request(
            "initialize",
            json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                   "clientInfo": {"name": "gateway-bench", "version": "0"}}),
        )
        .await?;
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    }

    async fn shutdown(mut self) {
        drop(self.tx);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP client of the gateway.
// ---------------------------------------------------------------------------------------------

/// A client of the gateway (or of the floor relay): `axp_client` on its own keep-alive
/// connection and, once initialized, its own gateway session (sent as `Mcp-Session-Id`).
fn http_client(url: &str) -> Result<Client> {
    Ok(Client::keep_alive(url)?.accept_event_stream())
}

/// MCP's handshake: `initialize` (the client keeps the session it names), then
/// `notifications/initialized`.
async fn initialize(c: &mut Client) -> Result<()> {
    c.initialize(json!({"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                        "clientInfo": {"name": "gateway-bench", "version": "0"}}))
        .await?;
    c.notify("notifications/initialized", json!({})).await?;
    Ok(())
}

fn take_result(msg: Value) -> Result<Value> {
    if let Some(e) = msg.get("error") {
        bail!("JSON-RPC error: {e}");
    }
    msg.get("result").cloned().ok_or_else(|| anyhow!("a response without result: {msg}"))
}

fn echo_params() -> Value {
    json!({"name": "echo", "arguments": {"message": MESSAGE}})
}

fn gw_echo_params() -> Value {
    json!({"name": "everything__echo", "arguments": {"message": MESSAGE}})
}

/// A tools/call result must carry the echoed message, or the figures would measure errors.
fn check_echo(result: &Value) -> Result<()> {
    let text = result.pointer("/content/0/text").and_then(Value::as_str).unwrap_or("");
    if result.get("isError") == Some(&Value::Bool(true)) || !text.contains(MESSAGE) {
        bail!("echo returned something else: {result}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Phases and CPU accounting.
// ---------------------------------------------------------------------------------------------

/// The result of one measured phase.
struct Phase {
    name: String,
    lat: Vec<Duration>,
    wall: Duration,
    wanted: usize,
    /// CPU microseconds per call: (whose, µs).
    cpu: Vec<(&'static str, f64)>,
    /// The gateway's own account of the phase's tool calls, from its `/metrics`.
    inside: Option<Inside>,
}

/// The gateway's account of a phase's tool calls, from its `axp_tool_call_seconds` histograms:
/// the provider's time and the gateway's own (dispatch to reply, less the provider), each as a
/// mean and as a median interpolated within its histogram bucket (as PromQL's
/// `histogram_quantile` does).
struct Inside {
    provider: Part,
    gateway: Part,
}

/// One part's mean and interpolated median over a phase, in microseconds.
struct Part {
    mean_us: f64,
    p50_us: f64,
}

/// One part of `axp_tool_call_seconds` at a moment: cumulative bucket counts by upper bound
/// (seconds), sum (seconds) and count.
struct Totals {
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

/// Both parts (`provider`, `gateway`); `None` when the gateway does not export them (an older
/// build) or cannot be reached.
async fn tool_call_totals(metrics_url: &str) -> Option<[Totals; 2]> {
    let text =
        reqwest::Client::builder().no_proxy().build().ok()?.get(metrics_url).send().await.ok()?.text().await.ok()?;
    let part = |name: &str| -> Option<Totals> {
        let value = |series: &str| {
            text.lines()
                .find(|l| l.starts_with(series))
                .and_then(|l| l.rsplit_once(' '))
                .and_then(|(_, v)| v.parse().ok())
        };
        let prefix = format!("axp_tool_call_seconds_bucket{{part=\"{name}\",provider=\"everything\",le=\"");
        let buckets = text
            .lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|rest| {
                let (le, v) = rest.split_once("\"} ")?;
                Some((if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? }, v.parse().ok()?))
            })
            .collect();
        Some(Totals {
            buckets,
            sum: value(&format!("axp_tool_call_seconds_sum{{part=\"{name}\",provider=\"everything\"}}"))?,
            count: value(&format!("axp_tool_call_seconds_count{{part=\"{name}\",provider=\"everything\"}}"))?,
        })
    };
    Some([part("provider")?, part("gateway")?])
}

/// What happened between two readings of one part.
fn part(before: &Totals, after: &Totals) -> Option<Part> {
    let n = after.count - before.count;
    if n <= 0.0 || before.buckets.len() != after.buckets.len() {
        return None;
    }
    let half = n / 2.0;
    let (mut lower, mut below) = (0.0, 0.0);
    let mut p50 = f64::NAN;
    for ((le, b), (_, a)) in before.buckets.iter().zip(&after.buckets) {
        let cum = a - b;
        if cum >= half {
            p50 = if le.is_finite() { lower + (le - lower) * (half - below) / (cum - below).max(1.0) } else { lower };
            break;
        }
        (lower, below) = (*le, cum);
    }
    Some(Part { mean_us: (after.sum - before.sum) / n * 1e6, p50_us: p50 * 1e6 })
}

fn inside(before: Option<[Totals; 2]>, after: Option<[Totals; 2]>) -> Option<Inside> {
    let (b, a) = (before?, after?);
    Some(Inside { provider: part(&b[0], &a[0])?, gateway: part(&b[1], &a[1])? })
}

impl Phase {
    fn calls(&self) -> usize {
        self.lat.len()
    }
    fn rate(&self) -> f64 {
        self.calls() as f64 / self.wall.as_secs_f64()
    }
    fn pct(&self, p: f64) -> f64 {
        let mut v = self.lat.clone();
        v.sort_unstable();
        if v.is_empty() {
            return f64::NAN;
        }
        let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
        v[i].as_secs_f64() * 1e3
    }
}

/// CPU time (user+system, all threads, including exited ones) of the processes we watch.
#[derive(Clone, Copy)]
struct Cpu {
    client: f64,
    gateway: f64,
    upstream: f64,
}

/// Seconds of CPU a process has used, from /proc/PID/stat (utime+stime, fields 14 and 15).
/// USER_HZ is 100 on every Linux ABI this runs on (it is fixed by the kernel ABI, not by HZ).
fn proc_cpu(pid: u32) -> f64 {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name (field 2) may contain spaces; fields after it start past the last ')'.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    // `rest` starts at field 3 (state), so utime (14) is index 11 and stime (15) index 12.
    (ticks(11) + ticks(12)) / 100.0
}

fn parent_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every living descendant of `root`.
fn descendants(root: u32) -> Vec<u32> {
    let mut all: Vec<(u32, u32)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let pid = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok());
            if let Some((pid, pp)) = pid.and_then(|p| parent_of(p).map(|pp| (p, pp))) {
                all.push((pid, pp));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (c, pp) in &all {
            if *pp == p {
                out.push(*c);
                frontier.push(*c);
            }
        }
    }
    out
}

fn sample(gateway: Option<u32>, upstream: Option<u32>) -> Cpu {
    let (gw, up) = match (gateway, upstream) {
        (Some(g), _) => (proc_cpu(g), descendants(g).into_iter().map(proc_cpu).sum::<f64>()),
        // The server and whatever it runs under (`axp sandbox run` and its re-executed helper).
        (None, Some(u)) => (0.0, proc_cpu(u) + descendants(u).into_iter().map(proc_cpu).sum::<f64>()),
        (None, None) => (0.0, 0.0),
    };
    Cpu { client: proc_cpu(std::process::id()), gateway: gw, upstream: up }
}

fn cpu_per_call(before: Cpu, after: Cpu, calls: usize, with_gateway: bool) -> Vec<(&'static str, f64)> {
    let n = calls.max(1) as f64;
    let mut v = vec![("client", (after.client - before.client) * 1e6 / n)];
    if with_gateway {
        v.push(("gateway", (after.gateway - before.gateway) * 1e6 / n));
    }
    v.push(("server", (after.upstream - before.upstream) * 1e6 / n));
    v
}

/// Runs `clients` workers, each making up to `per_client` calls of `f` until the deadline.
async fn run_phase<C, F, Fut>(
    name: String,
    workers: Vec<C>,
    per_client: usize,
    limit: Duration,
    f: F,
) -> Result<(Phase, Vec<C>)>
where
    C: Send + 'static,
    F: Fn(C) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = (C, Result<()>)> + Send,
{
    let start = Instant::now();
    let deadline = start + limit;
    let wanted = per_client * workers.len();
    let mut tasks = Vec::new();
    for w in workers {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per_client);
            let mut w = w;
            for _ in 0..per_client {
                if Instant::now() >= deadline {
                    break;
                }
                let t = Instant::now();
                let (back, r) = f(w).await;
                w = back;
                if let Err(e) = r {
                    return (w, lat, Err(e));
                }
                lat.push(t.elapsed());
            }
            (w, lat, Ok(()))
        }));
    }
    let mut lat = Vec::with_capacity(wanted);
    let mut back = Vec::new();
    for t in tasks {
        let (w, l, r) = t.await?;
        r.with_context(|| format!("during `{name}`"))?;
        lat.extend(l);
        back.push(w);
    }
    let wall = start.elapsed();
    Ok((Phase { name, lat, wall, wanted, cpu: Vec::new(), inside: None }, back))
}

// ---------------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------------

fn main() -> Result<()> {
    let args = Args::parse();
    if args.relay {
        // Like the gateway: tokio's multi-thread runtime with its default worker count.
        return tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(relay(args));
    }
    // One client thread for both paths, so the client's own cost is the same on each and it
    // never takes more than one of the machine's cores from the gateway and the server.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(run(args))
}

// ---------------------------------------------------------------------------------------------
// The floor relay.
// ---------------------------------------------------------------------------------------------

/// Serves `POST /` on a free loopback port: each body is a JSON-RPC request, forwarded to
/// server-everything under a fresh id, answered with the server's response under the client's
/// id. Prints the address on stdout once listening.
async fn relay(args: Args) -> Result<()> {
    let node = std::ffi::OsStr::new(&args.node);
    let up = Arc::new(StdioClient::spawn(node, &[args.everything.as_os_str(), "stdio".as_ref()]).await?);
    up.initialize().await?;
    let app = axum::Router::new().route("/", axum::routing::post(forward)).with_state(up);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn forward(
    axum::extract::State(up): axum::extract::State<Arc<StdioClient>>,
    axum::Json(mut msg): axum::Json<Value>,
) -> axum::Json<Value> {
    let client_id = msg.get("id").cloned().unwrap_or(Value::Null);
    let (id, rx) = up.register();
    msg["id"] = json!(id);
    let answer = match up.send(&msg) {
        Ok(()) => rx.await.ok(),
        Err(_) => None,
    };
    let mut resp = answer
        .unwrap_or_else(|| json!({"jsonrpc": "2.0", "error": {"code": -32603, "message": "the MCP server exited"}}));
    resp["id"] = client_id;
    axum::Json(resp)
}

/// Starts this binary as the floor relay; returns the child and its URL.
async fn start_relay(args: &Args) -> Result<(Child, String)> {
    let me = std::env::current_exe()?;
    let mut child = Command::new(me)
        .arg("--relay")
        .arg("--node")
        .arg(&args.node)
        .arg("--everything")
        .arg(&args.everything)
        .stdin(ProcStdio::null())
        .stdout(ProcStdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start the floor relay")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(30), BufReader::new(stdout).read_line(&mut line))
        .await
        .context("the floor relay did not start within 30 s")??;
    let addr = line.trim();
    if addr.is_empty() {
        bail!("the floor relay exited before listening");
    }
    Ok((child, format!("http://{addr}/")))
}

async fn run(args: Args) -> Result<()> {
    let limit = Duration::from_secs(args.phase_limit_s);
    let url = args.url.clone().context("--url is required")?;
    let n = args.clients;

    // --- (a) direct over stdio --------------------------------------------------------------
    let node = std::ffi::OsStr::new(&args.node);
    let direct = Arc::new(StdioClient::spawn(node, &[args.everything.as_os_str(), "stdio".as_ref()]).await?);
    let node_pid = direct.child.id();
    direct.initialize().await?;
    for _ in 0..args.warmup {
        check_echo(&direct.request("tools/call", echo_params()).await?)?;
    }
    // --- (a') direct over stdio, the server in the sandbox ----------------------------------
    let sandboxed = match &args.sandbox_axp {
        Some(axp) => {
            let package = args.everything.parent().and_then(Path::parent).unwrap_or(Path::new("/"));
            let argv: [&std::ffi::OsStr; 8] = [
                "sandbox".as_ref(),
                "run".as_ref(),
                "--workspace".as_ref(),
                package.as_os_str(),
                "--".as_ref(),
                node,
                args.everything.as_os_str(),
                "stdio".as_ref(),
            ];
            let c = Arc::new(StdioClient::spawn(axp.as_os_str(), &argv).await?);
            c.initialize().await?;
            for _ in 0..args.warmup {
                check_echo(&c.request("tools/call", echo_params()).await?)?;
            }
            Some(c)
        }
        None => None,
    };
    // --- (a'') the floor: a minimal HTTP → stdio relay ---------------------------------------
    let floor = if args.no_floor {
        None
    } else {
        let (child, relay_url) = start_relay(&args).await?;
        let mut clients = Vec::new();
        for _ in 0..n {
            clients.push(http_client(&relay_url)?);
        }
        for _ in 0..args.warmup {
            check_echo(&clients[0].call("tools/call", echo_params()).await?)?;
        }
        Some((child, clients))
    };
    let (floor_child, mut floor_clients) = match floor {
        Some((child, clients)) => (Some(child), clients),
        None => (None, Vec::new()),
    };
    // The relay is measured like the gateway: its own CPU as "gateway", its server's as "server".
    let floor_pid = floor_child.as_ref().and_then(Child::id);
    let floor_call = |mut c: Client| async move {
        let r = c.call("tools/call", echo_params()).await.map_err(anyhow::Error::from);
        let r = r.and_then(|v| check_echo(&v));
        (c, r)
    };
    let direct_call = |c: Arc<StdioClient>| async move {
        let r = c.request("tools/call", echo_params()).await;
        let r = r.and_then(|v| check_echo(&v));
        (c, r)
    };

    // --- (b) through the gateway ------------------------------------------------------------
    let mut gw_clients = Vec::new();
    for _ in 0..n {
        let mut c = http_client(&url)?;
        initialize(&mut c).await?;
        gw_clients.push(c);
    }
    for _ in 0..args.warmup {
        let c = &mut gw_clients[0];
        check_echo(&c.call("tools/call", gw_echo_params()).await?)?;
    }
    let gw_call = |mut c: Client| async move {
        let r = c.call("tools/call", gw_echo_params()).await.map_err(anyhow::Error::from);
        let r = r.and_then(|v| check_echo(&v));
        (c, r)
    };

    let mut phases: Vec<Phase> = Vec::new();
    let gw_pid = args.gateway_pid;
    let metrics_url = format!("{}/metrics", url.trim_end_matches("/axp"));

    // Direct and gateway phases alternate so that drift in the machine's load hits both alike.
    macro_rules! measure {
        ($name:expr, $workers:expr, $per:expr, $f:expr, $gw:expr) => {{
            let totals = if $gw { tool_call_totals(&metrics_url).await } else { None };
            let before = sample(gw_pid.filter(|_| $gw), node_pid.filter(|_| !$gw));
            let (mut p, back) = run_phase($name, $workers, $per, limit, $f).await?;
            let after = sample(gw_pid.filter(|_| $gw), node_pid.filter(|_| !$gw));
            p.cpu = cpu_per_call(before, after, p.calls(), $gw);
            if $gw {
                p.inside = inside(totals, tool_call_totals(&metrics_url).await);
            }
            phases.push(p);
            back
        }};
    }

    let _ = measure!("direct stdio, 1 client".into(), vec![direct.clone()], args.seq, direct_call, false);
    let first = gw_clients.remove(0);
    let mut back = measure!("gateway HTTP, 1 client".into(), vec![first], args.seq, gw_call, true);
    gw_clients.insert(0, back.remove(0));
    if let Some(sb) = &sandboxed {
        let sb_pid = sb.child.id();
        let before = sample(None, sb_pid);
        let (mut p, _) = run_phase(SANDBOXED_1.into(), vec![sb.clone()], args.seq, limit, direct_call).await?;
        p.cpu = cpu_per_call(before, sample(None, sb_pid), p.calls(), false);
        phases.push(p);
    }
    if floor_pid.is_some() && !floor_clients.is_empty() {
        let first = floor_clients.remove(0);
        let before = sample(floor_pid, None);
        let (mut p, mut back) = run_phase(FLOOR_1.into(), vec![first], args.seq, limit, floor_call).await?;
        p.cpu = cpu_per_call(before, sample(floor_pid, None), p.calls(), true);
        phases.push(p);
        floor_clients.insert(0, back.remove(0));
    }
    let _ =
        measure!(format!("direct stdio, {n} in flight"), vec![direct.clone(); n], args.per_client, direct_call, false);
    let gw_clients = measure!(format!("gateway HTTP, {n} clients"), gw_clients, args.per_client, gw_call, true);
    if let Some(sb) = &sandboxed {
        let sb_pid = sb.child.id();
        let before = sample(None, sb_pid);
        let name = format!("{SANDBOXED_N} {n} in flight");
        let (mut p, _) = run_phase(name, vec![sb.clone(); n], args.per_client, limit, direct_call).await?;
        p.cpu = cpu_per_call(before, sample(None, sb_pid), p.calls(), false);
        phases.push(p);
    }
    if floor_pid.is_some() && !floor_clients.is_empty() {
        let before = sample(floor_pid, None);
        let clients = std::mem::take(&mut floor_clients);
        let (mut p, _) =
            run_phase(format!("{FLOOR_N} {n} clients"), clients, args.per_client, limit, floor_call).await?;
        p.cpu = cpu_per_call(before, sample(floor_pid, None), p.calls(), true);
        phases.push(p);
    }
    if let Some(mut c) = floor_child {
        let _ = c.kill().await;
    }

    // --- the gateway without the upstream ---------------------------------------------------
    let ping = |mut c: Client| async move {
        let r = c.call("ping", json!({})).await.map(|_| ()).map_err(anyhow::Error::from);
        (c, r)
    };
    let index = |mut c: Client| async move {
        let r = c.call("axp.index", json!({})).await.map_err(anyhow::Error::from).and_then(|v| {
            if v.to_string().contains("everything__echo") {
                Ok(())
            } else {
                Err(anyhow!("axp.index does not list everything__echo: {v}"))
            }
        });
        (c, r)
    };
    let mut gw_clients = gw_clients;
    let first = gw_clients.remove(0);
    let back = measure!("gateway ping, 1 client".into(), vec![first], args.seq, ping, true);
    let back = measure!("gateway axp.index, 1 client".into(), back, args.seq, index, true);
    gw_clients.extend(back);
    let gw_clients = measure!(format!("gateway ping, {n} clients"), gw_clients, args.per_client, ping, true);
    // A stateless MCP client (no Mcp-Session-Id): the gateway opens a session per call.
    let stateless = |c: Client| async move {
        let r = c.post(&Request::new(Id::Num(1), "tools/call", gw_echo_params())).await.and_then(Reply::into_result);
        let r = r.map_err(anyhow::Error::from).and_then(|v| check_echo(&v));
        (c, r)
    };
    let _ = measure!(
        "gateway HTTP, 1 client, no session".into(),
        vec![http_client(&url)?],
        args.stateless,
        stateless,
        true
    );
    drop(gw_clients);

    if let Ok(d) = Arc::try_unwrap(direct) {
        d.shutdown().await;
    }
    if let Some(Ok(d)) = sandboxed.map(Arc::try_unwrap) {
        d.shutdown().await;
    }

    report(&phases, n, &args);
    Ok(())
}

fn report(phases: &[Phase], n: usize, args: &Args) {
    println!();
    println!(
        "{:<36} {:>7} {:>9} {:>8} {:>8}   CPU µs/call (client / gateway / server)",
        "scenario", "calls", "calls/s", "p50 ms", "p99 ms"
    );
    for p in phases {
        let cpu: Vec<String> = p.cpu.iter().map(|(_, v)| format!("{v:.0}")).collect();
        let cpu = if p.cpu.len() == 2 { format!("{} / - / {}", cpu[0], cpu[1]) } else { cpu.join(" / ") };
        let cut =
            if p.calls() < p.wanted { format!(" (time limit: {} of {})", p.calls(), p.wanted) } else { String::new() };
        println!(
            "{:<36} {:>7} {:>9.0} {:>8.3} {:>8.3}   {cpu}{cut}",
            p.name,
            p.calls(),
            p.rate(),
            p.pct(0.50),
            p.pct(0.99),
        );
    }
    let by = |name: &str| phases.iter().find(|p| p.name == name);
    let (Some(ds), Some(gs), Some(dc), Some(gc), Some(ping), Some(idx)) = (
        by("direct stdio, 1 client"),
        by("gateway HTTP, 1 client"),
        by(&format!("direct stdio, {n} in flight")),
        by(&format!("gateway HTTP, {n} clients")),
        by("gateway ping, 1 client"),
        by("gateway axp.index, 1 client"),
    ) else {
        return;
    };
    println!();
    println!("ratios, gateway / direct (same run):");
    for (label, d, g) in [("1 client ", ds, gs), (&*format!("{n} clients"), dc, gc)] {
        println!(
            "  {label}: calls/s x{:.2}   p50 x{:.2}   p99 x{:.2}   added p50 {:+.3} ms",
            g.rate() / d.rate(),
            g.pct(0.5) / d.pct(0.5),
            g.pct(0.99) / d.pct(0.99),
            g.pct(0.5) - d.pct(0.5),
        );
    }
    println!(
        "where the added p50 goes (1 client): HTTP + dispatch (ping) {:.3} ms, + session/registry (axp.index - ping) {:+.3} ms, + job and MCP proxying (echo via gateway - direct - ping) {:+.3} ms",
        ping.pct(0.5),
        idx.pct(0.5) - ping.pct(0.5),
        gs.pct(0.5) - ds.pct(0.5) - ping.pct(0.5),
    );
    for (label, g) in [("1 client", gs), (&*format!("{n} clients"), gc)] {
        if let Some(i) = &g.inside {
            println!(
                "inside the gateway ({label}, from its /metrics): the provider p50 {:.0} µs (mean {:.0}), the gateway's own p50 {:.0} µs (mean {:.0}; dispatch to reply, less the provider); the rest of the client's p50 is HTTP framing, loopback and wake-ups",
                i.provider.p50_us, i.provider.mean_us, i.gateway.p50_us, i.gateway.mean_us
            );
        }
    }
    if let (Some(ss), Some(sc)) = (by(SANDBOXED_1), by(&format!("{SANDBOXED_N} {n} in flight"))) {
        println!(
            "with the server sandboxed on both paths (axp sandbox run): sandbox's share of the added p50 {:+.3} ms; the gateway's own: 1 client {:+.3} ms (calls/s x{:.2}), {n} clients {:+.3} ms (calls/s x{:.2})",
            ss.pct(0.5) - ds.pct(0.5),
            gs.pct(0.5) - ss.pct(0.5),
            gs.rate() / ss.rate(),
            gc.pct(0.5) - sc.pct(0.5),
            gc.rate() / sc.rate(),
        );
    }
    if let (Some(fs), Some(fc)) = (by(FLOOR_1), by(&format!("{FLOOR_N} {n} clients"))) {
        println!(
            "floor (a minimal axum HTTP -> stdio relay, nothing else): added p50 1 client {:+.3} ms, {n} clients {:.0} calls/s; the gateway over the floor: 1 client {:+.3} ms, {n} clients calls/s x{:.2}",
            fs.pct(0.5) - ds.pct(0.5),
            fc.rate(),
            gs.pct(0.5) - fs.pct(0.5),
            gc.rate() / fc.rate(),
        );
    }
    let added = gs.pct(0.5) - ds.pct(0.5);
    println!(
        "targets: added p50 <= 0.100 ms: {} ({:.3} ms); {n} clients well over 2000 calls/s: {} ({:.0}/s)",
        if added <= 0.1 { "met" } else { "NOT met" },
        added,
        if gc.rate() > 2000.0 { "met" } else { "NOT met" },
        gc.rate()
    );
    println!(
        "(warm-up {} calls per path; {} sequential, {n}x{} concurrent; phase limit {} s)",
        args.warmup, args.seq, args.per_client, args.phase_limit_s
    );
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
