//! Operator authentication, end to end: bearer credentials from axp.toml (hashed at rest, or
//! from the environment) cap what `session.open` may grant; requests without one are refused;
//! `axp serve` will not listen beyond loopback without operators; Origin and Host checks stop
//! DNS rebinding; config typos in the new sections are located with the nearest key.

use std::process::Command;

use serde_json::json;

use super::*;

/// `axp operator token`: the token on stdout, its `token_sha256` on stderr.
pub fn new_operator_token() -> (String, String) {
    let out = Command::new(axp()).args(["operator", "token"]).output().unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let err = String::from_utf8(out.stderr).unwrap();
    let hash = err.split("token_sha256 = \"").nth(1).unwrap().split('"').next().unwrap().to_string();
    assert_eq!(hash.len(), 64);
    (token, hash)
}

#[tokio::test]
async fn sessions_are_opened_by_operators_within_their_ceiling() {
    let tmp = tempfile::tempdir().unwrap();
    let (token, hash) = new_operator_token();
    let env_token = "env-operator-token-0123456789";
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[operators]]
name = "ci"
token_sha256 = "{hash}"
capabilities = ["tool(files__read_file)", "tool(files__list_files)"]
tiers = ["kernel-lsm"]

[[operators]]
name = "admin"
token_env = "AXP_TEST_ADMIN_TOKEN"
capabilities = ["tool(*)", "proc.spawn"]
"#
        ),
    )
    .unwrap();
    let state = tmp.path().join("state");
    let gw = gateway()
        .state(&state)
        .arg("--config")
        .arg(config.to_string_lossy())
        .start_with_env(&[("AXP_TEST_ADMIN_TOKEN", env_token)]);
    assert!(!std::fs::read_to_string(&config).unwrap().contains(&token), "the token itself is never stored");

    // No credential: nobody may open a session, by either face, nor get a stateless one.
    let mut anon = Rpc::new(&gw.url);
    let (code, e) = anon.err("session.open", json!({})).await;
    assert_eq!(code, -32001, "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("Authorization: Bearer"), "{e}");
    assert_eq!(anon.err("initialize", json!({"protocolVersion": "2025-11-25"})).await.0, -32001);
    assert_eq!(anon.err("axp.index", json!({})).await.0, -32001);

    // A wrong token is a 401, never ignored.
    let resp = reqwest::Client::new()
        .post(&gw.url)
        .bearer_auth("axpop_not-a-real-token")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "session.open", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32001);

    // The operator's ceiling caps what the session may ask for, naming the grant it refuses.
    let mut ci = Rpc::new(&gw.url);
    ci.bearer = Some(token.clone());
    let (code, e) = ci.err("session.open", json!({"capabilities": ["tool(files__read_file)", "proc.spawn"]})).await;
    assert_eq!((code, e["data"]["missing"].as_str()), (-32002, Some("proc.spawn")), "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("operator `ci`"), "{e}");
    let (code, e) = ci.err("session.open", json!({"capabilities": ["tool(*)"]})).await;
    assert_eq!((code, e["data"]["missing"].as_str()), (-32002, Some("tool(*)")), "{e}");
    let (code, e) = ci.err("session.open", json!({"sandbox_tier": "dev-none"})).await;
    assert_eq!(code, -32002, "a tier outside the operator's list is refused: {e}");
    // Asking for nothing grants the ceiling, no more.
    let r = ci.ok("session.open", json!({})).await;
    assert_eq!(r["capabilities"], json!(["tool(files__read_file)", "tool(files__list_files)"]));
    let narrow = ci.ok("session.open", json!({"capabilities": ["tool(files__read_file)"]})).await;

    // The agent then works with its session token alone (no operator credential).
    let mut agent = Rpc::new(&gw.url);
    agent.session = Some((narrow["session_id"].as_str().unwrap().into(), narrow["cap_token"].as_str().unwrap().into()));
    assert_eq!(agent.ok("axp.index", json!({})).await["total"], 1);
    assert_eq!(agent.err("job.start", json!({"command": ["true"]})).await.0, -32002);
    // ... and cannot open sessions of its own.
    assert_eq!(agent.err("session.open", json!({})).await.0, -32001);

    // An operator whose token came from the environment; MCP `initialize` with a bearer works.
    let mut admin = Rpc::new(&gw.url);
    admin.bearer = Some(env_token.into());
    let init = admin.ok("initialize", json!({"protocolVersion": "2025-11-25"})).await;
    assert_eq!(init["serverInfo"]["name"], "axp");
    let r = admin.ok("session.open", json!({"capabilities": ["proc.spawn"]})).await;
    assert_eq!(r["capabilities"], json!(["proc.spawn"]));

    // Every open names its operator in the audit log.
    drop(gw);
    let out = audit_json(&state, &["--kind", "session.open"]);
    assert!(out.contains("\"operator\":\"ci\"") && out.contains("\"operator\":\"admin\""), "{out}");
    assert!(out.contains("\"via\":\"mcp\""), "MCP initialize opens are audited too: {out}");
}

