//! The writer: one process appends (an flock on `LOCK`), records go to the newest segment, an
//! append returns only after its line is fsynced and `HEAD` names a record at or after it. It
//! must never rewrite an existing line; the one exception is [`AuditLog::open`] cutting a torn,
//! never-acknowledged tail, which it records in the log itself.
//!
//! # Group commit
//!
//! Appends serialise only on writing their line (a `write(2)` under the writer mutex). They then
//! queue on the sync mutex: the first thread there fsyncs the segment and rewrites `HEAD` for
//! every line written so far, so threads that arrived meanwhile find their record already
//! durable and return without another fsync. Under contention one fsync covers many appends;
//! alone, an append costs one `fdatasync` of the segment plus one of `HEAD.tmp` and a rename.
//!
//! # Appends that do not block: [`AuditLog::append_then`]
//!
//! An async caller cannot park a runtime thread for an fsync, and handing each append to a
//! thread pool of its own grows that pool to one thread per record waiting whenever fsyncs are
//! slow (each thread keeps its allocator arena, so memory grows with it). `append_then` writes
//! the line on the caller's thread (a `write(2)` into the page cache) and queues a completion
//! for one sync thread per log. That thread takes every completion queued, fsyncs once through
//! the newest of them, and calls them all: the same group commit, with one thread whatever the
//! load.

use axp_protocol::now_ms;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use crate::read::{Head, list_segments, read_head, segment_name};
use crate::record::{GENESIS_HASH, Kind, LineError, Record, open_line, seal};
use crate::{AuditError, HEAD_FILE, LOCK_FILE};

/// Tunables for [`AuditLog::open_with`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Start a new segment once the current one reaches this many bytes (default 64 MiB).
    pub segment_bytes: u64,
    /// How long to retry the `LOCK` held by another process before [`AuditError::Locked`].
    pub lock_wait: Duration,
    /// When an append counts as done (default [`Durability::EachAppend`]).
    pub durability: Durability,
}

impl Default for Options {
    fn default() -> Self {
        Self { segment_bytes: 64 * 1024 * 1024, lock_wait: Duration::from_secs(2), durability: Durability::EachAppend }
    }
}

/// When [`AuditLog::append`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After the record is fsynced and anchored in `HEAD` (group commit): an acknowledged
    /// record survives power loss. Costs an `fdatasync` per append when appends do not overlap
    /// (milliseconds on ext4).
    EachAppend,
    /// After the record's line is written (`write(2)`): an acknowledged record survives a crash
    /// or `SIGKILL` of this process at once, and power loss once a background thread has
    /// fsynced it, at most this long later. A failed background fsync makes every later append
    /// fail ([`AuditError::Broken`]), so the log never silently stops being durable.
    Interval(Duration),
}

/// What [`AuditLog::open`] had to repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The segment whose tail was cut.
    pub segment: PathBuf,
    /// Its length after the cut.
    pub kept_bytes: u64,
    /// How many bytes of a torn last line were removed.
    pub discarded_bytes: u64,
}

struct Writer {
    file: Arc<File>,
    path: PathBuf,
    segment_bytes: u64,
    next_seq: u64,
    last_hash: String,
    /// Set when a failed write could not be rolled back: appending more would corrupt the chain.
    broken: Option<String>,
}

struct SyncState {
    /// Number of records known durable (fsynced and anchored in `HEAD`).
    count: u64,
    head: File,
}

struct Inner {
    dir: PathBuf,
    options: Options,
    writer: Mutex<Writer>,
    /// Records known durable, and the open `HEAD` file (rewritten under this lock only).
    synced: Mutex<SyncState>,
    recovery: Option<Recovery>,
    /// The background fsync thread's signal, under [`Durability::Interval`].
    flusher: Option<Arc<Flusher>>,
    /// The completions of [`AuditLog::append_then`] waiting for an fsync.
    syncer: Syncer,
}

