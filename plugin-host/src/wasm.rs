//! The `wasm` provider: WASM components targeting `axp:provider@0.1.0`, run in wasmtime. This
//! file owns the engine (pooling allocator, epoch ticker), the per-call store (memory limiter,
//! epoch deadline, an empty WASI context) and the outbound-HTTP filter. It must not grant a
//! plugin anything its manifest does not: no environment, no sockets (the `wasi:sockets` and
//! `wasi:cli` interfaces are linked only because Rust's standard library imports them; their
//! context grants nothing), read-only preopens of exactly the manifest's `fs` directories, and
//! HTTP only to granted domains.
//!
//! Every call gets a fresh instance from one pre-instantiated [`bindings::AxpProviderPre`], so
//! concurrent calls never share state or wait on a lock; a semaphore bounds them to the pool size.
//!
//! The granted directories are opened once, when the plugin is loaded, without following a
//! symbolic link in any component of their paths, and every instance is handed those open
//! directories: nothing is looked up by path again, so whoever can change the workspace cannot
//! widen a grant between calls by swapping a granted directory for a link elsewhere.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axp_protocol::{ErrorCode as RpcCode, RpcError, ToolCall, ToolOutput, ToolSpec};
use axp_provider_api::{CancellationToken, JobSink, Provider, ProviderError, ProviderId};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, UpdateDeadline,
};
use wasmtime_wasi::filesystem::WasiFilesystemCtx;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{
    Error as HttpError, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use crate::manifest::{ABI_VERSION, Capabilities, net_allows};
use crate::output::to_tool_output;

/// Host bindings generated from the WIT world in `plugins/wit`. The WASI interfaces reuse
/// wasmtime-wasi's and wasmtime-wasi-http's implementations.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod bindings {
    wasmtime::component::bindgen!({
        path: "../plugins/wit/axp-provider@0.1.0",
        world: "axp-provider",
        exports: { default: async },
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "wasi:random": wasmtime_wasi::p2::bindings::random,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        },
    });
}

use bindings::axp::provider::host::Level;
use bindings::axp::provider::types::{ErrorKind, ToolError};

/// The epoch tick: deadlines are checked (and long calls yield to other tasks) this often.
const TICK: Duration = Duration::from_millis(5);

/// Bytes of each pooled linear memory kept resident between instances.
const KEEP_RESIDENT: usize = 2 << 20;

/// Limits applied to every call.
#[derive(Debug, Clone)]
pub struct WasmLimits {
    /// Largest linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// Wall-clock deadline of one call (instantiate + run), enforced by epoch interruption.
    pub call_timeout: Duration,
    /// How many instances may exist at once (the pooling allocator's size).
    pub max_instances: u32,
}

impl Default for WasmLimits {
    fn default() -> Self {
        Self { memory_bytes: 64 << 20, call_timeout: Duration::from_secs(30), max_instances: 256 }
    }
}

/// Why a WASM plugin could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The engine could not be created (e.g. the pool could not reserve memory).
    #[error("cannot start the WASM engine: {0:#}")]
    Engine(wasmtime::Error),
    /// The bytes are not a valid component, or compiling it failed.
    #[error("cannot compile the component: {0:#}")]
    Compile(wasmtime::Error),
    /// The component targets another version of the plugin ABI.
    #[error(
        "the component was built for plugin ABI {found}, but this host speaks ABI {expected}; \
         hint: rebuild it against plugins/wit/axp-provider@{expected}"
    )]
    AbiMismatch { found: String, expected: String },
    /// The component does not export the `axp:provider/plugin` interface at all.
    #[error("not an AXP plugin: the component exports no `axp:provider/plugin` (it exports: {0})")]
    NotAPlugin(String),
    /// The component imports something this host does not provide.
    #[error("the component needs imports this host does not provide: {0:#}")]
    Link(wasmtime::Error),
    /// Instantiating or asking the plugin for its info and tools failed.
    #[error("the plugin failed while listing its tools: {0}")]
    Probe(String),
    /// A granted directory cannot be opened as granted: it is missing, not a directory, or
    /// reached through a symbolic link.
    #[error("cannot open the granted directory {path} (the plugin's `{guest}`): {reason}")]
    Preopen { path: PathBuf, guest: String, reason: String },
}

/// One wasmtime engine with its pooling allocator and epoch ticker, shared by every WASM
/// plugin of a process. Cheap to clone.
#[derive(Clone)]
pub struct WasmRuntime {
    inner: Arc<RuntimeInner>,
}

