//! `axp-egress-proxy`: the domain-allowlisting egress proxy that is a sandboxed job's only way
//! out. HTTP absolute-form, `CONNECT` and SOCKS5 on one listener; names resolved by the proxy
//! itself and connected to by the address that was checked; private, loopback, metadata and
//! other special addresses refused; the TLS SNI inside a CONNECT must name the CONNECT host;
//! every attempt audited as one JSON line.
//!
//! Layout: every parser and decision lives in the pure crate `axp-egress-policy` (no tokio, no
//! sockets, so it is unit-tested and fuzzed on its own); its modules (`host`, `ipclass`,
//! `policy`, `tls`, `http`, `socks`) are re-exported here under their old paths. `proxy` owns
//! the sockets and the order of checks (`splice` its zero-copy path for large downloads);
//! `audit` owns the record format and counters; `child` is the process the gateway runs per
//! owner (a session or a provider) and its control protocol: one [`Proxy`] per allowlist,
//! limits shared through a [`Budget`], records sent back through an [`Observer`]. This crate
//! must not depend on the gateway. The binary `axp-egress-proxy` runs one proxy standalone, or a
//! child.

pub mod audit;
pub mod child;
pub mod proxy;
mod splice;

pub use axp_egress_policy::{host, http, ipclass, policy, socks, tls};

pub use audit::{AuditRecord, Observer};
pub use policy::{Cidr, Policy, Rule};
pub use proxy::{Budget, Proxy, ProxyConfig, ProxyError, serve};
