//! Attacks the lint crate (`axp-lint`) with arbitrary tool JSON, the way both of its callers
//! hand it a provider's list: bytes are parsed as JSON, turned into a [`Catalog`] by
//! `Catalog::from_json` (a `tools/list` result, a bare array, a JSON-RPC response or a fleet of
//! providers), then linted by `lint` (what `axp lint` runs, rendered as text, JSON and SARIF)
//! and by `lint_tools_in` plus `Verdict::decide` (what the gateway runs at registration).
//! `fix_tools_json` (`axp lint --fix`) and the lockfile (`pin_all`, `check_drift`,
//! `pinned_spec`, its TOML form) get the same input. Invariants checked: every finding names a
//! known rule, a provider and tool of the catalog and a JSON pointer (empty or starting with
//! `/`); the JSON report counts what the report holds; `--fix` keeps every tool and names a rule
//! for each fix; a catalog pinned into a lockfile shows no drift against itself, the lockfile
//! survives its TOML form, and the spec the gateway would serve from a pin hashes to that pin.

#![no_main]

use std::collections::BTreeSet;

use axp_lint::drift::tool_hash;
use axp_lint::registration::lint_tools_in;
use axp_lint::{Catalog, CatalogMemo, Finding, LintConfig, Lockfile, Verdict, check_drift, fix_tools_json, lint};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let Ok(catalog) = Catalog::from_json(&value, "fuzz") else {
        return;
    };
    let config = LintConfig::default();

    // `axp lint`: the whole catalog, rendered every way.
    let report = lint(&catalog, &config);
    for f in &report.findings {
        check_finding(&catalog, f);
    }
    let json = report.to_json();
    assert_eq!(json["findings"].as_array().map(Vec::len), Some(report.findings.len()));
    let text = String::from_utf8_lossy(data);
    let sarif = report.to_sarif("tools.json", Some(&text));
    assert_eq!(sarif["runs"][0]["results"].as_array().map(Vec::len), Some(report.findings.len()));
    let _ = report.to_text();

    // Registration: each provider's list against the others, then publish-or-refuse.
    let lock = Lockfile::default();
    let mut memo = CatalogMemo::default();
    for (provider, tools) in &catalog.providers {
        let mut others = catalog.clone();
        others.providers.remove(provider);
        let per_tool = lint_tools_in(provider, tools, &config, &lock, &others, &mut memo);
        assert_eq!(per_tool.len(), tools.len(), "one list of findings per tool");
        for (tool, findings) in tools.iter().zip(per_tool) {
            for f in &findings {
                check_finding(&catalog, f);
                assert_eq!((f.provider.as_str(), f.tool.as_str()), (provider.as_str(), tool.name.as_str()));
            }
            let verdict = Verdict::decide(findings, &config);
            assert_eq!(verdict.is_publish(), verdict.reasons_text().is_empty());
        }
    }

    // `--fix` keeps every tool, in order, and says which rule each fix answers.
    if let Ok((fixed, applied)) = fix_tools_json(&value) {
        let again = Catalog::from_json(&fixed, axp_lint::catalog::DEFAULT_PROVIDER).expect("a fixed catalog parses");
        let before = Catalog::from_json(&value, axp_lint::catalog::DEFAULT_PROVIDER).expect("it parsed before");
        // Names may change (hidden characters are removed from every text, the name included),
        // but no tool is added, dropped or moved to another provider.
        assert_eq!(counts(&again), counts(&before), "--fix changed the tool lists");
        for a in &applied {
            assert!(axp_lint::rule(&a.rule_id).is_some(), "fix for unknown rule {}", a.rule_id);
            assert!(a.pointer.starts_with('/') || a.pointer.is_empty(), "pointer {}", a.pointer);
        }
    }

    // The lockfile: pin everything, then nothing has drifted, and the pin survives TOML.
    let index_names: BTreeSet<String> = catalog.iter().map(|(p, t)| axp_lint::index_name(p, &t.name)).collect();
    if index_names.len() == catalog.len() {
        let mut lock = Lockfile::default();
        lock.pin_all(&catalog);
        let drift = check_drift(&lock, &catalog);
        assert!(drift.is_empty(), "a freshly pinned catalog drifts: {drift:?}");
        let toml = lock.to_toml_string().expect("a lockfile serialises");
        let back = Lockfile::parse(&toml).unwrap_or_else(|e| panic!("lockfile does not re-parse: {e}\n{toml}"));
        assert_eq!(back, lock, "lockfile changed through TOML");
        for (index, pin) in &lock.tools {
            let spec = lock.pinned_spec(index).expect("a pin of a parsed tool rebuilds its spec");
            assert_eq!(tool_hash(&spec), pin.sha256, "the served pinned spec of {index} is not the approved one");
        }
    }
});

/// A finding names a rule, and a provider and tool of the catalog, and points into the tool.
fn check_finding(catalog: &Catalog, f: &Finding) {
    assert!(f.rule().is_some(), "finding with unknown rule {}", f.rule_id);
    let tools = catalog.providers.get(&f.provider).unwrap_or_else(|| panic!("unknown provider {}", f.provider));
    assert!(tools.iter().any(|t| t.name == f.tool), "finding names no tool of {}: {:?}", f.provider, f.tool);
    assert!(f.pointer.is_empty() || f.pointer.starts_with('/'), "pointer {:?}", f.pointer);
    assert!(!f.message.is_empty(), "finding {} without a message", f.rule_id);
}

fn counts(catalog: &Catalog) -> Vec<(&str, usize)> {
    catalog.providers.iter().map(|(p, tools)| (p.as_str(), tools.len())).collect()
}
