//! The integration tests, one file per subject.

mod model;
mod wordpiece;
