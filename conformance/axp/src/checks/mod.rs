//! The run: the checks in the order they depend on one another, and what they share (the
//! session, the listing, the chosen tool, the finished jobs). Each area's checks live in a file of
//! their own; each check returns a [`Verdict`] and never panics, so one broken answer fails one
//! check and the run goes on. A check that needs something an earlier one could not get (no
//! session, no callable tool, no `proc.spawn`) is skipped with the reason.

mod bad_input;
mod caps;
mod catalog;
mod jobs;
mod session;

use std::time::{Duration, Instant};

use axp_protocol::CapabilitySet;
use axp_protocol::methods::{IndexEntry, JobEvent, SessionOpenResult};
use serde_json::{Map, Value, json};

use crate::report::{Report, Stop, Verdict, ensure};
use crate::tool::Choice;
use crate::wire::Conn;

/// What the command line asked for.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) url: String,
    pub(crate) operator_token: Option<String>,
    /// `--tool` and `--arguments`: the tool the tool checks call instead of one chosen here.
    pub(crate) tool: Option<(String, Map<String, Value>)>,
    /// The longest one call may take.
    pub(crate) timeout: Duration,
    /// The longest a job the runner starts may take to end.
    pub(crate) job_timeout: Duration,
}

/// The session the runner opened: its `session.open` result and a connection that presents its
/// token (and no operator credential: an agent works with its token alone).
#[derive(Debug)]
struct Session {
    open: SessionOpenResult,
    conn: Conn,
    /// Its grants, as `session.open` listed them.
    grants: CapabilitySet,
    /// Whether its grants allow `proc.spawn` (command jobs).
    spawn: bool,
}

/// A job the runner followed to its end, and its whole log.
#[derive(Debug, Clone)]
struct Finished {
    id: String,
    events: Vec<Value>,
}

/// One run against one endpoint.
#[derive(Debug)]
pub(crate) struct Runner {
    opts: Options,
    pub(crate) report: Report,
    session: Option<Session>,
    /// Why there is no session, for the checks that skip without one.
    no_session: String,
    /// Every tool the session's token may see, in the endpoint's order.
    listing: Option<Vec<IndexEntry>>,
    tool: Option<Choice>,
    /// Why no tool is called, for the checks that skip without one.
    no_tool: String,
    tool_job: Option<Finished>,
    command_job: Option<Finished>,
    /// The attenuated token of `cap.attenuate` and the one tool it grants; checked again once
    /// its session is closed.
    child: Option<(String, String)>,
}

impl Runner {
    pub(crate) fn new(opts: Options, report: Report) -> Self {
        Self {
            opts,
            report,
            session: None,
            no_session: "no session was opened".into(),
            listing: None,
            tool: None,
            no_tool: "no tool was chosen".into(),
            tool_job: None,
            command_job: None,
            child: None,
        }
    }

    /// The tool the tool checks used, for `--json`.
    pub(crate) fn tool_json(&self) -> Value {
        match &self.tool {
            Some(t) => json!({"name": t.name, "arguments": t.arguments, "why": t.why}),
            None => Value::Null,
        }
    }

    /// Runs every check once, in order.
    pub(crate) async fn run(&mut self) {
        let v = self.bad_bearer().await;
        self.record("auth.bad-bearer", v);
        let v = self.open().await;
        self.record("session.open", v);
        let v = self.no_credential().await;
        self.record("auth.no-credential", v);

        let v = self.index_list().await;
        self.record("index.list", v);
        let v = self.index_paging().await;
        self.record("index.paging", v);
        let v = self.choose_tool().await;
        self.record("tool.choose", v);
        let v = self.index_query().await;
        self.record("index.query", v);
        let v = self.describe_listed().await;
        self.record("describe.tool", v);
        let v = self.describe_unknown().await;
        self.record("describe.unknown", v);

        let v = self.tool_job().await;
        self.record("job.start.tool", v);
        let v = self.replay(false).await;
        self.record("job.replay.tool", v);
        let v = self.command_job().await;
        self.record("job.start.command", v);
        let v = self.replay(true).await;
        self.record("job.replay.command", v);
        let v = self.attach_limit().await;
        self.record("job.attach.limit", v);
        let v = self.attach_sse().await;
        self.record("job.attach.sse", v);
        let v = self.status().await;
        self.record("job.status", v);
        let v = self.list().await;
        self.record("job.list", v);
        let v = self.cancel().await;
        self.record("job.cancel", v);
        let v = self.unknown_job().await;
        self.record("job.unknown", v);

        let v = self.attenuate().await;
        self.record("cap.attenuate", v);
        let v = self.attenuated_denied().await;
        self.record("cap.attenuate.denied", v);
        let v = self.attenuated_widen().await;
        self.record("cap.attenuate.widen", v);
        let v = self.forged_token().await;
        self.record("auth.forged-token", v);

        let v = self.parse_error().await;
        self.record("bad.parse", v);
        let v = self.batch().await;
        self.record("bad.batch", v);
        let v = self.unknown_method().await;
        self.record("bad.method", v);
        let v = self.bad_params().await;
        self.record("bad.params", v);
        let v = self.bad_tool_arguments().await;
        self.record("bad.tool-arguments", v);

        let v = self.close().await;
        self.record("session.close", v);
    }

