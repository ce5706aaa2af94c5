//! The soak's load, as bounded loops on one thread: job slots that keep a command job each
//! running (attached to until it ends, hung up on and re-attached later from a seq, or cancelled
//! mid-way), tool callers of server-everything, `axp.index` callers whose latency is recorded,
//! and a replayer that reads finished jobs back from seq 0 while the load goes on. Every event a
//! client receives is acknowledged in the ledger (`ledger.rs`); every loop ends at the soak's
//! deadline (a job still running then is cancelled and followed to its exit, within a drain
//! bound).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use serde_json::{Value, json};

use crate::gw::{EventStream, Gw, Item};
use crate::ledger::{Ack, Ledger, Plan};

/// The shape of the load.
#[derive(Clone, Debug)]
pub struct Cfg {
    pub jobs: usize,
    pub lines_min: u32,
    pub lines_max: u32,
    /// Lines a job prints between two sleeps, and the sleep.
    pub burst: u32,
    pub tick_s: f64,
    pub p_cancel: f64,
    pub p_disconnect: f64,
    pub tool_callers: usize,
    pub tool_pause_ms: u64,
    pub index_callers: usize,
    pub index_pause_ms: u64,
    pub replay_pause_ms: u64,
    /// How long after the deadline the slots may take to see their cancelled jobs end.
    pub drain: Duration,
}

/// Counters, latencies and examples of what went wrong.
#[derive(Default)]
pub struct Stats {
    pub jobs_started: Cell<u64>,
    pub jobs_running: Cell<u64>,
    pub ended_by_themselves: Cell<u64>,
    pub cancelled_by_plan: Cell<u64>,
    pub cancelled_at_end: Cell<u64>,
    /// `job.cancel` answered `cancelled: false` (the job had just ended).
    pub cancel_too_late: Cell<u64>,
    pub hangups: Cell<u64>,
    pub reattach_sse: Cell<u64>,
    pub reattach_get: Cell<u64>,
    pub reattach_poll: Cell<u64>,
    /// Re-delivered events compared equal to their first delivery (overlapping re-attaches and
    /// the replayer).
    pub redelivered_same: Cell<u64>,
    pub tool_calls: Cell<u64>,
    pub index_calls: Cell<u64>,
    pub replays: Cell<u64>,
    pub replayed_events: Cell<u64>,
    /// Microseconds, per call as the client saw it.
    pub index_lat: RefCell<Vec<u32>>,
    pub tool_lat: RefCell<Vec<u32>>,
    /// `axp.index` latencies since the sampler last looked.
    pub index_window: RefCell<Vec<u32>>,
    /// Failures by kind, and the first few in full.
    pub errors: RefCell<BTreeMap<String, u64>>,
    pub examples: RefCell<Vec<String>>,
}

impl Stats {
    pub fn error(&self, kind: &str, detail: impl std::fmt::Display) {
        *self.errors.borrow_mut().entry(kind.to_string()).or_default() += 1;
        let mut ex = self.examples.borrow_mut();
        if ex.len() < 20 {
            ex.push(format!("{kind}: {detail}"));
        }
    }
    pub fn error_count(&self) -> u64 {
        self.errors.borrow().values().sum()
    }
}

