//! The PostgreSQL store against a real PostgreSQL server: the cluster `scripts/pg-cluster.sh`
//! starts, named by `AXP_TEST_PG_URL`. Without it these tests fail when `CI` is set (they must
//! run there) and say they were skipped otherwise.
//!
//! Each test works in a schema of its own (the store's connections get it as their
//! `search_path` through the URL's `options`), so tests run in parallel and start from an empty
//! database. Two stores opened on one schema, each with its own state directory, are two
//! replicas sharing one database.

#![allow(clippy::unwrap_used, reason = "tests fail loudly by design")]

use std::sync::{Arc, Barrier};
use std::time::Instant;

use axp_protocol::ToolOutput;
use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::{Created, JobRecord, SessionRecord, Started, Store, StoreError, StoreKind, StoreOptions};

/// The test cluster's URL; `None` (after saying so) when there is none outside CI.
fn pg_url() -> Option<String> {
    match std::env::var("AXP_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => panic!(
            "AXP_TEST_PG_URL is not set, and CI is: the PostgreSQL store's tests must run there; start a cluster with \
             `export AXP_TEST_PG_URL=\"$(scripts/pg-cluster.sh start)\"` (and `scripts/pg-cluster.sh stop` after)"
        ),
        _ => {
            eprintln!(
                "SKIPPED: AXP_TEST_PG_URL is not set; run `export AXP_TEST_PG_URL=\"$(scripts/pg-cluster.sh start)\"`"
            );
            None
        }
    }
}

/// A schema of its own for one test, dropped at the end.
struct Db {
    admin: postgres::Client,
    schema: String,
    /// The cluster's URL with this schema as the connections' `search_path`.
    url: String,
    tmp: tempfile::TempDir,
}

impl Db {
    fn new() -> Option<Db> {
        let base = pg_url()?;
        let schema = format!("t_{}", uuid::Uuid::now_v7().simple());
        let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
        admin.batch_execute(&format!("CREATE SCHEMA {schema}")).unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        Some(Db { admin, schema, url, tmp: tempfile::tempdir().unwrap() })
    }

    /// A replica: a store on this schema with a state directory of its own.
    fn replica(&self, name: &str) -> Store {
        self.replica_with(name, StoreOptions::default())
    }

    fn replica_with(&self, name: &str, options: StoreOptions) -> Store {
        Store::connect(&self.url, &self.tmp.path().join(name), options).unwrap()
    }

    fn count(&mut self, sql: &str) -> i64 {
        self.admin.query_one(&sql.replace("$S", &self.schema), &[]).unwrap().get(0)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.admin.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema));
    }
}

fn session(id: &str) -> SessionRecord {
    SessionRecord {
        id: id.into(),
        workspace: "/w".into(),
        tier: "kernel-lsm".into(),
        capabilities: vec!["fs.read(/w/**)".into(), "net.http(example.org)".into()],
        created_ms: 1_000,
        expires_ms: 5_000,
        closed: false,
        token_id: Some("0123456789abcdef0123456789abcdef".into()),
        id_is_bearer: false,
    }
}

fn job(id: &str, session: &str, key: Option<&str>) -> JobRecord {
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

fn started(store: &Store, id: &str) -> axp_store::JobLog {
    match store.start_job(&job(id, "s1", None)).unwrap() {
        Started::New(log) => log,
        Started::Existing(_) => panic!("a new job id must start a new job"),
    }
}

fn stdout(data: impl Into<String>) -> JobEventKind {
    JobEventKind::Stdout { data: data.into() }
}

fn exited(code: i32) -> JobEventKind {
    JobEventKind::Exit { state: JobState::Exited, code: Some(code), signal: None, error: None }
}

/// Asserts that `events` are `from..` of `job`, dense and in order.
fn assert_dense(events: &[axp_protocol::methods::JobEvent], job: &str, from: u64) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!((e.job_id.as_str(), e.seq), (job, from + i as u64), "events must be dense and in order");
    }
}

#[test]
fn sessions_round_trip() {
    let Some(db) = Db::new() else { return };
    let store = db.replica("a");
    assert_eq!(store.kind(), StoreKind::Postgres);
    assert_eq!(store.get_session("s1").unwrap(), None);
    store.put_session(&session("s1")).unwrap();
    let mut s2 = session("s2");
    s2.created_ms = 2_000;
    s2.expires_ms = 9_000;
    s2.id_is_bearer = true;
    s2.token_id = None;
    store.put_session(&s2).unwrap();
    assert_eq!(store.get_session("s1").unwrap(), Some(session("s1")));
    assert_eq!(store.get_session("s2").unwrap(), Some(s2.clone()));

    // Another replica sees the same records.
    let other = db.replica("b");
    assert_eq!(other.list_sessions().unwrap(), vec![session("s1"), s2.clone()]);

    // Replacing updates every field.
    let mut s1 = session("s1");
    s1.capabilities = vec!["fs.write(/w/out/**)".into()];
    s1.tier = "dev-none".into();
    other.put_session(&s1).unwrap();
    assert_eq!(store.get_session("s1").unwrap(), Some(s1.clone()));

    // Expiry closes what is due, once; closing is idempotent; an unknown id is NotFound.
    assert_eq!(store.expire_sessions(5_000).unwrap(), 1);
    assert_eq!(store.expire_sessions(5_000).unwrap(), 0);
    assert!(store.get_session("s1").unwrap().unwrap().closed);
    assert!(!store.get_session("s2").unwrap().unwrap().closed);
    store.close_session("s2").unwrap();
    store.close_session("s2").unwrap();
    assert!(other.get_session("s2").unwrap().unwrap().closed);
    assert!(matches!(store.close_session("nope"), Err(StoreError::NotFound { what: "session", .. })));
}

