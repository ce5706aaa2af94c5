//! Job logs: each job's events as JSON lines — in the job's row while the log is small
//! (`rowlog.rs`, decision 0006), then as an append-only file plus a fixed-width index, so that
//! any `seq` can be found in O(1) and a log of any size is read with flat memory. This file owns
//! where a log lives and its move from row to files, the on-disk format, the single-writer
//! append path, readers that never block the writer, and crash recovery. It must never keep events in memory beyond the one being written or the one batch
//! being returned, and never reorder or renumber an event once [`JobLog::append`] returned it.
//!
//! # Where a log lives
//!
//! A job recorded by [`crate::Store::create_job`] starts with its log in its row: each append is
//! one `UPDATE` that adds the event's line to `jobs.log`, committed atomically, so the row never
//! holds a torn line. Most jobs are tool calls with two or three events, and creating a file per
//! job was measured as the largest single cost of a `tools/call` through the gateway (ext4 inode
//! allocation; decisions 0005 and 0006), so a file is only made when the log outgrows
//! [`SMALL_LOG_EVENTS`] events or [`SMALL_LOG_BYTES`]: that append writes the row's lines and
//! its own to a new data file, the whole index to `ID.idx.tmp` renamed to `ID.idx`, and only
//! then sets the row's log to NULL. The rename is the commit point: whoever finds the index
//! reads the files, whoever does not reads the row, which holds every acknowledged event until
//! the files do. A crash after the rename is finished by the next open; a crash before it
//! leaves the row as it was and a data file the next move overwrites. Logs opened without a job
//! record, and jobs recorded before schema 4, live in files from their first event.
//!
//! # Format
//!
//! `jobs/XX/ID.jsonl` holds one [`JobEvent`] per line, serialised by `serde_json` (which never
//! emits a raw newline inside a value) and terminated by `\n`. `seq` is dense from 0. `XX` is a
//! shard (two hex digits of a hash of the id) that keeps directories small.
//!
//! `jobs/XX/ID.idx` holds, for each `seq`, the byte offset in the data file where that event's
//! line *ends*, as a little-endian u64 at position `8 * seq`. Event `seq` is therefore the bytes
//! `[end(seq-1), end(seq))` (with `end(-1) = 0`), and the number of events is `len(idx) / 8`.
//!
//! A *small file log* (one that lives in files from the start, see above) has no index file
//! while it holds at most [`SMALL_LOG_EVENTS`] events in at most [`SMALL_LOG_BYTES`] of data:
//! the append that would take it past either limit writes its line, then writes the whole
//! index to `ID.idx.tmp` and renames it to `ID.idx` before returning. A reader that finds no
//! index reads the first [`SMALL_LOG_BYTES`] of the data and takes at most [`SMALL_LOG_EVENTS`]
//! complete lines, which by the rule above are all acknowledged events (the line that triggers
//! the index is either past the byte limit or past the event limit).
//!
//! # What an acknowledged event is, and why it is never lost
//!
//! An event is *acknowledged* when [`JobLog::append`] has returned it. Before returning, append
//! has committed the row's `UPDATE` (SQLite writes it to the WAL) or, for a log in files, (1)
//! written the whole line to the data file and then (2) written its index entry (for a log that
//! has an index), each with `pwrite(2)` at an explicit offset. After a `write(2)` returns, the
//! bytes are in the kernel's page cache: every other reader on the machine sees them, and they reach the disk
//! even if the gateway process is killed the next instant (SIGKILL, panic, OOM). The gateway
//! sends an event to clients only after append returned, so every event a client ever saw is in
//! the log. On open, recovery keeps every complete line (rebuilding index entries the crash did
//! not get to write) and drops only a torn last line, which by construction belongs to an append
//! that never returned.
//!
//! Power loss and kernel crashes are a different matter: the page cache is lost with the machine.
//! Under [`crate::ExitSync::Inline`] (the default), [`JobLog::append`] fsyncs both files (or,
//! for a log in its row, the database's WAL) when it writes an `exit` event, so a finished job's whole log is on disk once its exit is
//! acknowledged; under [`crate::ExitSync::Batched`] that happens within the batch interval.
//! [`JobLog::sync`] and [`crate::Store::sync_all`] do it on demand. Events of a still-running
//! job written after the last sync may be lost to a power cut (recovery then truncates the log
//! to its longest intact prefix). Per-event fsync would close that gap at a large cost (see
//! `examples/log_bench.rs` for the ratio: ~3,000x for small events on the CI VM).
//!
//! # Concurrency
//!
//! One writer per log: [`crate::Store::log`] hands out a shared [`JobLog`] and the state-dir lock
//! keeps other processes out. Readers of a log in files lock nothing; readers of a log in its
//! row take the store's connection for one `SELECT`. A reader of files first learns how many
//! events exist from the index length, then reads the data: since the data line is written before
//! its index entry, every index entry a reader can see points at bytes that are already there.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use axp_protocol::methods::{JobEvent, JobEventKind};

use crate::rowlog::{self, Db};
use crate::sync::Syncer;
use crate::{Result, StoreError, create_private_dir, lock, now_ms};

/// One read returns at most this many bytes of events (but always at least one event, whatever
/// its size), so a reader's memory stays bounded whatever `max` a client asks for.
pub const READ_BUDGET_BYTES: u64 = 4 << 20;

/// One read looks at most this many index entries, for the same reason.
pub const READ_MAX_EVENTS: usize = 16_384;

/// A log keeps no index file while it holds at most this many events ...
pub const SMALL_LOG_EVENTS: u64 = 32;

/// ... in at most this many bytes of data. See the module docs.
pub const SMALL_LOG_BYTES: u64 = 64 << 10;

/// The largest encoded event (one JSON line) a log accepts. Reads, appends and recovery hold at
/// most one event (or one [`READ_BUDGET_BYTES`] batch) in memory, so this bounds the store's
/// memory whatever is in a file; the gateway should chunk output far below it (64 KiB chunks
/// are plenty for streaming).
pub const MAX_EVENT_BYTES: u64 = 64 << 20;

/// The longest job id accepted (it becomes a file name).
pub const MAX_ID_LEN: usize = 128;

/// Job ids name files, so they are restricted to `[A-Za-z0-9_.-]{1,128}` and may not start with
/// a dot (no `..`, no hidden files, no path separators).
/// `kinds` as the consecutive events of `job_id` from `seq` on, stamped with one time: what
/// an append of several events writes, in either backend.
pub(crate) fn numbered(job_id: &str, seq: u64, kinds: Vec<JobEventKind>) -> Vec<JobEvent> {
    let ts_ms = now_ms();
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, kind)| JobEvent { job_id: job_id.to_string(), seq: seq + i as u64, ts_ms, kind })
        .collect()
}

