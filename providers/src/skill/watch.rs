//! Reloading skills when their folders change: the state the provider and the watcher thread
//! share (the directories and the current catalog), the watcher itself (inotify through
//! `notify`, or its polling watcher where inotify cannot be had), and the thread that re-reads the
//! folders once a burst of changes has settled and announces `ToolsChanged` when the skills
//! differ.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use super::scan::{Catalog, scan};
use crate::ProviderEvent;

/// After the first change event, how long the folder must stay quiet before it is re-read
/// (editors write a file in several steps); a steady stream of events is cut at [`MAX_SETTLE`].
const SETTLE: Duration = Duration::from_millis(150);
const MAX_SETTLE: Duration = Duration::from_secs(1);
/// Poll interval of the fallback watcher (used when inotify cannot be had).
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// What the provider and its watcher thread share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) dirs: Vec<PathBuf>,
    pub(super) catalog: RwLock<Arc<Catalog>>,
    pub(super) events: broadcast::Sender<ProviderEvent>,
}

impl Shared {
    pub(super) fn snapshot(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Re-reads the directories; returns `true` (and sends `ToolsChanged`) when the skills
    /// differ from what was loaded before.
    pub(super) fn reload(&self) -> bool {
        let fresh = scan(&self.dirs);
        let mut slot = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        let changed = slot.skills != fresh.skills;
        if changed || slot.problems != fresh.problems {
            *slot = Arc::new(fresh);
        }
        drop(slot);
        if changed {
            tracing::info!(dirs = ?self.dirs, "skills changed; tool list reloaded");
            let _ = self.events.send(ProviderEvent::ToolsChanged);
            // Each skill is a prompt too (see the provider's `prompts`).
            let _ = self.events.send(ProviderEvent::PromptsChanged);
        }
        changed
    }
}

/// The file watcher in use: inotify where it can be had, else polling. It is only held: dropping
/// it stops the watching.
pub(super) enum Watch {
    Native { _watcher: notify::RecommendedWatcher },
    Poll { _watcher: notify::PollWatcher },
}

impl Watch {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Watch::Native { .. } => "native",
            Watch::Poll { .. } => "poll",
        }
    }
}

/// `true` for events that may change what is loaded: reads (including our own rescans, which
/// open every file) are not.
pub(super) fn relevant(event: &notify::Result<notify::Event>) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind};
    match event {
        Ok(e) => match e.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            EventKind::Access(_) => false,
            _ => true,
        },
        Err(_) => true,
    }
}

/// Starts watching `dirs` recursively and a thread that re-reads them after changes settle.
///
/// Reload uses the `notify` crate rather than a hand-written mtime poller: inotify reports a
/// change within milliseconds and costs nothing while idle, new sub-folders are watched as they
/// appear, and where inotify cannot be had (watch limit reached, unsupported filesystem)
/// `notify`'s own `PollWatcher` takes over at a one-second interval.
pub(super) fn start_watch(shared: &Arc<Shared>, poll: bool) -> Result<Watch, String> {
    use notify::Watcher;
    let (tx, rx) = std::sync::mpsc::channel::<notify::Result<notify::Event>>();
    let existing: Vec<&PathBuf> = shared.dirs.iter().filter(|d| d.exists()).collect();
    let native = if poll {
        Err(notify::Error::generic("polling was asked for"))
    } else {
        notify::recommended_watcher(tx.clone()).and_then(|mut w| {
            for dir in &existing {
                w.watch(dir, notify::RecursiveMode::Recursive)?;
            }
            Ok(w)
        })
    };
    let watch = match native {
        Ok(w) => {
            drop(tx);
            Watch::Native { _watcher: w }
        }
        Err(e) => {
            if !poll {
                tracing::warn!(error = %e, "cannot watch skill directories natively; polling every second");
            }
            // notify's poller compares modification times in whole seconds, so an edit within
            // the second of the previous scan would go unseen; comparing contents too closes
            // that gap, at the price of reading the (small) skill folders once per interval.
            let cfg = notify::Config::default().with_poll_interval(POLL_INTERVAL).with_compare_contents(true);
            let mut w = notify::PollWatcher::new(tx, cfg).map_err(|e| e.to_string())?;
            for dir in &existing {
                w.watch(dir, notify::RecursiveMode::Recursive).map_err(|e| e.to_string())?;
            }
            Watch::Poll { _watcher: w }
        }
    };
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("axp-skill-watch".into())
        .spawn(move || {
            // The loop ends when the watcher (the only sender) is dropped.
            while let Ok(event) = rx.recv() {
                if !relevant(&event) {
                    continue;
                }
                let start = Instant::now();
                loop {
                    match rx.recv_timeout(SETTLE) {
                        Ok(_) if start.elapsed() < MAX_SETTLE => continue,
                        Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
                shared.reload();
            }
        })
        .map_err(|e| format!("cannot start the skill watcher thread: {e}"))?;
    Ok(watch)
}
