//! `axp serve`: loads the operator's configuration, opens the state dir, decides which sandbox
//! tiers can be granted, mounts every provider (the embedded default when nothing is
//! configured), keeps the index in step with each provider's events, and serves HTTP or stdio.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axp_audit::AuditLog;
use axp_protocol::CapabilitySet;
use axp_protocol::methods::SandboxTier;
use axp_providers::Launcher;
use axp_store::{ExitSync, Store, StoreOptions};
use clap::Args;

use crate::auth::session::{Auth, Profile, Sessions};
use crate::auth::tiers::Tiers;
use crate::catalog::providers;
use crate::catalog::registry::{Mount, Registry};
use crate::config::env::ProcessEnv;
use crate::config::fleet::{self, Fleet};
use crate::config::settings::{self, Settings};
use crate::execution::egress::Egress;
use crate::execution::jobs::Jobs;
use crate::gateway::{Gateway, Options};
use crate::metrics::Metrics;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// An MCP client config (Claude Desktop / Cursor / VS Code / AXP static form). Repeatable.
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub mcp_config: Vec<PathBuf>,
    /// Static tool: provider name (with --mcp-tool, --mcp-desc and --mcp-bridge).
    #[arg(long)]
    pub mcp_provider: Option<String>,
    /// Static tool: tool name.
    #[arg(long)]
    pub mcp_tool: Option<String>,
    /// Static tool: description.
    #[arg(long)]
    pub mcp_desc: Option<String>,
    /// Static tool: bridge command, run as `BRIDGE… call PROVIDER TOOL PARAMS_JSON`.
    #[arg(long)]
    pub mcp_bridge: Option<String>,
    /// Address to listen on [default: 127.0.0.1:7878, or `listen` in axp.toml]. Other than
    /// loopback needs `[[operators]]`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Speak MCP over stdin/stdout instead of HTTP.
    #[arg(long)]
    pub stdio: bool,
    /// Where sessions, jobs and job logs are kept [default: $XDG_STATE_HOME/axp].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Keep sessions, jobs and job logs in PostgreSQL (`postgres://user:pass@host/db`) instead
    /// of the embedded store in the state dir; also `[store] url` in axp.toml, `${VAR}` allowed.
    /// Keys and the audit log stay in the state dir.
    #[arg(long, env = "AXP_STORE", value_name = "URL", hide_env_values = true)]
    pub store: Option<String>,
    /// With a PostgreSQL store: how long this replica's lease on its running jobs lasts without
    /// renewal (renewed every third of it). Once it runs out, another replica ends those jobs as
    /// `lost`.
    #[arg(long, env = "AXP_STORE_LEASE", value_name = "SECONDS", default_value_t = 15.0,
          value_parser = parse_lease)]
    pub store_lease: f64,
    /// Operator settings file.
    #[arg(long = "config", value_name = "AXP_TOML")]
    pub config: Option<PathBuf>,
    /// The workspace sessions are bound to [default: the current directory].
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// A skill folder, or a folder of skill folders (Agent Skills format). Repeatable.
    #[arg(long = "skills", value_name = "DIR")]
    pub skills: Vec<PathBuf>,
    /// Do not mount the built-in file and command tools (they are mounted only when nothing else
    /// is configured).
    #[arg(long)]
    pub no_builtin: bool,
    /// Refuse to start when any server's config cannot be resolved (an unset `${VAR}`), instead
    /// of serving the others and reporting that server as down.
    #[arg(long)]
    pub strict_config: bool,
    /// Allow sessions without any sandbox (tier dev-none). Processes then run with your authority.
    #[arg(long)]
    pub dangerously_allow_dev_none: bool,
    /// Worker threads of the gateway's async runtime [default: half the CPUs, at least 1]. The
    /// gateway's own work per call is small next to its providers' (separate processes, which
    /// keep the other cores), and fewer workers hand work between threads less often
    /// (decision 0007).
    #[arg(long, value_name = "N", env = "AXP_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// No progress on stderr while the servers mount (shown only when stderr is a terminal).
    #[arg(long, short)]
    pub quiet: bool,
}