/// Shared by every [`AuditLog`] clone but not by the background thread, so dropping the last
/// clone runs [`Owner`]'s `Drop` on the dropping thread, before `drop` returns: whatever was
/// written is durable and `LOCK` is released by then. (When the background thread held a strong
/// handle to the log, a drop that raced its wake-up left the final sync and the lock to that
/// thread, after `drop` had returned.)
struct Owner {
    inner: Arc<Inner>,
    /// Released after the final sync (fields drop after `Drop::drop`).
    _lock: File,
}

/// Wakes the background fsync thread ([`Durability::Interval`]).
struct Flusher {
    /// `(dirty, stop)`.
    state: Mutex<(bool, bool)>,
    wake: std::sync::Condvar,
}

/// A caller of [`AuditLog::append_then`] waiting for its record to be durable.
type Completion = Box<dyn FnOnce(Result<Record, AuditError>) + Send>;

/// The queue of [`AuditLog::append_then`] completions and its one sync thread's signal.
#[derive(Default)]
struct Syncer {
    state: Mutex<SyncQueue>,
    wake: std::sync::Condvar,
}

#[derive(Default)]
struct SyncQueue {
    waiting: Vec<(Record, Completion)>,
    /// Whether the sync thread has been started (lazily, on the first `append_then`).
    started: bool,
    stop: bool,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(f) = &self.inner.flusher {
            lock(&f.state).1 = true;
            f.wake.notify_all();
        }
        // Stop the completion thread, and complete here whatever it has not taken yet, so no
        // caller waits on a thread that is about to stop.
        let waiting = {
            let mut q = lock(&self.inner.syncer.state);
            q.stop = true;
            self.inner.syncer.wake.notify_all();
            std::mem::take(&mut q.waiting)
        };
        // The last handle is going away: make everything written durable now rather than leave
        // it to a thread that is about to stop. A sync a thread is in the middle of holds the
        // sync lock, so this waits for it and then finds its records covered; a batch a thread
        // has taken but not yet synced finds them covered by this one.
        let next = lock(&self.inner.writer).next_seq;
        if next > 0 {
            let _ = sync_inner(&self.inner, next - 1);
        }
        complete(&self.inner, waiting);
    }
}

/// The background fsync loop: sleeps until an append marks the log dirty, waits `interval` so
/// one fsync covers every append in it, then syncs. It holds the shared state but not the
/// [`Owner`], so it never keeps `LOCK` held; it stops when the last [`AuditLog`] is dropped,
/// and a sync after that finds nothing unsynced (no handle is left to append).
fn flush_loop(inner: Arc<Inner>, flusher: Arc<Flusher>, interval: Duration) {
    loop {
        {
            let mut st = lock(&flusher.state);
            while !st.0 && !st.1 {
                st = flusher.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            if st.1 {
                return;
            }
        }
        std::thread::sleep(interval);
        {
            let mut st = lock(&flusher.state);
            if st.1 {
                return; // the last handle's drop makes the final sync
            }
            st.0 = false;
        }
        let next = lock(&inner.writer).next_seq;
        if next > 0
            && let Err(e) = sync_inner(&inner, next - 1)
        {
            // `sync_inner` has marked the writer broken: later appends fail loudly.
            tracing::error!(error = %e, "audit log: background fsync failed; further appends will be refused");
        }
    }
}

/// The append handle. `Send + Sync`, and a clone is an `Arc` clone.
#[derive(Clone)]
pub struct AuditLog {
    inner: Arc<Inner>,
    _owner: Arc<Owner>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").field("dir", &self.inner.dir).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the state as consistent as any failed append
    // (guarded by `broken`), so poisoning is not fatal.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> AuditError + '_ {
    move |source| AuditError::Io { path: path.to_path_buf(), source }
}

fn sync_dir(dir: &Path) -> Result<(), AuditError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_at(dir))
}

