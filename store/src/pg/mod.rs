//! The PostgreSQL backend (decision 0010): the same records as the embedded store — sessions,
//! jobs and their event logs — plus what several gateways sharing one database must agree on:
//! token revocations, single-use operator nonces, shared files and parked jobs' owners. It owns
//! the schema and its migrations, the records' SQL, and which replica a running job belongs to;
//! the logs' layout is in `log.rs`, the connections in `pool.rs`, leases and messages in
//! `replicas.rs`, shared files and parked jobs in `shared.rs`.
//!
//! Several gateways (replicas) may open one database at once. Each still owns a state
//! directory of its own (its lock, audit log, keys), and a replica id kept there names the
//! jobs it runs, so that a replica restarting marks only its own running jobs `lost`.

mod log;
mod pool;
mod replicas;
mod shared;
mod tls;

pub(crate) use self::tls::certificate_refused;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axp_protocol::methods::JobState;
use postgres::Row;
use postgres::config::SslMode;
use serde_json::Value;

pub(crate) use self::log::{PgLog, PgReader};
use self::pool::{Conn, Pool, Target};
pub use self::replicas::{Listener, MAX_MESSAGE_BYTES, Message, Reaped};

pub use self::shared::{SharedChange, SharedFile};
use crate::{
    Created, ExitSync, JobRecord, Result, SessionRecord, StoreError, StoreOptions, from_sql_int, lock, to_sql_int,
};

/// Schema migrations, applied in order, all in one transaction at start; `axp_schema.version`
/// records how many have run. Never edit a shipped entry: append a new one.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: sessions, jobs and their logs, revocations, operator nonces.
    "CREATE TABLE sessions (
        id           text PRIMARY KEY,
        workspace    text NOT NULL,
        tier         text NOT NULL,
        capabilities text NOT NULL,             -- JSON array of capability strings
        created_ms   bigint NOT NULL,
        expires_ms   bigint NOT NULL,
        closed       boolean NOT NULL DEFAULT false,
        token_id     text,
        id_is_bearer boolean NOT NULL DEFAULT false
    );
    CREATE INDEX sessions_open_by_expiry ON sessions (expires_ms) WHERE NOT closed;
    CREATE TABLE jobs (
        id              text PRIMARY KEY,
        session_id      text NOT NULL,
        kind            text NOT NULL,          -- tool | command | code
        spec            text NOT NULL,          -- JSON: what was asked
        state           text NOT NULL,          -- axp_protocol::methods::JobState, snake_case
        exit_code       integer,
        signal          text,
        error           text,                   -- JSON
        created_ms      bigint NOT NULL,
        ended_ms        bigint,
        idempotency_key text,
        owner           text NOT NULL,          -- the replica that runs it
        log             text,                   -- its event lines while small; NULL once in chunks
        log_events      bigint NOT NULL DEFAULT 0   -- how many lines `log` holds
    );
    CREATE UNIQUE INDEX jobs_by_idempotency_key ON jobs (session_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    CREATE INDEX jobs_by_session ON jobs (session_id, created_ms);
    CREATE INDEX jobs_live ON jobs (owner, state) WHERE state IN ('running', 'awaiting_approval');
    -- A large log: sealed chunks of many lines, and the lines appended since the last seal.
    CREATE TABLE job_log_chunks (
        job_id    text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        first_seq bigint NOT NULL,
        next_seq  bigint NOT NULL,              -- first_seq + the number of lines
        lines     text NOT NULL,
        PRIMARY KEY (job_id, next_seq)
    );
    CREATE TABLE job_log_tail (
        job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        seq    bigint NOT NULL,
        line   text NOT NULL,
        PRIMARY KEY (job_id, seq)
    );
    CREATE TABLE revocations (
        token_id   text PRIMARY KEY,
        revoked_ms bigint NOT NULL              -- the server's clock
    );
    CREATE INDEX revocations_by_time ON revocations (revoked_ms);
    CREATE TABLE operator_nonces (
        nonce text PRIMARY KEY,
        ts_ms bigint NOT NULL                   -- the envelope's own timestamp
    );
    CREATE INDEX operator_nonces_by_ts ON operator_nonces (ts_ms);",
    // 2: replicas' leases, and what replicas sharing the database must agree on.
    "CREATE TABLE replicas (
        id             text PRIMARY KEY,
        lease_until_ms bigint NOT NULL,         -- the server's clock
        started_ms     bigint NOT NULL          -- the server's clock
    );
    CREATE TABLE agreements (
        name  text PRIMARY KEY,
        value text NOT NULL
    );",
    // 3: files every replica's gateway must agree on (the pins lockfile, the plugin lockfile,
    // installed plugins' files), by name. Parked jobs need nothing new: their `owner` says which
    // replica holds each.
    "CREATE TABLE shared_files (
        name       text PRIMARY KEY,
        body       bytea NOT NULL,
        version    bigint NOT NULL,             -- 1 after the first write, +1 after each
        updated_ms bigint NOT NULL              -- the server's clock
    );",
];