#[test]
fn a_non_loopback_listen_without_operators_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(axp())
        .args(["serve", "--listen", "0.0.0.0:0", "--state-dir"])
        .arg(tmp.path().join("state"))
        .arg("--workspace")
        .arg({
            let w = tmp.path().join("ws");
            std::fs::create_dir_all(&w).unwrap();
            w
        })
        .env("XDG_STATE_HOME", tmp.path().join("xdg"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("refusing to listen on 0.0.0.0:0") && err.contains("[[operators]]"), "{err}");
}

#[tokio::test]
async fn the_loopback_zero_config_first_run_needs_no_credential() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    assert!(s.ok("axp.index", json!({})).await["total"].as_u64().unwrap() >= 4);
    // An Authorization header is refused when no operator is configured (not silently ignored).
    let mut b = Rpc::new(&gw.url);
    b.bearer = Some("something".into());
    assert_eq!(b.err("session.open", json!({})).await.0, -32001);
}

#[tokio::test]
async fn foreign_origins_and_rebound_hosts_get_403() {
    let gw = gateway().start();
    let http = reqwest::Client::new();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let send = |origin: Option<&str>, host: Option<&str>| {
        let mut r = http.post(&gw.url).json(&body);
        if let Some(o) = origin {
            r = r.header("Origin", o);
        }
        if let Some(h) = host {
            r = r.header("Host", h);
        }
        r.send()
    };
    assert_eq!(send(None, None).await.unwrap().status(), 200);
    assert_eq!(send(Some("http://localhost:5173"), None).await.unwrap().status(), 200);
    assert_eq!(send(Some("http://127.0.0.1"), None).await.unwrap().status(), 200);
    assert_eq!(send(Some("http://[::1]:8080"), None).await.unwrap().status(), 200);
    for evil in ["https://evil.example", "http://localhost.evil.example", "null", "http://127.0.0.1.nip.io"] {
        let resp = send(Some(evil), None).await.unwrap();
        assert_eq!(resp.status(), 403, "Origin {evil}");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32001);
    }
    // DNS rebinding: the page's name now resolves to 127.0.0.1, so the Host header gives it away.
    let port = gw.base.rsplit(':').next().unwrap();
    assert_eq!(send(None, Some(&format!("evil.example:{port}"))).await.unwrap().status(), 403);
    assert_eq!(send(None, Some(&format!("localhost:{port}"))).await.unwrap().status(), 200);
    assert_eq!(send(None, Some(&format!("127.0.0.2:{port}"))).await.unwrap().status(), 200);
    assert_eq!(send(None, Some(&format!("[::1]:{port}"))).await.unwrap().status(), 200);
    assert_eq!(send(None, Some(&format!("10.0.0.1:{port}"))).await.unwrap().status(), 403);
    // The GET stream and DELETE are checked the same way.
    let r = http.get(&gw.url).header("Origin", "https://evil.example").send().await.unwrap();
    assert_eq!(r.status(), 403);
    let r = http.delete(&gw.url).header("Host", "evil.example").send().await.unwrap();
    assert_eq!(r.status(), 403);
    // So are `/metrics` and `/healthz`: a rebound page reads neither the metrics nor which
    // providers run (at most that the gateway is up).
    let metrics = format!("{}/metrics", gw.base);
    let health = format!("{}/healthz", gw.base);
    assert_eq!(http.get(&metrics).send().await.unwrap().status(), 200);
    assert_eq!(http.get(&metrics).header("Origin", "https://evil.example").send().await.unwrap().status(), 403);
    assert_eq!(http.get(&metrics).header("Host", "evil.example").send().await.unwrap().status(), 403);
    assert_eq!(http.get(&health).header("Origin", "https://evil.example").send().await.unwrap().status(), 403);
    let full: Value = http.get(&health).send().await.unwrap().json().await.unwrap();
    assert!(full["providers"].as_array().is_some_and(|p| !p.is_empty()), "{full}");
    let rebound: Value =
        http.get(&health).header("Host", format!("evil.example:{port}")).send().await.unwrap().json().await.unwrap();
    assert_eq!(rebound, json!({"status": "ok"}));
}

