//! `axp.toml`: the operator's settings (listen address, state dir, workspace, default session
//! profile, sandbox defaults, declared CLI tools, lint policy, plugin limits, trace export). Raw serde structs refuse unknown
//! keys; [`load`] turns toml's byte spans into line and column and adds the nearest valid key.
//! Knobs that weaken security carry a `dangerously_` prefix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use axp_plugin_host::WasmLimits;
use serde::Deserialize;
use serde_json::Value;

use axp_config::{ConfigError, ConfigProblem, line_col, unknown_field_hint};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub listen: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    #[serde(default)]
    pub mcp_config: Vec<PathBuf>,
    #[serde(default)]
    pub sandbox: SandboxSettings,
    #[serde(default)]
    pub session: SessionSettings,
    #[serde(default)]
    pub serve: ServeSettings,
    #[serde(default)]
    pub cli: Vec<CliProviderSettings>,
    /// Agent Skills folders (a skill folder, or a folder of skill folders).
    #[serde(default)]
    pub skill_dirs: Vec<PathBuf>,
    /// Limits of installed plugins (`axp provider add`).
    #[serde(default)]
    pub plugins: PluginSettings,
    /// Passed to the lint crate, which validates it.
    pub lint: Option<toml::Value>,
    #[serde(default)]
    pub audit: AuditSettings,
    #[serde(default)]
    pub egress: EgressSettings,
    #[serde(default)]
    pub store: StoreSettings,
    /// Operator credentials and their ceilings (see `config/policy.rs`).
    #[serde(default)]
    pub operators: Vec<axp_config::operator_policy::OperatorSettings>,
    #[serde(default)]
    pub approval: axp_config::operator_policy::ApprovalSettings,
    #[serde(default)]
    pub quotas: axp_config::operator_policy::QuotaSettings,
    #[serde(default)]
    pub telemetry: TelemetrySettings,
}

/// `[telemetry]`: where traces go. Without `otlp_endpoint` no span is made or sent.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// An OTLP/HTTP receiver (`http://127.0.0.1:4318`); spans are POSTed as protobuf to its
    /// `/v1/traces`. Headers (for a collector's credentials) come from
    /// `OTEL_EXPORTER_OTLP_HEADERS`, as for any OpenTelemetry SDK.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` the spans carry (default `axp`).
    pub service_name: Option<String>,
}

/// `[egress]`: how the egress proxy resolves and which addresses it may reach. The allowlist
/// itself is never here: it comes from each session's and provider's `net.connect` grants.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSettings {
    /// DNS servers (`ip:port`) the proxy asks instead of `/etc/resolv.conf`'s.
    #[serde(default)]
    pub resolvers: Vec<String>,
    /// CIDRs exempt from the private/loopback/metadata address check. For labs and tests that
    /// serve granted names from private addresses; never needed on the open internet.
    #[serde(default)]
    pub dangerously_allow_private: Vec<String>,
    /// Connections one session (or provider) may have open at once (default 64).
    pub max_connections: Option<toml::Value>,
    /// Bytes, both directions, one session may move through the proxy over its life (default
    /// 1 GiB; `"unlimited"` for none). Providers have no byte budget.
    pub max_bytes: Option<toml::Value>,
    /// Seconds without traffic after which a proxied connection is closed (default 300).
    pub idle_timeout_s: Option<toml::Value>,
}

/// `[store]`: where sessions, jobs and job logs are kept.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSettings {
    /// A PostgreSQL URL (`postgres://user:${PGPASSWORD}@host/db`); `${VAR}` is expanded at
    /// start. Absent: the embedded store in the state dir. `axp serve --store` overrides it.
    pub url: Option<String>,
    /// Jobs that ended more than this many days ago are deleted with their logs, and so are
    /// sessions that expired as long ago and have no job left (checked at start and every
    /// hour). Absent: everything is kept.
    pub keep_ended_jobs_days: Option<u64>,
}

/// The longest `keep_ended_jobs_days` (100 years): beyond it the cutoff would underflow.
const MAX_KEEP_DAYS: u64 = 36_500;

impl StoreSettings {
    /// How long ended jobs are kept; `None` for ever.
    pub fn keep_ended_jobs(&self) -> Result<Option<std::time::Duration>, String> {
        match self.keep_ended_jobs_days {
            None => Ok(None),
            Some(days @ 1..=MAX_KEEP_DAYS) => Ok(Some(std::time::Duration::from_secs(days * 86_400))),
            Some(days) => Err(format!(
                "`store.keep_ended_jobs_days` must be between 1 and {MAX_KEEP_DAYS}, not {days} (leave it out to keep every job)"
            )),
        }
    }
}

/// `[audit]`: when a record counts as written (see `axp_audit::Durability`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSettings {
    /// `each` (default): a request is answered only once its record is fsynced (adds an fsync,
    /// milliseconds, to every audited request that does not overlap another). `interval`: a
    /// request is answered once its record is written, which survives a crash or kill of the
    /// gateway; a background fsync makes it survive power loss within `sync_interval_ms`.
    pub sync: Option<AuditSync>,
    /// The background fsync interval under `sync = "interval"` (default 10, 1..=1000).
    pub sync_interval_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditSync {
    Each,
    Interval,
}