pub(crate) fn validate_id(id: &str) -> Result<()> {
    let reason = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_ID_LEN {
        Some("it is longer than 128 bytes")
    } else if id.starts_with('.') {
        Some("it starts with a dot")
    } else if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)) {
        Some("only letters, digits, `_`, `.` and `-` are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidId { id: id.to_string(), reason }),
        None => Ok(()),
    }
}

/// The shard directory name for `id`: two hex digits of its FNV-1a hash. Hand-rolled because the
/// value must never change between builds (std's hashers promise no stability) and FNV-1a is a
/// handful of lines; it needs no cryptographic strength, only spread.
fn shard(id: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:02x}", h & 0xff)
}

/// Where the data file of job `id`'s log lives (the file [`crate::reserve`] creates ahead).
pub(crate) fn data_path(jobs_dir: &Path, id: &str) -> Result<PathBuf> {
    Ok(LogPaths::new(jobs_dir, id)?.data)
}

/// Removes the files of job `id`'s log, those that exist (a log in its row has none).
pub(crate) fn remove_files(jobs_dir: &Path, id: &str) -> Result<()> {
    let paths = LogPaths::new(jobs_dir, id)?;
    for path in [&paths.data, &paths.index, &paths.index_tmp] {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(path, e)),
        }
    }
    Ok(())
}

/// Where the files of job `id`'s log live.
#[derive(Debug, Clone)]
struct LogPaths {
    dir: PathBuf,
    data: PathBuf,
    index: PathBuf,
    /// Where the index of a log that stops being small is built before it is renamed into place.
    index_tmp: PathBuf,
}

impl LogPaths {
    fn new(jobs_dir: &Path, id: &str) -> Result<Self> {
        validate_id(id)?;
        let dir = jobs_dir.join(shard(id));
        Ok(LogPaths {
            data: dir.join(format!("{id}.jsonl")),
            index: dir.join(format!("{id}.idx")),
            index_tmp: dir.join(format!("{id}.idx.tmp")),
            dir,
        })
    }
}

/// The writer of one job's log. Cheap to clone; all clones append to the same log, one append at
/// a time. Obtain it from [`crate::Store::log`].
#[derive(Clone)]
pub struct JobLog {
    inner: Arc<LogInner>,
}

impl std::fmt::Debug for JobLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobLog").field("job_id", &self.inner.job_id).field("next_seq", &self.next_seq()).finish()
    }
}

pub(crate) struct LogInner {
    job_id: String,
    paths: LogPaths,
    /// Events acknowledged so far (== the next seq). Published with `Release` after both writes
    /// of an append, so a reader that loads it with `Acquire` may read every event below it.
    committed: AtomicU64,
    writer: Mutex<Writer>,
    /// Read handles, shared by every in-process reader of this log through `pread`. The data
    /// file's is set once the log lives in files (at open, or when it outgrows its row); the
    /// index's when the log has an index. Both are set before the row says the log moved.
    data_reader: OnceLock<File>,
    index_reader: OnceLock<File>,
    shared: Shared,
}

/// What every log of one store shares with it.
pub(crate) struct Shared {
    /// Set under `ExitSync::Batched`: exit events are synced by this thread instead of inline.
    pub(crate) syncer: Option<Arc<Syncer>>,
    /// The state directory's lock, kept while this log can still be written.
    pub(crate) _dir_lock: Arc<File>,
    /// The store's database, which holds small logs (`rowlog.rs`) and every job's end.
    pub(crate) db: Db,
    pub(crate) db_path: Arc<PathBuf>,
}

/// Where a log's events are written.
enum Place {
    /// In the job's row, while the log is small (decision 0006): where each line ends in the
    /// row's text (the last one is its length).
    Row { ends: Vec<u64> },
    /// In the job's files.
    Files(Files),
}

struct Files {
    data: File,
    /// `None` while the file log is small; then `small_ends` holds what the index would.
    index: Option<File>,
    small_ends: Vec<u64>,
    data_len: u64,
    /// Directories whose new entries (this log's files) have not been fsynced yet.
    unsynced_dirs: Vec<PathBuf>,
}

/// What [`JobLog::append_row_batch`] did.
enum Batch {
    /// One statement wrote every event; `ended`: the last was an `exit`.
    Written { ended: bool },
    /// Nothing was written: append the events one by one.
    DoesNotFit,
}

struct Writer {
    place: Place,
    next_seq: u64,
    /// Reused encoding buffer, so an append allocates nothing in the steady state.
    buf: Vec<u8>,
}

impl Files {
    /// fdatasyncs both files, then any directory holding a new entry for them.
    fn sync(&mut self, paths: &LogPaths) -> Result<()> {
        sync_pair(&self.data, self.index.as_ref(), paths)?;
        for dir in &self.unsynced_dirs {
            sync_dir(dir)?;
        }
        self.unsynced_dirs.clear();
        Ok(())
    }
}

impl Writer {
    /// Makes every acknowledged event survive a power loss.
    fn sync(&mut self, paths: &LogPaths, shared: &Shared) -> Result<()> {
        match &mut self.place {
            Place::Row { .. } => rowlog::sync_wal(&shared.db_path),
            Place::Files(f) => f.sync(paths),
        }
    }
}

fn open_rw(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| StoreError::io(path, e))
}

/// Writes a whole index (`ends`) to a temporary file and renames it into place, so that a
/// reader either finds no index or a complete one. Returns the index, opened read-write.
fn write_index(ends: &[u64], paths: &LogPaths) -> Result<File> {
    let tmp = &paths.index_tmp;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)
        .map_err(|e| StoreError::io(tmp, e))?;
    let bytes: Vec<u8> = ends.iter().flat_map(|e| e.to_le_bytes()).collect();
    file.write_all_at(&bytes, 0).map_err(|e| StoreError::io(tmp, e))?;
    std::fs::rename(tmp, &paths.index).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        StoreError::io(&paths.index, e)
    })?;
    Ok(file)
}

/// Whether a log of `events` events in `bytes` bytes of data needs an index file.
fn outgrows_small(events: u64, bytes: u64) -> bool {
    events > SMALL_LOG_EVENTS || bytes > SMALL_LOG_BYTES
}

fn create_new(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path)
}

