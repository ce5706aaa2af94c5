//! `axp doctor`: whether `axp serve` can run here as configured, and what to fix where it cannot.
//! It checks the host (the sandbox layers from the same `axp_sandbox::probe` that `axp sandbox
//! check` prints, and the tiers a session could be granted, decided by the gateway's own
//! `Tiers`), the operator's files (`axp.toml` and the MCP fleet, read by the loaders `axp serve`
//! uses, so a typo gets the same located message and hint), the state directory (present,
//! writable, held by a running gateway) and each configured server (its command found as the
//! gateway would look it up, its URL well-formed). Each check is ok, warn or fail, with a fix for
//! the last two; the exit code is 1 when any check fails. It only reads: it starts no server,
//! opens no connection and creates nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Result;
use axp_protocol::methods::SandboxTier;
use clap::Args;
use serde::Serialize;
use serde_json::json;

use crate::auth::tiers::Tiers;
use crate::config::env::ProcessEnv;
use crate::config::fleet::{self, Fleet, Transport};
use crate::config::settings::{self, Settings};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Operator settings file [default: ./axp.toml when it exists, as `axp serve` reads it].
    #[arg(long = "config", value_name = "AXP_TOML")]
    pub config: Option<PathBuf>,
    /// An MCP client config, as given to `axp serve --mcp-config` (the files `mcp_config` in
    /// axp.toml names are checked too). Repeatable.
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub mcp_config: Vec<PathBuf>,
    /// The state directory to check [default: `state_dir` in axp.toml, or $XDG_STATE_HOME/axp].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The workspace, where a server without a `cwd` starts [default: `workspace` in axp.toml,
    /// or the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Print one JSON document (`{"ok", "summary", "checks": [{area, name, status, detail,
    /// fix}]}`) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Serialize)]
struct Check {
    area: &'static str,
    name: String,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

#[derive(Debug, Default)]
struct Report {
    checks: Vec<Check>,
}

impl Report {
    fn add(
        &mut self,
        area: &'static str,
        name: impl Into<String>,
        status: Status,
        detail: String,
        fix: Option<String>,
    ) {
        self.checks.push(Check { area, name: name.into(), status, detail, fix });
    }
    fn ok(&mut self, area: &'static str, name: impl Into<String>, detail: impl Into<String>) {
        self.add(area, name, Status::Ok, detail.into(), None);
    }
    fn warn(&mut self, area: &'static str, name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(area, name, Status::Warn, detail.into(), Some(fix.into()));
    }
    fn fail(&mut self, area: &'static str, name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(area, name, Status::Fail, detail.into(), Some(fix.into()));
    }
    fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }
}

