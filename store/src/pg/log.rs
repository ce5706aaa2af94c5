//! Job logs in PostgreSQL: where a job's event lines live, the one writer that appends them,
//! and readers (an attaching client on any replica) that never see a partial or reordered log.
//!
//! # Layout
//!
//! * **Small logs live in the job's row** (`jobs.log`, with `jobs.log_events` counting its
//!   lines), as in the embedded store (decision 0006): while a log holds at most
//!   [`SMALL_LOG_EVENTS`] events in at most [`SMALL_LOG_BYTES`], an append is one `UPDATE` of the
//!   row, and a job's `exit` records its end in the same statement. Every tool call stays there.
//! * **A log that outgrows its row moves to chunks**, in one transaction: the row's lines become
//!   the first sealed chunk (`job_log_chunks`: many lines in one row, keyed by the seq after its
//!   last line), the new event goes to the tail (`job_log_tail`: one row per event) and the row's
//!   log becomes NULL. Each later event is one tail row. Once the tail holds [`CHUNK_EVENTS`]
//!   events or [`CHUNK_BYTES`], the writer seals it: one statement deletes those tail rows and
//!   inserts them, concatenated in seq order, as one chunk — or, if it would not move exactly
//!   the lines it expects, fails whole. A replay of a large log therefore reads a few chunk rows
//!   per 4 MiB (one index range scan) plus at most one chunk's worth of tail rows, rather than
//!   one row per event.
//!
//! # Readers
//!
//! A read is one statement — the row's log, the chunks from the asked seq on, the tail from it
//! on — so it runs on one snapshot: a move or a seal committed meanwhile is seen whole or not
//! at all, and every line is checked to be the event its position says.
//!
//! # Appends
//!
//! One writer per job: [`crate::Store::log`] hands out one shared writer per process, and an
//! append to a row names the count it expects (`log_events = seq`) while a tail append's key is
//! `(job, seq)`, so a second writer elsewhere (another replica) fails with
//! [`StoreError::Conflict`] instead of interleaving. An event is acknowledged once its commit
//! returned: it survives the gateway at once, and the server's crash after the WAL's next
//! flush — or at once for an `exit` under [`ExitSync::Inline`], which commits with
//! `synchronous_commit = on`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use axp_protocol::methods::{JobEvent, JobEventKind};

use super::Shared;
use super::pool::Conn;
use crate::log::{MAX_EVENT_BYTES, READ_BUDGET_BYTES, READ_MAX_EVENTS, SMALL_LOG_BYTES, SMALL_LOG_EVENTS, numbered};
use crate::{ExitSync, Result, StoreError, lock, now_ms, to_sql_int};

/// The tail is sealed into a chunk once it holds this many events ...
pub(crate) const CHUNK_EVENTS: u64 = 512;

/// ... or this many bytes.
pub(crate) const CHUNK_BYTES: u64 = 256 << 10;

/// Whether a log of `events` events in `bytes` bytes no longer fits its row.
fn outgrows_row(events: u64, bytes: u64) -> bool {
    events > SMALL_LOG_EVENTS || bytes > SMALL_LOG_BYTES
}

/// Encodes `event` as its log line (ending in `\n`). Large payloads go through `Value`'s
/// `Display`, as the embedded log does, for the reason `log.rs` gives (the generic writer is
/// slow in unoptimised builds).
fn encode(event: &JobEvent) -> Result<String> {
    let bulky = match &event.kind {
        JobEventKind::Stdout { data } | JobEventKind::Stderr { data } | JobEventKind::Pty { data } => {
            data.len() >= 1024
        }
        JobEventKind::Result { .. } | JobEventKind::Log { .. } => true,
        JobEventKind::Progress { .. } | JobEventKind::Exit { .. } | JobEventKind::ToolCall { .. } => false,
    };
    let mut line = if bulky { serde_json::to_value(event)?.to_string() } else { serde_json::to_string(event)? };
    line.push('\n');
    Ok(line)
}

