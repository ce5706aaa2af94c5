//! What the store costs one tool call, measured alone: the job's insert (`Store::start_job`)
//! and then its result and exit in one row update (`JobLog::append_all`), as the gateway does
//! them for every `tools/call`, with the gateway's options (`ExitSync::Batched`). Run it in
//! release mode:
//!
//! ```text
//! cargo run --release -p axp-store --example call_cost -- [CALLS]
//! ```
//!
//! It prints the mean store time per call, then for each statement its p50, p90, p99, p99.9,
//! maximum and how many took over 1 ms. The tail is SQLite's WAL checkpoint: every ~1,000 WAL
//! pages, the committing statement copies the WAL into the database file and fsyncs both.
//! This is a measurement tool, not a test: it asserts nothing about speed.
//!
//! With `AXP_STORE_URL=postgres://…` it measures the PostgreSQL store instead (its own state
//! directory in a temp dir all the same); for the numbers of decision 0010 the database was
//! the cluster `scripts/pg-cluster.sh` starts, on this machine.

use std::time::{Duration, Instant};

use axp_protocol::ToolOutput;
use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::{ExitSync, JobRecord, Started, Store, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls: usize = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(20_000).max(1);
    let tmp = std::env::temp_dir().join(format!("axp-call-cost-{}", std::process::id()));
    let options = StoreOptions::default().exit_sync(ExitSync::Batched { interval: Duration::from_millis(100) });
    let store = match std::env::var("AXP_STORE_URL") {
        Ok(url) if !url.is_empty() => Store::connect(&url, &tmp, options)?,
        _ => Store::open_with(&tmp, options)?,
    };
    println!("{calls} tool calls' jobs; {:?} store, state dir {}", store.kind(), tmp.display());
    let (mut insert, mut end) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for i in 0..calls {
        let rec = JobRecord {
            id: store.new_job_id(),
            session_id: "s_0123456789abcdef0123456789abcdef".into(),
            kind: "tool".into(),
            spec: serde_json::json!({
                "tool": "everything__echo",
                "arguments": {"message": format!("hello {i}")},
                "origin": "mcp",
                "request_id": i,
            }),
            state: JobState::Running,
            exit_code: None,
            signal: None,
            error: None,
            created_ms: 1_700_000_000_000 + i as u64,
            ended_ms: None,
            idempotency_key: None,
        };
        let t = Instant::now();
        let Started::New(log) = store.start_job(&rec)? else {
            return Err(format!("job {} already existed", rec.id).into());
        };
        let inserted = Instant::now();
        let (_, error) = log.append_all(vec![
            JobEventKind::Result { output: ToolOutput::text(format!("Echo: hello {i}")) },
            JobEventKind::Exit { state: JobState::Exited, code: Some(0), signal: None, error: None },
        ]);
        if let Some(e) = error {
            return Err(e.into());
        }
        end.push(inserted.elapsed());
        insert.push(inserted - t);
    }
    let total: Duration = insert.iter().chain(&end).sum();
    println!("store time per call: mean {:.1} µs", total.as_secs_f64() * 1e6 / calls as f64);
    for (name, mut v) in [("insert", insert), ("result + exit", end)] {
        v.sort_unstable();
        let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)].as_secs_f64() * 1e6;
        let slow = v.iter().filter(|d| **d > Duration::from_millis(1)).count();
        println!(
            "{name:>14}: p50 {:.1} µs, p90 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1}; over 1 ms: {slow}",
            at(0.5),
            at(0.9),
            at(0.99),
            at(0.999),
            at(1.0),
        );
    }
    drop(store);
    std::fs::remove_dir_all(&tmp)?;
    Ok(())
}
