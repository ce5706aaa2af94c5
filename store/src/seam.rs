//! The store's public face (DESIGN §10): [`Store`], [`JobLog`] and [`LogReader`], each an enum
//! over the two backends — the embedded store (SQLite and log files in the state directory,
//! `lib.rs`, `sessions.rs`, `jobs.rs`, `log.rs`) and PostgreSQL (`pg/`), shared by several
//! gateways. This file only dispatches: every function means the same on both backends, and
//! what one backend does not keep is said here ([`StoreError::Unsupported`]).
//!
//! An enum rather than a trait object: two backends, known here, with the same functions; a
//! `match` per call keeps every call site of the gateway unchanged and costs nothing next to a
//! statement.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axp_protocol::methods::{JobEvent, JobEventKind, JobState};
use serde_json::Value;

use crate::pg::{self, Postgres};
use crate::{Created, Embedded, JobRecord, Result, SessionRecord, Started, StoreError, StoreOptions, log};

pub use crate::pg::{Listener, Message, Reaped, Revocations, SharedChange, SharedFile};

/// Which backend a [`Store`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// SQLite and log files in the state directory; one gateway per directory.
    Embedded,
    /// A PostgreSQL database that several gateways (replicas) may share.
    Postgres,
}

/// The durable state of one gateway: a handle on one state directory, and — for a
/// PostgreSQL store — on the database it shares with other replicas.
///
/// Cheap to clone (an `Arc` inside). Only one process may hold a state directory at a time
/// ([`StoreError::Locked`]), whichever the backend.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Embedded(Embedded),
    Postgres(Arc<PgStore>),
}

/// A PostgreSQL store and the state directory this replica holds beside it.
struct PgStore {
    db: Postgres,
    dir: std::path::PathBuf,
    /// The state directory's flock, held as long as the store lives.
    _lock: std::fs::File,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("kind", &self.kind()).field("dir", &self.dir()).finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the embedded store in `state_dir` with default options
    /// ([`crate::ExitSync::Inline`]): takes its lock, opens `axp.db` in WAL mode and migrates
    /// its schema. Call it once per process and clone the result.
    ///
    /// Fails with [`StoreError::Locked`] if another live process holds the directory, and with
    /// [`StoreError::SchemaTooNew`] if a newer AXP wrote the database.
    pub fn open(state_dir: &Path) -> Result<Store> {
        Store::open_with(state_dir, StoreOptions::default())
    }

    /// [`Store::open`] with explicit options.
    ///
    /// Durability of records: SQLite runs in WAL mode with `synchronous=NORMAL`, so a write
    /// returns without an fsync. It survives a crash of the gateway at once; it survives a power
    /// loss after the next WAL checkpoint or [`Store::sync_all`] (and, under
    /// [`crate::ExitSync::Batched`], after the next background sync).
    pub fn open_with(state_dir: &Path, options: StoreOptions) -> Result<Store> {
        Ok(Store { backend: Backend::Embedded(Embedded::open_with(state_dir, options)?) })
    }

    /// Opens the PostgreSQL store at `url` (`postgres://USER:PASSWORD@HOST:PORT/DBNAME`, the
    /// libpq URL form; `connect_timeout` and `options` parameters are honoured) for this
    /// gateway, whose own state directory `state_dir` it locks as [`Store::open`] does (the
    /// directory also keeps the id that names this replica's jobs). Connects before returning,
    /// so a bad URL ([`StoreError::BadUrl`]), an unreachable server or a wrong password
    /// ([`StoreError::Postgres`]) fails here; migrates the schema, or fails with
    /// [`StoreError::RemoteSchemaTooNew`] if a newer AXP migrated it.
    ///
    /// Durability: a write is committed before the call returns, without waiting for the
    /// server's WAL flush (as the embedded store's `synchronous=NORMAL`), except an `exit`
    /// under [`crate::ExitSync::Inline`], a revocation and an operator nonce, which wait for
    /// it. [`Store::sync_all`] waits for everything committed so far.
    pub fn connect(url: &str, state_dir: &Path, options: StoreOptions) -> Result<Store> {
        crate::create_private_dir(state_dir)?;
        let lock = crate::lock_dir(&state_dir.join(crate::LOCK_FILE), options.lock_wait)?;
        let db = Postgres::connect(url, state_dir, &options)?;
        Ok(Store { backend: Backend::Postgres(Arc::new(PgStore { db, dir: state_dir.to_path_buf(), _lock: lock })) })
    }

