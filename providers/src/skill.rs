//! The `skill` provider: folders in the Agent Skills format (a `SKILL.md` whose YAML front matter
//! names and describes the skill, whose body is the procedure, next to bundled `scripts/`,
//! `references/` and `assets/`). Each skill is one tool. A call without `script` returns the
//! instructions and the list of bundled files; a call with `{script, args}` runs one bundled
//! script as a job through the gateway's [`Launcher`], with the skill folder added to the
//! process's readable paths. This file owns discovery, front-matter validation, the bundled-file
//! listing, the containment checks on script paths, and reloading when a skill changes.
//!
//! It must not decide policy (the launcher and the gateway's [`ProcessPolicy`] do), must never
//! run anything that is not a regular file inside the skill folder, and must never build a shell
//! string from arguments: `args` become argv elements after the script path, nothing else.
//! Running the process is `process.rs`'s job.
//!
//! Discovery: every configured directory either *is* a skill folder (it holds `SKILL.md`) or
//! holds skill folders one level down; sub-folders without `SKILL.md` and hidden entries are
//! ignored. A malformed skill is skipped with a problem (see [`SkillProvider::problems`]) and
//! never stops the others from loading. Two skills with the same name: the first in
//! configuration order wins and the problem names both paths.
//!
//! Bundled files are listed recursively (hidden entries, `__pycache__` and `node_modules`
//! skipped; at most [`MAX_FILES`] files, [`MAX_DEPTH`] levels). A symbolic link is listed only
//! when it resolves to a file inside the skill folder; links to directories are not followed.
//! A file is a *script* when its extension names an interpreter (`.py`, `.sh`, `.bash`, `.js`,
//! `.mjs`, `.cjs`), when it starts with `#!`, or when it is executable. A call with `{read}`
//! returns one bundled non-script file as text (at most [`MAX_READ_BYTES`]), so the references a
//! procedure points to (`reference.md`) are reachable without any filesystem grant.
//!
//! Limits: the containment check runs when the call starts; a writer who can change the skill
//! folder between that check and `execve` could still swap the file. Skill folders are operator
//! territory (mounted read-only into every sandbox), and the sandbox, not this check, is what
//! confines a running script. `allowed-tools` is kept as information only: the session's
//! capability token decides what may be called.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axp_protocol::{ToolCall, ToolOutput, ToolSpec};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::process::{self, Capture, DEFAULT_PATH, RunOptions};
use crate::{
    CancellationToken, JobSink, Launcher, ProcessPolicy, ProcessSpec, Provider, ProviderError, ProviderEvent,
    ProviderId,
};

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";
/// Longest skill name the Agent Skills format allows.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest description the Agent Skills format allows.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Longest `compatibility` note the Agent Skills format allows.
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// Most bundled files listed per skill; the rest are left out with a problem.
pub const MAX_FILES: usize = 500;
/// Deepest folder level listed below the skill folder.
pub const MAX_DEPTH: usize = 8;
/// Largest `SKILL.md` read; a bigger one is refused (instructions are meant to be read whole).
pub const MAX_SKILL_MD_BYTES: u64 = 1024 * 1024;
/// Largest bundled file returned by a `read` call.
pub const MAX_READ_BYTES: u64 = 256 * 1024;
/// How much of each output stream a finished script keeps for its result text; everything was
/// already streamed as job events.
pub const SKILL_TAIL_BYTES: usize = 64 * 1024;

/// After the first change event, how long the folder must stay quiet before it is re-read
/// (editors write a file in several steps); a steady stream of events is cut at [`MAX_SETTLE`].
const SETTLE: Duration = Duration::from_millis(150);
const MAX_SETTLE: Duration = Duration::from_secs(1);
/// Poll interval of the fallback watcher (used when inotify cannot be had).
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Front-matter keys the Agent Skills format defines; anything else is a warning.
const KNOWN_KEYS: &[&str] = &["name", "description", "license", "allowed-tools", "metadata", "compatibility"];

/// Folder names never listed as bundled files: caches and dependency trees that the skill's
/// scripts may create or need but that are not part of what the agent should see.
const SKIPPED_DIRS: &[&str] = &["__pycache__", "node_modules"];

/// How the gateway configures the provider.
#[derive(Debug, Clone)]
pub struct SkillDirsConfig {
    /// The provider's name (`skill`): tools appear as `skill__<name>`.
    pub id: ProviderId,
    /// Each entry is a skill folder or a folder of skill folders.
    pub dirs: Vec<PathBuf>,
    /// Builds every script's process (the sandbox lives there).
    pub launcher: Arc<dyn Launcher>,
    /// Default deadline of one script run (`meta.timeout_ms` overrides it).
    pub timeout: Duration,
    /// The scripts' environment (nothing is inherited). `PATH` defaults to the usual system
    /// directories; `PYTHONDONTWRITEBYTECODE=1` and `AXP_SKILL_DIR` are always set.
    pub env: BTreeMap<String, String>,
    /// What scripts may touch; the skill folder is added to `fs_read` for each run.
    pub policy: ProcessPolicy,
}

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

