//! The operator's policy in force, which every request is checked against: who the operators
//! are (`operators.rs`), which tools wait for an operator's approval ([`Approvals`], from
//! `[approval]`, a server's `"approval": "required"` and `[[cli.tools]]`), and the per-session
//! quotas, bundled as [`Guard`]; and the rule that a gateway without operator credentials
//! listens on loopback only. The methods that act on it (approve, deny, revoke, pending) are in
//! `router::approvals`.
use std::collections::HashSet;
use std::sync::Arc;

use crate::auth::operators::Operators;
use crate::auth::quotas::Quotas;

/// Which tools wait for an operator.
#[derive(Debug, Default, Clone)]
pub struct Approvals {
    /// Index-name globs from `[approval] required`.
    pub globs: Vec<String>,
    /// Providers whose every tool needs approval (`"approval": "required"` on an MCP server, or
    /// on a `[[cli.tools]]` entry, recorded as `provider__tool` glob).
    pub providers: HashSet<String>,
    /// Tools annotated `destructiveHint: true` need approval (`[approval] destructive = true`).
    pub destructive: bool,
}

impl Approvals {
    /// Whether a call of `tool` (index name) from `provider`, described by `spec`, must wait.
    pub fn required(&self, tool: &str, provider: &str, spec: &axp_protocol::ToolSpec) -> bool {
        self.providers.contains(provider)
            || self.globs.iter().any(|g| axp_protocol::capability::glob_matches(g, tool))
            || (self.destructive && spec.annotation("destructiveHint") == Some(true))
    }

    pub fn is_empty(&self) -> bool {
        self.globs.is_empty() && self.providers.is_empty() && !self.destructive
    }
}

#[derive(Default)]
pub struct Guard {
    pub operators: Operators,
    pub approvals: Approvals,
    pub quotas: Arc<Quotas>,
}

/// Which tools need approval, from `[approval] required`, MCP servers with
/// `"approval": "required"` and `[[cli.tools]]` with `approval = "required"`.
pub fn approvals_from(settings: &crate::config::settings::Settings, fleet: &crate::config::fleet::Fleet) -> Approvals {
    use crate::config::operator_policy::Approval;
    let mut a = Approvals {
        globs: settings.approval.required.clone(),
        providers: HashSet::new(),
        destructive: settings.approval.destructive,
    };
    for s in fleet.servers.iter().filter(|s| s.approval_required) {
        a.providers.insert(s.name.clone());
    }
    for c in &settings.cli {
        for t in c.tools.iter().filter(|t| t.approval == Some(Approval::Required)) {
            a.globs.push(format!("{}__{}", c.provider, t.name));
        }
    }
    a
}

/// `axp serve` without operator credentials listens on loopback only: anyone who can reach a
/// non-loopback address could otherwise open sessions.
pub async fn require_loopback(listen: &str) -> anyhow::Result<()> {
    let addrs: Vec<std::net::SocketAddr> = tokio::net::lookup_host(listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot resolve the listen address `{listen}`: {e}"))?
        .collect();
    if let Some(a) = addrs.iter().find(|a| !a.ip().is_loopback()) {
        anyhow::bail!(
            "refusing to listen on {a} (`{listen}`) without operator authentication: anyone who can reach it could open sessions\nhint: add an [[operators]] entry with a token to axp.toml (`axp operator token` makes one), or listen on 127.0.0.1"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn which_calls_need_approval() {
        let mut spec = axp_protocol::ToolSpec {
            annotations: Some(json!({"destructiveHint": true})),
            ..axp_protocol::ToolSpec::new("rm", "Remove a file.", json!({"type": "object"}))
        };
        let a = Approvals {
            globs: vec!["git__push*".into()],
            providers: ["github".to_string()].into_iter().collect(),
            destructive: false,
        };
        assert!(a.required("git__push_tags", "git", &spec));
        assert!(a.required("github__list", "github", &spec));
        assert!(!a.required("fs__rm", "fs", &spec), "destructiveHint only counts when the operator says so");
        let a = Approvals { destructive: true, ..a };
        assert!(a.required("fs__rm", "fs", &spec));
        spec.annotations = Some(json!({"destructiveHint": false}));
        assert!(!a.required("fs__rm", "fs", &spec));
        spec.annotations = None;
        assert!(!a.required("fs__rm", "fs", &spec), "an absent hint is not a yes");
    }
}
