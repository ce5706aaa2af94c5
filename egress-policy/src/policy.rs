//! The allowlist: grant and deny rules over [`Target`]s, and the address check that applies the
//! classifier with the operator's explicit `--dangerously-allow-private` waivers.
//!
//! Pure functions only. Rules use the `net.connect(DOMAIN[:PORT])` grammar of `axp-protocol`
//! (the same strings a session grants), parsed by that crate and matched with its
//! [`axp_protocol::capability::host_matches`], so a session grant and a proxy rule can never mean
//! different things. `*.example.com` matches sub-domains only; a rule without a port matches every
//! port; deny rules win over allow rules. IP literals are refused unless an allow rule names that
//! exact address, and even then the address classifier still applies.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use axp_protocol::capability::{Capability, host_matches};

use crate::host::{Host, Target, parse_host};
use crate::ipclass::{Refusal, classify};

/// What a rule's host part names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RuleHost {
    /// `example.com` or `*.example.com` (kept in the protocol's spelling for `host_matches`).
    Name(String),
    /// An exact IP address.
    Ip(IpAddr),
}

/// One allow or deny rule: `DOMAIN[:PORT]`, `*.DOMAIN[:PORT]`, `IP[:PORT]` or `[IPV6][:PORT]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    host: RuleHost,
    port: Option<u16>,
    text: String,
}

/// A rule string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rule `{rule}`: {reason}")]
pub struct RuleError {
    /// The rule as given.
    pub rule: String,
    /// Why it was refused.
    pub reason: String,
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| RuleError { rule: s.to_string(), reason };
        let cap: Capability = format!("net.connect({s})")
            .parse()
            .map_err(|e: axp_protocol::capability::CapabilityParseError| err(e.to_string()))?;
        let Capability::NetConnect { host, port } = cap else {
            return Err(err("not a net.connect rule".into()));
        };
        let bare = host.strip_prefix("*.").unwrap_or(&host);
        let parsed = parse_host(bare).map_err(|e| err(e.to_string()))?;
        let rule_host = match parsed {
            Host::Ip(ip) if !host.starts_with("*.") => RuleHost::Ip(ip),
            Host::Ip(_) => return Err(err("a wildcard cannot precede an IP address".into())),
            Host::Name(_) => RuleHost::Name(host.clone()),
        };
        Ok(Rule { host: rule_host, port, text: s.to_string() })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Rule {
    fn host_matches(&self, host: &Host) -> bool {
        match (&self.host, host) {
            (RuleHost::Name(p), Host::Name(n)) => host_matches(p, n),
            (RuleHost::Ip(a), Host::Ip(b)) => a == b,
            _ => false,
        }
    }

    fn port_matches(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// `true` when this rule covers the target (host and port).
    pub fn matches(&self, t: &Target) -> bool {
        self.host_matches(&t.host) && self.port_matches(t.port)
    }
}

/// An IP network in CIDR notation (`127.0.0.0/8`, `fd00::/8`, or a bare address for /32, /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl FromStr for Cidr {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| RuleError { rule: s.to_string(), reason: reason.to_string() };
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let net: IpAddr = a.parse().map_err(|_| err("not an IP address in canonical notation"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => l.parse::<u8>().ok().filter(|n| *n <= max).ok_or_else(|| err("bad prefix length"))?,
        };
        Ok(Cidr { net, len })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

impl Cidr {
    /// `true` when `ip` is inside this network (same family only).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let m = if self.len == 0 { 0 } else { u32::MAX << (32 - u32::from(self.len)) };
                u32::from(n) & m == u32::from(a) & m
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let m = if self.len == 0 { 0 } else { u128::MAX << (128 - u32::from(self.len)) };
                u128::from(n) & m == u128::from(a) & m
            }
            _ => false,
        }
    }
}

/// Why the policy refused a target or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    /// A deny rule matched.
    DeniedByRule(String),
    /// An IP literal was asked for and no allow rule names it.
    IpLiteral,
    /// No allow rule covers the host.
    NotGranted,
    /// Allow rules cover the host but not this port.
    PortNotGranted,
    /// The address is in a refused class and no waiver covers it.
    RefusedAddress(IpAddr, Refusal),
}

impl Denial {
    /// The stable reason code written to the audit log.
    pub fn code(&self) -> &'static str {
        match self {
            Denial::DeniedByRule(_) => "denied_by_rule",
            Denial::IpLiteral => "ip_literal",
            Denial::NotGranted => "not_granted",
            Denial::PortNotGranted => "port_not_granted",
            Denial::RefusedAddress(..) => "refused_address",
        }
    }
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Denial::DeniedByRule(r) => write!(f, "the deny rule `{r}` matches"),
            Denial::IpLiteral => f.write_str("IP literals are refused unless granted exactly"),
            Denial::NotGranted => f.write_str("no grant covers this host"),
            Denial::PortNotGranted => f.write_str("the host is granted, but not on this port"),
            Denial::RefusedAddress(ip, r) => write!(f, "the address {ip} is refused ({r})"),
        }
    }
}

/// The compiled allowlist of one proxy instance.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Allow rules.
    pub allow: Vec<Rule>,
    /// Deny rules (win over allow).
    pub deny: Vec<Rule>,
    /// Networks exempt from the address classifier. Never set by default.
    pub dangerously_allow_private: Vec<Cidr>,
}

