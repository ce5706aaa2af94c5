//! Jobs across replicas: several gateways sharing one PostgreSQL store (decision 0010). A job
//! runs in the sandbox of the replica that started it — its owner, recorded with the job — and
//! everything a client may ask of a running job reaches it from any replica:
//!
//! * `job.cancel`, `job.signal`, `job.resize` and `job.write` sent to another replica are
//!   forwarded to the owner as a message (PostgreSQL's `NOTIFY`, on the owner's channel), carried
//!   out there, and answered the same way; the asking replica waits for the answer (at most
//!   [`FORWARD_WAIT`]) and returns it as its own. `NOTIFY` rather than a channel of our own:
//!   every replica already holds an authenticated connection to the one server they share, so
//!   there is no address to publish, no second credential and no listener to expose. The
//!   owner answers on a thread of its own, never waiting for its async runtime: `cancel`,
//!   `signal` and `resize` are synchronous calls that block the asker's runtime worker for the
//!   round trip, and a replica with one worker that is waiting for another replica's answer must
//!   still answer that replica's requests.
//! * `job.attach` on another replica reads the shared log (any replica reads any log). While it
//!   waits for events, it asks the owner to report the job's progress ([`Msg::Watch`]); the
//!   owner sends the log's length after each append ([`Msg::Progress`], one message in flight
//!   per job and follower, so a chatty job costs at most one message per append batch), and the
//!   reader wakes and reads. Messages can be lost (a reconnecting listener), so a waiting reader
//!   also reads the log every [`FOLLOW_POLL`]: a lost message delays, never drops, an event.
//! * Parked jobs (awaiting an operator) are held by one replica each; an operator's decision
//!   sent to another replica first asks the holder to hand the job over ([`Ask::HandOver`],
//!   `jobs/parked.rs`), then decides it there. A replica whose lease ran out has its parked jobs
//!   adopted by one of the others, on the same tick that ends its running jobs.
//! * Leases: each replica renews its lease every third of its length; any replica ends the
//!   running jobs of a replica whose lease ran out as `lost` (`Store::reap_expired`). A replica
//!   that finds its own lease gone (it was cut off for longer than the lease) stops its jobs —
//!   another replica has ended them already — and registers again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_protocol::{ErrorCode, RpcError};
use axp_store::{Listener, Message, Store};
use base64::Engine;
use serde_json::Value;
use tokio::sync::watch;

use super::{Jobs, lock};
use crate::util::{internal, now_ms};

/// How long a replica waits for the owner of a job to answer a forwarded request.
pub const FORWARD_WAIT: Duration = Duration::from_secs(5);
/// How often a reader waiting on a job that runs on another replica reads its log anyway.
pub const FOLLOW_POLL: Duration = Duration::from_millis(250);
/// The most stdin bytes one forwarded `job.write` message carries (base64 makes it 4/3 larger,
/// within a message's limit).
const WRITE_CHUNK: usize = 4096;

/// A message between replicas, as JSON in a `NOTIFY` payload.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Msg {
    /// A request for the job's owner; answered with [`Msg::Reply`] carrying the same `rid`.
    Ask {
        rid: u64,
        from: String,
        job: String,
        ask: Ask,
    },
    Reply {
        rid: u64,
        result: Option<Value>,
        error: Option<RpcError>,
    },
    /// `from` follows `job`: report its progress there until it ends.
    Watch {
        from: String,
        job: String,
    },
    /// `job`'s log holds `next_seq` events; `done` once its exit is in.
    Progress {
        job: String,
        next_seq: u64,
        done: bool,
    },
}

/// What a client asked of a job running on another replica.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub(super) enum Ask {
    Cancel,
    Signal {
        signal: String,
    },
    Resize {
        rows: u16,
        cols: u16,
    },
    /// Base64 of the bytes, at most [`WRITE_CHUNK`] of them.
    Write {
        data: String,
        eof: bool,
    },
    /// Hand this parked job to the asking replica, where an operator's decision on it arrived.
    HandOver,
}

/// This replica's side of the conversation: its id, the requests waiting for an answer, the
/// jobs it follows on other replicas, and who follows its own jobs.
pub struct Replicas {
    store: Store,
    me: String,
    lease: Duration,
    next_rid: AtomicU64,
    pending: Mutex<HashMap<u64, std::sync::mpsc::Sender<Result<Value, RpcError>>>>,
    /// Jobs running elsewhere that a reader here waits on: the latest length their owner
    /// reported.
    followed: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// (job, replica) pairs this replica reports progress to.
    watchers: Mutex<HashSet<(String, String)>>,
    listener: Mutex<Option<Listener>>,
}

