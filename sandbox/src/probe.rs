//! What this host can enforce: user namespaces (and why not), Landlock ABI, seccomp, cgroup v2
//! delegation, pivot_root. Used by `axp sandbox check` and by `session.open` to grant
//! `kernel-lsm` only when every mandatory layer is really available.
//!
//! Probing performs real, side-effect-free kernel calls (a forked child that unshares and
//! pivot_roots inside its own namespaces); it never changes the calling process.

use std::fmt;
use std::path::PathBuf;

/// Landlock ABI this crate knows how to use fully (fs v1–v3 and ioctl v5, TCP v4, scoping v6).
pub const MAX_LANDLOCK_ABI: u32 = 6;

/// The layers in force for a `kernel-lsm` sandbox on this host (reported in `session.open`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layers {
    /// Landlock ABI the rules are written for (min of the kernel's and [`MAX_LANDLOCK_ABI`]).
    pub landlock_abi: u32,
    /// Whether TCP connect is restricted by Landlock (ABI >= 4).
    pub landlock_net: bool,
    /// Whether abstract-unix-socket and signal scoping are in force (ABI >= 6).
    pub landlock_scoping: bool,
    /// The seccomp-bpf allow list is applied (always true when granted).
    pub seccomp: bool,
    /// Namespaces entered.
    pub namespaces: Vec<&'static str>,
    /// Whether cgroup v2 `pids.max` / `memory.max` can be applied (a delegated cgroup is
    /// writable). When false, only rlimits and the pid namespace's `pid_max` bound the job.
    pub cgroups: bool,
    /// Why cgroups are not in force, when they are not.
    pub cgroups_reason: Option<String>,
}

impl fmt::Display for Layers {
    /// One line for logs and `session.open`, e.g. `landlock ABI 6 (fs, tcp, scoping), seccomp,
    /// namespaces user+mount+pid+ipc+uts+net+cgroup, cgroups no (reason)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = vec!["fs"];
        if self.landlock_net {
            parts.push("tcp");
        }
        if self.landlock_scoping {
            parts.push("scoping");
        }
        write!(
            f,
            "landlock ABI {} ({}), seccomp{}, namespaces {}, cgroups ",
            self.landlock_abi,
            parts.join(", "),
            if self.seccomp { "" } else { " OFF" },
            self.namespaces.join("+")
        )?;
        match (&self.cgroups, &self.cgroups_reason) {
            (true, _) => f.write_str("yes"),
            (false, Some(r)) => write!(f, "no ({r})"),
            (false, None) => f.write_str("no"),
        }
    }
}

/// Everything [`probe`] found out.
#[derive(Debug, Clone)]
pub struct HostSupport {
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// `Ok` when an unprivileged-style user namespace (with mount namespace) can be created;
    /// otherwise the reason, naming the sysctl that forbids it where one does.
    pub user_namespaces: Result<(), String>,
    /// `Ok` when a tmpfs can be mounted and pivot_root'ed into inside such a namespace.
    pub pivot_root: Result<(), String>,
    /// Landlock ABI reported by the kernel (0: unavailable), and why when unavailable.
    pub landlock_abi: Result<u32, String>,
    /// `Ok` when seccomp filters with the `errno` action can be installed.
    pub seccomp: Result<(), String>,
    /// The delegated cgroup v2 directory where child cgroups with `pids` and `memory` controllers
    /// can be created, or why there is none.
    pub cgroup: Result<PathBuf, String>,
}

const NAMESPACES: [&str; 7] = ["user", "mount", "pid", "ipc", "uts", "net", "cgroup"];