/// Takes an exclusive flock (`File::try_lock` is `flock(2)` on Linux), retrying for `wait`.
fn take_lock(path: &Path, wait: Duration) -> Result<File, AuditError> {
    let file =
        OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(path).map_err(io_at(path))?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                if std::time::Instant::now() >= deadline {
                    return Err(AuditError::Locked { path: path.to_path_buf() });
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(io_at(path)(e)),
        }
    }
}

fn open_segment(path: &Path, create: bool) -> Result<File, AuditError> {
    OpenOptions::new().append(true).read(true).create_new(create).mode(0o600).open(path).map_err(io_at(path))
}

/// The last record of a segment after cutting a torn tail: `(last record, kept length, cut)`.
fn last_record(path: &Path) -> Result<(Option<Record>, u64, u64), AuditError> {
    let mut bytes = Vec::new();
    File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io_at(path))?;
    let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let cut = (bytes.len() - keep) as u64;
    let complete = &bytes[..keep];
    let Some(last_line) =
        complete[..complete.len().saturating_sub(1)].rsplit(|&b| b == b'\n').next().filter(|l| !l.is_empty())
    else {
        return Ok((None, keep as u64, cut));
    };
    let line_no = complete.iter().filter(|&&b| b == b'\n').count();
    match open_line(last_line) {
        Ok(r) => Ok((Some(r), keep as u64, cut)),
        Err(e) => Err(AuditError::Corrupt {
            path: path.to_path_buf(),
            line: line_no as u64,
            reason: match e {
                LineError::Unparsable(why) => why,
                LineError::HashMismatch => "its hash does not match its contents".to_string(),
            },
        }),
    }
}

impl AuditLog {
    /// Opens (creating if needed) the log in `dir` with default [`Options`].
    pub fn open(dir: &Path) -> Result<AuditLog, AuditError> {
        Self::open_with(dir, Options::default())
    }

