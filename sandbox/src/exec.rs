//! The `__sandbox-exec` entry: the fresh, single-threaded process that turns a [`Policy`] into
//! kernel state and then `execve()`s the target. It never returns to its caller.
//!
//! Process layout (host view):
//!
//! ```text
//! gateway ─ A: exec process (this entry; unshares the namespaces, waits, relays signals/status)
//!             └ B: pid 1 of the new pid namespace (builds the root, brings up lo, reaps, sends
//!                 │    relayed signals to the job: the terminal's foreground group or C)
//!                 ├ D: egress forwarder (only with NetPolicy::Proxy; no Landlock, unreachable
//!                 │    by the target's signals and ptrace)
//!                 └ C: the target (setsid, rlimits, caps dropped, no_new_privs, Landlock,
//!                      seccomp, execve)
//! ```
//!
//! When B exits, the kernel kills every process left in the pid namespace, so nothing outlives
//! the job. Signals for the job go to A only, the caller's own child: A relays them to B, and B
//! picks the recipient inside the job's pid namespace, where no pid can name a process outside.
//! Every mandatory step that fails ends the process with [`EXIT_SETUP`] and one line on stderr
//! starting `axp-sandbox:`; the target never runs unconfined. This module must not be entered
//! from a multi-threaded process (it forks and expects a single thread).

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::landlock_rules;
use crate::policy::{NetPolicy, POLICY_ENV, Policy};
use crate::seccomp;

/// Exit code when the sandbox could not be set up (the target did not run).
pub const EXIT_SETUP: i32 = 125;
/// Exit code when the target could not be executed (permission, format).
pub const EXIT_CANNOT_EXEC: i32 = 126;
/// Exit code when the target was not found inside the sandbox.
pub const EXIT_NOT_FOUND: i32 = 127;

/// Hostname inside the UTS namespace.
const HOSTNAME: &str = "axp-sandbox";

/// Signals the exec process relays to init, and init into the job: the catchable termination,
/// job-control and terminal signals (see [`crate::signal_job`]).
pub const RELAYED_SIGNALS: [i32; 9] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
    libc::SIGALRM,
];

/// The real-time signal that stands for `SIGKILL`, which the exec process cannot catch (it
/// would die instead of relaying it): init sends the real `SIGKILL` into the job.
pub(crate) fn kill_carrier() -> i32 {
    libc::SIGRTMIN() + 1
}

/// The real-time signal that stands for `SIGSTOP`, which would stop the exec process itself.
pub(crate) fn stop_carrier() -> i32 {
    libc::SIGRTMIN() + 2
}

fn die(msg: &str) -> ! {
    let _ = writeln!(std::io::stderr(), "axp-sandbox: {msg}");
    // SAFETY: _exit ends the process without running atexit handlers, which is what a forked
    // child must do; in the exec process it is equivalent to exit.
    unsafe { libc::_exit(EXIT_SETUP) }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn cstr(p: impl AsRef<std::ffi::OsStr>) -> Result<CString, String> {
    CString::new(p.as_ref().as_bytes()).map_err(|_| "path contains a NUL byte".to_string())
}

/// Checks the return value of a libc call, turning -1 into a message naming the step.
fn check(r: libc::c_long, what: impl FnOnce() -> String) -> Result<libc::c_long, String> {
    if r < 0 { Err(format!("{}: {}", what(), errno())) } else { Ok(r) }
}

/// The entry the gateway's `main()` calls first (before any runtime starts) when
/// `argv[1] == "__sandbox-exec"`. `args` is the whole argv: `EXE __sandbox-exec [--] CMD ARGS…`;
/// the policy comes from the [`POLICY_ENV`] variable set by [`crate::command`].
pub fn exec_main(args: &[OsString]) -> ! {
    let rest = args.get(2..).unwrap_or(&[]);
    let rest = match rest.first() {
        Some(a) if a == "--" => &rest[1..],
        _ => rest,
    };
    if rest.is_empty() {
        die("no command given (usage: EXE __sandbox-exec -- CMD ARGS…)");
    }
    let Some(encoded) = std::env::var_os(POLICY_ENV) else {
        die(&format!("{POLICY_ENV} is not set; the policy must come from the gateway"));
    };
    let policy = match Policy::from_env_value(&encoded) {
        Ok(p) => p,
        Err(e) => die(&e.to_string()),
    };
    match supervise(&policy, rest) {
        Ok(never) => match never {},
        Err(e) => die(&e),
    }
}

enum Never {}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two new descriptors into the array, which we then own.
    check(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } as libc::c_long, || "pipe2".into())?;
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) })
}