impl HostSupport {
    /// The layers of a `kernel-lsm` sandbox if every mandatory one is available, else the first
    /// missing layer with its reason. cgroups are optional and reported in [`Layers::cgroups`].
    pub fn kernel_lsm_available(&self) -> Result<Layers, String> {
        self.user_namespaces.as_ref().map_err(|e| format!("user namespaces unavailable: {e}"))?;
        self.pivot_root.as_ref().map_err(|e| format!("pivot_root unavailable: {e}"))?;
        let abi = match &self.landlock_abi {
            Ok(a) if *a >= 1 => *a,
            Ok(_) => return Err("Landlock unavailable: ABI 0".to_string()),
            Err(e) => return Err(format!("Landlock unavailable: {e}")),
        };
        self.seccomp.as_ref().map_err(|e| format!("seccomp unavailable: {e}"))?;
        let abi = abi.min(MAX_LANDLOCK_ABI);
        Ok(Layers {
            landlock_abi: abi,
            landlock_net: abi >= 4,
            landlock_scoping: abi >= 6,
            seccomp: true,
            namespaces: NAMESPACES.to_vec(),
            cgroups: self.cgroup.is_ok(),
            cgroups_reason: self.cgroup.as_ref().err().cloned(),
        })
    }
}

fn show<T>(f: &mut fmt::Formatter<'_>, name: &str, r: &Result<T, String>, ok: &str) -> fmt::Result {
    match r {
        Ok(_) => writeln!(f, "  {name:<16} yes{ok}"),
        Err(e) => writeln!(f, "  {name:<16} NO — {e}"),
    }
}

