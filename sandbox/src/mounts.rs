//! The minimal root: a tmpfs pivot_root'ed into, holding read-only system directories, the
//! `/etc` files programs need (never `/etc/shadow`), a fresh `/proc`, a minimal `/dev`, a private
//! size-limited `/tmp`, the policy's workspace and granted paths at their host paths, and the
//! masks that hide the policy's hidden paths.
//!
//! Runs in the new pid namespace's init (it must, for `/proc`), before the target is forked.
//! It must not touch anything outside the private mount namespace: every mount is made private
//! first, so nothing propagates back to the host.
//!
//! No path is ever resolved through a symbolic link here. A grant's host path is opened below
//! the old root one component at a time with `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)`,
//! its mount point in the new root is opened (or created with `mkdirat`) the same way, and the
//! bind is made between the two descriptors with `open_tree` and `move_mount`, so nothing is
//! looked up by path twice. A symlink anywhere on either path refuses the grant: the host may
//! hold symlinks a job planted (its workspace is writable), and following one would expose, or
//! mount onto, something other than the path the policy names. System directories that are
//! symlinks (merged /usr: `/bin -> usr/bin`) are recreated as the same symlinks, never followed.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::policy::{NetPolicy, Policy};

const OLD: &str = "/oldroot";

/// The empty file that masks hidden files is cloned from this entry of the root tmpfs, which is
/// unlinked again before the target starts (the clones keep the inode alive).
const EMPTY_FILE: &CStr = c".axp-empty";

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

// uapi/linux/mount.h and fcntl.h, spelled out here so the crate does not depend on which of
// them a given libc release exports.
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;
const AT_RECURSIVE: u32 = 0x8000;
const OPEN_TREE_CLONE: u32 = 0x1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
const FSOPEN_CLOEXEC: u32 = 0x1;
const FSCONFIG_SET_STRING: u32 = 1;
const FSCONFIG_CMD_CREATE: u32 = 6;
const FSMOUNT_CLOEXEC: u32 = 0x1;

fn c(p: impl AsRef<Path>) -> Result<CString, String> {
    CString::new(p.as_ref().as_os_str().as_bytes()).map_err(|_| format!("path {} contains NUL", p.as_ref().display()))
}

fn err(what: String) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

/// Turns a syscall's return value into the new descriptor it created.
fn new_fd(r: libc::c_long) -> io::Result<OwnedFd> {
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) })
}

fn check(r: libc::c_long) -> io::Result<()> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
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

/// `mount_setattr(2)` on `dir`/`path`: adds attributes (read-only, nosuid, nodev, noexec) to a
/// mount, optionally to every mount below it. Adding never clears the flags the kernel locked
/// for us.
fn setattr_at(dir: libc::c_int, path: &CStr, flags: u32, set: u64) -> io::Result<()> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr { attr_set: set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: the struct and path outlive the call; the size argument matches the struct.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
}

/// [`setattr_at`] on a path of the new root (only for paths the sandbox made itself).
fn setattr(path: &Path, set: u64, recursive: bool) -> Result<(), String> {
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    setattr_at(libc::AT_FDCWD, &c(path)?, flags, set).map_err(|e| format!("mount_setattr {}: {e}", path.display()))
}

/// [`setattr_at`] on the mount a descriptor names (an attached or a detached one).
fn setattr_fd(fd: BorrowedFd<'_>, set: u64, recursive: bool) -> io::Result<()> {
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    setattr_at(fd.as_raw_fd(), c"", flags, set)
}

/// Attaches the detached mount `tree` on the directory or file `onto` names.
fn move_onto(tree: BorrowedFd<'_>, onto: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both descriptors are valid for the call and the paths are empty C strings.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            onto.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
}

