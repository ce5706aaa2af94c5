//! What the gateway multiplexes besides tools, driven by real clients against a real fleet
//! (server-everything from npm, mcp-server-time and a notes server written with the Python SDK):
//! resources, templates, prompts, completion, logging and resource subscriptions, with the
//! names and URIs of each server kept apart, the grants enforced on every method, and clear
//! errors for what does not exist or is too large.

use std::process::Command;

use serde_json::{Value, json};

use super::*;

pub fn features_client(args: &[&str]) -> Value {
    let out = Command::new(venv_bin("python"))
        .arg(repo().join("tests/fixtures/mcp_features.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "python MCP client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// server-everything, mcp-server-time and the notes server (Python SDK).
fn fleet(dir: &std::path::Path) -> std::path::PathBuf {
    let notes = repo().join("tests/fixtures/notes_server.py");
    write_fleet(dir, json!({"notes": {"command": venv_bin("python"), "args": [notes]}}))
}

fn uris(list: &Value, key: &str) -> Vec<String> {
    list.as_array().unwrap().iter().map(|r| r[key].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn python_sdk_reads_resources_prompts_completions_and_logs_of_every_server() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&fleet(tmp.path())).start();
    let url = format!("{}/mcp", gw.base);
    let r = tokio::task::spawn_blocking(move || features_client(&["tour", &url])).await.unwrap();

    let caps = &r["capabilities"];
    assert_eq!(caps["resources"], json!({"subscribe": true, "listChanged": true}), "{caps}");
    assert!(caps["prompts"].is_object() && caps["completions"].is_object() && caps["logging"].is_object(), "{caps}");

    // Both servers' resources, each URI rewritten with its provider and its scheme kept.
    let resources = uris(&r["resources"], "uri");
    assert!(resources.contains(&"notes://notes__today".to_string()), "{resources:?}");
    assert!(
        resources.contains(&"demo://everything__resource/static/document/architecture.md".to_string()),
        "{resources:?}"
    );
    assert!(resources.iter().all(|u| u.contains("notes__") || u.contains("everything__")), "{resources:?}");
    let templates = uris(&r["templates"], "uriTemplate");
    assert!(templates.contains(&"notes://notes__day/{n}".to_string()), "{templates:?}");
    assert!(templates.iter().any(|t| t.starts_with("demo://everything__")), "{templates:?}");

    // Reads: text, binary and a template instance, with the client's URI in the answer.
    let reads = &r["reads"];
    assert_eq!(reads["notes://notes__today"]["contents"][0]["text"], "Remember the milk.");
    assert_eq!(reads["notes://notes__today"]["contents"][0]["uri"], "notes://notes__today");
    assert_eq!(reads["notes://notes__logo.png"]["contents"][0]["mimeType"], "image/png");
    assert!(reads["notes://notes__logo.png"]["contents"][0]["blob"].as_str().unwrap().starts_with("iVBOR"));
    assert_eq!(reads["notes://notes__day/2"]["contents"][0]["text"], "Wrote tests.");

    // Prompts of both servers under `<provider>__<prompt>`, and a get with arguments.
    let prompts = uris(&r["prompts"], "name");
    for p in ["notes__review", "notes__summarise", "everything__args-prompt"] {
        assert!(prompts.contains(&p.to_string()), "{p} missing from {prompts:?}");
    }
    // A prompt whose description tells the agent to send a key away is not listed.
    assert!(!prompts.contains(&"notes__poisoned".to_string()), "the registration lint refuses it: {prompts:?}");
    let text = r["prompt"]["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("review this python code") && text.contains("x = 1"), "{text}");

    // Completion routed by the ref's prompt name and by the template's URI.
    assert_eq!(r["complete_prompt"]["completion"]["values"], json!(["rust"]));
    assert_eq!(r["complete_template"]["completion"]["values"], json!(["3"]));

    // The tool's warning reached the client, tagged with its server.
    assert_eq!(r["shout"]["content"][0]["text"], "HI");
    let log = r["logs"].as_array().unwrap().iter().find(|l| l["data"] == "shouting 'hi'").expect("the log message");
    assert_eq!((log["level"].as_str(), log["logger"].as_str()), (Some("warning"), Some("notes")), "{log}");
    assert_eq!(log["_meta"]["axp/provider"], "notes");
}

#[tokio::test]
async fn a_resource_update_reaches_the_subscribed_session_only() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let url = format!("{}/mcp", gw.base);
    let uri = "demo://everything__resource/static/document/architecture.md";
    // server-everything sends updates for subscribed resources every 5 s once toggled on.
    let got = tokio::task::spawn_blocking(move || {
        features_client(&["subscribe", &url, uri, "everything__toggle-subscriber-updates", "15"])
    })
    .await
    .unwrap();
    assert_eq!(got["a"][0], uri, "the subscribed session hears the update under its own URI: {got}");
    assert_eq!(got["b"], json!([]), "a session that did not subscribe hears nothing: {got}");
}

#[tokio::test]
async fn grants_cover_resources_and_prompts_on_every_method() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&fleet(tmp.path())).start();
    // Tools only: resources and prompts are neither listed nor reachable.
    let mut tools_only = Rpc::open(&gw.url, json!({"capabilities": ["tool(*)"]})).await;
    assert_eq!(tools_only.ok("resources/list", json!({})).await, json!({"resources": []}));
    assert_eq!(tools_only.ok("prompts/list", json!({})).await, json!({"prompts": []}));
    let (code, e) = tools_only.err("resources/read", json!({"uri": "notes://notes__today"})).await;
    assert_eq!((code, e["data"]["missing"].as_str()), (-32002, Some("resource(notes__notes://today)")), "{e}");
    let (code, e) = tools_only.err("prompts/get", json!({"name": "notes__review", "arguments": {"code": "x"}})).await;
    assert_eq!((code, e["data"]["missing"].as_str()), (-32002, Some("prompt(notes__review)")), "{e}");
    let (code, _) = tools_only.err("resources/subscribe", json!({"uri": "notes://notes__today"})).await;
    assert_eq!(code, -32002);
    let r =
        json!({"ref": {"type": "ref/prompt", "name": "notes__review"}, "argument": {"name": "language", "value": "r"}});
    assert_eq!(tools_only.err("completion/complete", r).await.0, -32002);

    // One server's resources and one prompt: exactly those.
    let mut narrow =
        Rpc::open(&gw.url, json!({"capabilities": ["resource(notes__notes://day/*)", "resource(notes__notes://today)", "prompt(notes__review)"]}))
            .await;
    let listed = narrow.ok("resources/list", json!({})).await;
    assert_eq!(uris(&listed["resources"], "uri"), vec!["notes://notes__today"], "{listed}");
    let templates = narrow.ok("resources/templates/list", json!({})).await;
    assert_eq!(uris(&templates["resourceTemplates"], "uriTemplate"), vec!["notes://notes__day/{n}"]);
    let read = narrow.ok("resources/read", json!({"uri": "notes://notes__day/1"})).await;
    assert_eq!(read["contents"][0]["text"], "Bought bread.");
    let (code, _) = narrow.err("resources/read", json!({"uri": "notes://notes__logo.png"})).await;
    assert_eq!(code, -32002);
    let prompts = narrow.ok("prompts/list", json!({})).await;
    assert_eq!(uris(&prompts["prompts"], "name"), vec!["notes__review"]);
    // A grant the operator did not give cannot be asked for.
    let mut asked = Rpc::new(&gw.url);
    let wide = asked.raw("session.open", json!({"capabilities": ["resource(*)"]})).await;
    assert!(wide.get("result").is_some(), "the default profile holds resource(*): {wide}");
    let (code, _) = asked.err("session.open", json!({"capabilities": ["resource(no-provider-named)"]})).await;
    assert_eq!(code, -32602, "a resource glob must name its provider");
}

#[tokio::test]
async fn unknown_names_forged_cursors_and_unsupported_subscriptions_get_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&fleet(tmp.path())).start();
    let mut c = Rpc::open(&gw.url, json!({})).await;
    // A URI no server is named in.
    let (code, e) = c.err("resources/read", json!({"uri": "nope://nothing/here"})).await;
    assert_eq!(code, -32602, "{e}");
    assert!(e["message"].as_str().unwrap().contains("nope://nothing/here"), "{e}");
    // A URI of a named server that it does not have: the server's own error, passed through.
    let (code, e) = c.err("resources/read", json!({"uri": "notes://notes__nothing"})).await;
    assert_eq!(code, -32602, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("Unknown resource: notes://notes__nothing"),
        "told in the client's URI: {e}"
    );
    assert_eq!(e["data"]["uri"], "notes://notes__nothing", "{e}");
    // A prompt nobody has.
    let (code, e) = c.err("prompts/get", json!({"name": "zzz"})).await;
    assert_eq!(code, -32602, "{e}");
    assert!(e["message"].as_str().unwrap().contains("zzz"), "{e}");
    // A prompt the registration lint refused in the list is not served by name either.
    c.ok("prompts/list", json!({})).await;
    let (code, e) = c.err("prompts/get", json!({"name": "notes__poisoned", "arguments": {"n": "1"}})).await;
    assert_eq!(code, -32602, "{e}");
    assert!(e["data"]["reason"].as_str().unwrap().contains("registration lint"), "{e}");
    let (_, e) = c.err("prompts/get", json!({"name": "notes__nothing"})).await;
    assert!(e["message"].as_str().unwrap().contains("nothing"), "{e}");
    // mcp-server-time offers no resources: a subscription to its namespace is refused clearly.
    let (code, e) = c.err("resources/subscribe", json!({"uri": "time://time__now"})).await;
    assert_eq!(code, -32601, "{e}");
    assert!(e["message"].as_str().unwrap().contains("does not support resource subscriptions"), "{e}");
    // Wrong types and forged cursors.
    assert_eq!(c.err("resources/read", json!({"uri": 7})).await.0, -32602);
    assert_eq!(c.err("resources/list", json!({"cursor": "axp:99999"})).await.0, -32602);
    assert_eq!(c.err("prompts/get", json!({"name": "notes__review", "arguments": [1]})).await.0, -32602);
    assert_eq!(c.err("logging/setLevel", json!({"level": "loud"})).await.0, -32602);
    let (code, _) = c.err("completion/complete", json!({"ref": {"type": "ref/tool", "name": "x"}})).await;
    assert_eq!(code, -32602);
    // A resource larger than the gateway takes in one message (20 MiB against 16): a clear
    // error at once, not a timeout, and the server stays up.
    let started = std::time::Instant::now();
    let (code, e) = c.err("resources/read", json!({"uri": "notes://notes__huge"})).await;
    assert_eq!(code, -32007, "{e}");
    assert!(e["message"].as_str().unwrap().contains("larger than 16 MiB"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "answered by the limit, not the deadline");
    // None of it broke the gateway: the next read works.
    let ok = c.ok("resources/read", json!({"uri": "notes://notes__today"})).await;
    assert_eq!(ok["contents"][0]["text"], "Remember the milk.");
}