impl std::fmt::Debug for WasmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmRuntime").field("limits", &self.inner.limits).finish()
    }
}

struct RuntimeInner {
    engine: Engine,
    linker: Linker<HostState>,
    limits: WasmLimits,
    slots: tokio::sync::Semaphore,
    ticker: Arc<Ticker>,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        self.ticker.stop();
    }
}

/// The epoch ticker's switch: the thread advances the engine's epoch every [`TICK`] only while
/// at least one store (one call or probe) is alive, and sleeps on a condvar otherwise — an idle
/// gateway must not wake 200 times a second for nothing (it showed as 1 % of a busy gateway's
/// CPU samples even with no plugin installed). A store created while the thread sleeps wakes
/// it, so its deadline is checked from its first tick on.
#[derive(Default)]
struct Ticker {
    /// Live stores, and whether the runtime is gone.
    state: Mutex<(usize, bool)>,
    wake: Condvar,
    /// Epochs advanced so far.
    ticks: AtomicU64,
}

/// Held by every store's [`HostState`]: the ticker runs while any exists.
struct Busy(Arc<Ticker>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.state.lock().unwrap_or_else(PoisonError::into_inner).0 -= 1;
    }
}

impl Ticker {
    fn enter(self: &Arc<Self>) -> Busy {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.0 += 1;
        if s.0 == 1 {
            self.wake.notify_one();
        }
        Busy(self.clone())
    }

    fn stop(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        self.wake.notify_one();
    }

    /// The thread's loop: returns once the runtime is dropped.
    fn run(&self, engine: &Engine) {
        loop {
            {
                let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                let s = self.wake.wait_while(s, |s| s.0 == 0 && !s.1).unwrap_or_else(PoisonError::into_inner);
                if s.1 {
                    return;
                }
            }
            std::thread::sleep(TICK);
            engine.increment_epoch();
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl WasmRuntime {
    /// Creates the engine and starts its epoch ticker thread.
    pub fn new(limits: WasmLimits) -> Result<Self, WasmError> {
        let mut pool = PoolingAllocationConfig::default();
        let n = limits.max_instances.max(1);
        pool.total_component_instances(n)
            // A Rust component has a few core instances (main module, shims); allow headroom.
            .total_core_instances(n * 4)
            .total_memories(n * 2)
            .total_tables(n * 4)
            .max_memory_size(limits.memory_bytes)
            // A fresh instance per call is the isolation model, so slot reuse is the hot path.
            // Resetting a slot with madvise and faulting its pages back in on the next call
            // cost more than the call itself (the no-op call bench went from 47 to 19 µs with
            // these): keep the first pages resident and reset only the dirty ones (found with
            // the PAGEMAP_SCAN ioctl where the kernel has it, Linux >= 6.7) with memset. The
            // price is resident memory for warm slots, bounded by `max_unused_warm_slots`
            // (32 x ~2.6 MiB).
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(64 << 10)
            .async_stack_keep_resident(512 << 10)
            .max_unused_warm_slots(32)
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config).map_err(WasmError::Engine)?;
        let mut linker: Linker<HostState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(WasmError::Engine)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(WasmError::Engine)?;
        bindings::axp::provider::host::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(WasmError::Engine)?;
        bindings::axp::provider::types::add_to_linker::<_, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(WasmError::Engine)?;
        let ticker = Arc::new(Ticker::default());
        {
            let engine = engine.clone();
            let ticker = ticker.clone();
            std::thread::Builder::new()
                .name("axp-wasm-epoch".into())
                .spawn(move || ticker.run(&engine))
                .map_err(|e| WasmError::Engine(e.into()))?;
        }
        Ok(Self {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                slots: tokio::sync::Semaphore::new(n as usize),
                limits,
                ticker,
            }),
        })
    }

    /// The engine, for compiling.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The limits in force.
    pub fn limits(&self) -> &WasmLimits {
        &self.inner.limits
    }

    /// Epochs the ticker has advanced so far: it stands still while no call runs.
    pub fn epoch_ticks(&self) -> u64 {
        self.inner.ticker.ticks.load(Ordering::Relaxed)
    }

