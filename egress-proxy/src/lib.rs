//! `axp-egress-proxy`: the domain-allowlisting egress proxy that is a sandboxed job's only way
//! out. HTTP absolute-form, `CONNECT` and SOCKS5 on one listener; names resolved by the proxy
//! itself and connected to by the address that was checked; private, loopback, metadata and
//! other special addresses refused; the TLS SNI inside a CONNECT must name the CONNECT host;
//! every attempt audited as one JSON line.
//!
//! Layout: pure, fuzzable modules (`host`, `ipclass`, `policy`, `tls`, `http`, `socks`) hold every
//! parser and decision; `proxy` owns the sockets and the order of checks; `audit` owns the record
//! format and counters. This crate must not depend on the gateway: the gateway runs it as a
//! separate process (`axp-egress-proxy`) or in-process through [`serve`], configured by
//! [`ProxyConfig`], and reads its audit lines.

pub mod audit;
pub mod host;
pub mod http;
pub mod ipclass;
pub mod policy;
pub mod proxy;
pub mod socks;
pub mod tls;

pub use audit::AuditRecord;
pub use policy::{Cidr, Policy, Rule};
pub use proxy::{Proxy, ProxyConfig, ProxyError, serve};
