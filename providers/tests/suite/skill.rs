//! The skill provider against real skill folders: the committed fixtures
//! (`fixtures/skills/`: a Python skill, a shell skill, an Anthropic-style `csv-summary`, one with
//! broken YAML and one whose name does not match its folder) and folders written into tempdirs.
//! Scripts run as real processes through `DirectLauncher`; reloads use the real file watcher.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axp_protocol::ToolCall;
use axp_providers::{
    CancellationToken, DirectLauncher, ProcessPolicy, Provider, ProviderError, ProviderEvent, ProviderId,
    SkillDirsConfig, SkillProvider,
};
use serde_json::{Value, json};

use super::support::{Recorder, args, base_env, fixtures, wait_event};

fn skills_fixture() -> PathBuf {
    fixtures().join("skills")
}

fn provider(dirs: &[&Path]) -> SkillProvider {
    provider_with_env(dirs, base_env())
}

fn provider_with_env(dirs: &[&Path], env: std::collections::BTreeMap<String, String>) -> SkillProvider {
    SkillProvider::new(SkillDirsConfig {
        id: ProviderId("skill".into()),
        dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
        launcher: Arc::new(DirectLauncher),
        timeout: Duration::from_secs(20),
        env,
        policy: ProcessPolicy::default(),
    })
}

fn call(tool: &str, a: Value) -> ToolCall {
    ToolCall { tool: tool.into(), arguments: args(a), meta: None }
}

async fn run(p: &SkillProvider, c: ToolCall) -> (Result<axp_protocol::ToolOutput, ProviderError>, Arc<Recorder>) {
    let rec = Recorder::new();
    let out = p.call(c, rec.clone(), CancellationToken::new()).await;
    (out, rec)
}

async fn names(p: &SkillProvider) -> Vec<String> {
    p.tools().await.unwrap().into_iter().map(|t| t.name).collect()
}

/// Writes `SKILL.md` (and nothing else) into `root/folder`.
fn write_skill(root: &Path, folder: &str, text: &str) -> PathBuf {
    let dir = root.join(folder);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SKILL.md"), text).unwrap();
    dir
}

fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n\nSteps for {name}.\n")
}

fn problem_mentioning<'a>(problems: &'a [String], needle: &str) -> &'a str {
    problems
        .iter()
        .find(|p| p.contains(needle))
        .unwrap_or_else(|| panic!("no problem mentions {needle:?}; problems: {problems:#?}"))
}

#[tokio::test]
async fn fixture_folder_lists_the_good_skills_and_names_the_bad_ones() {
    let root = skills_fixture();
    let p = provider(&[&root]);
    assert_eq!(names(&p).await, ["csv-summary", "py-greeter", "sh-counter"]);

    let tools = p.tools().await.unwrap();
    let greeter = tools.iter().find(|t| t.name == "py-greeter").unwrap();
    assert!(greeter.description.starts_with("Greets people by name"));
    let schema = &greeter.input_schema;
    assert_eq!(schema["properties"]["script"]["enum"], json!(["scripts/greet.py"]));
    assert_eq!(schema["properties"]["args"]["items"]["type"], "string");
    assert_eq!(schema["required"], json!([]));
    assert_eq!(schema["additionalProperties"], false);

    let problems = p.problems();
    let yaml = problem_mentioning(&problems, "broken-yaml/SKILL.md");
    assert!(yaml.starts_with("error: "), "{yaml}");
    assert!(yaml.contains("invalid YAML in the front matter"), "{yaml}");
    assert!(yaml.contains(": line "), "the YAML error carries its line: {yaml}");
    assert!(yaml.ends_with("the skill is skipped"), "{yaml}");
    let mismatch = problem_mentioning(&problems, "wrong-name/SKILL.md");
    assert!(mismatch.contains("`right-name` does not match the folder `wrong-name`"), "{mismatch}");
    assert_eq!(problems.len(), 2, "{problems:#?}");

    let info = p.skill("sh-counter").unwrap();
    assert_eq!(info.allowed_tools, ["Bash(sh:*)", "Read"]);
    let greeter = p.skill("py-greeter").unwrap();
    assert_eq!(greeter.license.as_deref(), Some("Apache-2.0"));
    assert_eq!(greeter.metadata["version"], "1.0");
    assert_eq!(greeter.metadata["author"], "axp-tests");
}

