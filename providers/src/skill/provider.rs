//! The skill provider: each loaded skill as one tool behind the [`Provider`] trait. It owns the
//! tool's input schema, the overview a call without arguments returns, `read` of a bundled file,
//! the containment checks on the script a call names, and building that script's process (its
//! argv, environment and readable skill folder) for the shared runner (`process.rs`).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use axp_protocol::{ToolCall, ToolOutput, ToolSpec};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::scan::{Runner, SkillInfo, runner, scan};
use super::watch::{Shared, Watch, start_watch};
use crate::process::{self, Capture, DEFAULT_PATH, RunOptions};
use crate::{
    CancellationToken, JobSink, Launcher, ProcessPolicy, ProcessSpec, Provider, ProviderError, ProviderEvent,
    ProviderId,
};

/// Largest bundled file returned by a `read` call.
pub const MAX_READ_BYTES: u64 = 256 * 1024;
/// How much of each output stream a finished script keeps for its result text; everything was
/// already streamed as job events.
pub const SKILL_TAIL_BYTES: usize = 64 * 1024;

/// How the gateway configures the provider.
#[derive(Debug, Clone)]
pub struct SkillDirsConfig {
    /// The provider's name (`skill`): tools appear as `skill__<name>`.
    pub id: ProviderId,
    /// Each entry is a skill folder or a folder of skill folders.
    pub dirs: Vec<PathBuf>,
    /// Builds every script's process (the sandbox lives there).
    pub launcher: Arc<dyn Launcher>,
    /// Default deadline of one script run (`meta.timeout_ms` overrides it).
    pub timeout: Duration,
    /// The scripts' environment (nothing is inherited). `PATH` defaults to the usual system
    /// directories; `PYTHONDONTWRITEBYTECODE=1` and `AXP_SKILL_DIR` are always set.
    pub env: BTreeMap<String, String>,
    /// What scripts may touch; the skill folder is added to `fs_read` for each run.
    pub policy: ProcessPolicy,
}

/// Skills behind the [`Provider`] trait.
pub struct SkillProvider {
    id: ProviderId,
    shared: Arc<Shared>,
    launcher: Arc<dyn Launcher>,
    timeout: Duration,
    env: BTreeMap<String, String>,
    policy: ProcessPolicy,
    watch: Mutex<Option<Watch>>,
    watch_kind: &'static str,
}

impl std::fmt::Debug for SkillProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillProvider")
            .field("id", &self.id)
            .field("dirs", &self.shared.dirs)
            .field("skills", &self.shared.snapshot().skills.keys().collect::<Vec<_>>())
            .field("watch", &self.watch_kind)
            .finish()
    }
}

impl SkillProvider {
    /// Loads every skill in `cfg.dirs` and starts watching them. Never fails because of a bad
    /// skill: those are skipped and reported by [`SkillProvider::problems`]. A watcher that
    /// cannot be started is reported there too (the skills still load; call
    /// [`SkillProvider::reload`] to re-read them by hand).
    pub fn new(cfg: SkillDirsConfig) -> Self {
        Self::build(cfg, false)
    }

    /// Like [`SkillProvider::new`], but notices changes by re-reading the folders (modification
    /// times and contents) every second instead of through inotify: for skill folders on network filesystems (NFS, SMB,
    /// some container bind mounts), where inotify does not see changes made elsewhere.
    pub fn new_polling(cfg: SkillDirsConfig) -> Self {
        Self::build(cfg, true)
    }

    fn build(cfg: SkillDirsConfig, poll: bool) -> Self {
        let (events, _) = broadcast::channel(16);
        let shared = Arc::new(Shared { catalog: RwLock::new(Arc::new(scan(&cfg.dirs))), dirs: cfg.dirs, events });
        let (watch, watch_kind) = match start_watch(&shared, poll) {
            Ok(w) => {
                let kind = w.kind();
                (Some(w), kind)
            }
            Err(e) => {
                tracing::warn!(error = %e, "skill directories are not watched");
                let mut slot = shared.catalog.write().unwrap_or_else(|p| p.into_inner());
                let mut cat = (**slot).clone();
                cat.problems.push(format!("warning: skill directories are not watched ({e}); changes need a restart"));
                *slot = Arc::new(cat);
                (None, "none")
            }
        };
        for p in &shared.snapshot().problems {
            tracing::warn!(provider = %cfg.id, "{p}");
        }
        Self {
            id: cfg.id,
            shared,
            launcher: cfg.launcher,
            timeout: cfg.timeout,
            env: cfg.env,
            policy: cfg.policy,
            watch: Mutex::new(watch),
            watch_kind,
        }
    }