impl AuditSettings {
    /// The durability these settings ask for, or an error naming the bad value.
    pub fn durability(&self) -> Result<axp_audit::Durability, String> {
        match (self.sync.unwrap_or(AuditSync::Each), self.sync_interval_ms) {
            (AuditSync::Each, Some(_)) => {
                Err("`audit.sync_interval_ms` only applies to `sync = \"interval\"` (the default is \"each\")".into())
            }
            (AuditSync::Each, None) => Ok(axp_audit::Durability::EachAppend),
            (AuditSync::Interval, ms) => match ms.unwrap_or(10) {
                ms @ 1..=1000 => Ok(axp_audit::Durability::Interval(std::time::Duration::from_millis(ms))),
                ms => Err(format!("`audit.sync_interval_ms` must be between 1 and 1000, not {ms}")),
            },
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {
    /// `kernel-lsm` (default) or `dev-none` (needs `dangerously_allow_dev_none`).
    pub default_tier: Option<String>,
    #[serde(default)]
    pub dangerously_allow_dev_none: bool,
    /// Extra read-only paths every sandbox sees (interpreters installed outside /usr).
    #[serde(default)]
    pub extra_read: Vec<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSettings {
    /// The default profile: what `initialize` (and a `session.open` that asks for nothing) gets,
    /// and the ceiling of what any session may ask for.
    pub capabilities: Option<Vec<String>>,
    pub ttl_s: Option<u64>,
    pub max_ttl_s: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSettings {
    /// Catalogs up to this size are listed in full by `tools/list`; larger ones get meta-tools.
    pub inline_tools_max: Option<usize>,
    pub max_body_bytes: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliProviderSettings {
    pub provider: String,
    #[serde(default)]
    pub tools: Vec<CliToolSettings>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CliToolSettings {
    pub name: String,
    pub description: String,
    pub argv: Vec<String>,
    #[serde(default)]
    pub input_schema: Option<toml::Value>,
    pub timeout_s: Option<u64>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// `"required"`: every call waits for an operator's approval.
    pub approval: Option<axp_config::operator_policy::Approval>,
}

impl CliToolSettings {
    pub fn schema_json(&self) -> Value {
        match &self.input_schema {
            Some(v) => serde_json::to_value(v).unwrap_or(Value::Null),
            None => axp_protocol::tool::empty_object_schema(),
        }
    }
}

/// Reads `axp.toml`.
pub fn load(path: &Path) -> Result<Settings, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| ConfigError::one(path, format!("cannot read settings: {e}")))?;
    parse(&text, path)
}

pub fn parse(text: &str, path: &Path) -> Result<Settings, ConfigError> {
    toml::from_str::<Settings>(text).map_err(|e| {
        let (line, column) = match e.span() {
            Some(span) => {
                let (l, c) = line_col(text, span.start);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        let message = e.message().trim().to_string();
        ConfigError {
            problems: vec![ConfigProblem {
                file: path.to_path_buf(),
                line,
                column,
                path: None,
                hint: unknown_field_hint(&message),
                message,
            }],
        }
    })
}

/// `[plugins]` in `axp.toml`: limits applied to every plugin call.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSettings {
    /// Wall-clock deadline of one plugin call, in milliseconds [default: 30000].
    pub call_timeout_ms: Option<u64>,
    /// Largest linear memory of one WASM instance, in MiB [default: 64].
    pub memory_mib: Option<usize>,
    /// Native plugins (by id) loaded into the gateway's own process instead of the sandboxed
    /// helper. A crash of one of these takes the gateway down.
    #[serde(default)]
    pub dangerously_trusted: Vec<String>,
    /// Environment variables of the gateway whose values WASM plugins may look up with
    /// `host.secret(NAME)`. A plugin sees only the names its manifest declares under
    /// `[capabilities] secrets`; everything else (and every name not listed here) is `none`.
    #[serde(default)]
    pub secrets_from_env: Vec<String>,
}

impl PluginSettings {
    /// The WASM limits these settings ask for.
    pub fn limits(&self) -> WasmLimits {
        let d = WasmLimits::default();
        WasmLimits {
            memory_bytes: self.memory_mib.map_or(d.memory_bytes, |m| m << 20),
            call_timeout: self.call_timeout_ms.map_or(d.call_timeout, Duration::from_millis),
            max_instances: d.max_instances,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_example_parses() {
        let s = parse(
            r#"
listen = "127.0.0.1:9000"
mcp_config = ["fleet.json"]
[sandbox]
default_tier = "kernel-lsm"
[session]
capabilities = ["tool(*)", "proc.spawn"]
[[cli]]
provider = "git"
[[cli.tools]]
name = "status"
description = "Show the working tree status of the workspace repository."
argv = ["git", "status", "--short"]
input_schema = { type = "object", properties = {} }
[lint]
ignore = ["AXP010"]
"#,
            Path::new("axp.toml"),
        )
        .unwrap();
        assert_eq!(s.listen.as_deref(), Some("127.0.0.1:9000"));
        assert_eq!(s.cli[0].tools[0].schema_json()["type"], "object");
    }

    #[test]
    fn telemetry_section_parses_and_its_typos_are_named() {
        let s = parse("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n", Path::new("axp.toml")).unwrap();
        assert_eq!(s.telemetry.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        let e = parse("[telemetry]\notlp_endpiont = \"http://x\"\n", Path::new("axp.toml")).unwrap_err().to_string();
        assert!(e.starts_with("axp.toml:2:1:") && e.contains("did you mean `otlp_endpoint`?"), "{e}");
    }

    #[test]
    fn typo_is_located_with_hint() {
        let e = parse("listen = \"x\"\n[sandbox]\ndefault_teir = \"dev-none\"\n", Path::new("axp.toml")).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("axp.toml:3:1:"), "{msg}");
        assert!(msg.contains("did you mean `default_tier`?"), "{msg}");
    }
}
