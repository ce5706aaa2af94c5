//! Running one short-lived child process for a tool call: the code the `cli` and `bridge`
//! providers share. It builds the command through the gateway's [`Launcher`] (never by itself),
//! puts the child in its own process group, streams stdout/stderr chunks into the call's sink as
//! they arrive, keeps only a bounded part of each stream in memory, and kills the whole process
//! group on cancel, timeout, or when the call's future is dropped.
//!
//! It must not interpret output (the providers do that) and must never run a shell: the argv it
//! gets is executed as is.

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axp_protocol::methods::JobEventKind;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinHandle;

use crate::{CancellationToken, JobSink, Launcher, ProcessSpec, ProviderError};

/// How much of the output a read returns at most; big enough to keep the number of events low
/// for chatty commands, small enough to keep latency for line-by-line output.
const READ_CHUNK: usize = 32 * 1024;

/// After the main process exits, how long its pipes may stay open (held by a background child)
/// before the rest of its process group is killed.
const PIPE_GRACE: Duration = Duration::from_millis(300);

/// Default `PATH` for tools whose configuration does not set one: the launcher passes the
/// environment exactly as given, and most commands (and every `sh -c` template) need a `PATH`.
pub(crate) const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to do with one output stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capture {
    /// Send each chunk to the sink as it comes.
    pub(crate) emit: bool,
    /// How many bytes to keep in memory.
    pub(crate) keep: usize,
    /// `true`: keep the last `keep` bytes (a tail for logs); `false`: keep the first `keep`
    /// bytes and note the overflow (for output that is parsed as a whole).
    pub(crate) tail: bool,
}

/// The bytes kept of one stream.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) bytes: Vec<u8>,
    /// Every byte the stream produced, kept or not.
    pub(crate) total: u64,
}

impl Captured {
    /// `true` when some output was dropped to respect the bound.
    pub(crate) fn truncated(&self) -> bool {
        self.total > self.bytes.len() as u64
    }

    /// The kept bytes as text; with a note in front (tail) or at the end (head) when some were
    /// dropped.
    pub(crate) fn text(&self, tail: bool) -> String {
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

/// How a finished process ended, with what was kept of its output.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Captured,
    pub(crate) stderr: Captured,
}

impl Finished {
    /// `exit code N` or `killed by signal S`.
    pub(crate) fn describe_status(&self) -> String {
        describe_status(&self.status)
    }
}

/// `exit code N` or `killed by signal S`, for messages.
pub(crate) fn describe_status(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "unknown exit status".to_string(),
    }
}

/// Sends SIGKILL to the process group `pgid`. Errors are ignored on purpose: the usual one is
/// ESRCH (the group is already gone), and there is nothing better to do about the others.
pub(crate) fn kill_group(pgid: u32) {
    let Ok(raw) = i32::try_from(pgid) else {
        return;
    };
    if raw <= 1 {
        // Never signal group 0 (our own) or 1: a pid we failed to learn must not become a
        // broadcast kill.
        return;
    }
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(raw), nix::sys::signal::Signal::SIGKILL);
}

/// Kills the group when dropped unless disarmed: a call future dropped half-way (the gateway
/// gave up on it) must not leave processes behind.
struct GroupGuard {
    pgid: Option<u32>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
        }
    }
}

/// Turns a byte stream into UTF-8 text chunk by chunk without splitting a multi-byte character
/// across two events (invalid bytes become U+FFFD).
#[derive(Debug, Default)]
struct Utf8Chunker {
    pending: Vec<u8>,
}