    /// Every problem found by the last (re)load, one sentence each, starting with `error:` (the
    /// skill was skipped) or `warning:` (it loaded anyway).
    pub fn problems(&self) -> Vec<String> {
        self.shared.snapshot().problems.clone()
    }

    /// The body of the skill's `SKILL.md` (its procedure), for `axp.describe`.
    pub fn instructions(&self, skill: &str) -> Option<String> {
        self.shared.snapshot().skills.get(skill).map(|s| s.instructions.clone())
    }

    /// The skill's bundled files, relative to its folder (empty for an unknown skill).
    pub fn files(&self, skill: &str) -> Vec<String> {
        self.shared.snapshot().skills.get(skill).map(|s| s.files.clone()).unwrap_or_default()
    }

    /// One loaded skill.
    pub fn skill(&self, skill: &str) -> Option<SkillInfo> {
        self.shared.snapshot().skills.get(skill).map(|s| (**s).clone())
    }

    /// Every loaded skill, sorted by name.
    pub fn skills(&self) -> Vec<SkillInfo> {
        self.shared.snapshot().skills.values().map(|s| (**s).clone()).collect()
    }

    /// Re-reads the directories now; `true` (and a `ToolsChanged` event) when the skills
    /// changed. The watcher calls this by itself; it is public for a SIGHUP or a test.
    pub fn reload(&self) -> bool {
        self.shared.reload()
    }

    /// How changes are noticed: `native` (inotify), `poll` (every second) or `none`.
    pub fn watch_kind(&self) -> &'static str {
        self.watch_kind
    }

    fn spec(&self, skill: &SkillInfo) -> ToolSpec {
        ToolSpec::new(skill.name.clone(), skill.description.clone(), input_schema(skill))
    }

    async fn run_script(
        &self,
        skill: &SkillInfo,
        script: &str,
        args: Vec<String>,
        call: &ToolCall,
        sink: JobSink,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ProviderError> {
        let path = resolve_bundled(skill, script, true)?;
        let path_str = path.to_string_lossy().into_owned();
        let (program, mut argv) = match runner(&path) {
            Some(Runner::Interpreter(interp, mut lead)) => {
                lead.push(path_str);
                (interp, lead)
            }
            Some(Runner::Direct) => (path_str, Vec::new()),
            None => {
                return Err(ProviderError::InvalidArguments(format!(
                    "`{script}` cannot be run: it has no known extension (.py, .sh, .bash, .js), no `#!` line and is not executable"
                )));
            }
        };
        argv.extend(args);
        let cwd = match call.meta.as_ref().and_then(|m| m.get("cwd")) {
            None | Some(Value::Null) => skill.dir.clone(),
            Some(Value::String(s)) if Path::new(s).is_absolute() => PathBuf::from(s),
            Some(other) => {
                return Err(ProviderError::Config(format!("meta.cwd must be an absolute path, got {other}")));
            }
        };
        let mut env = self.env.clone();
        env.entry("PATH".into()).or_insert_with(|| DEFAULT_PATH.into());
        // The skill folder is read-only in the sandbox; without this, Python would try to write
        // `__pycache__` next to imported modules.
        env.insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
        env.insert("AXP_SKILL_DIR".into(), skill.dir.to_string_lossy().into_owned());
        let mut policy = self.policy.clone();
        policy.fs_read.push(skill.dir.clone());
        let spec = ProcessSpec { program, args: argv, env, cwd: Some(cwd), policy };
        let tail = Capture { emit: true, keep: SKILL_TAIL_BYTES, tail: true, chunk: process::READ_CHUNK };
        let how = RunOptions {
            tool: &skill.name,
            timeout: crate::call_timeout(call, self.timeout),
            stdout: tail,
            stderr: tail,
        };
        let finished = process::run(&self.launcher, &spec, &how, sink, cancel).await?;
        let mut out = process::tool_output(&finished, "script");
        if let Some(serde_json::Value::Object(m)) = out.structured_content.as_mut() {
            m.shift_insert(0, "script".into(), json!(script));
        }
        Ok(out)
    }
}