#[tokio::test]
async fn the_servers_requests_of_the_client_reach_the_client_whose_call_made_them() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let url = format!("{}/mcp", gw.base);
    let r = tokio::task::spawn_blocking(move || features_client(&["asks", &url])).await.unwrap();
    // server-everything offers its sampling and elicitation tools only to clients that can
    // answer: the gateway declares both for its client.
    let tools: Vec<&str> = r["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"everything__trigger-sampling-request"), "{tools:?}");
    assert!(r["sampling"].as_str().unwrap().contains("sampled: 42"), "{r}");
    assert!(r["roots"].as_str().unwrap().contains("file:///srv/project"), "{r}");
    assert!(r["elicitation"].as_str().unwrap().contains("Favorite Color: red"), "{r}");
    assert_eq!(r["asked"], json!(["sampling", "roots", "elicitation"]));
    let audit = audit_json(&gw.state, &[]);
    for m in ["sampling/createMessage", "roots/list", "elicitation/create"] {
        let rec = audit
            .lines()
            .find(|l| l.contains("client_request") && l.contains(m) && l.contains("answered"))
            .unwrap_or_else(|| panic!("no audit record of {m} answered:\n{audit}"));
        assert!(rec.contains("\"provider\":\"everything\"") && rec.contains("\"session\":\"s_"), "{rec}");
    }
}

