//! The checks behind the rules: each submodule owns one family and emits [`Raw`] findings
//! (rule id, message, pointer, fix) with no severity and no config applied; `report` turns them
//! into [`crate::Finding`]s. Checks are pure functions of the tools they are given.

pub(crate) mod catalog;
pub(crate) mod description;
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
}

impl Raw {
    pub(crate) fn new(
        rule: &'static str,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            rule,
            message: message.into(),
            pointer: pointer.into(),
            fix: None,
        }
    }

    pub(crate) fn with_fix(mut self, fix: Fix) -> Self {
        self.fix = Some(fix);
        self
    }
}

/// Other tools the safety checks may see mentioned (for shadowing): (provider, tool name).
#[derive(Debug, Clone, Default)]
pub(crate) struct Context<'a> {
    pub(crate) others: Vec<(&'a str, &'a str)>,
}

/// Every per-tool check.
pub(crate) fn check_tool(provider: &str, tool: &ToolSpec, ctx: &Context<'_>) -> Vec<Raw> {
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
