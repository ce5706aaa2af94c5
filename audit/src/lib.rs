//! `axp-audit` owns the audit log (DESIGN §8): an append-only, hash-chained record of
//! every session, token, denial, command, tool call, file write, network attempt, lint verdict
//! and approval, durable before an append returns, with a full-chain [`verify`] and a [`tail`]
//! that can follow. It knows nothing of sessions, tokens, HTTP or tokio, and never decides what
//! to record: the gateway calls [`AuditLog::append`]; this crate makes what was appended
//! impossible to edit, remove or reorder without [`verify`] naming the first bad record.
//!
//! # Storage: segmented JSON lines, not SQLite
//!
//! ```text
//! STATE_DIR/audit/
//!   LOCK                              flock()ed by the one writing process
//!   HEAD                              {"seq":N,"hash":"…"}: the last acknowledged record
//!   00000000000000000000.jsonl        records 0…, one JSON object per line
//!   00000000000000052113.jsonl        the next segment, named by its first seq
//! ```
//!
//! Plain files were chosen over SQLite WAL because the log's whole job is to be checked by
//! someone who distrusts the gateway: a JSON-lines file can be read, grepped, copied off the host
//! and verified with `sha256sum` and `jq` alone, and the chain is over the exact bytes on disk.
//! An append-only file also has the simplest durability story (write, `fdatasync`), and
//! segments bound the cost of rotation and retention. SQLite would add nothing the chain needs
//! and hide the bytes behind its page format.
//!
//! Each record's `hash = SHA-256(prev_hash ‖ canonical record)` (see [`Record`]), so editing a
//! record breaks its hash, and recomputing that hash breaks the next record's `prev_hash`. The
//! last record has no successor, so `HEAD` anchors it: it is rewritten (atomically, after the
//! segment fsync) before every append returns, and [`verify`] requires the record `HEAD` names to
//! exist with that hash. Appends from many threads share fsyncs (group commit, see `log.rs`).
//!
//! # What this does not guarantee
//!
//! Anyone who can write the whole directory can rewrite every record, recompute every hash and
//! write a matching `HEAD`: a hash chain proves internal consistency, not authorship. To detect
//! that, copy the last hash (`axp audit verify` prints it) somewhere the host cannot write — a
//! ticket, a remote log, another machine — and compare later; or ship records off the host as
//! they are written. Likewise, removing the newest records *and* rewinding `HEAD` to match is
//! indistinguishable from a log that simply ended there. A crash may leave records after `HEAD`
//! (reported as unanchored) or a torn last line (cut at the next open and itself recorded as an
//! `audit.recovered` record); neither is an acknowledged record lost.

mod log;
mod read;
mod record;

use std::path::PathBuf;

pub use log::{AuditLog, Durability, Options, Recovery};
pub use read::{Filter, Head, Problem, Tail, VerifyError, VerifyReport, follow, tail, verify};
pub use record::{GENESIS_HASH, Kind, Record, canonicalize, digest_json};

/// The anchor file's name.
pub const HEAD_FILE: &str = "HEAD";
/// The writer's lock file's name.
pub const LOCK_FILE: &str = "LOCK";

/// Why the log could not be opened, appended to or read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A file operation failed.
    #[error("audit log: {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Another process holds the log's `LOCK`.
    #[error("audit log {} is in use by another process\nhint: only one gateway may write a state directory; stop the other one or use another --state-dir", path.display())]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A complete record is damaged (not a torn tail, which `open` cuts).
    #[error("audit log {} line {line} is damaged: {reason}\nhint: run `axp audit verify` to find the first bad record; the log will not be appended to until it is repaired or moved aside", path.display())]
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// 1-based line number (0 when unknown).
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// `HEAD` anchors a record the segments do not hold: records were removed.
    #[error("audit log HEAD anchors record {head_seq} but the log ends {}: records were removed\nhint: run `axp audit verify`; the log will not be appended to until this is investigated", match last_seq { Some(s) => format!("at record {s}"), None => "empty".to_string() })]
    HeadAhead {
        /// The anchored record.
        head_seq: u64,
        /// The last record present.
        last_seq: Option<u64>,
    },
    /// `HEAD` is not a valid anchor.
    #[error("audit log {} is not a valid anchor: {reason}", path.display())]
    BadHead {
        /// The HEAD file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An earlier write or fsync failed in a way that makes further appends unsafe.
    #[error(
        "audit log refuses appends after an earlier failure: {0}\nhint: restart the gateway; opening the log again repairs a torn tail"
    )]
    Broken(String),
}