#[test]
fn a_job_and_its_log_replay_from_any_seq_on_another_replica() {
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    let log = started(&a, "j1");
    assert_eq!(log.next_seq(), 0);
    for i in 0..5 {
        assert_eq!(log.append(stdout(format!("line {i}\n"))).unwrap().seq, i);
    }
    // A result and its exit in one statement, recording the job's end.
    let (events, err) = log.append_all(vec![JobEventKind::Result { output: ToolOutput::text("done") }, exited(0)]);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [5, 6]);
    assert_eq!(log.next_seq(), 7);

    // Replay on the other replica, from the start and from the middle, with small batches.
    let mut reader = b.log_reader("j1").unwrap();
    assert_eq!(reader.next_seq().unwrap(), 7);
    let all = reader.read(0, 100).unwrap();
    assert_eq!(all.len(), 7);
    assert_dense(&all, "j1", 0);
    assert_eq!(all[3].kind, stdout("line 3\n"));
    let tail = reader.read(4, 2).unwrap();
    assert_eq!(tail.len(), 2);
    assert_dense(&tail, "j1", 4);
    assert!(reader.read(7, 10).unwrap().is_empty());
    assert_eq!(b.read_log("j1", 6, 10).unwrap()[0].kind, exited(0));
    assert_eq!(log.read(2, 3).unwrap(), all[2..5].to_vec());

    // The exit recorded the end.
    let record = b.get_job("j1").unwrap().unwrap();
    assert_eq!((record.state, record.exit_code), (JobState::Exited, Some(0)));
    assert!(record.ended_ms.is_some());

    // Idempotency keys and duplicate ids behave as on the embedded store.
    assert_eq!(a.create_job(&job("k1", "s1", Some("key"))).unwrap(), Created::New);
    match b.create_job(&job("k2", "s1", Some("key"))).unwrap() {
        Created::Existing(existing) => assert_eq!(existing.id, "k1"),
        Created::New => panic!("a reused key must not create a job"),
    }
    assert!(matches!(b.create_job(&job("k1", "s2", None)), Err(StoreError::AlreadyExists { .. })));
    assert_eq!(a.list_jobs("s1").unwrap().iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["j1", "k1"]);
    assert_eq!(a.jobs_in_state(JobState::Running).unwrap().len(), 1);
    // A reader of an unknown job reads an empty log.
    assert_eq!(a.log_reader("nothing").unwrap().next_seq().unwrap(), 0);
}

#[test]
fn a_large_log_moves_to_chunks_and_replays_whole_and_in_order() {
    let Some(mut db) = Db::new() else { return };
    let a = db.replica("a");
    let log = started(&a, "big");
    // Small events past the row's limits and past several seals, then some 64 KiB ones.
    let n_small = 5_000u64;
    let t = Instant::now();
    for i in 0..n_small {
        log.append(stdout(format!("small {i}\n"))).unwrap();
    }
    let big = "x".repeat(64 << 10);
    for _ in 0..100 {
        log.append(stdout(big.clone())).unwrap();
    }
    log.append(exited(3)).unwrap();
    let total = n_small + 101;
    eprintln!("appended {total} events in {:?}", t.elapsed());
    assert_eq!(log.next_seq(), total);

    // The row's log moved out, the tail was sealed into chunks of many events.
    assert_eq!(db.count("SELECT count(*) FROM $S.jobs WHERE id = 'big' AND log IS NULL"), 1);
    let chunks = db.count("SELECT count(*) FROM $S.job_log_chunks WHERE job_id = 'big'");
    let tail = db.count("SELECT count(*) FROM $S.job_log_tail WHERE job_id = 'big'");
    assert!(chunks >= 4, "{chunks} chunks");
    assert!(tail < 512, "{tail} events left in the tail");

    // A replay from another replica, batch by batch, sees every event once, in order.
    let b = db.replica("b");
    let mut reader = b.log_reader("big").unwrap();
    assert_eq!(reader.next_seq().unwrap(), total);
    let t = Instant::now();
    let mut next = 0;
    let mut batches = 0;
    while next < total {
        let batch = reader.read(next, 100_000).unwrap();
        assert!(!batch.is_empty());
        assert_dense(&batch, "big", next);
        let bytes: usize = batch.iter().map(|e| serde_json::to_string(e).unwrap().len()).sum();
        assert!(batch.len() == 1 || bytes <= (4 << 20) + (70 << 10), "a batch of {bytes} bytes");
        next += batch.len() as u64;
        batches += 1;
    }
    eprintln!("replayed {total} events (6.4 MB) in {batches} batches in {:?}", t.elapsed());
    assert!(batches >= 2, "the byte budget splits a 6.4 MB replay");
    // From the middle of a chunk, and the last event.
    let mid = reader.read(777, 5).unwrap();
    assert_dense(&mid, "big", 777);
    assert_eq!(mid[0].kind, stdout("small 777\n"));
    assert_eq!(reader.read(total - 1, 5).unwrap()[0].kind, exited(3));
    assert_eq!(b.get_job("big").unwrap().unwrap().exit_code, Some(3));

    // Reopened by a later store (the same replica restarted), the writer goes on where it was.
    drop(log);
    drop(a);
    let a = db.replica("a");
    let log = a.log("big").unwrap();
    assert_eq!(log.next_seq(), total);
    assert_eq!(log.append(stdout("after\n")).unwrap().seq, total);
    assert_eq!(b.read_log("big", total, 10).unwrap()[0].kind, stdout("after\n"));
}

