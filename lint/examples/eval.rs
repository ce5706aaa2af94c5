//! Measures the safety rules on the labelled corpus in `lint/corpus/` (see its README):
//! error-level recall per poisoning family on the tune and held-out splits, false errors on
//! the real servers' tools and on the written honest ones, and the real tools the registration
//! verdict refuses. Misses are listed for the tune split only unless `--show-heldout`.
//!
//! `cargo run -p axp-lint --example eval [-- --show-heldout] [--findings=ID] [CORPUS_DIR]`
//! (`--findings=ID`: every finding of the records whose id contains ID).

use std::path::PathBuf;

use axp_lint::LintConfig;
use axp_lint::eval::{evaluate, records_from_capture, records_from_jsonl};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut show_heldout = false;
    let mut show: Option<String> = None;
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for a in std::env::args().skip(1) {
        if a == "--show-heldout" {
            show_heldout = true;
        } else if let Some(id) = a.strip_prefix("--findings=") {
            show = Some(id.to_string());
        } else {
            dir = PathBuf::from(a);
        }
    }
    let mut records = Vec::new();
    let mut servers: Vec<PathBuf> =
        std::fs::read_dir(dir.join("servers"))?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    servers.sort();
    for p in servers.iter().filter(|p| p.extension().is_some_and(|e| e == "json")) {
        records
            .extend(records_from_capture(&std::fs::read_to_string(p)?).map_err(|e| format!("{}: {e}", p.display()))?);
    }
    let written = dir.join("written.jsonl");
    records.extend(
        records_from_jsonl(&std::fs::read_to_string(&written)?).map_err(|e| format!("{}: {e}", written.display()))?,
    );
    let eval = evaluate(&records, &LintConfig::default());
    if let Some(id) = show {
        for o in eval.outcomes.iter().filter(|o| o.id.contains(&id)) {
            if o.split == axp_lint::eval::Split::Heldout && !show_heldout {
                continue;
            }
            println!("{} ({:?}, {:?}):", o.id, o.label, o.family);
            for f in &o.findings {
                println!("  {} {:?} {} {}", f.rule_id, f.severity, f.pointer, f.message);
            }
        }
        return Ok(());
    }
    print!("{}", eval.to_text(show_heldout));
    Ok(())
}