fn open_ro(path: &Path) -> Result<Option<File>> {
    match File::open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

fn file_len(f: &File, path: &Path) -> Result<u64> {
    f.metadata().map(|m| m.len()).map_err(|e| StoreError::io(path, e))
}

fn sync_dir(path: &Path) -> Result<()> {
    File::open(path).and_then(|d| d.sync_all()).map_err(|e| StoreError::io(path, e))
}

fn read_entry(index: &File, path: &Path, i: u64) -> Result<u64> {
    let mut b = [0u8; 8];
    index.read_exact_at(&mut b, i * 8).map_err(|e| StoreError::io(path, e))?;
    Ok(u64::from_le_bytes(b))
}

/// Parses one line (without its `\n`) as event `seq` of job `job_id`, or says why not.
fn parse_line(line: &[u8], job_id: &str, seq: u64) -> std::result::Result<JobEvent, String> {
    let ev: JobEvent = serde_json::from_slice(line).map_err(|e| format!("event {seq}: {e}"))?;
    if ev.seq != seq || ev.job_id != job_id {
        return Err(format!("expected event {seq} of job `{job_id}`, found event {} of job `{}`", ev.seq, ev.job_id));
    }
    Ok(ev)
}

impl JobLog {
    pub(crate) fn from_inner(inner: Arc<LogInner>) -> Self {
        JobLog { inner }
    }

    pub(crate) fn downgrade(&self) -> Weak<LogInner> {
        Arc::downgrade(&self.inner)
    }

    /// Opens the log of `job_id`: in its row if it lives there (a job recorded by this version
    /// whose log is still small), else in its files under `jobs_dir`, created if missing, a torn
    /// tail repaired.
    pub(crate) fn open(jobs_dir: &Path, job_id: &str, shared: Shared) -> Result<JobLog> {
        let paths = LogPaths::new(jobs_dir, job_id)?;
        let row = match rowlog::load(&shared.db, job_id)? {
            // The index is renamed into place only once the files hold every event, so if it is
            // there the files win: a crash came between that and the row's update, finished now.
            Some(_) if paths.index.exists() => {
                rowlog::moved_to_files(&shared.db, job_id)?;
                None
            }
            other => other,
        };
        let (place, next_seq) = match row {
            Some(text) => {
                let ends = row_ends(&text, job_id, &shared.db_path)?;
                let n = ends.len() as u64;
                (Place::Row { ends }, n)
            }
            None => open_files(jobs_dir, &paths, job_id)?,
        };
        Self::with(job_id, paths, shared, place, next_seq)
    }

    /// The log of a job whose row was inserted just now with an empty log (`''`): no files can
    /// exist for it, so this skips [`JobLog::open`]'s row read and index lookup.
    pub(crate) fn fresh(jobs_dir: &Path, job_id: &str, shared: Shared) -> Result<JobLog> {
        let paths = LogPaths::new(jobs_dir, job_id)?;
        Self::with(job_id, paths, shared, Place::Row { ends: Vec::new() }, 0)
    }

    fn with(job_id: &str, paths: LogPaths, shared: Shared, place: Place, next_seq: u64) -> Result<JobLog> {
        let inner = LogInner {
            job_id: job_id.to_string(),
            paths,
            committed: AtomicU64::new(next_seq),
            writer: Mutex::new(Writer { place, next_seq, buf: Vec::with_capacity(4096) }),
            data_reader: OnceLock::new(),
            index_reader: OnceLock::new(),
            shared,
        };
        if let Place::Files(f) = &lock(&inner.writer).place {
            inner.set_readers(f)?;
        }
        Ok(JobLog { inner: Arc::new(inner) })
    }

    /// The job this log belongs to.
    pub fn job_id(&self) -> &str {
        &self.inner.job_id
    }

    /// The seq the next appended event will get; also the number of acknowledged events.
    pub fn next_seq(&self) -> u64 {
        self.inner.committed.load(Ordering::Acquire)
    }

    /// Appends one event: assigns it the next seq, stamps `ts_ms`, writes it and returns it.
    /// Once this returns `Ok`, the event survives a crash of this process; under
    /// [`crate::ExitSync::Inline`] an `exit` event is also fsynced, so it and everything before
    /// it survive a power loss. Appending a job's `exit` event also records how the job ended in
    /// its record (in the same statement while the log lives in the row, right after the line
    /// otherwise), so callers need no [`crate::Store::set_job_state`] for it.
    ///
    /// On a write error nothing was appended (a partial write is cut off again) and the seq is
    /// not used up. The one exception is an `exit` event whose fsync, or (for a log in files)
    /// whose record in the job's row, failed: that event *was* appended (readers may already
    /// have it) and only its durability or the record is in doubt, so do not append it again.
    pub fn append(&self, kind: JobEventKind) -> Result<JobEvent> {
        self.append_locked(&mut lock(&self.inner.writer), kind)
    }

    /// Appends `kinds` in order as consecutive events. While the log lives in its job's row and
    /// they all still fit there, they are written by one statement, all or nothing (a job's
    /// result and its exit: one commit instead of two). Otherwise each is appended as by
    /// [`JobLog::append`], stopping at the first that fails. Returns the events appended and
    /// the error that stopped the rest, if any; an `exit` may only come last.
    pub fn append_all(&self, kinds: Vec<JobEventKind>) -> (Vec<JobEvent>, Option<StoreError>) {
        let mut guard = lock(&self.inner.writer);
        let w = &mut *guard;
        let mut kinds = kinds;
        if kinds.len() > 1 && matches!(w.place, Place::Row { .. }) {
            let events = numbered(&self.inner.job_id, w.next_seq, kinds);
            match self.append_row_batch(w, &events) {
                // Written: only an exit's fsync (under `ExitSync::Inline`) can still fail, and
                // then the events are appended all the same (see `append`).
                Ok(Batch::Written { ended }) => {
                    let synced = if ended { self.exit_written(w).err() } else { None };
                    return (events, synced);
                }
                Ok(Batch::DoesNotFit) => kinds = events.into_iter().map(|e| e.kind).collect(),
                Err(e) => return (Vec::new(), Some(e)),
            }
        }
        let mut appended = Vec::with_capacity(kinds.len());
        for kind in kinds {
            match self.append_locked(w, kind) {
                Ok(ev) => appended.push(ev),
                Err(e) => return (appended, Some(e)),
            }
        }
        (appended, None)
    }

    /// [`JobLog::append_all`]'s one statement for a log in its row, which also records the
    /// job's end if the last event is an `exit`. [`Batch::DoesNotFit`], with nothing written,
    /// when the batch would outgrow the row, holds an oversize event, or has an `exit` before
    /// its end. Encoding stops at the first event past the row's limits, so a large result is
    /// encoded at most once more by the event-by-event path.
    fn append_row_batch(&self, w: &mut Writer, events: &[JobEvent]) -> Result<Batch> {
        let inner = &*self.inner;
        let Place::Row { ends } = &mut w.place else { return Ok(Batch::DoesNotFit) };
        let base = ends.last().copied().unwrap_or(0);
        let mut lines = Vec::new();
        let mut new_ends = Vec::with_capacity(events.len());
        for (i, event) in events.iter().enumerate() {
            if i + 1 < events.len() && matches!(event.kind, JobEventKind::Exit { .. }) {
                return Ok(Batch::DoesNotFit);
            }
            encode(event, &mut w.buf).map_err(|e| StoreError::io(&inner.paths.data, e))?;
            // An oversize event is reported by `append`, for that event alone.
            let stop = base + (lines.len() + w.buf.len()) as u64;
            if w.buf.len() as u64 > MAX_EVENT_BYTES || outgrows_small(w.next_seq + i as u64 + 1, stop) {
                if w.buf.capacity() > (1 << 20) {
                    w.buf = Vec::with_capacity(4096);
                }
                return Ok(Batch::DoesNotFit);
            }
            lines.extend_from_slice(&w.buf);
            new_ends.push(stop);
        }
        let n = events.len() as u64;
        let end = match events.last() {
            Some(last) => rowlog::End::of(&last.kind, last.ts_ms)?,
            None => None,
        };
        // encode() writes serde_json output, which is always UTF-8.
        let text = std::str::from_utf8(&lines).map_err(|e| StoreError::corrupt(&inner.paths.data, e.to_string()))?;
        rowlog::append(&inner.shared.db, &inner.job_id, text, end.as_ref())?;
        ends.extend(new_ends);
        w.next_seq += n;
        inner.committed.store(w.next_seq, Ordering::Release);
        Ok(Batch::Written { ended: end.is_some() })
    }

    /// After an `exit` event is written: make it durable as [`crate::ExitSync`] says (ask the
    /// background syncer, or fsync now).
    fn exit_written(&self, w: &mut Writer) -> Result<()> {
        match &self.inner.shared.syncer {
            Some(syncer) => {
                syncer.mark_dirty();
                Ok(())
            }
            None => w.sync(&self.inner.paths, &self.inner.shared),
        }
    }

    fn append_locked(&self, w: &mut Writer, kind: JobEventKind) -> Result<JobEvent> {
        let inner = &*self.inner;
        let paths = &inner.paths;
        let seq = w.next_seq;
        let event = JobEvent { job_id: inner.job_id.clone(), seq, ts_ms: now_ms(), kind };
        encode(&event, &mut w.buf).map_err(|e| StoreError::io(&paths.data, e))?;
        if w.buf.len() as u64 > MAX_EVENT_BYTES {
            let bytes = w.buf.len() as u64;
            w.buf = Vec::with_capacity(4096);
            return Err(StoreError::EventTooLarge { job_id: inner.job_id.clone(), bytes, max: MAX_EVENT_BYTES });
        }
        let end = rowlog::End::of(&event.kind, event.ts_ms)?;
        // Whether the statement that wrote the event also recorded the job's end.
        let mut end_recorded = false;
        match &mut w.place {
            Place::Row { ends } => {
                let stop = ends.last().copied().unwrap_or(0) + w.buf.len() as u64;
                if outgrows_small(seq + 1, stop) {
                    let mut all = std::mem::take(ends);
                    all.push(stop);
                    let files = inner.move_to_files(&w.buf, &all)?;
                    w.place = Place::Files(files);
                } else {
                    // encode() writes serde_json output, which is always UTF-8.
                    let line =
                        std::str::from_utf8(&w.buf).map_err(|e| StoreError::corrupt(&paths.data, e.to_string()))?;
                    rowlog::append(&inner.shared.db, &inner.job_id, line, end.as_ref())?;
                    ends.push(stop);
                    end_recorded = true;
                }
            }
            Place::Files(f) => inner.append_to_files(f, &w.buf, seq)?,
        }
        let recorded = match &end {
            Some(e) if !end_recorded => rowlog::record_end(&inner.shared.db, &inner.job_id, e),
            _ => Ok(()),
        };
        // From here on the event is visible to readers, so it is committed even if the sync
        // below fails: rolling it back could let a reader see two different events with one seq.
        w.next_seq = seq + 1;
        if w.buf.capacity() > (1 << 20) {
            w.buf = Vec::with_capacity(4096);
        }
        inner.committed.store(seq + 1, Ordering::Release);
        if end.is_some() {
            // An error here means the event is written and readable but may not survive a
            // power loss; the caller hears about it, and must not append the event again.
            self.exit_written(w)?;
        }
        recorded?;
        Ok(event)
    }

    /// Flushes the log to stable storage (fsync), so every acknowledged event survives a power
    /// loss.
    pub fn sync(&self) -> Result<()> {
        lock(&self.inner.writer).sync(&self.inner.paths, &self.inner.shared)
    }

    /// Up to `max` events from `from_seq` on; see [`LogReader::read`] for the limits.
    pub fn read(&self, from_seq: u64, max: usize) -> Result<Vec<JobEvent>> {
        // Committed count first, place second: an append publishes the event before the count.
        let committed = self.next_seq();
        let inner = &self.inner;
        // A log without a data reader lives in its row, unless it moved to files since the
        // check (its readers are set before the row says so).
        if inner.data_reader.get().is_none()
            && let Some(text) = rowlog::load(&inner.shared.db, &inner.job_id)?
        {
            return parse_small(&inner.job_id, &inner.shared.db_path, text.as_bytes(), committed, from_seq, max);
        }
        let Some(data) = inner.data_reader.get() else {
            return Err(StoreError::corrupt(
                &inner.paths.data,
                "the job's record says its log is in files, but it is not",
            ));
        };
        match inner.index_reader.get() {
            Some(index) => read_events(&inner.job_id, &inner.paths, data, index, committed, u64::MAX, from_seq, max),
            None => read_small(&inner.job_id, &inner.paths, data, committed, from_seq, max),
        }
    }
}

impl LogInner {
    fn set_readers(&self, f: &Files) -> Result<()> {
        if let Some(index) = &f.index {
            let _ = self.index_reader.set(index.try_clone().map_err(|e| StoreError::io(&self.paths.index, e))?);
        }
        let _ = self.data_reader.set(f.data.try_clone().map_err(|e| StoreError::io(&self.paths.data, e))?);
        Ok(())
    }

    /// Moves a log that outgrew its row into files: the row's lines and `line` (the event that
    /// outgrew it) to the data file, the whole index (`ends`) renamed into place, and only then
    /// the row marked as moved. Readers follow the same order (index first, row second), so each
    /// sees either the row without the new event or the files with it. Before the rename,
    /// failure leaves the row as it was; after it, the event is appended whatever happens to the
    /// row's update (recovery at the next open finishes it).
    fn move_to_files(&self, line: &[u8], ends: &[u64]) -> Result<Files> {
        let paths = &self.paths;
        let text = rowlog::load(&self.shared.db, &self.job_id)?.unwrap_or_default();
        create_private_dir(&paths.dir)?;
        // Truncate: a data file left by a crash before an earlier attempt's rename holds nothing
        // anyone was promised.
        let data = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&paths.data)
            .map_err(|e| StoreError::io(&paths.data, e))?;
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(line);
        data.write_all_at(&bytes, 0).map_err(|e| StoreError::io(&paths.data, e))?;
        let index = write_index(ends, paths)?;
        let files = Files {
            data,
            index: Some(index),
            small_ends: Vec::new(),
            data_len: bytes.len() as u64,
            unsynced_dirs: vec![paths.dir.parent().unwrap_or(&paths.dir).to_path_buf(), paths.dir.clone()],
        };
        self.set_readers(&files)?;
        // The files are the log now (readers check the index first); a failure to say so in the
        // row is repaired by the next open, so it must not fail an append that readers can see.
        let _ = rowlog::moved_to_files(&self.shared.db, &self.job_id);
        Ok(files)
    }

    /// Writes `line` as event `seq` to a log in files: its line, then its index entry (or, for a
    /// small file log, the whole index once it outgrows small).
    fn append_to_files(&self, f: &mut Files, line: &[u8], seq: u64) -> Result<()> {
        let paths = &self.paths;
        let start = f.data_len;
        let end = start + line.len() as u64;
        let written = f.data.write_all_at(line, start).map_err(|e| StoreError::io(&paths.data, e)).and_then(|()| {
            match &f.index {
                Some(index) => {
                    index.write_all_at(&end.to_le_bytes(), seq * 8).map_err(|e| StoreError::io(&paths.index, e))
                }
                None if outgrows_small(seq + 1, end) => {
                    let mut ends = std::mem::take(&mut f.small_ends);
                    ends.push(end);
                    let built = write_index(&ends, paths).and_then(|index| {
                        match index.try_clone().map_err(|e| StoreError::io(&paths.index, e)) {
                            Ok(reader) => Ok((index, reader)),
                            Err(e) => {
                                let _ = std::fs::remove_file(&paths.index);
                                Err(e)
                            }
                        }
                    });
                    match built {
                        Ok((index, reader)) => {
                            let _ = self.index_reader.set(reader);
                            f.index = Some(index);
                            f.unsynced_dirs.push(paths.dir.clone());
                            Ok(())
                        }
                        Err(e) => {
                            ends.pop();
                            f.small_ends = ends;
                            Err(e)
                        }
                    }
                }
                None => {
                    f.small_ends.push(end);
                    Ok(())
                }
            }
        });
        if let Err(e) = written {
            // No index entry was written (and a small log's reader never looks past its limits),
            // so no reader has seen this event: cut off whatever part of it made it to the
            // files. Best effort: if this fails too, recovery on the next open drops the torn
            // tail.
            if let Some(index) = &f.index {
                let _ = index.set_len(seq * 8);
            }
            let _ = f.data.set_len(start);
            return Err(e);
        }
        f.data_len = end;
        Ok(())
    }
}

