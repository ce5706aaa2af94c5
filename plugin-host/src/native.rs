//! The `dylib` provider: native libraries exporting `axp_plugin_v0` (plugins/include/axp_plugin.h).
//! This file owns the C vtable mirror, the loader, the helper-process entry
//! ([`plugin_host_main`], run as `axp __plugin-host LIB`) and the provider that talks to it
//! with newline-delimited JSON-RPC over the helper's stdio. Both ends build and read every
//! envelope with `axp_protocol::jsonrpc`, never by hand.
//!
//! By default the library is loaded only in the helper, which the gateway's [`Launcher`]
//! sandboxes, so a crash or a malicious library takes down only that process; the provider
//! reports it unavailable for that call and starts a fresh helper on the next one. In-process
//! loading happens only when the operator says `trusted = true`. A loaded library is never
//! unloaded while its process lives (its code may have spawned threads or registered hooks).
//!
//! The helper is as untrusted as the library it loads, so the gateway reads its stdout with a
//! bounded line reader: one reply line holds at most [`MAX_REPLY_BYTES`], and a helper that
//! writes more without a newline fails that call with a limit error and is killed. A helper that
//! breaks the exchange in any way (dies, times out, answers garbage or another request's id, or
//! is abandoned mid-call because the call was cancelled) is never asked again: the next call
//! starts a fresh one, so no late reply is ever read as the answer to a later request.
//!
//! `unsafe` is allowed in this file only, for the C boundary; each block says why it holds.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axp_protocol::jsonrpc::{self, Id, Incoming, Request, Response};
use axp_protocol::{ErrorCode as RpcCode, RpcError, ToolCall, ToolOutput, ToolSpec};
use axp_provider_api::{
    CancellationToken, JobSink, Launcher, ProcessPolicy, ProcessSpec, Provider, ProviderError, ProviderEvent,
    ProviderId,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::broadcast;

use crate::output::to_tool_output;

/// `(major << 16) | (minor << 8) | patch` of the native ABI this host speaks (0.1.0).
pub const NATIVE_ABI_VERSION: u32 = 0x00_01_00;
/// The hidden subcommand the gateway dispatches to [`plugin_host_main`].
pub const PLUGIN_HOST_ARG: &str = "__plugin-host";
/// The longest reply line the gateway reads from a helper, newline excluded: the same 16 MiB
/// the gateway accepts as one answer from a remote MCP server
/// ([`axp_provider_api::MAX_MESSAGE_BYTES`]). A tool result with images can be large, but
/// a helper must not make the gateway buffer without limit.
/// The reply carries the plugin's result as an escaped JSON string, so the largest result is
/// somewhat smaller.
pub const MAX_REPLY_BYTES: usize = axp_provider_api::MAX_MESSAGE_BYTES;
/// How long a helper that ended its output is given to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(1);

const STATUS_OK: i32 = 0;
const STATUS_TOOL_ERROR: i32 = 1;
const STATUS_PANIC: i32 = 2;
const STATUS_BAD_INPUT: i32 = 3;
const STATUS_NOT_FOUND: i32 = 4;

#[repr(C)]
struct AxpBuf {
    ptr: *mut u8,
    len: usize,
    cap: usize,
}

#[repr(C)]
struct VTable {
    abi_version: u32,
    struct_size: u32,
    info: unsafe extern "C" fn(out: *mut AxpBuf) -> i32,
    list_tools: unsafe extern "C" fn(out: *mut AxpBuf) -> i32,
    describe: unsafe extern "C" fn(name: *const u8, name_len: usize, out: *mut AxpBuf) -> i32,
    call: unsafe extern "C" fn(
        name: *const u8,
        name_len: usize,
        args: *const u8,
        args_len: usize,
        meta: *const u8,
        meta_len: usize,
        out: *mut AxpBuf,
    ) -> i32,
    free_buf: unsafe extern "C" fn(buf: AxpBuf),
}

fn abi_text(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// Why a native library cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// `dlopen` or the symbol lookup failed.
    #[error("cannot load {path}: {message}")]
    Load { path: PathBuf, message: String },
    /// The library was built for another ABI version.
    #[error(
        "{path} was built for native plugin ABI {found}, but this host speaks ABI {expected}; \
         hint: rebuild it against plugins/include/axp_plugin.h {expected}"
    )]
    AbiMismatch { path: PathBuf, found: String, expected: String },
}

