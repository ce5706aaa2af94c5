//! Audit log tests on real files in a temporary directory: append and verify, every tamper the
//! issue names (edit, delete, reorder, truncate, garbage, edit-and-rehash in the middle and at
//! the end, a removed segment, a removed HEAD), torn-tail recovery, restart, the writer lock,
//! eight concurrent appenders, tail filters and following across segment rotation.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use axp_audit::{
    AuditError, AuditLog, Durability, Filter, Kind, Options, Problem, VerifyError, digest_json, follow, tail, verify,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn fill(log: &AuditLog, n: u64) {
    for i in 0..n {
        let session = if i % 2 == 0 { Some("s_even") } else { Some("s_odd") };
        log.append(Kind::Command, session, "agent", json!({"argv": ["echo", i]})).unwrap();
    }
}

/// A log of `n` records in one segment; returns the segment's path.
fn log_with(dir: &Path, n: u64) -> PathBuf {
    let log = AuditLog::open(dir).unwrap();
    fill(&log, n);
    drop(log);
    dir.join("00000000000000000000.jsonl")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn bad_record(r: Result<axp_audit::VerifyReport, VerifyError>) -> (u64, u64, Problem) {
    match r {
        Err(VerifyError::BadRecord { seq, line, problem, .. }) => (seq, line, problem),
        other => panic!("expected a bad record, got {other:?}"),
    }
}

/// Re-seals a line after editing it, as an attacker who knows the format would: recompute the
/// record's own hash from its prev_hash and its edited bytes.
fn rehash(line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap();
    let body_end = line.rfind(",\"hash\":\"").unwrap();
    let body = format!("{}}}", &line[..body_end]);
    let prev = hex::decode(v["prev_hash"].as_str().unwrap()).unwrap();
    let mut h = Sha256::new();
    h.update(&prev);
    h.update(body.as_bytes());
    format!("{},\"hash\":\"{}\"}}", &line[..body_end], hex::encode(h.finalize()))
}

#[test]
fn appended_records_verify_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    let args = json!({"b": 2, "a": "secret"});
    let r = log
        .append(Kind::ToolCall, Some("s_1"), "agent", json!({"tool": "time__now", "args_sha256": digest_json(&args)}))
        .unwrap();
    assert_eq!(r.seq, 0);
    assert_eq!(r.prev_hash, axp_audit::GENESIS_HASH);
    fill(&log, 9);
    let report = verify(dir.path()).unwrap();
    assert_eq!(report.records, 10);
    assert_eq!(report.head.as_ref().unwrap().seq, 9);
    assert_eq!(report.unanchored, 0);
    assert_eq!(report.torn_tail_bytes, 0);
    assert!(report.to_string().contains("10 record(s)"));
    let all: Vec<_> = tail(dir.path(), 0, Filter::default()).map(Result::unwrap).collect();
    assert_eq!(all.len(), 10);
    assert_eq!(all[0], r);
    assert_eq!(report.last_hash, all[9].hash);
    // The arguments themselves are never stored.
    let text = std::fs::read_to_string(dir.path().join("00000000000000000000.jsonl")).unwrap();
    assert!(!text.contains("secret"));
    assert!(text.contains(&digest_json(&json!({"a": "secret", "b": 2}))));
    let odd: Vec<_> = tail(dir.path(), 4, Filter { session: Some("s_odd".into()), kinds: vec![Kind::Command] })
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        odd.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![4, 6, 8],
        "fill() numbers its own records from 0, so odd i lands on even seq"
    );
}

#[test]
fn a_fresh_log_verifies_empty_and_head_is_fixed_size() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    let report = verify(dir.path()).unwrap();
    assert_eq!((report.records, report.head), (0, None));
    assert_eq!(report.last_hash, axp_audit::GENESIS_HASH);
    log.append(Kind::SessionOpen, Some("s"), "operator", json!({})).unwrap();
    let head = std::fs::read(dir.path().join("HEAD")).unwrap();
    assert_eq!(head.len(), 128);
    assert_eq!(verify(dir.path()).unwrap().head.unwrap().seq, 0);
}

#[test]
fn an_edited_field_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 6);
    let mut l = lines(&seg);
    l[3] = l[3].replace("\"agent\"", "\"operator\"");
    write_lines(&seg, &l);
    let (seq, line, problem) = bad_record(verify(dir.path()));
    assert_eq!((seq, line, problem), (3, 4, Problem::HashMismatch));
    let msg = verify(dir.path()).unwrap_err().to_string();
    assert!(msg.contains("record 3") && msg.contains("edited"), "{msg}");
}