    /// Which backend this store runs on.
    pub fn kind(&self) -> StoreKind {
        match &self.backend {
            Backend::Embedded(_) => StoreKind::Embedded,
            Backend::Postgres(_) => StoreKind::Postgres,
        }
    }

    /// The state directory this store owns.
    pub fn dir(&self) -> &Path {
        match &self.backend {
            Backend::Embedded(e) => e.dir(),
            Backend::Postgres(p) => &p.dir,
        }
    }

    /// This replica's id, the owner recorded on the jobs it starts (PostgreSQL only: an
    /// embedded store has no other replica).
    pub fn replica_id(&self) -> Option<&str> {
        match &self.backend {
            Backend::Embedded(_) => None,
            Backend::Postgres(p) => Some(p.db.replica()),
        }
    }

    /// A fresh id for a new job: `j_` and the 32 hex digits of a UUIDv7 (a millisecond
    /// timestamp, then 74 random bits), so new ids land at the edge of the id index.
    pub fn new_job_id(&self) -> String {
        format!("j_{}", uuid::Uuid::now_v7().simple())
    }

    /// Inserts `session`, or replaces every field of the session with the same id.
    pub fn put_session(&self, session: &SessionRecord) -> Result<()> {
        match &self.backend {
            Backend::Embedded(e) => e.put_session(session),
            Backend::Postgres(p) => p.db.put_session(session),
        }
    }

    /// The session `id`, closed or not; `None` if it never existed.
    pub fn get_session(&self, id: &str) -> Result<Option<SessionRecord>> {
        match &self.backend {
            Backend::Embedded(e) => e.get_session(id),
            Backend::Postgres(p) => p.db.get_session(id),
        }
    }

    /// Marks session `id` closed (idempotent). [`StoreError::NotFound`] if it never existed.
    pub fn close_session(&self, id: &str) -> Result<()> {
        match &self.backend {
            Backend::Embedded(e) => e.close_session(id),
            Backend::Postgres(p) => p.db.close_session(id),
        }
    }

    /// Every session (open and closed), oldest first.
    pub fn list_sessions(&self) -> Result<Vec<SessionRecord>> {
        match &self.backend {
            Backend::Embedded(e) => e.list_sessions(),
            Backend::Postgres(p) => p.db.list_sessions(),
        }
    }

    /// Closes every open session whose `expires_ms` is at or before `now_ms`; returns how many.
    /// Records are kept (closed), so a client asking about an expired session can be told so.
    pub fn expire_sessions(&self, now_ms: u64) -> Result<usize> {
        match &self.backend {
            Backend::Embedded(e) => e.expire_sessions(now_ms),
            Backend::Postgres(p) => p.db.expire_sessions(now_ms),
        }
    }

    /// [`Store::create_job`], and for a new job its log, ready for appending. Cheaper than
    /// `create_job` then [`Store::log`]: the log of a row inserted just now is known to be empty
    /// and in the row, so nothing is read back.
    pub fn start_job(&self, job: &JobRecord) -> Result<Started> {
        match &self.backend {
            Backend::Embedded(e) => e.start_job(job),
            Backend::Postgres(p) => match p.db.create_job(job)? {
                Created::New => Ok(Started::New(JobLog { inner: LogImpl::Postgres(p.db.fresh_log(&job.id)?) })),
                Created::Existing(existing) => Ok(Started::Existing(existing)),
            },
        }
    }