    /// Compiles a component and checks that it speaks this host's ABI.
    pub fn compile(&self, bytes: &[u8]) -> Result<Component, WasmError> {
        let component = Component::from_binary(&self.inner.engine, bytes).map_err(WasmError::Compile)?;
        let wanted = format!("axp:provider/plugin@{ABI_VERSION}");
        let ty = component.component_type();
        let exports: Vec<String> = ty.exports(&self.inner.engine).map(|(name, _)| name.to_string()).collect();
        if !exports.contains(&wanted) {
            if let Some(found) = exports.iter().find_map(|e| e.strip_prefix("axp:provider/plugin@")) {
                return Err(WasmError::AbiMismatch { found: found.to_string(), expected: ABI_VERSION.to_string() });
            }
            return Err(WasmError::NotAPlugin(exports.join(", ")));
        }
        Ok(component)
    }
}

/// What one plugin is allowed, fixed when it is loaded.
#[derive(Debug, Clone, Default)]
pub struct WasmGrants {
    /// Domains reachable over HTTP (the manifest's `net`).
    pub net: Vec<String>,
    /// Secret values by name: only names the manifest declares are ever looked up.
    pub secrets: BTreeMap<String, String>,
    /// Test and pinning hook: connect to this address instead of resolving the host name. The
    /// allowlist check still applies to the name the plugin asked for.
    pub resolve_override: HashMap<String, SocketAddr>,
    /// Read-only preopened directories: (host directory, name the plugin sees). The manifest's
    /// `fs` grants, resolved inside the workspace by the installer. Each must be an absolute
    /// path with no symbolic link in it; it is opened once, when the plugin is loaded.
    pub preopens: Vec<(PathBuf, String)>,
    /// The egress proxy (a UNIX socket speaking HTTP absolute-form and CONNECT) every request
    /// goes through after the host's own check: the proxy resolves the name itself, refuses
    /// private and metadata addresses and checks TLS SNI. The gateway always sets it for a
    /// plugin with `net` grants; without it requests connect directly (library use and tests).
    pub egress_proxy: Option<std::path::PathBuf>,
    /// Root certificates (DER) trusted for HTTPS in addition to the system's.
    pub extra_roots: Vec<Vec<u8>>,
}

impl WasmGrants {
    /// The grants of a manifest's capabilities, with secrets taken from `secret_source` for the
    /// declared names only.
    pub fn from_capabilities(caps: &Capabilities, secret_source: &dyn Fn(&str) -> Option<String>) -> Self {
        Self {
            net: caps.net.clone(),
            secrets: caps.secrets.iter().filter_map(|n| secret_source(n).map(|v| (n.clone(), v))).collect(),
            resolve_override: HashMap::new(),
            preopens: Vec::new(),
            egress_proxy: None,
            extra_roots: Vec::new(),
        }
    }
}

struct Shared {
    id: String,
    grants: WasmGrants,
    /// The granted directories, opened at load; every instance gets a clone (the same open
    /// descriptors).
    preopens: WasiFilesystemCtx,
    /// The TLS client configuration, built on the first HTTPS request.
    tls: std::sync::OnceLock<Arc<rustls::ClientConfig>>,
}

impl Shared {
    /// The system's root certificates plus the grants' extra roots, with the ring provider.
    fn tls(&self) -> Result<Arc<rustls::ClientConfig>, HttpError> {
        if let Some(c) = self.tls.get() {
            return Ok(c.clone());
        }
        let mut roots = rustls::RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            let _ = roots.add(cert);
        }
        for der in &self.grants.extra_roots {
            roots
                .add(rustls::pki_types::CertificateDer::from(der.clone()))
                .map_err(|e| HttpError::InternalError(Some(format!("an extra root certificate is invalid: {e}"))))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| HttpError::InternalError(Some(e.to_string())))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(self.tls.get_or_init(|| Arc::new(config)).clone())
    }
}

