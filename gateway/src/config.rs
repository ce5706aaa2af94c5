//! The operator's files as the gateway reads them: `axp-config` (fleet formats, `${VAR}`
//! expansion, the policy sections of `axp.toml`, errors with line and nearest key) under one
//! name. The rest of `axp.toml`, whose sections are the gateway's own types, is `settings`.

pub use axp_config::*;