/// A lease of at least 0.3 s (renewed every 0.1 s) and at most a day.
fn parse_lease(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.3..=86_400.0).contains(&v) => Ok(v),
        _ => Err("a number of seconds from 0.3 to 86400".into()),
    }
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
const DEFAULT_MAX_BODY: usize = 4 * 1024 * 1024;
const DEFAULT_INLINE_MAX: usize = 64;

/// Everything `serve` resolved before it starts listening.
pub struct Prepared {
    pub gateway: Arc<Gateway>,
    pub listen: String,
    pub max_body: usize,
    pub warnings: Vec<String>,
}

pub async fn run(args: ServeArgs) -> Result<()> {
    let prepared = prepare(&args).await?;
    if args.stdio && !prepared.gateway.guard.approvals.is_empty() {
        bail!(
            "tools that need approval cannot be served over stdio: an operator approves over the gateway's HTTP endpoint (`axp approve`)\nhint: serve over HTTP (--listen), or remove `approval = \"required\"` / [approval]"
        );
    }
    if !args.stdio && !prepared.gateway.guard.operators.configured() {
        crate::auth::guard::require_loopback(&prepared.listen).await?;
    }
    for w in &prepared.warnings {
        tracing::warn!("{w}");
    }
    let gw = prepared.gateway.clone();
    if args.stdio {
        let r = crate::transport::stdio::serve(gw.clone(), prepared.max_body).await;
        shutdown(&gw).await;
        return r;
    }
    let listener = tokio::net::TcpListener::bind(&prepared.listen)
        .await
        .with_context(|| format!("cannot listen on {}", prepared.listen))?;
    let addr = listener.local_addr()?;
    // Providers mount in the background: count what is ready now, and say how many are not.
    let providers = gw.registry.providers();
    let starting = providers
        .iter()
        .filter(|(_, _, up, reason, _)| !*up && reason.as_deref() == Some(crate::catalog::registry::STARTING))
        .count();
    let more = if starting > 0 {
        format!(", {starting} more starting and joining as they come up (`/healthz` shows each)")
    } else {
        String::new()
    };
    eprintln!(
        "axp: serving on http://{addr}/axp (MCP: http://{addr}/mcp): {} tools from {} providers ready{more}",
        gw.registry.len(),
        providers.len() - starting
    );
    eprintln!(
        "axp: audit log {}",
        match gw.audit.durability() {
            axp_audit::Durability::EachAppend => "fsynced before each answer".to_string(),
            axp_audit::Durability::Interval(d) =>
                format!("written before each answer, fsynced within {} ms ([audit] sync = \"interval\")", d.as_millis()),
        }
    );
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    eprintln!("axp: {workers} runtime worker thread{}", if workers == 1 { "" } else { "s" });
    let app = crate::transport::http::router(gw.clone(), prepared.max_body);
    axum::serve(listener, app).with_graceful_shutdown(shutdown_signal()).await?;
    shutdown(&gw).await;
    Ok(())
}