/// The tool's input schema: `script` (one of the bundled scripts), `args`, and `read` (one of
/// the bundled files, returned as text). No property is required: a call without any returns
/// the instructions.
fn input_schema(skill: &SkillInfo) -> Value {
    let mut props = Map::new();
    if !skill.scripts.is_empty() {
        props.insert(
            "script".into(),
            json!({
                "type": "string",
                "enum": skill.scripts,
                "description": "A bundled script to run, relative to the skill folder. Leave out to get the skill's instructions and file list."
            }),
        );
        props.insert(
            "args".into(),
            json!({
                "type": "array",
                "items": {"type": "string"},
                "description": "Command-line arguments passed to the script, one element each (no shell)."
            }),
        );
    }
    let readable: Vec<&String> = skill.files.iter().filter(|f| !skill.scripts.contains(f)).collect();
    if !readable.is_empty() {
        props.insert(
            "read".into(),
            json!({
                "type": "string",
                "enum": readable,
                "description": "A bundled reference file to return as text, relative to the skill folder."
            }),
        );
    }
    json!({
        "type": "object",
        "properties": props,
        "required": [],
        "additionalProperties": false
    })
}

/// Checks that `rel` names one of the skill's bundled files (or scripts, when `script`), and
/// that it still resolves inside the skill folder now; returns the canonical path. Nothing is
/// run or read before this passes.
fn resolve_bundled(skill: &SkillInfo, rel: &str, script: bool) -> Result<PathBuf, ProviderError> {
    let what = if script { "script" } else { "file" };
    let refuse = |why: String| ProviderError::InvalidArguments(format!("{what} `{rel}` is refused: {why}"));
    if rel.is_empty() {
        return Err(refuse("the path is empty".into()));
    }
    if rel.contains('\0') {
        return Err(refuse("the path contains a NUL byte".into()));
    }
    let p = Path::new(rel);
    if p.is_absolute() {
        return Err(refuse("paths are relative to the skill folder, never absolute".into()));
    }
    if p.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(refuse("paths may not contain `..` or `.`; name a bundled file as listed".into()));
    }
    let listed = if script { &skill.scripts } else { &skill.files };
    if !listed.iter().any(|f| f == rel) {
        let hint = if script && skill.files.iter().any(|f| f == rel) {
            "it is a bundled file but not a script; read it with `read`".to_string()
        } else if listed.is_empty() {
            format!("skill `{}` bundles no {what}s", skill.name)
        } else {
            format!("it is not one of skill `{}`'s bundled {what}s ({})", skill.name, listed.join(", "))
        };
        return Err(refuse(hint));
    }
    // The listing was checked at load time; check again now, since the file may have been
    // replaced by a link since.
    let canonical =
        std::fs::canonicalize(skill.dir.join(p)).map_err(|e| refuse(format!("it cannot be resolved now ({e})")))?;
    if !canonical.starts_with(&skill.dir) {
        return Err(refuse(format!("it now resolves to {}, outside the skill folder", canonical.display())));
    }
    if !canonical.is_file() {
        return Err(refuse("it is no longer a regular file".into()));
    }
    Ok(canonical)
}

/// The text a call without `script` returns (and what `axp.describe` shows).
fn overview(skill: &SkillInfo) -> String {
    let mut out = format!("# Skill `{}`\n\n", skill.name);
    out.push_str(skill.instructions.trim_end());
    out.push_str("\n\n## Bundled files\n\n");
    if skill.files.is_empty() {
        out.push_str("(none)\n");
    } else {
        out.push_str(&format!("Relative to the skill folder {} (read-only).\n", skill.dir.display()));
        for f in &skill.files {
            if skill.scripts.contains(f) {
                out.push_str(&format!("- {f} (script: call with {{\"script\": \"{f}\", \"args\": [...]}})\n"));
            } else {
                out.push_str(&format!("- {f} (read with {{\"read\": \"{f}\"}})\n"));
            }
        }
    }
    out
}

