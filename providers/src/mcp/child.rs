//! The watch on a stdio server's child process: its exit (reaped, described with the last lines
//! of its stderr) cancels a token the session waits on, so calls in flight fail at once; its
//! stderr goes to `tracing`. Dropping the watch kills the child's process group.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axp_provider_api::process::kill_group;
use tokio::io::AsyncReadExt;

use crate::CancellationToken;
use crate::process::describe_status;

/// A watched stdio child. Dropping it kills the child's process group.
pub(super) struct ChildProc {
    pub(super) pid: Option<u32>,
    /// Cancelled once the child has exited (and been reaped).
    pub(super) exited: CancellationToken,
    pub(super) status: Arc<Mutex<Option<String>>>,
    pub(super) stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

pub(super) const STDERR_LINES: usize = 20;
pub(super) const STDERR_LINE_MAX: usize = 2048;

impl ChildProc {
    pub(super) fn watch(
        mut child: tokio::process::Child,
        stderr: Option<tokio::process::ChildStderr>,
        provider: String,
    ) -> Self {
        let pid = child.id();
        let exited = CancellationToken::new();
        let status = Arc::new(Mutex::new(None));
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_done = CancellationToken::new();
        if let Some(mut err) = stderr {
            let tail = stderr_tail.clone();
            let done = stderr_done.clone();
            let provider = provider.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut line: Vec<u8> = Vec::new();
                let push = |line: &mut Vec<u8>| {
                    let text = String::from_utf8_lossy(line).trim_end().to_string();
                    line.clear();
                    if text.is_empty() {
                        return;
                    }
                    tracing::debug!(target: "axp_providers::mcp::upstream", %provider, stderr = %text);
                    let mut t = tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if t.len() >= STDERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(text);
                };
                loop {
                    let n = match err.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    for &b in &buf[..n] {
                        if b == b'\n' {
                            push(&mut line);
                        } else if line.len() < STDERR_LINE_MAX {
                            line.push(b);
                        }
                    }
                }
                push(&mut line);
                done.cancel();
            });
        } else {
            stderr_done.cancel();
        }
        {
            let exited = exited.clone();
            let status = status.clone();
            tokio::spawn(async move {
                let st = child.wait().await;
                let text = match st {
                    Ok(st) => describe_status(&st),
                    Err(e) => format!("wait failed: {e}"),
                };
                // Let the stderr reader catch the last words (bounded: a grandchild may hold
                // the pipe open).
                let _ = tokio::time::timeout(Duration::from_millis(200), stderr_done.cancelled()).await;
                *status.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(text);
                exited.cancel();
            });
        }
        Self { pid, exited, status, stderr_tail }
    }

    /// `exit code 1; stderr: …last lines…`
    pub(super) fn describe(&self) -> String {
        let status = self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "still running".into());
        let tail = self.stderr_tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if tail.is_empty() {
            status
        } else {
            let lines: Vec<&str> = tail.iter().rev().take(3).rev().map(String::as_str).collect();
            format!("{status}; last stderr: {}", lines.join(" | "))
        }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            kill_group(pid);
        }
    }
}