/// Refuses approval rules that a session could walk around: a session granted `proc.spawn`
/// can run in its own sandbox, with `job.start {command}` or a code-mode program, whatever a
/// tool that runs with the workspace's authority would run (`like_spawn`: the built-in
/// `files__run_command`, a `[[cli]]` tool; `skills`: a skill's script), and no operator would
/// be asked. Rather than offer an approval that holds only for the polite, such a
/// configuration is refused until no session can be granted `proc.spawn`.
fn refuse_approvals_that_spawn_bypasses(
    approvals: &crate::auth::guard::Approvals,
    grantable: &[String],
    like_spawn: &[String],
    skills: bool,
) -> Result<()> {
    if approvals.is_empty() || !grantable.iter().any(|g| g.trim() == "proc.spawn") {
        return Ok(());
    }
    let provider_of = |t: &str| t.split_once("__").map_or(t, |(p, _)| p).to_string();
    let mut bypassed: Vec<String> = like_spawn
        .iter()
        .filter(|t| {
            approvals.destructive
                || approvals.providers.contains(&provider_of(t))
                || approvals.globs.iter().any(|g| axp_protocol::capability::glob_matches(g, t))
        })
        .cloned()
        .collect();
    if skills
        && (approvals.destructive || approvals.globs.iter().any(|g| glob_can_match_prefix(g.as_bytes(), b"skill__")))
    {
        bypassed.push("skill__*".into());
    }
    if bypassed.is_empty() {
        return Ok(());
    }
    bail!(
        "approval rules cover {}, but sessions may be granted `proc.spawn`: a session that can start processes can \
         run what these tools run (`job.start {{command}}` or code-mode) without any operator being asked\nhint: \
         remove `proc.spawn` from `[session] capabilities` (the default profile has it: write the profile out \
         without it, e.g. `capabilities = [\"tool(*)\", \"fs.write(WORKSPACE)\"]`) and from every `[[operators]]` \
         `capabilities`, or remove those approval rules",
        bypassed.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")
    )
}

/// Whether the glob `g` (`*`, `?`) matches some name that starts with `prefix`.
fn glob_can_match_prefix(g: &[u8], prefix: &[u8]) -> bool {
    match (g.first(), prefix.first()) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(b'*'), Some(_)) => glob_can_match_prefix(&g[1..], prefix) || glob_can_match_prefix(g, &prefix[1..]),
        (Some(b'?'), Some(_)) => glob_can_match_prefix(&g[1..], &prefix[1..]),
        (Some(c), Some(p)) => c == p && glob_can_match_prefix(&g[1..], &prefix[1..]),
    }
}

/// Creates the state directory if needed and makes it private to this user (0700): it holds the
/// signing keys, the audit log, the job store and every session's egress log. Returns its
/// resolved path, from which every path below it is derived.
pub fn private_state_dir(state_dir: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .with_context(|| format!("cannot create the state directory {}", state_dir.display()))?;
    std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make the state directory {} private (0700)", state_dir.display()))?;
    state_dir.canonicalize().with_context(|| format!("the state directory {} cannot be used", state_dir.display()))
}

/// Refuses a state directory that a sandboxed process could reach: it holds the token root key,
/// the local operator's signing key, the revocation list, the audit log and the job store, so a
/// job that could read or write it could mint tokens, approve its own calls or rewrite the audit
/// trail. Checked against the workspace, every `fs.*` path any session could be granted (the
/// `[session]` profile and every operator's ceiling) and `[sandbox] extra_read`.
fn keep_state_dir_out_of_reach(
    state_dir: &Path,
    workspace: &Path,
    grantable: &[String],
    extra_read: &[PathBuf],
) -> Result<()> {
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("cannot create the state directory {}", state_dir.display()))?;
    let state = state_dir.canonicalize().context("the state directory cannot be used")?;
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let mut reachable: Vec<(String, PathBuf)> = vec![("the workspace".into(), workspace.to_path_buf())];
    for g in grantable {
        if let Ok(axp_protocol::capability::Capability::FsRead(p) | axp_protocol::capability::Capability::FsWrite(p)) =
            g.parse::<axp_protocol::capability::Capability>()
        {
            reachable.push((format!("the grant `{g}`"), PathBuf::from(p)));
        }
    }
    for p in extra_read {
        reachable.push((format!("`[sandbox] extra_read` entry {}", p.display()), p.clone()));
    }
    for (what, p) in reachable {
        let p = canon(&p);
        if state.starts_with(&p) || p.starts_with(&state) {
            bail!(
                "the state directory {} is reachable from sandboxed jobs through {what} ({}); it holds the token \
                 and operator keys and the audit log\nhint: pass --state-dir outside the workspace (the default is \
                 $XDG_STATE_HOME/axp, ~/.local/state/axp)",
                state.display(),
                p.display()
            );
        }
    }
    Ok(())
}