/// Opens `path` as a directory without following a symbolic link in any of its components, and
/// returns the open directory. Each component is looked up in the directory opened for the one
/// before it (through that descriptor's `/proc/self/fd` entry, which the kernel resolves to the
/// open directory itself, not to a path): `lstat` must see a directory, not a link, and the
/// directory then opened must be that same one (device and inode), or someone swapped it
/// between the two steps. This is `openat2(RESOLVE_NO_SYMLINKS)` with the standard library only
/// (no `unsafe` and no libc in this crate); it needs `/proc`, as the gateway does anyway.
fn open_dir_no_symlinks(path: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    if !path.is_absolute() {
        return Err("it is not an absolute path".into());
    }
    let mut dir = std::fs::File::open("/").map_err(|e| format!("cannot open /: {e}"))?;
    let mut so_far = PathBuf::from("/");
    for component in path.components() {
        let name = match component {
            std::path::Component::RootDir => continue,
            std::path::Component::Normal(name) => name,
            std::path::Component::CurDir | std::path::Component::ParentDir | std::path::Component::Prefix(_) => {
                return Err("a granted path may not contain `.` or `..`".into());
            }
        };
        so_far.push(name);
        let via = Path::new("/proc/self/fd").join(dir.as_raw_fd().to_string()).join(name);
        let seen = std::fs::symlink_metadata(&via).map_err(|e| format!("{}: {e}", so_far.display()))?;
        if seen.file_type().is_symlink() {
            return Err(format!(
                "{} is a symbolic link, and grants are opened without following links; hint: grant \
                 the directory by its real path",
                so_far.display()
            ));
        }
        if !seen.is_dir() {
            return Err(format!("{} is not a directory", so_far.display()));
        }
        let next = std::fs::File::open(&via).map_err(|e| format!("{}: {e}", so_far.display()))?;
        let opened = next.metadata().map_err(|e| format!("{}: {e}", so_far.display()))?;
        if (opened.dev(), opened.ino()) != (seen.dev(), seen.ino()) {
            return Err(format!("{} was replaced while it was being opened", so_far.display()));
        }
        dir = next;
    }
    Ok(dir)
}

/// Opens every granted directory once (see [`open_dir_no_symlinks`]), read-only, as the
/// filesystem part of a WASI context that each call's context then shares.
fn open_preopens(preopens: &[(PathBuf, String)]) -> Result<WasiFilesystemCtx, WasmError> {
    use std::os::fd::AsRawFd;
    let mut builder = WasiCtx::builder();
    for (host, guest) in preopens {
        let refuse = |reason: String| WasmError::Preopen { path: host.clone(), guest: guest.clone(), reason };
        let dir = open_dir_no_symlinks(host).map_err(refuse)?;
        // wasmtime-wasi takes a preopen only by path. `/proc/self/fd/N` names exactly the
        // directory open as N (the kernel follows the descriptor, not a path), so the directory
        // it opens is the one checked above; ours is closed when `dir` drops.
        builder
            .preopened_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()), guest, FsPerms::ReadOnly)
            .map_err(|e| refuse(format!("{e:#}")))?;
    }
    Ok(std::mem::take(builder.build().filesystem()))
}

/// Per-call store data.
struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    /// Where the plugin's outbound HTTP goes: the grants check, then the egress proxy.
    egress: EgressHooks,
    table: ResourceTable,
    limiter: MemLimiter,
    shared: Arc<Shared>,
    timed_out: bool,
    /// Keeps the epoch ticker running while this store lives.
    _busy: Busy,
}

/// Refuses memory growth past the limit and remembers that it did, so the error can say so.
/// (wasmtime's `StoreLimits` refuses too but does not tell us afterwards which limit was hit.)
struct MemLimiter {
    max: usize,
    hit: bool,
}

impl ResourceLimiter for MemLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.hit = true;
            wasmtime::bail!("memory limit of {} bytes reached", self.max);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.egress }
    }
}

/// How long a request waits to connect, for the first response byte and between body frames
/// when the plugin's request options leave it open (wasmtime-wasi-http's own default).
const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(600);

/// The timeouts of one request: the plugin's request options, [`DEFAULT_HTTP_TIMEOUT`] for those
/// it does not set.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    connect: Duration,
    first_byte: Duration,
    between_bytes: Duration,
}

impl Timeouts {
    fn of(options: Option<RequestOptions>) -> Self {
        let o = options.unwrap_or_default();
        Self {
            connect: o.connect_timeout.unwrap_or(DEFAULT_HTTP_TIMEOUT),
            first_byte: o.first_byte_timeout.unwrap_or(DEFAULT_HTTP_TIMEOUT),
            between_bytes: o.between_bytes_timeout.unwrap_or(DEFAULT_HTTP_TIMEOUT),
        }
    }
}

/// A request that was answered: the response, and the connection's I/O, which wasmtime-wasi-http
/// keeps until the plugin is done with the body.
type Sent = (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>);

/// Where a granted request goes.
enum Route {
    /// Through the egress proxy's UNIX socket; `tls` for HTTPS (a `CONNECT` tunnel).
    Proxy { socket: PathBuf, host: String, port: u16, tls: Option<Arc<rustls::ClientConfig>> },
    /// Straight to `host:port` over TCP (no proxy configured: library use and tests).
    Direct(String),
}