/// The key of the advisory lock that serialises migrations between replicas starting at once.
const MIGRATION_LOCK: i64 = 0x6178_705f_6d69_6772; // "axp_migr"

/// The connect timeout when the URL does not give one.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The file in the state directory that names this replica.
const REPLICA_FILE: &str = "replica-id";

/// What the log writers and readers of one store share.
pub(crate) struct Shared {
    pub(crate) pool: Pool,
    pub(crate) exit_sync: ExitSync,
}

/// An open PostgreSQL store.
pub(crate) struct Postgres {
    shared: Arc<Shared>,
    /// This replica's id: the owner of the jobs it starts.
    replica: String,
    /// Open job logs, so every `log(id)` of a live job shares one writer.
    logs: Mutex<HashMap<String, Weak<log::PgLogInner>>>,
}

/// Parses a `postgres://` URL into the driver's configuration, and a name for messages.
fn parse_url(url: &str) -> Result<Target> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(StoreError::BadUrl { reason: "it must start with postgres:// or postgresql://".into() });
    }
    let plan = tls::plan(url)?;
    let mut config: postgres::Config =
        plan.url.parse().map_err(|e: postgres::Error| StoreError::BadUrl { reason: e.to_string() })?;
    // Said outright either way: the driver's default, `prefer`, would fall back to plain text
    // when a server does not offer TLS.
    config.ssl_mode(if plan.tls.is_some() { SslMode::Require } else { SslMode::Disable });
    if config.get_user().is_none() {
        return Err(StoreError::BadUrl { reason: "it names no user".into() });
    }
    if config.get_hosts().is_empty() {
        return Err(StoreError::BadUrl { reason: "it names no host".into() });
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    // The server's view of who is connected (`pg_stat_activity`) names us, unless the URL
    // already names its client.
    if config.get_application_name().is_none() {
        config.application_name("axp");
    }
    let host = match &config.get_hosts()[0] {
        postgres::config::Host::Tcp(h) => h.clone(),
        postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    let name = format!("{user}@{host}:{port}/{db}");
    Ok(Target { config, tls: plan.tls, name })
}

/// What [`probe`] found at a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// `user@host:port/dbname`.
    pub target: String,
    /// Whether the connection is encrypted (the server's `pg_stat_ssl`).
    pub tls: bool,
    /// The schema version the database holds (0: none yet).
    pub found: i64,
    /// The newest this build knows.
    pub supported: i64,
}

/// Connects once to `url` and reads, without writing anything, whether the connection is
/// encrypted and which schema version the database holds: `axp doctor`'s look at a store
/// before `axp serve` migrates it. Runs on a thread of its own, since the driver's private
/// runtime cannot start on a thread that runs one.
pub fn probe(url: &str) -> Result<Probe> {
    let target = parse_url(url)?;
    let look = move || -> Result<Probe> {
        let mut client = target.connect()?;
        let err = |e| target.err(e);
        let tls: bool = client
            .query_opt("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
            .map_err(err)?
            .is_some_and(|r| r.get(0));
        let has_schema: bool =
            client.query_one("SELECT to_regclass('axp_schema') IS NOT NULL", &[]).map_err(err)?.get(0);
        let found = if has_schema {
            let v: Option<i32> =
                client.query_opt("SELECT version FROM axp_schema", &[]).map_err(err)?.map(|r| r.get(0));
            i64::from(v.unwrap_or(0))
        } else {
            0
        };
        Ok(Probe { target: target.name.clone(), tls, found, supported: MIGRATIONS.len() as i64 })
    };
    std::thread::spawn(look).join().unwrap_or_else(|_| {
        Err(StoreError::Unavailable { target: "the store".into(), reason: "the probe's thread panicked".into() })
    })
}

/// This replica's id, made once and kept in the state directory.
fn replica_id(state_dir: &Path) -> Result<String> {
    let path = state_dir.join(REPLICA_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StoreError::io(&path, e)),
    }
    let id = format!("r_{}", uuid::Uuid::now_v7().simple());
    let tmp = state_dir.join(format!("{REPLICA_FILE}.tmp"));
    std::fs::write(&tmp, format!("{id}\n")).map_err(|e| StoreError::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| StoreError::io(&path, e))?;
    Ok(id)
}