#[test]
fn a_deleted_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 6);
    let mut l = lines(&seg);
    l.remove(2);
    write_lines(&seg, &l);
    assert_eq!(bad_record(verify(dir.path())), (2, 3, Problem::OutOfOrder { found: 3 }));
}

#[test]
fn reordered_records_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 6);
    let mut l = lines(&seg);
    l.swap(3, 4);
    write_lines(&seg, &l);
    assert_eq!(bad_record(verify(dir.path())), (3, 4, Problem::OutOfOrder { found: 4 }));
}

#[test]
fn truncation_mid_record_and_at_a_record_boundary_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 6);
    let len = std::fs::metadata(&seg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 30).unwrap();
    assert_eq!(bad_record(verify(dir.path())), (5, 6, Problem::TornLine));
    // Whole records removed from the end: HEAD still anchors record 5.
    let mut l = lines(&seg);
    l.pop();
    l.pop();
    write_lines(&seg, &l);
    match verify(dir.path()) {
        Err(VerifyError::Truncated { head_seq: 5, last_seq: Some(3) }) => {}
        other => panic!("{other:?}"),
    }
    // And the writer refuses to continue such a log rather than paper over the gap.
    match AuditLog::open(dir.path()) {
        Err(AuditError::HeadAhead { head_seq: 5, last_seq: Some(3) }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn appended_garbage_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 4);
    let mut l = lines(&seg);
    l.push("{\"seq\":4,\"hello\":\"world\"}".into());
    write_lines(&seg, &l);
    let (seq, line, problem) = bad_record(verify(dir.path()));
    assert_eq!((seq, line), (4, 5));
    assert!(matches!(problem, Problem::Unparsable(_)), "{problem:?}");
    // Garbage without a newline after the anchored end looks exactly like a torn append: it is
    // reported (and cut at the next open), not silently accepted.
    let dir2 = tempfile::tempdir().unwrap();
    let seg2 = log_with(dir2.path(), 4);
    let mut bytes = std::fs::read(&seg2).unwrap();
    bytes.extend_from_slice(b"garbage");
    std::fs::write(&seg2, bytes).unwrap();
    let report = verify(dir2.path()).unwrap();
    assert_eq!(report.torn_tail_bytes, 7);
    assert!(report.to_string().contains("torn"), "{report}");
}

#[test]
fn an_edit_with_its_own_hash_recomputed_breaks_the_next_link() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 6);
    let mut l = lines(&seg);
    l[2] = rehash(&l[2].replace("\"echo\"", "\"rm\""));
    write_lines(&seg, &l);
    assert_eq!(bad_record(verify(dir.path())), (3, 4, Problem::PrevHashMismatch));
}

