//! The `--mcp-config` file: Claude Desktop / Cursor / Claude Code `{"mcpServers": …}`, VS Code's
//! `{"servers": …}` (also nested under `"mcp"`, as in settings.json), and the AXP draft's static
//! form `{"provider", "bridge", "tools"}`, detected by shape. JSON with comments is accepted
//! (VS Code writes it). Keys other clients define for their own use (`disabled`, `autoApprove`,
//! `alwaysAllow`, `timeout`, …) are understood or ignored by name; anything else is an error
//! with its line, column and the nearest valid key. Problems found after parsing (a missing
//! `url`, an unset `${VAR}`) are located at the offending key, or at the server's name.
//!
//! Transports: `command` is stdio; `url` is Streamable HTTP, or the legacy 2024-11-05 "HTTP
//! with SSE" transport with `"type": "sse"` (also Cline's `"transportType": "sse"`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use axp_protocol::ToolSpec;
use serde::Deserialize;
use serde_json::Value;

use crate::env::{EnvSource, expand};
use crate::{ConfigError, ConfigProblem, unknown_field_hint};

/// How a provider's tools are named in the index (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefixMode {
    #[default]
    Always,
    Conditional,
    Never,
}

/// Whether one server process serves every session or each session gets its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    #[default]
    Shared,
    PerSession,
}

/// Which MCP revision the gateway opens a server's connection with (`"protocol"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum UpstreamProtocol {
    /// The newest the server offers: a 2026-07-28 `server/discover` probe, falling back to
    /// `initialize`.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Only the `initialize` handshake (2025-11-25 and the revisions before it).
    #[serde(rename = "2025-11-25")]
    Initialize,
    /// Only 2026-07-28 (`server/discover`).
    #[serde(rename = "2026-07-28")]
    Discover,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxBlock {
    #[serde(default)]
    pub fs_read: Vec<String>,
    #[serde(default)]
    pub fs_write: Vec<String>,
    #[serde(default)]
    pub net: Vec<String>,
    /// Names of host environment variables passed through to the server.
    #[serde(default)]
    pub env: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    // AXP extras.
    sandbox: Option<SandboxBlock>,
    isolation: Option<Isolation>,
    timeout_s: Option<u64>,
    enabled: Option<bool>,
    prefix: Option<PrefixMode>,
    approval: Option<crate::operator_policy::Approval>,
    sampling: Option<bool>,
    elicitation: Option<bool>,
    protocol: Option<UpstreamProtocol>,
    // Keys other MCP clients define; understood where they mean something to us.
    disabled: Option<bool>,
    timeout: Option<u64>,
    #[serde(rename = "envFile")]
    env_file: Option<String>,
    #[serde(rename = "autoApprove")]
    _auto_approve: Option<Value>,
    #[serde(rename = "alwaysAllow")]
    _always_allow: Option<Value>,
    #[serde(rename = "transportType")]
    transport_type: Option<String>,
    #[serde(rename = "description")]
    _description: Option<String>,
    #[serde(rename = "gallery")]
    _gallery: Option<Value>,
    #[serde(rename = "dev")]
    _dev: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct RawMcpServersFile {
    #[serde(rename = "mcpServers")]
    mcp_servers: BTreeMap<String, RawServer>,
}

#[derive(Debug, Deserialize)]
struct RawVsCodeFile {
    servers: BTreeMap<String, RawServer>,
}

#[derive(Debug, Deserialize)]
struct RawVsCodeSettings {
    mcp: RawVsCodeFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBridge {
    command: String,
    #[serde(default)]
    args: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStaticTool {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(rename = "inputSchema", alias = "input_schema")]
    input_schema: Option<Value>,
    // The rest of MCP's `Tool`, carried to clients unchanged, as a server's would be.
    #[serde(default)]
    title: Option<String>,
    #[serde(default, rename = "outputSchema", alias = "output_schema")]
    output_schema: Option<Value>,
    #[serde(default)]
    annotations: Option<Value>,
    #[serde(default)]
    icons: Option<Value>,
    #[serde(default)]
    execution: Option<Value>,
    #[serde(default, rename = "_meta")]
    meta: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStaticFile {
    provider: String,
    bridge: RawBridge,
    tools: Vec<RawStaticTool>,
    #[serde(default)]
    timeout_s: Option<u64>,
    #[serde(default)]
    prefix: Option<PrefixMode>,
    #[serde(default)]
    sandbox: Option<SandboxBlock>,
}

/// How to reach one MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio { command: String, args: Vec<String>, env: BTreeMap<String, String>, cwd: Option<PathBuf> },
    Http { url: String, headers: BTreeMap<String, String>, legacy_sse: bool },
}

/// One MCP server, resolved and validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub sandbox: SandboxBlock,
    pub isolation: Isolation,
    pub timeout_s: u64,
    pub prefix: PrefixMode,
    pub approval_required: bool,
    /// Whether the server may ask the client for a completion (`sampling/createMessage`) and
    /// for input (`elicitation/create`); both `true` unless the operator set them `false`.
    pub sampling: bool,
    pub elicitation: bool,
    /// The revision the connection is opened with (`auto` unless the operator pinned one).
    pub protocol: UpstreamProtocol,
    pub source: PathBuf,
}

/// A static (bridge) provider, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticProvider {
    pub provider: String,
    pub command: String,
    pub args: Vec<String>,
    pub tools: Vec<ToolSpec>,
    pub timeout_s: u64,
    pub prefix: PrefixMode,
    pub sandbox: SandboxBlock,
    pub source: PathBuf,
}

