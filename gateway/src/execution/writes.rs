//! Audit records for files a job writes: a before/after scan of the session's
//! workspace around each command job and each call of a tool that can write (the built-in
//! `files__run_command`, `[[cli]]` tools), recording every created, modified or deleted file as
//! a `file.write` record with its size and SHA-256. A scan, not a syscall trace: it sees the
//! net effect on the workspace when the job ends (a file written and removed again leaves no
//! record), nothing outside the workspace (the sandbox only lets jobs write there), and at most
//! [`MAX_ENTRIES`] files (a larger workspace gets one record saying the scan was cut).
//!
//! `jobs.rs` takes the snapshots before a job's work starts and records the changes after it
//! ends and before its `exit` event is written, so a client that sees the job end can already
//! find its writes in the audit log.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use axp_audit::{AuditLog, Kind};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The most files a scan visits.
pub const MAX_ENTRIES: usize = 20_000;
/// Files larger than this are recorded with their size but no digest.
const MAX_DIGEST_BYTES: u64 = 64 * 1024 * 1024;
/// The most bytes one job's records read to compute digests; past it, changes are still
/// recorded, without digests. A job can write far more than the gateway should re-read.
const MAX_DIGEST_TOTAL: u64 = 512 * 1024 * 1024;

/// One file as a scan saw it: size, modification time (seconds, nanoseconds), and whether it
/// is a regular file (only those get digests).
type Seen = (u64, i64, i64, bool);

/// What a workspace looked like: relative path → what was seen there.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    root: PathBuf,
    files: BTreeMap<PathBuf, Seen>,
    truncated: bool,
}

/// Opens `rel` below the directory `root` without following any symlink and without leaving
/// it (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), non-blocking, so that a FIFO cannot stall the
/// gateway and a link the job planted cannot point it at a host file. The job's sandbox is
/// gone by now, but what it left in the workspace is the job's, not the gateway's, to trust.
fn open_beneath(root: &OwnedFd, rel: &Path, directory: bool) -> std::io::Result<OwnedFd> {
    let mut flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    if directory {
        flags |= OFlags::DIRECTORY;
    }
    let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
    let how = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    Ok(rustix::fs::openat2(root, rel, flags, Mode::empty(), how)?)
}

fn open_root(root: &Path) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::open(root, flags, Mode::empty())?)
}

impl Snapshot {
    /// Scans `root` (not following symlinks, never leaving it, skipping `.git`).
    pub fn take(root: &Path) -> Snapshot {
        let mut s = Snapshot { root: root.to_path_buf(), ..Snapshot::default() };
        let Ok(root_fd) = open_root(root) else { return s };
        let mut stack = vec![PathBuf::new()];
        while let Some(rel_dir) = stack.pop() {
            let Ok(fd) = open_beneath(&root_fd, &rel_dir, true) else { continue };
            let Ok(dir) = rustix::fs::Dir::read_from(&fd) else { continue };
            for e in dir.flatten() {
                let name = OsStr::from_bytes(e.file_name().to_bytes());
                if name == "." || name == ".." {
                    continue;
                }
                if s.files.len() >= MAX_ENTRIES {
                    s.truncated = true;
                    return s;
                }
                let Ok(st) = rustix::fs::statat(&fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW) else { continue };
                let kind = FileType::from_raw_mode(st.st_mode);
                let rel = rel_dir.join(name);
                if kind == FileType::Directory {
                    if name != ".git" {
                        stack.push(rel);
                    }
                } else {
                    let seen = (st.st_size as u64, st.st_mtime, st.st_mtime_nsec as i64, kind == FileType::RegularFile);
                    s.files.insert(rel, seen);
                }
            }
        }
        s
    }

    /// The changes from `self` to `after`: (path, change).
    fn diff(&self, after: &Snapshot) -> Vec<(PathBuf, &'static str)> {
        let mut out = Vec::new();
        for (p, meta) in &after.files {
            match self.files.get(p) {
                None => out.push((p.clone(), "created")),
                Some(m) if m != meta => out.push((p.clone(), "modified")),
                Some(_) => {}
            }
        }
        for p in self.files.keys().filter(|p| !after.files.contains_key(*p)) {
            out.push((p.clone(), "deleted"));
        }
        out
    }
}