#[test]
fn a_reader_on_another_replica_follows_a_running_job_without_gaps() {
    // The writer moves the log out of its row and seals its tail while the reader polls: each
    // read is one statement on one snapshot, so it sees a move or a seal whole or not at all.
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    let log = started(&a, "live");
    let total = 3_000u64;
    let writer = std::thread::spawn(move || {
        for i in 0..total - 1 {
            log.append(stdout(format!("event {i} {}\n", "y".repeat((i % 7) as usize * 300)))).unwrap();
        }
        log.append(exited(0)).unwrap();
    });
    let mut reader = b.log_reader("live").unwrap();
    let mut next = 0;
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    while next < total {
        assert!(Instant::now() < deadline, "the reader stalled at {next}");
        let batch = reader.read(next, 200).unwrap();
        assert_dense(&batch, "live", next);
        next += batch.len() as u64;
        if batch.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    writer.join().unwrap();
    assert_eq!(reader.read(total - 1, 1).unwrap()[0].kind, exited(0));
}

#[test]
fn a_second_writer_of_one_log_is_refused_not_interleaved() {
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    let la = started(&a, "j");
    la.append(stdout("a0")).unwrap();
    // Replica B opens the same job's log and appends first: A's next append, in the row, must
    // fail rather than put a second event 1 in the log.
    let lb = b.log("j").unwrap();
    assert_eq!(lb.append(stdout("b1")).unwrap().seq, 1);
    assert!(matches!(la.append(stdout("a1")), Err(StoreError::Conflict { .. })));
    // The same once the log lives in chunks.
    for i in 2..40 {
        lb.append(stdout(format!("b{i}"))).unwrap();
    }
    let la = {
        drop(la);
        a.log("j").unwrap()
    };
    assert_eq!(la.next_seq(), 40);
    lb.append(stdout("b40")).unwrap();
    assert!(matches!(la.append(stdout("a40")), Err(StoreError::Conflict { .. })));
    let events = a.read_log("j", 0, 100).unwrap();
    assert_eq!(events.len(), 41);
    assert_dense(&events, "j", 0);
}

#[test]
fn an_operator_nonce_is_used_once_across_replicas_racing_for_it() {
    let Some(db) = Db::new() else { return };
    let stores = [db.replica("a"), db.replica("b")];
    let now = 1_700_000_000_000u64;
    let window = 300_000;
    for round in 0..50 {
        let nonce = format!("nonce-{round}-{}", uuid::Uuid::now_v7().simple());
        let barrier = Arc::new(Barrier::new(2));
        let handles: Vec<_> = stores
            .iter()
            .cloned()
            .map(|store| {
                let (nonce, barrier) = (nonce.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    store.use_nonce(&nonce, now, now, window).unwrap()
                })
            })
            .collect();
        let wins: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(wins.iter().filter(|w| **w).count(), 1, "round {round}: {wins:?}");
        assert!(!stores[0].use_nonce(&nonce, now, now, window).unwrap());
    }
    // Nonces far outside the window are forgotten.
    assert!(stores[0].use_nonce("old-nonce-0123456789", now, now, window).unwrap());
    assert!(stores[1].use_nonce("new-nonce-0123456789", now + 3 * window, now + 3 * window, window).unwrap());
    assert!(stores[1].use_nonce("old-nonce-0123456789", now, now + 3 * window, window).unwrap());
}

#[test]
fn a_revocation_on_one_replica_is_seen_by_another() {
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    let first = b.revocations_since(0).unwrap();
    assert!(first.token_ids.is_empty());
    assert!(first.server_ms > 0);
    let id = "0123456789abcdef0123456789abcdef";
    assert!(a.revoke_token(id).unwrap());
    assert!(!b.revoke_token(id).unwrap());
    let seen = b.revocations_since(first.server_ms.saturating_sub(5_000)).unwrap();
    assert_eq!(seen.token_ids, [id]);
    assert!(seen.server_ms >= first.server_ms);
    assert!(b.revocations_since(seen.server_ms + 60_000).unwrap().token_ids.is_empty());
}

#[test]
fn a_restarting_replica_marks_only_its_own_running_jobs_lost() {
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    assert_ne!(a.replica_id(), b.replica_id());
    let la = started(&a, "ja");
    la.append(stdout("working")).unwrap();
    let lb = started(&b, "jb");
    lb.append(stdout("working")).unwrap();
    // B restarts: A's job is none of its business.
    drop(lb);
    drop(b);
    let b = db.replica("b");
    assert_eq!(b.mark_running_lost(9_000).unwrap(), 1);
    assert_eq!(b.get_job("jb").unwrap().unwrap().state, JobState::Lost);
    assert_eq!(b.get_job("ja").unwrap().unwrap().state, JobState::Running);
    let jb = b.read_log("jb", 0, 10).unwrap();
    assert!(matches!(jb.last().unwrap().kind, JobEventKind::Exit { state: JobState::Lost, .. }));
    // A goes on appending to its job.
    assert_eq!(la.append(exited(0)).unwrap().seq, 1);
    assert_eq!(b.get_job("ja").unwrap().unwrap().state, JobState::Exited);
}