/// Everything `--mcp-config` files and flags describe.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fleet {
    pub servers: Vec<ServerConfig>,
    pub statics: Vec<StaticProvider>,
    /// Servers present but disabled (`enabled: false` / `disabled: true`), for reports.
    pub disabled: Vec<String>,
    /// Servers whose entry is well-formed but names environment variables that are not set
    /// (`${VAR}`), with the reason: the gateway serves the rest and reports these as down, or,
    /// with `--strict-config`, refuses to start.
    pub unresolved: Vec<(String, String)>,
    /// Non-fatal remarks (ignored client-specific keys, renamed servers).
    pub warnings: Vec<String>,
}

pub const DEFAULT_TIMEOUT_S: u64 = 60;

impl Fleet {
    /// The provider names this fleet mounts (servers, static providers, and servers that are
    /// down because their config cannot be resolved).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.servers
            .iter()
            .map(|s| s.name.as_str())
            .chain(self.statics.iter().map(|s| s.provider.as_str()))
            .chain(self.unresolved.iter().map(|(n, _)| n.as_str()))
    }

    /// Adds another file's fleet to this one. A provider name that both already use is an
    /// error: two providers under one name would share one index prefix and one egress owner,
    /// and which one answered would depend on mounting order.
    pub fn merge(&mut self, part: Fleet, from: &Path) -> Result<(), ConfigError> {
        let taken: std::collections::BTreeSet<&str> = self.names().collect();
        let clash: Vec<String> = part.names().filter(|n| taken.contains(n)).map(str::to_string).collect();
        if !clash.is_empty() {
            return Err(ConfigError::one(
                from,
                format!(
                    "server name{} {} already used by another configuration file; rename one of them",
                    if clash.len() == 1 { "" } else { "s" },
                    clash.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        self.servers.extend(part.servers);
        self.statics.extend(part.statics);
        self.disabled.extend(part.disabled);
        self.unresolved.extend(part.unresolved);
        self.warnings.extend(part.warnings);
        Ok(())
    }
}

/// Reads and resolves one file.
pub fn load(path: &Path, env: &dyn EnvSource) -> Result<Fleet, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::one(path, format!("cannot read the MCP config: {e}")))?;
    parse(&text, path, env)
}

/// Replaces each trailing comma (one followed only by whitespace before `}` or `]`) with a space,
/// as VS Code accepts them in its JSON with comments. Same length, so error positions stay
/// right; commas inside strings are left alone. Hand-written because `json_comments` strips
/// comments only and no maintained JSONC parser keeps serde_json's error positions.
fn blank_trailing_commas(text: String) -> String {
    let mut bytes = text.into_bytes();
    let (mut in_string, mut escaped) = (false, false);
    for i in 0..bytes.len() {
        let b = bytes[i];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' => {
                let next = bytes[i + 1..].iter().find(|c| !c.is_ascii_whitespace());
                if matches!(next, Some(b'}' | b']')) {
                    bytes[i] = b' ';
                }
            }
            _ => {}
        }
    }
    // Only ASCII commas were replaced by ASCII spaces: still the UTF-8 it was.
    String::from_utf8(bytes).unwrap_or_default()
}

