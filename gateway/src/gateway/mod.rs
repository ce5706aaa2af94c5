//! The gateway's hub: the [`Gateway`] value that holds every component a request may need (the
//! catalog, sessions, jobs, the guard, metrics, the audit log, the registration lint) and the
//! few services that combine them: a tool ready for a session, a durable audit append, the
//! `list_changed` broadcast; and the two services that keep its catalog in step while it runs:
//! `catalog` (providers' tools, through the registration lint, into the registry) and `plugins`
//! (installed plugins, in step with their lockfile). It decides nothing about methods: routing
//! lives in `router`, and transports call [`Gateway::handle`] there.

pub mod catalog;
pub mod listeners;
pub mod plugins;
pub mod relay;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axp_audit::{AuditLog, Kind};
use axp_protocol::jsonrpc::Notification;
use axp_protocol::{ErrorCode, RpcError};
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use crate::auth::session::{Session, Sessions, denied};
use crate::catalog::registry::{Registry, unknown_tool};
use crate::execution::jobs::Jobs;
use crate::metrics::Metrics;

/// Operator options the dispatcher needs.
#[derive(Debug, Clone)]
pub struct Options {
    pub inline_tools_max: usize,
    /// Extra read-only paths every sandboxed command sees (interpreters outside /usr).
    pub extra_read: Vec<std::path::PathBuf>,
}

/// A notification the gateway sends unasked, and who it is for.
#[derive(Debug, Clone)]
pub struct Outbound {
    /// `None`: every connected session; else only these session ids.
    pub to: Option<Arc<Vec<String>>>,
    pub message: Value,
}

impl Outbound {
    /// Whether a client stream that speaks for `session` (if it has one yet) gets it.
    pub fn reaches(&self, session: Option<&str>) -> bool {
        match (&self.to, session) {
            (None, _) => true,
            (Some(to), Some(s)) => to.iter().any(|t| t == s),
            (Some(_), None) => false,
        }
    }
}

pub struct Gateway {
    pub registry: Registry,
    pub sessions: Sessions,
    pub jobs: Jobs,
    pub metrics: Arc<Metrics>,
    /// Server-initiated notifications (`list_changed`, `resources/updated`, server logs), each
    /// with the sessions it is for; every connected client's stream picks its own.
    pub notify: broadcast::Sender<Outbound>,
    /// Resource subscriptions and log levels, per session.
    pub listeners: listeners::Listeners,
    /// Requests relayed from servers to clients, awaiting their answers.
    pub client_asks: relay::ClientAsks,
    pub options: Options,
    pub audit: AuditLog,
    /// The registration lint every published tool passes.
    pub admission: crate::catalog::admission::Admission,
    /// MCP request ids of running `tools/call`s, so `notifications/cancelled` finds their job.
    pub(crate) inflight: Mutex<HashMap<(String, String), String>>,
    /// Those of them the client cancelled: their answer is not sent.
    pub(crate) cancelled: Mutex<std::collections::HashSet<(String, String)>>,
    /// Operators, approvals and quotas (`guard.rs`).
    pub guard: crate::auth::guard::Guard,
    /// This gateway, for tasks that outlive a request (code-mode's SDK sockets); see [`Gateway::shared`].
    pub(crate) me: std::sync::Weak<Gateway>,
}

impl Gateway {
    pub fn new(
        registry: Registry,
        sessions: Sessions,
        jobs: Jobs,
        metrics: Arc<Metrics>,
        options: Options,
        audit: AuditLog,
        admission: crate::catalog::admission::Admission,
    ) -> Self {
        let (notify, _) = broadcast::channel(64);
        Self {
            registry,
            sessions,
            jobs,
            metrics,
            notify,
            listeners: listeners::Listeners::default(),
            client_asks: relay::ClientAsks::default(),
            options,
            audit,
            admission,
            inflight: Mutex::new(HashMap::new()),
            cancelled: Mutex::default(),
            guard: crate::auth::guard::Guard::default(),
            me: std::sync::Weak::new(),
        }
    }

    pub fn with_guard(mut self, guard: crate::auth::guard::Guard) -> Self {
        self.guard = guard;
        self
    }

    /// The gateway behind an `Arc` that knows itself (code-mode serves SDK calls from tasks of
    /// its own).
    pub fn shared(mut self) -> Arc<Self> {
        Arc::new_cyclic(|me| {
            self.me = me.clone();
            self
        })
    }

    /// Tells every connected client that the tool list changed.
    pub fn tools_changed(&self) {
        self.list_changed("notifications/tools/list_changed");
    }

    /// Tells every connected client that a list (`notifications/<what>/list_changed`) changed.
    pub fn list_changed(&self, method: &str) {
        self.metrics.list_changed_sent.inc();
        let changed = Notification { jsonrpc: "2.0".into(), method: method.into(), params: None };
        let _ = self.notify.send(Outbound { to: None, message: changed.to_value() });
    }

    /// Sends a notification to some sessions' standing streams.
    pub fn notify_sessions(&self, sessions: &[Arc<Session>], message: Value) {
        if sessions.is_empty() {
            return;
        }
        let to = sessions.iter().map(|s| s.id.clone()).collect();
        let _ = self.notify.send(Outbound { to: Some(Arc::new(to)), message });
    }

    pub fn cancelled_lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<(String, String)>> {
        self.cancelled.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn inflight_lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.inflight.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A tool the session may call, available and given valid arguments.
    pub fn ready_tool(
        &self,
        s: &Session,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<crate::catalog::registry::Resolved, RpcError> {
        if !s.caps.allows_tool(name) {
            return Err(denied(&format!("tool({name})"), &format!("call `{name}`")));
        }
        let resolved = self.registry.resolve(name).ok_or_else(|| unknown_tool(&self.registry, name))?;
        if !resolved.available {
            return Err(RpcError::new(
                ErrorCode::ProviderUnavailable,
                format!(
                    "provider `{}` is unavailable ({}); its tools come back when it restarts",
                    resolved.entry.provider,
                    resolved.reason.clone().unwrap_or_else(|| "down".into())
                ),
            ));
        }
        self.registry.validate(&resolved.entry, &Value::Object(arguments.clone()))?;
        Ok(resolved)
    }

    /// Appends one audit record and waits until it is durable; a request whose record cannot
    /// be written fails rather than going unrecorded. The line is written here and the wait for
    /// its fsync is on the audit log's one sync thread, which covers every record waiting with
    /// one fsync: no runtime or blocking-pool thread is parked per record, however slow the
    /// disk.
    pub async fn audit(&self, kind: Kind, session: Option<&str>, detail: Value) -> Result<(), RpcError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.audit.append_then(kind, session, "gateway", detail, move |r| {
            let _ = tx.send(r);
        });
        rx.await
            .map_err(|e| crate::util::internal("writing the audit log", e))?
            .map_err(|e| crate::util::internal("writing the audit log", e))?;
        Ok(())
    }
}