/// What a native call returned.
#[derive(Debug, Clone, PartialEq)]
pub enum NativeOutcome {
    /// JSON result.
    Ok(String),
    /// A tool-level error: `kind` and `message`.
    ToolError { kind: String, message: String },
    /// The plugin panicked (caught by its SDK).
    Panic(String),
    /// The plugin refused the input as malformed.
    BadInput,
    /// `describe`: no such tool.
    NotFound,
}

/// A loaded library's vtable. The library is leaked on purpose: it is never unloaded.
#[derive(Clone, Copy)]
pub struct NativeLib {
    vt: &'static VTable,
}

impl std::fmt::Debug for NativeLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeLib").field("abi", &abi_text(self.vt.abi_version)).finish()
    }
}

impl NativeLib {
    /// Loads `path` in this process and checks its ABI version. Only for the helper process,
    /// or the gateway itself when the operator trusts the plugin.
    pub fn open(path: &Path) -> Result<Self, NativeError> {
        let load_err = |message: String| NativeError::Load { path: path.to_path_buf(), message };
        // SAFETY: loading runs the library's initialisers. The library was installed with a
        // verified digest, and by default this runs in the sandboxed helper process, where the
        // damage a bad library can do is confined.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| load_err(e.to_string()))?;
        // SAFETY: the symbol's type is fixed by axp_plugin.h: `const AxpPluginV0 *(void)`.
        let entry: libloading::Symbol<unsafe extern "C" fn() -> *const VTable> =
            unsafe { lib.get(b"axp_plugin_v0\0") }.map_err(|e| load_err(format!("no `axp_plugin_v0` symbol: {e}")))?;
        // SAFETY: calling the entry point as the header defines it; it takes no arguments.
        let ptr = unsafe { entry() };
        if ptr.is_null() {
            return Err(load_err("`axp_plugin_v0` returned NULL".into()));
        }
        // SAFETY: the first two u32 fields are common to every ABI version, so reading
        // `abi_version` is valid before we know the version; the rest is read only after the
        // check below. The pointer stays valid because the library is never unloaded.
        let abi = unsafe { (*ptr).abi_version };
        if abi != NATIVE_ABI_VERSION {
            return Err(NativeError::AbiMismatch {
                path: path.to_path_buf(),
                found: abi_text(abi),
                expected: abi_text(NATIVE_ABI_VERSION),
            });
        }
        // SAFETY: same version, so the layout is ours; the vtable is static in the library,
        // which we leak below, so `'static` holds.
        let vt: &'static VTable = unsafe { &*ptr };
        if (vt.struct_size as usize) < std::mem::size_of::<VTable>() {
            return Err(load_err(format!(
                "vtable is {} bytes, expected at least {}",
                vt.struct_size,
                std::mem::size_of::<VTable>()
            )));
        }
        std::mem::forget(lib);
        Ok(Self { vt })
    }

