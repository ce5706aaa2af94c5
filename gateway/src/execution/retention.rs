//! Forgetting what ended long ago: with `[store] keep_ended_jobs_days`, a task deletes the jobs
//! that ended before the cutoff, each with its whole log, and the sessions that expired as long
//! ago with no job left, at start and then every hour. It deletes in batches with a pause
//! between them, so a large backlog never holds the store (one SQLite connection, or a
//! PostgreSQL pool thread) for long. Every replica of a shared database runs it; the deletes
//! are idempotent. Running jobs and jobs awaiting approval are never touched (the store's
//! rule).

use std::time::Duration;

use axp_store::{Deleted, Store};

/// How often the pass runs after the first, at start.
const EVERY: Duration = Duration::from_secs(3600);

/// Jobs deleted per store call.
const BATCH: usize = 500;

/// The pause between two batches of one pass.
const PAUSE: Duration = Duration::from_millis(50);

/// Starts the task; it runs for the life of the runtime.
pub fn spawn(store: Store, keep: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let cutoff = crate::util::now_ms().saturating_sub(u64::try_from(keep.as_millis()).unwrap_or(u64::MAX));
            match pass(&store, cutoff).await {
                Ok(d) if d == Deleted::default() => {}
                Ok(d) => tracing::info!(
                    jobs = d.jobs,
                    sessions = d.sessions,
                    keep_days = keep.as_secs() / 86_400,
                    "deleted jobs that ended, and sessions that expired, before the retention cutoff"
                ),
                Err(e) => tracing::warn!(error = %e, "deleting old jobs failed; the next pass tries again"),
            }
        }
    });
}

/// One pass: batches until one comes back short.
async fn pass(store: &Store, cutoff: u64) -> Result<Deleted, String> {
    let mut total = Deleted::default();
    loop {
        let s = store.clone();
        let d = match tokio::task::spawn_blocking(move || s.delete_ended(cutoff, BATCH)).await {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(e) => return Err(format!("the pass stopped: {e}")),
        };
        total.jobs += d.jobs;
        total.sessions += d.sessions;
        if d.jobs < BATCH {
            return Ok(total);
        }
        tokio::time::sleep(PAUSE).await;
    }
}
