//! Allowed work still works: writing in the workspace, reading /usr, running the pyenv python3
//! and node, pipes, /tmp, stdio through the sandbox (as MCP stdio servers use it), exit codes and
//! signals (relayed into the job, to a PTY job's foreground group, and never outside its pid
//! namespace), exact environment, PTYs when granted, merged-/usr symlinks, grants below a hidden
//! path, and clean failures (125/127) when the sandbox or the program cannot start.

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

/// A grant's host path is opened without following any symlink, even where the path does not
/// cross one inside the sandbox (here the alias's directory exists only on the host): a symlink
/// there is refused, never resolved, so the grant cannot be redirected on the host either.
#[test]
fn granted_path_behind_a_symlinked_parent_is_refused() {
    let real = workspace();
    std::fs::create_dir(real.path().join("ws")).expect("mkdir");
    let alias_dir = workspace();
    let alias = alias_dir.path().join("alias");
    std::os::unix::fs::symlink(real.path(), &alias).expect("symlink");
    let named = alias.join("ws");
    let p = policy(&named).build().expect("policy");
    let o = sandboxed(&p, &["sh", "-c", "pwd && echo hi > f"]);
    assert_eq!(o.code(), Some(axp_sandbox::EXIT_SETUP), "{o:?}");
    let expected = format!("{} is a symbolic link on the host", alias.display());
    assert!(o.stderr.starts_with("axp-sandbox: ") && o.stderr.contains(&expected), "{o:?}");
    assert!(!real.path().join("ws/f").exists(), "the command ran");
    // The resolved path works.
    let p = policy(&real.path().join("ws")).build().expect("policy");
    ok(&sandboxed(&p, &["sh", "-c", "echo hi > f"]));
    assert!(real.path().join("ws/f").exists());
}

/// Merged /usr: the top-level symlinks are recreated inside as the same symlinks.
#[test]
fn system_symlinks_are_recreated() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let names = ["/bin", "/sbin", "/lib", "/lib64"];
    let host: Vec<String> = names
        .iter()
        .map(|n| std::fs::read_link(n).map(|t| t.to_string_lossy().into_owned()).unwrap_or_else(|_| "-".into()))
        .collect();
    let script = names.iter().map(|n| format!("readlink {n} || echo -")).collect::<Vec<_>>().join("; ");
    let o = sandboxed(&p, &["/usr/bin/sh", "-c", &script]);
    ok(&o);
    assert_eq!(o.stdout.lines().collect::<Vec<_>>(), host, "{o:?}");
}