    /// Opens the log: takes `LOCK`, finds the last record, cuts a torn last line (an append that
    /// never returned) and records that cut as an `audit.recovered` record, and refuses a log
    /// whose last record is damaged or which is shorter than `HEAD` says (records were removed).
    /// It checks the last record only; [`crate::verify`] checks the whole chain.
    pub fn open_with(dir: &Path, options: Options) -> Result<AuditLog, AuditError> {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io_at(dir))?;
        let lock_file = take_lock(&dir.join(LOCK_FILE), options.lock_wait)?;
        let head = read_head(dir)?;
        let head_path = dir.join(HEAD_FILE);
        let head_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&head_path)
            .map_err(io_at(&head_path))?;
        let segments = list_segments(dir)?;
        let mut recovery = None;
        let (file, seg_path, segment_bytes, next_seq, last_hash) = match segments.last() {
            None => {
                if let Some(h) = head {
                    return Err(AuditError::HeadAhead { head_seq: h.seq, last_seq: None });
                }
                let path = dir.join(segment_name(0));
                let f = open_segment(&path, true)?;
                sync_dir(dir)?;
                (f, path, 0, 0, GENESIS_HASH.to_string())
            }
            Some((first_seq, path)) => {
                let (mut last, kept, cut) = last_record(path)?;
                if cut > 0 {
                    let f = OpenOptions::new().write(true).open(path).map_err(io_at(path))?;
                    f.set_len(kept).map_err(io_at(path))?;
                    f.sync_all().map_err(io_at(path))?;
                    tracing::warn!(
                        segment = %path.display(),
                        discarded_bytes = cut,
                        "audit log: cut a torn last line (an append interrupted before it was acknowledged)"
                    );
                    recovery = Some(Recovery { segment: path.clone(), kept_bytes: kept, discarded_bytes: cut });
                }
                // An empty newest segment (a crash right after rotation): the chain continues
                // from the previous segment's last record.
                if last.is_none() && segments.len() >= 2 {
                    last = last_record(&segments[segments.len() - 2].1)?.0;
                }
                let (next_seq, last_hash) = match &last {
                    Some(r) => (r.seq + 1, r.hash.clone()),
                    None => (0, GENESIS_HASH.to_string()),
                };
                if kept == 0 && *first_seq != next_seq {
                    return Err(AuditError::Corrupt {
                        path: path.clone(),
                        line: 0,
                        reason: format!(
                            "an empty segment for record {first_seq} follows record {}",
                            next_seq.wrapping_sub(1)
                        ),
                    });
                }
                if let Some(Head { seq, hash }) = &head {
                    if *seq >= next_seq {
                        return Err(AuditError::HeadAhead { head_seq: *seq, last_seq: next_seq.checked_sub(1) });
                    }
                    // The one check `open` can make cheaply that catches an edit of the last
                    // record with its hash recomputed.
                    if *seq + 1 == next_seq && *hash != last_hash {
                        return Err(AuditError::Corrupt {
                            path: path.clone(),
                            line: 0,
                            reason: format!("record {seq} does not have the hash HEAD anchors: it was edited"),
                        });
                    }
                }
                (open_segment(path, false)?, path.clone(), kept, next_seq, last_hash)
            }
        };
        let interval = match options.durability {
            Durability::EachAppend => None,
            Durability::Interval(d) => Some(d),
        };
        let flusher =
            interval.map(|_| Arc::new(Flusher { state: Mutex::new((false, false)), wake: std::sync::Condvar::new() }));
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            options,
            flusher: flusher.clone(),
            writer: Mutex::new(Writer {
                file: Arc::new(file),
                path: seg_path,
                segment_bytes,
                next_seq,
                last_hash,
                broken: None,
            }),
            synced: Mutex::new(SyncState { count: next_seq, head: head_file }),
            recovery: recovery.clone(),
            syncer: Syncer::default(),
        });
        if let (Some(f), Some(interval)) = (flusher, interval) {
            let shared = inner.clone();
            std::thread::Builder::new()
                .name("axp-audit-sync".into())
                .spawn(move || flush_loop(shared, f, interval))
                .map_err(io_at(dir))?;
        }
        let log = AuditLog { inner: inner.clone(), _owner: Arc::new(Owner { inner, _lock: lock_file }) };
        if let Some(r) = recovery {
            log.append(
                Kind::AuditRecovered,
                None,
                "audit",
                json!({
                    "segment": r.segment.file_name().map(|n| n.to_string_lossy().into_owned()),
                    "kept_bytes": r.kept_bytes,
                    "discarded_bytes": r.discarded_bytes,
                    "reason": "a torn last line from an interrupted append was cut",
                }),
            )?;
        }
        Ok(log)
    }

    /// What `open` repaired, if anything.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.inner.recovery.as_ref()
    }

    /// The directory this log lives in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The sequence number the next record will get.
    pub fn next_seq(&self) -> u64 {
        lock(&self.inner.writer).next_seq
    }

    /// Appends one record and returns once it is as durable as [`Options::durability`] says:
    /// fsynced and anchored in `HEAD` (the default; blocks for an fsync, milliseconds: call it
    /// from `spawn_blocking` in async code), or written and queued for the background fsync.
    pub fn append(&self, kind: Kind, session: Option<&str>, actor: &str, detail: Value) -> Result<Record, AuditError> {
        let record = self.write_line(kind, session, actor, &detail)?;
        match &self.inner.flusher {
            // Until `HEAD` anchors something, `verify` cannot tell a young log from one whose
            // `HEAD` was deleted: the first record is always synced inline.
            Some(_) if lock(&self.inner.synced).count == 0 => self.sync_through(record.seq)?,
            None => self.sync_through(record.seq)?,
            Some(f) => {
                let mut st = lock(&f.state);
                if !st.0 {
                    st.0 = true;
                    f.wake.notify_one();
                }
            }
        }
        Ok(record)
    }

    /// Appends one record without blocking on an fsync: the line is written on this thread,
    /// and `done` is called once the record is as durable as [`Options::durability`] says,
    /// with the same result [`AuditLog::append`] would have returned. Under
    /// [`Durability::EachAppend`] `done` runs on the log's one sync thread after the fsync that
    /// covers the record (so it must be quick: send on a channel, not do work); otherwise, and
    /// when the line cannot be written, it runs here before this returns.
    pub fn append_then(
        &self,
        kind: Kind,
        session: Option<&str>,
        actor: &str,
        detail: Value,
        done: impl FnOnce(Result<Record, AuditError>) + Send + 'static,
    ) {
        if self.inner.flusher.is_some() {
            return done(self.append(kind, session, actor, detail));
        }
        let record = match self.write_line(kind, session, actor, &detail) {
            Ok(r) => r,
            Err(e) => return done(Err(e)),
        };
        let mut q = lock(&self.inner.syncer.state);
        if q.stop {
            // The last handle is being dropped on another thread; nothing will sync after it.
            drop(q);
            return done(self.sync_through(record.seq).map(|()| record));
        }
        q.waiting.push((record, Box::new(done)));
        if !q.started {
            q.started = true;
            let inner = self.inner.clone();
            let spawned =
                std::thread::Builder::new().name("axp-audit-sync".into()).spawn(move || completion_loop(&inner));
            if let Err(e) = spawned {
                // Without the thread, complete inline: slower, never lost.
                q.started = false;
                let waiting = std::mem::take(&mut q.waiting);
                drop(q);
                tracing::warn!(error = %e, "audit log: cannot start the sync thread; syncing on the caller's thread");
                complete(&self.inner, waiting);
                return;
            }
        }
        self.inner.syncer.wake.notify_one();
    }

    /// Makes every record written so far durable now (fsync and `HEAD`), whatever the
    /// [`Durability`].
    pub fn sync(&self) -> Result<(), AuditError> {
        let next = self.next_seq();
        if next == 0 { Ok(()) } else { self.sync_through(next - 1) }
    }

    /// The [`Durability`] this log was opened with.
    pub fn durability(&self) -> Durability {
        self.inner.options.durability
    }

    fn write_line(&self, kind: Kind, session: Option<&str>, actor: &str, detail: &Value) -> Result<Record, AuditError> {
        let mut w = lock(&self.inner.writer);
        if let Some(why) = &w.broken {
            return Err(AuditError::Broken(why.clone()));
        }
        if w.segment_bytes >= self.inner.options.segment_bytes {
            self.rotate(&mut w)?;
        }
        let (record, line) = seal(
            w.next_seq,
            now_ms(),
            kind,
            session.map(str::to_string),
            actor.to_string(),
            detail,
            w.last_hash.clone(),
        );
        if let Err(e) = (&*w.file).write_all(&line) {
            // Roll back a partial line so the chain stays parseable; if even that fails, refuse
            // further appends rather than write after garbage.
            if w.file.set_len(w.segment_bytes).is_err() {
                w.broken = Some(format!("a failed append could not be rolled back: {e}"));
            }
            return Err(io_at(&w.path)(e));
        }
        w.segment_bytes += line.len() as u64;
        w.next_seq += 1;
        w.last_hash = record.hash.clone();
        Ok(record)
    }

    /// Makes the old segment durable and starts a new one named after the next record.
    fn rotate(&self, w: &mut Writer) -> Result<(), AuditError> {
        let dir = &self.inner.dir;
        w.file.sync_data().map_err(io_at(dir))?;
        let path = dir.join(segment_name(w.next_seq));
        let f = open_segment(&path, true)?;
        sync_dir(dir)?;
        w.file = Arc::new(f);
        w.path = path;
        w.segment_bytes = 0;
        Ok(())
    }

    /// Group commit: returns once record `seq` is fsynced and `HEAD` is at or past it.
    fn sync_through(&self, seq: u64) -> Result<(), AuditError> {
        sync_inner(&self.inner, seq)
    }
}

