//! Session records: create, read, replace, close, list, expire, and survive a reopen.

use axp_store::{SessionRecord, Store, StoreError, StoreOptions};

fn session(id: &str, expires_ms: u64) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        workspace: "/work/space".into(),
        tier: "dev-none".into(),
        capabilities: vec!["proc.spawn".into(), "tool(github__*)".into()],
        created_ms: 100,
        expires_ms,
        closed: false,
        token_id: Some(format!("tok-{id}")),
        id_is_bearer: false,
    }
}

#[test]
fn crud_round_trips_and_survives_reopen() {
    let (_tmp, dir) = super::state();
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.get_session("s1").unwrap(), None);

    let mut s1 = session("s1", 5_000);
    store.put_session(&s1).unwrap();
    store.put_session(&session("s2", 9_000)).unwrap();
    assert_eq!(store.get_session("s1").unwrap(), Some(s1.clone()));

    // put replaces every field.
    s1.capabilities = vec!["pty.open".into()];
    s1.token_id = None;
    store.put_session(&s1).unwrap();
    assert_eq!(store.get_session("s1").unwrap(), Some(s1.clone()));

    store.close_session("s1").unwrap();
    store.close_session("s1").unwrap(); // idempotent
    assert!(store.get_session("s1").unwrap().unwrap().closed);
    assert!(matches!(store.close_session("nope"), Err(StoreError::NotFound { what: "session", .. })));

    let ids: Vec<_> = store.list_sessions().unwrap().into_iter().map(|s| s.id).collect();
    assert_eq!(ids, ["s1", "s2"]);

    drop(store);
    let store = Store::open(&dir).unwrap();
    let back = store.get_session("s2").unwrap().unwrap();
    assert_eq!(back, session("s2", 9_000));
    assert!(store.get_session("s1").unwrap().unwrap().closed);
}

#[test]
fn expiry_closes_only_sessions_due() {
    let (_tmp, store) = super::open();
    store.put_session(&session("early", 1_000)).unwrap();
    store.put_session(&session("edge", 2_000)).unwrap();
    store.put_session(&session("late", 3_000)).unwrap();
    let mut closed = session("closed-early", 500);
    closed.closed = true;
    store.put_session(&closed).unwrap();

    assert_eq!(store.expire_sessions(999).unwrap(), 0);
    // `expires_ms <= now` expires; already-closed sessions are not counted again.
    assert_eq!(store.expire_sessions(2_000).unwrap(), 2);
    assert_eq!(store.expire_sessions(2_000).unwrap(), 0);
    let open: Vec<_> = store.list_sessions().unwrap().into_iter().filter(|s| !s.closed).map(|s| s.id).collect();
    assert_eq!(open, ["late"]);
}

#[test]
fn state_dir_is_private_and_exclusive() {
    use std::os::unix::fs::PermissionsExt;
    let (_tmp, dir) = super::state();
    let store = Store::open(&dir).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let db_mode = std::fs::metadata(dir.join("axp.db")).unwrap().permissions().mode() & 0o777;
    assert_eq!(db_mode, 0o600);
    // A second owner of the same directory is refused (flock is per open file description, so
    // this holds within one process as it does across two), after the lock wait.
    let no_wait = StoreOptions::default().lock_wait(std::time::Duration::ZERO);
    assert!(matches!(Store::open_with(&dir, no_wait.clone()), Err(StoreError::Locked { .. })));
    let waited = StoreOptions::default().lock_wait(std::time::Duration::from_millis(200));
    let t = std::time::Instant::now();
    assert!(matches!(Store::open_with(&dir, waited), Err(StoreError::Locked { .. })));
    assert!(t.elapsed() >= std::time::Duration::from_millis(200));
    // A job log that outlives its store keeps the directory locked: it can still be written.
    let log = store.log("j").unwrap();
    drop(store);
    assert!(matches!(Store::open_with(&dir, no_wait), Err(StoreError::Locked { .. })));
    drop(log);
    Store::open(&dir).unwrap();
}

#[test]
fn a_newer_schema_is_refused_and_bad_rows_are_reported() {
    let (_tmp, dir) = super::state();
    Store::open(&dir).unwrap().put_session(&session("s", 1)).unwrap();
    // Reopening an up-to-date database migrates nothing and keeps the data.
    assert!(Store::open(&dir).unwrap().get_session("s").unwrap().is_some());

    // (The store holds SQLite's locks exclusively while open, so the tampering connection is
    // closed before each reopen.)
    let db = rusqlite::Connection::open(dir.join("axp.db")).unwrap();
    db.execute("UPDATE sessions SET capabilities = 'not json' WHERE id = 's'", []).unwrap();
    drop(db);
    let store = Store::open(&dir).unwrap();
    assert!(matches!(store.get_session("s"), Err(StoreError::Corrupt { .. })));
    drop(store);

    let db = rusqlite::Connection::open(dir.join("axp.db")).unwrap();
    db.pragma_update(None, "user_version", 99).unwrap();
    drop(db);
    match Store::open(&dir) {
        Err(StoreError::SchemaTooNew { found: 99, supported: 4, .. }) => {}
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}