impl Replicas {
    /// This replica, on `store` (which must be PostgreSQL), holding leases of `lease`.
    pub fn new(store: Store, lease: Duration) -> anyhow::Result<Arc<Replicas>> {
        let me = store
            .replica_id()
            .ok_or_else(|| anyhow::anyhow!("replicas need a PostgreSQL store (--store postgres://…)"))?
            .to_string();
        Ok(Arc::new(Replicas {
            store,
            me,
            lease,
            next_rid: AtomicU64::new(1),
            pending: Mutex::default(),
            followed: Mutex::default(),
            watchers: Mutex::default(),
            listener: Mutex::new(None),
        }))
    }

    /// This replica's id.
    pub(super) fn me(&self) -> &str {
        &self.me
    }

    fn send(&self, to: &str, msg: &Msg) -> Result<(), RpcError> {
        let payload = serde_json::to_string(msg).map_err(|e| internal("encoding a message to a replica", e))?;
        self.store.send(to, &payload).map_err(|e| internal("sending a message to a replica", e))
    }

    /// Sends `ask` about `job` to its owner `owner` and waits for the answer. Blocks the
    /// calling thread for at most [`FORWARD_WAIT`] (a store call's kind of wait).
    pub(super) fn ask(&self, owner: &str, job: &str, ask: Ask) -> Result<Value, RpcError> {
        let rid = self.next_rid.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        lock(&self.pending).insert(rid, tx);
        let sent = self.send(owner, &Msg::Ask { rid, from: self.me.clone(), job: job.to_string(), ask });
        let answer = sent.and_then(|()| {
            rx.recv_timeout(FORWARD_WAIT).unwrap_or_else(|_| {
                Err(RpcError::new(
                    ErrorCode::InternalError,
                    format!(
                        "the gateway replica running job `{job}` did not answer within {} s; if it has stopped, \
                         the job becomes `lost` once its lease runs out",
                        FORWARD_WAIT.as_secs()
                    ),
                ))
            })
        });
        lock(&self.pending).remove(&rid);
        answer
    }

    /// The length of `job`'s log as its owner last reported it, asking the owner to report
    /// from now on if nobody here followed the job yet.
    fn follow(&self, job: &str, owner: &str) -> watch::Receiver<u64> {
        let mut followed = lock(&self.followed);
        if let Some(tx) = followed.get(job) {
            return tx.subscribe();
        }
        if followed.len() >= 1024 {
            followed.retain(|_, tx| tx.receiver_count() > 0);
        }
        let (tx, rx) = watch::channel(0);
        followed.insert(job.to_string(), tx);
        drop(followed);
        if let Err(e) = self.send(owner, &Msg::Watch { from: self.me.clone(), job: job.to_string() }) {
            tracing::warn!(job, reason = %e.message, "cannot ask the job's replica for its progress; reading the log instead");
        }
        rx
    }
}

impl Jobs {
    /// Joins the replicas sharing this gateway's PostgreSQL store: listens for their messages
    /// and keeps this replica's lease. Call once, inside the runtime, before serving.
    pub fn join_replicas(&self, replicas: Arc<Replicas>) -> anyhow::Result<Jobs> {
        let mut jobs = self.clone();
        jobs.replicas = Some(replicas.clone());
        let handler = jobs.clone();
        let runtime = tokio::runtime::Handle::current();
        let listener = replicas.store.listen(Box::new(move |m| {
            let payload = match m {
                // What a lost message said is recovered elsewhere: asks time out at the asker,
                // and followers read the log every `FOLLOW_POLL`.
                Message::Connected => return,
                Message::Direct(payload) | Message::Broadcast(payload) => payload,
            };
            match serde_json::from_str::<Msg>(&payload) {
                Ok(msg) => handler.on_message(msg, &runtime),
                Err(e) => tracing::warn!(error = %e, "an unreadable message from another replica was ignored"),
            }
        }))?;
        *lock(&replicas.listener) = Some(listener);
        tokio::spawn(keep_lease(jobs.clone()));
        Ok(jobs)
    }

    /// The replica that runs job `job_id`, when that is another replica and the job has not
    /// ended (then a request about it must go there).
    fn owner_elsewhere(&self, job_id: &str) -> Option<(Arc<Replicas>, String)> {
        let replicas = self.replicas.clone()?;
        if self.is_live(job_id) {
            return None;
        }
        let running = self.store.get_job(job_id).ok().flatten().is_some_and(|j| !j.state.is_terminal());
        if !running {
            return None;
        }
        match self.store.job_owner(job_id) {
            Ok(Some(owner)) if owner != replicas.me => Some((replicas, owner)),
            _ => None,
        }
    }

