//! The operator's files as the gateway reads them: `axp-config` (fleet formats, `${VAR}`
//! expansion, the policy sections of `axp.toml`, errors with line and nearest key) under one
//! name, and `settings`: the rest of `axp.toml`, whose sections are the gateway's own types.

pub mod settings;

pub use axp_config::*;
