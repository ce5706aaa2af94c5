//! Sandbox tiers as the gateway grants them (DESIGN §3): which tiers this host can enforce, which
//! the operator allows, and the honest answer to a session that asks. A tier that cannot be had
//! is refused with `TierUnavailable`; nothing is ever downgraded silently. This module also hands
//! out the process [`Launcher`] that enforces a granted tier.

use std::sync::Arc;

use axp_protocol::methods::SandboxTier;
use axp_protocol::{ErrorCode, RpcError};
use axp_providers::{DirectLauncher, Launcher};
use serde_json::Value;

/// What this gateway can grant.
#[derive(Debug, Clone)]
pub struct Tiers {
    /// The layers in force when `kernel-lsm` is available, or why it is not.
    pub kernel_lsm: Result<Value, String>,
    /// The operator opted into `dev-none` (no sandbox) explicitly.
    pub dev_none_allowed: bool,
    /// What a session gets when it does not ask.
    pub default: SandboxTier,
    /// The launcher that enforces `kernel-lsm`, when available.
    pub kernel_launcher: Option<Arc<dyn Launcher>>,
}

impl Tiers {
    /// Grants `asked` (or the default) or says exactly why not.
    pub fn grant(&self, asked: Option<SandboxTier>) -> Result<(SandboxTier, Option<Value>), RpcError> {
        let tier = asked.unwrap_or(self.default);
        match tier {
            SandboxTier::KernelLsm => match &self.kernel_lsm {
                Ok(layers) => Ok((tier, Some(layers.clone()))),
                Err(why) => Err(unavailable(tier, why)),
            },
            SandboxTier::DevNone if self.dev_none_allowed => Ok((
                tier,
                Some(serde_json::json!({"warning": "no sandbox: processes run with the gateway's authority"})),
            )),
            SandboxTier::DevNone => Err(unavailable(
                tier,
                "the operator has not allowed running without a sandbox (axp serve --dangerously-allow-dev-none)",
            )),
            SandboxTier::Container => Err(unavailable(tier, "the container tier is not built yet")),
            SandboxTier::ProcessToken => {
                Err(unavailable(tier, "the process-token tier exists only on Windows and is not built"))
            }
        }
    }

    /// The launcher that enforces `tier` for processes started on a session's behalf.
    pub fn launcher(&self, tier: SandboxTier) -> Result<Arc<dyn Launcher>, RpcError> {
        match tier {
            SandboxTier::DevNone if self.dev_none_allowed => Ok(Arc::new(DirectLauncher)),
            SandboxTier::KernelLsm => self
                .kernel_launcher
                .clone()
                .ok_or_else(|| unavailable(tier, self.kernel_lsm.as_ref().err().map_or("no launcher", |s| s.as_str()))),
            other => Err(unavailable(other, "not available on this gateway")),
        }
    }
}

fn unavailable(tier: SandboxTier, why: &str) -> RpcError {
    RpcError::new(ErrorCode::TierUnavailable, format!("sandbox tier `{tier}` is unavailable: {why}"))
        .with_data("tier", tier.as_str())
}
