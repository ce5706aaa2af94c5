//! The MCP Inspector's CLI mode (`@modelcontextprotocol/inspector-cli`, pinned in
//! tests/fixtures/package.json), unchanged, against `axp serve`: over Streamable HTTP at `/mcp`
//! and with `axp serve --stdio` as the command it spawns. It lists the fleet's tools and calls
//! them; its JSON output on stdout is what we check.
//!
//! inspector-cli 1.0.3 finds its own package.json with `fs.existsSync("../package.json")`,
//! which is relative to the *working directory*, and then imports that path relative to its
//! module: run from anywhere else it fails with "Cannot find module …/package.json". So it is
//! run with its `build/` directory as the working directory (an upstream bug, not ours).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

use super::*;

fn inspector_build() -> PathBuf {
    let dir = repo().join("tests/fixtures/node_modules/@modelcontextprotocol/inspector-cli/build");
    need(dir.join("cli.js"));
    dir
}

/// Runs `mcp-inspector-cli --cli ARGS…`.
fn inspector(args: &[&str]) -> Output {
    let build = inspector_build();
    Command::new("node")
        .arg(build.join("cli.js"))
        .arg("--cli")
        .args(args)
        .current_dir(&build)
        .output()
        .expect("node must be installed")
}

/// The JSON the inspector printed, failing the test with its stderr when it failed.
fn json_of(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the inspector failed:\n{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn tool_names(list: &Value) -> Vec<String> {
    list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn inspector_cli_lists_and_calls_over_streamable_http() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let url = format!("{}/mcp", gw.base);

    let list = json_of(&inspector(&[&url, "--method", "tools/list"]));
    let names = tool_names(&list);
    // server-everything's 17 (with the 4 that need sampling, elicitation or roots, which the
    // gateway declares for its clients) and mcp-server-time's 2.
    assert_eq!(names.len(), 19, "{names:?}");
    for want in ["everything__echo", "everything__get-sum", "time__get_current_time"] {
        assert!(names.contains(&want.to_string()), "{want} missing: {names:?}");
    }
    let echo = list["tools"].as_array().unwrap().iter().find(|t| t["name"] == "everything__echo").unwrap();
    assert_eq!(echo["inputSchema"]["required"], json!(["message"]), "{echo}");

    let r = json_of(&inspector(&[
        &url,
        "--method",
        "tools/call",
        "--tool-name",
        "everything__echo",
        "--tool-arg",
        "message=hi",
    ]));
    assert_eq!(r["content"][0]["text"], "Echo: hi", "{r}");
    // `--tool-arg` values that parse as JSON are sent as such: numbers reach the schema check.
    let r = json_of(&inspector(&[
        &url,
        "--method",
        "tools/call",
        "--tool-name",
        "everything__get-sum",
        "--tool-arg",
        "a=2",
        "b=40",
    ]));
    assert_eq!(r["content"][0]["text"], "The sum of 2 and 40 is 42.", "{r}");

    // Our errors reach it as JSON-RPC errors with their codes, and what it shows (the message)
    // says what went wrong, not only the code's name.
    let out = inspector(&[&url, "--method", "tools/call", "--tool-name", "everything__nope", "--tool-arg", "a=1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MCP error -32004: UnknownTool: no tool named `everything__nope`"), "{err}");
    let out = inspector(&[
        &url,
        "--method",
        "tools/call",
        "--tool-name",
        "everything__get-sum",
        "--tool-arg",
        "a=two",
        "b=1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("MCP error -32602"), "{out:?}");
}

#[test]
fn inspector_cli_spawns_axp_serve_stdio() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(tmp.path(), json!({}));
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let state = tmp.path().join("state");
    let serve = [
        axp(),
        "serve",
        "--stdio",
        "--state-dir",
        state.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
        "--mcp-config",
        fleet.to_str().unwrap(),
    ];
    let with = |extra: &[&str]| -> Vec<String> { serve.iter().chain(extra).map(|s| s.to_string()).collect() };

    let args = with(&["--method", "tools/list"]);
    let list = json_of(&inspector(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(tool_names(&list).len(), 19, "{list}");

    let args =
        with(&["--method", "tools/call", "--tool-name", "time__get_current_time", "--tool-arg", "timezone=Asia/Tokyo"]);
    let r = json_of(&inspector(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(r["structuredContent"]["timezone"], "Asia/Tokyo", "{r}");
}

#[test]
fn inspector_cli_reads_resources_and_prompts_of_every_server() {
    let tmp = tempfile::tempdir().unwrap();
    let notes = repo().join("tests/fixtures/notes_server.py");
    let fleet = write_fleet(tmp.path(), json!({"notes": {"command": venv_bin("python"), "args": [notes]}}));
    let gw = gateway().fleet(&fleet).start();
    let url = format!("{}/mcp", gw.base);
    let http = |extra: &[&str]| {
        let mut args = vec![url.as_str(), "--transport", "http"];
        args.extend_from_slice(extra);
        json_of(&inspector(&args))
    };
    let resources = http(&["--method", "resources/list"]);
    let uris: Vec<&str> = resources["resources"].as_array().unwrap().iter().filter_map(|r| r["uri"].as_str()).collect();
    assert!(uris.contains(&"notes://notes__today"), "{uris:?}");
    assert!(uris.iter().any(|u| u.starts_with("demo://everything__")), "{uris:?}");
    let read = http(&["--method", "resources/read", "--uri", "notes://notes__today"]);
    assert_eq!(read["contents"][0]["text"], "Remember the milk.", "{read}");
    let templates = http(&["--method", "resources/templates/list"]);
    assert!(templates.to_string().contains("notes://notes__day/{n}"), "{templates}");
    let prompts = http(&["--method", "prompts/list"]);
    let names: Vec<&str> = prompts["prompts"].as_array().unwrap().iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(names.contains(&"notes__review") && names.contains(&"everything__simple-prompt"), "{names:?}");
    let got = http(&["--method", "prompts/get", "--prompt-name", "notes__review", "--prompt-args", "code=x = 1"]);
    assert!(got["messages"][0]["content"]["text"].as_str().unwrap().contains("x = 1"), "{got}");
    let set = http(&["--method", "logging/setLevel", "--log-level", "debug"]);
    assert_eq!(set, json!({}));
}
