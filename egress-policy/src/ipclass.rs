//! IP address classification: which destination addresses the proxy refuses by default.
//!
//! Pure functions only. The rule is an allowlist of routable space rather than a blocklist of
//! known-bad ranges wherever that is simpler: IPv6 is only accepted inside global unicast
//! `2000::/3` (minus its special-purpose blocks), and IPv6 forms that embed an IPv4 address
//! (IPv4-mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the
//! embedded address. This module must not know about grants; the policy layer decides which
//! refusals an operator has explicitly waived (`--dangerously-allow-private`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The special-purpose class that makes an address refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `0.0.0.0/8` ("this network").
    ThisNetwork,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 (`10/8`, `172.16/12`, `192.168/16`).
    Private,
    /// IPv6 unique local `fc00::/7`.
    UniqueLocal,
    /// `169.254.0.0/16`, `fe80::/10`.
    LinkLocal,
    /// Deprecated IPv6 site-local `fec0::/10`.
    SiteLocal,
    /// Cloud instance metadata endpoints (`169.254.169.254`, `fd00:ec2::254`).
    CloudMetadata,
    /// Carrier-grade NAT `100.64.0.0/10`.
    Cgnat,
    /// IETF protocol assignments (`192.0.0.0/24`, `2001::/23`, including Teredo).
    IetfProtocol,
    /// Documentation ranges (`192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`,
    /// `3fff::/20`).
    Documentation,
    /// Benchmarking (`198.18.0.0/15`, `2001:2::/48`).
    Benchmarking,
    /// Multicast (`224/4`, `ff00::/8`).
    Multicast,
    /// Limited broadcast `255.255.255.255`.
    Broadcast,
    /// Reserved or otherwise non-routable (`240/4`, `192.88.99/24`, `100::/64`, anything outside
    /// `2000::/3`, NAT64 local-use `64:ff9b:1::/48`, deprecated IPv4-compatible `::/96`).
    Reserved,
}

impl AddrClass {
    /// A short, stable name for audit lines and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            AddrClass::Unspecified => "unspecified",
            AddrClass::ThisNetwork => "this-network",
            AddrClass::Loopback => "loopback",
            AddrClass::Private => "private",
            AddrClass::UniqueLocal => "unique-local",
            AddrClass::LinkLocal => "link-local",
            AddrClass::SiteLocal => "site-local",
            AddrClass::CloudMetadata => "cloud-metadata",
            AddrClass::Cgnat => "cgnat",
            AddrClass::IetfProtocol => "ietf-protocol",
            AddrClass::Documentation => "documentation",
            AddrClass::Benchmarking => "benchmarking",
            AddrClass::Multicast => "multicast",
            AddrClass::Broadcast => "broadcast",
            AddrClass::Reserved => "reserved",
        }
    }
}

/// How an IPv6 address carried an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// `::ffff:a.b.c.d`.
    Ipv4Mapped,
    /// `64:ff9b::a.b.c.d`.
    Nat64,
    /// `2002:AABB:CCDD::/48`.
    SixToFour,
}

/// Why an address is refused: its class, and the IPv4 address it embeds, if that is what made
/// it refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The class that refused it (of the embedded address when `embedded` is set).
    pub class: AddrClass,
    /// The embedded IPv4 address and how it was embedded.
    pub embedded: Option<(Embedding, Ipv4Addr)>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.embedded {
            None => f.write_str(self.class.as_str()),
            Some((how, v4)) => {
                let how = match how {
                    Embedding::Ipv4Mapped => "IPv4-mapped",
                    Embedding::Nat64 => "NAT64",
                    Embedding::SixToFour => "6to4",
                };
                write!(f, "{how} {v4} which is {}", self.class.as_str())
            }
        }
    }
}

