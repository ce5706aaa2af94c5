//! The attack battery: every entry of `tests/attacks.json` is a real command run under the
//! sandbox that must fail for the stated reason (an errno message, an exit code, a file that
//! must not appear). Each attack is its own test, named after it; the unprivileged suite runs the
//! same data as an unprivileged user.
//!
//! `attacks.json` format (shared with the gateway's end-to-end tests): `name`, `story`, `argv`,
//! optional `setup` (`secret`, `secret_link`, `host_tcp`, `host_abstract`, `other_job`,
//! `inherited_fd`, `env_secret`, `workspace_ro`), and `expect` with optional `exit`,
//! `output_any` (one must appear in stdout+stderr), `output_all` (each must appear),
//! `output_absent` (none may appear), `file_absent_after` (`path`, `wait_ms`; the harness removes
//! the file if an attack did create it) and `refused` (see below). Placeholders `{WORKSPACE}`,
//! `{SECRET_FILE}`, `{SECRET_DIR}` (its directory), `{SECRET_DIR_NAME}`, `{SECRET_PARENT}` (the
//! directory's parent), `{SECRET_VALUE}`, `{HOST_PID}`, `{HOST_TCP_PORT}`, `{ABSTRACT_NAME}`,
//! `{OTHER_JOB_PID}`, `{INHERITED_FD}` and `{MARK}` (unique to the run) are substituted by the
//! harness.
//!
//! An attack may also stage the workspace and hand the sandbox a policy beyond the workspace
//! grant: `ws_symlinks` (name in the workspace → symlink target), `ws_files` (relative path in
//! the workspace → content; directories are made as needed), and `policy` with `read_only`,
//! `read_write` and `hide` lists, appended to the policy's fields as they are (not through the
//! builder, which would fold grants inside the workspace into it): the sandbox must be safe
//! whatever policy it is handed.
//!
//! No output may contain `axp-sandbox:`: the sandbox itself must have started, so the failure is
//! the attack's own. Except with `refused`: then the sandbox must refuse to start, with exit 125
//! and an `axp-sandbox:` line containing that text, so the command never ran.

use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::Value;

use super::{Outcome, bin, finish, workspace};

/// Descriptor number the `inherited_fd` setup leaks into the spawn.
const LEAKED_FD: i32 = 9;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// How the battery reaches the sandbox.
#[derive(Clone)]
pub(crate) enum Runner {
    /// `axp_sandbox::command()` from this (root) process, as the gateway does.
    Library,
    /// `setpriv --reuid=65534 … BIN run …` with a world-executable copy of the binary.
    Unprivileged { bin: PathBuf },
}

pub(crate) const NOBODY: u32 = 65534;

pub(crate) fn load() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attacks.json");
    let text = std::fs::read_to_string(&path).expect("read attacks.json");
    serde_json::from_str::<Vec<Value>>(&text).expect("attacks.json is a JSON array")
}

struct Fixture {
    ws: tempfile::TempDir,
    secret_dir: tempfile::TempDir,
    secret_file: PathBuf,
    mark: String,
    secret_value: String,
    tcp: Option<TcpListener>,
    abstract_name: String,
    _abstract: Option<UnixListener>,
    other_job: Option<Child>,
}

/// The workspace policy every attack starts from (read-only with `workspace_ro`).
fn base_policy(ws: &Path, ro: bool) -> axp_sandbox::Policy {
    let mut b = axp_sandbox::Policy::builder(ws);
    if !ro {
        b = b.fs_write(ws);
    }
    b.build().expect("policy")
}

impl Runner {
    fn command(&self, policy: &axp_sandbox::Policy, argv: &[String]) -> Command {
        match self {
            Runner::Library => axp_sandbox::command(&bin(), policy, argv).expect("command"),
            Runner::Unprivileged { bin } => {
                // What `axp_sandbox::command` builds, started through setpriv as uid 65534.
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(bin)
                    .arg(axp_sandbox::EXEC_ARG)
                    .arg("--")
                    .args(argv)
                    .env_clear()
                    .env(axp_sandbox::POLICY_ENV, policy.to_env_value())
                    .current_dir("/");
                c.stdin(Stdio::null());
                c
            }
        }
    }
}