#[test]
fn the_schema_is_migrated_once_and_a_newer_one_is_refused() {
    let Some(mut db) = Db::new() else { return };
    // Two replicas starting at once migrate the empty schema once, under the advisory lock.
    let handles: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let (url, dir) = (db.url.clone(), db.tmp.path().join(name));
            std::thread::spawn(move || Store::connect(&url, &dir, StoreOptions::default()).map(drop))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let version = db.count("SELECT version::bigint FROM $S.axp_schema");
    assert!(version >= 1);
    assert_eq!(db.count("SELECT count(*) FROM $S.axp_schema"), 1);
    assert_eq!(db.count("SELECT count(*) FROM information_schema.tables WHERE table_schema = '$S'"), 10);
    // Opening again changes nothing.
    drop(db.replica("a"));
    assert_eq!(db.count("SELECT version::bigint FROM $S.axp_schema"), version);

    // A newer AXP migrated it: this build refuses to touch it, and says why.
    db.admin.batch_execute(&format!("UPDATE {}.axp_schema SET version = version + 1", db.schema)).unwrap();
    let err = Store::connect(&db.url, &db.tmp.path().join("c"), StoreOptions::default()).unwrap_err();
    match &err {
        StoreError::RemoteSchemaTooNew { found, supported, .. } => assert_eq!(*found, *supported + 1),
        other => panic!("expected RemoteSchemaTooNew, got {other:?}"),
    }
    assert!(err.to_string().contains("newer than"), "{err}");
}

#[test]
fn a_bad_url_or_a_wrong_password_is_a_clear_error_naming_no_password() {
    let Some(db) = Db::new() else { return };
    let dir = db.tmp.path().join("x");
    let open = |url: &str| Store::connect(url, &dir, StoreOptions::default()).unwrap_err();

    let err = open("mysql://axp:secret-pw@127.0.0.1/axp");
    assert!(matches!(err, StoreError::BadUrl { .. }), "{err:?}");
    let err = open("postgres://axp:secret-pw@127.0.0.1:notaport/axp");
    assert!(matches!(err, StoreError::BadUrl { .. }), "{err:?}");
    assert!(!err.to_string().contains("secret-pw"), "{err}");
    let err = open("postgres://axp:secret-pw@127.0.0.1/axp?sslmode=prefer");
    assert!(matches!(err, StoreError::BadUrl { .. }), "{err:?}");
    assert!(err.to_string().contains("sslmode=verify-full"), "the refusal names the fix: {err}");

    // The right server, the wrong password.
    let mut config: postgres::Config = db.url.parse().unwrap();
    config.password("wrong-secret-pw");
    let port = config.get_ports()[0];
    let wrong = format!("postgres://axp:wrong-secret-pw@127.0.0.1:{port}/axp");
    let err = open(&wrong);
    let text = err.to_string();
    assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "the message names the server: {text}");
    assert!(!text.contains("wrong-secret-pw"), "{text}");

    // Nothing listens there: refused at once, not after a long wait.
    let t = Instant::now();
    let err = open("postgres://axp:pw@127.0.0.1:1/axp");
    assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
    assert!(t.elapsed().as_secs() < 10);
}

#[path = "suite/retention_scenario.rs"]
mod retention_scenario;

/// Jobs that ended before the cutoff go with their logs (the big one's chunks too), and
/// nothing else does; the same scenario as the embedded store's.
#[test]
fn jobs_that_ended_before_the_cutoff_go_with_their_logs_and_nothing_else_does() {
    let Some(mut db) = Db::new() else { return };
    let store = db.replica("a");
    let rows = "SELECT (SELECT count(*) FROM $S.job_log_chunks WHERE job_id = 'j_retention_big') \
                + (SELECT count(*) FROM $S.job_log_tail WHERE job_id = 'j_retention_big')";
    let mut before = 0;
    retention_scenario::run(&store, || before = db.count(rows));
    assert!(before > 0, "the big log outgrew its row");
    assert_eq!(db.count(rows), 0, "the deleted log's rows are left");
}

/// The CA that signed the test cluster's certificate (`scripts/pg-cluster.sh ca`); `None` (after
/// saying so) when it is not named outside CI.
fn pg_ca() -> Option<std::path::PathBuf> {
    match std::env::var("AXP_TEST_PG_CA") {
        Ok(ca) if !ca.is_empty() => Some(ca.into()),
        _ if std::env::var_os("CI").is_some() => {
            panic!("AXP_TEST_PG_CA is not set, and CI is: export AXP_TEST_PG_CA=\"$(scripts/pg-cluster.sh ca)\"")
        }
        _ => {
            eprintln!(
                "SKIPPED: AXP_TEST_PG_CA is not set; run `export AXP_TEST_PG_CA=\"$(scripts/pg-cluster.sh ca)\"`"
            );
            None
        }
    }
}