/// Reads a bundled file for a `read` call: at most [`MAX_READ_BYTES`], text only.
fn read_bundled(skill: &SkillInfo, rel: &str) -> Result<ToolOutput, ProviderError> {
    let path = resolve_bundled(skill, rel, false)?;
    let file = std::fs::File::open(&path).map_err(|e| ProviderError::io(format!("cannot open `{rel}`"), e))?;
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ProviderError::io(format!("cannot read `{rel}`"), e))?;
    let truncated = bytes.len() as u64 > MAX_READ_BYTES;
    bytes.truncate(MAX_READ_BYTES as usize);
    if bytes.contains(&0) {
        return Ok(ToolOutput::error_text(format!(
            "`{rel}` is a binary file; it is meant for the skill's scripts, not to be read as text"
        )));
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if truncated {
        text.push_str(&format!("\n[… cut at {MAX_READ_BYTES} bytes; the file is longer …]"));
    }
    Ok(ToolOutput::text(text))
}

/// Pulls `script`, `args` and `read` out of the arguments, refusing anything else.
/// A call's arguments, checked.
#[derive(Debug)]
struct SkillArgs {
    script: Option<String>,
    args: Vec<String>,
    read: Option<String>,
}

fn parse_arguments(args: &Map<String, Value>) -> Result<SkillArgs, ProviderError> {
    let bad = ProviderError::InvalidArguments;
    if let Some(k) = args.keys().find(|k| !matches!(k.as_str(), "script" | "args" | "read")) {
        return Err(bad(format!("unknown argument `{k}`; a skill takes `script`, `args` and `read`")));
    }
    let string = |key: &str| -> Result<Option<String>, ProviderError> {
        match args.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(format!("`{key}` must be a string"))),
        }
    };
    let script = string("script")?;
    let read = string("read")?;
    let argv = match args.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) if !s.contains('\0') => Ok(s.clone()),
                Value::String(_) => Err(bad("an element of `args` contains a NUL byte".into())),
                _ => Err(bad("`args` must be an array of strings".into())),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad("`args` must be an array of strings".into())),
    };
    if script.is_some() && read.is_some() {
        return Err(bad("give either `script` or `read`, not both".into()));
    }
    if script.is_none() && !argv.is_empty() {
        return Err(bad("`args` needs a `script` to pass them to".into()));
    }
    Ok(SkillArgs { script, args: argv, read })
}

#[async_trait]
impl Provider for SkillProvider {
    fn id(&self) -> &ProviderId {
        &self.id
    }

    fn instructions(&self, tool: &str) -> Option<String> {
        SkillProvider::instructions(self, tool).filter(|i| !i.trim().is_empty())
    }

    async fn tools(&self) -> Result<Vec<ToolSpec>, ProviderError> {
        Ok(self.shared.snapshot().skills.values().map(|s| self.spec(s)).collect())
    }

    async fn call(
        &self,
        call: ToolCall,
        sink: JobSink,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ProviderError> {
        let skill = self
            .shared
            .snapshot()
            .skills
            .get(&call.tool)
            .cloned()
            .ok_or_else(|| ProviderError::UnknownTool(call.tool.clone()))?;
        let SkillArgs { script, args, read } = parse_arguments(&call.arguments)?;
        match (script, read) {
            (Some(script), _) => self.run_script(&skill, &script, args, &call, sink, cancel).await,
            (None, Some(read)) => read_bundled(&skill, &read),
            (None, None) => Ok(ToolOutput {
                structured_content: Some(json!({
                    "name": skill.name,
                    "instructions": skill.instructions,
                    "files": skill.files,
                    "scripts": skill.scripts,
                })),
                ..ToolOutput::text(overview(&skill))
            }),
        }
    }

    fn events(&self) -> Option<broadcast::Receiver<ProviderEvent>> {
        Some(self.shared.events.subscribe())
    }

    /// Each skill is also a prompt of the same name: its `SKILL.md` procedure as a user message,
    /// which is how an MCP client that knows prompts but not skills can hand one to its model.
    async fn prompts(&self) -> Result<Vec<Value>, ProviderError> {
        Ok(self
            .shared
            .snapshot()
            .skills
            .values()
            .map(|s| json!({"name": s.name, "description": s.description, "arguments": []}))
            .collect())
    }

    async fn get_prompt(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        answers: Option<crate::InputAnswers>,
    ) -> Result<Value, ProviderError> {
        let _ = (arguments, answers);
        let skill = self.skill(name).ok_or_else(|| ProviderError::UnknownPrompt(name.to_string()))?;
        Ok(json!({
            "description": skill.description,
            "messages": [{"role": "user", "content": {"type": "text", "text": skill.instructions}}],
        }))
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        // Dropping the watcher closes its channel, which ends the reload thread. A running
        // script's process group dies with its call's future.
        self.watch.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(())
    }
}
