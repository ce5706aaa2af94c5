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

use axp_protocol::methods::JobEventKind;
use axp_store::Store;

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
    let events: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(200_000);
    let event_bytes: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(256);
    // fsync per event is orders of magnitude slower; fewer events keep the run short.
    let synced_events = (events / 100).clamp(200, 5_000);

    let tmp = std::env::temp_dir().join(format!("axp-log-bench-{}", std::process::id()));
    let store = Store::open(&tmp)?;
    let data = "x".repeat(event_bytes);
    println!(
        "event payload: {event_bytes} bytes of stdout; state dir {}",
        tmp.display()
    );

    let log = store.log("plain")?;
    let t = Instant::now();
    for _ in 0..events {
        log.append(JobEventKind::Stdout { data: data.clone() })?;
    }
    let plain = t.elapsed();
    let plain_bytes = std::fs::metadata(
        store
            .dir()
            .join("jobs")
            .join(shard_of(&store, "plain")?)
            .join("plain.jsonl"),
    )?
    .len();
    let a = report("append (write only)", events, plain_bytes, plain);

    let log = store.log("synced")?;
    let t = Instant::now();
    for _ in 0..synced_events {
        log.append(JobEventKind::Stdout { data: data.clone() })?;
        log.sync()?;
    }
    let synced = t.elapsed();
    let per_event = plain_bytes / events.max(1);
    let b = report(
        "append + fsync per event",
        synced_events,
        per_event * synced_events,
        synced,
    );

    let mut reader = store.log_reader("plain")?;
    let t = Instant::now();
    let mut next = 0;
    while next < events {
        next += reader.read(next, 4096)?.len() as u64;
    }
    report("read back (parse)", events, plain_bytes, t.elapsed());

    println!("ratio write-only / fsync-per-event: {:.1}x", a / b);
    drop(reader);
    drop(log);
    drop(store);
    std::fs::remove_dir_all(&tmp)?;
    Ok(())
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
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        "log file",
    ))
}
