//! Filesystem grants resolved on this host. A grant names a path, but what it grants is the
//! directory that path *resolves to*: a symlink that an agent plants in its writable workspace
//! (`ws/etcl -> /etc`) makes the text `<ws>/etcl` look narrower than `<ws>` while it names host
//! `/etc`. So grants are resolved when they are granted (session open, the operator's profile and
//! ceilings), when they are attenuated, and again when a process's policy is compiled; one grant
//! is within another only when its resolved path is below the other's resolved path. The text a
//! client wrote is never compared with anything.
//!
//! This module only resolves and compares; it decides nothing on its own. The sandbox is the
//! last line: it mounts only the resolved paths, and refuses a mount whose source or target
//! crosses a symlink by the time it is built (a swap after this check).

use std::path::{Path, PathBuf};

use axp_protocol::capability::Capability;
use axp_protocol::{CapabilitySet, ErrorCode, RpcError};

/// `p` with every symlink resolved. A path that does not exist (yet) resolves through its
/// nearest existing ancestor, with the missing components appended as written: they cannot be
/// symlinks now, and if one appears later the sandbox refuses to mount through it.
pub fn resolve_path(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    let mut rest = Vec::new();
    let mut cur = p;
    while let Some(parent) = cur.parent() {
        if let Some(name) = cur.file_name() {
            rest.push(name.to_os_string());
        }
        if let Ok(mut c) = parent.canonicalize() {
            for n in rest.iter().rev() {
                c.push(n);
            }
            return c;
        }
        cur = parent;
    }
    p.to_path_buf()
}

/// The same grants with every `fs.read` / `fs.write` path resolved (see [`resolve_path`]).
pub fn resolve(caps: &CapabilitySet) -> CapabilitySet {
    CapabilitySet(
        caps.iter()
            .map(|c| match c {
                Capability::FsRead(p) => Capability::FsRead(resolved_string(p)),
                Capability::FsWrite(p) => Capability::FsWrite(resolved_string(p)),
                other => other.clone(),
            })
            .collect(),
    )
}

fn resolved_string(p: &str) -> String {
    resolve_path(Path::new(p)).to_string_lossy().into_owned()
}

/// Resolves `asked` and checks that every grant in it is covered by `within` (already resolved):
/// the resolved set, or the first grant that resolves outside, with what it resolved to.
pub fn resolve_within(asked: &CapabilitySet, within: &CapabilitySet) -> Result<CapabilitySet, Outside> {
    let resolved = resolve(asked);
    for (wrote, r) in asked.iter().zip(resolved.iter()) {
        if !within.allows(r) {
            return Err(Outside { asked: wrote.clone(), resolved: r.clone() });
        }
    }
    Ok(resolved)
}

/// A grant that is not covered once resolved.
#[derive(Debug, Clone)]
pub struct Outside {
    pub asked: Capability,
    pub resolved: Capability,
}

impl Outside {
    /// The wire error: `CapabilityDenied`, naming what the path resolved to when that differs.
    pub fn to_rpc(&self, whose: &str) -> RpcError {
        let msg = if self.asked == self.resolved {
            format!("{whose} does not allow `{}`; ask for a narrower grant", self.asked)
        } else {
            format!(
                "`{}` resolves to `{}` on this host (a symlink), which {whose} does not allow; grants are \
                 checked by the directory they resolve to",
                self.asked, self.resolved
            )
        };
        RpcError::new(ErrorCode::CapabilityDenied, msg).with_data("missing", self.asked.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[String]) -> CapabilitySet {
        CapabilitySet::parse_all(items).unwrap()
    }

    #[test]
    fn a_symlink_below_a_grant_resolves_outside_it() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::os::unix::fs::symlink("/etc", ws.join("etcl")).unwrap();
        let parent = set(&[format!("fs.write({})", ws.display())]);
        let child = set(&[format!("fs.write({}/etcl)", ws.display())]);
        // As text the child looks narrower; resolved it is host /etc.
        assert!(parent.first_uncovered(&child).is_none());
        let out = resolve_within(&child, &parent).unwrap_err();
        assert_eq!(out.resolved, Capability::FsWrite("/etc".into()));
        let msg = out.to_rpc("the session").to_string();
        assert!(msg.contains("resolves to `fs.write(/etc)`"), "{msg}");
    }

    #[test]
    fn missing_paths_resolve_through_their_nearest_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("a")).unwrap();
        std::os::unix::fs::symlink(real.join("a"), real.join("link")).unwrap();
        assert_eq!(resolve_path(&real.join("link/not/yet")), real.join("a/not/yet"));
        assert_eq!(resolve_path(&real.join("a")), real.join("a"));
        let ws = set(&[format!("fs.write({})", real.join("a").display())]);
        let ok = resolve_within(&set(&[format!("fs.read({}/link/x)", real.display())]), &ws).unwrap();
        assert_eq!(ok.to_strings(), vec![format!("fs.read({}/a/x)", real.display())]);
    }
}