/// Why a skill (or a part of it) could not be loaded. Each message names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    /// A configured directory or a skill file could not be read.
    #[error("{}: cannot read: {message}", path.display())]
    Io { path: PathBuf, message: String },
    /// A configured directory is not a directory.
    #[error("{}: not a directory (a skill directory must be a skill folder or hold skill folders)", path.display())]
    NotADirectory { path: PathBuf },
    /// `SKILL.md` is larger than [`MAX_SKILL_MD_BYTES`].
    #[error("{}: {size} bytes is larger than the {max} bytes a SKILL.md may have", path.display())]
    TooLarge { path: PathBuf, size: u64, max: u64 },
    /// `SKILL.md` does not start with a `---` line.
    #[error("{}: no YAML front matter; hint: the file must start with a line `---`, then `name:` and `description:`, then a line `---`", path.display())]
    NoFrontMatter { path: PathBuf },
    /// The front matter has no closing `---` line.
    #[error("{}: the front matter opened on line 1 is never closed; hint: add a line `---` after the last key", path.display())]
    UnclosedFrontMatter { path: PathBuf },
    /// The front matter is not valid YAML (line and column are in the file, 1-based).
    #[error("{}{}: invalid YAML in the front matter: {message}", path.display(), fmt_location(*line, *column))]
    Yaml { path: PathBuf, line: Option<u64>, column: Option<u64>, message: String },
    /// The front matter is valid YAML but not a mapping of keys.
    #[error("{}: the front matter must be a mapping of keys (`name: …`, `description: …`)", path.display())]
    NotAMapping { path: PathBuf },
    /// A required key is absent or empty.
    #[error("{}: `{field}` is missing from the front matter; it is required", path.display())]
    MissingField { path: PathBuf, field: &'static str },
    /// A key has a value of the wrong type.
    #[error("{}: `{field}` must be {expected}", path.display())]
    WrongType { path: PathBuf, field: String, expected: &'static str },
    /// `name` breaks the naming rules.
    #[error("{}: the name `{name}` is invalid: {reason}", path.display())]
    InvalidName { path: PathBuf, name: String, reason: &'static str },
    /// `name` differs from the folder's name.
    #[error("{}: the name `{name}` does not match the folder `{folder}`; hint: rename the folder or set `name: {folder}`", path.display())]
    NameMismatch { path: PathBuf, name: String, folder: String },
    /// A value is longer than the format allows.
    #[error("{}: `{field}` has {len} characters, more than the {max} allowed", path.display())]
    TooLong { path: PathBuf, field: &'static str, len: usize, max: usize },
    /// Two skills share a name; the first (in configuration order) is kept.
    #[error("two skills are named `{name}`: {} and {}; the second is ignored", first.display(), second.display())]
    Duplicate { name: String, first: PathBuf, second: PathBuf },
    /// A bundled entry is a symbolic link that leaves the skill folder (or dangles); it is not
    /// offered.
    #[error("{}: a symbolic link to {target}, outside the skill folder; it is not offered", path.display())]
    OutsideFolder { path: PathBuf, target: String },
    /// A front-matter key the format does not define (a warning: the skill still loads).
    #[error("{}: unknown front-matter key `{key}` is ignored (known keys: {})", path.display(), KNOWN_KEYS.join(", "))]
    UnknownKey { path: PathBuf, key: String },
    /// The listing stopped at [`MAX_FILES`] or [`MAX_DEPTH`] (a warning).
    #[error("{}: {what}; the rest is not listed", path.display())]
    ListingTruncated { path: PathBuf, what: String },
}

fn fmt_location(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(": line {l} column {c}"),
        (Some(l), None) => format!(": line {l}"),
        _ => String::new(),
    }
}

impl SkillError {
    /// Warnings leave the skill loaded; every other problem skips it (or, for links, the file).
    pub fn is_warning(&self) -> bool {
        matches!(self, Self::UnknownKey { .. } | Self::ListingTruncated { .. } | Self::OutsideFolder { .. })
    }
}

fn io_err(path: &Path, e: &std::io::Error) -> SkillError {
    SkillError::Io { path: path.to_path_buf(), message: e.to_string() }
}

/// The parts of a `SKILL.md`: the YAML text, the file line it starts on, and the body.
#[derive(Debug, PartialEq)]
struct Split<'a> {
    yaml: &'a str,
    /// 1-based line of the file where `yaml` starts.
    yaml_line: u64,
    body: &'a str,
}

/// Splits `---\n<yaml>\n---\n<body>` (a UTF-8 BOM and CRLF line ends are accepted; `...` also
/// closes the YAML document).
fn split_front_matter<'a>(text: &'a str, path: &Path) -> Result<Split<'a>, SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(SkillError::NoFrontMatter { path: path.to_path_buf() });
    }
    let yaml_start = first.len();
    let mut offset = yaml_start;
    for line in lines {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            let yaml = &text[yaml_start..offset];
            let body = &text[offset + line.len()..];
            return Ok(Split { yaml, yaml_line: 2, body });
        }
        offset += line.len();
    }
    Err(SkillError::UnclosedFrontMatter { path: path.to_path_buf() })
}