    fn finish(&self, status: i32, buf: AxpBuf) -> NativeOutcome {
        let text = if buf.ptr.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null buffer the plugin returned holds `len` initialised bytes
            // until we hand it back to `free_buf`, which we do right after copying.
            let bytes = unsafe { std::slice::from_raw_parts(buf.ptr, buf.len) };
            String::from_utf8_lossy(bytes).into_owned()
        };
        if !buf.ptr.is_null() {
            // SAFETY: each buffer is freed once, by the allocator that made it.
            unsafe { (self.vt.free_buf)(buf) };
        }
        match status {
            STATUS_OK => NativeOutcome::Ok(text),
            STATUS_TOOL_ERROR => {
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                NativeOutcome::ToolError {
                    kind: v["kind"].as_str().unwrap_or("failed").to_string(),
                    message: v["message"].as_str().unwrap_or(&text).to_string(),
                }
            }
            STATUS_PANIC => NativeOutcome::Panic(text),
            STATUS_NOT_FOUND => NativeOutcome::NotFound,
            STATUS_BAD_INPUT => NativeOutcome::BadInput,
            other => NativeOutcome::Panic(format!("unknown status code {other}")),
        }
    }

    fn empty() -> AxpBuf {
        AxpBuf { ptr: std::ptr::null_mut(), len: 0, cap: 0 }
    }

    /// `info()`.
    pub fn info(&self) -> NativeOutcome {
        let mut out = Self::empty();
        // SAFETY: `out` is a valid, writable buffer; the vtable was checked at load.
        let status = unsafe { (self.vt.info)(&mut out) };
        self.finish(status, out)
    }

    /// `list_tools()`.
    pub fn list_tools(&self) -> NativeOutcome {
        let mut out = Self::empty();
        // SAFETY: as for `info`.
        let status = unsafe { (self.vt.list_tools)(&mut out) };
        self.finish(status, out)
    }

    /// `call(name, args, meta)`.
    pub fn call(&self, name: &str, args: &str, meta: &str) -> NativeOutcome {
        let mut out = Self::empty();
        // SAFETY: every pointer/length pair borrows a live `&str` for the call's duration.
        let status = unsafe {
            (self.vt.call)(name.as_ptr(), name.len(), args.as_ptr(), args.len(), meta.as_ptr(), meta.len(), &mut out)
        };
        self.finish(status, out)
    }

    /// `describe(name)`.
    pub fn describe(&self, name: &str) -> NativeOutcome {
        let mut out = Self::empty();
        // SAFETY: as for `call`.
        let status = unsafe { (self.vt.describe)(name.as_ptr(), name.len(), &mut out) };
        self.finish(status, out)
    }
}

fn outcome_json(o: NativeOutcome) -> Value {
    match o {
        NativeOutcome::Ok(s) => json!({"status": "ok", "json": s}),
        NativeOutcome::ToolError { kind, message } => {
            json!({"status": "tool_error", "kind": kind, "message": message})
        }
        NativeOutcome::Panic(m) => json!({"status": "panic", "message": m}),
        NativeOutcome::BadInput => json!({"status": "bad_input"}),
        NativeOutcome::NotFound => json!({"status": "not_found"}),
    }
}

fn outcome_from_json(v: &Value) -> NativeOutcome {
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    match v["status"].as_str() {
        Some("ok") => NativeOutcome::Ok(s("json")),
        Some("tool_error") => NativeOutcome::ToolError { kind: s("kind"), message: s("message") },
        Some("bad_input") => NativeOutcome::BadInput,
        Some("not_found") => NativeOutcome::NotFound,
        _ => NativeOutcome::Panic(s("message")),
    }
}

/// The helper process: `axp __plugin-host LIBRARY`. Loads the library, then answers one
/// JSON-RPC request per stdin line (`info`, `list_tools`, `describe`, `call`) with one line on
/// stdout, until stdin closes. Call it from `main` before any runtime or thread starts; `args`
/// are the arguments after the program name (starting with `__plugin-host`).
pub fn plugin_host_main(args: impl IntoIterator<Item = OsString>) -> ! {
    let args: Vec<OsString> = args.into_iter().collect();
    let lib_path = match args.as_slice() {
        [flag, lib] if flag == PLUGIN_HOST_ARG => PathBuf::from(lib),
        [lib] => PathBuf::from(lib),
        _ => {
            eprintln!("usage: axp {PLUGIN_HOST_ARG} LIBRARY (internal: run by the gateway)");
            std::process::exit(2);
        }
    };
    let lib = match NativeLib::open(&lib_path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(3);
        }
    };
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        // The one parser frames and checks every message; a malformed line gets its ready-made
        // error response. Only requests are answered: the gateway sends nothing else, and a
        // notification or a response expects no reply.
        let reply = match jsonrpc::parse_incoming(line.as_bytes()) {
            Ok(Incoming::Request(req)) => {
                let p = req.params.as_ref().unwrap_or(&Value::Null);
                let str_of = |k: &str| p[k].as_str().unwrap_or_default().to_string();
                let result = match req.method.as_str() {
                    "info" => Some(lib.info()),
                    "list_tools" => Some(lib.list_tools()),
                    "describe" => Some(lib.describe(&str_of("name"))),
                    "call" => Some(lib.call(&str_of("name"), &str_of("args"), &str_of("meta"))),
                    _ => None,
                };
                match result {
                    Some(o) => Response::ok(req.id, outcome_json(o)),
                    None => Response::err(req.id, RpcError::method_not_found(&req.method)),
                }
            }
            Ok(Incoming::Notification(_) | Incoming::Response(_)) => continue,
            Err(refusal) => refusal,
        };
        if writeln!(stdout, "{reply}").and_then(|()| stdout.flush()).is_err() {
            break;
        }
    }
    std::process::exit(0);
}

