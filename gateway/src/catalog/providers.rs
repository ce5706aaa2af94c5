//! Turns configuration into mounted providers: the embedded default (built-in file and command
//! tools over the workspace, declared as CLI tools so they run sandboxed like any other), the MCP
//! fleet, static bridge providers and `[[cli]]` tools from `axp.toml`. It builds each provider's
//! process policy from its config block; it never widens what the config grants.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axp_providers::bridge::{BridgeCommand, BridgeConfig, BridgeProvider, ExecOptions};
use axp_providers::cli::{CliProvider, CliToolConfig};
use axp_providers::mcp::{ClientAsks, Handshake, McpConfig, McpProvider, McpTransport, RestartPolicy};
use axp_providers::skill::{SkillDirsConfig, SkillProvider};
use axp_providers::{ArgvTrust, Launcher, NetScope, ProcessPolicy, ProcessSpec, ProviderId, RelayLink};
use serde_json::json;

use crate::catalog::registry::Mount;
use crate::config::fleet::{Fleet, PrefixMode, SandboxBlock, Transport};
use crate::config::settings::Settings;

/// The environment a provider process starts from: a fixed PATH and locale, plus the host
/// variables its config names (`sandbox.env`), plus its own `env`. Nothing else leaks in.
fn provider_env(block: &SandboxBlock, own: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = [("PATH", sandbox_path()), ("LANG", "C.UTF-8".to_string())]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    if let Ok(home) = std::env::var("HOME") {
        env.insert("HOME".into(), home);
    }
    for name in &block.env {
        if let Ok(v) = std::env::var(name) {
            env.insert(name.clone(), v);
        }
    }
    env.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// The host's PATH without version-manager shim directories (pyenv, rbenv, asdf …): a shim is a
/// script that needs the manager's whole state directory, which a sandboxed process cannot read,
/// so `python3` should resolve to a real interpreter further down the PATH instead.
pub(crate) fn sandbox_path() -> String {
    let host = std::env::var("PATH").unwrap_or_else(|_| axp_sandbox::DEFAULT_PATH.into());
    host.split(':').filter(|d| !d.is_empty() && !d.split('/').any(|c| c == "shims")).collect::<Vec<_>>().join(":")
}

/// The policy of an operator-configured process (MCP server, bridge): its whole argv is trusted.
/// Its `net` goes through the egress proxy of `provider`, which lives as long as the gateway.
fn policy(block: &SandboxBlock, extra_read: &[PathBuf], provider: &str) -> ProcessPolicy {
    ProcessPolicy {
        argv_trust: ArgvTrust::All,
        // Resolved now, when the operator's grant is read; see `sandboxing::compile`.
        fs_read: block
            .fs_read
            .iter()
            .map(|p| crate::auth::grants::resolve_path(Path::new(p)))
            .chain(extra_read.iter().cloned())
            .collect(),
        fs_write: block.fs_write.iter().map(|p| crate::auth::grants::resolve_path(Path::new(p))).collect(),
        net: block.net.clone(),
        net_scope: NetScope::Provider(provider.to_string()),
        // The fleet serves interactive tool calls: it runs at the gateway's priority.
        nice: None,
    }
}

pub async fn fleet(
    fleet: &Fleet,
    settings: &Settings,
    workspace: &Path,
    launcher: Arc<dyn Launcher>,
    wait_for_servers: bool,
    relay: &RelayLink,
) -> Result<Vec<Mount>> {
    let extra = &settings.sandbox.extra_read;
    let mut mounts = Vec::new();
    // Servers start concurrently: one slow server must not delay the others.
    let mut starting: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = Mount> + Send>>> = Vec::new();
    for s in &fleet.servers {
        let transport = match &s.transport {
            Transport::Stdio { command, args, env, cwd } => {
                // The sandbox launcher adds the read-only paths the server's own code needs.
                let pol = policy(&s.sandbox, extra, &s.name);
                McpTransport::Stdio(ProcessSpec {
                    program: command.clone(),
                    args: args.clone(),
                    env: provider_env(&s.sandbox, env),
                    cwd: cwd.clone().or_else(|| Some(workspace.to_path_buf())),
                    policy: pol,
                })
            }
            Transport::Http { url, headers, legacy_sse: false } => {
                McpTransport::Http { url: url.clone(), headers: headers.clone() }
            }
            Transport::Http { url, headers, legacy_sse: true } => {
                McpTransport::LegacySse { url: url.clone(), headers: headers.clone() }
            }
        };
        let mut cfg = McpConfig::new(ProviderId(s.name.clone()), transport);
        cfg.timeout = Duration::from_secs(s.timeout_s);
        cfg.restart = RestartPolicy::default();
        cfg.client_asks = ClientAsks { sampling: s.sampling, elicitation: s.elicitation, roots: true };
        cfg.handshake = match s.protocol {
            axp_config::fleet::UpstreamProtocol::Auto => Handshake::Newest,
            axp_config::fleet::UpstreamProtocol::Initialize => Handshake::Initialize,
            axp_config::fleet::UpstreamProtocol::Discover => Handshake::Discover,
        };
        cfg.relay = relay.clone();
        let launcher = launcher.clone();
        let prefix = s.prefix;
        if wait_for_servers {
            starting.push(Box::pin(async move {
                let provider = McpProvider::start(cfg, launcher).await;
                Mount { provider, kind: "mcp", prefix }
            }));
        } else {
            mounts.push(Mount { provider: McpProvider::launch(cfg, launcher), kind: "mcp", prefix });
        }
    }
    mounts.extend(futures::future::join_all(starting).await);
    for (name, reason) in &fleet.unresolved {
        let provider = Arc::new(Unconfigured { id: ProviderId(name.clone()), reason: reason.clone() });
        mounts.push(Mount { provider, kind: "mcp", prefix: PrefixMode::default() });
    }
    for st in &fleet.statics {
        let pol = policy(&st.sandbox, extra, &st.provider);
        let provider = Arc::new(
            BridgeProvider::new(
                BridgeConfig {
                    provider: st.provider.clone(),
                    bridge: BridgeCommand { command: st.command.clone(), args: st.args.clone() },
                    tools: st.tools.clone(),
                },
                ExecOptions {
                    timeout: Duration::from_secs(st.timeout_s),
                    env: provider_env(&st.sandbox, &BTreeMap::new()),
                    cwd: Some(workspace.to_path_buf()),
                    policy: pol,
                },
                launcher.clone(),
            )
            .with_context(|| format!("static provider `{}` ({})", st.provider, st.source.display()))?,
        );
        mounts.push(Mount { provider, kind: "bridge", prefix: st.prefix });
    }
    for c in &settings.cli {
        let tools = c
            .tools
            .iter()
            .map(|t| CliToolConfig {
                name: t.name.clone(),
                description: t.description.clone(),
                argv: t.argv.clone(),
                input_schema: t.schema_json(),
                timeout: Duration::from_secs(t.timeout_s.unwrap_or(60)),
                cwd: Some(workspace.to_path_buf()),
                env: provider_env(&SandboxBlock::default(), &t.env),
                policy: ProcessPolicy {
                    argv_trust: ArgvTrust::Program,
                    fs_read: extra.clone(),
                    fs_write: vec![workspace.to_path_buf()],
                    ..Default::default()
                },
            })
            .collect();
        let provider = Arc::new(
            CliProvider::new(ProviderId(c.provider.clone()), tools, launcher.clone())
                .with_context(|| format!("[[cli]] provider `{}`", c.provider))?,
        );
        mounts.push(Mount { provider, kind: "cli", prefix: PrefixMode::Always });
    }
    if !settings.skill_dirs.is_empty() {
        let skills = Arc::new(SkillProvider::new(SkillDirsConfig {
            id: ProviderId("skill".into()),
            dirs: settings.skill_dirs.clone(),
            launcher: launcher.clone(),
            timeout: Duration::from_secs(120),
            env: provider_env(&SandboxBlock::default(), &BTreeMap::new()),
            policy: ProcessPolicy {
                argv_trust: ArgvTrust::Program,
                fs_read: extra.clone(),
                fs_write: vec![workspace.to_path_buf()],
                ..Default::default()
            },
        }));
        for p in skills.problems() {
            tracing::warn!("{p}");
        }
        mounts.push(Mount { provider: skills, kind: "skill", prefix: PrefixMode::Always });
    }
    Ok(mounts)
}

/// The names of the embedded default's tools (provider `files`).
pub const BUILTIN_TOOLS: [&str; 4] = ["list_files", "read_file", "search_files", "run_command"];

/// The embedded default: list, read and search files in the workspace, and run a command there.
/// Declared as CLI tools (argv templates, never a shell built from arguments) so they run in the
/// same sandbox as everything else.
pub fn builtin(workspace: &Path, launcher: Arc<dyn Launcher>) -> Result<Mount> {
    let ws = workspace.to_path_buf();
    let ro = ProcessPolicy { argv_trust: ArgvTrust::Program, fs_read: vec![ws.clone()], ..Default::default() };
    let rw = ProcessPolicy { argv_trust: ArgvTrust::Program, fs_write: vec![ws.clone()], ..Default::default() };
    let env = provider_env(&SandboxBlock::default(), &BTreeMap::new());
    let tool = |name: &str, description: &str, argv: &[&str], schema: serde_json::Value, policy: &ProcessPolicy| {
        CliToolConfig {
            name: name.into(),
            description: description.into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            input_schema: schema,
            timeout: Duration::from_secs(120),
            cwd: Some(ws.clone()),
            env: env.clone(),
            policy: policy.clone(),
        }
    };
    let tools = vec![
        tool(
            "list_files",
            "List the files and directories under a path in the workspace, recursively to a depth of 3. Read-only.",
            &["find", "--", "{path}", "-maxdepth", "3", "-not", "-path", "*/.git/*"],
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Directory to list, relative to the workspace (use `.` for its root)"}
            }, "required": ["path"], "additionalProperties": false}),
            &ro,
        ),
        tool(
            "read_file",
            "Read a text file from the workspace and return its contents. Read-only.",
            &["cat", "--", "{path}"],
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File to read, relative to the workspace"}
            }, "required": ["path"], "additionalProperties": false}),
            &ro,
        ),
        tool(
            "search_files",
            "Search the workspace for lines matching a regular expression and return file:line:text matches. Read-only.",
            &["grep", "-rnI", "--", "{pattern}", "{path}"],
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Basic regular expression to look for"},
                "path": {"type": "string", "description": "File or directory to search, relative to the workspace (`.` for all)"}
            }, "required": ["pattern", "path"], "additionalProperties": false}),
            &ro,
        ),
        tool(
            "run_command",
            "Run a program with arguments in the workspace (sandboxed, no network) and return its output. Can modify files in the workspace.",
            &["/usr/bin/env", "--", "{argv}"],
            json!({"type": "object", "properties": {
                "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1, "x-allow-dash": true,
                         "description": "Program and arguments, e.g. [\"ls\", \"-la\"]; no shell is involved"}
            }, "required": ["argv"], "additionalProperties": false}),
            &rw,
        ),
    ];
    Ok(Mount {
        provider: Arc::new(
            CliProvider::new(ProviderId("files".into()), tools, launcher).context("the built-in tools")?,
        ),
        kind: "cli",
        prefix: PrefixMode::Always,
    })
}

/// A configured server whose entry could not be resolved (an unset `${VAR}`): mounted so that
/// `/healthz` and calls say why it is down, while the rest of the fleet serves.
struct Unconfigured {
    id: ProviderId,
    reason: String,
}

impl Unconfigured {
    fn down(&self) -> axp_providers::ProviderError {
        axp_providers::ProviderError::Unavailable {
            provider: self.id.to_string(),
            reason: format!("its configuration cannot be resolved: {}", self.reason),
        }
    }
}

#[async_trait::async_trait]
impl axp_providers::Provider for Unconfigured {
    fn id(&self) -> &ProviderId {
        &self.id
    }

    async fn tools(&self) -> Result<Vec<axp_protocol::ToolSpec>, axp_providers::ProviderError> {
        Err(self.down())
    }

    async fn call(
        &self,
        _call: axp_protocol::ToolCall,
        _sink: axp_providers::JobSink,
        _cancel: axp_providers::CancellationToken,
    ) -> Result<axp_protocol::ToolOutput, axp_providers::ProviderError> {
        Err(self.down())
    }

    async fn shutdown(&self) -> Result<(), axp_providers::ProviderError> {
        Ok(())
    }
}