/// A writable grant below a hidden path is bound on top of the mask and stays writable; the
/// rest of the hidden directory stays empty and read-only.
#[test]
fn writable_grant_below_a_hidden_path() {
    let ws = workspace();
    let state = ws.path().join("state");
    std::fs::create_dir_all(state.join("egress/owner")).expect("mkdir");
    std::fs::write(state.join("audit.log"), "audit").expect("write");
    let p = policy(ws.path()).hide(&state).fs_write(state.join("egress/owner")).build().expect("policy");
    let script = format!(
        "ls -A {s}; echo written > {s}/egress/owner/out; echo x > {s}/new || echo refused",
        s = state.display()
    );
    let o = sandboxed(&p, &["sh", "-c", &script]);
    ok(&o);
    assert!(o.stdout.starts_with("egress\n") && o.stdout.ends_with("refused\n"), "{o:?}");
    assert!(o.stderr.contains("Read-only file system"), "{o:?}");
    assert_eq!(std::fs::read_to_string(state.join("egress/owner/out")).expect("read"), "written\n");
    assert!(!state.join("new").exists());
    assert_eq!(std::fs::read_to_string(state.join("audit.log")).expect("read"), "audit");
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

/// A tree started at a lower CPU priority keeps it: no process of it can lower its nice value
/// again (the attack: a job that renices itself to take the CPUs back from the gateway).
#[test]
fn attack_a_niced_tree_cannot_take_its_priority_back() {
    let ws = workspace();
    let p =
        policy(ws.path()).limits(axp_sandbox::Limits { nice: Some(10), ..Default::default() }).build().expect("policy");
    let script = "import os\nprint(os.getpriority(os.PRIO_PROCESS, 0))\n\
                  try:\n    os.setpriority(os.PRIO_PROCESS, 0, 0)\n    print('reniced')\n\
                  except OSError as e:\n    print('refused', e.errno)\n\
                  print(os.getpriority(os.PRIO_PROCESS, 0))\n\
                  print(os.popen('cut -d\" \" -f19 /proc/self/stat').read().strip())";
    let o = sandboxed(&p, &["python3", "-c", script]);
    ok(&o);
    assert_eq!(o.stdout, format!("10\nrefused {}\n10\n10\n", libc::EACCES), "{o:?}");
}

/// The gateway's layout: its state directory inside the workspace is hidden, and the job's
/// egress directory below it (the proxy socket's) and its code-mode directory are bound on top
/// of the mask. The forwarder reaches the socket through the mask, and nothing else of the state
/// directory is visible.
#[test]
fn proxy_socket_and_code_mode_dir_below_a_hidden_state_dir() {
    use std::io::{Read, Write};
    let ws = workspace();
    let state = ws.path().join(".axp");
    let (egress, codemode) = (state.join("egress/owner"), state.join("codemode/job"));
    std::fs::create_dir_all(&egress).expect("mkdir");
    std::fs::create_dir_all(&codemode).expect("mkdir");
    std::fs::write(codemode.join("main.py"), "print('code-mode')").expect("write");
    std::fs::write(state.join("signing.key"), "state-secret").expect("write");
    let sock = egress.join("proxy.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 16];
            if let Ok(n) = s.read(&mut buf) {
                let _ = s.write_all(&[b"via-proxy:".as_slice(), &buf[..n]].concat());
            }
        }
    });
    let p = policy(ws.path()).hide(&state).fs_read(&codemode).net_proxy(&sock, 18080).build().expect("policy");
    let code = format!(
        "import socket,os,runpy\n\
         s=socket.create_connection(('127.0.0.1',18080),timeout=5); s.sendall(b'hi'); print(s.recv(64).decode())\n\
         runpy.run_path('{}')\n\
         print(sorted(os.listdir('{}')))",
        codemode.join("main.py").display(),
        state.display()
    );
    let o = sandboxed(&p, &["python3", "-c", &code]);
    ok(&o);
    assert_eq!(o.stdout, "via-proxy:hi\ncode-mode\n['codemode', 'egress']\n", "{o:?}");
}

/// A grant of a single file is bound at its own path (its mount point is an empty file created
/// without following any symlink); nothing else of its directory is visible.
#[test]
fn single_file_grant() {
    let ws = workspace();
    let dir = workspace();
    let file = dir.path().join("config.toml");
    std::fs::write(&file, "answer = 42").expect("write");
    std::fs::write(dir.path().join("other.txt"), "not granted").expect("write");
    let p = policy(ws.path()).fs_read(&file).build().expect("policy");
    let script = format!("cat {}; ls {}", file.display(), dir.path().display());
    let o = sandboxed(&p, &["sh", "-c", &script]);
    ok(&o);
    assert_eq!(o.stdout, "answer = 42config.toml\n", "{o:?}");
}

/// The fields after the command name in `/proc/<pid>/stat` (state, ppid, pgrp, session, tty,
/// tpgid, …), or `None` once the process is gone.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(s[s.rfind(')')? + 1..].split_whitespace().map(str::to_string).collect())
}

/// The host pid of the first descendant of `root` named `comm` that `accept`s.
fn find_descendant(root: u32, comm: &str, accept: impl Fn(u32) -> bool) -> Option<u32> {
    let mut parent = std::collections::HashMap::new();
    let mut names = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (s.find('('), s.rfind(')')) else { continue };
        let ppid = s[close + 1..].split_whitespace().nth(1).and_then(|v| v.parse::<u32>().ok());
        names.insert(pid, s[open + 1..close].to_string());
        parent.insert(pid, ppid.unwrap_or(0));
    }
    let is_below = |mut p: u32| {
        while let Some(&pp) = parent.get(&p) {
            if pp == root {
                return true;
            }
            p = pp;
        }
        false
    };
    names.iter().find(|(pid, n)| n.as_str() == comm && is_below(**pid) && accept(**pid)).map(|(pid, _)| *pid)
}

