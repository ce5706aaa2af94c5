//! Ranked search over the index (`axp.index {query}`): a lexical ranking (BM25F over three
//! fields of their own: the tool's name, its description, and its parameters' names and
//! descriptions) fused with a semantic one (the cosine of static embeddings from `axp-embed`,
//! which match a request to a tool when they share meaning but few words) by reciprocal rank
//! fusion. Each tool's vector is computed when the catalog is rebuilt and kept by the digest of
//! the text it embeds, so a rebuild embeds only tools that changed; a query embeds its own text
//! (microseconds) and scans the vectors. Without a model, the lexical ranking stands alone.
//!
//! This file depends on nothing else in the gateway: the search evaluation bench
//! (`benches/search-eval`) compiles it as it is.

use std::collections::HashMap;
use std::sync::Arc;

use axp_embed::Model;
use serde_json::Value;
use sha2::{Digest, Sha256};

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
    "at", "from", "i", "me", "my", "we", "our", "you", "your", "can", "do", "does", "what", "which", "how", "all",
    "are", "some", "so", "into", "up", "out", "its", "use", "using", "used", "when", "will", "if", "not", "only",
    "get", "show",
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

/// One searchable tool: its index name, description, and its parameters' names and
/// descriptions (nested object parameters included).
#[derive(Debug, Clone, Default)]
pub struct Doc {
    pub name: String,
    pub description: String,
    pub params: Vec<(String, String)>,
}

impl Doc {
    /// A tool's document from its input schema's `properties`, two levels deep (some servers
    /// wrap every argument in one object parameter).
    pub fn from_schema(name: &str, description: &str, schema: &Value) -> Self {
        let mut params = Vec::new();
        collect_params(schema, 0, &mut params);
        Self { name: name.to_string(), description: description.to_string(), params }
    }

    /// The text whose embedding stands for the tool: its name read as words, the opening of
    /// its description (a long description's tail is usage notes that would blur the mean),
    /// and its parameters' names.
    fn semantic_text(&self) -> String {
        let mut t = self.name.replace("__", " ");
        t.push_str(". ");
        t.extend(self.description.split_whitespace().take(SEMANTIC_WORDS).flat_map(|w| [w, " "]));
        if !self.params.is_empty() {
            t.push_str(". ");
            for (p, _) in &self.params {
                t.push_str(p);
                t.push(' ');
            }
        }
        t
    }
}

/// How many words of a description the semantic text keeps.
const SEMANTIC_WORDS: usize = 24;

fn collect_params(schema: &Value, depth: usize, out: &mut Vec<(String, String)>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (k, v) in props {
        let desc = v.get("description").and_then(Value::as_str).unwrap_or_default();
        out.push((k.clone(), desc.to_string()));
        if depth == 0 {
            collect_params(v, 1, out);
        }
    }
}

/// One ranked tool: its name, the fused score, and the two rankings' own evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub name: String,
    /// What the list is sorted by (higher first).
    pub score: f64,
    /// The BM25F score; 0 when no query word is in the tool's text.
    pub lexical: f64,
    /// The cosine of the query's and the tool's embeddings; 0 without a model.
    pub semantic: f32,
}

/// Which rankings [`Index::search_with`] uses; the hybrid is what `axp.index` serves, the
/// other two are its halves, for the evaluation bench.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code, reason = "the evaluation bench ranks with each half alone")]
pub enum Mode {
    Lexical,
    Semantic,
    Hybrid,
}

/// Fields of the lexical ranking.
const NAME: usize = 0;
const DESC: usize = 1;
const PARAMS: usize = 2;
/// BM25F: each field's weight and length normalisation, and the saturation constant.
const WEIGHT: [f64; 3] = [3.0, 1.0, 0.6];
const B: [f64; 3] = [0.3, 0.75, 0.75];
const K1: f64 = 1.2;

/// Reciprocal rank fusion: `1 / (RRF_K + rank)` from each ranking, the semantic one weighted.
/// A small constant lets the first places of each ranking count for much more than the rest:
/// the right tool is most often first in one of the two lists, and a tool that both lists hold
/// in their middle is seldom it.
const RRF_K: f64 = 2.0;
const SEMANTIC_WEIGHT: f64 = 1.25;
/// How many of the semantically closest tools join the candidates, and the least cosine for
/// one that no query word matches to be listed at all.
const SEMANTIC_CANDIDATES: usize = 100;
const SEMANTIC_FLOOR: f32 = 0.2;
/// At most this many tools are ranked for a query: as many as `axp.index` shows in one page
/// (its limit is 500), so that a query over a large catalog sorts a bounded list.
const MAX_HITS: usize = 500;