pub fn inc(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

pub struct Shared {
    pub gw: Gw,
    pub sessions: RefCell<Vec<String>>,
    /// How many of `sessions` the soak draws from (the rest are opened later, for the idle
    /// measurement, and stay untouched).
    pub active_pool: Cell<usize>,
    pub ledger: RefCell<Ledger>,
    pub stats: Stats,
    pub cfg: Cfg,
    pub phase: Cell<&'static str>,
    /// Jobs that have ended, for the replayer.
    pub finished: RefCell<Vec<String>>,
    /// The tool `add` is called by (server-everything calls it `get-sum` in recent versions).
    pub add_tool: RefCell<String>,
    rng: Cell<u64>,
}

impl Shared {
    pub fn new(gw: Gw, cfg: Cfg, seed: u64) -> Self {
        Self {
            gw,
            sessions: RefCell::default(),
            active_pool: Cell::new(0),
            ledger: RefCell::default(),
            stats: Stats::default(),
            cfg,
            phase: Cell::new("start"),
            finished: RefCell::default(),
            add_tool: RefCell::new("everything__get-sum".into()),
            rng: Cell::new(seed),
        }
    }

    /// splitmix64: a fixed seed gives the same mix of plans, sizes and pauses in every run.
    pub fn rand(&self) -> u64 {
        let mut z = self.rng.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.rng.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        lo + self.rand() % (hi - lo + 1)
    }
    pub fn chance(&self, p: f64) -> bool {
        (self.rand() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    /// A session of the active pool and its index.
    pub fn session(&self) -> (usize, String) {
        let n = self.active_pool.get().max(1);
        let i = self.range(0, n as u64 - 1) as usize;
        (i, self.sessions.borrow()[i].clone())
    }
}

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

async fn sleep_until_or(deadline: Instant, d: Duration) {
    let until = (Instant::now() + d).min(deadline);
    tokio::time::sleep_until(until.into()).await;
}

// -------------------------------------------------------------------------------------------
// Reading a job's events.
// -------------------------------------------------------------------------------------------

/// How a client reads a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    /// `job.attach` POSTed with `Accept: text/event-stream`.
    Sse,
    /// `GET /axp` with `Last-Event-ID` (only after at least one event).
    Get,
    /// `job.attach` as JSON, long-polled with `wait_ms`.
    Poll,
}

/// One open attach of one job.
enum Attach {
    Stream { s: EventStream, post: bool },
    Poll { next: u64, buf: VecDeque<Value>, done: bool },
}

/// Every await on the wire is bounded: a silent stream (jobs print every tick, and SSE sends
/// keep-alives every 15 s) is a failure after this long.
const IDLE: Duration = Duration::from_secs(40);
const POLL_WAIT_MS: u64 = 5000;

/// A reader of one job that acknowledges everything it receives and checks that the seqs it is
/// served run on from where it asked without a hole or a repeat.
struct Reader<'a> {
    sh: &'a Shared,
    session: &'a str,
    job: &'a str,
    /// The next seq this attach must deliver.
    expect: u64,
    attach: Attach,
    /// For the error messages: how and from where it attached, and how many events it got.
    how: Transport,
    from: u64,
    got: u64,
}

impl<'a> Reader<'a> {
    async fn open(sh: &'a Shared, session: &'a str, job: &'a str, from: u64, t: Transport) -> Result<Self> {
        // `Last-Event-ID` names the event before the first one wanted: none before seq 0.
        let t = if t == Transport::Get && from == 0 { Transport::Poll } else { t };
        let attach = match t {
            Transport::Sse => Attach::Stream { s: sh.gw.attach_sse(session, job, from).await?, post: true },
            Transport::Get if from > 0 => {
                Attach::Stream { s: sh.gw.resume(session, job, from - 1).await?, post: false }
            }
            Transport::Get | Transport::Poll => Attach::Poll { next: from, buf: VecDeque::new(), done: false },
        };
        Ok(Self { sh, session, job, expect: from, attach, how: t, from, got: 0 })
    }

    /// The next event (already acknowledged), or `None` once the job has ended and every event
    /// has been delivered.
    async fn next(&mut self) -> Result<Option<Value>> {
        let ev = match &mut self.attach {
            Attach::Stream { s, post } => match s.next(IDLE).await? {
                Some(Item::Event(ev)) => ev,
                Some(Item::End(r)) => {
                    if r.get("next_seq").and_then(Value::as_u64) != Some(self.expect) {
                        bail!(
                            "{}: the attach ended at next_seq {:?}, expected {}",
                            self.what(),
                            r.get("next_seq"),
                            self.expect
                        );
                    }
                    if !ended(self.sh, self.job) {
                        bail!("{}: the attach said done, but no exit event was delivered", self.what());
                    }
                    return Ok(None);
                }
                None if *post => {
                    let tail = s.tail();
                    bail!("{}: the attach stream closed before its final response; it ended with {tail:?}", self.what())
                }
                None if !ended(self.sh, self.job) => {
                    bail!("{}: the resumed stream closed before the job's exit event", self.what())
                }
                None => return Ok(None),
            },
            Attach::Poll { next, buf, done } => loop {
                if let Some(ev) = buf.pop_front() {
                    break ev;
                }
                if *done {
                    if !ended(self.sh, self.job) {
                        bail!("{}: the attach said done, but no exit event was delivered", self.what());
                    }
                    return Ok(None);
                }
                let r = tokio::time::timeout(
                    IDLE,
                    self.sh.gw.call(
                        self.session,
                        "job.attach",
                        json!({"job_id": self.job, "from_seq": *next, "wait_ms": POLL_WAIT_MS, "limit": 200}),
                    ),
                )
                .await
                .map_err(|_| anyhow!("job.attach did not answer in {} s", IDLE.as_secs()))??;
                let events = r.get("events").and_then(Value::as_array).cloned().unwrap_or_default();
                *next = r.get("next_seq").and_then(Value::as_u64).ok_or_else(|| anyhow!("no next_seq: {r}"))?;
                *done = r.get("done").and_then(Value::as_bool).unwrap_or(false);
                // Received is acknowledged: the whole batch is in the client's hands now.
                buf.extend(events);
            },
        };
        let seq = ev.get("seq").and_then(Value::as_u64).ok_or_else(|| anyhow!("an event without seq: {ev}"))?;
        if ev.get("job_id").and_then(Value::as_str) != Some(self.job) {
            bail!("an event of another job on this attach: {ev}");
        }
        if seq != self.expect {
            self.sh
                .stats
                .error("served seq out of order", format!("job {} expected seq {} got {seq}", self.job, self.expect));
        }
        self.expect = seq + 1;
        self.got += 1;
        match self.sh.ledger.borrow_mut().ack(self.job, seq, &ev) {
            Ack::New => {}
            Ack::Same => inc(&self.sh.stats.redelivered_same),
            Ack::Changed => self.sh.stats.error("acknowledged event changed", format!("job {} seq {seq}", self.job)),
        }
        Ok(Some(ev))
    }

    fn what(&self) -> String {
        format!("job {} ({:?} from seq {}, {} events on this attach)", self.job, self.how, self.from, self.got)
    }

    /// Hangs up mid-attach. A long-poll hangs up while the gateway is waiting for the job: it is
    /// abandoned after `after`, before any event came (if one comes first, it is acknowledged).
    async fn hang_up(mut self, after: Duration) {
        if let Attach::Poll { next, .. } = &mut self.attach {
            let call = self.sh.gw.call(
                self.session,
                "job.attach",
                json!({"job_id": self.job, "from_seq": *next, "wait_ms": POLL_WAIT_MS, "limit": 200}),
            );
            if let Ok(Ok(r)) = tokio::time::timeout(after, call).await {
                for ev in r.get("events").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(seq) = ev.get("seq").and_then(Value::as_u64) {
                        self.sh.ledger.borrow_mut().ack(self.job, seq, ev);
                    }
                }
            }
        }
        // Dropping the stream closes its connection.
        drop(self);
    }
}