/// How to start the helper: `program args... LIBRARY`. The gateway passes its own executable
/// and `["__plugin-host"]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl HelperCommand {
    /// This executable with `__plugin-host`: right for the `axp` binary.
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(Self { program: std::env::current_exe()?, args: vec![PLUGIN_HOST_ARG.to_string()] })
    }
}

/// Configuration of one native plugin.
#[derive(Debug, Clone)]
pub struct DylibConfig {
    pub id: String,
    pub library: PathBuf,
    pub helper: HelperCommand,
    /// What the helper process may touch (the library's directory is added for reading).
    pub policy: ProcessPolicy,
    /// Load in the gateway's own process. A crash then takes the gateway down.
    pub trusted: bool,
    pub call_timeout: Duration,
}

struct Helper {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: BufReader<tokio::process::ChildStdout>,
    next_id: i64,
}

/// Why no reply line could be read from a helper.
#[derive(Debug)]
enum LineError {
    /// The helper closed its stdout (it exited, or is about to) before ending the line.
    Closed,
    /// The line grew past the limit before its newline.
    TooLong,
    /// Reading the pipe failed.
    Io(std::io::Error),
}

/// Reads one newline-terminated line into `line` (without the newline), holding at most `max`
/// bytes of it: the bytes a peer sends are taken from the reader's buffer only up to the limit,
/// so a line that never ends costs `max` bytes, not whatever the peer can write.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    max: usize,
) -> Result<(), LineError> {
    line.clear();
    loop {
        let chunk = reader.fill_buf().await.map_err(LineError::Io)?;
        if chunk.is_empty() {
            return Err(LineError::Closed);
        }
        let (take, ends) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if line.len() + take > max {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&chunk[..take]);
        reader.consume(take + usize::from(ends));
        if ends {
            return Ok(());
        }
    }
}

enum Backend {
    InProcess(NativeLib),
    Helper {
        launcher: Arc<dyn Launcher>,
        // Calls are serialised per plugin: one helper answers one request at a time.
        helper: Box<tokio::sync::Mutex<Option<Helper>>>,
    },
}

/// A native plugin behind the [`Provider`] trait.
pub struct DylibProvider {
    id: ProviderId,
    cfg: DylibConfig,
    backend: Backend,
    tools: Vec<ToolSpec>,
    info: Value,
    events: broadcast::Sender<ProviderEvent>,
}

impl std::fmt::Debug for DylibProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DylibProvider").field("id", &self.id).field("trusted", &self.cfg.trusted).finish()
    }
}

impl DylibProvider {
    /// Starts the helper (or loads in process when trusted) and lists the plugin's tools.
    pub async fn new(cfg: DylibConfig, launcher: Arc<dyn Launcher>) -> Result<Self, ProviderError> {
        let backend = if cfg.trusted {
            let lib = NativeLib::open(&cfg.library).map_err(|e| ProviderError::Config(e.to_string()))?;
            Backend::InProcess(lib)
        } else {
            Backend::Helper { launcher, helper: Box::new(tokio::sync::Mutex::new(None)) }
        };
        let (events, _) = broadcast::channel(16);
        let mut p = Self { id: ProviderId(cfg.id.clone()), cfg, backend, tools: Vec::new(), info: Value::Null, events };
        let info = p.request("info", json!({}), "info").await?;
        let NativeOutcome::Ok(info) = info else {
            return Err(p.unavailable(format!("info() failed: {info:?}")));
        };
        p.info = serde_json::from_str(&info).unwrap_or(Value::Null);
        let abi = p.info["abi"].as_str().unwrap_or_default();
        if abi != crate::ABI_VERSION {
            return Err(ProviderError::Config(format!(
                "native plugin `{}` reports ABI {abi}, but this host speaks ABI {}",
                p.id,
                crate::ABI_VERSION
            )));
        }
        let tools = p.request("list_tools", json!({}), "list_tools").await?;
        let NativeOutcome::Ok(tools) = tools else {
            return Err(p.unavailable(format!("list_tools() failed: {tools:?}")));
        };
        p.tools = serde_json::from_str(&tools)
            .map_err(|e| ProviderError::Config(format!("list_tools returned invalid JSON: {e}")))?;
        Ok(p)
    }

