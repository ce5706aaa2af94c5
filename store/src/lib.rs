//! `axp-store` owns AXP's durable state (DESIGN §8): sessions and job metadata in SQLite (WAL),
//! and each job's event log — in its job's row while it is small (decision 0006), as an
//! append-only file pair under the state directory once it is not; or all of it in a
//! PostgreSQL database that several gateways share (`pg/`, decision 0010). It knows nothing
//! about HTTP, MCP, providers or policy, and its code nothing about tokio (the PostgreSQL
//! driver runs a private runtime per connection, on threads of its own): it stores what the
//! gateway decided and gives it back, byte for byte, after a crash or a restart.
//!
//! # Layout of a state directory
//!
//! ```text
//! STATE_DIR/            0700
//!   axp.db              SQLite, WAL mode (+ axp.db-wal), 0600; `jobs.log` holds a job's
//!                       events while it has at most 32 of them in at most 64 KiB (every tool
//!                       call): see `rowlog.rs`
//!   lock                flock()ed by the one process that owns this directory
//!   jobs/XX/ID.jsonl    a larger job's events, one JSON object per line (see [`log`])
//!   jobs/XX/ID.idx      the byte offset where each of its lines ends, u64 little-endian
//! ```
//!
//! # Calling it from async code
//!
//! Every call is a short synchronous operation: one SQLite statement (no fsync: see
//! [`Store::open_with`]) — which is also what appending to a small log is — or one or two
//! `pwrite(2)`s per append to a log in files (2-4 µs in release). Those are fine to call
//! directly from a tokio task. Calls that may block for milliseconds belong in
//! `spawn_blocking`: [`Store::open`], [`Store::mark_running_lost`], [`Store::sync_all`],
//! [`JobLog::sync`], reads of many events (`read_log` parses up to 4 MiB per call), and — under
//! the default [`ExitSync::Inline`] — the append of an `exit` event, which fsyncs (~13 ms per
//! job on the CI VM). [`ExitSync::Batched`] takes that fsync off the caller's thread.
//! [`Store`] and [`JobLog`] are `Send + Sync` and cheap to clone (an `Arc`); [`LogReader`] is
//! `Send`, one per attached client.
//!
//! On PostgreSQL every call is a round trip to the server (0.1 ms and more on loopback, under
//! load much more; decision 0010), which a connection thread makes while the caller waits:
//! short, but a wait, so async callers that make many calls belong in `spawn_blocking` there.
//!
//! # The seam (DESIGN §10)
//!
//! [`Store`], [`JobLog`] and [`LogReader`] are enums over two backends (`seam.rs`): the
//! embedded store here (`Embedded`, with `sessions.rs`, `jobs.rs`, `log.rs`) and PostgreSQL
//! (`pg/`). The public surface is kept deliberately narrow — records in, records out, no SQL,
//! no file handles, no driver type outside [`StoreError`] — so that a further backend (a log
//! store on an object store or a log broker) can sit behind the same functions. Keep it that
//! way: add a function rather than exposing a connection.

mod error;
mod jobs;
pub mod log;
mod lost;
mod pg;
mod reserve;
mod rowlog;
mod seam;
mod sessions;
mod sync;

use axp_protocol::now_ms;
use std::collections::HashMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use rusqlite::Connection;

pub use error::StoreError;
pub use jobs::{Created, Deleted, JobRecord, Started};
pub use log::EventLines;
pub use pg::{MAX_MESSAGE_BYTES, Probe, probe as probe_postgres};
pub use seam::{JobLog, Listener, LogReader, Message, Reaped, Revocations, SharedChange, SharedFile, Store, StoreKind};
pub use sessions::SessionRecord;