    /// Records a new job, atomically with respect to its idempotency key: if the session already
    /// has a job with `job.idempotency_key`, nothing is inserted and that job is returned as
    /// [`Created::Existing`]. Different sessions may use the same key. A duplicate job id is
    /// [`StoreError::AlreadyExists`].
    pub fn create_job(&self, job: &JobRecord) -> Result<Created> {
        match &self.backend {
            Backend::Embedded(e) => e.create_job(job),
            Backend::Postgres(p) => p.db.create_job(job),
        }
    }

    /// The job `id`; `None` if it never existed.
    pub fn get_job(&self, id: &str) -> Result<Option<JobRecord>> {
        match &self.backend {
            Backend::Embedded(e) => e.get_job(id),
            Backend::Postgres(p) => p.db.get_job(id),
        }
    }

    /// Every job of session `session_id`, oldest first.
    pub fn list_jobs(&self, session_id: &str) -> Result<Vec<JobRecord>> {
        match &self.backend {
            Backend::Embedded(e) => e.list_jobs(session_id),
            Backend::Postgres(p) => p.db.list_jobs(session_id),
        }
    }

    /// Every job in `state`, across sessions (and, on PostgreSQL, across replicas), oldest
    /// first (e.g. the jobs awaiting approval).
    pub fn jobs_in_state(&self, state: JobState) -> Result<Vec<JobRecord>> {
        match &self.backend {
            Backend::Embedded(e) => e.jobs_in_state(state),
            Backend::Postgres(p) => p.db.jobs_in_state(state),
        }
    }

    /// Records where job `id` is now and, for a terminal state, how it ended. Every field is
    /// overwritten (pass `None` to clear). [`StoreError::NotFound`] if the job does not exist.
    ///
    /// When a job ends, append its `exit` event to the log *first* and call this second: if the
    /// gateway dies in between, [`Store::mark_running_lost`] restores the outcome from the log.
    pub fn set_job_state(
        &self,
        id: &str,
        state: JobState,
        exit_code: Option<i32>,
        signal: Option<String>,
        error: Option<Value>,
        ended_ms: Option<u64>,
    ) -> Result<()> {
        match &self.backend {
            Backend::Embedded(e) => e.set_job_state(id, state, exit_code, signal, error, ended_ms),
            Backend::Postgres(p) => p.db.set_job_state(id, state, exit_code, signal, error, ended_ms),
        }
    }

    /// Call once at gateway start, before serving: every job recorded as `running` (on
    /// PostgreSQL: by this replica) was running in a process that is gone. A job whose log
    /// ends with an `exit` takes its outcome from it; any other gets an `exit` event with state
    /// `lost` and becomes `lost` with `ended_ms = now_ms`. Jobs in `awaiting_approval` are left
    /// alone. Returns how many jobs became `lost`. Call it from a blocking context.
    pub fn mark_running_lost(&self, now_ms: u64) -> Result<usize> {
        match &self.backend {
            Backend::Embedded(e) => e.mark_running_lost(now_ms),
            Backend::Postgres(p) => p.db.mark_running_lost(now_ms),
        }
    }

    /// Deletes at most `max` jobs that ended before `ended_before_ms` (never a running job or
    /// one awaiting approval), each with its whole log, oldest first; then the sessions that
    /// expired before `ended_before_ms` and have no job left. Call it again while it deletes
    /// `max` jobs. Call it from a blocking context.
    pub fn delete_ended(&self, ended_before_ms: u64, max: usize) -> Result<crate::Deleted> {
        match &self.backend {
            Backend::Embedded(e) => e.delete_ended(ended_before_ms, max),
            Backend::Postgres(p) => p.db.delete_ended(ended_before_ms, max),
        }
    }

    /// Opens the log of job `job_id` for appending. Every call for the same job while a
    /// previous [`JobLog`] is still alive returns the same writer. The embedded store creates
    /// a log for a job it has no record of (in files) and repairs a torn tail; the PostgreSQL
    /// store needs the job's record ([`StoreError::NotFound`]).
    pub fn log(&self, job_id: &str) -> Result<JobLog> {
        let inner = match &self.backend {
            Backend::Embedded(e) => LogImpl::Embedded(e.log(job_id)?),
            Backend::Postgres(p) => LogImpl::Postgres(p.db.log(job_id)?),
        };
        Ok(JobLog { inner })
    }