/// Folds every egress attempt into the hash-chained audit log (kind `net.attempt`, with the
/// session or provider that made it), the gateway's metrics and, with traces on, a span. A
/// record that cannot be written is logged: the attempt was already decided by the proxy, and
/// its own audit file still has it.
fn egress_observer(audit: AuditLog, metrics: Arc<Metrics>) -> crate::execution::egress::AttemptSink {
    Arc::new(move |scope: &axp_providers::NetScope, r: &axp_egress_proxy::AuditRecord| {
        crate::telemetry::egress_attempt(scope, r);
        if r.decision == "allow" {
            metrics.egress_allowed.inc()
        } else {
            metrics.egress_denied.inc()
        }
        let mut detail = serde_json::json!({
            "decision": r.decision,
            "reason": r.reason,
            "detail": r.detail,
            "proto": r.proto,
            "target": r.target,
            "requested": r.requested,
            "addr": r.addr,
            "end": r.end,
            "reused": r.reused,
            "bytes_up": r.bytes_up,
            "bytes_down": r.bytes_down,
            "duration_ms": r.duration_ms,
        });
        let session = match scope {
            axp_providers::NetScope::Session(id) => {
                detail["session"] = serde_json::json!(id);
                Some(id.as_str())
            }
            axp_providers::NetScope::Provider(name) => {
                detail["provider"] = serde_json::json!(name);
                None
            }
            axp_providers::NetScope::Shared => None,
        };
        if let Err(e) = audit.append(axp_audit::Kind::NetAttempt, session, "egress-proxy", detail) {
            tracing::error!(error = %e, "cannot write an egress attempt to the audit log");
        }
    })
}

async fn shutdown(gw: &Gateway) {
    gw.admission.flush();
    let stops =
        gw.registry.providers().into_iter().filter_map(|(id, ..)| gw.registry.provider(&id)).map(|p| async move {
            let _ = tokio::time::timeout(Duration::from_secs(3), p.shutdown()).await;
        });
    futures::future::join_all(stops).await;
    let store = gw.jobs.store().clone();
    let _ = tokio::task::spawn_blocking(move || store.sync_all()).await;
    let audit = gw.audit.clone();
    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || audit.sync()).await {
        tracing::error!(error = %e, "cannot make the audit log's last records durable");
    }
    // The spans still buffered go out (bounded by the exporter's own timeout).
    let _ = tokio::task::spawn_blocking(crate::telemetry::stop).await;
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
    eprintln!("axp: shutting down");
}

/// The default state directory, unless this is a stdio gateway and another gateway (the user's
/// HTTP one, say) holds it: a stdio gateway belongs to the one client that started it, so it
/// then keeps its state beside, in `axp-stdio/<workspace and fleet>`, and the README's
/// `axp serve --stdio --mcp-config fleet.json` works next to a running `axp serve`. Plugins
/// installed with `axp provider add` live in the default directory; pass `--state-dir` to
/// share them.
fn default_or_stdio_state_dir(args: &ServeArgs, workspace: &Path) -> PathBuf {
    use sha2::Digest;
    let default = default_state_dir();
    if !args.stdio || !axp_store::in_use(&default) {
        return default;
    }
    let mut h = sha2::Sha256::new();
    h.update(workspace.as_os_str().as_encoded_bytes());
    for f in &args.mcp_config {
        h.update([0]);
        h.update(f.as_os_str().as_encoded_bytes());
    }
    let key = hex::encode(&h.finalize()[..6]);
    let dir = default.with_file_name("axp-stdio").join(key);
    tracing::info!(
        "another gateway holds {}; this stdio gateway keeps its state in {}",
        default.display(),
        dir.display()
    );
    dir
}

pub fn default_state_dir() -> PathBuf {
    if let Some(s) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        return PathBuf::from(s).join("axp");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".local/state/axp"),
        None => PathBuf::from(".axp-state"),
    }
}

