//! The tidy checks (see the crate's `lib.rs`). Each test walks the source tree from the
//! workspace root and names every offending file, so a failure says exactly what to fix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// Every `.rs` file of the project: the workspace's crates, the fuzz targets, the benches and
/// the plugin ABI, without build output, vendored packages or virtualenvs.
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                let skip = name.starts_with("target")
                    || name.starts_with('.')
                    || matches!(name.as_str(), "node_modules" | "corpus" | "corpus-work" | "artifacts" | "dist");
                if !skip {
                    walk(&p, out);
                }
            } else if name.ends_with(".rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out.sort();
    assert!(out.len() > 100, "the walk found only {} files: is the root right?", out.len());
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).to_string_lossy().into_owned()
}

/// The text of a line with any `//` comment and string literal contents removed (good enough for
/// keyword checks: a `//` inside a string ends the line early, which can only hide code).
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut prev = ' ';
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            if c == '"' && prev != '\\' {
                in_str = false;
                out.push('"');
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
            continue;
        }
        if c == '/' && chars.peek() == Some(&'/') {
            break;
        }
        if c == '"' {
            in_str = true;
        }
        out.push(c);
        prev = c;
    }
    out
}

#[test]
fn every_source_file_opens_with_a_doc_paragraph() {
    let missing: Vec<String> = sources()
        .into_iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            !text.lines().find(|l| !l.trim().is_empty()).is_some_and(|l| l.starts_with("//!"))
        })
        .map(|p| rel(&p))
        .collect();
    assert!(
        missing.is_empty(),
        "files that do not open with a `//!` paragraph saying what they own:\n{}",
        missing.join("\n")
    );
}

/// Where `unsafe` may appear, as `docs/ARCHITECTURE.md` says: the sandbox (namespaces, mounts,
/// seccomp, the exec entry), the native plugin helper (loading a C-ABI library), and the plugin
/// ABI itself (its SDK and examples export C functions).
const UNSAFE_ALLOWED: [&str; 3] = ["sandbox/", "plugin-host/src/native.rs", "plugins/"];

#[test]
fn unsafe_lives_only_in_the_crates_the_map_names() {
    let mut found = Vec::new();
    for p in sources() {
        let r = rel(&p);
        if UNSAFE_ALLOWED.iter().any(|a| r.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let code = code_of(line);
            let words = code.split(|c: char| !(c.is_alphanumeric() || c == '_'));
            if words.into_iter().any(|w| w == "unsafe" || w == "unsafe_code" && code.contains("allow")) {
                found.push(format!("{r}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "`unsafe` outside {UNSAFE_ALLOWED:?}:\n{}", found.join("\n"));
}

/// The layers of the workspace, inward first. A crate may depend only on crates of a lower
/// layer: the pure ones at the bottom, the seams and parsers above them, the runtimes above
/// those, and the binaries at the top: the gateway, and the conformance runner that judges a
/// gateway from outside (neither may depend on the other).
const LAYERS: [&[&str]; 4] = [
    &["axp-protocol", "axp-sandbox", "axp-embed"],
    &[
        "axp-audit",
        "axp-caps",
        "axp-config",
        "axp-egress-policy",
        "axp-lint",
        "axp-store",
        "axp-provider-api",
        "axp-client",
    ],
    &["axp-providers", "axp-egress-proxy", "axp-plugin-host"],
    &["axp-gateway", "axp-conformance"],
];

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

#[test]
fn every_crate_depends_only_on_crates_below_it() {
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(root().join("Cargo.toml")).expect("the root manifest")).expect("toml");
    let members = manifest["workspace"]["members"].as_array().expect("members");
    let mut problems = Vec::new();
    for m in members.iter().filter_map(|m| m.as_str()).filter(|m| *m != "tidy") {
        let text = std::fs::read_to_string(root().join(m).join("Cargo.toml")).expect("a member manifest");
        let crate_manifest: toml::Value = toml::from_str(&text).expect("toml");
        let name = crate_manifest["package"]["name"].as_str().expect("a name").to_string();
        let Some(mine) = layer_of(&name) else {
            problems
                .push(format!("{name} ({m}/) is in no layer of the map: add it to LAYERS and docs/ARCHITECTURE.md"));
            continue;
        };
        let deps = crate_manifest.get("dependencies").and_then(toml::Value::as_table).cloned().unwrap_or_default();
        for dep in deps.keys().filter(|d| d.starts_with("axp-")) {
            match layer_of(dep) {
                Some(theirs) if theirs < mine => {}
                Some(theirs) => problems.push(format!("{name} (layer {mine}) depends on {dep} (layer {theirs})")),
                None => problems.push(format!("{name} depends on {dep}, which is in no layer")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The conformance runner judges any endpoint over the wire, so it may use nothing of ours but
/// the wire: the one JSON-RPC client and the protocol's types. Were it to reach into the
/// gateway's crates, it would check the gateway against itself.
#[test]
fn the_conformance_runner_knows_only_the_wire() {
    let text = std::fs::read_to_string(root().join("conformance/axp/Cargo.toml")).expect("the runner's manifest");
    let manifest: toml::Value = toml::from_str(&text).expect("toml");
    let mut ours = Vec::new();
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        let deps = manifest.get(section).and_then(toml::Value::as_table).cloned().unwrap_or_default();
        ours.extend(deps.keys().filter(|d| d.starts_with("axp-")).cloned());
    }
    ours.sort();
    assert_eq!(ours, ["axp-client", "axp-protocol"], "axp-conformance may depend on axp-client and axp-protocol only");
}

/// The gateway's top-level module of a source file (`router/mcp.rs` → `router`).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let r = file.strip_prefix(src).ok()?;
    let first = r.components().next()?.as_os_str().to_string_lossy().into_owned();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    (!matches!(name.as_str(), "lib" | "main")).then_some(name)
}

#[test]
fn the_gateways_modules_import_one_another_without_a_circle() {
    let src = root().join("gateway/src");
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in sources().into_iter().filter(|p| p.starts_with(&src)) {
        let Some(me) = top_module(&src, &p) else { continue };
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let targets = edges.entry(me.clone()).or_default();
        for line in text.lines() {
            let code = code_of(line);
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != me {
                    targets.insert(name);
                }
            }
        }
    }
    // A depth-first search that reports the first circle it walks into.
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| s == n) {
            let mut circle = stack[at..].to_vec();
            circle.push(n.to_string());
            return Some(circle);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, edges, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in edges.keys() {
        if let Some(circle) = visit(n, &edges, &mut Vec::new(), &mut done) {
            panic!("the gateway's modules import one another in a circle: {}", circle.join(" → "));
        }
    }
}

#[test]
fn no_comment_cites_a_tracker_issue() {
    let mut found = Vec::new();
    for p in sources() {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let Some(at) = line.find("//") else { continue };
            let comment = line[at..].to_ascii_lowercase();
            let cites = comment.match_indices("issue ").any(|(j, _)| {
                comment[j + "issue ".len()..].trim_start_matches('#').starts_with(|c: char| c.is_ascii_digit())
            });
            if cites {
                found.push(format!("{}:{}: {}", rel(&p), i + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "comments that cite an issue number instead of saying why:\n{}", found.join("\n"));
}
