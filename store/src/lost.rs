//! Ending a job whose process is gone, the same way on every backend: a log that already ends
//! with an `exit` (the process died after logging its end, before recording it) gives the job
//! its outcome; any other log gets an `exit` with state `lost` after its last event, so every
//! acknowledged event stays and attached clients see the log end. The embedded store runs it
//! for its running jobs at start; PostgreSQL for a replica's own jobs at start and for the jobs
//! of replicas whose lease ran out.

use axp_protocol::methods::{JobEvent, JobEventKind, JobState};
use serde_json::Value;

use crate::{JobLog, Result, StoreError};

/// Why a job this gateway ran is `lost` after it restarts.
pub(crate) const LOST_HERE: &str = "the gateway stopped while this job was running; its log up to that point is intact";

/// How many times an append that met another writer's events reads the log again.
const CONFLICT_ATTEMPTS: u32 = 5;

/// A job's record update, as `set_job_state` of either backend takes it.
pub(crate) type Record<'a> =
    dyn Fn(&str, JobState, Option<i32>, Option<String>, Option<Value>, Option<u64>) -> Result<()> + 'a;

/// Ends running job `id` (see the module docs), its log opened by `open` and its record set by
/// `record`; `now_ms` is the end a `lost` job is given and `why` its reason. `true` when the
/// job became `lost`.
///
/// On PostgreSQL the append names the seq it expects, so if the job's old owner is still
/// writing (a replica that lost its lease without dying) one of the two appends fails with
/// [`StoreError::Conflict`] rather than interleaving; this one then reads the log again.
pub(crate) fn end_as_lost(
    id: &str,
    now_ms: u64,
    why: &str,
    open: &dyn Fn(&str) -> Result<JobLog>,
    record: &Record<'_>,
) -> Result<bool> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let log = open(id)?;
        let last = match log.next_seq().checked_sub(1) {
            Some(seq) => log.read(seq, 1)?.pop(),
            None => None,
        };
        if let Some(JobEvent { kind: JobEventKind::Exit { state, code, signal, error }, ts_ms, .. }) = last {
            record(id, state, code, signal, error, Some(ts_ms))?;
            return Ok(state == JobState::Lost);
        }
        let error = serde_json::json!({ "reason": why });
        let appended = log.append(JobEventKind::Exit {
            state: JobState::Lost,
            code: None,
            signal: None,
            error: Some(error.clone()),
        });
        match appended {
            Ok(_) => {}
            Err(StoreError::Conflict { .. }) if attempts < CONFLICT_ATTEMPTS => continue,
            Err(e) => return Err(e),
        }
        // The append recorded the end already, stamped with the clock; the record takes the
        // caller's `now_ms`, as documented.
        record(id, JobState::Lost, None, None, Some(error), Some(now_ms))?;
        return Ok(true);
    }
}
