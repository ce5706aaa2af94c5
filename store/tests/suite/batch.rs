//! `Store::start_job` and `JobLog::append_all`: a tool call's job is inserted with its (empty)
//! log in hand, and its result and exit go into its row in one statement that also records the
//! end. A batch that does not fit the row, or is out of order, is appended event by event, with
//! the same outcome a reader can see.

use axp_protocol::ToolOutput;
use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::log::{MAX_EVENT_BYTES, SMALL_LOG_EVENTS};
use axp_store::{Started, Store, StoreError};

use super::{assert_dense, job, stdout};

fn exited() -> JobEventKind {
    JobEventKind::Exit { state: JobState::Exited, code: Some(0), signal: None, error: None }
}

fn result(text: &str) -> JobEventKind {
    JobEventKind::Result { output: ToolOutput::text(text) }
}

fn started(store: &Store, id: &str, key: Option<&str>) -> Started {
    store.start_job(&job(id, "s", key)).unwrap()
}

fn new_log(store: &Store, id: &str) -> axp_store::JobLog {
    match started(store, id, None) {
        Started::New(log) => log,
        Started::Existing(r) => panic!("job {} already existed", r.id),
    }
}

fn jobs_dir_files(dir: &std::path::Path) -> usize {
    walk(&dir.join("jobs"))
}

fn walk(p: &std::path::Path) -> usize {
    std::fs::read_dir(p).unwrap().map(|e| e.unwrap().path()).map(|p| if p.is_dir() { walk(&p) } else { 1 }).sum()
}

#[test]
fn a_result_and_its_exit_are_appended_together_and_record_the_end() {
    let (_tmp, dir) = super::state();
    {
        let store = Store::open(&dir).unwrap();
        let log = new_log(&store, "call");
        assert_eq!(log.next_seq(), 0, "a new job's log is empty");
        let (events, error) = log.append_all(vec![stdout(0), result("hi"), exited()]);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(log.next_seq(), 3);
        let rec = store.get_job("call").unwrap().unwrap();
        assert_eq!((rec.state, rec.exit_code, rec.ended_ms), (JobState::Exited, Some(0), Some(events[2].ts_ms)));
        // Every reader sees the three, as appended.
        let read = store.read_log("call", 0, 10).unwrap();
        assert_eq!(read, events);
        assert_eq!(store.log_reader("call").unwrap().read(1, 10).unwrap(), events[1..]);
        // `Store::log` hands out the same writer while this one lives.
        assert_eq!(store.log("call").unwrap().next_seq(), 3);
        assert_eq!(jobs_dir_files(&dir), 0, "a small log makes no file");
    }
    let store = Store::open(&dir).unwrap();
    let read = store.read_log("call", 0, 10).unwrap();
    assert_eq!(read.len(), 3);
    assert_eq!(read[1].kind, result("hi"));
    assert_eq!(read[2].kind, exited());
    assert_eq!(store.log("call").unwrap().next_seq(), 3, "the log goes on after its last event");
}

#[test]
fn a_batch_that_would_outgrow_the_row_moves_the_log_to_files_in_order() {
    let (_tmp, dir) = super::state();
    let store = Store::open(&dir).unwrap();
    let log = new_log(&store, "big");
    let before = SMALL_LOG_EVENTS - 1;
    for seq in 0..before {
        log.append(stdout(seq)).unwrap();
    }
    let (events, error) = log.append_all(vec![stdout(before), stdout(before + 1), exited()]);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [before, before + 1, before + 2]);
    assert!(jobs_dir_files(&dir) > 0, "the log moved to files");
    let read = store.read_log("big", 0, 1000).unwrap();
    assert_eq!(read.len() as u64, before + 3);
    assert_dense(&read[..(before + 2) as usize], 0);
    assert_eq!(read.last().unwrap().kind, exited());
    assert_eq!(store.get_job("big").unwrap().unwrap().state, JobState::Exited, "the end is recorded in files too");
}

#[test]
fn an_exit_before_the_end_of_a_batch_is_appended_event_by_event() {
    let (_tmp, store) = super::open();
    let log = new_log(&store, "odd");
    let (events, error) = log.append_all(vec![exited(), stdout(1)]);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(store.get_job("odd").unwrap().unwrap().state, JobState::Exited);
    assert_eq!(store.read_log("odd", 0, 10).unwrap(), events);
}

#[test]
fn an_oversize_event_stops_a_batch_there_and_what_came_before_is_kept() {
    let (_tmp, store) = super::open();
    let log = new_log(&store, "huge");
    let too_big = JobEventKind::Stdout { data: "x".repeat(MAX_EVENT_BYTES as usize + 1) };
    let (events, error) = log.append_all(vec![stdout(0), too_big, exited()]);
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [0]);
    assert!(matches!(error, Some(StoreError::EventTooLarge { .. })), "{error:?}");
    assert_eq!(log.next_seq(), 1, "the refused event used up no seq");
    assert_eq!(store.get_job("huge").unwrap().unwrap().state, JobState::Running, "the exit after it was not appended");
    assert_dense(&store.read_log("huge", 0, 10).unwrap(), 0);
}

#[test]
fn start_job_returns_the_existing_job_for_a_repeated_key_and_inserts_nothing() {
    let (_tmp, store) = super::open();
    let Started::New(log) = started(&store, "first", Some("k")) else { panic!("the first start inserts") };
    log.append(stdout(0)).unwrap();
    match started(&store, "second", Some("k")) {
        Started::Existing(r) => assert_eq!(r.id, "first"),
        Started::New(_) => panic!("a repeated idempotency key must not start a second job"),
    }
    assert!(store.get_job("second").unwrap().is_none());
    assert!(matches!(store.start_job(&job("first", "s", None)), Err(StoreError::AlreadyExists { .. })));
    assert_dense(&store.read_log("first", 0, 10).unwrap(), 0);
}

#[test]
fn a_batch_without_an_exit_is_appended_once_and_the_job_keeps_running() {
    let (_tmp, dir) = super::state();
    {
        let store = Store::open(&dir).unwrap();
        let log = new_log(&store, "chatty");
        let (events, error) = log.append_all(vec![stdout(0), stdout(1)]);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [0, 1]);
        let (more, error) = log.append_all(vec![stdout(2), stdout(3), stdout(4)]);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(more.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(log.next_seq(), 5);
        assert_eq!(store.get_job("chatty").unwrap().unwrap().state, JobState::Running);
        assert_dense(&store.read_log("chatty", 0, 10).unwrap(), 0);
        assert_eq!(store.read_log("chatty", 0, 10).unwrap().len(), 5, "each event once");
    }
    let store = Store::open(&dir).unwrap();
    let read = store.read_log("chatty", 0, 10).unwrap();
    assert_eq!(read.len(), 5, "each event once after a restart too");
    assert_dense(&read, 0);
}
