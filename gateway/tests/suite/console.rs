//! The web console, end to end against a real `axp serve`: `/ui` is refused to a foreign
//! Origin, a rebound Host and a wrong operator credential exactly as `/axp` is, and every answer
//! carries the CSP that allows only the console's own files (no inline script) with the right
//! content types; the `console.*` operator methods answer only a signed operator envelope — an
//! agent's session token, an operator's bearer token, a forged, replayed or re-targeted envelope
//! all get -32001 — and, with one, show every session, any job's log from any seq (and cancel
//! it, audited), the audit tail with its chain status, and the catalog with lint findings.

use reqwest::StatusCode;
use reqwest::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE, LOCATION};
use serde_json::json;

use super::approvals::{envelope, local_key};
use super::operators::new_operator_token;
use super::*;

fn http() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

fn nonce() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("console-test-nonce-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// The CSP and companions every `/ui` answer carries, refusals included.
fn assert_guarded(resp: &reqwest::Response) {
    let h = resp.headers();
    let csp = h.get(CONTENT_SECURITY_POLICY).unwrap_or_else(|| panic!("no CSP on {}", resp.url())).to_str().unwrap();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
    ] {
        assert!(csp.contains(part), "CSP lacks {part}: {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["x-frame-options"], "DENY");
    assert_eq!(h["cache-control"], "no-store");
    assert_eq!(h["referrer-policy"], "no-referrer");
    assert!(h.get("set-cookie").is_none());
}

#[tokio::test]
async fn ui_is_served_with_its_csp_and_refused_as_axp_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let (token, hash) = new_operator_token();
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        format!("[[operators]]\nname = \"ops\"\ntoken_sha256 = \"{hash}\"\ncapabilities = [\"tool(*)\"]\n"),
    )
    .unwrap();
    let gw = gateway().arg("--config").arg(config.to_string_lossy()).start();
    let http = http();
    let ui = format!("{}/ui/", gw.base);

    // The page and its modules, each with its content type; the page holds no inline script or
    // style (the CSP would block them) and loads nothing from another origin.
    let resp = http.get(&ui).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_guarded(&resp);
    assert_eq!(resp.headers()[CONTENT_TYPE], "text/html; charset=utf-8");
    let html = resp.text().await.unwrap();
    assert!(html.contains(r#"<script type="module" src="app.js"></script>"#), "{html}");
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(!html.contains("<style") && !html.contains(" style="), "{html}");
    for handler in ["onclick=", "onload=", "onerror=", "onsubmit=", "javascript:"] {
        assert!(!html.contains(handler), "inline handler {handler}: {html}");
    }
    assert!(!html.contains("http://") && !html.contains("https://"), "{html}");
    for (file, ty) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("rpc.js", "text/javascript; charset=utf-8"),
        ("views.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
    ] {
        let resp = http.get(format!("{ui}{file}")).bearer_auth(&token).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{file}");
        assert_guarded(&resp);
        assert_eq!(resp.headers()[CONTENT_TYPE], ty, "{file}");
        let body = resp.text().await.unwrap();
        assert!(!body.contains("innerHTML") && !body.contains("eval("), "{file} uses a markup or eval sink");
    }
    let resp = http.get(format!("{}/ui", gw.base)).send().await.unwrap();
    assert_eq!((resp.status(), resp.headers()[LOCATION].to_str().unwrap()), (StatusCode::PERMANENT_REDIRECT, "/ui/"));
    for missing in ["nope.js", "..%2Fsrc%2Flib.rs", "index.html%00.js"] {
        let resp = http.get(format!("{ui}{missing}")).send().await.unwrap();
        assert_eq!(resp.status(), 404, "{missing}");
        assert_guarded(&resp);
    }

    // An unknown or malformed operator credential is a 401, never ignored (as on /axp).
    for auth in ["Bearer axpop_not-a-real-token", "Basic b3A6cHc=", "Bearer "] {
        let resp = http.get(&ui).header("Authorization", auth).send().await.unwrap();
        assert_eq!(resp.status(), 401, "{auth}");
        assert_guarded(&resp);
    }
    // A page from another origin can neither load the console nor drive /axp with the
    // operator's token, even if it had it.
    for evil in ["https://evil.example", "null", "http://localhost.evil.example"] {
        let resp = http.get(&ui).header("Origin", evil).send().await.unwrap();
        assert_eq!(resp.status(), 403, "{evil}");
        assert_guarded(&resp);
        let resp = http
            .post(&gw.url)
            .header("Origin", evil)
            .bearer_auth(&token)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "console.sessions", "params": {}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{evil}");
    }
    let resp = http.get(&ui).header("Origin", "http://localhost:1234").bearer_auth(&token).send().await.unwrap();
    assert_eq!(resp.status(), 200);

    // Zero-config (loopback) mode: a rebound Host is refused; a loopback one is served.
    let local = gateway().start();
    let port = local.base.rsplit(':').next().unwrap();
    let ui = format!("{}/ui/", local.base);
    let resp = http.get(&ui).header("Host", format!("evil.example:{port}")).send().await.unwrap();
    assert_eq!(resp.status(), 403);
    assert_guarded(&resp);
    assert_eq!(http.get(&ui).header("Host", format!("localhost:{port}")).send().await.unwrap().status(), 200);
    assert_eq!(http.get(&ui).bearer_auth("anything").send().await.unwrap().status(), 401);
}

#[tokio::test]
async fn console_methods_answer_only_a_signed_operator_envelope() {
    let tmp = tempfile::tempdir().unwrap();
    let (token, hash) = new_operator_token();
    let (state, ws) = (tmp.path().join("state"), tmp.path().join("ws"));
    std::fs::create_dir_all(&ws).unwrap();
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        format!(
            "[[operators]]\nname = \"ops\"\ntoken_sha256 = \"{hash}\"\ncapabilities = [\"tool(*)\", \"proc.spawn\"]\n\
             [[cli]]\nprovider = \"demo\"\n[[cli.tools]]\nname = \"hello\"\ndescription = \"Hi.\"\nargv = [\"echo\", \"hello\"]\n"
        ),
    )
    .unwrap();
    let gw = gateway().state(&state).workspace(&ws).arg("--config").arg(config.to_string_lossy()).start();
    let mut agent = Rpc::new(&gw.url);
    agent.bearer = Some(token.clone());
    let opened = agent.ok("session.open", json!({"capabilities": ["tool(*)", "proc.spawn"]})).await;
    let (sid, cap) = (opened["session_id"].as_str().unwrap().to_string(), opened["cap_token"].as_str().unwrap());
    agent.session = Some((sid.clone(), cap.to_string()));
    let job = agent
        .ok("job.start", json!({"command": ["sh", "-c", "for i in 1 2 3 4 5 6; do echo out$i; done; sleep 60"]}))
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();

    // The agent's session token and its operator's bearer token reach none of them.
    for method in ["console.sessions", "console.jobs", "console.audit", "console.catalog", "console.cancel"] {
        let (code, e) = agent.err(method, json!({"job_id": job})).await;
        assert_eq!(code, -32001, "{method}: {e}");
        assert!(e["data"]["reason"].as_str().unwrap().contains("signed operator `envelope`"), "{e}");
    }
    let mut op = Rpc::new(&gw.url);
    op.bearer = Some(token.clone());
    let key = local_key(&state);
    // Forged (a key no operator has), signed for another method, or replayed: refused.
    let stranger = {
        let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).unwrap();
        ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()
    };
    let forged = envelope(&stranger, "local", "console.sessions", json!({}), &nonce());
    let (code, e) = op.err("console.sessions", json!({"envelope": forged})).await;
    assert_eq!(code, -32001, "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("signature"), "{e}");
    let for_pending = envelope(&key, "local", "job.pending", json!({}), &nonce());
    assert_eq!(op.err("console.sessions", json!({"envelope": for_pending})).await.0, -32001);
    let once = envelope(&key, "local", "console.sessions", json!({}), &nonce());
    let listed = op.ok("console.sessions", json!({"envelope": once.clone()})).await;
    let (code, e) = op.err("console.sessions", json!({"envelope": once})).await;
    assert_eq!(code, -32001, "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("replayed"), "{e}");
    assert_eq!(op.err("console.nope", json!({})).await.0, -32601);

    // Sessions: tier, grants, token id, expiry, quota use.
    let s = listed["sessions"].as_array().unwrap().iter().find(|s| s["session_id"] == sid.as_str()).unwrap().clone();
    assert_eq!(s["state"], "open", "{s}");
    let mut caps: Vec<&str> = s["capabilities"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    caps.sort_unstable();
    assert_eq!(caps, ["proc.spawn", "tool(*)"], "{s}");
    assert!(s["token_id"].as_str().is_some_and(|t| !t.is_empty()), "{s}");
    assert!(s["expires_ms"].as_u64().unwrap() > s["created_ms"].as_u64().unwrap(), "{s}");
    assert_eq!(s["quota_use"], json!({"live_jobs": 1, "calls_last_minute": 1}), "{s}");
    assert!(s["tier"].as_str().is_some_and(|t| !t.is_empty()), "{s}");

    let signed = |method: &str, params: Value| json!({"envelope": envelope(&key, "local", method, params, &nonce())});
    // Jobs across sessions, and any job's log replayed from any seq.
    let jobs = op.ok("console.jobs", signed("console.jobs", json!({}))).await;
    assert_eq!(jobs["jobs"][0]["job_id"], job.as_str(), "{jobs}");
    assert_eq!(jobs["jobs"][0]["session_id"], sid.as_str(), "{jobs}");
    let mut all = Vec::new();
    let mut seq = 0;
    while !stdout_of(&all).contains("out6") {
        let p = json!({"job_id": job, "from_seq": seq, "wait_ms": 5000});
        let r = op.ok("console.attach", signed("console.attach", p)).await;
        all.extend(r["events"].as_array().unwrap().iter().cloned());
        seq = r["next_seq"].as_u64().unwrap();
        assert_eq!(r["state"], "running", "{r}");
    }
    // Any seq: here the middle event's (stdout may arrive as one event or several).
    let mid = all.len() / 2;
    let from = all[mid]["seq"].as_u64().unwrap();
    let p = json!({"job_id": job, "from_seq": from, "wait_ms": 0});
    let tail = op.ok("console.attach", signed("console.attach", p)).await;
    assert_eq!(tail["events"][0]["seq"].as_u64(), Some(from), "{tail}");
    assert_eq!(stdout_of(tail["events"].as_array().unwrap()), stdout_of(&all[mid..]));

    // Cancel any session's job; the operator's cancel is in the audit log.
    let r = op.ok("console.cancel", signed("console.cancel", json!({"job_id": job}))).await;
    assert_eq!(r["cancelled"], true, "{r}");
    let events = agent.events(&job, 0).await;
    assert_eq!(exit_of(&events)["state"], "killed", "{events:?}");

    // The audit tail, filtered, with the chain's verify status.
    let p = json!({"kinds": ["job.cancel"]});
    let audit = op.ok("console.audit", signed("console.audit", p)).await;
    assert_eq!(audit["verify"]["ok"], true, "{audit}");
    assert!(audit["verify"]["records"].as_u64().unwrap() >= 3, "{audit}");
    let records = audit["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{audit}");
    assert_eq!(records[0]["detail"]["operator"], "local", "{audit}");
    assert_eq!(records[0]["detail"]["job_id"], job.as_str(), "{audit}");
    let p = json!({"session": sid, "kinds": ["session.open"]});
    let opens = op.ok("console.audit", signed("console.audit", p)).await;
    assert_eq!(opens["records"].as_array().unwrap().len(), 1, "{opens}");

    // The catalog: each tool's provider, lint findings and pin state; the providers' health.
    let cat = op.ok("console.catalog", signed("console.catalog", json!({}))).await;
    let hello = cat["tools"].as_array().unwrap().iter().find(|t| t["name"] == "demo__hello").unwrap();
    assert_eq!(hello["provider"], "demo", "{hello}");
    assert!(hello["lint"].as_array().unwrap().iter().any(|f| f["rule"] == "AXP002"), "{hello}");
    assert!(["pinned", "unpinned"].contains(&hello["pin"].as_str().unwrap()), "{hello}");
    let demo = cat["providers"].as_array().unwrap().iter().find(|p| p["id"] == "demo").unwrap();
    assert_eq!(demo["state"], "up", "{demo}");
}
