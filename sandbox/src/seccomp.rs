//! The seccomp-bpf allow list applied last before `execve` (and, with `execve` refused on top, by
//! [`crate::harden`] to the gateway's own helpers): the system calls that ordinary programs make
//! — shells, coreutils, python3, node, git, compilers, the MCP servers — and no others. It owns
//! which calls a confined process may make and with which arguments; it does not know what the
//! process may touch (mounts and Landlock decide that).
//!
//! Three programs are installed. The kernel runs every one of them on each call and keeps the
//! strictest answer; when two of them answer with an errno, the one installed last wins.
//!
//! 1. **The allow list.** The calls in [`ALLOWED`] pass with any arguments, and the calls in
//!    [`CONDITIONAL`] pass only in the forms described below. Every other call fails with
//!    `ENOSYS`.
//! 2. **The refusals.** The calls in [`DENIED`], and the forms of the conditional calls that are
//!    refused on purpose, fail with `EPERM`.
//! 3. **The x32 ABI**, which shares x86_64's audit architecture, fails with `EPERM`.
//!
//! A foreign architecture, such as i386 through `int 0x80`, kills the process: each program
//! begins with seccompiler's architecture check. The table is x86_64's, the architecture this
//! crate is built for.
//!
//! **Why `ENOSYS` for a call the list does not name.** Most such calls are newer than the list:
//! `clone3`, `cachestat`, `map_shadow_stack`, the `*xattrat` calls, `lsm_*`, and whatever the
//! next kernel adds. libc and language runtimes read `ENOSYS` as "this kernel predates the call"
//! and take the fallback they already have for old kernels. `EPERM` makes many of them fail hard
//! instead: glibc falls back from `faccessat2` only on `ENOSYS`, and containers whose filters
//! answered `EPERM` broke on it. The same holds for old calls left
//! off the list because ordinary programs do without them: `io_setup` (Linux AIO), `mbind` and
//! `set_mempolicy` (NUMA, which `ps` probes), `vmsplice`, `memfd_secret`, `process_madvise`.
//!
//! **Why `EPERM` for the refusals.** These are calls we refuse by policy rather than calls we do
//! not know. `EPERM` is what an attack sees, so it is visible in tests and logs as a refusal, and
//! programs that probe for such a feature degrade on it (io_uring in libuv, userfaultfd in JITs,
//! netlink in `ip`). We chose an errno over killing the process for the same reason.
//!
//! **The conditional calls**, allowed only in these forms:
//!
//! * `clone` without namespace flags. `clone3` is not on the list, so it fails with `ENOSYS` and
//!   libc falls back to `clone`: the flags of `clone3` sit in memory, which a filter cannot read.
//! * `socket` and `socketpair` with `AF_UNIX`, `AF_INET` or `AF_INET6`. Other families fail with
//!   `EPERM`. `socketpair` is filtered too, because the family's create code (and the module
//!   autoload behind it) runs before the pair operation can fail.
//! * `ioctl` with any request except `TIOCSTI` (pushing input into a terminal) and `TIOCLINUX`
//!   (console control). Those two fail with `EPERM`.
//! * `personality` only as the query (`0xffffffff`) or to set `PER_LINUX` (0), which reads or
//!   resets the persona. Setting a flag fails with `EPERM`. The flags switch off address-space
//!   randomisation, make readable memory executable, or fake an old kernel version: they help an
//!   exploit and no ordinary program needs them.
//! * `memfd_create` only with `MFD_NOEXEC_SEAL` (and without `MFD_EXEC`). Any other form fails
//!   with `ENOSYS`. The reasons follow.
//!
//! **memfd_create.** A memfd lives on the kernel's internal tmpfs. No mount flag of ours reaches
//! it, and Landlock lets every access to such internal files through. An executable memfd is
//! therefore the one place where a job could write a program and run it, through
//! `execveat(fd, "", AT_EMPTY_PATH)` or `execve("/proc/self/fd/N")`, beyond any rule on the file
//! tree. A filter cannot read the path given to `execve`, so refusing `execveat` with
//! `AT_EMPTY_PATH` would leave the second route open. Instead, memfds are made never executable
//! where they are created. With `MFD_NOEXEC_SEAL` (Linux ≥ 6.3), the kernel creates the memfd
//! without execute bits and seals them off (`F_SEAL_EXEC`), and it then refuses to execute the
//! memfd by any path. The other forms fail with `ENOSYS`, which programs read as "no memfd on
//! this kernel". Those with a fallback use a file in `/dev/shm` or `/tmp` instead, which the
//! mount tree and Landlock do cover. Those without one fail (Python's `os.memfd_create(name)`
//! without the flag, for example). A kernel older than 6.3 rejects the unknown flag itself
//! (`EINVAL`), so there memfds are unavailable rather than executable. Today this takes no
//! capability away, since a job may write a program to its workspace or `/tmp` and run it
//! (compilers need that). What it gives is that every program a job starts with `execve` is a
//! file in a mount that the policy governs, so mount flags and Landlock rules about execution
//! apply to all of them. Code run inside a process (a script, a JIT, an ELF loaded by hand) is
//! beyond any rule about execution, here as everywhere.
//!
//! **pidfd_open** and `pidfd_send_signal` are allowed. Python's asyncio, glibc's `pidfd_spawn`
//! and process supervisors use them. A pid is looked up in the caller's pid namespace, which
//! holds only the job's own processes and the sandbox's init. A pidfd grants what `kill(2)` and
//! `waitid(2)` already grant, under the same permission checks and the same Landlock signal
//! scoping. The calls that would turn a pidfd into more are not allowed: `pidfd_getfd` (taking a
//! descriptor), `setns` (entering namespaces), `process_madvise` and `process_mrelease`. So a
//! pidfd adds no risk beyond `kill`.
//!
//! The mount-information calls `statmount` and `listmount` and the mount call `open_tree_attr`
//! are newer than libc's table, so their numbers are written out below (they are the same on
//! every architecture, like every call numbered from 424 on).

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch, sock_filter,
};

