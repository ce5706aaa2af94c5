//! Watching one file for replacement: `notify` gives inotify where it can and polling (once a
//! second, by content) where it cannot, and a burst of events (a write, then a rename) reads as
//! one change. The plugins lockfile and the tool-pins lockfile are watched this way, so that an
//! operator's `axp provider add` or `axp lint --approve` takes effect in a running gateway;
//! where replicas share those files through their database, the watch also fires on a timer.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

/// A watch on one file; changes arrive through [`FileWatch::changed`]. Dropping it stops it.
pub struct FileWatch {
    rx: tokio::sync::mpsc::UnboundedReceiver<()>,
    /// Also "changed" on every tick, for a file whose truth lives elsewhere too (a database
    /// several gateways share) and must be looked at even when no one touched the file.
    poll: Option<tokio::time::Interval>,
    _watcher: Box<dyn notify::Watcher + Send>,
}

impl FileWatch {
    /// Watches `dir/name` (the directory, not recursively, so that a file replaced by rename is
    /// still seen). `what` names the file in the warning logged if inotify is not available.
    pub fn new(dir: &Path, name: &str, what: &str) -> Result<Self> {
        use notify::Watcher;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let name = OsString::from(name);
        let on_event = move |ev: notify::Result<notify::Event>| {
            if let Ok(ev) = ev
                && ev.paths.iter().any(|p| p.file_name() == Some(name.as_os_str()))
            {
                let _ = tx.send(());
            }
        };
        let inotify = notify::recommended_watcher(on_event.clone())
            .and_then(|mut w| w.watch(dir, notify::RecursiveMode::NonRecursive).map(|()| w));
        let watcher: Box<dyn notify::Watcher + Send> = match inotify {
            Ok(w) => Box::new(w),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch the {what} with inotify; polling every second");
                let cfg =
                    notify::Config::default().with_poll_interval(Duration::from_secs(1)).with_compare_contents(true);
                let mut w = notify::PollWatcher::new(on_event, cfg)
                    .with_context(|| format!("cannot start a poller for the {what}"))?;
                w.watch(dir, notify::RecursiveMode::NonRecursive)
                    .with_context(|| format!("cannot watch {}", dir.display()))?;
                Box::new(w)
            }
        };
        Ok(Self { rx, poll: None, _watcher: watcher })
    }

    /// Reports a change every `period` as well as when the file changes (nothing more when
    /// `period` is `None`).
    pub fn also_every(mut self, period: Option<Duration>) -> Self {
        self.poll = period.map(|p| {
            let mut poll = tokio::time::interval(p);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            poll
        });
        self
    }

    /// Waits for the next change, after letting a burst of events settle. `false` once the
    /// watcher has stopped.
    pub async fn changed(&mut self) -> bool {
        let event = match &mut self.poll {
            Some(poll) => tokio::select! {
                event = self.rx.recv() => event,
                _ = poll.tick() => return true,
            },
            None => self.rx.recv().await,
        };
        if event.is_none() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        while self.rx.try_recv().is_ok() {}
        true
    }
}
