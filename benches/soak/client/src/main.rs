//! soak-client: a long, mixed load on a running `axp serve` (started and stopped by
//! benches/soak/bench.sh), and the figures that say whether the gateway stays healthy under it.
//! In phases: wait for server-everything; warm up; open 1,000 sessions and measure the resident
//! memory they cost; the soak itself (~200 command jobs kept running with attach, hang-ups,
//! re-attaches from a seq and cancels, tool calls, `axp.index` latency, replays) for
//! `--duration`; drain; replay every job from seq 0 against the ledger of acknowledged events;
//! open 1,000 more idle sessions after the churn. The gateway's RSS, descriptors, threads, CPU
//! and the load average are sampled every few seconds into a CSV throughout.
//!
//! It runs on one thread (a current-thread tokio runtime and a `LocalSet`), so it never takes
//! more than one core from the gateway. It reports; it fails (exit 1) only when an acknowledged
//! event was lost or changed, or a job's log is not contiguous, not on a figure.

mod gw;
mod ledger;
mod probe;
mod soak;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};

use crate::ledger::Plan;
use crate::probe::Reading;
use crate::soak::{Cfg, Shared};

/// Soak load for `axp serve`.
#[derive(Debug, Parser)]
struct Args {
    /// The running gateway's endpoint (`http://127.0.0.1:PORT/axp`); its fleet must mount
    /// server-everything as provider `everything`, and its sessions need `proc.spawn`.
    #[arg(long)]
    url: String,
    /// The gateway's pid (for RSS, descriptors and CPU from /proc).
    #[arg(long)]
    gateway_pid: u32,
    /// Seconds of soak.
    #[arg(long, default_value_t = 600)]
    duration: u64,
    /// Sessions opened (MCP `initialize`) before the soak and kept; the soak draws from them.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,
    /// Idle sessions opened after the soak to measure their memory once more.
    #[arg(long, default_value_t = 1000)]
    extra_idle: usize,
    /// Command jobs kept running at once.
    #[arg(long, default_value_t = 200)]
    jobs: usize,
    /// Each job prints between `--lines-min` and `--lines-max` numbered lines…
    #[arg(long, default_value_t = 20)]
    lines_min: u32,
    #[arg(long, default_value_t = 160)]
    lines_max: u32,
    /// …`--burst` at a time, sleeping `--tick-s` seconds after each burst.
    #[arg(long, default_value_t = 4)]
    burst: u32,
    #[arg(long, default_value_t = 1.0)]
    tick_s: f64,
    /// Share of jobs cancelled mid-way, and of jobs hung up on and re-attached.
    #[arg(long, default_value_t = 0.15)]
    p_cancel: f64,
    #[arg(long, default_value_t = 0.15)]
    p_disconnect: f64,
    /// Tool callers (echo and add, alternating), each pausing `--tool-pause-ms` between calls.
    #[arg(long, default_value_t = 4)]
    tool_callers: usize,
    #[arg(long, default_value_t = 20)]
    tool_pause_ms: u64,
    /// `axp.index` callers, each pausing `--index-pause-ms` between calls.
    #[arg(long, default_value_t = 2)]
    index_callers: usize,
    #[arg(long, default_value_t = 10)]
    index_pause_ms: u64,
    /// Pause of the replayer between two replays of finished jobs.
    #[arg(long, default_value_t = 200)]
    replay_pause_ms: u64,
    /// Seconds after the deadline for the cancelled jobs to end.
    #[arg(long, default_value_t = 60)]
    drain_s: u64,
    /// Seconds of quiet before a memory reading.
    #[arg(long, default_value_t = 5)]
    settle_s: u64,
    /// Seconds between two samples of the gateway.
    #[arg(long, default_value_t = 5)]
    sample_s: u64,
    /// Seconds from the soak's start after which jobs are at their full count ("after ramp-up").
    #[arg(long, default_value_t = 60)]
    ramp_s: u64,
    /// The samples go here, one CSV row each.
    #[arg(long)]
    csv: PathBuf,
    /// The figures go here as JSON.
    #[arg(long)]
    summary: Option<PathBuf>,
    #[arg(long, default_value_t = 20261203)]
    seed: u64,
    /// The soak's sessions are opened this many at a time (one at a time measures what a
    /// session itself costs; see `--extra-concurrency`).
    #[arg(long, default_value_t = 1)]
    open_concurrency: usize,
    /// The extra idle sessions after the soak are opened this many at a time (a burst of
    /// clients connecting).
    #[arg(long, default_value_t = 16)]
    extra_concurrency: usize,
    /// Seconds of `axp.index` calls alone (no jobs, no tool calls) before the soak: the
    /// latency the machine gives the gateway without the soak's load, for comparison.
    #[arg(long, default_value_t = 30)]
    baseline_s: u64,
}