/// The search index over a fixed set of tools; rebuilt when the catalog changes, read-only
/// for queries.
#[derive(Default)]
pub struct Index {
    names: Vec<String>,
    /// Term → the tools that hold it, with its count in each field.
    postings: HashMap<String, Vec<(u32, [u16; 3])>>,
    /// Each tool's field lengths in tokens, and their averages.
    lens: Vec<[u32; 3]>,
    avg: [f64; 3],
    model: Option<&'static Model>,
    /// `names.len() × dim` unit vectors, row-major (empty without a model).
    vectors: Vec<f32>,
    /// Vectors by the digest of the text they embed, carried from one build to the next.
    cache: HashMap<[u8; 32], Arc<[f32]>>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").field("tools", &self.names.len()).field("semantic", &self.model.is_some()).finish()
    }
}

impl Index {
    /// An index over `docs` that reuses this one's vectors for tools whose text is unchanged
    /// (`Index::default().rebuilt(docs)` builds a first one). It embeds with `axp-embed`'s
    /// built-in model; lexical alone if that cannot be loaded, which that crate's tests rule
    /// out.
    pub fn rebuilt(&self, docs: Vec<Doc>) -> Self {
        Self::with_model(docs, self.model.or_else(|| Model::builtin().ok()), &self.cache)
    }

    fn with_model(docs: Vec<Doc>, model: Option<&'static Model>, cache: &HashMap<[u8; 32], Arc<[f32]>>) -> Self {
        let mut postings: HashMap<String, Vec<(u32, [u16; 3])>> = HashMap::new();
        let mut lens = Vec::with_capacity(docs.len());
        let mut totals = [0u64; 3];
        for (i, d) in docs.iter().enumerate() {
            let mut params = String::new();
            for (p, desc) in &d.params {
                params.push_str(p);
                params.push(' ');
                params.push_str(desc);
                params.push(' ');
            }
            let fields = [tokenize(&d.name), tokenize(&d.description), tokenize(&params)];
            let mut counts: HashMap<&str, [u16; 3]> = HashMap::new();
            let mut len = [0u32; 3];
            for (f, toks) in fields.iter().enumerate() {
                len[f] = u32::try_from(toks.len()).unwrap_or(u32::MAX);
                totals[f] += u64::from(len[f]);
                for t in toks {
                    let c = &mut counts.entry(t.as_str()).or_default()[f];
                    *c = c.saturating_add(1);
                }
            }
            let id = u32::try_from(i).unwrap_or(u32::MAX);
            for (t, c) in counts {
                match postings.get_mut(t) {
                    Some(list) => list.push((id, c)),
                    None => {
                        postings.insert(t.to_string(), vec![(id, c)]);
                    }
                }
            }
            lens.push(len);
        }
        let n = docs.len().max(1) as f64;
        let avg = totals.map(|t| (t as f64 / n).max(1.0));

        let mut vectors = Vec::new();
        let mut next_cache = HashMap::new();
        if let Some(m) = model {
            vectors.reserve(docs.len() * m.dim());
            for d in &docs {
                let text = d.semantic_text();
                let key: [u8; 32] = Sha256::digest(text.as_bytes()).into();
                let v = cache.get(&key).cloned().unwrap_or_else(|| Arc::from(m.embed(&text)));
                vectors.extend_from_slice(&v);
                next_cache.insert(key, v);
            }
        }
        Self {
            names: docs.into_iter().map(|d| d.name).collect(),
            postings,
            lens,
            avg,
            model,
            vectors,
            cache: next_cache,
        }
    }

    /// Tools ranked for `query`, best first: the hybrid ranking.
    pub fn search(&self, query: &str) -> Vec<Hit> {
        self.search_with(query, Mode::Hybrid)
    }

    /// Tools ranked for `query` by one ranking or both, at most [`MAX_HITS`]. Listed are the
    /// best tools a query word matches, and the semantically closest ones whose cosine reaches
    /// a floor.
    pub fn search_with(&self, query: &str, mode: Mode) -> Vec<Hit> {
        let lexical = if mode == Mode::Semantic { Vec::new() } else { self.lexical(query) };
        let semantic = if mode == Mode::Lexical { Vec::new() } else { self.semantic(query) };
        // Every candidate with its rank in each list (1-based; 0 = not in it) and its scores.
        let mut cand: HashMap<u32, (usize, f64, usize, f32)> = HashMap::with_capacity(lexical.len() + semantic.len());
        for (r, &(i, s)) in lexical.iter().enumerate() {
            let e = cand.entry(i).or_default();
            e.0 = r + 1;
            e.1 = s;
        }
        for (r, &(i, c)) in semantic.iter().enumerate() {
            let e = cand.entry(i).or_default();
            e.2 = r + 1;
            e.3 = c;
        }
        let mut hits: Vec<Hit> = cand
            .into_iter()
            .filter(|&(_, (lr, _, sr, cos))| lr > 0 || (sr > 0 && cos >= SEMANTIC_FLOOR))
            .map(|(i, (lr, lex, sr, cos))| {
                let score = match mode {
                    Mode::Lexical => lex,
                    Mode::Semantic => f64::from(cos),
                    Mode::Hybrid => {
                        let l = if lr > 0 { 1.0 / (RRF_K + lr as f64) } else { 0.0 };
                        let s = if sr > 0 { SEMANTIC_WEIGHT / (RRF_K + sr as f64) } else { 0.0 };
                        l + s
                    }
                };
                Hit { name: self.names[i as usize].clone(), score, lexical: lex, semantic: cos }
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.name.cmp(&b.name)));
        hits.truncate(MAX_HITS);
        hits
    }

