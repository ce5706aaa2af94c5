//! The minimal root: a tmpfs pivot_root'ed into, holding read-only system directories, the
//! `/etc` files programs need (never `/etc/shadow`), a fresh `/proc`, a minimal `/dev`, a private
//! size-limited `/tmp`, and the policy's workspace and granted paths at their host paths.
//!
//! Runs in the new pid namespace's init (it must, for `/proc`), before the target is forked.
//! It must not touch anything outside the private mount namespace: every mount is made private
//! first, so nothing propagates back to the host.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::policy::{NetPolicy, Policy};

const OLD: &str = "/oldroot";

/// System directories bound read-only when present (symlinks, as on merged-/usr systems, are
/// recreated as symlinks).
const SYSTEM: [&str; 7] = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"];

/// `/etc` entries programs need: the dynamic loader, name-service switch, time zone, TLS roots,
/// Debian alternatives, protocol tables. Credentials (`shadow`, `gshadow`, `sudoers`, `ssh`) are
/// deliberately absent; `passwd`, `group`, `hosts` and `hostname` are synthesised.
const ETC: [&str; 22] = [
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "alternatives",
    "mime.types",
    "protocols",
    "services",
    "os-release",
    "debian_version",
    "gai.conf",
    "host.conf",
    "terminfo",
    "gitconfig",
    "bash.bashrc",
];

const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: u32 = 0x8000;

fn c(p: impl AsRef<Path>) -> Result<CString, String> {
    CString::new(p.as_ref().as_os_str().as_bytes()).map_err(|_| format!("path {} contains NUL", p.as_ref().display()))
}

fn err(what: String) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

fn mount(
    src: Option<&str>,
    dst: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), String> {
    let src_c = src.map(c).transpose()?;
    let dst_c = c(dst)?;
    let fs_c = fstype.map(c).transpose()?;
    let data_c = data.map(c).transpose()?;
    let p = |o: &Option<CString>| o.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is NULL or a NUL-terminated string alive for the call.
    let r = unsafe { libc::mount(p(&src_c), dst_c.as_ptr(), p(&fs_c), flags, p(&data_c).cast()) };
    if r != 0 {
        return Err(err(format!("mount {} on {}", src.or(fstype).unwrap_or("-"), dst.display())));
    }
    Ok(())
}

/// `mount_setattr(2)`: adds attributes (read-only, nosuid, nodev) to a mount, optionally to
/// every mount below it. Adding never clears the flags the kernel locked for us.
fn setattr(path: &Path, set: u64, recursive: bool) -> Result<(), String> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr { attr_set: set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    let p = c(path)?;
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: the struct and path outlive the call; the size argument matches the struct.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            p.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(err(format!("mount_setattr {}", path.display())));
    }
    Ok(())
}

fn mkdir_p(p: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .map_err(|e| format!("cannot create mount point {}: {e}", p.display()))
}

fn old(p: &Path) -> PathBuf {
    let rel = p.strip_prefix("/").unwrap_or(p);
    Path::new(OLD).join(rel)
}

/// How a path is exposed inside the sandbox.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Kind {
    ReadOnly,
    ReadWrite,
    Device,
}

/// A policy path to expose: `dst` is the path the policy names (and the sandbox sees), `src`
/// its canonical host path, resolved before the namespaces are entered so that symlinked
/// parents (`/var/run -> /run`) resolve against the host root, not the new one.
#[derive(Debug)]
pub(crate) struct Grant {
    src: PathBuf,
    dst: PathBuf,
    kind: Kind,
}

/// Resolves the policy's workspace, granted paths and proxy socket directory on the host.
pub(crate) fn resolve_grants(policy: &Policy) -> Result<Vec<Grant>, String> {
    let mut wanted: Vec<(PathBuf, Kind)> = Vec::new();
    wanted.push((policy.workspace.clone(), if policy.workspace_writable { Kind::ReadWrite } else { Kind::ReadOnly }));
    wanted.extend(policy.read_only.iter().map(|p| (p.clone(), Kind::ReadOnly)));
    wanted.extend(policy.read_write.iter().map(|p| (p.clone(), Kind::ReadWrite)));
    if let NetPolicy::Proxy { unix_socket, .. } = &policy.net {
        let dir = unix_socket.parent().ok_or("the proxy socket path has no parent directory")?;
        wanted.push((dir.to_path_buf(), Kind::ReadOnly));
    }
    // Parents before children, so nested grants land on top of their parents.
    wanted.sort_by_key(|(p, _)| p.components().count());
    wanted
        .into_iter()
        .map(|(dst, kind)| {
            // Re-checked here because `Policy`'s fields are public and a policy may be built
            // without the builder.
            if dst == Path::new("/") || crate::policy::RESERVED.iter().any(|r| dst.starts_with(r)) {
                return Err(format!("{} cannot be granted", dst.display()));
            }
            let src = std::fs::canonicalize(&dst).map_err(|e| format!("cannot expose {}: {e}", dst.display()))?;
            Ok(Grant { src, dst, kind })
        })
        .collect()
}

