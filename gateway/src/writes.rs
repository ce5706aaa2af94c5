//! Audit records for files a job writes (issue 5): a before/after scan of the session's
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
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use axp_audit::{AuditLog, Kind};
use serde_json::json;
use sha2::{Digest, Sha256};

/// The most files a scan visits.
pub const MAX_ENTRIES: usize = 20_000;
/// Files larger than this are recorded with their size but no digest.
const MAX_DIGEST_BYTES: u64 = 64 * 1024 * 1024;

/// What a workspace looked like: relative path → (size, mtime).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    root: PathBuf,
    files: BTreeMap<PathBuf, (u64, Option<SystemTime>)>,
    truncated: bool,
}

impl Snapshot {
    /// Scans `root` (not following symlinks, skipping `.git`).
    pub fn take(root: &Path) -> Snapshot {
        let mut s = Snapshot { root: root.to_path_buf(), ..Snapshot::default() };
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                if s.files.len() >= MAX_ENTRIES {
                    s.truncated = true;
                    return s;
                }
                let Ok(ft) = e.file_type() else { continue };
                let path = e.path();
                if ft.is_dir() {
                    if e.file_name() != ".git" {
                        stack.push(path);
                    }
                } else if let Ok(md) = e.metadata() {
                    let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
                    s.files.insert(rel, (md.len(), md.modified().ok()));
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

pub struct Writes {
    audit: AuditLog,
    /// Index-name globs of tools that can write (the built-in `files__run_command`, `[[cli]]`
    /// tools); MCP tools are not scanned (their servers' writes are their own sandbox's).
    tools: Vec<String>,
}

fn sha256_file(path: &Path) -> Option<String> {
    let mut f = std::fs::File::open(path).ok()?;
    if f.metadata().ok()?.len() > MAX_DIGEST_BYTES {
        return None;
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Some(hex::encode(h.finalize()))
}

impl Writes {
    pub fn new(audit: AuditLog, tools: Vec<String>) -> Self {
        Self { audit, tools }
    }

    /// The directories a job's writes are looked for in: a command's writable paths, or the
    /// workspace of a tool that can write.
    pub fn roots(&self, work: &crate::jobs::Work) -> Vec<PathBuf> {
        match work {
            crate::jobs::Work::Command { spec, .. }
            | crate::jobs::Work::Code { spec, .. }
            | crate::jobs::Work::Pty { spec, .. } => spec.policy.fs_write.clone(),
            crate::jobs::Work::Tool { resolved, cwd: Some(ws), .. }
                if self.tools.iter().any(|g| axp_protocol::capability::glob_matches(g, &resolved.entry.name)) =>
            {
                vec![ws.clone()]
            }
            crate::jobs::Work::Tool { .. } => Vec::new(),
        }
    }

    /// Records every change from `before` (snapshots taken before the job ran) to now, durably.
    /// Blocking: call it from `spawn_blocking`.
    pub fn record(&self, job_id: &str, session: &str, before: &[Snapshot]) {
        for b in before {
            let after = Snapshot::take(&b.root);
            let mut records: Vec<serde_json::Value> = b
                .diff(&after)
                .into_iter()
                .map(|(rel, change)| {
                    let abs = after.root.join(&rel);
                    let size = after.files.get(&rel).map(|m| m.0);
                    let digest = (change != "deleted").then(|| sha256_file(&abs)).flatten();
                    json!({"job_id": job_id, "path": abs, "change": change, "size": size, "sha256": digest})
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
