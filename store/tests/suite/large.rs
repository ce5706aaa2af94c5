//! A large log (~200 MB of stdout events) reads back from any seq while the process's resident
//! memory stays flat: nothing holds the log in memory, on the write or the read side.

use axp_protocol::methods::JobEventKind;

/// Resident set size of this process in KiB, from /proc/self/status.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

#[test]
fn reading_a_200_mb_log_keeps_memory_flat() {
    const EVENT_BYTES: usize = 64 << 10;
    const EVENTS: u64 = 3_200; // 3,200 × 64 KiB ≈ 210 MB
    let (_tmp, store) = super::open();
    let log = store.log("huge").unwrap();
    let chunk = "0123456789abcdef".repeat(EVENT_BYTES / 16);
    for _ in 0..EVENTS {
        log.append(JobEventKind::Stdout {
            data: chunk.clone(),
        })
        .unwrap();
    }
    let size: u64 = std::fs::read_dir(store.dir().join("jobs"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|f| f.unwrap().metadata().unwrap().len())
        .sum();
    assert!(size > 200_000_000, "log is {size} bytes");

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
    let growth_mib = peak.saturating_sub(before) / 1024;
    // Reading 5 × up to 210 MB; a reader that buffered the log would grow by hundreds of MiB.
    // The slack covers one 4 MiB batch (raw + parsed) and other tests running in parallel.
    assert!(
        growth_mib < 64,
        "resident memory grew by {growth_mib} MiB while reading a {} MiB log",
        size >> 20
    );
}
