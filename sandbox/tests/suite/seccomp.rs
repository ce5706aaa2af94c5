//! The seccomp allow list, tested inside the real sandbox. A Python probe makes every call that
//! must be refused, with raw `syscall()` through `ctypes`: each call runs in a child process of
//! its own, so a call that wrongly succeeded cannot change the ones after it. Every refusal
//! must come with its errno: `EPERM` for the calls refused on purpose (the whole of
//! [`axp_sandbox::denied_syscalls`], and the refused forms of the conditional calls), `ENOSYS`
//! for calls the list does not name. Other tests cover a foreign architecture (killed),
//! executing a program from a memfd (impossible), real programs under the list (python3, node,
//! git, a C compiler, threads, subprocesses, coreutils), and the gateway's self-confined
//! helpers, which `harden` puts under the same list. The probes run as root and again as uid
//! 65534.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Outcome, bin, policy, run_cmd, sandboxed, workspace};

const NOBODY: u32 = 65534;

/// One call of the probe: a label, the syscall number, its arguments as Python expressions
/// (integers are passed as C longs), and what the sandbox must answer: an errno name, or `ok`
/// when the call must pass the filter and succeed.
struct Call {
    label: &'static str,
    nr: i64,
    args: &'static [&'static str],
    expect: &'static str,
}

