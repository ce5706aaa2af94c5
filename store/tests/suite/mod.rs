//! Test modules, one per concern, plus the helpers they share.

mod batch;
mod crash;
mod jobs;
mod large;
mod log;
mod recovery;
mod retention;
mod rows;
mod sessions;
mod small;

use axp_protocol::methods::{JobEvent, JobEventKind, JobState};
use axp_store::{JobRecord, Store};

/// A fresh state directory (inside a temp dir, so `Store::open` must create it).
pub(crate) fn state() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    (tmp, dir)
}

pub(crate) fn open() -> (tempfile::TempDir, Store) {
    let (tmp, dir) = state();
    let store = Store::open(&dir).unwrap();
    (tmp, store)
}

pub(crate) fn job(id: &str, session: &str, key: Option<&str>) -> JobRecord {
    JobRecord {
        id: id.into(),
        session_id: session.into(),
        kind: "command".into(),
        spec: serde_json::json!({"command": ["echo", id]}),
        state: JobState::Running,
        exit_code: None,
        signal: None,
        error: None,
        created_ms: 1_000,
        ended_ms: None,
        idempotency_key: key.map(Into::into),
    }
}

/// The payload of event `seq` in tests that check content: deterministic, varied in length.
pub(crate) fn payload(seq: u64) -> String {
    format!("line {seq} {}\n", "x".repeat((seq % 97) as usize))
}

pub(crate) fn stdout(seq: u64) -> JobEventKind {
    JobEventKind::Stdout { data: payload(seq) }
}

/// Asserts `events` are exactly events `from..from+len` with [`payload`] content.
pub(crate) fn assert_dense(events: &[JobEvent], from: u64) {
    for (i, e) in events.iter().enumerate() {
        let seq = from + i as u64;
        assert_eq!(e.seq, seq, "events must be dense");
        assert_eq!(e.kind, stdout(seq), "event {seq} must be intact");
    }
}

/// The gateway shares these across tokio tasks and threads.
#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<axp_store::Store>();
    send_sync::<axp_store::JobLog>();
    send::<axp_store::LogReader>();
    send_sync::<axp_store::StoreError>();
}