fn signal_set(extra: &[i32]) -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and modify the local set only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in RELAYED_SIGNALS.iter().chain(&[kill_carrier(), stop_carrier()]).chain(extra) {
            libc::sigaddset(&mut set, *s);
        }
        set
    }
}

fn write_file(path: &str, data: &str) -> Result<(), String> {
    std::fs::write(path, data).map_err(|e| format!("writing {path}: {e}"))
}

/// Process A: unshare, map ids, fork init, then wait and relay signals and the exit status.
fn supervise(policy: &Policy, argv: &[OsString]) -> Result<Never, String> {
    // Die with the gateway. PDEATHSIG follows the parent *thread*; the gateway must spawn us
    // from a long-lived thread (see README, Limitations).
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // Nothing inherited above stderr survives into the sandbox.
    close_range(3, u32::MAX);

    // SAFETY: plain id getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let steps = crate::mounts::plan(policy)?;
    let cgroup = crate::cgroup::create(policy)?;

    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWCGROUP;
    // SAFETY: unshare changes only this single-threaded process's namespaces.
    check(unsafe { libc::unshare(flags) } as libc::c_long, || {
        "unshare(user, mount, pid, ipc, uts, net, cgroup) failed (user namespaces forbidden? \
         run `axp sandbox check`)"
            .into()
    })?;
    // Identity map: the job keeps its uid, so workspace files keep their owner.
    write_file("/proc/self/setgroups", "deny")?;
    write_file("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
    write_file("/proc/self/gid_map", &format!("{gid} {gid} 1"))?;

    let set = signal_set(&[libc::SIGCHLD]);
    // SAFETY: blocks signals for this thread; they are consumed with sigwaitinfo below.
    unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };

    let (alive_r, alive_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    // SAFETY: this process is single-threaded (fresh exec, no runtime), so the child may run
    // arbitrary Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", errno()));
    }
    if pid == 0 {
        drop(alive_w);
        drop(status_r);
        match init(policy, &steps, argv, alive_r, status_w) {
            Ok(never) => match never {},
            Err(e) => die(&e),
        }
    }
    drop(alive_r);
    drop(status_w);
    if let Some(Err(e)) = cgroup.as_ref().map(|p| crate::cgroup::place(p, pid)) {
        // SAFETY: killing the init we just forked; it is still waiting for the go byte.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        crate::cgroup::remove(cgroup);
        return Err(e);
    }
    // The go byte: init proceeds only once it is placed.
    let mut alive_w = std::fs::File::from(alive_w);
    alive_w.write_all(b"g").map_err(|e| format!("starting init: {e}"))?;
    // Carriers are relayed as they are, for B to decode.
    let raw = wait_relay(pid, &set, |sig| {
        // SAFETY: B is our child and is not reaped before wait_relay returns, so its pid cannot
        // name another process.
        unsafe { libc::kill(pid, sig) };
    });
    let mut buf = [0u8; 4];
    let mut f = std::fs::File::from(status_r);
    let target_status = match f.read(&mut buf) {
        Ok(4) => Some(i32::from_le_bytes(buf)),
        _ => None,
    };
    drop(alive_w);
    crate::cgroup::remove(cgroup);
    let status = target_status.unwrap_or(raw);
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // Reproduce the target's death by signal so the caller's ExitStatus says so.
        // SAFETY: resets one disposition, unblocks it and raises it on this process.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            let mut s: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut s);
            libc::sigaddset(&mut s, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &s, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig)
        }
    }
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { EXIT_SETUP };
    // SAFETY: ends the process with the target's code.
    unsafe { libc::_exit(code) }
}

/// Waits for `child` while handing every other blocked signal of `set` to `relay`.
/// Reaps every other child too (needed as pid 1). Returns the child's raw wait status.
fn wait_relay(child: libc::pid_t, set: &libc::sigset_t, relay: impl Fn(i32)) -> i32 {
    loop {
        // SAFETY: info is a zeroed local the kernel fills in.
        let sig = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::sigwaitinfo(set, &mut info)
        };
        if sig < 0 {
            continue;
        }
        if sig == libc::SIGCHLD {
            loop {
                let mut status = 0;
                // SAFETY: non-blocking reap of any child; status is a local.
                let p = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if p <= 0 {
                    break;
                }
                if p == child {
                    return status;
                }
            }
        } else {
            relay(sig);
        }
    }
}

