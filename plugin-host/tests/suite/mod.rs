//! Test modules and their shared helpers.

mod common;
mod install;
mod native;
mod wasm;
