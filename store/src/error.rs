//! The one error type of `axp-store`. It names the file or the record involved so the gateway can
//! log something a person can act on; it must never carry event payloads or session secrets.

use std::path::PathBuf;

/// Everything that can go wrong while reading or writing durable state.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite refused or failed a statement (busy past the timeout, disk full, I/O error …).
    #[error("state database error: {0}")]
    Sqlite(#[from] rusqlite::Error),

    /// A file-system operation on `path` failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory being read, written, created or synced.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A stored file or row does not have the shape this crate writes. Recovery repairs a torn
    /// tail on its own; this error means damage elsewhere (or a file written by something else).
    #[error("corrupt state in {}: {reason}", path.display())]
    Corrupt {
        /// The damaged file (the database file for a bad row).
        path: PathBuf,
        /// What was wrong, in a sentence.
        reason: String,
    },

    /// No record with this id exists.
    #[error("no {what} with id `{id}`")]
    NotFound {
        /// `"session"` or `"job"`.
        what: &'static str,
        /// The id that was looked up.
        id: String,
    },

    /// A [`crate::LogReader`] outlived its store and needed the database (to read a log that
    /// lives in its job's row). Readers do not keep a closed store's database open.
    #[error("the state store was closed; reopen it to read job `{job_id}`")]
    Closed {
        /// The job whose log was being read.
        job_id: String,
    },

    /// A record with this id exists already (job ids are never reused).
    #[error("a {what} with id `{id}` already exists")]
    AlreadyExists {
        /// `"job"`.
        what: &'static str,
        /// The duplicate id.
        id: String,
    },

    /// An id cannot be used as a file name (job logs are named after the job id).
    #[error("invalid id `{id}`: {reason}")]
    InvalidId {
        /// The refused id.
        id: String,
        /// Which rule it broke.
        reason: &'static str,
    },

    /// One event encodes to more than [`crate::log::MAX_EVENT_BYTES`]; nothing was appended.
    /// The caller should split the output into smaller chunks.
    #[error("an event of job `{job_id}` is {bytes} bytes, more than the {max} a log accepts")]
    EventTooLarge {
        /// The job whose log refused the event.
        job_id: String,
        /// The encoded size of the event.
        bytes: u64,
        /// The limit.
        max: u64,
    },

    /// The database was written by a newer AXP whose schema this build does not know.
    #[error(
        "the state database at {} has schema version {found}, newer than the {supported} this build knows; hint: run the newer axp, or point --state-dir elsewhere",
        path.display()
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// Its `user_version`.
        found: i64,
        /// The newest version this build can migrate to.
        supported: i64,
    },

    /// Another process (another gateway) holds the state directory.
    #[error(
        "the state directory {} is in use by another process; hint: stop the other gateway or use a different --state-dir",
        path.display()
    )]
    Locked {
        /// The lock file inside the state directory.
        path: PathBuf,
    },

    /// The PostgreSQL server refused or failed an operation (wrong password, server gone,
    /// constraint broken, …). `target` names the server and database, never the password.
    #[error("PostgreSQL error at {target}: {}", pg_detail(source))]
    Postgres {
        /// `user@host:port/dbname`.
        target: String,
        /// The driver's error, with the server's message.
        #[source]
        source: postgres::Error,
    },

    /// The PostgreSQL store cannot run operations at all (its connection threads stopped).
    #[error("the PostgreSQL store at {target} is unavailable: {reason}")]
    Unavailable {
        /// `user@host:port/dbname`.
        target: String,
        /// What happened, in a sentence.
        reason: String,
    },

    /// A store URL that cannot be used; the message never repeats the URL (it may hold a
    /// password).
    #[error("invalid store URL: {reason}; hint: postgres://USER:PASSWORD@HOST:PORT/DBNAME")]
    BadUrl {
        /// What is wrong with it.
        reason: String,
    },

    /// The PostgreSQL database was migrated by a newer AXP whose schema this build does not
    /// know.
    #[error(
        "the PostgreSQL store at {target} has schema version {found}, newer than the {supported} this build knows; hint: run the newer axp on every replica, or use another database"
    )]
    RemoteSchemaTooNew {
        /// `user@host:port/dbname`.
        target: String,
        /// The version recorded in the database.
        found: i64,
        /// The newest version this build can migrate to.
        supported: i64,
    },

    /// A job's log was written by another writer than this one (two replicas appending to the
    /// same job): nothing was appended.
    #[error("job `{job_id}`: {reason}")]
    Conflict {
        /// The job whose log refused the append.
        job_id: String,
        /// What was found.
        reason: String,
    },

    /// This store's backend does not keep this kind of record (the embedded store leaves
    /// operator nonces and revocations to the gateway's own files).
    #[error("the {backend} store does not keep {what}")]
    Unsupported {
        /// `"embedded"`.
        backend: &'static str,
        /// What was asked for.
        what: &'static str,
    },

    /// An event or record could not be encoded as JSON.
    #[error("could not encode a record as JSON: {0}")]
    Encode(#[from] serde_json::Error),
}

/// What a driver error says, with the server's own message: the driver's `Display` of an error
/// the server sent is only "db error".
fn pg_detail(e: &postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return crate::pg::certificate_refused(e).unwrap_or_else(|| e.to_string());
    };
    let mut text = format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
    if let Some(detail) = db.detail() {
        text.push_str(&format!("; {detail}"));
    }
    if let Some(hint) = db.hint() {
        text.push_str(&format!("; hint: {hint}"));
    }
    text
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io { path: path.into(), source }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        StoreError::Corrupt { path: path.into(), reason: reason.into() }
    }

    /// Whether the store could not be reached (the PostgreSQL server is down, restarting, or
    /// cut off), rather than refusing this operation: the same operation may succeed later.
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Unavailable { .. } => true,
            // A statement's own error has severity ERROR; the server ending the session says
            // FATAL or PANIC, and a refused or broken connection carries no server error.
            StoreError::Postgres { source, .. } => source.as_db_error().is_none_or(|d| d.severity() != "ERROR"),
            _ => false,
        }
    }
}
