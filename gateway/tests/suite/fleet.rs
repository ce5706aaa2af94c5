//! A real MCP fleet mounted unchanged: index, search, describe, calls, progress, cancellation,
//! a server killed mid-call, and list_changed forwarding.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn index_search_and_describe_a_real_fleet() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut c = Rpc::new(&gw.url);
    let all = c.ok("axp.index", json!({})).await;
    // server-everything's 17 (the gateway declares sampling, elicitation and roots for its
    // clients, so the 4 tools that need them are offered) and mcp-server-time's 2.
    assert_eq!(all["total"], 19, "{all}");
    for t in all["tools"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert!(
            name.len() <= 64 && name.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-'),
            "{name}"
        );
        assert!(t["desc"].as_str().unwrap().chars().count() <= 120);
    }
    let found = c.ok("axp.index", json!({"query": "convert between timezones"})).await;
    assert_eq!(found["tools"][0]["name"], "time__convert_time", "{found}");
    // A ranked answer carries each tool's score, best first; a plain listing carries none.
    let scores: Vec<f64> = found["tools"].as_array().unwrap().iter().map(|t| t["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert!(all["tools"].as_array().unwrap().iter().all(|t| t.get("score").is_none()), "{all}");
    let sum = c.ok("axp.index", json!({"query": "add two numbers sum"})).await;
    assert_eq!(sum["tools"][0]["name"], "everything__get-sum", "{sum}");

    let d = c.ok("axp.describe", json!({"name": "time__get_current_time"})).await;
    assert_eq!(d["provider"], "time");
    assert_eq!(
        d["signature"].as_str().unwrap().split(')').next().unwrap(),
        "time__get_current_time(args: { timezone: string }"
    );
    assert_eq!(d["schema"]["required"][0], "timezone");
    assert_eq!(d["requires"][0], "tool(time__get_current_time)");
    let (code, e) = c.err("axp.describe", json!({"name": "time__get_curent_time"})).await;
    assert_eq!(code, -32004);
    assert!(e["data"]["reason"].as_str().unwrap().contains("did you mean `time__get_current_time`"), "{e}");
}

#[tokio::test]
async fn calls_through_mcp_and_axp_faces() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut c = Rpc::new(&gw.url);
    let r = c.ok("tools/call", json!({"name": "everything__get-sum", "arguments": {"a": 2, "b": 40}})).await;
    assert!(r["content"][0]["text"].as_str().unwrap().contains("42"), "{r}");
    let r =
        c.ok("tools/call", json!({"name": "time__get_current_time", "arguments": {"timezone": "Asia/Tokyo"}})).await;
    assert_eq!(r["structuredContent"]["timezone"], "Asia/Tokyo", "{r}");

    let mut s = Rpc::open(&gw.url, json!({})).await;
    let job = s.ok("job.start", json!({"tool": "everything__echo", "arguments": {"message": "through a job"}})).await;
    let events = s.events(job["job_id"].as_str().unwrap(), 0).await;
    let result = events.iter().find(|e| e["kind"] == "result").unwrap();
    assert_eq!(result["output"]["content"][0]["text"], "Echo: through a job");
    assert_eq!(exit_of(&events)["state"], "exited");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64, "seqs are dense from 0");
    }

    // `/metrics` splits every call's time by provider: the provider's for all three tool jobs,
    // the gateway's own for the two answered as tools/call (a job.start has no reply to wait for).
    let metrics = reqwest::get(format!("{}/metrics", gw.base)).await.unwrap().text().await.unwrap();
    let value = |series: &str| -> f64 {
        let line = metrics.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("{series}: {metrics}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    };
    for (provider, part, calls) in [
        ("everything", "provider", 2.0),
        ("everything", "gateway", 1.0),
        ("time", "provider", 1.0),
        ("time", "gateway", 1.0),
    ] {
        let labels = format!("part=\"{part}\",provider=\"{provider}\"");
        assert_eq!(value(&format!("axp_tool_call_seconds_count{{{labels}}}")), calls, "{labels}: {metrics}");
        assert_eq!(value(&format!("axp_tool_call_seconds_bucket{{{labels},le=\"+Inf\"}}")), calls, "{metrics}");
        assert!(value(&format!("axp_tool_call_seconds_sum{{{labels}}}")) > 0.0, "{labels}: {metrics}");
    }
}

#[tokio::test]
async fn progress_streams_and_cancel_stops_the_long_running_tool() {
    let tmp = tempfile::tempdir().unwrap();
    let gw = gateway().fleet(&write_fleet(tmp.path(), json!({}))).start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let job = s
        .ok(
            "job.start",
            json!({"tool": "everything__trigger-long-running-operation", "arguments": {"duration": 2, "steps": 4}}),
        )
        .await;
    let events = s.events(job["job_id"].as_str().unwrap(), 0).await;
    let progress: Vec<_> = events.iter().filter(|e| e["kind"] == "progress").collect();
    assert_eq!(progress.len(), 4, "{events:?}");
    assert_eq!(progress[3]["progress"], 4.0);
    assert_eq!(exit_of(&events)["state"], "exited");

    // MCP progress over SSE on the tools/call response stream.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "everything__trigger-long-running-operation", "arguments": {"duration": 1, "steps": 2},
        "_meta": {"progressToken": "tok-1"}}});
    let resp = reqwest::Client::new()
        .post(&gw.url)
        .header("Accept", "application/json, text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let text = resp.text().await.unwrap();
    assert_eq!(text.matches("notifications/progress").count(), 2, "{text}");
    assert!(text.contains("\"progressToken\":\"tok-1\""), "{text}");
    assert!(text.contains("\"id\":7"), "{text}");
    assert!(text.contains("id: j_"), "SSE events carry resumable ids: {text}");

    // Cancel a long run midway: the job is killed and ends promptly.
    let job = s
        .ok(
            "job.start",
            json!({"tool": "everything__trigger-long-running-operation", "arguments": {"duration": 30, "steps": 30}}),
        )
        .await;
    let id = job["job_id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let t0 = std::time::Instant::now();
    s.ok("job.cancel", json!({"job_id": id})).await;
    let events = s.events(&id, 0).await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(exit_of(&events)["state"], "killed", "{events:?}");
    assert_eq!(exit_of(&events)["signal"], "cancel");
    let st = s.ok("job.status", json!({"job_id": id})).await;
    assert_eq!(st["state"], "killed");
}

fn pids_of(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) && !cmd.contains("__sandbox-exec") {
            out.push(pid);
        }
    }
    out
}