fn fixture(runner: &Runner, setup: &[&str], attack: &Value) -> Fixture {
    let ws = workspace();
    if matches!(runner, Runner::Unprivileged { .. }) {
        let c = std::ffi::CString::new(ws.path().as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: chown on a NUL-terminated path we own.
        unsafe { libc::chown(c.as_ptr(), NOBODY, NOBODY) };
    }
    let secret_dir = tempfile::Builder::new().prefix("axp-secret-").tempdir().expect("tempdir");
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let secret_value = format!("axp-secret-{}-{n}-do-not-leak", std::process::id());
    let secret_file = secret_dir.path().join("secret.txt");
    std::fs::write(&secret_file, &secret_value).expect("write secret");
    if setup.contains(&"secret_link") {
        std::os::unix::fs::symlink(&secret_file, ws.path().join("link-to-secret")).expect("plant symlink");
    }
    let mark = format!("{}-{n}", std::process::id());
    let tcp = setup.contains(&"host_tcp").then(|| TcpListener::bind("127.0.0.1:0").expect("host listener"));
    let abstract_name = format!("axp-test-{}-{n}", std::process::id());
    let abs = setup.contains(&"host_abstract").then(|| {
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).expect("addr");
        UnixListener::bind_addr(&addr).expect("abstract listener")
    });
    let other_job = setup.contains(&"other_job").then(|| {
        let other_ws = workspace();
        let mut c = runner.command(&base_policy(other_ws.path(), true), &["sleep".into(), "30".into()]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let child = c.spawn().expect("spawn other job");
        std::thread::sleep(Duration::from_millis(150));
        std::mem::forget(other_ws);
        child
    });
    let f = Fixture { ws, secret_dir, secret_file, mark, secret_value, tcp, abstract_name, _abstract: abs, other_job };
    stage_workspace(&f, attack);
    f
}

/// Plants the attack's `ws_symlinks` and `ws_files` in the workspace, as a job with write access
/// to it could have done before this one started.
fn stage_workspace(f: &Fixture, attack: &Value) {
    for (name, target) in attack["ws_symlinks"].as_object().into_iter().flatten() {
        let target = subst(target.as_str().expect("symlink target"), f);
        std::os::unix::fs::symlink(target, f.ws.path().join(name)).expect("plant symlink");
    }
    for (rel, content) in attack["ws_files"].as_object().into_iter().flatten() {
        let path = f.ws.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, subst(content.as_str().expect("file content"), f)).expect("write file");
    }
}

/// The policy the attack runs under: the workspace grant, plus the attack's own `policy` lists
/// appended to the fields as they are.
fn attack_policy(f: &Fixture, attack: &Value, ro: bool) -> axp_sandbox::Policy {
    let mut p = base_policy(f.ws.path(), ro);
    let paths = |key: &str| -> Vec<PathBuf> {
        attack["policy"][key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| PathBuf::from(subst(v.as_str().expect("path"), f)))
            .collect()
    };
    p.read_only.extend(paths("read_only"));
    p.read_write.extend(paths("read_write"));
    p.hide.extend(paths("hide"));
    p
}

fn subst(s: &str, f: &Fixture) -> String {
    let dir = f.secret_dir.path();
    let mut s = s
        .replace("{WORKSPACE}", &f.ws.path().to_string_lossy())
        .replace("{SECRET_FILE}", &f.secret_file.to_string_lossy())
        .replace("{SECRET_DIR_NAME}", &String::from_utf8_lossy(dir.file_name().expect("name").as_bytes()))
        .replace("{SECRET_DIR}", &dir.to_string_lossy())
        .replace("{SECRET_PARENT}", &dir.parent().expect("parent").to_string_lossy())
        .replace("{MARK}", &f.mark)
        .replace("{SECRET_VALUE}", &f.secret_value)
        .replace("{HOST_PID}", &std::process::id().to_string())
        .replace("{ABSTRACT_NAME}", &f.abstract_name)
        .replace("{INHERITED_FD}", &LEAKED_FD.to_string());
    if let Some(t) = &f.tcp {
        let port = t.local_addr().expect("addr").port();
        s = s.replace("{HOST_TCP_PORT}", &port.to_string());
    }
    if let Some(c) = &f.other_job {
        s = s.replace("{OTHER_JOB_PID}", &c.id().to_string());
    }
    s
}