/// One row of the CSV.
#[derive(Clone, Debug)]
struct Sample {
    t_s: f64,
    phase: &'static str,
    r: Reading,
    gw_cpu_pct: f64,
    machine_pct: f64,
    index_p50_ms: f64,
    index_p99_ms: f64,
}

const CSV_HEADER: &str = "t_s,phase,rss_kib,rss_anon_kib,rss_file_kib,fds,threads,descendants,gw_cpu_pct,machine_busy_pct,load1,load5,foreign_rustc,jobs_running,jobs_started,events_acked,index_calls,index_p50_ms,index_p99_ms,tool_calls,errors";

fn main() -> Result<()> {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    let failed = local.block_on(&rt, run(args))?;
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

fn pct(v: &[u32], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1e3
}

/// The median of three readings a second apart (RSS moves a little between two reads).
async fn steady_reading(pid: u32) -> Reading {
    let mut rs = Vec::new();
    for i in 0..3 {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        rs.push(probe::read(pid));
    }
    rs.sort_by_key(|r| r.rss_kib);
    rs[1].clone()
}

/// Opens `n` sessions, `at_once` at a time.
async fn open_sessions(sh: &Rc<Shared>, n: usize, at_once: usize) -> Result<Vec<String>> {
    let queue = Rc::new(Cell::new(n));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..at_once.max(1) {
        let sh = sh.clone();
        let queue = queue.clone();
        set.spawn_local(async move {
            let mut mine = Vec::new();
            while queue.get() > 0 {
                queue.set(queue.get() - 1);
                mine.push(sh.gw.initialize().await?);
            }
            Ok::<_, anyhow::Error>(mine)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = set.join_next().await {
        all.extend(r??);
    }
    Ok(all)
}

/// Waits (bounded) for server-everything's tools, and learns the name of its add tool.
async fn ready(sh: &Shared, session: &str) -> Result<()> {
    let start = Instant::now();
    loop {
        let r = sh.gw.call(session, "axp.index", json!({"provider": "everything", "limit": 100})).await;
        if let Ok(r) = r {
            let names: Vec<String> = r
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
                .collect();
            if names.iter().any(|n| n == "everything__echo") {
                if let Some(add) = names.iter().find(|n| *n == "everything__add" || *n == "everything__get-sum") {
                    *sh.add_tool.borrow_mut() = add.clone();
                    return Ok(());
                }
                bail!("server-everything has no add tool (neither `add` nor `get-sum`): {names:?}");
            }
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!("server-everything's tools did not show in axp.index within 120 s: {}", sh.gw.healthz().await?);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A few calls of each kind and a few short jobs, so one-time costs (first sandbox, first
/// allocations of each path) are paid before anything is measured.
async fn warm_up(sh: &Rc<Shared>, session: &str) -> Result<()> {
    for i in 0..100 {
        sh.gw.call(session, "axp.index", json!({"query": if i % 2 == 0 { "echo" } else { "sum" }})).await?;
    }
    let add = sh.add_tool.borrow().clone();
    for i in 0..20 {
        sh.gw
            .call(session, "tools/call", json!({"name": "everything__echo", "arguments": {"message": format!("w{i}")}}))
            .await?;
        sh.gw.call(session, "tools/call", json!({"name": add, "arguments": {"a": i, "b": 1}})).await?;
    }
    for _ in 0..4 {
        let r = sh
            .gw
            .call(session, "job.start", json!({"command": ["sh", "-c", "echo a; sleep 0.2; echo b"], "wait": true}))
            .await?;
        if r.pointer("/result").is_none() {
            bail!("a warm-up job did not answer a result: {r}");
        }
    }
    Ok(())
}

async fn run(args: Args) -> Result<bool> {
    let pid = args.gateway_pid;
    let cfg = Cfg {
        jobs: args.jobs,
        lines_min: args.lines_min.max(1),
        lines_max: args.lines_max.max(args.lines_min.max(1)),
        burst: args.burst.max(1),
        tick_s: args.tick_s,
        p_cancel: args.p_cancel.clamp(0.0, 0.9),
        p_disconnect: args.p_disconnect.clamp(0.0, 0.9),
        tool_callers: args.tool_callers,
        tool_pause_ms: args.tool_pause_ms,
        index_callers: args.index_callers,
        index_pause_ms: args.index_pause_ms,
        replay_pause_ms: args.replay_pause_ms,
        drain: Duration::from_secs(args.drain_s),
    };
    let sh = Rc::new(Shared::new(gw::Gw::new(&args.url)?, cfg.clone(), args.seed));
    let t_start = Instant::now();
    let settle = Duration::from_secs(args.settle_s);

    // The sampler runs through every phase.
    let samples: Rc<RefCell<Vec<Sample>>> = Rc::default();
    let stop = Rc::new(Cell::new(false));
    let mut csv = std::io::BufWriter::new(
        std::fs::File::create(&args.csv).with_context(|| format!("cannot write {}", args.csv.display()))?,
    );
    writeln!(csv, "{CSV_HEADER}")?;
    let sampler = {
        let (sh, samples, stop) = (sh.clone(), samples.clone(), stop.clone());
        let every = Duration::from_secs(args.sample_s.max(1));
        tokio::task::spawn_local(async move {
            let mut prev = probe::read(pid);
            let mut prev_t = Instant::now();
            for _ in 0..1_000_000 {
                tokio::time::sleep(every).await;
                let r = probe::read(pid);
                let dt = prev_t.elapsed().as_secs_f64();
                let mut w = std::mem::take(&mut *sh.stats.index_window.borrow_mut());
                w.sort_unstable();
                let (mb, mt) = (r.machine.0.saturating_sub(prev.machine.0), r.machine.1.saturating_sub(prev.machine.1));
                let s = Sample {
                    t_s: t_start.elapsed().as_secs_f64(),
                    phase: sh.phase.get(),
                    gw_cpu_pct: (r.cpu_s - prev.cpu_s) / dt * 100.0,
                    machine_pct: if mt > 0 { mb as f64 / mt as f64 * 100.0 } else { 0.0 },
                    index_p50_ms: pct(&w, 0.50),
                    index_p99_ms: pct(&w, 0.99),
                    r: r.clone(),
                };
                let st = &sh.stats;
                let _ = writeln!(
                    csv,
                    "{:.1},{},{},{},{},{},{},{},{:.1},{:.1},{:.2},{:.2},{},{},{},{},{},{:.3},{:.3},{},{}",
                    s.t_s,
                    s.phase,
                    r.rss_kib,
                    r.rss_anon_kib,
                    r.rss_file_kib,
                    r.fds,
                    r.threads,
                    r.descendants,
                    s.gw_cpu_pct,
                    s.machine_pct,
                    r.load1,
                    r.load5,
                    r.rustc,
                    st.jobs_running.get(),
                    st.jobs_started.get(),
                    sh.ledger.borrow().acked_total,
                    st.index_calls.get(),
                    s.index_p50_ms,
                    s.index_p99_ms,
                    st.tool_calls.get(),
                    st.error_count(),
                );
                let _ = csv.flush();
                samples.borrow_mut().push(s);
                prev = r;
                prev_t = Instant::now();
                if stop.get() {
                    break;
                }
            }
        })
    };

    // Ready and warm.
    sh.phase.set("warmup");
    let warm_session = sh.gw.initialize().await.context("the first initialize")?;
    ready(&sh, &warm_session).await?;
    warm_up(&sh, &warm_session).await.context("warm-up")?;
    eprintln!("soak: ready (add tool: {}), warm", sh.add_tool.borrow());

    // The soak's sessions, and what they cost.
    sh.phase.set("sessions");
    tokio::time::sleep(settle).await;
    let before_sessions = steady_reading(pid).await;
    let t = Instant::now();
    let opened =
        open_sessions(&sh, args.sessions, args.open_concurrency).await.context("opening the soak's sessions")?;
    let open_s = t.elapsed().as_secs_f64();
    sh.sessions.borrow_mut().extend(opened);
    sh.active_pool.set(args.sessions);
    tokio::time::sleep(settle).await;
    let after_sessions = steady_reading(pid).await;
    let per_session_kib =
        (after_sessions.rss_kib as f64 - before_sessions.rss_kib as f64) / args.sessions.max(1) as f64;
    eprintln!(
        "soak: {} sessions opened in {open_s:.1} s; RSS {} -> {} KiB ({per_session_kib:.2} KiB per session; anonymous {} -> {} KiB, threads {} -> {})",
        args.sessions,
        before_sessions.rss_kib,
        after_sessions.rss_kib,
        before_sessions.rss_anon_kib,
        after_sessions.rss_anon_kib,
        before_sessions.threads,
        after_sessions.threads
    );

    // axp.index alone, on the same sessions, for a baseline of its latency on this machine now.
    sh.phase.set("baseline");
    let baseline = {
        let until = Instant::now() + Duration::from_secs(args.baseline_s);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..cfg.index_callers {
            set.spawn_local(soak::index_caller(sh.clone(), until));
        }
        while set.join_next().await.is_some() {}
        let mut v = std::mem::take(&mut *sh.stats.index_lat.borrow_mut());
        sh.stats.index_calls.set(0);
        v.sort_unstable();
        v
    };
    let baseline_load = probe::read(pid).load1;
    eprintln!(
        "soak: axp.index alone for {} s: {} calls, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (load {baseline_load:.2})",
        args.baseline_s,
        baseline.len(),
        pct(&baseline, 0.5),
        pct(&baseline, 0.99),
        baseline.last().map_or(f64::NAN, |x| *x as f64 / 1e3)
    );

    // The soak.
    sh.phase.set("soak");
    let soak_start = probe::read(pid);
    let client_cpu0 = probe::self_cpu_s();
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(args.duration);
    let at_deadline: Rc<RefCell<Option<(Reading, f64)>>> = Rc::default();
    {
        let at = at_deadline.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep_until(deadline.into()).await;
            *at.borrow_mut() = Some((probe::read(pid), probe::self_cpu_s()));
        });
    }
    let mut set = tokio::task::JoinSet::new();
    for slot in 0..cfg.jobs {
        set.spawn_local(soak::job_slot(sh.clone(), slot, deadline));
    }
    for me in 0..cfg.tool_callers {
        set.spawn_local(soak::tool_caller(sh.clone(), me, deadline));
    }
    for _ in 0..cfg.index_callers {
        set.spawn_local(soak::index_caller(sh.clone(), deadline));
    }
    set.spawn_local(soak::replayer(sh.clone(), deadline));
    let mut progress = tokio::time::interval(Duration::from_secs(60));
    progress.tick().await;
    loop {
        tokio::select! {
            r = set.join_next() => match r {
                Some(r) => r.context("a soak task panicked")?,
                None => break,
            },
            _ = progress.tick() => {
                let st = &sh.stats;
                let r = probe::read(pid);
                eprintln!(
                    "soak: {:>4.0} s  jobs running {} started {}  events {}  index {}  tools {}  errors {}  RSS {} KiB  fds {}  load {:.2}",
                    t0.elapsed().as_secs_f64(), st.jobs_running.get(), st.jobs_started.get(), sh.ledger.borrow().acked_total,
                    st.index_calls.get(), st.tool_calls.get(), st.error_count(), r.rss_kib, r.fds, r.load1
                );
            }
        }
    }
    let soak_wall = t0.elapsed();
    let (end_reading, client_cpu1) =
        at_deadline.borrow().clone().unwrap_or_else(|| (probe::read(pid), probe::self_cpu_s()));

    // Drained: every job has ended. The client's idle connections are closed first, so the
    // descriptor count after the settle is the gateway's own.
    sh.phase.set("drained");
    sh.gw.close_idle()?;
    tokio::time::sleep(settle.max(Duration::from_secs(10))).await;
    let drained = steady_reading(pid).await;

    // Every job from seq 0, against the ledger.
    sh.phase.set("verify");
    let t = Instant::now();
    let v = verify(&sh).await;
    let verify_s = t.elapsed().as_secs_f64();

    // More idle sessions, after the churn.
    sh.phase.set("idle-after");
    tokio::time::sleep(settle).await;
    let before_extra = steady_reading(pid).await;
    let extra =
        open_sessions(&sh, args.extra_idle, args.extra_concurrency).await.context("opening the extra idle sessions")?;
    sh.sessions.borrow_mut().extend(extra);
    tokio::time::sleep(settle).await;
    let after_extra = steady_reading(pid).await;
    let per_session_after_kib =
        (after_extra.rss_kib as f64 - before_extra.rss_kib as f64) / args.extra_idle.max(1) as f64;
    sh.phase.set("end");
    stop.set(true);
    let _ = tokio::time::timeout(Duration::from_secs(args.sample_s + 5), sampler).await;

    let figures = Figures {
        args: &args,
        sh: &sh,
        samples: &samples.borrow(),
        soak_start,
        end_reading,
        drained,
        before_sessions,
        after_sessions,
        per_session_kib,
        before_extra,
        after_extra,
        per_session_after_kib,
        soak_wall,
        baseline,
        baseline_load,
        client_cpu: client_cpu1 - client_cpu0,
        v,
        verify_s,
    };
    let summary = figures.report();
    if let Some(p) = &args.summary {
        std::fs::write(p, serde_json::to_vec_pretty(&summary)?)?;
    }
    Ok(figures.v.lost_events > 0 || figures.v.changed > 0 || figures.v.not_contiguous > 0)
}

/// The outcome of replaying every job against the ledger.
#[derive(Default, Debug)]
struct Verified {
    jobs: u64,
    acked: u64,
    replayed: u64,
    lost_events: u64,
    changed: u64,
    not_contiguous: u64,
    output_bad: u64,
    replay_failed: u64,
    examples: Vec<String>,
    /// Exit states of the jobs by plan: (plan, state) → count.
    states: std::collections::BTreeMap<(Plan, String), u64>,
}

async fn verify(sh: &Rc<Shared>) -> Verified {
    let queue: Rc<RefCell<VecDeque<String>>> =
        Rc::new(RefCell::new(sh.ledger.borrow().order.iter().cloned().collect()));
    let out: Rc<RefCell<Verified>> = Rc::default();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (sh, queue, out) = (sh.clone(), queue.clone(), out.clone());
        set.spawn_local(async move {
            loop {
                let Some(job) = queue.borrow_mut().pop_front() else { break };
                let session = {
                    let l = sh.ledger.borrow();
                    sh.sessions.borrow()[l.jobs[&job].session].clone()
                };
                let events = soak::replay_all(&sh, &session, &job).await;
                let l = sh.ledger.borrow();
                let e = &l.jobs[&job];
                let mut o = out.borrow_mut();
                o.jobs += 1;
                o.acked += e.acked.len() as u64;
                let events = match events {
                    Ok(ev) => ev,
                    Err(err) => {
                        o.replay_failed += 1;
                        o.lost_events += e.acked.len() as u64;
                        if o.examples.len() < 10 {
                            o.examples.push(format!("job {job}: replay failed: {err:#}"));
                        }
                        continue;
                    }
                };
                let c = ledger::check(e, &events);
                o.replayed += c.replayed;
                let state = events
                    .last()
                    .and_then(|x| x.get("state"))
                    .and_then(Value::as_str)
                    .unwrap_or("(no exit)")
                    .to_string();
                *o.states.entry((e.plan, state)).or_default() += 1;
                let changed = c.lost.iter().filter(|(_, why)| *why == "different").count() as u64;
                o.changed += changed;
                o.lost_events += c.lost.len() as u64 - changed;
                if !c.lost.is_empty() && o.examples.len() < 10 {
                    o.examples.push(format!("job {job} ({:?}): {:?}", e.plan, &c.lost[..c.lost.len().min(5)]));
                }
                if let Some(n) = c.not_contiguous {
                    o.not_contiguous += 1;
                    if o.examples.len() < 10 {
                        o.examples.push(format!("job {job}: log not contiguous: {n}"));
                    }
                }
                if let Some(why) = c.output {
                    o.output_bad += 1;
                    if o.examples.len() < 10 {
                        o.examples.push(format!("job {job} ({:?}): output: {why}", e.plan));
                    }
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    Rc::try_unwrap(out).map(RefCell::into_inner).unwrap_or_else(|o| std::mem::take(&mut *o.borrow_mut()))
}

struct Figures<'a> {
    args: &'a Args,
    sh: &'a Shared,
    samples: &'a [Sample],
    soak_start: Reading,
    end_reading: Reading,
    drained: Reading,
    before_sessions: Reading,
    after_sessions: Reading,
    per_session_kib: f64,
    before_extra: Reading,
    after_extra: Reading,
    per_session_after_kib: f64,
    soak_wall: Duration,
    /// `axp.index` latencies (µs, sorted) of the baseline phase, and the load then.
    baseline: Vec<u32>,
    baseline_load: f64,
    client_cpu: f64,
    v: Verified,
    verify_s: f64,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// Least-squares slope of `y` over `x`.
fn slope(x: &[f64], y: &[f64]) -> f64 {
    let (mx, my) = (mean(x), mean(y));
    let num: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let den: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    if den > 0.0 { num / den } else { f64::NAN }
}

impl Figures<'_> {
    fn report(&self) -> Value {
        let st = &self.sh.stats;
        let soak: Vec<&Sample> = self.samples.iter().filter(|s| s.phase == "soak").collect();
        let soak_t0 = soak.first().map_or(0.0, |s| s.t_s - self.args.sample_s as f64);
        let steady: Vec<&Sample> =
            soak.iter().copied().filter(|s| s.t_s - soak_t0 >= self.args.ramp_s as f64).collect();
        let after_ramp = steady.first().map(|s| s.r.clone()).unwrap_or_default();
        let max_rss = soak.iter().map(|s| s.r.rss_kib).max().unwrap_or(0);
        let max_fds = soak.iter().map(|s| s.r.fds).max().unwrap_or(0);
        let min_fds = soak.iter().map(|s| s.r.fds).min().unwrap_or(0);
        let halves = |f: &dyn Fn(&Sample) -> f64| {
            let n = steady.len() / 2;
            let a: Vec<f64> = steady[..n].iter().map(|s| f(s)).collect();
            let b: Vec<f64> = steady[n..].iter().map(|s| f(s)).collect();
            (mean(&a), mean(&b))
        };
        let (rss_a, rss_b) = halves(&|s| s.r.rss_kib as f64);
        let (fd_a, fd_b) = halves(&|s| s.r.fds as f64);
        let xs: Vec<f64> = steady.iter().map(|s| s.t_s / 60.0).collect();
        let rss_slope = slope(&xs, &steady.iter().map(|s| s.r.rss_kib as f64).collect::<Vec<_>>());
        let fd_slope = slope(&xs, &steady.iter().map(|s| s.r.fds as f64).collect::<Vec<_>>());
        let rss_growth = (rss_b - rss_a) / rss_a * 100.0;
        let fd_growth = (fd_b - fd_a) / fd_a * 100.0;
        let rss_flat = rss_growth < 5.0;
        let fd_flat = fd_growth < 5.0;

        let mut idx = st.index_lat.borrow().clone();
        idx.sort_unstable();
        let mut tools = st.tool_lat.borrow().clone();
        tools.sort_unstable();
        let window_p99: Vec<f64> = soak.iter().map(|s| s.index_p99_ms).filter(|x| x.is_finite()).collect();
        let wall = self.soak_wall.as_secs_f64();
        let cpu_pct = (self.end_reading.cpu_s - self.soak_start.cpu_s) / self.args.duration as f64 * 100.0;
        let cpu_children_pct = (self.end_reading.cpu_with_children_s - self.soak_start.cpu_with_children_s)
            / self.args.duration as f64
            * 100.0;
        let loads: Vec<f64> = soak.iter().map(|s| s.r.load1).collect();
        let machine: Vec<f64> = soak.iter().map(|s| s.machine_pct).collect();
        let rustc: Vec<f64> = soak.iter().map(|s| s.r.rustc as f64).collect();
        let gw_cpu: Vec<f64> = soak.iter().map(|s| s.gw_cpu_pct).collect();
        let max_of = |v: &[f64]| v.iter().cloned().fold(f64::NAN, f64::max);
        let v = &self.v;
        let p99 = pct(&idx, 0.99);

        let mib = |k: u64| k as f64 / 1024.0;
        println!();
        println!(
            "axp serve soak: {} s, {} sessions, {} job slots, seed {}",
            self.args.duration, self.args.sessions, self.args.jobs, self.args.seed
        );
        println!();
        println!("| figure | start | after ramp ({} s) | end | max | after drain |", self.args.ramp_s);
        println!("|---|---|---|---|---|---|");
        println!(
            "| gateway RSS (MiB) | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            mib(self.soak_start.rss_kib),
            mib(after_ramp.rss_kib),
            mib(self.end_reading.rss_kib),
            mib(max_rss),
            mib(self.drained.rss_kib)
        );
        println!(
            "| gateway fds | {} | {} | {} | {} (min {}) | {} |",
            self.soak_start.fds, after_ramp.fds, self.end_reading.fds, max_fds, min_fds, self.drained.fds
        );
        println!(
            "| gateway threads | {} | {} | {} | {} | {} |",
            self.soak_start.threads,
            after_ramp.threads,
            self.end_reading.threads,
            soak.iter().map(|s| s.r.threads).max().unwrap_or(0),
            self.drained.threads
        );
        println!(
            "| processes below the gateway | {} | {} | {} | {} | {} |",
            self.soak_start.descendants,
            after_ramp.descendants,
            self.end_reading.descendants,
            soak.iter().map(|s| s.r.descendants).max().unwrap_or(0),
            self.drained.descendants
        );
        println!();
        println!(
            "steady state (from {} s): RSS mean {:.1} MiB first half, {:.1} MiB second half ({:+.2} %), slope {:+.1} KiB/min: {}",
            self.args.ramp_s,
            rss_a / 1024.0,
            rss_b / 1024.0,
            rss_growth,
            rss_slope,
            if rss_flat { "flat" } else { "NOT flat" }
        );
        println!(
            "                         fds mean {fd_a:.0} first half, {fd_b:.0} second half ({fd_growth:+.2} %), slope {fd_slope:+.1}/min: {}",
            if fd_flat { "flat" } else { "NOT flat" }
        );
        println!();
        println!("| latency (client-side) | calls | p50 ms | p99 ms | p99.9 ms | max ms |");
        println!("|---|---|---|---|---|---|");
        println!(
            "| axp.index | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            idx.len(),
            pct(&idx, 0.5),
            p99,
            pct(&idx, 0.999),
            idx.last().map_or(f64::NAN, |x| *x as f64 / 1e3)
        );
        println!(
            "| tools/call (echo, {}) | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            self.sh.add_tool.borrow(),
            tools.len(),
            pct(&tools, 0.5),
            pct(&tools, 0.99),
            pct(&tools, 0.999),
            tools.last().map_or(f64::NAN, |x| *x as f64 / 1e3)
        );
        let b = &self.baseline;
        println!(
            "| axp.index alone, before the soak ({} s, load {:.2}) | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            self.args.baseline_s,
            self.baseline_load,
            b.len(),
            pct(b, 0.5),
            pct(b, 0.99),
            pct(b, 0.999),
            b.last().map_or(f64::NAN, |x| *x as f64 / 1e3)
        );
        println!(
            "axp.index p99 per {} s window: min {:.3}, median {:.3}, max {:.3} ms",
            self.args.sample_s,
            window_p99.iter().cloned().fold(f64::NAN, f64::min),
            {
                let mut w = window_p99.clone();
                w.sort_by(f64::total_cmp);
                w.get(w.len() / 2).copied().unwrap_or(f64::NAN)
            },
            max_of(&window_p99)
        );
        println!();
        println!(
            "memory per idle session: {:.2} KiB ({} sessions before the soak, {} at a time: RSS {} -> {} KiB, gateway threads {} -> {})",
            self.per_session_kib,
            self.args.sessions,
            self.args.open_concurrency,
            self.before_sessions.rss_kib,
            self.after_sessions.rss_kib,
            self.before_sessions.threads,
            self.after_sessions.threads
        );
        println!(
            "                         after the soak: {:.2} KiB ({} more, {} at a time: RSS {} -> {} KiB, gateway threads {} -> {})",
            self.per_session_after_kib,
            self.args.extra_idle,
            self.args.extra_concurrency,
            self.before_extra.rss_kib,
            self.after_extra.rss_kib,
            self.before_extra.threads,
            self.after_extra.threads
        );
        println!();
        println!(
            "jobs: {} started; {} ended by themselves, {} cancelled by plan, {} cancelled at the deadline ({} cancels found the job already ended)",
            st.jobs_started.get(),
            st.ended_by_themselves.get(),
            st.cancelled_by_plan.get(),
            st.cancelled_at_end.get(),
            st.cancel_too_late.get()
        );
        println!(
            "attach: {} hang-ups mid-attach; re-attached by SSE {}, by GET Last-Event-ID {}, by long-poll {}; {} re-delivered events identical",
            st.hangups.get(),
            st.reattach_sse.get(),
            st.reattach_get.get(),
            st.reattach_poll.get(),
            st.redelivered_same.get()
        );
        println!(
            "calls: {} tool calls, {} axp.index, {} replays during the soak ({} events)",
            st.tool_calls.get(),
            st.index_calls.get(),
            st.replays.get(),
            st.replayed_events.get()
        );
        println!(
            "events acknowledged: {}; final replay of {} jobs ({} events, {:.1} s): lost {}, changed {}, jobs with a non-contiguous log {}, jobs whose output is wrong {}, replays failed {}",
            v.acked,
            v.jobs,
            v.replayed,
            self.verify_s,
            v.lost_events,
            v.changed,
            v.not_contiguous,
            v.output_bad,
            v.replay_failed
        );
        let states: Vec<String> = v.states.iter().map(|((p, s), n)| format!("{p:?}/{s}: {n}")).collect();
        println!("exit states by plan: {}", states.join(", "));
        for e in &v.examples {
            println!("  {e}");
        }
        println!();
        println!(
            "CPU over the soak: gateway {:.0} % of a core (own threads; {:.0} % with reaped children), sampled max {:.0} %; this client {:.1} %; machine busy mean {:.0} % of {} CPUs",
            cpu_pct,
            cpu_children_pct,
            max_of(&gw_cpu),
            self.client_cpu / wall * 100.0,
            mean(&machine),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        println!(
            "load average (1 min) over the soak: start {:.2}, mean {:.2}, max {:.2}, end {:.2}; other people's rustc processes: mean {:.1}, max {:.0}",
            self.soak_start.load1,
            mean(&loads),
            max_of(&loads),
            self.end_reading.load1,
            mean(&rustc),
            max_of(&rustc)
        );
        let errors = st.errors.borrow();
        if errors.is_empty() {
            println!("errors: none");
        } else {
            println!("errors: {}", errors.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", "));
            for e in st.examples.borrow().iter().take(10) {
                println!("  {e}");
            }
        }
        println!();
        let ok = |b: bool| if b { "met" } else { "NOT met" };
        println!(
            "goals: RSS flat: {}; fds flat: {}; axp.index p99 < 5 ms: {} ({p99:.3} ms); idle session < 50 KiB: {} ({:.2} KiB); lost acknowledged events = 0: {} ({})",
            ok(rss_flat),
            ok(fd_flat),
            ok(p99 < 5.0),
            ok(self.per_session_kib < 50.0),
            self.per_session_kib,
            ok(v.lost_events + v.changed == 0 && v.replay_failed == 0),
            v.lost_events + v.changed
        );

        json!({
            "duration_s": self.args.duration, "sessions": self.args.sessions, "job_slots": self.args.jobs, "seed": self.args.seed,
            "rss_kib": {"start": self.soak_start.rss_kib, "after_ramp": after_ramp.rss_kib, "end": self.end_reading.rss_kib,
                        "max": max_rss, "after_drain": self.drained.rss_kib, "steady_first_half_mean": rss_a,
                        "steady_second_half_mean": rss_b, "growth_pct": rss_growth, "slope_kib_per_min": rss_slope, "flat": rss_flat},
            "fds": {"start": self.soak_start.fds, "after_ramp": after_ramp.fds, "end": self.end_reading.fds, "max": max_fds,
                    "min": min_fds, "after_drain": self.drained.fds, "growth_pct": fd_growth, "slope_per_min": fd_slope, "flat": fd_flat},
            "axp_index_alone_ms": {"calls": b.len(), "p50": pct(b, 0.5), "p99": pct(b, 0.99), "max": b.last().map(|x| *x as f64 / 1e3), "load1": self.baseline_load},
            "axp_index_ms": {"calls": idx.len(), "p50": pct(&idx, 0.5), "p99": p99, "p999": pct(&idx, 0.999),
                             "max": idx.last().map(|x| *x as f64 / 1e3), "window_p99_max": max_of(&window_p99)},
            "tools_call_ms": {"calls": tools.len(), "p50": pct(&tools, 0.5), "p99": pct(&tools, 0.99), "max": tools.last().map(|x| *x as f64 / 1e3)},
            "idle_session_kib": {"before_soak": self.per_session_kib, "after_soak": self.per_session_after_kib,
                                 "open_concurrency": self.args.open_concurrency, "extra_concurrency": self.args.extra_concurrency,
                                 "rss_before": self.before_sessions.rss_kib, "rss_after": self.after_sessions.rss_kib,
                                 "rss_before_extra": self.before_extra.rss_kib, "rss_after_extra": self.after_extra.rss_kib},
            "jobs": {"started": st.jobs_started.get(), "ended_by_themselves": st.ended_by_themselves.get(),
                     "cancelled_by_plan": st.cancelled_by_plan.get(), "cancelled_at_deadline": st.cancelled_at_end.get(),
                     "cancel_found_ended": st.cancel_too_late.get(), "hangups": st.hangups.get(),
                     "reattach_sse": st.reattach_sse.get(), "reattach_get": st.reattach_get.get(), "reattach_poll": st.reattach_poll.get(),
                     "states": states},
            "calls": {"tool_calls": st.tool_calls.get(), "index": st.index_calls.get(), "replays": st.replays.get()},
            "events": {"acknowledged": v.acked, "replayed": v.replayed, "lost": v.lost_events, "changed": v.changed,
                       "jobs_not_contiguous": v.not_contiguous, "jobs_output_wrong": v.output_bad, "replays_failed": v.replay_failed,
                       "examples": v.examples},
            "cpu_pct": {"gateway": cpu_pct, "gateway_with_children": cpu_children_pct, "client": self.client_cpu / wall * 100.0,
                        "machine_busy_mean": mean(&machine)},
            "load1": {"start": self.soak_start.load1, "mean": mean(&loads), "max": max_of(&loads), "end": self.end_reading.load1},
            "foreign_rustc": {"mean": mean(&rustc), "max": max_of(&rustc)},
            "errors": &*errors,
        })
    }
}
