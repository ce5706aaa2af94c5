//! Keeping the catalog in step with the providers: each mounted provider's tools are listed,
//! passed through the registration lint and published, again whenever the provider says they
//! changed or comes back, and again when an operator approves a held-back change in the pins
//! lockfile; availability follows the provider's events, and clients hear `list_changed`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use axp_providers::{DynProvider, ProviderEvent};

use crate::catalog::registry::Mount;
use crate::gateway::Gateway;

/// Lists a provider's tools now and whenever it says they changed; tracks availability.
pub fn watch_provider(gw: Arc<Gateway>, m: Mount) {
    let provider: DynProvider = m.provider.clone();
    let id = provider.id().clone();
    gw.registry.mount(m);
    let events = provider.events();
    tokio::spawn(async move {
        refresh(&gw, &provider).await;
        let Some(mut rx) = events else { return };
        loop {
            match rx.recv().await {
                Ok(ProviderEvent::ToolsChanged) => {
                    refresh(&gw, &provider).await;
                    gw.tools_changed();
                }
                // The provider has logged the change itself, with its reason, once: logging it
                // here again printed every failure twice in two wordings.
                Ok(ProviderEvent::Unavailable { reason }) => gw.registry.set_available(&id, false, Some(reason)),
                Ok(ProviderEvent::Available) => refresh(&gw, &provider).await,
                Ok(other) => gw.relay_event(&id, other),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => refresh(&gw, &provider).await,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
    });
}

/// Re-reads the pins lockfile whenever it changes on disk (an operator's `axp lint --approve`)
/// — and, when the pins are a PostgreSQL store's, every `SHARED_POLL` (another replica's) — and
/// registers again the providers whose held-back tools it may have approved, so the new
/// version is served without a restart and clients hear `list_changed`.
pub fn watch_pins(gw: Arc<Gateway>, state_dir: &Path) -> Result<()> {
    let shared = gw.admission.is_shared().then_some(crate::catalog::admission::SHARED_POLL);
    let mut watch = crate::watch::FileWatch::new(state_dir, crate::catalog::admission::LOCK_FILE, "pins lockfile")?
        .also_every(shared);
    tokio::spawn(async move {
        while watch.changed().await {
            let reload = {
                let gw = gw.clone();
                move || gw.admission.reload()
            };
            let Ok(providers) = tokio::task::spawn_blocking(reload).await else { continue };
            let mut refreshed = false;
            for id in providers {
                if let Some(p) = gw.registry.provider(&axp_providers::ProviderId(id)) {
                    refresh(&gw, &p).await;
                    refreshed = true;
                }
            }
            if refreshed {
                gw.tools_changed();
            }
        }
    });
    Ok(())
}

/// Lists a provider's tools, passes them through the registration lint and publishes them.
/// The lint and the index rebuild run on the blocking pool: with thousands of tools they take
/// long enough to stall a runtime worker, and with it every request the gateway is serving.
pub async fn refresh(gw: &Arc<Gateway>, provider: &DynProvider) {
    let id = provider.id().clone();
    match provider.tools().await {
        Ok(tools) => {
            let admit = {
                let (gw, id) = (gw.clone(), id.clone());
                move || {
                    let mut others = axp_lint::Catalog::new();
                    for (p, t) in gw.registry.tools_except(&id) {
                        others.insert(p, t);
                    }
                    let admitted = gw.admission.admit(id.as_str(), tools, &others);
                    gw.registry.set_tools(&id, admitted.publish, admitted.findings);
                    gw.registry.set_available(&id, true, None);
                    admitted.audit
                }
            };
            let audit = match tokio::task::spawn_blocking(admit).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::error!(provider = %id, error = %e, "the registration lint failed");
                    return;
                }
            };
            if let Err(e) = gw.audit(axp_audit::Kind::LintVerdict, None, audit).await {
                tracing::error!(error = %e.reason(), "cannot audit a lint verdict");
            }
        }
        // Its first start is still under way; it announces the outcome when it ends.
        Err(axp_providers::ProviderError::Starting { .. }) => {
            gw.registry.set_available(&id, false, Some(crate::catalog::registry::STARTING.into()));
        }
        Err(e) => {
            tracing::warn!(provider = %id, error = %e, "cannot list tools");
            gw.registry.set_available(&id, false, Some(e.to_string()));
        }
    }
}