/// The result type of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How long a statement waits for a lock held by another connection before failing with
/// `SQLITE_BUSY`. Only one gateway owns a state directory, so contention is rare; this covers
/// WAL checkpoints and an operator poking at the file with the `sqlite3` shell.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Schema migrations, applied in order; `PRAGMA user_version` records how many have run. Never
/// edit a shipped entry: append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: sessions and jobs.
    "CREATE TABLE sessions (
        id           TEXT PRIMARY KEY NOT NULL,
        workspace    TEXT NOT NULL,
        tier         TEXT NOT NULL,
        capabilities TEXT NOT NULL,            -- JSON array of capability strings
        created_ms   INTEGER NOT NULL,
        expires_ms   INTEGER NOT NULL,
        closed       INTEGER NOT NULL DEFAULT 0,
        token_id     TEXT
    ) STRICT;
    CREATE INDEX sessions_open_by_expiry ON sessions(expires_ms) WHERE closed = 0;
    CREATE TABLE jobs (
        id              TEXT PRIMARY KEY NOT NULL,
        session_id      TEXT NOT NULL,
        kind            TEXT NOT NULL,         -- tool | command | code
        spec            TEXT NOT NULL,         -- JSON: what was asked
        state           TEXT NOT NULL,         -- axp_protocol::methods::JobState, snake_case
        exit_code       INTEGER,
        signal          TEXT,
        error           TEXT,                  -- JSON
        created_ms      INTEGER NOT NULL,
        ended_ms        INTEGER,
        idempotency_key TEXT
    ) STRICT;
    -- NULL keys are distinct in a SQLite UNIQUE index, so jobs without a key never collide.
    CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs(session_id, idempotency_key);
    CREATE INDEX jobs_by_session ON jobs(session_id, created_ms);
    CREATE INDEX jobs_by_state ON jobs(state);",
    // 2: sessions whose id alone authenticates (opened by MCP `initialize`, whose clients know
    // no capability token); sessions from `session.open` require their token on every request.
    "ALTER TABLE sessions ADD COLUMN id_is_bearer INTEGER NOT NULL DEFAULT 0;",
    // 3: every tool call is a job, so a job's insert and its end are on the hot path of the
    // gateway. Index only the rows the lookups need: jobs with an idempotency key
    // (most have none), and live jobs (the only states anything looks up by state). An insert
    // then writes ~4.7 WAL pages instead of ~6.2 (measured with this schema and 20,000 jobs).
    // Queries by state must name a live state literally for the partial index to apply
    // (`Store::jobs_in_state` does), and the condition is an OR, not IN: SQLite proves that
    // `state = 'running'` implies one branch of an OR, but not membership of an IN list.
    "DROP INDEX jobs_by_idempotency_key;
    CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs(session_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    DROP INDEX jobs_by_state;
    CREATE INDEX jobs_live ON jobs(state) WHERE state = 'running' OR state = 'awaiting_approval';",
    // 4: a small job log lives in its job's row (decision 0006): '' for a new job, its JSON
    // lines while small, NULL once in files. Jobs recorded before this keep NULL: files.
    "ALTER TABLE jobs ADD COLUMN log TEXT;",
];

/// When a job's `exit` event reaches stable storage (it always survives a gateway crash as soon
/// as [`JobLog::append`] returns; this is about power loss and kernel crashes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitSync {
    /// `append` of an `exit` event fdatasyncs the log's two files before it returns: once a
    /// client sees a job end, its whole log is on disk. Costs two device flushes per job
    /// (~13 ms per job on the CI VM, see `examples/log_bench.rs`), on the appending thread.
    Inline,
    /// Group commit: `append` of an `exit` returns after `write(2)` like any other event, and a
    /// background thread makes every exit written during the last `interval` durable with one
    /// `syncfs(2)`. A power loss can lose up to `interval` worth of finished jobs' tails; a
    /// gateway crash loses nothing. Use it when jobs are small and many (tool calls).
    Batched {
        /// How long exits accumulate before one sync covers them all.
        interval: Duration,
    },
}

/// How [`Store::open_with`] opens a state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreOptions {
    /// When exit events become power-loss durable. Default: [`ExitSync::Inline`].
    pub exit_sync: ExitSync,
    /// How long to retry the state-directory lock before failing with [`StoreError::Locked`],
    /// so that a gateway restarted right after its predecessor was killed does not fail while
    /// the kernel is still reaping it. Default: 2 s.
    pub lock_wait: Duration,
    /// How many connections a PostgreSQL store keeps (one thread each); the embedded store
    /// ignores it. Default: 8.
    pub connections: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { exit_sync: ExitSync::Inline, lock_wait: Duration::from_secs(2), connections: 8 }
    }
}

impl StoreOptions {
    /// These options with the given exit-sync policy.
    pub fn exit_sync(mut self, exit_sync: ExitSync) -> Self {
        self.exit_sync = exit_sync;
        self
    }

    /// These options with the given lock wait.
    pub fn lock_wait(mut self, lock_wait: Duration) -> Self {
        self.lock_wait = lock_wait;
        self
    }

    /// These options with the given number of PostgreSQL connections (at least one).
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = connections.max(1);
        self
    }
}