/// Parses `line` (without its newline) as event `seq` of `job_id`.
fn parse(line: &str, job_id: &str, seq: u64, target: &str) -> Result<JobEvent> {
    let ev: JobEvent = serde_json::from_str(line)
        .map_err(|e| StoreError::corrupt(target, format!("job `{job_id}`: event {seq}: {e}")))?;
    if ev.seq != seq || ev.job_id != job_id {
        return Err(StoreError::corrupt(
            target,
            format!("job `{job_id}`: expected event {seq}, found event {} of job `{}`", ev.seq, ev.job_id),
        ));
    }
    Ok(ev)
}

/// How a job ended, as its `exit` event says, in the columns' types.
#[derive(Clone)]
struct End {
    state: &'static str,
    code: Option<i32>,
    signal: Option<String>,
    error: Option<String>,
    ended_ms: i64,
}

impl End {
    fn of(event: &JobEvent) -> Result<Option<End>> {
        let JobEventKind::Exit { state, code, signal, error } = &event.kind else { return Ok(None) };
        Ok(Some(End {
            state: state.as_str(),
            code: *code,
            signal: signal.clone(),
            error: error.as_ref().map(serde_json::to_string).transpose()?,
            ended_ms: to_sql_int(event.ts_ms),
        }))
    }
}

/// Where the writer's events go.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// In the job's row, which holds `bytes` of lines.
    Row { bytes: u64 },
    /// In chunks; the tail holds the events from `tail_from` on, in `tail_bytes`.
    Chunks { tail_from: u64, tail_bytes: u64 },
}

struct Writer {
    place: Place,
    next_seq: u64,
    /// A write failed with its connection (the server or the network went away): whether it
    /// committed is not known until the stored log is read again (see [`PgLog::settle`]).
    in_doubt: bool,
}

pub(crate) struct PgLogInner {
    job_id: String,
    /// Events acknowledged so far, published after each commit.
    committed: AtomicU64,
    writer: Mutex<Writer>,
    shared: Arc<Shared>,
}

/// The writer of one job's log in PostgreSQL. Cheap to clone; clones share one writer.
#[derive(Clone)]
pub(crate) struct PgLog {
    inner: Arc<PgLogInner>,
}

impl std::fmt::Debug for PgLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLog").field("job_id", &self.inner.job_id).field("next_seq", &self.next_seq()).finish()
    }
}

/// What one append writes: the events' lines, in one round trip.
struct Write {
    job_id: String,
    seq: u64,
    lines: String,
    count: u64,
    end: Option<End>,
}

impl PgLog {
    pub(crate) fn from_inner(inner: Arc<PgLogInner>) -> Self {
        PgLog { inner }
    }

    pub(crate) fn downgrade(&self) -> Weak<PgLogInner> {
        Arc::downgrade(&self.inner)
    }

    fn with(job_id: &str, shared: Arc<Shared>, place: Place, next_seq: u64) -> PgLog {
        PgLog {
            inner: Arc::new(PgLogInner {
                job_id: job_id.to_string(),
                committed: AtomicU64::new(next_seq),
                writer: Mutex::new(Writer { place, next_seq, in_doubt: false }),
                shared,
            }),
        }
    }

    /// The log of a job inserted just now: empty, in its row.
    pub(crate) fn fresh(job_id: &str, shared: Arc<Shared>) -> PgLog {
        Self::with(job_id, shared, Place::Row { bytes: 0 }, 0)
    }

    /// The log of an existing job, wherever it lives. [`StoreError::NotFound`] without a job.
    pub(crate) fn open(job_id: &str, shared: Arc<Shared>) -> Result<PgLog> {
        crate::log::validate_id(job_id)?;
        let Some((place, next_seq)) = locate(job_id, &shared)? else {
            return Err(StoreError::NotFound { what: "job", id: job_id.to_string() });
        };
        Ok(Self::with(job_id, shared, place, next_seq))
    }

    pub(crate) fn job_id(&self) -> &str {
        &self.inner.job_id
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.inner.committed.load(Ordering::Acquire)
    }