impl Utf8Chunker {
    fn push(&mut self, bytes: &[u8]) -> String {
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

    fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

async fn pump<R: AsyncRead + Unpin>(mut reader: R, capture: Capture, sink: JobSink, stdout: bool) -> Captured {
    let mut buf = vec![0u8; READ_CHUNK];
    let mut kept: VecDeque<u8> = VecDeque::new();
    let mut total: u64 = 0;
    let mut chunker = Utf8Chunker::default();
    let emit = |text: String| {
        if text.is_empty() {
            return;
        }
        sink.emit(if stdout { JobEventKind::Stdout { data: text } } else { JobEventKind::Stderr { data: text } });
    };
    loop {
        let n = match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        total += n as u64;
        if capture.emit {
            emit(chunker.push(chunk));
        }
        if capture.tail {
            if chunk.len() >= capture.keep {
                kept.clear();
                kept.extend(&chunk[chunk.len() - capture.keep..]);
            } else {
                let overflow = (kept.len() + chunk.len()).saturating_sub(capture.keep);
                kept.drain(..overflow);
                kept.extend(chunk);
            }
        } else {
            let room = capture.keep.saturating_sub(kept.len());
            kept.extend(&chunk[..room.min(chunk.len())]);
        }
    }
    if capture.emit {
        emit(chunker.finish());
    }
    Captured { bytes: kept.into(), total }
}

/// How to run one call's process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunOptions<'a> {
    /// The tool's name, for the timeout error.
    pub(crate) tool: &'a str,
    pub(crate) timeout: Duration,
    pub(crate) stdout: Capture,
    pub(crate) stderr: Capture,
}

/// Runs `spec` to completion through `launcher`.
///
/// * stdin is closed (`/dev/null`); stdout and stderr are handled per `stdout`/`stderr`.
/// * `cancel` → the process group is killed and [`ProviderError::Cancelled`] returned.
/// * `timeout` → the group is killed and [`ProviderError::Timeout`] returned (named `tool`).
/// * After the main process exits, leftover members of its group are killed too (a tool call
///   does not get to leave daemons behind).
pub(crate) async fn run(
    launcher: &Arc<dyn Launcher>,
    spec: &ProcessSpec,
    how: &RunOptions<'_>,
    sink: JobSink,
    cancel: CancellationToken,
) -> Result<Finished, ProviderError> {
    let RunOptions { tool, timeout, stdout, stderr } = *how;
    let mut cmd = launcher.command(spec)?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
    let mut child =
        crate::spawn(cmd).await.map_err(|e| ProviderError::io(format!("cannot start `{}`", spec.program), e))?;
    let mut guard = GroupGuard { pgid: child.id() };
    let out = child.stdout.take().map(|r| {
        let sink = sink.clone();
        tokio::spawn(pump(r, stdout, sink, true))
    });
    let err = child.stderr.take().map(|r| {
        let sink = sink.clone();
        tokio::spawn(pump(r, stderr, sink, false))
    });

    let status = tokio::select! {
        status = child.wait() => status.map_err(|e| ProviderError::io("waiting for the process", e))?,
        _ = cancel.cancelled() => {
            drop(guard);
            let _ = child.wait().await;
            abort(out);
            abort(err);
            return Err(ProviderError::Cancelled);
        }
        _ = tokio::time::sleep(timeout) => {
            drop(guard);
            let _ = child.wait().await;
            abort(out);
            abort(err);
            return Err(ProviderError::Timeout { tool: tool.to_string(), secs: timeout.as_secs() });
        }
    };

    // The main process is gone. Give its pipes a moment to drain; if a background member of
    // the group still holds them, kill the group so the readers see EOF.
    let pgid = guard.pgid.take();
    let readers = async {
        let o = collect(out).await;
        let e = collect(err).await;
        (o, e)
    };
    tokio::pin!(readers);
    let (stdout, stderr) = match tokio::time::timeout(PIPE_GRACE, &mut readers).await {
        Ok(done) => {
            if let Some(pgid) = pgid {
                kill_group(pgid);
            }
            done
        }
        Err(_) => {
            if let Some(pgid) = pgid {
                kill_group(pgid);
            }
            // A process outside the group (it called setsid) may still hold a pipe: stop
            // waiting for it after one more grace period.
            tokio::time::timeout(PIPE_GRACE, &mut readers).await.unwrap_or_default()
        }
    };
    Ok(Finished { status, stdout, stderr })
}

fn abort(task: Option<JoinHandle<Captured>>) {
    if let Some(t) = task {
        t.abort();
    }
}

async fn collect(task: Option<JoinHandle<Captured>>) -> Captured {
    match task {
        Some(t) => t.await.unwrap_or_default(),
        None => Captured::default(),
    }
}

/// A finished process as a tool result: the kept stdout tail as text, the stderr tail as a second
/// block when there was any, `isError` when the exit status is not 0 (the status is in the text,
/// after `[LABEL failed: …]`), and a small structured summary. Shared by the CLI and skill
/// providers.
pub(crate) fn tool_output(f: &Finished, label: &str) -> axp_protocol::ToolOutput {
    let ok = f.status.success();
    let mut content = Vec::new();
    let mut stdout = f.stdout.text(true);
    if !ok {
        if !stdout.is_empty() && !stdout.ends_with('\n') {
            stdout.push('\n');
        }
        stdout.push_str(&format!("[{label} failed: {}]", f.describe_status()));
    }
    content.push(serde_json::json!({"type": "text", "text": stdout}));
    if f.stderr.total > 0 {
        content.push(serde_json::json!({"type": "text", "text": format!("stderr:\n{}", f.stderr.text(true))}));
    }
    axp_protocol::ToolOutput {
        content,
        structured_content: Some(serde_json::json!({
            "exit_code": f.status.code(),
            "status": f.describe_status(),
            "stdout_bytes": f.stdout.total,
            "stderr_bytes": f.stderr.total,
            "truncated": f.stdout.truncated() || f.stderr.truncated(),
        })),
        is_error: !ok,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
}
