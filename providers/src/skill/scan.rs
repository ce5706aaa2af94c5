//! Skills on disk: the scan of the configured directories into a catalog (a skill folder, or a
//! folder of skill folders), the loading of one folder (reading its `SKILL.md`, which
//! `format.rs` parses, and checking the name against the folder), the recursive listing of
//! bundled files with its containment rule for symbolic links, and how a bundled file is run
//! (extension, `#!` line, or executable bit).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{SkillError, parse_skill_md};

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// Most bundled files listed per skill; the rest are left out with a problem.
pub const MAX_FILES: usize = 500;
/// Deepest folder level listed below the skill folder.
pub const MAX_DEPTH: usize = 8;
/// Largest `SKILL.md` read; a bigger one is refused (instructions are meant to be read whole).
pub const MAX_SKILL_MD_BYTES: u64 = 1024 * 1024;
/// Folder names never listed as bundled files: caches and dependency trees that the skill's
/// scripts may create or need but that are not part of what the agent should see.
const SKIPPED_DIRS: &[&str] = &["__pycache__", "node_modules"];

/// One loaded skill.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillInfo {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    /// The `allowed-tools` list as written (informational: AXP's capability token decides what
    /// a session may call, not the skill).
    pub allowed_tools: Vec<String>,
    pub compatibility: Option<String>,
    /// The `metadata` map, scalar values turned into strings.
    pub metadata: BTreeMap<String, String>,
    /// The skill folder, canonical (symbolic links resolved).
    pub dir: PathBuf,
    /// The body of `SKILL.md`: the procedure.
    pub instructions: String,
    /// Bundled files relative to `dir` with `/` separators, sorted; `SKILL.md` itself excluded.
    pub files: Vec<String>,
    /// The subset of `files` that can be run.
    pub scripts: Vec<String>,
}

pub(super) fn io_err(path: &Path, e: &std::io::Error) -> SkillError {
    SkillError::Io { path: path.to_path_buf(), message: e.to_string() }
}

/// The folder's name as the skill must be named: the configured path's last component (a
/// symbolic link keeps its own name), else the canonical folder's.
pub(super) fn folder_name(configured: &Path, canonical: &Path) -> String {
    configured
        .file_name()
        .filter(|n| *n != "." && *n != "..")
        .or_else(|| canonical.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Loads one skill folder. `Ok` carries the skill and its warnings; `Err` is the problem that
/// keeps it from loading.
pub fn load_skill(folder: &Path) -> Result<(SkillInfo, Vec<SkillError>), SkillError> {
    let dir = std::fs::canonicalize(folder).map_err(|e| io_err(folder, &e))?;
    let manifest = dir.join(SKILL_FILE);
    let shown = folder.join(SKILL_FILE);
    let meta = std::fs::metadata(&manifest).map_err(|e| io_err(&shown, &e))?;
    if meta.len() > MAX_SKILL_MD_BYTES {
        return Err(SkillError::TooLarge { path: shown, size: meta.len(), max: MAX_SKILL_MD_BYTES });
    }
    let text = std::fs::read_to_string(&manifest).map_err(|e| io_err(&shown, &e))?;
    let parsed = parse_skill_md(&text, &shown)?;
    let (fm, mut warnings) = (parsed.front, parsed.warnings);
    let folder_name = folder_name(folder, &dir);
    if fm.name != folder_name {
        return Err(SkillError::NameMismatch { path: shown, name: fm.name, folder: folder_name });
    }
    let mut files = Vec::new();
    list_files(&dir, &dir, "", 0, &mut files, &mut warnings);
    files.sort();
    let scripts = files.iter().filter(|f| is_script(&dir.join(f))).cloned().collect();
    Ok((
        SkillInfo {
            name: fm.name,
            description: fm.description,
            license: fm.license,
            allowed_tools: fm.allowed_tools,
            compatibility: fm.compatibility,
            metadata: fm.metadata,
            dir,
            instructions: parsed.body.trim_start_matches(['\r', '\n']).to_string(),
            files,
            scripts,
        },
        warnings,
    ))
}

/// Walks `dir` (below the canonical skill `root`), pushing relative paths of bundled files.
pub(super) fn list_files(
    root: &Path,
    dir: &Path,
    prefix: &str,
    depth: usize,
    files: &mut Vec<String>,
    warnings: &mut Vec<SkillError>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let Some(name) = entry.file_name().to_str().map(String::from) else {
            continue;
        };
        if name.starts_with('.') || (depth == 0 && name == SKILL_FILE) {
            continue;
        }
        if files.len() >= MAX_FILES {
            warnings.push(SkillError::ListingTruncated {
                path: root.to_path_buf(),
                what: format!("more than {MAX_FILES} bundled files"),
            });
            return;
        }
        let rel = format!("{prefix}{name}");
        let path = entry.path();
        let Ok(ft) = entry.file_type() else { continue };
        if ft.is_symlink() {
            match std::fs::canonicalize(&path) {
                Ok(target) if target.starts_with(root) => {
                    if target.is_file() {
                        files.push(rel);
                    }
                }
                Ok(target) => warnings.push(SkillError::OutsideFolder { path, target: target.display().to_string() }),
                Err(_) => warnings.push(SkillError::OutsideFolder {
                    path: path.clone(),
                    target: std::fs::read_link(&path)
                        .map(|t| format!("{} (which does not exist)", t.display()))
                        .unwrap_or_else(|_| "an unreadable target".into()),
                }),
            }
        } else if ft.is_dir() {
            if SKIPPED_DIRS.contains(&name.as_str()) {
                continue;
            }
            if depth + 1 >= MAX_DEPTH {
                warnings.push(SkillError::ListingTruncated {
                    path: path.clone(),
                    what: format!("deeper than {MAX_DEPTH} levels"),
                });
                continue;
            }
            list_files(root, &path, &format!("{rel}/"), depth + 1, files, warnings);
        } else if ft.is_file() {
            files.push(rel);
        }
    }
}

/// How a bundled file is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Runner {
    /// An interpreter by name (looked up in `PATH`) with optional leading arguments.
    Interpreter(String, Vec<String>),
    /// Executed directly.
    Direct,
}