    /// After a write whose answer was lost with its connection, reads the stored log to learn
    /// whether it committed, before anything else is appended. Its events are offered again
    /// (the gateway holds back what the store did not take, in order), so stored events past
    /// the writer's count that are the first of `kinds` are the lost write's: they are returned
    /// as appended, and the writer goes on after them. Anything else past its count is another
    /// writer's ([`StoreError::Conflict`], as for any append). Without this, the retry was
    /// refused as a conflict and the job's later output dropped.
    fn settle(&self, w: &mut Writer, kinds: &[JobEventKind]) -> Result<Vec<JobEvent>> {
        if !w.in_doubt {
            return Ok(Vec::new());
        }
        let job_id = &self.inner.job_id;
        let Some((place, stored)) = locate(job_id, &self.inner.shared)? else {
            return Err(StoreError::NotFound { what: "job", id: job_id.clone() });
        };
        let extra = stored.checked_sub(w.next_seq).unwrap_or(u64::MAX);
        let mut found: Vec<JobEvent> = Vec::new();
        if extra > 0 && extra <= kinds.len() as u64 {
            while (found.len() as u64) < extra {
                let from = w.next_seq + found.len() as u64;
                let batch = read(&self.inner.shared, job_id, from, (extra as usize) - found.len())?;
                if batch.is_empty() {
                    break;
                }
                found.extend(batch);
            }
        }
        let ours = found.len() as u64 == extra.min(kinds.len() as u64 + 1)
            && found.iter().zip(kinds).all(|(e, k)| &e.kind == k);
        if extra > 0 && !ours {
            return Err(StoreError::Conflict {
                job_id: job_id.clone(),
                reason: format!(
                    "its log holds {stored} events where this writer counted {}: another writer appended to it",
                    w.next_seq
                ),
            });
        }
        w.place = place;
        w.next_seq = stored;
        w.in_doubt = false;
        self.inner.committed.store(stored, Ordering::Release);
        Ok(found)
    }

    /// Appends one event (see [`crate::JobLog::append`]).
    pub(crate) fn append(&self, kind: JobEventKind) -> Result<JobEvent> {
        let mut w = lock(&self.inner.writer);
        if let Some(stored) = self.settle(&mut w, std::slice::from_ref(&kind))?.pop() {
            return Ok(stored);
        }
        let event = JobEvent { job_id: self.inner.job_id.clone(), seq: w.next_seq, ts_ms: now_ms(), kind };
        let line = encode(&event)?;
        if line.len() as u64 > MAX_EVENT_BYTES {
            return Err(StoreError::EventTooLarge {
                job_id: self.inner.job_id.clone(),
                bytes: line.len() as u64,
                max: MAX_EVENT_BYTES,
            });
        }
        let end = End::of(&event)?;
        self.write(&mut w, line, 1, end)?;
        Ok(event)
    }

    /// Appends `kinds` as consecutive events: in one statement, all or nothing, while the log is
    /// in its row and they all fit there; one by one otherwise (see [`crate::JobLog::append_all`]).
    pub(crate) fn append_all(&self, mut kinds: Vec<JobEventKind>) -> (Vec<JobEvent>, Option<StoreError>) {
        let mut w = lock(&self.inner.writer);
        match self.settle(&mut w, &kinds) {
            Err(e) => return (Vec::new(), Some(e)),
            Ok(stored) if !stored.is_empty() => {
                drop(w);
                let rest = kinds.split_off(stored.len());
                let (more, error) = if rest.is_empty() { (Vec::new(), None) } else { self.append_all(rest) };
                return (stored.into_iter().chain(more).collect(), error);
            }
            Ok(_) => {}
        }
        if kinds.len() > 1
            && let Place::Row { bytes } = w.place
        {
            let events = numbered(&self.inner.job_id, w.next_seq, kinds);
            let exit_before_last =
                events[..events.len() - 1].iter().any(|e| matches!(e.kind, JobEventKind::Exit { .. }));
            let lines: Result<Vec<String>> = events.iter().map(encode).collect();
            let lines = match lines {
                Ok(l) => l,
                Err(e) => return (Vec::new(), Some(e)),
            };
            let total: u64 = lines.iter().map(|l| l.len() as u64).sum();
            let fits = !exit_before_last
                && lines.iter().all(|l| l.len() as u64 <= MAX_EVENT_BYTES)
                && !outgrows_row(w.next_seq + events.len() as u64, bytes + total);
            if fits {
                let end = match events.last().map(End::of).transpose() {
                    Ok(end) => end.flatten(),
                    Err(e) => return (Vec::new(), Some(e)),
                };
                let n = events.len() as u64;
                return match self.write(&mut w, lines.concat(), n, end) {
                    Ok(()) => (events, None),
                    Err(e) => (Vec::new(), Some(e)),
                };
            }
            drop(w);
            return self.append_each(events.into_iter().map(|e| e.kind).collect());
        }
        drop(w);
        self.append_each(kinds)
    }