/// A process that is the foreground process group of its terminal (its `pgrp` is `tpgid`).
fn in_foreground(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.len() > 5 && f[2] == f[5] && f[5] != "-1")
}

/// Polls until `f` returns something, for at most `secs`.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pseudo-terminal pair: the master (read by the test) and the slave (the job's stdio).
fn openpty() -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut m, mut s) = (-1, -1);
    // SAFETY: openpty writes two new descriptors into the locals; no name, termios or size.
    let r = unsafe { libc::openpty(&mut m, &mut s, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just created and are owned by nobody else.
    unsafe { (std::fs::File::from_raw_fd(m), std::os::fd::OwnedFd::from_raw_fd(s)) }
}

/// Gives `cmd` the terminal as stdin, stdout and stderr.
fn on_terminal(cmd: &mut std::process::Command, slave: &std::os::fd::OwnedFd) {
    let io = || Stdio::from(slave.try_clone().expect("dup slave"));
    cmd.stdin(io()).stdout(io()).stderr(io());
}

/// Reads everything the terminal prints until every slave is closed (EIO on Linux).
fn drain(mut master: std::fs::File) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match std::io::Read::read(&mut master, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    })
}

/// Waits for `child` with a deadline, killing it after that.
fn wait_child(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the job did not end within {secs}s ({:?})", child.wait());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// ^C, as the gateway sends it: SIGINT to the exec process only. A shell with job control runs
/// `sleep` in its own foreground process group; the signal must reach that group (the `sleep`
/// ends with 130), not the shell, as at a real terminal. The shell traps SIGINT: a shell waiting
/// for a foreground command runs its trap only after the command ends, so a signal that reached
/// only the shell would leave `sleep` running. (dash re-raises SIGINT on itself when its
/// foreground job died of it, hence the trap's line.)
#[test]
fn pty_signal_reaches_the_foreground_process_group() {
    let ws = workspace();
    let p = policy(ws.path()).pty(true).build().expect("policy");
    let script = "trap 'echo trapped' INT; set -m; sleep 1000; echo \"rc=$?\"; echo shell-alive";
    let argv = ["sh".to_string(), "-c".into(), script.into()];
    let (master, slave) = openpty();
    let mut cmd = axp_sandbox::command(&bin(), &p, &argv).expect("command");
    on_terminal(&mut cmd, &slave);
    let mut child = cmd.spawn().expect("spawn");
    // The command holds copies of the slave until it is dropped; the output ends when the last
    // slave closes.
    drop((cmd, slave));
    let out = drain(master);
    let exec = child.id();
    wait_for(20, "sleep in the foreground", || find_descendant(exec, "sleep", in_foreground));
    axp_sandbox::signal_job(exec, libc::SIGINT).expect("signal the job");
    let status = wait_child(&mut child, 20);
    let out = out.join().expect("terminal output");
    assert_eq!(status.code(), Some(0), "{status:?}, output:\n{out}");
    assert!(out.contains("rc=130") && out.contains("shell-alive"), "output:\n{out}");
}

/// The foreground group is looked up and signalled inside the job's pid namespace only. Here the
/// job runs in a pid namespace of the test's own (`unshare --pid`), where a bystander owns a
/// process group with the very number the job's foreground group has inside: SIGINT relayed by
/// the exec process ends the job's `sleep` and leaves the bystander alone.
#[test]
fn pty_signal_never_leaves_the_job_pid_namespace() {
    let ws = workspace();
    let p = policy(ws.path()).pty(true).build().expect("policy");
    let (master, slave) = openpty();
    // Pids in the fresh namespace: 1 this script, 2 `true`, 3 the bystander (`setsid` makes it
    // the leader of group 3), 4 the exec process. Inside the job: 1 init, 2 the shell, 3 `sleep`
    // in its own foreground group 3.
    let script = r#"true & setsid sleep 1000 &
"$AXP_BIN" __sandbox-exec -- sh -c 'trap "echo trapped" INT; set -m; sleep 1000; echo "rc=$?"'
echo "job-exit=$?"
kill -0 3 && echo bystander-alive
kill 3"#;
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", script])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("AXP_BIN", bin())
        .env(axp_sandbox::POLICY_ENV, p.to_env_value());
    on_terminal(&mut cmd, &slave);
    let mut child = cmd.spawn().expect("spawn unshare");
    drop((cmd, slave));
    let out = drain(master);
    let unshare = child.id();
    // The job's sleep is three pid namespaces deep (host, the test's, the job's).
    let nspid = |pid: u32, key: &str| -> Option<Vec<String>> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = s.lines().find(|l| l.starts_with(key))?;
        Some(line[key.len()..].split_whitespace().map(str::to_string).collect())
    };
    let sleep = wait_for(20, "the job's sleep in the foreground", || {
        find_descendant(unshare, "sleep", |p| in_foreground(p) && nspid(p, "NSpid:").is_some_and(|v| v.len() == 3))
    });
    let bystander =
        find_descendant(unshare, "sleep", |p| nspid(p, "NSpid:").is_some_and(|v| v.len() == 2)).expect("bystander");
    let inner_group = nspid(sleep, "NSpgid:").and_then(|v| v.last().cloned());
    let bystander_group = nspid(bystander, "NSpgid:").and_then(|v| v.last().cloned());
    assert_eq!(inner_group, bystander_group, "the pids did not line up as planned; nothing was tested");
    // The exec process is the sleep's great-grandparent (sleep -> shell -> init -> exec).
    let up = |pid: u32| stat_fields(pid).and_then(|f| f[1].parse::<u32>().ok()).expect("ppid");
    let exec = up(up(up(sleep)));
    axp_sandbox::signal_job(exec, libc::SIGINT).expect("signal the job");
    let status = wait_child(&mut child, 20);
    let out = out.join().expect("terminal output");
    assert!(status.success(), "{status:?}, output:\n{out}");
    assert!(out.contains("rc=130") && out.contains("job-exit=0"), "output:\n{out}");
    assert!(out.contains("bystander-alive"), "the bystander got the job's signal; output:\n{out}");
}