/// The sync thread of [`AuditLog::append_then`]: takes every queued completion, fsyncs once
/// through the newest record among them, and completes them all. It holds the shared state but
/// not the [`Owner`] (like the flusher), so it never keeps `LOCK` held; it stops when the last
/// handle is dropped, after that drop has completed what was queued.
fn completion_loop(inner: &Inner) {
    loop {
        let waiting = {
            let mut q = lock(&inner.syncer.state);
            while q.waiting.is_empty() && !q.stop {
                q = inner.syncer.wake.wait(q).unwrap_or_else(PoisonError::into_inner);
            }
            if q.waiting.is_empty() {
                return;
            }
            std::mem::take(&mut q.waiting)
        };
        complete(inner, waiting);
    }
}

/// Syncs through the newest of `waiting` (one fsync for all of them) and calls each completion.
fn complete(inner: &Inner, waiting: Vec<(Record, Completion)>) {
    let Some(newest) = waiting.iter().map(|(r, _)| r.seq).max() else { return };
    match sync_inner(inner, newest) {
        Ok(()) => waiting.into_iter().for_each(|(record, done)| done(Ok(record))),
        Err(e) => {
            // One error value, many callers: each gets the same reason. The log is marked broken
            // by then, so `Broken` is also what any later append reports.
            let why = e.to_string();
            waiting.into_iter().for_each(|(_, done)| done(Err(AuditError::Broken(why.clone()))));
        }
    }
}