    fn append_each(&self, kinds: Vec<JobEventKind>) -> (Vec<JobEvent>, Option<StoreError>) {
        let mut appended = Vec::with_capacity(kinds.len());
        for kind in kinds {
            match self.append(kind) {
                Ok(ev) => appended.push(ev),
                Err(e) => return (appended, Some(e)),
            }
        }
        (appended, None)
    }

    /// Writes `count` events' `lines` (from the writer's next seq) where the log lives, moving
    /// it out of its row first if they do not fit (only ever for a single event), then seals
    /// the tail if it is full. Publishes the events once committed.
    fn write(&self, w: &mut Writer, lines: String, count: u64, end: Option<End>) -> Result<()> {
        let inner = &*self.inner;
        let durable = end.is_some() && inner.shared.exit_sync == ExitSync::Inline;
        let len = lines.len() as u64;
        let op = Write { job_id: inner.job_id.clone(), seq: w.next_seq, lines, count, end };
        let written = match w.place {
            Place::Row { bytes } if !outgrows_row(w.next_seq + count, bytes + len) => inner
                .shared
                .pool
                .run(move |c| append_to_row(c, &op, durable))
                .map(|()| Place::Row { bytes: bytes + len }),
            Place::Row { .. } => {
                let from = w.next_seq;
                inner
                    .shared
                    .pool
                    .run(move |c| move_to_chunks(c, &op, durable))
                    .map(|()| Place::Chunks { tail_from: from, tail_bytes: len })
            }
            Place::Chunks { tail_from, tail_bytes } => inner
                .shared
                .pool
                .run(move |c| append_to_tail(c, &op, durable))
                .map(|()| Place::Chunks { tail_from, tail_bytes: tail_bytes + len }),
        };
        let place = match written {
            Ok(place) => place,
            Err(e) => {
                // The statement may have committed before the connection went: the next
                // append reads the stored log first.
                w.in_doubt |= e.is_unavailable();
                return Err(e);
            }
        };
        w.next_seq += count;
        w.place = place;
        inner.committed.store(w.next_seq, Ordering::Release);
        if let Place::Chunks { tail_from, tail_bytes } = place
            && (w.next_seq - tail_from >= CHUNK_EVENTS || tail_bytes >= CHUNK_BYTES)
        {
            let (job_id, to) = (inner.job_id.clone(), w.next_seq);
            // A failed seal leaves the tail as it was (the statement is all or nothing); the
            // events are acknowledged either way, and the next append tries again.
            if inner.shared.pool.run(move |c| seal(c, &job_id, tail_from, to)).is_ok() {
                w.place = Place::Chunks { tail_from: to, tail_bytes: 0 };
            }
        }
        Ok(())
    }

    /// Makes every acknowledged event survive a crash of the server.
    pub(crate) fn sync(&self) -> Result<()> {
        let _w = lock(&self.inner.writer);
        flush(&self.inner.shared)
    }

    /// Up to `max` events from `from_seq` on (see [`crate::LogReader::read`]).
    pub(crate) fn read(&self, from_seq: u64, max: usize) -> Result<Vec<JobEvent>> {
        let committed = self.next_seq();
        let max = max.min(usize::try_from(committed.saturating_sub(from_seq)).unwrap_or(usize::MAX));
        read(&self.inner.shared, &self.inner.job_id, from_seq, max)
    }
}

