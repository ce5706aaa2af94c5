//! Small logs: a job of a few events has no index file (issue 2: creating it was the largest
//! single cost of a tool call), the index appears whole when the log outgrows
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

/// The ids listed in `jobs/reserved` (the reserve's crash-recovery list).
fn reserved_list(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("jobs/reserved")).unwrap_or_default().lines().map(String::from).collect()
}

fn data_file(dir: &Path, id: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir.join("jobs"))
        .ok()?
        .filter_map(|s| s.ok())
        .map(|s| s.path().join(format!("{id}.jsonl")))
        .find(|p| p.exists())
}

/// Run by the test below in a child process: opens a store with a reserve of 4, uses one
/// reserved id for a job with three events, and exits without running any destructor (as a
/// killed gateway would), printing the id it used.
#[test]
#[ignore = "child process of reserved_ids_have_their_file_ready_and_unused_ones_are_cleaned_up"]
fn reserve_child() {
    let Ok(dir) = std::env::var("AXP_STORE_RESERVE_DIR") else { return };
    let dir = PathBuf::from(dir);
    let store = Store::open_with(&dir, axp_store::StoreOptions::default().reserve_logs(4)).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while reserved_list(&dir).len() < 4 || reserved_list(&dir).iter().any(|id| data_file(&dir, id).is_none()) {
        assert!(std::time::Instant::now() < deadline, "the reserve never filled");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let id = store.new_job_id();
    assert!(reserved_list(&dir).contains(&id), "a ready id is one the reserve listed");
    // A reserved id's log is an ordinary, empty, writable log.
    store.create_job(&super::job(&id, "s", None)).unwrap();
    let log = store.log(&id).unwrap();
    assert_eq!(log.next_seq(), 0);
    for seq in 0..3 {
        log.append(stdout(seq)).unwrap();
    }
    println!("USED {id}");
    std::process::exit(0);
}

#[test]
fn reserved_ids_have_their_file_ready_and_unused_ones_are_cleaned_up() {
    let (_tmp, dir) = super::state();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "suite::small::reserve_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("AXP_STORE_RESERVE_DIR", &dir)
        .output()
        .unwrap();
    let stdout_text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout_text}{}", String::from_utf8_lossy(&out.stderr));
    let used = stdout_text
        .split("USED ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the child used an id")
        .to_string();
    // What the killed process left: its list (the used id may or may not still be on it, as the
    // thread may have refilled since) and an empty file for every id it had not handed out.
    let listed = reserved_list(&dir);
    let unused: Vec<&String> = listed.iter().filter(|id| **id != used).collect();
    assert!(unused.len() >= 3, "{listed:?}");
    for id in &unused {
        let f = data_file(&dir, id).expect("a listed id has its file");
        assert_eq!(std::fs::metadata(f).unwrap().len(), 0);
    }

    // The next open deletes the empty files that belong to no job, keeps the job's log.
    let store = Store::open(&dir).unwrap();
    for id in &unused {
        assert!(data_file(&dir, id).is_none(), "the unused reserved file of {id} must be gone");
    }
    assert!(!dir.join("jobs/reserved").exists());
    assert_dense(&store.read_log(&used, 0, 10).unwrap(), 0);
    assert_eq!(store.read_log(&used, 0, 10).unwrap().len(), 3);
    // Without a reserve, ids are fresh and their file is made when the log is opened.
    let id = store.new_job_id();
    assert!(data_file(&dir, &id).is_none());
    store.log(&id).unwrap().append(stdout(0)).unwrap();
    assert!(data_file(&dir, &id).is_some());
}

#[test]
fn a_clean_shutdown_deletes_the_reserve_it_did_not_hand_out() {
    let (_tmp, dir) = super::state();
    {
        let _store = Store::open_with(&dir, axp_store::StoreOptions::default().reserve_logs(4)).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while reserved_list(&dir).len() < 4 {
            assert!(std::time::Instant::now() < deadline, "the reserve never filled");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    assert!(!dir.join("jobs/reserved").exists());
    let left: usize = std::fs::read_dir(dir.join("jobs"))
        .unwrap()
        .filter_map(|s| s.ok())
        .filter(|s| s.path().is_dir())
        .map(|s| std::fs::read_dir(s.path()).unwrap().count())
        .sum();
    assert_eq!(left, 0, "no reserved file may outlive a clean shutdown");
}