    /// Flushes everything written so far to stable storage: one `syncfs(2)` of the state
    /// directory's filesystem, or a wait for the PostgreSQL server's WAL flush. Call it on
    /// graceful shutdown.
    pub fn sync_all(&self) -> Result<()> {
        match &self.backend {
            Backend::Embedded(e) => e.sync_all(),
            Backend::Postgres(p) => p.db.sync_all(),
        }
    }

    /// A read-only handle on a job's log, for readers in other threads or tasks than the writer
    /// (an attaching client) — on PostgreSQL, on any replica. It sees every event whose
    /// [`JobLog::append`] has returned. A job with no log yet reads as empty.
    pub fn log_reader(&self, job_id: &str) -> Result<LogReader> {
        let inner = match &self.backend {
            Backend::Embedded(e) => ReaderImpl::Embedded(e.log_reader(job_id)?),
            Backend::Postgres(p) => ReaderImpl::Postgres(p.db.log_reader(job_id)?),
        };
        Ok(LogReader { inner })
    }

    /// Up to `max` events of job `job_id` from `from_seq` on (fewer at the end of the log, or
    /// when a read would exceed the per-call byte budget; at least one if any is there). Empty
    /// when `from_seq` is at or past the end. Shorthand for `log_reader(id)?.read(from, max)`.
    pub fn read_log(&self, job_id: &str, from_seq: u64, max: usize) -> Result<Vec<JobEvent>> {
        self.log_reader(job_id)?.read(from_seq, max)
    }

    /// Revokes capability token `token_id` for every replica sharing the database, durably
    /// (committed and flushed before this returns). `false` when it was revoked already.
    /// Other replicas learn of it when they next poll [`Store::revocations_since`].
    /// [`StoreError::Unsupported`] on the embedded store, whose revocations the gateway keeps in
    /// its own file.
    pub fn revoke_token(&self, token_id: &str) -> Result<bool> {
        match &self.backend {
            Backend::Embedded(_) => Err(StoreError::Unsupported { backend: "embedded", what: "revocations" }),
            Backend::Postgres(p) => p.db.revoke_token(token_id),
        }
    }

    /// The tokens revoked at or after `since_ms` by the database server's clock (0: all of
    /// them), and that clock's reading when it answered. To follow revocations, poll with
    /// `since_ms` a margin (a few seconds) before the previous answer's `server_ms`: a
    /// revocation is stamped when its statement runs and seen once it commits, and the margin
    /// covers the time between. Ids may repeat across polls. [`StoreError::Unsupported`] on the
    /// embedded store.
    pub fn revocations_since(&self, since_ms: u64) -> Result<Revocations> {
        match &self.backend {
            Backend::Embedded(_) => Err(StoreError::Unsupported { backend: "embedded", what: "revocations" }),
            Backend::Postgres(p) => p.db.revocations_since(since_ms),
        }
    }

    /// Records operator-envelope nonce `nonce` (signed at `ts_ms`) as used, durably and for
    /// every replica sharing the database: `true` the first time, `false` ever after, however
    /// many replicas race to use it (a unique key decides). Nonces signed more than
    /// `2 × window_ms` before `now_ms` are forgotten (such an envelope fails its timestamp
    /// check first). [`StoreError::Unsupported`] on the embedded store, whose nonces the
    /// gateway keeps in its own file.
    pub fn use_nonce(&self, nonce: &str, ts_ms: u64, now_ms: u64, window_ms: u64) -> Result<bool> {
        match &self.backend {
            Backend::Embedded(_) => Err(StoreError::Unsupported { backend: "embedded", what: "operator nonces" }),
            Backend::Postgres(p) => p.db.use_nonce(nonce, ts_ms, now_ms, window_ms),
        }
    }
}