/// Brings the schema up to date, or refuses one newer than this build knows. One transaction,
/// under an advisory lock, so replicas starting together migrate once and a failure leaves the
/// previous version intact (PostgreSQL's DDL is transactional).
fn migrate(conn: &mut Conn) -> Result<()> {
    let target = conn.target().name.clone();
    let supported = MIGRATIONS.len() as i64;
    conn.transaction(|tx| {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        tx.batch(
            "CREATE TABLE IF NOT EXISTS axp_schema (
                 one     boolean PRIMARY KEY DEFAULT true CHECK (one),
                 version integer NOT NULL
             );
             INSERT INTO axp_schema (one, version) VALUES (true, 0) ON CONFLICT DO NOTHING;",
        )?;
        let found: i32 = tx.query("SELECT version FROM axp_schema", &[])?.first().map_or(0, |r| r.get(0));
        let found = i64::from(found);
        if found > supported {
            return Err(StoreError::RemoteSchemaTooNew { target: target.clone(), found, supported });
        }
        for sql in MIGRATIONS.iter().skip(from_sql_int(found) as usize) {
            tx.batch(sql)?;
        }
        let version = i32::try_from(supported).unwrap_or(i32::MAX);
        tx.execute("UPDATE axp_schema SET version = $1", &[&version])?;
        Ok(())
    })
}

fn session(row: &Row, target: &str) -> Result<SessionRecord> {
    let id: String = row.get(0);
    let caps: String = row.get(3);
    let capabilities = serde_json::from_str(&caps)
        .map_err(|e| StoreError::corrupt(target, format!("session `{id}` has unreadable capabilities: {e}")))?;
    Ok(SessionRecord {
        id,
        workspace: row.get(1),
        tier: row.get(2),
        capabilities,
        created_ms: from_sql_int(row.get(4)),
        expires_ms: from_sql_int(row.get(5)),
        closed: row.get(6),
        token_id: row.get(7),
        id_is_bearer: row.get(8),
    })
}

fn job(row: &Row, target: &str) -> Result<JobRecord> {
    let id: String = row.get(0);
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        StoreError::corrupt(target, format!("job `{id}` has an unreadable {what}: {e}"))
    };
    let spec: String = row.get(3);
    let state: String = row.get(4);
    let error: Option<String> = row.get(7);
    let spec = serde_json::from_str(&spec).map_err(|e| bad("spec", &e))?;
    let state = state.parse().map_err(|e| bad("state", &e))?;
    let error = match error {
        Some(text) => Some(serde_json::from_str(&text).map_err(|e| bad("error", &e))?),
        None => None,
    };
    Ok(JobRecord {
        session_id: row.get(1),
        kind: row.get(2),
        spec,
        state,
        exit_code: row.get(5),
        signal: row.get(6),
        error,
        created_ms: from_sql_int(row.get(8)),
        ended_ms: row.get::<_, Option<i64>>(9).map(from_sql_int),
        idempotency_key: row.get(10),
        id,
    })
}

/// Whether a driver error is a unique-constraint violation on `constraint`.
fn violates(e: &StoreError, constraint: &str) -> bool {
    match e {
        StoreError::Postgres { source, .. } => source.as_db_error().is_some_and(|d| {
            *d.code() == postgres::error::SqlState::UNIQUE_VIOLATION && d.constraint() == Some(constraint)
        }),
        _ => false,
    }
}

/// What one poll of the revocation list found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocations {
    /// The token ids revoked at or after the time asked for (ids may repeat across polls).
    pub token_ids: Vec<String>,
    /// The database server's clock when it answered, in ms since the Unix epoch: ask from
    /// somewhat before this next time (see [`crate::Store::revocations_since`]).
    pub server_ms: u64,
}

impl Postgres {
    /// Connects to `url` (checking the password and the schema at once, with the connect
    /// timeout the URL gives or 10 s), migrates the schema, and names this replica after the
    /// id kept in `state_dir` (made on first use).
    pub(crate) fn connect(url: &str, state_dir: &Path, options: &StoreOptions) -> Result<Postgres> {
        let target = parse_url(url)?;
        let replica = replica_id(state_dir)?;
        let pool = Pool::start(target, options.connections)?;
        pool.run(migrate)?;
        Ok(Postgres {
            shared: Arc::new(Shared { pool, exit_sync: options.exit_sync }),
            replica,
            logs: Mutex::new(HashMap::new()),
        })
    }

