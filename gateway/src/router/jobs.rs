//! The `job.start` method and what it starts: a tool call (through approval when the operator
//! asks for it), a command (optionally on a terminal) or a code-mode program, each audited; and
//! the status a job is reported with.

use std::time::Duration;

use axp_audit::{Kind, digest_json};
use axp_protocol::RpcError;
use axp_protocol::methods::{CommandSpec, JobStartParams};
use axp_store::JobRecord;
use serde_json::{Map, Value, json};

use super::{Ctx, params};
use crate::auth::session::{Session, denied};
use crate::execution::jobs::Work;
use crate::gateway::Gateway;

impl Gateway {
    pub fn start_tool_job(
        &self,
        s: &Session,
        name: &str,
        arguments: Map<String, Value>,
        spec: Value,
        idempotency_key: Option<String>,
        timeout: Option<Duration>,
    ) -> Result<JobRecord, RpcError> {
        let resolved = self.ready_tool(s, name, &arguments)?;
        self.guard.quotas.admit(&s.id, || self.jobs.live_count(&s.id))?;
        if self.guard.approvals.required(name, resolved.entry.provider.as_str(), &resolved.entry.spec) {
            return super::approvals::park(self, s, name, arguments, idempotency_key, timeout, spec);
        }
        let (job, _) = self.jobs.start(
            &s.id,
            "tool",
            spec,
            idempotency_key,
            timeout,
            Work::Tool { resolved: Box::new(resolved), arguments, cwd: Some(s.workspace.clone()) },
        )?;
        Ok(job)
    }

    pub async fn job_start(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session(p, ctx)?;
        let params: JobStartParams = params(p)?;
        let timeout = params.timeout_s.map(Duration::from_secs);
        let given =
            [params.command.is_some(), params.code.is_some(), params.tool.is_some()].iter().filter(|x| **x).count();
        if given != 1 {
            return Err(RpcError::invalid_params("give exactly one of `command`, `code` or `tool`"));
        }
        if params.pty.is_some() && params.command.is_none() {
            return Err(RpcError::invalid_params("`pty` goes with `command` (a terminal for a program you start)"));
        }
        let job = if let Some(tool) = &params.tool {
            let arguments = params.arguments.clone().unwrap_or_default();
            let spec = json!({"tool": tool, "arguments": arguments, "origin": "axp"});
            let digest = digest_json(&Value::Object(arguments.clone()));
            // The call's span holds its start; the job (and its provider call) run on under it.
            let span = crate::telemetry::trace_span!("tool call", axp.tool = %tool, axp.session = %s.id);
            let started = span
                .in_scope(|| self.start_tool_job(&s, tool, arguments, spec, params.idempotency_key.clone(), timeout));
            if let Err(e) = &started {
                crate::telemetry::failed(&span, &e.message);
            }
            let job = started?;
            let detail = json!({"tool": tool, "args_sha256": digest, "job_id": job.id, "via": "job.start"});
            self.audit(Kind::ToolCall, Some(&s.id), detail).await?;
            job
        } else if let Some(command) = &params.command {
            let job = self.start_command(&s, command, &params, timeout)?;
            self.audit(
                Kind::Command,
                Some(&s.id),
                json!({"job_id": job.id, "command": job.spec.get("command"), "cwd": job.spec.get("cwd")}),
            )
            .await?;
            job
        } else if let Some(code) = &params.code {
            let presented =
                p.get("cap_token").and_then(Value::as_str).map(str::to_string).or_else(|| ctx.token.clone());
            if !s.caps.allows_spawn() {
                return Err(denied("proc.spawn", "run a program"));
            }
            self.guard.quotas.admit(&s.id, || self.jobs.live_count(&s.id))?;
            let job = crate::codemode::start(self, &s, presented.as_deref(), code, &params, timeout)?;
            self.audit(
                Kind::Command,
                Some(&s.id),
                json!({"job_id": job.id, "code": job.spec.get("code"), "cwd": job.spec.get("cwd")}),
            )
            .await?;
            job
        } else {
            return Err(RpcError::invalid_params("give exactly one of `command`, `code` or `tool`"));
        };
        if params.wait == Some(true) {
            let out = self.follow(&job, ctx, None).await?;
            return Ok(json!({"job_id": job.id, "result": out}));
        }
        Ok(json!({"job_id": job.id, "state": job.state}))
    }

    pub fn start_command(
        &self,
        s: &Session,
        command: &CommandSpec,
        params: &JobStartParams,
        timeout: Option<Duration>,
    ) -> Result<JobRecord, RpcError> {
        self.guard.quotas.admit(&s.id, || self.jobs.live_count(&s.id))?;
        let argv = match command {
            CommandSpec::Argv(v) if !v.is_empty() => v.clone(),
            CommandSpec::Argv(_) => {
                return Err(RpcError::invalid_params("`command` must not be empty"));
            }
            CommandSpec::Shell(sh) => vec!["/bin/sh".into(), "-c".into(), sh.clone()],
        };
        let spec = crate::execution::sandboxing::command_spec(&self.options.extra_read, s, argv.clone(), params)?;
        let launcher = self.sessions.tiers().launcher(s.tier)?;
        let mut record = json!({"command": argv, "cwd": spec.cwd, "origin": "axp"});
        let work = match &params.pty {
            None => Work::Command { spec, launcher },
            Some(pty) => {
                if !s.caps.allows_pty() {
                    return Err(denied("pty.open", "give a job a terminal"));
                }
                crate::execution::pty::check_size(pty.rows, pty.cols).map_err(RpcError::invalid_params)?;
                record["pty"] = json!({"rows": pty.rows, "cols": pty.cols});
                Work::Pty { spec, launcher, rows: pty.rows, cols: pty.cols }
            }
        };
        let (job, _) = self.jobs.start(&s.id, "command", record, params.idempotency_key.clone(), timeout, work)?;
        Ok(job)
    }

    pub fn job_status(&self, j: &JobRecord) -> Value {
        let mut v = json!({
            "job_id": j.id,
            "kind": j.kind,
            "state": j.state,
            "next_seq": self.jobs.next_seq(&j.id),
            "created_ms": j.created_ms,
        });
        if let Some(c) = j.exit_code {
            v["code"] = json!(c);
        }
        if let Some(s) = &j.signal {
            v["signal"] = json!(s);
        }
        if let Some(e) = &j.error {
            v["error"] = e.clone();
        }
        if let Some(t) = j.ended_ms {
            v["ended_ms"] = json!(t);
        }
        if let Some(t) = j.spec.get("tool") {
            v["tool"] = t.clone();
        }
        if let Some(c) = j.spec.get("command") {
            v["command"] = c.clone();
        }
        v
    }
}
