//! Description-quality checks (AXP001–AXP010): presence, length, placeholders, restating the
//! name, purpose in the first sentence, index line length, token budget, vagueness, and side
//! effects versus annotations. Heuristics over words only; safety wording is not judged here.

use axp_protocol::ToolSpec;

use super::{Raw, clip};
use crate::text::{
    DESTRUCTIVE_VERBS, MUTATING_VERBS, STOPWORDS, VAGUE, VERBS, content_set, first_sentence, is_in, name_tokens, stem,
    words,
};

/// First sentences longer than this are cut in the one-line index.
pub(crate) const FIRST_LINE_MAX: usize = 160;
/// Token budget; tokens are estimated as characters / 4 (the usual English ratio for BPE
/// tokenizers), so this is 2000 characters.
pub(crate) const TOKEN_BUDGET: usize = 500;
/// Share of vague content words from which a description is "mostly vague".
pub(crate) const VAGUE_SHARE: f64 = 0.4;

const PLACEHOLDERS: &[&str] = &[
    "todo",
    "tbd",
    "fixme",
    "xxx",
    "description",
    "placeholder",
    "n/a",
    "na",
    "none",
    "test",
    "test tool",
    "tool",
    "...",
    "-",
    "lorem ipsum",
    "add description",
    "description goes here",
    "<description>",
    "insert description here",
    "no description",
    "coming soon",
    "wip",
];

/// Words that state a consequence, for AXP009.
const CONSEQUENCE_WORDS: &[&str] = &[
    "permanent",
    "irreversib",
    "cannot be undone",
    "can't be undone",
    "overwrit",
    "destructive",
    "side effect",
    "side-effect",
    "modif",
    "recipient",
    "will be sent",
    "will be deleted",
    "will be created",
    "will be written",
    "will be published",
    "caution",
    "warning",
    "confirm",
    "persist",
    "changes the",
    "changes to",
    "is sent",
    "are sent",
    "irrevocabl",
    "billed",
    "charges",
    "executes",
    "is deleted",
    "are deleted",
    "replaces",
];

pub(crate) fn check(tool: &ToolSpec, out: &mut Vec<Raw>) {
    let desc = tool.description.trim();
    if desc.is_empty() {
        out.push(Raw::new("AXP001", "/description", format!("tool `{}` has no description", tool.name)));
        side_effects(tool, out);
        return;
    }
    let lower = desc.to_lowercase();
    let n_words = words(desc).len();
    let placeholder = PLACEHOLDERS.contains(&lower.trim_end_matches('.'))
        || ["todo", "tbd", "fixme", "lorem ipsum"]
            .iter()
            .any(|p| lower.starts_with(p) || lower.contains(&format!("{p}:")))
        || lower.contains("lorem ipsum");
    if placeholder {
        out.push(Raw::new("AXP003", "/description", format!("description is a placeholder: \"{}\"", clip(desc, 60))));
    } else if n_words < 3 || desc.chars().count() < 12 {
        out.push(Raw::new(
            "AXP002",
            "/description",
            format!(
                "description \"{}\" ({n_words} word{}) is too short to state an action and its result",
                clip(desc, 60),
                if n_words == 1 { "" } else { "s" }
            ),
        ));
    }
    if !placeholder {
        restates_name(tool, desc, out);
        let first = first_sentence(desc);
        if !words(first).iter().any(|w| is_in(w, VERBS) || is_in(w, MUTATING_VERBS)) {
            out.push(Raw::new(
                "AXP005",
                "/description",
                format!(
                    "the first sentence \"{}\" names no action: start with what the tool does (e.g. \"Returns …\", \"Creates …\")",
                    clip(first, 80)
                ),
            ));
        }
        let len = first.chars().count();
        if len > FIRST_LINE_MAX {
            out.push(Raw::new(
                "AXP006",
                "/description",
                format!(
                    "the first sentence is {len} characters; the index shows about {FIRST_LINE_MAX}: end the purpose with a full stop earlier"
                ),
            ));
        }
    }
    let tokens = desc.chars().count().div_ceil(4);
    if tokens > TOKEN_BUDGET {
        out.push(Raw::new(
            "AXP007",
            "/description",
            format!("description is about {tokens} tokens, over the budget of {TOKEN_BUDGET}"),
        ));
    }
    vague(desc, out);
    side_effects(tool, out);
}