fn next_from_ledger(sh: &Shared, job: &str) -> u64 {
    // The first seq this client has not seen: acknowledged seqs are contiguous from 0 on every
    // path the soak takes, so this is their count (a hole would be reported by the check).
    sh.ledger.borrow().jobs.get(job).map_or(0, |e| e.acked.keys().next_back().map_or(0, |s| s + 1))
}

fn ended(sh: &Shared, job: &str) -> bool {
    sh.ledger.borrow().jobs.get(job).is_some_and(|e| e.exit.is_some())
}

// -------------------------------------------------------------------------------------------
// Job slots.
// -------------------------------------------------------------------------------------------

const SCRIPT: &str = r#"n=$1; b=$2; i=0; while [ "$i" -lt "$n" ]; do i=$((i+1)); echo "soak $i/$n"; if [ $((i % b)) -eq 0 ]; then sleep "$3"; fi; done"#;

/// One of the ~200 job slots: starts a job, drives it by its plan, and starts the next, until
/// the deadline.
pub async fn job_slot(sh: Rc<Shared>, slot: usize, deadline: Instant) {
    // Staggered so the slots do not all start (and end) in the same second.
    tokio::time::sleep(Duration::from_millis(slot as u64 * 40)).await;
    for _ in 0..100_000 {
        if Instant::now() >= deadline {
            break;
        }
        if let Err(e) = one_job(&sh, deadline).await {
            sh.stats.error("job", format!("{e:#}"));
            sleep_until_or(deadline, Duration::from_millis(500)).await;
        }
    }
}

