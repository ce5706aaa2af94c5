//! The provider's life across connections: the state calls read (the live connection, the last
//! tool list, why it is down), and the task that opens a session, keeps it until it dies,
//! retries with exponential backoff, and announces `Unavailable` / `Available` /
//! `ToolsChanged`, each state change logged once.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axp_protocol::ToolSpec;
use tokio::sync::{broadcast, oneshot};

use super::session::{Conn, Session};
use super::{Handshake, McpConfig};
use crate::{CancellationToken, Launcher, ProviderError, ProviderEvent};

pub(super) struct State {
    pub(super) conn: Option<Arc<Conn>>,
    pub(super) reason: String,
    pub(super) tools: Option<Vec<ToolSpec>>,
    /// A launched provider whose first attempt has not ended yet.
    pub(super) starting: bool,
}

pub(super) struct Inner {
    pub(super) cfg: McpConfig,
    pub(super) launcher: Arc<dyn Launcher>,
    pub(super) state: Mutex<State>,
    pub(super) events: broadcast::Sender<ProviderEvent>,
    pub(super) shutdown: CancellationToken,
    /// The server failed the 2026-07-28 probe and then connected with `initialize`: later
    /// connections skip the probe.
    pub(super) settled_on_initialize: std::sync::atomic::AtomicBool,
    /// The connections opened with `initialize` beside the provider's own, for clients that a
    /// server asks things in the middle of a call (see `McpProvider::conn_for`).
    pub(super) companion: tokio::sync::Mutex<Companions>,
    /// Tools the server refused to run except as a task (2025-11-25 `taskSupport: "required"`),
    /// learnt from its refusal: rmcp's tool type does not keep `execution`, so the listing
    /// cannot say.
    pub(super) task_tools: Mutex<std::collections::HashSet<String>>,
    /// The log level a client last set (`logging/setLevel`): a 2026-07-28 connection has no
    /// such method, so each request names it in its envelope instead.
    #[allow(deprecated)]
    pub(super) log_level: Mutex<Option<rmcp::model::LoggingLevel>>,
}

/// The `initialize` connections beside the provider's own: one per client session for an HTTP
/// server (so every request the server makes on one belongs to exactly that session), and one
/// shared by every session for a stdio server whose own connection speaks 2026-07-28.
#[derive(Default)]
pub(super) struct Companions {
    /// By the session each serves (`None`: the shared one).
    pub(super) conns: std::collections::HashMap<Option<String>, CompanionConn>,
    /// The server refused the `initialize` handshake: it speaks only 2026-07-28.
    pub(super) refused: bool,
}

pub(super) struct CompanionConn {
    pub(super) conn: Arc<Conn>,
    /// Ends the connection (closed when idle or evicted).
    pub(super) stop: CancellationToken,
    pub(super) used: Instant,
}

/// At most this many connections of single sessions per server; the least recently used one
/// is closed to open another.
pub(super) const MAX_SESSION_CONNS: usize = 32;
/// A session's connection unused this long is closed (the session may well be gone).
pub(super) const SESSION_CONN_IDLE: std::time::Duration = std::time::Duration::from_secs(300);

impl Inner {
    /// A provider's shared state before its first attempt; `starting` for a launched one.
    pub(super) fn new(cfg: McpConfig, launcher: Arc<dyn Launcher>, starting: bool) -> Arc<Inner> {
        let (events, _) = broadcast::channel(64);
        Arc::new(Inner {
            cfg,
            launcher,
            state: Mutex::new(State { conn: None, reason: "the server is starting".into(), tools: None, starting }),
            events,
            shutdown: CancellationToken::new(),
            settled_on_initialize: std::sync::atomic::AtomicBool::new(false),
            companion: tokio::sync::Mutex::new(Companions::default()),
            log_level: Mutex::new(None),
            task_tools: Mutex::new(std::collections::HashSet::new()),
        })
    }
}