/// The outbound-HTTP hooks of one store: every request a plugin makes through `wasi:http` is
/// sent here, and nowhere else.
struct EgressHooks {
    shared: Arc<Shared>,
}

impl EgressHooks {
    /// The egress filter: the request's host is checked against the manifest's `net` grants
    /// before any connection is made, and a refused request connects nowhere.
    fn route(&self, request: &http::Request<WasiBody>) -> Result<Route, HttpError> {
        let shared = &self.shared;
        let uri = request.uri();
        let Some(host) = uri.host().map(str::to_string) else {
            return Err(HttpError::HttpRequestUriInvalid);
        };
        let use_tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let port = uri.port_u16().unwrap_or(if use_tls { 443 } else { 80 });
        if !net_allows(&shared.grants.net, &host, port) {
            tracing::warn!(plugin = %shared.id, %host, port, "plugin HTTP request denied: domain not granted");
            return Err(HttpError::HttpRequestDenied);
        }
        if let Some(socket) = shared.grants.egress_proxy.clone() {
            tracing::debug!(plugin = %shared.id, %host, port, "plugin HTTP request allowed; via the egress proxy");
            let tls = if use_tls { Some(shared.tls()?) } else { None };
            return Ok(Route::Proxy { socket, host, port, tls });
        }
        if use_tls {
            // Without a proxy (library use), TLS is not offered: refuse rather than send in
            // clear text.
            return Err(HttpError::InternalError(Some(
                "HTTPS from WASM plugins needs the egress proxy (the gateway provides it)".into(),
            )));
        }
        let target = shared
            .grants
            .resolve_override
            .get(&host.to_ascii_lowercase())
            .map(|a| SocketAddr::new(a.ip(), port).to_string())
            .unwrap_or_else(|| format!("{host}:{port}"));
        tracing::debug!(plugin = %shared.id, %host, port, "plugin HTTP request allowed");
        Ok(Route::Direct(target))
    }
}

impl WasiHttpHooks for EgressHooks {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _response_done: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> Box<dyn Future<Output = Result<Sent, HttpError>> + Send> {
        // Decided now, in the plugin's call: the refusal reaches the plugin as the response's
        // error (`HttpRequestDenied`), and nothing was sent.
        let route = self.route(&request);
        let timeouts = Timeouts::of(options);
        Box::new(async move {
            match route? {
                Route::Proxy { socket, host, port, tls } => {
                    send_via_proxy(request, socket, host, port, tls, timeouts).await
                }
                Route::Direct(target) => {
                    let tcp = tokio::time::timeout(timeouts.connect, tokio::net::TcpStream::connect(&target))
                        .await
                        .map_err(|_| HttpError::ConnectionTimeout)?
                        .map_err(|_| HttpError::ConnectionRefused)?;
                    send_on(request, tcp, timeouts, true).await
                }
            }
        })
    }
}

/// Sends one request through the egress proxy: plain HTTP in absolute form, HTTPS as a
/// `CONNECT host:port` tunnel with TLS (SNI = the host) inside it.
async fn send_via_proxy(
    request: http::Request<WasiBody>,
    proxy: PathBuf,
    host: String,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeouts: Timeouts,
) -> Result<Sent, HttpError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::timeout;
    let mut stream = timeout(timeouts.connect, tokio::net::UnixStream::connect(&proxy))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(|e| {
            tracing::warn!(proxy = %proxy.display(), "cannot reach the egress proxy: {e}");
            HttpError::ConnectionRefused
        })?;
    let Some(tls) = tls else {
        // Absolute form: the proxy reads the host from the request line and checks it.
        return send_on(request, stream, timeouts, false).await;
    };
    let authority = format!("{host}:{port}");
    stream
        .write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .map_err(|_| HttpError::ConnectionTerminated)?;
    // Read the proxy's answer head byte by byte: nothing of the tunnel may be consumed.
    let mut head = Vec::new();
    let read_head = async {
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
            if stream.read(&mut b).await? == 0 {
                break;
            }
            head.push(b[0]);
        }
        Ok::<_, std::io::Error>(())
    };
    timeout(timeouts.connect, read_head)
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(|_| HttpError::ConnectionTerminated)?;
    let status_line = String::from_utf8_lossy(head.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
    if status_line.split_whitespace().nth(1) != Some("200") {
        tracing::warn!(%host, port, answer = %status_line.trim(), "the egress proxy refused the tunnel");
        return Err(HttpError::HttpRequestDenied);
    }
    let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let tls_stream = timeout(timeouts.connect, tokio_rustls::TlsConnector::from(tls).connect(name, stream))
        .await
        .map_err(|_| HttpError::ConnectionTimeout)?
        .map_err(|e| {
            tracing::warn!(%host, "TLS handshake failed: {e}");
            HttpError::TlsProtocolError
        })?;
    send_on(request, tls_stream, timeouts, true).await
}

