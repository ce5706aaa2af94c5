//! The ledger of every job event the gateway delivered to the soak's clients (job id, seq, a hash
//! of the event's canonical JSON), and the comparison of a job's full replay against it. An
//! event is "acknowledged" once a client has received and parsed it; the gateway promises that
//! such an event is in the job's durable log, at the same seq, identical, forever. The checks
//! here are what "lost = 0" means: every acknowledged event is found again at its seq with the
//! same content, and a job's replayed seqs run 0, 1, 2, … without a hole up to its exit.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// How a job was driven, for the counts and for what its exit must say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Plan {
    /// Attached until it ended by itself.
    Follow,
    /// Hung up on mid-attach (once or more) and re-attached later from a seq.
    Disconnect,
    /// Cancelled mid-way with `job.cancel`.
    Cancel,
}

/// A hash of an event's canonical JSON: serde_json's default map sorts keys, so equal events
/// have equal text whichever transport delivered them. `DefaultHasher::new()` is the same in
/// every run of this binary, which is all the ledger needs.
pub fn event_hash(ev: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    ev.to_string().hash(&mut h);
    h.finish()
}

/// One job's entry.
#[derive(Debug)]
pub struct Entry {
    pub plan: Plan,
    pub session: usize,
    /// Lines the job's command prints when it is not stopped.
    pub lines: u32,
    /// seq → event hash of every acknowledged event.
    pub acked: BTreeMap<u64, u64>,
    /// The `exit` event as delivered, once it was.
    pub exit: Option<Value>,
    /// Cancelled (by its plan or because the soak ended first).
    pub cancelled: bool,
}

/// What acknowledging one delivered event found.
#[derive(Debug, PartialEq, Eq)]
pub enum Ack {
    /// First delivery of this seq.
    New,
    /// Delivered before (a re-attach from an earlier seq, or a replay) and identical.
    Same,
    /// Delivered before with different content: the gateway changed an acknowledged event.
    Changed,
}

#[derive(Default)]
pub struct Ledger {
    pub jobs: HashMap<String, Entry>,
    /// Job ids in start order.
    pub order: Vec<String>,
    pub acked_total: u64,
}

impl Ledger {
    pub fn add(&mut self, job: &str, plan: Plan, session: usize, lines: u32) {
        self.order.push(job.to_string());
        self.jobs.insert(
            job.to_string(),
            Entry { plan, session, lines, acked: BTreeMap::new(), exit: None, cancelled: false },
        );
    }

    /// Records a delivered event of `job` (its seq read from the event).
    pub fn ack(&mut self, job: &str, seq: u64, ev: &Value) -> Ack {
        let h = event_hash(ev);
        let Some(e) = self.jobs.get_mut(job) else {
            return Ack::Changed;
        };
        if ev.get("kind").and_then(Value::as_str) == Some("exit") {
            e.exit = Some(ev.clone());
        }
        match e.acked.insert(seq, h) {
            None => {
                self.acked_total += 1;
                Ack::New
            }
            Some(old) if old == h => Ack::Same,
            Some(old) => {
                // Keep the first delivery: that is what the client acted on.
                e.acked.insert(seq, old);
                Ack::Changed
            }
        }
    }
}

/// The verdict on one job's full replay.
#[derive(Debug, Default)]
pub struct Check {
    /// Acknowledged events missing from the replay, or present with other content.
    pub lost: Vec<(u64, &'static str)>,
    /// The replay's seqs are not 0..n, or do not end with one exit event.
    pub not_contiguous: Option<String>,
    /// The job's stdout does not hold its numbered lines 1..m in order without a hole, or a job
    /// that was not cancelled did not print all of them and exit 0.
    pub output: Option<String>,
    pub replayed: u64,
}

/// Compares `replay` (every event of the job from seq 0, in the order served) with the ledger.
pub fn check(entry: &Entry, replay: &[Value]) -> Check {
    let mut c = Check { replayed: replay.len() as u64, ..Check::default() };
    let mut by_seq: BTreeMap<u64, u64> = BTreeMap::new();
    for (i, ev) in replay.iter().enumerate() {
        let seq = ev.get("seq").and_then(Value::as_u64);
        if seq != Some(i as u64) && c.not_contiguous.is_none() {
            c.not_contiguous = Some(format!("position {i} holds seq {seq:?}"));
        }
        if let Some(s) = seq {
            by_seq.insert(s, event_hash(ev));
        }
    }
    let exits = replay.iter().filter(|e| e.get("kind").and_then(Value::as_str) == Some("exit")).count();
    let last_is_exit = replay.last().and_then(|e| e.get("kind")).and_then(Value::as_str) == Some("exit");
    if c.not_contiguous.is_none() && (exits != 1 || !last_is_exit) {
        c.not_contiguous = Some(format!("{exits} exit events; the last event is an exit: {last_is_exit}"));
    }
    for (&seq, &h) in &entry.acked {
        match by_seq.get(&seq) {
            None => c.lost.push((seq, "missing")),
            Some(&r) if r != h => c.lost.push((seq, "different")),
            Some(_) => {}
        }
    }
    c.output = check_output(entry, replay);
    c
}

/// The job's command prints `soak I/N` for I = 1..N; its stdout must hold a prefix of them with
/// no hole, all N unless it was cancelled, and then exit 0.
fn check_output(entry: &Entry, replay: &[Value]) -> Option<String> {
    let stdout: String = replay
        .iter()
        .filter(|e| e.get("kind").and_then(Value::as_str) == Some("stdout"))
        .filter_map(|e| e.get("data").and_then(Value::as_str))
        .collect();
    let n = entry.lines;
    let mut want = 1u32;
    for line in stdout.lines() {
        if line != format!("soak {want}/{n}") {
            return Some(format!("stdout line {want} is {line:?}"));
        }
        want += 1;
    }
    let printed = want - 1;
    let exit = replay.last().filter(|e| e.get("kind").and_then(Value::as_str) == Some("exit"));
    let state = exit.and_then(|e| e.get("state")).and_then(Value::as_str).unwrap_or("none");
    let code = exit.and_then(|e| e.get("code")).and_then(Value::as_i64);
    if !entry.cancelled {
        if printed != n {
            return Some(format!("printed {printed} of {n} lines and was not cancelled"));
        }
        if state != "exited" || code != Some(0) {
            return Some(format!("ended {state} (code {code:?}), not exited 0"));
        }
    } else if state != "killed" && !(state == "exited" && code == Some(0) && printed == n) {
        // A cancel that raced the job's own end may find it already exited.
        return Some(format!("cancelled, but ended {state} (code {code:?}) after {printed} of {n} lines"));
    }
    None
}