/// The embedded backend of [`Store`]: a handle on one state directory's SQLite database and
/// log files.
///
/// Cheap to clone (an `Arc` inside); all clones share one SQLite connection and one table of open
/// job logs. Only one process may hold a state directory at a time ([`StoreError::Locked`]).
#[derive(Clone)]
pub(crate) struct Embedded {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    db_path: Arc<PathBuf>,
    jobs_dir: PathBuf,
    /// The one connection, shared with every open log (small logs live in their job's row).
    db: rowlog::Db,
    /// Open job logs, so every `Store::log(id)` of a live job shares one writer. Entries whose
    /// writer was dropped are swept lazily.
    logs: Mutex<HashMap<String, Weak<log::LogInner>>>,
    /// The group-commit thread under [`ExitSync::Batched`]; shared with every open log, and
    /// stopped (after a last sync) when the store and all its logs are gone.
    syncer: Option<Arc<sync::Syncer>>,
    /// An fd on the state directory, for [`Store::sync_all`].
    dir_fd: File,
    /// Held (flock) for as long as the store or any of its job logs lives (each [`JobLog`] keeps
    /// a clone, so no other process can take the directory while a writer is still open);
    /// released by the kernel if the process dies.
    lock: Arc<File>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded").field("dir", &self.inner.dir).finish_non_exhaustive()
    }
}

/// Creates `path` and any missing parents with mode 0700 (existing directories keep theirs).
pub(crate) fn create_private_dir(path: &Path) -> Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path).map_err(|e| StoreError::io(path, e))
}

/// Poisoning only means another thread panicked while holding the lock. Every guarded structure
/// here stays consistent across a panic (SQLite statements are atomic; a log writer only moves
/// its counters after both writes succeeded), so the guard is taken back rather than propagating
/// the panic to every later caller.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// SQLite integers are i64; our times and counts are u64. Values beyond i64::MAX are nonsense
/// for milliseconds, so they saturate rather than fail.
pub(crate) fn to_sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) fn from_sql_int(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Embedded {
    /// Opens (creating if needed) the state directory `state_dir`: see [`Store::open_with`].
    ///
    /// Durability of records: SQLite runs in WAL mode with `synchronous=NORMAL`, so a write
    /// returns without an fsync. It survives a crash of the gateway at once; it survives a power
    /// loss after the next WAL checkpoint or [`Store::sync_all`] (and, under
    /// [`ExitSync::Batched`], after the next background sync).
    pub(crate) fn open_with(state_dir: &Path, options: StoreOptions) -> Result<Embedded> {
        create_private_dir(state_dir)?;
        let jobs_dir = state_dir.join("jobs");
        create_private_dir(&jobs_dir)?;
        let lock = lock_dir(&state_dir.join(LOCK_FILE), options.lock_wait)?;

        let db_path = state_dir.join("axp.db");
        // Create the file ourselves so it is 0600: SQLite gives its -wal and -shm files the
        // permissions of the database file.
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&db_path)
            .map_err(|e| StoreError::io(&db_path, e))?;
        let mut conn = Connection::open(&db_path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // The state-directory lock already keeps every other process out, so this connection
        // takes SQLite's file locks once and keeps them, and the WAL index lives in its heap
        // instead of a shared-memory file: each transaction then costs no `fcntl` lock calls
        // (13 per tool call before this, measured with `strace -c`).
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::corrupt(&db_path, format!("SQLite refused WAL mode (journal_mode is `{mode}`)")));
        }
        // Durability trade-off: in WAL mode, synchronous=NORMAL fsyncs the WAL only at
        // checkpoints, not at every commit. A committed transaction survives a crash of the
        // gateway process (the WAL is in the page cache, which the kernel writes out), but the
        // last few transactions before a power loss or kernel panic may roll back. The database
        // never corrupts either way. That is the right trade for sessions and job metadata: a
        // commit costs no fsync, and the one fact that must survive power loss — how a job
        // ended — is also in the job's log, which is fsynced at its `exit` event and wins in
        // `mark_running_lost`. Use FULL if metadata must survive power loss on its own.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        migrate(&mut conn, &db_path)?;
        let dir_fd = File::open(state_dir).map_err(|e| StoreError::io(state_dir, e))?;
        reserve::clean_up(&jobs_dir, |id| {
            Ok(conn.prepare_cached("SELECT 1 FROM jobs WHERE id = ?1")?.exists([id])?)
        })?;
        let syncer = match options.exit_sync {
            ExitSync::Inline => None,
            ExitSync::Batched { interval } => Some(Arc::new(sync::Syncer::start(state_dir, interval)?)),
        };

        Ok(Embedded {
            inner: Arc::new(Inner {
                dir: state_dir.to_path_buf(),
                db_path: Arc::new(db_path),
                jobs_dir,
                db: Arc::new(Mutex::new(conn)),
                logs: Mutex::new(HashMap::new()),
                syncer,
                dir_fd,
                lock: Arc::new(lock),
            }),
        })
    }

    /// The state directory this store owns.
    pub(crate) fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub(crate) fn db(&self) -> MutexGuard<'_, Connection> {
        lock(&self.inner.db)
    }

    pub(crate) fn db_path(&self) -> &Path {
        &self.inner.db_path
    }

    pub(crate) fn jobs_dir(&self) -> &Path {
        &self.inner.jobs_dir
    }

    /// Opens the log of job `job_id` for appending, creating it if it does not exist and
    /// repairing a torn tail left by a crash (see [`log`] for what survives what). Every call
    /// for the same job while a previous [`JobLog`] is still alive returns the same writer, so a
    /// log never has two writers in one process (and the state-directory lock rules out two
    /// processes).
    pub(crate) fn log(&self, job_id: &str) -> Result<log::JobLog> {
        self.log_with(job_id, log::JobLog::open)
    }

    /// [`Store::log`] for a job [`Store::start_job`] has just inserted.
    pub(crate) fn fresh_log(&self, job_id: &str) -> Result<log::JobLog> {
        self.log_with(job_id, log::JobLog::fresh)
    }

    fn log_with(&self, job_id: &str, open: fn(&Path, &str, log::Shared) -> Result<log::JobLog>) -> Result<log::JobLog> {
        let mut logs = lock(&self.inner.logs);
        if let Some(live) = logs.get(job_id).and_then(Weak::upgrade) {
            return Ok(log::JobLog::from_inner(live));
        }
        let opened = open(
            &self.inner.jobs_dir,
            job_id,
            log::Shared {
                syncer: self.inner.syncer.clone(),
                _dir_lock: self.inner.lock.clone(),
                db: self.inner.db.clone(),
                db_path: self.inner.db_path.clone(),
            },
        )?;
        // Sweep dead entries now and then so the table tracks live logs, not every job ever.
        if logs.len() >= 64 && logs.len().is_power_of_two() {
            logs.retain(|_, w| w.strong_count() > 0);
        }
        logs.insert(job_id.to_string(), opened.downgrade());
        Ok(opened)
    }

    /// Flushes everything written so far — every job log and the database — to stable storage
    /// with one `syncfs(2)` of the state directory's filesystem. Call it on graceful shutdown.
    /// Under [`ExitSync::Batched`] it also reports a failure of an earlier background sync.
    pub(crate) fn sync_all(&self) -> Result<()> {
        match &self.inner.syncer {
            Some(syncer) => syncer.sync_now(),
            None => rustix::fs::syncfs(&self.inner.dir_fd).map_err(|e| StoreError::io(&self.inner.dir, e.into())),
        }
    }

    /// A read-only handle on a job's log that opens the files itself, for readers in other
    /// threads or tasks than the writer (an attaching client). It sees every event whose
    /// [`JobLog::append`] has returned. A job with no log yet reads as empty.
    pub(crate) fn log_reader(&self, job_id: &str) -> Result<log::LogReader> {
        log::LogReader::open(&self.inner.jobs_dir, job_id, &self.inner.db, self.inner.db_path.clone())
    }
}