const fn call(label: &'static str, nr: i64, args: &'static [&'static str], expect: &'static str) -> Call {
    Call { label, nr, args, expect }
}

/// `statmount`, `listmount` and `open_tree_attr` are newer than libc's table (the same numbers
/// on every architecture); `cachestat` and `lsm_list_modules` too.
const SYS_STATMOUNT: i64 = 457;
const SYS_LISTMOUNT: i64 = 458;
const SYS_OPEN_TREE_ATTR: i64 = 467;
const SYS_CACHESTAT: i64 = 451;
const SYS_LSM_LIST_MODULES: i64 = 461;

/// A writable 64-byte buffer, for calls that take a pointer.
const BUF: &str = "ctypes.create_string_buffer(64)";

/// Every call refused outright, labelled with its name. The arguments are harmless where the
/// kernel would read them, and where possible they are ones the kernel would answer with
/// something other than `EPERM` (or success), so only the filter can explain an `EPERM`:
/// `modify_ldt` and `settimeofday` succeed, and `statmount`, `listmount`, `open_tree_attr`,
/// `clock_settime` and `adjtimex` fail with `EFAULT` on an unfiltered kernel.
const REFUSED: &[Call] = &[
    call("io_uring_setup", libc::SYS_io_uring_setup, &["8", BUF], "EPERM"),
    call("io_uring_enter", libc::SYS_io_uring_enter, &["-1", "0", "0", "0", "0", "0"], "EPERM"),
    call("io_uring_register", libc::SYS_io_uring_register, &["-1", "0", "0", "0"], "EPERM"),
    call("ptrace", libc::SYS_ptrace, &["2", "999999", "0", "0"], "EPERM"),
    call("process_vm_readv", libc::SYS_process_vm_readv, &["1", "0", "0", "0", "0", "0"], "EPERM"),
    call("process_vm_writev", libc::SYS_process_vm_writev, &["1", "0", "0", "0", "0", "0"], "EPERM"),
    call("pidfd_getfd", libc::SYS_pidfd_getfd, &["-1", "0", "0"], "EPERM"),
    call("kcmp", libc::SYS_kcmp, &["1", "1", "0", "0", "0"], "EPERM"),
    call("keyctl", libc::SYS_keyctl, &["0", "-3", "0"], "EPERM"),
    call("add_key", libc::SYS_add_key, &["0", "0", "0", "0", "-1"], "EPERM"),
    call("request_key", libc::SYS_request_key, &["0", "0", "0", "0"], "EPERM"),
    call("bpf", libc::SYS_bpf, &["0", "0", "0"], "EPERM"),
    call("perf_event_open", libc::SYS_perf_event_open, &["0", "0", "-1", "-1", "0"], "EPERM"),
    call("userfaultfd", libc::SYS_userfaultfd, &["0"], "EPERM"),
    call("modify_ldt", libc::SYS_modify_ldt, &["0", BUF, "0"], "EPERM"),
    call("mount", libc::SYS_mount, &["0", "0", "0", "0", "0"], "EPERM"),
    call("umount2", libc::SYS_umount2, &["0", "0"], "EPERM"),
    call("pivot_root", libc::SYS_pivot_root, &["0", "0"], "EPERM"),
    call("chroot", libc::SYS_chroot, &["0"], "EPERM"),
    call("unshare", libc::SYS_unshare, &["0x10000000"], "EPERM"),
    call("setns", libc::SYS_setns, &["-1", "0"], "EPERM"),
    call("open_tree", libc::SYS_open_tree, &["-100", "0", "0"], "EPERM"),
    call("open_tree_attr", SYS_OPEN_TREE_ATTR, &["-100", "0", "0", "0", "0"], "EPERM"),
    call("move_mount", libc::SYS_move_mount, &["-1", "0", "-1", "0", "0"], "EPERM"),
    call("fsopen", libc::SYS_fsopen, &["0", "0"], "EPERM"),
    call("fsconfig", libc::SYS_fsconfig, &["-1", "0", "0", "0", "0"], "EPERM"),
    call("fsmount", libc::SYS_fsmount, &["-1", "0", "0"], "EPERM"),
    call("fspick", libc::SYS_fspick, &["-100", "0", "0"], "EPERM"),
    call("mount_setattr", libc::SYS_mount_setattr, &["-100", "0", "0", "0", "0"], "EPERM"),
    call("statmount", SYS_STATMOUNT, &["0", "0", "0", "0"], "EPERM"),
    call("listmount", SYS_LISTMOUNT, &["0", "0", "0", "0"], "EPERM"),
    call("open_by_handle_at", libc::SYS_open_by_handle_at, &["0", "0", "0"], "EPERM"),
    call("name_to_handle_at", libc::SYS_name_to_handle_at, &["-100", "0", "0", "0", "0"], "EPERM"),
    call("fanotify_init", libc::SYS_fanotify_init, &["0", "0"], "EPERM"),
    call("fanotify_mark", libc::SYS_fanotify_mark, &["-1", "0", "0", "0", "0"], "EPERM"),
    call("kexec_load", libc::SYS_kexec_load, &["0", "0", "0", "0"], "EPERM"),
    call("kexec_file_load", libc::SYS_kexec_file_load, &["-1", "-1", "0", "0", "0"], "EPERM"),
    call("init_module", libc::SYS_init_module, &["0", "0", "0"], "EPERM"),
    call("finit_module", libc::SYS_finit_module, &["-1", "0", "0"], "EPERM"),
    call("delete_module", libc::SYS_delete_module, &["0", "0"], "EPERM"),
    call("swapon", libc::SYS_swapon, &["0", "0"], "EPERM"),
    call("swapoff", libc::SYS_swapoff, &["0"], "EPERM"),
    call("reboot", libc::SYS_reboot, &["0", "0", "0", "0"], "EPERM"),
    call("acct", libc::SYS_acct, &["0"], "EPERM"),
    call("quotactl", libc::SYS_quotactl, &["0", "0", "0", "0"], "EPERM"),
    call("quotactl_fd", libc::SYS_quotactl_fd, &["-1", "0", "0", "0"], "EPERM"),
    call("syslog", libc::SYS_syslog, &["10", "0", "0"], "EPERM"),
    call("iopl", libc::SYS_iopl, &["0"], "EPERM"),
    call("ioperm", libc::SYS_ioperm, &["0", "0", "0"], "EPERM"),
    call("vhangup", libc::SYS_vhangup, &[], "EPERM"),
    call("sethostname", libc::SYS_sethostname, &["b'x'", "1"], "EPERM"),
    call("setdomainname", libc::SYS_setdomainname, &["b'x'", "1"], "EPERM"),
    call("settimeofday", libc::SYS_settimeofday, &["0", "0"], "EPERM"),
    call("clock_settime", libc::SYS_clock_settime, &["0", "0"], "EPERM"),
    call("clock_adjtime", libc::SYS_clock_adjtime, &["0", "0"], "EPERM"),
    call("adjtimex", libc::SYS_adjtimex, &["0"], "EPERM"),
    call("lookup_dcookie", libc::SYS_lookup_dcookie, &["0", "0", "0"], "EPERM"),
];

/// The conditional calls in their refused and allowed forms, the x32 ABI, and calls the list
/// does not name (`ENOSYS`, whatever the kernel would have said). An allowed form answers `ok`
/// or the kernel's own error, which shows that it passed the filter.
const FORMS: &[Call] = &[
    // clone: namespace flags refused; plain fork-like clone passes; clone3 falls back.
    call("clone(CLONE_NEWNS)", libc::SYS_clone, &["0x00020000 | 17", "0", "0", "0", "0"], "EPERM"),
    call("clone(CLONE_NEWCGROUP)", libc::SYS_clone, &["0x02000000 | 17", "0", "0", "0", "0"], "EPERM"),
    call("clone(CLONE_NEWUTS)", libc::SYS_clone, &["0x04000000 | 17", "0", "0", "0", "0"], "EPERM"),
    call("clone(CLONE_NEWIPC)", libc::SYS_clone, &["0x08000000 | 17", "0", "0", "0", "0"], "EPERM"),
    call("clone(CLONE_NEWUSER)", libc::SYS_clone, &["0x10000000 | 17", "0", "0", "0", "0"], "EPERM"),
    call("clone(CLONE_NEWPID)", libc::SYS_clone, &["0x20000000 | 17", "0", "0", "0", "0"], "EPERM"),
    call("clone(CLONE_NEWNET)", libc::SYS_clone, &["0x40000000 | 17", "0", "0", "0", "0"], "EPERM"),
    call("clone(CLONE_NEWTIME)", libc::SYS_clone, &["0x80 | 17", "0", "0", "0", "0"], "EPERM"),
    call("clone(SIGCHLD)", libc::SYS_clone, &["17", "0", "0", "0", "0"], "ok"),
    call("clone3", libc::SYS_clone3, &[BUF, "64"], "ENOSYS"),
    // socket and socketpair: only unix, inet and inet6.
    call("socket(AF_UNIX)", libc::SYS_socket, &["1", "1", "0"], "ok"),
    call("socket(AF_INET)", libc::SYS_socket, &["2", "1", "0"], "ok"),
    call("socket(AF_INET6)", libc::SYS_socket, &["10", "2", "0"], "ok"),
    call("socket(AF_KEY)", libc::SYS_socket, &["15", "3", "2"], "EPERM"),
    call("socket(AF_NETLINK)", libc::SYS_socket, &["16", "3", "0"], "EPERM"),
    call("socket(AF_PACKET)", libc::SYS_socket, &["17", "3", "0"], "EPERM"),
    call("socket(AF_CAN)", libc::SYS_socket, &["29", "3", "1"], "EPERM"),
    call("socket(AF_TIPC)", libc::SYS_socket, &["30", "2", "0"], "EPERM"),
    call("socket(AF_BLUETOOTH)", libc::SYS_socket, &["31", "3", "0"], "EPERM"),
    call("socket(AF_ALG)", libc::SYS_socket, &["38", "5", "0"], "EPERM"),
    call("socket(AF_VSOCK)", libc::SYS_socket, &["40", "1", "0"], "EPERM"),
    call("socket(AF_XDP)", libc::SYS_socket, &["44", "3", "0"], "EPERM"),
    call("socketpair(AF_UNIX)", libc::SYS_socketpair, &["1", "1", "0", BUF], "ok"),
    call("socketpair(AF_INET)", libc::SYS_socketpair, &["2", "1", "0", BUF], "ENOTSUP"),
    call("socketpair(AF_NETLINK)", libc::SYS_socketpair, &["16", "3", "0", BUF], "EPERM"),
    call("socketpair(AF_TIPC)", libc::SYS_socketpair, &["30", "2", "0", BUF], "EPERM"),
    call("socketpair(AF_ALG)", libc::SYS_socketpair, &["38", "5", "0", BUF], "EPERM"),
    // ioctl: two terminal requests refused; the rest reach the kernel (stdin is /dev/null).
    call("ioctl(TIOCSTI)", libc::SYS_ioctl, &["0", "0x5412", "b'x'"], "EPERM"),
    call("ioctl(TIOCLINUX)", libc::SYS_ioctl, &["0", "0x541C", BUF], "EPERM"),
    call("ioctl(TCGETS)", libc::SYS_ioctl, &["0", "0x5401", BUF], "ENOTTY"),
    // personality: the query and PER_LINUX only.
    call("personality(query)", libc::SYS_personality, &["0xffffffff"], "ok"),
    call("personality(PER_LINUX)", libc::SYS_personality, &["0"], "ok"),
    call("personality(PER_LINUX32)", libc::SYS_personality, &["0x0008"], "EPERM"),
    call("personality(UNAME26)", libc::SYS_personality, &["0x0020000"], "EPERM"),
    call("personality(ADDR_NO_RANDOMIZE)", libc::SYS_personality, &["0x0040000"], "EPERM"),
    call("personality(READ_IMPLIES_EXEC)", libc::SYS_personality, &["0x0400000"], "EPERM"),
    // memfd_create: sealed against execution, or not at all.
    call("memfd_create(0)", libc::SYS_memfd_create, &["b'x'", "0"], "ENOSYS"),
    call("memfd_create(MFD_CLOEXEC|MFD_ALLOW_SEALING)", libc::SYS_memfd_create, &["b'x'", "3"], "ENOSYS"),
    call("memfd_create(MFD_EXEC)", libc::SYS_memfd_create, &["b'x'", "0x10"], "ENOSYS"),
    call("memfd_create(MFD_NOEXEC_SEAL|MFD_EXEC)", libc::SYS_memfd_create, &["b'x'", "0x18"], "ENOSYS"),
    call("memfd_create(MFD_NOEXEC_SEAL)", libc::SYS_memfd_create, &["b'x'", "0x8"], "ok"),
    call("memfd_create(MFD_NOEXEC_SEAL|MFD_CLOEXEC)", libc::SYS_memfd_create, &["b'x'", "0x9"], "ok"),
    // pidfd_open reaches only this pid namespace, whose pid 1 is the sandbox's init.
    call("pidfd_open(1)", libc::SYS_pidfd_open, &["1", "0"], "ok"),
    // The x32 ABI: getpid with bit 30 set.
    call("x32 getpid", 0x4000_0000 | libc::SYS_getpid, &[], "EPERM"),
    // Not on the list: ENOSYS, so runtimes take their fallback.
    call("io_setup", libc::SYS_io_setup, &["1", BUF], "ENOSYS"),
    call("mbind", libc::SYS_mbind, &["0", "0", "0", "0", "0", "0"], "ENOSYS"),
    call("set_mempolicy", libc::SYS_set_mempolicy, &["0", "0", "0"], "ENOSYS"),
    call("get_mempolicy", libc::SYS_get_mempolicy, &["0", "0", "0", "0", "0"], "ENOSYS"),
    call("vmsplice", libc::SYS_vmsplice, &["-1", "0", "0", "0"], "ENOSYS"),
    call("process_madvise", libc::SYS_process_madvise, &["-1", "0", "0", "0", "0"], "ENOSYS"),
    call("process_mrelease", libc::SYS_process_mrelease, &["-1", "0"], "ENOSYS"),
    call("get_robust_list", libc::SYS_get_robust_list, &["0", BUF, BUF], "ENOSYS"),
    call("remap_file_pages", libc::SYS_remap_file_pages, &["0", "0", "0", "0", "0"], "ENOSYS"),
    call("memfd_secret", libc::SYS_memfd_secret, &["0"], "ENOSYS"),
    call("uselib", libc::SYS_uselib, &["0"], "ENOSYS"),
    call("cachestat", SYS_CACHESTAT, &["-1", "0", "0", "0"], "ENOSYS"),
    call("lsm_list_modules", SYS_LSM_LIST_MODULES, &["0", "0", "0"], "ENOSYS"),
];

/// The probe: runs each call in a forked child and prints `label => result`.
const PROBE: &str = r#"
L = ctypes.c_long
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for label, nr, args in CASES:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        me = os.getpid()
        argv = [L(a) if isinstance(a, int) else a for a in args]
        ctypes.set_errno(0)
        ret = libc.syscall(L(nr), *argv)
        err = ctypes.get_errno()
        if os.getpid() != me:
            os._exit(0)  # the child of a clone that got through
        os.write(w, ('ok' if ret >= 0 else errno.errorcode.get(err, str(err))).encode())
        os._exit(0)
    os.close(w)
    out = b''
    while True:
        chunk = os.read(r, 64)
        if not chunk:
            break
        out += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        out = b'killed by signal %d' % os.WTERMSIG(status)
    print('%s => %s' % (label, out.decode()), flush=True)
"#;

fn probe_script(calls: &[&Call]) -> String {
    let cases: Vec<String> =
        calls.iter().map(|c| format!("({:?}, {}, [{}])", c.label, c.nr, c.args.join(", "))).collect();
    format!("import ctypes, errno, os\nCASES = [\n{}\n]\n{PROBE}", cases.join(",\n"))
}

/// A copy of the test binary that uid 65534 can execute, in a 0755 directory (kept for the
/// whole run, so concurrent tests never race on its removal).
fn unprivileged_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let dir = tempfile::Builder::new().prefix("axp-seccomp-bin-").tempdir().expect("tempdir").keep();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
        let dst = dir.join("axp-sandbox-test");
        std::fs::copy(bin(), &dst).expect("copy binary");
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).expect("chmod bin");
        // Another test thread may fork while the copy's write descriptor is open, and executing
        // the copy fails with ETXTBSY until that child execs. Wait it out.
        for _ in 0..100 {
            match Command::new(&dst).output() {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                _ => break,
            }
        }
        dst
    })
    .clone()
}

