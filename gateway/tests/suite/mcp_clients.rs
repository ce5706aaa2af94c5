//! Unmodified MCP clients against the gateway: the official Python SDK over Streamable HTTP and
//! over stdio, raw stdio framing with bad lines, and the adaptive `tools/list`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::*;

fn python_client(args: &[&str]) -> Value {
    let out =
        Command::new(venv_bin("python")).arg(repo().join("tests/fixtures/mcp_client.py")).args(args).output().unwrap();
    assert!(out.status.success(), "python MCP client failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

#[tokio::test]
async fn python_sdk_over_streamable_http() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let url = format!("{}/mcp", gw.base);
    let r = tokio::task::spawn_blocking(move || {
        python_client(&["http", &url, "everything__get-sum", r#"{"a": 20, "b": 22}"#])
    })
    .await
    .unwrap();
    assert_eq!(r["server"], "axp");
    assert_eq!(r["tools"].as_array().unwrap().len(), 15);
    assert_eq!(r["result"]["content"][0]["text"], "The sum of 20 and 22 is 42.");
}

#[test]
fn python_sdk_over_stdio() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(tmp.path(), json!({}));
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let r = python_client(&[
        "stdio",
        axp(),
        tmp.path().join("state").to_str().unwrap(),
        ws.to_str().unwrap(),
        fleet.to_str().unwrap(),
        "time__get_current_time",
        r#"{"timezone": "Europe/Berlin"}"#,
    ]);
    assert_eq!(r["result"]["structuredContent"]["timezone"], "Europe/Berlin", "{r}");
}

#[test]
fn raw_stdio_survives_bad_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut child = Command::new(axp())
        .args(["serve", "--stdio", "--state-dir"])
        .arg(tmp.path().join("state"))
        .arg("--workspace")
        .arg(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut send = |s: &str| {
        stdin.write_all(s.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let mut read = || {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap()
    };
    send("this is not json");
    assert_eq!(read()["error"]["code"], -32700);
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    let init = read();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    send(r#"{"jsonrpc":"2.0","id":2,"method":"nope"}"#);
    assert_eq!(read()["error"]["code"], -32601);
    send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
    let tools = read();
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"files__read_file"), "{names:?}");
    std::fs::write(ws.join("note.txt"), "from the workspace").unwrap();
    send(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"files__read_file","arguments":{"path":"note.txt"}}}"#,
    );
    let r = read();
    assert_eq!(r["result"]["content"][0]["text"], "from the workspace", "{r}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[tokio::test]
async fn large_catalogs_are_listed_as_meta_tools() {
    let tmp = tempfile::tempdir().unwrap();
    let toml = tmp.path().join("axp.toml");
    std::fs::write(&toml, "[serve]\ninline_tools_max = 5\n").unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).arg("--config").arg(toml.to_str().unwrap()).start();
    let mut c = Rpc::new(&gw.url);
    let list = c.ok("tools/list", json!({})).await;
    let names: Vec<&str> = list["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["axp_index", "axp_describe", "axp_call"]);
    let found = c.ok("tools/call", json!({"name": "axp_index", "arguments": {"query": "echo"}})).await;
    assert!(found["content"][0]["text"].as_str().unwrap().contains("everything__echo"));
    let r = c
        .ok(
            "tools/call",
            json!({"name": "axp_call", "arguments": {"name": "everything__echo", "arguments": {"message": "meta"}}}),
        )
        .await;
    assert_eq!(r["content"][0]["text"], "Echo: meta");
}