/// Parses one file's text. `path` is used for messages and to resolve relative `cwd`/`envFile`.
pub fn parse(text: &str, path: &Path, env: &dyn EnvSource) -> Result<Fleet, ConfigError> {
    // VS Code writes JSON with comments; strip them in place (same offsets, so positions in
    // errors stay right) rather than hand-rolling a JSONC parser.
    let mut stripped = String::new();
    json_comments::StripComments::new(text.as_bytes())
        .read_to_string(&mut stripped)
        .map_err(|e| ConfigError::one(path, format!("cannot read the MCP config: {e}")))?;
    // `json_comments` blanks a block comment's line breaks too; put them back, so a line
    // number after a multi-line `/* … */` is the file's.
    // Byte by byte: the stripper turns each byte of a comment into an ASCII space, so a
    // comment's non-ASCII characters have as many spaces as bytes, and only ASCII is replaced.
    let stripped = if stripped.len() == text.len() {
        let mut bytes = stripped.into_bytes();
        for (b, t) in bytes.iter_mut().zip(text.bytes()) {
            if t == b'\n' && *b == b' ' {
                *b = b'\n';
            }
        }
        // Only ASCII spaces became ASCII newlines: still the UTF-8 it was.
        String::from_utf8(bytes).unwrap_or_default()
    } else {
        stripped
    };
    let stripped = blank_trailing_commas(stripped);
    let value: Value = serde_json::from_str(&stripped).map_err(|e| json_error(path, &stripped, e, None))?;
    let Value::Object(top) = &value else {
        return Err(ConfigError::one(path, "the MCP config must be a JSON object"));
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut fleet = Fleet::default();
    let mut problems = Vec::new();
    if top.contains_key("mcpServers") {
        let raw: RawMcpServersFile = typed(&stripped, path)?;
        for k in top.keys().filter(|k| *k != "mcpServers") {
            fleet.warnings.push(format!("{}: ignoring top-level key `{k}` (not about MCP servers)", path.display()));
        }
        resolve_servers(raw.mcp_servers, "mcpServers", &stripped, path, base, env, &mut fleet, &mut problems);
    } else if top.contains_key("servers") {
        let raw: RawVsCodeFile = typed(&stripped, path)?;
        resolve_servers(raw.servers, "servers", &stripped, path, base, env, &mut fleet, &mut problems);
    } else if top.get("mcp").is_some_and(|m| m.get("servers").is_some()) {
        let raw: RawVsCodeSettings = typed(&stripped, path)?;
        resolve_servers(raw.mcp.servers, "mcp.servers", &stripped, path, base, env, &mut fleet, &mut problems);
    } else if top.contains_key("provider") || top.contains_key("bridge") {
        let raw: RawStaticFile = typed(&stripped, path)?;
        match resolve_static(raw, path, env) {
            Ok(s) => fleet.statics.push(s),
            Err(p) => problems.extend(p),
        }
    } else {
        return Err(ConfigError {
            problems: vec![ConfigProblem {
                file: path.to_path_buf(),
                line: Some(1),
                column: Some(1),
                path: None,
                message: "no MCP servers found: expected a top-level `mcpServers` (Claude Desktop, Cursor, Claude Code), `servers` (VS Code) or `provider`+`bridge`+`tools` (AXP static form)".into(),
                hint: crate::nearest(
                    top.keys().next().map(String::as_str).unwrap_or(""),
                    ["mcpServers", "servers", "provider"],
                )
                .map(|n| format!("did you mean `{n}`?")),
            }],
        });
    }
    if problems.is_empty() { Ok(fleet) } else { Err(ConfigError { problems }) }
}

fn typed<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, ConfigError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let p = e.path().to_string();
        json_error(path, text, e.into_inner(), Some(p))
    })
}

fn json_error(path: &Path, _text: &str, e: serde_json::Error, doc_path: Option<String>) -> ConfigError {
    // serde_json appends " at line L column C" to the message; we report those separately.
    let full = e.to_string();
    let message = full.split(" at line ").next().unwrap_or(&full).to_string();
    let hint = unknown_field_hint(&message).or_else(|| {
        if message.starts_with("invalid type") {
            Some("check the value's type against the documented form (README: \"Your MCP fleet, unchanged\")".into())
        } else {
            None
        }
    });
    ConfigError {
        problems: vec![ConfigProblem {
            file: path.to_path_buf(),
            line: (e.line() > 0).then_some(e.line()),
            column: (e.column() > 0).then_some(e.column()),
            path: doc_path,
            message,
            hint,
        }],
    }
}

fn problem(path: &Path, at: String, message: String, hint: Option<String>) -> ConfigProblem {
    ConfigProblem { file: path.to_path_buf(), line: None, column: None, path: Some(at), message, hint }
}