impl Store {
    fn postgres(&self, what: &'static str) -> Result<&PgStore> {
        match &self.backend {
            Backend::Embedded(_) => Err(StoreError::Unsupported { backend: "embedded", what }),
            Backend::Postgres(p) => Ok(p),
        }
    }

    /// Records this replica as alive for `ttl` from now (by the database server's clock).
    /// Call it at start, before starting jobs, then [`Store::renew_lease`] well within `ttl`.
    /// PostgreSQL only ([`StoreError::Unsupported`]: an embedded store has no other replica).
    pub fn register(&self, ttl: Duration) -> Result<()> {
        self.postgres("leases")?.db.register(ttl)
    }

    /// Extends this replica's lease to `ttl` from now. `false` when the lease had run out and
    /// another replica took this one's running jobs over (they are, or are being, marked
    /// `lost`, and this replica's further appends to them are refused): stop them, then
    /// [`Store::register`] again. PostgreSQL only.
    pub fn renew_lease(&self, ttl: Duration) -> Result<bool> {
        self.postgres("leases")?.db.renew_lease(ttl)
    }

    /// Forgets the replicas whose lease ran out and ends their running jobs as `lost`, each
    /// after its last stored event (so no acknowledged event is lost). Any replica may run it,
    /// several at once. Call it from a blocking context. PostgreSQL only.
    pub fn reap_expired(&self, now_ms: u64) -> Result<Reaped> {
        self.postgres("leases")?.db.reap_expired(now_ms)
    }

    /// The replicas whose lease has not run out. PostgreSQL only.
    pub fn live_replicas(&self) -> Result<Vec<String>> {
        self.postgres("leases")?.db.live_replicas()
    }

    /// The replica that runs (or ran) job `id`; `None` if there is no such job. PostgreSQL
    /// only (an embedded store's jobs are all this gateway's).
    pub fn job_owner(&self, id: &str) -> Result<Option<String>> {
        self.postgres("job owners")?.db.job_owner(id)
    }

    /// Records `value` under `name` unless another replica whose lease has not run out may
    /// rely on the recorded value, and returns the value recorded then: replicas that must
    /// share a setting (a key's fingerprint) compare theirs with it, and the first replica of a
    /// fresh start sets it. Call it after [`Store::register`]. PostgreSQL only.
    pub fn agree(&self, name: &str, value: &str) -> Result<String> {
        self.postgres("agreements")?.db.agree(name, value)
    }

    /// Sends `payload` (at most [`crate::MAX_MESSAGE_BYTES`]) to replica `to`, through
    /// PostgreSQL's `NOTIFY`: delivered once, in commit order, if `to` listens now; lost
    /// otherwise. PostgreSQL only.
    pub fn send(&self, to: &str, payload: &str) -> Result<()> {
        self.postgres("messages")?.db.send(to, payload)
    }

    /// Sends `payload` to every replica that listens now, this one included. PostgreSQL only.
    pub fn broadcast(&self, payload: &str) -> Result<()> {
        self.postgres("messages")?.db.broadcast(payload)
    }

    /// Shared file `name` (the pins lockfile, the plugin lockfile, …) as last written by any
    /// replica; `None` if none was. PostgreSQL only: an embedded store's gateway keeps these
    /// files in its state directory.
    pub fn read_shared(&self, name: &str) -> Result<Option<SharedFile>> {
        self.postgres("shared files")?.db.read_shared(name)
    }

    /// The version of every shared file whose name starts with `prefix`, in name order: poll
    /// it to learn that another replica changed one. PostgreSQL only.
    pub fn shared_versions(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.postgres("shared files")?.db.shared_versions(prefix)
    }

    /// Changes shared file `name` as one read-modify-write under its row's lock: `change` gets
    /// its bytes now (`None`: never written) and returns the new bytes, or `None` to leave it.
    /// Committed durably, with its version bumped, before this returns; concurrent changes
    /// (from any replica) are applied one after the other, never lost. Returns the file as it
    /// is then. `change` runs on a connection thread: keep it short. PostgreSQL only.
    pub fn update_shared(&self, name: &str, change: SharedChange) -> Result<Option<SharedFile>> {
        self.postgres("shared files")?.db.update_shared(name, change)
    }

