//! Per-session quotas from `[quotas]` in axp.toml, end to end: calls per minute, concurrent jobs
//! and total job output each give `LimitExceeded` (-32007) naming the limit; a job that crosses
//! the output limit is stopped; one session's usage never limits another.

use serde_json::json;

use super::*;

#[tokio::test]
async fn each_quota_is_enforced_and_named() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("axp.toml");
    std::fs::write(&config, "[quotas]\ncalls_per_minute = 4\nconcurrent_jobs = 1\njob_output_bytes = 100000\n")
        .unwrap();
    let gw = gateway().arg("--config").arg(config.to_string_lossy()).start();
    let open = || Rpc::open(&gw.url, json!({"capabilities": ["tool(files__*)", "proc.spawn"]}));

    // calls_per_minute: the fifth call in a minute is refused, whatever kind of call it is.
    let mut a = open().await;
    for i in 0..4 {
        if i % 2 == 0 {
            a.ok("job.start", json!({"command": ["true"], "wait": true})).await;
        } else {
            a.ok("tools/call", json!({"name": "files__list_files", "arguments": {"path": "."}})).await;
        }
    }
    let (code, e) = a.err("job.start", json!({"command": ["true"]})).await;
    assert_eq!((code, e["data"]["limit"].as_str()), (-32007, Some("calls_per_minute")), "{e}");
    let (code, e) = a.err("tools/call", json!({"name": "files__list_files", "arguments": {"path": "."}})).await;
    assert_eq!((code, e["data"]["limit"].as_str()), (-32007, Some("calls_per_minute")), "{e}");
    // Another session is not affected.
    let mut b = open().await;
    let sleeper = b.ok("job.start", json!({"command": ["sleep", "30"]})).await["job_id"].as_str().unwrap().to_string();

    // concurrent_jobs: a second live job is refused until the first ends.
    let (code, e) = b.err("job.start", json!({"command": ["true"]})).await;
    assert_eq!((code, e["data"]["limit"].as_str()), (-32007, Some("concurrent_jobs")), "{e}");
    b.ok("job.cancel", json!({"job_id": sleeper})).await;
    b.events(&sleeper, 0).await;
    b.ok("job.start", json!({"command": ["true"], "wait": true})).await;

    // job_output_bytes: a job writing past the session's total is stopped with the limit named,
    // and the session can start nothing more.
    let mut c = open().await;
    let flood = c
        .ok("job.start", json!({"command": ["sh", "-c", "head -c 400000 /dev/zero | tr '\\\\0' a; sleep 20"]}))
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_string();
    let evs = c.events(&flood, 0).await;
    let exit = exit_of(&evs);
    assert_eq!(exit["state"], "killed", "{exit}");
    assert_eq!(
        (exit["error"]["code"].as_i64(), exit["error"]["data"]["limit"].as_str()),
        (Some(-32007), Some("job_output_bytes")),
        "{exit}"
    );
    let written: usize = stdout_of(&evs).len();
    assert!(written <= 100_000, "the log keeps no more than the quota ({written} bytes)");
    let (code, e) = c.err("job.start", json!({"command": ["true"]})).await;
    assert_eq!((code, e["data"]["limit"].as_str()), (-32007, Some("job_output_bytes")), "{e}");
}
