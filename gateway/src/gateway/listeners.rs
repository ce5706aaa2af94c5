//! Who listens to what a provider says unasked: the sessions subscribed to each upstream
//! resource (so `notifications/resources/updated` reaches exactly them, and the upstream is
//! subscribed while at least one session is), and the log level each session asked for with
//! `logging/setLevel` (so a server's `notifications/message` reaches the sessions that asked
//! for that level and may see that server). Each listener keeps the session it was registered
//! with, whose grants are re-checked at delivery; a session that has closed or expired is
//! dropped then.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axp_protocol::Capability;
use axp_protocol::jsonrpc::Notification;
use axp_providers::{ProviderEvent, ProviderId};
use serde_json::json;

use crate::auth::session::Session;
use crate::config::fleet::PrefixMode;
use crate::gateway::Gateway;

/// RFC 5424 severities in MCP's spelling, least severe first.
pub const LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// The rank of a level name in [`LEVELS`] (`None` for a name that is not one).
pub fn level_rank(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}

#[derive(Default)]
struct State {
    /// (provider, the provider's own URI) → subscribed sessions, by id.
    resources: HashMap<(ProviderId, String), HashMap<String, Arc<Session>>>,
    /// session id → (its session, the least severe level it wants).
    levels: HashMap<String, (Arc<Session>, usize)>,
}

/// Resource subscriptions and log levels, per session.
#[derive(Default)]
pub struct Listeners {
    state: Mutex<State>,
}

impl Listeners {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds `session` to the listeners of `(provider, uri)`; `true` when it is the first, so the
    /// caller subscribes upstream.
    pub fn subscribe(&self, provider: &ProviderId, uri: &str, session: Arc<Session>) -> bool {
        let mut st = self.lock();
        let set = st.resources.entry((provider.clone(), uri.to_string())).or_default();
        let first = set.is_empty();
        set.insert(session.id.clone(), session);
        first
    }

    /// Removes `session` from the listeners of `(provider, uri)`; `true` when none is left, so
    /// the caller unsubscribes upstream.
    pub fn unsubscribe(&self, provider: &ProviderId, uri: &str, session: &str) -> bool {
        let mut st = self.lock();
        let key = (provider.clone(), uri.to_string());
        let Some(set) = st.resources.get_mut(&key) else { return false };
        if set.remove(session).is_none() {
            return false;
        }
        let last = set.is_empty();
        if last {
            st.resources.remove(&key);
        }
        last
    }

    /// The live sessions subscribed to `(provider, uri)`; closed or expired ones are dropped.
    pub fn resource_listeners(
        &self,
        provider: &ProviderId,
        uri: &str,
        live: impl Fn(&Session) -> bool,
    ) -> Vec<Arc<Session>> {
        let mut st = self.lock();
        let key = (provider.clone(), uri.to_string());
        let Some(set) = st.resources.get_mut(&key) else { return Vec::new() };
        set.retain(|_, s| live(s));
        set.values().cloned().collect()
    }

    /// Records the level `session` asked for; returns the least severe level any session wants
    /// now, which is what the upstreams are set to (they are shared by every session).
    pub fn set_level(&self, session: Arc<Session>, rank: usize) -> usize {
        let mut st = self.lock();
        st.levels.insert(session.id.clone(), (session, rank));
        st.levels.values().map(|(_, r)| *r).min().unwrap_or(rank)
    }

    /// The live sessions that asked for messages at `rank` or more severe.
    pub fn log_listeners(&self, rank: usize, live: impl Fn(&Session) -> bool) -> Vec<Arc<Session>> {
        let mut st = self.lock();
        st.levels.retain(|_, (s, _)| live(s));
        st.levels.values().filter(|(_, r)| *r <= rank).map(|(s, _)| s.clone()).collect()
    }
}

impl Gateway {
    /// Passes on what a provider said unasked beyond its tools and availability: list changes
    /// to every client, a resource update to the sessions subscribed to it, a log message to
    /// the sessions that asked for its level and may see the provider.
    pub fn relay_event(&self, provider: &ProviderId, event: ProviderEvent) {
        match event {
            ProviderEvent::ResourcesChanged => self.list_changed("notifications/resources/list_changed"),
            ProviderEvent::PromptsChanged => self.list_changed("notifications/prompts/list_changed"),
            ProviderEvent::ResourceUpdated { uri } => {
                let to = self.listeners.resource_listeners(provider, &uri, |s| {
                    self.live(s) && s.caps.allows_resource(provider.as_str(), &uri)
                });
                let uri = self.client_uri(provider, &uri);
                self.notify_sessions(
                    &to,
                    Notification::new("notifications/resources/updated", json!({"uri": uri})).to_value(),
                );
            }
            ProviderEvent::Log { level, logger, data } => {
                let rank = level_rank(&level).unwrap_or(1);
                let to = self.listeners.log_listeners(rank, |s| self.live(s) && self.sees(s, provider));
                let namespaced = self.registry.mount_of(provider).is_some_and(|(m, _)| m.prefix != PrefixMode::Never);
                let logger = match (namespaced, logger) {
                    (true, Some(l)) => Some(format!("{provider}/{l}")),
                    (true, None) => Some(provider.to_string()),
                    (false, l) => l,
                };
                let mut params = json!({"level": level, "data": data, "_meta": {"axp/provider": provider.as_str()}});
                if let Some(l) = logger {
                    params["logger"] = json!(l);
                }
                self.notify_sessions(&to, Notification::new("notifications/message", params).to_value());
            }
            ProviderEvent::ToolsChanged | ProviderEvent::Available | ProviderEvent::Unavailable { .. } => {}
        }
    }

    /// The URI a client sees for a provider's resource (see `catalog::uris`).
    pub fn client_uri(&self, provider: &ProviderId, uri: &str) -> String {
        match self.registry.mount_of(provider) {
            Some((m, _)) if m.prefix == PrefixMode::Never => uri.to_string(),
            _ => crate::catalog::uris::wrap(provider.as_str(), uri),
        }
    }

    /// Whether a session may hear from a provider: it may call one of its tools, or holds a
    /// resource or prompt grant that names it (or names every provider).
    pub fn sees(&self, s: &Session, provider: &ProviderId) -> bool {
        let named = format!("{provider}__");
        let grants = s.caps.iter().any(|c| match c {
            Capability::Resource(g) | Capability::Prompt(g) => g.starts_with('*') || g.starts_with(&named),
            _ => false,
        });
        grants || self.registry.entries(&|n| s.caps.allows_tool(n)).iter().any(|(e, _)| &e.provider == provider)
    }

    /// A session is still open and unexpired.
    fn live(&self, s: &Session) -> bool {
        s.expires_ms > axp_protocol::now_ms() && self.sessions.authenticate(Some(&s.id), None).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_rank_by_severity() {
        assert_eq!(level_rank("debug"), Some(0));
        assert_eq!(level_rank("emergency"), Some(7));
        assert!(level_rank("warning") < level_rank("error"));
        assert_eq!(level_rank("verbose"), None);
    }
}
