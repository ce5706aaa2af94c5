//! Small logs in their job's row (decision 0006): a job recorded by `create_job` keeps its
//! events in its row until the log outgrows [`SMALL_LOG_EVENTS`] or [`SMALL_LOG_BYTES`], so a
//! tool call creates no file; then the log moves to files whole. Readers on either side of the
//! move, and recovery after a crash at either step of it, see every acknowledged event and
//! nothing else; appending the `exit` records the job's end with it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::Store;
use axp_store::log::{SMALL_LOG_BYTES, SMALL_LOG_EVENTS};

use super::{assert_dense, job, stdout};

/// Every file under the state's `jobs/` directory (shard directories excluded).
fn job_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir.join("jobs")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else {
            out.push(path);
        }
    }
    out
}

/// The `jobs.log` column of job `id`, read behind the store's back (the store must be closed).
fn row_log(dir: &Path, id: &str) -> Option<String> {
    let db = rusqlite::Connection::open(dir.join("axp.db")).unwrap();
    db.query_row("SELECT log FROM jobs WHERE id = ?1", [id], |r| r.get(0)).unwrap()
}

#[test]
fn a_tool_call_creates_no_file_and_its_exit_records_the_end() {
    let (_tmp, dir) = super::state();
    {
        let store = Store::open(&dir).unwrap();
        store.create_job(&job("call", "s", None)).unwrap();
        let log = store.log("call").unwrap();
        log.append(stdout(0)).unwrap();
        log.append(JobEventKind::Result { output: axp_protocol::ToolOutput::text("hi") }).unwrap();
        let exit = log
            .append(JobEventKind::Exit { state: JobState::Exited, code: Some(0), signal: None, error: None })
            .unwrap();
        assert!(job_files(&dir).is_empty(), "a small job's log makes no file: {:?}", job_files(&dir));
        // The end is recorded by the append itself, with the event's time.
        let rec = store.get_job("call").unwrap().unwrap();
        assert_eq!((rec.state, rec.exit_code, rec.ended_ms), (JobState::Exited, Some(0), Some(exit.ts_ms)));
        // Both readers see all three, from any seq.
        assert_eq!(store.read_log("call", 0, 10).unwrap().len(), 3);
        assert_eq!(log.read(1, 10).unwrap().iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        let mut reader = store.log_reader("call").unwrap();
        assert_eq!(reader.next_seq().unwrap(), 3);
        assert_eq!(reader.read(2, 10).unwrap()[0].kind, exit.kind);
    }
    assert_eq!(row_log(&dir, "call").unwrap().lines().count(), 3, "the events are in the row");
    // After a restart the log is read back from the row and goes on from there.
    let store = Store::open(&dir).unwrap();
    let log = store.log("call").unwrap();
    assert_eq!(log.next_seq(), 3);
    assert_dense(&store.read_log("call", 0, 1).unwrap(), 0);
    assert!(job_files(&dir).is_empty());
}

/// Appends events `0..n` to a fresh job `id` and returns the store.
fn job_with_events(dir: &Path, id: &str, n: u64) -> Store {
    let store = Store::open(dir).unwrap();
    store.create_job(&job(id, "s", None)).unwrap();
    let log = store.log(id).unwrap();
    for seq in 0..n {
        log.append(stdout(seq)).unwrap();
    }
    store
}

#[test]
fn the_log_moves_to_files_when_it_outgrows_the_event_limit_and_readers_follow() {
    let (_tmp, dir) = super::state();
    let store = job_with_events(&dir, "j", SMALL_LOG_EVENTS);
    assert!(job_files(&dir).is_empty(), "{SMALL_LOG_EVENTS} events still fit in the row");
    // A reader opened while the log is in the row keeps working across the move.
    let mut reader = store.log_reader("j").unwrap();
    assert_dense(&reader.read(0, 1000).unwrap(), 0);
    let log = store.log("j").unwrap();
    for seq in SMALL_LOG_EVENTS..SMALL_LOG_EVENTS + 5 {
        assert_eq!(log.append(stdout(seq)).unwrap().seq, seq);
    }
    let names: Vec<String> =
        job_files(&dir).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "a data file and its index: {names:?}");
    assert!(names.contains(&"j.jsonl".to_string()) && names.contains(&"j.idx".to_string()), "{names:?}");
    let all = reader.read(0, 1000).unwrap();
    assert_eq!(all.len() as u64, SMALL_LOG_EVENTS + 5);
    assert_dense(&all, 0);
    assert_dense(&log.read(SMALL_LOG_EVENTS - 1, 3).unwrap(), SMALL_LOG_EVENTS - 1);
    assert_eq!(reader.next_seq().unwrap(), SMALL_LOG_EVENTS + 5);
    drop((log, reader, store));
    assert_eq!(row_log(&dir, "j"), None, "the row no longer holds the log");
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.log("j").unwrap().next_seq(), SMALL_LOG_EVENTS + 5);
}

#[test]
fn one_event_past_the_byte_limit_moves_the_log_whole() {
    let (_tmp, dir) = super::state();
    let store = job_with_events(&dir, "big", 2);
    let log = store.log("big").unwrap();
    let huge = JobEventKind::Stdout { data: "y".repeat(SMALL_LOG_BYTES as usize) };
    log.append(huge.clone()).unwrap();
    assert_eq!(job_files(&dir).len(), 2);
    let all = store.read_log("big", 0, 10).unwrap();
    assert_dense(&all[..2], 0);
    assert_eq!(all[2].kind, huge);
}

