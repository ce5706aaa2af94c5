//! The one process runner: how every short-lived child the gateway starts is spawned, read,
//! stopped and reaped — tool calls of the `cli`, `bridge` and skill providers, command and
//! code-mode jobs, and PTY jobs alike. It owns the child's process group, the readers of its
//! output, and one set of stop semantics:
//!
//! * **Spawn** through [`crate::spawn`] (the long-lived spawner thread), in a process group of
//!   its own, with `kill_on_drop`. Dropping a [`Process`] before it finished kills the group, so
//!   a caller that gives up half-way leaves nothing behind.
//! * **Output** is read by one task per source ([`Process::pump_pipes`] for stdout and stderr,
//!   [`Process::pump`] for any other reader, such as a terminal's controlling side), decoded
//!   chunk by chunk without splitting a UTF-8 character ([`Utf8Chunker`]), sent to the sink as
//!   it arrives, and kept in memory only within the bound the caller asks for ([`Capture`]).
//! * **Cancel** (the token, or the deadline): SIGTERM to the process group, up to
//!   [`STOP_GRACE`] for the process to exit, then SIGKILL to the group.
//! * **After the process exits** (by itself or stopped): its readers get [`PIPE_GRACE`] to reach
//!   the end of their streams; then the rest of the group is SIGKILLed (a call or a job does not
//!   get to leave processes behind), the readers get one more [`PIPE_GRACE`] (for a process
//!   outside the group, one that called `setsid`, still holding a pipe), and are stopped.
//!   [`Process::wait`] returns only once every reader has stopped, so everything it sent to the
//!   sink precedes whatever the caller sends next (a job's exit event).
//!
//! It must not interpret output (its callers do) and never runs a shell: the command it gets
//! was built by a [`crate::Launcher`] and is executed as is.

use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_protocol::RpcError;
use axp_protocol::methods::{JobEventKind, JobState};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStdin, Command};
use tokio::task::JoinHandle;

use crate::{CancellationToken, JobSink};

/// How long a process may take to exit after SIGTERM before its group is SIGKILLed.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// After the main process exits, how long its output may stay open (held by a background child)
/// before the rest of its process group is killed; and, after that, how long a reader may still
/// wait for a holder outside the group before it is stopped.
pub const PIPE_GRACE: Duration = Duration::from_millis(300);

/// Sends `signal` to the process group `pgid`. Errors are ignored on purpose: the usual one is
/// ESRCH (the group is already gone), and there is nothing better to do about the others.
pub fn signal_group(pgid: u32, signal: nix::sys::signal::Signal) {
    let Ok(raw) = i32::try_from(pgid) else {
        return;
    };
    if raw <= 1 {
        // Never signal group 0 (our own) or 1: a pid we failed to learn must not become a
        // broadcast signal.
        return;
    }
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(raw), signal);
}

/// Sends SIGKILL to the process group `pgid` (see [`signal_group`]).
pub fn kill_group(pgid: u32) {
    signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
}

/// `exit code N` or `killed by signal S`, for messages.
pub fn describe_status(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "unknown exit status".to_string(),
    }
}

/// The exit event of a job whose process could not be run.
pub fn failed_event(reason: String) -> JobEventKind {
    JobEventKind::Exit {
        state: JobState::Failed,
        code: None,
        signal: None,
        error: serde_json::to_value(RpcError::new(axp_protocol::ErrorCode::InvalidParams, reason)).ok(),
    }
}

/// The exit event of a process that ended: `exited` with its code, `killed` with the name of
/// the signal that ended it, or `failed` when the status says neither.
pub fn exit_event(status: &ExitStatus) -> JobEventKind {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => JobEventKind::Exit { state: JobState::Exited, code: Some(code), signal: None, error: None },
        (None, Some(sig)) => JobEventKind::Exit {
            state: JobState::Killed,
            code: None,
            signal: Some(nix::sys::signal::Signal::try_from(sig).map_or(sig.to_string(), |s| s.to_string())),
            error: None,
        },
        (None, None) => failed_event("the process ended without a status".into()),
    }
}

/// Turns a byte stream into UTF-8 text chunk by chunk without splitting a multi-byte character
/// across two events (invalid bytes become U+FFFD).
#[derive(Debug, Default)]
pub struct Utf8Chunker {
    pending: Vec<u8>,
}