/// `statmount(2)`, Linux 6.8; not in libc's table.
const SYS_STATMOUNT: i64 = 457;
/// `listmount(2)`, Linux 6.8; not in libc's table.
const SYS_LISTMOUNT: i64 = 458;
/// `open_tree_attr(2)`, Linux 6.15; not in libc's table.
const SYS_OPEN_TREE_ATTR: i64 = 467;

/// Calls allowed with any arguments, grouped by what they are for.
const ALLOWED: &[(i64, &str)] = &[
    // Files and directories. Mounts and Landlock decide which files; these calls only use them.
    (libc::SYS_read, "read"),
    (libc::SYS_write, "write"),
    (libc::SYS_open, "open"),
    (libc::SYS_openat, "openat"),
    (libc::SYS_openat2, "openat2"),
    (libc::SYS_creat, "creat"),
    (libc::SYS_close, "close"),
    (libc::SYS_close_range, "close_range"),
    (libc::SYS_stat, "stat"),
    (libc::SYS_fstat, "fstat"),
    (libc::SYS_lstat, "lstat"),
    (libc::SYS_newfstatat, "newfstatat"),
    (libc::SYS_statx, "statx"),
    (libc::SYS_statfs, "statfs"),
    (libc::SYS_fstatfs, "fstatfs"),
    (libc::SYS_lseek, "lseek"),
    (libc::SYS_pread64, "pread64"),
    (libc::SYS_pwrite64, "pwrite64"),
    (libc::SYS_readv, "readv"),
    (libc::SYS_writev, "writev"),
    (libc::SYS_preadv, "preadv"),
    (libc::SYS_pwritev, "pwritev"),
    (libc::SYS_preadv2, "preadv2"),
    (libc::SYS_pwritev2, "pwritev2"),
    (libc::SYS_sendfile, "sendfile"),
    (libc::SYS_copy_file_range, "copy_file_range"),
    (libc::SYS_splice, "splice"),
    (libc::SYS_tee, "tee"),
    (libc::SYS_access, "access"),
    (libc::SYS_faccessat, "faccessat"),
    (libc::SYS_faccessat2, "faccessat2"),
    (libc::SYS_pipe, "pipe"),
    (libc::SYS_pipe2, "pipe2"),
    (libc::SYS_dup, "dup"),
    (libc::SYS_dup2, "dup2"),
    (libc::SYS_dup3, "dup3"),
    (libc::SYS_fcntl, "fcntl"),
    (libc::SYS_flock, "flock"),
    (libc::SYS_fsync, "fsync"),
    (libc::SYS_fdatasync, "fdatasync"),
    (libc::SYS_sync, "sync"),
    (libc::SYS_syncfs, "syncfs"),
    (libc::SYS_sync_file_range, "sync_file_range"),
    (libc::SYS_truncate, "truncate"),
    (libc::SYS_ftruncate, "ftruncate"),
    (libc::SYS_fallocate, "fallocate"),
    (libc::SYS_fadvise64, "fadvise64"),
    (libc::SYS_readahead, "readahead"),
    (libc::SYS_getdents, "getdents"),
    (libc::SYS_getdents64, "getdents64"),
    (libc::SYS_getcwd, "getcwd"),
    (libc::SYS_chdir, "chdir"),
    (libc::SYS_fchdir, "fchdir"),
    (libc::SYS_rename, "rename"),
    (libc::SYS_renameat, "renameat"),
    (libc::SYS_renameat2, "renameat2"),
    (libc::SYS_mkdir, "mkdir"),
    (libc::SYS_mkdirat, "mkdirat"),
    (libc::SYS_rmdir, "rmdir"),
    (libc::SYS_link, "link"),
    (libc::SYS_linkat, "linkat"),
    (libc::SYS_unlink, "unlink"),
    (libc::SYS_unlinkat, "unlinkat"),
    (libc::SYS_symlink, "symlink"),
    (libc::SYS_symlinkat, "symlinkat"),
    (libc::SYS_readlink, "readlink"),
    (libc::SYS_readlinkat, "readlinkat"),
    (libc::SYS_mknod, "mknod"),
    (libc::SYS_mknodat, "mknodat"),
    (libc::SYS_chmod, "chmod"),
    (libc::SYS_fchmod, "fchmod"),
    (libc::SYS_fchmodat, "fchmodat"),
    (libc::SYS_fchmodat2, "fchmodat2"),
    (libc::SYS_chown, "chown"),
    (libc::SYS_fchown, "fchown"),
    (libc::SYS_lchown, "lchown"),
    (libc::SYS_fchownat, "fchownat"),
    (libc::SYS_umask, "umask"),
    (libc::SYS_utime, "utime"),
    (libc::SYS_utimes, "utimes"),
    (libc::SYS_futimesat, "futimesat"),
    (libc::SYS_utimensat, "utimensat"),
    (libc::SYS_getxattr, "getxattr"),
    (libc::SYS_lgetxattr, "lgetxattr"),
    (libc::SYS_fgetxattr, "fgetxattr"),
    (libc::SYS_listxattr, "listxattr"),
    (libc::SYS_llistxattr, "llistxattr"),
    (libc::SYS_flistxattr, "flistxattr"),
    (libc::SYS_setxattr, "setxattr"),
    (libc::SYS_lsetxattr, "lsetxattr"),
    (libc::SYS_fsetxattr, "fsetxattr"),
    (libc::SYS_removexattr, "removexattr"),
    (libc::SYS_lremovexattr, "lremovexattr"),
    (libc::SYS_fremovexattr, "fremovexattr"),
    (libc::SYS_inotify_init, "inotify_init"),
    (libc::SYS_inotify_init1, "inotify_init1"),
    (libc::SYS_inotify_add_watch, "inotify_add_watch"),
    (libc::SYS_inotify_rm_watch, "inotify_rm_watch"),
    // Memory of the process itself.
    (libc::SYS_brk, "brk"),
    (libc::SYS_mmap, "mmap"),
    (libc::SYS_munmap, "munmap"),
    (libc::SYS_mremap, "mremap"),
    (libc::SYS_mprotect, "mprotect"),
    (libc::SYS_msync, "msync"),
    (libc::SYS_mincore, "mincore"),
    (libc::SYS_madvise, "madvise"),
    (libc::SYS_mlock, "mlock"),
    (libc::SYS_mlock2, "mlock2"),
    (libc::SYS_munlock, "munlock"),
    (libc::SYS_mlockall, "mlockall"),
    (libc::SYS_munlockall, "munlockall"),
    (libc::SYS_membarrier, "membarrier"),
    (libc::SYS_pkey_alloc, "pkey_alloc"),
    (libc::SYS_pkey_free, "pkey_free"),
    (libc::SYS_pkey_mprotect, "pkey_mprotect"),
    (libc::SYS_mseal, "mseal"),
    // Processes and threads, inside the job's own pid namespace.
    (libc::SYS_fork, "fork"),
    (libc::SYS_vfork, "vfork"),
    (libc::SYS_execve, "execve"),
    (libc::SYS_execveat, "execveat"),
    (libc::SYS_exit, "exit"),
    (libc::SYS_exit_group, "exit_group"),
    (libc::SYS_wait4, "wait4"),
    (libc::SYS_waitid, "waitid"),
    (libc::SYS_kill, "kill"),
    (libc::SYS_tkill, "tkill"),
    (libc::SYS_tgkill, "tgkill"),
    (libc::SYS_pidfd_open, "pidfd_open"),
    (libc::SYS_pidfd_send_signal, "pidfd_send_signal"),
    (libc::SYS_getpid, "getpid"),
    (libc::SYS_getppid, "getppid"),
    (libc::SYS_gettid, "gettid"),
    (libc::SYS_getpgid, "getpgid"),
    (libc::SYS_setpgid, "setpgid"),
    (libc::SYS_getpgrp, "getpgrp"),
    (libc::SYS_getsid, "getsid"),
    (libc::SYS_setsid, "setsid"),
    (libc::SYS_set_tid_address, "set_tid_address"),
    (libc::SYS_set_robust_list, "set_robust_list"),
    (libc::SYS_futex, "futex"),
    (libc::SYS_futex_waitv, "futex_waitv"),
    (libc::SYS_rseq, "rseq"),
    (libc::SYS_arch_prctl, "arch_prctl"),
    (libc::SYS_prctl, "prctl"),
    (libc::SYS_seccomp, "seccomp"),
    (libc::SYS_landlock_create_ruleset, "landlock_create_ruleset"),
    (libc::SYS_landlock_add_rule, "landlock_add_rule"),
    (libc::SYS_landlock_restrict_self, "landlock_restrict_self"),
    (libc::SYS_sched_yield, "sched_yield"),
    (libc::SYS_sched_getaffinity, "sched_getaffinity"),
    (libc::SYS_sched_setaffinity, "sched_setaffinity"),
    (libc::SYS_sched_getparam, "sched_getparam"),
    (libc::SYS_sched_setparam, "sched_setparam"),
    (libc::SYS_sched_getscheduler, "sched_getscheduler"),
    (libc::SYS_sched_setscheduler, "sched_setscheduler"),
    (libc::SYS_sched_getattr, "sched_getattr"),
    (libc::SYS_sched_setattr, "sched_setattr"),
    (libc::SYS_sched_get_priority_max, "sched_get_priority_max"),
    (libc::SYS_sched_get_priority_min, "sched_get_priority_min"),
    (libc::SYS_sched_rr_get_interval, "sched_rr_get_interval"),
    (libc::SYS_getpriority, "getpriority"),
    (libc::SYS_setpriority, "setpriority"),
    (libc::SYS_ioprio_get, "ioprio_get"),
    (libc::SYS_ioprio_set, "ioprio_set"),
    (libc::SYS_getcpu, "getcpu"),
    (libc::SYS_getrlimit, "getrlimit"),
    (libc::SYS_setrlimit, "setrlimit"),
    (libc::SYS_prlimit64, "prlimit64"),
    (libc::SYS_getrusage, "getrusage"),
    (libc::SYS_times, "times"),
    (libc::SYS_sysinfo, "sysinfo"),
    (libc::SYS_uname, "uname"),
    (libc::SYS_getrandom, "getrandom"),
    // Identity. Without capabilities a process can only move between the ids it already has.
    (libc::SYS_getuid, "getuid"),
    (libc::SYS_geteuid, "geteuid"),
    (libc::SYS_getgid, "getgid"),
    (libc::SYS_getegid, "getegid"),
    (libc::SYS_getresuid, "getresuid"),
    (libc::SYS_getresgid, "getresgid"),
    (libc::SYS_getgroups, "getgroups"),
    (libc::SYS_setuid, "setuid"),
    (libc::SYS_setgid, "setgid"),
    (libc::SYS_setreuid, "setreuid"),
    (libc::SYS_setregid, "setregid"),
    (libc::SYS_setresuid, "setresuid"),
    (libc::SYS_setresgid, "setresgid"),
    (libc::SYS_setgroups, "setgroups"),
    (libc::SYS_setfsuid, "setfsuid"),
    (libc::SYS_setfsgid, "setfsgid"),
    (libc::SYS_capget, "capget"),
    (libc::SYS_capset, "capset"),
    // Signals and time.
    (libc::SYS_rt_sigaction, "rt_sigaction"),
    (libc::SYS_rt_sigprocmask, "rt_sigprocmask"),
    (libc::SYS_rt_sigreturn, "rt_sigreturn"),
    (libc::SYS_rt_sigpending, "rt_sigpending"),
    (libc::SYS_rt_sigtimedwait, "rt_sigtimedwait"),
    (libc::SYS_rt_sigsuspend, "rt_sigsuspend"),
    (libc::SYS_rt_sigqueueinfo, "rt_sigqueueinfo"),
    (libc::SYS_rt_tgsigqueueinfo, "rt_tgsigqueueinfo"),
    (libc::SYS_sigaltstack, "sigaltstack"),
    (libc::SYS_signalfd, "signalfd"),
    (libc::SYS_signalfd4, "signalfd4"),
    (libc::SYS_pause, "pause"),
    (libc::SYS_restart_syscall, "restart_syscall"),
    (libc::SYS_alarm, "alarm"),
    (libc::SYS_getitimer, "getitimer"),
    (libc::SYS_setitimer, "setitimer"),
    (libc::SYS_nanosleep, "nanosleep"),
    (libc::SYS_clock_nanosleep, "clock_nanosleep"),
    (libc::SYS_clock_gettime, "clock_gettime"),
    (libc::SYS_clock_getres, "clock_getres"),
    (libc::SYS_gettimeofday, "gettimeofday"),
    (libc::SYS_time, "time"),
    (libc::SYS_timer_create, "timer_create"),
    (libc::SYS_timer_settime, "timer_settime"),
    (libc::SYS_timer_gettime, "timer_gettime"),
    (libc::SYS_timer_getoverrun, "timer_getoverrun"),
    (libc::SYS_timer_delete, "timer_delete"),
    (libc::SYS_timerfd_create, "timerfd_create"),
    (libc::SYS_timerfd_settime, "timerfd_settime"),
    (libc::SYS_timerfd_gettime, "timerfd_gettime"),
    // Waiting for events.
    (libc::SYS_poll, "poll"),
    (libc::SYS_ppoll, "ppoll"),
    (libc::SYS_select, "select"),
    (libc::SYS_pselect6, "pselect6"),
    (libc::SYS_epoll_create, "epoll_create"),
    (libc::SYS_epoll_create1, "epoll_create1"),
    (libc::SYS_epoll_ctl, "epoll_ctl"),
    (libc::SYS_epoll_wait, "epoll_wait"),
    (libc::SYS_epoll_pwait, "epoll_pwait"),
    (libc::SYS_epoll_pwait2, "epoll_pwait2"),
    (libc::SYS_eventfd, "eventfd"),
    (libc::SYS_eventfd2, "eventfd2"),
    // Sockets, once created (`socket` and `socketpair` are conditional). The network namespace
    // and Landlock decide where they lead.
    (libc::SYS_connect, "connect"),
    (libc::SYS_accept, "accept"),
    (libc::SYS_accept4, "accept4"),
    (libc::SYS_bind, "bind"),
    (libc::SYS_listen, "listen"),
    (libc::SYS_getsockname, "getsockname"),
    (libc::SYS_getpeername, "getpeername"),
    (libc::SYS_setsockopt, "setsockopt"),
    (libc::SYS_getsockopt, "getsockopt"),
    (libc::SYS_sendto, "sendto"),
    (libc::SYS_recvfrom, "recvfrom"),
    (libc::SYS_sendmsg, "sendmsg"),
    (libc::SYS_recvmsg, "recvmsg"),
    (libc::SYS_sendmmsg, "sendmmsg"),
    (libc::SYS_recvmmsg, "recvmmsg"),
    (libc::SYS_shutdown, "shutdown"),
    // System V and POSIX IPC, in the job's own IPC namespace.
    (libc::SYS_shmget, "shmget"),
    (libc::SYS_shmat, "shmat"),
    (libc::SYS_shmdt, "shmdt"),
    (libc::SYS_shmctl, "shmctl"),
    (libc::SYS_semget, "semget"),
    (libc::SYS_semop, "semop"),
    (libc::SYS_semtimedop, "semtimedop"),
    (libc::SYS_semctl, "semctl"),
    (libc::SYS_msgget, "msgget"),
    (libc::SYS_msgsnd, "msgsnd"),
    (libc::SYS_msgrcv, "msgrcv"),
    (libc::SYS_msgctl, "msgctl"),
    (libc::SYS_mq_open, "mq_open"),
    (libc::SYS_mq_unlink, "mq_unlink"),
    (libc::SYS_mq_timedsend, "mq_timedsend"),
    (libc::SYS_mq_timedreceive, "mq_timedreceive"),
    (libc::SYS_mq_notify, "mq_notify"),
    (libc::SYS_mq_getsetattr, "mq_getsetattr"),
];

