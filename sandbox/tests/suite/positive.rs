//! Allowed work still works: writing in the workspace, reading /usr, running the pyenv python3
//! and node, pipes, /tmp, stdio through the sandbox (as MCP stdio servers use it), exit codes and
//! signals, exact environment, PTYs when granted, and clean failures (125/127) when the sandbox
//! or the program cannot start.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use super::{Outcome, bin, finish, policy, run_cmd, sandboxed, signal_of, workspace};

fn ok(o: &Outcome) {
    assert_eq!(o.code(), Some(0), "expected success: {o:?}");
}

#[test]
fn writes_in_workspace_are_visible_on_host() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let file = ws.path().join("out.txt");
    let o = sandboxed(&p, &["sh", "-c", &format!("echo hello > {}", file.display())]);
    ok(&o);
    assert_eq!(std::fs::read_to_string(file).expect("read"), "hello\n");
}

#[test]
fn reads_usr() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let o = sandboxed(&p, &["sh", "-c", "ls /usr/bin | grep -x python3 && head -c 4 /usr/bin/env | od -c | head -1"]);
    ok(&o);
    assert!(o.stdout.contains("python3") && o.stdout.contains("E   L   F"), "{o:?}");
}

/// The pyenv install (`/root/.pyenv/versions/<v>`), exposed read-only as the gateway does for
/// interpreter directories; nothing else of /root is visible.
fn pyenv_python() -> PathBuf {
    let root = PathBuf::from("/root/.pyenv/versions");
    let version = std::fs::read_to_string("/root/.pyenv/version")
        .ok()
        .and_then(|v| v.lines().next().map(str::to_string))
        .filter(|v| root.join(v).join("bin/python3").exists())
        .or_else(|| {
            std::fs::read_dir(&root).ok()?.flatten().find_map(|e| {
                let v = e.file_name().to_string_lossy().into_owned();
                root.join(&v).join("bin/python3").exists().then_some(v)
            })
        })
        .expect("no pyenv python3 under /root/.pyenv/versions (install one with `pyenv install 3.11`)");
    root.join(version)
}

#[test]
fn runs_pyenv_python3_with_its_install_exposed_read_only() {
    let ws = workspace();
    let install = pyenv_python();
    let p = policy(ws.path()).fs_read(&install).build().expect("policy");
    let py = install.join("bin/python3");
    let o = sandboxed(
        &p,
        &[
            py.to_str().expect("utf8"),
            "-c",
            "import sys, json, os; print(json.dumps([sys.version_info[0], os.path.exists('/root/.pyenv/shims')]))",
        ],
    );
    ok(&o);
    assert_eq!(o.stdout.trim(), "[3, false]", "{o:?}");
}

#[test]
fn runs_node() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let o = sandboxed(&p, &["node", "-e", "console.log(6*7)"]);
    ok(&o);
    assert_eq!(o.stdout.trim(), "42");
}

#[test]
fn pipes_between_processes() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let o = sandboxed(&p, &["sh", "-c", "seq 1 1000 | sort -rn | head -1"]);
    ok(&o);
    assert_eq!(o.stdout.trim(), "1000");
}

#[test]
fn creates_files_in_private_tmp() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let marker = format!("axp-private-tmp-{}", std::process::id());
    let o = sandboxed(&p, &["sh", "-c", &format!("echo x > /tmp/{marker} && cat /tmp/{marker}")]);
    ok(&o);
    assert_eq!(o.stdout.trim(), "x");
    assert!(!PathBuf::from("/tmp").join(&marker).exists(), "sandbox /tmp leaked to the host");
}

#[test]
fn stdio_pipes_through_the_sandbox() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let mut cmd = axp_sandbox::command(&bin(), &p, &["cat".to_string()]).expect("command");
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"{\"jsonrpc\":\"2.0\"}\n").expect("write");
    drop(stdin);
    let o = finish(&mut child, 10);
    ok(&o);
    assert_eq!(o.stdout, "{\"jsonrpc\":\"2.0\"}\n");
}

#[test]
fn exit_code_propagates() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    assert_eq!(sandboxed(&p, &["sh", "-c", "exit 7"]).code(), Some(7));
}

#[test]
fn death_by_signal_propagates() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let o = sandboxed(&p, &["sh", "-c", "kill -TERM $$"]);
    assert_eq!(signal_of(&o), Some(libc::SIGTERM), "{o:?}");
}

#[test]
fn environment_is_exactly_the_policy() {
    let ws = workspace();
    let p = policy(ws.path()).clear_env().env("ONLY", "this").build().expect("policy");
    let o = sandboxed(&p, &["/usr/bin/env"]);
    ok(&o);
    assert_eq!(o.stdout, "ONLY=this\n");
}

#[test]
fn cwd_defaults_to_workspace() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let o = sandboxed(&p, &["pwd"]);
    ok(&o);
    assert_eq!(o.stdout.trim(), ws.path().to_str().expect("utf8"));
}

/// Spawns `script` under `p` and returns once it printed its first line (it is running).
fn spawn_ready(p: &axp_sandbox::Policy, script: &str) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut cmd = axp_sandbox::command(&bin(), p, &["sh".into(), "-c".into(), script.into()]).expect("cmd");
    cmd.stdout(Stdio::piped()).stderr(Stdio::null()).stdin(Stdio::null());
    let mut child = cmd.spawn().expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("first line");
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    // The reader drains the rest of the output in the background (dropping the handle detaches
    // it), so the child never blocks on a full pipe.
    drop(rest);
    (child, first)
}