/// Binds host path `host` (seen under the old root) at `dst` in the new root. Missing optional
/// sources are skipped; missing mandatory ones are errors. Symlinks among the optional system
/// paths (merged /usr) are recreated as symlinks.
fn bind(host: &Path, dst: &Path, kind: Kind, mandatory: bool) -> Result<(), String> {
    let src = old(host);
    let meta = match std::fs::symlink_metadata(&src) {
        Ok(m) => m,
        Err(_) if !mandatory => return Ok(()),
        Err(e) => return Err(format!("cannot expose {}: {e}", host.display())),
    };
    if let Some(parent) = dst.parent() {
        mkdir_p(parent)?;
    }
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&src).map_err(|e| format!("readlink {}: {e}", host.display()))?;
        if std::fs::symlink_metadata(dst).is_err() {
            std::os::unix::fs::symlink(&target, dst).map_err(|e| format!("symlink {}: {e}", dst.display()))?;
        }
        return Ok(());
    }
    if std::fs::symlink_metadata(dst).is_err() {
        if meta.is_dir() {
            mkdir_p(dst)?;
        } else {
            std::fs::File::create(dst).map_err(|e| format!("cannot create mount point {}: {e}", dst.display()))?;
        }
    }
    let src_s = src.to_string_lossy();
    mount(Some(&src_s), dst, None, libc::MS_BIND | libc::MS_REC, None)?;
    let attrs = match kind {
        Kind::ReadOnly => MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Kind::ReadWrite => MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Kind::Device => MOUNT_ATTR_NOSUID,
    };
    setattr(dst, attrs, true)
}

fn pivot(new_root: &str, put_old: &str) -> Result<(), String> {
    let (a, b) = (c(new_root)?, c(put_old)?);
    // SAFETY: both arguments are NUL-terminated paths alive for the call.
    let r = unsafe { libc::syscall(libc::SYS_pivot_root, a.as_ptr(), b.as_ptr()) };
    if r != 0 {
        return Err(err(format!("pivot_root({new_root}, {put_old})")));
    }
    Ok(())
}

fn synth_etc() -> Result<(), String> {
    // SAFETY: plain id getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let mut passwd =
        String::from("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    let mut group = String::from("root:x:0:\nnogroup:x:65534:\n");
    if uid != 0 && uid != 65534 {
        passwd.push_str(&format!("sandbox:x:{uid}:{gid}:sandbox:/tmp:/bin/sh\n"));
    }
    if gid != 0 && gid != 65534 {
        group.push_str(&format!("sandbox:x:{gid}:\n"));
    }
    let files = [
        ("/etc/passwd", passwd),
        ("/etc/group", group),
        ("/etc/hosts", "127.0.0.1 localhost axp-sandbox\n::1 localhost ip6-localhost\n".to_string()),
        ("/etc/hostname", "axp-sandbox\n".to_string()),
    ];
    for (p, data) in files {
        std::fs::write(p, data).map_err(|e| format!("writing {p}: {e}"))?;
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644));
    }
    Ok(())
}

