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

/// `axp serve --stdio ARGS…` with raw line framing (MCP's stdio transport), as a client host runs it.
struct StdioGateway {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    out: BufReader<std::process::ChildStdout>,
}

impl StdioGateway {
    fn start(args: &[&std::ffi::OsStr], env: &[(&str, &std::path::Path)]) -> Self {
        let mut child = Command::new(axp())
            .args(["serve", "--stdio"])
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, *v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        StdioGateway { child, stdin, out }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not a JSON-RPC line: {line:?}"))
    }

    /// Closes stdin and waits for a clean exit.
    fn finish(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
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
    // server-everything's 17 (the gateway declares sampling, elicitation and roots) and time's 2.
    assert_eq!(r["tools"].as_array().unwrap().len(), 19);
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
    let mut gw = StdioGateway::start(
        &[
            std::ffi::OsStr::new("--state-dir"),
            tmp.path().join("state").as_os_str(),
            std::ffi::OsStr::new("--workspace"),
            ws.as_os_str(),
        ],
        &[],
    );
    gw.send("this is not json");
    assert_eq!(gw.read()["error"]["code"], -32700);
    gw.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    let init = gw.read();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    gw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    gw.send(r#"{"jsonrpc":"2.0","id":2,"method":"nope"}"#);
    assert_eq!(gw.read()["error"]["code"], -32601);
    gw.send(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#);
    let tools = gw.read();
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"files__read_file"), "{names:?}");
    std::fs::write(ws.join("note.txt"), "from the workspace").unwrap();
    gw.send(
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"files__read_file","arguments":{"path":"note.txt"}}}"#,
    );
    let r = gw.read();
    assert_eq!(r["result"]["content"][0]["text"], "from the workspace", "{r}");
    gw.finish();
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

/// The gateway once SIGKILLed every server and job about ten seconds after any client sent
/// `initialize` to `/mcp`: the session was opened inside `block_in_place`, which turned a
/// runtime worker into a blocking-pool thread that tokio retired after ten idle seconds, and the
/// sandboxed children's `PDEATHSIG` fired with the thread that had forked them. A 60 s call
/// through the official Python SDK must finish while other clients come and go.
#[tokio::test]
async fn a_60_s_tool_call_survives_other_mcp_clients_connecting_and_leaving() {
    let tmp = tempfile::tempdir().unwrap();
    // The server's own per-call limit is raised above the call's 60 s (the default is 60 s).
    let fleet = write_fleet(
        tmp.path(),
        json!({"everything": {"command": "node", "args": [everything_js()], "timeout_s": 120}}),
    );
    let gw = gateway().fleet(&fleet).start();
    let url = format!("{}/mcp", gw.base);
    let long = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            python_client(&[
                "http",
                &url,
                "everything__trigger-long-running-operation",
                r#"{"duration": 60, "steps": 6}"#,
                "120",
            ])
        })
    };
    // Other clients connect, call, and leave while the long call runs, and again after the
    // blocking pool has turned over.
    for wait in [3, 15, 15] {
        tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
        let url = url.clone();
        let r = tokio::task::spawn_blocking(move || {
            python_client(&["http", &url, "everything__echo", r#"{"message": "still here"}"#])
        })
        .await
        .unwrap();
        assert_eq!(r["result"]["content"][0]["text"], "Echo: still here", "{r}");
    }
    let r = long.await.unwrap();
    let text = r["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("Long running operation completed. Duration: 60"), "{r}");
}

/// A command job outlives several turnovers of the blocking pool while MCP clients initialize
/// next to it (each `initialize` is what retired a thread before).
#[tokio::test]
async fn a_job_outlives_blocking_pool_turnovers() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let job = s.ok("job.start", json!({"command": ["sh", "-c", "sleep 35; echo done"]})).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    for _ in 0..3 {
        mcp_initialize(&format!("{}/mcp", gw.base)).await;
        tokio::time::sleep(std::time::Duration::from_secs(11)).await;
    }
    let events = s.events(&id, 0).await;
    assert_eq!(stdout_of(&events), "done\n");
    assert_eq!(exit_of(&events)["code"], 0, "{:?}", exit_of(&events));
}

/// The README's stdio line, `axp serve --stdio --mcp-config fleet.json`, failed while another
/// `axp serve` held the default state directory (the client saw only "Connection closed").
/// A stdio gateway now keeps its state beside it when the default is held.
#[test]
fn a_stdio_gateway_runs_next_to_an_http_gateway_on_the_default_state_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let xdg = tmp.path().join("xdg");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // The HTTP gateway on what is the default state directory for this XDG_STATE_HOME.
    let _http = gateway().state(&xdg.join("axp")).workspace(&ws).start();
    let fleet = write_fleet(tmp.path(), json!({}));
    let mut gw = StdioGateway::start(
        &[std::ffi::OsStr::new("--mcp-config"), fleet.as_os_str(), std::ffi::OsStr::new("--workspace"), ws.as_os_str()],
        &[("XDG_STATE_HOME", &xdg)],
    );
    gw.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    let init = gw.read();
    assert_eq!(init["result"]["serverInfo"]["name"], "axp", "{init}");
    gw.send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"everything__echo","arguments":{"message":"beside"}}}"#,
    );
    // Servers mount after the gateway answers: a `list_changed` may come first.
    let r = std::iter::repeat_with(|| gw.read()).find(|m| m.get("id").is_some()).unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "Echo: beside", "{r}");
    gw.finish();
    assert!(xdg.join("axp-stdio").is_dir(), "the stdio gateway's own state directory");
}