/// The Agent Skills naming rule: 1–64 characters of `a-z`, `0-9` and `-`, no leading, trailing
/// or doubled hyphen.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err("it is longer than 64 characters");
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err("only lowercase letters, digits and hyphens are allowed");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("it must not start or end with a hyphen");
    }
    if name.contains("--") {
        return Err("it must not contain two hyphens in a row");
    }
    Ok(())
}

fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The front matter's validated fields.
#[derive(Debug)]
struct FrontMatter {
    name: String,
    description: String,
    license: Option<String>,
    allowed_tools: Vec<String>,
    compatibility: Option<String>,
    metadata: BTreeMap<String, String>,
}

/// Parses and validates the YAML of a front matter. Warnings (unknown keys) are pushed to
/// `warnings`; the first hard problem is returned as the error.
fn parse_front_matter(
    split: &Split<'_>,
    path: &Path,
    warnings: &mut Vec<SkillError>,
) -> Result<FrontMatter, SkillError> {
    // serde-saphyr: a pure-Rust, `forbid(unsafe_code)`, panic-free YAML deserializer with
    // budgets against alias bombs and error locations. `serde_yaml` is archived, `serde_yml` is
    // unsound and deprecated (RUSTSEC-2025-0068), and the remaining forks (`serde_norway`,
    // `serde_yaml_ng`, `yaml_serde`) still sit on the c2rust translation of libyaml
    // (`unsafe-libyaml`, unmaintained): a skill folder is third-party input, so the safe parser
    // is the one to trust with it.
    let options = serde_saphyr::options! {
        with_snippet: false,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error,
    };
    let value: Value = serde_saphyr::from_str_with_options(split.yaml, options).map_err(|e| {
        let loc = e.location();
        let line = loc.filter(|l| l.line() > 0).map(|l| l.line() + split.yaml_line - 1);
        let column = loc.filter(|l| l.column() > 0).map(|l| l.column());
        SkillError::Yaml { path: path.to_path_buf(), line, column, message: yaml_message(&e) }
    })?;
    let map = match value {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        _ => {
            return Err(SkillError::NotAMapping { path: path.to_path_buf() });
        }
    };
    let wrong = |field: &str, expected: &'static str| SkillError::WrongType {
        path: path.to_path_buf(),
        field: field.to_string(),
        expected,
    };
    let required = |field: &'static str| -> Result<String, SkillError> {
        match map.get(field) {
            None | Some(Value::Null) => Err(SkillError::MissingField { path: path.to_path_buf(), field }),
            Some(Value::String(s)) if s.trim().is_empty() => {
                Err(SkillError::MissingField { path: path.to_path_buf(), field })
            }
            Some(Value::String(s)) => Ok(s.trim().to_string()),
            Some(_) => Err(wrong(field, "a string")),
        }
    };
    let optional = |field: &str| -> Result<Option<String>, SkillError> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => scalar_string(v).map(Some).ok_or_else(|| wrong(field, "a string")),
        }
    };
    let name = required("name")?;
    let description = required("description")?;
    let too_long =
        |field: &'static str, len: usize, max: usize| SkillError::TooLong { path: path.to_path_buf(), field, len, max };
    let len = description.chars().count();
    if len > MAX_DESCRIPTION_CHARS {
        return Err(too_long("description", len, MAX_DESCRIPTION_CHARS));
    }
    let license = optional("license")?;
    let compatibility = optional("compatibility")?;
    if let Some(c) = &compatibility {
        let len = c.chars().count();
        if len > MAX_COMPATIBILITY_CHARS {
            return Err(too_long("compatibility", len, MAX_COMPATIBILITY_CHARS));
        }
    }
    // The format says "space-delimited"; Claude Code's own skills also write comma-separated
    // lists and YAML sequences. All three are accepted.
    let allowed_tools = match map.get("allowed-tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => {
            let sep: &[char] = if s.contains(',') { &[','] } else { &[' ', '\t'] };
            s.split(sep).map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect()
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| scalar_string(v).ok_or_else(|| wrong("allowed-tools", "a list of strings")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(wrong("allowed-tools", "a string or a list of strings")),
    };
    let metadata = match map.get("metadata") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                scalar_string(v).map(|s| (k.clone(), s)).ok_or_else(|| wrong(&format!("metadata.{k}"), "a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(wrong("metadata", "a mapping of keys to strings")),
    };
    for key in map.keys() {
        if !KNOWN_KEYS.contains(&key.as_str()) {
            warnings.push(SkillError::UnknownKey { path: path.to_path_buf(), key: key.clone() });
        }
    }
    Ok(FrontMatter { name, description, license, allowed_tools, compatibility, metadata })
}

/// The error's message without serde-saphyr's own position suffix (the file line is added by
/// the caller, shifted past the opening `---`).
fn yaml_message(e: &serde_saphyr::Error) -> String {
    let full = e.to_string();
    let mut msg = full.as_str();
    // Cut the position (added back by the caller) and advice addressed to programmers
    // ("set DuplicateKeyPolicy in Options"), which a skill author cannot act on.
    for cut in [" at line ", ", set DuplicateKeyPolicy"] {
        if let Some(i) = msg.find(cut) {
            msg = &msg[..i];
        }
    }
    msg.trim().to_string()
}

/// The folder's name as the skill must be named: the configured path's last component (a
/// symbolic link keeps its own name), else the canonical folder's.
fn folder_name(configured: &Path, canonical: &Path) -> String {
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
    let split = split_front_matter(&text, &shown)?;
    let mut warnings = Vec::new();
    let fm = parse_front_matter(&split, &shown, &mut warnings)?;
    check_name(&fm.name).map_err(|reason| SkillError::InvalidName {
        path: shown.clone(),
        name: fm.name.clone(),
        reason,
    })?;
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
            instructions: split.body.trim_start_matches(['\r', '\n']).to_string(),
            files,
            scripts,
        },
        warnings,
    ))
}

