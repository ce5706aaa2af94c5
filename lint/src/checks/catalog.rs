//! Catalog checks (AXP021–AXP025): name syntax and index length per tool, and across the whole
//! catalog duplicate names within a provider and near-duplicate names and descriptions across
//! providers.
//!
//! Similarity: token-set Jaccard over content words (lower-cased, lightly stemmed, stop words and
//! the words every description shares such as "tool" and "use" removed). A threshold of 0.7
//! means at most about one distinct content word in four differs between the two; measured on
//! the five real servers of the test-suite, unrelated tools of different providers stay below
//! 0.5 while re-worded copies ("Echoes back the input string" / "Use this tool to echo back a
//! string.", 0.75) exceed it. Each side needs at least 3 content words, since two-word
//! descriptions collide by accident.

use axp_protocol::ToolSpec;

use super::Raw;
use crate::Catalog;
use crate::text::{content_set, jaccard, name_tokens};

/// Jaccard similarity from which two descriptions are near-duplicates.
pub(crate) const DESCRIPTION_SIMILARITY: f64 = 0.7;
/// Normalised Levenshtein similarity from which two names are near-duplicates.
pub(crate) const NAME_SIMILARITY: f64 = 0.9;

pub(crate) fn check_name(provider: &str, tool: &ToolSpec, out: &mut Vec<Raw>) {
    let n = &tool.name;
    let valid = !n.is_empty()
        && n.chars().count() <= 64
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        let bad: String = n.chars().filter(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')).collect();
        let why = if n.is_empty() {
            "is empty".to_string()
        } else if n.chars().count() > 64 {
            format!("is {} characters long", n.chars().count())
        } else {
            format!("contains {:?}", bad)
        };
        out.push(Raw::new(
            "AXP021",
            "/name",
            format!("tool name `{n}` {why}; names must match ^[a-zA-Z0-9_-]{{1,64}}$"),
        ));
    } else {
        let index = crate::index_name(provider, n);
        if index.len() > 64 {
            out.push(Raw::new(
                "AXP022",
                "/name",
                format!("index name `{index}` is {} characters and will be shortened with a hash suffix", index.len()),
            ));
        }
    }
}

/// Catalog-wide checks; each finding is attached to the later tool of a pair.
pub(crate) fn check_catalog(cat: &Catalog) -> Vec<(String, String, Raw)> {
    check_catalog_for(cat, None)
}

/// [`check_catalog`], keeping only the findings attached to tools of `only` (when given) and
/// comparing only the pairs that can produce them: registering one provider costs its tools
/// times the catalog, not the catalog squared.
pub(crate) fn check_catalog_for(cat: &Catalog, only: Option<&str>) -> Vec<(String, String, Raw)> {
    let mut out = Vec::new();
    for (p, tools) in &cat.providers {
        if only.is_some_and(|o| o != p) {
            continue;
        }
        for (i, t) in tools.iter().enumerate() {
            if tools[..i].iter().any(|o| o.name == t.name) {
                out.push((
                    p.clone(),
                    t.name.clone(),
                    Raw::new("AXP023", "/name", format!("provider `{p}` lists `{}` more than once", t.name)),
                ));
            }
        }
    }
    let all: Vec<(&str, &ToolSpec, std::collections::BTreeSet<String>, String)> =
        cat.iter().map(|(p, t)| (p, t, content_set(&t.description), name_tokens(&t.name).concat())).collect();
    for (j, (pb, tb, sb, nb)) in all.iter().enumerate() {
        if only.is_some_and(|o| o != *pb) {
            continue;
        }
        for (pa, ta, sa, na) in &all[..j] {
            if pa == pb {
                continue;
            }
            if sa.len() >= 3 && sb.len() >= 3 {
                let s = jaccard(sa, sb);
                if s >= DESCRIPTION_SIMILARITY {
                    out.push((
                        pb.to_string(),
                        tb.name.clone(),
                        Raw::new(
                            "AXP024",
                            "/description",
                            format!(
                                "description is {:.0}% similar to `{pa}/{}` (token-set Jaccard {s:.2}): agents cannot tell them apart",
                                s * 100.0,
                                ta.name
                            ),
                        ),
                    ));
                }
            }
            let same = !na.is_empty() && na == nb;
            // Similarity >= 0.9 needs lengths within 10% of each other: skip the rest cheaply.
            let (la, lb) = (na.chars().count(), nb.chars().count());
            let close = la >= 6
                && lb >= 6
                && (la.abs_diff(lb) as f64) <= (1.0 - NAME_SIMILARITY) * la.max(lb) as f64
                && strsim::normalized_levenshtein(na, nb) >= NAME_SIMILARITY;
            if same || close {
                let how = if ta.name == tb.name {
                    "the same name as".to_string()
                } else if same {
                    "the same name (up to case and separators) as".to_string()
                } else {
                    format!("a name {:.0}% similar to", strsim::normalized_levenshtein(na, nb) * 100.0)
                };
                out.push((
                    pb.to_string(),
                    tb.name.clone(),
                    Raw::new("AXP025", "/name", format!("`{}` has {how} `{pa}/{}`", tb.name, ta.name)),
                ));
            }
        }
    }
    out
}