    /// What the plugin says about itself (`id`, `version`, `abi`, `description`).
    pub fn info(&self) -> &Value {
        &self.info
    }

    fn unavailable(&self, reason: String) -> ProviderError {
        ProviderError::Unavailable { provider: self.id.0.clone(), reason }
    }

    async fn spawn_helper(&self, launcher: &dyn Launcher) -> Result<Helper, ProviderError> {
        let mut policy = self.cfg.policy.clone();
        if let Some(dir) = self.cfg.library.parent() {
            policy.fs_read.push(dir.to_path_buf());
        }
        policy.fs_read.push(self.cfg.helper.program.clone());
        let mut args = self.cfg.helper.args.clone();
        args.push(self.cfg.library.to_string_lossy().into_owned());
        let spec = ProcessSpec {
            program: self.cfg.helper.program.to_string_lossy().into_owned(),
            args,
            env: Default::default(),
            // The library's own directory is the sandbox's (read-only) workspace, so nothing
            // of the host beyond it and the declared grants is visible.
            cwd: self.cfg.library.parent().map(Path::to_path_buf),
            policy,
        };
        let mut cmd = launcher.command(&spec)?;
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
        let mut child = axp_provider_api::spawn(cmd)
            .await
            .map_err(|e| ProviderError::io(format!("starting the plugin host for `{}`", self.id), e))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(self.unavailable("the plugin host has no stdio pipes".into()));
        };
        Ok(Helper { child, stdin, stdout: BufReader::new(stdout), next_id: 1 })
    }

    async fn request(&self, method: &str, params: Value, what: &str) -> Result<NativeOutcome, ProviderError> {
        let (launcher, slot) = match &self.backend {
            Backend::InProcess(lib) => {
                let lib = *lib;
                let method = method.to_string();
                let p = params;
                return tokio::task::spawn_blocking(move || {
                    let s = |k: &str| p[k].as_str().unwrap_or_default().to_string();
                    match method.as_str() {
                        "info" => lib.info(),
                        "list_tools" => lib.list_tools(),
                        _ => lib.call(&s("name"), &s("args"), &s("meta")),
                    }
                })
                .await
                .map_err(|e| ProviderError::Unavailable {
                    provider: self.id.0.clone(),
                    reason: format!("the in-process call failed: {e}"),
                });
            }
            Backend::Helper { launcher, helper } => (launcher, helper),
        };
        let mut guard = slot.lock().await;
        // The helper is out of its slot while it talks, and goes back only after a complete,
        // well-formed exchange. If this future is dropped halfway (the call was cancelled), the
        // helper is dropped with it and killed (`kill_on_drop`): a reply it writes later can
        // never be read as the answer to the next request.
        let mut h = match guard.take() {
            Some(h) => h,
            None => self.spawn_helper(launcher.as_ref()).await?,
        };
        let id = Id::Num(h.next_id);
        h.next_id += 1;
        let request = format!("{}\n", Request::new(id.clone(), method, params));
        let mut line = Vec::new();
        let exchange = async {
            h.stdin.write_all(request.as_bytes()).await.map_err(LineError::Io)?;
            h.stdin.flush().await.map_err(LineError::Io)?;
            read_line_bounded(&mut h.stdout, &mut line, MAX_REPLY_BYTES).await
        };
        match tokio::time::timeout(self.cfg.call_timeout, exchange).await {
            Ok(Ok(())) => {}
            Ok(Err(LineError::TooLong)) => {
                let _ = h.child.kill().await;
                let reason = format!(
                    "the plugin host process of `{}` answered `{what}` with a line longer than {} MiB, \
                     the most the gateway reads; it was stopped, and a new host starts on the next call",
                    self.id,
                    MAX_REPLY_BYTES >> 20
                );
                let _ = self.events.send(ProviderEvent::Unavailable { reason: reason.clone() });
                return Err(ProviderError::Upstream(RpcError::new(RpcCode::LimitExceeded, reason)));
            }
            Ok(Err(e @ (LineError::Closed | LineError::Io(_)))) => {
                // The helper died, or at least stopped talking: find out how, and start afresh
                // next time. It may only have closed its stdout and still run, so its exit
                // status is awaited briefly, then it is killed: the plugin's lock is never held
                // on a helper that will not end.
                if let LineError::Io(e) = e {
                    tracing::debug!(plugin = %self.id, "talking to the plugin host failed: {e}");
                }
                let how = match tokio::time::timeout(EXIT_GRACE, h.child.wait()).await {
                    Ok(Ok(status)) => format!("exited {}", describe_exit(status)),
                    Ok(Err(_)) => "exited for an unknown reason".to_string(),
                    Err(_) => {
                        let _ = h.child.kill().await;
                        "closed its output and was stopped".to_string()
                    }
                };
                let reason = format!(
                    "the plugin host process of `{}` {how} during `{what}`; the gateway is unaffected and a new host starts on the next call",
                    self.id
                );
                let _ = self.events.send(ProviderEvent::Unavailable { reason: reason.clone() });
                return Err(self.unavailable(reason));
            }
            Err(_) => {
                let _ = h.child.kill().await;
                return Err(ProviderError::Timeout {
                    tool: what.to_string(),
                    secs: self.cfg.call_timeout.as_secs().max(1),
                });
            }
        }
        let reply = match jsonrpc::parse_response(&line) {
            Ok(r) => r,
            Err(e) => {
                let _ = h.child.kill().await;
                return Err(self.unavailable(format!("the plugin host answered garbage and was stopped: {e}")));
            }
        };
        if reply.id != id {
            let _ = h.child.kill().await;
            return Err(self.unavailable(format!(
                "the plugin host answered request {} while request {id} was asked, and was stopped",
                reply.id
            )));
        }
        *guard = Some(h);
        match reply.into_result() {
            Ok(result) => Ok(outcome_from_json(&result)),
            Err(err) => Err(self.unavailable(format!("the plugin host refused `{method}`: {err}"))),
        }
    }
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("with code {c}"),
        (None, Some(11)) => "on signal 11 (SIGSEGV: it crashed)".to_string(),
        (None, Some(s)) => format!("on signal {s}"),
        _ => "abnormally".to_string(),
    }
}

