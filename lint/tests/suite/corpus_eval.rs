//! The labelled corpus of `lint/corpus/` (real servers' catalogs, poisoned and honest tools
//! written from published attacks), through the same evaluation `examples/eval.rs` prints:
//! verdicts pinned, nothing timed. The recall and false-error figures asserted here are the
//! measured ones (README), so a rule change that loses ground fails.

use std::path::PathBuf;

use axp_lint::LintConfig;
use axp_lint::eval::{Evaluation, Label, Split, evaluate, records_from_capture, records_from_jsonl};

fn corpus() -> Evaluation {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut records = Vec::new();
    let mut servers: Vec<PathBuf> =
        std::fs::read_dir(dir.join("servers")).unwrap().map(|e| e.unwrap().path()).collect();
    servers.sort();
    for p in servers.iter().filter(|p| p.extension().is_some_and(|e| e == "json")) {
        records.extend(records_from_capture(&std::fs::read_to_string(p).unwrap()).unwrap());
    }
    records.extend(records_from_jsonl(&std::fs::read_to_string(dir.join("written.jsonl")).unwrap()).unwrap());
    evaluate(&records, &LintConfig::default())
}

#[test]
fn no_real_tool_is_refused_and_false_errors_stay_under_one_percent() {
    let e = corpus();
    let clean = e.false_errors(None);
    assert!(clean.n >= 400, "the corpus lost real tools: {}", clean.n);
    let refused: Vec<_> = e.outcomes.iter().filter(|o| o.label == Label::Clean && !o.refused.is_empty()).collect();
    assert!(refused.is_empty(), "real tools refused:\n{}", e.to_text(true));
    assert!(clean.rate() <= 0.01, "false errors on real tools: {clean:?}\n{}", e.to_text(true));
    let honest = e.tally(|o| o.label == Label::Honest);
    assert_eq!(honest.flagged, 0, "honest written tools flagged:\n{}", e.to_text(true));
}

#[test]
fn the_honest_tools_the_issue_named_are_published() {
    let e = corpus();
    for id in [
        "chrome-devtools/list_console_messages",
        "circleci/get_build_failure_logs",
        "circleci/download_usage_api_data",
        "circleci/find_underused_resource_classes",
        "desktop-commander/start_search",
    ] {
        let o = e.outcomes.iter().find(|o| o.id == id).unwrap_or_else(|| panic!("{id} is not in the corpus"));
        assert!(o.refused.is_empty() && o.errors.is_empty(), "{id}: {:#?}", o.errors);
    }
}

#[test]
fn poisoned_tools_are_errors_at_the_measured_recall() {
    let e = corpus();
    let tune = e.recall(Split::Tune);
    let held = e.recall(Split::Heldout);
    assert!(tune.n >= 80 && held.n >= 60, "{tune:?} {held:?}");
    // Every flagged poisoned tool is also refused at registration under the default modes.
    assert!(e.outcomes.iter().filter(|o| o.label == Label::Poisoned && o.flagged()).all(|o| !o.refused.is_empty()));
    assert!(tune.rate() >= TUNE_FLOOR, "tune recall {:.3} < {TUNE_FLOOR}\n{}", tune.rate(), e.to_text(false));
    assert!(held.rate() >= HELDOUT_FLOOR, "held-out recall {:.3} < {HELDOUT_FLOOR}", held.rate());
}

/// The measured figures (see the README); raise them as the rules improve.
const TUNE_FLOOR: f64 = 0.99;
const HELDOUT_FLOOR: f64 = 0.91;