    fn record(&mut self, id: &str, v: Verdict) {
        self.report.record(id, v);
    }

    /// A connection with no credential but the operator's (when one was given).
    fn operator(&self) -> Conn {
        Conn::new(&self.opts.url, self.opts.timeout).with_bearer(self.opts.operator_token.as_deref())
    }

    /// The session's connection, or a skip saying why there is none.
    fn conn(&self) -> Result<Conn, Stop> {
        self.session.as_ref().map(|s| s.conn.clone()).ok_or_else(|| Stop::Skip(self.no_session.clone()))
    }

    /// A new connection with the session's token: another client, as after a reconnect.
    fn reconnect(&self) -> Result<Conn, Stop> {
        let s = self.session.as_ref().ok_or_else(|| Stop::Skip(self.no_session.clone()))?;
        Ok(Conn::new(&self.opts.url, self.opts.timeout).with_token(Some(&s.open.session_id), &s.open.cap_token))
    }

    fn chosen(&self) -> Result<Choice, Stop> {
        self.tool.clone().ok_or_else(|| Stop::Skip(self.no_tool.clone()))
    }

    /// Follows a job from `from` to its end with `job.attach` (each call waiting up to 5 s for
    /// news) and returns every event, as sent.
    async fn follow(&self, conn: &mut Conn, job: &str, from: u64, limit: Option<u64>) -> Result<Vec<Value>, Stop> {
        let deadline = Instant::now() + self.opts.job_timeout;
        let mut seq = from;
        let mut all = Vec::new();
        let wait_ms = self.opts.timeout.as_millis().saturating_sub(1000).clamp(100, 5000);
        loop {
            let mut params = json!({"job_id": job, "from_seq": seq, "wait_ms": wait_ms});
            if let Some(l) = limit {
                params["limit"] = json!(l);
            }
            let r = conn.ok("job.attach", params).await?;
            let events =
                r.get("events").and_then(Value::as_array).ok_or_else(|| no_field("job.attach", "events", &r))?;
            let next =
                r.get("next_seq").and_then(Value::as_u64).ok_or_else(|| no_field("job.attach", "next_seq", &r))?;
            let done = r.get("done").and_then(Value::as_bool).ok_or_else(|| no_field("job.attach", "done", &r))?;
            if let Some(l) = limit {
                ensure(events.len() as u64 <= l, || format!("job.attach with limit {l} sent {} events", events.len()))?;
            }
            ensure(next == seq + events.len() as u64, || {
                format!("job.attach from {seq} sent {} events but says next_seq {next}", events.len())
            })?;
            all.extend(events.iter().cloned());
            seq = next;
            if done {
                return Ok(all);
            }
            if Instant::now() > deadline {
                return Err(Stop::Fail(format!(
                    "job {job} did not end within {} s ({} events read)",
                    self.opts.job_timeout.as_secs(),
                    all.len()
                )));
            }
        }
    }
}

/// The failure of an answer that lacks a field (or has it with the wrong type).
fn no_field(method: &str, field: &str, got: &Value) -> Stop {
    Stop::Fail(format!("the `{method}` result has no `{field}` of the right type: {}", crate::wire::short(got)))
}

/// Checks a whole job log (read from seq 0): every event has the wire shape of a job event
/// (`JobEvent`: `job_id`, `seq`, `ts_ms`, a known `kind`), names this job, the seqs are dense
/// from 0, and exactly one `exit` ends it. Returns the exit event.
fn check_log(job: &str, events: &[Value]) -> Result<Value, Stop> {
    ensure(!events.is_empty(), || format!("job {job} ended with an empty log"))?;
    for (i, e) in events.iter().enumerate() {
        let ev: JobEvent = serde_json::from_value(e.clone())
            .map_err(|err| Stop::Fail(format!("event {i} is not a job event ({err}): {}", crate::wire::short(e))))?;
        ensure(ev.job_id == job, || format!("event {i} names job {} instead of {job}", ev.job_id))?;
        ensure(ev.seq == i as u64, || format!("event {i} has seq {} (seqs must be dense from 0)", ev.seq))?;
        let is_exit = e.get("kind").and_then(Value::as_str) == Some("exit");
        ensure(is_exit == (i + 1 == events.len()), || {
            format!(
                "event {i} of {} is{} an exit: exactly one exit ends a log",
                events.len(),
                if is_exit { "" } else { " not" }
            )
        })?;
    }
    Ok(events[events.len() - 1].clone())
}

/// True when an error names `field` (in `data.pointer`, `data.reason` or the message), as an
/// InvalidParams error must for the caller to know what to fix.
fn names_field(e: &axp_protocol::RpcError, field: &str) -> bool {
    let data = e.data.as_ref();
    let pointer = data.and_then(|d| d.get("pointer")).and_then(Value::as_str).unwrap_or_default();
    pointer.trim_start_matches('/') == field || e.reason().contains(field) || e.message.contains(field)
}

/// `data.missing` of a CapabilityDenied error.
fn missing(e: &axp_protocol::RpcError) -> Option<&str> {
    e.data.as_ref().and_then(|d| d.get("missing")).and_then(Value::as_str)
}
