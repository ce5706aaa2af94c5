//! The root key file: 32 random bytes, hex-encoded, mode 0600, created once in the state
//! directory and read on every start. It must never be created world- or group-readable, and a
//! file that has become so is refused (as ssh refuses such a private key) rather than used.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The key file's name inside the state directory.
pub const KEY_FILE_NAME: &str = "token-root.key";

/// Why the root key could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading, creating or syncing the file failed.
    #[error("cannot use the token root key {path}: {source}")]
    Io {
        /// The key file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is readable or writable by group or others.
    #[error(
        "the token root key {path} has mode {mode:o}, readable by others\nhint: run `chmod 600 {path}` (and consider the key leaked: delete it to mint a new one, which invalidates every token)"
    )]
    Permissions {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file does not hold 64 hex digits.
    #[error(
        "the token root key {path} is not 64 hex digits\nhint: delete it to mint a new key (every outstanding token becomes invalid)"
    )]
    Corrupt {
        /// The key file.
        path: PathBuf,
    },
}

/// Loads `STATE_DIR/token-root.key`, creating it (mode 0600, from the OS-seeded CSPRNG) and the
/// directory (mode 0700) if absent. Safe against two processes starting at once: the key is
/// written to a private temporary file and hard-linked into place, which fails rather than
/// overwrites if another process won, in which case its key is read.
pub fn load_or_create_root_key(state_dir: &Path) -> Result<[u8; 32], KeyError> {
    let path = state_dir.join(KEY_FILE_NAME);
    let io_err = |source| KeyError::Io { path: path.clone(), source };
    match read_key(&path) {
        Err(KeyError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    fs::DirBuilder::new().recursive(true).mode(0o700).create(state_dir).map_err(io_err)?;
    let key: [u8; 32] = rand::random();
    // A random name: racing threads of one process must not share (and clobber) a temporary.
    let tmp =
        state_dir.join(format!(".{KEY_FILE_NAME}.{}.{}", std::process::id(), hex::encode(rand::random::<[u8; 8]>())));
    {
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io_err)?;
        f.write_all(hex::encode(key).as_bytes()).map_err(io_err)?;
        f.write_all(b"\n").map_err(io_err)?;
        f.sync_all().map_err(io_err)?;
    }
    let linked = fs::hard_link(&tmp, &path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            // Make the new name durable before any token minted with this key leaves the process.
            if let Ok(d) = fs::File::open(state_dir) {
                d.sync_all().map_err(io_err)?;
            }
            Ok(key)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_key(&path),
        Err(e) => Err(io_err(e)),
    }
}

/// Loads `STATE_DIR/token-root.key` without ever creating it (for tools such as
/// `axp token inspect --verify` that must not mint a key the gateway does not use).
pub fn load_root_key(state_dir: &Path) -> Result<[u8; 32], KeyError> {
    read_key(&state_dir.join(KEY_FILE_NAME))
}

fn read_key(path: &Path) -> Result<[u8; 32], KeyError> {
    let io_err = |source| KeyError::Io { path: path.to_path_buf(), source };
    let meta = fs::metadata(path).map_err(io_err)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Permissions { path: path.to_path_buf(), mode });
    }
    let text = fs::read_to_string(path).map_err(io_err)?;
    let bytes = hex::decode(text.trim()).map_err(|_| KeyError::Corrupt { path: path.to_path_buf() })?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| KeyError::Corrupt { path: path.to_path_buf() })
}
