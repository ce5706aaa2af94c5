//! Host-side discovery for the supervisor: which directories a command needs to be readable inside
//! the sandbox. It covers the program's install prefix, the interpreter named by its `#!` line, a
//! Python venv's base install, and a node script's `node_modules`. The gateway calls this while it
//! compiles a policy, for example for an MCP server configured as `.venv/bin/mcp-server-time` or
//! as `node …/dist/index.js`.
//!
//! This module only reads the host filesystem (lookups, `#!` lines, `pyvenv.cfg`). It never runs
//! in the exec path. Its results are suggestions that the operator's configuration turns into
//! grants; they grant nothing by themselves.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Directories that are always readable inside the sandbox, so they never need a grant.
const SYSTEM: [&str; 8] = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];

fn is_system(p: &Path) -> bool {
    SYSTEM.iter().any(|s| p.starts_with(s))
}

/// Where the real `env` lives; a `#!` line naming one of these looks its argument up on PATH.
const ENV: [&str; 2] = ["/usr/bin/env", "/bin/env"];

/// A regular file with an execute bit, following symlinks (as `execve` does).
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Looks `name` up in `path_env` (default [`crate::DEFAULT_PATH`]), like `execvp`.
pub fn find_program(name: &str, path_env: Option<&OsStr>) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return p.is_absolute().then_some(p).filter(|p| is_executable(p));
    }
    let path = path_env.unwrap_or(OsStr::new(crate::DEFAULT_PATH));
    std::env::split_paths(path).map(|d| d.join(name)).find(|c| is_executable(c))
}

/// The directory to expose for one file: its install prefix when it sits in a `bin` directory
/// (`/opt/x/bin/tool` gives `/opt/x`), the outermost `node_modules` above it, or else its own
/// directory. System paths give nothing.
fn root_of(file: &Path) -> Option<PathBuf> {
    if is_system(file) {
        return None;
    }
    let mut acc = PathBuf::new();
    for c in file.components() {
        acc.push(c);
        if matches!(c, Component::Normal(n) if n == "node_modules") {
            return Some(acc);
        }
    }
    let dir = file.parent()?;
    if dir.file_name() == Some(OsStr::new("bin")) {
        return dir.parent().map(Path::to_path_buf);
    }
    Some(dir.to_path_buf())
}

fn shebang(file: &Path) -> Option<Vec<String>> {
    let mut buf = [0u8; 256];
    let n = std::fs::File::open(file).ok()?.read(&mut buf).ok()?;
    let text = buf[..n].strip_prefix(b"#!")?;
    let line = text.split(|b| *b == b'\n').next()?;
    let words: Vec<String> = String::from_utf8_lossy(line).split_whitespace().map(str::to_string).collect();
    (!words.is_empty()).then_some(words)
}

fn venv_home(bin_file: &Path) -> Option<PathBuf> {
    let prefix = bin_file.parent()?.parent()?;
    let cfg = std::fs::read_to_string(prefix.join("pyvenv.cfg")).ok()?;
    cfg.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "home").then(|| PathBuf::from(v.trim()))
    })
}

fn visit(file: &Path, path_env: Option<&OsStr>, out: &mut Vec<PathBuf>, depth: u32) {
    if depth > 4 {
        return;
    }
    let canonical = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    for f in [file, canonical.as_path()] {
        if let Some(r) = root_of(f) {
            out.push(r);
        }
    }
    let venv_python =
        venv_home(file).and_then(|home| ["python3", "python"].iter().map(|n| home.join(n)).find(|p| p.exists()));
    if let Some(py) = venv_python {
        visit(&py, path_env, out, depth + 1);
    }
    if let Some(words) = shebang(&canonical) {
        // Only the real `env` looks its argument up on PATH; any other program named `env` is
        // just an interpreter. And an interpreter is followed only when it is an executable
        // file: the kernel would refuse anything else, so anything else is no interpreter but
        // a file someone wants made readable (a key, say).
        let interp = if ENV.contains(&words[0].as_str()) {
            words.iter().skip(1).find(|w| !w.starts_with('-')).and_then(|w| find_program(w, path_env))
        } else {
            Some(PathBuf::from(&words[0]))
        };
        if let Some(i) = interp.filter(|i| is_executable(i)) {
            visit(&i, path_env, out, depth + 1);
        }
    }
}

/// Directories outside the system paths that `argv` needs readable: for the program (found via
/// `path_env`) its prefix, `#!` interpreter and venv base; for every argument that is an
/// existing absolute file (a script), its directory or `node_modules`. The result is sorted,
/// without duplicates, and without paths already inside another entry.
///
/// Pass real interpreter paths, not pyenv *shims*: a shim is a bash script that needs all of
/// `~/.pyenv` and `pyenv` itself.
pub fn read_paths_for(argv: &[String], path_env: Option<&OsStr>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = argv.first().and_then(|a| find_program(a, path_env)) {
        visit(&p, path_env, &mut out, 0);
    }
    for a in argv.iter().skip(1) {
        let p = Path::new(a);
        if p.is_absolute() && p.is_file() {
            visit(p, path_env, &mut out, 1);
        }
    }
    out.sort();
    out.dedup();
    let all = out.clone();
    out.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    out
}
