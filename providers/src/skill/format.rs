//! The `SKILL.md` format, parsed without any I/O: the text of a file in, its validated front
//! matter and its body out, or a [`SkillError`] that names the file (the path given, only as a
//! label) and, for YAML errors, the line and column in it. It owns the front-matter split, the
//! YAML (serde-saphyr, with budgets), the naming rule and the length limits of the Agent Skills
//! format. Reading files, listing bundled files and checking the folder's name are `scan.rs`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Longest skill name the Agent Skills format allows.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest description the Agent Skills format allows.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Longest `compatibility` note the Agent Skills format allows.
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// Front-matter keys the Agent Skills format defines; anything else is a warning.
const KNOWN_KEYS: &[&str] = &["name", "description", "license", "allowed-tools", "metadata", "compatibility"];

/// Why a skill (or a part of it) could not be loaded. Each message names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkillError {
    /// A configured directory or a skill file could not be read.
    #[error("{}: cannot read: {message}", path.display())]
    Io { path: PathBuf, message: String },
    /// A configured directory is not a directory.
    #[error("{}: not a directory (a skill directory must be a skill folder or hold skill folders)", path.display())]
    NotADirectory { path: PathBuf },
    /// `SKILL.md` is larger than [`super::MAX_SKILL_MD_BYTES`].
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
    /// The listing stopped at [`super::MAX_FILES`] or [`super::MAX_DEPTH`] (a warning).
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

/// The parts of a `SKILL.md`: the YAML text, the file line it starts on, and the body.
#[derive(Debug, PartialEq)]
pub(super) struct Split<'a> {
    pub(super) yaml: &'a str,
    /// 1-based line of the file where `yaml` starts.
    pub(super) yaml_line: u64,
    pub(super) body: &'a str,
}

/// Splits `---\n<yaml>\n---\n<body>` (a UTF-8 BOM and CRLF line ends are accepted; `...` also
/// closes the YAML document).
pub(super) fn split_front_matter<'a>(text: &'a str, path: &Path) -> Result<Split<'a>, SkillError> {
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
pub(super) fn check_name(name: &str) -> Result<(), &'static str> {
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

pub(super) fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The front matter's validated fields.
#[derive(Debug)]
pub(super) struct FrontMatter {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) license: Option<String>,
    pub(super) allowed_tools: Vec<String>,
    pub(super) compatibility: Option<String>,
    pub(super) metadata: BTreeMap<String, String>,
}

/// Parses and validates the YAML of a front matter. Warnings (unknown keys) are pushed to
/// `warnings`; the first hard problem is returned as the error.
pub(super) fn parse_front_matter(
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
pub(super) fn yaml_message(e: &serde_saphyr::Error) -> String {
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

/// A parsed `SKILL.md`: its validated front matter, its body (the procedure) and the warnings
/// (unknown keys) that do not keep it from loading.
#[derive(Debug)]
pub(super) struct SkillMd<'a> {
    pub(super) front: FrontMatter,
    pub(super) body: &'a str,
    pub(super) warnings: Vec<SkillError>,
}

/// Parses the text of a `SKILL.md`. `path` only names the file in errors: nothing is read. The
/// name is checked against the format's rule, not against a folder (the caller knows the folder).
pub(super) fn parse_skill_md<'a>(text: &'a str, path: &Path) -> Result<SkillMd<'a>, SkillError> {
    let split = split_front_matter(text, path)?;
    let mut warnings = Vec::new();
    let front = parse_front_matter(&split, path, &mut warnings)?;
    check_name(&front.name).map_err(|reason| SkillError::InvalidName {
        path: path.to_path_buf(),
        name: front.name.clone(),
        reason,
    })?;
    Ok(SkillMd { front, body: split.body, warnings })
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
}