/// Sends one HTTP/1.1 request on an open connection. `origin_form`: the request line carries
/// only the path (direct and tunnelled connections); otherwise the absolute URI (to a proxy).
async fn send_on<S>(
    mut request: http::Request<WasiBody>,
    io: S,
    timeouts: Timeouts,
    origin_form: bool,
) -> Result<Sent, HttpError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    use http_body_util::BodyExt;
    use tokio::time::timeout;
    let (mut sender, conn) =
        timeout(timeouts.connect, hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(io)))
            .await
            .map_err(|_| HttpError::ConnectionTimeout)??;
    // The connection's I/O runs on its own task from the start (the response cannot arrive
    // otherwise); dropping the handle, as wasmtime-wasi-http does once the body is gone or the
    // store is dropped, aborts it.
    let conn = wasmtime_wasi::runtime::spawn(conn);
    let authority = request.uri().authority().map(|a| a.to_string());
    if let Some(a) = authority
        && !request.headers().contains_key(http::header::HOST)
        && let Ok(v) = http::HeaderValue::from_str(&a)
    {
        request.headers_mut().insert(http::header::HOST, v);
    }
    if origin_form {
        let path = request.uri().path_and_query().map_or("/".to_string(), |p| p.as_str().to_string());
        *request.uri_mut() = path.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    }
    let resp = timeout(timeouts.first_byte, sender.send_request(request))
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)??
        .map(|body| FrameTimeout::new(body, timeouts.between_bytes).boxed_unsync());
    let io = async move {
        if let Err(e) = conn.await {
            tracing::debug!("plugin HTTP connection ended: {e}");
        }
        Ok(())
    };
    Ok((resp, Box::new(io)))
}

/// A response body that fails with `ConnectionReadTimeout` when no frame arrives for `gap` (the
/// request's between-bytes timeout, which wasmtime-wasi-http leaves to whoever sends).
struct FrameTimeout<B> {
    body: B,
    gap: Duration,
    timer: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl<B> FrameTimeout<B> {
    fn new(body: B, gap: Duration) -> Self {
        Self { body, gap, timer: Box::pin(tokio::time::sleep(gap)) }
    }
}

impl<B> hyper::body::Body for FrameTimeout<B>
where
    B: hyper::body::Body<Data = hyper::body::Bytes> + Unpin,
    B::Error: Into<HttpError>,
{
    type Data = hyper::body::Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.timer.as_mut().reset(tokio::time::Instant::now() + this.gap);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl bindings::axp::provider::types::Host for HostState {}

impl bindings::axp::provider::host::Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let id = &self.shared.id;
        match level {
            Level::Trace => tracing::trace!(plugin = %id, "{message}"),
            Level::Debug => tracing::debug!(plugin = %id, "{message}"),
            Level::Info => tracing::info!(plugin = %id, "{message}"),
            Level::Warn => tracing::warn!(plugin = %id, "{message}"),
            Level::Error => tracing::error!(plugin = %id, "{message}"),
        }
    }

    fn secret(&mut self, name: String) -> Option<String> {
        self.shared.grants.secrets.get(&name).cloned()
    }
}

/// A compiled, linked plugin: instantiate it as often as needed.
#[derive(Clone)]
pub struct WasmPlugin {
    runtime: WasmRuntime,
    pre: bindings::AxpProviderPre<HostState>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WasmPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmPlugin").field("id", &self.shared.id).finish()
    }
}

/// What the plugin says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    pub id: String,
    pub version: String,
    pub abi: String,
    pub description: String,
}

/// The outcome of one raw call.
enum CallOutcome {
    Ok(Result<String, ToolError>),
    Trap { message: String, timed_out: bool, memory: bool },
}