/// [`AuditLog::sync_through`] on the shared state, so `Drop` and the flush thread can call it.
fn sync_inner(inner: &Inner, seq: u64) -> Result<(), AuditError> {
    let mut synced = lock(&inner.synced);
    if synced.count > seq {
        return Ok(()); // another thread's fsync covered this record
    }
    let (file, next, hash) = {
        let w = lock(&inner.writer);
        // After a failed fsync the kernel may have dropped dirty pages, and a later fsync can
        // succeed without them: anchoring in HEAD now would vouch for records that may be lost.
        if let Some(why) = &w.broken {
            return Err(AuditError::Broken(why.clone()));
        }
        (w.file.clone(), w.next_seq, w.last_hash.clone())
    };
    let dir = &inner.dir;
    if let Err(e) = file.sync_data() {
        // After a failed fsync the kernel may have dropped the dirty pages, and a later fsync
        // can succeed without them: never acknowledge anything from this handle again.
        lock(&inner.writer).broken = Some(format!("fsync failed: {e}"));
        return Err(io_at(dir)(e));
    }
    write_head(dir, &synced.head, &Head { seq: next - 1, hash })?;
    synced.count = next;
    Ok(())
}

/// Rewrites `HEAD` in place: one fixed-size 128-byte `pwrite` at offset 0 (JSON padded with
/// spaces), then `fdatasync`. In place rather than write-temporary-and-rename because the rename
/// costs a journal commit on every append (`examples/append_bench.rs` on a shared ext4 VM: 3.1x
/// one bare `fdatasync` per append with the rename, 1.5-2.4x in place); a
/// 128-byte write inside the first sector is not torn by devices that write sectors atomically,
/// and a torn or stale `HEAD` after a crash is reported by `verify`/`open`, never silently
/// trusted. `HEAD` is written only after the segment is synced, so it never names a record that
/// is not durable.
fn write_head(dir: &Path, file: &File, head: &Head) -> Result<(), AuditError> {
    let path = dir.join(HEAD_FILE);
    let mut text = json!({"seq": head.seq, "hash": head.hash}).to_string();
    while text.len() < HEAD_SIZE - 1 {
        text.push(' ');
    }
    text.push('\n');
    file.write_all_at(text.as_bytes(), 0).map_err(io_at(&path))?;
    if file.metadata().map_err(io_at(&path))?.len() > HEAD_SIZE as u64 {
        file.set_len(HEAD_SIZE as u64).map_err(io_at(&path))?;
    }
    file.sync_data().map_err(io_at(&path))?;
    Ok(())
}

/// The fixed size of `HEAD` (a 20-digit seq and a 64-digit hash fit with room to spare).
const HEAD_SIZE: usize = 128;