/// Where each line of a row log ends, checking that line `i` is event `i` of `job_id`. A row is
/// written by atomic commits, so it never holds a torn line: any other content is damage.
fn row_ends(text: &str, job_id: &str, db_path: &Path) -> Result<Vec<u64>> {
    let mut ends = Vec::new();
    let mut at = 0u64;
    for (seq, line) in (0u64..).zip(text.as_bytes().split_inclusive(|&b| b == b'\n')) {
        let Some(body) = line.strip_suffix(b"\n") else {
            return Err(StoreError::corrupt(db_path, format!("job `{job_id}`: the log in its record ends mid-line")));
        };
        parse_line(body, job_id, seq).map_err(|r| StoreError::corrupt(db_path, format!("job `{job_id}`: {r}")))?;
        at += line.len() as u64;
        ends.push(at);
    }
    Ok(ends)
}

/// Opens or creates the files of a log that does not live in a row, repairing a torn tail, and
/// returns it with its event count.
fn open_files(jobs_dir: &Path, paths: &LogPaths, job_id: &str) -> Result<(Place, u64)> {
    // The common case is a new log: one `open(O_CREAT|O_EXCL)` tells a new log from an existing
    // one, and the shard directory is created only when that fails for its lack.
    let mut new_dir = false;
    let created = match create_new(&paths.data) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            new_dir = true;
            create_private_dir(&paths.dir)?;
            create_new(&paths.data)
        }
        other => other,
    };
    let (data, new_file) = match created {
        Ok(f) => (f, true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => (open_rw(&paths.data)?, false),
        Err(e) => return Err(StoreError::io(&paths.data, e)),
    };
    // A new file log has no index (ids are fresh, so no stale one can be lying there); an
    // existing one has one if it outgrew small.
    let index = if new_file {
        None
    } else {
        match open_ro(&paths.index)? {
            Some(_) => Some(open_rw(&paths.index)?),
            None => None,
        }
    };
    // New directory entries must be durable before the log can be called durable, or a synced
    // log could vanish with its name after a power loss. Those fsyncs are deferred to the log's
    // first sync (its exit, usually), so opening a log costs no device flush.
    let mut unsynced_dirs = Vec::new();
    if new_dir {
        unsynced_dirs.push(jobs_dir.to_path_buf());
    }
    // An empty data file is new too (an older version created them ahead; decision 0005).
    let fresh = new_file || (index.is_none() && file_len(&data, &paths.data)? == 0);
    if fresh {
        unsynced_dirs.push(paths.dir.clone());
    }
    let (next_seq, data_len, mut small_ends) =
        if fresh { (0, 0, Vec::new()) } else { recover(&data, index.as_ref(), paths, job_id)? };
    let index = match index {
        // A crash while the log was outgrowing small: finish what the append began.
        None if outgrows_small(next_seq, data_len) => {
            unsynced_dirs.push(paths.dir.clone());
            let built = write_index(&small_ends, paths)?;
            small_ends = Vec::new();
            Some(built)
        }
        other => other,
    };
    Ok((Place::Files(Files { data, index, small_ends, data_len, unsynced_dirs }), next_seq))
}