pub fn run(a: DoctorArgs) -> Result<i32> {
    let mut config = Report::default();
    let settings = load_settings(&a, &mut config);
    let mut report = Report::default();
    host(&settings, &mut report);
    report.checks.append(&mut config.checks);
    let workspace = workspace(&a, &settings, &mut report);
    let fleet = load_fleet(&a, &settings, &mut report);
    state_dir(&a, &settings, &mut report);
    store(&settings, &mut report);
    servers(&fleet, &workspace, &mut report);

    let (ok, warn, fail) = (report.count(Status::Ok), report.count(Status::Warn), report.count(Status::Fail));
    if a.json {
        let doc = json!({
            "ok": fail == 0,
            "summary": {"ok": ok, "warn": warn, "fail": fail},
            "checks": report.checks,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print_text(&report);
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        println!("\n{} ok, {}, {}", ok, plural(warn, "warning"), plural(fail, "failure"));
    }
    Ok(if fail == 0 { 0 } else { 1 })
}

fn print_text(report: &Report) {
    let mut area = "";
    for c in &report.checks {
        if c.area != area {
            if !area.is_empty() {
                println!();
            }
            println!("{}", c.area);
            area = c.area;
        }
        let mark = match c.status {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        };
        let mut lines = c.detail.lines();
        println!("  {mark:<5} {:<16} {}", c.name, lines.next().unwrap_or(""));
        for l in lines {
            println!("  {:<5} {:<16} {l}", "", "");
        }
        if let Some(fix) = &c.fix {
            println!("  {:<5} {:<16} fix: {fix}", "", "");
        }
    }
}

/// `axp.toml` as `axp serve` finds it (`--config`, else `./axp.toml` when present). A file that
/// does not load fails, and the other checks go on with the defaults.
fn load_settings(a: &DoctorArgs, r: &mut Report) -> Settings {
    let path = match &a.config {
        Some(p) => p.clone(),
        None if Path::new("axp.toml").exists() => PathBuf::from("axp.toml"),
        None => {
            r.ok("config", "axp.toml", "none here and no --config: `axp serve` uses its defaults");
            return Settings::default();
        }
    };
    match settings::load(&path) {
        Ok(s) => {
            r.ok("config", "axp.toml", format!("{} loads", path.display()));
            s
        }
        Err(e) => {
            r.fail(
                "config",
                "axp.toml",
                e.to_string(),
                format!("correct {}: `axp serve` refuses to start while it does not load", path.display()),
            );
            Settings::default()
        }
    }
}

fn workspace(a: &DoctorArgs, settings: &Settings, r: &mut Report) -> PathBuf {
    let asked = a.workspace.clone().or(settings.workspace.clone());
    let dir = asked.clone().map_or_else(std::env::current_dir, Ok).and_then(|d| d.canonicalize());
    match dir {
        Ok(d) => {
            r.ok("config", "workspace", d.display().to_string());
            d
        }
        Err(e) => {
            let shown = asked.map_or_else(|| "the current directory".to_string(), |p| p.display().to_string());
            r.fail(
                "config",
                "workspace",
                format!("{shown} cannot be used: {e}"),
                "create it, or choose another with --workspace (or `workspace` in axp.toml)",
            );
            PathBuf::from(".")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The host

fn host(settings: &Settings, r: &mut Report) {
    let host = axp_sandbox::probe();
    r.ok("host", "kernel", host.kernel.clone());
    match &host.user_namespaces {
        Ok(()) => r.ok("host", "user namespaces", "yes"),
        Err(why) => r.fail(
            "host",
            "user namespaces",
            why.clone(),
            "allow unprivileged user namespaces (the reason names the sysctl that forbids them where one \
             does); in a container, start it with user namespaces allowed",
        ),
    }
    match &host.pivot_root {
        Ok(()) => r.ok("host", "pivot_root", "yes"),
        Err(why) => r.fail(
            "host",
            "pivot_root",
            why.clone(),
            "the sandbox mounts a tmpfs and pivot_roots into it inside its own mount namespace; \
             this host or container forbids that",
        ),
    }
    match &host.landlock_abi {
        Ok(abi) if *abi >= 1 => {
            let used = (*abi).min(axp_sandbox::probe::MAX_LANDLOCK_ABI);
            let mut layers = vec!["fs"];
            let mut missing = Vec::new();
            if used >= 4 {
                layers.push("tcp");
            } else {
                missing.push("TCP connect rules (ABI 4, Linux 6.7)");
            }
            if used >= 6 {
                layers.push("scoping");
            } else {
                missing.push("signal and abstract-socket scoping (ABI 6, Linux 6.12)");
            }
            let detail = format!("ABI {abi}, enforcing ABI {used} ({})", layers.join(", "));
            if missing.is_empty() {
                r.ok("host", "landlock", detail);
            } else {
                r.warn(
                    "host",
                    "landlock",
                    detail,
                    format!("the sandbox works, without {}; a newer kernel adds them", missing.join(" and ")),
                );
            }
        }
        Ok(_) => r.fail("host", "landlock", "ABI 0", LANDLOCK_FIX),
        Err(why) => r.fail("host", "landlock", why.clone(), LANDLOCK_FIX),
    }
    match &host.seccomp {
        Ok(()) => r.ok("host", "seccomp", "yes (errno action)"),
        Err(why) => r.fail("host", "seccomp", why.clone(), "the kernel needs seccomp filters (CONFIG_SECCOMP_FILTER)"),
    }
    match &host.cgroup {
        Ok(dir) => r.ok("host", "cgroups", format!("{}: jobs get pids.max and memory.max", dir.display())),
        Err(why) => r.warn(
            "host",
            "cgroups",
            why.clone(),
            "optional: without a delegated cgroup v2 (pids and memory enabled in its \
             cgroup.subtree_control, writable by this user) each job is bounded by rlimits and its \
             pid namespace only (sandbox/README.md)",
        ),
    }
    tiers(&host, settings, r);
}

const LANDLOCK_FIX: &str = "Landlock needs Linux 5.13 or newer, built with CONFIG_SECURITY_LANDLOCK and \
                            enabled at boot (`landlock` in the lsm= kernel parameter)";

/// The tiers a session could be granted, asked of the gateway's own [`Tiers`] with the same
/// default `axp serve` would choose: it fails when `axp serve` would refuse to start.
fn tiers(host: &axp_sandbox::HostSupport, settings: &Settings, r: &mut Report) {
    let kernel_lsm = host.kernel_lsm_available().map(|l| crate::execution::sandboxing::layers_json(&l));
    let dev_none_allowed = settings.sandbox.dangerously_allow_dev_none;
    let default = match settings.sandbox.default_tier.as_deref() {
        Some(t) => match t.parse::<SandboxTier>() {
            Ok(t) => t,
            Err(e) => {
                r.fail("host", "sandbox tiers", format!("[sandbox] default_tier: {e}"), "correct it in axp.toml");
                return;
            }
        },
        None if kernel_lsm.is_ok() || !dev_none_allowed => SandboxTier::KernelLsm,
        None => SandboxTier::DevNone,
    };
    let tiers = Tiers { kernel_lsm, dev_none_allowed, default, kernel_launcher: None };
    let mut lines = Vec::new();
    for t in [SandboxTier::KernelLsm, SandboxTier::DevNone, SandboxTier::Container, SandboxTier::ProcessToken] {
        let mark = if t == default { " (default)" } else { "" };
        match tiers.grant(Some(t)) {
            Ok(_) => lines.push(format!("{t}{mark}: granted")),
            Err(e) => lines.push(format!("{t}{mark}: refused — {}", e.reason())),
        }
    }
    let detail = lines.join("\n");
    match tiers.grant(Some(default)) {
        Err(_) => r.fail(
            "host",
            "sandbox tiers",
            detail,
            format!(
                "`axp serve` refuses to start without its default tier {default}; fix the host checks \
                 above, or serve without a sandbox: `axp serve --dangerously-allow-dev-none`"
            ),
        ),
        Ok(_) if default == SandboxTier::DevNone => r.warn(
            "host",
            "sandbox tiers",
            detail,
            "sessions run WITHOUT a sandbox by default: every process has the gateway's authority",
        ),
        Ok(_) if dev_none_allowed => r.warn(
            "host",
            "sandbox tiers",
            detail,
            "axp.toml allows dev-none: a session that asks runs without a sandbox",
        ),
        Ok(_) => r.ok("host", "sandbox tiers", detail),
    }
}

// ---------------------------------------------------------------------------------------------
// The fleet

/// Every fleet file `axp serve` would read (`--mcp-config`, then `mcp_config` in axp.toml),
/// loaded and merged exactly as it does.
fn load_fleet(a: &DoctorArgs, settings: &Settings, r: &mut Report) -> Fleet {
    let mut fleet = Fleet::default();
    let files: Vec<&PathBuf> = a.mcp_config.iter().chain(settings.mcp_config.iter()).collect();
    if files.is_empty() {
        r.ok(
            "config",
            "mcp-config",
            "no MCP fleet given: `axp serve` serves the built-in files__* tools (pass --mcp-config FILE)",
        );
    }
    for f in files {
        let name = f.file_name().map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned());
        match fleet::load(f, &ProcessEnv) {
            Ok(part) => {
                let n = part.servers.len() + part.statics.len() + part.unresolved.len();
                let detail = format!("{}: {n} server{}", f.display(), if n == 1 { "" } else { "s" });
                match fleet.merge(part, f) {
                    Ok(()) => r.ok("config", name, detail),
                    Err(e) => r.fail("config", name, e.to_string(), "rename one of the servers"),
                }
            }
            Err(e) => r.fail(
                "config",
                name,
                e.to_string(),
                "correct the file: `axp serve` refuses to start while it does not load",
            ),
        }
    }
    for w in &fleet.warnings {
        r.warn("config", "mcp-config", w.clone(), "harmless; edit the file to silence it");
    }
    fleet
}

fn servers(fleet: &Fleet, workspace: &Path, r: &mut Report) {
    for s in &fleet.servers {
        match &s.transport {
            Transport::Stdio { command, env, cwd, .. } => {
                let cwd = cwd.clone().unwrap_or_else(|| workspace.to_path_buf());
                if !cwd.is_dir() {
                    r.fail(
                        "servers",
                        &s.name,
                        format!("its cwd {} is not a directory", cwd.display()),
                        format!("create it, or correct `cwd` in {}", s.source.display()),
                    );
                    continue;
                }
                let path = lookup_path(&s.sandbox.env, env);
                check_command(r, &s.name, command, &path, &cwd, &s.source);
            }
            Transport::Http { url, legacy_sse, .. } => {
                check_url(r, &s.name, url, if *legacy_sse { "legacy HTTP+SSE" } else { "Streamable HTTP" })
            }
        }
    }
    for st in &fleet.statics {
        let path = lookup_path(&st.sandbox.env, &Default::default());
        check_command(r, &st.provider, &st.command, &path, workspace, &st.source);
    }
    for (name, why) in &fleet.unresolved {
        r.warn(
            "servers",
            name,
            format!("not started: {why}"),
            "set the variable before `axp serve`, or give a default in the file (`${VAR:-default}`); \
             `axp serve` serves the other servers and reports this one as down",
        );
    }
    for name in &fleet.disabled {
        r.ok("servers", name, "disabled in its config: not started");
    }
}

/// Where the gateway looks a server's command up: the `PATH` of the server's own `env`, else the
/// host's (when `sandbox.env` passes it through), else the host's without version-manager shim
/// directories — the environment `catalog::providers` gives the process it starts.
fn lookup_path(passed: &[String], own: &std::collections::BTreeMap<String, String>) -> (OsString, &'static str) {
    if let Some(p) = own.get("PATH") {
        return (p.into(), "the server's own `env.PATH`");
    }
    let host = std::env::var("PATH").unwrap_or_else(|_| axp_sandbox::DEFAULT_PATH.into());
    if passed.iter().any(|v| v == "PATH") {
        return (host.into(), "your PATH");
    }
    (crate::catalog::providers::sandbox_path().into(), "your PATH (without version-manager shims)")
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn check_command(r: &mut Report, server: &str, command: &str, path: &(OsString, &str), cwd: &Path, source: &Path) {
    let (path_env, path_from) = path;
    let found = if command.contains('/') {
        let p = cwd.join(command);
        if !p.exists() {
            r.fail(
                "servers",
                server,
                format!("`{command}` does not exist (looked for {})", p.display()),
                format!("install the server there, or correct `command` in {}", source.display()),
            );
            return;
        }
        if !is_executable(&p) {
            r.fail(
                "servers",
                server,
                format!("`{command}` ({}) is not an executable file", p.display()),
                format!("make it executable (`chmod +x {}`), or run it through its interpreter", p.display()),
            );
            return;
        }
        p
    } else {
        match axp_sandbox::discover::find_program(command, Some(path_env.as_os_str())) {
            Some(p) => p,
            None => {
                let mut fix = install_hint(command).map_or_else(
                    || format!("install `{command}`, or give its absolute path as `command` in {}", source.display()),
                    str::to_string,
                );
                if let Some(near) = nearest_program(command, path_env) {
                    fix = format!("did you mean `{near}`? Otherwise {fix}");
                }
                r.fail("servers", server, format!("`{command}` is not found on {path_from}"), fix);
                return;
            }
        }
    };
    match interpreter_problem(&found, path_env) {
        Some(why) => r.fail(
            "servers",
            server,
            format!("{} cannot start: {why}", found.display()),
            "reinstall the server (a moved or deleted virtualenv leaves its scripts pointing nowhere)",
        ),
        None => r.ok("servers", server, found.display().to_string()),
    }
}

/// A script whose `#!` interpreter is missing fails at exec with a bare "No such file or
/// directory"; say which interpreter instead.
fn interpreter_problem(file: &Path, path_env: &OsString) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = String::from_utf8_lossy(line.split(|b| *b == b'\n').next()?).into_owned();
    let mut words = line.split_whitespace();
    let interp = words.next()?;
    if matches!(interp, "/usr/bin/env" | "/bin/env") {
        let prog = words.find(|w| !w.starts_with('-'))?;
        return axp_sandbox::discover::find_program(prog, Some(path_env.as_os_str()))
            .is_none()
            .then(|| format!("its interpreter `{prog}` (`#!{line}`) is not found on PATH"));
    }
    (!is_executable(Path::new(interp))).then(|| format!("its interpreter {interp} does not exist"))
}

/// What installs the launchers MCP servers are usually started with.
fn install_hint(command: &str) -> Option<&'static str> {
    Some(match command {
        "npx" | "npm" | "node" => "install Node.js, which brings node, npm and npx (Debian: `apt install nodejs npm`)",
        "uvx" | "uv" => "install uv, which brings uvx (`pip install uv`)",
        "python" | "python3" | "pip" | "pip3" => "install Python 3 (Debian: `apt install python3 python3-venv`)",
        "docker" => "install Docker, or start the server's own command instead of a container",
        "deno" => "install Deno",
        "bun" | "bunx" => "install Bun",
        _ => return None,
    })
}

/// An executable on the lookup path whose name is one or two edits from `command`.
fn nearest_program(command: &str, path_env: &OsString) -> Option<String> {
    if command.len() < 4 {
        return None;
    }
    let mut best: Option<(usize, String)> = None;
    for dir in std::env::split_paths(path_env) {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let d = strsim::levenshtein(command, &name);
            if d <= 2 && best.as_ref().is_none_or(|(b, _)| d < *b) && is_executable(&e.path()) {
                best = Some((d, name));
            }
        }
    }
    best.map(|(_, n)| n)
}

/// A URL server's address must be one `reqwest` can parse, with a host. Nothing is sent to it.
fn check_url(r: &mut Report, server: &str, url: &str, kind: &str) {
    let parsed = match reqwest::Url::parse(url) {
        Ok(u) => u,
        Err(e) => {
            r.fail(
                "servers",
                server,
                format!("`{url}` is not a valid URL: {e}"),
                "write it as http(s)://HOST[:PORT]/PATH",
            );
            return;
        }
    };
    let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) else {
        r.fail("servers", server, format!("`{url}` has no host"), "write it as http(s)://HOST[:PORT]/PATH");
        return;
    };
    // An IPv6 host keeps its brackets in `host_str`.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if parsed.scheme() == "http" && !loopback {
        r.warn(
            "servers",
            server,
            format!("{kind}, {url}: plain http to another host"),
            "use https: its headers (tokens) and every call would travel unencrypted",
        );
    } else {
        r.ok("servers", server, format!("{kind}, {url} (not contacted)"));
    }
}

