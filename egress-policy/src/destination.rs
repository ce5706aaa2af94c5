//! The decision over the addresses one attempt would connect to: every address a name resolved
//! to (or the literal itself) must pass, none may be the proxy itself, and each must pass the
//! allowlist's address check (deny rules, the classifier, the operator's waivers).
//!
//! Pure: the caller resolves the name once and passes the answer here; what passes is exactly
//! what it may connect to. An answer that mixes a public and a refused address is refused whole
//! rather than filtered, so an attacker's zone cannot steer a retry to the address it wants.

use std::net::{IpAddr, SocketAddr};

use crate::policy::Policy;
use crate::refusal::{Refuse, refuse};

/// An address that was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrRefusal {
    /// The address that failed (the audit record names it); `None` when there was none to check.
    pub addr: Option<SocketAddr>,
    /// The reason code and sentence.
    pub refusal: Refuse,
}

/// Whether connecting to `sa` would reach one of the proxy's own listeners (`own`: its TCP
/// proxy and metrics addresses). A listener on the unspecified address is every local address;
/// any loopback address reaches a loopback listener on the same port.
pub fn is_self(own: &[SocketAddr], sa: SocketAddr) -> bool {
    own.iter().any(|l| {
        l.port() == sa.port()
            && (l.ip() == sa.ip()
                || l.ip().is_unspecified()
                || sa.ip().is_unspecified()
                || (l.ip().is_loopback() && sa.ip().is_loopback()))
    })
}

/// Checks every address of `ips` on `port`, in order: an empty answer fails, and so does the
/// first address that is the proxy itself or that the policy refuses.
pub fn check_addresses(policy: &Policy, own: &[SocketAddr], ips: &[IpAddr], port: u16) -> Result<(), AddrRefusal> {
    if ips.is_empty() {
        return Err(AddrRefusal { addr: None, refusal: refuse("resolve_failed", "the name has no addresses") });
    }
    for ip in ips {
        let sa = SocketAddr::new(*ip, port);
        if is_self(own, sa) {
            let refusal = refuse("self_connect", format!("{sa} is this proxy (or its metrics endpoint)"));
            return Err(AddrRefusal { addr: Some(sa), refusal });
        }
        if let Err(d) = policy.check_addr(*ip, port) {
            return Err(AddrRefusal { addr: Some(sa), refusal: refuse(d.code(), d.to_string()) });
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_way_of_naming_a_listener_is_the_proxy_itself() {
        let own = [sa("127.0.0.1:3128"), sa("[::]:9464")];
        assert!(is_self(&own, sa("127.0.0.1:3128")));
        assert!(is_self(&own, sa("127.0.0.2:3128")), "any loopback address reaches a loopback listener");
        assert!(is_self(&own, sa("[::1]:3128")));
        assert!(is_self(&own, sa("0.0.0.0:3128")), "the unspecified address is this host");
        assert!(is_self(&own, sa("203.0.113.7:9464")), "a listener on :: is every address");
        assert!(!is_self(&own, sa("127.0.0.1:3129")));
        assert!(!is_self(&own, sa("203.0.113.7:3128")));
        assert!(!is_self(&[], sa("127.0.0.1:3128")));
    }

    #[test]
    fn every_address_must_pass_and_the_first_failure_is_named() {
        let mut p = Policy::default();
        let own = [sa("127.0.0.1:3128")];
        let code = |p: &Policy, ips: &[IpAddr], port| {
            check_addresses(p, &own, ips, port).map_err(|r| (r.addr.map(|a| a.to_string()), r.refusal.0))
        };
        assert_eq!(
            code(&p, &[ip("203.0.113.7"), ip("198.51.100.1")], 443),
            Err((Some("203.0.113.7:443".into()), "refused_address"))
        );
        assert_eq!(code(&p, &[ip("8.8.8.8"), ip("1.1.1.1")], 443), Ok(()));
        // A public address does not carry a private one in the same answer.
        assert_eq!(
            code(&p, &[ip("8.8.8.8"), ip("10.0.0.1")], 443),
            Err((Some("10.0.0.1:443".into()), "refused_address"))
        );
        assert_eq!(code(&p, &[], 443), Err((None, "resolve_failed")));
        // The waiver opens loopback, but never the proxy's own listener.
        p.dangerously_allow_private = vec!["127.0.0.0/8".parse().unwrap()];
        assert_eq!(code(&p, &[ip("127.0.0.1")], 80), Ok(()));
        assert_eq!(code(&p, &[ip("127.0.0.1")], 3128), Err((Some("127.0.0.1:3128".into()), "self_connect")));
        // Deny rules apply to addresses too, waiver or not.
        p.deny = vec!["127.0.0.9".parse().unwrap()];
        assert_eq!(
            code(&p, &[ip("127.0.0.1"), ip("127.0.0.9")], 80),
            Err((Some("127.0.0.9:80".into()), "denied_by_rule"))
        );
    }
}
