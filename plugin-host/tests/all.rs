//! Integration tests of the plugin host: real components and native libraries built from
//! `plugins/examples` by `plugins/build-examples.sh`, real helper processes, a real HTTP server
//! on loopback. One test binary (see suite/).

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod suite;
