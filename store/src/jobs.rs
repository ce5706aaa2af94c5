//! Job records: what was asked, by which session, under which idempotency key, and how it
//! ended. The events a job produced live in its log (`log.rs`), not here. This file does not
//! run, cancel or schedule jobs; it records the gateway's decisions and repairs the record of
//! jobs a crashed gateway left behind ([`Store::mark_running_lost`]), and forgets jobs that
//! ended long ago ([`Store::delete_ended`]).

use axp_protocol::methods::JobState;
use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Embedded, JobLog, Result, StoreError, from_sql_int, to_sql_int};

/// What one [`crate::Store::delete_ended`] pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Jobs, each with its whole log.
    pub jobs: usize,
    /// Sessions that had expired before the cutoff and had no job left.
    pub sessions: usize,
}

/// How many job rows one look at the table reads under the connection's lock.
const SCAN_CHUNK: i64 = 256;

/// One job as the gateway started it, and its outcome once known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job id (also names its log files, so `[A-Za-z0-9_.-]`, at most 128 bytes).
    pub id: String,
    /// The session that started it.
    pub session_id: String,
    /// `tool`, `command` or `code`.
    pub kind: String,
    /// What was asked (the `job.start` parameters that matter), as JSON.
    pub spec: Value,
    /// Where it is in its life.
    pub state: JobState,
    /// The exit code of a process, when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended it (`SIGKILL`, …), if any.
    pub signal: Option<String>,
    /// Why it failed, as a JSON-RPC-style error object, if it did.
    pub error: Option<Value>,
    /// When it was started (ms since the Unix epoch).
    pub created_ms: u64,
    /// When it reached a terminal state.
    pub ended_ms: Option<u64>,
    /// The client's idempotency key: a second `job.start` in the same session with the same key
    /// gets this job back instead of starting another.
    pub idempotency_key: Option<String>,
}

/// The outcome of [`crate::Store::create_job`].
#[derive(Debug, Clone, PartialEq)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per job.start and matched at once, never stored in bulk; boxing would only add an allocation"
)]
pub enum Created {
    /// The record was inserted: the caller should start the job.
    New,
    /// The session already has a job with this idempotency key; here it is, and nothing was
    /// inserted. The caller must not start anything.
    Existing(JobRecord),
}

/// What [`crate::Store::start_job`] did.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per job.start and matched at once, never stored in bulk; boxing would only add an allocation"
)]
pub enum Started {
    /// The record was inserted; here is its (empty) log to run the job with.
    New(JobLog),
    /// The session already has a job with this idempotency key; nothing was inserted.
    Existing(JobRecord),
}

const COLUMNS: &str =
    "id, session_id, kind, spec, state, exit_code, signal, error, created_ms, ended_ms, idempotency_key";

/// A row in [`COLUMNS`] order, before its JSON and enum columns are decoded.
struct RawJob {
    id: String,
    session_id: String,
    kind: String,
    spec: String,
    state: String,
    exit_code: Option<i32>,
    signal: Option<String>,
    error: Option<String>,
    created_ms: i64,
    ended_ms: Option<i64>,
    idempotency_key: Option<String>,
}

fn raw_job(row: &Row<'_>) -> rusqlite::Result<RawJob> {
    Ok(RawJob {
        id: row.get(0)?,
        session_id: row.get(1)?,
        kind: row.get(2)?,
        spec: row.get(3)?,
        state: row.get(4)?,
        exit_code: row.get(5)?,
        signal: row.get(6)?,
        error: row.get(7)?,
        created_ms: row.get(8)?,
        ended_ms: row.get(9)?,
        idempotency_key: row.get(10)?,
    })
}

impl Embedded {
    fn finish_job(&self, raw: RawJob) -> Result<JobRecord> {
        let bad = |what: &str, e: &dyn std::fmt::Display| {
            StoreError::corrupt(self.db_path(), format!("job `{}` has an unreadable {what}: {e}", raw.id))
        };
        let spec = serde_json::from_str(&raw.spec).map_err(|e| bad("spec", &e))?;
        let state = raw.state.parse().map_err(|e| bad("state", &e))?;
        let error = match &raw.error {
            Some(text) => Some(serde_json::from_str(text).map_err(|e| bad("error", &e))?),
            None => None,
        };
        Ok(JobRecord {
            id: raw.id,
            session_id: raw.session_id,
            kind: raw.kind,
            spec,
            state,
            exit_code: raw.exit_code,
            signal: raw.signal,
            error,
            created_ms: from_sql_int(raw.created_ms),
            ended_ms: raw.ended_ms.map(from_sql_int),
            idempotency_key: raw.idempotency_key,
        })
    }

