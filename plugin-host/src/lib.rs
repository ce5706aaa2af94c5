//! `axp-plugin-host` runs provider plugins behind the [`axp_providers::Provider`] trait: WASM
//! components in wasmtime and native libraries in a helper process. It verifies and installs
//! plugins; it never decides which plugins a session may call (that is the gateway's policy).
