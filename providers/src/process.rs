//! Running one short-lived child process for a tool call: the code the `cli`, `bridge` and
//! skill providers share on top of the runner of `axp-provider-api` ([`runner`]). It builds the
//! command through the gateway's [`Launcher`] (never by itself), closes its stdin, runs it with
//! the runner's stop semantics (SIGTERM, then SIGKILL to the group, on cancel or timeout; the
//! rest of the group killed after the process exits), and turns how it ended into the
//! provider's answer: a [`Finished`] process, or [`ProviderError::Cancelled`] /
//! [`ProviderError::Timeout`].
//!
//! It must not interpret output (the providers do that) and must never run a shell: the argv it
//! gets is executed as is.

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axp_provider_api::process as runner;
pub(crate) use axp_provider_api::process::{Capture, Captured, describe_status};

use crate::{CancellationToken, JobSink, Launcher, ProcessSpec, ProviderError};

/// How much of the output a read returns at most; big enough to keep the number of events low
/// for chatty commands, small enough to keep latency for line-by-line output.
pub(crate) const READ_CHUNK: usize = 32 * 1024;

/// Default `PATH` for tools whose configuration does not set one: the launcher passes the
/// environment exactly as given, and most commands (and every `sh -c` template) need a `PATH`.
/// It is the workspace's one default, the sandbox's, so a tool resolves the same programs as a
/// command job.
pub(crate) use axp_sandbox::DEFAULT_PATH;

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
/// * `cancel` → the process group is stopped and [`ProviderError::Cancelled`] returned.
/// * `timeout` → the group is stopped and [`ProviderError::Timeout`] returned (named `tool`).
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
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut process = runner::Process::spawn(cmd)
        .await
        .map_err(|e| ProviderError::io(format!("cannot start `{}`", spec.program), e))?;
    process.pump_pipes(&sink, stdout, stderr);
    let finished = process.wait(&cancel, Some(timeout)).await;
    match finished.ended {
        runner::Ended::Exited(status) => Ok(Finished { status, stdout: finished.stdout, stderr: finished.stderr }),
        runner::Ended::Cancelled => Err(ProviderError::Cancelled),
        runner::Ended::TimedOut => Err(ProviderError::Timeout { tool: tool.to_string(), secs: timeout.as_secs() }),
        runner::Ended::WaitFailed(e) => Err(ProviderError::io("waiting for the process", e)),
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
        meta: None,
    }
}
