//! The one process runner, seen through command jobs: a job whose main process has exited ends
//! promptly even while a background child it started still holds its stdout, with all its output
//! before its exit event, and that child is killed with the job's process group.

use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

/// A job ends within the runner's graces, output first, exit last.
async fn ends_promptly(s: &mut Rpc, script: &str) -> Vec<Value> {
    let job = s.ok("job.start", json!({"command": ["sh", "-c", script]})).await["job_id"].as_str().unwrap().to_string();
    let t0 = Instant::now();
    let events = tokio::time::timeout(Duration::from_secs(30), s.events(&job, 0))
        .await
        .expect("the job never ended: a background child holding its stdout kept it running");
    assert!(t0.elapsed() < Duration::from_secs(10), "the job took {:?} to end", t0.elapsed());
    let exit = events.iter().position(|e| e["kind"] == "exit").expect("no exit event");
    assert_eq!(exit, events.len() - 1, "output after the exit event: {events:?}");
    assert_eq!(events[exit]["state"], "exited", "{events:?}");
    assert_eq!(events[exit]["code"], 0, "{events:?}");
    events
}

#[tokio::test]
async fn a_background_child_holding_stdout_does_not_keep_a_job_running() {
    // Sandboxed (the default tier).
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    let events = ends_promptly(&mut s, "sleep 600 & echo done").await;
    assert_eq!(stdout_of(&events), "done\n");
    drop(gw);

    // Unsandboxed, where no pid namespace ends with the job: only the runner's group kill stops
    // the background child, which is checked by its host pid.
    let gw = gateway().arg("--dangerously-allow-dev-none").start();
    let mut s = Rpc::open(&gw.url, json!({"sandbox_tier": "dev-none"})).await;
    let events = ends_promptly(&mut s, "sleep 600 & echo $!; echo done").await;
    let out = stdout_of(&events);
    let mut lines = out.lines();
    let pid: u32 = lines.next().unwrap().parse().unwrap();
    assert_eq!(lines.next(), Some("done"), "{out}");
    let stat = std::path::PathBuf::from(format!("/proc/{pid}/stat"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z ")) {
        assert!(Instant::now() < deadline, "the background sleep {pid} survived its job");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