    fn pool(&self) -> &Pool {
        &self.shared.pool
    }

    fn name(&self) -> String {
        self.pool().target().name.clone()
    }

    /// This replica's id (the owner recorded on the jobs it starts).
    pub(crate) fn replica(&self) -> &str {
        &self.replica
    }

    pub(crate) fn put_session(&self, s: &SessionRecord) -> Result<()> {
        let caps = serde_json::to_string(&s.capabilities)?;
        let s = s.clone();
        self.pool().run(move |c| {
            c.execute(
                "INSERT INTO sessions (id, workspace, tier, capabilities, created_ms, expires_ms, closed, token_id, id_is_bearer)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (id) DO UPDATE SET
                   workspace = excluded.workspace, tier = excluded.tier,
                   capabilities = excluded.capabilities, created_ms = excluded.created_ms,
                   expires_ms = excluded.expires_ms, closed = excluded.closed,
                   token_id = excluded.token_id, id_is_bearer = excluded.id_is_bearer",
                &[
                    &s.id,
                    &s.workspace,
                    &s.tier,
                    &caps,
                    &to_sql_int(s.created_ms),
                    &to_sql_int(s.expires_ms),
                    &s.closed,
                    &s.token_id,
                    &s.id_is_bearer,
                ],
            )?;
            Ok(())
        })
    }

    pub(crate) fn get_session(&self, id: &str) -> Result<Option<SessionRecord>> {
        let id = id.to_string();
        let name = self.name();
        self.pool().read(move |c| {
            const SQL: &str = concat!(
                "SELECT id, workspace, tier, capabilities, created_ms, expires_ms, closed, token_id, id_is_bearer",
                " FROM sessions WHERE id = $1"
            );
            c.query(SQL, &[&id])?.first().map(|r| session(r, &name)).transpose()
        })
    }

    pub(crate) fn close_session(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.pool().run(move |c| {
            if c.execute("UPDATE sessions SET closed = true WHERE id = $1", &[&id])? == 0 {
                return Err(StoreError::NotFound { what: "session", id });
            }
            Ok(())
        })
    }

    pub(crate) fn list_sessions(&self) -> Result<Vec<SessionRecord>> {
        let name = self.name();
        self.pool().read(move |c| {
            const SQL: &str = concat!(
                "SELECT id, workspace, tier, capabilities, created_ms, expires_ms, closed, token_id, id_is_bearer",
                " FROM sessions ORDER BY created_ms, id"
            );
            c.query(SQL, &[])?.iter().map(|r| session(r, &name)).collect()
        })
    }

    pub(crate) fn expire_sessions(&self, now_ms: u64) -> Result<usize> {
        self.pool().run(move |c| {
            let n = c.execute(
                "UPDATE sessions SET closed = true WHERE NOT closed AND expires_ms <= $1",
                &[&to_sql_int(now_ms)],
            )?;
            Ok(n as usize)
        })
    }

    /// See [`crate::Store::delete_ended`]. The logs go with their rows (`ON DELETE CASCADE`).
    /// Any replica may run it, at the same time as others: each statement deletes what is
    /// still there.
    pub(crate) fn delete_ended(&self, ended_before_ms: u64, max: usize) -> Result<crate::Deleted> {
        let (cutoff, max) = (to_sql_int(ended_before_ms), i64::try_from(max).unwrap_or(i64::MAX));
        self.pool().run(move |c| {
            let jobs = c.execute(
                "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE ended_ms < $1 \
                 AND state NOT IN ('running', 'awaiting_approval') ORDER BY ended_ms LIMIT $2)",
                &[&cutoff, &max],
            )?;
            let sessions = c.execute(
                "DELETE FROM sessions s WHERE expires_ms < $1 \
                 AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.session_id = s.id)",
                &[&cutoff],
            )?;
            Ok(crate::Deleted { jobs: jobs as usize, sessions: sessions as usize })
        })
    }

