//! Capability tokens (work in progress).