fn in_v4(a: Ipv4Addr, net: [u8; 4], len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    (u32::from(a) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn in_v6(a: Ipv6Addr, net: Ipv6Addr, len: u32) -> bool {
    let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
    (u128::from(a) & mask) == (u128::from(net) & mask)
}

/// Classifies an IPv4 address; `None` means publicly routable.
pub fn classify_v4(a: Ipv4Addr) -> Option<AddrClass> {
    let table: &[([u8; 4], u32, AddrClass)] = &[
        ([0, 0, 0, 0], 32, AddrClass::Unspecified),
        ([0, 0, 0, 0], 8, AddrClass::ThisNetwork),
        ([127, 0, 0, 0], 8, AddrClass::Loopback),
        ([10, 0, 0, 0], 8, AddrClass::Private),
        ([172, 16, 0, 0], 12, AddrClass::Private),
        ([192, 168, 0, 0], 16, AddrClass::Private),
        ([169, 254, 169, 254], 32, AddrClass::CloudMetadata),
        ([169, 254, 0, 0], 16, AddrClass::LinkLocal),
        ([100, 64, 0, 0], 10, AddrClass::Cgnat),
        ([192, 0, 0, 0], 24, AddrClass::IetfProtocol),
        ([192, 0, 2, 0], 24, AddrClass::Documentation),
        ([198, 51, 100, 0], 24, AddrClass::Documentation),
        ([203, 0, 113, 0], 24, AddrClass::Documentation),
        ([198, 18, 0, 0], 15, AddrClass::Benchmarking),
        ([192, 88, 99, 0], 24, AddrClass::Reserved),
        ([224, 0, 0, 0], 4, AddrClass::Multicast),
        ([255, 255, 255, 255], 32, AddrClass::Broadcast),
        ([240, 0, 0, 0], 4, AddrClass::Reserved),
    ];
    table.iter().find(|(net, len, _)| in_v4(a, *net, *len)).map(|(_, _, c)| *c)
}

fn embedded_v4(bits: u128) -> Ipv4Addr {
    Ipv4Addr::from((bits & 0xffff_ffff) as u32)
}

/// Classifies an address; `None` means publicly routable and allowed by default.
pub fn classify(ip: IpAddr) -> Option<Refusal> {
    let plain = |class| Refusal { class, embedded: None };
    match ip {
        IpAddr::V4(a) => classify_v4(a).map(plain),
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let p = |s: &str| s.parse::<Ipv6Addr>().unwrap_or(Ipv6Addr::UNSPECIFIED);
            let embed = |how, v4: Ipv4Addr| classify_v4(v4).map(|class| Refusal { class, embedded: Some((how, v4)) });
            if a.is_unspecified() {
                return Some(plain(AddrClass::Unspecified));
            }
            if a == Ipv6Addr::LOCALHOST {
                return Some(plain(AddrClass::Loopback));
            }
            if in_v6(a, p("::ffff:0:0"), 96) {
                return embed(Embedding::Ipv4Mapped, embedded_v4(bits));
            }
            if in_v6(a, p("64:ff9b::"), 96) {
                return embed(Embedding::Nat64, embedded_v4(bits));
            }
            if in_v6(a, p("2002::"), 16) {
                let v4 = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
                return embed(Embedding::SixToFour, v4);
            }
            if a == p("fd00:ec2::254") {
                return Some(plain(AddrClass::CloudMetadata));
            }
            let table: &[(&str, u32, AddrClass)] = &[
                ("fc00::", 7, AddrClass::UniqueLocal),
                ("fe80::", 10, AddrClass::LinkLocal),
                ("fec0::", 10, AddrClass::SiteLocal),
                ("ff00::", 8, AddrClass::Multicast),
                ("2001:db8::", 32, AddrClass::Documentation),
                ("3fff::", 20, AddrClass::Documentation),
                ("2001:2::", 48, AddrClass::Benchmarking),
                ("2001::", 23, AddrClass::IetfProtocol),
                ("100::", 64, AddrClass::Reserved),
            ];
            if let Some((_, _, c)) = table.iter().find(|(n, l, _)| in_v6(a, p(n), *l)) {
                return Some(plain(*c));
            }
            if !in_v6(a, p("2000::"), 3) {
                return Some(plain(AddrClass::Reserved));
            }
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<AddrClass> {
        classify(s.parse().unwrap()).map(|r| r.class)
    }

    #[test]
    fn refused_v4_ranges() {
        for (s, c) in [
            ("127.0.0.1", AddrClass::Loopback),
            ("127.255.255.254", AddrClass::Loopback),
            ("10.0.0.1", AddrClass::Private),
            ("172.31.255.255", AddrClass::Private),
            ("192.168.1.1", AddrClass::Private),
            ("169.254.169.254", AddrClass::CloudMetadata),
            ("169.254.1.1", AddrClass::LinkLocal),
            ("100.64.0.1", AddrClass::Cgnat),
            ("100.127.255.255", AddrClass::Cgnat),
            ("224.0.0.1", AddrClass::Multicast),
            ("0.0.0.0", AddrClass::Unspecified),
            ("0.1.2.3", AddrClass::ThisNetwork),
            ("255.255.255.255", AddrClass::Broadcast),
            ("192.0.2.1", AddrClass::Documentation),
            ("198.19.0.1", AddrClass::Benchmarking),
            ("240.0.0.1", AddrClass::Reserved),
        ] {
            assert_eq!(class(s), Some(c), "{s}");
        }
        for s in ["1.1.1.1", "172.32.0.1", "100.128.0.1", "8.8.8.8", "198.20.0.1"] {
            assert_eq!(class(s), None, "{s}");
        }
    }

    #[test]
    fn refused_v6_ranges_and_embeddings() {
        for (s, c) in [
            ("::1", AddrClass::Loopback),
            ("::", AddrClass::Unspecified),
            ("fd00:ec2::254", AddrClass::CloudMetadata),
            ("fd12::1", AddrClass::UniqueLocal),
            ("fe80::1", AddrClass::LinkLocal),
            ("ff02::1", AddrClass::Multicast),
            ("2001:db8::1", AddrClass::Documentation),
            ("2001:0:4136:e378::1", AddrClass::IetfProtocol),
            ("::ffff:127.0.0.1", AddrClass::Loopback),
            ("::ffff:169.254.169.254", AddrClass::CloudMetadata),
            ("64:ff9b::10.0.0.1", AddrClass::Private),
            ("2002:7f00:1::", AddrClass::Loopback),
            ("2002:a9fe:a9fe::1", AddrClass::CloudMetadata),
            ("::127.0.0.1", AddrClass::Reserved),
            ("64:ff9b:1::1", AddrClass::Reserved),
        ] {
            assert_eq!(class(s), Some(c), "{s}");
        }
        for s in ["2606:4700::1111", "::ffff:1.1.1.1", "64:ff9b::8.8.8.8", "2002:0808:0808::1"] {
            assert_eq!(class(s), None, "{s}");
        }
        let r = classify("::ffff:10.1.2.3".parse().unwrap()).unwrap();
        assert_eq!(r.to_string(), "IPv4-mapped 10.1.2.3 which is private");
    }
}