/// Text payloads from this many bytes up take the [`encode`] path through `serde_json::Value`.
const BULKY_TEXT: usize = 1024;

/// Encodes `event` as one JSON line (ending in `\n`) into `buf`.
///
/// Events with large payloads are encoded through `Value`'s `Display` rather than
/// `serde_json::to_writer`. Both give the same compact JSON, but `to_writer` is generic, so its
/// string-escaping loop is compiled into *this* crate, at this crate's optimisation level: in an
/// unoptimised (test) build it runs at ~15 MB/s, which made a 200 MB log take 15 s to write.
/// `Value`'s `Display` uses the copy compiled once inside serde_json: ~700 MB/s in a debug build
/// and, measured, also faster in release for 64 KiB payloads (70 µs vs 109 µs). Small events keep
/// `to_writer`, which avoids building a `Value` (0.55 µs vs 2.3 µs per 200-byte event, release).
fn encode(event: &JobEvent, buf: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Write;
    buf.clear();
    let bulky = match &event.kind {
        JobEventKind::Stdout { data } | JobEventKind::Stderr { data } | JobEventKind::Pty { data } => {
            data.len() >= BULKY_TEXT
        }
        JobEventKind::Result { .. } | JobEventKind::Log { .. } => true,
        JobEventKind::Progress { .. } | JobEventKind::Exit { .. } | JobEventKind::ToolCall { .. } => false,
    };
    if bulky {
        let value = serde_json::to_value(event).map_err(std::io::Error::other)?;
        write!(buf, "{value}")?;
    } else {
        serde_json::to_writer(&mut *buf, event).map_err(std::io::Error::other)?;
    }
    buf.push(b'\n');
    Ok(())
}