impl Inner {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The handshake the next connection uses.
    pub(super) fn handshake(&self) -> Handshake {
        match self.cfg.handshake {
            Handshake::Newest if self.settled_on_initialize.load(std::sync::atomic::Ordering::Relaxed) => {
                Handshake::Initialize
            }
            h => h,
        }
    }

    pub(super) fn settle_on_initialize(&self) {
        self.settled_on_initialize.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) fn unavailable(&self, reason: String) -> ProviderError {
        ProviderError::Unavailable { provider: self.cfg.id.to_string(), reason }
    }

    pub(super) fn send(&self, e: ProviderEvent) {
        // No receiver is fine: nobody is listening yet.
        let _ = self.events.send(e);
    }

    /// Stores a new tool list; `true` when it differs from the previous one.
    pub(super) fn set_tools(&self, tools: Vec<ToolSpec>) -> bool {
        let mut st = self.lock();
        let changed = st.tools.as_ref() != Some(&tools);
        st.tools = Some(tools);
        changed
    }
}

pub(super) async fn supervise(inner: Arc<Inner>, first: Option<oneshot::Sender<()>>) {
    let mut first = first;
    let mut failures: u32 = 0;
    // The last start failure logged: a server down for a while fails the same way at every
    // retry, and a warning each time buried everything else in the log.
    let mut last_failure: Option<String> = None;
    loop {
        if inner.shutdown.is_cancelled() {
            break;
        }
        let connect_timeout = inner.cfg.connect_timeout;
        let attempt = tokio::select! {
            r = tokio::time::timeout(connect_timeout, Session::open(&inner)) => match r {
                Ok(r) => r,
                Err(_) => Err(format!(
                    "the server did not complete start-up (handshake and tools/list) within {}s",
                    connect_timeout.as_secs_f64()
                )),
            },
            _ = inner.shutdown.cancelled() => break,
        };
        match attempt {
            Ok(mut session) => {
                last_failure = None;
                let up_since = Instant::now();
                {
                    let mut st = inner.lock();
                    st.conn = Some(session.conn.clone());
                    st.tools = Some(std::mem::take(&mut session.tools));
                    st.reason.clear();
                    st.starting = false;
                }
                tracing::info!(provider = %inner.cfg.id, "MCP server is available");
                match first.take() {
                    Some(f) => {
                        let _ = f.send(());
                    }
                    None => {
                        inner.send(ProviderEvent::Available);
                        inner.send(ProviderEvent::ToolsChanged);
                    }
                }
                let reason = session.run(&inner).await;
                {
                    let mut st = inner.lock();
                    st.conn = None;
                    st.reason = reason.clone();
                }
                session.close(&reason).await;
                if inner.shutdown.is_cancelled() {
                    break;
                }
                tracing::warn!(provider = %inner.cfg.id, "MCP server is unavailable: {reason}");
                inner.send(ProviderEvent::Unavailable { reason });
                if up_since.elapsed() >= inner.cfg.restart.max_backoff {
                    failures = 0;
                }
            }
            Err(reason) => {
                let attempts = failures + 1;
                if last_failure.as_deref() != Some(reason.as_str()) {
                    tracing::warn!(provider = %inner.cfg.id, "MCP server failed to start: {reason}");
                } else if attempts.is_power_of_two() {
                    tracing::warn!(provider = %inner.cfg.id, "MCP server still failing to start after {attempts} attempts: {reason}");
                } else {
                    tracing::debug!(provider = %inner.cfg.id, attempts, "MCP server failed to start again: {reason}");
                }
                last_failure = Some(reason.clone());
                let was_starting = {
                    let mut st = inner.lock();
                    st.reason = reason.clone();
                    std::mem::replace(&mut st.starting, false)
                };
                match first.take() {
                    Some(f) => {
                        let _ = f.send(());
                    }
                    // A launched provider's first failure is news: until now it was starting.
                    None if was_starting => inner.send(ProviderEvent::Unavailable { reason }),
                    None => {}
                }
            }
        }
        let delay = inner.cfg.restart.delay(failures);
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = inner.shutdown.cancelled() => break,
        }
    }
    if let Some(f) = first.take() {
        let _ = f.send(());
    }
}