// ---------------------------------------------------------------------------------------------
// The state directory

/// The state directory `axp serve` would use: present (or creatable), writable, and whether a
/// running gateway holds it.
fn state_dir(a: &DoctorArgs, settings: &Settings, r: &mut Report) {
    let dir =
        a.state_dir.clone().or(settings.state_dir.clone()).unwrap_or_else(crate::commands::serve::default_state_dir);
    let shown = dir.display().to_string();
    const NAME: &str = "state dir";
    if !dir.exists() {
        let absolute = std::path::absolute(&dir).unwrap_or_else(|_| dir.clone());
        let parent = absolute.ancestors().skip(1).find(|p| p.exists());
        match parent {
            Some(p) if writable(p) => {
                r.ok("state", NAME, format!("{shown} does not exist yet: `axp serve` creates it (mode 0700)"))
            }
            _ => r.fail(
                "state",
                NAME,
                format!("{shown} does not exist and cannot be created here"),
                "create it with write access for this user, or choose another with --state-dir",
            ),
        }
        return;
    }
    if !dir.is_dir() {
        r.fail("state", NAME, format!("{shown} is not a directory"), "choose another with --state-dir");
        return;
    }
    if !writable(&dir) {
        r.fail(
            "state",
            NAME,
            format!("{shown} is not writable by this user"),
            "give this user write access to it, or choose another with --state-dir",
        );
        return;
    }
    if axp_store::in_use(&dir) {
        r.warn(
            "state",
            NAME,
            format!("{shown} is held by a running gateway"),
            "a second `axp serve` on it cannot start: use that gateway, stop it, or give the new one its \
             own --state-dir (`axp serve --stdio` moves aside by itself)",
        );
    } else {
        r.ok("state", NAME, format!("{shown}: writable, not in use"));
    }
}

