//! Running work under the sandbox: compiling a session's or provider's grants into a sandbox
//! policy and launching processes inside it (`sandboxing`), the per-owner egress proxies those
//! processes reach the network through (`egress`), durable jobs (`jobs`: the registry and its
//! API, with `jobs/launch.rs` launching the four kinds of work they run and `jobs/parked.rs` the
//! jobs awaiting an operator's approval), PTY jobs' terminals (`pty`), the record of what a
//! job wrote (`writes`), and the deletion of jobs that ended before the retention cutoff
//! (`retention`).

pub mod egress;
pub mod jobs;
pub mod pty;
pub mod retention;
pub mod sandboxing;
pub mod writes;