    /// Forgets shared file `name`; `false` if there was none. PostgreSQL only.
    pub fn delete_shared(&self, name: &str) -> Result<bool> {
        self.postgres("shared files")?.db.delete_shared(name)
    }

    /// The jobs in `state` this gateway holds, oldest first: on PostgreSQL those this replica
    /// owns (a parked job is held by one replica), on the embedded store all of them.
    pub fn owned_jobs_in_state(&self, state: JobState) -> Result<Vec<JobRecord>> {
        match &self.backend {
            Backend::Embedded(e) => e.jobs_in_state(state),
            Backend::Postgres(p) => p.db.owned_jobs_in_state(state),
        }
    }

    /// Hands parked job `id`, which this replica owns, to replica `to` (where an operator's
    /// decision on it arrived): `false`, changing nothing, unless it is this replica's and
    /// still awaits approval. PostgreSQL only.
    pub fn give_parked(&self, id: &str, to: &str) -> Result<bool> {
        self.postgres("job owners")?.db.give_parked(id, to)
    }

    /// Takes over the parked jobs of replicas that hold no lease, and returns them; each such
    /// job goes to exactly one of the replicas calling at once. Call it after
    /// [`Store::reap_expired`]. PostgreSQL only.
    pub fn adopt_orphaned_parked(&self) -> Result<Vec<JobRecord>> {
        self.postgres("job owners")?.db.adopt_orphaned_parked()
    }

    /// Listens for this replica's messages and broadcasts on a connection of its own, calling
    /// `on_message` with each on the listener's thread (hand work elsewhere). Reconnects by
    /// itself, and says so ([`Message::Connected`]): what was sent meanwhile is lost. Stops
    /// when the [`Listener`] is dropped. PostgreSQL only.
    pub fn listen(&self, on_message: Box<dyn FnMut(Message) + Send>) -> Result<Listener> {
        self.postgres("messages")?.db.listen(on_message)
    }
}

/// The writer of one job's log. Cheap to clone; all clones append to the same log, one append
/// at a time. Obtain it from [`Store::log`] or [`Store::start_job`].
#[derive(Clone)]
pub struct JobLog {
    inner: LogImpl,
}

#[derive(Clone)]
enum LogImpl {
    Embedded(log::JobLog),
    Postgres(pg::PgLog),
}

impl std::fmt::Debug for JobLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            LogImpl::Embedded(l) => l.fmt(f),
            LogImpl::Postgres(l) => l.fmt(f),
        }
    }
}

impl From<log::JobLog> for JobLog {
    fn from(l: log::JobLog) -> Self {
        JobLog { inner: LogImpl::Embedded(l) }
    }
}

impl From<pg::PgLog> for JobLog {
    fn from(l: pg::PgLog) -> Self {
        JobLog { inner: LogImpl::Postgres(l) }
    }
}

impl JobLog {
    /// The job this log belongs to.
    pub fn job_id(&self) -> &str {
        match &self.inner {
            LogImpl::Embedded(l) => l.job_id(),
            LogImpl::Postgres(l) => l.job_id(),
        }
    }

    /// The seq the next appended event will get; also the number of acknowledged events.
    pub fn next_seq(&self) -> u64 {
        match &self.inner {
            LogImpl::Embedded(l) => l.next_seq(),
            LogImpl::Postgres(l) => l.next_seq(),
        }
    }

    /// Appends one event: assigns it the next seq, stamps `ts_ms`, writes it and returns it.
    /// Once this returns `Ok`, the event survives a crash of this process; under
    /// [`crate::ExitSync::Inline`] an `exit` event is also flushed, so it and everything before
    /// it survive a power loss (of this machine, or of the PostgreSQL server). Appending a
    /// job's `exit` event also records how the job ended in its record, so callers need no
    /// [`Store::set_job_state`] for it.
    ///
    /// On a write error nothing was appended and the seq is not used up. The one exception is
    /// an `exit` event whose flush or record failed: that event *was* appended (readers may
    /// already have it), so do not append it again. On PostgreSQL, an append that finds
    /// another writer's events in the log fails with [`StoreError::Conflict`].
    pub fn append(&self, kind: JobEventKind) -> Result<JobEvent> {
        match &self.inner {
            LogImpl::Embedded(l) => l.append(kind),
            LogImpl::Postgres(l) => l.append(kind),
        }
    }