/// `[store]`: the retention setting, and a PostgreSQL store reached as `axp serve` will reach it
/// (its URL with `${VAR}` expanded, TLS as the URL asks), read without writing: whether the
/// connection is encrypted and which schema version the database holds.
fn store(settings: &Settings, r: &mut Report) {
    match settings.store.keep_ended_jobs() {
        Ok(None) => {}
        Ok(Some(keep)) => {
            r.ok("store", "retention", format!("jobs that ended over {} days ago are deleted", keep.as_secs() / 86_400))
        }
        Err(e) => {
            r.fail("store", "retention", e, "set `[store] keep_ended_jobs_days` between 1 and 36500, or leave it out")
        }
    }
    let Some(url) = settings.store.url.as_deref() else {
        r.ok("store", "store", "embedded (SQLite in the state dir); `axp serve --store URL` would use PostgreSQL");
        return;
    };
    let url = match axp_config::env::expand(url, &ProcessEnv) {
        Ok(u) => u,
        Err(e) => {
            r.fail("store", "postgres", format!("[store] url: {e}"), "set the variable, or write the value in the URL");
            return;
        }
    };
    match axp_store::probe_postgres(&url) {
        Ok(p) => {
            let how = if p.tls { "over TLS, the server's certificate checked" } else { "without TLS" };
            if p.found > p.supported {
                r.fail(
                    "store",
                    "postgres",
                    format!(
                        "{}: reachable {how}; its schema is version {}, newer than this build's {}",
                        p.target, p.found, p.supported
                    ),
                    "run the `axp` the other replicas run (a build never downgrades a schema)",
                );
            } else if p.found < p.supported {
                r.ok(
                    "store",
                    "postgres",
                    format!(
                        "{}: reachable {how}; schema version {} of {} (`axp serve` migrates it at start)",
                        p.target, p.found, p.supported
                    ),
                );
            } else {
                r.ok("store", "postgres", format!("{}: reachable {how}; schema version {}", p.target, p.found));
            }
        }
        Err(e) => r.fail(
            "store",
            "postgres",
            e.to_string(),
            "`axp serve` refuses to start until the store answers: check the URL, the password and the server",
        ),
    }
}

fn writable(dir: &Path) -> bool {
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK).is_ok()
}
