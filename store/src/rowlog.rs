//! Small job logs kept in the job's own row (decision 0006): while a job's log is small (at most
//! [`crate::log::SMALL_LOG_EVENTS`] events in at most [`crate::log::SMALL_LOG_BYTES`]), its
//! JSON lines are the `jobs.log` column, and appending an event is one `UPDATE` of that row. A
//! tool call (two or three events) therefore never creates a file. `log.rs` decides when a log
//! lives here and when it moves to files; this file owns only the SQL, and the fsync of the WAL
//! that makes what it wrote survive a power loss.
//!
//! `jobs.log` is `''` for a new job, the log's lines (each ending in `\n`) while it is small, and
//! NULL once the log lives in files (and for every job recorded before schema 4, whose logs were
//! always files). A committed `UPDATE` is atomic, so a row never holds a torn line: after a
//! crash the row holds exactly the events whose append committed.

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axp_protocol::methods::{JobEventKind, JobState};
use rusqlite::{Connection, OptionalExtension, params};

use crate::{Result, StoreError, lock, to_sql_int};

/// The store's one connection, shared with every open log.
pub(crate) type Db = Arc<Mutex<Connection>>;

/// How a job ended, as its `exit` event says (recorded with the event, in the same statement).
pub(crate) struct End<'a> {
    state: JobState,
    code: Option<i32>,
    signal: Option<&'a str>,
    error: Option<String>,
    ended_ms: u64,
}

impl<'a> End<'a> {
    /// The end an event records, if it is an `exit` event.
    pub(crate) fn of(kind: &'a JobEventKind, ts_ms: u64) -> Result<Option<End<'a>>> {
        let JobEventKind::Exit { state, code, signal, error } = kind else {
            return Ok(None);
        };
        let error = error.as_ref().map(serde_json::to_string).transpose()?;
        Ok(Some(End { state: *state, code: *code, signal: signal.as_deref(), error, ended_ms: ts_ms }))
    }
}

/// The lines in job `id`'s row while its log lives there; `None` when it lives in files, or
/// when there is no such job (logs opened without a job record are always files).
pub(crate) fn load(db: &Db, id: &str) -> Result<Option<String>> {
    let db = lock(db);
    let found: Option<Option<String>> =
        db.prepare_cached("SELECT log FROM jobs WHERE id = ?1")?.query_row([id], |r| r.get(0)).optional()?;
    Ok(found.flatten())
}

/// Appends `line` (one encoded event and its `\n`) to job `id`'s row log and, for an `exit`
/// event, records the job's end in the same statement. Fails, appending nothing, if the log
/// does not live in the row.
pub(crate) fn append(db: &Db, id: &str, line: &str, end: Option<&End<'_>>) -> Result<()> {
    let db = lock(db);
    let n = match end {
        None => db
            .prepare_cached("UPDATE jobs SET log = log || ?2 WHERE id = ?1 AND log IS NOT NULL")?
            .execute(params![id, line])?,
        Some(e) => db
            .prepare_cached(
                "UPDATE jobs SET log = log || ?2, state = ?3, exit_code = ?4, signal = ?5, error = ?6, ended_ms = ?7
                 WHERE id = ?1 AND log IS NOT NULL",
            )?
            .execute(params![id, line, e.state.as_str(), e.code, e.signal, e.error, to_sql_int(e.ended_ms)])?,
    };
    if n == 0 {
        return Err(StoreError::NotFound { what: "job whose log is in its record", id: id.to_string() });
    }
    Ok(())
}

/// Records a job's end for a log that lives in files (after its `exit` line was written). A log
/// with no job record (only the store's own tests open those) has nothing to update.
pub(crate) fn record_end(db: &Db, id: &str, e: &End<'_>) -> Result<()> {
    lock(db)
        .prepare_cached(
            "UPDATE jobs SET state = ?2, exit_code = ?3, signal = ?4, error = ?5, ended_ms = ?6 WHERE id = ?1",
        )?
        .execute(params![id, e.state.as_str(), e.code, e.signal, e.error, to_sql_int(e.ended_ms)])?;
    Ok(())
}

/// Marks job `id`'s log as living in files: called once its files hold every event (the index
/// was renamed into place), and by recovery when a crash came between the two.
pub(crate) fn moved_to_files(db: &Db, id: &str) -> Result<()> {
    lock(db).prepare_cached("UPDATE jobs SET log = NULL WHERE id = ?1")?.execute([id])?;
    Ok(())
}

/// Makes every committed transaction survive a power loss: the database runs with
/// `synchronous=NORMAL` (no fsync per commit), so what is not yet checkpointed is in the WAL,
/// which this fdatasyncs. (What a checkpoint moved into the database file was synced by it.)
pub(crate) fn sync_wal(db_path: &Path) -> Result<()> {
    let mut wal = db_path.as_os_str().to_owned();
    wal.push("-wal");
    match File::open(&wal) {
        Ok(f) => f.sync_data().map_err(|e| StoreError::io(&wal, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::io(&wal, e)),
    }
}