#[async_trait]
impl Provider for DylibProvider {
    fn id(&self) -> &ProviderId {
        &self.id
    }

    async fn tools(&self) -> Result<Vec<ToolSpec>, ProviderError> {
        Ok(self.tools.clone())
    }

    async fn call(
        &self,
        call: ToolCall,
        _sink: JobSink,
        cancel: CancellationToken,
    ) -> Result<ToolOutput, ProviderError> {
        if !self.tools.iter().any(|t| t.name == call.tool) {
            return Err(ProviderError::UnknownTool(call.tool));
        }
        let params = json!({
            "name": call.tool,
            "args": Value::Object(call.arguments.clone()).to_string(),
            "meta": call.meta.as_ref().map_or_else(|| "null".to_string(), |m| m.to_string()),
        });
        let outcome = tokio::select! {
            r = self.request("call", params, &call.tool) => r?,
            () = cancel.cancelled() => return Err(ProviderError::Cancelled),
        };
        match outcome {
            NativeOutcome::Ok(json) => Ok(to_tool_output(&json)),
            NativeOutcome::ToolError { kind, message } => match kind.as_str() {
                "invalid-arguments" => Err(ProviderError::InvalidArguments(message)),
                "unknown-tool" => Err(ProviderError::UnknownTool(call.tool)),
                _ => Ok(ToolOutput::error_text(message)),
            },
            NativeOutcome::Panic(m) => Err(ProviderError::Upstream(RpcError::new(
                RpcCode::InternalError,
                format!("native plugin `{}` panicked in `{}`: {m}", self.id, call.tool),
            ))),
            NativeOutcome::BadInput => {
                Err(ProviderError::InvalidArguments("the plugin could not read the arguments".into()))
            }
            NativeOutcome::NotFound => Err(ProviderError::UnknownTool(call.tool)),
        }
    }

    fn events(&self) -> Option<broadcast::Receiver<ProviderEvent>> {
        Some(self.events.subscribe())
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        if let Backend::Helper { helper, .. } = &self.backend
            && let Some(mut h) = helper.lock().await.take()
        {
            let _ = h.child.kill().await;
        }
        Ok(())
    }
}
