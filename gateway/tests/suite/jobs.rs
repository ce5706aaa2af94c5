//! Durable jobs: command jobs in the sandbox, replay from any seq after a reconnect and after the
//! gateway is killed, idempotent start, stdin, signals, timeouts, and flat memory for big output.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn command_jobs_stream_and_replay_from_any_seq() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let job = s
        .ok("job.start", json!({"command": ["sh", "-c", "for i in 1 2 3 4 5; do echo line$i; sleep 0.05; done; echo oops >&2; exit 3"]}))
        .await;
    let id = job["job_id"].as_str().unwrap().to_string();
    let events = s.events(&id, 0).await;
    assert_eq!(stdout_of(&events), "line1\nline2\nline3\nline4\nline5\n");
    assert!(events.iter().any(|e| e["kind"] == "stderr" && e["data"] == "oops\n"));
    assert_eq!(exit_of(&events)["code"], 3);
    // A second client (a reconnect) reads the same log from the middle, byte for byte.
    let mut again = Rpc::new(&gw.url);
    again.session = s.session.clone();
    let tail = again.events(&id, 2).await;
    assert_eq!(tail, events[2..].to_vec());
    let st = s.ok("job.status", json!({"job_id": id})).await;
    assert_eq!(st["state"], "exited");
    assert_eq!(st["code"], 3);
    assert_eq!(st["next_seq"], events.len() as u64);
    let list = s.ok("job.list", json!({})).await;
    assert_eq!(list["jobs"][0]["job_id"], id.as_str());
    // Past the end of the finished log: nothing, done, and where the log really ends.
    let past = s.ok("job.attach", json!({"job_id": id, "from_seq": 99})).await;
    assert_eq!(
        (past["events"].clone(), past["done"].clone(), past["next_seq"].clone()),
        (json!([]), json!(true), json!(events.len()))
    );
    // A streamed attach checks its params as strictly as the JSON one.
    let (sid, token) = s.session.clone().unwrap();
    let streamed: Value = reqwest::Client::new()
        .post(&gw.url)
        .header("accept", "application/json, text/event-stream")
        .header("axp-capability", token)
        .json(&json!({"jsonrpc": "2.0", "id": 5, "method": "job.attach", "params": {"session_id": sid, "job_id": id, "from_seq": "zero"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(streamed["error"]["code"], -32602, "{streamed}");
    assert!(streamed["error"]["message"].as_str().unwrap().contains("from_seq"), "{streamed}");
}

#[tokio::test]
async fn events_survive_a_killed_gateway_and_running_jobs_become_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mut gw = gateway().state(&state).workspace(&ws).start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let done = s.ok("job.start", json!({"command": ["sh", "-c", "echo finished"]})).await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let done_events = s.events(&done, 0).await;
    let running = s
        .ok(
            "job.start",
            json!({"command": ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.05; done"]}),
        )
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Read some acknowledged events, then kill the gateway without warning.
    let mut acked = Vec::new();
    while acked.len() < 5 {
        let r = s.ok("job.attach", json!({"job_id": running, "from_seq": acked.len(), "wait_ms": 2000})).await;
        acked.extend(r["events"].as_array().unwrap().iter().cloned());
    }
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    drop(gw);
    let gw = gateway().state(&state).workspace(&ws).start();
    let mut s2 = Rpc::new(&gw.url);
    s2.session = s.session.clone();
    assert_eq!(s2.events(&done, 0).await, done_events, "a finished job replays identically after restart");
    let replay = s2.events(&running, 0).await;
    assert_eq!(replay[..acked.len()].to_vec(), acked, "every acknowledged event is still there, unchanged");
    let st = s2.ok("job.status", json!({"job_id": running})).await;
    assert_eq!(st["state"], "lost");
}

#[tokio::test]
async fn idempotency_key_returns_the_same_job() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let a = s.ok("job.start", json!({"command": ["true"], "idempotency_key": "k1"})).await;
    let b = s.ok("job.start", json!({"command": ["true"], "idempotency_key": "k1"})).await;
    let c = s.ok("job.start", json!({"command": ["true"], "idempotency_key": "k2"})).await;
    assert_eq!(a["job_id"], b["job_id"]);
    assert_ne!(a["job_id"], c["job_id"]);
    let jobs = s.ok("job.list", json!({})).await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn stdin_signals_and_timeouts() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let job = s.ok("job.start", json!({"command": ["cat"]})).await["job_id"].as_str().unwrap().to_string();
    s.ok("job.write", json!({"job_id": job, "data": "hello stdin\n", "eof": true})).await;
    let ev = s.events(&job, 0).await;
    assert_eq!(stdout_of(&ev), "hello stdin\n");
    assert_eq!(exit_of(&ev)["code"], 0);

    let job = s
        .ok("job.start", json!({"command": ["sh", "-c", "trap 'echo got-int; exit 7' INT; echo ready; while true; do sleep 0.05; done"]}))
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s.ok("job.attach", json!({"job_id": job, "from_seq": 0, "wait_ms": 5000})).await;
    assert_eq!(r["events"][0]["data"], "ready\n");
    s.ok("job.signal", json!({"job_id": job, "signal": "SIGINT"})).await;
    let ev = s.events(&job, 0).await;
    assert!(stdout_of(&ev).contains("got-int"), "{ev:?}");
    assert_eq!(exit_of(&ev)["code"], 7);
    let (code, _) = s.err("job.signal", json!({"job_id": job, "signal": "SIGNOPE"})).await;
    assert_eq!(code, -32602);

    let job = s.ok("job.start", json!({"command": ["sleep", "30"], "timeout_s": 1})).await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let ev = s.events(&job, 0).await;
    assert_eq!(exit_of(&ev)["state"], "killed");
    assert_eq!(exit_of(&ev)["signal"], "timeout");
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_job_printing_hundreds_of_megabytes_keeps_gateway_memory_flat() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let before = rss_kib(gw.child.id());
    // 256 MiB of output.
    let job = s
        .ok(
            "job.start",
            json!({"command": ["sh", "-c", "head -c 268435456 /dev/zero | tr '\\0' 'x'"]}),
        )
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut peak = before;
    loop {
        let st = s.ok("job.status", json!({"job_id": job})).await;
        peak = peak.max(rss_kib(gw.child.id()));
        if st["state"] != "running" {
            assert_eq!(st["code"], 0, "{st}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let grew_mib = peak.saturating_sub(before) / 1024;
    assert!(grew_mib < 64, "gateway RSS grew by {grew_mib} MiB for 256 MiB of output");
    // And the whole output is on disk, readable from the end.
    let st = s.ok("job.status", json!({"job_id": job})).await;
    let n = st["next_seq"].as_u64().unwrap();
    let last = s.ok("job.attach", json!({"job_id": job, "from_seq": n - 1})).await;
    assert_eq!(last["events"][0]["kind"], "exit");
}