fn restates_name(tool: &ToolSpec, desc: &str, out: &mut Vec<Raw>) {
    let name: std::collections::BTreeSet<String> = name_tokens(&tool.name).iter().map(|t| stem(t)).collect();
    let content = content_set(desc);
    if !content.is_empty() && content.len() <= 4 && content.iter().all(|w| name.contains(w)) {
        out.push(Raw::new(
            "AXP004",
            "/description",
            format!(
                "description \"{}\" only restates the name `{}`: say what it returns or changes, and when to use it",
                clip(desc, 60),
                tool.name
            ),
        ));
    }
}

fn vague(desc: &str, out: &mut Vec<Raw>) {
    let content: Vec<String> =
        words(desc).into_iter().filter(|w| !STOPWORDS.contains(&w.as_str()) || VAGUE.contains(&w.as_str())).collect();
    let vague: Vec<&String> = content.iter().filter(|w| is_in(w, VAGUE)).collect();
    if vague.len() >= 2 && vague.len() as f64 >= VAGUE_SHARE * content.len() as f64 {
        let mut list: Vec<&str> = vague.iter().map(|s| s.as_str()).collect();
        list.dedup();
        out.push(Raw::new(
            "AXP008",
            "/description",
            format!(
                "{} of {} content words are vague ({}): name the concrete input, action and result",
                vague.len(),
                content.len(),
                list.join(", ")
            ),
        ));
    }
}

/// The tool's action verbs (stemmed): the first name token that is a verb, and the first verb of
/// the first sentence.
pub(crate) fn action_verbs(tool: &ToolSpec) -> Vec<String> {
    let mut v = Vec::new();
    let is_verb = |w: &str| is_in(w, VERBS) || is_in(w, MUTATING_VERBS);
    if let Some(t) = name_tokens(&tool.name).into_iter().find(|t| is_verb(t)) {
        v.push(stem(&t));
    }
    // Identifiers (send_email, `git-diff`) in the sentence name other tools, not this one's action.
    let plain_words: Vec<String> = first_sentence(&tool.description)
        .split_whitespace()
        .filter(|t| {
            !t.contains('_') && !t.contains('`') && !t.trim_matches(|c: char| !c.is_alphanumeric()).contains('-')
        })
        .flat_map(words)
        .collect();
    if let Some(t) = plain_words.into_iter().find(|t| is_verb(t)) {
        v.push(stem(&t));
    }
    v.dedup();
    v
}

fn side_effects(tool: &ToolSpec, out: &mut Vec<Raw>) {
    let verbs = action_verbs(tool);
    let mutating: Vec<&String> = verbs.iter().filter(|v| is_in(v, MUTATING_VERBS)).collect();
    let destructive: Vec<&String> = verbs.iter().filter(|v| is_in(v, DESTRUCTIVE_VERBS)).collect();
    let ro = tool.annotation("readOnlyHint");
    let de = tool.annotation("destructiveHint");
    if ro == Some(true) && de == Some(true) {
        out.push(Raw::new("AXP010", "/annotations", "annotations say both readOnlyHint=true and destructiveHint=true"));
    }
    if ro == Some(true) && !mutating.is_empty() {
        out.push(Raw::new(
            "AXP010",
            "/annotations/readOnlyHint",
            format!("readOnlyHint=true, but the tool says it will `{}`: clients may auto-approve it", mutating[0]),
        ));
    } else if de == Some(false) && !destructive.is_empty() {
        out.push(Raw::new(
            "AXP010",
            "/annotations/destructiveHint",
            format!("destructiveHint=false, but the tool says it will `{}`", destructive[0]),
        ));
    }
    if mutating.is_empty() || ro.is_some() || de.is_some() {
        return;
    }
    let lower = tool.description.to_lowercase();
    if CONSEQUENCE_WORDS.iter().any(|w| lower.contains(w)) {
        return;
    }
    out.push(Raw::new(
        "AXP009",
        "/annotations",
        format!(
            "the tool will `{}` but neither annotations (readOnlyHint/destructiveHint) nor the description state its side effects",
            mutating[0]
        ),
    ));
}