/// Walks `dir` (below the canonical skill `root`), pushing relative paths of bundled files.
fn list_files(
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
enum Runner {
    /// An interpreter by name (looked up in `PATH`) with optional leading arguments.
    Interpreter(String, Vec<String>),
    /// Executed directly.
    Direct,
}

fn interpreter_for_extension(path: &Path) -> Option<&'static str> {
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
fn shebang(path: &Path) -> Option<(String, Vec<String>)> {
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

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn runner(path: &Path) -> Option<Runner> {
    if let Some(i) = interpreter_for_extension(path) {
        return Some(Runner::Interpreter(i.to_string(), Vec::new()));
    }
    if let Some((interp, args)) = shebang(path) {
        return Some(Runner::Interpreter(interp, args));
    }
    is_executable(path).then_some(Runner::Direct)
}

fn is_script(path: &Path) -> bool {
    runner(path).is_some()
}

/// Everything loaded from the configured directories at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
struct Catalog {
    skills: BTreeMap<String, Arc<SkillInfo>>,
    problems: Vec<String>,
}

fn problem_text(e: &SkillError) -> String {
    if e.is_warning() {
        format!("warning: {e}")
    } else if matches!(e, SkillError::Duplicate { .. }) {
        format!("error: {e}")
    } else {
        format!("error: {e}; the skill is skipped")
    }
}

/// Reads every configured directory.
fn scan(dirs: &[PathBuf]) -> Catalog {
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

/// What the provider and its watcher thread share.
#[derive(Debug)]
struct Shared {
    dirs: Vec<PathBuf>,
    catalog: RwLock<Arc<Catalog>>,
    events: broadcast::Sender<ProviderEvent>,
}

impl Shared {
    fn snapshot(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Re-reads the directories; returns `true` (and sends `ToolsChanged`) when the skills
    /// differ from what was loaded before.
    fn reload(&self) -> bool {
        let fresh = scan(&self.dirs);
        let mut slot = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        let changed = slot.skills != fresh.skills;
        if changed || slot.problems != fresh.problems {
            *slot = Arc::new(fresh);
        }
        drop(slot);
        if changed {
            tracing::info!(dirs = ?self.dirs, "skills changed; tool list reloaded");
            let _ = self.events.send(ProviderEvent::ToolsChanged);
        }
        changed
    }
}

/// The file watcher in use: inotify where it can be had, else polling. It is only held: dropping
/// it stops the watching.
enum Watch {
    Native { _watcher: notify::RecommendedWatcher },
    Poll { _watcher: notify::PollWatcher },
}

impl Watch {
    fn kind(&self) -> &'static str {
        match self {
            Watch::Native { .. } => "native",
            Watch::Poll { .. } => "poll",
        }
    }
}

/// `true` for events that may change what is loaded: reads (including our own rescans, which
/// open every file) are not.
fn relevant(event: &notify::Result<notify::Event>) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match event {
        Ok(e) => match e.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            EventKind::Access(_) => false,
            _ => true,
        },
        Err(_) => true,
    }
}

/// Starts watching `dirs` recursively and a thread that re-reads them after changes settle.
///
/// Reload uses the `notify` crate rather than a hand-written mtime poller: inotify reports a
/// change within milliseconds and costs nothing while idle, new sub-folders are watched as they
/// appear, and where inotify cannot be had (watch limit reached, unsupported filesystem)
/// `notify`'s own `PollWatcher` takes over at a one-second interval.
fn start_watch(shared: &Arc<Shared>, poll: bool) -> Result<Watch, String> {
    use notify::Watcher;
    let (tx, rx) = std::sync::mpsc::channel::<notify::Result<notify::Event>>();
    let existing: Vec<&PathBuf> = shared.dirs.iter().filter(|d| d.exists()).collect();
    let native = if poll {
        Err(notify::Error::generic("polling was asked for"))
    } else {
        notify::recommended_watcher(tx.clone()).and_then(|mut w| {
            for dir in &existing {
                w.watch(dir, notify::RecursiveMode::Recursive)?;
            }
            Ok(w)
        })
    };
    let watch = match native {
        Ok(w) => {
            drop(tx);
            Watch::Native { _watcher: w }
        }
        Err(e) => {
            if !poll {
                tracing::warn!(error = %e, "cannot watch skill directories natively; polling every second");
            }
            // notify's poller compares modification times in whole seconds, so an edit within
            // the second of the previous scan would go unseen; comparing contents too closes
            // that gap, at the price of reading the (small) skill folders once per interval.
            let cfg = notify::Config::default().with_poll_interval(POLL_INTERVAL).with_compare_contents(true);
            let mut w = notify::PollWatcher::new(tx, cfg).map_err(|e| e.to_string())?;
            for dir in &existing {
                w.watch(dir, notify::RecursiveMode::Recursive).map_err(|e| e.to_string())?;
            }
            Watch::Poll { _watcher: w }
        }
    };
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("axp-skill-watch".into())
        .spawn(move || {
            // The loop ends when the watcher (the only sender) is dropped.
            while let Ok(event) = rx.recv() {
                if !relevant(&event) {
                    continue;
                }
                let start = Instant::now();
                loop {
                    match rx.recv_timeout(SETTLE) {
                        Ok(_) if start.elapsed() < MAX_SETTLE => continue,
                        Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
                shared.reload();
            }
        })
        .map_err(|e| format!("cannot start the skill watcher thread: {e}"))?;
    Ok(watch)
}

/// Skills behind the [`Provider`] trait.
pub struct SkillProvider {
    id: ProviderId,
    shared: Arc<Shared>,
    launcher: Arc<dyn Launcher>,
    timeout: Duration,
    env: BTreeMap<String, String>,
    policy: ProcessPolicy,
    watch: Mutex<Option<Watch>>,
    watch_kind: &'static str,
}

impl std::fmt::Debug for SkillProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillProvider")
            .field("id", &self.id)
            .field("dirs", &self.shared.dirs)
            .field("skills", &self.shared.snapshot().skills.keys().collect::<Vec<_>>())
            .field("watch", &self.watch_kind)
            .finish()
    }
}

impl SkillProvider {
    /// Loads every skill in `cfg.dirs` and starts watching them. Never fails because of a bad
    /// skill: those are skipped and reported by [`SkillProvider::problems`]. A watcher that
    /// cannot be started is reported there too (the skills still load; call
    /// [`SkillProvider::reload`] to re-read them by hand).
    pub fn new(cfg: SkillDirsConfig) -> Self {
        Self::build(cfg, false)
    }

    /// Like [`SkillProvider::new`], but notices changes by re-reading the folders (modification
    /// times and contents) every second instead of through inotify: for skill folders on network filesystems (NFS, SMB,
    /// some container bind mounts), where inotify does not see changes made elsewhere.
    pub fn new_polling(cfg: SkillDirsConfig) -> Self {
        Self::build(cfg, true)
    }

    fn build(cfg: SkillDirsConfig, poll: bool) -> Self {
        let (events, _) = broadcast::channel(16);
        let shared = Arc::new(Shared { catalog: RwLock::new(Arc::new(scan(&cfg.dirs))), dirs: cfg.dirs, events });
        let (watch, watch_kind) = match start_watch(&shared, poll) {
            Ok(w) => {
                let kind = w.kind();
                (Some(w), kind)
            }
            Err(e) => {
                tracing::warn!(error = %e, "skill directories are not watched");
                let mut slot = shared.catalog.write().unwrap_or_else(|p| p.into_inner());
                let mut cat = (**slot).clone();
                cat.problems.push(format!("warning: skill directories are not watched ({e}); changes need a restart"));
                *slot = Arc::new(cat);
                (None, "none")
            }
        };
        for p in &shared.snapshot().problems {
            tracing::warn!(provider = %cfg.id, "{p}");
        }
        Self {
            id: cfg.id,
            shared,
            launcher: cfg.launcher,
            timeout: cfg.timeout,
            env: cfg.env,
            policy: cfg.policy,
            watch: Mutex::new(watch),
            watch_kind,
        }
    }

    /// Every problem found by the last (re)load, one sentence each, starting with `error:` (the
    /// skill was skipped) or `warning:` (it loaded anyway).
    pub fn problems(&self) -> Vec<String> {
        self.shared.snapshot().problems.clone()
    }

    /// The body of the skill's `SKILL.md` (its procedure), for `axp.describe`.
    pub fn instructions(&self, skill: &str) -> Option<String> {
        self.shared.snapshot().skills.get(skill).map(|s| s.instructions.clone())
    }

    /// The skill's bundled files, relative to its folder (empty for an unknown skill).
    pub fn files(&self, skill: &str) -> Vec<String> {
        self.shared.snapshot().skills.get(skill).map(|s| s.files.clone()).unwrap_or_default()
    }

    /// One loaded skill.
    pub fn skill(&self, skill: &str) -> Option<SkillInfo> {
        self.shared.snapshot().skills.get(skill).map(|s| (**s).clone())
    }

    /// Every loaded skill, sorted by name.
    pub fn skills(&self) -> Vec<SkillInfo> {
        self.shared.snapshot().skills.values().map(|s| (**s).clone()).collect()
    }

    /// Re-reads the directories now; `true` (and a `ToolsChanged` event) when the skills
    /// changed. The watcher calls this by itself; it is public for a SIGHUP or a test.
    pub fn reload(&self) -> bool {
        self.shared.reload()
    }

    /// How changes are noticed: `native` (inotify), `poll` (every second) or `none`.
    pub fn watch_kind(&self) -> &'static str {
        self.watch_kind
    }

    fn spec(&self, skill: &SkillInfo) -> ToolSpec {
        ToolSpec::new(skill.name.clone(), skill.description.clone(), input_schema(skill))
    }

    async fn run_script(
        &self,
        skill: &SkillInfo,
        script: &str,
        args: Vec<String>,
        call: &ToolCall,
        sink: JobSink,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ProviderError> {
        let path = resolve_bundled(skill, script, true)?;
        let path_str = path.to_string_lossy().into_owned();
        let (program, mut argv) = match runner(&path) {
            Some(Runner::Interpreter(interp, mut lead)) => {
                lead.push(path_str);
                (interp, lead)
            }
            Some(Runner::Direct) => (path_str, Vec::new()),
            None => {
                return Err(ProviderError::InvalidArguments(format!(
                    "`{script}` cannot be run: it has no known extension (.py, .sh, .bash, .js), no `#!` line and is not executable"
                )));
            }
        };
        argv.extend(args);
        let cwd = match call.meta.as_ref().and_then(|m| m.get("cwd")) {
            None | Some(Value::Null) => skill.dir.clone(),
            Some(Value::String(s)) if Path::new(s).is_absolute() => PathBuf::from(s),
            Some(other) => {
                return Err(ProviderError::Config(format!("meta.cwd must be an absolute path, got {other}")));
            }
        };
        let mut env = self.env.clone();
        env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
        // The skill folder is read-only in the sandbox; without this, Python would try to write
        // `__pycache__` next to imported modules.
        env.insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
        env.insert("AXP_SKILL_DIR".into(), skill.dir.to_string_lossy().into_owned());
        let mut policy = self.policy.clone();
        policy.fs_read.push(skill.dir.clone());
        let spec = ProcessSpec { program, args: argv, env, cwd: Some(cwd), policy };
        let tail = Capture { emit: true, keep: SKILL_TAIL_BYTES, tail: true };
        let how = RunOptions {
            tool: &skill.name,
            timeout: crate::call_timeout(call, self.timeout),
            stdout: tail,
            stderr: tail,
        };
        let finished = process::run(&self.launcher, &spec, &how, sink, cancel).await?;
        let mut out = process::tool_output(&finished, "script");
        if let Some(serde_json::Value::Object(m)) = out.structured_content.as_mut() {
            m.shift_insert(0, "script".into(), json!(script));
        }
        Ok(out)
    }
}

/// The tool's input schema: `script` (one of the bundled scripts), `args`, and `read` (one of
/// the bundled files, returned as text). No property is required: a call without any returns
/// the instructions.
fn input_schema(skill: &SkillInfo) -> Value {
    let mut props = Map::new();
    if !skill.scripts.is_empty() {
        props.insert(
            "script".into(),
            json!({
                "type": "string",
                "enum": skill.scripts,
                "description": "A bundled script to run, relative to the skill folder. Leave out to get the skill's instructions and file list."
            }),
        );
        props.insert(
            "args".into(),
            json!({
                "type": "array",
                "items": {"type": "string"},
                "description": "Command-line arguments passed to the script, one element each (no shell)."
            }),
        );
    }
    let readable: Vec<&String> = skill.files.iter().filter(|f| !skill.scripts.contains(f)).collect();
    if !readable.is_empty() {
        props.insert(
            "read".into(),
            json!({
                "type": "string",
                "enum": readable,
                "description": "A bundled reference file to return as text, relative to the skill folder."
            }),
        );
    }
    json!({
        "type": "object",
        "properties": props,
        "required": [],
        "additionalProperties": false
    })
}

/// Checks that `rel` names one of the skill's bundled files (or scripts, when `script`), and
/// that it still resolves inside the skill folder now; returns the canonical path. Nothing is
/// run or read before this passes.
fn resolve_bundled(skill: &SkillInfo, rel: &str, script: bool) -> Result<PathBuf, ProviderError> {
    let what = if script { "script" } else { "file" };
    let refuse = |why: String| ProviderError::InvalidArguments(format!("{what} `{rel}` is refused: {why}"));
    if rel.is_empty() {
        return Err(refuse("the path is empty".into()));
    }
    if rel.contains('\0') {
        return Err(refuse("the path contains a NUL byte".into()));
    }
    let p = Path::new(rel);
    if p.is_absolute() {
        return Err(refuse("paths are relative to the skill folder, never absolute".into()));
    }
    if p.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(refuse("paths may not contain `..` or `.`; name a bundled file as listed".into()));
    }
    let listed = if script { &skill.scripts } else { &skill.files };
    if !listed.iter().any(|f| f == rel) {
        let hint = if script && skill.files.iter().any(|f| f == rel) {
            "it is a bundled file but not a script; read it with `read`".to_string()
        } else if listed.is_empty() {
            format!("skill `{}` bundles no {what}s", skill.name)
        } else {
            format!("it is not one of skill `{}`'s bundled {what}s ({})", skill.name, listed.join(", "))
        };
        return Err(refuse(hint));
    }
    // The listing was checked at load time; check again now, since the file may have been
    // replaced by a link since.
    let canonical =
        std::fs::canonicalize(skill.dir.join(p)).map_err(|e| refuse(format!("it cannot be resolved now ({e})")))?;
    if !canonical.starts_with(&skill.dir) {
        return Err(refuse(format!("it now resolves to {}, outside the skill folder", canonical.display())));
    }
    if !canonical.is_file() {
        return Err(refuse("it is no longer a regular file".into()));
    }
    Ok(canonical)
}

