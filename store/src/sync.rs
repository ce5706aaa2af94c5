//! Group commit for job logs ([`crate::ExitSync::Batched`]): one background thread that makes
//! every `exit` event written in the last interval durable with a single `syncfs(2)`, instead of
//! two `fdatasync(2)`s per job on the caller's thread. This file owns that thread and its
//! shutdown; it must never touch log contents or hold a log's writer lock.
//!
//! Why `syncfs` and not an fsync per dirty log: on ext4 each `fdatasync` of a grown file forces
//! a journal commit and a device flush (~5-10 ms on the VM this was measured on), so syncing
//! logs one by one caps the gateway at a few hundred jobs a second no matter how they are
//! batched. One `syncfs` flushes all of them (and SQLite's WAL) with one journal commit. The
//! cost is that it also flushes unrelated dirty data on the same filesystem.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{Result, StoreError, lock};

struct State {
    /// An exit event was written since the last sync started.
    dirty: bool,
    /// The store is being dropped: sync what is dirty and stop.
    stop: bool,
    /// The last background failure, reported by the next [`Syncer::sync_now`].
    failed: Option<std::io::Error>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// An fd on the state directory's filesystem, for `syncfs`.
    dir: File,
    path: PathBuf,
    interval: Duration,
}

pub(crate) struct Syncer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    pub(crate) fn start(dir: &Path, interval: Duration) -> Result<Syncer> {
        let file = File::open(dir).map_err(|e| StoreError::io(dir, e))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State { dirty: false, stop: false, failed: None }),
            wake: Condvar::new(),
            dir: file,
            path: dir.to_path_buf(),
            interval,
        });
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("axp-store-sync".into())
            .spawn(move || run(&for_thread))
            .map_err(|e| StoreError::io(dir, e))?;
        Ok(Syncer { shared, thread: Some(thread) })
    }

    /// Asks for a sync within the interval. Never blocks on I/O.
    pub(crate) fn mark_dirty(&self) {
        let mut s = lock(&self.shared.state);
        if !s.dirty {
            s.dirty = true;
            self.shared.wake.notify_one();
        }
    }

    /// Syncs now, on the caller's thread, and reports an earlier background failure if any.
    pub(crate) fn sync_now(&self) -> Result<()> {
        let earlier = {
            let mut s = lock(&self.shared.state);
            s.dirty = false;
            s.failed.take()
        };
        syncfs(&self.shared)?;
        match earlier {
            Some(e) => Err(StoreError::io(&self.shared.path, e)),
            None => Ok(()),
        }
    }
}

fn syncfs(shared: &Shared) -> Result<()> {
    rustix::fs::syncfs(&shared.dir).map_err(|e| StoreError::io(&shared.path, e.into()))
}

fn run(shared: &Shared) {
    let mut s = lock(&shared.state);
    loop {
        while !s.dirty && !s.stop {
            s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if !s.dirty {
            return; // stopping, nothing to do
        }
        // Let more exits accumulate for one interval (cut short by shutdown), then sync them all.
        if !s.stop {
            s = shared.wake.wait_timeout_while(s, shared.interval, |s| !s.stop).unwrap_or_else(|p| p.into_inner()).0;
        }
        s.dirty = false;
        drop(s);
        let result = rustix::fs::syncfs(&shared.dir);
        s = lock(&shared.state);
        if let Err(e) = result {
            s.failed = Some(e.into());
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        {
            let mut s = lock(&self.shared.state);
            s.stop = true;
            self.shared.wake.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
