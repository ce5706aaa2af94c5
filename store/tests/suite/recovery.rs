//! Recovery on open: torn tails, an index longer than the data, a lost index. Each test damages
//! real files the way a crash or a power loss can, then checks no complete event is lost.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use axp_store::{Store, StoreError};

use super::{assert_dense, stdout};

/// Writes `n` events to job `id` in a store at `dir`, then closes the store.
fn write_events(dir: &Path, id: &str, n: u64) {
    let store = Store::open(dir).unwrap();
    let log = store.log(id).unwrap();
    for seq in 0..n {
        log.append(stdout(seq)).unwrap();
    }
}

/// The data and index files of job `id` (found by name, wherever its shard is).
fn files(dir: &Path, id: &str) -> (PathBuf, PathBuf) {
    for shard in std::fs::read_dir(dir.join("jobs")).unwrap() {
        let shard = shard.unwrap().path();
        let data = shard.join(format!("{id}.jsonl"));
        if data.exists() {
            return (data, shard.join(format!("{id}.idx")));
        }
    }
    panic!("no log files for {id}");
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    OpenOptions::new().append(true).open(path).unwrap().write_all(bytes).unwrap();
}

fn check_after_reopen(dir: &Path, id: &str, expect: u64) {
    let store = Store::open(dir).unwrap();
    let log = store.log(id).unwrap();
    assert_eq!(log.next_seq(), expect);
    let all = store.read_log(id, 0, 10_000).unwrap();
    assert_eq!(all.len() as u64, expect);
    assert_dense(&all, 0);
    // The log is usable again and the next event lands right after the last good one.
    assert_eq!(log.append(stdout(expect)).unwrap().seq, expect);
    assert_dense(&store.read_log(id, 0, 10_000).unwrap(), 0);
}

#[test]
fn torn_last_line_is_cut_and_nothing_complete_is_lost() {
    let (_tmp, dir) = super::state();
    write_events(&dir, "j", 100);
    let (data, _) = files(&dir, "j");
    let before = std::fs::metadata(&data).unwrap().len();
    // Half of an event line, as a writer killed mid-write leaves it.
    append_bytes(&data, br#"{"job_id":"j","seq":100,"ts_ms":1,"kind":"stdout","da"#);
    // Before repair (only `Store::log` repairs), a reader sees exactly the complete events.
    {
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.log_reader("j").unwrap().next_seq().unwrap(), 100);
        assert_dense(&store.read_log("j", 90, 100).unwrap(), 90);
        assert_eq!(store.read_log("j", 90, 100).unwrap().len(), 10);
    }
    check_after_reopen(&dir, "j", 100);
    // The torn bytes are gone: the file grew by exactly one new event.
    assert!(std::fs::metadata(&data).unwrap().len() > before);
}

#[test]
fn index_longer_than_data_is_cut_back() {
    let (_tmp, dir) = super::state();
    write_events(&dir, "j", 100);
    let (_, index) = files(&dir, "j");
    // Entries pointing past the data's end (index reached the disk, data did not), plus a
    // partial entry.
    let mut junk = Vec::new();
    for i in 0..5u64 {
        junk.extend_from_slice(&(10_000_000 + i).to_le_bytes());
    }
    junk.extend_from_slice(&[1, 2, 3]);
    append_bytes(&index, &junk);
    // Before repair, a reader ignores entries past the data's end.
    {
        let store = Store::open(&dir).unwrap();
        let mut r = store.log_reader("j").unwrap();
        assert_eq!(r.next_seq().unwrap(), 100);
        let events = r.read(95, 100).unwrap();
        assert_eq!(events.len(), 5);
        assert_dense(&events, 95);
    }
    check_after_reopen(&dir, "j", 100);
    assert_eq!(std::fs::metadata(&index).unwrap().len(), 101 * 8);
}

#[test]
fn complete_lines_without_index_entries_are_reindexed() {
    let (_tmp, dir) = super::state();
    write_events(&dir, "j", 100);
    let (data, index) = files(&dir, "j");
    // Lose the last 30 index entries (the writer died between the data and index writes, over
    // and over), and tear an entry in half; then add a torn data line as well.
    let f = OpenOptions::new().write(true).open(&index).unwrap();
    f.set_len(70 * 8 + 4).unwrap();
    append_bytes(&data, b"{\"job_id\":\"j\",\"se");
    check_after_reopen(&dir, "j", 100);

    // Losing the whole index rebuilds it from the data.
    std::fs::remove_file(&index).unwrap();
    check_after_reopen(&dir, "j", 101);
}

#[test]
fn garbage_lines_after_the_last_event_are_dropped() {
    let (_tmp, dir) = super::state();
    write_events(&dir, "j", 10);
    let (data, _) = files(&dir, "j");
    // Zeroes and a complete-looking line with the wrong seq, as a power loss can leave them.
    append_bytes(&data, &[0u8; 100]);
    append_bytes(&data, b"\n{\"job_id\":\"j\",\"seq\":57,\"ts_ms\":1,\"kind\":\"stdout\",\"data\":\"x\"}\n");
    check_after_reopen(&dir, "j", 10);
}

#[test]
fn damage_in_the_middle_is_reported_not_hidden() {
    let (_tmp, dir) = super::state();
    write_events(&dir, "j", 10);
    let (data, _) = files(&dir, "j");
    let mut bytes = std::fs::read(&data).unwrap();
    // Flip a byte inside event 2's JSON (not the last event, so recovery keeps the index).
    let line2 = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1;
    bytes[line2] = b'#';
    std::fs::write(&data, &bytes).unwrap();
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.log("j").unwrap().next_seq(), 10);
    assert_dense(&store.read_log("j", 0, 2).unwrap(), 0);
    assert!(matches!(store.read_log("j", 0, 10), Err(StoreError::Corrupt { .. })));
    assert_dense(&store.read_log("j", 3, 10).unwrap(), 3);
}
