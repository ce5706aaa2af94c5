//! The configuration the gateway reads: the operator's files parsed by `axp-config` (fleet
//! formats, `${VAR}` expansion, policy sections, errors with line and nearest key), re-exported
//! here under one name, and `settings`, the rest of `axp.toml`, whose sections are the gateway's
//! own types (egress options, plugin settings).

pub use axp_config::*;

pub(crate) use crate::settings;