#[test]
fn sigterm_to_exec_process_reaches_the_target() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let marker = ws.path().join("got-term");
    let script = format!("trap 'touch {}; exit 3' TERM; echo ready; while :; do sleep 0.05; done", marker.display());
    let (mut child, first) = spawn_ready(&p, &script);
    assert_eq!(first, "ready\n");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert!(marker.exists(), "the trap did not run");
}

#[test]
fn killing_the_exec_process_kills_the_whole_job() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let marker = ws.path().join("still-alive");
    let script = format!("echo ready; sleep 1; touch {}", marker.display());
    let (mut child, first) = spawn_ready(&p, &script);
    assert_eq!(first, "ready\n");
    child.kill().expect("SIGKILL the exec process");
    child.wait().expect("wait");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!marker.exists(), "the job survived the death of its exec process");
}

#[test]
fn pty_available_only_when_granted() {
    let ws = workspace();
    let code = "import os; m, s = os.openpty(); print(os.ttyname(s))";
    let with = policy(ws.path()).pty(true).build().expect("policy");
    let o = sandboxed(&with, &["python3", "-c", code]);
    ok(&o);
    assert!(o.stdout.starts_with("/dev/pts/"), "{o:?}");
    let without = policy(ws.path()).build().expect("policy");
    let o = sandboxed(&without, &["python3", "-c", code]);
    assert_eq!(o.code(), Some(1), "{o:?}");
    assert!(o.stderr.contains("No such file or directory"), "{o:?}");
}

#[test]
fn setup_failure_exits_125_with_a_reason() {
    let missing = PathBuf::from("/nonexistent/axp-workspace");
    let p = policy(&missing).build().expect("policy");
    let o = sandboxed(&p, &["true"]);
    assert_eq!(o.code(), Some(axp_sandbox::EXIT_SETUP), "{o:?}");
    assert!(o.stderr.starts_with("axp-sandbox: ") && o.stderr.contains("/nonexistent/axp-workspace"), "{o:?}");
}

#[test]
fn hand_built_policy_granting_root_is_refused_at_exec() {
    let ws = workspace();
    let mut p = policy(ws.path()).build().expect("policy");
    p.read_only.push(PathBuf::from("/"));
    let o = sandboxed(&p, &["true"]);
    assert_eq!(o.code(), Some(axp_sandbox::EXIT_SETUP), "{o:?}");
    assert!(o.stderr.contains("axp-sandbox: / cannot be granted"), "{o:?}");
}

#[test]
fn missing_program_exits_127() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let o = sandboxed(&p, &["no-such-program-axp"]);
    assert_eq!(o.code(), Some(axp_sandbox::EXIT_NOT_FOUND), "{o:?}");
    assert!(o.stderr.contains("axp-sandbox: cannot execute"), "{o:?}");
}

#[test]
fn policy_without_exec_process_refuses_to_run() {
    // The exec entry without a policy must refuse, never run the command unconfined.
    let mut cmd = std::process::Command::new(bin());
    cmd.args([axp_sandbox::EXEC_ARG, "--", "true"]).env_clear();
    let o = run_cmd(cmd, 10);
    assert_eq!(o.code(), Some(axp_sandbox::EXIT_SETUP), "{o:?}");
    assert!(o.stderr.contains("AXP_SANDBOX_POLICY is not set"), "{o:?}");
}

#[test]
fn granted_path_behind_a_symlinked_parent_is_exposed_at_the_named_path() {
    let real = workspace();
    std::fs::create_dir(real.path().join("ws")).expect("mkdir");
    let alias_dir = workspace();
    let alias = alias_dir.path().join("alias");
    std::os::unix::fs::symlink(real.path(), &alias).expect("symlink");
    let named = alias.join("ws");
    let p = policy(&named).build().expect("policy");
    let o = sandboxed(&p, &["sh", "-c", "pwd && echo hi > f"]);
    ok(&o);
    assert_eq!(o.stdout.trim(), named.to_str().expect("utf8"));
    assert!(real.path().join("ws/f").exists());
}

#[test]
fn attack_disk_exhaustion_in_workspace_hits_the_file_size_limit() {
    let ws = workspace();
    let p = policy(ws.path())
        .limits(axp_sandbox::Limits { file_size: Some(1 << 20), ..Default::default() })
        .build()
        .expect("policy");
    let o = sandboxed(&p, &["python3", "-c", "open('big','wb').write(b'x' * (4 << 20))"]);
    assert_eq!(o.code(), Some(1), "{o:?}");
    assert!(o.stderr.contains("[Errno 27] File too large"), "{o:?}");
}

#[test]
fn attack_cpu_burn_is_stopped_by_the_cpu_limit() {
    let ws = workspace();
    let p = policy(ws.path())
        .limits(axp_sandbox::Limits { cpu_secs: Some(1), ..Default::default() })
        .build()
        .expect("policy");
    let o = sandboxed(&p, &["python3", "-c", "while True: pass"]);
    assert_eq!(signal_of(&o), Some(libc::SIGXCPU), "{o:?}");
}