#[tokio::test]
async fn a_server_killed_mid_call_fails_the_call_and_comes_back_alone() {
    let tmp = tempfile::tempdir().unwrap();
    // A private copy of the server path so this test's process is easy to find.
    let fleet = write_fleet(tmp.path(), json!({}));
    let gw = gateway().fleet(&fleet).start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let job = s
        .ok(
            "job.start",
            json!({"tool": "everything__trigger-long-running-operation", "arguments": {"duration": 20, "steps": 20}}),
        )
        .await;
    let id = job["job_id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The server runs inside the sandbox's pid namespace but is visible from the host.
    let gw_pid = gw.child.id() as i32;
    let victims: Vec<i32> =
        pids_of("server-everything/dist/index.js").into_iter().filter(|p| is_descendant(*p, gw_pid)).collect();
    assert!(!victims.is_empty(), "server-everything process not found");
    for p in &victims {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), nix::sys::signal::Signal::SIGKILL).unwrap();
    }
    let events = s.events(&id, 0).await;
    let exit = exit_of(&events);
    assert_eq!(exit["state"], "failed", "{events:?}");
    assert_eq!(exit["error"]["code"], -32008, "{exit}");
    // Other providers keep serving while it restarts.
    let r = s.ok("tools/call", json!({"name": "time__get_current_time", "arguments": {"timezone": "UTC"}})).await;
    assert_eq!(r["structuredContent"]["timezone"], "UTC");
    // And it comes back by itself.
    let mut back = false;
    for _ in 0..100 {
        let r = s.raw("tools/call", json!({"name": "everything__echo", "arguments": {"message": "again"}})).await;
        if r["result"]["content"][0]["text"] == "Echo: again" {
            back = true;
            break;
        }
        if let Some(code) = r["error"]["code"].as_i64() {
            assert_eq!(code, -32008, "while down, calls fail as ProviderUnavailable: {r}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(back, "server-everything was not restarted");
}

fn is_descendant(mut pid: i32, ancestor: i32) -> bool {
    for _ in 0..32 {
        if pid == ancestor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
        pid = after.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        if pid <= 1 {
            return false;
        }
    }
    false
}

#[tokio::test]
async fn list_changed_is_forwarded_and_the_index_refreshes() {
    let tmp = tempfile::tempdir().unwrap();
    let wrong = json!({"wrong": {"command": need(repo().join(".venv-wrong/bin/mcp-server-everything-wrong"))}});
    let gw = gateway().fleet(&write_fleet(tmp.path(), wrong)).start();
    let mut c = Rpc::new(&gw.url);
    let sid = mcp_initialize(&gw.url).await;
    let before =
        c.ok("axp.describe", json!({"name": "wrong__greet"})).await["description"].as_str().unwrap().to_string();
    // A standing notification stream for this MCP session.
    let stream = reqwest::Client::new()
        .get(&gw.url)
        .header("Mcp-Session-Id", &sid)
        .header("Accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let mut body = stream.bytes_stream();
    c.ok("tools/call", json!({"name": "wrong__greet", "arguments": {}})).await;
    // The server's start-up also announces its tools with a `list_changed`, which may reach
    // this stream after the call under load: each one heard is followed by a look at the
    // catalog, until the one that follows the rug pull has refreshed it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut seen = String::new();
    let after = loop {
        let heard = tokio::time::timeout_at(deadline, async {
            while let Some(chunk) = body.next().await {
                seen.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
                if let Some(at) = seen.find("notifications/tools/list_changed") {
                    seen.drain(..at + "notifications/tools/list_changed".len());
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(heard, Ok(true), "no list_changed after the rug pull within 15 s (stream so far: {seen})");
        let after = c.ok("axp.describe", json!({"name": "wrong__greet"})).await;
        if after["lint"].to_string().contains("AXP037") {
            break after;
        }
    };
    // The server rewrote its description after it was pinned (a rug pull): the registration
    // lint keeps serving the pinned version and says why.
    assert_eq!(after["description"].as_str().unwrap(), before, "the rug pull is held back");
    // Poisoned tools never reach the index at all.
    let idx = c.ok("axp.index", json!({"provider": "wrong"})).await;
    let names: Vec<&str> = idx["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"wrong__joke_teller") && !names.contains(&"wrong__shadowing_attack"), "{names:?}");
    assert!(names.contains(&"wrong__greet"), "{names:?}");
}

/// The held-back warning told the operator to run `axp lint --approve TOOL`, and that command
/// failed ("nothing to lint") or wrote a new `./axp.lock` where it was run. Now the line the log
/// gives approves the version the gateway holds back, in the gateway's own lockfile, and the
/// running gateway serves it at once (a `list_changed` follows), with no restart.
#[tokio::test]
async fn a_held_back_change_is_approved_by_the_logged_command_and_served_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let python = need(repo().join(".venv-wrong/bin/python"));
    let server = repo().join("tests/fixtures/upgrading_server.py");
    let up = json!({"up": {"command": python, "args": [server]}});
    let gw = gateway().fleet(&write_fleet(tmp.path(), up)).start();
    let mut c = Rpc::new(&gw.url);
    let before = c.ok("axp.describe", json!({"name": "up__status"})).await["description"].as_str().unwrap().to_string();
    // Calling it makes the server change its description; the change is held back.
    c.ok("tools/call", json!({"name": "up__status", "arguments": {}})).await;
    let hint = loop {
        let line = gw.stderr.recv_timeout(Duration::from_secs(20)).expect("no held-back warning within 20 s");
        if let Some(rest) = line.split("until `").nth(1) {
            break rest.split('`').next().unwrap().to_string();
        }
    };
    let state = gw.state.canonicalize().unwrap();
    assert_eq!(hint, format!("axp lint --approve up__status --state-dir {}", state.display()));
    let held = c.ok("axp.describe", json!({"name": "up__status"})).await;
    assert_eq!(held["description"].as_str().unwrap(), before, "the rug pull is held back");

    // Run from an empty directory, as an operator would: nothing may be written there.
    let cwd = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&cwd).unwrap();
    let run = |args: Vec<String>| {
        std::process::Command::new(axp())
            .args(args)
            .current_dir(&cwd)
            .env("XDG_STATE_HOME", tmp.path().join("other-xdg"))
            .output()
            .unwrap()
    };
    // A name that is not held back is refused, and the refusal says what is.
    let out = run(vec![
        "lint".into(),
        "--approve".into(),
        "up__nope".into(),
        "--state-dir".into(),
        state.display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("`up__nope` is not held back") && err.contains("held back there: up__status"), "{err}");

    // The logged command, word for word.
    let out = run(hint.split_whitespace().skip(1).map(String::from).collect());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("approved up__status"), "{err}");
    assert!(!cwd.join("axp.lock").exists(), "approving wrote a lockfile in the current directory");

    // The running gateway serves the approved version without a restart.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let after = loop {
        let d = c.ok("axp.describe", json!({"name": "up__status"})).await;
        if d["description"].as_str().unwrap() != before {
            break d;
        }
        assert!(std::time::Instant::now() < deadline, "the approval did not take effect within 10 s: {d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!after["lint"].to_string().contains("AXP037"), "{after}");
    let text = std::fs::read_to_string(state.join("axp.lock")).unwrap();
    let lock: toml::Value = toml::from_str(&text).unwrap();
    assert_eq!(lock["tools"]["up__status"]["description"].as_str(), after["description"].as_str(), "{text}");
    assert!(!state.join("held-back.json").exists(), "nothing is held back any more");
    // The first sightings the gateway pinned itself are all still there beside the approval.
    let listed = c.ok("axp.index", json!({"provider": "up"})).await["tools"].as_array().unwrap().len();
    assert!(lock["tools"].as_table().unwrap().len() >= listed, "{text}");
}

/// One hung server (`sleep 1000` as a command) kept the whole gateway from listening for the
/// 30 s of its start-up timeout. Now the gateway listens at once: `/healthz` names the hung
/// server as starting while the others serve, and the hung one's tools simply are not there.
#[tokio::test]
async fn a_hung_server_does_not_keep_the_gateway_from_listening() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(tmp.path(), json!({"hung": {"command": "sleep", "args": ["1000"]}}));
    let gw = gateway().fleet(&fleet).start();
    let health: Value = reqwest::get(format!("{}/healthz", gw.base)).await.unwrap().json().await.unwrap();
    let hung = health["providers"].as_array().unwrap().iter().find(|p| p["id"] == "hung").cloned().unwrap();
    // Its start-up timeout is 30 s: the gateway answered long before it ended.
    assert_eq!(hung["state"], "starting", "{health}");
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let r = s.ok("tools/call", json!({"name": "everything__echo", "arguments": {"message": "up"}})).await;
    assert_eq!(r["content"][0]["text"], "Echo: up", "{r}");
    let health: Value = reqwest::get(format!("{}/healthz", gw.base)).await.unwrap().json().await.unwrap();
    let states: Vec<(String, String)> = health["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().to_string(), p["state"].as_str().unwrap().to_string()))
        .collect();
    assert!(
        states.contains(&("everything".into(), "up".into())) && states.contains(&("time".into(), "up".into())),
        "{states:?}"
    );
}

/// One unset `${VAR}` in one server stopped the whole gateway. Now that server is down with the
/// reason while the rest serve; `--strict-config` asks for the old refusal.
#[tokio::test]
async fn an_unset_variable_downs_one_server_and_strict_config_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(
        tmp.path(),
        json!({"needs": {"command": "node", "args": [everything_js()], "env": {"TOKEN": "${AXP_TEST_SURELY_UNSET}"}}}),
    );
    let gw = gateway().fleet(&fleet).start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let r = s.ok("tools/call", json!({"name": "everything__echo", "arguments": {"message": "up"}})).await;
    assert_eq!(r["content"][0]["text"], "Echo: up", "{r}");
    let health: Value = reqwest::get(format!("{}/healthz", gw.base)).await.unwrap().json().await.unwrap();
    let needs = health["providers"].as_array().unwrap().iter().find(|p| p["id"] == "needs").cloned().unwrap();
    assert_eq!(needs["state"], "down", "{health}");
    assert!(needs["reason"].as_str().unwrap().contains("AXP_TEST_SURELY_UNSET"), "{health}");

    let out = std::process::Command::new(axp())
        .args(["serve", "--strict-config", "--listen", "127.0.0.1:0", "--mcp-config"])
        .arg(&fleet)
        .arg("--state-dir")
        .arg(tmp.path().join("state2"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("`AXP_TEST_SURELY_UNSET` is not set"), "{err}");
}

/// Errors for people: an unreachable `url` server's reason said "error sending request" wrapped
/// in Rust type names (and never why), each failure was logged twice in two wordings, and a
/// server crashing in its handshake was described two ways. Now: the socket's cause, once per
/// change, one wording, and `/healthz` carries the same reason.
#[tokio::test]
async fn start_up_failures_are_logged_once_in_words_that_say_why() {
    let tmp = tempfile::tempdir().unwrap();
    // A loopback port that was just free: nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let fleet = write_fleet(
        tmp.path(),
        json!({
            "remote": {"url": format!("http://127.0.0.1:{closed}/mcp")},
            "crash": {"command": "sh", "args": ["-c", "echo boom >&2; exit 3"]}
        }),
    );
    let gw = gateway().fleet(&fleet).start();
    // Long enough for several retries of each (250 ms, 500 ms, 1 s, …).
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    let mut lines = gw.startup_log.clone();
    while let Ok(line) = gw.stderr.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) {
        lines.push(line);
    }
    let log = lines.join("\n");
    let about =
        |who: &str| lines.iter().filter(|l| l.contains(&format!("provider={who}"))).cloned().collect::<Vec<_>>();
    for who in ["remote", "crash"] {
        let first: Vec<_> = about(who).into_iter().filter(|l| l.contains("failed to start:")).collect();
        assert_eq!(first.len(), 1, "the first failure of `{who}` is logged once:\n{log}");
    }
    assert!(!log.contains("provider unavailable"), "the gateway repeats what the provider said:\n{log}");
    // The messages, without the log line's own target (`axp_providers::mcp:`).
    let remote: String = about("remote")
        .iter()
        .map(|l| l.split_once("mcp: ").map_or(l.as_str(), |x| x.1))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(remote.contains("connection refused"), "{remote}");
    for jargon in ["rmcp", "Transport", "error sending request", "Worker", "::"] {
        assert!(!remote.contains(jargon), "`{jargon}` in:\n{remote}");
    }
    let crash = about("crash").join("\n");
    assert!(crash.contains("the server exited during the MCP handshake (exit code 3; last stderr: boom)"), "{crash}");
    assert!(!crash.contains("handshake failed"), "one crash, one wording:\n{crash}");
    // Retries of the same failure say how many attempts there have been, not the same warning each time.
    assert!(about("remote").len() < 5, "{remote}");

    let health: Value = reqwest::get(format!("{}/healthz", gw.base)).await.unwrap().json().await.unwrap();
    let reason = |id: &str| {
        let p = health["providers"].as_array().unwrap().iter().find(|p| p["id"] == id).cloned().unwrap();
        assert_eq!(p["state"], "down", "{health}");
        p["reason"].as_str().unwrap().to_string()
    };
    assert!(reason("remote").contains("connection refused"), "{health}");
    assert!(reason("crash").contains("exited during the MCP handshake"), "{health}");
}

/// A tool the registration lint refuses is said loudly: an error line at start-up naming it,
/// its rules and how to allow one, and `/healthz` lists it with its reasons. It is not served.
#[tokio::test]
async fn refused_tools_are_named_in_the_log_and_in_healthz() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet.json");
    let wrong = need(repo().join(".venv-wrong/bin/mcp-server-everything-wrong"));
    std::fs::write(&fleet, serde_json::to_vec(&json!({"mcpServers": {"wrong": {"command": wrong}}})).unwrap()).unwrap();
    let gw = gateway().fleet(&fleet).start();
    let loud = |line: &String| line.contains("ERROR") && line.contains("the registration lint refused");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut said = gw.startup_log.iter().find(|l| loud(l)).cloned();
    while said.is_none() {
        let Ok(line) = gw.stderr.recv_timeout(deadline.saturating_duration_since(std::time::Instant::now())) else {
            break;
        };
        said = loud(&line).then_some(line);
    }
    let said = said.expect("an error line naming the refused tools within 60 s");
    assert!(said.contains("wrong__") && said.contains("AXP0") && said.contains("axp lint --explain"), "{said}");

    let health: Value = reqwest::get(format!("{}/healthz", gw.base)).await.unwrap().json().await.unwrap();
    let refused = health["refused"].as_array().unwrap();
    assert!(!refused.is_empty(), "{health}");
    for r in refused {
        assert_eq!(r["provider"], "wrong", "{r}");
        assert!(r["tool"].as_str().unwrap().starts_with("wrong__"), "{r}");
        assert!(r["reasons"][0].as_str().unwrap().starts_with("AXP0"), "{r}");
    }
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let listed = s.ok("axp.index", json!({"limit": 500})).await.to_string();
    for r in refused {
        assert!(!listed.contains(&format!("\"{}\"", r["tool"].as_str().unwrap())), "{} is served", r["tool"]);
    }
}
