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

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

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

/// The tokenised descriptions of a catalog, kept between registrations so that a tool is
/// tokenised once while its description is unchanged (a gateway registers providers one at a
/// time, and each registration compares against the whole catalog).
#[derive(Debug, Default)]
pub struct CatalogMemo {
    sets: HashMap<String, Arc<BTreeSet<String>>>,
}

impl CatalogMemo {
    /// The content set of each description, from the memo or computed; afterwards the memo
    /// holds exactly these descriptions (what left the catalog is dropped).
    fn sets<'a>(&mut self, descriptions: impl Iterator<Item = &'a str>) -> Vec<Arc<BTreeSet<String>>> {
        let mut next = HashMap::new();
        let out = descriptions
            .map(|d| {
                let set = match self.sets.remove(d).or_else(|| next.get(d).cloned()) {
                    Some(s) => s,
                    None => Arc::new(content_set(d)),
                };
                next.insert(d.to_string(), set.clone());
                set
            })
            .collect();
        self.sets = next;
        out
    }
}

/// Catalog-wide checks; each finding is attached to the later tool of a pair.
pub(crate) fn check_catalog(cat: &Catalog) -> Vec<(String, String, Raw)> {
    let all: Vec<(&str, &ToolSpec)> = cat.iter().collect();
    check_pairs(&all, None, &mut CatalogMemo::default())
}

/// [`check_catalog`] over `others` with `provider`'s list `mine` in place of what it had,
/// keeping only the findings attached to `mine` and comparing only the pairs that can produce
/// them: registering one provider costs its tools times the catalog, not the catalog squared,
/// and nothing is cloned.
pub(crate) fn check_catalog_for(
    others: &Catalog,
    provider: &str,
    mine: &[ToolSpec],
    memo: &mut CatalogMemo,
) -> Vec<(String, String, Raw)> {
    // The catalog's order (providers by name), with `mine` where `provider` sorts.
    let mut all: Vec<(&str, &ToolSpec)> = Vec::new();
    let mut placed = false;
    for (p, tools) in &others.providers {
        if !placed && p.as_str() > provider {
            all.extend(mine.iter().map(|t| (provider, t)));
            placed = true;
        }
        if p != provider {
            all.extend(tools.iter().map(|t| (p.as_str(), t)));
        }
    }
    if !placed {
        all.extend(mine.iter().map(|t| (provider, t)));
    }
    check_pairs(&all, Some(provider), memo)
}

/// The checks over `all` (in catalog order), for the findings of provider `only` or of all.
fn check_pairs(all: &[(&str, &ToolSpec)], only: Option<&str>, memo: &mut CatalogMemo) -> Vec<(String, String, Raw)> {
    let mut out = Vec::new();
    for (i, (p, t)) in all.iter().enumerate() {
        if only.is_some_and(|o| o != *p) {
            continue;
        }
        if all[..i].iter().any(|(q, o)| q == p && o.name == t.name) {
            out.push((
                p.to_string(),
                t.name.clone(),
                Raw::new("AXP023", "/name", format!("provider `{p}` lists `{}` more than once", t.name)),
            ));
        }
    }
    let sets = memo.sets(all.iter().map(|(_, t)| t.description.as_str()));
    let all: Vec<(&str, &ToolSpec, &BTreeSet<String>, String)> =
        all.iter().zip(&sets).map(|((p, t), s)| (*p, *t, s.as_ref(), name_tokens(&t.name).concat())).collect();
    for (j, (pb, tb, sb, nb)) in all.iter().enumerate() {
        if only.is_some_and(|o| o != *pb) {
            continue;
        }
        for (pa, ta, sa, na) in &all[..j] {
            if pa == pb {
                continue;
            }
            // A Jaccard index of at least the threshold needs the smaller set to be at least
            // that fraction of the larger (the intersection is no larger than one, the union
            // no smaller than the other): most pairs of a large catalog are skipped here, and
            // the all-pairs check was a third of a registration's time.
            let (small, large) = (sa.len().min(sb.len()), sa.len().max(sb.len()));
            if small >= 3 && small as f64 >= DESCRIPTION_SIMILARITY * large as f64 {
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

#[cfg(test)]
mod registration_tests {
    use super::*;

    fn tool(name: &str, description: &str) -> ToolSpec {
        serde_json::from_value(
            serde_json::json!({"name": name, "description": description, "inputSchema": {"type": "object"}}),
        )
        .unwrap()
    }

    /// One provider's findings against the others equal what the whole catalog's check says
    /// about that provider's tools, also with a memo carried from an earlier registration.
    #[test]
    fn one_providers_check_matches_the_whole_catalogs() {
        let mut cat = Catalog::new();
        cat.insert(
            "alpha",
            vec![tool("echo", "Echoes back the input string unchanged"), tool("sum", "Adds two numbers")],
        );
        cat.insert(
            "beta",
            vec![tool("echo_back", "Echo back the input string unchanged"), tool("echo", "Repeats text")],
        );
        cat.insert(
            "gamma",
            vec![tool("ech0", "Echoes back the input string as is"), tool("echo", "Another echo tool")],
        );
        let mut memo = CatalogMemo::default();
        for provider in ["alpha", "beta", "gamma"] {
            let whole: Vec<_> = check_catalog(&cat)
                .into_iter()
                .filter(|(p, _, _)| p == provider)
                .map(|(p, t, r)| (p, t, r.rule, r.message))
                .collect();
            let mine = cat.providers[provider].clone();
            let one: Vec<_> = check_catalog_for(&cat, provider, &mine, &mut memo)
                .into_iter()
                .map(|(p, t, r)| (p, t, r.rule, r.message))
                .collect();
            assert_eq!(one, whole, "{provider}");
        }
        assert!(check_catalog(&cat).iter().any(|(_, _, r)| r.rule == "AXP024"), "the fixture has near-duplicates");
    }
}