    /// [`Store::create_job`], and for a new job its log, ready for appending. Cheaper than
    /// `create_job` then [`Store::log`]: the log of a row inserted just now is known to be empty
    /// and in the row, so nothing is read back.
    pub(crate) fn start_job(&self, job: &JobRecord) -> Result<Started> {
        match self.create_job(job)? {
            Created::New => Ok(Started::New(self.fresh_log(&job.id)?.into())),
            Created::Existing(existing) => Ok(Started::Existing(existing)),
        }
    }

    /// Records a new job, atomically with respect to its idempotency key: if the session already
    /// has a job with `job.idempotency_key`, nothing is inserted and that job is returned as
    /// [`Created::Existing`]. Different sessions may use the same key. A duplicate job id is
    /// [`StoreError::AlreadyExists`].
    pub(crate) fn create_job(&self, job: &JobRecord) -> Result<Created> {
        crate::log::validate_id(&job.id)?;
        let spec = serde_json::to_string(&job.spec)?;
        let error = job.error.as_ref().map(serde_json::to_string).transpose()?;
        let raw = {
            let db = self.db();
            // One statement decides: the UNIQUE(session_id, idempotency_key) index makes the
            // insert a no-op when the key is taken, even against another connection. A clash on
            // the primary key is not covered by this ON CONFLICT clause and fails loudly.
            let inserted = db
                .prepare_cached(&format!(
                    "INSERT INTO jobs ({COLUMNS}, log) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, '')
                     ON CONFLICT(session_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
                ))?
                .execute(params![
                    job.id,
                    job.session_id,
                    job.kind,
                    spec,
                    job.state.as_str(),
                    job.exit_code,
                    job.signal,
                    error,
                    to_sql_int(job.created_ms),
                    job.ended_ms.map(to_sql_int),
                    job.idempotency_key,
                ]);
            match inserted {
                Ok(1) => return Ok(Created::New),
                Ok(_) => {}
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY =>
                {
                    return Err(StoreError::AlreadyExists { what: "job", id: job.id.clone() });
                }
                Err(e) => return Err(e.into()),
            }
            db.prepare_cached(&format!("SELECT {COLUMNS} FROM jobs WHERE session_id = ?1 AND idempotency_key = ?2"))?
                .query_row(params![job.session_id, job.idempotency_key], raw_job)?
        };
        Ok(Created::Existing(self.finish_job(raw)?))
    }

    /// The job `id`; `None` if it never existed.
    pub(crate) fn get_job(&self, id: &str) -> Result<Option<JobRecord>> {
        let raw = {
            let db = self.db();
            db.prepare_cached(&format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"))?
                .query_row([id], raw_job)
                .optional()?
        };
        raw.map(|r| self.finish_job(r)).transpose()
    }

    /// Every job of session `session_id`, oldest first.
    pub(crate) fn list_jobs(&self, session_id: &str) -> Result<Vec<JobRecord>> {
        let raws = {
            let db = self.db();
            let mut stmt = db
                .prepare_cached(&format!("SELECT {COLUMNS} FROM jobs WHERE session_id = ?1 ORDER BY created_ms, id"))?;
            stmt.query_map([session_id], raw_job)?.collect::<rusqlite::Result<Vec<_>>>()?
        };
        raws.into_iter().map(|r| self.finish_job(r)).collect()
    }

    /// Every job in `state`, across sessions, oldest first (e.g. the jobs awaiting approval).
    pub(crate) fn jobs_in_state(&self, state: JobState) -> Result<Vec<JobRecord>> {
        let raws = {
            let db = self.db();
            // The state is written into the statement (it is one of a few fixed words, never
            // input) so that SQLite can use the partial index of live jobs for live states.
            let mut stmt = db.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE state = '{}' ORDER BY created_ms, id",
                state.as_str()
            ))?;
            stmt.query_map([], raw_job)?.collect::<rusqlite::Result<Vec<_>>>()?
        };
        raws.into_iter().map(|r| self.finish_job(r)).collect()
    }

