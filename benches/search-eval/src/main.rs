//! The search evaluation: ranks every request of `queries.jsonl` over the tools of
//! `catalogs/*.json` (each tool named `<server>__<tool>`, as the gateway names them) and prints
//! recall@1, recall@5 and MRR, overall and by kind of request, for the search `axp.index`
//! served before (`legacy.rs`), BM25F alone, the embeddings alone, and the hybrid the gateway
//! now serves; then the query latency (the hybrid's, and each half's alone) and the build
//! (registration) cost at 1,000 and 10,000 tools.
//!
//!     search-eval [--split tune|heldout|all] [--misses] [--no-timing] [DIR]
//!     search-eval --query "REQUEST" [--servers a,b] [DIR]    (one request's ranking)
//!
//! Tuning looks at `--split tune` only; the held-out part is for the figures.

#[allow(dead_code)]
mod legacy;
#[allow(dead_code)]
#[path = "../../../gateway/src/catalog/search.rs"]
mod search;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use search::{Doc, Index, Mode};
use serde_json::Value;

struct Query {
    text: String,
    kind: String,
    split: String,
    tools: Vec<String>,
}

#[derive(Default, Clone, Copy)]
struct Score {
    n: usize,
    at1: usize,
    at5: usize,
    rr: f64,
}

impl Score {
    fn add(&mut self, rank: Option<usize>) {
        self.n += 1;
        if let Some(r) = rank {
            self.at1 += usize::from(r == 1);
            self.at5 += usize::from(r <= 5);
            self.rr += 1.0 / r as f64;
        }
    }
    fn cells(&self) -> String {
        if self.n == 0 {
            return format!("{:>6} {:>6} {:>5}", "-", "-", "-");
        }
        let n = self.n as f64;
        format!("{:>5.1}% {:>5.1}% {:>5.2}", 100.0 * self.at1 as f64 / n, 100.0 * self.at5 as f64 / n, self.rr / n)
    }
}

fn load_docs(dir: &Path) -> (Vec<Doc>, usize) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("catalogs"))
        .expect("catalogs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for f in &files {
        let server = f.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        let tools: Vec<Value> = serde_json::from_slice(&std::fs::read(f).expect("read catalog")).expect("catalog JSON");
        for t in tools {
            let name = format!("{server}__{}", t["name"].as_str().unwrap_or_default());
            docs.push(Doc::from_schema(&name, t["description"].as_str().unwrap_or_default(), &t["inputSchema"]));
        }
    }
    (docs, files.len())
}

fn load_queries(dir: &Path) -> Vec<Query> {
    let text = std::fs::read_to_string(dir.join("queries.jsonl")).expect("queries.jsonl");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("query JSON");
            Query {
                text: v["query"].as_str().unwrap_or_default().to_string(),
                kind: v["kind"].as_str().unwrap_or_default().to_string(),
                split: v["split"].as_str().unwrap_or_default().to_string(),
                tools: v["tools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str().map(String::from))
                    .collect(),
            }
        })
        .collect()
}

/// The former search, built as the registry built it (parameter names only).
fn legacy_index(docs: &[Doc]) -> legacy::Bm25 {
    legacy::Bm25::new(
        docs.iter()
            .map(|d| {
                let params: Vec<String> = d.params.iter().map(|(p, _)| p.clone()).collect();
                legacy::Doc::new(&d.name, &d.description, &params)
            })
            .collect(),
    )
}