/// Calls allowed only in some forms (see the module documentation); the rules are in
/// [`allowed_forms`] and [`refused_forms`].
const CONDITIONAL: &[(i64, &str)] = &[
    (libc::SYS_clone, "clone"),
    (libc::SYS_socket, "socket"),
    (libc::SYS_socketpair, "socketpair"),
    (libc::SYS_ioctl, "ioctl"),
    (libc::SYS_personality, "personality"),
    (libc::SYS_memfd_create, "memfd_create"),
];

/// Calls refused with `EPERM`: privileged administration, and kernel interfaces that have been
/// the way out of sandboxes (tracing other processes, io_uring, BPF, keyrings, mounts and
/// namespaces, file handles, 16-bit segments).
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
    (libc::SYS_modify_ldt, "modify_ldt"),
    (libc::SYS_mount, "mount"),
    (libc::SYS_umount2, "umount2"),
    (libc::SYS_pivot_root, "pivot_root"),
    (libc::SYS_chroot, "chroot"),
    (libc::SYS_unshare, "unshare"),
    (libc::SYS_setns, "setns"),
    (libc::SYS_open_tree, "open_tree"),
    (SYS_OPEN_TREE_ATTR, "open_tree_attr"),
    (libc::SYS_move_mount, "move_mount"),
    (libc::SYS_fsopen, "fsopen"),
    (libc::SYS_fsconfig, "fsconfig"),
    (libc::SYS_fsmount, "fsmount"),
    (libc::SYS_fspick, "fspick"),
    (libc::SYS_mount_setattr, "mount_setattr"),
    (SYS_STATMOUNT, "statmount"),
    (SYS_LISTMOUNT, "listmount"),
    (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    (libc::SYS_name_to_handle_at, "name_to_handle_at"),
    (libc::SYS_fanotify_init, "fanotify_init"),
    (libc::SYS_fanotify_mark, "fanotify_mark"),
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
    (libc::SYS_quotactl_fd, "quotactl_fd"),
    (libc::SYS_syslog, "syslog"),
    (libc::SYS_iopl, "iopl"),
    (libc::SYS_ioperm, "ioperm"),
    (libc::SYS_vhangup, "vhangup"),
    (libc::SYS_sethostname, "sethostname"),
    (libc::SYS_setdomainname, "setdomainname"),
    (libc::SYS_settimeofday, "settimeofday"),
    (libc::SYS_clock_settime, "clock_settime"),
    (libc::SYS_clock_adjtime, "clock_adjtime"),
    (libc::SYS_adjtimex, "adjtimex"),
    (libc::SYS_lookup_dcookie, "lookup_dcookie"),
];