#[test]
fn an_edit_of_the_last_record_with_its_hash_recomputed_is_caught_by_head() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 6);
    let mut l = lines(&seg);
    l[5] = rehash(&l[5].replace("\"echo\"", "\"rm\""));
    write_lines(&seg, &l);
    match verify(dir.path()) {
        Err(VerifyError::HeadMismatch { seq: 5 }) => {}
        other => panic!("{other:?}"),
    }
    // The writer refuses to continue such a chain too.
    match AuditLog::open(dir.path()) {
        Err(AuditError::Corrupt { reason, .. }) => assert!(reason.contains("HEAD"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Deleting HEAD to hide it is itself reported.
    std::fs::remove_file(dir.path().join("HEAD")).unwrap();
    match verify(dir.path()) {
        Err(VerifyError::MissingHead { records: 6 }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn segments_chain_and_a_removed_segment_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { segment_bytes: 400, ..Options::default() };
    let log = AuditLog::open_with(dir.path(), opts.clone()).unwrap();
    fill(&log, 20);
    drop(log);
    let segs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert!(segs.len() >= 5, "{segs:?}");
    assert_eq!(verify(dir.path()).unwrap().records, 20);
    assert_eq!(verify(dir.path()).unwrap().segments, segs.len());
    // A restart continues in the newest segment and the chain holds across all of them.
    let log = AuditLog::open_with(dir.path(), opts).unwrap();
    assert_eq!(log.next_seq(), 20);
    fill(&log, 3);
    drop(log);
    assert_eq!(verify(dir.path()).unwrap().records, 23);
    let seqs: Vec<u64> = tail(dir.path(), 7, Filter::default()).map(|r| r.unwrap().seq).collect();
    assert_eq!(seqs, (7..23).collect::<Vec<_>>());
    let mut sorted = segs.clone();
    sorted.sort();
    std::fs::remove_file(&sorted[2]).unwrap();
    match verify(dir.path()) {
        Err(VerifyError::SegmentGap { file, .. }) => assert_eq!(file, sorted[3]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn restart_continues_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    fill(&log, 3);
    let last = log.append(Kind::SessionClose, Some("s_1"), "gateway", json!({})).unwrap();
    drop(log);
    let log = AuditLog::open(dir.path()).unwrap();
    assert!(log.recovery().is_none());
    let next = log.append(Kind::SessionOpen, Some("s_2"), "operator", json!({})).unwrap();
    assert_eq!(next.seq, 4);
    assert_eq!(next.prev_hash, last.hash);
    drop(log);
    assert_eq!(verify(dir.path()).unwrap().records, 5);
}

#[test]
fn a_torn_last_line_is_cut_at_open_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 3);
    let whole = std::fs::read(&seg).unwrap();
    let first_line_end = whole.iter().position(|&b| b == b'\n').unwrap();
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[..first_line_end / 2]); // half a record, no newline
    std::fs::write(&seg, &torn).unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    let rec = log.recovery().unwrap().clone();
    assert_eq!(rec.discarded_bytes as usize, first_line_end / 2);
    assert_eq!(rec.kept_bytes as usize, whole.len());
    drop(log);
    let all: Vec<_> = tail(dir.path(), 0, Filter::default()).map(Result::unwrap).collect();
    assert_eq!(all.len(), 4);
    assert_eq!(all[3].kind, Kind::AuditRecovered);
    assert_eq!(all[3].detail["discarded_bytes"], json!(first_line_end / 2));
    verify(dir.path()).unwrap();
}

#[test]
fn a_damaged_complete_last_record_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let seg = log_with(dir.path(), 3);
    let mut l = lines(&seg);
    l[2] = l[2].replace("\"agent\"", "\"AGENT\"");
    write_lines(&seg, &l);
    match AuditLog::open(dir.path()) {
        Err(AuditError::Corrupt { line: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn one_writer_per_directory() {
    let dir = tempfile::tempdir().unwrap();
    let _log = AuditLog::open(dir.path()).unwrap();
    let opts = Options { lock_wait: Duration::from_millis(50), ..Options::default() };
    assert!(matches!(AuditLog::open_with(dir.path(), opts), Err(AuditError::Locked { .. })));
}

#[test]
fn eight_threads_append_a_dense_valid_chain() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<AuditLog>();
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open_with(dir.path(), Options { segment_bytes: 8 * 1024, ..Options::default() }).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                (0..40)
                    .map(|i| {
                        log.append(
                            Kind::NetAttempt,
                            Some(&format!("s_{t}")),
                            "egress-proxy",
                            json!({"host": "example.com", "i": i}),
                        )
                        .unwrap()
                        .seq
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut seqs: Vec<u64> = Vec::new();
    for h in handles {
        let mine = h.join().unwrap();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "per-thread order");
        seqs.extend(mine);
    }
    seqs.sort();
    assert_eq!(seqs, (0..320).collect::<Vec<_>>());
    let report = verify(dir.path()).unwrap();
    assert_eq!(report.records, 320);
    assert_eq!(report.head.unwrap().seq, 319);
    assert!(report.segments > 1);
    let s3: Vec<_> = tail(dir.path(), 0, Filter { session: Some("s_3".into()), kinds: vec![] })
        .map(|r| r.unwrap().detail["i"].as_u64().unwrap())
        .collect();
    assert_eq!(s3, (0..40).collect::<Vec<_>>());
}

#[test]
fn follow_sees_new_records_across_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open_with(dir.path(), Options { segment_bytes: 300, ..Options::default() }).unwrap();
    fill(&log, 2);
    let (tx, rx) = mpsc::channel();
    let d = dir.path().to_path_buf();
    std::thread::spawn(move || {
        for r in follow(
            &d,
            1,
            Filter { session: None, kinds: vec![Kind::Command, Kind::Approval] },
            Duration::from_millis(5),
        ) {
            if tx.send(r.unwrap()).is_err() {
                return;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(first.seq, 1);
    for i in 0..6 {
        log.append(Kind::Approval, None, "operator", json!({"job": i})).unwrap();
        log.append(Kind::LintVerdict, None, "lint", json!({"ok": true})).unwrap();
    }
    let got: Vec<u64> = (0..6).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap().seq).collect();
    assert_eq!(got, vec![2, 4, 6, 8, 10, 12]);
    assert!(std::fs::read_dir(dir.path()).unwrap().count() > 4, "rotation happened");
}

#[test]
fn interval_durability_acknowledges_written_records_and_anchors_them_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Interval(Duration::from_millis(5)), ..Options::default() };
    let log = AuditLog::open_with(dir.path(), options.clone()).unwrap();
    fill(&log, 10);
    // Every acknowledged record is in the file at once (it survives a crash of this process)…
    let report = verify(dir.path()).unwrap();
    assert_eq!(report.records, 10);
    // …and the background thread anchors them in HEAD without another append.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while verify(dir.path()).unwrap().head.as_ref().map(|h| h.seq) != Some(9) {
        assert!(std::time::Instant::now() < deadline, "HEAD never reached record 9");
        std::thread::sleep(Duration::from_millis(5));
    }
    fill(&log, 3);
    // Dropping the last handle syncs what is left, and releases the lock for the next writer.
    drop(log);
    let report = verify(dir.path()).unwrap();
    assert_eq!((report.records, report.unanchored, report.head.map(|h| h.seq)), (13, 0, Some(12)));
    let again = AuditLog::open_with(dir.path(), options).unwrap();
    assert_eq!(again.next_seq(), 13);
    again.sync().unwrap();
}

#[test]
fn dropping_the_last_handle_syncs_and_unlocks_before_drop_returns_even_while_the_flusher_runs() {
    // The background thread wakes every millisecond here, so drops land in all of its phases:
    // asleep, mid-sync, and between waking and syncing. Each must leave every record anchored
    // in HEAD and LOCK free when `drop` returns, not some moment later.
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        durability: Durability::Interval(Duration::from_millis(1)),
        lock_wait: Duration::ZERO,
        ..Options::default()
    };
    let mut expected = 0;
    for round in 0..200u64 {
        let log = AuditLog::open_with(dir.path(), options.clone()).unwrap();
        let n = 1 + round % 4;
        fill(&log, n);
        expected += n;
        if round % 3 == 0 {
            std::thread::sleep(Duration::from_micros(round * 10 % 1500));
        }
        drop(log);
        let report = verify(dir.path()).unwrap();
        assert_eq!(
            (report.records, report.unanchored, report.head.map(|h| h.seq)),
            (expected, 0, Some(expected - 1)),
            "round {round}"
        );
    }
}

#[test]
fn append_then_completes_every_record_after_its_fsync_on_one_thread() {
    // 8 threads x 200 appends that do not wait: each completion must find its record anchored
    // in HEAD when it runs, and every completion must run on the log's one sync thread, not on
    // a thread per waiting record.
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(dir.path()).unwrap();
    let (tx, rx) = mpsc::channel::<(u64, Option<u64>, String)>();
    std::thread::scope(|s| {
        for t in 0..8 {
            let (log, tx, path) = (log.clone(), tx.clone(), dir.path().to_path_buf());
            s.spawn(move || {
                for i in 0..200 {
                    let tx = tx.clone();
                    let path = path.clone();
                    log.append_then(Kind::Command, Some("s"), "agent", json!({"t": t, "i": i}), move |r| {
                        let record = r.unwrap();
                        let head = std::fs::read_to_string(path.join("HEAD")).unwrap();
                        let head_seq = serde_json::from_str::<Value>(&head).unwrap()["seq"].as_u64();
                        let thread = std::thread::current().name().unwrap_or("").to_string();
                        tx.send((record.seq, head_seq, thread)).unwrap();
                    });
                }
            });
        }
    });
    drop(tx);
    let mut seen = Vec::new();
    while let Ok((seq, head_seq, thread)) = rx.recv_timeout(Duration::from_secs(30)) {
        assert!(head_seq.is_some_and(|h| h >= seq), "record {seq} completed before HEAD anchored it ({head_seq:?})");
        assert_eq!(thread, "axp-audit-sync", "record {seq} completed on another thread");
        seen.push(seq);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..1600).collect::<Vec<_>>(), "every record completed exactly once");
    drop(log);
    assert_eq!(verify(dir.path()).unwrap().records, 1600);
}

#[test]
fn dropping_the_last_handle_completes_queued_appends_durably() {
    // Records queued when the last handle goes are durable when `drop` returns, and their
    // completions are all called: nothing queued is lost with the sync thread.
    let dir = tempfile::tempdir().unwrap();
    for round in 0..50u64 {
        let log = AuditLog::open_with(dir.path(), Options { lock_wait: Duration::ZERO, ..Options::default() }).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let n = 1 + round % 7;
        for i in 0..n {
            let done = done.clone();
            log.append_then(Kind::Command, None, "agent", json!({"i": i}), move |r| {
                r.unwrap();
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        drop(log);
        // Every queued record is anchored when `drop` returns ...
        let report = verify(dir.path()).unwrap();
        assert_eq!((report.unanchored, report.head.map(|h| h.seq + 1)), (0, Some(report.records)), "round {round}");
        // ... and every completion is called: by the drop, or by the sync thread finishing a
        // batch it took just before (already covered by the drop's sync).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while done.load(std::sync::atomic::Ordering::SeqCst) < n && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(done.load(std::sync::atomic::Ordering::SeqCst), n, "round {round}");
    }
}