/// Where init sends a relayed signal, and which signal: a carrier becomes the signal it stands
/// for. For a PTY job the recipient is the foreground process group of the target's terminal
/// (what ^C at a real terminal reaches), read from `tpgid` in `/proc/<target>/stat` of this pid
/// namespace; without a PTY, or when the target has no terminal, it is the target. Every pid here
/// is a pid of the job's own namespace, so the signal cannot reach a process outside it, even if
/// the group ended and its number was reused.
fn relay_into_job(target: libc::pid_t, pty: bool, sig: i32) {
    let real = if sig == kill_carrier() {
        libc::SIGKILL
    } else if sig == stop_carrier() {
        libc::SIGSTOP
    } else {
        sig
    };
    let dest = match pty.then(|| foreground_group(target)).flatten() {
        Some(group) => -group,
        None => target,
    };
    // SAFETY: kill with integer arguments; `dest` names the target or a group of its session.
    unsafe { libc::kill(dest, real) };
}

/// The foreground process group of `pid`'s controlling terminal, if it has one (`tpgid`, the
/// sixth field after the parenthesised command name, which may itself contain spaces and
/// parentheses). Group 1 would be init's own and is never returned.
fn foreground_group(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    let field = after.split(|&b| b == b' ').filter(|f| !f.is_empty()).nth(5)?;
    let tpgid: libc::pid_t = std::str::from_utf8(field).ok()?.parse().ok()?;
    (tpgid > 1).then_some(tpgid)
}

/// Process B, pid 1 of the new pid namespace.
fn init(
    policy: &Policy,
    steps: &[crate::mounts::Step],
    argv: &[OsString],
    alive_r: OwnedFd,
    status_w: OwnedFd,
) -> Result<Never, String> {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // /proc/1/* of this process becomes unreadable from inside.
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
    }
    // Wait for the go byte. End of file means the exec process died (possibly before
    // PDEATHSIG was armed), so nothing may start.
    let mut go = [0u8; 1];
    if !matches!(std::fs::File::from(alive_r).read(&mut go), Ok(1)) {
        // SAFETY: end this orphaned init.
        unsafe { libc::_exit(EXIT_SETUP) }
    }

    let root = crate::mounts::build_root(policy, steps)?;
    let host = HOSTNAME.as_bytes();
    // SAFETY: sethostname reads `host.len()` bytes from the slice.
    check(unsafe { libc::sethostname(host.as_ptr().cast(), host.len()) } as libc::c_long, || "sethostname".into())?;
    crate::net::loopback_up()?;
    if let NetPolicy::Proxy { unix_socket, listen_port } = &policy.net {
        crate::net::spawn_forwarder(unix_socket, *listen_port)?;
    }

    // Everything the target needs is prepared here, so the child only applies it.
    let env = policy.effective_env();
    let prog = resolve_program(&argv[0], &env, &policy.cwd);
    let c_argv: Vec<CString> =
        argv.iter().map(cstr).collect::<Result<_, _>>().map_err(|_| "argument contains a NUL byte".to_string())?;
    let c_env: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            CString::new(b).map_err(|_| "environment contains a NUL byte".to_string())
        })
        .collect::<Result<_, _>>()?;
    let filters = seccomp::filters()?;
    let (err_r, err_w) = pipe()?;

    let block = signal_set(&[libc::SIGCHLD]);
    // SAFETY: B is single-threaded (the forwarder is a separate process).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", errno()));
    }
    if pid == 0 {
        drop(err_r);
        drop(status_w);
        let (code, msg) = match target(policy, &root, &prog, &c_argv, &c_env, &filters, &err_w) {
            Ok(never) => match never {},
            Err(e) => e,
        };
        let mut f = std::fs::File::from(err_w);
        let mut bytes = vec![code as u8];
        bytes.extend_from_slice(msg.as_bytes());
        let _ = f.write_all(&bytes);
        // SAFETY: end the failed child without running any handler.
        unsafe { libc::_exit(code) }
    }
    drop(err_w);
    let mut report = Vec::new();
    let _ = std::fs::File::from(err_r).read_to_end(&mut report);
    if let Some((&code, msg)) = report.split_first() {
        // The target never ran: report why, reap it, and end with the matching code.
        let _ = writeln!(std::io::stderr(), "axp-sandbox: {}", String::from_utf8_lossy(msg));
        let mut st = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, &mut st, 0) };
        // SAFETY: ending pid 1 tears the namespace down.
        unsafe { libc::_exit(i32::from(code)) }
    }
    drop(root);
    let status = wait_relay(pid, &block, |sig| relay_into_job(pid, policy.allow_pty, sig));
    let mut f = std::fs::File::from(status_w);
    let _ = f.write_all(&status.to_le_bytes());
    // Exiting pid 1 makes the kernel SIGKILL everything left in the namespace.
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
    // SAFETY: ends pid 1.
    unsafe { libc::_exit(code) }
}