    pub(crate) fn create_job(&self, j: &JobRecord) -> Result<Created> {
        crate::log::validate_id(&j.id)?;
        let spec = serde_json::to_string(&j.spec)?;
        let error = j.error.as_ref().map(serde_json::to_string).transpose()?;
        let j = j.clone();
        let owner = self.replica.clone();
        let name = self.name();
        self.pool().run(move |c| {
            let inserted = c.execute(
                "INSERT INTO jobs (id, session_id, kind, spec, state, exit_code, signal, error, created_ms, ended_ms,
                                   idempotency_key, owner, log)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, '')
                 ON CONFLICT (session_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING",
                &[
                    &j.id,
                    &j.session_id,
                    &j.kind,
                    &spec,
                    &j.state.as_str(),
                    &j.exit_code,
                    &j.signal,
                    &error,
                    &to_sql_int(j.created_ms),
                    &j.ended_ms.map(to_sql_int),
                    &j.idempotency_key,
                    &owner,
                ],
            );
            match inserted {
                Ok(1) => return Ok(Created::New),
                Ok(_) => {}
                Err(e) if violates(&e, "jobs_pkey") => {
                    return Err(StoreError::AlreadyExists { what: "job", id: j.id.clone() });
                }
                Err(e) => return Err(e),
            }
            const SQL: &str = concat!(
                "SELECT id, session_id, kind, spec, state, exit_code, signal, error, created_ms, ended_ms, idempotency_key",
                " FROM jobs WHERE session_id = $1 AND idempotency_key = $2"
            );
            let rows = c.query(SQL, &[&j.session_id, &j.idempotency_key])?;
            let row = rows.first().ok_or_else(|| {
                StoreError::corrupt(&name, format!("job `{}`: its idempotency key clashed, then no job had it", j.id))
            })?;
            Ok(Created::Existing(job(row, &name)?))
        })
    }

    pub(crate) fn get_job(&self, id: &str) -> Result<Option<JobRecord>> {
        let id = id.to_string();
        let name = self.name();
        self.pool().read(move |c| {
            const SQL: &str = concat!(
                "SELECT id, session_id, kind, spec, state, exit_code, signal, error, created_ms, ended_ms, idempotency_key",
                " FROM jobs WHERE id = $1"
            );
            c.query(SQL, &[&id])?.first().map(|r| job(r, &name)).transpose()
        })
    }

    pub(crate) fn list_jobs(&self, session_id: &str) -> Result<Vec<JobRecord>> {
        let session_id = session_id.to_string();
        let name = self.name();
        self.pool().read(move |c| {
            const SQL: &str = concat!(
                "SELECT id, session_id, kind, spec, state, exit_code, signal, error, created_ms, ended_ms, idempotency_key",
                " FROM jobs WHERE session_id = $1 ORDER BY created_ms, id"
            );
            c.query(SQL, &[&session_id])?.iter().map(|r| job(r, &name)).collect()
        })
    }

    pub(crate) fn jobs_in_state(&self, state: JobState) -> Result<Vec<JobRecord>> {
        let name = self.name();
        let state = state.as_str();
        self.pool().read(move |c| {
            const SQL: &str = concat!(
                "SELECT id, session_id, kind, spec, state, exit_code, signal, error, created_ms, ended_ms, idempotency_key",
                " FROM jobs WHERE state = $1 ORDER BY created_ms, id"
            );
            c.query(SQL, &[&state])?.iter().map(|r| job(r, &name)).collect()
        })
    }

    pub(crate) fn set_job_state(
        &self,
        id: &str,
        state: JobState,
        exit_code: Option<i32>,
        signal: Option<String>,
        error: Option<Value>,
        ended_ms: Option<u64>,
    ) -> Result<()> {
        let error = error.as_ref().map(serde_json::to_string).transpose()?;
        let id = id.to_string();
        self.pool().run(move |c| {
            let n = c.execute(
                "UPDATE jobs SET state = $2, exit_code = $3, signal = $4, error = $5, ended_ms = $6 WHERE id = $1",
                &[&id, &state.as_str(), &exit_code, &signal, &error, &ended_ms.map(to_sql_int)],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound { what: "job", id });
            }
            Ok(())
        })
    }

    /// The embedded store's `mark_running_lost`, for the jobs this replica owns only: the jobs
    /// another replica runs are its business (a replica that never comes back has them marked by
    /// the others once its lease expires, [`Postgres::reap_expired`]).
    pub(crate) fn mark_running_lost(&self, now_ms: u64) -> Result<usize> {
        let owner = self.replica.clone();
        let running: Vec<String> = self.pool().run(move |c| {
            let rows = c.query("SELECT id FROM jobs WHERE owner = $1 AND state = 'running' ORDER BY id", &[&owner])?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })?;
        let mut lost = 0;
        for id in running {
            if self.end_as_lost(&id, now_ms, crate::lost::LOST_HERE)? {
                lost += 1;
            }
        }
        Ok(lost)
    }

    /// Ends running job `id` whose process is gone, as [`crate::lost::end_as_lost`] does.
    pub(crate) fn end_as_lost(&self, id: &str, now_ms: u64, why: &str) -> Result<bool> {
        let open = |id: &str| PgLog::open(id, self.shared.clone()).map(crate::JobLog::from);
        let record =
            |id: &str, state, code, signal, error, ended| self.set_job_state(id, state, code, signal, error, ended);
        crate::lost::end_as_lost(id, now_ms, why, &open, &record)
    }

    /// The writer of job `job_id`'s log; the job must exist.
    pub(crate) fn log(&self, job_id: &str) -> Result<PgLog> {
        self.log_with(job_id, false)
    }

    /// The writer of the log of a job inserted just now (empty, in its row: nothing is read).
    pub(crate) fn fresh_log(&self, job_id: &str) -> Result<PgLog> {
        self.log_with(job_id, true)
    }

    fn log_with(&self, job_id: &str, fresh: bool) -> Result<PgLog> {
        let mut logs = lock(&self.logs);
        if let Some(live) = logs.get(job_id).and_then(Weak::upgrade) {
            return Ok(PgLog::from_inner(live));
        }
        let opened =
            if fresh { PgLog::fresh(job_id, self.shared.clone()) } else { PgLog::open(job_id, self.shared.clone())? };
        if logs.len() >= 64 && logs.len().is_power_of_two() {
            logs.retain(|_, w| w.strong_count() > 0);
        }
        logs.insert(job_id.to_string(), opened.downgrade());
        Ok(opened)
    }

    pub(crate) fn log_reader(&self, job_id: &str) -> Result<PgReader> {
        crate::log::validate_id(job_id)?;
        Ok(PgReader::new(job_id, Arc::downgrade(&self.shared)))
    }

    /// Waits until every write committed so far is flushed to the server's disk: a commit
    /// with `synchronous_commit = on` returns once the WAL is flushed up to its own record,
    /// which covers every commit before it.
    pub(crate) fn sync_all(&self) -> Result<()> {
        log::flush(&self.shared)
    }

    /// Revokes `token_id` for every replica, durably. `false` when it was revoked already.
    pub(crate) fn revoke_token(&self, token_id: &str) -> Result<bool> {
        let token_id = token_id.to_string();
        self.pool().run(move |c| {
            c.durable(|tx| {
                let n = tx.execute(
                    "INSERT INTO revocations (token_id, revoked_ms)
                     VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                     ON CONFLICT (token_id) DO NOTHING",
                    &[&token_id],
                )?;
                Ok(n == 1)
            })
        })
    }

    pub(crate) fn revocations_since(&self, since_ms: u64) -> Result<Revocations> {
        self.pool().read(move |c| {
            // The clock first: a revocation committed after this read has a later `revoked_ms`
            // than this minus the time its own statement took, so the next poll, asking from a
            // margin before `server_ms`, finds it.
            let now = c.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint", &[])?;
            let server_ms = now.first().map_or(0, |r| from_sql_int(r.get(0)));
            let rows = c.query(
                "SELECT token_id FROM revocations WHERE revoked_ms >= $1 ORDER BY revoked_ms",
                &[&to_sql_int(since_ms)],
            )?;
            let token_ids = rows.iter().map(|r| r.get(0)).collect();
            Ok(Revocations { token_ids, server_ms })
        })
    }

    /// Records operator nonce `nonce` (signed at `ts_ms`) as used, for every replica and
    /// durably; `false` if any replica recorded it before. Nonces older than twice `window_ms`
    /// before `now_ms` are forgotten first: an envelope that old is refused by its timestamp
    /// anyway, and twice the window leaves room for replicas whose clocks disagree.
    pub(crate) fn use_nonce(&self, nonce: &str, ts_ms: u64, now_ms: u64, window_ms: u64) -> Result<bool> {
        let nonce = nonce.to_string();
        let horizon = to_sql_int(now_ms.saturating_sub(window_ms.saturating_mul(2)));
        self.pool().run(move |c| {
            c.durable(|tx| {
                tx.execute("DELETE FROM operator_nonces WHERE ts_ms < $1", &[&horizon])?;
                let n = tx.execute(
                    "INSERT INTO operator_nonces (nonce, ts_ms) VALUES ($1, $2) ON CONFLICT (nonce) DO NOTHING",
                    &[&nonce, &to_sql_int(ts_ms)],
                )?;
                Ok(n == 1)
            })
        })
    }
}
