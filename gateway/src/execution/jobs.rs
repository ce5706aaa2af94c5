//! Jobs (DESIGN §5): every tool call and command runs as a job whose events are appended to a
//! durable log *before* anyone is told about them, so a client can reattach from any `seq` after
//! a disconnect or a gateway restart and get every event after it. A job's life never depends on
//! a connection: it belongs to its session, and only `job.cancel`, its timeout or its own end
//! stops it. This module runs jobs and answers job queries; it does not check capabilities
//! (the dispatcher does, before it calls in).
//!
//! This file is the registry and its public API: the live jobs and their in-memory tails, the
//! durable append, starting, finishing, attaching, cancelling and talking to a running job.
//! Launching each kind of work is `jobs/launch.rs`; jobs parked for an operator's approval are
//! `jobs/parked.rs`.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_protocol::methods::{JobEvent, JobEventKind, JobState};
use axp_protocol::{ErrorCode, RpcError, ToolOutput};
use axp_providers::{CancellationToken, EventSink, ProviderError};
use axp_store::{EventLines, JobLog, JobRecord, Started, Store};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::util::{internal, now_ms, store_error};

mod launch;
mod parked;
mod remote;

pub use launch::Work;
pub use remote::Replicas;

/// A running job's handles. Kept a little after the job ends (see [`FINISHED_KEPT`]) so the
/// last readers of a just-finished job are still served from memory.
struct Live {
    /// The next seq to be written; watchers wake on every append.
    next_seq: watch::Sender<u64>,
    /// The job's latest events, already durable in its log: attaching near the head (every
    /// `tools/call` waiting for its result, every streaming client) reads them from here
    /// instead of from disk. Appends go through this lock, so it is always in seq order.
    recent: Mutex<Recent>,
    /// Set once the exit event is in the log and the job's end is recorded.
    finished: std::sync::atomic::AtomicBool,
    cancel: CancellationToken,
    stdin: Mutex<Option<mpsc::Sender<Option<Vec<u8>>>>>,
    pid: Mutex<Option<u32>>,
    timed_out: std::sync::atomic::AtomicBool,
    /// The session the job belongs to (per-session quotas count live jobs).
    session_id: String,
    /// Set while the job waits for an operator (`awaiting_approval`); whoever clears it first
    /// (approve, deny, cancel) decides the job.
    parked: std::sync::atomic::AtomicBool,
    /// Set when the session's output quota stopped the job.
    over_quota: std::sync::atomic::AtomicBool,
    /// The job's log, for events from outside its runner (code-mode's nested tool calls).
    log: JobLog,
    /// A PTY job's terminal, once its process runs.
    terminal: Mutex<Option<Arc<crate::execution::pty::Terminal>>>,
    /// How long a tool job's provider took to answer, once it has, and that provider's
    /// tool-call histograms.
    provider_time: std::sync::OnceLock<(Duration, Arc<crate::metrics::ToolCallTimes>)>,
    /// Events the store could not take while it was unreachable, waiting to be appended.
    unstored: Mutex<Unstored>,
}

/// A job's events held back while its store is unreachable (a PostgreSQL server restarting or
/// cut off), appended in order once it answers again: at most [`UNSTORED_BYTES`] of them (an
/// exit always), the rest dropped and counted, and a `log` event in their place says how many.
/// Nobody is told of an event before it is stored, so readers see the job pause, then catch up.
#[derive(Default)]
struct Unstored {
    events: VecDeque<JobEventKind>,
    bytes: usize,
    dropped_events: u64,
    dropped_bytes: u64,
    /// Whether a thread is retrying the append.
    retrying: bool,
}

/// The most output one job holds back while its store is unreachable.
const UNSTORED_BYTES: usize = 8 * 1024 * 1024;
/// How often held-back events are offered to the store again.
const UNSTORED_RETRY: Duration = Duration::from_millis(500);

impl Live {
    fn new(session_id: &str, stdin: Option<mpsc::Sender<Option<Vec<u8>>>>, parked: bool, log: JobLog) -> Self {
        let (tx, _) = watch::channel(0u64);
        Live {
            next_seq: tx,
            recent: Mutex::default(),
            finished: std::sync::atomic::AtomicBool::new(false),
            cancel: CancellationToken::new(),
            stdin: Mutex::new(stdin),
            pid: Mutex::new(None),
            timed_out: std::sync::atomic::AtomicBool::new(false),
            session_id: session_id.to_string(),
            parked: std::sync::atomic::AtomicBool::new(parked),
            over_quota: std::sync::atomic::AtomicBool::new(false),
            log,
            terminal: Mutex::new(None),
            provider_time: std::sync::OnceLock::new(),
            unstored: Mutex::default(),
        }
    }