    /// Forwards `ask` to the replica running `job_id`, if another one does: `None` when the
    /// request is for this replica to answer.
    pub(super) fn forward(&self, job_id: &str, ask: Ask) -> Option<Result<Value, RpcError>> {
        let (replicas, owner) = self.owner_elsewhere(job_id)?;
        Some(replicas.ask(&owner, job_id, ask))
    }

    /// [`Jobs::forward`] for stdin bytes, in chunks that fit a message, in order, from an
    /// async caller.
    pub(super) async fn forward_write(&self, job_id: &str, data: Vec<u8>, eof: bool) -> Option<Result<(), RpcError>> {
        let jobs = self.clone();
        let id = job_id.to_string();
        let owner = {
            let (jobs, id) = (jobs.clone(), id.clone());
            tokio::task::spawn_blocking(move || jobs.owner_elsewhere(&id)).await.ok()??
        };
        let (replicas, owner) = owner;
        let done = tokio::task::spawn_blocking(move || {
            let chunks: Vec<&[u8]> = if data.is_empty() { vec![&[][..]] } else { data.chunks(WRITE_CHUNK).collect() };
            let last = chunks.len() - 1;
            for (i, chunk) in chunks.into_iter().enumerate() {
                let data = base64::engine::general_purpose::STANDARD.encode(chunk);
                replicas.ask(&owner, &id, Ask::Write { data, eof: eof && i == last })?;
            }
            Ok(())
        })
        .await;
        Some(done.unwrap_or_else(|e| Err(internal("forwarding a write", e))))
    }

    /// The length of a job's log that runs on another replica, as its owner reports it (see
    /// the module docs); `None` if the job is not running elsewhere.
    pub(super) fn follow_elsewhere(&self, job_id: &str) -> Option<watch::Receiver<u64>> {
        let (replicas, owner) = self.owner_elsewhere(job_id)?;
        Some(replicas.follow(job_id, &owner))
    }

    /// Handles one message on the listener's thread. Answers and progress reports are handed
    /// over at once; requests run on a thread of their own, and never need the async runtime:
    /// a replica whose only runtime worker waits for another replica's answer must still
    /// answer that replica's requests.
    fn on_message(&self, msg: Msg, runtime: &tokio::runtime::Handle) {
        let Some(replicas) = self.replicas.clone() else { return };
        match msg {
            Msg::Ask { rid, from, job, ask } => {
                let jobs = self.clone();
                let spawned = std::thread::Builder::new().name("axp-replica-ask".into()).spawn(move || {
                    let result = match ask {
                        Ask::HandOver => jobs.hand_over_here(&job, &from).map(|()| Value::Null),
                        Ask::Cancel => Ok(Value::Bool(jobs.cancel_here(&job))),
                        Ask::Signal { signal } => jobs.signal_here(&job, &signal).map(|()| Value::Null),
                        Ask::Resize { rows, cols } => jobs.resize_here(&job, rows, cols).map(|()| Value::Null),
                        Ask::Write { data, eof } => match base64::engine::general_purpose::STANDARD.decode(data) {
                            Ok(bytes) => jobs.write_blocking(&job, bytes, eof).map(|()| Value::Null),
                            Err(e) => Err(RpcError::invalid_params(format!("a forwarded write is not base64: {e}"))),
                        },
                    };
                    let (result, error) = match result {
                        Ok(v) => (Some(v), None),
                        Err(e) => (None, Some(e)),
                    };
                    if let Err(e) = replicas.send(&from, &Msg::Reply { rid, result, error }) {
                        tracing::warn!(reason = %e.message, "cannot answer another replica");
                    }
                });
                if let Err(e) = spawned {
                    tracing::error!(error = %e, "cannot start a thread to answer another replica");
                }
            }
            Msg::Reply { rid, result, error } => {
                if let Some(tx) = lock(&replicas.pending).remove(&rid) {
                    let _ = tx.send(match (result, error) {
                        (_, Some(e)) => Err(e),
                        (r, None) => Ok(r.unwrap_or(Value::Null)),
                    });
                }
            }
            Msg::Watch { from, job } => {
                let jobs = self.clone();
                runtime.spawn(async move { jobs.report_progress(replicas, from, job).await });
            }
            Msg::Progress { job, next_seq, done: _ } => {
                if let Some(tx) = lock(&replicas.followed).get(&job) {
                    tx.send_if_modified(|n| {
                        let newer = next_seq > *n;
                        *n = (*n).max(next_seq);
                        newer
                    });
                }
            }
        }
    }