#[tokio::test]
async fn health_details_and_metrics_are_for_operators() {
    let tmp = tempfile::tempdir().unwrap();
    let (token, hash) = new_operator_token();
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        format!("[[operators]]\nname = \"ops\"\ntoken_sha256 = \"{hash}\"\ncapabilities = [\"tool(*)\"]\n"),
    )
    .unwrap();
    let gw = gateway().arg("--config").arg(config.to_string_lossy()).start();
    let http = reqwest::Client::new();
    let get = |path: &str, bearer: Option<&str>| {
        let mut r = http.get(format!("{}{path}", gw.base));
        if let Some(b) = bearer {
            r = r.bearer_auth(b);
        }
        r.send()
    };
    // Anyone may learn that it is up, and nothing more.
    let r = get("/healthz", None).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"status": "ok"}));
    let r = get("/metrics", None).await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], -32001);
    // A forged token is refused, never treated as no token.
    assert_eq!(get("/healthz", Some("forged-token")).await.unwrap().status(), 401);
    assert_eq!(get("/metrics", Some("forged-token")).await.unwrap().status(), 401);
    // The operator sees it all. Providers mount in the background after the gateway listens:
    // wait (bounded) for the built-in one to be up before reading its gauges.
    let mut full = Value::Null;
    for _ in 0..300 {
        full = get("/healthz", Some(&token)).await.unwrap().json().await.unwrap();
        let up = full["providers"].as_array().unwrap().iter().any(|p| p["id"] == "files" && p["available"] == true);
        if up {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let ids: Vec<&str> = full["providers"].as_array().unwrap().iter().filter_map(|p| p["id"].as_str()).collect();
    assert!(ids.contains(&"files"), "{full}");
    let r = get("/metrics", Some(&token)).await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("axp_provider_up{provider=\"files\"} 1"), "{text}");
    assert!(text.contains("# TYPE axp_tool_call_seconds histogram"), "{text}");
}

#[test]
fn typos_in_operator_approval_and_quota_settings_are_located() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("[[operators]]\nname = \"ci\"\ntoken_sha265 = \"00\"\n", "axp.toml:3:1", "did you mean `token_sha256`?"),
        ("[quotas]\ncalls_per_minit = 5\n", "axp.toml:2:1", "did you mean `calls_per_minute`?"),
        ("[approval]\nrequird = [\"x\"]\n", "axp.toml:2:1", "did you mean `required`?"),
        (
            "[[cli]]\nprovider = \"p\"\n[[cli.tools]]\nname = \"t\"\ndescription = \"d\"\nargv = [\"true\"]\napproval = \"requird\"\n",
            "axp.toml:7:",
            "required",
        ),
    ];
    for (text, at, hint) in cases {
        let config = tmp.path().join("axp.toml");
        std::fs::write(&config, text).unwrap();
        let out = Command::new(axp())
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .arg("--state-dir")
            .arg(tmp.path().join("state"))
            .arg("--workspace")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .current_dir(tmp.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(at) && err.contains(hint), "{text}: expected {at} and {hint} in:\n{err}");
    }
    // Semantic problems are collected and each one named.
    std::fs::write(
        tmp.path().join("axp.toml"),
        "[[operators]]\nname = \"a b\"\ntoken_sha256 = \"xyz\"\ncapabilities = [\"tool(*)\"]\n[[operators]]\nname = \"b\"\ntoken_env = \"AXP_TEST_UNSET_VAR\"\n",
    )
    .unwrap();
    let out = Command::new(axp())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(tmp.path().join("axp.toml"))
        .arg("--state-dir")
        .arg(tmp.path().join("state"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for want in ["`name` must be", "64 hex digits", "$AXP_TEST_UNSET_VAR is not set", "`capabilities` is required"] {
        assert!(err.contains(want), "{want} missing from:\n{err}");
    }
}

#[test]
fn the_cli_opens_its_session_with_the_operator_token() {
    let tmp = tempfile::tempdir().unwrap();
    let (token, hash) = new_operator_token();
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        format!(
            "[[operators]]\nname = \"me\"\ntoken_sha256 = \"{hash}\"\ncapabilities = [\"tool(files__list_files)\"]\n"
        ),
    )
    .unwrap();
    let gw = gateway().arg("--config").arg(config.to_string_lossy()).start();
    let run = |token: Option<&str>| {
        let mut c = Command::new(axp());
        c.args(["index", "--url", &gw.url])
            .env("XDG_STATE_HOME", tmp.path().join("xdg"))
            .env_remove("AXP_OPERATOR_TOKEN");
        if let Some(t) = token {
            c.env("AXP_OPERATOR_TOKEN", t);
        }
        c.output().unwrap()
    };
    let out = run(None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("AXP_OPERATOR_TOKEN"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(Some(&token));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains("files__list_files") && !listed.contains("files__run_command"),
        "the ceiling applies: {listed}"
    );
}
