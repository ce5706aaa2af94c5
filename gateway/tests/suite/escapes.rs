//! Escapes an agent with the default session profile (`tool(*)`, `proc.spawn`,
//! `fs.write(<workspace>)`) performed for real against the `axp` binary, each named after the
//! hole it pins. The holes sat in the layers that feed the sandbox (grant resolution, program
//! discovery, the egress sockets, the write audit, approvals, SSE replay), so each test drives
//! the gateway as an agent would and checks the host afterwards. Targets are scratch
//! directories standing in for `/etc`, so a regression writes nowhere that matters.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

/// A gateway over `ws`, with a `host` directory beside it (outside every grant) that holds a
/// marker file: the stand-in for a host directory such as `/etc`.
struct Scene {
    gw: Gw,
    ws: std::path::PathBuf,
    host: std::path::PathBuf,
    _tmp: tempfile::TempDir,
}

fn scene() -> Scene {
    scene_with("")
}

/// A scene whose gateway reads `config` (axp.toml text; `WS` stands for the workspace).
fn scene_with(config: &str) -> Scene {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let (ws, host) = (root.join("ws"), root.join("host"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("marker"), "host file").unwrap();
    let mut b = gateway().state(&root.join("state")).workspace(&ws);
    if !config.is_empty() {
        let file = root.join("axp.toml");
        std::fs::write(&file, config.replace("WS", &ws.to_string_lossy())).unwrap();
        b = b.arg("--config").arg(file.to_string_lossy());
    }
    Scene { gw: b.start(), ws, host, _tmp: tmp }
}

async fn run_job(s: &mut Rpc, params: Value) -> (String, Value) {
    let job = s.ok("job.start", params).await;
    let events = s.events(job["job_id"].as_str().unwrap(), 0).await;
    let out: String = events
        .iter()
        .filter(|e| e["kind"] == "stdout" || e["kind"] == "stderr")
        .map(|e| e["data"].as_str().unwrap_or_default())
        .collect();
    (out, exit_of(&events))
}

fn host_untouched(host: &Path) {
    let names: Vec<String> =
        std::fs::read_dir(host).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, vec!["marker".to_string()], "the host directory was written to");
    assert_eq!(std::fs::read_to_string(host.join("marker")).unwrap(), "host file");
}

/// The escape: a symlink in the workspace (`ws/etcl -> /etc`) and a token narrowed to
/// `fs.write(<ws>/etcl)`, which compared as text looks narrower than the workspace. Resolved, it
/// is the host directory: `cap.attenuate` refuses it, an offline attenuation carrying it is
/// refused at the next request, and no job ever mounts the host directory.
#[tokio::test]
async fn a_symlink_and_a_narrowed_grant_do_not_mount_a_host_directory() {
    let sc = scene();
    let mut agent = Rpc::open(&sc.gw.url, json!({})).await;
    std::os::unix::fs::symlink(&sc.host, sc.ws.join("etcl")).unwrap();
    let narrowed = json!(["tool(*)", "proc.spawn", format!("fs.write({}/etcl)", sc.ws.display())]);

    // Online attenuation names what the path resolves to.
    let (code, err) = agent.err("cap.attenuate", json!({"capabilities": narrowed})).await;
    assert_eq!(code, -32002, "{err}");
    assert!(err["data"]["reason"].as_str().unwrap().contains(&*sc.host.to_string_lossy()), "{err}");

    // Offline attenuation (the holder needs no gateway for it) is caught at use.
    let (session, token) = agent.session.clone().unwrap();
    let parent = axp_caps::Token::parse(&token).unwrap();
    let caps =
        axp_protocol::CapabilitySet::parse_all(&serde_json::from_value::<Vec<String>>(narrowed).unwrap()).unwrap();
    let child = axp_caps::attenuate(&parent, &caps, None).expect("as text the child is narrower");
    let mut sub = Rpc::new(&sc.gw.url);
    sub.session = Some((session, child.to_string()));
    let write = format!("echo pwned > {}/etcl/pwned", sc.ws.display());
    let (code, err) = sub.err("job.start", json!({"command": ["sh", "-c", write]})).await;
    assert_eq!(code, -32001, "{err}");
    host_untouched(&sc.host);

    // The full token's job writes through the symlink inside its own sandbox, where it points at
    // the sandbox's own directory, never the host's.
    let (_, exit) = run_job(&mut agent, json!({"command": ["sh", "-c", write]})).await;
    assert_ne!(exit["code"], 0, "{exit}");
    host_untouched(&sc.host);
}