/// The text a call without `script` returns (and what `axp.describe` shows).
fn overview(skill: &SkillInfo) -> String {
    let mut out = format!("# Skill `{}`\n\n", skill.name);
    out.push_str(skill.instructions.trim_end());
    out.push_str("\n\n## Bundled files\n\n");
    if skill.files.is_empty() {
        out.push_str("(none)\n");
    } else {
        out.push_str(&format!("Relative to the skill folder {} (read-only).\n", skill.dir.display()));
        for f in &skill.files {
            if skill.scripts.contains(f) {
                out.push_str(&format!("- {f} (script: call with {{\"script\": \"{f}\", \"args\": [...]}})\n"));
            } else {
                out.push_str(&format!("- {f} (read with {{\"read\": \"{f}\"}})\n"));
            }
        }
    }
    out
}

/// Reads a bundled file for a `read` call: at most [`MAX_READ_BYTES`], text only.
fn read_bundled(skill: &SkillInfo, rel: &str) -> Result<ToolOutput, ProviderError> {
    let path = resolve_bundled(skill, rel, false)?;
    let file = std::fs::File::open(&path).map_err(|e| ProviderError::io(format!("cannot open `{rel}`"), e))?;
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ProviderError::io(format!("cannot read `{rel}`"), e))?;
    let truncated = bytes.len() as u64 > MAX_READ_BYTES;
    bytes.truncate(MAX_READ_BYTES as usize);
    if bytes.contains(&0) {
        return Ok(ToolOutput::error_text(format!(
            "`{rel}` is a binary file; it is meant for the skill's scripts, not to be read as text"
        )));
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if truncated {
        text.push_str(&format!("\n[… cut at {MAX_READ_BYTES} bytes; the file is longer …]"));
    }
    Ok(ToolOutput::text(text))
}

