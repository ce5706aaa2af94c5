//! Jobs that wait for an operator: the registry's side of approval. A parked job is recorded in
//! state `awaiting_approval`, with the request as the first event of its log and a live entry so
//! that attached clients wait for the decision; exactly one decision (approve, deny or cancel)
//! claims it, and then resumes it (its work launched) or ends it unrun. What needs approval, who
//! may decide and the audit of each decision belong to `router/approvals.rs`; this file keeps
//! only the job's state straight, across a restart too ([`Jobs::adopt_parked`]).
//!
//! Replicas sharing a PostgreSQL store: a parked job is held by exactly one replica, its
//! `owner` in the store (the one that parked it), and only that one has it in memory — adopted
//! at start, or from a replica whose lease ran out (`Store::adopt_orphaned_parked`, which gives
//! each such job to one replica). A decision that arrives at another replica first takes the
//! job over ([`Jobs::hold_parked`]): it asks the owner to hand it over, and the owner, once it
//! has claimed the job locally (so no decision starts there meanwhile), moves the `owner` to the
//! asker with a compare-and-set; then the asker decides it as its own.

use std::sync::Arc;
use std::time::Duration;

use axp_protocol::methods::{JobEventKind, JobState};
use axp_protocol::{ErrorCode, RpcError};
use axp_store::{JobRecord, Started};
use serde_json::Value;

use super::{Jobs, Live, LogSink, Work, lock, new_record};
use crate::util::{internal, store_error};

impl Jobs {
    /// Records a job that must wait for an operator: state `awaiting_approval`, the request as
    /// the first event of its log, and a live entry so attached clients wait for the decision.
    /// Nothing runs until [`Jobs::resume`]. Returns the existing job for a repeated
    /// idempotency key.
    pub fn park(
        &self,
        session_id: &str,
        kind: &str,
        spec: Value,
        idempotency_key: Option<String>,
        request: Value,
    ) -> Result<JobRecord, RpcError> {
        let id = self.new_id();
        let rec = new_record(&id, session_id, kind, spec, JobState::AwaitingApproval, idempotency_key);
        let log = match self.store.start_job(&rec).map_err(|e| internal("recording a job", e))? {
            Started::Existing(existing) => return Ok(existing),
            Started::New(log) => log,
        };
        let ev = log
            .append(JobEventKind::Log { level: "approval".into(), data: request })
            .map_err(|e| internal("writing a job log", e))?;
        log.sync().map_err(|e| internal("writing a job log", e))?;
        let live = Arc::new(Live::new(session_id, None, true, log));
        live.next_seq.send_replace(ev.seq + 1);
        lock(&self.live).insert(id, live);
        Ok(rec)
    }

    /// After a restart: parked jobs get their live entry back, so attached clients wait. On a
    /// PostgreSQL store, only the jobs this replica holds (see the module docs).
    pub fn adopt_parked(&self) -> Result<usize, RpcError> {
        let parked = self
            .store
            .owned_jobs_in_state(JobState::AwaitingApproval)
            .map_err(|e| internal("listing parked jobs", e))?;
        for j in &parked {
            self.adopt_one(j)?;
        }
        Ok(parked.len())
    }

    /// Gives parked job `j` (recorded as this gateway's) its live entry, unless it has one.
    pub(super) fn adopt_one(&self, j: &JobRecord) -> Result<(), RpcError> {
        if lock(&self.live).contains_key(&j.id) {
            return Ok(());
        }
        let log = self.store.log(&j.id).map_err(|e| internal("opening a job log", e))?;
        let next = log.next_seq();
        let live = Arc::new(Live::new(&j.session_id, None, true, log));
        live.next_seq.send_replace(next);
        lock(&self.live).entry(j.id.clone()).or_insert(live);
        Ok(())
    }

    /// Makes parked job `job_id` this gateway's to decide: at once if it holds it; on a
    /// PostgreSQL store, by taking it over from the replica that holds it (see the module
    /// docs). Call it before [`Jobs::claim_parked`].
    pub async fn hold_parked(&self, job_id: &str) -> Result<(), RpcError> {
        if lock(&self.live).contains_key(job_id) {
            return Ok(());
        }
        let jobs = self.clone();
        let id = job_id.to_string();
        tokio::task::spawn_blocking(move || jobs.take_over_parked(&id))
            .await
            .map_err(|e| internal("taking a parked job over", e))?
    }