/// Who runs the sandbox: this (root) process through the library, as the gateway does, or uid
/// 65534 through `setpriv` and the test binary's `run`.
#[derive(Clone, Copy, Debug)]
enum As {
    Root,
    Nobody,
}

/// Runs `argv` in a fresh writable workspace, with `PATH` and `HOME` (the workspace) set.
fn run_as(who: As, ws: &Path, argv: &[&str]) -> Outcome {
    let path = "/usr/local/bin:/usr/bin:/bin";
    let home = ws.to_str().expect("utf8 workspace");
    match who {
        As::Root => {
            let p = policy(ws).env("PATH", path).env("HOME", home).build().expect("policy");
            sandboxed(&p, argv)
        }
        As::Nobody => {
            let c = std::ffi::CString::new(home).expect("path");
            // SAFETY: chown on a NUL-terminated path this test created.
            assert_eq!(unsafe { libc::chown(c.as_ptr(), NOBODY, NOBODY) }, 0, "chown workspace");
            let mut cmd = Command::new("setpriv");
            cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(unprivileged_bin())
                .args(["run", "--workspace", home, "--env", &format!("PATH={path}"), "--env", &format!("HOME={home}")])
                .arg("--")
                .args(argv)
                .stdin(std::process::Stdio::null());
            run_cmd(cmd, 60)
        }
    }
}