#[tokio::test]
async fn a_request_that_could_be_either_sessions_reaches_neither() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let url = format!("{}/mcp", gw.base);
    // Session A's long call is running on the shared server when B's tool asks for sampling:
    // the request names neither, and asking A's client would show it B's prompt.
    let r = tokio::task::spawn_blocking(move || features_client(&["crossed", &url])).await.unwrap();
    assert_eq!((r["asked_a"].clone(), r["asked_b"].clone()), (json!([]), json!([])), "{r}");
    let text = r["sampled"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("calls of 2 sessions"), "the server is told why: {text}");
    assert!(text.contains(r#""isolation": "per-session""#), "and how to avoid it: {text}");
    assert!(audit_json(&gw.state, &[]).lines().any(|l| l.contains("client_request") && l.contains("refused")));
}

#[tokio::test]
async fn without_a_capable_client_or_against_the_operator_the_server_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    // A session opened over the AXP face has no MCP client to ask.
    let mut c = Rpc::open(&gw.url, json!({})).await;
    let r = c
        .ok(
            "tools/call",
            json!({"name": "everything__trigger-sampling-request", "arguments": {"prompt": "x", "maxTokens": 5}}),
        )
        .await;
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("-32601") && text.contains("cannot be asked `sampling/createMessage`"), "{r}");

    // The operator turned sampling and elicitation off for this server: it is not offered
    // them, so it hides the tools that need them, and roots still work.
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet.json");
    let server = json!({"command": "node", "args": [everything_js()], "sampling": false, "elicitation": false});
    std::fs::write(&fleet, json!({"mcpServers": {"everything": server}}).to_string()).unwrap();
    let gw = gateway().fleet(&fleet).start();
    let mut c = Rpc::open(&gw.url, json!({})).await;
    let listed = c.ok("tools/list", json!({})).await;
    let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"everything__get-roots-list"), "{names:?}");
    for hidden in ["everything__trigger-sampling-request", "everything__trigger-elicitation-request"] {
        assert!(!names.contains(&hidden), "{hidden} is offered although the operator forbade it: {names:?}");
    }
}

#[tokio::test]
async fn a_servers_request_while_a_prompt_is_got_reaches_that_client() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&fleet(tmp.path())).start();
    let url = format!("{}/mcp", gw.base);
    // Not a tool call: the request is attributed through the prompt get's own session.
    let r = tokio::task::spawn_blocking(move || features_client(&["prompt-asks", &url])).await.unwrap();
    assert_eq!(r["asked"], json!(["Whom shall I greet?"]), "{r}");
    let text = r["prompt"]["messages"][0]["content"]["text"].as_str().unwrap();
    assert_eq!(text, "Hello, Ada!", "{r}");
}