/// The file the owning process holds a flock on.
const LOCK_FILE: &str = "lock";

/// Whether another process holds the state directory `dir` (an `axp serve` running on it).
/// A directory without a lock file is free. Used to choose a directory, not to claim one:
/// opening the store takes the lock.
pub fn in_use(dir: &Path) -> bool {
    let Ok(file) = OpenOptions::new().write(true).open(dir.join(LOCK_FILE)) else { return false };
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(e) => matches!(e, std::fs::TryLockError::WouldBlock),
    }
}

/// Takes an exclusive, non-blocking flock on `path` (`File::try_lock` is `flock(2)` on Linux,
/// so it excludes what [`in_use`] and older builds of the gateway test), retrying for `wait`.
fn lock_dir(path: &Path, wait: Duration) -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| StoreError::io(path, e))?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                if std::time::Instant::now() >= deadline {
                    return Err(StoreError::Locked { path: path.to_path_buf() });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(StoreError::io(path, e)),
        }
    }
}

fn migrate(conn: &mut Connection, db_path: &Path) -> Result<()> {
    let supported = i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX);
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > supported {
        return Err(StoreError::SchemaTooNew { path: db_path.to_path_buf(), found, supported });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(from_sql_int(found) as usize) {
        // One transaction per step: a crash mid-migration leaves the previous version intact.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
        tx.commit()?;
    }
    Ok(())
}