/// A grant that was a real directory when the session was opened and has since been replaced
/// by a symlink (by another job of the same agent) is refused when a job's policy is compiled.
#[tokio::test]
async fn a_granted_directory_swapped_for_a_symlink_is_refused() {
    let sc = scene();
    let sub = sc.ws.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let mut narrow = Rpc::open(
        &sc.gw.url,
        json!({"capabilities": ["tool(*)", "proc.spawn", format!("fs.write({})", sub.display())]}),
    )
    .await;
    let (out, exit) = run_job(
        &mut narrow,
        json!({"command": ["sh", "-c", "echo ok > sub.txt && cat sub.txt"], "cwd": sub.to_string_lossy()}),
    )
    .await;
    assert_eq!((out.trim(), exit["code"].as_i64()), ("ok", Some(0)), "{exit}");

    // The swap, done by a job of a wider session of the same agent.
    let mut wide = Rpc::open(&sc.gw.url, json!({})).await;
    let swap = format!("rm -rf {0} && ln -s {1} {0}", sub.display(), sc.host.display());
    let (_, exit) = run_job(&mut wide, json!({"command": ["sh", "-c", swap]})).await;
    assert_eq!(exit["code"], 0, "{exit}");
    assert!(std::fs::symlink_metadata(&sub).unwrap().file_type().is_symlink());

    let write = format!("echo pwned > {}/pwned", sub.display());
    let (code, err) = narrow.err("job.start", json!({"command": ["sh", "-c", write]})).await;
    assert!(code == -32002 || code == -32001, "{err}");
    host_untouched(&sc.host);
}

