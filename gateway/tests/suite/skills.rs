//! Skills (Agent Skills format) mounted with `--skills`: listed and linted like any tool, their
//! instructions on call, their scripts run sandboxed in the session's workspace.

use serde_json::json;

use super::*;

#[tokio::test]
async fn skills_mount_describe_and_run_sandboxed() {
    let skills = repo().join("providers/tests/fixtures/skills");
    let gw = gateway().arg("--skills").arg(skills.to_str().unwrap()).start();
    let mut c = Rpc::new(&gw.url);
    let idx = c.ok("axp.index", json!({"provider": "skill"})).await;
    let names: Vec<&str> = idx["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"skill__py-greeter") && names.contains(&"skill__csv-summary"), "{names:?}");
    assert!(
        !names.iter().any(|n| n.contains("broken") || n.contains("wrong")),
        "malformed skills are skipped: {names:?}"
    );
    let how = c.ok("tools/call", json!({"name": "skill__csv-summary", "arguments": {}})).await;
    assert!(how["content"][0]["text"].as_str().unwrap().contains("scripts/summarize.py"), "{how}");
    // `axp.describe` is where a skill's SKILL.md instructions live, beside its schema.
    let d = c.ok("axp.describe", json!({"name": "skill__csv-summary"})).await;
    let instructions = d["instructions"].as_str().unwrap_or_default();
    assert!(instructions.contains("scripts/summarize.py"), "{d}");
    assert!(d["schema"].is_object(), "{d}");
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let job = s
        .ok("job.start", json!({"tool": "skill__py-greeter", "arguments": {"script": "scripts/greet.py", "args": ["Ada", "--lang", "fr", "--pwd"]}}))
        .await;
    let ev = s.events(job["job_id"].as_str().unwrap(), 0).await;
    let out = stdout_of(&ev);
    assert!(out.contains("Bonjour, Ada!"), "{ev:?}");
    assert!(
        out.contains(&format!("cwd={}", gw.workspace.canonicalize().unwrap().display())),
        "runs in the workspace: {out}"
    );
    let (code, _) =
        s.err("job.start", json!({"tool": "skill__py-greeter", "arguments": {"script": "../../../etc/passwd"}})).await;
    assert_eq!(code, -32602, "a script outside the skill is refused before it runs");
}