impl Utf8Chunker {
    /// The text of everything pushed so far, except an incomplete character at the end, which
    /// is held back for the next push.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let keep_from = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => {
                // Invalid bytes in the middle: hold back only an incomplete sequence at the end.
                let tail_start = self.pending.len().saturating_sub(3);
                (tail_start..self.pending.len())
                    .find(|&i| {
                        self.pending[i] >= 0xC0
                            && matches!(std::str::from_utf8(&self.pending[i..]),
                                Err(e) if e.error_len().is_none() && e.valid_up_to() == 0)
                    })
                    .unwrap_or(self.pending.len())
            }
        };
        let rest = self.pending.split_off(keep_from);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }

    /// What is still held back, as text (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

/// Which event a source's output becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
    /// A terminal's controlling side (`pty` events); kept as stdout in [`Finished`].
    Terminal,
}

impl Stream {
    fn event(self, data: String) -> JobEventKind {
        match self {
            Stream::Stdout => JobEventKind::Stdout { data },
            Stream::Stderr => JobEventKind::Stderr { data },
            Stream::Terminal => JobEventKind::Pty { data },
        }
    }
}

/// What to do with one output source.
#[derive(Debug, Clone, Copy)]
pub struct Capture {
    /// Send each chunk to the sink as it comes.
    pub emit: bool,
    /// How many bytes to keep in memory.
    pub keep: usize,
    /// `true`: keep the last `keep` bytes (a tail for logs); `false`: keep the first `keep`
    /// bytes and note the overflow (for output that is parsed as a whole).
    pub tail: bool,
    /// The most one read (and so one event) carries.
    pub chunk: usize,
}

impl Capture {
    /// Stream everything to the sink in reads of at most `chunk` bytes, keep nothing.
    pub fn stream(chunk: usize) -> Self {
        Self { emit: true, keep: 0, tail: true, chunk }
    }
}

/// The bytes kept of one stream.
#[derive(Debug, Default)]
pub struct Captured {
    pub bytes: Vec<u8>,
    /// Every byte the stream produced, kept or not.
    pub total: u64,
}

impl Captured {
    /// `true` when some output was dropped to respect the bound.
    pub fn truncated(&self) -> bool {
        self.total > self.bytes.len() as u64
    }

    /// The kept bytes as text; with a note in front (tail) or at the end (head) when some were
    /// dropped.
    pub fn text(&self, tail: bool) -> String {
        let body = String::from_utf8_lossy(&self.bytes);
        if !self.truncated() {
            return body.into_owned();
        }
        let omitted = self.total - self.bytes.len() as u64;
        if tail {
            format!("[… {omitted} earlier bytes omitted …]\n{body}")
        } else {
            format!("{body}\n[… {omitted} further bytes omitted …]")
        }
    }
}

/// What a reader has kept so far; shared with the runner so that a reader stopped before the
/// end of its stream still gives what it read.
#[derive(Debug, Default)]
struct Kept {
    bytes: VecDeque<u8>,
    total: u64,
}

impl Kept {
    fn add(&mut self, chunk: &[u8], capture: &Capture) {
        self.total += chunk.len() as u64;
        if capture.tail {
            if chunk.len() >= capture.keep {
                self.bytes.clear();
                self.bytes.extend(&chunk[chunk.len() - capture.keep..]);
            } else {
                let overflow = (self.bytes.len() + chunk.len()).saturating_sub(capture.keep);
                self.bytes.drain(..overflow);
                self.bytes.extend(chunk);
            }
        } else {
            let room = capture.keep.saturating_sub(self.bytes.len());
            self.bytes.extend(&chunk[..room.min(chunk.len())]);
        }
    }
}

fn lock(kept: &Mutex<Kept>) -> std::sync::MutexGuard<'_, Kept> {
    kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn pump<R: AsyncRead + Unpin>(
    mut reader: R,
    stream: Stream,
    capture: Capture,
    sink: JobSink,
    kept: Arc<Mutex<Kept>>,
) {
    let mut buf = vec![0u8; capture.chunk.max(1)];
    let mut chunker = Utf8Chunker::default();
    let emit = |text: String| {
        if !text.is_empty() {
            sink.emit(stream.event(text));
        }
    };
    loop {
        let n = match reader.read(&mut buf).await {
            // An error ends the stream too: a terminal's controlling side reads EIO once every
            // descriptor of its child side is closed.
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if capture.emit {
            emit(chunker.push(chunk));
        }
        lock(&kept).add(chunk, &capture);
    }
    if capture.emit {
        emit(chunker.finish());
    }
}

/// One output reader of a [`Process`].
struct Reader {
    stream: Stream,
    task: JoinHandle<()>,
    kept: Arc<Mutex<Kept>>,
}

/// How a process ended.
#[derive(Debug)]
pub enum Ended {
    /// It exited by itself.
    Exited(ExitStatus),
    /// The cancellation token fired; it was stopped.
    Cancelled,
    /// The deadline passed; it was stopped.
    TimedOut,
    /// Waiting for it failed.
    WaitFailed(std::io::Error),
}

/// A finished process: how it ended, and what was kept of its output.
#[derive(Debug)]
pub struct Finished {
    pub ended: Ended,
    /// Stdout (or the terminal's output).
    pub stdout: Captured,
    pub stderr: Captured,
}

/// A running child in a process group of its own (see the module documentation).
pub struct Process {
    child: Child,
    /// The process group, until it has been killed; killed on drop.
    pgid: Option<u32>,
    readers: Vec<Reader>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process").field("pgid", &self.pgid).field("readers", &self.readers.len()).finish()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
        for r in &self.readers {
            r.task.abort();
        }
    }
}

