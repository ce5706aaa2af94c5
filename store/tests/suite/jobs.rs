//! Job records: idempotency (including under contention), state changes, and
//! `mark_running_lost` after a simulated gateway restart.

use std::sync::{Arc, Barrier};

use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::{Created, Store, StoreError};

use super::job;

#[test]
fn idempotency_key_returns_the_existing_job() {
    let (_tmp, store) = super::open();
    assert_eq!(store.create_job(&job("j1", "s1", Some("k"))).unwrap(), Created::New);
    // Same session, same key, different job id: the first job comes back, nothing inserted.
    match store.create_job(&job("j2", "s1", Some("k"))).unwrap() {
        Created::Existing(existing) => assert_eq!(existing, job("j1", "s1", Some("k"))),
        Created::New => panic!("a reused key must not create a job"),
    }
    assert_eq!(store.get_job("j2").unwrap(), None);
    // Another session may use the same key.
    assert_eq!(store.create_job(&job("j3", "s2", Some("k"))).unwrap(), Created::New);
    // Jobs without a key never collide.
    assert_eq!(store.create_job(&job("j4", "s1", None)).unwrap(), Created::New);
    assert_eq!(store.create_job(&job("j5", "s1", None)).unwrap(), Created::New);
    // A duplicate id is an error, not a silent no-op.
    assert!(matches!(store.create_job(&job("j4", "s1", None)), Err(StoreError::AlreadyExists { what: "job", .. })));
    assert!(matches!(store.create_job(&job("../evil", "s1", None)), Err(StoreError::InvalidId { .. })));
    let ids: Vec<_> = store.list_jobs("s1").unwrap().into_iter().map(|j| j.id).collect();
    assert_eq!(ids, ["j1", "j4", "j5"]);
}

#[test]
fn concurrent_creates_with_one_key_make_exactly_one_job() {
    let (_tmp, store) = super::open();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                store.create_job(&job(&format!("job-{i}"), "s", Some("same"))).unwrap()
            })
        })
        .collect();
    let results: Vec<Created> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let new = results.iter().filter(|r| **r == Created::New).count();
    assert_eq!(new, 1, "exactly one create wins: {results:?}");
    let jobs = store.list_jobs("s").unwrap();
    assert_eq!(jobs.len(), 1);
    for r in results {
        if let Created::Existing(j) = r {
            assert_eq!(j.id, jobs[0].id, "every loser sees the winner");
        }
    }
}

#[test]
fn set_job_state_records_the_outcome() {
    let (_tmp, store) = super::open();
    store.create_job(&job("j", "s", None)).unwrap();
    let err = serde_json::json!({"code": -32008, "reason": "gone"});
    store.set_job_state("j", JobState::Failed, Some(3), Some("SIGTERM".into()), Some(err.clone()), Some(42)).unwrap();
    let j = store.get_job("j").unwrap().unwrap();
    assert_eq!(
        (j.state, j.exit_code, j.signal.as_deref(), j.error, j.ended_ms),
        (JobState::Failed, Some(3), Some("SIGTERM"), Some(err), Some(42))
    );
    assert!(matches!(
        store.set_job_state("nope", JobState::Exited, None, None, None, None),
        Err(StoreError::NotFound { what: "job", .. })
    ));
}

#[test]
fn restart_marks_running_jobs_lost_but_keeps_logged_outcomes() {
    let (_tmp, dir) = super::state();
    {
        let store = Store::open(&dir).unwrap();
        // Running, with some output: becomes lost.
        store.create_job(&job("running", "s", None)).unwrap();
        let log = store.log("running").unwrap();
        for seq in 0..3 {
            log.append(super::stdout(seq)).unwrap();
        }
        // Running with no log at all: becomes lost too.
        store.create_job(&job("silent", "s", None)).unwrap();
        // Awaiting approval: untouched.
        let mut waiting = job("waiting", "s", None);
        waiting.state = JobState::AwaitingApproval;
        store.create_job(&waiting).unwrap();
        // Exited and recorded: untouched.
        store.create_job(&job("done", "s", None)).unwrap();
        store.set_job_state("done", JobState::Exited, Some(0), None, None, Some(7)).unwrap();
        // Logged its exit but the record still says running (a log in files, whose line is
        // written before the record is updated, and a gateway that died in between): the log
        // wins. Appending the exit records the end, so the record is set back to running.
        store.create_job(&job("logged-exit", "s", None)).unwrap();
        store
            .log("logged-exit")
            .unwrap()
            .append(JobEventKind::Exit { state: JobState::Exited, code: Some(5), signal: None, error: None })
            .unwrap();
        assert_eq!(store.get_job("logged-exit").unwrap().unwrap().exit_code, Some(5), "the append recorded the end");
        store.set_job_state("logged-exit", JobState::Running, None, None, None, None).unwrap();
    }
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.mark_running_lost(99_000).unwrap(), 2);
    let state = |id: &str| store.get_job(id).unwrap().unwrap();
    assert_eq!(state("running").state, JobState::Lost);
    assert_eq!(state("running").ended_ms, Some(99_000));
    assert_eq!(state("silent").state, JobState::Lost);
    assert_eq!(state("waiting").state, JobState::AwaitingApproval);
    assert_eq!(state("done").state, JobState::Exited);
    let logged = state("logged-exit");
    assert_eq!((logged.state, logged.exit_code), (JobState::Exited, Some(5)));

    // The lost job's log keeps its output and ends with an exit event saying `lost`.
    let events = store.read_log("running", 0, 100).unwrap();
    assert_eq!(events.len(), 4);
    super::assert_dense(&events[..3], 0);
    assert!(matches!(events[3].kind, JobEventKind::Exit { state: JobState::Lost, .. }));
    // Running it again finds nothing to do.
    assert_eq!(store.mark_running_lost(100_000).unwrap(), 0);
    assert_eq!(store.read_log("running", 0, 100).unwrap().len(), 4);
}

