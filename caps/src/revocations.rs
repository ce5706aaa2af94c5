//! A durable revocation list: `STATE_DIR/revoked-tokens`, one 32-hex-digit token id per line,
//! appended and fsynced before a revocation is acknowledged, loaded into a [`Verifier`] at
//! start-up. It only ever appends; it never decides who may revoke (that is the gateway's
//! operator check).

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::Verifier;

/// The revocation list's file name inside the state directory.
pub const REVOCATIONS_FILE_NAME: &str = "revoked-tokens";

/// Why the revocation list could not be read or extended.
#[derive(Debug, thiserror::Error)]
pub enum RevocationError {
    /// Reading, appending or syncing failed.
    #[error("revocation list {path}: {source}")]
    Io {
        /// The list file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A line (or an id to revoke) is not a token id.
    #[error("revocation list {path}: `{id}` is not a token id (32 hex digits)")]
    InvalidId {
        /// The list file.
        path: PathBuf,
        /// The offending text.
        id: String,
    },
}

/// Whether `id` has the shape of a block id (32 lowercase hex digits).
pub(crate) fn is_token_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Verifier {
    /// Loads every id in the list at `path` into the revocation set (a missing file is an empty
    /// list). Returns how many ids were read.
    pub fn load_revocations(&self, path: &Path) -> Result<usize, RevocationError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(source) => {
                return Err(RevocationError::Io { path: path.to_path_buf(), source });
            }
        };
        let mut ids = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !is_token_id(line) {
                return Err(RevocationError::InvalidId {
                    path: path.to_path_buf(),
                    id: line.chars().take(80).collect(),
                });
            }
            ids.push(line.to_string());
        }
        let n = ids.len();
        self.extend_revoked(ids);
        Ok(n)
    }

    /// Revokes `token_id` and appends it to the list at `path`, fsynced before returning, so the
    /// revocation survives a restart. Returns `false` when it was already revoked (the file is
    /// then left alone).
    pub fn revoke_durably(&self, path: &Path, token_id: &str) -> Result<bool, RevocationError> {
        if !is_token_id(token_id) {
            return Err(RevocationError::InvalidId {
                path: path.to_path_buf(),
                id: token_id.chars().take(80).collect(),
            });
        }
        if self.is_revoked(token_id) {
            return Ok(false);
        }
        let io_err = |source| RevocationError::Io { path: path.to_path_buf(), source };
        let mut f = OpenOptions::new().append(true).create(true).mode(0o600).open(path).map_err(io_err)?;
        f.write_all(format!("{token_id}\n").as_bytes()).map_err(io_err)?;
        f.sync_data().map_err(io_err)?;
        // In memory only after it is durable: a revocation the caller saw fail is not in force
        // after a restart either, so memory and disk agree.
        Ok(self.revoke(token_id))
    }
}