fn sync_pair(data: &File, index: Option<&File>, paths: &LogPaths) -> Result<()> {
    data.sync_data().map_err(|e| StoreError::io(&paths.data, e))?;
    match index {
        Some(index) => index.sync_data().map_err(|e| StoreError::io(&paths.index, e)),
        None => Ok(()),
    }
}

/// Reads events `[from, min(limit, from + max))` of a small log (one without an index): the
/// complete lines in the first [`SMALL_LOG_BYTES`] of the data, at most [`SMALL_LOG_EVENTS`] of
/// them, all of which are acknowledged (see the module docs). `limit` is the writer's committed
/// count when known, else `u64::MAX`.
fn read_small(job_id: &str, paths: &LogPaths, data: &File, limit: u64, from: u64, max: usize) -> Result<Vec<JobEvent>> {
    if max == 0 || from >= limit.min(SMALL_LOG_EVENTS) {
        return Ok(Vec::new());
    }
    let len = file_len(data, &paths.data)?.min(SMALL_LOG_BYTES);
    let mut bytes = vec![0u8; len as usize];
    data.read_exact_at(&mut bytes, 0).map_err(|e| StoreError::io(&paths.data, e))?;
    parse_small(job_id, &paths.data, &bytes, limit, from, max)
}

/// Parses events `[from, min(limit, from + max))` out of the text of a small log (its first
/// [`SMALL_LOG_BYTES`] from a file, or its row), skipping a last line still being written.
fn parse_small(job_id: &str, source: &Path, bytes: &[u8], limit: u64, from: u64, max: usize) -> Result<Vec<JobEvent>> {
    let limit = limit.min(SMALL_LOG_EVENTS);
    if max == 0 || from >= limit {
        return Ok(Vec::new());
    }
    let want = (limit - from).min(max.min(READ_MAX_EVENTS) as u64);
    let mut out = Vec::new();
    for (seq, line) in (0u64..limit).zip(bytes.split_inclusive(|&b| b == b'\n')) {
        let Some(body) = line.strip_suffix(b"\n") else {
            break; // a line still being written: not acknowledged yet
        };
        if seq < from {
            continue;
        }
        out.push(parse_line(body, job_id, seq).map_err(|r| StoreError::corrupt(source, r))?);
        if out.len() as u64 == want {
            break;
        }
    }
    Ok(out)
}

/// How many acknowledged events a small log holds (see [`read_small`]).
fn count_small(paths: &LogPaths, data: &File) -> Result<u64> {
    let len = file_len(data, &paths.data)?.min(SMALL_LOG_BYTES);
    let mut bytes = vec![0u8; len as usize];
    data.read_exact_at(&mut bytes, 0).map_err(|e| StoreError::io(&paths.data, e))?;
    let lines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    Ok(lines.min(SMALL_LOG_EVENTS))
}

/// Reads the lines of events `[from, min(committed, from + max))`, within the byte budget, as
/// they are stored: the bytes and each line's end in them (each line ends in its newline).
/// `data_len` is the data file's length as last seen; index entries pointing beyond it (an
/// unrepaired crash) end the read early rather than failing. `None` when there is nothing to read.
fn read_span(
    paths: &LogPaths,
    data: &File,
    index: &File,
    committed: u64,
    data_len: u64,
    from: u64,
    max: usize,
) -> Result<Option<(Vec<u8>, Vec<usize>)>> {
    if max == 0 || from >= committed {
        return Ok(None);
    }
    let want = (committed - from).min(max.min(READ_MAX_EVENTS) as u64);
    // Entry `from - 1` gives the start of the first event.
    let first = from.saturating_sub(1);
    let count = want + u64::from(from > 0);
    let mut raw = vec![0u8; (count * 8) as usize];
    index.read_exact_at(&mut raw, first * 8).map_err(|e| StoreError::io(&paths.index, e))?;
    let mut entries = raw.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]));
    let start = if from > 0 { entries.next().unwrap_or(0) } else { 0 };

    // Choose how many events to take: monotonic ends, within data_len and the byte budget.
    let mut ends = Vec::with_capacity(want as usize);
    let mut prev = start;
    for end in entries {
        if end <= prev {
            return Err(StoreError::corrupt(
                &paths.index,
                format!("index entry {} ({end}) does not follow the previous one ({prev})", from + ends.len() as u64),
            ));
        }
        if end > data_len || (!ends.is_empty() && end - start > READ_BUDGET_BYTES) {
            break;
        }
        if end - prev > MAX_EVENT_BYTES {
            return Err(StoreError::corrupt(
                &paths.index,
                format!(
                    "index entry {} gives an event of {} bytes, more than any append writes",
                    from + ends.len() as u64,
                    end - prev
                ),
            ));
        }
        ends.push(end);
        prev = end;
    }
    let Some(&last) = ends.last() else {
        return Ok(None);
    };

    let mut bytes = vec![0u8; (last - start) as usize];
    data.read_exact_at(&mut bytes, start).map_err(|e| StoreError::io(&paths.data, e))?;
    let ends: Vec<usize> = ends.into_iter().map(|end| (end - start) as usize).collect();
    let mut at = 0usize;
    for (i, &stop) in ends.iter().enumerate() {
        if bytes[..stop].last() != Some(&b'\n') || stop <= at {
            let seq = from + i as u64;
            return Err(StoreError::corrupt(&paths.data, format!("event {seq} is not terminated by a newline")));
        }
        at = stop;
    }
    Ok(Some((bytes, ends)))
}

/// Reads events `[from, min(committed, from + max))` (see [`read_span`]), decoded.
#[allow(clippy::too_many_arguments)]
fn read_events(
    job_id: &str,
    paths: &LogPaths,
    data: &File,
    index: &File,
    committed: u64,
    data_len: u64,
    from: u64,
    max: usize,
) -> Result<Vec<JobEvent>> {
    let Some((bytes, ends)) = read_span(paths, data, index, committed, data_len, from, max)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(ends.len());
    let mut at = 0usize;
    for (i, stop) in ends.into_iter().enumerate() {
        let body = &bytes[at..stop - 1];
        out.push(parse_line(body, job_id, from + i as u64).map_err(|r| StoreError::corrupt(&paths.data, r))?);
        at = stop;
    }
    Ok(out)
}

