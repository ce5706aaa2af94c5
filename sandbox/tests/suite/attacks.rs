//! The attack battery: every entry of `tests/attacks.json` is a real command run under the
//! sandbox that must fail for the stated reason (an errno message, an exit code, a file that
//! must not appear). Each attack is its own test, named after it; the unprivileged suite runs the
//! same data as an unprivileged user.
//!
//! `attacks.json` format (shared with the gateway's end-to-end tests): `name`, `story`, `argv`,
//! optional `setup` (`secret`, `secret_link`, `host_tcp`, `host_abstract`, `other_job`,
//! `inherited_fd`, `env_secret`, `workspace_ro`), and `expect` with optional `exit`,
//! `output_any` (one must appear in stdout+stderr), `output_absent` (none may appear) and
//! `file_absent_after` (`path`, `wait_ms`). Placeholders `{WORKSPACE}`, `{SECRET_FILE}`,
//! `{SECRET_VALUE}`, `{HOST_PID}`, `{HOST_TCP_PORT}`, `{ABSTRACT_NAME}`, `{OTHER_JOB_PID}`,
//! `{INHERITED_FD}` are substituted by the harness. No output may contain `axp-sandbox:`: the
//! sandbox itself must have started, so the failure is the attack's own.

use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
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
    _secret_dir: tempfile::TempDir,
    secret_file: PathBuf,
    secret_value: String,
    tcp: Option<TcpListener>,
    abstract_name: String,
    _abstract: Option<UnixListener>,
    other_job: Option<Child>,
}

impl Runner {
    fn command(&self, ws: &Path, ro: bool, argv: &[String]) -> Command {
        match self {
            Runner::Library => {
                let mut b = axp_sandbox::Policy::builder(ws);
                if !ro {
                    b = b.fs_write(ws);
                }
                let policy = b.build().expect("policy");
                axp_sandbox::command(&bin(), &policy, argv).expect("command")
            }
            Runner::Unprivileged { bin } => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                    .arg(bin)
                    .arg("run")
                    .arg("--workspace")
                    .arg(ws);
                if ro {
                    c.arg("--ro");
                }
                c.arg("--").args(argv);
                c.stdin(Stdio::null());
                c
            }
        }
    }
}

fn fixture(runner: &Runner, setup: &[&str]) -> Fixture {
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
    let tcp = setup.contains(&"host_tcp").then(|| TcpListener::bind("127.0.0.1:0").expect("host listener"));
    let abstract_name = format!("axp-test-{}-{n}", std::process::id());
    let abs = setup.contains(&"host_abstract").then(|| {
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).expect("addr");
        UnixListener::bind_addr(&addr).expect("abstract listener")
    });
    let other_job = setup.contains(&"other_job").then(|| {
        let other_ws = workspace();
        let mut c = runner.command(other_ws.path(), true, &["sleep".into(), "30".into()]);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        let child = c.spawn().expect("spawn other job");
        std::thread::sleep(Duration::from_millis(150));
        std::mem::forget(other_ws);
        child
    });
    Fixture { ws, _secret_dir: secret_dir, secret_file, secret_value, tcp, abstract_name, _abstract: abs, other_job }
}

fn subst(s: &str, f: &Fixture) -> String {
    let mut s = s
        .replace("{WORKSPACE}", &f.ws.path().to_string_lossy())
        .replace("{SECRET_FILE}", &f.secret_file.to_string_lossy())
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
    let mut f = fixture(runner, &setup);
    let argv: Vec<String> = attack["argv"]
        .as_array()
        .ok_or(format!("{name}: argv missing"))?
        .iter()
        .map(|v| subst(v.as_str().unwrap_or_default(), &f))
        .collect();
    let mut cmd = runner.command(f.ws.path(), setup.contains(&"workspace_ro"), &argv);
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
    if all.contains("axp-sandbox:") {
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
    if let Some(absent) = expect["output_absent"].as_array() {
        for a in absent {
            let a = subst(a.as_str().unwrap_or_default(), &f);
            if all.contains(&a) {
                return Err(format!("output leaked {a:?}\n{}", ctx()));
            }
        }
    }
    if let Some(fa) = expect.get("file_absent_after") {
        let path = subst(fa["path"].as_str().unwrap_or_default(), &f);
        std::thread::sleep(Duration::from_millis(fa["wait_ms"].as_u64().unwrap_or(1000)));
        if Path::new(&path).exists() {
            return Err(format!("{path} appeared: a process outlived its job\n{}", ctx()));
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
);
