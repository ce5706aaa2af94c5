//! One retention scenario, run against both backends (the embedded store in `retention.rs`,
//! PostgreSQL in `postgres.rs`) through the public `Store` functions only: what
//! `Store::delete_ended` removes and what it must leave alone.

use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::{Deleted, JobRecord, SessionRecord, Store};

/// The cutoff the scenario deletes before.
const CUTOFF: u64 = 5_000;

/// The job whose log outgrows its row (files on the embedded store, chunks on PostgreSQL).
pub(crate) const BIG: &str = "j_retention_big";

fn session(id: &str, expires_ms: u64) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        workspace: "/w".into(),
        tier: "kernel-lsm".into(),
        capabilities: vec!["proc.spawn".into()],
        created_ms: 500,
        expires_ms,
        closed: false,
        token_id: None,
        id_is_bearer: false,
    }
}

fn job(id: &str, session: &str, created_ms: u64) -> JobRecord {
    JobRecord {
        id: id.into(),
        session_id: session.into(),
        kind: "command".into(),
        spec: serde_json::json!({"command": ["echo", id]}),
        state: JobState::Running,
        exit_code: None,
        signal: None,
        error: None,
        created_ms,
        ended_ms: None,
        idempotency_key: None,
    }
}

/// A job with `events` lines of output, ended (exited 0) at `ended_ms` unless `None`.
fn add(store: &Store, id: &str, session: &str, created_ms: u64, events: u64, ended_ms: Option<u64>) {
    store.create_job(&job(id, session, created_ms)).unwrap();
    let log = store.log(id).unwrap();
    for i in 0..events {
        log.append(JobEventKind::Stdout { data: format!("{id} line {i} {}\n", "x".repeat(64)) }).unwrap();
    }
    if let Some(at) = ended_ms {
        log.append(JobEventKind::Exit { state: JobState::Exited, code: Some(0), signal: None, error: None }).unwrap();
        store.set_job_state(id, JobState::Exited, Some(0), None, None, Some(at)).unwrap();
    }
}

/// Runs the scenario on an empty store; `before` is called once everything is recorded and
/// before anything is deleted.
pub(crate) fn run(store: &Store, before: impl FnOnce()) {
    store.put_session(&session("old", 2_000)).unwrap();
    store.put_session(&session("busy", 2_000)).unwrap();
    store.put_session(&session("new", 10_000_000)).unwrap();
    add(store, "j_small", "old", 1_000, 2, Some(1_500));
    add(store, BIG, "old", 1_100, 300, Some(1_600));
    add(store, "j_ended_late", "new", 1_200, 2, Some(9_000));
    add(store, "j_running", "busy", 1_300, 2, None);
    add(store, "j_parked", "busy", 1_400, 0, None);
    store.set_job_state("j_parked", JobState::AwaitingApproval, None, None, None, None).unwrap();
    add(store, "j_recent", "new", 6_000, 2, Some(7_000));
    before();

    // One at a time: the oldest first, and the session still has a job.
    assert_eq!(store.delete_ended(CUTOFF, 1).unwrap(), Deleted { jobs: 1, sessions: 0 });
    assert_eq!(store.get_job("j_small").unwrap(), None);
    assert!(store.get_job(BIG).unwrap().is_some());
    // The rest: the big log goes too, and with it the last job of the expired session.
    assert_eq!(store.delete_ended(CUTOFF, 100).unwrap(), Deleted { jobs: 1, sessions: 1 });
    assert_eq!(store.get_job(BIG).unwrap(), None);
    assert_eq!(store.get_session("old").unwrap(), None);
    assert!(store.read_log(BIG, 0, 10).map(|events| events.is_empty()).unwrap_or(true), "the log went with its job");
    // Nothing more to do.
    assert_eq!(store.delete_ended(CUTOFF, 100).unwrap(), Deleted::default());

    // Left alone: a job that ended after the cutoff, a running one, one awaiting approval, one
    // created after the cutoff; the expired session that still has jobs, and the live one.
    for id in ["j_ended_late", "j_running", "j_parked", "j_recent"] {
        assert!(store.get_job(id).unwrap().is_some(), "{id} was kept");
    }
    assert!(store.get_session("busy").unwrap().is_some());
    assert!(store.get_session("new").unwrap().is_some());
    let kept = store.read_log("j_ended_late", 0, 10).unwrap();
    assert_eq!(kept.len(), 3, "a kept job's log is whole: {kept:?}");
}