/// Brings the files of a log back to a consistent state after whatever stopped the last
/// writer, and returns `(event count, data length, line ends)`; the line ends only for a log
/// without an index (a small one), whose lines are all scanned.
///
/// 1. The index is trusted up to its last entry that points at an intact line with the right
///    seq (entries past the data's end or past a torn line — possible after a power loss, when
///    the two files reached the disk in a different order — are dropped).
/// 2. Complete, well-formed lines after that point (written by an append that died before its
///    index entry) are kept, and their index entries written.
/// 3. Whatever follows — a torn line, garbage — is truncated away, as is a partial index entry.
///
/// This looks only at the tail, so opening a large intact log costs a few reads. If anything was
/// repaired, both files are fsynced before new appends.
fn recover(data: &File, index: Option<&File>, paths: &LogPaths, job_id: &str) -> Result<(u64, u64, Vec<u64>)> {
    let Some(index) = index else {
        return recover_small(data, paths, job_id);
    };
    let data_len = file_len(data, &paths.data)?;
    let index_len = file_len(index, &paths.index)?;
    let mut trusted = index_len / 8;
    // Walk back from the last entry to the first one that checks out.
    while trusted > 0 {
        let end = read_entry(index, &paths.index, trusted - 1)?;
        let start = match trusted {
            1 => 0,
            n => read_entry(index, &paths.index, n - 2)?,
        };
        if start < end && end <= data_len && end - start <= MAX_EVENT_BYTES {
            let mut line = vec![0u8; (end - start) as usize];
            data.read_exact_at(&mut line, start).map_err(|e| StoreError::io(&paths.data, e))?;
            if let Some(body) = line.strip_suffix(b"\n")
                && parse_line(body, job_id, trusted - 1).is_ok()
            {
                break;
            }
        }
        trusted -= 1;
    }
    let mut good_len = match trusted {
        0 => 0,
        n => read_entry(index, &paths.index, n - 1)?,
    };
    let mut count = trusted;
    let mut repaired = trusted * 8 != index_len;
    if trusted * 8 != index_len {
        index.set_len(trusted * 8).map_err(|e| StoreError::io(&paths.index, e))?;
    }

    // Re-index complete lines that follow the trusted prefix.
    if good_len < data_len {
        each_line(data, paths, good_len, |body, n| {
            if parse_line(body, job_id, count).is_err() {
                return Ok(false);
            }
            good_len += n;
            index.write_all_at(&good_len.to_le_bytes(), count * 8).map_err(|e| StoreError::io(&paths.index, e))?;
            count += 1;
            repaired = true;
            Ok(true)
        })?;
        if good_len < data_len {
            data.set_len(good_len).map_err(|e| StoreError::io(&paths.data, e))?;
            repaired = true;
        }
    }
    if repaired {
        sync_pair(data, Some(index), paths)?;
    }
    Ok((count, good_len, Vec::new()))
}

/// Hands each complete line of `data` from byte `from` on to `line` (without its `\n`, with the
/// bytes it took including the `\n`) until the end of the file, a torn last line, an over-long run
/// of garbage, or `line` returning `false`. Never buffers more than one maximal event.
fn each_line(data: &File, paths: &LogPaths, from: u64, mut line: impl FnMut(&[u8], u64) -> Result<bool>) -> Result<()> {
    let mut handle = data;
    handle.seek(SeekFrom::Start(from)).map_err(|e| StoreError::io(&paths.data, e))?;
    let mut reader = BufReader::with_capacity(64 << 10, handle);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_EVENT_BYTES + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| StoreError::io(&paths.data, e))?;
        let Some(body) = buf.strip_suffix(b"\n") else {
            return Ok(());
        };
        if !line(body, n as u64)? {
            return Ok(());
        }
    }
}

/// [`recover`] for a log without an index: keeps every line up to the last complete one that
/// parses as the event its position says (a damaged line before it stays, to be reported as
/// corrupt when read, as the index case does), and truncates whatever follows.
fn recover_small(data: &File, paths: &LogPaths, job_id: &str) -> Result<(u64, u64, Vec<u64>)> {
    let data_len = file_len(data, &paths.data)?;
    let mut ends = Vec::new();
    let (mut at, mut good_len, mut good_count) = (0u64, 0u64, 0usize);
    each_line(data, paths, 0, |body, n| {
        at += n;
        ends.push(at);
        if parse_line(body, job_id, ends.len() as u64 - 1).is_ok() {
            (good_len, good_count) = (at, ends.len());
        }
        Ok(true)
    })?;
    ends.truncate(good_count);
    if good_len < data_len {
        data.set_len(good_len).map_err(|e| StoreError::io(&paths.data, e))?;
        sync_pair(data, None, paths)?;
    }
    Ok((ends.len() as u64, good_len, ends))
}

/// A read-only view of one job's log that opens what it needs itself, for readers that are not
/// the writer (an attaching client, another thread). Never blocks the writer for longer than one
/// query of the job's row. Keep one per attached client to avoid reopening the files for every
/// batch.
pub struct LogReader {
    job_id: String,
    paths: LogPaths,
    /// Weak: a reader that outlives its store must not keep the database (and its locks) open.
    db: std::sync::Weak<Mutex<rusqlite::Connection>>,
    db_path: Arc<PathBuf>,
    /// `None` until the log is known to be in files and the data file exists (a job may be
    /// attached before its first event).
    data: Option<File>,
    /// `None` while the log has no index (in its row, or a small file log).
    index: Option<File>,
    /// Set once the log was found in files: it never moves back to a row.
    in_files: bool,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader").field("job_id", &self.job_id).field("in_files", &self.in_files).finish()
    }
}

/// Events as the log stores them, one line of JSON each (a serialized [`JobEvent`]), for a
/// reader that passes them on without decoding them: replaying a large log is then a copy,
/// not a parse and a re-encode of every event. Each line's job and seq are checked when it is
/// read (the same check a decoded read makes); the rest of the line is trusted as the log's
/// own writing, which recovery keeps whole.
#[derive(Debug, Default)]
pub struct EventLines {
    first_seq: u64,
    /// The lines back to back, each with its newline.
    text: String,
    /// Where each line ends in `text` (after its newline).
    ends: Vec<usize>,
}

impl EventLines {
    /// The lines of `events` (a dense run), encoded as the log stores them.
    pub fn encode(events: &[JobEvent]) -> Result<EventLines> {
        let mut text = Vec::new();
        let mut ends = Vec::with_capacity(events.len());
        let mut line = Vec::new();
        for e in events {
            encode(e, &mut line).map_err(|e| StoreError::Encode(serde_json::Error::io(e)))?;
            text.extend_from_slice(&line);
            ends.push(text.len());
        }
        // serde_json writes UTF-8; this never fails.
        let text =
            String::from_utf8(text).map_err(|e| StoreError::Encode(serde_json::Error::io(std::io::Error::other(e))))?;
        Ok(EventLines { first_seq: events.first().map_or(0, |e| e.seq), text, ends })
    }

    /// How many events.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The seq after the last event, if there is one.
    pub fn next_seq(&self) -> Option<u64> {
        (!self.is_empty()).then(|| self.first_seq + self.ends.len() as u64)
    }