/// Runs the probe over `calls` and returns what each answered.
fn probe(who: As, calls: &[&Call]) -> BTreeMap<String, String> {
    let ws = workspace();
    let script = probe_script(calls);
    let o = run_as(who, ws.path(), &["/usr/bin/python3", "-c", &script]);
    assert_eq!(o.code(), Some(0), "the probe itself failed ({who:?}): {o:?}");
    assert!(!o.all().contains("axp-sandbox:"), "the sandbox did not start ({who:?}): {o:?}");
    o.stdout
        .lines()
        .filter_map(|l| l.split_once(" => "))
        .map(|(label, result)| (label.to_string(), result.to_string()))
        .collect()
}

/// Every call must answer as expected; all mismatches are reported together.
fn check_calls(who: As) {
    let calls: Vec<&Call> = REFUSED.iter().chain(FORMS).collect();
    let got = probe(who, &calls);
    let wrong: Vec<String> = calls
        .iter()
        .filter_map(|c| {
            let answer = got.get(c.label).map(String::as_str).unwrap_or("(no answer)");
            (answer != c.expect).then(|| format!("{}: expected {}, got {answer}", c.label, c.expect))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} calls answered wrongly ({who:?}):\n{}",
        wrong.len(),
        calls.len(),
        wrong.join("\n")
    );
}

