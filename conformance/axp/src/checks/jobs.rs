//! Durable jobs: `job.start` of a tool call and of a command, `job.attach` from seq 0 and the
//! replay contract (the events from any seq N on, read again on a new connection after the job
//! ended, are exactly the tail of the whole log), paging with `limit`, the SSE form of
//! `job.attach`, `job.status`, `job.list`, `job.cancel` of a long job, and an unknown job id.

use std::time::Instant;

use serde_json::{Value, json};

use super::{Finished, Runner, check_log};
use crate::report::{Stop, Verdict, ensure};
use crate::wire::{Conn, describe, short};

/// The command job: output on both streams, spread over time, and a non-zero exit.
const COMMAND: [&str; 3] = ["sh", "-c", "for i in 1 2 3 4 5; do echo line$i; sleep 0.05; done; echo oops >&2; exit 3"];
const COMMAND_STDOUT: &str = "line1\nline2\nline3\nline4\nline5\n";
/// The long job `job.cancel` ends: it says it started, then would sleep a minute.
const LONG: [&str; 3] = ["sh", "-c", "echo started; exec sleep 60"];
/// A job id no endpoint has.
const NO_SUCH_JOB: &str = "j_axp_conformance_no_such_job";

fn text_of(events: &[Value], kind: &str) -> String {
    events.iter().filter(|e| e["kind"] == kind).filter_map(|e| e["data"].as_str()).collect()
}

