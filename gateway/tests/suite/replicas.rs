//! Several `axp serve` replicas on loopback ports sharing one PostgreSQL database (the cluster
//! `scripts/pg-cluster.sh` starts, `AXP_TEST_PG_URL`): a session opened on one is served by
//! the others; a job running on one is written to, signalled, cancelled and followed live from
//! another; a killed replica's running jobs end as `lost` once its lease runs out, with every
//! acknowledged event kept; a token revoked on one is refused by the others within the stated
//! bound; a call parked on one is decided once, from any of them, and outlives its replica;
//! pins and installed plugins are the same on every replica; and the whole cluster stopped and
//! restarted under load from two replicas loses no acknowledged event. Each test works in a
//! schema of its own (through the URL's `options`), so tests run in parallel on one cluster;
//! the restart test starts a private cluster of its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Gw, Rpc, axp, gateway, stdout_of};

/// The cluster's URL, or `None` (saying so) when none runs outside CI.
fn pg_url() -> Option<String> {
    match std::env::var("AXP_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("AXP_TEST_PG_URL is not set: `export AXP_TEST_PG_URL=$(scripts/pg-cluster.sh start)`")
        }
        _ => {
            eprintln!("SKIPPED: AXP_TEST_PG_URL is not set (scripts/pg-cluster.sh start)");
            None
        }
    }
}

/// A schema of its own on the test cluster, and replicas that share it: each with its own
/// state directory holding the same token root key (as a deployment gives every replica the
/// same key from one secret), all on one workspace.
struct Cluster {
    base: String,
    schema: String,
    url: String,
    tmp: tempfile::TempDir,
    ws: PathBuf,
}

const KEY: &str = "5a1b7c3d9e8f00112233445566778899aabbccddeeff00112233445566778899";

impl Cluster {
    fn new() -> Option<Cluster> {
        let base = pg_url()?;
        let schema = format!("g_{}", uuid_like());
        psql(&base, &format!("CREATE SCHEMA {schema}"));
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        Some(Cluster { base, schema, url, tmp, ws })
    }

    fn state(&self, name: &str) -> PathBuf {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let state = self.tmp.path().join(name);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&state).unwrap();
        let key = state.join("token-root.key");
        if !key.exists() {
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&key).unwrap();
            std::io::Write::write_all(&mut f, format!("{KEY}\n").as_bytes()).unwrap();
        }
        state
    }

    /// Starts replica `name` with a lease of `lease_s` seconds.
    fn replica(&self, name: &str, lease_s: &str) -> Gw {
        self.replica_with(name, lease_s, &[])
    }

    /// [`Cluster::replica`] with more arguments for `axp serve`.
    fn replica_with(&self, name: &str, lease_s: &str, args: &[&str]) -> Gw {
        let mut builder = gateway()
            .state(&self.state(name))
            .workspace(&self.ws)
            .arg("--store")
            .arg(self.url.as_str())
            .arg("--store-lease")
            .arg(lease_s);
        for a in args {
            builder = builder.arg(*a);
        }
        builder.start()
    }

    /// Counts rows with `sql` in this test's schema.
    fn count(&self, sql: &str) -> i64 {
        psql(&self.base, &format!("SET search_path TO {}; {sql}", self.schema)).trim().parse().unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new("psql")
            .args([self.base.as_str(), "-qAtc", &format!("DROP SCHEMA {} CASCADE", self.schema)])
            .output();
    }
}

/// Runs `sql` with `psql` (installed with the server) and returns what it printed.
fn psql(url: &str, sql: &str) -> String {
    let out = std::process::Command::new("psql").args([url, "-qAtc", sql]).output().expect("psql is installed");
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{nanos:x}{:x}", std::process::id())
}

/// A client of `gw` speaking for the session `s` holds.
fn on(gw: &Gw, s: &Rpc) -> Rpc {
    let mut r = Rpc::new(&gw.url);
    r.session = s.session.clone();
    r
}

/// Attaches (on whichever replica `r` talks to) until the job's stdout contains `needle`;
/// returns how long that took and every event seen.
async fn until_stdout(r: &mut Rpc, job: &str, needle: &str) -> (Duration, Vec<Value>) {
    let t0 = Instant::now();
    let mut seq = 0;
    let mut all = Vec::new();
    while t0.elapsed() < Duration::from_secs(60) {
        let b = r.ok("job.attach", json!({"job_id": job, "from_seq": seq, "wait_ms": 5000})).await;
        all.extend(b["events"].as_array().unwrap().iter().cloned());
        seq = b["next_seq"].as_u64().unwrap();
        if stdout_of(&all).contains(needle) {
            return (t0.elapsed(), all);
        }
        assert_ne!(b["done"], true, "the job ended before printing {needle}: {all:?}");
    }
    panic!("{needle} did not come within 60 s: {all:?}");
}