/// Where a job's log lives and how many events it holds, as stored; `None` without the job.
fn locate(job_id: &str, shared: &Shared) -> Result<Option<(Place, u64)>> {
    let id = job_id.to_string();
    shared.pool.read(move |c| {
        let rows = c.query(
            "SELECT log IS NOT NULL, log_events, COALESCE(octet_length(log), 0)::bigint,
                        (SELECT max(next_seq) FROM job_log_chunks WHERE job_id = $1),
                        (SELECT min(seq) FROM job_log_tail WHERE job_id = $1),
                        (SELECT max(seq) + 1 FROM job_log_tail WHERE job_id = $1),
                        (SELECT COALESCE(sum(octet_length(line)), 0)::bigint FROM job_log_tail WHERE job_id = $1)
                 FROM jobs WHERE id = $1",
            &[&id],
        )?;
        Ok(rows.first().map(|r| {
            let in_row: bool = r.get(0);
            let u = |v: i64| u64::try_from(v).unwrap_or(0);
            if in_row {
                (Place::Row { bytes: u(r.get(2)) }, u(r.get(1)))
            } else {
                let chunks_end = r.get::<_, Option<i64>>(3).map_or(0, u);
                let tail_end = r.get::<_, Option<i64>>(5).map_or(0, u);
                let next = chunks_end.max(tail_end);
                let tail_from = r.get::<_, Option<i64>>(4).map_or(next, u);
                (Place::Chunks { tail_from, tail_bytes: u(r.get(6)) }, next)
            }
        }))
    })
}

/// Converts a driver error on the tail's key into the conflict it means.
fn conflict_on_tail(e: StoreError, job_id: &str, seq: u64) -> StoreError {
    if super::violates(&e, "job_log_tail_pkey") {
        return StoreError::Conflict {
            job_id: job_id.to_string(),
            reason: format!("event {seq} is already in its log: another writer appends to it"),
        };
    }
    e
}

fn row_conflict(job_id: &str, seq: u64) -> StoreError {
    StoreError::Conflict {
        job_id: job_id.to_string(),
        reason: format!(
            "its log in its record no longer holds {seq} events: another writer appended to it or moved it"
        ),
    }
}

fn append_to_row(c: &mut Conn, op: &Write, durable: bool) -> Result<()> {
    let (id, lines, n, seq) = (&op.job_id, &op.lines, to_sql_int(op.count), to_sql_int(op.seq));
    let changed = match &op.end {
        None => c.execute(
            "UPDATE jobs SET log = log || $2, log_events = log_events + $3
             WHERE id = $1 AND log IS NOT NULL AND log_events = $4",
            &[id, lines, &n, &seq],
        )?,
        Some(e) => c.execute_maybe_durable(
            durable,
            "UPDATE jobs SET log = log || $2, log_events = log_events + $3,
                    state = $5, exit_code = $6, signal = $7, error = $8, ended_ms = $9
             WHERE id = $1 AND log IS NOT NULL AND log_events = $4",
            &[id, lines, &n, &seq, &e.state, &e.code, &e.signal, &e.error, &e.ended_ms],
        )?,
    };
    if changed == 0 {
        return Err(row_conflict(id, op.seq));
    }
    Ok(())
}

fn move_to_chunks(c: &mut Conn, op: &Write, durable: bool) -> Result<()> {
    let body = |tx: &mut super::pool::Tx<'_>| {
        let (id, seq) = (&op.job_id, to_sql_int(op.seq));
        let rows = tx.query(
            "SELECT log FROM jobs WHERE id = $1 AND log IS NOT NULL AND log_events = $2 FOR UPDATE",
            &[id, &seq],
        )?;
        let Some(row) = rows.first() else { return Err(row_conflict(id, op.seq)) };
        let old: String = row.get(0);
        if op.seq > 0 {
            tx.execute(
                "INSERT INTO job_log_chunks (job_id, first_seq, next_seq, lines) VALUES ($1, 0, $2, $3)",
                &[id, &seq, &old],
            )?;
        }
        tx.execute("INSERT INTO job_log_tail (job_id, seq, line) VALUES ($1, $2, $3)", &[id, &seq, &op.lines])
            .map_err(|e| conflict_on_tail(e, id, op.seq))?;
        match &op.end {
            None => tx.execute("UPDATE jobs SET log = NULL, log_events = 0 WHERE id = $1", &[id])?,
            Some(e) => tx.execute(
                "UPDATE jobs SET log = NULL, log_events = 0,
                        state = $2, exit_code = $3, signal = $4, error = $5, ended_ms = $6
                 WHERE id = $1",
                &[id, &e.state, &e.code, &e.signal, &e.error, &e.ended_ms],
            )?,
        };
        Ok(())
    };
    if durable { c.durable(body) } else { c.transaction(body) }
}