/// The leak: code-mode found `python3` on a PATH the agent passed, followed that file's `#!`
/// line (any program named `env` counted as `/usr/bin/env`) and mounted the directory of
/// whatever it named, here the token root key. Now the interpreter comes from the gateway's own
/// PATH, discovery follows only executable interpreters, and nothing below the state directory
/// is ever mounted. And a token minted with a leaked key is held to the session's grants.
#[tokio::test]
async fn code_mode_discovery_cannot_mount_the_signing_keys_and_a_leaked_key_cannot_widen_a_session() {
    let sc = scene();
    let state = sc.gw.state.canonicalize().unwrap();
    let key_file = state.join("token-root.key");
    assert!(key_file.exists(), "the gateway keeps its root key at {}", key_file.display());
    let bin = sc.ws.join("x");
    std::fs::create_dir(&bin).unwrap();
    for (name, body) in [
        ("python3", format!("#!{}/env {}\n", bin.display(), key_file.display())),
        ("env", "#!/bin/sh\nexec /usr/bin/env \"$@\"\n".to_string()),
    ] {
        std::fs::write(bin.join(name), body).unwrap();
        std::fs::set_permissions(bin.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut agent = Rpc::open(&sc.gw.url, json!({})).await;
    // Inside, the state directory holds the job's own code-mode directory and nothing else.
    let probe = format!(
        "import os\nprint({key:?}, 'visible' if os.path.exists({key:?}) else 'absent')\nprint('state:', sorted(os.listdir({state:?})))\n",
        key = key_file.to_string_lossy(),
        state = state.to_string_lossy()
    );
    let params = json!({
        "code": {"language": "python", "source": probe},
        "env": {"PATH": format!("{}:/usr/bin:/bin", bin.display())},
    });
    let (out, exit) = run_job(&mut agent, params).await;
    assert_eq!(exit["code"], 0, "{exit} {out}");
    assert!(out.contains(&format!("{} absent", key_file.display())), "{out}");
    assert!(out.contains("state: ['codemode']"), "{out}");

    // With the key in hand an agent mints a token for its session with grants it never had.
    let key = axp_caps::load_root_key(&state).unwrap();
    let (session, _) = agent.session.clone().unwrap();
    let wide = axp_protocol::CapabilitySet::parse_all(&["tool(*)", "proc.spawn", "fs.write(/)"]).unwrap();
    let forged = axp_caps::Minter::new(key).mint(&session, &wide, u64::MAX / 2);
    let mut thief = Rpc::new(&sc.gw.url);
    thief.session = Some((session, forged.to_string()));
    let (code, err) = thief.err("job.start", json!({"command": ["true"]})).await;
    assert_eq!(code, -32001, "{err}");
    assert!(err["data"]["reason"].as_str().unwrap().contains("never granted"), "{err}");
}

/// The state directory, the egress directory and every socket's directory are private to the
/// gateway's user, and a job sees its own owner's socket alone: another session's socket (and
/// with it that session's allowlist, byte budget and audit attribution) does not exist inside,
/// and no attempt log is visible at all.
#[tokio::test]
async fn a_job_sees_only_its_own_egress_socket_and_the_state_is_private() {
    let sc = scene_with(
        "[session]\ncapabilities = [\"tool(*)\", \"proc.spawn\", \"fs.write(WS)\", \"net.connect(*.test)\"]\n",
    );
    let state = sc.gw.state.canonicalize().unwrap();
    let ws = sc.ws.display().to_string();
    let open =
        |host: &str| json!({"capabilities": ["proc.spawn", format!("fs.write({ws})"), format!("net.connect({host})")]});
    let mut a = Rpc::open(&sc.gw.url, open("a.test")).await;
    let mut b = Rpc::open(&sc.gw.url, open("b.test")).await;
    // Each session's first job starts its proxy.
    for s in [&mut a, &mut b] {
        let (_, exit) = run_job(s, json!({"command": ["true"]})).await;
        assert_eq!(exit["code"], 0, "{exit}");
    }
    let egress = state.join("egress");
    let dirs: Vec<std::path::PathBuf> = std::fs::read_dir(&egress)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("session-"))
        .collect();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    for d in [&state, &egress, &egress.join("logs")].into_iter().chain(&dirs) {
        let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} is {mode:o}", d.display());
    }
    for log in std::fs::read_dir(egress.join("logs")).unwrap().flatten() {
        let mode = log.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} is {mode:o}", log.path().display());
    }
    let socks: Vec<String> = dirs.iter().map(|d| d.join("p.sock").to_string_lossy().into_owned()).collect();
    let probe = format!(
        "for p in {0} {1} {2}; do if [ -e \"$p\" ]; then echo \"$p visible\"; else echo \"$p absent\"; fi; done",
        socks[0],
        socks[1],
        egress.join("logs").display()
    );
    let (out, _) = run_job(&mut a, json!({"command": ["sh", "-c", probe]})).await;
    let visible = out.lines().filter(|l| l.ends_with(" visible")).count();
    assert_eq!(visible, 1, "a job must see its own socket alone:\n{out}");
    assert!(out.contains(&format!("{} absent", egress.join("logs").display())), "{out}");
}

