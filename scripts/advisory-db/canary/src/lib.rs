//! Empty: this crate exists only for its lockfile, which scripts/audit-deps.sh checks against the
//! RustSec advisories expecting a failure (see Cargo.toml).