impl Process {
    /// Spawns `cmd` (its stdio already set by the caller) from the spawner thread, as the leader
    /// of a new process group, killed when dropped.
    pub async fn spawn(mut cmd: Command) -> std::io::Result<Self> {
        cmd.process_group(0).kill_on_drop(true);
        let child = crate::spawn(cmd).await?;
        let pgid = child.id();
        Ok(Self { child, pgid, readers: Vec::new() })
    }

    /// The process's pid (which is also its process group's id), while it runs.
    pub fn id(&self) -> Option<u32> {
        self.pgid
    }

    /// The child's stdin, if it was piped and not taken yet.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// Starts reading the child's piped stdout and stderr.
    pub fn pump_pipes(&mut self, sink: &JobSink, stdout: Capture, stderr: Capture) {
        if let Some(r) = self.child.stdout.take() {
            self.pump(r, Stream::Stdout, stdout, sink.clone());
        }
        if let Some(r) = self.child.stderr.take() {
            self.pump(r, Stream::Stderr, stderr, sink.clone());
        }
    }

    /// Starts reading `reader` (a terminal's controlling side, say) as part of this process's
    /// output, until it ends or [`Process::wait`] stops it.
    pub fn pump(
        &mut self,
        reader: impl AsyncRead + Unpin + Send + 'static,
        stream: Stream,
        capture: Capture,
        sink: JobSink,
    ) {
        let kept = Arc::new(Mutex::new(Kept::default()));
        let task = tokio::spawn(pump(reader, stream, capture, sink, kept.clone()));
        self.readers.push(Reader { stream, task, kept });
    }