    /// BM25F: `(tool, score)` for the [`MAX_HITS`] best tools holding a query word, best first.
    fn lexical(&self, query: &str) -> Vec<(u32, f64)> {
        let mut terms = tokenize(query);
        terms.sort();
        terms.dedup();
        let n = self.names.len() as f64;
        // Dense sums: a query touches many tools of a large catalog, and a vector indexed by
        // tool is cheaper than a map.
        let mut scores = vec![0.0f64; self.names.len()];
        let mut touched: Vec<u32> = Vec::new();
        for t in &terms {
            let Some(post) = self.postings.get(t) else {
                continue;
            };
            let df = post.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in post {
                let len = self.lens[doc as usize];
                let mut x = 0.0;
                for f in [NAME, DESC, PARAMS] {
                    if tf[f] > 0 {
                        let norm = 1.0 - B[f] + B[f] * f64::from(len[f]) / self.avg[f];
                        x += WEIGHT[f] * f64::from(tf[f]) / norm;
                    }
                }
                let s = &mut scores[doc as usize];
                if *s == 0.0 {
                    touched.push(doc);
                }
                *s += idf * x / (K1 + x);
            }
        }
        let mut out: Vec<(u32, f64)> = touched.into_iter().map(|d| (d, scores[d as usize])).collect();
        let by_score = |a: &(u32, f64), b: &(u32, f64)| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0));
        if out.len() > MAX_HITS {
            out.select_nth_unstable_by(MAX_HITS - 1, by_score);
            out.truncate(MAX_HITS);
        }
        out.sort_by(by_score);
        out
    }

    /// The tools closest to the query in meaning: `(tool, cosine)` for the best
    /// [`SEMANTIC_CANDIDATES`], best first; empty without a model or when no word of the query
    /// is in its vocabulary.
    fn semantic(&self, query: &str) -> Vec<(u32, f32)> {
        let Some(m) = self.model else {
            return Vec::new();
        };
        let dim = m.dim();
        let mut q = vec![0.0; dim];
        if !m.embed_into(query, &mut q) || self.vectors.is_empty() {
            return Vec::new();
        }
        let mut all: Vec<(u32, f32)> = self
            .vectors
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, v)| (u32::try_from(i).unwrap_or(u32::MAX), axp_embed::dot(&q, v)))
            .collect();
        let by_cos = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0));
        if all.len() > SEMANTIC_CANDIDATES {
            all.select_nth_unstable_by(SEMANTIC_CANDIDATES - 1, by_cos);
            all.truncate(SEMANTIC_CANDIDATES);
        }
        all.sort_by(by_cos);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokenizer_splits_names() {
        assert_eq!(tokenize("get_current_time"), vec!["current", "time"]);
        assert_eq!(tokenize("getCurrentTime"), vec!["current", "time"]);
        assert_eq!(tokenize("Lists the files"), vec!["list", "file"]);
    }

    fn doc(name: &str, description: &str, schema: Value) -> Doc {
        Doc::from_schema(name, description, &schema)
    }

    /// A small fixed catalog: tools of real servers, with their real descriptions (shortened).
    fn catalog() -> Vec<Doc> {
        vec![
            doc(
                "time__get_current_time",
                "Get current time in a specific timezone",
                json!({"properties": {"timezone": {"description": "IANA timezone name"}}}),
            ),
            doc(
                "time__convert_time",
                "Convert time between timezones",
                json!({"properties": {"source_timezone": {}, "time": {}, "target_timezone": {}}}),
            ),
            doc("everything__echo", "Echoes back the input string", json!({"properties": {"message": {}}})),
            doc(
                "filesystem__read_text_file",
                "Read the complete contents of a file from the file system as text.",
                json!({"properties": {"path": {}, "tail": {"description": "If provided, returns only the last N lines of the file"}}}),
            ),
            doc(
                "filesystem__list_directory_with_sizes",
                "Get a detailed listing of all files and directories in a specified path, including sizes.",
                json!({"properties": {"path": {}, "sortBy": {"description": "Sort entries by name or size"}}}),
            ),
            doc(
                "git__git_commit",
                "Records changes to the repository",
                json!({"properties": {"repo_path": {}, "message": {"description": "Commit message"}}}),
            ),
            doc(
                "slack__slack_post_message",
                "Post a new message to a Slack channel",
                json!({"properties": {"channel_id": {}, "text": {}}}),
            ),
            doc(
                "google-maps__maps_elevation",
                "Get elevation data for locations on the earth",
                json!({"properties": {"locations": {}}}),
            ),
            doc(
                "kubernetes__kubectl_scale",
                "Scale a Kubernetes deployment",
                json!({"properties": {"name": {}, "replicas": {"description": "Number of replicas"}}}),
            ),
            doc(
                "circleci__find_flaky_tests",
                "This tool retrieves information about flaky tests in a CircleCI project.",
                json!({"properties": {"params": {"properties": {"projectSlug": {"description": "The project slug"}}}}}),
            ),
        ]
    }

    fn top(idx: &Index, q: &str, mode: Mode) -> Option<String> {
        idx.search_with(q, mode).into_iter().next().map(|h| h.name)
    }

    #[test]
    fn lexical_ranking_uses_each_field() {
        let idx = Index::default().rebuilt(catalog());
        assert_eq!(top(&idx, "convert timezone", Mode::Lexical).as_deref(), Some("time__convert_time"));
        assert_eq!(top(&idx, "echo message", Mode::Lexical).as_deref(), Some("everything__echo"));
        assert_eq!(top(&idx, "reading files", Mode::Lexical).as_deref(), Some("filesystem__read_text_file"));
        // A word found only in a parameter's description, and one only in a nested parameter.
        assert_eq!(top(&idx, "last lines", Mode::Lexical).as_deref(), Some("filesystem__read_text_file"));
        assert_eq!(top(&idx, "project slug", Mode::Lexical).as_deref(), Some("circleci__find_flaky_tests"));
        assert!(idx.search_with("the", Mode::Lexical).is_empty());
    }

    #[test]
    fn paraphrases_are_found_by_meaning() {
        let idx = Index::default().rebuilt(catalog());
        // None of these requests shares a content word with its tool's text.
        for (q, want) in [
            ("how high above sea level is Denver", "google-maps__maps_elevation"),
            ("send a note to the team chat", "slack__slack_post_message"),
            ("what hour is it in Paris", "time__get_current_time"),
        ] {
            assert!(idx.search_with(q, Mode::Lexical).iter().all(|h| h.name != want), "{q}: lexical alone finds it");
            assert_eq!(top(&idx, q, Mode::Semantic).as_deref(), Some(want), "{q}");
            assert_eq!(top(&idx, q, Mode::Hybrid).as_deref(), Some(want), "{q}");
        }
    }

    #[test]
    fn the_hybrid_keeps_exact_matches_first() {
        let idx = Index::default().rebuilt(catalog());
        let hits = idx.search("post message to slack channel");
        assert_eq!(hits[0].name, "slack__slack_post_message");
        assert!(hits[0].lexical > 0.0 && hits[0].semantic > 0.0);
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score), "sorted by score");
    }

    #[test]
    fn without_a_model_the_lexical_ranking_stands_alone() {
        let idx = Index::with_model(catalog(), None, &HashMap::new());
        let q = "convert timezone";
        let alone: Vec<String> = idx.search(q).into_iter().map(|h| h.name).collect();
        let lexical: Vec<String> = idx.search_with(q, Mode::Lexical).into_iter().map(|h| h.name).collect();
        assert_eq!(alone, lexical);
        assert_eq!(alone[0], "time__convert_time");
        assert!(
            idx.search("how high above sea level is Denver").is_empty(),
            "no word matches, no meaning without a model"
        );
    }

    #[test]
    fn rebuilding_reuses_vectors_of_unchanged_tools() {
        let idx = Index::default().rebuilt(catalog());
        let mut docs = catalog();
        docs[0].description = "Tells the present hour for a region".into();
        let next = idx.rebuilt(docs);
        let same = catalog()[1].semantic_text();
        let key: [u8; 32] = Sha256::digest(same.as_bytes()).into();
        assert!(Arc::ptr_eq(&idx.cache[&key], &next.cache[&key]), "an unchanged tool is not embedded again");
        let old = catalog()[0].semantic_text();
        let old_key: [u8; 32] = Sha256::digest(old.as_bytes()).into();
        assert!(!next.cache.contains_key(&old_key), "a changed tool's old vector is dropped");
        assert_eq!(next.cache.len(), catalog().len());
        assert_eq!(top(&next, "present hour", Mode::Hybrid).as_deref(), Some("time__get_current_time"));
    }
}
