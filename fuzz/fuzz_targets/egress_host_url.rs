//! Attacks the egress proxy's one parser for every form a destination arrives in
//! (`axp_egress_policy::host`: `parse_host`, `parse_authority`, `parse_absolute_form`), the
//! address classifier (`ipclass`) and the allowlist (`policy`). The input is text, tried whole
//! and line by line. Invariants checked: a name that parses is canonical (lowercase
//! `[a-z0-9._-]`, no leading, trailing or doubled dot) and re-parses to itself, also with one
//! trailing dot or in upper case; every host, authority and absolute URL that parses re-renders
//! to text that parses back to the same value; an origin-form path carries no byte a client may
//! not send; an IP literal classifies without panic, the policy's address check refuses exactly
//! what the classifier refuses, and an IPv4 address that is refused stays refused in its
//! IPv4-mapped, NAT64 and 6to4 forms; the allowlist grants a target only when a plain reading of its
//! rules says so (so no text that fails to parse, or parses to another host, is ever matched);
//! and a rule that parses, naming a host and a port, matches the target its own text names.

#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use axp_egress_policy::host::{Host, Target, parse_absolute_form_with_port, parse_authority, parse_host};
use axp_egress_policy::ipclass::classify;
use axp_egress_policy::policy::{Policy, Rule};
use libfuzzer_sys::fuzz_target;

/// The rules the matcher is held to: a name, a wildcard, an exact IPv4 and an exact IPv6 grant.
const RULES: [&str; 4] = ["allowed.test:443", "*.example.test", "10.0.0.5:80", "[2001:db8::1]"];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let policy = Policy { allow: RULES.iter().map(|r| r.parse().unwrap()).collect(), ..Policy::default() };
    check(&text, &policy);
    for line in text.lines().take(16) {
        check(line, &policy);
    }
});

fn check(s: &str, policy: &Policy) {
    if let Ok(h) = parse_host(s) {
        check_host(&h);
        // Whatever spelling was accepted, the canonical rendering means the same host.
        assert_eq!(parse_host(&h.to_string()), Ok(h.clone()), "{s:?}");
    }
    for default in [None, Some(80)] {
        if let Ok(t) = parse_authority(s, default) {
            check_target(&t, policy);
            assert_eq!(parse_authority(&t.to_string(), None), Ok(t.clone()), "{s:?}");
        }
    }
    if let Ok((t, path)) = parse_absolute_form_with_port(s, 8080) {
        check_target(&t, policy);
        assert!(path.starts_with('/'), "{path:?}");
        assert!(path.bytes().all(|b| b > 0x20 && b < 0x7f && b != b'#' && b != b'\\'), "{path:?}");
        let again = format!("http://{t}{path}");
        assert_eq!(parse_absolute_form_with_port(&again, 1), Ok((t, path)), "{s:?}");
    }
    if let Ok(rule) = s.parse::<Rule>() {
        assert_eq!(rule.to_string(), s);
        // A rule that names one host and a port covers the authority its own text spells.
        if !s.starts_with("*.")
            && let Ok(t) = parse_authority(s, None)
        {
            assert!(rule.matches(&t), "{s:?} does not match {t}");
        }
    }
}

fn check_host(h: &Host) {
    match h {
        Host::Name(n) => {
            assert!(!n.is_empty());
            assert!(n.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b)), "{n:?}");
            assert!(!n.starts_with('.') && !n.ends_with('.') && !n.contains(".."), "{n:?}");
            assert_eq!(parse_host(n), Ok(h.clone()));
            assert_eq!(parse_host(&format!("{n}.")), Ok(h.clone()), "one trailing dot is the same name");
            assert_eq!(parse_host(&n.to_ascii_uppercase()), Ok(h.clone()), "names are case-insensitive");
        }
        Host::Ip(ip) => check_ip(*ip),
    }
}

fn check_ip(ip: IpAddr) {
    let refused = classify(ip);
    // With no rules and no waivers the policy's address check is exactly the classifier.
    assert_eq!(Policy::default().check_addr(ip, 443).is_err(), refused.is_some(), "{ip}");
    if let IpAddr::V4(a) = ip
        && refused.is_some()
    {
        let mapped = IpAddr::V6(a.to_ipv6_mapped());
        assert!(classify(mapped).is_some(), "{a} is refused but {mapped} is not");
        let o = a.octets();
        let nat64 = IpAddr::V6(Ipv6Addr::new(
            0x64,
            0xff9b,
            0,
            0,
            0,
            0,
            u16::from_be_bytes([o[0], o[1]]),
            u16::from_be_bytes([o[2], o[3]]),
        ));
        assert!(classify(nat64).is_some(), "{a} is refused but {nat64} is not");
        let six_to_four = IpAddr::V6(Ipv6Addr::new(
            0x2002,
            u16::from_be_bytes([o[0], o[1]]),
            u16::from_be_bytes([o[2], o[3]]),
            0,
            0,
            0,
            0,
            1,
        ));
        assert!(classify(six_to_four).is_some(), "{a} is refused but {six_to_four} is not");
    }
}

/// The allowlist's answer against a plain reading of [`RULES`].
fn check_target(t: &Target, policy: &Policy) {
    assert_ne!(t.port, 0);
    if let Host::Ip(ip) = &t.host {
        check_ip(*ip);
    }
    let expected = match &t.host {
        Host::Name(n) => {
            (n == "allowed.test" && t.port == 443) || (n.ends_with(".example.test") && n.len() > ".example.test".len())
        }
        Host::Ip(IpAddr::V4(a)) => *a == Ipv4Addr::new(10, 0, 0, 5) && t.port == 80,
        Host::Ip(IpAddr::V6(a)) => *a == Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
    };
    assert_eq!(policy.check_target(t).is_ok(), expected, "{t}");
}