async fn one_job(sh: &Shared, deadline: Instant) -> Result<()> {
    let (si, session) = sh.session();
    let c = &sh.cfg;
    let lines = sh.range(c.lines_min as u64, c.lines_max as u64) as u32;
    let plan = if sh.chance(c.p_cancel) {
        Plan::Cancel
    } else if sh.chance(c.p_disconnect / (1.0 - c.p_cancel)) {
        Plan::Disconnect
    } else {
        Plan::Follow
    };
    let argv = json!(["sh", "-c", SCRIPT, "soak", lines.to_string(), c.burst.to_string(), c.tick_s.to_string()]);
    let r = sh.gw.call(&session, "job.start", json!({"command": argv})).await?;
    let job =
        r.get("job_id").and_then(Value::as_str).ok_or_else(|| anyhow!("job.start without job_id: {r}"))?.to_string();
    sh.ledger.borrow_mut().add(&job, plan, si, lines);
    inc(&sh.stats.jobs_started);
    sh.stats.jobs_running.set(sh.stats.jobs_running.get() + 1);
    let out = drive(sh, &session, &job, plan, deadline).await;
    // Whatever happened, make sure the job ends and every event up to its exit is delivered:
    // the final check wants every job complete.
    let out = match out {
        Ok(()) => Ok(()),
        Err(e) => {
            sh.stats.error("attach", format!("job {job}: {e:#}"));
            finish(sh, &session, &job, deadline).await
        }
    };
    sh.stats.jobs_running.set(sh.stats.jobs_running.get() - 1);
    if ended(sh, &job) {
        sh.finished.borrow_mut().push(job.clone());
    }
    out
}

fn pick_transport(sh: &Shared, from: u64) -> Transport {
    match sh.range(0, 9) {
        0..=4 => Transport::Sse,
        5..=6 if from > 0 => Transport::Get,
        _ => Transport::Poll,
    }
}

async fn cancel(sh: &Shared, session: &str, job: &str) -> Result<()> {
    let r = sh.gw.call(session, "job.cancel", json!({"job_id": job})).await?;
    if let Some(e) = sh.ledger.borrow_mut().jobs.get_mut(job) {
        e.cancelled = true;
    }
    if r.get("cancelled").and_then(Value::as_bool) != Some(true) {
        inc(&sh.stats.cancel_too_late);
    }
    Ok(())
}

/// Reads `reader` to the job's end; past the deadline, cancels the job first (once).
async fn read_to_end(sh: &Shared, reader: &mut Reader<'_>, deadline: Instant) -> Result<()> {
    let drain_end = deadline + sh.cfg.drain;
    let mut cancelled_here = false;
    for _ in 0..1_000_000 {
        if !cancelled_here && Instant::now() >= deadline {
            cancelled_here = true;
            let already = sh.ledger.borrow().jobs.get(reader.job).is_some_and(|e| e.cancelled);
            if !already && !ended(sh, reader.job) {
                cancel(sh, reader.session, reader.job).await?;
                inc(&sh.stats.cancelled_at_end);
            }
        }
        if Instant::now() >= drain_end {
            bail!("the job had not ended {} s after the deadline", sh.cfg.drain.as_secs());
        }
        if reader.next().await?.is_none() {
            return Ok(());
        }
    }
    bail!("a million events and no end")
}

/// Reads `reader` for `n` events (or to the end); true if the job ended.
async fn read_n(reader: &mut Reader<'_>, n: u64) -> Result<bool> {
    for _ in 0..n {
        if reader.next().await?.is_none() {
            return Ok(true);
        }
    }
    Ok(false)
}