/// Namespace flags refused in `clone(2)`'s first argument. `CLONE_NEWTIME` shares its bit with
/// the exit-signal byte and is only valid for `clone3` and `unshare`; the bit is refused anyway,
/// since no valid signal number sets it.
const CLONE_NS_FLAGS: [u64; 8] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWTIME as u64,
];

/// Socket families allowed for socket(2) and socketpair(2).
const ALLOWED_FAMILIES: [u64; 3] = [libc::AF_UNIX as u64, libc::AF_INET as u64, libc::AF_INET6 as u64];

/// `ioctl` requests refused: injecting terminal input, and Linux console control.
const REFUSED_IOCTLS: [u64; 2] = [libc::TIOCSTI, libc::TIOCLINUX];

/// `personality(0xffffffff)` only reads the current persona.
const PERSONALITY_QUERY: u64 = 0xffff_ffff;
/// `PER_LINUX`, the default persona with no flags (not in libc's table).
const PER_LINUX: u64 = 0;

fn cond(arg: u8, op: SeccompCmpOp, v: u64) -> Result<SeccompCondition, String> {
    // Every argument tested here is a 32-bit `int` or `unsigned int` in the kernel (`clone`'s
    // flags are cut to their lower 32 bits), so only the low word is compared, as the kernel
    // reads it: garbage in the high word can neither pass nor dodge a rule.
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, v).map_err(|e| format!("seccomp condition: {e}"))
}

