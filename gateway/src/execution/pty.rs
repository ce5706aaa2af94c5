//! PTY jobs (`job.start {command, pty: {rows, cols}}`, needs `pty.open`): the gateway opens a
//! pseudo-terminal pair, hands the child side to the sandboxed process as stdin, stdout and
//! stderr, and keeps the controlling side. Inside the sandbox the target starts a new session and
//! takes the terminal as its controlling terminal (`axp-sandbox`, `allow_pty`), so line editing,
//! ^C, job control and SIGWINCH behave as at a real terminal. Everything the terminal prints
//! becomes `pty` events in the job's durable log (attachable from any seq like any job);
//! `job.write` types into it, `job.resize` sets its window size, `job.signal` reaches its
//! foreground process group.
//!
//! This module owns the terminal and its I/O; it does not decide who may open one (the
//! dispatcher checks `pty.open`) and never runs anything outside the launcher it is given. The
//! pair is opened with `posix_openpt` + `TIOCGPTPEER` (rustix), so no `/dev/pts` path is looked
//! up, and both ends are close-on-exec: only the three standard descriptors reach the child.
//! Spawning, reading, stopping and reaping are the process runner's (`axp_provider_api::process`),
//! with the same cancel, grace and kill semantics as every other job.

use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use axp_provider_api::process::{Capture, Ended, Process, Stream};
use axp_providers::{CancellationToken, JobSink, Launcher, ProcessSpec};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// The controlling side of a job's terminal.
pub struct Terminal {
    master: AsyncFd<OwnedFd>,
}

/// Largest terminal the gateway accepts (rows and columns).
pub const MAX_SIDE: u16 = 4096;

fn winsize(rows: u16, cols: u16) -> Winsize {
    Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 }
}

/// Checks a requested window size (`job.start`'s `pty` and `job.resize`).
pub fn check_size(rows: u16, cols: u16) -> Result<(), String> {
    if rows == 0 || cols == 0 || rows > MAX_SIDE || cols > MAX_SIDE {
        return Err(format!("a terminal needs 1..={MAX_SIDE} rows and columns (got {rows}x{cols})"));
    }
    Ok(())
}

/// Opens a terminal pair with the given size: (controlling side, child side).
fn open_pair(rows: u16, cols: u16) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = rustix::pty::openpt(flags)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags)?;
    rustix::termios::tcsetwinsize(&master, winsize(rows, cols))?;
    let fl = rustix::fs::fcntl_getfl(&master)?;
    rustix::fs::fcntl_setfl(&master, fl | rustix::fs::OFlags::NONBLOCK)?;
    Ok((master, slave))
}

impl Terminal {
    /// Sets the window size; the kernel sends SIGWINCH to the foreground process group.
    pub fn resize(&self, rows: u16, cols: u16) -> std::io::Result<()> {
        check_size(rows, cols).map_err(std::io::Error::other)?;
        Ok(rustix::termios::tcsetwinsize(self.master.get_ref(), winsize(rows, cols))?)
    }

    async fn write_all(&self, mut data: &[u8]) -> std::io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.master.writable().await?;
            match guard.try_io(|fd| Ok(rustix::io::write(fd.get_ref(), data)?)) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }
}

/// The controlling side of a terminal as a byte stream for the runner's reader. A read fails with
/// EIO once the last holder of the child side has closed it, which ends the stream.
struct TerminalReader(Arc<Terminal>);

impl AsyncRead for TerminalReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.master.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut *unfilled)?)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// Runs `spec` on a new terminal of `size` (rows, cols) until it ends or `cancel` fires.
/// `started` receives the sandbox's pid and the terminal once the process runs. Returns how the
/// process ended once everything the terminal printed is in `sink`, or why it could not run.
pub async fn run(
    spec: &ProcessSpec,
    launcher: Arc<dyn Launcher>,
    (rows, cols): (u16, u16),
    sink: JobSink,
    stdin_rx: Option<mpsc::Receiver<Option<Vec<u8>>>>,
    cancel: CancellationToken,
    started: impl FnOnce(Option<u32>, Arc<Terminal>),
) -> Result<Ended, String> {
    let (master, slave) = open_pair(rows, cols).map_err(|e| format!("cannot open a pseudo-terminal: {e}"))?;
    let mut cmd = launcher.terminal_command(spec).map_err(|e| format!("cannot prepare the command: {e}"))?;
    let stdio = |fd: &OwnedFd| fd.as_fd().try_clone_to_owned().map(Stdio::from);
    match (stdio(&slave), stdio(&slave)) {
        (Ok(a), Ok(b)) => {
            cmd.stdin(a).stdout(b).stderr(Stdio::from(slave));
        }
        (Err(e), _) | (_, Err(e)) => return Err(format!("cannot share the terminal: {e}")),
    }
    // The command holds copies of the child side; the spawner drops it once the child is
    // forked, or reading the controlling side would never see the end of the job.
    let mut process = Process::spawn(cmd).await.map_err(|e| format!("cannot start `{}`: {e}", spec.program))?;
    // `AsyncFd::new` is deprecated because a registered *borrowed* descriptor could be closed
    // behind tokio's back; here the `OwnedFd` moves into the `AsyncFd`, which is its only owner
    // until it is dropped, so the registration cannot outlive the descriptor. (`register`, the
    // replacement, is an `unsafe fn`, which this crate does not allow.)
    #[allow(deprecated)]
    let registered = AsyncFd::new(master);
    // On failure, dropping `process` kills its group.
    let term = Arc::new(Terminal { master: registered.map_err(|e| format!("cannot watch the terminal: {e}"))? });
    started(process.id(), term.clone());
    let writer = stdin_rx.map(|mut rx| {
        let t = term.clone();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                // End of input at a terminal is the EOF character (^D), not a closed descriptor.
                let data = msg.unwrap_or_else(|| vec![0x04]);
                if t.write_all(&data).await.is_err() {
                    break;
                }
            }
        })
    });
    process.pump(TerminalReader(term), Stream::Terminal, Capture::stream(16 * 1024), sink);
    // Everything the terminal printed precedes the exit event: the runner returns once its
    // reader has stopped. The sandbox's pid namespace is gone once its exec process ended, so
    // the child side closes promptly.
    let finished = process.wait(&cancel, None).await;
    if let Some(w) = writer {
        w.abort();
    }
    Ok(finished.ended)
}