pub(super) fn interpreter_for_extension(path: &Path) -> Option<&'static str> {
    match path.extension()?.to_str()? {
        "py" => Some("python3"),
        "sh" => Some("sh"),
        "bash" => Some("bash"),
        "js" | "mjs" | "cjs" => Some("node"),
        _ => None,
    }
}

/// The `#!` line of a file, split like the kernel does: the interpreter and at most one
/// argument (the rest of the line).
pub(super) fn shebang(path: &Path) -> Option<(String, Vec<String>)> {
    let mut buf = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut buf).ok()?;
    let head = buf[..n].strip_prefix(b"#!")?;
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim();
    let (interp, arg) = match line.split_once([' ', '\t']) {
        Some((i, a)) => (i, a.trim()),
        None => (line, ""),
    };
    if interp.is_empty() {
        return None;
    }
    let args = if arg.is_empty() { Vec::new() } else { vec![arg.to_string()] };
    Some((interp.to_string(), args))
}

pub(super) fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

pub(super) fn runner(path: &Path) -> Option<Runner> {
    if let Some(i) = interpreter_for_extension(path) {
        return Some(Runner::Interpreter(i.to_string(), Vec::new()));
    }
    if let Some((interp, args)) = shebang(path) {
        return Some(Runner::Interpreter(interp, args));
    }
    is_executable(path).then_some(Runner::Direct)
}

pub(super) fn is_script(path: &Path) -> bool {
    runner(path).is_some()
}

/// Everything loaded from the configured directories at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Catalog {
    pub(super) skills: BTreeMap<String, Arc<SkillInfo>>,
    pub(super) problems: Vec<String>,
}

pub(super) fn problem_text(e: &SkillError) -> String {
    if e.is_warning() {
        format!("warning: {e}")
    } else if matches!(e, SkillError::Duplicate { .. }) {
        format!("error: {e}")
    } else {
        format!("error: {e}; the skill is skipped")
    }
}

/// Reads every configured directory.
pub(super) fn scan(dirs: &[PathBuf]) -> Catalog {
    let mut candidates = Vec::new();
    let mut problems = Vec::new();
    for dir in dirs {
        match std::fs::metadata(dir) {
            Err(e) => {
                problems.push(problem_text(&io_err(dir, &e)));
                continue;
            }
            Ok(m) if !m.is_dir() => {
                problems.push(problem_text(&SkillError::NotADirectory { path: dir.clone() }));
                continue;
            }
            Ok(_) => {}
        }
        if dir.join(SKILL_FILE).is_file() {
            candidates.push(dir.clone());
            continue;
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                problems.push(problem_text(&io_err(dir, &e)));
                continue;
            }
        };
        let mut subs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.join(SKILL_FILE).is_file())
            .collect();
        subs.sort();
        candidates.extend(subs);
    }
    let mut skills: BTreeMap<String, Arc<SkillInfo>> = BTreeMap::new();
    for folder in candidates {
        match load_skill(&folder) {
            Ok((info, warnings)) => {
                problems.extend(warnings.iter().map(problem_text));
                if let Some(first) = skills.get(&info.name) {
                    problems.push(problem_text(&SkillError::Duplicate {
                        name: info.name.clone(),
                        first: first.dir.join(SKILL_FILE),
                        second: info.dir.join(SKILL_FILE),
                    }));
                    continue;
                }
                skills.insert(info.name.clone(), Arc::new(info));
            }
            Err(e) => problems.push(problem_text(&e)),
        }
    }
    Catalog { skills, problems }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shebang_is_split_like_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tool");
        std::fs::write(&f, "#!/usr/bin/env python3 -u\nprint(1)\n").unwrap();
        assert_eq!(shebang(&f), Some(("/usr/bin/env".into(), vec!["python3 -u".into()])));
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        assert_eq!(shebang(&f), Some(("/bin/sh".into(), vec![])));
        std::fs::write(&f, "plain text\n").unwrap();
        assert_eq!(shebang(&f), None);
        assert!(!is_script(&f));
    }
}
