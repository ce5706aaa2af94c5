//! The egress proxy's integration tests: one test binary (see `suite/`). Real DNS server
//! (hickory-server in-process), real HTTP and TLS upstreams on loopback, real clients (curl,
//! python3, rustls, raw sockets), and the proxy both in-process and as its binary.

#![allow(clippy::unwrap_used)]

mod suite;
