//! Job logs: dense seqs, reads from anywhere, reopen, one writer with many concurrent readers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::Store;

use super::{assert_dense, stdout};

#[test]
fn append_assigns_dense_seqs_and_reads_from_anywhere() {
    let (_tmp, store) = super::open();
    let log = store.log("job-1").unwrap();
    assert_eq!(log.next_seq(), 0);
    assert!(log.read(0, 10).unwrap().is_empty());
    assert!(store.read_log("job-1", 0, 10).unwrap().is_empty());
    for seq in 0..50 {
        let ev = log.append(stdout(seq)).unwrap();
        assert_eq!((ev.seq, ev.job_id.as_str()), (seq, "job-1"));
        assert!(ev.ts_ms > 0);
    }
    assert_eq!(log.next_seq(), 50);

    assert_dense(&log.read(0, 1000).unwrap(), 0);
    assert_eq!(log.read(0, 1000).unwrap().len(), 50);
    let mid = store.read_log("job-1", 17, 5).unwrap();
    assert_eq!(mid.len(), 5);
    assert_dense(&mid, 17);
    let tail = store.read_log("job-1", 45, 100).unwrap();
    assert_eq!(tail.len(), 5);
    assert_dense(&tail, 45);
    assert!(store.read_log("job-1", 50, 10).unwrap().is_empty());
    assert!(store.read_log("job-1", 5_000, 10).unwrap().is_empty());
    assert!(store.read_log("job-1", 3, 0).unwrap().is_empty());
    assert_eq!(store.log_reader("job-1").unwrap().next_seq().unwrap(), 50);

    // The writer and the file-based reader agree byte for byte.
    assert_eq!(log.read(0, 50).unwrap(), store.read_log("job-1", 0, 50).unwrap());
    // A second `log()` for a live job shares the writer.
    let again = store.log("job-1").unwrap();
    assert_eq!(again.append(stdout(50)).unwrap().seq, 50);
    assert_eq!(log.next_seq(), 51);
    // An unknown job reads as empty; a bad id is refused.
    assert!(store.read_log("never", 0, 10).unwrap().is_empty());
    assert!(store.read_log("a/b", 0, 10).is_err());
    assert!(store.log("..").is_err());
}

#[test]
fn reopen_sees_every_event() {
    let (_tmp, dir) = super::state();
    {
        let store = Store::open(&dir).unwrap();
        let log = store.log("j").unwrap();
        for seq in 0..1000 {
            log.append(stdout(seq)).unwrap();
        }
    }
    let store = Store::open(&dir).unwrap();
    let log = store.log("j").unwrap();
    assert_eq!(log.next_seq(), 1000);
    let all = store.read_log("j", 0, 5000).unwrap();
    assert_eq!(all.len(), 1000);
    assert_dense(&all, 0);
    // Appends continue the sequence.
    assert_eq!(log.append(stdout(1000)).unwrap().seq, 1000);
    let exit =
        log.append(JobEventKind::Exit { state: JobState::Exited, code: Some(0), signal: None, error: None }).unwrap();
    assert_eq!(exit.seq, 1001);
    assert_eq!(store.read_log("j", 1001, 1).unwrap(), vec![exit]);
}

#[test]
fn many_readers_see_a_dense_prefix_while_one_thread_appends() {
    const EVENTS: u64 = 100_000;
    const READERS: usize = 3;
    let (_tmp, store) = super::open();
    let log = store.log("busy").unwrap();
    let done = Arc::new(AtomicBool::new(false));

    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let store = store.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                // Half the readers keep a reader open; half reopen the files for every batch.
                let mut reader = store.log_reader("busy").unwrap();
                let mut next = 0u64;
                let mut batches = 0u64;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let batch = if r % 2 == 0 {
                        reader.read(next, 997).unwrap()
                    } else {
                        store.read_log("busy", next, 997).unwrap()
                    };
                    assert_dense(&batch, next);
                    next += batch.len() as u64;
                    batches += 1;
                    if finished && batch.is_empty() {
                        break;
                    }
                    if batch.is_empty() {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
                (next, batches)
            })
        })
        .collect();

    for seq in 0..EVENTS {
        assert_eq!(log.append(stdout(seq)).unwrap().seq, seq);
    }
    done.store(true, Ordering::Release);
    for h in readers {
        let (seen, batches) = h.join().unwrap();
        assert_eq!(seen, EVENTS, "every reader reaches the end");
        assert!(batches > 1);
    }
}

#[test]
fn a_batch_stops_at_the_byte_budget_but_always_holds_one_event() {
    let (_tmp, store) = super::open();
    let log = store.log("big").unwrap();
    let big = "y".repeat(3 << 20); // 3 MiB per event: two exceed the 4 MiB budget
    for _ in 0..3 {
        log.append(JobEventKind::Stdout { data: big.clone() }).unwrap();
    }
    let mut next = 0;
    let mut batches = 0;
    while next < 3 {
        let batch = store.read_log("big", next, 100).unwrap();
        assert_eq!(batch.len(), 1, "one oversized event per batch");
        assert_eq!(batch[0].seq, next);
        next += 1;
        batches += 1;
    }
    assert_eq!(batches, 3);
}