fn rule(c: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(c).map_err(|e| format!("seccomp rule: {e}"))
}

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp arch: {e}"))
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    on_match: SeccompAction,
    otherwise: SeccompAction,
) -> Result<BpfProgram, String> {
    let f = SeccompFilter::new(rules, otherwise, on_match, arch()?).map_err(|e| format!("seccomp filter: {e}"))?;
    BpfProgram::try_from(f).map_err(|e| format!("seccomp compile: {e}"))
}

/// The forms in which the [`CONDITIONAL`] calls pass the allow list.
fn allowed_forms() -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let mut forms = BTreeMap::new();
    let ns_mask = CLONE_NS_FLAGS.iter().fold(0, |m, f| m | f);
    forms.insert(libc::SYS_clone, vec![rule(vec![cond(0, MaskedEq(ns_mask), 0)?])?]);
    let families = || ALLOWED_FAMILIES.iter().map(|f| rule(vec![cond(0, Eq, *f)?])).collect::<Result<Vec<_>, _>>();
    forms.insert(libc::SYS_socket, families()?);
    forms.insert(libc::SYS_socketpair, families()?);
    let ioctls = REFUSED_IOCTLS.iter().map(|r| cond(1, Ne, *r)).collect::<Result<Vec<_>, _>>()?;
    forms.insert(libc::SYS_ioctl, vec![rule(ioctls)?]);
    forms.insert(
        libc::SYS_personality,
        vec![rule(vec![cond(0, Eq, PERSONALITY_QUERY)?])?, rule(vec![cond(0, Eq, PER_LINUX)?])?],
    );
    let (seal, exec) = (u64::from(libc::MFD_NOEXEC_SEAL), u64::from(libc::MFD_EXEC));
    forms
        .insert(libc::SYS_memfd_create, vec![rule(vec![cond(1, MaskedEq(seal), seal)?, cond(1, MaskedEq(exec), 0)?])?]);
    Ok(forms)
}