impl fmt::Display for HostSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernel {}", self.kernel)?;
        show(f, "user namespaces", &self.user_namespaces, "")?;
        show(f, "pivot_root", &self.pivot_root, "")?;
        let abi = match &self.landlock_abi {
            Ok(a) => format!(" (ABI {a}; enforcing ABI {})", (*a).min(MAX_LANDLOCK_ABI)),
            Err(_) => String::new(),
        };
        show(f, "landlock", &self.landlock_abi, &abi)?;
        show(f, "seccomp", &self.seccomp, " (errno action)")?;
        let cg = match &self.cgroup {
            Ok(p) => format!(" ({})", p.display()),
            Err(_) => String::new(),
        };
        show(f, "cgroup v2", &self.cgroup, &cg)?;
        match self.kernel_lsm_available() {
            Ok(l) => write!(
                f,
                "tier kernel-lsm: available (landlock ABI {}, seccomp, namespaces {}, cgroups {})",
                l.landlock_abi,
                l.namespaces.join("+"),
                if l.cgroups { "yes" } else { "no" }
            ),
            Err(e) => write!(f, "tier kernel-lsm: UNAVAILABLE — {e}"),
        }
    }
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Landlock ABI version via `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
pub fn landlock_abi() -> Result<u32, String> {
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag the syscall only
    // returns an integer; it reads and writes no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOSYS) => "the kernel is built without Landlock".to_string(),
            Some(libc::EOPNOTSUPP) => {
                "Landlock is disabled at boot (add landlock to the lsm= kernel parameter)".to_string()
            }
            _ => format!("landlock_create_ruleset failed: {e}"),
        });
    }
    Ok(r as u32)
}

fn seccomp_support() -> Result<(), String> {
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 from the pointer, which points at a live
    // local; it changes no process state.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            2u32, // SECCOMP_GET_ACTION_AVAIL
            0u32,
            &action as *const u32,
        )
    };
    if r != 0 {
        return Err(format!("seccomp(SECCOMP_GET_ACTION_AVAIL, errno) failed: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Why user namespaces are forbidden, from the sysctls that commonly forbid them.
fn userns_sysctl_reason() -> Option<String> {
    if read_sysctl("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some("sysctl kernel.unprivileged_userns_clone = 0".to_string());
    }
    if read_sysctl("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("sysctl user.max_user_namespaces = 0".to_string());
    }
    if read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Some(
            "AppArmor restricts unprivileged user namespaces \
             (sysctl kernel.apparmor_restrict_unprivileged_userns = 1)"
                .to_string(),
        );
    }
    None
}

/// Forks a child that unshares user+mount namespaces, mounts a tmpfs and pivot_roots into it.
/// Returns the child's exit code: 0 ok, 1 unshare failed, 2 mount failed, 3 pivot_root failed,
/// plus the errno of the failing step.
fn namespace_trial() -> Result<(i32, i32), String> {
    let mut pipe = [0i32; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: the child only makes async-signal-safe system calls on static C strings and a
    // stack buffer, then _exit()s, so forking a possibly multi-threaded caller is sound.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: see above; every pointer is a static NUL-terminated string or a local.
        unsafe {
            let fail = |step: i32| -> ! {
                let e = *libc::__errno_location();
                let buf = [step, e];
                libc::write(pipe[1], buf.as_ptr().cast(), 8);
                libc::_exit(step)
            };
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                fail(1);
            }
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                fail(2);
            }
            if libc::mount(c"tmpfs".as_ptr(), c"/tmp".as_ptr(), c"tmpfs".as_ptr(), 0, std::ptr::null()) != 0 {
                fail(2);
            }
            if libc::chdir(c"/tmp".as_ptr()) != 0
                || libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0
            {
                fail(3);
            }
            libc::_exit(0)
        }
    }
    // SAFETY: closing our copy of the write end, which we own.
    unsafe { libc::close(pipe[1]) };
    let mut buf = [0i32; 2];
    // SAFETY: reading at most 8 bytes into an 8-byte local buffer.
    let n = unsafe { libc::read(pipe[0], buf.as_mut_ptr().cast(), 8) };
    // SAFETY: closing the read end we own.
    unsafe { libc::close(pipe[0]) };
    let mut status = 0;
    // SAFETY: waiting for the child we forked; status points at a local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if n == 8 {
        Ok((buf[0], buf[1]))
    } else if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok((0, 0))
    } else {
        Err(format!("probe child ended abnormally (status {status})"))
    }
}

/// Finds the cgroup v2 directory of this process and checks that a child with the `pids` and
/// `memory` controllers could be created and written there.
pub(crate) fn cgroup_dir() -> Result<PathBuf, String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let mount = mountinfo
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split(' ').next() == Some("cgroup2")).then(|| pre.split(' ').nth(4))?
        })
        .ok_or("no cgroup v2 hierarchy is mounted")?;
    let own =
        std::fs::read_to_string("/proc/self/cgroup").map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let rel = own.lines().find_map(|l| l.strip_prefix("0::")).ok_or("this process has no cgroup v2 membership")?;
    let dir = PathBuf::from(mount).join(rel.trim_start_matches('/'));
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let have: Vec<&str> = controllers.split_whitespace().collect();
    for c in ["pids", "memory"] {
        if !have.contains(&c) {
            return Err(format!(
                "the {c} controller is not delegated to {} (cgroup.controllers: `{}`; \
                 on hybrid hosts it is bound to cgroup v1)",
                dir.display(),
                controllers.trim()
            ));
        }
    }
    let subtree = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    if !(subtree.contains("pids") && subtree.contains("memory")) {
        return Err(format!("pids/memory are not enabled in {}/cgroup.subtree_control", dir.display()));
    }
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| "cgroup path contains NUL")?;
    // SAFETY: access() reads the NUL-terminated path only.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!("{} is not writable by this user", dir.display()));
    }
    Ok(dir)
}

/// Probes the host. Cheap (one short-lived child process) and side-effect free.
pub fn probe() -> HostSupport {
    // SAFETY: uname fills the zeroed struct we own.
    let kernel = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        libc::uname(&mut u);
        std::ffi::CStr::from_ptr(u.release.as_ptr()).to_string_lossy().into_owned()
    };
    let (user_namespaces, pivot_root) = match namespace_trial() {
        Ok((0, _)) => (Ok(()), Ok(())),
        Ok((1, e)) => {
            let err = std::io::Error::from_raw_os_error(e);
            let why = userns_sysctl_reason()
                .map(|r| format!("{r} (unshare(CLONE_NEWUSER): {err})"))
                .unwrap_or_else(|| format!("unshare(CLONE_NEWUSER) failed: {err}"));
            (Err(why.clone()), Err("needs user namespaces".to_string()))
        }
        Ok((2, e)) => {
            (Ok(()), Err(format!("mount inside a user namespace failed: {}", std::io::Error::from_raw_os_error(e))))
        }
        Ok((_, e)) => (
            Ok(()),
            Err(format!("pivot_root inside a user namespace failed: {}", std::io::Error::from_raw_os_error(e))),
        ),
        Err(e) => (Err(e.clone()), Err(e)),
    };
    HostSupport {
        kernel,
        user_namespaces,
        pivot_root,
        landlock_abi: landlock_abi(),
        seccomp: seccomp_support(),
        cgroup: cgroup_dir(),
    }
}