fn job_id_of(method: &str, r: &Value) -> Result<String, Stop> {
    r.get("job_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| Stop::Fail(format!("the {method} result has no job_id: {}", short(r))))
}

impl Runner {
    pub(super) fn spawn_or_skip(&self) -> Result<(), Stop> {
        match &self.session {
            None => Err(Stop::Skip(self.no_session.clone())),
            Some(s) if !s.spawn => Err(Stop::Skip(
                "the session lacks proc.spawn, so no command job can be started (SKIPPED, not failed)".into(),
            )),
            Some(_) => Ok(()),
        }
    }

    /// The command job if there is one, else the tool job, for the checks that need any finished
    /// job.
    pub(super) fn some_job(&self) -> Result<Finished, Stop> {
        self.command_job.clone().or_else(|| self.tool_job.clone()).ok_or_else(|| {
            Stop::Skip(if self.session.is_none() {
                self.no_session.clone()
            } else {
                "neither job.start.tool nor job.start.command gave a finished job".into()
            })
        })
    }

    /// `job.start {tool, arguments}` of the chosen tool: a job id and state `running`; its log,
    /// attached from seq 0 until `done`, is well formed (see `check_log`), holds a `result`, and
    /// ends with an `exit` in state `exited`.
    pub(super) async fn tool_job(&mut self) -> Verdict {
        let mut c = self.conn()?;
        let tool = self.chosen()?;
        let r = c.ok("job.start", json!({"tool": tool.name, "arguments": tool.arguments})).await?;
        let id = job_id_of("job.start", &r)?;
        match r.get("state").and_then(Value::as_str) {
            Some("running") | None => {}
            Some("awaiting_approval") => {
                // The runner is no operator: it cannot approve, so it ends the parked job.
                let _ = c.ok("job.cancel", json!({"job_id": id})).await;
                return Err(Stop::Skip(format!("{} waits for an operator's approval on this endpoint", tool.name)));
            }
            Some(other) => return Err(Stop::Fail(format!("job.start answered state {other:?}, not \"running\""))),
        }
        let events = self.follow(&mut c, &id, 0, None).await?;
        let exit = check_log(&id, &events)?;
        ensure(events.iter().any(|e| e["kind"] == "result"), || {
            format!("the log of {} has no result event: {}", tool.name, short(&Value::Array(events.clone())))
        })?;
        ensure(exit["state"] == "exited", || format!("the tool job ended {}", short(&exit)))?;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
        self.tool_job = Some(Finished { id: id.clone(), events: events.clone() });
        Ok(format!("{id} ({}): {} event(s) [{}], exit state exited", tool.name, events.len(), kinds.join(", ")))
    }

    /// `job.start {command}` (needs `proc.spawn`): a shell loop printing five lines, a line on
    /// stderr and exiting 3; attached from seq 0, its stdout is exactly the five lines, stderr has
    /// its line, and the exit says `exited` with code 3.
    pub(super) async fn command_job(&mut self) -> Verdict {
        self.spawn_or_skip()?;
        let mut c = self.conn()?;
        let r = c.ok("job.start", json!({"command": COMMAND})).await?;
        let id = job_id_of("job.start", &r)?;
        let events = self.follow(&mut c, &id, 0, None).await?;
        let exit = check_log(&id, &events)?;
        let out = text_of(&events, "stdout");
        ensure(out == COMMAND_STDOUT, || format!("stdout was {out:?}, not {COMMAND_STDOUT:?}"))?;
        ensure(text_of(&events, "stderr").contains("oops"), || "stderr lacks the line printed there".into())?;
        ensure(exit["state"] == "exited" && exit["code"] == 3, || {
            format!("the command ended {} instead of exited with code 3", short(&exit))
        })?;
        self.command_job = Some(Finished { id: id.clone(), events: events.clone() });
        Ok(format!("{id}: {} event(s), stdout and stderr as printed, exited with code 3", events.len()))
    }

    /// The replay contract, on a new connection: for every N from 0 to the end, the events
    /// attached from seq N are exactly the tail of the whole log from N (and from the end, none).
    pub(super) async fn replay(&mut self, command: bool) -> Verdict {
        if command {
            self.spawn_or_skip()?;
        }
        let (job, which) = if command {
            (self.command_job.clone(), "job.start.command")
        } else {
            (self.tool_job.clone(), "job.start.tool")
        };
        let Some(job) = job else {
            return Err(Stop::Skip(if self.session.is_none() {
                self.no_session.clone()
            } else {
                format!("{which} gave no finished job to replay")
            }));
        };
        let mut again = self.reconnect()?;
        for n in 0..=job.events.len() {
            let tail = self.follow(&mut again, &job.id, n as u64, None).await?;
            ensure(tail == job.events[n..], || {
                format!(
                    "from seq {n}: {} event(s) {} where the tail of the log is {}",
                    tail.len(),
                    short(&Value::Array(tail.clone())),
                    short(&Value::Array(job.events[n..].to_vec()))
                )
            })?;
        }
        Ok(format!(
            "{}: from each seq 0..={} on a new connection, the events equal the tail of the whole log",
            job.id,
            job.events.len()
        ))
    }

    /// `job.attach` with `limit: 1`, walked to the end: at most one event a call, and the same
    /// log as unpaged.
    pub(super) async fn attach_limit(&mut self) -> Verdict {
        let job = self.some_job()?;
        let mut c = self.reconnect()?;
        let got = self.follow(&mut c, &job.id, 0, Some(1)).await?;
        ensure(got == job.events, || format!("limit 1 walked {} event(s) of {}", got.len(), job.events.len()))?;
        Ok(format!("{}: {} call(s) of limit 1 walk the same {} event(s)", job.id, got.len() + 1, got.len()))
    }

    /// `job.attach` asked with `Accept: text/event-stream`: the events from seq 1 arrive as
    /// `job.event` notifications equal to the log's tail, then the response with `next_seq` at
    /// the end and `done`.
    pub(super) async fn attach_sse(&mut self) -> Verdict {
        let job = self.some_job()?;
        let from = 1.min(job.events.len() - 1);
        let mut c = self.reconnect()?.streaming();
        let reply = c.reply("job.attach", json!({"job_id": job.id, "from_seq": from})).await?;
        let streamed: Vec<Value> = reply
            .notifications
            .iter()
            .filter(|n| n.method == "job.event")
            .map(|n| n.params.clone().unwrap_or(Value::Null))
            .collect();
        let r = reply.clone().into_result().map_err(|e| format!("the streamed job.attach ended with {e}"))?;
        ensure(streamed == job.events[from..], || {
            format!(
                "the stream carried {} job.event(s) {} where the tail from {from} is {}",
                streamed.len(),
                short(&Value::Array(streamed.clone())),
                short(&Value::Array(job.events[from..].to_vec()))
            )
        })?;
        ensure(r["done"] == true && r["next_seq"] == job.events.len(), || {
            format!("the streamed response is {}, not next_seq {} and done", short(&r), job.events.len())
        })?;
        Ok(format!("{}: {} job.event notification(s) from seq {from}, then next_seq and done", job.id, streamed.len()))
    }

    /// `job.status` of a finished job: its id, the state and code of its exit event, and
    /// `next_seq` at the end of its log.
    pub(super) async fn status(&mut self) -> Verdict {
        let job = self.some_job()?;
        let mut c = self.conn()?;
        let st = c.ok("job.status", json!({"job_id": job.id})).await?;
        let exit = &job.events[job.events.len() - 1];
        ensure(st["job_id"] == job.id.as_str(), || format!("job.status names another job: {}", short(&st)))?;
        ensure(st["state"] == exit["state"], || {
            format!("state {} where the exit event says {}", st["state"], exit["state"])
        })?;
        ensure(exit.get("code").is_none_or(|code| &st["code"] == code), || {
            format!("code {} where the exit event says {}", st["code"], exit["code"])
        })?;
        ensure(st["next_seq"] == job.events.len(), || {
            format!("next_seq {} for a log of {}", st["next_seq"], job.events.len())
        })?;
        Ok(format!("{}: state {}, next_seq {}", job.id, st["state"].as_str().unwrap_or_default(), st["next_seq"]))
    }

    /// `job.list` holds every job the runner finished, each with the state of its exit.
    pub(super) async fn list(&mut self) -> Verdict {
        self.some_job()?;
        let jobs: Vec<Finished> = self.tool_job.iter().chain(self.command_job.iter()).cloned().collect();
        let mut c = self.conn()?;
        let r = c.ok("job.list", json!({})).await?;
        let listed = r.get("jobs").and_then(Value::as_array).ok_or_else(|| super::no_field("job.list", "jobs", &r))?;
        for job in &jobs {
            let entry = listed.iter().find(|j| j["job_id"] == job.id.as_str()).ok_or_else(|| {
                Stop::Fail(format!("job.list does not hold {} ({} job(s) listed)", job.id, listed.len()))
            })?;
            let exit = &job.events[job.events.len() - 1];
            ensure(entry["state"] == exit["state"], || {
                format!("{} is listed {} but ended {}", job.id, entry["state"], exit["state"])
            })?;
        }
        Ok(format!("{} job(s) listed, holding the {} finished here with their states", listed.len(), jobs.len()))
    }

    /// `job.cancel` of a long command job (needs `proc.spawn`): once it has printed, it is
    /// `running`; cancelled, it ends in state `killed` long before its minute is up, its log
    /// ends with that exit, and `job.status` says `killed`.
    pub(super) async fn cancel(&mut self) -> Verdict {
        self.spawn_or_skip()?;
        let mut c = self.conn()?;
        let r = c.ok("job.start", json!({"command": LONG, "timeout_s": 120})).await?;
        let id = job_id_of("job.start", &r)?;
        let v = self.cancel_running(&mut c, &id).await;
        if v.is_err() {
            // Whatever went wrong, the runner leaves no minute-long job behind.
            let _ = c.ok("job.cancel", json!({"job_id": id})).await;
        }
        v
    }

    async fn cancel_running(&self, c: &mut Conn, id: &str) -> Verdict {
        let deadline = Instant::now() + self.opts.job_timeout;
        loop {
            let r = c.ok("job.attach", json!({"job_id": id, "from_seq": 0, "wait_ms": 2000})).await?;
            if r["events"].as_array().is_some_and(|e| !e.is_empty()) {
                break;
            }
            ensure(Instant::now() < deadline, || {
                format!("{id} printed nothing within {} s", self.opts.job_timeout.as_secs())
            })?;
        }
        let st = c.ok("job.status", json!({"job_id": id})).await?;
        ensure(st["state"] == "running", || format!("the long job is {} before the cancel, not running", st["state"]))?;
        let asked = Instant::now();
        let r = c.ok("job.cancel", json!({"job_id": id})).await?;
        ensure(r.get("cancelled").is_none_or(|v| v == true), || format!("job.cancel answered {}", short(&r)))?;
        let events = self.follow(c, id, 0, None).await?;
        let took = asked.elapsed();
        let exit = check_log(id, &events)?;
        ensure(exit["state"] == "killed", || format!("the cancelled job ended {}, not killed", short(&exit)))?;
        ensure(text_of(&events, "stdout") == "started\n", || "the cancelled job's output changed".into())?;
        let st = c.ok("job.status", json!({"job_id": id})).await?;
        ensure(st["state"] == "killed", || format!("job.status says {} after the cancel, not killed", st["state"]))?;
        Ok(format!("{id}: running, cancelled, ended killed {} ms later", took.as_millis()))
    }

    /// `job.status` of a job id the endpoint never issued: -32005 UnknownJob.
    pub(super) async fn unknown_job(&mut self) -> Verdict {
        let mut c = self.conn()?;
        let e = c.err("job.status", json!({"job_id": NO_SUCH_JOB})).await?;
        ensure(e.code == -32005, || format!("an unknown job got {} instead of -32005 UnknownJob", describe(&e)))?;
        Ok(format!("{NO_SUCH_JOB}: {}", describe(&e)))
    }
}