/// The forms of the [`CONDITIONAL`] calls refused with `EPERM` (memfd_create has none: its
/// other forms keep the allow list's `ENOSYS`, so that programs fall back to a file).
fn refused_forms() -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let mut forms = BTreeMap::new();
    let clone = CLONE_NS_FLAGS.iter().map(|f| rule(vec![cond(0, MaskedEq(*f), *f)?])).collect::<Result<_, _>>()?;
    forms.insert(libc::SYS_clone, clone);
    let other_family = || -> Result<Vec<SeccompRule>, String> {
        Ok(vec![rule(ALLOWED_FAMILIES.iter().map(|f| cond(0, Ne, *f)).collect::<Result<_, _>>()?)?])
    };
    forms.insert(libc::SYS_socket, other_family()?);
    forms.insert(libc::SYS_socketpair, other_family()?);
    forms.insert(
        libc::SYS_ioctl,
        REFUSED_IOCTLS.iter().map(|r| rule(vec![cond(1, Eq, *r)?])).collect::<Result<_, _>>()?,
    );
    forms.insert(libc::SYS_personality, vec![rule(vec![cond(0, Ne, PERSONALITY_QUERY)?, cond(0, Ne, PER_LINUX)?])?]);
    Ok(forms)
}

/// The x32 ABI shares x86_64's audit arch but sets bit 30 of the syscall number; seccompiler
/// cannot match number ranges, so this three-instruction program is written by hand. (The allow
/// list already refuses every x32 number with `ENOSYS`; this makes the refusal an `EPERM`.)
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