/// Runs one attack; `Err` says what went wrong (the attack succeeded or failed for another
/// reason).
pub(crate) fn run_attack(runner: &Runner, attack: &Value) -> Result<(), String> {
    let name = attack["name"].as_str().unwrap_or("?");
    let setup: Vec<&str> =
        attack["setup"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut f = fixture(runner, &setup, attack);
    let argv: Vec<String> = attack["argv"]
        .as_array()
        .ok_or(format!("{name}: argv missing"))?
        .iter()
        .map(|v| subst(v.as_str().unwrap_or_default(), &f))
        .collect();
    let policy = attack_policy(&f, attack, setup.contains(&"workspace_ro"));
    let mut cmd = runner.command(&policy, &argv);
    if setup.contains(&"env_secret") {
        cmd.env("AXP_TEST_SECRET", &f.secret_value);
    }
    let leaked = std::fs::File::open(&f.secret_file).expect("open secret");
    if setup.contains(&"inherited_fd") {
        let raw = leaked.as_raw_fd();
        // SAFETY: dup2 in the forked child only; it leaks the secret on purpose (no CLOEXEC).
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(raw, LEAKED_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("{name}: spawn: {e}"))?;
    let out: Outcome = finish(&mut child, 30);
    drop(leaked);
    let all = out.all();
    let ctx = || format!("{name}: status {:?}, output:\n{all}", out.status);
    let expect = &attack["expect"];
    // Checked first, so that an escape that did happen is still cleaned up and reported.
    if let Some(fa) = expect.get("file_absent_after") {
        let path = subst(fa["path"].as_str().unwrap_or_default(), &f);
        std::thread::sleep(Duration::from_millis(fa["wait_ms"].as_u64().unwrap_or(1000)));
        if Path::new(&path).exists() {
            let _ = std::fs::remove_file(&path);
            return Err(format!("{path} appeared (removed again): the attack wrote it\n{}", ctx()));
        }
    }
    if let Some(why) = expect["refused"].as_str() {
        let line = out.stderr.lines().find(|l| l.starts_with("axp-sandbox:"));
        if out.code() != Some(axp_sandbox::EXIT_SETUP) || !line.is_some_and(|l| l.contains(why)) {
            return Err(format!("expected the sandbox to refuse to start ({why:?})\n{}", ctx()));
        }
    } else if all.contains("axp-sandbox:") {
        return Err(format!("sandbox setup failed, not the attack\n{}", ctx()));
    }
    if let Some(code) = expect["exit"].as_i64().filter(|c| out.code() != Some(*c as i32)) {
        return Err(format!("expected exit {code}\n{}", ctx()));
    }
    if let Some(any) = expect["output_any"].as_array() {
        let wanted: Vec<String> = any.iter().map(|v| subst(v.as_str().unwrap_or_default(), &f)).collect();
        if !wanted.iter().any(|w| all.contains(w.as_str())) {
            return Err(format!("expected one of {wanted:?}\n{}", ctx()));
        }
    }
    for wanted in expect["output_all"].as_array().into_iter().flatten() {
        let w = subst(wanted.as_str().unwrap_or_default(), &f);
        if !all.contains(&w) {
            return Err(format!("expected {w:?} in the output\n{}", ctx()));
        }
    }
    if let Some(absent) = expect["output_absent"].as_array() {
        for a in absent {
            let a = subst(a.as_str().unwrap_or_default(), &f);
            if all.contains(&a) {
                return Err(format!("output leaked {a:?}\n{}", ctx()));
            }
        }
    }
    if let Some(mut other) = f.other_job.take() {
        let alive = other.try_wait().expect("try_wait").is_none();
        let _ = other.kill();
        let _ = other.wait();
        if !alive {
            return Err(format!("the other job died\n{}", ctx()));
        }
    }
    Ok(())
}

fn attack(name: &str) {
    let all = load();
    let a = all.iter().find(|a| a["name"] == name).unwrap_or_else(|| panic!("attack {name} is not in attacks.json"));
    if let Err(e) = run_attack(&Runner::Library, a) {
        panic!("attack {name} was not stopped as expected: {e}");
    }
}

macro_rules! attacks {
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() { attack(stringify!($name)); } )*

        #[test]
        fn every_attack_in_the_json_has_a_test() {
            let names = [$(stringify!($name)),*];
            let data = load();
            assert!(data.len() >= 30, "the battery must hold at least 30 attacks");
            for a in &data {
                let n = a["name"].as_str().expect("name");
                assert!(names.contains(&n), "attack {n} in attacks.json has no test");
            }
            assert_eq!(names.len(), data.len(), "tests and attacks.json disagree");
        }
    };
}