    /// Whether the job has ended and its exit is in the log (not held back for the store).
    fn ended(&self) -> bool {
        self.finished.load(std::sync::atomic::Ordering::SeqCst) && lock(&self.unstored).events.is_empty()
    }

    fn stop_reason(&self) -> &'static str {
        if self.over_quota.load(std::sync::atomic::Ordering::SeqCst) {
            "quota"
        } else if self.timed_out.load(std::sync::atomic::Ordering::SeqCst) {
            "timeout"
        } else {
            "cancel"
        }
    }

    /// Events from `from_seq` if memory still holds all of them, else `None` (read the log).
    fn read_recent(&self, from_seq: u64, limit: usize) -> Option<Vec<JobEvent>> {
        let recent = lock(&self.recent);
        let first = recent.events.front().map_or(*self.next_seq.borrow(), |e| e.seq);
        if from_seq < first {
            return None;
        }
        Some(recent.events.iter().filter(|e| e.seq >= from_seq).take(limit).cloned().collect())
    }
}

/// The bounded tail of a job's events held in memory (see [`Live::recent`]).
#[derive(Default)]
struct Recent {
    events: VecDeque<JobEvent>,
    bytes: usize,
}

/// Recently finished jobs, oldest first.
type Finished = VecDeque<(String, Arc<Live>)>;

/// At most this many events…
const RECENT_EVENTS: usize = 256;
/// …and about this many bytes of output per job are held in memory; older events are read back
/// from the log.
const RECENT_BYTES: usize = 1024 * 1024;
/// How many finished jobs keep their in-memory tail for late readers.
const FINISHED_KEPT: usize = 256;

fn event_bytes(e: &JobEvent) -> usize {
    match &e.kind {
        JobEventKind::Stdout { data } | JobEventKind::Stderr { data } => data.len() + 64,
        _ => 256,
    }
}

/// The sink providers write into: append to the durable log, then wake watchers.
struct LogSink {
    log: JobLog,
    live: Arc<Live>,
    job_id: String,
    /// The session's output quota, when one is configured.
    meter: Option<Arc<crate::auth::quotas::OutputMeter>>,
}

impl EventSink for LogSink {
    fn emit(&self, event: JobEventKind) {
        if let (Some(m), JobEventKind::Stdout { data } | JobEventKind::Stderr { data }) = (&self.meter, &event)
            && !m.add(data.len() as u64)
        {
            // Over the session's output quota: stop the job, and keep nothing more of its output
            // (what the process had already written into its pipes is drained and dropped), so
            // the quota bounds what is stored, not only what is produced after the kill lands.
            self.live.over_quota.store(true, std::sync::atomic::Ordering::SeqCst);
            self.live.cancel.cancel();
            return;
        }
        append(&self.log, &self.live, &self.job_id, vec![event]);
    }
}

/// Appends `events` to the durable log (a tool's result and its exit in one statement, see
/// [`JobLog::append_all`]), then to the job's in-memory tail, then wakes watchers once for all
/// of them. Events held back earlier because the store was unreachable go first. Returns how
/// many of `events` were taken: appended, or held back for an unreachable store (see
/// [`Unstored`]); what the log refused was dropped, loudly (the log is the source of truth, so
/// an event it cannot hold cannot be promised to anyone).
fn append(log: &JobLog, live: &Arc<Live>, job_id: &str, events: Vec<JobEventKind>) -> usize {
    append_or_hold(log, live, job_id, events, false)
}