/// Builds the new root and pivots into it. On return the process's root is the sandbox root,
/// the host root is detached, and `/` is read-only.
pub(crate) fn build_root(policy: &Policy, grants: &[Grant]) -> Result<(), String> {
    let root = Path::new("/");
    mount(None, root, None, libc::MS_REC | libc::MS_PRIVATE, None)?;
    // The new root is a tmpfs mounted over /tmp of this (private) mount namespace; after the
    // pivot the host's /tmp is visible again under /oldroot/tmp.
    let base = Path::new("/tmp");
    mount(Some("tmpfs"), base, Some("tmpfs"), libc::MS_NOSUID | libc::MS_NODEV, Some("mode=0755,size=4m"))?;
    std::env::set_current_dir(base).map_err(|e| format!("chdir /tmp: {e}"))?;
    std::fs::create_dir("oldroot").map_err(|e| format!("mkdir oldroot: {e}"))?;
    pivot(".", "oldroot")?;
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;

    for s in SYSTEM {
        bind(Path::new(s), Path::new(s), Kind::ReadOnly, false)?;
    }
    mkdir_p(Path::new("/etc"))?;
    for e in ETC {
        let p = Path::new("/etc").join(e);
        bind(&p, &p, Kind::ReadOnly, false)?;
    }
    // Debian's python reads /etc/python3.X/sitecustomize.py.
    if let Ok(rd) = std::fs::read_dir(old(Path::new("/etc"))) {
        for ent in rd.flatten() {
            if ent.file_name().as_bytes().starts_with(b"python") {
                let p = Path::new("/etc").join(ent.file_name());
                bind(&p, &p, Kind::ReadOnly, false)?;
            }
        }
    }
    synth_etc()?;

    // /dev: a small tmpfs with the harmless character devices bound from the host.
    let dev = Path::new("/dev");
    mkdir_p(dev)?;
    mount(Some("tmpfs"), dev, Some("tmpfs"), libc::MS_NOSUID | libc::MS_NOEXEC, Some("mode=0755,size=64k"))?;
    for d in DEVICES {
        // /dev/null is the one programs cannot do without; the others may be absent in some
        // containers and are then simply missing inside too.
        let p = dev.join(d);
        bind(&p, &p, Kind::Device, d == "null")?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(name)).map_err(|e| format!("symlink /dev/{name}: {e}"))?;
    }
    let shm = dev.join("shm");
    mkdir_p(&shm)?;
    let tmp_opts = format!("mode=1777,size={}", policy.tmp_size.max(4096));
    mount(Some("tmpfs"), &shm, Some("tmpfs"), libc::MS_NOSUID | libc::MS_NODEV, Some(&tmp_opts))?;
    if policy.allow_pty {
        let pts = dev.join("pts");
        mkdir_p(&pts)?;
        mount(
            Some("devpts"),
            &pts,
            Some("devpts"),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some("newinstance,ptmxmode=0666,mode=0620"),
        )?;
        std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx")).map_err(|e| format!("symlink /dev/ptmx: {e}"))?;
    }
    setattr(dev, MOUNT_ATTR_RDONLY, false)?;

    // A fresh /proc for this pid namespace (the kernel requires the host's /proc to still be
    // visible at this point, hence before /oldroot is detached).
    let proc_ = Path::new("/proc");
    mkdir_p(proc_)?;
    mount(Some("proc"), proc_, Some("proc"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)?;
    if let Some(procs) = policy.limits.procs {
        // Linux >= 6.14 scopes pid_max to the pid namespace: a hard cap on the number of
        // processes that holds even for root, whose RLIMIT_NPROC the kernel does not enforce.
        let v = procs.saturating_add(8).clamp(301, 4_194_304);
        if let Err(e) = std::fs::write("/proc/sys/kernel/pid_max", v.to_string()) {
            // Older kernels have one global pid_max; RLIMIT_NPROC still applies.
            let _ = e;
        }
    }
    for p in ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"] {
        let p = Path::new(p);
        if p.exists() {
            let s = p.to_string_lossy();
            mount(Some(&s), p, None, libc::MS_BIND | libc::MS_REC, None)?;
            setattr(p, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, true)?;
        }
    }

    // Private, size-limited /tmp.
    let tmp = Path::new("/tmp");
    mkdir_p(tmp)?;
    mount(Some("tmpfs"), tmp, Some("tmpfs"), libc::MS_NOSUID | libc::MS_NODEV, Some(&tmp_opts))?;

    // Policy paths (resolved on the host before the namespaces were entered).
    for g in grants {
        bind(&g.src, &g.dst, g.kind, true)?;
    }

    // Detach the host and seal the root.
    let old_c = c(OLD)?;
    // SAFETY: umount2 reads the NUL-terminated path.
    if unsafe { libc::umount2(old_c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(err("umount /oldroot".into()));
    }
    std::fs::remove_dir(OLD).map_err(|e| format!("rmdir /oldroot: {e}"))?;
    setattr(root, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false)?;
    Ok(())
}