    /// Records where job `id` is now and, for a terminal state, how it ended. Every field is
    /// overwritten (pass `None` to clear). [`StoreError::NotFound`] if the job does not exist.
    ///
    /// When a job ends, append its `exit` event to the log *first* and call this second: if the
    /// gateway dies in between, [`Store::mark_running_lost`] restores the outcome from the log.
    pub(crate) fn set_job_state(
        &self,
        id: &str,
        state: JobState,
        exit_code: Option<i32>,
        signal: Option<String>,
        error: Option<Value>,
        ended_ms: Option<u64>,
    ) -> Result<()> {
        let error = error.as_ref().map(serde_json::to_string).transpose()?;
        let db = self.db();
        let n = db
            .prepare_cached(
                "UPDATE jobs SET state = ?2, exit_code = ?3, signal = ?4, error = ?5, ended_ms = ?6
                 WHERE id = ?1",
            )?
            .execute(params![id, state.as_str(), exit_code, signal, error, ended_ms.map(to_sql_int)])?;
        if n == 0 {
            return Err(StoreError::NotFound { what: "job", id: id.to_string() });
        }
        Ok(())
    }

    /// Call once at gateway start, before serving: every job recorded as `running` was running
    /// in a process that is gone. For each one:
    ///
    /// * if its log already ends with an `exit` event (the gateway died after logging the end but
    ///   before [`Store::set_job_state`]), the record takes the outcome from that event;
    /// * otherwise an `exit` event with state `lost` is appended to its log (so attached clients
    ///   see the log end) and the record becomes `lost` with `ended_ms = now_ms`.
    ///
    /// Jobs in `awaiting_approval` are left alone: they never started. Returns how many jobs
    /// became `lost`. Reads each affected log's last event, so call it from a blocking context.
    pub(crate) fn mark_running_lost(&self, now_ms: u64) -> Result<usize> {
        let running: Vec<String> = {
            let db = self.db();
            // Literal, so that the partial index of live jobs applies (see `jobs_in_state`).
            let mut stmt = db.prepare_cached("SELECT id FROM jobs WHERE state = 'running'")?;
            stmt.query_map([], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?
        };
        let open = |id: &str| self.log(id).map(JobLog::from);
        let record =
            |id: &str, state, code, signal, error, ended| self.set_job_state(id, state, code, signal, error, ended);
        let mut lost = 0;
        for id in running {
            if crate::lost::end_as_lost(&id, now_ms, crate::lost::LOST_HERE, &open, &record)? {
                lost += 1;
            }
        }
        Ok(lost)
    }
}

impl Embedded {
    /// Deletes at most `max` jobs that ended before `ended_before_ms`, oldest first, with their
    /// logs (row and files), then the sessions that expired before it and have no job left.
    ///
    /// The table is read in rowid order, a chunk at a time, so the one connection is never held
    /// for a scan of the whole table (an index on `ended_ms` would make every job's end, on the
    /// hot path of a tool call, write one more index). Rows go first, in one transaction, then
    /// files: a crash in between leaves files that belong to no job, never a job whose log is
    /// gone.
    pub(crate) fn delete_ended(&self, ended_before_ms: u64, max: usize) -> Result<Deleted> {
        let cutoff = to_sql_int(ended_before_ms);
        let mut ids: Vec<String> = Vec::new();
        let mut after = 0i64;
        'scan: while ids.len() < max {
            let chunk: Vec<(i64, String, String, Option<i64>)> = {
                let db = self.db();
                let mut stmt = db.prepare_cached(
                    "SELECT rowid, id, state, ended_ms FROM jobs WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
                )?;
                stmt.query_map(params![after, SCAN_CHUNK], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect::<rusqlite::Result<_>>()?
            };
            if chunk.is_empty() {
                break;
            }
            for (rowid, id, state, ended) in chunk {
                after = rowid;
                let live = state == JobState::Running.as_str() || state == JobState::AwaitingApproval.as_str();
                if !live && ended.is_some_and(|e| e < cutoff) {
                    ids.push(id);
                    if ids.len() >= max {
                        break 'scan;
                    }
                }
            }
        }
        if !ids.is_empty() {
            let mut db = self.db();
            let tx = db.transaction()?;
            {
                let mut stmt = tx.prepare_cached("DELETE FROM jobs WHERE id = ?1")?;
                for id in &ids {
                    stmt.execute([id])?;
                }
            }
            tx.commit()?;
        }
        for id in &ids {
            crate::log::remove_files(self.jobs_dir(), id)?;
        }
        let sessions = self
            .db()
            .prepare_cached(
                "DELETE FROM sessions WHERE expires_ms < ?1 \
                 AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.session_id = sessions.id)",
            )?
            .execute([cutoff])?;
        Ok(Deleted { jobs: ids.len(), sessions })
    }
}