/// A managed database is reached over TLS, its certificate signed by the provider's CA. With
/// `sslmode=verify-full` and that CA the store works and the server sees each of its
/// connections encrypted; a certificate signed by anyone else (the system's roots do not know
/// the cluster's CA; another CA; the right CA but a name the certificate does not list) is
/// refused at start, with the fix in the message.
#[test]
fn tls_to_the_server_is_verified_and_an_untrusted_certificate_is_refused_with_the_fix() {
    let Some(mut db) = Db::new() else { return };
    let Some(ca) = pg_ca() else { return };
    let app = format!("axp-tls-{}", &db.schema[2..14]);
    let tls = |url: &str, extra: &str| format!("{url}&application_name={app}&sslmode=verify-full{extra}");

    let store = Store::connect(
        &tls(&db.url, &format!("&sslrootcert={}", ca.display())),
        &db.tmp.path().join("a"),
        StoreOptions::default(),
    )
    .unwrap();
    store.put_session(&session("s1")).unwrap();
    assert_eq!(store.get_session("s1").unwrap().unwrap().workspace, "/w");
    let log = started(&store, "j1");
    log.append(stdout("over tls\n")).unwrap();
    let encrypted = db.count(&format!(
        "SELECT count(*) FILTER (WHERE s.ssl) * 1000 + count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = '{app}'"
    ));
    let (tls_conns, all) = (encrypted / 1000, encrypted % 1000);
    assert!(all > 0, "the store's connections are visible to the server");
    assert_eq!(tls_conns, all, "every connection of the store is encrypted");
    drop(log);
    drop(store);

    let dir = db.tmp.path().join("b");
    let open = |url: String| Store::connect(&url, &dir, StoreOptions::default()).unwrap_err();
    // The system's roots do not know the cluster's CA.
    let err = open(tls(&db.url, ""));
    assert!(err.to_string().contains("sslrootcert=/path/to/ca.pem"), "{err}");
    // Another CA.
    let other = db.tmp.path().join("other-ca.pem");
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    std::fs::write(&other, cert.cert.pem()).unwrap();
    let err = open(tls(&db.url, &format!("&sslrootcert={}", other.display())));
    assert!(err.to_string().contains("not trusted"), "{err}");
    // The right CA, but the server reached under a name its certificate does not list (the
    // address it connects to is the same: `hostaddr`).
    let renamed = db.url.replacen("@127.0.0.1:", "@db.example.test:", 1).replacen('?', "?hostaddr=127.0.0.1&", 1);
    assert!(renamed.contains("@db.example.test:"), "{renamed}");
    let err = open(tls(&renamed, &format!("&sslrootcert={}", ca.display())));
    let text = err.to_string();
    assert!(text.contains("not trusted"), "{text}");
}

#[test]
fn the_store_is_called_from_async_code_without_a_runtime_clash() {
    // The gateway calls the store straight from its tokio workers. The synchronous driver runs
    // a runtime of its own per connection, which tokio refuses to start on a thread that runs
    // one already; the store's connection threads keep the two apart.
    let Some(db) = Db::new() else { return };
    let store = db.replica("a");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().unwrap();
    let got = runtime.block_on(async move {
        store.put_session(&session("s1")).unwrap();
        let log = started(&store, "j");
        log.append(stdout("hi")).unwrap();
        tokio::task::yield_now().await;
        (store.get_session("s1").unwrap(), store.read_log("j", 0, 10).unwrap().len())
    });
    assert_eq!(got, (Some(session("s1")), 1));
}

#[test]
fn a_connection_the_server_dropped_is_reopened_by_the_next_call() {
    // The server ends the store's connections (as a restart or a network cut would): a read
    // that finds its connection gone runs again on a fresh one; a write that finds it gone
    // fails with a clear error (it may or may not have committed), and the next call
    // reconnects.
    let Some(mut db) = Db::new() else { return };
    let app = format!("axp-test-{}", uuid::Uuid::now_v7().simple());
    let store = Store::connect(
        &format!("{}&application_name={app}", db.url),
        &db.tmp.path().join("a"),
        StoreOptions::default().connections(1),
    )
    .unwrap();
    store.put_session(&session("s1")).unwrap();
    let killed = db.count(&format!(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}') k"
    ));
    assert_eq!(killed, 1);
    assert_eq!(store.get_session("s1").unwrap(), Some(session("s1")), "a read is retried once");
    let killed = db.count(&format!(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{app}') k"
    ));
    assert_eq!(killed, 1);
    let err = store.put_session(&session("s2")).unwrap_err();
    assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(err.to_string().contains("PostgreSQL error at"), "{err}");
    store.put_session(&session("s2")).unwrap();
    assert_eq!(store.get_session("s2").unwrap(), Some(session("s2")));
}