    /// Appends `kinds` in order as consecutive events. While the log lives in its job's row and
    /// they all still fit there, they are written by one statement, all or nothing (a job's
    /// result and its exit: one commit instead of two). Otherwise each is appended as by
    /// [`JobLog::append`], stopping at the first that fails. Returns the events appended and
    /// the error that stopped the rest, if any; an `exit` may only come last.
    pub fn append_all(&self, kinds: Vec<JobEventKind>) -> (Vec<JobEvent>, Option<StoreError>) {
        match &self.inner {
            LogImpl::Embedded(l) => l.append_all(kinds),
            LogImpl::Postgres(l) => l.append_all(kinds),
        }
    }

    /// Flushes the log to stable storage, so every acknowledged event survives a power loss.
    pub fn sync(&self) -> Result<()> {
        match &self.inner {
            LogImpl::Embedded(l) => l.sync(),
            LogImpl::Postgres(l) => l.sync(),
        }
    }

    /// Up to `max` events from `from_seq` on; see [`LogReader::read`] for the limits.
    pub fn read(&self, from_seq: u64, max: usize) -> Result<Vec<JobEvent>> {
        match &self.inner {
            LogImpl::Embedded(l) => l.read(from_seq, max),
            LogImpl::Postgres(l) => l.read(from_seq, max),
        }
    }
}

/// A read-only view of one job's log, for readers that are not the writer (an attaching
/// client, another thread, another replica). Keep one per attached client.
pub struct LogReader {
    inner: ReaderImpl,
}

enum ReaderImpl {
    Embedded(log::LogReader),
    Postgres(pg::PgReader),
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.inner {
            ReaderImpl::Embedded(r) => r.fmt(f),
            ReaderImpl::Postgres(r) => r.fmt(f),
        }
    }
}

impl LogReader {
    /// The job this reader follows.
    pub fn job_id(&self) -> &str {
        match &self.inner {
            ReaderImpl::Embedded(r) => r.job_id(),
            ReaderImpl::Postgres(r) => r.job_id(),
        }
    }

    /// How many events can be read now (the seq after the last one).
    pub fn next_seq(&mut self) -> Result<u64> {
        match &mut self.inner {
            ReaderImpl::Embedded(r) => r.next_seq(),
            ReaderImpl::Postgres(r) => r.next_seq(),
        }
    }

    /// Up to `max` events from `from_seq` on, in seq order and dense. Fewer when the log ends,
    /// when more than [`log::READ_MAX_EVENTS`] are asked for, or when the next event would take
    /// the batch past [`log::READ_BUDGET_BYTES`] (a batch always holds at least one event if
    /// one is there). Empty when `from_seq` is at or past the end. Never sees a partial event.
    pub fn read(&mut self, from_seq: u64, max: usize) -> Result<Vec<JobEvent>> {
        match &mut self.inner {
            ReaderImpl::Embedded(r) => r.read(from_seq, max),
            ReaderImpl::Postgres(r) => r.read(from_seq, max),
        }
    }
}

impl LogReader {
    /// [`LogReader::read`], as the lines the log stores rather than decoded events (see
    /// [`crate::EventLines`]). The PostgreSQL store decodes and re-encodes them for now.
    pub fn read_lines(&mut self, from_seq: u64, max: usize) -> Result<crate::EventLines> {
        match &mut self.inner {
            ReaderImpl::Embedded(r) => r.read_lines(from_seq, max),
            ReaderImpl::Postgres(r) => crate::EventLines::encode(&r.read(from_seq, max)?),
        }
    }
}