/// Clones the mount tree at `src` (with every mount below it) as a detached mount, gives every
/// mount of the clone `attrs`, and attaches it on `onto`. The returned descriptor names the
/// root of the mounted clone: the directory (or file) that was mounted, not whatever a path to
/// it resolves to later.
fn attach_clone(src: BorrowedFd<'_>, onto: BorrowedFd<'_>, attrs: u64) -> io::Result<OwnedFd> {
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | AT_RECURSIVE | libc::AT_EMPTY_PATH as u32;
    // SAFETY: `src` is valid for the call and the path is an empty C string.
    let tree = new_fd(unsafe { libc::syscall(libc::SYS_open_tree, src.as_raw_fd(), c"".as_ptr(), flags) })?;
    setattr_fd(tree.as_fd(), attrs, true)?;
    move_onto(tree.as_fd(), onto)?;
    Ok(tree)
}

/// A new, detached, empty tmpfs (the new mount API: `fsopen`, `fsconfig`, `fsmount`).
fn detached_tmpfs(options: &[(&CStr, &CStr)], attrs: u64) -> io::Result<OwnedFd> {
    // SAFETY: the name is a C string; the flag is an integer.
    let fs = new_fd(unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) })?;
    for (key, value) in options {
        // SAFETY: key and value are C strings alive for the call.
        check(unsafe {
            libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), FSCONFIG_SET_STRING, key.as_ptr(), value.as_ptr(), 0)
        })?;
    }
    // SAFETY: a command without arguments on our own filesystem context.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    })?;
    // SAFETY: integer arguments on our own filesystem context.
    new_fd(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })
}

/// Opens the single name `name` in `dir` with `openat2`: never through a symlink, never outside
/// `dir`, and with `O_PATH | O_NOFOLLOW` a final symlink comes back as itself (so the caller
/// sees it) instead of failing with `ELOOP`.
fn open_name(dir: BorrowedFd<'_>, name: &OsStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    let name = CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `open_how` is plain data; all zeroes is a valid value (and the kernel requires
    // zero in any field we do not set).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
    // openat2 answers EAGAIN when a concurrent rename might have let the lookup escape `dir`;
    // retrying is what the kernel asks for.
    for _ in 0..64 {
        // SAFETY: the path and struct outlive the call; the size matches the struct.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                name.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        match new_fd(r) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
            other => return other,
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// The file type bits (`S_IFMT`) of what a descriptor names.
fn file_type(fd: BorrowedFd<'_>) -> io::Result<libc::mode_t> {
    // SAFETY: fstat fills the zeroed local.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and a local out-parameter.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } as libc::c_long)?;
    Ok(st.st_mode & libc::S_IFMT)
}

/// Why a path could not be opened without following a symbolic link.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// This prefix of the path is a symbolic link, and something below it was asked for.
    Symlink(PathBuf),
    /// This prefix of the path does not exist.
    Missing(PathBuf),
    /// This prefix exists but is not a directory, and something below it was asked for.
    NotDir(PathBuf),
    /// Opening or creating this prefix failed otherwise.
    Io(PathBuf, io::Error),
}

impl Refusal {
    /// One line for the `axp-sandbox:` report; `side` says in which tree the path was walked.
    fn explain(&self, path: &Path, side: &str) -> String {
        let p = path.display();
        match self {
            Refusal::Symlink(at) => format!(
                "cannot expose {p}: {} is a symbolic link {side}; the sandbox never mounts through a symlink \
                 (grant the resolved path)",
                at.display()
            ),
            Refusal::Missing(at) => {
                format!("cannot expose {p}: {}: {}", at.display(), io::Error::from_raw_os_error(libc::ENOENT))
            }
            Refusal::NotDir(at) => format!("cannot expose {p}: {} {side} is not a directory", at.display()),
            Refusal::Io(at, e) => format!("cannot expose {p}: {} {side}: {e}", at.display()),
        }
    }
}

/// The names of an absolute path without `.`; `..` is refused (nothing here may climb).
fn names(path: &Path) -> Result<Vec<&OsStr>, String> {
    let mut out = Vec::new();
    for comp in path.components() {
        match comp {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("{} is not a plain absolute path", path.display()));
            }
        }
    }
    Ok(out)
}