    /// Each event's seq and its JSON (without the newline), in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &str)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .enumerate()
            .map(|(i, (a, b))| (self.first_seq + i as u64, &self.text[a..b - 1]))
    }

    /// The last event, decoded.
    pub fn last(&self) -> Option<JobEvent> {
        let (_, line) = self.iter().last()?;
        serde_json::from_str(line).ok()
    }
}

/// Checks that each of `ends`' lines in `bytes` is event `from + i` of `job_id` by the prefix
/// every stored line starts with (`{"job_id":"…","seq":N,`), without decoding the rest.
fn check_lines(bytes: &[u8], ends: &[usize], job_id: &str, from: u64, source: &Path) -> Result<()> {
    let head = format!("{{\"job_id\":{},\"seq\":", serde_json::Value::from(job_id));
    let mut at = 0;
    let mut digits = String::new();
    for (i, &end) in ends.iter().enumerate() {
        let seq = from + i as u64;
        digits.clear();
        {
            use std::fmt::Write;
            let _ = write!(digits, "{seq},");
        }
        let line = &bytes[at..end];
        let ok = line.strip_prefix(head.as_bytes()).is_some_and(|rest| rest.starts_with(digits.as_bytes()));
        if !ok {
            // Decode it to say what it is instead.
            let body = line.strip_suffix(b"\n").unwrap_or(line);
            parse_line(body, job_id, seq).map_err(|r| StoreError::corrupt(source, r))?;
            return Err(StoreError::corrupt(source, format!("event {seq} does not start as the log writes events")));
        }
        at = end;
    }
    Ok(())
}

/// What [`LogReader::locate`] found.
enum Found {
    /// The log lives in the job's row; here is its text.
    Row(String),
    /// The log lives in files (those that exist are open).
    Files,
}

impl LogReader {
    pub(crate) fn open(jobs_dir: &Path, job_id: &str, db: &Db, db_path: Arc<PathBuf>) -> Result<LogReader> {
        let paths = LogPaths::new(jobs_dir, job_id)?;
        let db = Arc::downgrade(db);
        Ok(LogReader { job_id: job_id.to_string(), paths, db, db_path, data: None, index: None, in_files: false })
    }

    /// Finds the log: an index file means files (it is renamed into place only once the files
    /// hold every event, before the row is marked as moved), else the row if it holds the log,
    /// else files. The data file is created before the index, so a reader that finds the index
    /// always finds a data file it describes.
    fn locate(&mut self) -> Result<Found> {
        if self.index.is_none() {
            self.index = open_ro(&self.paths.index)?;
        }
        if !self.in_files && self.index.is_none() {
            let db = self.db.upgrade().ok_or_else(|| StoreError::Closed { job_id: self.job_id.clone() })?;
            if let Some(text) = rowlog::load(&db, &self.job_id)? {
                return Ok(Found::Row(text));
            }
            // Moved since the check above? Then the index is there now.
            self.index = open_ro(&self.paths.index)?;
        }
        self.in_files = true;
        if self.data.is_none() {
            self.data = open_ro(&self.paths.data)?;
        }
        Ok(Found::Files)
    }

    /// The job this reader follows.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// How many events can be read now (the seq after the last one).
    pub fn next_seq(&mut self) -> Result<u64> {
        if let Found::Row(text) = self.locate()? {
            return Ok(text.bytes().filter(|&b| b == b'\n').count() as u64);
        }
        let paths = &self.paths;
        let (Some(data), Some(index)) = (&self.data, &self.index) else {
            return match &self.data {
                Some(data) => count_small(paths, data),
                None => Ok(0),
            };
        };
        let mut n = file_len(index, &paths.index)? / 8;
        let data_len = file_len(data, &paths.data)?;
        // Only an unrepaired crash leaves entries past the data's end; skip them.
        while n > 0 && read_entry(index, &paths.index, n - 1)? > data_len {
            n -= 1;
        }
        Ok(n)
    }

    /// Up to `max` events from `from_seq` on, in seq order and dense. Fewer when the log ends,
    /// when more than [`READ_MAX_EVENTS`] are asked for, or when the next event would take the
    /// batch past [`READ_BUDGET_BYTES`] (a batch always holds at least one event if one is
    /// there). Empty when `from_seq` is at or past the end. Never sees a partial event.
    pub fn read(&mut self, from_seq: u64, max: usize) -> Result<Vec<JobEvent>> {
        if let Found::Row(text) = self.locate()? {
            return parse_small(&self.job_id, &self.db_path, text.as_bytes(), u64::MAX, from_seq, max);
        }
        let paths = &self.paths;
        let (Some(data), Some(index)) = (&self.data, &self.index) else {
            return match &self.data {
                Some(data) => read_small(&self.job_id, paths, data, u64::MAX, from_seq, max),
                None => Ok(Vec::new()),
            };
        };
        // Index length first, data length second: an entry we count points at data that was
        // written before it, so the data length read afterwards covers it.
        let committed = file_len(index, &paths.index)? / 8;
        let data_len = file_len(data, &paths.data)?;
        read_events(&self.job_id, paths, data, index, committed, data_len, from_seq, max)
    }
}

impl LogReader {
    /// [`LogReader::read`], as the stored lines rather than decoded events (see [`EventLines`]).
    /// A log still in its row or a small file is decoded and encoded again: it is small.
    pub fn read_lines(&mut self, from_seq: u64, max: usize) -> Result<EventLines> {
        let found = self.locate()?;
        let paths = &self.paths;
        let (Found::Files, Some(data), Some(index)) = (found, &self.data, &self.index) else {
            return EventLines::encode(&self.read(from_seq, max)?);
        };
        let committed = file_len(index, &paths.index)? / 8;
        let data_len = file_len(data, &paths.data)?;
        let Some((bytes, ends)) = read_span(paths, data, index, committed, data_len, from_seq, max)? else {
            return Ok(EventLines::default());
        };
        check_lines(&bytes, &ends, &self.job_id, from_seq, &paths.data)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            StoreError::corrupt(&paths.data, format!("the log is not UTF-8 near byte {}", e.utf8_error().valid_up_to()))
        })?;
        Ok(EventLines { first_seq: from_seq, text, ends })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_never_change() {
        // Logs written by one build must be found by the next: these values are pinned (and
        // match an independent FNV-1a 64 implementation).
        assert_eq!(shard("j_0"), "42");
        assert_eq!(shard("job-1"), "f6");
        assert_eq!(shard(""), "25");
    }

    #[test]
    fn ids_that_could_escape_the_jobs_dir_are_refused() {
        for bad in ["", ".", "..", ".hidden", "a/b", "a\\b", "a b", "é", &"x".repeat(129)] {
            assert!(validate_id(bad).is_err(), "{bad:?} must be refused");
        }
        for good in ["j_0", "a.b-c_D9", &"x".repeat(128)] {
            assert!(validate_id(good).is_ok(), "{good:?} must be accepted");
        }
    }
}