/// SIGSTOP and SIGKILL cannot be caught, so they travel to the exec process as real-time
/// carriers and are turned back into themselves inside the job; SIGCONT is relayed as itself.
#[test]
fn stop_continue_and_kill_reach_the_target() {
    let ws = workspace();
    let p = policy(ws.path()).build().expect("policy");
    let (mut child, first) = spawn_ready(&p, "echo ready; while :; do sleep 0.05; done");
    assert_eq!(first, "ready\n");
    let exec = child.id();
    // The target leads its own session (setsid); the shell's short-lived forks do not.
    let leader = |pid: u32| stat_fields(pid).is_some_and(|f| f[3] == pid.to_string());
    let target = wait_for(10, "the target", || find_descendant(exec, "sh", leader));
    let state = |pid| stat_fields(pid).map(|f| f[0].clone());
    axp_sandbox::signal_job(exec, libc::SIGSTOP).expect("stop");
    wait_for(10, "the target to stop", || (state(target).as_deref() == Some("T")).then_some(()));
    assert!(child.try_wait().expect("try_wait").is_none(), "the exec process itself ended");
    axp_sandbox::signal_job(exec, libc::SIGCONT).expect("continue");
    wait_for(10, "the target to run again", || (state(target).as_deref() != Some("T")).then_some(()));
    axp_sandbox::signal_job(exec, libc::SIGKILL).expect("kill");
    let status = wait_child(&mut child, 10);
    assert_eq!(signal_of(&Outcome { status, stdout: String::new(), stderr: String::new() }), Some(libc::SIGKILL));
    assert!(axp_sandbox::signal_job(exec, libc::SIGSEGV).is_err(), "only relayed signals are accepted");
}