/// Opens the absolute `path` below `start` (a root directory) one component at a time with
/// [`open_name`], so no component is ever a symlink that gets followed. Returns an `O_PATH`
/// descriptor and the file type of the last component, which may itself be a symlink (the
/// caller decides). With `create`, missing components are created on the way: directories for
/// every intermediate one, and for the last one a directory (`Some(true)`) or an empty file
/// (`Some(false)`).
pub(crate) fn walk(
    start: BorrowedFd<'_>,
    path: &Path,
    create: Option<bool>,
) -> Result<(OwnedFd, libc::mode_t), Refusal> {
    let parts = names(path).map_err(|e| Refusal::Io(path.to_path_buf(), io::Error::other(e)))?;
    let mut cur = start.try_clone_to_owned().map_err(|e| Refusal::Io(PathBuf::from("/"), e))?;
    let mut kind = file_type(cur.as_fd()).map_err(|e| Refusal::Io(PathBuf::from("/"), e))?;
    let mut seen = PathBuf::from("/");
    for (i, name) in parts.iter().enumerate() {
        match kind {
            libc::S_IFDIR => {}
            libc::S_IFLNK => return Err(Refusal::Symlink(seen)),
            _ => return Err(Refusal::NotDir(seen)),
        }
        seen.push(name);
        let last = i + 1 == parts.len();
        let fd = match open_name(cur.as_fd(), name, libc::O_PATH) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                let Some(final_dir) = create else { return Err(Refusal::Missing(seen)) };
                let dir = !last || final_dir;
                create_entry(cur.as_fd(), name, dir).map_err(|e| Refusal::Io(seen.clone(), e))?;
                open_name(cur.as_fd(), name, libc::O_PATH).map_err(|e| Refusal::Io(seen.clone(), e))?
            }
            Err(e) => return Err(Refusal::Io(seen, e)),
        };
        kind = file_type(fd.as_fd()).map_err(|e| Refusal::Io(seen.clone(), e))?;
        cur = fd;
    }
    Ok((cur, kind))
}

/// Creates `name` in `dir` as a directory (0755) or an empty file (0644). Creating never follows
/// a symlink: `mkdirat` does not, and `O_CREAT | O_EXCL` fails on any existing name. An entry
/// that appeared meanwhile is left for the caller's next open, which checks its type.
fn create_entry(dir: BorrowedFd<'_>, name: &OsStr, directory: bool) -> io::Result<()> {
    let n = CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let r = if directory {
        // SAFETY: a valid directory descriptor and a C string.
        unsafe { libc::mkdirat(dir.as_raw_fd(), n.as_ptr(), 0o755) }
    } else {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: as above; the new descriptor is closed right away.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), n.as_ptr(), flags, 0o644 as libc::c_uint) };
        if fd >= 0 {
            // SAFETY: closing the descriptor we just created.
            unsafe { libc::close(fd) };
            0
        } else {
            fd
        }
    };
    match check(r as libc::c_long) {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
}

/// How a path is exposed inside the sandbox.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Kind {
    ReadOnly,
    ReadWrite,
    Device,
}

impl Kind {
    fn attrs(self) -> u64 {
        match self {
            Kind::ReadOnly => MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            Kind::ReadWrite => MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            Kind::Device => MOUNT_ATTR_NOSUID,
        }
    }
}

/// One step of exposing the policy's paths, in the order they are applied.
#[derive(Debug)]
pub(crate) enum Step {
    /// Bind the host path at the same path inside.
    Bind { path: PathBuf, kind: Kind },
    /// Cover this path, wherever it is visible inside, with an empty read-only mask.
    Mask { path: PathBuf },
}

impl Step {
    fn path(&self) -> &Path {
        match self {
            Step::Bind { path, .. } | Step::Mask { path } => path,
        }
    }
}