impl WasmPlugin {
    /// Compiles and links `bytes`; fails if the component needs imports the host lacks.
    pub fn load(runtime: &WasmRuntime, id: &str, bytes: &[u8], grants: WasmGrants) -> Result<Self, WasmError> {
        let component = runtime.compile(bytes)?;
        let pre = runtime.inner.linker.instantiate_pre(&component).map_err(WasmError::Link)?;
        let pre = bindings::AxpProviderPre::new(pre).map_err(WasmError::Link)?;
        let preopens = open_preopens(&grants.preopens)?;
        Ok(Self {
            runtime: runtime.clone(),
            pre,
            shared: Arc::new(Shared { id: id.to_string(), grants, preopens, tls: Default::default() }),
        })
    }

    fn store(&self) -> Store<HostState> {
        let limits = &self.runtime.inner.limits;
        // No args, no env, no sockets, no name lookups; only the granted directories, read-only,
        // as they were opened at load (never looked up by path again).
        let mut wasi = WasiCtx::builder();
        wasi.allow_ip_name_lookup(false).allow_tcp(false).allow_udp(false);
        let mut wasi = wasi.build();
        *wasi.filesystem() = self.shared.preopens.clone();
        let state = HostState {
            wasi,
            http: WasiHttpCtx::new(),
            egress: EgressHooks { shared: self.shared.clone() },
            table: ResourceTable::new(),
            limiter: MemLimiter { max: limits.memory_bytes, hit: false },
            shared: self.shared.clone(),
            timed_out: false,
            _busy: self.runtime.inner.ticker.enter(),
        };
        let mut store = Store::new(&self.runtime.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        let deadline = Instant::now() + limits.call_timeout;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |mut ctx| {
            if Instant::now() >= deadline {
                ctx.data_mut().timed_out = true;
                wasmtime::bail!("the call's deadline passed");
            }
            // Yield so that other calls on this runtime's threads make progress.
            Ok(UpdateDeadline::Yield(1))
        });
        store
    }

    /// Instantiates once and asks the plugin who it is and what tools it has; checks the ABI
    /// version it reports.
    pub async fn probe(&self) -> Result<(PluginInfo, Vec<ToolSpec>), WasmError> {
        let _slot = self.runtime.inner.slots.acquire().await;
        let mut store = self.store();
        let inst = self.pre.instantiate_async(&mut store).await.map_err(|e| WasmError::Probe(format!("{e:#}")))?;
        let plugin = inst.axp_provider_plugin();
        let info = plugin.call_info(&mut store).await.map_err(|e| WasmError::Probe(format!("info: {e:#}")))?;
        if info.abi != ABI_VERSION {
            return Err(WasmError::AbiMismatch { found: info.abi, expected: ABI_VERSION.into() });
        }
        let tools =
            plugin.call_list_tools(&mut store).await.map_err(|e| WasmError::Probe(format!("list-tools: {e:#}")))?;
        let tools: Vec<ToolSpec> = serde_json::from_str(&tools)
            .map_err(|e| WasmError::Probe(format!("list-tools returned invalid JSON: {e}")))?;
        Ok((PluginInfo { id: info.id, version: info.version, abi: info.abi, description: info.description }, tools))
    }

    /// Instantiates the plugin once without calling it (for the benchmark).
    pub async fn instantiate_only(&self) -> Result<(), WasmError> {
        let _slot = self.runtime.inner.slots.acquire().await;
        let mut store = self.store();
        self.pre.instantiate_async(&mut store).await.map_err(|e| WasmError::Probe(format!("{e:#}")))?;
        Ok(())
    }

    async fn raw_call(&self, name: &str, args: &str, meta: &str) -> Result<CallOutcome, ProviderError> {
        let _slot = self.runtime.inner.slots.acquire().await.map_err(|_| ProviderError::Unavailable {
            provider: self.shared.id.clone(),
            reason: "the WASM runtime is shutting down".into(),
        })?;
        let mut store = self.store();
        // The epoch deadline stops wasm code that runs past the call's time; a plugin waiting in
        // a host call (an HTTP response that never comes) runs no wasm code, so the same
        // deadline is also kept around the whole call, and dropping the call there drops its
        // requests with it.
        let limit = self.runtime.inner.limits.call_timeout;
        let result = tokio::time::timeout(limit, async {
            let inst = self.pre.instantiate_async(&mut store).await?;
            inst.axp_provider_plugin().call_call(&mut store, name, args, meta).await
        })
        .await;
        let Ok(result) = result else {
            return Ok(CallOutcome::Trap {
                message: "the call's deadline passed".into(),
                timed_out: true,
                memory: false,
            });
        };
        Ok(match result {
            Ok(r) => CallOutcome::Ok(r),
            Err(e) => CallOutcome::Trap {
                message: format!("{e:#}"),
                timed_out: store.data().timed_out,
                memory: store.data().limiter.hit,
            },
        })
    }