#[test]
fn jobs_in_state_lists_parked_jobs_across_sessions_and_survives_reopen() {
    let (tmp, store) = super::open();
    for (id, session) in [("a", "s1"), ("b", "s2"), ("c", "s1")] {
        let mut j = job(id, session, None);
        j.state = if id == "c" { JobState::Running } else { JobState::AwaitingApproval };
        store.create_job(&j).unwrap();
    }
    let ids = |s: &Store| -> Vec<String> {
        s.jobs_in_state(JobState::AwaitingApproval).unwrap().into_iter().map(|j| j.id).collect()
    };
    assert_eq!(ids(&store), ["a", "b"]);
    store.set_job_state("a", JobState::Running, None, None, None, None).unwrap();
    assert_eq!(ids(&store), ["b"]);
    drop(store);
    let store = Store::open(&tmp.path().join("state")).unwrap();
    // A restart's repair leaves parked jobs parked.
    store.mark_running_lost(1).unwrap();
    assert_eq!(ids(&store), ["b"]);
}

/// Schema 3 keeps only the rows lookups need in two indexes (jobs with an idempotency key, live
/// jobs). A database written by schema 2 (full indexes) is migrated in place, keeps its jobs and
/// their idempotency, and the start-up lookups by state use the small index.
#[test]
fn a_schema_2_database_is_migrated_and_live_lookups_use_the_partial_index() {
    let (tmp, store) = super::open();
    let dir = tmp.path().join("state");
    drop(store);
    // Turn the fresh database back into what schema 2 left.
    let db = rusqlite::Connection::open(dir.join("axp.db")).unwrap();
    db.execute_batch(
        "ALTER TABLE jobs DROP COLUMN log;
         DROP INDEX jobs_by_idempotency_key; DROP INDEX jobs_live;
         CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs(session_id, idempotency_key);
         CREATE INDEX jobs_by_state ON jobs(state);
         PRAGMA user_version = 2;",
    )
    .unwrap();
    drop(db);
    let store = Store::open(&dir).unwrap();
    let mut parked = job("p", "s1", None);
    parked.state = JobState::AwaitingApproval;
    store.create_job(&parked).unwrap();
    store.create_job(&job("k", "s1", Some("key"))).unwrap();
    store.create_job(&job("n", "s1", None)).unwrap();
    store.set_job_state("n", JobState::Exited, Some(0), None, None, Some(2)).unwrap();
    drop(store);
    let store = Store::open(&dir).unwrap();
    assert!(matches!(store.create_job(&job("k2", "s1", Some("key"))).unwrap(), Created::Existing(j) if j.id == "k"));
    assert_eq!(store.create_job(&job("k3", "s2", Some("key"))).unwrap(), Created::New);
    let parked: Vec<_> = store.jobs_in_state(JobState::AwaitingApproval).unwrap().into_iter().map(|j| j.id).collect();
    assert_eq!(parked, ["p"]);
    let exited: Vec<_> = store.jobs_in_state(JobState::Exited).unwrap().into_iter().map(|j| j.id).collect();
    assert_eq!(exited, ["n"]);
    drop(store);
    let db = rusqlite::Connection::open(dir.join("axp.db")).unwrap();
    assert_eq!(db.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)).unwrap(), 4);
    for state in ["running", "awaiting_approval"] {
        let plan: String = db
            .query_row(&format!("EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE state = '{state}'"), [], |r| r.get(3))
            .unwrap();
        assert!(plan.contains("jobs_live"), "{state}: {plan}");
    }
    // Jobs without a key are not in the key index at all.
    let sql: String =
        db.query_row("SELECT sql FROM sqlite_master WHERE name = 'jobs_by_idempotency_key'", [], |r| r.get(0)).unwrap();
    assert!(sql.ends_with("WHERE idempotency_key IS NOT NULL"), "{sql}");
}