#[test]
fn every_refused_call_is_probed() {
    let listed: BTreeSet<&str> = axp_sandbox::denied_syscalls().into_iter().collect();
    let probed: BTreeSet<&str> = REFUSED.iter().map(|c| c.label).collect();
    assert_eq!(listed, probed, "the probe and the sandbox's EPERM list disagree");
}

#[test]
fn refused_calls_fail_with_their_errno() {
    check_calls(As::Root);
}

#[test]
fn refused_calls_fail_with_their_errno_for_an_unprivileged_user() {
    check_calls(As::Nobody);
}

/// i386 `getpid` through `int 0x80`, from machine code the probe maps executable: the filters'
/// architecture check kills the process with SIGSYS.
const INT80: &str = r#"
import ctypes, mmap, os
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))  # mov eax, 20; int 0x80; ret
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
print('i386 getpid', f() == os.getpid(), flush=True)
"#;

#[test]
fn foreign_architecture_is_killed() {
    // On the host the same code works, which shows that the kernel runs i386 calls at all.
    let host = Command::new("/usr/bin/python3").args(["-c", INT80]).output().expect("run python3 on the host");
    let host_ok = String::from_utf8_lossy(&host.stdout).contains("i386 getpid True");
    let ws = workspace();
    let o = run_as(As::Root, ws.path(), &["/usr/bin/python3", "-c", INT80]);
    assert!(!o.stdout.contains("i386 getpid"), "an i386 system call returned inside the sandbox: {o:?}");
    if host_ok {
        assert_eq!(o.status.signal(), Some(libc::SIGSYS), "expected death by SIGSYS: {o:?}");
    } else {
        // Without IA32 emulation the instruction faults before seccomp sees it.
        assert!(o.status.signal().is_some(), "expected death by a signal: {o:?}");
    }
}

