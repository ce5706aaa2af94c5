//! Job ids whose (empty) log file already exists. Creating a file is the most expensive step of
//! starting a job on ext4 — measured at ~0.5 ms of a tool call's ~1 ms through the gateway, most
//! of it ext4's inode allocator skipping recently freed inodes (decision 0005) — so a background
//! thread keeps a few ids ready, each with its `jobs/XX/ID.jsonl` created, and
//! [`crate::Store::new_job_id`] hands one out without touching the disk. This file owns that thread, the list of ready ids, and the clean-up of ids
//! a crashed gateway reserved but never used. It never writes an event and never opens a log for
//! writing.
//!
//! The ready ids are written to `jobs/reserved` before their files are created, so after a crash
//! the next [`crate::Store::open_with`] finds every file the pool made and deletes those that
//! are still empty and belong to no job. An id handed out but never recorded as a job (the
//! caller failed before `create_job`) leaves one empty file behind; it reads as an empty log.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::log::data_path;
use crate::{Result, StoreError, create_private_dir, lock};

/// The file listing the ids the pool created and has not handed out.
const LIST: &str = "reserved";

/// A fresh job id: `j_` and 32 hex digits of a random UUID.
pub(crate) fn fresh_id() -> String {
    format!("j_{}", uuid::Uuid::new_v4().simple())
}

struct State {
    ready: VecDeque<String>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    jobs_dir: PathBuf,
    target: usize,
}

pub(crate) struct Reserve {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Deletes the files of ids a previous run reserved and never used (`used` says whether a job
/// with that id exists), then forgets the list. Call before [`Reserve::start`].
pub(crate) fn clean_up(jobs_dir: &Path, used: impl Fn(&str) -> Result<bool>) -> Result<()> {
    let list = jobs_dir.join(LIST);
    let text = match std::fs::read_to_string(&list) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io(&list, e)),
    };
    for id in text.lines().filter(|l| crate::log::validate_id(l).is_ok()) {
        let Ok(path) = data_path(jobs_dir, id) else { continue };
        let empty = std::fs::metadata(&path).is_ok_and(|m| m.len() == 0);
        if empty && !used(id)? {
            std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
        }
    }
    std::fs::remove_file(&list).map_err(|e| StoreError::io(&list, e))
}

impl Reserve {
    /// Starts the thread that keeps `target` ids ready.
    pub(crate) fn start(jobs_dir: &Path, target: usize) -> Result<Reserve> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State { ready: VecDeque::with_capacity(target), stop: false }),
            wake: Condvar::new(),
            jobs_dir: jobs_dir.to_path_buf(),
            target,
        });
        let for_thread = shared.clone();
        let thread = std::thread::Builder::new()
            .name("axp-store-reserve".into())
            .spawn(move || run(&for_thread))
            .map_err(|e| StoreError::io(jobs_dir, e))?;
        Ok(Reserve { shared, thread: Some(thread) })
    }

    /// A ready id, if there is one; wakes the thread to refill when the pool runs low.
    pub(crate) fn take(&self) -> Option<String> {
        let mut s = lock(&self.shared.state);
        let id = s.ready.pop_front();
        if s.ready.len() <= self.shared.target / 2 {
            self.shared.wake.notify_one();
        }
        id
    }
}

fn run(shared: &Shared) {
    // Shard directories this thread made or found, so each costs one `mkdir` per run, not one per id.
    let mut dirs = std::collections::HashSet::new();
    loop {
        let need = {
            let mut s = lock(&shared.state);
            while !s.stop && s.ready.len() > shared.target / 2 {
                s = shared.wake.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if s.stop {
                return;
            }
            shared.target - s.ready.len()
        };
        let ids: Vec<String> = (0..need).map(|_| fresh_id()).collect();
        // List first, files second: whatever a crash leaves behind is on the list.
        let listed = {
            let s = lock(&shared.state);
            write_list(&shared.jobs_dir, s.ready.iter().chain(&ids))
        };
        let mut made = Vec::with_capacity(ids.len());
        if listed.is_ok() {
            for id in ids {
                if create(&shared.jobs_dir, &id, &mut dirs).is_ok() {
                    made.push(id);
                }
            }
        }
        if made.is_empty() {
            // The disk refuses (full, read-only): stop trying until someone takes an id; callers
            // fall back to creating their log file themselves, which reports the error.
            let s = lock(&shared.state);
            if !s.stop {
                let _unused = shared.wake.wait(s);
            }
            continue;
        }
        lock(&shared.state).ready.extend(made);
    }
}

fn create(jobs_dir: &Path, id: &str, dirs: &mut std::collections::HashSet<PathBuf>) -> Result<()> {
    let path = data_path(jobs_dir, id)?;
    if let Some(dir) = path.parent()
        && !dirs.contains(dir)
    {
        create_private_dir(dir)?;
        dirs.insert(dir.to_path_buf());
    }
    match OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
        Ok(_) => Ok(()),
        Err(e) => {
            // A shard removed under us is made again next time.
            if let Some(dir) = path.parent() {
                dirs.remove(dir);
            }
            Err(StoreError::io(&path, e))
        }
    }
}

fn write_list<'a>(jobs_dir: &Path, ids: impl Iterator<Item = &'a String>) -> Result<()> {
    let path = jobs_dir.join(LIST);
    let mut text = String::new();
    for id in ids {
        text.push_str(id);
        text.push('\n');
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| StoreError::io(&path, e))?;
    f.write_all(text.as_bytes()).map_err(|e| StoreError::io(&path, e))
}

impl Drop for Reserve {
    /// Stops the thread and deletes the files of the ids nobody took.
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let s = lock(&self.shared.state);
        for id in &s.ready {
            if let Ok(path) = data_path(&self.shared.jobs_dir, id) {
                let _ = std::fs::remove_file(path);
            }
        }
        let _ = std::fs::remove_file(self.shared.jobs_dir.join(LIST));
    }
}
