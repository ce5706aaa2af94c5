//! Bad input gets a clear error and loses nothing: malformed JSON-RPC, unknown methods, wrong
//! argument types, oversize bodies, config typos.

use serde_json::json;

use super::*;

async fn post_raw(url: &str, body: Vec<u8>) -> (u16, serde_json::Value) {
    let r =
        reqwest::Client::new().post(url).header("content-type", "application/json").body(body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

#[tokio::test]
async fn malformed_and_unknown_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let (st, v) = post_raw(&gw.url, b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ".to_vec()).await;
    assert_eq!((st, v["error"]["code"].as_i64()), (400, Some(-32700)), "{v}");
    let (_, v) = post_raw(&gw.url, b"[1,2]".to_vec()).await;
    assert_eq!(v["error"]["code"], -32600);
    let (_, v) = post_raw(&gw.url, br#"{"jsonrpc":"2.0","id":2,"method":"tools/explode"}"#.to_vec()).await;
    assert_eq!(v["error"]["code"], -32601);
    assert_eq!(v["id"], 2);
    let mut c = Rpc::new(&gw.url);
    // Wrong argument types are caught by the schema before the provider sees them.
    let (code, e) =
        c.err("tools/call", json!({"name": "everything__get-sum", "arguments": {"a": "two", "b": 3}})).await;
    assert_eq!(code, -32602);
    assert_eq!(e["data"]["pointer"], "/a", "{e}");
    let (code, e) = c.err("tools/call", json!({"name": "time__get_current_time", "arguments": {}})).await;
    assert_eq!(code, -32602);
    assert!(e["data"]["reason"].as_str().unwrap().contains("timezone"), "{e}");
    let (code, _) = c.err("tools/call", json!({"name": "everything__echo", "arguments": "message"})).await;
    assert_eq!(code, -32602);
    // A typo in AXP params names the field and the nearest valid one.
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let (code, e) = s.err("job.start", json!({"tool": "everything__echo", "argumnets": {}})).await;
    assert_eq!(code, -32602);
    assert!(e["data"]["reason"].as_str().unwrap().contains("did you mean `arguments`"), "{e}");
    let (code, _) = s.err("job.start", json!({"tool": "everything__echo", "command": ["true"]})).await;
    assert_eq!(code, -32602);
    // The gateway still serves after all that.
    let r = c.ok("tools/call", json!({"name": "everything__echo", "arguments": {"message": "still here"}})).await;
    assert_eq!(r["content"][0]["text"], "Echo: still here");
}

#[tokio::test]
async fn oversize_bodies_are_refused_with_the_limit_named() {
    let gw = gateway().start();
    let big =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(5 * 1024 * 1024));
    let (st, v) = post_raw(&gw.url, big.into_bytes()).await;
    assert_eq!(st, 413);
    assert_eq!(v["error"]["code"], -32007);
    assert!(v["error"]["data"]["reason"].as_str().unwrap().contains("bytes"));
    let (st, v) = post_raw(&gw.url, br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec()).await;
    assert_eq!((st, v["result"].clone()), (200, json!({})));
}

fn serve_fails(args: &[&str], cwd: &std::path::Path) -> String {
    let ws = cwd.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let out = std::process::Command::new(axp())
        .arg("serve")
        .args(args)
        .arg("--state-dir")
        .arg(cwd.join("state"))
        .arg("--workspace")
        .arg(&ws)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "serve should refuse to start");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn config_typos_name_file_line_column_and_nearest_key() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("fleet.json");
    std::fs::write(&f, "{\"mcpServers\": {\n  \"time\": {\n    \"comand\": \"mcp-server-time\"\n  }\n}}\n").unwrap();
    let err = serve_fails(&["--mcp-config", f.to_str().unwrap()], tmp.path());
    assert!(err.contains("fleet.json:3:"), "{err}");
    assert!(err.contains("did you mean `command`?"), "{err}");

    std::fs::write(&f, "{\"mcpServers\": {\"t\": {\"command\": \"x\", \"args\": \"--flag\"}}}").unwrap();
    let err = serve_fails(&["--mcp-config", f.to_str().unwrap()], tmp.path());
    assert!(err.contains("invalid type") && err.contains("mcpServers.t.args"), "{err}");

    let toml = tmp.path().join("axp.toml");
    std::fs::write(&toml, "listen = \"127.0.0.1:0\"\n[sandbox]\ndefault_teir = \"kernel-lsm\"\n").unwrap();
    let err = serve_fails(&["--config", toml.to_str().unwrap()], tmp.path());
    assert!(err.contains("axp.toml:3:1") && err.contains("did you mean `default_tier`?"), "{err}");

    // (An axp.toml in the working directory is read implicitly; remove the broken one.)
    std::fs::remove_file(&toml).unwrap();
    let err = serve_fails(&["--mcp-provider", "p", "--mcp-tool", "t"], tmp.path());
    assert!(err.contains("--mcp-desc") && err.contains("--mcp-bridge"), "{err}");
}

#[test]
fn bad_audit_and_egress_settings_are_refused_with_the_entry_named() {
    let tmp = tempfile::tempdir().unwrap();
    let toml = tmp.path().join("axp.toml");
    let cases: &[(&str, &[&str])] = &[
        ("[audit]\nsync = \"sometimes\"\n", &["axp.toml:2:", "each", "interval"]),
        ("[audit]\nsync = \"interval\"\nsync_interval_ms = 0\n", &["between 1 and 1000", "not 0"]),
        ("[audit]\nsync_interval_ms = 5\n", &["only applies to `sync = \"interval\"`"]),
        ("[egress]\nresolvers = [\"dns.example\"]\n", &["`dns.example` is not an ip:port"]),
        ("[egress]\ndangerously_allow_private = [\"10.0.0.0/99\"]\n", &["`10.0.0.0/99`"]),
        ("[egres]\nresolvers = []\n", &["axp.toml:1:", "did you mean `egress`?"]),
        ("[egress]\nmax_connections = 0\n", &["`egress.max_connections`", "not 0"]),
        ("[egress]\nmax_connections = -3\n", &["`egress.max_connections`", "not -3"]),
        ("[egress]\nmax_bytes = 0\n", &["`egress.max_bytes`", "\"unlimited\"", "not 0"]),
        ("[egress]\nmax_bytes = \"lots\"\n", &["`egress.max_bytes`", "not \"lots\""]),
        ("[egress]\nidle_timeout_s = 0\n", &["`egress.idle_timeout_s`", "not 0"]),
        ("[egress]\nidle_timeout_s = \"5m\"\n", &["`egress.idle_timeout_s`", "not \"5m\""]),
        ("[egress]\nidle_timeout_s = 90000\n", &["`egress.idle_timeout_s`", "between 1 and 86400", "not 90000"]),
        ("[egress]\nidle_timeout = 30\n", &["axp.toml:2:", "did you mean `idle_timeout_s`?"]),
    ];
    for (text, needles) in cases {
        std::fs::write(&toml, text).unwrap();
        let err = serve_fails(&["--listen", "127.0.0.1:0", "--config", toml.to_str().unwrap()], tmp.path());
        for n in *needles {
            assert!(err.contains(n), "{text:?}: expected {n:?} in: {err}");
        }
    }
}

#[test]
fn a_state_dir_a_sandboxed_job_could_reach_is_refused() {
    // The state dir holds the token and operator keys and the audit log: inside the workspace,
    // or under a path a session could be granted, a job could forge or rewrite them.
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let run = |state: &std::path::Path, extra: &[&str]| {
        let out = std::process::Command::new(axp())
            .args(["serve", "--listen", "127.0.0.1:0", "--workspace"])
            .arg(&ws)
            .arg("--state-dir")
            .arg(state)
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "serve should refuse to start");
        String::from_utf8(out.stderr).unwrap()
    };
    let err = run(&ws.join(".axp-state"), &[]);
    assert!(
        err.contains("reachable from sandboxed jobs through the workspace") && err.contains("--state-dir"),
        "{err}"
    );
    let toml = tmp.path().join("axp.toml");
    std::fs::write(&toml, format!("[session]\ncapabilities = [\"tool(*)\", \"fs.read({})\"]\n", tmp.path().display()))
        .unwrap();
    let err = run(&tmp.path().join("state"), &["--config", toml.to_str().unwrap()]);
    assert!(err.contains("through the grant `fs.read("), "{err}");
}

#[tokio::test]
async fn the_runtime_runs_the_worker_threads_asked_for_and_refuses_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let mut gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).arg("--threads").arg("1").start();
    let said = (0..50)
        .map_while(|_| gw.stderr.recv_timeout(std::time::Duration::from_secs(10)).ok())
        .find(|l| l.contains("runtime worker thread"));
    assert_eq!(said.as_deref(), Some("axp: 1 runtime worker thread"));
    // One worker serves tool calls (blocking work such as audit fsyncs runs off it).
    let mut c = Rpc::new(&gw.url);
    let r = c.ok("tools/call", json!({"name": "everything__echo", "arguments": {"message": "one"}})).await;
    assert_eq!(r["content"][0]["text"], "Echo: one");
    let r = c.ok("tools/call", json!({"name": "time__get_current_time", "arguments": {"timezone": "UTC"}})).await;
    assert!(r["content"][0]["text"].as_str().unwrap().contains("UTC"), "{r}");
    gw.child.kill().unwrap();
    let err = serve_fails(&["--threads", "0"], tmp.path());
    assert!(err.contains("--threads") && err.contains("0 is not in 1..=1024"), "{err}");
}