pub async fn prepare(args: &ServeArgs) -> Result<Prepared> {
    let mut settings = match &args.config {
        Some(p) => settings::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        None if Path::new("axp.toml").exists() => {
            settings::load(Path::new("axp.toml")).map_err(|e| anyhow::anyhow!("{e}"))?
        }
        None => Settings::default(),
    };
    settings.skill_dirs.extend(args.skills.iter().cloned());
    let workspace = args
        .workspace
        .clone()
        .or(settings.workspace.clone())
        .map_or_else(std::env::current_dir, Ok)?
        .canonicalize()
        .context("the workspace directory cannot be used")?;
    let state_dir = match args.state_dir.clone().or(settings.state_dir.clone()) {
        Some(dir) => dir,
        None => default_or_stdio_state_dir(args, &workspace),
    };
    let state_dir = private_state_dir(&state_dir)?;
    // Operator paths are resolved once, here, like every grant: a process policy carries only
    // resolved paths, and one that resolves differently later is refused (`sandboxing::compile`).
    for p in settings.sandbox.extra_read.iter_mut().chain(settings.skill_dirs.iter_mut()) {
        *p = crate::auth::grants::resolve_path(p);
    }

    // The fleet: every --mcp-config file, the settings' files, and the static flags.
    let mut fleet = Fleet::default();
    let mut problems = Vec::new();
    for f in args.mcp_config.iter().chain(settings.mcp_config.iter()) {
        match fleet::load(f, &ProcessEnv) {
            Ok(part) => {
                if let Err(e) = fleet.merge(part, f) {
                    problems.push(e.to_string());
                }
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    match fleet::from_flags(
        args.mcp_provider.as_deref(),
        args.mcp_tool.as_deref(),
        args.mcp_desc.as_deref(),
        args.mcp_bridge.as_deref(),
    ) {
        Ok(Some(s)) => fleet.statics.push(s),
        Ok(None) => {}
        Err(e) => problems.push(e),
    }
    if args.strict_config {
        problems.extend(fleet.unresolved.iter().map(|(_, why)| why.clone()));
    }
    if !problems.is_empty() {
        bail!("the configuration has problems:\n{}", problems.join("\n"));
    }

    // Traces: off unless `[telemetry] otlp_endpoint` is set; a bad value stops the start.
    let telemetry = crate::telemetry::Config::from_settings(&settings.telemetry)
        .map_err(|e| anyhow::anyhow!("invalid `[telemetry]` setting: {e}"))?;
    if let Some(t) = &telemetry {
        crate::telemetry::start(t).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let egress_options = crate::execution::egress::EgressOptions::from_settings(&settings.egress)
        .map_err(|e| anyhow::anyhow!("invalid `[egress]` setting: {e}"))?;
    let egress = Arc::new(Egress::with_options(state_dir.join("egress"), egress_options));
    let tiers = Arc::new(decide_tiers(args, &settings, egress.clone(), &state_dir)?);
    let default_profile = vec![
        "tool(*)".to_string(),
        "resource(*)".to_string(),
        "prompt(*)".to_string(),
        "proc.spawn".to_string(),
        format!("fs.write({})", workspace.display()),
    ];
    let caps = CapabilitySet::parse_all(settings.session.capabilities.as_ref().unwrap_or(&default_profile)).map_err(
        |errs| {
            anyhow::anyhow!(
                "[session] capabilities: {}",
                errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
            )
        },
    )?;
    let profile = Profile {
        capabilities: caps,
        workspace: workspace.clone(),
        ttl_s: settings.session.ttl_s.unwrap_or(24 * 3600),
        max_ttl_s: settings.session.max_ttl_s.unwrap_or(7 * 24 * 3600),
    };

    let mut grantable: Vec<String> = profile.capabilities.iter().map(ToString::to_string).collect();
    for op in &settings.operators {
        grantable.extend(op.capabilities.iter().flatten().cloned());
    }
    keep_state_dir_out_of_reach(&state_dir, &workspace, &grantable, &settings.sandbox.extra_read)?;
    // The built-in tools are served when nothing else is configured (and not turned off).
    let nothing_configured = fleet.servers.is_empty()
        && fleet.unresolved.is_empty()
        && fleet.statics.is_empty()
        && settings.cli.is_empty()
        && settings.skill_dirs.is_empty();
    let builtin = nothing_configured && !args.no_builtin;
    let approvals = crate::auth::guard::approvals_from(&settings, &fleet);
    {
        // The tools whose processes run with the workspace's own authority, as a session's
        // command would: the built-in tools, `[[cli]]` tools and skills. MCP servers run with
        // their own grants and secrets, which a session lacks.
        let mut like_spawn: Vec<String> = Vec::new();
        if builtin {
            like_spawn.extend(providers::BUILTIN_TOOLS.iter().map(|t| format!("files__{t}")));
        }
        for c in &settings.cli {
            like_spawn.extend(c.tools.iter().map(|t| format!("{}__{}", c.provider, t.name)));
        }
        let skills = !settings.skill_dirs.is_empty();
        refuse_approvals_that_spawn_bypasses(&approvals, &grantable, &like_spawn, skills)?;
    }

    let store_url = match args.store.clone() {
        Some(url) => Some(url),
        None => settings
            .store
            .url
            .as_deref()
            .map(|u| axp_config::env::expand(u, &axp_config::env::ProcessEnv))
            .transpose()
            .map_err(|e| anyhow::anyhow!("[store] url: {e}"))?,
    };
    let keep_ended = settings.store.keep_ended_jobs().map_err(|e| anyhow::anyhow!("invalid `[store]` setting: {e}"))?;
    let lease = Duration::from_secs_f64(args.store_lease);
    let store = {
        let dir = state_dir.clone();
        tokio::task::spawn_blocking(move || -> Result<Store> {
            // Exits are made durable by a group commit every 100 ms rather than one fsync each:
            // a crash of the gateway loses nothing (events are written before they are sent),
            // a power cut can lose at most the last 100 ms of job endings.
            let options = StoreOptions::default().exit_sync(ExitSync::Batched { interval: Duration::from_millis(100) });
            let store = match &store_url {
                // The store's errors never contain the password; the URL is not printed.
                Some(url) => Store::connect(url, &dir, options).context("cannot open the PostgreSQL store")?,
                None => Store::open_with(&dir, options)
                    .with_context(|| format!("cannot open the state dir {}", dir.display()))?,
            };
            if store.kind() == axp_store::StoreKind::Postgres {
                // Alive before anything is started, so no other replica takes this one's jobs
                // for a dead replica's.
                store.register(lease).context("cannot register this replica in the PostgreSQL store")?;
            }
            let lost = store.mark_running_lost(crate::util::now_ms())?;
            crate::codemode::clean_stale(&dir);
            if lost > 0 {
                tracing::warn!(
                    lost,
                    "jobs that were running when the gateway stopped are now `lost` (their logs are intact)"
                );
            }
            Ok(store)
        })
        .await??
    };
    let metrics = Arc::new(Metrics::default());
    let registry = Registry::new();
    let key = axp_caps::load_or_create_root_key(&state_dir).context("cannot load the token root key")?;
    let verifier = Arc::new(axp_caps::Verifier::new(key));
    let revocations = state_dir.join(axp_caps::REVOCATIONS_FILE_NAME);
    verifier.load_revocations(&revocations).context("cannot load the token revocation list")?;
    if store.kind() == axp_store::StoreKind::Postgres {
        same_token_key_as_other_replicas(&store, &key, &state_dir)?;
        crate::auth::session::follow_revocations(store.clone(), verifier.clone())
            .context("cannot read the revocations recorded in the PostgreSQL store")?;
    }
    let auth = Auth { minter: axp_caps::Minter::new(key), verifier, revocations };
    // A session's egress proxy ends with the session: at `session.close`, or at its expiry.
    let sessions = Sessions::new(store.clone(), profile, tiers.clone(), auth).on_close({
        let egress = egress.clone();
        move |id| {
            egress.stop_session(id);
        }
    });
    egress.set_session_expiry({
        let store = store.clone();
        Arc::new(move |id: &str| store.get_session(id).ok().flatten().filter(|r| !r.closed).map(|r| r.expires_ms))
    });
    let quotas = Arc::new(crate::auth::quotas::Quotas::new(settings.quotas.clone()));
    let durability = settings.audit.durability().map_err(|e| anyhow::anyhow!("invalid `[audit]` setting: {e}"))?;
    let audit_options = axp_audit::Options { durability, ..axp_audit::Options::default() };
    let audit = AuditLog::open_with(&state_dir.join("audit"), audit_options).context("cannot open the audit log")?;
    egress.set_observer(egress_observer(audit.clone(), metrics.clone()));
    let write_tools: Vec<String> = std::iter::once("files__run_command".to_string())
        .chain(settings.cli.iter().map(|c| format!("{}__*", c.provider)))
        .collect();
    let writes = Arc::new(crate::execution::writes::Writes::new(audit.clone(), write_tools));
    let mut jobs = Jobs::new(store.clone(), metrics.clone()).with_quotas(quotas.clone()).with_writes(writes);
    if store.kind() == axp_store::StoreKind::Postgres {
        let replicas = crate::execution::jobs::Replicas::new(store.clone(), lease)?;
        jobs = jobs.join_replicas(replicas).context("cannot listen for the other replicas' messages")?;
    }
    let parked = jobs.adopt_parked().map_err(|e| anyhow::anyhow!("{}", e.reason()))?;
    if let Some(keep) = keep_ended {
        crate::execution::retention::spawn(store.clone(), keep);
    }
    if parked > 0 {
        tracing::warn!(parked, "jobs are awaiting operator approval (`axp approve JOB` / `axp deny JOB`)");
    }
    let guard = crate::auth::guard::Guard {
        operators: crate::auth::operators::Operators::build(&settings.operators, &state_dir, &ProcessEnv)?
            .share_nonces(&store),
        approvals,
        quotas,
    };
    let options = Options {
        inline_tools_max: settings.serve.inline_tools_max.unwrap_or(DEFAULT_INLINE_MAX),
        extra_read: settings.sandbox.extra_read.clone(),
    };
    // The held-back warning names the state directory when it is not the one `axp lint` finds
    // by itself, so that the line it prints approves in this gateway.
    let approve_with = match default_state_dir().canonicalize() {
        Ok(d) if d == state_dir => String::new(),
        _ => format!(" --state-dir {}", state_dir.display()),
    };
    let admission =
        crate::catalog::admission::Admission::load(settings.lint.as_ref(), &state_dir, &approve_with, &store)?;
    let gateway =
        Gateway::new(registry.clone(), sessions, jobs, metrics, options, audit, admission).with_guard(guard).shared();
    crate::gateway::catalog::watch_pins(gateway.clone(), &state_dir)?;

    let launcher = provider_launcher(&tiers)?;
    let _mounting = crate::commands::progress::watch_mounts(&registry, args.quiet);
    let mut mounts: Vec<Mount> = Vec::new();
    if builtin {
        mounts.push(providers::builtin(&workspace, launcher.clone())?);
    } else if !args.no_builtin {
        tracing::info!(
            "the built-in `files__*` tools are not mounted: they serve only when nothing else is configured"
        );
    }
    for (name, why) in &fleet.unresolved {
        tracing::warn!(server = %name, "not started, its configuration cannot be resolved: {why} (--strict-config refuses to start instead)");
    }
    // Servers' requests of the client (sampling, elicitation, roots) go through this gateway.
    let relay = axp_providers::RelayLink::default();
    relay.set(crate::gateway::relay::relay(&gateway));
    mounts.extend(providers::fleet(&fleet, &settings, &workspace, launcher.clone(), false, &relay).await?);
    for m in mounts {
        crate::gateway::catalog::watch_provider(gateway.clone(), m);
    }
    // Installed plugins (`axp provider add`), kept in step with the lockfile while serving.
    let plugin_ctx =
        crate::gateway::plugins::host_context(&settings.plugins, launcher.clone(), &workspace, egress.clone())?;
    crate::gateway::plugins::Plugins::start(gateway.clone(), state_dir.clone(), plugin_ctx).await?;

    let mut warnings = fleet.warnings;
    warnings.extend(registry.problems());
    Ok(Prepared {
        gateway,
        listen: args.listen.clone().or(settings.listen.clone()).unwrap_or_else(|| DEFAULT_LISTEN.to_string()),
        max_body: settings.serve.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY),
        warnings,
    })
}

/// Replicas sharing a PostgreSQL store must verify each other's tokens, so they must hold the
/// same token root key: the first replica records the key's SHA-256 in the store, and a replica
/// with another key refuses to start rather than refuse every token the others minted.
fn same_token_key_as_other_replicas(store: &Store, key: &[u8; 32], state_dir: &Path) -> Result<()> {
    use sha2::Digest;
    let mine = hex::encode(sha2::Sha256::digest(key));
    let agreed = store.agree("token-root-key-sha256", &mine).context("cannot compare the token root key")?;
    if agreed != mine {
        bail!(
            "this replica's token root key ({}) is not the one the other replicas sharing this PostgreSQL store use: \
             their tokens would not verify here\nhint: copy `{}` from one of them into this replica's state directory \
             (mode 0600), or give every replica the same key from one secret",
            state_dir.join(axp_caps::KEY_FILE_NAME).display(),
            axp_caps::KEY_FILE_NAME
        );
    }
    Ok(())
}

fn decide_tiers(args: &ServeArgs, settings: &Settings, egress: Arc<Egress>, state_dir: &Path) -> Result<Tiers> {
    let dev_none_allowed = args.dangerously_allow_dev_none || settings.sandbox.dangerously_allow_dev_none;
    let (kernel_lsm, kernel_launcher) =
        crate::execution::sandboxing::kernel_lsm(&settings.sandbox.extra_read, egress, Some(state_dir));
    let default = match settings.sandbox.default_tier.as_deref() {
        Some(t) => t.parse::<SandboxTier>().map_err(|e| anyhow::anyhow!("[sandbox] default_tier: {e}"))?,
        None if kernel_lsm.is_ok() => SandboxTier::KernelLsm,
        None if dev_none_allowed => SandboxTier::DevNone,
        None => bail!(
            "the kernel-lsm sandbox is unavailable on this host: {}\nhint: `axp sandbox check` explains; to serve without a sandbox anyway, pass --dangerously-allow-dev-none",
            kernel_lsm.as_ref().err().map_or("", String::as_str)
        ),
    };
    let tiers = Tiers { kernel_lsm, dev_none_allowed, default, kernel_launcher };
    // Refuse to start with a default nobody could be granted.
    tiers.grant(Some(default)).map_err(|e| anyhow::anyhow!("{}", e.reason()))?;
    if default == SandboxTier::DevNone {
        tracing::warn!("sessions run WITHOUT a sandbox (dev-none): every process has the gateway's authority");
    }
    Ok(tiers)
}

/// Provider processes (MCP servers, CLI tools) run under the strongest tier available.
fn provider_launcher(tiers: &Tiers) -> Result<Arc<dyn Launcher>> {
    if let Some(l) = &tiers.kernel_launcher {
        return Ok(l.clone());
    }
    if tiers.dev_none_allowed {
        tracing::warn!("provider processes run WITHOUT a sandbox (dev-none)");
        return Ok(Arc::new(axp_providers::DirectLauncher));
    }
    bail!("no sandbox is available for provider processes and dev-none is not allowed")
}