fn append_to_tail(c: &mut Conn, op: &Write, durable: bool) -> Result<()> {
    let (id, seq) = (&op.job_id, to_sql_int(op.seq));
    let result = match &op.end {
        None => c
            .execute("INSERT INTO job_log_tail (job_id, seq, line) VALUES ($1, $2, $3)", &[id, &seq, &op.lines])
            .map(drop),
        // One statement: the line and the job's end commit together.
        Some(e) => c
            .execute_maybe_durable(
                durable,
                "WITH line AS (INSERT INTO job_log_tail (job_id, seq, line) VALUES ($1, $2, $3))
                 UPDATE jobs SET state = $4, exit_code = $5, signal = $6, error = $7, ended_ms = $8 WHERE id = $1",
                &[id, &seq, &op.lines, &e.state, &e.code, &e.signal, &e.error, &e.ended_ms],
            )
            .map(drop),
    };
    result.map_err(|e| conflict_on_tail(e, id, op.seq))
}

/// Moves the tail's events `[from, to)` into one chunk, in one statement. If the tail does not
/// hold exactly those events, the chunk's text is NULL, which its NOT NULL constraint refuses,
/// so the whole statement — the delete included — fails and nothing moves.
fn seal(c: &mut Conn, job_id: &str, from: u64, to: u64) -> Result<()> {
    let (from, to) = (to_sql_int(from), to_sql_int(to));
    c.execute(
        "WITH moved AS (
             DELETE FROM job_log_tail WHERE job_id = $1 AND seq >= $2 AND seq < $3 RETURNING seq, line
         )
         INSERT INTO job_log_chunks (job_id, first_seq, next_seq, lines)
         SELECT $1, $2, $3, CASE WHEN count(*) = $3 - $2 THEN string_agg(line, '' ORDER BY seq) END FROM moved",
        &[&job_id, &from, &to],
    )?;
    Ok(())
}

/// See [`super::Postgres::sync_all`].
pub(crate) fn flush(shared: &Shared) -> Result<()> {
    shared.pool.run(|c| {
        c.durable(|tx| {
            // Gives the transaction an id, so that it writes a commit record to wait for.
            tx.query("SELECT pg_current_xact_id()::text", &[])?;
            Ok(())
        })
    })
}

