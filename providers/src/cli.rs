//! The `cli` provider: tools that are commands the operator declared, each an argv template with
//! a JSON Schema for its arguments (`git_diff` → `["git", "diff", "--", "{path}"]`). It owns the
//! template rules and the option-injection check; running the process is `process.rs`'s job.
//!
//! It must never build a shell string from arguments: an argument only ever becomes (part of)
//! one argv element. A template may itself name a shell (`["sh", "-c", "…"]`) because the
//! operator wrote it; the agent's arguments still only fill placeholders.
//!
//! Template rules, per argv element:
//!
//! * `{name}` as the whole element: a string, number or boolean becomes one element; an array
//!   becomes one element per item (items must be scalars); a missing or `null` argument drops
//!   the element; an object is refused.
//! * `{name}` inside a longer element is replaced textually by a scalar; if the argument is
//!   missing or `null`, the whole element is dropped (`--format={fmt}` disappears).
//! * `{{` and `}}` are literal braces. Any other `{…}` that is not a plain identifier
//!   (`[A-Za-z_][A-Za-z0-9_-]*`) is literal text, so `find … {} ;` and awk programs work.
//! * Option injection: a value that would start an argv element with `-` is refused unless an
//!   element that is exactly `--` comes earlier in the template, or the schema property sets
//!   `"x-allow-dash": true`.
//! * The program (`argv[0]`) must be literal, and every placeholder must name a property of the
//!   input schema; both are checked when the provider is built.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axp_protocol::{ToolCall, ToolOutput, ToolSpec};
use serde_json::{Map, Value};

use crate::process::{self, Capture, DEFAULT_PATH, RunOptions};
use crate::{CancellationToken, JobSink, Launcher, ProcessPolicy, ProcessSpec, Provider, ProviderError, ProviderId};

/// How much of each stream a finished call keeps for its result text; everything else was
/// already streamed as job events.
pub const CLI_TAIL_BYTES: usize = 64 * 1024;

/// One declared command tool.
#[derive(Debug, Clone, PartialEq)]
pub struct CliToolConfig {
    /// The tool's name within the provider.
    pub name: String,
    pub description: String,
    /// The argv template, e.g. `["git", "diff", "--", "{path}"]`.
    pub argv: Vec<String>,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
    /// Deadline for one call; the process group is killed when it passes.
    pub timeout: Duration,
    pub cwd: Option<PathBuf>,
    /// The complete environment of the command. `PATH` defaults to the usual system
    /// directories when not given.
    pub env: BTreeMap<String, String>,
    pub policy: ProcessPolicy,
}

/// One piece of a parsed argv element.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Var(String),
}

/// A parsed argv element.
#[derive(Debug, Clone, PartialEq)]
struct Element {
    pieces: Vec<Piece>,
    /// An element that is exactly `--` came before this one.
    after_double_dash: bool,
}

impl Element {
    fn whole_var(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Var(v)] => Some(v),
            _ => None,
        }
    }
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Splits one template element into text and placeholders.
fn parse_element(s: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("{{") {
            text.push('{');
            rest = after;
        } else if let Some(after) = rest.strip_prefix("}}") {
            text.push('}');
            rest = after;
        } else if c == '{'
            && let Some(end) = rest.find('}')
            && is_ident(&rest[1..end])
        {
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(Piece::Var(rest[1..end].to_string()));
            rest = &rest[end + 1..];
        } else {
            text.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    if !text.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Text(text));
    }
    pieces
}

/// A validated, parsed argv template.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgvTemplate {
    elements: Vec<Element>,
    /// Properties whose schema sets `"x-allow-dash": true`.
    allow_dash: BTreeSet<String>,
}

