//! The provider's life across connections: the state calls read (the live connection, the last
//! tool list, why it is down), and the task that opens a session, keeps it until it dies,
//! retries with exponential backoff, and announces `Unavailable` / `Available` /
//! `ToolsChanged`, each state change logged once.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axp_protocol::ToolSpec;
use tokio::sync::{broadcast, oneshot};

use super::McpConfig;
use super::session::{Conn, Session};
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
}

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
        })
    }
}

impl Inner {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