/// A loopback forwarder to the test cluster that, once armed, lets the next answer of the
/// server go nowhere: it closes both ends instead, so the client loses a statement's answer
/// although the server ran (and committed) it.
struct AnswerCutter {
    addr: std::net::SocketAddr,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl AnswerCutter {
    fn to(server: &str) -> AnswerCutter {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (server, flag) = (server.to_string(), armed.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(upstream) = std::net::TcpStream::connect(&server) else { continue };
                let (mut c_in, mut u_out) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || std::io::copy(&mut c_in, &mut u_out));
                let (mut u_in, mut c_out, flag) = (upstream, client, flag.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    loop {
                        let n = match u_in.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if flag.swap(false, Ordering::SeqCst) {
                            break;
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = u_in.shutdown(std::net::Shutdown::Both);
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        AnswerCutter { addr, armed }
    }

    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn an_append_whose_answer_was_lost_is_found_committed_and_the_log_goes_on() {
    // A write's connection breaks after the server committed it: the writer cannot know. The
    // gateway offers those events again (it holds back what the store did not take); the store
    // must find them already there and go on after them — neither writing them twice nor
    // refusing them (and everything after) as another writer's.
    let Some(db) = Db::new() else { return };
    let (host_port, rest) = {
        let after = db.url.split_once('@').unwrap().1;
        let (hp, rest) = after.split_once('/').unwrap();
        (hp.to_string(), rest.to_string())
    };
    let cutter = AnswerCutter::to(&host_port);
    let via = db.url.replace(&format!("@{host_port}/{rest}"), &format!("@{}/{rest}", cutter.addr));
    let a = Store::connect(&via, &db.tmp.path().join("a"), StoreOptions::default().connections(1)).unwrap();
    let b = db.replica("b");
    let log = started(&a, "j");
    log.append(stdout("a0")).unwrap();

    cutter.arm();
    let (appended, err) = log.append_all(vec![stdout("a1"), stdout("a2")]);
    let err = err.expect("the answer was cut, so the append must fail");
    assert!(appended.is_empty() && err.is_unavailable(), "{err:?}");
    assert_eq!(b.read_log("j", 0, 10).unwrap().len(), 3, "the server committed the append whose answer was lost");

    let (appended, err) = log.append_all(vec![stdout("a1"), stdout("a2"), stdout("a3")]);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(appended.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    let events = b.read_log("j", 0, 10).unwrap();
    assert_dense(&events, "j", 0);
    let data: Vec<_> = events
        .iter()
        .map(|e| match &e.kind {
            JobEventKind::Stdout { data } => data.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(data, ["a0", "a1", "a2", "a3"], "each event once, in order");

    // The same one-by-one, and then another writer's event after the lost one (another replica
    // ending the job as lost): that is refused as a conflict, not taken for this writer's.
    cutter.arm();
    assert!(log.append(stdout("a4")).unwrap_err().is_unavailable());
    assert_eq!(log.append(stdout("a4")).unwrap().seq, 4);
    // (The retry above only read; this append prepares the statement on the new connection, so
    // that the cut below falls after the server ran the next one, not on its preparation.)
    assert_eq!(log.append(stdout("a5")).unwrap().seq, 5);
    cutter.arm();
    assert!(log.append(stdout("a6")).unwrap_err().is_unavailable());
    assert_eq!(b.read_log("j", 0, 10).unwrap().len(), 7, "the server committed a6");
    b.log("j").unwrap().append(exited(137)).unwrap();
    let (appended, err) = log.append_all(vec![stdout("a6"), stdout("a7")]);
    assert!(appended.is_empty());
    assert!(matches!(err, Some(StoreError::Conflict { .. })), "{err:?}");
    let events = b.read_log("j", 0, 10).unwrap();
    assert_eq!(events.len(), 8);
    assert_dense(&events, "j", 0);
    assert!(matches!(events[7].kind, JobEventKind::Exit { .. }));
}

#[test]
fn the_embedded_store_leaves_nonces_and_revocations_to_the_gateway() {
    // No database needed: the embedded store says it does not keep them, rather than
    // pretending to.
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&tmp.path().join("state")).unwrap();
    assert_eq!(store.kind(), StoreKind::Embedded);
    assert_eq!(store.replica_id(), None);
    assert!(matches!(store.use_nonce("n-0123456789abcdef", 1, 1, 1), Err(StoreError::Unsupported { .. })));
    assert!(matches!(store.revoke_token("0123456789abcdef0123456789abcdef"), Err(StoreError::Unsupported { .. })));
    assert!(matches!(store.revocations_since(0), Err(StoreError::Unsupported { .. })));
    assert!(matches!(store.read_shared("pins"), Err(StoreError::Unsupported { .. })));
    assert!(matches!(store.update_shared("pins", Box::new(|_| None)), Err(StoreError::Unsupported { .. })));
    assert!(matches!(store.give_parked("j_x", "r_y"), Err(StoreError::Unsupported { .. })));
    // Parked jobs: an embedded store's gateway holds all of them.
    let mut parked = job("j_parked", "s1", None);
    parked.state = JobState::AwaitingApproval;
    store.create_job(&parked).unwrap();
    let held: Vec<String> =
        store.owned_jobs_in_state(JobState::AwaitingApproval).unwrap().into_iter().map(|j| j.id).collect();
    assert_eq!(held, ["j_parked"]);
}

#[test]
fn durable_writes_and_sync_work_under_both_exit_policies() {
    let Some(db) = Db::new() else { return };
    let batched = db.replica_with(
        "a",
        StoreOptions::default()
            .exit_sync(axp_store::ExitSync::Batched { interval: std::time::Duration::from_millis(50) }),
    );
    let log = started(&batched, "j");
    log.append(exited(1)).unwrap();
    log.sync().unwrap();
    batched.sync_all().unwrap();
    let inline = db.replica("b");
    let log = started(&inline, "k");
    log.append(exited(2)).unwrap();
    assert_eq!(batched.get_job("k").unwrap().unwrap().exit_code, Some(2));
    assert_eq!(inline.get_job("j").unwrap().unwrap().exit_code, Some(1));
}

/// A replica that stops renewing its lease (killed, or cut off) has its running jobs ended as
/// `lost` by another replica once the lease runs out, after every event it had stored; a large
/// log (in chunks) and a small one (in its row) alike. When the cut-off replica comes back, its
/// renewal says it lost the lease, and its appends to those jobs are refused rather than
/// interleaved with the `lost` exit.
#[test]
fn an_expired_lease_ends_the_dead_replicas_jobs_as_lost_after_their_last_event() {
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    // Long enough that the setup below cannot outlast it on a loaded machine (a 400 ms lease
    // expired before the "not yet" check in a full CI run).
    a.register(std::time::Duration::from_secs(3)).unwrap();
    b.register(std::time::Duration::from_secs(60)).unwrap();
    let small = started(&a, "small");
    small.append(stdout("one\n")).unwrap();
    let large = started(&a, "large");
    for i in 0..40 {
        large.append(stdout(format!("line {i}\n"))).unwrap();
    }
    let done = started(&a, "done");
    done.append(exited(0)).unwrap();
    let mine = started(&b, "mine");
    assert_eq!(b.job_owner("small").unwrap().as_deref(), a.replica_id());
    assert_eq!(b.job_owner("nope").unwrap(), None);

    // Not yet expired: nothing happens.
    assert_eq!(b.reap_expired(1).unwrap(), axp_store::Reaped::default());
    assert_eq!(b.live_replicas().unwrap().len(), 2);
    std::thread::sleep(std::time::Duration::from_millis(3_300));
    let reaped = b.reap_expired(2_000).unwrap();
    assert_eq!(reaped.replicas, vec![a.replica_id().unwrap().to_string()]);
    let mut lost = reaped.lost.clone();
    lost.sort();
    assert_eq!(lost, ["large", "small"]);
    for (id, events) in [("small", 1), ("large", 40)] {
        let log = b.read_log(id, 0, 1000).unwrap();
        assert_eq!(log.len(), events + 1, "every stored event, then the exit");
        assert_dense(&log, id, 0);
        assert!(matches!(&log[events].kind, JobEventKind::Exit { state: JobState::Lost, .. }), "{:?}", log[events]);
        let rec = b.get_job(id).unwrap().unwrap();
        assert_eq!((rec.state, rec.ended_ms), (JobState::Lost, Some(2_000)));
    }
    assert_eq!(b.get_job("done").unwrap().unwrap().state, JobState::Exited);
    assert_eq!(b.get_job("mine").unwrap().unwrap().state, JobState::Running);
    drop(mine);

    // A second pass finds nothing more; the cut-off replica learns it lost its lease, and its
    // stale writers are refused.
    assert_eq!(b.reap_expired(3_000).unwrap(), axp_store::Reaped::default());
    assert!(!a.renew_lease(std::time::Duration::from_secs(60)).unwrap());
    assert!(matches!(small.append(stdout("late\n")), Err(StoreError::Conflict { .. })));
    assert!(matches!(large.append(stdout("late\n")), Err(StoreError::Conflict { .. })));
    a.register(std::time::Duration::from_secs(60)).unwrap();
    assert!(a.renew_lease(std::time::Duration::from_secs(60)).unwrap());
    assert_eq!(b.live_replicas().unwrap().len(), 2);
}

/// Messages between replicas: one replica's message reaches the replica it names, in order;
/// a broadcast reaches every listener; each listener is told it is connected first.
#[test]
fn replicas_send_each_other_messages_in_order() {
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    let (tx_a, rx_a) = std::sync::mpsc::channel();
    let (tx_b, rx_b) = std::sync::mpsc::channel();
    let _la = a.listen(Box::new(move |m| tx_a.send(m).unwrap())).unwrap();
    let _lb = b.listen(Box::new(move |m| tx_b.send(m).unwrap())).unwrap();
    let next = |rx: &std::sync::mpsc::Receiver<axp_store::Message>| {
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("a message within 10 s")
    };
    assert_eq!(next(&rx_a), axp_store::Message::Connected);
    assert_eq!(next(&rx_b), axp_store::Message::Connected);
    for i in 0..20 {
        b.send(a.replica_id().unwrap(), &format!("m{i}")).unwrap();
    }
    for i in 0..20 {
        assert_eq!(next(&rx_a), axp_store::Message::Direct(format!("m{i}")));
    }
    a.broadcast("all").unwrap();
    assert_eq!(next(&rx_a), axp_store::Message::Broadcast("all".into()));
    assert_eq!(next(&rx_b), axp_store::Message::Broadcast("all".into()));
    assert!(rx_b.try_recv().is_err(), "b hears no message meant for a");
    let too_big = "x".repeat(axp_store::MAX_MESSAGE_BYTES + 1);
    assert!(a.send(b.replica_id().unwrap(), &too_big).is_err());
}

/// While a replica with a live lease relies on a recorded value, another replica gets that
/// value back instead of recording its own; once no other replica is alive, a new value
/// replaces it (a fresh start).
#[test]
fn replicas_agree_on_the_value_live_replicas_use() {
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    a.register(std::time::Duration::from_millis(500)).unwrap();
    assert_eq!(a.agree("token-key", "k1").unwrap(), "k1");
    b.register(std::time::Duration::from_secs(60)).unwrap();
    assert_eq!(b.agree("token-key", "k2").unwrap(), "k1");
    assert_eq!(b.agree("other", "v").unwrap(), "v");
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(b.agree("token-key", "k2").unwrap(), "k2", "a's lease ran out: b starts afresh");
    assert_eq!(a.agree("token-key", "k1").unwrap(), "k2", "b is alive and uses k2");
}

/// A shared file changed from two replicas at once, 50 times each, keeps every change (a
/// read-modify-write under the row's lock), is read the same from both, and its version says
/// how many writes it took; a change that writes nothing leaves it as it was.
#[test]
fn a_shared_file_changed_from_two_replicas_at_once_loses_no_change() {
    let Some(db) = Db::new() else { return };
    let a = db.replica("a");
    let b = db.replica("b");
    assert_eq!(a.read_shared("pins").unwrap(), None);
    assert_eq!(a.update_shared("pins", Box::new(|_| None)).unwrap(), None, "nothing written, nothing there");
    assert_eq!(a.shared_versions("").unwrap(), vec![], "and no row left behind");
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = [("a", a.clone()), ("b", b.clone())]
        .into_iter()
        .map(|(name, store)| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..50 {
                    let line = format!("{name}{i}\n");
                    store
                        .update_shared(
                            "pins",
                            Box::new(move |now| {
                                let mut body = now.unwrap_or_default().to_vec();
                                body.extend_from_slice(line.as_bytes());
                                Some(body)
                            }),
                        )
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let on_a = a.read_shared("pins").unwrap().unwrap();
    assert_eq!(on_a.version, 100);
    assert_eq!(b.read_shared("pins").unwrap().unwrap(), on_a);
    let text = String::from_utf8(on_a.body.clone()).unwrap();
    for name in ["a", "b"] {
        let mine: Vec<&str> = text.lines().filter(|l| l.starts_with(name)).collect();
        let expected: Vec<String> = (0..50).map(|i| format!("{name}{i}")).collect();
        assert_eq!(mine, expected, "every change of {name}, in its order");
    }
    let same = b.update_shared("pins", Box::new(|_| None)).unwrap().unwrap();
    assert_eq!(same, on_a, "a change that writes nothing leaves the file and its version");
    b.update_shared("plugins/p/1/a.wasm", Box::new(|_| Some(vec![0, 159, 146, 150]))).unwrap();
    assert_eq!(
        a.shared_versions("plugins/").unwrap(),
        vec![("plugins/p/1/a.wasm".to_string(), 1)],
        "binary bodies, listed by prefix"
    );
    assert_eq!(a.read_shared("plugins/p/1/a.wasm").unwrap().unwrap().body, vec![0, 159, 146, 150]);
    assert!(a.delete_shared("plugins/p/1/a.wasm").unwrap());
    assert!(!b.delete_shared("plugins/p/1/a.wasm").unwrap());
}

/// A parked job is held by the replica that parked it: only it lists it as its own; it hands
/// the job to another replica at most once (a compare-and-set on the owner); and when its
/// holder's lease runs out, exactly one of two replicas racing to adopt it gets it.
#[test]
fn a_parked_job_has_one_owner_handed_over_once_and_adopted_by_one_replica() {
    let Some(db) = Db::new() else { return };
    let (a, b, c) = (db.replica("a"), db.replica("b"), db.replica("c"));
    a.register(std::time::Duration::from_millis(600)).unwrap();
    for s in [&b, &c] {
        s.register(std::time::Duration::from_secs(60)).unwrap();
    }
    let park = |store: &Store, id: &str| {
        let mut j = job(id, "s1", None);
        j.state = JobState::AwaitingApproval;
        store.create_job(&j).unwrap();
    };
    park(&a, "j_one");
    park(&a, "j_two");
    let ids = |s: &Store| -> Vec<String> {
        s.owned_jobs_in_state(JobState::AwaitingApproval).unwrap().into_iter().map(|j| j.id).collect()
    };
    assert_eq!(ids(&a), ["j_one", "j_two"]);
    assert!(ids(&b).is_empty(), "only the replica that parked them holds them");
    assert_eq!(b.jobs_in_state(JobState::AwaitingApproval).unwrap().len(), 2, "everyone sees them pending");

    let b_id = b.replica_id().unwrap().to_string();
    assert!(a.give_parked("j_one", &b_id).unwrap());
    assert!(!a.give_parked("j_one", &b_id).unwrap(), "a holds it no more");
    assert!(!c.give_parked("j_two", &b_id).unwrap(), "c never held it");
    assert_eq!(ids(&b), ["j_one"]);
    assert_eq!(b.job_owner("j_one").unwrap().as_deref(), Some(b_id.as_str()));

    assert!(b.adopt_orphaned_parked().unwrap().is_empty(), "a's lease has not run out");
    std::thread::sleep(std::time::Duration::from_millis(800));
    b.reap_expired(2_000).unwrap();
    let barrier = Arc::new(Barrier::new(2));
    let racers: Vec<_> = [b.clone(), c.clone()]
        .into_iter()
        .map(|s| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                s.adopt_orphaned_parked().unwrap().into_iter().map(|j| j.id).collect::<Vec<_>>()
            })
        })
        .collect();
    let won: Vec<Vec<String>> = racers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(won.concat(), ["j_two"], "exactly one replica adopts a dead replica's parked job: {won:?}");
    assert_eq!(ids(&b).len() + ids(&c).len(), 2);
    assert!(b.adopt_orphaned_parked().unwrap().is_empty() && c.adopt_orphaned_parked().unwrap().is_empty());
}