/// Fileless execution: write a program into a memfd and execute it by its /proc path (which no
/// filter can read) and with `fexecve` (`execveat` with `AT_EMPTY_PATH`). A memfd that could run
/// a program would print `FILELESS-EXEC-RAN`.
const MEMFD_EXEC: &str = r#"
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
prog = open('/bin/echo', 'rb').read()
def attempt(label, flags):
    fd = libc.syscall(ctypes.c_long(319), b'payload', ctypes.c_long(flags))
    if fd < 0:
        print(label, 'create', errno.errorcode[ctypes.get_errno()], flush=True)
        return
    os.write(fd, prog)
    try:
        os.fchmod(fd, 0o755)
        print(label, 'chmod ok', flush=True)
    except OSError as e:
        print(label, 'chmod', errno.errorcode[e.errno], flush=True)
    for how in ('path', 'fd'):
        pid = os.fork()
        if pid == 0:
            try:
                if how == 'path':
                    os.execv('/proc/self/fd/%d' % fd, ['echo', 'FILELESS-EXEC-RAN'])
                else:
                    os.execve(fd, ['echo', 'FILELESS-EXEC-RAN'], {})
            except OSError as e:
                print(label, 'exec', how, errno.errorcode[e.errno], flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
attempt('plain', 0)
attempt('exec', 0x10)
attempt('sealed', 0x8)
"#;

fn memfd_cannot_run_a_program(who: As) {
    let ws = workspace();
    let o = run_as(who, ws.path(), &["/usr/bin/python3", "-c", MEMFD_EXEC]);
    assert_eq!(o.code(), Some(0), "{o:?}");
    assert!(!o.all().contains("FILELESS-EXEC-RAN"), "a program ran from a memfd ({who:?}): {o:?}");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "plain create ENOSYS",
            "exec create ENOSYS",
            "sealed chmod EPERM",
            "sealed exec path EACCES",
            "sealed exec fd EACCES"
        ],
        "({who:?}) {o:?}"
    );
}

#[test]
fn attack_fileless_exec_from_memfd() {
    memfd_cannot_run_a_program(As::Root);
}

#[test]
fn attack_fileless_exec_from_memfd_as_unprivileged_user() {
    memfd_cannot_run_a_program(As::Nobody);
}

/// Real programs under the allow list: a shell pipeline and coreutils, python3 (a process pool,
/// threads, subprocesses, asyncio, a pidfd, a sealed memfd, sqlite), node (a worker thread, a
/// child process, a file watcher, an HTTP server and client over a unix socket), git in the
/// workspace, and a C program with threads built by the system compiler. Each prints one line
/// that the test compares.
const PROGRAMS: &str = r#"
set -e
cd "$HOME"
seq 1 1000 | sort -rn | head -3 | tr '\n' ' ' | sed 's/ $/\n/'
mkdir -p d/e && echo x > d/e/f && cp -a d d2 && tar cf d.tar d && echo "tar $(tar tf d.tar | wc -l) $(find . -name f | sort | tr '\n' ' ')"
ps -o comm= -p $$
python3 - <<'PY'
import asyncio, multiprocessing, os, select, sqlite3, subprocess, threading
def square(x):
    return x * x