/// The SHA-256 of the regular file at `rel` below `root`, reading at most `budget` bytes
/// (which it lowers); `None` for anything else (a FIFO, a device, a symlink, a file swapped
/// for one, one too large or over the budget).
fn sha256_beneath(root: &OwnedFd, rel: &Path, budget: &mut u64) -> Option<String> {
    let fd = open_beneath(root, rel, false).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    let size = st.st_size as u64;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || size > MAX_DIGEST_BYTES || size > *budget {
        return None;
    }
    let mut f = std::fs::File::from(fd).take(size);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut read = 0u64;
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        read += n as u64;
        h.update(&buf[..n]);
    }
    *budget = budget.saturating_sub(read);
    Some(hex::encode(h.finalize()))
}

pub struct Writes {
    audit: AuditLog,
    /// Index-name globs of tools that can write (the built-in `files__run_command`, `[[cli]]`
    /// tools); MCP tools are not scanned (their servers' writes are their own sandbox's).
    tools: Vec<String>,
}

impl Writes {
    pub fn new(audit: AuditLog, tools: Vec<String>) -> Self {
        Self { audit, tools }
    }

    /// The directories a job's writes are looked for in: a command's writable paths, or the
    /// workspace of a tool that can write.
    pub fn roots(&self, work: &crate::execution::jobs::Work) -> Vec<PathBuf> {
        match work {
            crate::execution::jobs::Work::Command { spec, .. }
            | crate::execution::jobs::Work::Code { spec, .. }
            | crate::execution::jobs::Work::Pty { spec, .. } => spec.policy.fs_write.clone(),
            crate::execution::jobs::Work::Tool { resolved, cwd: Some(ws), .. }
                if self.tools.iter().any(|g| axp_protocol::capability::glob_matches(g, &resolved.entry.name)) =>
            {
                vec![ws.clone()]
            }
            crate::execution::jobs::Work::Tool { .. } => Vec::new(),
        }
    }

    /// Records every change from `before` (snapshots taken before the job ran) to now, durably.
    /// Blocking: call it from `spawn_blocking`.
    pub fn record(&self, job_id: &str, session: &str, before: &[Snapshot]) {
        let mut budget = MAX_DIGEST_TOTAL;
        for b in before {
            let after = Snapshot::take(&b.root);
            let root = open_root(&b.root).ok();
            let mut records: Vec<serde_json::Value> = b
                .diff(&after)
                .into_iter()
                .map(|(rel, change)| {
                    let abs = after.root.join(&rel);
                    let seen = after.files.get(&rel);
                    let size = seen.map(|m| m.0);
                    let regular = seen.is_some_and(|m| m.3);
                    let digest = match &root {
                        Some(root) if change != "deleted" && regular => sha256_beneath(root, &rel, &mut budget),
                        _ => None,
                    };
                    let mut r =
                        json!({"job_id": job_id, "path": abs, "change": change, "size": size, "sha256": digest});
                    if seen.is_some() && !regular {
                        r["type"] = json!("special");
                    }
                    r
                })
                .collect();
            if b.truncated || after.truncated {
                records.push(json!({"job_id": job_id, "path": after.root, "change": "unknown",
                    "reason": format!("more than {MAX_ENTRIES} files; the scan was cut")}));
            }
            for detail in records {
                if let Err(e) = self.audit.append(Kind::FileWrite, Some(session), "gateway", detail) {
                    tracing::error!(job = job_id, error = %e, "cannot audit a file write");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_created_modified_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep"), "a").unwrap();
        std::fs::write(dir.path().join("change"), "a").unwrap();
        std::fs::write(dir.path().join("gone"), "a").unwrap();
        let before = Snapshot::take(dir.path());
        std::fs::write(dir.path().join("change"), "bb").unwrap();
        std::fs::remove_file(dir.path().join("gone")).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/new"), "c").unwrap();
        let mut d = before.diff(&Snapshot::take(dir.path()));
        d.sort();
        assert_eq!(
            d,
            vec![
                (PathBuf::from("change"), "modified"),
                (PathBuf::from("gone"), "deleted"),
                (PathBuf::from("sub/new"), "created")
            ]
        );
    }
}