/// The write audit opened what a job left in its workspace with an unconfined `File::open`: a
/// FIFO blocked a gateway thread forever (the job stayed `running`), and a symlink made the
/// gateway write the SHA-256 of any host file into the audit log. Now it opens beneath the
/// workspace without following links, without blocking, and digests regular files only.
#[tokio::test]
async fn the_write_audit_neither_blocks_on_a_fifo_nor_digests_a_host_file_through_a_symlink() {
    let sc = scene();
    let secret = b"a host secret the audit must never hash";
    std::fs::write(sc.host.join("secret"), secret).unwrap();
    let secret_sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(secret))
    };
    let mut agent = Rpc::open(&sc.gw.url, json!({})).await;
    let script = format!("mkfifo fifo && ln -s {} link && echo data > plain", sc.host.join("secret").display());
    let job = agent.ok("job.start", json!({"command": ["sh", "-c", script]})).await;
    let id = job["job_id"].as_str().unwrap().to_string();
    let ended = tokio::time::timeout(Duration::from_secs(30), agent.events(&id, 0)).await;
    let events = ended.expect("the job never ended: the write audit blocked on the FIFO");
    assert_eq!(exit_of(&events)["code"], 0, "{events:?}");
    let audit = audit_json(&sc.gw.state, &["--kind", "file.write", "-n", "100"]);
    assert!(!audit.contains(&secret_sha), "the audit log holds the digest of a host file:\n{audit}");
    let records: Vec<Value> = audit.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let of = |name: &str| {
        records
            .iter()
            .find(|r| r["detail"]["path"].as_str().is_some_and(|p| p.ends_with(&format!("/{name}"))))
            .unwrap_or_else(|| panic!("no record of {name}: {records:#?}"))
            .clone()
    };
    assert!(of("plain")["detail"]["sha256"].is_string(), "{records:#?}");
    for special in ["fifo", "link"] {
        let r = of(special);
        assert!(r["detail"]["sha256"].is_null(), "{r}");
        assert_eq!(r["detail"]["type"], "special", "{r}");
    }
}

/// `[approval] required = ["files__run_command"]` did nothing against `job.start {command}`
/// under `proc.spawn`: the same command ran at once. Such a configuration is now refused with
/// a clear error, and the same rules with a profile without `proc.spawn` serve.
#[test]
fn approval_rules_that_proc_spawn_would_bypass_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let config = tmp.path().join("axp.toml");
    std::fs::write(&config, "[approval]\nrequired = [\"files__run_command\"]\n").unwrap();
    let out = std::process::Command::new(axp())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--state-dir")
        .arg(tmp.path().join("state"))
        .arg("--workspace")
        .arg(&ws)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("`files__run_command`") && err.contains("proc.spawn") && err.contains("hint:"), "{err}");
}

#[tokio::test]
async fn approval_rules_serve_when_no_session_can_spawn() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let config = tmp.path().join("axp.toml");
    std::fs::write(
        &config,
        "[session]\ncapabilities = [\"tool(*)\"]\n[approval]\nrequired = [\"files__run_command\"]\n",
    )
    .unwrap();
    let gw =
        gateway().state(&tmp.path().join("state")).workspace(&ws).arg("--config").arg(config.to_string_lossy()).start();
    let mut agent = Rpc::open(&gw.url, json!({})).await;
    let (code, err) = agent.err("job.start", json!({"command": ["touch", "bypass"]})).await;
    assert_eq!(code, -32002, "{err}");
    let job = agent.ok("job.start", json!({"tool": "files__run_command", "arguments": {"argv": ["touch", "x"]}})).await;
    assert_eq!(job["state"], "awaiting_approval", "{job}");
    assert!(!ws.join("bypass").exists() && !ws.join("x").exists());
}

/// SSE `job.attach` replay filled an unbounded channel as fast as the log could be read,
/// whatever the client read: a client that attaches to a large log and stops reading made the
/// gateway hold the whole log in memory. Now the replay waits for the client.
#[tokio::test]
async fn a_client_that_stops_reading_an_sse_replay_does_not_grow_the_gateway() {
    let gw = gateway().start();
    let mut s = Rpc::open(&gw.url, json!({})).await;
    // 192 MiB of output, fully written before anyone attaches.
    let (_, exit) =
        run_job(&mut s, json!({"command": ["sh", "-c", "head -c 201326592 /dev/zero | tr '\\0' 'x'"]})).await;
    assert_eq!(exit["code"], 0, "{exit}");
    let jobs = s.ok("job.list", json!({})).await;
    let job = jobs["jobs"][0]["job_id"].as_str().unwrap().to_string();
    let before = rss_kib(gw.child.id());
    let (session, token) = s.session.clone().unwrap();
    let resp = reqwest::Client::new()
        .post(&gw.url)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", session)
        .header("Axp-Capability", token)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "job.attach", "params": {"job_id": job, "from_seq": 0}}))
        .send()
        .await
        .unwrap();
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    // The client reads one chunk and then nothing, holding the stream open.
    let mut resp = resp;
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());
    let mut peak = before;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(rss_kib(gw.child.id()));
    }
    let grew_mib = peak.saturating_sub(before) / 1024;
    assert!(grew_mib < 48, "the gateway grew by {grew_mib} MiB for a client that stopped reading");
    drop(resp);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// `job.signal` on a PTY job signalled the terminal's foreground group as read from the host