/// Tool and provider names must fit `[a-zA-Z0-9_-]`; anything else becomes `_`.
pub fn sanitize_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// Where the key at `keys` (object keys from the top) is written in `text`: `(line, column)`
/// just after the key. serde_json keeps no spans, but its errors carry a position: a visitor
/// walks down to the key and fails on purpose there, and the error says where it stopped.
fn locate(text: &str, keys: &[&str]) -> Option<(usize, usize)> {
    use serde::de::{DeserializeSeed, Deserializer, Error, IgnoredAny, MapAccess, Visitor};
    const HERE: &str = "axp: located";
    struct Walk<'a>(&'a [&'a str]);
    impl<'de> DeserializeSeed<'de> for Walk<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Walk<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let Some((first, rest)) = self.0.split_first() else { return Ok(()) };
            while let Some(key) = map.next_key::<String>()? {
                if key == *first {
                    if rest.is_empty() {
                        return Err(A::Error::custom(HERE));
                    }
                    map.next_value_seed(Walk(rest))?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(())
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    match Walk(keys).deserialize(&mut de) {
        Err(e) if e.to_string().starts_with(HERE) && e.line() > 0 => Some((e.line(), e.column())),
        _ => None,
    }
}

/// Gives each problem of server `name` without a position the position of the key it is about
/// (`url`, `type`, `env`, …), or else of the server's name.
fn place(problems: &mut [ConfigProblem], text: &str, section: &str, name: &str) {
    let server_at = format!("{section}.{name}");
    let mut keys: Vec<&str> = section.split('.').collect();
    keys.push(name);
    for p in problems.iter_mut().filter(|p| p.line.is_none()) {
        let field = p
            .path
            .as_deref()
            .and_then(|at| at.strip_prefix(server_at.as_str()))
            .and_then(|rest| rest.strip_prefix('.'))
            .and_then(|rest| rest.split(['.', '[']).next());
        let mut with_field = keys.clone();
        with_field.extend(field);
        if let Some((line, column)) = locate(text, &with_field).or_else(|| locate(text, &keys)) {
            p.line = Some(line);
            p.column = Some(column);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn resolve_servers(
    raw: BTreeMap<String, RawServer>,
    section: &str,
    text: &str,
    path: &Path,
    base: &Path,
    env: &dyn EnvSource,
    fleet: &mut Fleet,
    problems: &mut Vec<ConfigProblem>,
) {
    // Names that clean up the same way (`a.b` and `a_b`) would be one provider: refused.
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (name, s) in raw {
        let at = format!("{section}.{name}");
        let clean = sanitize_name(&name);
        if clean.is_empty() {
            problems.push(problem(path, at, "a server needs a non-empty name".into(), None));
            continue;
        }
        if let Some(first) = seen.insert(clean.clone(), name.clone()) {
            let message = format!("servers `{first}` and `{name}` would both be indexed as `{clean}`");
            problems.push(problem(path, at, message, Some("rename one of them".into())));
            continue;
        }
        if clean != name {
            fleet.warnings.push(format!(
                "server `{name}` is indexed as `{clean}` (tool names allow only letters, digits, `_` and `-`)"
            ));
        }
        if s.enabled == Some(false) || s.disabled == Some(true) {
            fleet.disabled.push(clean);
            continue;
        }
        let local = std::cell::RefCell::new(Vec::new());
        // Unset variables are problems of the environment the gateway runs in, not of the
        // file's shape: kept apart so one server's missing secret does not stop the others.
        let unset = std::cell::RefCell::new(Vec::new());
        let exp = |field: &str, v: &str| -> Option<String> {
            match expand(v, env) {
                Ok(x) => Some(x),
                Err(e) => {
                    unset.borrow_mut().push(problem(path, format!("{at}.{field}"), e, None));
                    None
                }
            }
        };
        let kind = s.kind.clone().or(s.transport_type.clone()).map(|k| k.to_ascii_lowercase());
        let transport = (|| -> Option<Transport> {
            Some(match (&s.command, &s.url, kind.as_deref()) {
                (Some(_), Some(_), _) => {
                    local.borrow_mut().push(problem(
                        path,
                        at.clone(),
                        "a server has either `command` (stdio) or `url` (HTTP), not both".into(),
                        None,
                    ));
                    return None;
                }
                (Some(cmd), None, None | Some("stdio")) => {
                    let command = exp("command", cmd);
                    let args: Vec<Option<String>> =
                        s.args.iter().flatten().enumerate().map(|(i, a)| exp(&format!("args[{i}]"), a)).collect();
                    let mut envs = BTreeMap::new();
                    if let Some(f) = &s.env_file {
                        match exp("envFile", f).map(|f| read_env_file(&base.join(f))) {
                            Some(Ok(vars)) => envs.extend(vars),
                            Some(Err(e)) => local.borrow_mut().push(problem(path, format!("{at}.envFile"), e, None)),
                            None => {}
                        }
                    }
                    for (k, v) in s.env.iter().flatten() {
                        if let Some(v) = exp(&format!("env.{k}"), v) {
                            envs.insert(k.clone(), v);
                        }
                    }
                    let cwd = s.cwd.as_deref().and_then(|c| exp("cwd", c)).map(|c| base.join(c));
                    let (Some(command), true) = (command, args.iter().all(Option::is_some)) else {
                        return None;
                    };
                    Transport::Stdio { command, args: args.into_iter().flatten().collect(), env: envs, cwd }
                }
                (
                    None,
                    Some(url),
                    None | Some("http") | Some("streamable-http") | Some("streamablehttp") | Some("sse"),
                ) => {
                    let url = exp("url", url)?;
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        local.borrow_mut().push(problem(
                            path,
                            format!("{at}.url"),
                            format!("`{url}` is not an http(s) URL"),
                            None,
                        ));
                        return None;
                    }
                    let mut headers = BTreeMap::new();
                    for (k, v) in s.headers.iter().flatten() {
                        if let Some(v) = exp(&format!("headers.{k}"), v) {
                            headers.insert(k.clone(), v);
                        }
                    }
                    Transport::Http { url, headers, legacy_sse: kind.as_deref() == Some("sse") }
                }
                (None, None, Some(k @ ("http" | "streamable-http" | "streamablehttp" | "sse"))) => {
                    let example = if k == "sse" { "http://127.0.0.1:3001/sse" } else { "https://example.com/mcp" };
                    local.borrow_mut().push(problem(
                        path,
                        at.clone(),
                        format!("a server of type `{k}` needs a `url`"),
                        Some(format!("e.g. \"type\": \"{k}\", \"url\": \"{example}\"")),
                    ));
                    return None;
                }
                (None, None, _) => {
                    local.borrow_mut().push(problem(
                    path,
                    at.clone(),
                    "a server needs `command` (a stdio server) or `url` (an HTTP server)".into(),
                    Some("e.g. \"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-everything\"]".into()),
                ));
                    return None;
                }
                (_, _, Some(other)) => {
                    local.borrow_mut().push(problem(
                        path,
                        format!("{at}.type"),
                        format!("`{other}` is not a transport this entry can use"),
                        Some("use `stdio` with `command`, or `http` / `sse` with `url`".into()),
                    ));
                    return None;
                }
            })
        })();
        let mut local = local.into_inner();
        let mut unset = unset.into_inner();
        place(&mut local, text, section, &name);
        place(&mut unset, text, section, &name);
        if local.is_empty() && !unset.is_empty() {
            let reason = unset.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            fleet.unresolved.push((clean, reason));
            continue;
        }
        problems.extend(local);
        problems.extend(unset);
        let Some(transport) = transport else { continue };
        fleet.servers.push(ServerConfig {
            name: clean,
            transport,
            sandbox: s.sandbox.unwrap_or_default(),
            isolation: s.isolation.unwrap_or_default(),
            timeout_s: s.timeout_s.or(s.timeout).unwrap_or(DEFAULT_TIMEOUT_S),
            prefix: s.prefix.unwrap_or_default(),
            approval_required: s.approval == Some(crate::operator_policy::Approval::Required),
            sampling: s.sampling.unwrap_or(true),
            elicitation: s.elicitation.unwrap_or(true),
            protocol: s.protocol.unwrap_or_default(),
            source: path.to_path_buf(),
        });
    }
}

fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read env file {}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        if let Some((k, v)) = line.split_once('=') {
            out.insert(k.trim().to_string(), v.trim().trim_matches('"').trim_matches('\'').to_string());
        }
    }
    Ok(out)
}

fn resolve_static(raw: RawStaticFile, path: &Path, env: &dyn EnvSource) -> Result<StaticProvider, Vec<ConfigProblem>> {
    let mut problems = Vec::new();
    let provider = sanitize_name(&raw.provider);
    if provider.is_empty() {
        problems.push(problem(path, "provider".into(), "`provider` must not be empty".into(), None));
    }
    let command =
        expand(&raw.bridge.command, env).map_err(|e| problems.push(problem(path, "bridge.command".into(), e, None)));
    let args: Vec<String> = raw
        .bridge
        .args
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            expand(a, env).map_err(|e| problems.push(problem(path, format!("bridge.args[{i}]"), e, None))).ok()
        })
        .collect();
    let mut tools = Vec::new();
    for (i, t) in raw.tools.into_iter().enumerate() {
        if t.name.is_empty() {
            problems.push(problem(path, format!("tools[{i}].name"), "a tool needs a name".into(), None));
            continue;
        }
        let schema = t.input_schema.unwrap_or_else(axp_protocol::tool::empty_object_schema);
        if !schema.is_object() {
            problems.push(problem(
                path,
                format!("tools[{i}].inputSchema"),
                "`inputSchema` must be a JSON Schema object".into(),
                None,
            ));
            continue;
        }
        let objects = [
            ("outputSchema", &t.output_schema),
            ("annotations", &t.annotations),
            ("execution", &t.execution),
            ("_meta", &t.meta),
        ];
        if let Some((key, _)) = objects.iter().find(|(_, v)| v.as_ref().is_some_and(|v| !v.is_object())) {
            problems.push(problem(path, format!("tools[{i}].{key}"), format!("`{key}` must be a JSON object"), None));
            continue;
        }
        if t.icons.as_ref().is_some_and(|v| !v.is_array()) {
            problems.push(problem(path, format!("tools[{i}].icons"), "`icons` must be an array".into(), None));
            continue;
        }
        tools.push(ToolSpec {
            title: t.title,
            output_schema: t.output_schema,
            annotations: t.annotations,
            icons: t.icons,
            execution: t.execution,
            meta: t.meta,
            ..ToolSpec::new(t.name, t.description, schema)
        });
    }
    match (problems.is_empty(), command) {
        (true, Ok(command)) => Ok(StaticProvider {
            provider,
            command,
            args,
            tools,
            timeout_s: raw.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S),
            prefix: raw.prefix.unwrap_or_default(),
            sandbox: raw.sandbox.unwrap_or_default(),
            source: path.to_path_buf(),
        }),
        _ => Err(problems),
    }
}

