//! The search `axp.index` served before the hybrid ranking (a copy of the gateway's former
//! `catalog/search.rs`, unchanged but for this paragraph): Okapi BM25 over one bag of the tokens of
//! name, description and parameter names, with a boost for name matches. The evaluation prints it
//! as the "before" column.

use std::collections::HashMap;

/// Splits text into lower-case word tokens, breaking on non-alphanumerics, `_`, `-` and
/// camelCase boundaries, and dropping very common English words.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for ch in text.chars() {
        if ch.is_alphanumeric() {
            if ch.is_uppercase() && prev_lower && !cur.is_empty() {
                push(&mut out, &mut cur);
            }
            prev_lower = ch.is_lowercase() || ch.is_numeric();
            cur.extend(ch.to_lowercase());
        } else {
            push(&mut out, &mut cur);
            prev_lower = false;
        }
    }
    push(&mut out, &mut cur);
    out
}

const STOP: &[&str] = &[
    "a", "an", "the", "of", "to", "and", "or", "in", "on", "for", "with", "is", "it", "this", "that", "by", "be", "as",
    "at", "from",
];

fn push(out: &mut Vec<String>, cur: &mut String) {
    if !cur.is_empty() {
        if !STOP.contains(&cur.as_str()) {
            out.push(stem(cur));
        }
        cur.clear();
    }
}

/// A deliberately light stemmer (plural and -ing/-ed endings) so `files` finds `file`.
fn stem(w: &str) -> String {
    let n = w.len();
    if n > 5 && w.ends_with("ing") {
        return w[..n - 3].to_string();
    }
    if n > 4 && w.ends_with("ed") {
        return w[..n - 2].to_string();
    }
    if n > 4 && w.ends_with("es") && ["s", "x", "z", "ch", "sh"].iter().any(|e| w[..n - 2].ends_with(e)) {
        return w[..n - 2].to_string();
    }
    if n > 3 && w.ends_with('s') && !w.ends_with("ss") {
        return w[..n - 1].to_string();
    }
    w.to_string()
}

/// One searchable document: index name plus the text to search.
#[derive(Debug, Clone)]
pub struct Doc {
    pub name: String,
    pub name_tokens: Vec<String>,
    pub body_tokens: Vec<String>,
}

impl Doc {
    pub fn new(name: &str, description: &str, params: &[String]) -> Self {
        let name_tokens = tokenize(name);
        let mut body_tokens = name_tokens.clone();
        body_tokens.extend(tokenize(description));
        for p in params {
            body_tokens.extend(tokenize(p));
        }
        Self { name: name.to_string(), name_tokens, body_tokens }
    }
}

/// BM25 index over a fixed set of documents.
#[derive(Debug, Clone, Default)]
pub struct Bm25 {
    docs: Vec<Doc>,
    df: HashMap<String, usize>,
    avg_len: f64,
}

const K1: f64 = 1.2;
const B: f64 = 0.75;
const NAME_BOOST: f64 = 1.5;

impl Bm25 {
    pub fn new(docs: Vec<Doc>) -> Self {
        let mut df: HashMap<String, usize> = HashMap::new();
        let mut total = 0usize;
        for d in &docs {
            total += d.body_tokens.len();
            let mut seen: Vec<&String> = d.body_tokens.iter().collect();
            seen.sort();
            seen.dedup();
            for t in seen {
                *df.entry(t.clone()).or_default() += 1;
            }
        }
        let avg_len = if docs.is_empty() { 0.0 } else { total as f64 / docs.len() as f64 };
        Self { docs, df, avg_len }
    }

    /// Document names ranked by relevance to `query`, best first; only documents that match.
    pub fn search(&self, query: &str) -> Vec<(String, f64)> {
        let q = tokenize(query);
        if q.is_empty() {
            return Vec::new();
        }
        let n = self.docs.len() as f64;
        let mut scored: Vec<(String, f64)> = self
            .docs
            .iter()
            .filter_map(|d| {
                let len = d.body_tokens.len() as f64;
                let mut score = 0.0;
                for t in &q {
                    let tf = d.body_tokens.iter().filter(|x| *x == t).count() as f64;
                    if tf == 0.0 {
                        continue;
                    }
                    let df = *self.df.get(t).unwrap_or(&0) as f64;
                    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                    score += idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / self.avg_len.max(1.0)));
                    if d.name_tokens.contains(t) {
                        score += NAME_BOOST * idf;
                    }
                }
                (score > 0.0).then(|| (d.name.clone(), score))
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        scored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_splits_names() {
        assert_eq!(tokenize("get_current_time"), vec!["get", "current", "time"]);
        assert_eq!(tokenize("getCurrentTime"), vec!["get", "current", "time"]);
        assert_eq!(tokenize("Lists the files"), vec!["list", "file"]);
    }

    #[test]
    fn ranks_relevant_tools_first() {
        let idx = Bm25::new(vec![
            Doc::new("time__get_current_time", "Get current time in a specific timezone", &["timezone".into()]),
            Doc::new(
                "time__convert_time",
                "Convert time between timezones",
                &["source_timezone".into(), "time".into()],
            ),
            Doc::new("everything__echo", "Echoes back the input", &["message".into()]),
            Doc::new("files__read_file", "Read a file from the workspace", &["path".into()]),
        ]);
        let r = idx.search("convert timezone");
        assert_eq!(r[0].0, "time__convert_time");
        let r = idx.search("echo message");
        assert_eq!(r[0].0, "everything__echo");
        assert_eq!(r.len(), 1);
        assert!(idx.search("the").is_empty());
        assert_eq!(idx.search("reading files")[0].0, "files__read_file");
    }
}
