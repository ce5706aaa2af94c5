//! Running work under the sandbox: compiling a session's or provider's grants into a sandbox
//! policy and launching processes inside it (`sandboxing`), the per-owner egress proxies those
//! processes reach the network through (`egress`), and the record of what a job wrote
//! (`writes`).

pub mod egress;
pub mod sandboxing;
pub mod writes;
