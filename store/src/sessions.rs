//! Session records: what `session.open` granted, kept so a session survives a gateway restart
//! until it expires or is closed. This file stores and returns records; it does not verify
//! tokens, decide tiers or parse capabilities (the gateway does, with `axp-protocol`).

use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use crate::{Embedded, Result, StoreError, from_sql_int, to_sql_int};

/// One session as the gateway granted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session id (`Mcp-Session-Id`).
    pub id: String,
    /// The workspace root the session is bound to.
    pub workspace: String,
    /// The granted sandbox tier, as its wire name (`kernel-lsm`, `dev-none`, …).
    pub tier: String,
    /// The granted capabilities, as their canonical strings.
    pub capabilities: Vec<String>,
    /// When it was opened (ms since the Unix epoch).
    pub created_ms: u64,
    /// When it expires (ms since the Unix epoch).
    pub expires_ms: u64,
    /// Closed by `session.close` or by expiry.
    pub closed: bool,
    /// The id of the capability token issued with it, for revocation.
    pub token_id: Option<String>,
    /// The session id alone authenticates requests (MCP `initialize` sessions); otherwise the
    /// capability token is required.
    #[serde(default)]
    pub id_is_bearer: bool,
}

const COLUMNS: &str = "id, workspace, tier, capabilities, created_ms, expires_ms, closed, token_id, id_is_bearer";

/// The columns in [`COLUMNS`] order, with the capabilities still as JSON text.
struct RawSession {
    record: SessionRecord,
    capabilities_json: String,
}

fn raw_session(row: &Row<'_>) -> rusqlite::Result<RawSession> {
    Ok(RawSession {
        record: SessionRecord {
            id: row.get(0)?,
            workspace: row.get(1)?,
            tier: row.get(2)?,
            capabilities: Vec::new(),
            created_ms: from_sql_int(row.get(4)?),
            expires_ms: from_sql_int(row.get(5)?),
            closed: row.get::<_, i64>(6)? != 0,
            token_id: row.get(7)?,
            id_is_bearer: row.get::<_, i64>(8)? != 0,
        },
        capabilities_json: row.get(3)?,
    })
}

impl Embedded {
    fn finish_session(&self, raw: RawSession) -> Result<SessionRecord> {
        let mut record = raw.record;
        record.capabilities = serde_json::from_str(&raw.capabilities_json).map_err(|e| {
            StoreError::corrupt(self.db_path(), format!("session `{}` has unreadable capabilities: {e}", record.id))
        })?;
        Ok(record)
    }

    /// Inserts `session`, or replaces every field of the session with the same id.
    pub(crate) fn put_session(&self, session: &SessionRecord) -> Result<()> {
        let caps = serde_json::to_string(&session.capabilities)?;
        let db = self.db();
        let mut stmt = db.prepare_cached(
            "INSERT INTO sessions (id, workspace, tier, capabilities, created_ms, expires_ms, closed, token_id, id_is_bearer)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT(id) DO UPDATE SET
               workspace = excluded.workspace, tier = excluded.tier,
               capabilities = excluded.capabilities, created_ms = excluded.created_ms,
               expires_ms = excluded.expires_ms, closed = excluded.closed,
               token_id = excluded.token_id, id_is_bearer = excluded.id_is_bearer",
        )?;
        stmt.execute(params![
            session.id,
            session.workspace,
            session.tier,
            caps,
            to_sql_int(session.created_ms),
            to_sql_int(session.expires_ms),
            i64::from(session.closed),
            session.token_id,
            i64::from(session.id_is_bearer),
        ])?;
        Ok(())
    }

    /// The session `id`, closed or not; `None` if it never existed.
    pub(crate) fn get_session(&self, id: &str) -> Result<Option<SessionRecord>> {
        let raw = {
            let db = self.db();
            let mut stmt = db.prepare_cached(&format!("SELECT {COLUMNS} FROM sessions WHERE id = ?1"))?;
            stmt.query_row([id], raw_session).optional()?
        };
        raw.map(|r| self.finish_session(r)).transpose()
    }

    /// Marks session `id` closed (idempotent). [`StoreError::NotFound`] if it never existed.
    pub(crate) fn close_session(&self, id: &str) -> Result<()> {
        let db = self.db();
        let n = db.prepare_cached("UPDATE sessions SET closed = 1 WHERE id = ?1")?.execute([id])?;
        if n == 0 {
            return Err(StoreError::NotFound { what: "session", id: id.to_string() });
        }
        Ok(())
    }

    /// Every session (open and closed), oldest first.
    pub(crate) fn list_sessions(&self) -> Result<Vec<SessionRecord>> {
        let raws = {
            let db = self.db();
            let mut stmt = db.prepare_cached(&format!("SELECT {COLUMNS} FROM sessions ORDER BY created_ms, id"))?;
            stmt.query_map([], raw_session)?.collect::<rusqlite::Result<Vec<_>>>()?
        };
        raws.into_iter().map(|r| self.finish_session(r)).collect()
    }

    /// Closes every open session whose `expires_ms` is at or before `now_ms`; returns how many.
    /// Records are kept (closed), so a client asking about an expired session can be told so.
    pub(crate) fn expire_sessions(&self, now_ms: u64) -> Result<usize> {
        let db = self.db();
        let n = db
            .prepare_cached("UPDATE sessions SET closed = 1 WHERE closed = 0 AND expires_ms <= ?1")?
            .execute([to_sql_int(now_ms)])?;
        Ok(n)
    }
}