#[test]
fn batched_exit_sync_keeps_every_event_and_flushes_on_demand() {
    use axp_store::{ExitSync, StoreOptions};
    use std::time::Duration;
    let (_tmp, dir) = super::state();
    let options = StoreOptions::default().exit_sync(ExitSync::Batched { interval: Duration::from_millis(20) });
    {
        let store = Store::open_with(&dir, options.clone()).unwrap();
        for j in 0..20 {
            let log = store.log(&format!("job-{j}")).unwrap();
            log.append(stdout(0)).unwrap();
            log.append(JobEventKind::Exit { state: JobState::Exited, code: Some(j), signal: None, error: None })
                .unwrap();
        }
        // Let the background thread run at least once, then force a sync as shutdown would.
        std::thread::sleep(Duration::from_millis(50));
        store.sync_all().unwrap();
        // Dropping the store with a log still open stops the thread only when the log goes.
        let _still_open = store.log("job-0").unwrap();
    }
    let store = Store::open_with(&dir, options).unwrap();
    for j in 0..20 {
        let events = store.read_log(&format!("job-{j}"), 0, 10).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[1].kind,
            JobEventKind::Exit { state: JobState::Exited, code: Some(j), signal: None, error: None }
        );
    }
    // Inline mode's sync_all works too.
    drop(store);
    Store::open(&dir).unwrap().sync_all().unwrap();
}

#[test]
fn an_oversized_event_is_refused_and_uses_no_seq() {
    let (_tmp, store) = super::open();
    let log = store.log("big-one").unwrap();
    log.append(stdout(0)).unwrap();
    let too_big = "z".repeat(axp_store::log::MAX_EVENT_BYTES as usize);
    assert!(matches!(
        log.append(JobEventKind::Stdout { data: too_big }),
        Err(axp_store::StoreError::EventTooLarge { .. })
    ));
    assert_eq!(log.append(stdout(1)).unwrap().seq, 1);
    assert_dense(&store.read_log("big-one", 0, 10).unwrap(), 0);
    assert_eq!(store.read_log("big-one", 0, 10).unwrap().len(), 2);
}

#[test]
fn concurrent_appenders_through_store_log_share_one_sequence() {
    let (_tmp, store) = super::open();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let log = store.log("shared").unwrap();
                (0..1_000)
                    .map(|i| log.append(JobEventKind::Stdout { data: format!("{t}:{i}") }).unwrap().seq)
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut seqs: Vec<u64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..4_000).collect::<Vec<_>>(), "no seq lost or given twice");
    let events = store.read_log("shared", 0, 10_000).unwrap();
    assert_eq!(events.len(), 4_000);
    // Each thread's own events appear in the order it appended them.
    for t in 0..4 {
        let mine: Vec<String> = events
            .iter()
            .filter_map(|e| match &e.kind {
                JobEventKind::Stdout { data } if data.starts_with(&format!("{t}:")) => Some(data.clone()),
                _ => None,
            })
            .collect();
        let want: Vec<String> = (0..1_000).map(|i| format!("{t}:{i}")).collect();
        assert_eq!(mine, want);
    }
}

/// The stored lines a pass-through reader gets are exactly the decoded read's events, encoded:
/// for a small log (read decoded and encoded again) and for one with an index (passed through),
/// from any seq.
#[test]
fn read_lines_are_the_decoded_events_as_stored() {
    let (_tmp, store) = super::open();
    for (job, n) in [("small-log", 5u64), ("indexed-log", 300)] {
        let log = store.log(job).unwrap();
        for seq in 0..n {
            log.append(stdout(seq)).unwrap();
        }
        for from in [0, 1, n / 2, n - 1, n, n + 3] {
            let lines = store.log_reader(job).unwrap().read_lines(from, 100).unwrap();
            let events = store.read_log(job, from, 100).unwrap();
            assert_eq!(lines.len(), events.len(), "{job} from {from}");
            assert_eq!(lines.next_seq(), events.last().map(|e| e.seq + 1), "{job} from {from}");
            for ((seq, line), event) in lines.iter().zip(&events) {
                assert_eq!(seq, event.seq);
                let decoded: axp_protocol::methods::JobEvent = serde_json::from_str(line).unwrap();
                assert_eq!(&decoded, event, "{job} event {seq}");
                assert_eq!(line, serde_json::to_string(event).unwrap(), "{job} event {seq} is passed on byte for byte");
            }
            assert_eq!(lines.last(), events.last().cloned());
        }
    }
}

/// A pass-through read checks each line's job and seq, as a decoded read does: a line of
/// another event spliced into the data is named, not passed on.
#[test]
fn read_lines_refuse_a_line_that_is_not_the_event_asked_for() {
    let (tmp, store) = super::open();
    let log = store.log("spliced").unwrap();
    for seq in 0..100 {
        log.append(stdout(seq)).unwrap();
    }
    log.sync().unwrap();
    let data = std::fs::read_dir(tmp.path().join("state/jobs"))
        .unwrap()
        .flat_map(|shard| std::fs::read_dir(shard.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().is_some_and(|n| n == "spliced.jsonl"))
        .expect("the job's data file");
    let text = std::fs::read_to_string(&data).unwrap();
    // Event 40's line, rewritten to claim seq 41 with the same length (so the index still fits).
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let forged = lines[40].replacen("\"seq\":40,", "\"seq\":41,", 1);
    assert_eq!(forged.len(), lines[40].len());
    let at: usize = lines[..40].iter().map(|l| l.len()).sum();
    let mut bytes = text.into_bytes();
    bytes[at..at + forged.len()].copy_from_slice(forged.as_bytes());
    std::fs::write(&data, bytes).unwrap();

    let err = store.log_reader("spliced").unwrap().read_lines(30, 50).unwrap_err().to_string();
    assert!(err.contains("expected event 40"), "{err}");
    // Lines before it still read.
    assert_eq!(store.log_reader("spliced").unwrap().read_lines(30, 10).unwrap().len(), 10);
}