if __name__ == '__main__':
    with multiprocessing.Pool(2) as pool:
        squares = sum(pool.map(square, range(10)))
    seen = []
    threads = [threading.Thread(target=seen.append, args=(i,)) for i in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    sub = subprocess.run(['sh', '-c', 'echo sub'], capture_output=True, text=True).stdout.strip()
    async def run_child():
        p = await asyncio.create_subprocess_exec('true')
        return await p.wait()
    rc = asyncio.run(run_child())
    child = subprocess.Popen(['sleep', '0.1'])
    pidfd = os.pidfd_open(child.pid)
    ready, _, _ = select.select([pidfd], [], [], 5)
    child.wait()
    memfd = os.memfd_create('buf', 0x8)
    os.write(memfd, b'abc'); os.lseek(memfd, 0, 0)
    db = sqlite3.connect('t.db'); db.execute('create table t(x)'); db.execute('insert into t values (1)'); db.commit()
    print('python', squares, len(seen), sub, rc, len(ready), os.read(memfd, 3).decode(), db.execute('select count(*) from t').fetchone()[0])
PY
node -e '
const { Worker } = require("worker_threads"), cp = require("child_process"), fs = require("fs"), http = require("http");
const results = [];
const done = () => { if (results.length === 3) console.log("node", results.sort().join(" ")); };
const sock = process.env.HOME + "/h.sock";
const watcher = fs.watch(process.env.HOME);
new Worker("require(\"worker_threads\").parentPort.postMessage(\"worker\")", { eval: true })
  .on("message", m => { results.push(m); done(); });
results.push(cp.execFileSync("sh", ["-c", "echo child"]).toString().trim());
const server = http.createServer((q, r) => r.end("http")).listen(sock, () => {
  http.get({ socketPath: sock, path: "/" }, r => {
    let body = ""; r.on("data", d => body += d);
    r.on("end", () => { results.push(body); server.close(); watcher.close(); done(); });
  });
});
'
git init -q repo && cd repo && echo a > a && git add a && git -c user.email=a@example.invalid -c user.name=a commit -qm first && echo "git $(git log --format=%s) $(git status --porcelain | wc -l)" && cd ..
cat > t.c <<'C'
#include <pthread.h>
#include <stdio.h>
static void *work(void *arg) { return arg; }
int main(void) {
    pthread_t t[4];
    long sum = 0;
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, work, (void *)i);
    for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); sum += (long)r; }
    printf("cc threads %ld\n", sum);
    return 0;
}
C
cc -O1 -pthread t.c -o t && ./t
"#;

fn real_programs_work(who: As) {
    let ws = workspace();
    let o = run_as(who, ws.path(), &["sh", "-c", PROGRAMS]);
    assert_eq!(o.code(), Some(0), "({who:?}) {o:?}");
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "1000 999 998",
            "tar 3 ./d/e/f ./d2/e/f ",
            "sh",
            "python 285 8 sub 0 1 abc 1",
            "node child http worker",
            "git first 0",
            "cc threads 6",
        ],
        "({who:?}) {o:?}"
    );
}

#[test]
fn real_programs_work_under_the_allow_list() {
    real_programs_work(As::Root);
}

#[test]
fn real_programs_work_under_the_allow_list_as_unprivileged_user() {
    real_programs_work(As::Nobody);
}

/// The gateway's self-confined helpers (the egress proxy) run under the same allow list through
/// `harden::confine`. This test runs [`harden_child`] in a child process of this test binary:
/// it confines itself, then does what the proxy does (threads, a unix listener in its own
/// directory, an outgoing TCP connection, epoll, splice through a pipe, randomness), and must
/// still be refused `execve`, a denied call and an unknown one.
#[test]
fn helper_confined_by_harden_keeps_working() {
    use std::io::{Read, Write};
    let dir = tempfile::Builder::new().prefix("axp-harden-").tempdir().expect("tempdir");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("loopback listener");
    let port = listener.local_addr().expect("addr").port();
    let upstream = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).expect("read");
        s.write_all(b"pong!").expect("write");
        buf
    });
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--ignored", "--exact", "suite::seccomp::harden_child", "--nocapture", "--test-threads=1"])
        .env("AXP_HARDEN_CHILD_DIR", dir.path())
        .env("AXP_HARDEN_CHILD_PORT", port.to_string());
    let o = run_cmd(cmd, 60);
    assert_eq!(o.code(), Some(0), "{o:?}");
    assert_eq!(&upstream.join().expect("upstream"), b"ping!");
    // libtest prints the test's name on the same line, before the report.
    let line =
        o.stdout.lines().find_map(|l| l.find("HARDEN ").map(|i| &l[i..])).unwrap_or_else(|| panic!("no report: {o:?}"));
    assert_eq!(
        line,
        "HARDEN seccomp=on threads=6 unix=echo tcp=pong! epoll=1 splice=5 random=16 exec=EPERM ptrace=EPERM io_setup=ENOSYS",
        "{o:?}"
    );
}