/// Pulls `script`, `args` and `read` out of the arguments, refusing anything else.
/// A call's arguments, checked.
#[derive(Debug)]
struct SkillArgs {
    script: Option<String>,
    args: Vec<String>,
    read: Option<String>,
}

fn parse_arguments(args: &Map<String, Value>) -> Result<SkillArgs, ProviderError> {
    let bad = ProviderError::InvalidArguments;
    if let Some(k) = args.keys().find(|k| !matches!(k.as_str(), "script" | "args" | "read")) {
        return Err(bad(format!("unknown argument `{k}`; a skill takes `script`, `args` and `read`")));
    }
    let string = |key: &str| -> Result<Option<String>, ProviderError> {
        match args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(format!("`{key}` must be a string"))),
        }
    };
    let script = string("script")?;
    let read = string("read")?;
    let argv = match args.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) if !s.contains('\0') => Ok(s.clone()),
                Value::String(_) => Err(bad("an element of `args` contains a NUL byte".into())),
                _ => Err(bad("`args` must be an array of strings".into())),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("`args` must be an array of strings".into())),
    };
    if script.is_some() && read.is_some() {
        return Err(bad("give either `script` or `read`, not both".into()));
    }
    if script.is_none() && !argv.is_empty() {
        return Err(bad("`args` needs a `script` to pass them to".into()));
    }
    Ok(SkillArgs { script, args: argv, read })
}