    /// [`Jobs::write`] for a job of this replica, from a thread outside the async runtime
    /// (waiting, like an async writer, while the job's stdin queue is full).
    fn write_blocking(&self, job_id: &str, data: Vec<u8>, eof: bool) -> Result<(), RpcError> {
        let tx = lock(&self.live).get(job_id).and_then(|l| lock(&l.stdin).clone());
        let Some(tx) = tx else {
            return Err(RpcError::invalid_params("the job has no open stdin (not a command job, or it ended)"));
        };
        if !data.is_empty() {
            tx.blocking_send(Some(data)).map_err(|_| RpcError::invalid_params("the job's stdin is closed"))?;
        }
        if eof {
            let _ = tx.blocking_send(None);
        }
        Ok(())
    }

    /// Reports job `job`'s progress to replica `to` after each append until it ends: one
    /// message in flight at a time, each with the latest length.
    async fn report_progress(&self, replicas: Arc<Replicas>, to: String, job: String) {
        let Some(live) = self.handle(&job) else { return };
        let key = (job.clone(), to.clone());
        if !lock(&replicas.watchers).insert(key.clone()) {
            return;
        }
        let mut rx = live.next_seq.subscribe();
        loop {
            let next_seq = *rx.borrow_and_update();
            let done = live.finished.load(Ordering::SeqCst);
            let msg = Msg::Progress { job: job.clone(), next_seq, done };
            let r = replicas.clone();
            let to = to.clone();
            let _ = tokio::task::spawn_blocking(move || r.send(&to, &msg)).await;
            if done || rx.changed().await.is_err() {
                break;
            }
        }
        lock(&replicas.watchers).remove(&key);
    }
}

/// Renews this replica's lease every third of its length and ends the jobs of replicas whose
/// lease ran out. A renewal that finds the lease gone stops this replica's running jobs
/// (another replica has ended them as `lost`, and refuses their appends) and registers again.
async fn keep_lease(jobs: Jobs) {
    let Some(replicas) = jobs.replicas.clone() else { return };
    let mut tick = tokio::time::interval(replicas.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (store, lease) = (replicas.store.clone(), replicas.lease);
        let renewed = tokio::task::spawn_blocking(move || store.renew_lease(lease)).await;
        match renewed {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                let live: Vec<_> = lock(&jobs.live).values().cloned().collect();
                tracing::error!(
                    jobs = live.len(),
                    "this replica's lease ran out and another replica ended its running jobs as `lost`; stopping them here"
                );
                for l in live {
                    if !l.parked.load(Ordering::SeqCst) {
                        l.cancel.cancel();
                    }
                }
                // Parked jobs may be adopted by another replica meanwhile: claimed (no decision
                // starts here) and forgotten; once registered again, this replica adopts back
                // those still recorded as its own (below, too, those nobody took).
                lock(&jobs.live).retain(|_, l| !l.parked.swap(false, Ordering::SeqCst));
                let (store, lease, again) = (replicas.store.clone(), replicas.lease, jobs.clone());
                let registered = tokio::task::spawn_blocking(move || {
                    store.register(lease).map_err(|e| e.to_string())?;
                    again.adopt_parked().map_err(|e| e.message)
                });
                if let Ok(Err(e)) = registered.await {
                    tracing::error!(error = %e, "cannot register this replica again, or adopt back its parked jobs");
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew this replica's lease"),
            Err(_) => {}
        }
        let store = replicas.store.clone();
        match tokio::task::spawn_blocking(move || store.reap_expired(now_ms())).await {
            Ok(Ok(reaped)) if !reaped.replicas.is_empty() || !reaped.lost.is_empty() => {
                tracing::warn!(
                    replicas = ?reaped.replicas,
                    lost = reaped.lost.len(),
                    "replicas whose lease ran out are forgotten; the jobs they ran are `lost`"
                );
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot end the jobs of replicas whose lease ran out"),
            _ => {}
        }
        let (store, adopter) = (replicas.store.clone(), jobs.clone());
        let adopt = move || {
            let adopted = store.adopt_orphaned_parked()?;
            for j in &adopted {
                if let Err(e) = adopter.adopt_one(j) {
                    tracing::error!(job = %j.id, reason = %e.message, "cannot adopt a parked job");
                }
            }
            Ok::<_, axp_store::StoreError>(adopted)
        };
        match tokio::task::spawn_blocking(adopt).await {
            Ok(Ok(adopted)) => {
                if !adopted.is_empty() {
                    tracing::warn!(
                        parked = adopted.len(),
                        "this replica now holds the parked jobs of replicas whose lease ran out"
                    );
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot adopt the parked jobs of replicas whose lease ran out"),
            Err(_) => {}
        }
    }
}