impl Policy {
    /// The allow rules of a session's or provider's grants: every `net.connect(..)` capability
    /// becomes one rule; other capabilities are ignored. No deny rules, no waivers.
    pub fn from_grants<'a>(grants: impl IntoIterator<Item = &'a Capability>) -> Result<Policy, RuleError> {
        let mut allow = Vec::new();
        for g in grants {
            if let Capability::NetConnect { host, port } = g {
                let text = match port {
                    Some(p) => format!("{host}:{p}"),
                    None => host.clone(),
                };
                allow.push(text.parse()?);
            }
        }
        Ok(Policy { allow, ..Policy::default() })
    }

    /// The allow rules as strings, in the form the binary's `--allow` takes.
    pub fn allow_args(&self) -> Vec<String> {
        self.allow.iter().map(ToString::to_string).collect()
    }

    /// Checks a requested target against the rules. Returns the allow rule that matched.
    pub fn check_target(&self, t: &Target) -> Result<&Rule, Denial> {
        if let Some(d) = self.deny.iter().find(|r| r.matches(t)) {
            return Err(Denial::DeniedByRule(d.text.clone()));
        }
        let mut host_hit = false;
        for r in &self.allow {
            if r.host_matches(&t.host) {
                host_hit = true;
                if r.port_matches(t.port) {
                    return Ok(r);
                }
            }
        }
        match (&t.host, host_hit) {
            (_, true) => Err(Denial::PortNotGranted),
            (Host::Ip(_), false) => Err(Denial::IpLiteral),
            (Host::Name(_), false) => Err(Denial::NotGranted),
        }
    }

    /// Checks one address the connection would go to (resolved, or the literal itself).
    pub fn check_addr(&self, ip: IpAddr, port: u16) -> Result<(), Denial> {
        let as_target = Target { host: Host::Ip(ip), port };
        if let Some(d) = self.deny.iter().find(|r| r.matches(&as_target)) {
            return Err(Denial::DeniedByRule(d.text.clone()));
        }
        if self.dangerously_allow_private.iter().any(|c| c.contains(ip)) {
            return Ok(());
        }
        match classify(ip) {
            Some(r) => Err(Denial::RefusedAddress(ip, r)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::host::parse_authority;

    fn policy(allow: &[&str], deny: &[&str]) -> Policy {
        Policy {
            allow: allow.iter().map(|s| s.parse().unwrap()).collect(),
            deny: deny.iter().map(|s| s.parse().unwrap()).collect(),
            dangerously_allow_private: vec![],
        }
    }

    fn check(p: &Policy, a: &str) -> Result<String, &'static str> {
        let t = parse_authority(a, None).unwrap();
        p.check_target(&t).map(|r| r.to_string()).map_err(|d| d.code())
    }

    #[test]
    fn wildcards_ports_and_deny() {
        let p = policy(&["allowed.test:443", "*.example.test", "any.test"], &["bad.example.test"]);
        assert_eq!(check(&p, "allowed.test:443"), Ok("allowed.test:443".into()));
        assert_eq!(check(&p, "allowed.test:80"), Err("port_not_granted"));
        assert_eq!(check(&p, "allowed.test.evil.test:443"), Err("not_granted"));
        assert_eq!(check(&p, "evilallowed.test:443"), Err("not_granted"));
        assert_eq!(check(&p, "example.test:443"), Err("not_granted"));
        assert_eq!(check(&p, "a.b.example.test:1"), Ok("*.example.test".into()));
        assert_eq!(check(&p, "bad.example.test:1"), Err("denied_by_rule"));
        assert_eq!(check(&p, "any.test:9"), Ok("any.test".into()));
        assert_eq!(check(&p, "127.0.0.1:443"), Err("ip_literal"));
        assert_eq!(check(&p, "xn--llowed-9pf.test:443"), Err("not_granted"));
    }

    #[test]
    fn ip_grants_are_exact_and_still_classified() {
        let p = policy(&["10.0.0.5:80", "[::1]"], &[]);
        assert!(check(&p, "10.0.0.5:80").is_ok());
        assert!(check(&p, "0xa.5:80").is_ok());
        assert_eq!(check(&p, "10.0.0.6:80"), Err("ip_literal"));
        assert!(check(&p, "[::1]:5").is_ok());
        assert_eq!(p.check_addr("10.0.0.5".parse().unwrap(), 80).map_err(|d| d.code()), Err("refused_address"));
        let mut p = p;
        p.dangerously_allow_private = vec!["10.0.0.0/8".parse().unwrap()];
        assert!(p.check_addr("10.0.0.5".parse().unwrap(), 80).is_ok());
        assert!(p.check_addr("::ffff:10.0.0.5".parse().unwrap(), 80).is_err());
    }

    #[test]
    fn session_grants_become_rules() {
        let caps = axp_protocol::CapabilitySet::parse_all(&[
            "net.connect(api.example.test:443)",
            "net.connect(*.cdn.test)",
            "net.connect([2001:db8::1]:8443)",
            "proc.spawn",
        ])
        .unwrap();
        let p = Policy::from_grants(&caps.0).unwrap();
        assert_eq!(p.allow_args(), ["api.example.test:443", "*.cdn.test", "[2001:db8::1]:8443"]);
        assert_eq!(check(&p, "api.example.test:443"), Ok("api.example.test:443".into()));
        assert_eq!(check(&p, "api.example.test:80"), Err("port_not_granted"));
        assert!(check(&p, "[2001:db8::1]:8443").is_ok());
    }

    #[test]
    fn rules_reject_nonsense() {
        for r in ["", "a b", "allowed.test.", "*.1.2.3.4", "x:0", "é.test"] {
            assert!(r.parse::<Rule>().is_err(), "{r}");
        }
        assert!("1.2.3.4/33".parse::<Cidr>().is_err());
        assert!("127.0.0.0/8".parse::<Cidr>().unwrap().contains("127.9.9.9".parse().unwrap()));
    }
}