/// Compiles the programs, in the order they must be installed (in the init process, before the
/// target is forked). The order matters: a refused call gets `ENOSYS` from the allow list and
/// `EPERM` from the refusals, and the kernel reports the errno of the program installed last.
pub(crate) fn filters() -> Result<Vec<BpfProgram>, String> {
    let errno = |e: i32| SeccompAction::Errno(e as u32);
    // A call on two lists would lose its conditions (an empty rule list matches any arguments),
    // so the tables are checked against each other before anything is compiled.
    let mut allow = allowed_forms()?;
    let mut conditional: Vec<i64> = CONDITIONAL.iter().map(|(nr, _)| *nr).collect();
    conditional.sort_unstable();
    if !allow.keys().copied().eq(conditional) {
        return Err("seccomp: the conditional calls and their allowed forms disagree".into());
    }
    for (nr, name) in ALLOWED {
        if allow.insert(*nr, Vec::new()).is_some() {
            return Err(format!("seccomp: {name} is listed twice"));
        }
    }
    let mut refuse = refused_forms()?;
    for (nr, name) in DENIED {
        if allow.contains_key(nr) || refuse.insert(*nr, Vec::new()).is_some() {
            return Err(format!("seccomp: {name} is both allowed and refused"));
        }
    }
    Ok(vec![
        compile(allow, SeccompAction::Allow, errno(libc::ENOSYS))?,
        compile(refuse, errno(libc::EPERM), SeccompAction::Allow)?,
        x32_filter(),
    ])
}