attacks!(
    read_etc_shadow,
    read_host_home,
    read_secret_outside_workspace,
    symlink_escape_planted_in_workspace,
    symlink_escape_created_inside,
    hardlink_escape_into_workspace,
    rename_system_file_into_workspace,
    rename_workspace_file_onto_usr,
    write_usr,
    write_etc_passwd,
    create_file_in_root,
    write_readonly_workspace,
    write_proc_sys,
    read_host_process_proc,
    read_init_environ,
    read_init_memory,
    ptrace_attach_init,
    ptrace_traceme_strace,
    process_vm_readv_init,
    io_uring_setup,
    x32_abi_syscall,
    mount_tmpfs,
    unshare_user_namespace,
    setns_network_namespace,
    pivot_root_from_inside,
    chroot_from_inside,
    raw_socket_icmp,
    packet_socket,
    netlink_socket,
    vsock_socket,
    connect_host_loopback_service,
    connect_external_tcp,
    udp_egress_external,
    connect_host_abstract_unix_socket,
    signal_gateway,
    signal_other_job,
    signal_sandbox_init,
    tiocsti_inject,
    tioclinux_ioctl,
    inherited_fd_read,
    environment_secret_leak,
    fork_bomb,
    memory_exhaustion,
    disk_exhaustion_tmp,
    process_outlives_job,
    keyctl_keyring,
    bpf_syscall,
    perf_event_open,
    userfaultfd,
    open_by_handle_at,
    kexec_load,
    init_module,
    read_dev_kmsg,
    grant_symlink_to_host_etc,
    grant_symlink_to_dir_outside_sandbox,
    grant_below_symlinked_parent,
    readonly_grant_symlink_final_component,
    hidden_state_dir_in_workspace,
    hidden_file_in_workspace,
    hidden_path_moved_away,
);

/// The race the no-follow mounts close: a granted workspace directory is swapped with a symlink
/// to a secret directory (atomically, `renameat2(RENAME_EXCHANGE)`, as fast as a host thread can)
/// while jobs granted that directory start. A sandbox that resolves the grant once and opens it,
/// or its mount point, again later can be caught between two states and mount the secret; one
/// that opens each side exactly once, never through a symlink, either binds the real directory
/// or refuses. Every job here must print the decoy or be refused, and both must happen.
#[test]
fn grant_swapped_for_a_symlink_while_the_sandbox_starts() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    let ws = workspace();
    let secret_dir = tempfile::Builder::new().prefix("axp-secret-").tempdir().expect("tempdir");
    let secret = format!("axp-race-secret-{}", std::process::id());
    std::fs::write(secret_dir.path().join("data.txt"), &secret).expect("write secret");
    let (x, y) = (ws.path().join("x"), ws.path().join("y"));
    std::fs::create_dir(&x).expect("mkdir");
    std::fs::write(x.join("data.txt"), "decoy").expect("write decoy");
    std::os::unix::fs::symlink(secret_dir.path(), &y).expect("symlink");

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let (xc, yc) = (cstring(&x), cstring(&y));
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: renameat2 on two NUL-terminated paths we own; RENAME_EXCHANGE (2).
                let r = unsafe {
                    libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, xc.as_ptr(), libc::AT_FDCWD, yc.as_ptr(), 2)
                };
                if r != 0 {
                    break;
                }
                swaps += 1;
            }
            swaps
        })
    };
    let mut policy = axp_sandbox::Policy::builder(ws.path()).build().expect("policy");
    policy.read_only.push(x.clone());
    let argv = vec!["cat".to_string(), x.join("data.txt").to_string_lossy().into_owned()];
    let (mut decoy, mut refused) = (0, 0);
    let (mut leaks, mut others) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        let mut cmd = axp_sandbox::command(&bin(), &policy, &argv).expect("command");
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(Stdio::null());
        let o = finish(&mut cmd.spawn().expect("spawn"), 30);
        let all = o.all();
        if all.contains(&secret) {
            leaks.push(all);
        } else if o.code() == Some(0) && o.stdout == "decoy" {
            decoy += 1;
        } else if o.code() == Some(axp_sandbox::EXIT_SETUP) && o.stderr.contains("is a symbolic link") {
            refused += 1;
        } else if !(o.code() == Some(1) && o.stderr.contains("No such file or directory")) {
            // `cat` itself can also lose the race inside (the name it opens was swapped since
            // the sandbox bound the directory there); anything else is unexpected.
            others.push(format!("{o:?}"));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = flipper.join().expect("flipper");
    assert!(leaks.is_empty(), "{} of 40 jobs read the secret through the swapped grant:\n{}", leaks.len(), leaks[0]);
    assert!(others.is_empty(), "unexpected outcomes:\n{}", others.join("\n"));
    assert!(decoy > 0 && refused > 0, "the race was not exercised: {decoy} decoys, {refused} refusals, {swaps} swaps");
}

fn cstring(p: &Path) -> std::ffi::CString {
    std::ffi::CString::new(p.as_os_str().as_bytes()).expect("path")
}