async fn drive(sh: &Shared, session: &str, job: &str, plan: Plan, deadline: Instant) -> Result<()> {
    let first = if sh.range(0, 9) < 6 { Transport::Sse } else { Transport::Poll };
    let mut reader = Reader::open(sh, session, job, 0, first).await?;
    match plan {
        Plan::Follow => {
            read_to_end(sh, &mut reader, deadline).await?;
            if !sh.ledger.borrow().jobs.get(job).is_some_and(|e| e.cancelled) {
                inc(&sh.stats.ended_by_themselves);
            }
        }
        Plan::Cancel => {
            let k = sh.range(1, 6);
            if !read_n(&mut reader, k).await? {
                cancel(sh, session, job).await?;
                inc(&sh.stats.cancelled_by_plan);
                read_to_end(sh, &mut reader, deadline).await?;
            } else {
                inc(&sh.stats.ended_by_themselves);
            }
        }
        Plan::Disconnect => {
            let times = sh.range(1, 3);
            let mut done = false;
            for _ in 0..times {
                let k = sh.range(1, 8);
                if read_n(&mut reader, k).await? {
                    done = true;
                    break;
                }
                reader.hang_up(Duration::from_millis(sh.range(50, 400))).await;
                inc(&sh.stats.hangups);
                // Away for a while, then back from a seq: the next one not seen, or up to two
                // earlier (the overlap must come back identical).
                sleep_until_or(deadline, Duration::from_millis(sh.range(500, 5000))).await;
                let next = next_from_ledger(sh, job);
                let from = next.saturating_sub(sh.range(0, 2));
                let t = pick_transport(sh, from);
                inc(match t {
                    Transport::Sse => &sh.stats.reattach_sse,
                    Transport::Get if from > 0 => &sh.stats.reattach_get,
                    _ => &sh.stats.reattach_poll,
                });
                reader = Reader::open(sh, session, job, from, t).await?;
            }
            if !done {
                read_to_end(sh, &mut reader, deadline).await?;
            }
            if !sh.ledger.borrow().jobs.get(job).is_some_and(|e| e.cancelled) {
                inc(&sh.stats.ended_by_themselves);
            }
        }
    }
    Ok(())
}

/// After a failure: re-attach by long-poll from the first unseen seq until the job has ended
/// (cancelling it past the deadline), a few times at most.
async fn finish(sh: &Shared, session: &str, job: &str, deadline: Instant) -> Result<()> {
    let mut last = anyhow!("no attempt");
    for _ in 0..3 {
        if ended(sh, job) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let from = next_from_ledger(sh, job);
        match Reader::open(sh, session, job, from, Transport::Poll).await {
            Ok(mut r) => match read_to_end(sh, &mut r, deadline).await {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            },
            Err(e) => last = e,
        }
    }
    Err(last.context(format!("job {job} could not be followed to its end")))
}

// -------------------------------------------------------------------------------------------
// Tool calls, axp.index, replays.
// -------------------------------------------------------------------------------------------

/// Alternates `everything__echo` and the add tool on random sessions and checks each answer.
pub async fn tool_caller(sh: Rc<Shared>, me: usize, deadline: Instant) {
    for i in 0..10_000_000u64 {
        if Instant::now() >= deadline {
            break;
        }
        let (_, session) = sh.session();
        let t0 = Instant::now();
        let r = if i % 2 == 0 {
            let msg = format!("soak {me}/{i}");
            sh.gw
                .call(&session, "tools/call", json!({"name": "everything__echo", "arguments": {"message": msg}}))
                .await
                .and_then(|r| check_text(&r, &msg))
        } else {
            let (a, b) = (sh.range(0, 1000), sh.range(0, 1000));
            let tool = sh.add_tool.borrow().clone();
            sh.gw
                .call(&session, "tools/call", json!({"name": tool, "arguments": {"a": a, "b": b}}))
                .await
                .and_then(|r| check_text(&r, &(a + b).to_string()))
        };
        match r {
            Ok(()) => {
                sh.stats.tool_lat.borrow_mut().push(micros(t0.elapsed()));
                inc(&sh.stats.tool_calls);
            }
            Err(e) => sh.stats.error("tools/call", format!("{e:#}")),
        }
        sleep_until_or(deadline, Duration::from_millis(sh.cfg.tool_pause_ms)).await;
    }
}