impl ArgvTemplate {
    /// Parses `argv` and checks it against `schema`: the program must be literal and every
    /// placeholder must name one of the schema's properties.
    pub fn parse(argv: &[String], schema: &Value) -> Result<Self, String> {
        let program = argv.first().ok_or_else(|| "the argv template is empty".to_string())?;
        let props = schema.get("properties").and_then(Value::as_object);
        let mut elements = Vec::with_capacity(argv.len());
        let mut seen_dd = false;
        for (i, raw) in argv.iter().enumerate() {
            let pieces = parse_element(raw);
            for p in &pieces {
                if let Piece::Var(v) = p {
                    if i == 0 {
                        return Err(format!("the program `{program}` must be literal, not a placeholder"));
                    }
                    if !props.is_some_and(|m| m.contains_key(v)) {
                        return Err(format!("placeholder `{{{v}}}` names no property of the input schema"));
                    }
                }
            }
            elements.push(Element { pieces, after_double_dash: seen_dd });
            if raw == "--" {
                seen_dd = true;
            }
        }
        let allow_dash = props
            .map(|m| {
                m.iter()
                    .filter(|(_, s)| s.get("x-allow-dash").and_then(Value::as_bool) == Some(true))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self { elements, allow_dash })
    }

    /// Fills the template with `args`. The error is a sentence for `InvalidArguments`.
    pub fn render(&self, args: &Map<String, Value>) -> Result<Vec<String>, String> {
        let mut out = Vec::with_capacity(self.elements.len());
        for el in &self.elements {
            if let Some(var) = el.whole_var() {
                let values: Vec<String> = match args.get(var) {
                    None | Some(Value::Null) => continue,
                    Some(Value::Array(items)) => items.iter().map(|v| scalar(var, v)).collect::<Result<_, _>>()?,
                    Some(v) => vec![scalar(var, v)?],
                };
                for v in values {
                    self.check_dash(el, var, &v)?;
                    out.push(v);
                }
                continue;
            }
            let mut s = String::new();
            let mut dropped = false;
            for (pos, piece) in el.pieces.iter().enumerate() {
                match piece {
                    Piece::Text(t) => s.push_str(t),
                    Piece::Var(var) => match args.get(var) {
                        None | Some(Value::Null) => dropped = true,
                        Some(Value::Array(_)) => {
                            return Err(format!(
                                "`{var}` is an array, but its placeholder is part of a longer argument, where only a single value fits"
                            ));
                        }
                        Some(v) => {
                            let v = scalar(var, v)?;
                            if pos == 0 {
                                self.check_dash(el, var, &v)?;
                            }
                            s.push_str(&v);
                        }
                    },
                }
            }
            if !dropped {
                out.push(s);
            }
        }
        Ok(out)
    }

    fn check_dash(&self, el: &Element, var: &str, value: &str) -> Result<(), String> {
        if value.starts_with('-') && !el.after_double_dash && !self.allow_dash.contains(var) {
            return Err(format!(
                "`{var}` starts with `-` and would be read as an option; this tool does not allow that (the operator can set \"x-allow-dash\": true on the property or put `--` before it)"
            ));
        }
        Ok(())
    }
}

fn scalar(var: &str, v: &Value) -> Result<String, String> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        Value::Array(_) | Value::Object(_) => {
            return Err(format!("`{var}` must be a string, number or boolean (or an array of them)"));
        }
    };
    if s.contains('\0') {
        return Err(format!("`{var}` contains a NUL byte"));
    }
    Ok(s)
}

struct CliTool {
    cfg: CliToolConfig,
    template: ArgvTemplate,
}

/// Declared command tools behind the [`Provider`] trait.
pub struct CliProvider {
    id: ProviderId,
    tools: Vec<CliTool>,
    launcher: Arc<dyn Launcher>,
}

impl std::fmt::Debug for CliProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CliProvider")
            .field("id", &self.id)
            .field("tools", &self.tools.iter().map(|t| &t.cfg.name).collect::<Vec<_>>())
            .finish()
    }
}

impl CliProvider {
    /// Validates every tool's template (collecting all problems into one
    /// [`ProviderError::Config`]) and builds the provider.
    pub fn new(id: ProviderId, tools: Vec<CliToolConfig>, launcher: Arc<dyn Launcher>) -> Result<Self, ProviderError> {
        let mut problems = Vec::new();
        let mut names = BTreeSet::new();
        let mut parsed = Vec::new();
        for cfg in tools {
            if !names.insert(cfg.name.clone()) {
                problems.push(format!("tool `{}` is declared twice", cfg.name));
                continue;
            }
            match ArgvTemplate::parse(&cfg.argv, &cfg.input_schema) {
                Ok(template) => parsed.push(CliTool { cfg, template }),
                Err(e) => problems.push(format!("tool `{}`: {e}", cfg.name)),
            }
        }
        if !problems.is_empty() {
            return Err(ProviderError::Config(format!("provider `{id}`: {}", problems.join("; "))));
        }
        Ok(Self { id, tools: parsed, launcher })
    }
}

#[async_trait]
impl Provider for CliProvider {
    fn id(&self) -> &ProviderId {
        &self.id
    }

    async fn tools(&self) -> Result<Vec<ToolSpec>, ProviderError> {
        Ok(self
            .tools
            .iter()
            .map(|t| ToolSpec::new(t.cfg.name.clone(), t.cfg.description.clone(), t.cfg.input_schema.clone()))
            .collect())
    }

    async fn call(
        &self,
        call: ToolCall,
        sink: JobSink,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ProviderError> {
        let tool = self
            .tools
            .iter()
            .find(|t| t.cfg.name == call.tool)
            .ok_or_else(|| ProviderError::UnknownTool(call.tool.clone()))?;
        let argv = tool.template.render(&call.arguments).map_err(ProviderError::InvalidArguments)?;
        let (program, args) =
            argv.split_first().ok_or_else(|| ProviderError::Config("the argv template is empty".into()))?;
        let mut env = tool.cfg.env.clone();
        env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
        let spec = ProcessSpec {
            program: program.clone(),
            args: args.to_vec(),
            env,
            cwd: tool.cfg.cwd.clone(),
            policy: tool.cfg.policy.clone(),
        };
        let tail = Capture { emit: true, keep: CLI_TAIL_BYTES, tail: true, chunk: process::READ_CHUNK };
        let how = RunOptions {
            tool: &tool.cfg.name,
            timeout: crate::call_timeout(&call, tool.cfg.timeout),
            stdout: tail,
            stderr: tail,
        };
        let finished = process::run(&self.launcher, &spec, &how, sink, cancel).await?;
        Ok(process::tool_output(&finished, "command"))
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        // Nothing runs between calls; a running call's process group dies with its future.
        Ok(())
    }
}
