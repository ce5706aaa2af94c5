//! The denial matrix (as in the a4s design): every method that needs a grant, tried by
//! a session that lacks exactly that grant, gets the right error code naming what is missing —
//! and every capability denial lands in the audit log. Policy methods tried with a session
//! token get `Unauthorized`.

use serde_json::json;

use super::*;

/// Session grants, method, params, expected code, expected `data.missing`.
type Case = (Vec<String>, &'static str, Value, i64, Option<String>);

#[tokio::test]
async fn every_method_without_its_grant_is_denied_and_audited() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let gw = gateway().state(&state).start();
    let ws = gw.workspace.to_string_lossy().into_owned();
    let tools = "tool(files__*)";
    let matrix: Vec<Case> = vec![
        (
            vec!["proc.spawn".into()],
            "axp.describe",
            json!({"name": "files__read_file"}),
            -32002,
            Some("tool(files__read_file)".into()),
        ),
        (
            vec!["proc.spawn".into()],
            "tools/call",
            json!({"name": "files__read_file", "arguments": {"path": "x"}}),
            -32002,
            Some("tool(files__read_file)".into()),
        ),
        (
            vec!["tool(files__list_files)".into()],
            "job.start",
            json!({"tool": "files__run_command", "arguments": {"argv": ["true"]}}),
            -32002,
            Some("tool(files__run_command)".into()),
        ),
        (vec![tools.into()], "job.start", json!({"command": ["true"]}), -32002, Some("proc.spawn".into())),
        (
            vec![tools.into(), "proc.spawn".into()],
            "job.start",
            json!({"command": ["true"], "cwd": "/etc"}),
            -32002,
            None,
        ),
        (
            vec![tools.into()],
            "cap.attenuate",
            json!({"capabilities": ["proc.spawn"]}),
            -32002,
            Some("proc.spawn".into()),
        ),
        (
            vec![tools.into()],
            "cap.attenuate",
            json!({"capabilities": [format!("fs.write({ws})")]}),
            -32002,
            Some(format!("fs.write({ws})")),
        ),
        (vec![tools.into()], "job.approve", json!({"job_id": "j_x"}), -32001, None),
        (vec![tools.into()], "job.deny", json!({"job_id": "j_x"}), -32001, None),
        (vec![tools.into()], "cap.revoke", json!({"token_id": "x"}), -32001, None),
        (vec![tools.into()], "job.pending", json!({}), -32001, None),
    ];
    let mut denials = 0;
    for (grants, method, mut params, code, missing) in matrix {
        let mut s = Rpc::open(&gw.url, json!({"capabilities": grants})).await;
        if method == "cap.attenuate" {
            params["cap_token"] = json!(s.session.clone().unwrap().1);
        }
        let (got, e) = s.err(method, params.clone()).await;
        assert_eq!(got, code, "{method} {params} with {grants:?}: {e}");
        assert_eq!(e["data"]["missing"].as_str().map(str::to_string), missing, "{method}: {e}");
        assert!(!e["data"]["reason"].as_str().unwrap_or("").is_empty(), "every error says why: {e}");
        if code == -32002 {
            denials += 1;
        }
    }
    // The profile is the ceiling of session.open itself.
    let (code, e) = Rpc::new(&gw.url).err("session.open", json!({"capabilities": ["net.connect(example.com)"]})).await;
    assert_eq!((code, e["data"]["missing"].as_str()), (-32002, Some("net.connect(example.com)")));
    denials += 1;
    // fs.write missing: a command may read the workspace but its write fails in the kernel.
    let mut ro = Rpc::open(&gw.url, json!({"capabilities": ["proc.spawn", format!("fs.read({ws})")]})).await;
    let j = ro.ok("job.start", json!({"command": ["sh", "-c", "echo x > written.txt"]})).await;
    let evs = ro.events(j["job_id"].as_str().unwrap(), 0).await;
    assert_ne!(exit_of(&evs)["code"], 0, "{evs:?}");
    assert!(!gw.workspace.join("written.txt").exists());

    drop(gw);
    let out = audit_json(&state, &["--lines", "1000", "--kind", "capability.denied"]);
    assert_eq!(out.lines().count(), denials, "one audit record per denial:\n{out}");
    for m in ["tool(files__read_file)", "tool(files__run_command)", "proc.spawn", "net.connect(example.com)"] {
        assert!(out.contains(m), "{m} not audited:\n{out}");
    }
}