fn errno_name(ret: libc::c_long) -> &'static str {
    if ret >= 0 {
        return "ok";
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM) => "EPERM",
        Some(libc::ENOSYS) => "ENOSYS",
        Some(libc::EACCES) => "EACCES",
        _ => "other",
    }
}

/// The child half of [`helper_confined_by_harden_keeps_working`]; it confines the process it
/// runs in, so it only runs when that test starts it.
#[test]
#[ignore = "runs only as the child process of helper_confined_by_harden_keeps_working"]
fn harden_child() {
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    let dir = PathBuf::from(std::env::var_os("AXP_HARDEN_CHILD_DIR").expect("started by the parent test"));
    let port: u16 = std::env::var("AXP_HARDEN_CHILD_PORT").expect("port").parse().expect("port number");
    let policy = axp_sandbox::harden::HelperPolicy { write_dirs: vec![dir.clone()], read_paths: Vec::new() };
    let confinement = axp_sandbox::harden::confine(&policy).expect("confine");

    let threads: usize = (0..4).map(|i| std::thread::spawn(move || i)).map(|h| h.join().expect("thread")).sum();

    let sock = dir.join("s.sock");
    let unix = std::os::unix::net::UnixListener::bind(&sock).expect("bind unix socket");
    let echo = std::thread::spawn(move || {
        let (mut s, _) = unix.accept().expect("accept");
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).expect("read");
        s.write_all(&buf).expect("write");
    });
    let mut c = std::os::unix::net::UnixStream::connect(&sock).expect("connect unix");
    c.write_all(b"echo").expect("write");
    let mut back = [0u8; 4];
    c.read_exact(&mut back).expect("read");
    echo.join().expect("echo thread");

    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect upstream");
    tcp.write_all(b"ping!").expect("send");

    // epoll on the upstream socket, then splice its answer through a pipe, as the proxy does.
    let mut answer = [0u8; 5];
    // SAFETY: plain descriptor calls on descriptors owned by this function; every buffer
    // outlives the call that uses it.
    let (ready, spliced, random) = unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 1 };
        libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, tcp.as_raw_fd(), &mut ev);
        let mut out = [libc::epoll_event { events: 0, u64: 0 }];
        let ready = libc::epoll_wait(ep, out.as_mut_ptr(), 1, 10_000);
        let mut p = [0; 2];
        libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC);
        let n = libc::splice(tcp.as_raw_fd(), std::ptr::null_mut(), p[1], std::ptr::null_mut(), 5, 0);
        libc::read(p[0], answer.as_mut_ptr().cast(), answer.len());
        let mut rnd = [0u8; 16];
        let r = libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0);
        for fd in [ep, p[0], p[1]] {
            libc::close(fd);
        }
        (ready, n, r)
    };

    let exec = match Command::new("/bin/true").status() {
        Ok(_) => "ran",
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => "EPERM",
        Err(_) => "other",
    };
    // SAFETY: calls refused by the filter; the arguments are never read.
    let (ptrace, io_setup) = unsafe {
        (
            errno_name(libc::syscall(libc::SYS_ptrace, 2, 999_999, 0, 0)),
            errno_name(libc::syscall(libc::SYS_io_setup, 1, 0)),
        )
    };
    println!(
        "HARDEN seccomp={} threads={threads} unix={} tcp={} epoll={ready} splice={spliced} random={random} \
         exec={exec} ptrace={ptrace} io_setup={io_setup}",
        if confinement.seccomp { "on" } else { "off" },
        String::from_utf8_lossy(&back),
        String::from_utf8_lossy(&answer),
    );
}
