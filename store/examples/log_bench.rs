//! Append throughput of a job log, with and without an fsync per event, measured in one run so
//! the ratio compares like with like. Run it in release mode:
//!
//! ```text
//! cargo run --release -p axp-store --example log_bench -- [EVENTS] [EVENT_BYTES]
//! ```
//!
//! It prints events/s and MB/s for (a) plain appends (the gateway's path: `write(2)` only, so an
//! event survives a gateway crash), (b) appends followed by `sync()` (fsync each event, so it
//! survives power loss), and (c) reads of the whole log back; then the ratio (a)/(b). This is a
//! measurement tool, not a test: it asserts nothing about speed.

use std::time::{Duration, Instant};

use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::{ExitSync, JobRecord, Store, StoreOptions};

fn report(label: &str, events: u64, bytes: u64, took: Duration) -> f64 {
    let secs = took.as_secs_f64();
    let eps = events as f64 / secs;
    println!(
        "{label:<28} {events:>9} events  {:>10.0} events/s  {:>8.1} MB/s  ({:.3} s)",
        eps,
        bytes as f64 / secs / 1e6,
        secs
    );
    eps
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let events: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200_000);
    let event_bytes: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(256);
    // fsync per event is orders of magnitude slower; fewer events keep the run short.
    let synced_events = (events / 1000).clamp(100, 1_000);

    let tmp = std::env::temp_dir().join(format!("axp-log-bench-{}", std::process::id()));
    let store = Store::open(&tmp)?;
    let data = "x".repeat(event_bytes);
    println!("event payload: {event_bytes} bytes of stdout; state dir {}", tmp.display());

    let log = store.log("plain")?;
    let t = Instant::now();
    for _ in 0..events {
        log.append(JobEventKind::Stdout { data: data.clone() })?;
    }
    let plain = t.elapsed();
    let plain_bytes =
        std::fs::metadata(store.dir().join("jobs").join(shard_of(&store, "plain")?).join("plain.jsonl"))?.len();
    let a = report("append (write only)", events, plain_bytes, plain);

    let log = store.log("synced")?;
    let t = Instant::now();
    for _ in 0..synced_events {
        log.append(JobEventKind::Stdout { data: data.clone() })?;
        log.sync()?;
    }
    let synced = t.elapsed();
    let per_event = plain_bytes / events.max(1);
    let b = report("append + fsync per event", synced_events, per_event * synced_events, synced);

    let mut reader = store.log_reader("plain")?;
    let t = Instant::now();
    let mut next = 0;
    while next < events {
        next += reader.read(next, 4096)?.len() as u64;
    }
    report("read back (parse)", events, plain_bytes, t.elapsed());

    println!("ratio write-only / fsync-per-event: {:.1}x", a / b);

    // A whole small job as the gateway records it, under each exit-sync policy.
    let jobs = (events / 200).clamp(100, 2_000);
    let inline = lifecycle(&store, "inline", jobs)?;
    let batched_dir = tmp.with_extension("batched");
    let batched_store = Store::open_with(
        &batched_dir,
        StoreOptions::default().exit_sync(ExitSync::Batched { interval: Duration::from_millis(100) }),
    )?;
    let batched = lifecycle(&batched_store, "batched", jobs)?;
    let t = Instant::now();
    batched_store.sync_all()?;
    println!("final sync_all (syncfs)      {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
    println!("ratio batched / inline exit sync: {:.1}x", batched / inline);
    drop(batched_store);
    std::fs::remove_dir_all(&batched_dir)?;
    drop(reader);
    drop(log);
    drop(store);
    std::fs::remove_dir_all(&tmp)?;
    Ok(())
}

/// Records `jobs` small jobs as the gateway does — create the record, open the log, two output
/// events, the exit event, the final state — and returns jobs per second.
fn lifecycle(store: &Store, label: &str, jobs: u64) -> Result<f64, Box<dyn std::error::Error>> {
    let t = Instant::now();
    let mut in_db = Duration::ZERO;
    for i in 0..jobs {
        let id = format!("{label}-{i}");
        let db_start = Instant::now();
        store.create_job(&JobRecord {
            id: id.clone(),
            session_id: "bench".into(),
            kind: "tool".into(),
            spec: serde_json::json!({"tool": "echo", "arguments": {"message": "hi"}}),
            state: JobState::Running,
            exit_code: None,
            signal: None,
            error: None,
            created_ms: 0,
            ended_ms: None,
            idempotency_key: None,
        })?;
        in_db += db_start.elapsed();
        let log = store.log(&id)?;
        log.append(JobEventKind::Progress { progress: 0.5, total: Some(1.0), message: None })?;
        log.append(JobEventKind::Stdout { data: "hi\n".into() })?;
        log.append(JobEventKind::Exit { state: JobState::Exited, code: Some(0), signal: None, error: None })?;
        let db_start = Instant::now();
        store.set_job_state(&id, JobState::Exited, Some(0), None, None, Some(1))?;
        in_db += db_start.elapsed();
    }
    let took = t.elapsed().as_secs_f64();
    let per_s = jobs as f64 / took;
    println!(
        "{:<28} {jobs:>9} jobs    {per_s:>10.0} jobs/s    {:>8.3} ms/job ({:.3} ms in SQLite)",
        format!("job lifecycle, {label} sync"),
        took * 1e3 / jobs as f64,
        in_db.as_secs_f64() * 1e3 / jobs as f64
    );
    Ok(per_s)
}

/// The shard directory holding `id`'s log (found by listing, so the bench does not depend on
/// the private shard function).
fn shard_of(store: &Store, id: &str) -> std::io::Result<String> {
    for d in std::fs::read_dir(store.dir().join("jobs"))? {
        let d = d?;
        if d.path().join(format!("{id}.jsonl")).exists() {
            return Ok(d.file_name().to_string_lossy().into_owned());
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::NotFound, "log file"))
}
