//! The one thread every child process is forked from. A sandboxed process arms
//! `PR_SET_PDEATHSIG` so that it dies with the gateway, and the kernel fires that signal when the
//! *thread* that forked it exits, not the process. Tokio retires threads: a runtime worker that
//! ran `block_in_place` becomes a blocking-pool thread, and the pool ends idle threads after ten
//! seconds. A child forked from such a thread was SIGKILLed ten seconds later, mid-call. So every
//! spawn goes through [`spawn`], which hands the command to one thread that lives as long as the
//! process, and the only way a child dies with a thread is when the whole gateway goes.
//!
//! The thread only forks: it enters the caller's runtime so that the child's pipes and its
//! reaping belong to that runtime, spawns, and hands the child back. Nothing else runs on it.

use std::io;
use std::sync::{Mutex, OnceLock, mpsc};

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

struct Request {
    cmd: Command,
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

static SPAWNER: OnceLock<Mutex<Option<mpsc::Sender<Request>>>> = OnceLock::new();

fn gone() -> io::Error {
    io::Error::other("the process spawner thread is gone")
}

/// The spawner's queue, starting its thread on first use.
fn queue() -> io::Result<mpsc::Sender<Request>> {
    let slot = SPAWNER.get_or_init(|| Mutex::new(None));
    let mut slot = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(tx) = slot.as_ref() {
        return Ok(tx.clone());
    }
    let (tx, rx) = mpsc::channel::<Request>();
    std::thread::Builder::new().name("axp-spawner".into()).spawn(move || {
        for Request { mut cmd, runtime, reply } in rx {
            let _entered = runtime.enter();
            let spawned = cmd.spawn();
            // Dropped here, on this thread: a command holds copies of the descriptors it hands
            // the child (a terminal's child side, say), which must not outlive the spawn.
            drop(cmd);
            // A caller that went away meanwhile drops the child, and `kill_on_drop` ends it.
            let _ = reply.send(spawned);
        }
    })?;
    *slot = Some(tx.clone());
    Ok(tx)
}

/// Spawns `cmd` from the long-lived spawner thread, within the caller's runtime. Use it instead
/// of `Command::spawn` for every process that must die only with the process or by decision.
pub async fn spawn(cmd: Command) -> io::Result<Child> {
    let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    let (reply, answer) = oneshot::channel();
    queue()?.send(Request { cmd, runtime, reply }).map_err(|_| gone())?;
    answer.await.map_err(|_| gone())?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child spawned from a thread that then exits keeps running: its parent thread is the
    /// spawner's. (The child arms PDEATHSIG itself, as the sandbox's exec process does.)
    #[test]
    fn a_child_outlives_the_thread_that_asked_for_it() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let child = std::thread::spawn({
            let handle = rt.handle().clone();
            move || {
                handle.block_on(async {
                    let mut cmd = Command::new("python3");
                    cmd.args([
                        "-c",
                        "import ctypes, time; ctypes.CDLL(None).prctl(1, 9); print('armed', flush=True); time.sleep(30)",
                    ]);
                    cmd.stdout(std::process::Stdio::piped()).kill_on_drop(true);
                    let mut child = spawn(cmd).await.unwrap();
                    // The child has armed PDEATHSIG (SIGKILL) while this thread still lives.
                    let mut buf = [0u8; 6];
                    let out = child.stdout.as_mut().unwrap();
                    tokio::io::AsyncReadExt::read_exact(out, &mut buf).await.unwrap();
                    assert_eq!(&buf, b"armed\n");
                    child
                })
            }
        })
        .join()
        .unwrap();
        // The asking thread has exited; give the kernel time to deliver the signal it would.
        rt.block_on(async move {
            let mut child = child;
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            assert!(child.try_wait().unwrap().is_none(), "the child died with the thread that asked for it");
            child.kill().await.unwrap();
        });
    }
}