/// [`append`]; while a catch-up thread is retrying (`retry` false), new events join the
/// held-back ones without trying the store, so an unreachable store is not asked once per event.
fn append_or_hold(log: &JobLog, live: &Arc<Live>, job_id: &str, events: Vec<JobEventKind>, retry: bool) -> usize {
    let mut recent = lock(&live.recent);
    let mut unstored = lock(&live.unstored);
    let fresh = events.len();
    if unstored.retrying && !retry {
        for ev in events {
            hold(&mut unstored, ev);
        }
        return fresh;
    }
    let mut batch: Vec<JobEventKind> = unstored.events.drain(..).collect();
    unstored.bytes = 0;
    if unstored.dropped_events > 0 && !(batch.is_empty() && events.is_empty()) {
        batch.push(JobEventKind::Log {
            level: "warning".into(),
            data: serde_json::json!({
                "reason": "output was dropped while the job store was unreachable (the gateway holds back a bounded amount)",
                "dropped_events": unstored.dropped_events,
                "dropped_bytes": unstored.dropped_bytes,
            }),
        });
        unstored.dropped_events = 0;
        unstored.dropped_bytes = 0;
    }
    let held = batch.len();
    batch.extend(events);
    if batch.is_empty() {
        return 0;
    }
    let (appended, error) = log.append_all(batch.clone());
    let mut taken = appended.len().saturating_sub(held);
    if let Some(e) = &error {
        let rest = batch.split_off(appended.len());
        if e.is_unavailable() {
            if unstored.events.is_empty() && !unstored.retrying {
                tracing::warn!(job = %job_id, error = %e, "the job store is unreachable: holding this job's events back until it answers");
            }
            for (i, ev) in rest.into_iter().enumerate() {
                if appended.len() + i >= held {
                    taken += 1;
                }
                hold(&mut unstored, ev);
            }
            if !unstored.retrying {
                unstored.retrying = true;
                retry_unstored(log.clone(), live.clone(), job_id.to_string());
            }
        } else {
            tracing::error!(job = %job_id, error = %e, "cannot append to the job log");
        }
    }
    drop(unstored);
    let taken = taken.min(fresh);
    let Some(next) = appended.last().map(|ev| ev.seq + 1) else { return taken };
    for ev in appended {
        recent.bytes += event_bytes(&ev);
        recent.events.push_back(ev);
    }
    while recent.events.len() > RECENT_EVENTS || (recent.bytes > RECENT_BYTES && recent.events.len() > 1) {
        if let Some(old) = recent.events.pop_front() {
            recent.bytes -= event_bytes(&old);
        }
    }
    drop(recent);
    live.next_seq.send_replace(next);
    taken
}

/// Holds `ev` back for the store, within [`UNSTORED_BYTES`] (an exit always).
fn hold(unstored: &mut Unstored, ev: JobEventKind) {
    let size = unstored_bytes(&ev);
    if unstored.bytes + size <= UNSTORED_BYTES || matches!(ev, JobEventKind::Exit { .. }) {
        unstored.bytes += size;
        unstored.events.push_back(ev);
    } else {
        unstored.dropped_events += 1;
        unstored.dropped_bytes += size as u64;
    }
}

fn unstored_bytes(e: &JobEventKind) -> usize {
    match e {
        JobEventKind::Stdout { data } | JobEventKind::Stderr { data } | JobEventKind::Pty { data } => data.len() + 64,
        _ => 256,
    }
}