    fn take_over_parked(&self, job_id: &str) -> Result<(), RpcError> {
        let Some(replicas) = self.replicas.clone() else { return Err(not_parked(job_id)) };
        let owner = self.store.job_owner(job_id).map_err(|e| store_error("reading a job's owner", e))?;
        let Some(owner) = owner else { return Err(not_parked(job_id)) };
        if owner != replicas.me() {
            replicas.ask(&owner, job_id, super::remote::Ask::HandOver)?;
        }
        let job = self.store.get_job(job_id).map_err(|e| store_error("reading a job", e))?;
        match job {
            Some(j) if j.state == JobState::AwaitingApproval => self.adopt_one(&j),
            _ => Err(not_parked(job_id)),
        }
    }

    /// Hands parked job `job_id` to replica `to`, which asked for it (an operator's decision
    /// arrived there): claimed here first, so no decision starts here meanwhile, then moved in
    /// the store, then forgotten here. Runs on a thread of its own (a message's answer).
    pub(super) fn hand_over_here(&self, job_id: &str, to: &str) -> Result<(), RpcError> {
        // Not in memory here (this replica lost its lease meanwhile): the store's
        // compare-and-set alone decides.
        let here = lock(&self.live).contains_key(job_id);
        if here {
            self.claim_parked(job_id)?;
        }
        match self.store.give_parked(job_id, to) {
            Ok(true) => {
                lock(&self.live).remove(job_id);
                Ok(())
            }
            Ok(false) => {
                self.release_parked(job_id);
                Err(not_parked(job_id))
            }
            Err(e) => {
                self.release_parked(job_id);
                Err(store_error("handing a parked job to another replica", e))
            }
        }
    }

    /// Claims the decision on a parked job: succeeds for the first caller only (approve, deny
    /// and cancel race through here), who must then [`Jobs::resume`], [`Jobs::fail_parked`] or
    /// [`Jobs::release_parked`] it.
    pub fn claim_parked(&self, job_id: &str) -> Result<(), RpcError> {
        let live = lock(&self.live).get(job_id).cloned();
        match live {
            Some(l) if l.parked.swap(false, std::sync::atomic::Ordering::SeqCst) => Ok(()),
            _ => Err(not_parked(job_id)),
        }
    }

    /// Gives a claimed job back (its decision could not be recorded).
    pub fn release_parked(&self, job_id: &str) {
        if let Some(l) = lock(&self.live).get(job_id) {
            l.parked.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn claimed_live(&self, job_id: &str) -> Result<Arc<Live>, RpcError> {
        lock(&self.live).get(job_id).cloned().ok_or_else(|| not_parked(job_id))
    }

    /// Starts a claimed parked job's work (its approval).
    pub fn resume(&self, job: &JobRecord, work: Work, timeout: Option<Duration>) -> Result<(), RpcError> {
        let live = self.claimed_live(&job.id)?;
        if let Err(e) = self.store.set_job_state(&job.id, JobState::Running, None, None, None, None) {
            live.parked.store(true, std::sync::atomic::Ordering::SeqCst);
            return Err(internal("recording an approval", e));
        }
        let log = self.store.log(&job.id).map_err(|e| internal("opening a job log", e))?;
        self.launch(&job.id, log, live, work, None, timeout);
        Ok(())
    }

    /// Ends a claimed parked job without running it (denied, cancelled, or impossible to run).
    pub fn fail_parked(&self, job_id: &str, state: JobState, error: RpcError) -> Result<(), RpcError> {
        let live = self.claimed_live(job_id)?;
        let log = self.store.log(job_id).map_err(|e| internal("opening a job log", e))?;
        let sink = LogSink { log, live, job_id: job_id.to_string(), meter: None };
        self.metrics.jobs_running.add(1);
        self.finish(
            job_id,
            &sink,
            None,
            JobEventKind::Exit { state, code: None, signal: None, error: serde_json::to_value(error).ok() },
        );
        Ok(())
    }
}

fn not_parked(job_id: &str) -> RpcError {
    RpcError::new(
        ErrorCode::InvalidParams,
        format!("job `{job_id}` is not awaiting approval (already decided, cancelled, or never parked)"),
    )
}
