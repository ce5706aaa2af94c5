//! The seccomp-bpf deny list applied last before execve: io_uring, ptrace, process_vm_*, the
//! keyring, bpf, perf_event_open, userfaultfd, every mount/namespace call, open_by_handle_at,
//! kexec, module loading, TIOCSTI/TIOCLINUX, socket families other than unix/inet/inet6,
//! namespace flags to clone, and the x32 ABI.
//!
//! Denied calls fail with `EPERM` rather than killing the process, so programs that probe for a
//! feature (io_uring in tokio/libuv, userfaultfd in JITs, netlink in `ip`) degrade cleanly and an
//! attack is visible as an error rather than a crash. `clone3` fails with `ENOSYS` (its flags sit
//! in memory a filter cannot read), which makes libc fall back to `clone`, whose flags we check.
//! Other architectures than x86_64 (e.g. i386 via `int 0x80`) are killed by seccompiler's
//! architecture check.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch, sock_filter,
};

/// Syscalls denied outright.
const DENIED: &[(i64, &str)] = &[
    (libc::SYS_io_uring_setup, "io_uring_setup"),
    (libc::SYS_io_uring_enter, "io_uring_enter"),
    (libc::SYS_io_uring_register, "io_uring_register"),
    (libc::SYS_ptrace, "ptrace"),
    (libc::SYS_process_vm_readv, "process_vm_readv"),
    (libc::SYS_process_vm_writev, "process_vm_writev"),
    (libc::SYS_pidfd_getfd, "pidfd_getfd"),
    (libc::SYS_kcmp, "kcmp"),
    (libc::SYS_keyctl, "keyctl"),
    (libc::SYS_add_key, "add_key"),
    (libc::SYS_request_key, "request_key"),
    (libc::SYS_bpf, "bpf"),
    (libc::SYS_perf_event_open, "perf_event_open"),
    (libc::SYS_userfaultfd, "userfaultfd"),
    (libc::SYS_mount, "mount"),
    (libc::SYS_umount2, "umount2"),
    (libc::SYS_pivot_root, "pivot_root"),
    (libc::SYS_chroot, "chroot"),
    (libc::SYS_unshare, "unshare"),
    (libc::SYS_setns, "setns"),
    (libc::SYS_open_tree, "open_tree"),
    (libc::SYS_move_mount, "move_mount"),
    (libc::SYS_fsopen, "fsopen"),
    (libc::SYS_fsconfig, "fsconfig"),
    (libc::SYS_fsmount, "fsmount"),
    (libc::SYS_fspick, "fspick"),
    (libc::SYS_mount_setattr, "mount_setattr"),
    (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    (libc::SYS_name_to_handle_at, "name_to_handle_at"),
    (libc::SYS_kexec_load, "kexec_load"),
    (libc::SYS_kexec_file_load, "kexec_file_load"),
    (libc::SYS_init_module, "init_module"),
    (libc::SYS_finit_module, "finit_module"),
    (libc::SYS_delete_module, "delete_module"),
    (libc::SYS_swapon, "swapon"),
    (libc::SYS_swapoff, "swapoff"),
    (libc::SYS_reboot, "reboot"),
    (libc::SYS_acct, "acct"),
    (libc::SYS_quotactl, "quotactl"),
    (libc::SYS_syslog, "syslog"),
    (libc::SYS_iopl, "iopl"),
    (libc::SYS_ioperm, "ioperm"),
    (libc::SYS_vhangup, "vhangup"),
    (libc::SYS_settimeofday, "settimeofday"),
    (libc::SYS_clock_settime, "clock_settime"),
    (libc::SYS_clock_adjtime, "clock_adjtime"),
    (libc::SYS_adjtimex, "adjtimex"),
    (libc::SYS_lookup_dcookie, "lookup_dcookie"),
    (libc::SYS_fanotify_init, "fanotify_init"),
];

/// Namespace flags refused in `clone(2)`'s first argument.
const CLONE_NS_FLAGS: [u64; 8] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];

/// Socket families allowed for socket(2).
const ALLOWED_FAMILIES: [u64; 3] = [libc::AF_UNIX as u64, libc::AF_INET as u64, libc::AF_INET6 as u64];

fn cond(arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, v: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, len, op, v).map_err(|e| format!("seccomp condition: {e}"))
}

fn rule(c: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(c).map_err(|e| format!("seccomp rule: {e}"))
}

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp arch: {e}"))
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram, String> {
    let f = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno as u32), arch()?)
        .map_err(|e| format!("seccomp filter: {e}"))?;
    BpfProgram::try_from(f).map_err(|e| format!("seccomp compile: {e}"))
}

/// The x32 ABI shares x86_64's audit arch but sets bit 30 of the syscall number; seccompiler
/// cannot match number ranges, so this three-instruction program is written by hand.
fn x32_filter() -> BpfProgram {
    const X32_BIT: u32 = 0x4000_0000;
    let stmt = |code: u16, k: u32| sock_filter { code, jt: 0, jf: 0, k };
    vec![
        // ld [nr]
        stmt(0x20, 0),
        // jge #X32_BIT ? next : skip one
        sock_filter { code: 0x35, jt: 0, jf: 1, k: X32_BIT },
        stmt(0x06, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        stmt(0x06, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Compiles the filters (in the init process, before the target is forked).
pub(crate) fn filters() -> Result<Vec<BpfProgram>, String> {
    use SeccompCmpArgLen::{Dword, Qword};
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, _) in DENIED {
        deny.insert(*nr, Vec::new());
    }
    deny.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, Dword, SeccompCmpOp::Eq, libc::TIOCSTI)?])?,
            rule(vec![cond(1, Dword, SeccompCmpOp::Eq, libc::TIOCLINUX)?])?,
        ],
    );
    let mut fam = Vec::new();
    for f in ALLOWED_FAMILIES {
        fam.push(cond(0, Dword, SeccompCmpOp::Ne, f)?);
    }
    deny.insert(libc::SYS_socket, vec![rule(fam)?]);
    let mut clone_rules = Vec::new();
    for f in CLONE_NS_FLAGS {
        clone_rules.push(rule(vec![cond(0, Qword, SeccompCmpOp::MaskedEq(f), f)?])?);
    }
    deny.insert(libc::SYS_clone, clone_rules);

    let mut nosys: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    nosys.insert(libc::SYS_clone3, Vec::new());

    Ok(vec![x32_filter(), compile(deny, libc::EPERM)?, compile(nosys, libc::ENOSYS)?])
}

/// Names of the syscalls denied outright, for documentation and `axp sandbox check`.
pub fn denied_syscalls() -> Vec<&'static str> {
    DENIED.iter().map(|(_, n)| *n).collect()
}
