//! Small file logs (a log opened without a job record, or a job recorded before schema 4; a
//! job's small log now lives in its row, see `rows.rs`): a few events have no index file, the
//! index appears whole when the log outgrows
//! [`SMALL_LOG_EVENTS`] or [`SMALL_LOG_BYTES`], and readers on either side of that moment, and
//! recovery after a crash in the middle of it, see every acknowledged event and nothing else.

use std::path::{Path, PathBuf};

use axp_protocol::methods::JobEventKind;
use axp_store::Store;
use axp_store::log::{SMALL_LOG_BYTES, SMALL_LOG_EVENTS};

use super::{assert_dense, stdout};

/// `(data, index, index.tmp)` of job `id`, wherever its shard is.
fn files(dir: &Path, id: &str) -> (PathBuf, PathBuf, PathBuf) {
    for shard in std::fs::read_dir(dir.join("jobs")).unwrap() {
        let shard = shard.unwrap().path();
        let data = shard.join(format!("{id}.jsonl"));
        if data.exists() {
            return (data, shard.join(format!("{id}.idx")), shard.join(format!("{id}.idx.tmp")));
        }
    }
    panic!("no log files for {id}");
}

#[test]
fn a_small_log_has_no_index_until_it_outgrows_the_event_limit() {
    let (_tmp, dir) = super::state();
    let store = Store::open(&dir).unwrap();
    let log = store.log("j").unwrap();
    // A reader opened before anything was written, kept across the change.
    let mut early = store.log_reader("j").unwrap();
    assert_eq!(early.next_seq().unwrap(), 0);
    for seq in 0..SMALL_LOG_EVENTS {
        log.append(stdout(seq)).unwrap();
    }
    let (_, index, tmp) = files(&dir, "j");
    assert!(!index.exists(), "a log of {SMALL_LOG_EVENTS} small events must have no index file");
    assert_eq!(early.next_seq().unwrap(), SMALL_LOG_EVENTS);
    assert_dense(&early.read(0, 1000).unwrap(), 0);
    assert_eq!(early.read(0, 1000).unwrap().len() as u64, SMALL_LOG_EVENTS);
    let mid = store.read_log("j", 7, 3).unwrap();
    assert_eq!(mid.len(), 3);
    assert_dense(&mid, 7);
    assert_eq!(log.read(0, 1000).unwrap(), store.read_log("j", 0, 1000).unwrap());

    // One more event: the index appears, whole, and the temporary file is gone.
    log.append(stdout(SMALL_LOG_EVENTS)).unwrap();
    assert!(index.exists() && !tmp.exists());
    assert_eq!(std::fs::metadata(&index).unwrap().len(), (SMALL_LOG_EVENTS + 1) * 8);
    for seq in SMALL_LOG_EVENTS + 1..100 {
        log.append(stdout(seq)).unwrap();
    }
    // The early reader switches to the index; in-process and file readers agree.
    assert_eq!(early.next_seq().unwrap(), 100);
    let all = early.read(0, 1000).unwrap();
    assert_eq!(all.len(), 100);
    assert_dense(&all, 0);
    assert_eq!(log.read(0, 1000).unwrap(), all);
    drop(log);
    drop(store);
    // And after a restart.
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.log("j").unwrap().next_seq(), 100);
    assert_dense(&store.read_log("j", 0, 1000).unwrap(), 0);
}

