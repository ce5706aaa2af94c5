//! A large log (~200 MB of stdout events) reads back from any seq while the process's resident
//! memory stays flat: nothing holds the log in memory, on the write or the read side.
//!
//! The measurement runs in a child process (this test binary re-executed on
//! [`large_log_child`]), so tests running in parallel threads cannot disturb its VmRSS.

use std::process::Command;

use axp_protocol::methods::JobEventKind;
use axp_store::Store;

const DIR_VAR: &str = "AXP_STORE_LARGE_CHILD_DIR";

/// Resident set size of this process in KiB, from /proc/self/status.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// The child half: writes the log, reads it back from several places, prints what it measured.
#[test]
#[ignore = "child process of the large-log test; runs only when re-executed by it"]
fn large_log_child() {
    const EVENT_BYTES: usize = 64 << 10;
    const EVENTS: u64 = 3_200; // 3,200 × 64 KiB ≈ 210 MB
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        return;
    };
    let store = Store::open(std::path::Path::new(&dir)).unwrap();
    let log = store.log("huge").unwrap();
    let chunk = "0123456789abcdef".repeat(EVENT_BYTES / 16);
    let before_write = vm_rss_kib();
    for _ in 0..EVENTS {
        log.append(JobEventKind::Stdout { data: chunk.clone() }).unwrap();
    }
    let after_write = vm_rss_kib();

    let before = vm_rss_kib();
    let mut peak = before;
    // Read everything from the start, then from a few places in the middle and at the end.
    for from in [0, 1, EVENTS / 3, EVENTS / 2 + 7, EVENTS - 1] {
        let mut reader = store.log_reader("huge").unwrap();
        let mut next = from;
        while next < EVENTS {
            let batch = reader.read(next, 1_000).unwrap();
            assert!(!batch.is_empty());
            for ev in &batch {
                assert_eq!(ev.seq, next);
                assert!(matches!(&ev.kind, JobEventKind::Stdout { data } if *data == chunk));
                next += 1;
            }
            peak = peak.max(vm_rss_kib());
        }
    }
    println!("MEASURED {before_write} {after_write} {before} {peak}");
}

#[test]
fn reading_a_200_mb_log_keeps_memory_flat() {
    let (_tmp, dir) = super::state();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "suite::large::large_log_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(DIR_VAR, &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let measured: Vec<u64> = stdout
        .split_once("MEASURED ")
        .expect("the child reports its measurements")
        .1
        .split_whitespace()
        .take(4)
        .map(|v| v.parse().unwrap())
        .collect();
    let [before_write, after_write, before, peak] = measured[..] else {
        panic!("unexpected report: {stdout}");
    };

    let size: u64 = std::fs::read_dir(dir.join("jobs"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().metadata().unwrap().len())
        .sum();
    assert!(size > 200_000_000, "log is {size} bytes");
    // Writing 210 MB and reading it 5 times over; a writer or reader that buffered the log
    // would grow by hundreds of MiB. The slack covers one 4 MiB batch (raw + parsed) and the
    // allocator keeping freed pages.
    let write_growth_mib = after_write.saturating_sub(before_write) / 1024;
    let read_growth_mib = peak.saturating_sub(before) / 1024;
    assert!(
        write_growth_mib < 32,
        "resident memory grew by {write_growth_mib} MiB while writing a {} MiB log",
        size >> 20
    );
    assert!(
        read_growth_mib < 32,
        "resident memory grew by {read_growth_mib} MiB while reading a {} MiB log",
        size >> 20
    );
}