/// A session opened on one replica is served by another: the catalog, a job started there,
/// an attenuated token minted there and used on the first, and the session's close on the
/// second ending it on the first.
#[tokio::test]
async fn a_session_opened_on_one_replica_is_served_by_another() {
    let Some(c) = Cluster::new() else { return };
    let a = c.replica("a", "15");
    let b = c.replica("b", "15");
    let s = Rpc::open(&a.url, json!({})).await;
    let mut on_b = on(&b, &s);
    assert!(!on_b.ok("axp.index", json!({})).await["tools"].as_array().unwrap().is_empty());
    let job = on_b.ok("job.start", json!({"command": ["sh", "-c", "echo from b"]})).await;
    let job = job["job_id"].as_str().unwrap().to_string();
    let events = on_b.events(&job, 0).await;
    assert_eq!(stdout_of(&events), "from b\n");
    let mut on_a = on(&a, &s);
    assert_eq!(on_a.events(&job, 0).await, events, "the job b ran replays identically on a");

    let parent = s.session.clone().unwrap().1;
    let child = on_b.ok("cap.attenuate", json!({"cap_token": parent, "capabilities": ["tool(*)"]})).await;
    let mut sub = Rpc::new(&a.url);
    sub.session = Some((String::new(), child["cap_token"].as_str().unwrap().to_string()));
    sub.ok("axp.index", json!({})).await;
    assert!(sub.err("job.start", json!({"command": ["true"]})).await.1.to_string().contains("proc.spawn"));

    on_b.ok("session.close", json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = on_a.raw("axp.index", json!({})).await;
        if r.get("error").is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "a still serves a session b closed: {r}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Each replica keeps its own audit chain; `axp audit verify` checks every chain it is given
    // and reports each replica's range, and one tampered chain fails the whole check.
    let verify = |dirs: &[&Path]| {
        let mut cmd = std::process::Command::new(axp());
        cmd.args(["audit", "verify", "--json"]);
        for d in dirs {
            cmd.arg("--state-dir").arg(d);
        }
        let out = cmd.output().unwrap();
        (out.status.code().unwrap(), serde_json::from_slice::<Value>(&out.stdout).unwrap())
    };
    let (code, report) = verify(&[&a.state, &b.state]);
    assert_eq!(code, 0, "{report}");
    let chains = report["chains"].as_array().unwrap();
    assert_eq!(chains.len(), 2);
    for (chain, gw) in chains.iter().zip([&a, &b]) {
        let id = std::fs::read_to_string(gw.state.join("replica-id")).unwrap();
        assert_eq!(chain["replica"], id.trim(), "{chain}");
        assert_eq!(chain["ok"], true);
        assert!(chain["records"].as_u64().unwrap() >= 1, "{chain}");
        assert!(chain["first_ts_ms"].as_u64().unwrap() <= chain["last_ts_ms"].as_u64().unwrap());
    }
    let copy = c.tmp.path().join("b-copy");
    std::fs::create_dir_all(copy.join("audit")).unwrap();
    for f in std::fs::read_dir(b.state.join("audit")).unwrap().flatten() {
        std::fs::copy(f.path(), copy.join("audit").join(f.file_name())).unwrap();
    }
    let seg = std::fs::read_dir(copy.join("audit"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let text = std::fs::read_to_string(&seg).unwrap();
    let tampered = text.replacen("\"command\"", "\"commanD\"", 1);
    assert_ne!(text, tampered, "b's chain records the command it ran");
    std::fs::write(&seg, tampered).unwrap();
    let (code, report) = verify(&[&a.state, &copy]);
    assert_eq!(code, 1, "{report}");
    assert_eq!((report["chains"][0]["ok"].as_bool(), report["chains"][1]["ok"].as_bool()), (Some(true), Some(false)));
}

/// A job running on replica a is written to, signalled and cancelled from replica b, and b
/// streams its events live as a writes them.
#[tokio::test]
async fn write_signal_cancel_and_attach_reach_a_job_on_another_replica() {
    let Some(c) = Cluster::new() else { return };
    let a = c.replica("a", "15");
    let b = c.replica("b", "15");
    let mut on_a = Rpc::open(&a.url, json!({})).await;
    let script = "trap 'echo got-usr1' USR1; while read -r l; do echo got:$l; done; echo stdin-closed; \
                  while :; do sleep 0.1; done";
    let job = on_a.ok("job.start", json!({"command": ["sh", "-c", script]})).await;
    let job = job["job_id"].as_str().unwrap().to_string();
    let mut on_b = on(&b, &on_a);

    on_b.ok("job.write", json!({"job_id": job, "data": "hello\n"})).await;
    let (took, _) = until_stdout(&mut on_b, &job, "got:hello\n").await;
    eprintln!("write on b, event seen on b: {} ms", took.as_millis());
    // A write larger than one message between replicas arrives whole and in order.
    let long: String = (0..3000).map(|i| format!("{}", i % 10)).collect();
    on_b.ok("job.write", json!({"job_id": job, "data": format!("{long}\n")})).await;
    until_stdout(&mut on_b, &job, &format!("got:{long}\n")).await;
    on_b.ok("job.signal", json!({"job_id": job, "signal": "USR1"})).await;
    until_stdout(&mut on_b, &job, "got-usr1\n").await;
    on_b.ok("job.write", json!({"job_id": job, "data": "", "eof": true})).await;
    until_stdout(&mut on_b, &job, "stdin-closed\n").await;
    let bad = on_b.err("job.resize", json!({"job_id": job, "rows": 10, "cols": 10})).await;
    assert!(bad.1.to_string().contains("no terminal"), "the owner's own answer comes back: {bad:?}");

    assert_eq!(on_b.ok("job.cancel", json!({"job_id": job})).await["cancelled"], true);
    let events = on_b.events(&job, 0).await;
    let exit = events.last().unwrap();
    assert_eq!(exit["kind"], "exit", "{events:?}");
    assert_eq!(on_b.ok("job.status", json!({"job_id": job})).await["state"], "killed");
    assert_eq!(on_a.events(&job, 0).await, events, "both replicas read the same log");
    // Once it has ended, a cancel from either replica says so.
    assert_eq!(on_b.ok("job.cancel", json!({"job_id": job})).await["cancelled"], false);
}

/// Replica a runs 50 jobs and is killed (SIGKILL). Once its lease runs out, replica b ends
/// every one of them as `lost`, after every event a had acknowledged; a job b runs itself is
/// untouched.
#[tokio::test]
async fn a_killed_replicas_jobs_are_lost_once_its_lease_runs_out_with_no_acknowledged_event_missing() {
    let Some(c) = Cluster::new() else { return };
    let mut a = c.replica("a", "2");
    let b = c.replica("b", "2");
    let mut on_a = Rpc::open(&a.url, json!({})).await;
    let mut jobs = Vec::new();
    for i in 0..50 {
        let j = on_a
            .ok("job.start", json!({"command": ["sh", "-c", format!("echo first{i}; echo second{i}; exec sleep 600")]}))
            .await;
        jobs.push(j["job_id"].as_str().unwrap().to_string());
    }
    let mut acked = Vec::new();
    for (i, j) in jobs.iter().enumerate() {
        let (_, events) = until_stdout(&mut on_a, j, &format!("second{i}\n")).await;
        acked.push(events);
    }
    let mut on_b = on(&b, &on_a);
    let mine = on_b.ok("job.start", json!({"command": ["sh", "-c", "echo mine; exec sleep 600"]})).await;
    let mine = mine["job_id"].as_str().unwrap().to_string();
    until_stdout(&mut on_b, &mine, "mine\n").await;
    assert_eq!(c.count("SELECT count(*) FROM jobs WHERE state = 'running'"), 51);

    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Instant::now();
    loop {
        let running = c.count("SELECT count(*) FROM jobs WHERE state = 'running'");
        if running == 1 {
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "{running} jobs still running 30 s after the kill");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("50 jobs lost {} ms after the kill (lease 2 s)", killed.elapsed().as_millis());
    for (j, acked) in jobs.iter().zip(&acked) {
        let replay = on_b.events(j, 0).await;
        assert_eq!(&replay[..acked.len()], &acked[..], "every acknowledged event of {j} is kept");
        let exit = replay.last().unwrap();
        assert_eq!((exit["kind"].as_str(), exit["state"].as_str()), (Some("exit"), Some("lost")), "{replay:?}");
        assert_eq!(on_b.ok("job.status", json!({"job_id": j})).await["state"], "lost");
    }
    assert_eq!(on_b.ok("job.status", json!({"job_id": mine})).await["state"], "running");
    on_b.ok("job.cancel", json!({"job_id": mine})).await;
}

/// A token revoked on one of three replicas (`axp revoke`, an operator's signed envelope) is
/// refused by the other two within the stated bound (two seconds), and one a replica started
/// after the revocation refuses at once.
#[tokio::test]
async fn a_token_revoked_on_one_replica_is_refused_by_the_others_within_the_bound() {
    let Some(c) = Cluster::new() else { return };
    let a = c.replica("a", "15");
    let b = c.replica("b", "15");
    let d = c.replica("d", "15");
    let s = Rpc::open(&a.url, json!({})).await;
    let parent = s.session.clone().unwrap().1;
    let mut on_a = on(&a, &s);
    let child = on_a.ok("cap.attenuate", json!({"cap_token": parent, "capabilities": ["tool(*)"]})).await;
    let child = child["cap_token"].as_str().unwrap().to_string();
    let sub = |gw: &Gw| {
        let mut r = Rpc::new(&gw.url);
        r.session = Some((String::new(), child.clone()));
        r
    };
    for gw in [&a, &b, &d] {
        sub(gw).ok("axp.index", json!({})).await;
    }
    let out = std::process::Command::new(axp())
        .args(["revoke", &child, "--url", &a.url, "--state-dir"])
        .arg(c.state("a"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let revoked = Instant::now();
    assert_eq!(sub(&a).err("axp.index", json!({})).await.0, -32001, "refused at once where it was revoked");
    for (name, gw) in [("b", &b), ("d", &d)] {
        loop {
            let r = sub(gw).raw("axp.index", json!({})).await;
            if r["error"]["code"] == -32001 {
                break;
            }
            assert!(r.get("error").is_none(), "{r}");
            assert!(
                revoked.elapsed() < Duration::from_secs(2),
                "replica {name} still accepts a token revoked {} ms ago",
                revoked.elapsed().as_millis()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    eprintln!("revocation refused on every replica {} ms after it was acknowledged", revoked.elapsed().as_millis());
    // The parent still works everywhere; a replica started now refuses the child from the start.
    on(&b, &s).ok("axp.index", json!({})).await;
    let e = c.replica("e", "15");
    assert_eq!(sub(&e).err("axp.index", json!({})).await.0, -32001);
}

/// A replica whose token root key differs from the one the live replicas use refuses to start,
/// naming the key file, rather than refuse every token they minted.
#[tokio::test]
async fn a_replica_with_another_token_key_refuses_to_start() {
    let Some(c) = Cluster::new() else { return };
    let _a = c.replica("a", "15");
    let other = c.tmp.path().join("other");
    let out = std::process::Command::new(axp())
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &c.url, "--state-dir"])
        .arg(&other)
        .arg("--workspace")
        .arg(&c.ws)
        .env("XDG_STATE_HOME", c.tmp.path().join("xdg"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("token root key") && err.contains("token-root.key"), "{err}");
    let _ = Path::new(&other);
}

/// Reads a YAML file of `deploy/` with PyYAML (`safe_load_all`, which refuses anything but plain
/// data) and returns its documents as JSON.
fn yaml_documents(path: &Path) -> Vec<Value> {
    let script = "import json, sys, yaml\n\
                  with open(sys.argv[1]) as f:\n    docs = [d for d in yaml.safe_load_all(f) if d is not None]\n\
                  print(json.dumps(docs))";
    // The test venv's Python, which pins PyYAML (tests/fixtures/requirements.txt).
    let out = std::process::Command::new(super::venv_bin("python"))
        .args(["-c", script])
        .arg(path)
        .output()
        .expect("the test venv's python with PyYAML reads the deploy examples");
    assert!(out.status.success(), "{} is not valid YAML: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Starts `axp` with the arguments and `axp.toml` a deploy example passes, on loopback and
/// this test's database instead of the example's network names, and expects it to serve.
fn starts_with(c: &Cluster, name: &str, args: &[String], toml: &str) {
    let dir = c.state(name);
    let config = c.tmp.path().join(format!("{name}.toml"));
    std::fs::write(&config, toml).unwrap();
    let mut args: Vec<String> = args.to_vec();
    let at = args.iter().position(|a| a == "--config").expect("the example passes --config");
    args[at + 1] = config.to_string_lossy().into_owned();
    assert_eq!(args[0], "serve");
    let mut builder = gateway().state(&dir).workspace(&c.ws).arg("--store").arg(c.url.as_str());
    for a in &args[1..] {
        builder = builder.arg(a.as_str());
    }
    // The example's operator token comes from its secret; here from the environment.
    let gw = builder.start_with_env(&[("AXP_OPERATOR_TOKEN", "an-operator-token-for-the-test")]);
    assert!(gw.url.starts_with("http://127.0.0.1:"), "{}", gw.url);
}

/// The deploy examples are valid YAML, say what the readers need (N replicas, the
/// readiness probe on /healthz, the secret with the database password and the shared token
/// key, a service), and the `axp.toml` and arguments they pass start a replica.
#[tokio::test]
async fn the_deploy_examples_are_valid_yaml_and_their_config_starts_a_replica() {
    let deploy = super::repo().join("deploy");
    let k8s = yaml_documents(&deploy.join("kubernetes/axp.yaml"));
    let kind = |k: &str| k8s.iter().find(|d| d["kind"] == k).unwrap_or_else(|| panic!("no {k} in the example"));
    let deployment = kind("Deployment");
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() >= 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/healthz");
    let secret = kind("Secret");
    for key in ["pg-password", "token-root.key", "operator-token"] {
        assert!(secret["stringData"][key].is_string(), "the secret holds {key}");
    }
    assert_eq!(kind("Service")["spec"]["selector"]["app"], "axp");
    let k8s_args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    let k8s_toml = kind("ConfigMap")["data"]["axp.toml"].as_str().unwrap().to_string();

    let compose = yaml_documents(&deploy.join("compose/compose.yaml"));
    let services = compose[0]["services"].as_object().unwrap();
    let replicas: Vec<&Value> = services.values().filter(|s| s["command"][0] == "serve").collect();
    assert!(replicas.len() >= 2, "the compose example runs several replicas");
    let compose_args: Vec<String> = serde_json::from_value(replicas[0]["command"].clone()).unwrap();
    let compose_toml = std::fs::read_to_string(deploy.join("compose/axp.toml")).unwrap();
    for toml in [&k8s_toml, &compose_toml] {
        assert!(toml.contains("${AXP_PG_PASSWORD}"), "the password comes from the environment: {toml}");
    }

    let Some(c) = Cluster::new() else { return };
    starts_with(&c, "k8s", &k8s_args, &k8s_toml);
    starts_with(&c, "compose", &compose_args, &compose_toml);
}

/// Captures one HTTP request on a loopback port and answers it with a JSON-RPC success, so a
/// CLI that signs an envelope hands the envelope over without it reaching any gateway.
async fn capture_one_request() -> (String, tokio::task::JoinHandle<Value>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/axp", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let body = loop {
            let mut chunk = [0u8; 8192];
            let n = sock.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the request ended early");
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if body.len() >= len {
                    break body[..len].to_string();
                }
            }
        };
        let request: Value = serde_json::from_str(&body).unwrap();
        let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"token_id": "x", "revoked": true, "already": false}})
            .to_string();
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
            answer.len()
        );
        sock.write_all(reply.as_bytes()).await.unwrap();
        request
    });
    (url, task)
}

/// An operator's signed envelope is single-use across replicas: replayed to another replica
/// that trusts the same operator key, after the first replica acted on it, it is refused as a
/// replay (each replica's own nonce book knows only its own envelopes).
#[tokio::test]
async fn an_operator_envelope_replayed_to_another_replica_is_refused() {
    let Some(c) = Cluster::new() else { return };
    let a = c.replica("a", "15");
    // b trusts the same `local` operator key as a (as replicas given one operator key would).
    std::fs::copy(a.state.join("operator.key"), c.state("b").join("operator.key")).unwrap();
    let b = c.replica("b", "15");
    let s = Rpc::open(&a.url, json!({})).await;
    let parent = s.session.clone().unwrap().1;
    let child = on(&a, &s).ok("cap.attenuate", json!({"cap_token": parent, "capabilities": ["tool(*)"]})).await;
    let child = child["cap_token"].as_str().unwrap().to_string();

    // The operator signs a revocation; the envelope is captured on its way.
    let (url, captured) = capture_one_request().await;
    let cli = tokio::task::spawn_blocking({
        let (child, state) = (child.clone(), c.state("a"));
        move || {
            std::process::Command::new(axp()).args(["revoke", &child, "--url", &url, "--state-dir"]).arg(state).output()
        }
    });
    let request = captured.await.unwrap();
    let out = cli.await.unwrap().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(request["method"], "cap.revoke");
    let params = request["params"].clone();

    // Delivered to a: accepted. Replayed to b: refused, whatever b's own nonce book says.
    let accepted = Rpc::new(&a.url).ok("cap.revoke", params.clone()).await;
    assert_eq!(accepted["revoked"], true, "{accepted}");
    let (code, err) = Rpc::new(&b.url).err("cap.revoke", params.clone()).await;
    assert_eq!(code, -32001, "{err}");
    assert!(err.to_string().contains("already used"), "{err}");
    // And to a again: refused too.
    assert_eq!(Rpc::new(&a.url).err("cap.revoke", params).await.0, -32001);
}

/// A loopback TCP forwarder between a replica and the database that can cut every connection
/// and refuse new ones (the database "stops" for that replica only) and forward again.
struct Cut {
    port: u16,
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Cut {
    async fn to(target: &str) -> Cut {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>> = std::sync::Arc::default();
        let (u, c, target) = (up.clone(), conns.clone(), target.to_string());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { return };
                if !u.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                let h = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                c.lock().unwrap().push(h);
            }
        });
        Cut { port, up, conns }
    }

    fn down(&self) {
        self.up.store(false, std::sync::atomic::Ordering::SeqCst);
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The database goes away under a running job (every connection of the replica cut, new ones
/// refused) and comes back: the job's output meanwhile is held back and appended once the
/// database answers, so its log is whole, dense and in order; a job started while it is away
/// is refused with an error that says why; new work is accepted again once it returns.
// Multi-threaded: the forwarder must run while the test thread waits for the gateway to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_loses_the_database_holds_output_back_refuses_new_jobs_and_catches_up() {
    let Some(c) = Cluster::new() else { return };
    let (head, rest) = c.url.split_once('@').unwrap();
    let (hostport, tail) = rest.split_once('/').unwrap();
    let cut = Cut::to(hostport).await;
    let url = format!("{head}@127.0.0.1:{}/{tail}", cut.port);
    let a = gateway()
        .state(&c.state("a"))
        .workspace(&c.ws)
        .arg("--store")
        .arg(url.as_str())
        .arg("--store-lease")
        .arg("60")
        .start();
    let mut s = Rpc::open(&a.url, json!({})).await;
    let job = s
        .ok("job.start", json!({"command": ["sh", "-c", "for i in $(seq 1 60); do echo l$i; sleep 0.05; done"]}))
        .await;
    let job = job["job_id"].as_str().unwrap().to_string();
    until_stdout(&mut s, &job, "l3\n").await;

    cut.down();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, refused) = s.err("job.start", json!({"command": ["true"]})).await;
    assert!(refused.to_string().contains("cannot be reached"), "{refused}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cut.restore();

    let events = s.events(&job, 0).await;
    let lines: String = (1..=60).map(|i| format!("l{i}\n")).collect();
    assert_eq!(stdout_of(&events), lines, "every line, in order, none lost");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"], i as u64, "dense");
    }
    let exit = events.last().unwrap();
    assert_eq!((exit["kind"].as_str(), exit["state"].as_str()), (Some("exit"), Some("exited")), "{exit}");
    assert_eq!(s.ok("job.status", json!({"job_id": job})).await["state"], "exited");
    let after = s.ok("job.start", json!({"command": ["echo", "after"]})).await;
    let after = s.events(after["job_id"].as_str().unwrap(), 0).await;
    assert_eq!(stdout_of(&after), "after\n");
}

/// `axp ARGS… --url URL --state-dir STATE`: the exit code and everything it printed.
fn operator_cli(args: &[&str], url: &str, state: &Path) -> (i32, String) {
    let out = std::process::Command::new(axp())
        .args(args)
        .arg("--url")
        .arg(url)
        .arg("--state-dir")
        .arg(state)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

/// The exit events in a job's log.
fn exits(events: &[Value]) -> Vec<&Value> {
    events.iter().filter(|e| e["kind"] == "exit").collect()
}

/// Calls parked on replica a are held by a alone — b, started after they parked, does not take
/// them — and an operator's decision sent to b reaches them: b takes the job over and runs it
/// there. An approval on a and a denial on b racing for one job: exactly one of them decides it.
/// When a is killed, once its lease runs out b adopts its last parked call, and approves it.
#[tokio::test]
async fn a_call_parked_on_one_replica_is_decided_once_from_any_replica_and_outlives_it() {
    let Some(c) = Cluster::new() else { return };
    let config = c.tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        "[session]\ncapabilities = [\"tool(*)\"]\n[approval]\nrequired = [\"files__run_command\"]\n",
    )
    .unwrap();
    let config = config.to_string_lossy().into_owned();
    let mut a = c.replica_with("a", "2", &["--config", &config]);
    let mut agent = Rpc::open(&a.url, json!({})).await;
    let mut parked = Vec::new();
    for name in ["one", "two", "three"] {
        let args = json!({"argv": ["sh", "-c", format!("echo {name} >> {name}.txt")]});
        let job = agent.ok("job.start", json!({"tool": "files__run_command", "arguments": args})).await;
        assert_eq!(job["state"], "awaiting_approval", "{job}");
        parked.push(job["job_id"].as_str().unwrap().to_string());
    }
    // b trusts the same `local` operator key as a, and starts after the calls parked.
    std::fs::copy(a.state.join("operator.key"), c.state("b").join("operator.key")).unwrap();
    let b = c.replica_with("b", "15", &["--config", &config]);
    let id_of = |gw: &Gw| std::fs::read_to_string(gw.state.join("replica-id")).unwrap().trim().to_string();
    let (a_id, b_id) = (id_of(&a), id_of(&b));
    let owned_by =
        |id: &str| c.count(&format!("SELECT count(*) FROM jobs WHERE state = 'awaiting_approval' AND owner = '{id}'"));
    assert_eq!((owned_by(&a_id), owned_by(&b_id)), (3, 0), "a holds its parked calls");
    let (code, out) = operator_cli(&["pending", "--json"], &b.url, &a.state);
    assert_eq!(code, 0, "{out}");
    for j in &parked {
        assert!(out.contains(j.as_str()), "every replica lists every pending call: {out}");
    }

    // Approved on b: b takes the job over from a and runs it, once.
    let (code, out) = operator_cli(&["approve", &parked[0]], &b.url, &a.state);
    assert_eq!(code, 0, "{out}");
    let events = agent.events(&parked[0], 0).await;
    assert_eq!(exits(&events).len(), 1, "{events:?}");
    assert_eq!(exits(&events)[0]["state"], "exited", "{events:?}");
    assert_eq!(std::fs::read_to_string(c.ws.join("one.txt")).unwrap(), "one\n");
    assert_eq!(c.count(&format!("SELECT count(*) FROM jobs WHERE id = '{}' AND owner = '{b_id}'", parked[0])), 1);
    let (code, out) = operator_cli(&["approve", &parked[0]], &a.url, &a.state);
    assert_ne!(code, 0, "a decided call cannot be approved again, on any replica: {out}");

    // An approval sent to a and a denial sent to b, at once: exactly one decides.
    let race = |args: Vec<String>, url: String, state: PathBuf| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            operator_cli(&args, &url, &state)
        })
    };
    let approve = race(vec!["approve".into(), parked[1].clone()], a.url.clone(), a.state.clone());
    let deny = race(
        vec!["deny".into(), parked[1].clone(), "--reason".into(), "racing".into()],
        b.url.clone(),
        a.state.clone(),
    );
    let (approved, denied) = (approve.await.unwrap(), deny.await.unwrap());
    assert!((approved.0 == 0) != (denied.0 == 0), "exactly one decision wins: approve {approved:?}, deny {denied:?}");
    let events = agent.events(&parked[1], 0).await;
    assert_eq!(exits(&events).len(), 1, "{events:?}");
    let ran = std::fs::read_to_string(c.ws.join("two.txt")).ok();
    if approved.0 == 0 {
        assert_eq!(
            (exits(&events)[0]["state"].as_str(), ran.as_deref()),
            (Some("exited"), Some("two\n")),
            "{events:?}"
        );
    } else {
        assert_eq!((exits(&events)[0]["state"].as_str(), ran), (Some("failed"), None), "{events:?}");
    }

    // a dies holding the last parked call; once its lease has run out, b holds it.
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Instant::now();
    while owned_by(&b_id) != 1 {
        assert!(killed.elapsed() < Duration::from_secs(30), "b did not adopt a's parked call within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("b adopted a's parked call {} ms after a was killed (lease 2 s)", killed.elapsed().as_millis());
    let mut on_b = on(&b, &agent);
    assert_eq!(on_b.ok("job.status", json!({"job_id": parked[2]})).await["state"], "awaiting_approval");
    let (code, out) = operator_cli(&["approve", &parked[2]], &b.url, &a.state);
    assert_eq!(code, 0, "{out}");
    let events = on_b.events(&parked[2], 0).await;
    assert_eq!(exits(&events).len(), 1, "{events:?}");
    assert_eq!(exits(&events)[0]["state"], "exited", "{events:?}");
    assert_eq!(std::fs::read_to_string(c.ws.join("three.txt")).unwrap(), "three\n");
}

/// A held-back change approved on replica a (`axp lint --approve` in a's state directory) is
/// recorded in the database, mirrored into b's lockfile, and enforced by b: when b's own server
/// makes the same change, b serves it at once instead of holding it back as a change of a tool
/// b pinned itself.
#[tokio::test]
async fn a_pin_approved_on_one_replica_is_enforced_by_another() {
    let Some(c) = Cluster::new() else { return };
    let python = super::need(super::repo().join(".venv-wrong/bin/python"));
    let server = super::repo().join("tests/fixtures/upgrading_server.py");
    let fleet = c.tmp.path().join("fleet.json");
    std::fs::write(&fleet, json!({"mcpServers": {"up": {"command": python, "args": [server]}}}).to_string()).unwrap();
    let fleet = fleet.to_string_lossy().into_owned();
    let a = c.replica_with("a", "15", &["--mcp-config", &fleet]);
    let b = c.replica_with("b", "15", &["--mcp-config", &fleet]);
    let (mut on_a, mut on_b) = (Rpc::new(&a.url), Rpc::new(&b.url));
    // Each replica starts its own server; its tools are listed once it has started.
    let mut first = Vec::new();
    for r in [&mut on_a, &mut on_b] {
        let t0 = Instant::now();
        let d = loop {
            let d = r.raw("axp.describe", json!({"name": "up__status"})).await;
            if d.get("error").is_none() {
                break d;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "the server's tool was not listed within 30 s: {d}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        first.push(d["result"]["description"].as_str().unwrap().to_string());
    }
    let before = first[0].clone();
    assert_eq!(first[1], before);
    let pinned = |needle: &str| {
        c.count(&format!(
            "SELECT count(*) FROM shared_files WHERE name = 'pins/axp.lock' AND convert_from(body, 'UTF8') LIKE '%{needle}%'"
        ))
    };
    let t0 = Instant::now();
    while pinned("up__status") != 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the first sighting was not pinned in the database");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // a's server changes its tool; a holds the change back, and the operator approves it there.
    on_a.ok("tools/call", json!({"name": "up__status", "arguments": {}})).await;
    loop {
        let line = a.stderr.recv_timeout(Duration::from_secs(20)).expect("no held-back warning within 20 s");
        if line.contains("until `axp lint --approve up__status") {
            break;
        }
    }
    let out = std::process::Command::new(axp())
        .args(["lint", "--approve", "up__status", "--state-dir"])
        .arg(&a.state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t0 = Instant::now();
    while pinned("uptime") != 1 {
        assert!(t0.elapsed() < Duration::from_secs(10), "the approval did not reach the database within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mirrored = loop {
        let text = std::fs::read_to_string(b.state.join("axp.lock")).unwrap_or_default();
        if text.contains("uptime") {
            break text;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "b's lockfile did not get the approval within 10 s: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("an approval on a reached b's lockfile {} ms after it was recorded", t0.elapsed().as_millis());
    assert!(mirrored.contains("up__status"), "{mirrored}");

    // b's own server makes the same change: b serves it, with no hold.
    on_b.ok("tools/call", json!({"name": "up__status", "arguments": {}})).await;
    let t0 = Instant::now();
    let after = loop {
        let d = on_b.ok("axp.describe", json!({"name": "up__status"})).await;
        if d["description"].as_str().unwrap() != before {
            break d;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "b still serves the old version 10 s on: {d}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(after["description"].as_str().unwrap().contains("uptime"), "{after}");
    assert!(!after["lint"].to_string().contains("AXP037"), "b enforces the approved pin: {after}");
}

/// A plugin installed in replica a's state directory is published through the database and
/// served by replica b too (its files copied into b's state directory, its digest checked when
/// b loads it); removed on a, it is gone from b.
#[tokio::test]
async fn a_plugin_installed_on_one_replica_is_served_by_another_and_removed_from_both() {
    let Some(c) = Cluster::new() else { return };
    let hello = super::repo().join("plugins/examples/dist/hello");
    assert!(hello.join("axp-plugin.toml").is_file(), "run plugins/build-examples.sh: {} is missing", hello.display());
    let a = c.replica_with("a", "15", &["--no-builtin"]);
    let b = c.replica_with("b", "15", &["--no-builtin"]);
    let provider = |args: &[&str]| {
        std::process::Command::new(axp()).arg("provider").args(args).arg("--state-dir").arg(&a.state).output().unwrap()
    };
    let names = |idx: &Value| -> Vec<String> {
        idx["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    let out = provider(&["add", hello.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut on_b = Rpc::new(&b.url);
    let t0 = Instant::now();
    loop {
        let idx = on_b.ok("axp.index", json!({"provider": "hello"})).await;
        if names(&idx).contains(&"hello__echo".to_string()) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "b does not serve the plugin a installed: {idx}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("a plugin installed on a was served by b {} ms later", t0.elapsed().as_millis());
    let r = on_b.ok("tools/call", json!({"name": "hello__echo", "arguments": {"message": "via b"}})).await;
    assert!(r["content"][0]["text"].as_str().unwrap_or_default().contains("via b"), "{r}");
    let listed =
        std::process::Command::new(axp()).args(["provider", "list", "--state-dir"]).arg(&b.state).output().unwrap();
    assert!(String::from_utf8_lossy(&listed.stdout).contains("hello"), "b's own lockfile lists it");

    let out = provider(&["remove", "hello"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t0 = Instant::now();
    loop {
        let idx = on_b.ok("axp.index", json!({"provider": "hello"})).await;
        if names(&idx).is_empty() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "b still serves a plugin removed on a: {idx}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        c.count("SELECT count(*) FROM shared_files WHERE name LIKE 'plugins/files/%'"),
        0,
        "its files are forgotten"
    );
}

/// A cluster of this test's own (`scripts/pg-cluster.sh` with a directory and a port of its
/// own), so the test may stop and start the server; removed when dropped.
struct PrivateCluster {
    dir: String,
}

impl PrivateCluster {
    fn script(&self, what: &str) -> String {
        let out = std::process::Command::new(super::repo().join("scripts/pg-cluster.sh"))
            .arg(what)
            .env("AXP_PG_DIR", &self.dir)
            .env_remove("AXP_PG_PORT")
            .output()
            .unwrap();
        assert!(out.status.success(), "pg-cluster.sh {what}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(super::repo().join("scripts/pg-cluster.sh"))
            .arg("stop")
            .env("AXP_PG_DIR", &self.dir)
            .output();
    }
}

/// The whole database server stopped (`pg_ctl stop -m fast`) and started again while two
/// replicas run jobs that keep writing and clients keep starting jobs on both: every event a
/// replica acknowledged is in the logs afterwards, dense and in order (what ran during the
/// outage held back and appended once the server is back), every job a client was told had
/// started ends with its whole output, and both replicas serve new work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_cluster_stopped_and_restarted_under_load_loses_no_acknowledged_event() {
    if pg_url().is_none() {
        return;
    }
    // Its own cluster, under /tmp where the server's user can reach it.
    let pg = PrivateCluster { dir: format!("/tmp/axp-pg-restart-{}", uuid_like()) };
    let url = pg.script("start");
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let start = |name: &str| {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let state = tmp.path().join(name);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&state).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(state.join("token-root.key"))
            .unwrap();
        std::io::Write::write_all(&mut f, format!("{KEY}\n").as_bytes()).unwrap();
        gateway().state(&state).workspace(&ws).arg("--store").arg(url.as_str()).arg("--store-lease").arg("60").start()
    };
    let a = start("a");
    let b = start("b");
    let s = Rpc::open(&a.url, json!({})).await;
    const LINES: usize = 150;
    let script = format!("for i in $(seq 1 {LINES}); do echo l$i; sleep 0.04; done");
    let mut long = Vec::new();
    for gw in [&a, &b] {
        let mut r = on(gw, &s);
        for _ in 0..3 {
            let j = r.ok("job.start", json!({"command": ["sh", "-c", script]})).await;
            long.push((gw.url.clone(), j["job_id"].as_str().unwrap().to_string()));
        }
    }
    for (url, job) in &long {
        let mut r = Rpc::new(url);
        r.session = s.session.clone();
        until_stdout(&mut r, job, "l3\n").await;
    }

    // Clients keep starting short jobs on both replicas throughout; each one acknowledged must
    // end whole.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut starters = Vec::new();
    for (n, gw) in [&a, &b].into_iter().enumerate() {
        let (mut r, stop) = (on(gw, &s), stop.clone());
        starters.push(tokio::spawn(async move {
            let (mut acked, mut refused) = (Vec::new(), 0usize);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                i += 1;
                let tag = format!("r{n}-{i}");
                let reply = r.raw("job.start", json!({"command": ["echo", tag]})).await;
                match reply["result"]["job_id"].as_str() {
                    Some(id) => acked.push((id.to_string(), tag)),
                    None => {
                        assert!(reply["error"]["message"].is_string(), "a refusal is an error with a reason: {reply}");
                        refused += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (acked, refused)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let halted = Instant::now();
    pg.script("halt");
    eprintln!("server stopped in {} ms", halted.elapsed().as_millis());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarted = Instant::now();
    pg.script("start");
    eprintln!("server down for {} ms", halted.elapsed().as_millis());

    // Both replicas take new work again.
    for gw in [&a, &b] {
        let mut r = on(gw, &s);
        loop {
            let reply = r.raw("job.start", json!({"command": ["echo", "back"]})).await;
            if let Some(id) = reply["result"]["job_id"].as_str() {
                assert_eq!(stdout_of(&r.events(id, 0).await), "back\n");
                break;
            }
            assert!(
                restarted.elapsed() < Duration::from_secs(30),
                "{} refuses work 30 s after the restart: {reply}",
                gw.url
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!("both replicas served again {} ms after the server started", restarted.elapsed().as_millis());
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut total = (0, 0);
    for h in starters {
        let (acked, refused) = h.await.unwrap();
        total = (total.0 + acked.len(), total.1 + refused);
        let mut r = Rpc::new(&a.url);
        r.session = s.session.clone();
        for (id, tag) in acked {
            let events = r.events(&id, 0).await;
            assert_eq!(stdout_of(&events), format!("{tag}\n"), "acknowledged job {id}: {events:?}");
            assert_eq!(exits(&events).len(), 1, "{events:?}");
        }
    }
    eprintln!("{} short jobs acknowledged and whole, {} refused while the server was away", total.0, total.1);
    assert!(total.1 > 0, "the server's absence was noticed: no start was refused");

    // What the replicas said about their jobs' logs, for a failure below.
    for gw in [&a, &b] {
        while let Ok(l) = gw.stderr.try_recv() {
            if l.contains("job log") || l.contains("held-back") || l.contains("holding this job") {
                eprintln!("{}: {l}", gw.url);
            }
        }
    }
    let lines: String = (1..=LINES).map(|i| format!("l{i}\n")).collect();
    for (url, job) in &long {
        // Read from the other replica than the one that ran it, too.
        for reader in [&a.url, &b.url] {
            let mut r = Rpc::new(reader);
            r.session = s.session.clone();
            let events = r.events(job, 0).await;
            assert_eq!(stdout_of(&events), lines, "job {job} of {url}, read on {reader}: every line, in order");
            for (i, e) in events.iter().enumerate() {
                assert_eq!(e["seq"], i as u64, "dense");
            }
            let exit = events.last().unwrap();
            assert_eq!((exit["kind"].as_str(), exit["state"].as_str()), (Some("exit"), Some("exited")), "{exit}");
        }
    }
}
