//! Old paths, kept while files that name them move: the hub is `crate::gateway`, routing is
//! `crate::router`, sandbox-policy compilation is `crate::execution::sandboxing`.

pub use crate::gateway::Gateway;