/// Refuses paths no grant or mask may name. Re-checked here because `Policy`'s fields are
/// public and a policy may be built without the builder.
fn checked(path: &Path, what: &str) -> Result<(), String> {
    names(path)?;
    if !path.is_absolute() || path == Path::new("/") || crate::policy::RESERVED.iter().any(|r| path.starts_with(r)) {
        return Err(format!("{} cannot be {what}", path.display()));
    }
    Ok(())
}

/// Plans how the policy's paths are exposed: the workspace, the grants and the proxy socket's
/// directory as binds, and each hidden path as a mask. Runs in the exec process, on the host.
///
/// A hidden path is resolved here (on the host, where its symlinks mean what the gateway meant)
/// and masked at its resolved path, which is where the host directory appears inside: every
/// bind is at its own host path. The steps run shallowest first, and at equal depth binds
/// before masks, so a mask lands on top of the grant that contains it and a grant below a mask
/// lands on top of the mask.
pub(crate) fn plan(policy: &Policy) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let ws = if policy.workspace_writable { Kind::ReadWrite } else { Kind::ReadOnly };
    steps.push(Step::Bind { path: policy.workspace.clone(), kind: ws });
    steps.extend(policy.read_only.iter().map(|p| Step::Bind { path: p.clone(), kind: Kind::ReadOnly }));
    steps.extend(policy.read_write.iter().map(|p| Step::Bind { path: p.clone(), kind: Kind::ReadWrite }));
    if let NetPolicy::Proxy { unix_socket, .. } = &policy.net {
        let dir = unix_socket.parent().ok_or("the proxy socket path has no parent directory")?;
        steps.push(Step::Bind { path: dir.to_path_buf(), kind: Kind::ReadOnly });
    }
    for s in &steps {
        checked(s.path(), "granted")?;
    }
    for h in &policy.hide {
        checked(h, "hidden")?;
        let resolved = match std::fs::canonicalize(h) {
            Ok(p) => p,
            // Nothing exists there, so nothing of it can be visible.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot resolve the hidden path {}: {e}", h.display())),
        };
        checked(&resolved, "hidden")?;
        steps.push(Step::Mask { path: resolved });
    }
    steps.sort_by_key(|s| (s.path().components().count(), matches!(s, Step::Mask { .. })));
    Ok(steps)
}

/// Exposes the host's `path` at the same path in the new root for the sandbox's own needs
/// (system directories, `/etc` entries, devices). A missing optional source is skipped. A
/// symlink is recreated as the same symlink, never followed, so `/bin -> usr/bin` resolves
/// inside, against the new root.
fn expose_system(old: &OwnedFd, new: &OwnedFd, path: &Path, kind: Kind, mandatory: bool) -> Result<(), String> {
    let (src, mode) = match walk(old.as_fd(), path, None) {
        Ok(v) => v,
        Err(Refusal::Missing(_)) if !mandatory => return Ok(()),
        Err(r) => return Err(r.explain(path, "on the host")),
    };
    if mode == libc::S_IFLNK {
        let target = readlink(src.as_fd()).map_err(|e| format!("readlink {}: {e}", path.display()))?;
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(format!("{} has no parent directory", path.display()));
        };
        let (dir, _) = walk(new.as_fd(), parent, Some(true)).map_err(|r| r.explain(path, "inside the sandbox"))?;
        let (t, n) = (c(&target)?, c(name)?);
        // SAFETY: C strings alive for the call and a valid directory descriptor.
        let r = unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), n.as_ptr()) };
        return match check(r as libc::c_long) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => Err(format!("symlink {}: {e}", path.display())),
            _ => Ok(()),
        };
    }
    let (dst, dmode) =
        walk(new.as_fd(), path, Some(mode == libc::S_IFDIR)).map_err(|r| r.explain(path, "inside the sandbox"))?;
    if dmode == libc::S_IFLNK {
        return Err(Refusal::Symlink(path.to_path_buf()).explain(path, "inside the sandbox"));
    }
    attach_clone(src.as_fd(), dst.as_fd(), kind.attrs()).map_err(|e| format!("bind {}: {e}", path.display()))?;
    Ok(())
}