/// `PATH` lookup inside the new root, with the target's own `PATH`.
fn resolve_program(arg0: &OsString, env: &[(OsString, OsString)], cwd: &Path) -> PathBuf {
    if arg0.as_bytes().contains(&b'/') {
        return cwd.join(arg0);
    }
    let path =
        env.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.clone()).unwrap_or_else(|| crate::DEFAULT_PATH.into());
    for dir in std::env::split_paths(&path) {
        let cand = dir.join(arg0);
        if let Ok(c) = cstr(&cand) {
            // SAFETY: access reads the NUL-terminated path only.
            let ok = unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0;
            if ok && cand.is_file() {
                return cand;
            }
        }
    }
    PathBuf::from(arg0)
}

fn set_rlimit(res: libc::__rlimit_resource_t, v: Option<u64>, name: &str) -> Result<(), String> {
    let Some(v) = v else { return Ok(()) };
    // For CPU the hard limit is one second later, so the job first gets SIGXCPU (which it may
    // catch to clean up) and SIGKILL only after that.
    let hard = if res == libc::RLIMIT_CPU { v.saturating_add(1) } else { v };
    let lim = libc::rlimit { rlim_cur: v, rlim_max: hard };
    // SAFETY: setrlimit reads the local struct.
    check(unsafe { libc::setrlimit(res, &lim) } as libc::c_long, || format!("setrlimit({name}={v})"))?;
    Ok(())
}

/// Drops every capability the process holds in its user namespace, for good: bounding set,
/// ambient set, and (with `lock_securebits`) securebits so that uid 0 does not regain them on
/// execve — that step needs CAP_SETPCAP, so a helper that may run without it and can never
/// execve (`harden`) skips it. The effective, permitted and inheritable sets are emptied last.
pub(crate) fn drop_capabilities(lock_securebits: bool) -> Result<(), String> {
    // SAFETY: prctl/capset with integer arguments and local structs.
    unsafe {
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap) != 0 && *libc::__errno_location() == libc::EINVAL {
                break;
            }
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        if lock_securebits {
            // SECBIT_NOROOT | SECBIT_NO_SETUID_FIXUP | SECBIT_KEEP_CAPS off | NO_CAP_AMBIENT_RAISE,
            // each with its _LOCKED bit.
            let bits = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
            check(libc::prctl(libc::PR_SET_SECUREBITS, bits) as libc::c_long, || "prctl(PR_SET_SECUREBITS)".into())?;
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let d =
            [Data { effective: 0, permitted: 0, inheritable: 0 }, Data { effective: 0, permitted: 0, inheritable: 0 }];
        check(libc::syscall(libc::SYS_capset, &mut h as *mut Header, d.as_ptr()), || "capset(0)".into())?;
    }
    Ok(())
}

/// Closes every descriptor above stderr except those in `keep`.
fn close_all_but(keep: &[libc::c_int]) {
    let mut keep: Vec<u32> = keep.iter().filter_map(|&k| u32::try_from(k).ok()).filter(|&k| k > 2).collect();
    keep.sort_unstable();
    keep.dedup();
    let mut next = 3u32;
    for k in keep {
        if k > next {
            close_range(next, k - 1);
        }
        next = k + 1;
    }
    close_range(next, u32::MAX);
}

fn close_range(first: u32, last: u32) {
    // SAFETY: close_range only closes descriptors; the callers keep what they still use.
    unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
}