#[tokio::test]
async fn each_skill_is_also_a_prompt_of_its_procedure() {
    let p = provider(&[&skills_fixture()]);
    let prompts = p.prompts().await.unwrap();
    let names: Vec<&str> = prompts.iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["csv-summary", "py-greeter", "sh-counter"]);
    let got = p.get_prompt("csv-summary", serde_json::Map::new(), None).await.unwrap();
    let text = got["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.starts_with("# CSV summary"), "{got}");
    assert!(matches!(p.get_prompt("nope", serde_json::Map::new(), None).await, Err(ProviderError::UnknownPrompt(_))));
    // Skills offer no resources: an empty list, not an error.
    assert_eq!(p.resources().await.unwrap(), Vec::<Value>::new());
}

#[tokio::test]
async fn a_configured_skill_folder_is_one_skill() {
    let p = provider(&[&skills_fixture().join("py-greeter")]);
    assert_eq!(names(&p).await, ["py-greeter"]);
    assert!(p.problems().is_empty(), "{:?}", p.problems());
}

#[tokio::test]
async fn describe_returns_instructions_and_bundled_files() {
    let p = provider(&[&skills_fixture()]);
    let instructions = p.instructions("csv-summary").unwrap();
    assert!(instructions.starts_with("# CSV summary"), "{instructions}");
    assert!(instructions.contains("## Quick start"));
    assert!(!instructions.contains("description:"), "front matter stripped");
    assert_eq!(p.files("csv-summary"), ["LICENSE.txt", "assets/example.csv", "reference.md", "scripts/summarize.py"]);
    assert!(p.instructions("nope").is_none());
    assert!(p.files("nope").is_empty());

    // A call without `script` returns the same, as text for the agent.
    let (out, rec) = run(&p, call("csv-summary", json!({}))).await;
    let out = out.unwrap();
    assert!(!out.is_error);
    assert!(rec.events().is_empty(), "nothing ran");
    let text = out.joined_text();
    assert!(text.starts_with("# Skill `csv-summary`"), "{text}");
    assert!(text.contains("## Quick start"));
    assert!(text.contains(r#"- scripts/summarize.py (script: call with {"script": "scripts/summarize.py""#), "{text}");
    assert!(text.contains(r#"- reference.md (read with {"read": "reference.md"})"#), "{text}");
    let sc = out.structured_content.unwrap();
    assert_eq!(sc["scripts"], json!(["scripts/summarize.py"]));

    // Reference files are read through `read`.
    let (out, _) = run(&p, call("csv-summary", json!({"read": "reference.md"}))).await;
    let text = out.unwrap().joined_text();
    assert!(text.starts_with("# csv-summary reference"), "{text}");

    let (out, _) = run(&p, call("nope", json!({}))).await;
    assert!(matches!(out, Err(ProviderError::UnknownTool(t)) if t == "nope"));
}

#[tokio::test]
async fn python_script_streams_output_and_reports_exit_codes() {
    let p = provider(&[&skills_fixture()]);
    let (out, rec) =
        run(&p, call("py-greeter", json!({"script": "scripts/greet.py", "args": ["Ada", "Linus", "--lang", "fr"]})))
            .await;
    let out = out.unwrap();
    assert!(!out.is_error, "{out:?}");
    assert_eq!(rec.stdout(), "Bonjour, Ada!\nBonjour, Linus!\n");
    assert_eq!(rec.stderr(), "greeted 2\n");
    let sc = out.structured_content.as_ref().unwrap();
    assert_eq!(sc["exit_code"], 0);
    assert_eq!(sc["script"], "scripts/greet.py");
    assert_eq!(out.content[0]["text"], "Bonjour, Ada!\nBonjour, Linus!\n");
    assert_eq!(out.content[1]["text"], "stderr:\ngreeted 2\n");

    let (out, rec) =
        run(&p, call("py-greeter", json!({"script": "scripts/greet.py", "args": ["Grace", "--fail", "3"]}))).await;
    let out = out.unwrap();
    assert!(out.is_error);
    assert_eq!(rec.stdout(), "Hello, Grace!\n");
    assert_eq!(out.structured_content.as_ref().unwrap()["exit_code"], 3);
    assert!(out.joined_text().contains("[script failed: exit code 3]"));
}

#[tokio::test]
async fn scripts_run_in_the_session_workspace_when_given_else_the_skill_folder() {
    let p = provider(&[&skills_fixture()]);
    let skill_dir = std::fs::canonicalize(skills_fixture().join("py-greeter")).unwrap();
    let (out, rec) = run(&p, call("py-greeter", json!({"script": "scripts/greet.py", "args": ["--pwd"]}))).await;
    assert!(!out.unwrap().is_error);
    assert_eq!(rec.stdout(), format!("cwd={}\n", skill_dir.display()));

    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let mut c = call("py-greeter", json!({"script": "scripts/greet.py", "args": ["--pwd"]}));
    c.meta = Some(json!({"job_id": "j1", "cwd": ws_path}));
    let (out, rec) = run(&p, c).await;
    assert!(!out.unwrap().is_error);
    assert_eq!(rec.stdout(), format!("cwd={}\n", ws_path.display()));
    // Nothing was written next to the script (no __pycache__, nothing in the workspace).
    assert_eq!(std::fs::read_dir(ws.path()).unwrap().count(), 0);
    assert_eq!(p.files("py-greeter"), ["scripts/greet.py"]);
}

#[tokio::test]
async fn shell_script_gets_arguments_verbatim_and_reports_exit_codes() {
    let p = provider(&[&skills_fixture()]);
    let (out, rec) =
        run(&p, call("sh-counter", json!({"script": "scripts/count.sh", "args": ["a b", "$(id)", "--x;ls"]}))).await;
    let out = out.unwrap();
    assert!(!out.is_error, "{out:?}");
    let skill_dir = std::fs::canonicalize(skills_fixture().join("sh-counter")).unwrap();
    assert_eq!(rec.stdout(), format!("a b\n$(id)\n--x;ls\ncount=3\nskill_dir={}\n", skill_dir.display()));

    let (out, rec) = run(&p, call("sh-counter", json!({"script": "scripts/count.sh"}))).await;
    let out = out.unwrap();
    assert!(out.is_error);
    assert_eq!(rec.stderr(), "nothing to count\n");
    assert_eq!(out.structured_content.unwrap()["exit_code"], 4);
}

#[tokio::test]
async fn anthropic_style_skill_loads_and_runs_on_workspace_data() {
    // Copy the skill the way a user drops a folder from a public skills collection into their
    // skills directory.
    let skills = tempfile::tempdir().unwrap();
    let src = skills_fixture().join("csv-summary");
    let dst = skills.path().join("csv-summary");
    for rel in ["SKILL.md", "LICENSE.txt", "reference.md", "scripts/summarize.py", "assets/example.csv"] {
        let to = dst.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(rel), &to).unwrap();
    }
    let p = provider(&[skills.path()]);
    assert_eq!(names(&p).await, ["csv-summary"]);
    assert!(p.problems().is_empty(), "{:?}", p.problems());
    let tool = &p.tools().await.unwrap()[0];
    assert!(tool.description.contains("Summarizes CSV files"));

    // The bundled example, relative to the skill folder (the default cwd).
    let (out, rec) =
        run(&p, call("csv-summary", json!({"script": "scripts/summarize.py", "args": ["assets/example.csv"]}))).await;
    assert!(!out.unwrap().is_error);
    let stdout = rec.stdout();
    assert!(stdout.contains("5 rows, 5 columns"), "{stdout}");
    assert!(stdout.contains("| units | integer | 1 | min 3, max 20, mean 10.5 |"), "{stdout}");
    assert!(stdout.contains("| returned | boolean | 0 | no (4), yes (1) |"), "{stdout}");

    // The agent's own file in its workspace, as JSON.
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("data.tsv"), "city\ttemp\nOslo\t-3.5\nLima\t19\n").unwrap();
    let mut c = call("csv-summary", json!({"script": "scripts/summarize.py", "args": ["data.tsv", "--json"]}));
    c.meta = Some(json!({"cwd": ws.path()}));
    let (out, rec) = run(&p, c).await;
    assert!(!out.unwrap().is_error);
    let summary: Value = serde_json::from_str(&rec.stdout()).unwrap();
    assert_eq!(summary["rows"], 2);
    assert_eq!(summary["delimiter"], "\t");
    assert_eq!(summary["columns"][1]["type"], "number");
    assert_eq!(summary["columns"][1]["min"], -3.5);

    // A missing input file is the script's own error, with its exit code.
    let (out, rec) =
        run(&p, call("csv-summary", json!({"script": "scripts/summarize.py", "args": ["missing.csv"]}))).await;
    let out = out.unwrap();
    assert!(out.is_error);
    assert_eq!(out.structured_content.unwrap()["exit_code"], 2);
    assert!(rec.stderr().contains("missing.csv: no such file"));
}

/// A skill whose scripts write a marker file, a file outside it, and a link to that file.
struct EscapeRig {
    _root: tempfile::TempDir,
    skill: PathBuf,
    marker: PathBuf,
    outside: PathBuf,
    provider: SkillProvider,
}

fn escape_rig() -> EscapeRig {
    let root = tempfile::tempdir().unwrap();
    let skills = root.path().join("skills");
    let skill = write_skill(&skills, "esc", &skill_md("esc", "Writes a marker file."));
    std::fs::create_dir_all(skill.join("scripts")).unwrap();
    let marker = root.path().join("marker");
    let outside = root.path().join("outside.sh");
    std::fs::write(&outside, "echo ran >> \"$MARK\"\n").unwrap();
    std::fs::write(skill.join("scripts/ok.sh"), "echo ok >> \"$MARK\"\n").unwrap();
    std::fs::write(skill.join("scripts/other.sh"), "echo other >> \"$MARK\"\n").unwrap();
    std::fs::write(skill.join("notes.md"), "notes\n").unwrap();
    std::os::unix::fs::symlink(&outside, skill.join("scripts/link.sh")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", skill.join("passwd.md")).unwrap();
    let mut env = base_env();
    env.insert("MARK".into(), marker.to_str().unwrap().into());
    let provider = provider_with_env(&[&skills], env);
    EscapeRig { _root: root, skill, marker, outside, provider }
}

#[tokio::test]
async fn script_paths_that_leave_the_folder_are_refused_before_anything_runs() {
    let rig = escape_rig();
    let p = &rig.provider;
    // Links that leave the folder are not offered, and say so.
    assert_eq!(p.skill("esc").unwrap().scripts, ["scripts/ok.sh", "scripts/other.sh"]);
    assert_eq!(p.files("esc"), ["notes.md", "scripts/ok.sh", "scripts/other.sh"]);
    let problems = p.problems();
    let link = problem_mentioning(&problems, "scripts/link.sh");
    assert!(link.starts_with("warning: "), "{link}");
    assert!(link.contains(&format!("symbolic link to {}", rig.outside.display())), "{link}");
    assert!(link.contains("outside the skill folder"), "{link}");
    problem_mentioning(&problems, "passwd.md");

    let refused: &[(&str, &str)] = &[
        ("../../etc/passwd", "may not contain `..`"),
        ("/etc/passwd", "never absolute"),
        (rig.outside.to_str().unwrap(), "never absolute"),
        ("scripts/../scripts/ok.sh", "may not contain `..`"),
        ("./scripts/ok.sh", "may not contain `..` or `.`"),
        ("scripts/link.sh", "not one of skill `esc`'s bundled scripts"),
        ("passwd.md", "not one of skill `esc`'s bundled scripts"),
        ("SKILL.md", "not one of skill `esc`'s bundled scripts"),
        ("scripts/missing.sh", "not one of skill `esc`'s bundled scripts"),
        ("notes.md", "a bundled file but not a script"),
        ("", "the path is empty"),
    ];
    for (script, why) in refused {
        let (out, rec) = run(p, call("esc", json!({"script": script, "args": ["x"]}))).await;
        match out {
            Err(ProviderError::InvalidArguments(m)) => {
                assert!(m.contains(&format!("script `{script}` is refused")), "{m}");
                assert!(m.contains(why), "{script}: {m}");
            }
            other => panic!("{script} should be refused, got {other:?}"),
        }
        assert!(rec.events().is_empty());
    }
    for file in ["../outside.sh", "/etc/passwd", "passwd.md", "scripts/link.sh"] {
        let (out, _) = run(p, call("esc", json!({"read": file}))).await;
        assert!(
            matches!(&out, Err(ProviderError::InvalidArguments(m)) if m.contains(&format!("file `{file}` is refused"))),
            "{file}: {out:?}"
        );
    }
    assert!(!rig.marker.exists(), "a refused script ran");

    // A listed script swapped for a link after loading is caught when called.
    let other = rig.skill.join("scripts/other.sh");
    std::fs::remove_file(&other).unwrap();
    std::os::unix::fs::symlink(&rig.outside, &other).unwrap();
    let (out, _) = run(p, call("esc", json!({"script": "scripts/other.sh"}))).await;
    match out {
        Err(ProviderError::InvalidArguments(m)) => {
            assert!(m.contains("outside the skill folder") || m.contains("not one of"), "{m}")
        }
        other => panic!("the swapped script should be refused, got {other:?}"),
    }
    assert!(!rig.marker.exists(), "the swapped script ran");

    // The control: a bundled script does run and does write the marker.
    let (out, _) = run(p, call("esc", json!({"script": "scripts/ok.sh"}))).await;
    assert!(!out.unwrap().is_error);
    assert_eq!(std::fs::read_to_string(&rig.marker).unwrap(), "ok\n");
}

#[tokio::test]
async fn malformed_arguments_are_refused() {
    let p = provider(&[&skills_fixture()]);
    let cases = [
        (json!({"script": 3}), "`script` must be a string"),
        (json!({"script": "scripts/count.sh", "args": "a b"}), "`args` must be an array of strings"),
        (json!({"script": "scripts/count.sh", "args": [1]}), "`args` must be an array of strings"),
        (json!({"script": "scripts/count.sh", "args": ["a\u{0}b"]}), "NUL byte"),
        (json!({"args": ["x"]}), "`args` needs a `script`"),
        (json!({"command": "id"}), "unknown argument `command`"),
        (json!({"script": "scripts/count.sh", "read": "x"}), "not both"),
    ];
    for (a, why) in cases {
        let (out, rec) = run(&p, call("sh-counter", a.clone())).await;
        assert!(matches!(&out, Err(ProviderError::InvalidArguments(m)) if m.contains(why)), "{a}: {out:?}");
        assert!(rec.events().is_empty());
    }
}

#[tokio::test]
async fn front_matter_problems_name_the_file_and_skip_only_that_skill() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let long = "d".repeat(1025);
    let cases: Vec<(&str, String, &str)> = vec![
        ("no-front", "# Just markdown\n".into(), "no YAML front matter"),
        ("unclosed", "---\nname: unclosed\ndescription: x\n".into(), "never closed"),
        ("no-name", "---\ndescription: Has no name.\n---\nbody\n".into(), "`name` is missing"),
        ("no-desc", "---\nname: no-desc\n---\nbody\n".into(), "`description` is missing"),
        ("empty-desc", "---\nname: empty-desc\ndescription: \"  \"\n---\n".into(), "`description` is missing"),
        (
            "bad-indent",
            "---\nname: bad-indent\ndescription: ok\nmetadata:\n  a: one\n b: two\n---\n".into(),
            "invalid YAML in the front matter",
        ),
        ("Bad_Name", skill_md("Bad_Name", "Upper case and underscore."), "only lowercase letters, digits and hyphens"),
        ("dash--dash", skill_md("dash--dash", "Doubled hyphen."), "two hyphens in a row"),
        ("long-desc", skill_md("long-desc", &long), "`description` has 1025 characters, more than the 1024 allowed"),
        ("list-name", "---\nname: [a, b]\ndescription: x\n---\n".into(), "`name` must be a string"),
        (
            "bad-meta",
            "---\nname: bad-meta\ndescription: x\nmetadata: [1]\n---\n".into(),
            "`metadata` must be a mapping",
        ),
        (
            "nested-meta",
            "---\nname: nested-meta\ndescription: x\nmetadata:\n  a: {b: c}\n---\n".into(),
            "`metadata.a` must be a string",
        ),
        ("dup-key", "---\nname: dup-key\nname: dup-key\ndescription: x\n---\n".into(), "invalid YAML"),
        ("list-doc", "---\n- a\n- b\n---\n".into(), "must be a mapping of keys"),
    ];
    for (folder, text, _) in &cases {
        write_skill(r, folder, text);
    }
    write_skill(r, "good", &skill_md("good", "Loads fine."));
    write_skill(r, "extra-key", "---\nname: extra-key\ndescription: Loads with a warning.\nversion: 2\n---\n");
    // A folder without SKILL.md and a hidden folder are not skills at all.
    std::fs::create_dir_all(r.join("not-a-skill")).unwrap();
    write_skill(r, ".hidden", &skill_md(".hidden", "Never looked at."));

    let p = provider(&[r]);
    assert_eq!(names(&p).await, ["extra-key", "good"]);
    let problems = p.problems();
    for (folder, _, why) in &cases {
        let path = r.join(folder).join("SKILL.md");
        let found = problem_mentioning(&problems, &format!("{}:", path.display()));
        assert!(found.contains(why), "{folder}: {found}");
        assert!(found.starts_with("error: ") && found.ends_with("the skill is skipped"), "{found}");
    }
    let warning = problem_mentioning(&problems, "extra-key");
    assert!(warning.starts_with("warning: "), "{warning}");
    assert!(warning.contains("unknown front-matter key `version` is ignored"), "{warning}");
    assert_eq!(problems.len(), cases.len() + 1, "{problems:#?}");

    // The YAML error points at the offending line of the file (line 6: ` b: two`).
    let bad = problem_mentioning(&problems, "bad-indent");
    assert!(bad.contains("SKILL.md: line 6"), "{bad}");
}

#[tokio::test]
async fn two_skills_with_one_name_keep_the_first_and_name_both_paths() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    write_skill(a.path(), "same", &skill_md("same", "The first one."));
    write_skill(b.path(), "same", &skill_md("same", "The second one."));
    let p = provider(&[a.path(), b.path()]);
    let tools = p.tools().await.unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].description, "The first one.");
    let problems = p.problems();
    let dup = problem_mentioning(&problems, "two skills are named `same`");
    let first = std::fs::canonicalize(a.path().join("same/SKILL.md")).unwrap();
    let second = std::fs::canonicalize(b.path().join("same/SKILL.md")).unwrap();
    assert!(dup.contains(&first.display().to_string()), "{dup}");
    assert!(dup.contains(&second.display().to_string()), "{dup}");
}