#[async_trait]
impl Provider for SkillProvider {
    fn id(&self) -> &ProviderId {
        &self.id
    }

    fn instructions(&self, tool: &str) -> Option<String> {
        SkillProvider::instructions(self, tool).filter(|i| !i.trim().is_empty())
    }

    async fn tools(&self) -> Result<Vec<ToolSpec>, ProviderError> {
        Ok(self.shared.snapshot().skills.values().map(|s| self.spec(s)).collect())
    }

    async fn call(
        &self,
        call: ToolCall,
        sink: JobSink,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ProviderError> {
        let skill = self
            .shared
            .snapshot()
            .skills
            .get(&call.tool)
            .cloned()
            .ok_or_else(|| ProviderError::UnknownTool(call.tool.clone()))?;
        let SkillArgs { script, args, read } = parse_arguments(&call.arguments)?;
        match (script, read) {
            (Some(script), _) => self.run_script(&skill, &script, args, &call, sink, cancel).await,
            (None, Some(read)) => read_bundled(&skill, &read),
            (None, None) => Ok(ToolOutput {
                structured_content: Some(json!({
                    "name": skill.name,
                    "instructions": skill.instructions,
                    "files": skill.files,
                    "scripts": skill.scripts,
                })),
                ..ToolOutput::text(overview(&skill))
            }),
        }
    }

    fn events(&self) -> Option<broadcast::Receiver<ProviderEvent>> {
        Some(self.shared.events.subscribe())
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        // Dropping the watcher closes its channel, which ends the reload thread. A running
        // script's process group dies with its call's future.
        self.watch.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_split_with_its_line() {
        let p = Path::new("x/SKILL.md");
        let s = split_front_matter("---\nname: a\n---\nbody\n", p).unwrap();
        assert_eq!(s.yaml, "name: a\n");
        assert_eq!(s.body, "body\n");
        let s = split_front_matter("\u{feff}---\r\nname: a\r\n...\r\nbody", p).unwrap();
        assert_eq!(s.yaml, "name: a\r\n");
        assert_eq!(s.body, "body");
        assert!(matches!(split_front_matter("name: a\n", p), Err(SkillError::NoFrontMatter { .. })));
        assert!(matches!(split_front_matter("---\nname: a\n", p), Err(SkillError::UnclosedFrontMatter { .. })));
    }

    #[test]
    fn names_follow_the_format() {
        for ok in ["pdf", "csv-summary", "a1-b2", &"a".repeat(64)] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "PDF", "pdf_tools", "-pdf", "pdf-", "a--b", "pdf tools", "ünï", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad} should be refused");
        }
    }

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