/// Offers a job's held-back events to the store every [`UNSTORED_RETRY`] until it takes them
/// all (or refuses them for another reason than being unreachable). A thread of its own: the
/// job may be quiet, or over, when the store returns.
fn retry_unstored(log: JobLog, live: Arc<Live>, job_id: String) {
    let spawned = std::thread::Builder::new().name("axp-job-catch-up".into()).spawn(move || {
        loop {
            std::thread::sleep(UNSTORED_RETRY);
            append_or_hold(&log, &live, &job_id, Vec::new(), true);
            let mut unstored = lock(&live.unstored);
            if unstored.events.is_empty() {
                unstored.retrying = false;
                drop(unstored);
                // A watcher waiting on a job whose exit was held back learns it has ended.
                live.next_seq.send_modify(|_| {});
                tracing::info!(job = %job_id, "the job store answers again: this job's held-back events are appended");
                return;
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start a thread to append held-back job events");
    }
}

#[derive(Clone)]
pub struct Jobs {
    store: Store,
    live: Arc<Mutex<HashMap<String, Arc<Live>>>>,
    /// The last [`FINISHED_KEPT`] jobs to end, oldest first, with their in-memory tails.
    finished: Arc<Mutex<Finished>>,
    metrics: Arc<crate::metrics::Metrics>,
    quotas: Arc<crate::auth::quotas::Quotas>,
    /// Audits files written by jobs (`writes.rs`), when set.
    writes: Option<Arc<crate::execution::writes::Writes>>,
    /// The other replicas sharing a PostgreSQL store, once joined (`jobs/remote.rs`).
    replicas: Option<Arc<Replicas>>,
}

/// What `job.attach` returns to a non-streaming client; `E` is the events, decoded (the
/// default) or as their log stores them ([`EventLines`], for a replay that passes them on).
#[derive(Debug, Clone, serde::Serialize)]
pub struct AttachBatch<E = Vec<JobEvent>> {
    pub events: E,
    pub next_seq: u64,
    pub done: bool,
}

/// A run of a job's events as [`Jobs::attach`] reads them: from the job's in-memory tail, or
/// from its log.
pub trait Events: Sized + Send + 'static {
    fn from_recent(events: Vec<JobEvent>) -> Result<Self, RpcError>;
    fn from_log(store: &Store, job_id: &str, from_seq: u64, limit: usize) -> axp_store::Result<Self>;
    fn is_empty(&self) -> bool;
    /// The seq after the last event, if there is one.
    fn next_seq(&self) -> Option<u64>;
    /// Whether the job's exit is among them (it is always the last).
    fn has_exit(&self) -> bool;
}

impl Events for Vec<JobEvent> {
    fn from_recent(events: Vec<JobEvent>) -> Result<Self, RpcError> {
        Ok(events)
    }
    fn from_log(store: &Store, job_id: &str, from_seq: u64, limit: usize) -> axp_store::Result<Self> {
        store.read_log(job_id, from_seq, limit)
    }
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
    fn next_seq(&self) -> Option<u64> {
        self.last().map(|e| e.seq + 1)
    }
    fn has_exit(&self) -> bool {
        self.last().is_some_and(|e| matches!(e.kind, JobEventKind::Exit { .. }))
    }
}

impl Events for EventLines {
    fn from_recent(events: Vec<JobEvent>) -> Result<Self, RpcError> {
        EventLines::encode(&events).map_err(|e| internal("encoding job events", e))
    }
    fn from_log(store: &Store, job_id: &str, from_seq: u64, limit: usize) -> axp_store::Result<Self> {
        store.log_reader(job_id)?.read_lines(from_seq, limit)
    }
    fn is_empty(&self) -> bool {
        EventLines::is_empty(self)
    }
    fn next_seq(&self) -> Option<u64> {
        EventLines::next_seq(self)
    }
    fn has_exit(&self) -> bool {
        self.last().is_some_and(|e| matches!(e.kind, JobEventKind::Exit { .. }))
    }
}

const MAX_ATTACH_BATCH: usize = 1000;

impl Jobs {
    pub fn new(store: Store, metrics: Arc<crate::metrics::Metrics>) -> Self {
        Self {
            store,
            live: Arc::default(),
            finished: Arc::default(),
            metrics,
            quotas: Arc::default(),
            writes: None,
            replicas: None,
        }
    }

    /// Records the files every job writes in the audit log (`writes.rs`).
    pub fn with_writes(mut self, writes: Arc<crate::execution::writes::Writes>) -> Self {
        self.writes = Some(writes);
        self
    }

    /// Applies per-session output quotas to every job started from now on.
    pub fn with_quotas(mut self, quotas: Arc<crate::auth::quotas::Quotas>) -> Self {
        self.quotas = quotas;
        self
    }

    /// Jobs of `session_id` that are running or awaiting approval in this gateway.
    pub fn live_count(&self, session_id: &str) -> usize {
        lock(&self.live).values().filter(|l| l.session_id == session_id).count()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A fresh job id (for work that must know its id before it starts, like code-mode's socket);
    /// its log file may already exist (the store keeps a few ready).
    pub fn new_id(&self) -> String {
        self.store.new_job_id()
    }

    /// Creates and starts a job, or returns the existing one for the same idempotency key.
    pub fn start(
        &self,
        session_id: &str,
        kind: &str,
        spec: Value,
        idempotency_key: Option<String>,
        timeout: Option<Duration>,
        work: Work,
    ) -> Result<(JobRecord, bool), RpcError> {
        self.start_with_id(self.new_id(), session_id, kind, spec, idempotency_key, timeout, work)
    }

    /// [`Jobs::start`] with an id from [`Jobs::new_id`].
    #[allow(clippy::too_many_arguments)]
    pub fn start_with_id(
        &self,
        id: String,
        session_id: &str,
        kind: &str,
        spec: Value,
        idempotency_key: Option<String>,
        timeout: Option<Duration>,
        work: Work,
    ) -> Result<(JobRecord, bool), RpcError> {
        let rec = new_record(&id, session_id, kind, spec, JobState::Running, idempotency_key);
        // When the store is unreachable this says so plainly: the client can retry later, or on
        // another replica.
        let started = self.store.start_job(&rec).map_err(|e| store_error("recording a job", e))?;
        let log = match started {
            Started::Existing(existing) => return Ok((existing, false)),
            Started::New(log) => log,
        };
        // A command job's stdin accepts writes from the moment its id is returned; what arrives
        // before the process has started is queued, not refused.
        let (stdin_tx, stdin_rx) = match &work {
            Work::Command { .. } | Work::Code { .. } | Work::Pty { .. } => {
                let (t, r) = mpsc::channel::<Option<Vec<u8>>>(16);
                (Some(t), Some(r))
            }
            Work::Tool { .. } => (None, None),
        };
        let live = Arc::new(Live::new(session_id, stdin_tx, false, log.clone()));
        lock(&self.live).insert(id.clone(), live.clone());
        self.launch(&id, log, live, work, stdin_rx, timeout);
        Ok((rec, true))
    }

    /// Appends a job's last events (a tool's result, then the exit) and retires its live entry.
    fn finish(&self, job_id: &str, sink: &LogSink, result: Option<ToolOutput>, mut exit: JobEventKind) {
        if let JobEventKind::Exit { error, .. } = &mut exit
            && sink.live.over_quota.load(std::sync::atomic::Ordering::SeqCst)
        {
            *error = serde_json::to_value(self.quotas.output_exceeded()).ok();
        }
        if let JobEventKind::Exit { state, code, signal, error } = &exit {
            // Appending the exit records the job's end with it (in the same statement as the
            // result while the log is in the job's row). A result the log refuses (one larger
            // than an event may be) does not keep the exit out: it is appended on its own. Only
            // if the exit cannot be appended is the end recorded by itself, so the record does
            // not say `running` until the next restart.
            let batched = result.map(|output| {
                append(&sink.log, &sink.live, job_id, vec![JobEventKind::Result { output }, exit.clone()])
            });
            let exit_in = match batched {
                Some(2) => true,
                Some(1) => false, // the result is in; the exit was refused
                // No result, or the batch was refused whole: the exit on its own.
                _ => append(&sink.log, &sink.live, job_id, vec![exit.clone()]) == 1,
            };
            if !exit_in
                && lock(&sink.live.unstored).events.is_empty()
                && let Err(e) =
                    self.store.set_job_state(job_id, *state, *code, signal.clone(), error.clone(), Some(now_ms()))
            {
                tracing::error!(job = job_id, error = %e, "cannot record the job's end");
            }
        }
        if let Some(live) = lock(&self.live).remove(job_id) {
            live.finished.store(true, std::sync::atomic::Ordering::SeqCst);
            // Wake attached clients even when nothing was appended (an exit the log could not
            // take): they see the job finished instead of waiting out their attach timeout.
            live.next_seq.send_modify(|_| {});
            let mut finished = lock(&self.finished);
            if finished.len() >= FINISHED_KEPT {
                finished.pop_front();
            }
            finished.push_back((job_id.to_string(), live));
        }
        self.metrics.jobs_running.add(-1);
    }

    /// How long a tool job's provider took to answer, once it has (while this gateway still
    /// holds the job in memory), and that provider's tool-call histograms.
    pub fn provider_time(&self, job_id: &str) -> Option<(Duration, Arc<crate::metrics::ToolCallTimes>)> {
        self.handle(job_id)?.provider_time.get().cloned()
    }

    /// A running or recently finished job's in-memory handle.
    fn handle(&self, job_id: &str) -> Option<Arc<Live>> {
        if let Some(l) = lock(&self.live).get(job_id) {
            return Some(l.clone());
        }
        lock(&self.finished).iter().rev().find(|(id, _)| id == job_id).map(|(_, l)| l.clone())
    }

    /// Looks a job up and checks it belongs to `session_id`.
    pub fn get(&self, session_id: &str, job_id: &str) -> Result<JobRecord, RpcError> {
        match self.store.get_job(job_id).map_err(|e| store_error("reading a job", e))? {
            Some(j) if j.session_id == session_id => Ok(j),
            _ => Err(RpcError::new(ErrorCode::UnknownJob, format!("no job `{job_id}` in this session"))),
        }
    }

    pub fn list(&self, session_id: &str) -> Result<Vec<JobRecord>, RpcError> {
        self.store.list_jobs(session_id).map_err(|e| store_error("listing jobs", e))
    }

    /// The next seq this job will write (its log length); 0 if the log cannot be read.
    pub fn next_seq(&self, job_id: &str) -> u64 {
        self.log_len(job_id).unwrap_or(0)
    }

    /// The job's log length, or `None` if the store cannot say (it is unreachable). Whoever
    /// decides that a reader has seen the whole log must not take an unreadable log for an
    /// empty one: during a database outage that ended readers of jobs on other replicas early.
    fn log_len(&self, job_id: &str) -> Option<u64> {
        if let Some(l) = self.handle(job_id) {
            return Some(*l.next_seq.borrow());
        }
        self.store.log_reader(job_id).and_then(|mut l| l.next_seq()).ok()
    }

    /// Events from `from_seq`, waiting up to `wait` for the first one if there is none yet.
    pub async fn attach(
        &self,
        job: &JobRecord,
        from_seq: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<AttachBatch, RpcError> {
        self.attach_as(job, from_seq, wait, limit).await
    }

    /// [`Jobs::attach`], with the events read as `E`.
    pub async fn attach_as<E: Events>(
        &self,
        job: &JobRecord,
        from_seq: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<AttachBatch<E>, RpcError> {
        let limit = limit.clamp(1, MAX_ATTACH_BATCH);
        let handle = self.handle(&job.id);
        let mut events: E = self.read(handle.as_deref(), &job.id, from_seq, limit).await?;
        if events.is_empty() && !wait.is_zero() {
            let live = lock(&self.live).get(&job.id).cloned();
            if let Some(live) = live {
                let mut rx = live.next_seq.subscribe();
                let ended = || live.ended();
                let _ = tokio::time::timeout(wait, rx.wait_for(|n| *n > from_seq || ended())).await;
                events = self.read(handle.as_deref(), &job.id, from_seq, limit).await?;
            } else if let Some(mut rx) = self.follow_elsewhere(&job.id) {
                // The job runs on another replica: wake on its owner's report of an append, and
                // read the log every `FOLLOW_POLL` anyway, in case a report was lost.
                let deadline = tokio::time::Instant::now() + wait;
                loop {
                    let slice =
                        remote::FOLLOW_POLL.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                    let _ = tokio::time::timeout(slice, rx.wait_for(|n| *n > from_seq)).await;
                    events = self.read(None, &job.id, from_seq, limit).await?;
                    if !events.is_empty() || tokio::time::Instant::now() >= deadline || self.is_terminal(&job.id) {
                        break;
                    }
                }
            }
        }
        let next_seq = events.next_seq().unwrap_or(from_seq);
        let done = events.has_exit()
            || match &handle {
                Some(l) if l.ended() => next_seq >= *l.next_seq.borrow(),
                Some(_) => false,
                // The record's end first, then the log's length: a job's end is recorded in the
                // statement that appends its exit, so a log read after the end was seen holds the
                // exit. The other order could see the length before the exit, then the end, and
                // say `done` to a reader that never got the exit (a job on another replica ends
                // while this one reads).
                None => {
                    !self.is_live(&job.id)
                        && self.is_terminal(&job.id)
                        && self.log_len(&job.id).is_some_and(|n| next_seq >= n)
                }
            };
        // Asked past the end of a log that is complete: say where it really ends, rather than
        // echo a position the log never had.
        let next_seq = if done && events.is_empty() {
            self.log_len(&job.id).map_or(next_seq, |n| next_seq.min(n))
        } else {
            next_seq
        };
        Ok(AttachBatch { events, next_seq, done })
    }

    /// Events from `from_seq`: from the job's in-memory tail when it holds them, else the log.
    async fn read<E: Events>(
        &self,
        handle: Option<&Live>,
        job_id: &str,
        from_seq: u64,
        limit: usize,
    ) -> Result<E, RpcError> {
        if let Some(events) = handle.and_then(|l| l.read_recent(from_seq, limit)) {
            return E::from_recent(events);
        }
        let store = self.store.clone();
        let id = job_id.to_string();
        tokio::task::spawn_blocking(move || E::from_log(&store, &id, from_seq, limit))
            .await
            .map_err(|e| internal("reading a job log", e))?
            .map_err(|e| store_error("reading a job log", e))
    }

    /// The session a job belongs to: from memory while it runs (every call a provider is
    /// making), else from its record.
    pub fn session_of(&self, job_id: &str) -> Option<String> {
        if let Some(l) = lock(&self.live).get(job_id) {
            return Some(l.session_id.clone());
        }
        self.store.get_job(job_id).ok().flatten().map(|j| j.session_id)
    }

    pub fn is_live(&self, job_id: &str) -> bool {
        lock(&self.live).contains_key(job_id)
    }

    /// Whether the job has ended (or is gone). An unreachable store says no: the job may still
    /// be running on another replica, and a reader told it ended would stop short of its log.
    fn is_terminal(&self, job_id: &str) -> bool {
        match self.store.get_job(job_id) {
            Ok(job) => job.is_none_or(|j| j.state.is_terminal()),
            Err(_) => false,
        }
    }

    /// Cancels a running or parked job, on whichever replica runs it; `false` if it is not
    /// running (it ended, or the replica running it did not answer).
    pub fn cancel(&self, job_id: &str) -> bool {
        match self.forward(job_id, remote::Ask::Cancel) {
            Some(Ok(cancelled)) => cancelled.as_bool() == Some(true),
            Some(Err(e)) => {
                tracing::warn!(job = job_id, reason = %e.message, "cannot cancel a job on another replica");
                false
            }
            None => self.cancel_here(job_id),
        }
    }

    fn cancel_here(&self, job_id: &str) -> bool {
        let parked = lock(&self.live).get(job_id).is_some_and(|l| l.parked.load(std::sync::atomic::Ordering::SeqCst));
        if parked {
            if self.claim_parked(job_id).is_err() {
                return false;
            }
            return self
                .fail_parked(
                    job_id,
                    JobState::Killed,
                    RpcError::new(ErrorCode::ApprovalRequired, "the job was cancelled while it awaited approval"),
                )
                .is_ok();
        }
        match lock(&self.live).get(job_id) {
            Some(l) => {
                l.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Appends an event to a running job's log from outside its runner; false if it has ended.
    pub fn emit(&self, job_id: &str, event: JobEventKind) -> bool {
        let Some(l) = lock(&self.live).get(job_id).cloned() else { return false };
        append(&l.log, &l, job_id, vec![event]);
        true
    }

    /// Sets a PTY job's window size (the foreground process group gets SIGWINCH), on
    /// whichever replica runs it.
    pub fn resize(&self, job_id: &str, rows: u16, cols: u16) -> Result<(), RpcError> {
        match self.forward(job_id, remote::Ask::Resize { rows, cols }) {
            Some(answer) => answer.map(drop),
            None => self.resize_here(job_id, rows, cols),
        }
    }

    fn resize_here(&self, job_id: &str, rows: u16, cols: u16) -> Result<(), RpcError> {
        let t = lock(&self.live).get(job_id).and_then(|l| lock(&l.terminal).clone());
        let Some(t) = t else {
            return Err(RpcError::invalid_params("the job has no terminal (not a PTY job, or it ended)"));
        };
        t.resize(rows, cols).map_err(|e| internal("resizing a terminal", e))
    }

    /// Sends a signal to a command job's process group; for a PTY job, to the terminal's
    /// foreground process group (what ^C at a real terminal reaches).
    ///
    /// A PTY job's signal goes to the gateway's own child, the sandbox's exec process, whose
    /// init forwards it to the terminal's foreground group *inside* the job's pid namespace. The
    /// gateway never signals a group the sandbox chose: a group id read from the host side of
    /// the terminal names whatever host process reuses that number once the group is gone.
    ///
    /// A job that runs on another replica is signalled there.
    pub fn signal(&self, job_id: &str, signal: &str) -> Result<(), RpcError> {
        parse_signal(signal)?;
        match self.forward(job_id, remote::Ask::Signal { signal: signal.to_string() }) {
            Some(answer) => answer.map(drop),
            None => self.signal_here(job_id, signal),
        }
    }

    fn signal_here(&self, job_id: &str, signal: &str) -> Result<(), RpcError> {
        let sig = parse_signal(signal)?;
        let (terminal, pid) = match lock(&self.live).get(job_id) {
            Some(l) => (lock(&l.terminal).is_some(), *lock(&l.pid)),
            None => (false, None),
        };
        if terminal && let Some(pid) = pid {
            return axp_sandbox::signal_job(pid, sig as i32).map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidInput => {
                    RpcError::invalid_params(format!("`{signal}` cannot be sent to a terminal job"))
                }
                _ => internal("signalling a job", e),
            });
        }
        let Some(pid) = pid else {
            return Err(RpcError::invalid_params(
                "the job has no running process to signal (not a command job, or it ended)",
            ));
        };
        let pgid = nix::unistd::Pid::from_raw(-(pid as i32));
        nix::sys::signal::kill(pgid, sig).map_err(|e| internal("signalling a job", e))
    }

    /// Writes to a command job's stdin, on whichever replica runs it; `eof` closes it.
    pub async fn write(&self, job_id: &str, data: Vec<u8>, eof: bool) -> Result<(), RpcError> {
        if self.replicas.is_some()
            && !self.is_live(job_id)
            && let Some(done) = self.forward_write(job_id, data.clone(), eof).await
        {
            return done;
        }
        self.write_here(job_id, data, eof).await
    }

    async fn write_here(&self, job_id: &str, data: Vec<u8>, eof: bool) -> Result<(), RpcError> {
        let tx = lock(&self.live).get(job_id).and_then(|l| lock(&l.stdin).clone());
        let Some(tx) = tx else {
            return Err(RpcError::invalid_params("the job has no open stdin (not a command job, or it ended)"));
        };
        if !data.is_empty() {
            tx.send(Some(data)).await.map_err(|_| RpcError::invalid_params("the job's stdin is closed"))?;
        }
        if eof {
            let _ = tx.send(None).await;
        }
        Ok(())
    }
}

/// A job's record as it is first stored: no end yet.
fn new_record(
    id: &str,
    session_id: &str,
    kind: &str,
    spec: Value,
    state: JobState,
    idempotency_key: Option<String>,
) -> JobRecord {
    JobRecord {
        id: id.to_string(),
        session_id: session_id.to_string(),
        kind: kind.to_string(),
        spec,
        state,
        exit_code: None,
        signal: None,
        error: None,
        created_ms: now_ms(),
        ended_ms: None,
        idempotency_key,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn parse_signal(s: &str) -> Result<nix::sys::signal::Signal, RpcError> {
    use nix::sys::signal::Signal::*;
    let name = s.trim().to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    Ok(match name {
        "INT" => SIGINT,
        "TERM" => SIGTERM,
        "KILL" => SIGKILL,
        "HUP" => SIGHUP,
        "QUIT" => SIGQUIT,
        "USR1" => SIGUSR1,
        "USR2" => SIGUSR2,
        "STOP" => SIGSTOP,
        "CONT" => SIGCONT,
        "WINCH" => SIGWINCH,
        _ => {
            return Err(RpcError::invalid_params(format!(
                "unknown signal `{s}` (INT, TERM, KILL, HUP, QUIT, USR1, USR2, STOP, CONT, WINCH)"
            )));
        }
    })
}

/// The JSON-RPC error a provider failure becomes.
pub fn provider_error_to_rpc(e: &ProviderError) -> RpcError {
    match e {
        ProviderError::Unavailable { provider, reason } => RpcError::new(
            ErrorCode::ProviderUnavailable,
            format!("provider `{provider}` is unavailable: {reason}; it is being restarted, retry shortly"),
        ),
        ProviderError::Starting { provider } => RpcError::new(
            ErrorCode::ProviderUnavailable,
            format!(
                "provider `{provider}` is still starting; retry shortly (its tools are announced with list_changed)"
            ),
        ),
        ProviderError::Timeout { tool, secs } => {
            RpcError::new(ErrorCode::ProviderUnavailable, format!("`{tool}` did not answer within {secs}s"))
        }
        ProviderError::Cancelled => RpcError::new(ErrorCode::InternalError, "the call was cancelled"),
        ProviderError::UnknownTool(t) => {
            RpcError::new(ErrorCode::UnknownTool, format!("the provider has no tool `{t}` any more"))
        }
        ProviderError::UnknownResource(u) => {
            RpcError::invalid_params(format!("the provider has no resource `{u}`")).with_data("uri", u.as_str())
        }
        ProviderError::UnknownPrompt(n) => RpcError::invalid_params(format!("the provider has no prompt `{n}`")),
        ProviderError::Unsupported(why) => RpcError::new(ErrorCode::MethodNotFound, why.clone()),
        ProviderError::InvalidArguments(r) => RpcError::invalid_params(r.clone()),
        ProviderError::Upstream(e) => e.clone(),
        ProviderError::Config(r) => {
            RpcError::new(ErrorCode::ProviderUnavailable, format!("the provider is misconfigured: {r}"))
        }
        ProviderError::Io { context, .. } => {
            tracing::error!(error = %e, "provider I/O failure");
            RpcError::new(ErrorCode::ProviderUnavailable, format!("the provider failed: {context}"))
        }
    }
}

/// The final output of a finished job, read back from its log (for `tools/call` and `wait`).
pub fn outcome(events: &[JobEvent]) -> Option<Result<ToolOutput, RpcError>> {
    let mut result = None;
    for e in events {
        match &e.kind {
            JobEventKind::Result { output } => result = Some(output.clone()),
            JobEventKind::Exit { state, error, code, signal } => {
                if let Some(err) = error.as_ref().and_then(|v| serde_json::from_value::<RpcError>(v.clone()).ok()) {
                    return Some(Err(err));
                }
                return Some(Ok(result.clone().unwrap_or_else(|| {
                    let what = match (state, code, signal) {
                        (_, Some(c), _) => format!("exited with code {c}"),
                        (_, _, Some(s)) => format!("was stopped ({s})"),
                        (s, _, _) => format!("ended: {}", s.as_str()),
                    };
                    ToolOutput { is_error: *code != Some(0), ..ToolOutput::text(format!("the job {what}")) }
                })));
            }
            _ => {}
        }
    }
    None
}

/// Expands `~`-free relative paths against the workspace.
pub fn resolve_cwd(workspace: &std::path::Path, cwd: Option<&str>) -> PathBuf {
    match cwd {
        Some(c) if std::path::Path::new(c).is_absolute() => PathBuf::from(c),
        Some(c) => workspace.join(c),
        None => workspace.to_path_buf(),
    }
}
