//! Shared helpers: where the example plugins are (failing loudly when they are not built), this
//! crate's own test fixtures (built on first use), and a host context with short limits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axp_plugin_host::{HelperCommand, HostContext, WasmLimits, WasmRuntime};
use axp_provider_api::DirectLauncher;

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

/// The WASM component of the fixture `tests/fixtures/<name>` (a crate named
/// `axp-fixture-<name>`), built for wasm32-wasip2 on first use into the target directory
/// `plugins/build-examples.sh` uses, whose dependencies that script has already built. Building
/// here rather than in a script keeps the fixture and the test that needs it in one place.
pub(super) fn fixture_wasm(name: &str) -> Vec<u8> {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo().join("target"), PathBuf::from)
        .join("plugin-examples");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["build", "--release", "--offline", "--quiet", "--target", "wasm32-wasip2"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the fixture {} failed (it needs `rustup target add wasm32-wasip2` and the \
         dependencies `plugins/build-examples.sh` fetches):\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let artifact = format!("axp_fixture_{}.wasm", name.replace('-', "_"));
    std::fs::read(target.join("wasm32-wasip2/release").join(artifact)).unwrap()
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