/// Process C: confine and execve. Errors carry the exit code to report.
#[allow(clippy::too_many_arguments)]
fn target(
    policy: &Policy,
    root: &crate::mounts::Root,
    prog: &Path,
    argv: &[CString],
    env: &[CString],
    filters: &[seccompiler::BpfProgram],
    err_w: &OwnedFd,
) -> Result<Never, (i32, String)> {
    let setup = |e: String| (EXIT_SETUP, e);
    // SAFETY: integer-argument calls on this process.
    unsafe {
        // A new session: no controlling terminal, so TIOCSTI has nothing to inject into.
        if libc::setsid() < 0 {
            return Err(setup(format!("setsid: {}", errno())));
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
    }
    // A PTY job: the terminal the gateway passed as stdin becomes this new session's
    // controlling terminal, so ^C, job control and SIGWINCH reach the foreground process group.
    // Only a terminal nobody else controls can be taken this way (argument 0: never steal).
    // SAFETY: isatty/ioctl on descriptor 0 with an integer argument.
    if policy.allow_pty && unsafe { libc::isatty(0) } == 1 && unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
        return Err(setup(format!("cannot make the terminal the job's controlling terminal: {}", errno())));
    }
    let cwd = cstr(&policy.cwd).map_err(setup)?;
    // SAFETY: chdir reads the NUL-terminated path.
    if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
        return Err(setup(format!("cannot enter working directory {}: {}", policy.cwd.display(), errno())));
    }
    let l = &policy.limits;
    set_rlimit(libc::RLIMIT_NPROC, l.procs, "RLIMIT_NPROC").map_err(setup)?;
    set_rlimit(libc::RLIMIT_DATA, l.memory, "RLIMIT_DATA").map_err(setup)?;
    set_rlimit(libc::RLIMIT_FSIZE, l.file_size, "RLIMIT_FSIZE").map_err(setup)?;
    set_rlimit(libc::RLIMIT_NOFILE, l.open_files, "RLIMIT_NOFILE").map_err(setup)?;
    set_rlimit(libc::RLIMIT_CPU, l.cpu_secs, "RLIMIT_CPU").map_err(setup)?;
    set_rlimit(libc::RLIMIT_CORE, Some(0), "RLIMIT_CORE").map_err(setup)?;
    if let Some(nice) = l.nice {
        // A lower priority, kept: `RLIMIT_NICE` 0 means no process of the tree may lower its
        // nice value again (capabilities are dropped below), whatever the host's limits allow.
        // SAFETY: setpriority with integer arguments, on this process.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice as libc::c_int) } != 0 {
            return Err(setup(format!("cannot set the nice value to {nice}: {}", errno())));
        }
        set_rlimit(libc::RLIMIT_NICE, Some(0), "RLIMIT_NICE").map_err(setup)?;
    }

    // Close everything above stderr except the error pipe and the mounted writable grants that
    // Landlock's rules go on (all close-on-exec).
    let mut keep: Vec<libc::c_int> = root.writable.iter().map(|f| f.as_raw_fd()).collect();
    keep.push(err_w.as_raw_fd());
    close_all_but(&keep);

    drop_capabilities(true).map_err(setup)?;
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(setup(format!("PR_SET_NO_NEW_PRIVS: {}", errno())));
    }
    landlock_rules::restrict(policy, &root.writable).map_err(setup)?;
    for f in filters {
        seccompiler::apply_filter(f).map_err(|e| setup(format!("seccomp: {e}")))?;
    }

    // Default dispositions and an empty mask: both survive execve otherwise (the Rust runtime
    // ignores SIGPIPE, and we blocked the forwarded signals).
    // SAFETY: resetting dispositions and the mask of this thread.
    unsafe {
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }

    let prog_c = cstr(prog).map_err(setup)?;
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut env_p: Vec<*const libc::c_char> = env.iter().map(|a| a.as_ptr()).collect();
    env_p.push(std::ptr::null());
    // SAFETY: all pointers point into CStrings that outlive the call; both arrays are
    // NULL-terminated.
    unsafe { libc::execve(prog_c.as_ptr(), argv_p.as_ptr(), env_p.as_ptr()) };
    let e = errno();
    let code = match e.raw_os_error() {
        Some(libc::ENOENT) => EXIT_NOT_FOUND,
        _ => EXIT_CANNOT_EXEC,
    };
    Err((code, format!("cannot execute {}: {e}", prog.display())))
}
