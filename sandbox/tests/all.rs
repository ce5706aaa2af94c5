//! The sandbox crate's single integration-test binary (one binary keeps link time down):
//! `suite/` holds the attack battery (data in `attacks.json`), the positive tests, the network
//! plumbing, the host probe and the unprivileged-user path. Every test runs real processes under
//! the real kernel sandbox; nothing is mocked.
#![allow(unsafe_code)]

mod suite;