/// The one-tool static form given by `--mcp-provider --mcp-tool --mcp-desc --mcp-bridge`.
pub fn from_flags(
    provider: Option<&str>,
    tool: Option<&str>,
    desc: Option<&str>,
    bridge: Option<&str>,
) -> Result<Option<StaticProvider>, String> {
    let given = [("--mcp-provider", provider), ("--mcp-tool", tool), ("--mcp-desc", desc), ("--mcp-bridge", bridge)];
    let missing: Vec<&str> = given.iter().filter(|(_, v)| v.is_none()).map(|(n, _)| *n).collect();
    if missing.len() == given.len() {
        return Ok(None);
    }
    if !missing.is_empty() {
        return Err(format!(
            "the static tool flags go together: missing {} (all of --mcp-provider, --mcp-tool, --mcp-desc and --mcp-bridge are needed)",
            missing.join(", ")
        ));
    }
    let (Some(p), Some(t), Some(d), Some(b)) = (provider, tool, desc, bridge) else {
        return Ok(None);
    };
    let mut parts = b.split_whitespace().map(str::to_string);
    let command = parts.next().ok_or("--mcp-bridge must name a command")?;
    Ok(Some(StaticProvider {
        provider: sanitize_name(p),
        command,
        args: parts.collect(),
        tools: vec![ToolSpec::new(t, d, axp_protocol::tool::empty_object_schema())],
        timeout_s: DEFAULT_TIMEOUT_S,
        prefix: PrefixMode::Always,
        sandbox: SandboxBlock::default(),
        source: PathBuf::from("<command line>"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> BTreeMap<String, String> {
        [("TOKEN".to_string(), "s3cret".to_string())].into_iter().collect()
    }

    fn p(text: &str) -> Result<Fleet, ConfigError> {
        parse(text, Path::new("fleet.json"), &env())
    }

    #[test]
    fn vs_code_trailing_commas_are_accepted_and_commas_in_strings_kept() {
        let f = p(r#"{
            // VS Code accepts this
            "servers": {"time": {"command": "uvx", "args": ["mcp-server-time", "a,}",],},},
        }"#)
        .unwrap();
        let Transport::Stdio { args, .. } = &f.servers[0].transport else { panic!("stdio expected") };
        assert_eq!(args, &vec!["mcp-server-time".to_string(), "a,}".to_string()]);
        assert_eq!(
            blank_trailing_commas(r#"{"a": "x\",]", "b": [1, 2 ,  ]}"#.into()),
            r#"{"a": "x\",]", "b": [1, 2    ]}"#
        );
    }

    #[test]
    fn claude_desktop_form() {
        let f = p(r#"{"mcpServers": {
            "time": {"command": "uvx", "args": ["mcp-server-time"]},
            "gh": {"type": "http", "url": "https://api.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
            "off": {"command": "x", "disabled": true}
          }, "globalShortcut": "Ctrl+Space"}"#)
        .unwrap();
        assert_eq!(f.servers.len(), 2);
        assert_eq!(f.disabled, vec!["off"]);
        let gh = f.servers.iter().find(|s| s.name == "gh").unwrap();
        match &gh.transport {
            Transport::Http { headers, .. } => {
                assert_eq!(headers["Authorization"], "Bearer s3cret")
            }
            t => panic!("wrong transport {t:?}"),
        }
        assert_eq!(f.warnings.len(), 1);
    }

    #[test]
    fn vscode_form_with_comments() {
        let f = p("{\n // my servers\n \"servers\": {\"t\": {\"type\": \"stdio\", \"command\": \"mcp-server-time\"}}}")
            .unwrap();
        assert_eq!(f.servers[0].name, "t");
        let f = p(r#"{"mcp": {"servers": {"t": {"command": "x"}}}}"#).unwrap();
        assert_eq!(f.servers.len(), 1);
    }

    #[test]
    fn typo_names_line_column_and_nearest_key() {
        let err = p("{\"mcpServers\": {\n  \"time\": {\n    \"comand\": \"x\"\n  }\n}}").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("fleet.json:3:"), "{msg}");
        assert!(msg.contains("unknown field `comand`"), "{msg}");
        assert!(msg.contains("did you mean `command`?"), "{msg}");
        assert!(msg.contains("mcpServers.time"), "{msg}");
    }

    #[test]
    fn wrong_type_is_located() {
        let err = p("{\"mcpServers\": {\"t\": {\"command\": \"x\", \"args\": \"-y\"}}}").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("fleet.json:1:"), "{msg}");
        assert!(msg.contains("invalid type"), "{msg}");
        assert!(msg.contains("mcpServers.t.args"), "{msg}");
    }

    #[test]
    fn semantic_problems_are_collected() {
        let err =
            p(r#"{"mcpServers": {"a": {}, "b": {"command": "x", "url": "http://y"}, "c": {"command": "${MISSING}"}}}"#)
                .unwrap_err();
        // `c`'s unset variable is no problem of the file: that server alone is reported down.
        assert_eq!(err.problems.len(), 2, "{err}");
        assert!(!err.to_string().contains("MISSING"), "{err}");
    }

    #[test]
    fn a_server_with_an_unset_variable_is_unresolved_and_the_rest_load() {
        let f = p(r#"{"mcpServers": {"ok": {"command": "x"}, "c": {"command": "y", "env": {"T": "${MISSING}"}}}}"#)
            .unwrap();
        assert_eq!(f.servers.len(), 1);
        assert_eq!(f.unresolved.len(), 1);
        assert_eq!(f.unresolved[0].0, "c");
        assert!(
            f.unresolved[0].1.contains("`MISSING` is not set") && f.unresolved[0].1.contains("fleet.json:1:"),
            "{:?}",
            f.unresolved
        );
    }

    #[test]
    fn static_form() {
        let f = p(r#"{"provider": "weather", "bridge": {"command": "python3", "args": ["bridge.py"]},
                      "tools": [{"name": "forecast", "description": "Get a forecast", "inputSchema": {"type": "object"}}]}"#)
        .unwrap();
        assert_eq!(f.statics[0].tools[0].name, "forecast");
        assert!(p(r#"{"provider": "w", "bridge": {"command": "x"}, "tools": [], "toolz": 1}"#).is_err());
    }

    #[test]
    fn static_form_carries_the_rest_of_mcps_tool() {
        let f = p(r#"{"provider": "weather", "bridge": {"command": "python3"}, "tools": [{
              "name": "forecast", "title": "Forecast", "description": "Get a forecast",
              "inputSchema": {"type": "object"}, "outputSchema": {"type": "object", "properties": {"t": {"type": "number"}}},
              "annotations": {"readOnlyHint": true}, "icons": [{"src": "https://example.com/i.png"}],
              "execution": {"taskSupport": "optional"}, "_meta": {"vendor/x": 1}}]}"#)
        .unwrap();
        let t = &f.statics[0].tools[0];
        assert_eq!(t.title.as_deref(), Some("Forecast"));
        assert_eq!(t.output_schema.as_ref().unwrap()["properties"]["t"]["type"], "number");
        assert_eq!(t.annotation("readOnlyHint"), Some(true));
        assert_eq!(t.icons.as_ref().unwrap()[0]["src"], "https://example.com/i.png");
        assert_eq!(t.execution.as_ref().unwrap()["taskSupport"], "optional");
        assert_eq!(t.meta.as_ref().unwrap()["vendor/x"], 1);
        let e = p(r#"{"provider": "w", "bridge": {"command": "x"}, "tools": [{"name": "a", "outputSchema": 3}]}"#)
            .unwrap_err();
        assert!(format!("{e:?}").contains("outputSchema"), "{e:?}");
    }

    #[test]
    fn flags_need_all_four() {
        assert!(from_flags(None, None, None, None).unwrap().is_none());
        let e = from_flags(Some("p"), Some("t"), None, None).unwrap_err();
        assert!(e.contains("--mcp-desc") && e.contains("--mcp-bridge"), "{e}");
        let s = from_flags(Some("p"), Some("t"), Some("d"), Some("python3 b.py")).unwrap().unwrap();
        assert_eq!(s.command, "python3");
        assert_eq!(s.args, vec!["b.py"]);
    }

    #[test]
    fn legacy_sse_in_both_forms() {
        let f = p(r#"{"mcpServers": {"ev": {"type": "sse", "url": "http://127.0.0.1:3001/sse",
                       "headers": {"Authorization": "Bearer ${TOKEN}"}},
                     "cline": {"transportType": "sse", "url": "http://127.0.0.1:3002/sse"},
                     "web": {"type": "http", "url": "http://127.0.0.1:3003/mcp"}}}"#)
        .unwrap();
        let by = |n: &str| f.servers.iter().find(|s| s.name == n).unwrap().transport.clone();
        assert_eq!(
            by("ev"),
            Transport::Http {
                url: "http://127.0.0.1:3001/sse".into(),
                headers: [("Authorization".to_string(), "Bearer s3cret".to_string())].into(),
                legacy_sse: true
            }
        );
        assert!(matches!(by("cline"), Transport::Http { legacy_sse: true, .. }));
        assert!(matches!(by("web"), Transport::Http { legacy_sse: false, .. }));
        let f = p(r#"{"servers": {"ev": {"type": "sse", "url": "http://127.0.0.1:3001/sse"}}}"#).unwrap();
        assert!(matches!(f.servers[0].transport, Transport::Http { legacy_sse: true, .. }));
    }

    #[test]
    fn sse_without_url_is_located() {
        let err =
            p("{\"mcpServers\": {\n  \"ok\": {\"command\": \"x\"},\n  \"ev\": {\"type\": \"sse\"}\n}}").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("fleet.json:3:"), "{msg}");
        assert!(msg.contains("at `mcpServers.ev`: a server of type `sse` needs a `url`"), "{msg}");
        let err = p("{\"servers\": {\"ev\": {\n \"type\": \"sse\",\n \"url\": \"ftp://x\"}}}").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("fleet.json:3:"), "the url key's line: {msg}");
        assert!(msg.contains("not an http(s) URL"), "{msg}");
        // An unset variable is located too, and leaves the server unresolved (down), not the file refused.
        let f = p("{\"mcp\": {\"servers\": {\n\n \"ev\": {\"type\": \"sse\", \"url\": \"${MISSING}/sse\"}}}}").unwrap();
        assert!(f.unresolved[0].1.starts_with("fleet.json:3:"), "{:?}", f.unresolved);
    }

    #[test]
    fn unknown_shape() {
        let e = p(r#"{"mcpServer": {}}"#).unwrap_err().to_string();
        assert!(e.contains("did you mean `mcpServers`?"), "{e}");
    }

    #[test]
    fn two_names_that_clean_up_alike_are_refused() {
        // `a.b` would be indexed as `a_b`, the other server's name: one provider for two servers.
        let text =
            r#"{"mcpServers": {"a.b": {"command": "x", "sandbox": {"net": ["evil.test"]}}, "a_b": {"command": "y"}}}"#;
        let e = parse(text, Path::new("mcp.json"), &env()).unwrap_err().to_string();
        assert!(e.contains("servers `a.b` and `a_b` would both be indexed as `a_b`"), "{e}");
    }

    #[test]
    fn merging_a_second_file_with_a_name_already_used_is_refused() {
        let one = parse(r#"{"mcpServers": {"time": {"command": "x"}}}"#, Path::new("one.json"), &env()).unwrap();
        let two = parse(r#"{"mcpServers": {"time": {"command": "y"}}}"#, Path::new("two.json"), &env()).unwrap();
        let mut fleet = Fleet::default();
        fleet.merge(one, Path::new("one.json")).unwrap();
        let e = fleet.merge(two, Path::new("two.json")).unwrap_err().to_string();
        assert!(e.starts_with("two.json: server name `time` already used"), "{e}");
        assert_eq!(fleet.servers.len(), 1, "nothing of the refused file was added");
    }

    #[test]
    fn a_typo_after_a_multi_line_comment_is_reported_on_its_own_line() {
        let text = "{\"mcpServers\": {\n  /* a\n  b */\n  \"t\": {\"comand\": \"x\"}}}";
        let e = parse(text, Path::new("mcp.json"), &env()).unwrap_err().to_string();
        assert!(e.starts_with("mcp.json:4:"), "{e}");
    }

    #[test]
    fn a_comment_with_non_ascii_characters_keeps_positions_and_does_not_panic() {
        // Found by the fleet fuzz target: a multi-byte character inside a comment.
        let text = "{\n  // VS\u{5bc}ode accepts this\n  \"server\":s {\"time\": {\"command\": \"uvx\",}";
        let e = parse(text, Path::new("mcp.json"), &env()).unwrap_err().to_string();
        assert!(e.starts_with("mcp.json:3:"), "{e}");
    }

    #[test]
    fn protocol_pins_a_servers_revision_and_a_wrong_one_names_the_choices() {
        let f = p(r#"{"mcpServers": {"old": {"command": "x", "protocol": "2025-11-25"}, "new": {"command": "y"}}}"#)
            .unwrap();
        let by = |n: &str| f.servers.iter().find(|s| s.name == n).unwrap().protocol;
        assert_eq!(by("old"), UpstreamProtocol::Initialize);
        assert_eq!(by("new"), UpstreamProtocol::Auto, "the default probes for the newest");
        let err = p(r#"{"mcpServers": {"a": {"command": "x", "protocol": "2027-01-01"}}}"#).unwrap_err().to_string();
        assert!(err.contains("2027-01-01") && err.contains("2026-07-28") && err.contains("auto"), "{err}");
    }
}
