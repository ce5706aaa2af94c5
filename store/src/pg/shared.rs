//! What replicas share beyond sessions and jobs, kept in the database so that every replica
//! agrees: named files (the pins lockfile, the plugin lockfile, an installed plugin's files),
//! each a body and a version that every write bumps; and the jobs parked for an operator's
//! approval, each held by exactly one replica (its `owner`, as for a running job), handed
//! from one replica to another by a compare-and-set on that owner, and adopted from a replica
//! whose lease ran out by exactly one of the others.
//!
//! A file is changed by a read-modify-write under its row's lock (`SELECT … FOR UPDATE`), so
//! two replicas (or a replica and an operator's command) never overwrite each other's change;
//! readers poll the versions (one index scan) to learn of a change.

use postgres::Row;

use super::{Postgres, job};
use crate::{JobRecord, Result, from_sql_int};

/// One shared file as last written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedFile {
    /// Its bytes.
    pub body: Vec<u8>,
    /// 1 after its first write, one more after each.
    pub version: u64,
}

/// What a change to a shared file does, given its bytes now (`None`: never written).
pub type SharedChange = Box<dyn FnOnce(Option<&[u8]>) -> Option<Vec<u8>> + Send>;

fn shared(row: &Row) -> SharedFile {
    SharedFile { body: row.get(0), version: from_sql_int(row.get(1)) }
}

impl Postgres {
    /// Shared file `name`, or `None` if none was written.
    pub(crate) fn read_shared(&self, name: &str) -> Result<Option<SharedFile>> {
        let name = name.to_string();
        self.pool().read(move |c| {
            Ok(c.query("SELECT body, version FROM shared_files WHERE name = $1", &[&name])?.first().map(shared))
        })
    }

    /// The version of every shared file whose name starts with `prefix`, by name.
    pub(crate) fn shared_versions(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let prefix = prefix.to_string();
        self.pool().read(move |c| {
            let rows = c.query(
                "SELECT name, version FROM shared_files WHERE starts_with(name, $1) ORDER BY name",
                &[&prefix],
            )?;
            Ok(rows.iter().map(|r| (r.get(0), from_sql_int(r.get(1)))).collect())
        })
    }

    /// Reads shared file `name` under its row's lock, hands its bytes to `change`, and writes
    /// what it returns (durably, the version bumped); `None` from `change` writes nothing.
    /// Returns the file as it is then (`None`: never written, and `change` wrote nothing).
    pub(crate) fn update_shared(&self, name: &str, change: SharedChange) -> Result<Option<SharedFile>> {
        let name = name.to_string();
        self.pool().run(move |c| {
            c.durable(|tx| {
                // A row to lock, for a file never written: version 0 stands for "none".
                tx.execute(
                    "INSERT INTO shared_files (name, body, version, updated_ms) VALUES ($1, '', 0, 0)
                     ON CONFLICT (name) DO NOTHING",
                    &[&name],
                )?;
                let rows = tx.query("SELECT body, version FROM shared_files WHERE name = $1 FOR UPDATE", &[&name])?;
                let now = rows.first().map(shared).filter(|f| f.version > 0);
                let Some(body) = change(now.as_ref().map(|f| f.body.as_slice())) else {
                    if now.is_none() {
                        tx.execute("DELETE FROM shared_files WHERE name = $1 AND version = 0", &[&name])?;
                    }
                    return Ok(now);
                };
                let rows = tx.query(
                    "UPDATE shared_files SET body = $2, version = version + 1,
                            updated_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
                     WHERE name = $1 RETURNING body, version",
                    &[&name, &body],
                )?;
                Ok(rows.first().map(shared))
            })
        })
    }

    /// Forgets shared file `name`; `false` if there was none.
    pub(crate) fn delete_shared(&self, name: &str) -> Result<bool> {
        let name = name.to_string();
        self.pool().run(move |c| Ok(c.execute("DELETE FROM shared_files WHERE name = $1", &[&name])? == 1))
    }

    /// The jobs in `state` that this replica owns, oldest first.
    pub(crate) fn owned_jobs_in_state(&self, state: axp_protocol::methods::JobState) -> Result<Vec<JobRecord>> {
        let (name, state, me) = (self.name(), state.as_str(), self.replica.clone());
        self.pool().read(move |c| {
            const SQL: &str = concat!(
                "SELECT id, session_id, kind, spec, state, exit_code, signal, error, created_ms, ended_ms, idempotency_key",
                " FROM jobs WHERE state = $1 AND owner = $2 ORDER BY created_ms, id"
            );
            c.query(SQL, &[&state, &me])?.iter().map(|r| job(r, &name)).collect()
        })
    }

    /// Hands parked job `id`, which this replica owns, to replica `to`: `false` (and nothing
    /// changes) unless the job is this replica's and still awaits approval.
    pub(crate) fn give_parked(&self, id: &str, to: &str) -> Result<bool> {
        let (id, to, me) = (id.to_string(), to.to_string(), self.replica.clone());
        self.pool().run(move |c| {
            let n = c.execute(
                "UPDATE jobs SET owner = $3 WHERE id = $1 AND owner = $2 AND state = 'awaiting_approval'",
                &[&id, &me, &to],
            )?;
            Ok(n == 1)
        })
    }

    /// Takes over the parked jobs of replicas that hold no lease (dead, or forgotten by a
    /// reaper), and returns them: one statement, whose row locks give each job to exactly one
    /// of any number of replicas calling at once.
    pub(crate) fn adopt_orphaned_parked(&self) -> Result<Vec<JobRecord>> {
        let (name, me) = (self.name(), self.replica.clone());
        self.pool().run(move |c| {
            const SQL: &str = concat!(
                "UPDATE jobs SET owner = $1 WHERE id IN (",
                " SELECT j.id FROM jobs j WHERE j.state = 'awaiting_approval'",
                " AND NOT EXISTS (SELECT 1 FROM replicas r WHERE r.id = j.owner)",
                " ORDER BY j.id LIMIT 1000 FOR UPDATE SKIP LOCKED)",
                " AND state = 'awaiting_approval'",
                " RETURNING id, session_id, kind, spec, state, exit_code, signal, error, created_ms, ended_ms, idempotency_key"
            );
            c.query(SQL, &[&me])?.iter().map(|r| job(r, &name)).collect()
        })
    }
}
