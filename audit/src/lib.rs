//! Audit log (work in progress).