fn main() {
    let mut split = "all".to_string();
    let mut misses = false;
    let mut timing = true;
    let mut query: Option<String> = None;
    let mut servers: Option<Vec<String>> = None;
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--split" => split = args.next().expect("--split tune|heldout|all"),
            "--misses" => misses = true,
            "--no-timing" => timing = false,
            "--query" => query = args.next(),
            "--servers" => servers = args.next().map(|s| s.split(',').map(|x| format!("{x}__")).collect()),
            _ => dir = PathBuf::from(a),
        }
    }
    let (mut docs, servers_count) = load_docs(&dir);
    if let Some(only) = &servers {
        docs.retain(|d| only.iter().any(|p| d.name.starts_with(p.as_str())));
    }
    if let Some(q) = query {
        // One request, ranked by the hybrid with each tool's evidence (what `axp index --scores`
        // would show).
        let idx = Index::default().rebuilt(docs);
        for (i, h) in idx.search(&q).iter().take(10).enumerate() {
            println!("{:>2}. {:.4}  {}  (bm25f {:.2}, cosine {:.3})", i + 1, h.score, h.name, h.lexical, h.semantic);
        }
        return;
    }
    let queries = load_queries(&dir);
    let known: std::collections::HashSet<&str> = docs.iter().map(|d| d.name.as_str()).collect();
    for q in &queries {
        for t in &q.tools {
            assert!(known.contains(t.as_str()), "query {:?} names an unknown tool {t}", q.text);
        }
    }
    let t0 = Instant::now();
    let model = axp_embed::Model::builtin().expect("the built-in model loads");
    let load = t0.elapsed();
    let mut per: Vec<f64> = queries
        .iter()
        .map(|q| {
            let t = Instant::now();
            std::hint::black_box(model.embed(&q.text));
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    per.sort_by(f64::total_cmp);
    println!(
        "model: {} dimensions, loaded in {:.1} ms; a request embedded in {:.1} µs (median)",
        model.dim(),
        load.as_secs_f64() * 1e3,
        per[per.len() / 2]
    );
    let t0 = Instant::now();
    let hybrid = Index::default().rebuilt(docs.clone());
    let build = t0.elapsed();
    let before = legacy_index(&docs);
    println!(
        "search-eval: {} tools from {servers_count} servers, {} requests ({} tune, {} held out); index built in {:.1} ms",
        docs.len(),
        queries.len(),
        queries.iter().filter(|q| q.split == "tune").count(),
        queries.iter().filter(|q| q.split == "heldout").count(),
        build.as_secs_f64() * 1e3
    );

    let systems = ["before (BM25)", "BM25F", "embeddings", "hybrid"];
    let splits: Vec<&str> = if split == "all" { vec!["tune", "heldout"] } else { vec![split.as_str()] };
    for sp in splits {
        let qs: Vec<&Query> = queries.iter().filter(|q| q.split == sp).collect();
        // system -> kind ("all" too) -> score
        let mut table: Vec<BTreeMap<String, Score>> = vec![BTreeMap::new(); systems.len()];
        for q in &qs {
            for (si, table) in table.iter_mut().enumerate() {
                let ranked: Vec<String> = match si {
                    0 => before.search(&q.text).into_iter().map(|(n, _)| n).collect(),
                    1 => hybrid.search_with(&q.text, Mode::Lexical).into_iter().map(|h| h.name).collect(),
                    2 => hybrid.search_with(&q.text, Mode::Semantic).into_iter().map(|h| h.name).collect(),
                    _ => hybrid.search_with(&q.text, Mode::Hybrid).into_iter().map(|h| h.name).collect(),
                };
                let rank = ranked.iter().position(|n| q.tools.contains(n)).map(|p| p + 1);
                table.entry("all".into()).or_default().add(rank);
                table.entry(q.kind.clone()).or_default().add(rank);
                if misses && si == 3 && rank.is_none_or(|r| r > 5) {
                    println!(
                        "  miss [{sp}] {:?} rank {:?}: want {:?}, got {:?}",
                        q.text,
                        rank,
                        q.tools,
                        &ranked[..ranked.len().min(3)]
                    );
                }
            }
        }
        println!();
        println!("split {sp} ({} requests)            recall@1 recall@5   MRR", qs.len());
        let kinds = ["all", "direct", "paraphrase", "parameter"];
        for kind in kinds {
            let n = table[0].get(kind).map_or(0, |s| s.n);
            println!("  {kind} ({n})");
            for (si, name) in systems.iter().enumerate() {
                let s = table[si].get(kind).copied().unwrap_or_default();
                println!("    {name:<28} {}", s.cells());
            }
        }
    }

    if timing {
        println!();
        for n in [1_000usize, 10_000] {
            scale(&docs, &queries, n);
        }
    }
}

/// Latency of the hybrid search, and the cost of building the index, over `n` tools: the real
/// catalog repeated under other server names with a word of difference in each description, so
/// that every copy is embedded on its own.
fn scale(docs: &[Doc], queries: &[Query], n: usize) {
    let mut big = Vec::with_capacity(n);
    let mut copy = 0;
    while big.len() < n {
        for d in docs {
            if big.len() == n {
                break;
            }
            let mut d = d.clone();
            if copy > 0 {
                d.name = format!("c{copy}{}", d.name);
                d.description = format!("{} (mirror {copy})", d.description);
            }
            big.push(d);
        }
        copy += 1;
    }
    let t0 = Instant::now();
    let idx = Index::default().rebuilt(big.clone());
    let build = t0.elapsed();
    let t1 = Instant::now();
    let again = idx.rebuilt(big);
    let rebuild = t1.elapsed();
    // Each request five times: every timing, and each request's median of five (which leaves
    // out a run that the scheduler preempted on a busy machine).
    let mut lat = Vec::new();
    let mut med = Vec::new();
    for q in queries {
        let mut five = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let hits = again.search(&q.text);
            five.push(t.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(hits);
        }
        lat.extend_from_slice(&five);
        five.sort_by(f64::total_cmp);
        med.push(five[2]);
    }
    // Each half alone, once per request, to show where a query's time goes.
    let halves = [Mode::Lexical, Mode::Semantic].map(|mode| {
        let mut v: Vec<f64> = queries
            .iter()
            .map(|q| {
                let t = Instant::now();
                std::hint::black_box(again.search_with(&q.text, mode));
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    });
    lat.sort_by(f64::total_cmp);
    med.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    println!(
        "{n:>6} tools: query p50 {:.3} ms, p99 {:.3} ms (median of 5 per request); every run: p50 {:.3} ms, p99 {:.3} ms; p50 of BM25F alone {:.3} ms, of embeddings alone {:.3} ms; build {:.0} ms, rebuild unchanged {:.0} ms",
        pct(&med, 0.5),
        pct(&med, 0.99),
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        halves[0],
        halves[1],
        build.as_secs_f64() * 1e3,
        rebuild.as_secs_f64() * 1e3
    );
}
