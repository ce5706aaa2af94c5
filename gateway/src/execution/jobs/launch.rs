//! Launching a job's work: the four kinds a job runs ([`Work`]: a provider's tool, a command, a
//! code-mode program, a command on a terminal), each on the runner of `axp-provider-api` (the
//! PTY one in `execution::pty`), under the job's timeout and cancel token, its output streamed
//! into the job's log through its [`LogSink`], the files it wrote recorded (`execution::writes`),
//! and its end handed back to the registry ([`Jobs::finish`]). It decides nothing: the work
//! arrives compiled and checked, for a new job or for a parked one just approved.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axp_protocol::methods::{JobEventKind, JobState};
use axp_protocol::{ToolCall, ToolOutput};
use axp_provider_api::process::{Capture, Ended, Process, exit_event, failed_event};
use axp_providers::{CancellationToken, JobSink, Launcher, NetScope, ProcessSpec, ProviderError};
use axp_store::JobLog;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::{Jobs, Live, LogSink, lock, provider_error_to_rpc};
use crate::catalog::registry::Resolved;

/// What a job runs.
pub enum Work {
    /// `cwd` is the session's workspace, passed to providers that run scripts there (skills).
    Tool {
        resolved: Box<Resolved>,
        arguments: serde_json::Map<String, Value>,
        cwd: Option<PathBuf>,
    },
    Command {
        spec: ProcessSpec,
        launcher: Arc<dyn Launcher>,
    },
    /// A code-mode job: a command plus what serves its SDK (`crate::codemode`), which is
    /// dropped — socket closed, token revoked — when the process ends.
    Code {
        spec: ProcessSpec,
        launcher: Arc<dyn Launcher>,
        companion: Box<dyn Send + Sync>,
    },
    /// A command on a pseudo-terminal (`crate::execution::pty`).
    Pty {
        spec: ProcessSpec,
        launcher: Arc<dyn Launcher>,
        rows: u16,
        cols: u16,
    },
}

impl Jobs {
    /// Runs `work` as job `id` (a new job, or a parked one just approved).
    pub(super) fn launch(
        &self,
        id: &str,
        log: JobLog,
        live: Arc<Live>,
        work: Work,
        stdin_rx: Option<mpsc::Receiver<Option<Vec<u8>>>>,
        timeout: Option<Duration>,
    ) {
        self.metrics.jobs_started.inc();
        self.metrics.jobs_running.add(1);
        let meter = self.quotas.output_meter(&live.session_id);
        let sink = Arc::new(LogSink { log, live: live.clone(), job_id: id.to_string(), meter });
        let this = self.clone();
        let job_id = id.to_string();
        let roots = self.writes.as_ref().map(|w| w.roots(&work)).unwrap_or_default();
        // The job's span, a child of the request's (or tool call's) that started it; egress
        // attempts of the session's proxy made while it runs are placed under it.
        let span = crate::telemetry::trace_span!(
            "job",
            axp.job = %job_id,
            axp.job.kind = work.kind(),
            axp.session = %live.session_id,
        );
        let window = crate::telemetry::window(NetScope::Session(live.session_id.clone()), &span);
        tokio::spawn(crate::telemetry::carried(span, async move {
            let _window = window;
            let before = if roots.is_empty() {
                Vec::new()
            } else {
                tokio::task::spawn_blocking(move || {
                    roots.iter().map(|r| crate::execution::writes::Snapshot::take(r)).collect()
                })
                .await
                .unwrap_or_default()
            };
            let cancel = live.cancel.clone();
            if let Some(t) = timeout {
                let c = cancel.clone();
                let timed_out = live.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = tokio::time::sleep(t) => {
                            timed_out.timed_out.store(true, std::sync::atomic::Ordering::SeqCst);
                            c.cancel();
                        }
                        _ = c.cancelled() => {}
                    }
                });
            }
            // A tool's result, appended right before its exit (see below).
            let mut result = None;
            let exit = match work {
                Work::Tool { resolved, arguments, cwd } => {
                    let times = this.metrics.tool_calls(resolved.entry.provider.as_str());
                    let started = std::time::Instant::now();
                    let (output, exit) =
                        run_tool(*resolved, arguments, cwd, &job_id, sink.clone(), live.clone(), cancel).await;
                    let took = started.elapsed();
                    times.provider.observe(took);
                    let _ = live.provider_time.set((took, times));
                    result = output;
                    exit
                }
                Work::Command { spec, launcher } => {
                    run_command(spec, launcher, sink.clone(), live.clone(), stdin_rx, cancel).await
                }
                Work::Code { spec, launcher, companion } => {
                    let exit = run_command(spec, launcher, sink.clone(), live.clone(), stdin_rx, cancel).await;
                    drop(companion);
                    exit
                }
                Work::Pty { spec, launcher, rows, cols } => {
                    let l = live.clone();
                    let started = move |pid: Option<u32>, t: Arc<crate::execution::pty::Terminal>| {
                        *lock(&l.pid) = pid;
                        *lock(&l.terminal) = Some(t);
                    };
                    let end = crate::execution::pty::run(
                        &spec,
                        launcher,
                        (rows, cols),
                        sink.clone(),
                        stdin_rx,
                        cancel,
                        started,
                    )
                    .await;
                    *lock(&live.stdin) = None;
                    *lock(&live.pid) = None;
                    *lock(&live.terminal) = None;
                    match end {
                        Ok(ended) => ended_event(ended, &live),
                        Err(reason) => failed_event(reason),
                    }
                }
            };
            if let (Some(w), false) = (this.writes.clone(), before.is_empty()) {
                let (id, session) = (job_id.clone(), live.session_id.clone());
                let _ = tokio::task::spawn_blocking(move || w.record(&id, &session, &before)).await;
            }
            this.finish(&job_id, &sink, result, exit);
        }));
    }
}

