//! `axp-plugin-host` runs provider plugins behind the [`axp_provider_api::Provider`] trait: WASM
//! components in wasmtime ([`wasm`]) and native libraries in a helper process ([`native`]). It
//! verifies and installs plugins ([`install`]) against their manifests ([`manifest`]). It never
//! decides which plugins a session may call (that is the gateway's policy), and it never gives a
//! plugin more than its manifest grants.

pub mod install;
pub mod manifest;
pub mod native;
mod output;
pub mod wasm;

pub use install::{
    EgressRoute, HostContext, InstallError, InstallOptions, Installed, LOCK_FILE, LockHold, VetTools, fs_grants,
    hold_lock, inspect, install, install_vetted, list, load_installed, load_installed_with, load_one, parse_lock,
    plugins_dir, remove, render_lock, replace_list, sha256_hex,
};
pub use manifest::{ABI_VERSION, Capabilities, MANIFEST_FILE, Manifest, ManifestError, PluginKind};
pub use native::{
    DylibConfig, DylibProvider, HelperCommand, NativeError, NativeLib, PLUGIN_HOST_ARG, plugin_host_main,
};
pub use wasm::{WasmError, WasmGrants, WasmLimits, WasmPlugin, WasmProvider, WasmRuntime};
