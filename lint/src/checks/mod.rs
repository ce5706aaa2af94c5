//! The checks behind the rules: each submodule owns one family and emits [`Raw`] findings
//! (rule id, message, pointer, fix) with no severity and no config applied; `report` turns them
//! into [`crate::Finding`]s. Checks are pure functions of the tools they are given.

pub(crate) mod catalog;
pub(crate) mod description;
pub(crate) mod intent;
pub(crate) mod safety;
pub(crate) mod schema;

use axp_protocol::ToolSpec;

use crate::Fix;

/// A finding before configuration: which rule, what, where, how to fix.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Raw {
    pub(crate) rule: &'static str,
    pub(crate) message: String,
    pub(crate) pointer: String,
    pub(crate) fix: Option<Fix>,
    /// Character range, in the string at `pointer`, of the sentence the finding is about.
    pub(crate) span: Option<(usize, usize)>,
}

impl Raw {
    pub(crate) fn new(rule: &'static str, pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self { rule, message: message.into(), pointer: pointer.into(), fix: None, span: None }
    }

    pub(crate) fn at(mut self, start: usize, end: usize) -> Self {
        self.span = Some((start, end));
        self
    }

    pub(crate) fn with_fix(mut self, fix: Fix) -> Self {
        self.fix = Some(fix);
        self
    }
}

/// One tool of the catalog as the shadowing check sees it, prepared once per run.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) provider: String,
    pub(crate) name: String,
    pub(crate) lower: String,
    /// Has a separator or several words, so a bare mention is a reference to the tool.
    pub(crate) distinctive: bool,
}

/// Other tools the safety checks may see mentioned (for shadowing).
#[derive(Debug, Clone, Default)]
pub(crate) struct Context {
    pub(crate) known: Vec<Known>,
}

impl Context {
    /// Every tool of `cat`, prepared.
    pub(crate) fn of(cat: &crate::Catalog) -> Self {
        Self {
            known: cat
                .iter()
                .map(|(p, t)| {
                    let lower = t.name.to_lowercase();
                    Known {
                        provider: p.to_string(),
                        name: t.name.clone(),
                        distinctive: lower.contains('_')
                            || lower.contains('-')
                            || crate::text::name_tokens(&t.name).len() > 1,
                        lower,
                    }
                })
                .collect(),
        }
    }
}

/// Every per-tool check.
pub(crate) fn check_tool(provider: &str, tool: &ToolSpec, ctx: &Context) -> Vec<Raw> {
    let mut out = Vec::new();
    description::check(tool, &mut out);
    schema::check(tool, &mut out);
    catalog::check_name(provider, tool, &mut out);
    safety::check(provider, tool, ctx, &mut out);
    out
}

/// Shortens `s` to at most `n` characters for a message, marking the cut.
pub(crate) fn clip(s: &str, n: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= n {
        flat
    } else {
        let mut t: String = flat.chars().take(n).collect();
        t.push('…');
        t
    }
}