/// Names of the syscalls refused outright with `EPERM`, for documentation and tests. Calls on
/// neither list fail with `ENOSYS`.
pub fn denied_syscalls() -> Vec<&'static str> {
    DENIED.iter().map(|(_, n)| *n).collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn all_tables() -> impl Iterator<Item = &'static (i64, &'static str)> {
        ALLOWED.iter().chain(CONDITIONAL).chain(DENIED)
    }

    #[test]
    fn every_call_is_in_one_table_once() {
        let mut numbers = BTreeSet::new();
        let mut names = BTreeSet::new();
        for (nr, name) in all_tables() {
            assert!(numbers.insert(*nr), "syscall {nr} ({name}) appears twice");
            assert!(names.insert(*name), "syscall {name} appears twice");
        }
    }

    #[test]
    fn calls_whose_arguments_we_cannot_see_are_not_allowed() {
        // clone3 takes its flags in memory: it must stay off the list, so libc falls back to
        // clone. The same for io_uring, whose operations never pass through seccomp.
        for nr in [libc::SYS_clone3, libc::SYS_io_uring_setup, libc::SYS_io_uring_enter] {
            assert!(!ALLOWED.iter().chain(CONDITIONAL).any(|(n, _)| *n == nr), "syscall {nr} must not be allowed");
        }
    }

    #[test]
    fn programs_compile_within_the_kernel_limit() {
        let progs = filters().expect("filters compile");
        assert_eq!(progs.len(), 3);
        for p in &progs {
            // BPF_MAXINSNS: the kernel refuses longer programs.
            assert!(p.len() < 4096, "program of {} instructions", p.len());
        }
    }

    /// The README lists every call by name between two markers; the lists must match the code.
    #[test]
    fn readme_lists_match_the_tables() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("read README.md");
        let section = |marker: &str| -> BTreeSet<String> {
            let start = format!("<!-- {marker} -->");
            let body = readme.split(&start).nth(1).unwrap_or_else(|| panic!("README lacks {start}"));
            let body = body.split("<!-- end -->").next().expect("section end");
            body.split('`').skip(1).step_by(2).map(str::to_string).collect()
        };
        let names = |t: &[(i64, &str)]| -> BTreeSet<String> { t.iter().map(|(_, n)| n.to_string()).collect() };
        assert_eq!(section("seccomp-allowed"), names(ALLOWED), "README's allowed calls differ from ALLOWED");
        assert_eq!(section("seccomp-conditional"), names(CONDITIONAL), "README's conditional calls differ");
        assert_eq!(section("seccomp-denied"), names(DENIED), "README's EPERM calls differ from DENIED");
    }
}