fn check_text(r: &Value, want: &str) -> Result<()> {
    let text = r.pointer("/content/0/text").and_then(Value::as_str).unwrap_or("");
    if r.get("isError") == Some(&Value::Bool(true)) || !text.contains(want) {
        bail!("expected {want:?} in the answer, got {r}");
    }
    Ok(())
}

const QUERIES: &[Option<&str>] =
    &[Some("echo"), Some("sum of two numbers"), Some("long running operation"), Some("environment"), None];

/// Calls `axp.index` on random sessions and records its latency.
pub async fn index_caller(sh: Rc<Shared>, deadline: Instant) {
    for i in 0..100_000_000u64 {
        if Instant::now() >= deadline {
            break;
        }
        let (_, session) = sh.session();
        let params = match QUERIES[i as usize % QUERIES.len()] {
            Some(q) => json!({"query": q, "limit": 20}),
            None => json!({"limit": 20}),
        };
        let t0 = Instant::now();
        match sh.gw.call(&session, "axp.index", params).await {
            Ok(r) if r.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty()) => {
                let us = micros(t0.elapsed());
                sh.stats.index_lat.borrow_mut().push(us);
                sh.stats.index_window.borrow_mut().push(us);
                inc(&sh.stats.index_calls);
            }
            Ok(r) => sh.stats.error("axp.index", format!("no tools in {r}")),
            Err(e) => sh.stats.error("axp.index", format!("{e:#}")),
        }
        sleep_until_or(deadline, Duration::from_millis(sh.cfg.index_pause_ms)).await;
    }
}

/// Every event of `job` from seq 0, by JSON `job.attach` pages (no waiting: the job has ended).
pub async fn replay_all(sh: &Shared, session: &str, job: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    let mut from = 0u64;
    for _ in 0..100_000 {
        let r = sh.gw.call(session, "job.attach", json!({"job_id": job, "from_seq": from, "limit": 1000})).await?;
        let events = r.get("events").and_then(Value::as_array).cloned().unwrap_or_default();
        let next = r.get("next_seq").and_then(Value::as_u64).ok_or_else(|| anyhow!("no next_seq: {r}"))?;
        let done = r.get("done").and_then(Value::as_bool).unwrap_or(false);
        out.extend(events);
        if done {
            return Ok(out);
        }
        if next == from {
            bail!("job.attach from {from} returned nothing and not done: {r}");
        }
        from = next;
    }
    bail!("job {job}: more than 100,000 pages")
}

/// Replays random finished jobs from seq 0 during the load and compares them with the ledger.
pub async fn replayer(sh: Rc<Shared>, deadline: Instant) {
    for _ in 0..10_000_000u64 {
        if Instant::now() >= deadline {
            break;
        }
        let pick = {
            let f = sh.finished.borrow();
            (!f.is_empty()).then(|| f[sh.range(0, f.len() as u64 - 1) as usize].clone())
        };
        if let Some(job) = pick {
            let session = {
                let l = sh.ledger.borrow();
                l.jobs.get(&job).map(|e| sh.sessions.borrow()[e.session].clone())
            };
            if let Some(session) = session {
                match replay_all(&sh, &session, &job).await {
                    Ok(events) => {
                        inc(&sh.stats.replays);
                        sh.stats.replayed_events.set(sh.stats.replayed_events.get() + events.len() as u64);
                        let l = sh.ledger.borrow();
                        if let Some(e) = l.jobs.get(&job) {
                            let c = crate::ledger::check(e, &events);
                            if !c.lost.is_empty() || c.not_contiguous.is_some() {
                                sh.stats.error(
                                    "replay during the soak differs",
                                    format!(
                                        "job {job}: lost {:?} contiguity {:?}",
                                        &c.lost[..c.lost.len().min(3)],
                                        c.not_contiguous
                                    ),
                                );
                            }
                        }
                    }
                    Err(e) => sh.stats.error("replay", format!("job {job}: {e:#}")),
                }
            }
        }
        sleep_until_or(deadline, Duration::from_millis(sh.cfg.replay_pause_ms)).await;
    }
}
