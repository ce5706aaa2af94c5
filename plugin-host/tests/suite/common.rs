//! Shared helpers: where the example plugins are (failing loudly when they are not built), and
//! a host context with short limits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axp_plugin_host::{HelperCommand, HostContext, WasmLimits, WasmRuntime};
use axp_providers::DirectLauncher;

pub(super) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `plugins/examples/dist/<name>`, which must have been built.
pub(super) fn dist(name: &str) -> PathBuf {
    let d = repo().join("plugins/examples/dist").join(name);
    assert!(
        d.join("axp-plugin.toml").is_file(),
        "example plugin `{name}` is not built ({} is missing): run `plugins/build-examples.sh` \
         (it needs `rustup target add wasm32-wasip2`)",
        d.display()
    );
    d
}

/// A copy of an example's directory in a temp dir, to tamper with.
pub(super) fn copy_dist(name: &str, into: &Path) -> PathBuf {
    let src = dist(name);
    let dst = into.join(name);
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

pub(super) fn limits() -> WasmLimits {
    WasmLimits { memory_bytes: 32 << 20, call_timeout: Duration::from_millis(500), max_instances: 128 }
}

/// Native helpers run as this crate's `axp-plugin-host` binary, started directly: these tests
/// check process isolation; the kernel sandbox around it is the gateway's launcher's job.
pub(super) fn ctx() -> HostContext {
    HostContext {
        runtime: WasmRuntime::new(limits()).unwrap(),
        launcher: Arc::new(DirectLauncher),
        helper: HelperCommand { program: PathBuf::from(env!("CARGO_BIN_EXE_axp-plugin-host")), args: vec![] },
        secrets: Default::default(),
        resolve_override: Default::default(),
        trusted: vec![],
        native_timeout: Duration::from_secs(10),
        egress_route: None,
        workspace: None,
    }
}

pub(super) fn quiet(_: &str) {}

pub(super) fn args(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().cloned().unwrap()
}