#[tokio::test]
async fn missing_and_wrong_directories_are_reported() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let missing = root.path().join("missing");
    let p = provider(&[&missing, &file, &skills_fixture().join("sh-counter")]);
    assert_eq!(names(&p).await, ["sh-counter"]);
    let problems = p.problems();
    problem_mentioning(&problems, &format!("{}: cannot read", missing.display()));
    problem_mentioning(&problems, &format!("{}: not a directory", file.display()));
}

#[tokio::test]
async fn scripts_run_by_extension_shebang_or_mode() {
    let root = tempfile::tempdir().unwrap();
    let skill = write_skill(root.path(), "runners", &skill_md("runners", "Runs scripts of every kind."));
    let s = skill.join("scripts");
    std::fs::create_dir_all(&s).unwrap();
    std::fs::write(s.join("hello.js"), "console.log('js', process.argv.slice(2).join(','))\n").unwrap();
    std::fs::write(s.join("hello.bash"), "echo \"bash ${BASH_VERSION%%.*} $1\"\n").unwrap();
    // No extension, not executable: run by its #! line.
    std::fs::write(s.join("shebang"), "#!/bin/sh\necho \"shebang $1\"\n").unwrap();
    // No extension, no #!, executable: run directly.
    std::fs::copy("/bin/echo", s.join("direct")).unwrap();
    std::fs::set_permissions(s.join("direct"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Neither: a data file, not a script.
    std::fs::write(s.join("data.txt"), "plain\n").unwrap();

    let p = provider(&[root.path()]);
    let info = p.skill("runners").unwrap();
    assert_eq!(info.scripts, ["scripts/direct", "scripts/hello.bash", "scripts/hello.js", "scripts/shebang"]);
    for (script, want) in
        [("scripts/hello.js", "js a\n"), ("scripts/shebang", "shebang a\n"), ("scripts/direct", "a\n")]
    {
        let (out, rec) = run(&p, call("runners", json!({"script": script, "args": ["a"]}))).await;
        assert!(!out.unwrap().is_error, "{script}");
        assert_eq!(rec.stdout(), want, "{script}");
    }
    let (out, rec) = run(&p, call("runners", json!({"script": "scripts/hello.bash", "args": ["a"]}))).await;
    assert!(!out.unwrap().is_error);
    assert!(rec.stdout().starts_with("bash ") && rec.stdout().ends_with(" a\n"), "{}", rec.stdout());
}

#[tokio::test]
async fn a_slow_script_is_stopped_by_its_timeout_and_by_cancel() {
    let root = tempfile::tempdir().unwrap();
    let skill = write_skill(root.path(), "slow", &skill_md("slow", "Sleeps."));
    std::fs::create_dir_all(skill.join("scripts")).unwrap();
    std::fs::write(skill.join("scripts/sleep.sh"), "echo started\nsleep 30\n").unwrap();
    let p = provider(&[root.path()]);

    let mut c = call("slow", json!({"script": "scripts/sleep.sh"}));
    c.meta = Some(json!({"timeout_ms": 400}));
    let start = Instant::now();
    let (out, rec) = run(&p, c).await;
    assert!(matches!(out, Err(ProviderError::Timeout { ref tool, .. }) if tool == "slow"), "{out:?}");
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(rec.stdout(), "started\n");

    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c2.cancel();
    });
    let start = Instant::now();
    let out = p.call(call("slow", json!({"script": "scripts/sleep.sh"})), Recorder::new(), cancel).await;
    assert!(matches!(out, Err(ProviderError::Cancelled)), "{out:?}");
    assert!(start.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn changes_on_disk_reload_the_skills_and_send_tools_changed() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let live = write_skill(r, "live", &skill_md("live", "First description."));
    let p = provider(&[r]);
    assert_eq!(p.watch_kind(), "native");
    let mut rx = p.events().unwrap();
    let within = Duration::from_secs(5);
    let is_changed = |e: &ProviderEvent| *e == ProviderEvent::ToolsChanged;

    // Edit the description.
    std::fs::write(live.join("SKILL.md"), skill_md("live", "Second description.")).unwrap();
    wait_event(&mut rx, within, is_changed).await;
    assert_eq!(p.tools().await.unwrap()[0].description, "Second description.");

    // Add a script: the schema offers it.
    std::fs::create_dir_all(live.join("scripts")).unwrap();
    std::fs::write(live.join("scripts/go.sh"), "echo go\n").unwrap();
    wait_event(&mut rx, within, is_changed).await;
    let schema = p.tools().await.unwrap()[0].input_schema.clone();
    assert_eq!(schema["properties"]["script"]["enum"], json!(["scripts/go.sh"]));

    // Add a skill folder.
    write_skill(r, "added", &skill_md("added", "Appeared later."));
    wait_event(&mut rx, within, is_changed).await;
    assert_eq!(names(&p).await, ["added", "live"]);

    // Break one: it disappears with a problem, the other stays.
    std::fs::write(live.join("SKILL.md"), "---\nname: live\n---\n").unwrap();
    wait_event(&mut rx, within, is_changed).await;
    assert_eq!(names(&p).await, ["added"]);
    problem_mentioning(&p.problems(), "`description` is missing");

    // Remove a folder.
    std::fs::remove_dir_all(r.join("added")).unwrap();
    wait_event(&mut rx, within, is_changed).await;
    assert!(names(&p).await.is_empty());

    // Reading files (as a script run does) is not a change.
    std::fs::write(live.join("SKILL.md"), skill_md("live", "Back.")).unwrap();
    wait_event(&mut rx, within, is_changed).await;
    // Each skill is a prompt too: the prompt list changed with it. The watcher sends that right
    // after `ToolsChanged`, so it may not be in the channel yet when that one is received: wait
    // for the next event rather than expect it already there.
    let next = tokio::time::timeout(within, rx.recv()).await.ok().and_then(Result::ok);
    assert_eq!(next, Some(ProviderEvent::PromptsChanged));
    let (out, _) = run(&p, call("live", json!({"script": "scripts/go.sh"}))).await;
    assert!(!out.unwrap().is_error);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(rx.try_recv().is_err(), "a read or a run is not a change");

    // After shutdown nothing is watched any more.
    p.shutdown().await.unwrap();
    std::fs::write(live.join("SKILL.md"), skill_md("live", "After shutdown.")).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(rx.try_recv().is_err());
    assert_eq!(p.tools().await.unwrap()[0].description, "Back.");
    // A manual reload still works.
    assert!(p.reload());
    assert_eq!(p.tools().await.unwrap()[0].description, "After shutdown.");
}

#[tokio::test]
async fn the_polling_watcher_notices_changes_too() {
    let root = tempfile::tempdir().unwrap();
    let live = write_skill(root.path(), "polled", &skill_md("polled", "Before."));
    let p = SkillProvider::new_polling(SkillDirsConfig {
        id: ProviderId("skill".into()),
        dirs: vec![root.path().to_path_buf()],
        launcher: Arc::new(DirectLauncher),
        timeout: Duration::from_secs(5),
        env: base_env(),
        policy: ProcessPolicy::default(),
    });
    assert_eq!(p.watch_kind(), "poll");
    let mut rx = p.events().unwrap();
    // Within the same second as the first scan: the poller must compare contents, not only
    // (whole-second) modification times.
    std::fs::write(live.join("SKILL.md"), skill_md("polled", "After, a longer text.")).unwrap();
    wait_event(&mut rx, Duration::from_secs(5), |e| *e == ProviderEvent::ToolsChanged).await;
    assert_eq!(p.tools().await.unwrap()[0].description, "After, a longer text.");
}