impl Work {
    /// The kind of work, as the job's span names it.
    fn kind(&self) -> &'static str {
        match self {
            Work::Tool { .. } => "tool",
            Work::Command { .. } => "command",
            Work::Code { .. } => "code",
            Work::Pty { .. } => "pty",
        }
    }
}

async fn run_tool(
    resolved: Resolved,
    arguments: serde_json::Map<String, Value>,
    cwd: Option<PathBuf>,
    job_id: &str,
    sink: Arc<LogSink>,
    live: Arc<Live>,
    cancel: CancellationToken,
) -> (Option<ToolOutput>, JobEventKind) {
    // The provider call's span; the server is handed its trace context (`meta.trace`, which an
    // MCP provider puts in the request's `_meta`), and egress attempts of the provider's own
    // proxy made while it runs are placed under it.
    let provider = resolved.entry.provider.as_str();
    let span = crate::telemetry::trace_span!(
        "provider call",
        otel.kind = "client",
        axp.provider = %provider,
        axp.tool = %resolved.entry.spec.name,
    );
    let _window = crate::telemetry::window(NetScope::Provider(provider.to_string()), &span);
    let mut meta = json!({"job_id": job_id, "cwd": cwd});
    if let Some(trace) = crate::telemetry::outgoing(&span) {
        meta["trace"] = Value::Object(trace);
    }
    let call = ToolCall { tool: resolved.entry.spec.name.clone(), arguments, meta: Some(meta) };
    let result = resolved.provider.call(call, sink.clone(), cancel.clone()).instrument(span.clone()).await;
    if let Err(e) = &result {
        crate::telemetry::failed(&span, &e.to_string());
    }
    match result {
        Ok(output) => {
            let exit = JobEventKind::Exit {
                state: JobState::Exited,
                code: Some(i32::from(output.is_error)),
                signal: None,
                error: None,
            };
            (Some(output), exit)
        }
        Err(ProviderError::Cancelled) => (
            None,
            JobEventKind::Exit {
                state: JobState::Killed,
                code: None,
                signal: Some(live.stop_reason().into()),
                error: None,
            },
        ),
        Err(e) => {
            let rpc = provider_error_to_rpc(&e);
            (
                None,
                JobEventKind::Exit {
                    state: JobState::Failed,
                    code: None,
                    signal: None,
                    error: serde_json::to_value(rpc).ok(),
                },
            )
        }
    }
}

/// The most a job keeps in memory of its output: nothing. Output streams to the log in chunks
/// of at most this many bytes.
const CHUNK: usize = 16 * 1024;

async fn run_command(
    spec: ProcessSpec,
    launcher: Arc<dyn Launcher>,
    sink: Arc<LogSink>,
    live: Arc<Live>,
    stdin_rx: Option<mpsc::Receiver<Option<Vec<u8>>>>,
    cancel: CancellationToken,
) -> JobEventKind {
    let failed = failed_event;
    let mut cmd = match launcher.command(&spec) {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot prepare the command: {e}")),
    };
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut process = match Process::spawn(cmd).await {
        Ok(p) => p,
        Err(e) => return failed(format!("cannot start `{}`: {e}", spec.program)),
    };
    *lock(&live.pid) = process.id();
    if let (Some(mut stdin), Some(mut rx)) = (process.take_stdin(), stdin_rx) {
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                match msg {
                    Some(data) => {
                        if stdin.write_all(&data).await.is_err() {
                            break;
                        }
                        let _ = stdin.flush().await;
                    }
                    None => break,
                }
            }
        });
    }
    let sink: JobSink = sink;
    process.pump_pipes(&sink, Capture::stream(CHUNK), Capture::stream(CHUNK));
    // The runner returns once the output is settled, so output always precedes the exit event
    // in the log; a background process still holding a pipe is killed with the group.
    let finished = process.wait(&cancel, None).await;
    *lock(&live.stdin) = None;
    *lock(&live.pid) = None;
    ended_event(finished.ended, &live)
}

/// The exit event of a job's process that ran: how it ended, or why it was stopped.
fn ended_event(ended: Ended, live: &Live) -> JobEventKind {
    match ended {
        Ended::Exited(status) => exit_event(&status),
        Ended::Cancelled | Ended::TimedOut => JobEventKind::Exit {
            state: JobState::Killed,
            code: None,
            signal: Some(live.stop_reason().into()),
            error: None,
        },
        Ended::WaitFailed(e) => failed_event(format!("waiting for the process failed: {e}")),
    }
}