    /// Waits for the process to exit, stopping it when `cancel` fires or `timeout` passes, then
    /// settles its output (see the module documentation) and returns how it ended.
    pub async fn wait(mut self, cancel: &CancellationToken, timeout: Option<Duration>) -> Finished {
        let deadline = async {
            match timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        let ended = tokio::select! {
            status = self.child.wait() => match status {
                Ok(st) => Ended::Exited(st),
                Err(e) => Ended::WaitFailed(e),
            },
            _ = cancel.cancelled() => { self.stop().await; Ended::Cancelled }
            _ = deadline => { self.stop().await; Ended::TimedOut }
        };
        let (stdout, stderr) = self.settle().await;
        Finished { ended, stdout, stderr }
    }

    /// SIGTERM to the group, [`STOP_GRACE`] for the process to exit, then SIGKILL to the group
    /// (and the child itself, should it have left the group).
    async fn stop(&mut self) {
        if let Some(pgid) = self.pgid {
            signal_group(pgid, nix::sys::signal::Signal::SIGTERM);
        }
        let exited = tokio::time::timeout(STOP_GRACE, self.child.wait()).await.is_ok();
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
        if !exited {
            let _ = self.child.kill().await;
        }
    }

    /// The process has ended: give the readers [`PIPE_GRACE`], kill the rest of the group, give
    /// them one more [`PIPE_GRACE`], then stop those still reading. Returns once every reader has
    /// stopped, with what each kept.
    async fn settle(&mut self) -> (Captured, Captured) {
        let mut readers = std::mem::take(&mut self.readers);
        let first = tokio::time::Instant::now() + PIPE_GRACE;
        let mut open = false;
        for r in &mut readers {
            open |= tokio::time::timeout_at(first, &mut r.task).await.is_err();
        }
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
        if open {
            let second = tokio::time::Instant::now() + PIPE_GRACE;
            for r in &mut readers {
                if r.task.is_finished() {
                    continue;
                }
                if tokio::time::timeout_at(second, &mut r.task).await.is_err() {
                    // Stopped, and awaited: once the task is gone it can send nothing more.
                    r.task.abort();
                    let _ = (&mut r.task).await;
                }
            }
        }
        let (mut stdout, mut stderr) = (Captured::default(), Captured::default());
        for r in readers {
            let mut kept = lock(&r.kept);
            let captured = Captured { bytes: std::mem::take(&mut kept.bytes).into(), total: kept.total };
            match r.stream {
                Stream::Stdout | Stream::Terminal => stdout = captured,
                Stream::Stderr => stderr = captured,
            }
        }
        (stdout, stderr)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::EventSink;

    #[test]
    fn chunker_keeps_multibyte_characters_whole() {
        let mut c = Utf8Chunker::default();
        let bytes = "héllo".as_bytes();
        // Split inside the two-byte `é`.
        assert_eq!(c.push(&bytes[..2]), "h");
        assert_eq!(c.push(&bytes[2..]), "éllo");
        assert_eq!(c.push(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(c.push(b"\xe2\x82"), "");
        assert_eq!(c.finish(), "\u{fffd}");
    }

    #[test]
    fn captured_text_notes_truncation() {
        let c = Captured { bytes: b"tail".to_vec(), total: 10 };
        assert!(c.truncated());
        assert_eq!(c.text(true), "[… 6 earlier bytes omitted …]\ntail");
        assert!(c.text(false).ends_with("[… 6 further bytes omitted …]"));
    }

    /// Records every event, in order, with a marker pushed by the test itself.
    #[derive(Default)]
    struct Log(Mutex<Vec<JobEventKind>>);

    impl EventSink for Log {
        fn emit(&self, event: JobEventKind) {
            self.0.lock().unwrap().push(event);
        }
    }

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]).stdin(std::process::Stdio::null());
        cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        cmd
    }

    fn gone(pid: u32) -> bool {
        let stat = std::path::PathBuf::from(format!("/proc/{pid}/stat"));
        std::fs::read_to_string(stat).map_or(true, |s| s.contains(") Z "))
    }

    /// A background child that keeps stdout open does not hold the process's end: the runner
    /// returns within its graces, with the output, and the child is killed with the group.
    #[tokio::test]
    async fn a_background_holder_is_killed_and_does_not_hold_the_end() {
        let log = Arc::new(Log::default());
        let sink: JobSink = log.clone();
        let mut p = Process::spawn(sh("sleep 600 & echo $!")).await.unwrap();
        p.pump_pipes(&sink, Capture { emit: true, keep: 1024, tail: true, chunk: 1024 }, Capture::stream(1024));
        let t0 = std::time::Instant::now();
        let f = p.wait(&CancellationToken::new(), None).await;
        assert!(t0.elapsed() < Duration::from_secs(3), "took {:?}", t0.elapsed());
        assert!(matches!(f.ended, Ended::Exited(st) if st.success()), "{f:?}");
        let bg: u32 = String::from_utf8_lossy(&f.stdout.bytes).trim().parse().unwrap();
        // Nothing reaches the sink once `wait` has returned.
        let seen = log.0.lock().unwrap().len();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(log.0.lock().unwrap().len(), seen);
        assert_eq!(seen, 1, "{:?}", log.0.lock().unwrap());
        for _ in 0..50 {
            if gone(bg) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the background child {bg} survived its process's end");
    }

    /// Cancel sends SIGTERM first: a process that handles it gets to finish its output.
    #[tokio::test]
    async fn cancel_terminates_first_then_kills() {
        let sink: JobSink = Arc::new(crate::NullSink);
        let mut p =
            Process::spawn(sh("trap 'echo bye; exit 3' TERM; echo up; while :; do sleep 0.05; done")).await.unwrap();
        p.pump_pipes(&sink, Capture { emit: false, keep: 64, tail: true, chunk: 64 }, Capture::stream(64));
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.cancel();
        });
        let f = p.wait(&cancel, None).await;
        assert!(matches!(f.ended, Ended::Cancelled), "{f:?}");
        assert_eq!(String::from_utf8_lossy(&f.stdout.bytes), "up\nbye\n");

        // One that ignores SIGTERM is killed after the stop grace.
        let mut p = Process::spawn(sh("trap '' TERM; while :; do sleep 0.05; done")).await.unwrap();
        p.pump_pipes(&sink, Capture::stream(64), Capture::stream(64));
        let t0 = std::time::Instant::now();
        let f = p.wait(&CancellationToken::new(), Some(Duration::from_millis(100))).await;
        assert!(matches!(f.ended, Ended::TimedOut), "{f:?}");
        let took = t0.elapsed();
        assert!(took >= STOP_GRACE && took < STOP_GRACE + Duration::from_secs(2), "took {took:?}");
    }
}