    /// One call, mapped to the provider contract.
    pub async fn call(&self, call: &ToolCall) -> Result<ToolOutput, ProviderError> {
        let args = serde_json::Value::Object(call.arguments.clone()).to_string();
        let meta = call.meta.as_ref().map_or_else(|| "null".to_string(), |m| m.to_string());
        let id = &self.shared.id;
        let limits = &self.runtime.inner.limits;
        match self.raw_call(&call.tool, &args, &meta).await? {
            CallOutcome::Ok(Ok(json)) => Ok(to_tool_output(&json)),
            CallOutcome::Ok(Err(e)) => match e.kind {
                ErrorKind::InvalidArguments => Err(ProviderError::InvalidArguments(e.message)),
                ErrorKind::UnknownTool => Err(ProviderError::UnknownTool(call.tool.clone())),
                ErrorKind::Denied | ErrorKind::Failed => Ok(ToolOutput::error_text(e.message)),
            },
            CallOutcome::Trap { timed_out: true, .. } => {
                Err(ProviderError::Timeout { tool: call.tool.clone(), secs: limits.call_timeout.as_secs().max(1) })
            }
            CallOutcome::Trap { memory: true, .. } => Err(ProviderError::Upstream(RpcError::new(
                RpcCode::LimitExceeded,
                format!(
                    "plugin `{id}` was stopped in `{}`: it tried to use more than its memory limit of {} MiB",
                    call.tool,
                    limits.memory_bytes >> 20
                ),
            ))),
            CallOutcome::Trap { message, .. } => Err(ProviderError::Upstream(RpcError::new(
                RpcCode::InternalError,
                format!("plugin `{id}` crashed (trapped) in `{}`: {message}", call.tool),
            ))),
        }
    }
}

/// A WASM plugin behind the [`Provider`] trait.
pub struct WasmProvider {
    id: ProviderId,
    plugin: WasmPlugin,
    info: PluginInfo,
    tools: Vec<ToolSpec>,
}

impl std::fmt::Debug for WasmProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmProvider").field("id", &self.id).finish()
    }
}

impl WasmProvider {
    /// Compiles, links and probes a plugin (instantiating it once to list its tools).
    pub async fn new(runtime: &WasmRuntime, id: &str, bytes: &[u8], grants: WasmGrants) -> Result<Self, WasmError> {
        let plugin = WasmPlugin::load(runtime, id, bytes, grants)?;
        let (info, tools) = plugin.probe().await?;
        Ok(Self { id: ProviderId(id.to_string()), plugin, info, tools })
    }

    /// What the plugin reported about itself.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// The underlying plugin (for benchmarks).
    pub fn plugin(&self) -> &WasmPlugin {
        &self.plugin
    }
}

#[async_trait]
impl Provider for WasmProvider {
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
        // Dropping the call's future drops its store: the instance is gone at once.
        tokio::select! {
            r = self.plugin.call(&call) => r,
            () = cancel.cancelled() => Err(ProviderError::Cancelled),
        }
    }

    async fn shutdown(&self) -> Result<(), ProviderError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http_body_util::BodyExt;
    use hyper::body::{Bytes, Frame};

    use super::*;

    /// A body that has one frame at once, then never another.
    struct Stalls(bool);

    impl hyper::body::Body for Stalls {
        type Data = Bytes;
        type Error = HttpError;

        fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
            if std::mem::replace(&mut self.0, false) {
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"first")))))
            } else {
                Poll::Pending
            }
        }
    }

    #[tokio::test]
    async fn a_body_that_stalls_between_frames_fails_once_the_gap_passes() {
        let gap = Duration::from_millis(100);
        let t = Instant::now();
        let mut body = FrameTimeout::new(Stalls(true), gap);
        let first = body.frame().await.and_then(Result::ok).and_then(|f| f.into_data().ok());
        assert_eq!(first.as_deref(), Some(&b"first"[..]));
        // Without the timeout the second frame would never come: bound the wait.
        let second = tokio::time::timeout(Duration::from_secs(5), body.frame()).await;
        let err = second.ok().flatten().and_then(Result::err);
        assert!(matches!(err, Some(HttpError::ConnectionReadTimeout)), "{err:?}");
        assert!(t.elapsed() >= gap, "gave up after {:?}", t.elapsed());
    }
}