/// side (`tcgetpgrp` on the master), a group the sandbox chooses. The sandbox makes a group the
/// foreground and lets it die; a host process then gets that number (forced here through
/// `ns_last_pid`, which needs root); the signal must not reach it. The gateway now signals only
/// its own child, and the sandbox's init picks the group inside the job's pid namespace.
#[tokio::test]
async fn a_pty_jobs_signal_never_reaches_a_host_process_that_reuses_its_dead_group_id() {
    if !std::fs::metadata("/proc/sys/kernel/ns_last_pid").is_ok_and(|m| !m.permissions().readonly())
        || effective_uid() != 0
    {
        eprintln!("skipped: forcing a pid's reuse needs root (ns_last_pid); CI runs as root");
        return;
    }
    let sc = scene_with("[session]\ncapabilities = [\"tool(*)\", \"proc.spawn\", \"fs.write(WS)\", \"pty.open\"]\n");
    let mut agent = Rpc::open(&sc.gw.url, json!({})).await;
    let marker = "2.718281";
    let script = format!(
        "import os, signal, time\nsignal.signal(signal.SIGTTOU, signal.SIG_IGN)\npid = os.fork()\nif pid == 0:\n    os.setpgid(0, 0)\n    os.execvp('sleep', ['sleep', '{marker}'])\nos.setpgid(pid, pid)\nos.tcsetpgrp(0, pid)\nos.waitpid(pid, 0)\nprint('fg-group-gone', flush=True)\ntime.sleep(60)\n"
    );
    let job =
        agent.ok("job.start", json!({"command": ["python3", "-c", script], "pty": {"rows": 24, "cols": 80}})).await;
    let job_id = job["job_id"].as_str().unwrap().to_string();
    // The host pid of the sandbox's foreground group leader.
    let wanted = format!("sleep\0{marker}\0");
    let mut host_pid = None;
    for _ in 0..100 {
        host_pid = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            (std::fs::read(e.path().join("cmdline")).ok()? == wanted.as_bytes()).then_some(pid)
        });
        if host_pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let h = host_pid.expect("the sandboxed group leader never ran");
    for _ in 0..200 {
        if !Path::new(&format!("/proc/{h}")).exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A host process takes the dead group's number and leads a group of that number.
    let mut victim = None;
    for _ in 0..50 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (h - 1).to_string()).unwrap();
        let mut c = std::os::unix::process::CommandExt::process_group(&mut std::process::Command::new("sleep"), 0)
            .arg("30")
            .spawn()
            .unwrap();
        if c.id() == h {
            victim = Some(c);
            break;
        }
        let _ = c.kill();
        let _ = c.wait();
    }
    let mut victim = victim.expect("could not make a host process reuse the dead group's pid");
    agent.ok("job.signal", json!({"job_id": job_id, "signal": "SIGTERM"})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let alive = victim.try_wait().unwrap().is_none();
    let _ = victim.kill();
    let _ = victim.wait();
    agent.ok("job.cancel", json!({"job_id": job_id})).await;
    assert!(alive, "job.signal killed host process {h}, which had reused the sandbox's dead group id");
}

fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2)?.parse().ok()))
        .unwrap_or(u32::MAX)
}
