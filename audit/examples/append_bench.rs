//! Measures durable appends: one thread against eight (group commit shares fsyncs), with a
//! plain `write` + `fdatasync` of a line of the same size as the in-run baseline. Run with
//! `cargo run --release -p axp-audit --example append_bench [DIR]` (DIR defaults to a fresh
//! directory under the system temp dir; pass one on the disk you care about). Prints figures;
//! asserts nothing about time.

use std::io::Write;
use std::time::Instant;

use axp_audit::{AuditLog, Kind};
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join(format!("axp-audit-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&base)?;
    let detail = json!({"tool": "github__list_issues", "args_sha256": "0".repeat(64)});
    let n = 200u32;

    let mut f = std::fs::File::create(base.join("baseline"))?;
    let line = vec![b'x'; 330];
    let t = Instant::now();
    for _ in 0..n {
        f.write_all(&line)?;
        f.sync_data()?;
    }
    let baseline = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);

    let log = AuditLog::open(&base.join("one"))?;
    let t = Instant::now();
    for _ in 0..n {
        log.append(Kind::ToolCall, Some("s_bench"), "agent", detail.clone())?;
    }
    let one = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);

    let log = AuditLog::open(&base.join("eight"))?;
    let t = Instant::now();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let log = log.clone();
            let detail = detail.clone();
            std::thread::spawn(move || {
                for _ in 0..n {
                    log.append(Kind::ToolCall, Some("s_bench"), "agent", detail.clone())?;
                }
                Ok::<(), axp_audit::AuditError>(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "an appender panicked")??;
    }
    let eight = t.elapsed().as_secs_f64() * 1e6 / f64::from(n * 8);
    axp_audit::verify(&base.join("eight"))?;

    println!("dir: {}", base.display());
    println!("baseline write+fdatasync: {baseline:.0} µs per line");
    println!(
        "1 thread:  {one:.0} µs per durable append ({:.2}x baseline: segment fdatasync + HEAD rewrite)",
        one / baseline
    );
    println!("8 threads: {eight:.0} µs per durable append ({:.2}x baseline; group commit)", eight / baseline);
    if std::env::args().nth(1).is_none() {
        std::fs::remove_dir_all(&base)?;
    }
    Ok(())
}