/// Events `[from, from + max)` of `job_id`, at most [`READ_MAX_EVENTS`] and about
/// [`READ_BUDGET_BYTES`] (at least one event if there is one), dense and in order.
fn read(shared: &Shared, job_id: &str, from: u64, max: usize) -> Result<Vec<JobEvent>> {
    let max = max.min(READ_MAX_EVENTS);
    if max == 0 {
        return Ok(Vec::new());
    }
    let id = job_id.to_string();
    let name = shared.pool.target().name.clone();
    let (from_sql, budget) = (to_sql_int(from), to_sql_int(READ_BUDGET_BYTES));
    let chunk_limit = to_sql_int(1 + READ_BUDGET_BYTES / CHUNK_BYTES);
    let tail_limit = to_sql_int(max as u64);
    let rows = shared.pool.read(move |c| {
        // One statement, so one snapshot (see the module docs). Each part stops within the
        // byte budget on the server (a row is taken if what precedes it is under the budget),
        // so a read never transfers much more than the budget and one row.
        let rows = c.query(
            "SELECT 0::int2 AS part, 0::int8 AS first, log AS text FROM jobs WHERE id = $1 AND log IS NOT NULL
             UNION ALL
             SELECT 1::int2, first_seq, lines FROM (
                 SELECT first_seq, next_seq, lines,
                        sum(octet_length(lines)) OVER (ORDER BY next_seq) - octet_length(lines) AS before
                 FROM (SELECT first_seq, next_seq, lines FROM job_log_chunks
                       WHERE job_id = $1 AND next_seq > $2 ORDER BY next_seq LIMIT $4) c
             ) c WHERE before < $3
             UNION ALL
             SELECT 2::int2, seq, line FROM (
                 SELECT seq, line, sum(octet_length(line)) OVER (ORDER BY seq) - octet_length(line) AS before
                 FROM (SELECT seq, line FROM job_log_tail WHERE job_id = $1 AND seq >= $2 ORDER BY seq LIMIT $5) t
             ) t WHERE before < $3
             ORDER BY part, first",
            &[&id, &from_sql, &budget, &chunk_limit, &tail_limit],
        )?;
        Ok(rows.into_iter().map(|r| (r.get::<_, i64>(1), r.get::<_, String>(2))).collect::<Vec<_>>())
    })?;
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let mut expect = from;
    'rows: for (first, text) in rows {
        let mut seq = u64::try_from(first).unwrap_or(0);
        for line in text.split_inclusive('\n') {
            let Some(body) = line.strip_suffix('\n') else {
                return Err(StoreError::corrupt(
                    &name,
                    format!("job `{job_id}`: a stored line ends without a newline"),
                ));
            };
            if seq < expect {
                seq += 1;
                continue;
            }
            if seq != expect {
                // The chunks stopped at the byte budget or their row limit while the tail did
                // not: the batch ends where they stopped. A gap before any event is damage.
                if !out.is_empty() {
                    break 'rows;
                }
                return Err(StoreError::corrupt(
                    &name,
                    format!("job `{job_id}`: event {expect} is missing from its log"),
                ));
            }
            if out.len() >= max || (!out.is_empty() && bytes + line.len() as u64 > READ_BUDGET_BYTES) {
                break 'rows;
            }
            out.push(parse(body, job_id, seq, &name)?);
            bytes += line.len() as u64;
            seq += 1;
            expect += 1;
        }
    }
    Ok(out)
}

/// A reader of one job's log, for any thread and any replica. Holds the store weakly: a reader
/// that outlives its store fails with [`StoreError::Closed`].
pub(crate) struct PgReader {
    job_id: String,
    shared: Weak<Shared>,
}

impl std::fmt::Debug for PgReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgReader").field("job_id", &self.job_id).finish()
    }
}

impl PgReader {
    pub(crate) fn new(job_id: &str, shared: Weak<Shared>) -> PgReader {
        PgReader { job_id: job_id.to_string(), shared }
    }

    fn shared(&self) -> Result<Arc<Shared>> {
        self.shared.upgrade().ok_or_else(|| StoreError::Closed { job_id: self.job_id.clone() })
    }

    pub(crate) fn job_id(&self) -> &str {
        &self.job_id
    }

    /// How many events can be read now. A job that does not exist has none.
    pub(crate) fn next_seq(&mut self) -> Result<u64> {
        let shared = self.shared()?;
        let id = self.job_id.clone();
        shared.pool.read(move |c| {
            let rows = c.query(
                "SELECT COALESCE(
                     (SELECT CASE WHEN log IS NOT NULL THEN log_events END FROM jobs WHERE id = $1),
                     GREATEST((SELECT max(next_seq) FROM job_log_chunks WHERE job_id = $1),
                              (SELECT max(seq) + 1 FROM job_log_tail WHERE job_id = $1),
                              0))",
                &[&id],
            )?;
            Ok(rows.first().map_or(0, |r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
        })
    }

    /// Up to `max` events from `from_seq` on (see [`crate::LogReader::read`]).
    pub(crate) fn read(&mut self, from_seq: u64, max: usize) -> Result<Vec<JobEvent>> {
        read(&*self.shared()?, &self.job_id, from_seq, max)
    }
}
