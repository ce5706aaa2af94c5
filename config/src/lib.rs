//! The operator's configuration files (DESIGN §6), parsed in two tiers: raw serde formats that
//! refuse unknown keys, resolved into validated structures by functions that collect every
//! problem before failing. Errors name the file, line and column, and the nearest valid key for
//! a typo. This crate reads text and the environment (through [`env::EnvSource`]) and nothing
//! else: it never starts anything and opens no socket, so the fleet parser can be fuzzed on its
//! own. It holds the fleet formats (`fleet`), `${VAR}` expansion (`env`), the operator-policy
//! sections of `axp.toml` (`operator_policy`) and the shared error type; the gateway's `settings` module
//! reads the rest of `axp.toml`, whose sections are the gateway's own types.

pub mod env;
pub mod fleet;
pub mod operator_policy;

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in one configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// Where in the document, e.g. `mcpServers.time.args`.
    pub path: Option<String>,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
            if let Some(c) = self.column {
                write!(f, ":{c}")?;
            }
        }
        write!(f, ": ")?;
        if let Some(p) = &self.path
            && !p.is_empty()
            && p != "."
        {
            write!(f, "at `{p}`: ")?;
        }
        write!(f, "{}", self.message)?;
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Every problem found in a configuration, reported together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<ConfigProblem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl ConfigError {
    pub fn one(file: &Path, message: impl Into<String>) -> Self {
        Self {
            problems: vec![ConfigProblem {
                file: file.to_path_buf(),
                line: None,
                column: None,
                path: None,
                message: message.into(),
                hint: None,
            }],
        }
    }
}

/// The valid key closest to `word` by edit distance, if any is close enough to be a likely typo.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&word.to_ascii_lowercase(), &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 2).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Turns serde's "unknown field `x`, expected one of `a`, `b`" (or "expected `a` or `b`") into a
/// hint naming the nearest valid key. serde exposes the list only inside the message, so we read
/// it back from there.
pub fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    match nearest(field, expected.iter().copied()) {
        Some(n) => Some(format!("did you mean `{n}`?")),
        None if !expected.is_empty() => Some(format!("valid keys here: {}", expected.join(", "))),
        None => None,
    }
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let upto = &text[..offset.min(text.len())];
    let line = upto.matches('\n').count() + 1;
    let col = upto.rfind('\n').map_or(upto.chars().count(), |i| upto[i + 1..].chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_key() {
        assert_eq!(nearest("comand", ["command", "args", "env"]), Some("command"));
        assert_eq!(nearest("ARGS", ["command", "args"]), Some("args"));
        assert_eq!(nearest("zzzzzzzz", ["command", "args"]), None);
    }

    #[test]
    fn hint_from_serde_message() {
        let h = unknown_field_hint("unknown field `comand`, expected one of `command`, `args`, `env`");
        assert_eq!(h.as_deref(), Some("did you mean `command`?"));
        let h = unknown_field_hint("unknown field `listn`, expected `listen` or `state_dir`");
        assert_eq!(h.as_deref(), Some("did you mean `listen`?"));
    }

    #[test]
    fn offsets_to_positions() {
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab", 0), (1, 1));
    }
}