#[test]
fn a_crash_after_the_files_but_before_the_row_update_keeps_the_files() {
    let (_tmp, dir) = super::state();
    drop(job_with_events(&dir, "j", SMALL_LOG_EVENTS + 1));
    // Put the row back as it was before the move: what a crash between the index's rename and
    // the row's update leaves.
    let db = rusqlite::Connection::open(dir.join("axp.db")).unwrap();
    let lines: String = {
        let store = Store::open(&dir).unwrap();
        let events = store.read_log("j", 0, SMALL_LOG_EVENTS as usize).unwrap();
        events.iter().map(|e| format!("{}\n", serde_json::to_string(e).unwrap())).collect()
    };
    db.execute("UPDATE jobs SET log = ?1 WHERE id = 'j'", [&lines]).unwrap();
    drop(db);
    let store = Store::open(&dir).unwrap();
    // A reader that is not the writer already trusts the index over the row...
    let all = store.read_log("j", 0, 1000).unwrap();
    assert_eq!(all.len() as u64, SMALL_LOG_EVENTS + 1);
    assert_dense(&all, 0);
    // ...and opening the log finishes the move.
    let log = store.log("j").unwrap();
    assert_eq!(log.next_seq(), SMALL_LOG_EVENTS + 1);
    log.append(stdout(SMALL_LOG_EVENTS + 1)).unwrap();
    assert_dense(&store.read_log("j", 0, 1000).unwrap(), 0);
    drop((log, store));
    assert_eq!(row_log(&dir, "j"), None);
}

#[test]
fn a_crash_before_the_index_was_renamed_keeps_the_row() {
    let (_tmp, dir) = super::state();
    drop(job_with_events(&dir, "j", SMALL_LOG_EVENTS));
    let saved = row_log(&dir, "j").unwrap();
    // Move the log for real, to learn where its files go, then undo the move the way a crash
    // before the index's rename would leave it: the row intact, a data file with more in it
    // (here a torn line), no index.
    let store = Store::open(&dir).unwrap();
    store.log("j").unwrap().append(stdout(SMALL_LOG_EVENTS)).unwrap();
    drop(store);
    let data = job_files(&dir).into_iter().find(|p| p.file_name().unwrap() == "j.jsonl").unwrap();
    std::fs::remove_file(data.with_extension("idx")).unwrap();
    std::fs::write(&data, format!("{saved}{{\"torn\": ")).unwrap();
    let db = rusqlite::Connection::open(dir.join("axp.db")).unwrap();
    db.execute("UPDATE jobs SET log = ?1 WHERE id = 'j'", [&saved]).unwrap();
    drop(db);

    let store = Store::open(&dir).unwrap();
    let mut reader = store.log_reader("j").unwrap();
    assert_eq!(reader.next_seq().unwrap(), SMALL_LOG_EVENTS, "the row is the log");
    let log = store.log("j").unwrap();
    assert_eq!(log.next_seq(), SMALL_LOG_EVENTS);
    // The next move overwrites the stale file.
    log.append(stdout(SMALL_LOG_EVENTS)).unwrap();
    log.append(stdout(SMALL_LOG_EVENTS + 1)).unwrap();
    let all = reader.read(0, 1000).unwrap();
    assert_eq!(all.len() as u64, SMALL_LOG_EVENTS + 2);
    assert_dense(&all, 0);
}

#[test]
fn readers_see_a_dense_prefix_while_a_job_moves_from_its_row_to_files() {
    const EVENTS: u64 = 2_000;
    let (_tmp, dir) = super::state();
    let store = Store::open(&dir).unwrap();
    store.create_job(&job("busy", "s", None)).unwrap();
    let log = store.log("busy").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (store, done, log) = (store.clone(), done.clone(), log.clone());
            std::thread::spawn(move || {
                let mut reader = store.log_reader("busy").unwrap();
                let mut next = 0u64;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    // One reader through a LogReader, one through the writer's own handle.
                    let batch = if r == 0 { reader.read(next, 7).unwrap() } else { log.read(next, 7).unwrap() };
                    assert_dense(&batch, next);
                    next += batch.len() as u64;
                    if finished && batch.is_empty() {
                        return next;
                    }
                }
            })
        })
        .collect();
    for seq in 0..EVENTS {
        log.append(stdout(seq)).unwrap();
    }
    done.store(true, Ordering::Release);
    for h in readers {
        assert_eq!(h.join().unwrap(), EVENTS);
    }
}

#[test]
fn a_job_recorded_before_schema_4_keeps_its_log_in_files() {
    let (_tmp, dir) = super::state();
    drop(Store::open(&dir).unwrap());
    // A job row as an older version wrote it: no log column value.
    let store = Store::open(&dir).unwrap();
    store.create_job(&job("old", "s", None)).unwrap();
    drop(store);
    let db = rusqlite::Connection::open(dir.join("axp.db")).unwrap();
    db.execute("UPDATE jobs SET log = NULL WHERE id = 'old'", []).unwrap();
    drop(db);
    let store = Store::open(&dir).unwrap();
    let log = store.log("old").unwrap();
    log.append(stdout(0)).unwrap();
    log.append(JobEventKind::Exit { state: JobState::Exited, code: Some(3), signal: None, error: None }).unwrap();
    assert_eq!(job_files(&dir).len(), 1, "a small file log: data, no index");
    assert_eq!(store.read_log("old", 0, 10).unwrap().len(), 2);
    assert_eq!(store.get_job("old").unwrap().unwrap().exit_code, Some(3), "the exit is recorded for file logs too");
}