/// The target of the symlink an `O_PATH | O_NOFOLLOW` descriptor names.
fn readlink(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: the buffer outlives the call and its length is passed; an empty path with a
    // symlink descriptor reads that symlink.
    let n = unsafe { libc::readlinkat(fd.as_raw_fd(), c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(PathBuf::from(std::ffi::OsString::from_vec(buf)))
}

/// Exposes one policy grant: the host's `path`, opened without following any symlink, bound at
/// `path` in the new root, whose mount point is opened (or created) without following any
/// symlink either. Returns the mounted clone.
fn expose_grant(old: &OwnedFd, new: &OwnedFd, path: &Path, kind: Kind) -> Result<OwnedFd, String> {
    let (src, mode) = walk(old.as_fd(), path, None).map_err(|r| r.explain(path, "on the host"))?;
    if mode == libc::S_IFLNK {
        return Err(Refusal::Symlink(path.to_path_buf()).explain(path, "on the host"));
    }
    let dir = mode == libc::S_IFDIR;
    let (dst, dmode) = walk(new.as_fd(), path, Some(dir)).map_err(|r| r.explain(path, "inside the sandbox"))?;
    if dmode == libc::S_IFLNK {
        return Err(Refusal::Symlink(path.to_path_buf()).explain(path, "inside the sandbox"));
    }
    if dir != (dmode == libc::S_IFDIR) {
        return Err(format!(
            "cannot expose {}: it is {} on the host but not inside the sandbox",
            path.display(),
            if dir { "a directory" } else { "not a directory" }
        ));
    }
    attach_clone(src.as_fd(), dst.as_fd(), kind.attrs()).map_err(|e| format!("bind {}: {e}", path.display()))
}

/// What [`build_root`] keeps for the target after the mounts are made.
#[derive(Debug)]
pub(crate) struct Root {
    /// The mounted roots of the writable grants (the workspace when writable, then the
    /// `read_write` grants): Landlock's write rules go on these very directories.
    pub(crate) writable: Vec<OwnedFd>,
}

/// Covers `path` with an empty mask if it is visible in the new root. Returns the mask's mount
/// when it is a directory, to be made read-only once the grants below it are bound.
fn mask(new: &OwnedFd, path: &Path, pins: &[(PathBuf, Kind)]) -> Result<Option<OwnedFd>, String> {
    let hide = |what: String| format!("cannot hide {}: {what}", path.display());
    let find = || match walk(new.as_fd(), path, None) {
        Ok((_, libc::S_IFLNK)) => Err(hide("it is a symbolic link inside the sandbox".into())),
        Ok(v) => Ok(Some(v)),
        // Not visible inside: nothing to hide.
        Err(Refusal::Missing(_) | Refusal::NotDir(_)) => Ok(None),
        Err(Refusal::Symlink(at)) => Err(hide(format!("{} is a symbolic link inside the sandbox", at.display()))),
        Err(Refusal::Io(at, e)) => Err(hide(format!("{}: {e}", at.display()))),
    };
    if find()?.is_none() {
        return Ok(None);
    }
    pin_parents(new, path, pins).map_err(hide)?;
    // Opened again: the pins are new mounts on the way, and the mask must go on the hidden path
    // as seen through them, not below them.
    let Some((dst, mode)) = find()? else {
        return Err(hide("it vanished while the sandbox was set up".into()));
    };
    if mode == libc::S_IFDIR {
        let opts: [(&CStr, &CStr); 3] = [(c"mode", c"0755"), (c"size", c"64k"), (c"nr_inodes", c"4096")];
        let m = detached_tmpfs(&opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)
            .map_err(|e| hide(format!("tmpfs: {e}")))?;
        move_onto(m.as_fd(), dst.as_fd()).map_err(|e| hide(format!("move_mount: {e}")))?;
        return Ok(Some(m));
    }
    // Anything but a directory is covered by an empty, read-only regular file (a mount over a
    // non-directory must itself be a non-directory).
    let name = OsStr::from_bytes(EMPTY_FILE.to_bytes());
    let empty = match open_name(new.as_fd(), name, libc::O_PATH) {
        Ok(fd) => fd,
        Err(_) => {
            create_entry(new.as_fd(), name, false).map_err(|e| hide(format!("empty file: {e}")))?;
            open_name(new.as_fd(), name, libc::O_PATH).map_err(|e| hide(format!("empty file: {e}")))?
        }
    };
    let attrs = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    attach_clone(empty.as_fd(), dst.as_fd(), attrs).map_err(|e| hide(format!("bind: {e}")))?;
    Ok(None)
}

/// Makes every directory between the grant that shows `path` and `path` itself a mount point
/// (each is bound onto itself with the grant's attributes). The kernel refuses to rename a
/// mount point (`EBUSY`), so a job cannot move the hidden path, mask and all, to another name
/// where the next job, whose mask is placed by name, would see it uncovered.
fn pin_parents(new: &OwnedFd, path: &Path, pins: &[(PathBuf, Kind)]) -> Result<(), String> {
    let Some((grant, kind)) =
        pins.iter().filter(|(g, _)| path.starts_with(g) && path != g).max_by_key(|(g, _)| g.components().count())
    else {
        return Ok(());
    };
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| d != grant && d.starts_with(grant)) {
        let (fd, _) = walk(new.as_fd(), d, None).map_err(|r| r.explain(d, "inside the sandbox"))?;
        attach_clone(fd.as_fd(), fd.as_fd(), kind.attrs()).map_err(|e| format!("pinning {}: {e}", d.display()))?;
        dir = d.parent();
    }
    Ok(())
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

/// Creates a directory of the fresh root (only for paths the sandbox itself lays out).
fn mkdir_p(p: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(p)
        .map_err(|e| format!("cannot create mount point {}: {e}", p.display()))
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

/// Opens a directory of the sandbox's own layout as an `O_PATH` descriptor.
pub(crate) fn open_dir(path: &str) -> Result<OwnedFd, String> {
    let p = c(path)?;
    // SAFETY: a C string alive for the call.
    new_fd(unsafe { libc::open(p.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) } as libc::c_long)
        .map_err(|e| format!("open {path}: {e}"))
}

/// Builds the new root and pivots into it. On return the process's root is the sandbox root,
/// the host root is detached, and `/` is read-only.
pub(crate) fn build_root(policy: &Policy, steps: &[Step]) -> Result<Root, String> {
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
    let new = open_dir("/")?;
    let old = open_dir(OLD)?;

    for s in SYSTEM {
        expose_system(&old, &new, Path::new(s), Kind::ReadOnly, false)?;
    }
    mkdir_p(Path::new("/etc"))?;
    for e in ETC {
        expose_system(&old, &new, &Path::new("/etc").join(e), Kind::ReadOnly, false)?;
    }
    // Debian's python reads /etc/python3.X/sitecustomize.py.
    if let Ok(rd) = std::fs::read_dir(Path::new(OLD).join("etc")) {
        for ent in rd.flatten() {
            if ent.file_name().as_bytes().starts_with(b"python") {
                expose_system(&old, &new, &Path::new("/etc").join(ent.file_name()), Kind::ReadOnly, false)?;
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
        expose_system(&old, &new, &dev.join(d), Kind::Device, d == "null")?;
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

    // The policy's binds and masks, shallowest first (see `plan`).
    let mut writable = Vec::new();
    let mut masks = Vec::new();
    let mut bound: Vec<(PathBuf, Kind)> = Vec::new();
    for step in steps {
        match step {
            Step::Bind { path, kind } => {
                let fd = expose_grant(&old, &new, path, *kind)?;
                if *kind == Kind::ReadWrite {
                    writable.push(fd);
                }
                bound.push((path.clone(), *kind));
            }
            Step::Mask { path } => masks.extend(mask(&new, path, &bound)?),
        }
    }
    // Sealed only now: the mount points of grants below a mask were created in it meanwhile.
    for m in &masks {
        setattr_fd(m.as_fd(), MOUNT_ATTR_RDONLY, false).map_err(|e| format!("sealing a mask: {e}"))?;
    }
    // SAFETY: a valid directory descriptor and a C string; the clones keep the inode alive.
    let r = unsafe { libc::unlinkat(new.as_raw_fd(), EMPTY_FILE.as_ptr(), 0) };
    if r != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
        return Err(err(format!("unlink /{}", EMPTY_FILE.to_string_lossy())));
    }

    // Detach the host and seal the root.
    drop(old);
    let old_c = c(OLD)?;
    // SAFETY: umount2 reads the NUL-terminated path.
    if unsafe { libc::umount2(old_c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(err("umount /oldroot".into()));
    }
    std::fs::remove_dir(OLD).map_err(|e| format!("rmdir /oldroot: {e}"))?;
    setattr(root, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false)?;
    Ok(Root { writable })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> OwnedFd {
        open_dir("/").expect("open /")
    }

    #[test]
    fn walk_refuses_a_symlinked_component_and_reports_where() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("sub")).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("link")).expect("symlink");
        // Through the real directory: found, and a directory.
        let (_, mode) = walk(root().as_fd(), &real.join("sub"), None).expect("real path");
        assert_eq!(mode, libc::S_IFDIR);
        // Through the symlink: refused at the symlink, not followed.
        match walk(root().as_fd(), &dir.path().join("link/sub"), None) {
            Err(Refusal::Symlink(at)) => assert_eq!(at, dir.path().join("link")),
            other => panic!("expected a refusal at the symlink, got {other:?}"),
        }
        // The symlink as the last component comes back as itself.
        let (_, mode) = walk(root().as_fd(), &dir.path().join("link"), None).expect("final symlink");
        assert_eq!(mode, libc::S_IFLNK);
    }

    #[test]
    fn walk_creates_missing_components_without_following_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("link")).expect("symlink");
        let (_, mode) = walk(root().as_fd(), &dir.path().join("a/b/file"), Some(false)).expect("create");
        assert_eq!(mode, libc::S_IFREG);
        assert!(dir.path().join("a/b").is_dir());
        match walk(root().as_fd(), &dir.path().join("link/new"), Some(true)) {
            Err(Refusal::Symlink(at)) => assert_eq!(at, dir.path().join("link")),
            other => panic!("expected a refusal at the symlink, got {other:?}"),
        }
        assert!(!elsewhere.path().join("new").exists(), "a directory was created through the symlink");
    }

    #[test]
    fn masks_and_binds_are_ordered_shallowest_first_binds_before_masks() {
        let ws = tempfile::tempdir().expect("tempdir");
        let state = ws.path().join("state");
        std::fs::create_dir_all(state.join("codemode/job")).expect("mkdir");
        let policy = Policy::builder(ws.path())
            .fs_write(ws.path())
            .fs_read(state.join("codemode/job"))
            .hide(&state)
            .hide(ws.path().join("does-not-exist"))
            .build()
            .expect("policy");
        let steps = plan(&policy).expect("plan");
        let order: Vec<String> = steps
            .iter()
            .map(|s| match s {
                Step::Bind { path, .. } => format!("bind {}", path.display()),
                Step::Mask { path } => format!("mask {}", path.display()),
            })
            .collect();
        let ws = ws.path().display();
        assert_eq!(order, [format!("bind {ws}"), format!("mask {ws}/state"), format!("bind {ws}/state/codemode/job")]);
    }
}