#[test]
fn one_event_past_the_byte_limit_creates_the_index_and_readers_never_see_a_partial_line() {
    let (_tmp, dir) = super::state();
    let store = Store::open(&dir).unwrap();
    let log = store.log("big").unwrap();
    log.append(stdout(0)).unwrap();
    let big = "y".repeat(SMALL_LOG_BYTES as usize);
    log.append(JobEventKind::Stdout { data: big.clone() }).unwrap();
    let (data, index, _) = files(&dir, "big");
    assert!(std::fs::metadata(&data).unwrap().len() > SMALL_LOG_BYTES);
    assert!(index.exists(), "a log past {SMALL_LOG_BYTES} bytes must have an index");
    let events = store.read_log("big", 0, 10).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].kind, JobEventKind::Stdout { data: big });

    // A small log whose last line is still being written (no newline yet) shows only the
    // complete lines, to readers and to recovery.
    let other = store.log("torn").unwrap();
    for seq in 0..3 {
        other.append(stdout(seq)).unwrap();
    }
    drop(other);
    let (torn, torn_index, _) = files(&dir, "torn");
    let mut f = std::fs::OpenOptions::new().append(true).open(&torn).unwrap();
    std::io::Write::write_all(&mut f, br#"{"job_id":"torn","seq":3,"ts_ms":1,"kind":"std"#).unwrap();
    assert_eq!(store.log_reader("torn").unwrap().next_seq().unwrap(), 3);
    assert_dense(&store.read_log("torn", 0, 10).unwrap(), 0);
    drop(log);
    drop(store);
    let store = Store::open(&dir).unwrap();
    let reopened = store.log("torn").unwrap();
    assert_eq!(reopened.next_seq(), 3);
    assert_eq!(reopened.append(stdout(3)).unwrap().seq, 3);
    assert_dense(&store.read_log("torn", 0, 10).unwrap(), 0);
    assert!(!torn_index.exists());
}

#[test]
fn a_crash_while_the_log_outgrew_small_is_finished_on_open() {
    let (_tmp, dir) = super::state();
    {
        let store = Store::open(&dir).unwrap();
        let log = store.log("j").unwrap();
        for seq in 0..SMALL_LOG_EVENTS + 5 {
            log.append(stdout(seq)).unwrap();
        }
    }
    // The writer died after writing the line that outgrew small but before the index was
    // renamed into place: no index, a half-written temporary one.
    let (_, index, tmp) = files(&dir, "j");
    std::fs::remove_file(&index).unwrap();
    std::fs::write(&tmp, [7u8; 13]).unwrap();
    let store = Store::open(&dir).unwrap();
    // A reader before repair sees at most the small limit, all of it intact.
    let before = store.read_log("j", 0, 1000).unwrap();
    assert_eq!(before.len() as u64, SMALL_LOG_EVENTS);
    assert_dense(&before, 0);
    // Opening the writer rebuilds the index from the data.
    let log = store.log("j").unwrap();
    assert_eq!(log.next_seq(), SMALL_LOG_EVENTS + 5);
    assert!(index.exists() && !tmp.exists());
    assert_eq!(log.append(stdout(SMALL_LOG_EVENTS + 5)).unwrap().seq, SMALL_LOG_EVENTS + 5);
    let all = store.read_log("j", 0, 1000).unwrap();
    assert_eq!(all.len() as u64, SMALL_LOG_EVENTS + 6);
    assert_dense(&all, 0);
}

fn data_file(dir: &Path, id: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir.join("jobs"))
        .ok()?
        .filter_map(|s| s.ok())
        .map(|s| s.path().join(format!("{id}.jsonl")))
        .find(|p| p.exists())
}

/// An older version kept job ids with their empty log file created ahead, listed in
/// `jobs/reserved` (decision 0005); a gateway killed with some unused leaves them behind. The
/// next open deletes those that are still empty and belong to no job, and keeps the rest.
#[test]
fn files_reserved_by_an_older_version_are_cleaned_up_at_open() {
    let (_tmp, dir) = super::state();
    let store = Store::open(&dir).unwrap();
    let (used, unused) = ("j_used", ["j_unused1", "j_unused2"]);
    // Where the store puts a file log: a log opened without a job record is one.
    for id in unused.iter().chain([&used]) {
        drop(store.log(id).unwrap());
    }
    store.create_job(&super::job(used, "s", None)).unwrap();
    drop(store);
    std::fs::write(dir.join("jobs/reserved"), format!("{}\n{}\n{used}\n", unused[0], unused[1])).unwrap();
    assert!(unused.iter().all(|id| data_file(&dir, id).is_some()));

    let store = Store::open(&dir).unwrap();
    for id in unused {
        assert!(data_file(&dir, id).is_none(), "the unused reserved file of {id} must be gone");
    }
    assert!(data_file(&dir, used).is_some(), "a job's file stays");
    assert!(!dir.join("jobs/reserved").exists());
    // A new id comes with no file.
    let id = store.new_job_id();
    assert!(id.starts_with("j_") && data_file(&dir, &id).is_none());
}
