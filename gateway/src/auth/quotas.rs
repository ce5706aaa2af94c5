//! Per-session quotas: tool calls and job starts per rolling minute, jobs live at
//! once (running or awaiting approval), and the total bytes of output a session's jobs may
//! write. Exceeding one gives `LimitExceeded` (-32007) with `data.limit` naming it; a running
//! job that crosses the output limit is stopped and ends with that error. Counters live in
//! memory: a gateway restart starts them afresh (the limits are against runaway agents, not an
//! accounting system). This module counts; the dispatcher and `jobs.rs` ask it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axp_protocol::{ErrorCode, RpcError};

use crate::config::operator_policy::QuotaSettings;

/// One session's output so far, against its limit.
#[derive(Debug)]
pub struct OutputMeter {
    used: AtomicU64,
    limit: u64,
}

impl OutputMeter {
    /// Adds `n` bytes; `false` once the total is over the limit.
    pub fn add(&self, n: u64) -> bool {
        self.used.fetch_add(n, Ordering::SeqCst) + n <= self.limit
    }

    fn over(&self) -> bool {
        self.used.load(Ordering::SeqCst) > self.limit
    }
}

#[derive(Default)]
struct Usage {
    calls: VecDeque<Instant>,
    output: Option<Arc<OutputMeter>>,
}

#[derive(Default)]
pub struct Quotas {
    limits: QuotaSettings,
    usage: Mutex<HashMap<String, Usage>>,
}

const MINUTE: Duration = Duration::from_secs(60);

impl Quotas {
    pub fn new(limits: QuotaSettings) -> Self {
        Self { limits, usage: Mutex::default() }
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, HashMap<String, Usage>> {
        self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Admits one tool call or job start of `session` (`live_jobs` counts its live jobs, asked
    /// only when that quota is set); counts it.
    pub fn admit(&self, session: &str, live_jobs: impl FnOnce() -> usize) -> Result<(), RpcError> {
        if let Some(max) = self.limits.concurrent_jobs
            && let live_jobs = live_jobs()
            && live_jobs >= max as usize
        {
            return Err(exceeded(
                "concurrent_jobs",
                u64::from(max),
                format!(
                    "the session already has {live_jobs} live jobs (quota `concurrent_jobs` = {max}); wait for one to end or cancel one"
                ),
            ));
        }
        if let Some(m) = self.output_meter(session)
            && m.over()
        {
            return Err(self.output_exceeded());
        }
        if let Some(max) = self.limits.calls_per_minute {
            let now = Instant::now();
            let mut usage = self.usage();
            let u = usage.entry(session.to_string()).or_default();
            while u.calls.front().is_some_and(|t| now.duration_since(*t) >= MINUTE) {
                u.calls.pop_front();
            }
            if u.calls.len() >= max as usize {
                let wait = u.calls.front().map_or(0, |t| MINUTE.saturating_sub(now.duration_since(*t)).as_secs() + 1);
                return Err(exceeded(
                    "calls_per_minute",
                    u64::from(max),
                    format!(
                        "the session made {max} calls in the last minute (quota `calls_per_minute` = {max}); retry in {wait} s"
                    ),
                ));
            }
            u.calls.push_back(now);
        }
        Ok(())
    }

    /// The session's output meter, when an output quota is configured.
    pub fn output_meter(&self, session: &str) -> Option<Arc<OutputMeter>> {
        let limit = self.limits.job_output_bytes?;
        let mut usage = self.usage();
        let u = usage.entry(session.to_string()).or_default();
        Some(u.output.get_or_insert_with(|| Arc::new(OutputMeter { used: AtomicU64::new(0), limit })).clone())
    }

    /// The error of a session over its output quota.
    pub fn output_exceeded(&self) -> RpcError {
        let limit = self.limits.job_output_bytes.unwrap_or(0);
        exceeded(
            "job_output_bytes",
            limit,
            format!(
                "the session's jobs wrote more than {limit} bytes of output (quota `job_output_bytes`); open a new session"
            ),
        )
    }
}

fn exceeded(limit: &str, value: u64, reason: String) -> RpcError {
    RpcError::new(ErrorCode::LimitExceeded, reason).with_data("limit", limit).with_data("max", value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_named() {
        let q = Quotas::new(QuotaSettings {
            calls_per_minute: Some(2),
            concurrent_jobs: Some(1),
            job_output_bytes: Some(10),
        });
        assert!(q.admit("s", || 0).is_ok());
        assert!(q.admit("s", || 0).is_ok());
        let e = q.admit("s", || 0).unwrap_err();
        assert_eq!(e.data.as_ref().unwrap()["limit"], "calls_per_minute");
        assert!(q.admit("t", || 0).is_ok(), "quotas are per session");
        assert_eq!(q.admit("t", || 1).unwrap_err().data.unwrap()["limit"], "concurrent_jobs");
        let m = q.output_meter("u").unwrap();
        assert!(m.add(10));
        assert!(!m.add(1));
        assert_eq!(q.admit("u", || 0).unwrap_err().data.unwrap()["limit"], "job_output_bytes");
    }
}
