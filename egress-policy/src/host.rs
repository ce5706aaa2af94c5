//! Host and authority parsing for every form a client can name a destination in: an HTTP
//! absolute-form URL, a `CONNECT` authority, a `Host` header, a SOCKS5 domain, and the TLS SNI.
//!
//! Pure functions only: no I/O, no DNS, no policy. They turn untrusted text into a [`Target`] or
//! refuse it. Decisions (documented in the README):
//! * control bytes (NUL, CR, LF, …), spaces and non-ASCII are refused; IDNs must arrive as
//!   punycode (`xn--` labels), which are then ordinary ASCII labels that match only grants that
//!   spell them literally;
//! * `@`, `#`, `\`, `%`, `/`, `?` and every other character outside `[A-Za-z0-9._-]` are refused in
//!   a host, so userinfo and fragment tricks (`evil.test#@allowed.test`) never parse;
//! * exactly one trailing dot is normalised away (`allowed.test.` is the same DNS name as
//!   `allowed.test`; the resolver is always asked for the absolute name, so search domains never
//!   apply); `..` or a lone `.` is refused;
//! * a host whose last label is numeric (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`) is an IPv4
//!   literal in the `inet_aton` sense (which is how browsers and libc read it), never a name;
//!   an unparsable numeric host is refused rather than guessed at.
//!
//! This module must not decide whether a target is allowed; see `policy` for that.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A destination host after parsing: a lower-case DNS name without a trailing dot, or an IP.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name, lower case, labels of `[a-z0-9_-]`, no trailing dot.
    Name(String),
    /// An IP literal, in whatever notation it was written.
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Host::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// A host and a port: what a client asked to reach.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// The parsed host.
    pub host: Host,
    /// The TCP port (1-65535).
    pub port: u16,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Why a host, authority or URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// The host is empty.
    #[error("the host is empty")]
    Empty,
    /// A control byte (NUL, CR, LF, TAB, DEL, …) appears.
    #[error("the host contains a control byte (0x{0:02x})")]
    ControlByte(u8),
    /// A non-ASCII byte appears; IDNs must be sent as punycode.
    #[error("the host contains non-ASCII bytes; send internationalised names as punycode (xn--)")]
    NonAscii,
    /// A character that is not allowed in a host name appears (`@`, `#`, `%`, space, …).
    #[error("the host contains `{0}`, which is not allowed in a host name")]
    ForbiddenChar(char),
    /// A label is empty, too long, or starts/ends with `-`, or the name is too long.
    #[error("the host is not a valid DNS name: {0}")]
    BadName(&'static str),
    /// The host looks numeric but is not a valid IPv4 address in any notation.
    #[error("the host `{0}` looks like an IPv4 address but is not a valid one")]
    BadIpv4(String),
    /// A bracketed or colon-bearing host is not a valid IPv6 address.
    #[error("`{0}` is not a valid IPv6 address (IPv6 literals go in brackets, without zone ids)")]
    BadIpv6(String),
    /// The port is missing where one is required (CONNECT).
    #[error("a port is required")]
    MissingPort,
    /// The port is not a decimal number in 1-65535.
    #[error("`{0}` is not a port number (1-65535)")]
    BadPort(String),
    /// The URL carries userinfo (`user@host`).
    #[error("userinfo (`user@`) is not allowed in a proxy request")]
    Userinfo,
    /// The URL scheme is not `http`.
    #[error("unsupported URL scheme `{0}` (only http:// in absolute form; use CONNECT for https)")]
    BadScheme(String),
    /// The request target is not in absolute form.
    #[error("the request target is not an absolute http:// URL")]
    NotAbsolute,
    /// The URL contains a fragment or backslash, which a client must never send.
    #[error("the URL contains `{0}`, which a client must never send to a proxy")]
    BadUrlChar(char),
}

/// Parses a bare host (no port): a DNS name, an IPv4 literal in any notation, a bracketed IPv6
/// literal, or (as SOCKS5 domains may be) an unbracketed IPv6 literal.
pub fn parse_host(input: &str) -> Result<Host, HostError> {
    if input.is_empty() {
        return Err(HostError::Empty);
    }
    for &b in input.as_bytes() {
        if b < 0x20 || b == 0x7f {
            return Err(HostError::ControlByte(b));
        }
        if b >= 0x80 {
            return Err(HostError::NonAscii);
        }
    }
    if let Some(inner) = input.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or_else(|| HostError::BadIpv6(input.to_string()))?;
        return inner
            .parse::<Ipv6Addr>()
            .map(|a| Host::Ip(IpAddr::V6(a)))
            .map_err(|_| HostError::BadIpv6(input.to_string()));
    }
    if input.contains(':') {
        return input
            .parse::<Ipv6Addr>()
            .map(|a| Host::Ip(IpAddr::V6(a)))
            .map_err(|_| HostError::BadIpv6(input.to_string()));
    }
    if let Some(c) = input.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))) {
        return Err(HostError::ForbiddenChar(c));
    }
    let lower = input.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    if name.is_empty() {
        return Err(HostError::BadName("no labels"));
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.iter().any(|l| l.is_empty()) {
        return Err(HostError::BadName("empty label"));
    }
    let last = labels[labels.len() - 1];
    if looks_numeric(last) {
        return parse_ipv4_literal(name)
            .map(|a| Host::Ip(IpAddr::V4(a)))
            .ok_or_else(|| HostError::BadIpv4(input.to_string()));
    }
    if name.len() > 253 {
        return Err(HostError::BadName("longer than 253 characters"));
    }
    for l in &labels {
        if l.len() > 63 {
            return Err(HostError::BadName("a label is longer than 63 characters"));
        }
        if l.starts_with('-') || l.ends_with('-') {
            return Err(HostError::BadName("a label starts or ends with `-`"));
        }
    }
    Ok(Host::Name(name.to_string()))
}

/// `true` when a label is all decimal digits or `0x` followed by hex digits: the WHATWG URL rule
/// for "this host is an IPv4 address".
fn looks_numeric(label: &str) -> bool {
    if let Some(hex) = label.strip_prefix("0x") {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit())
}

/// Parses an IPv4 literal with `inet_aton` semantics: one to four parts separated by dots, each
/// decimal, octal (leading `0`) or hex (`0x`); the last part fills the remaining bytes.
/// `127.1`, `2130706433`, `0177.0.0.1` and `0x7f.1` all give 127.0.0.1. `None` when invalid.
pub fn parse_ipv4_literal(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut nums = Vec::with_capacity(parts.len());
    for p in &parts {
        nums.push(parse_ipv4_part(p)?);
    }
    let (last, init) = nums.split_last()?;
    let mut value: u64 = 0;
    for n in init {
        if *n > 255 {
            return None;
        }
        value = (value << 8) | n;
    }
    let rest_bits = 8 * (4 - init.len() as u32);
    if *last >= (1u64 << rest_bits) {
        return None;
    }
    value = (value << rest_bits) | last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

fn parse_ipv4_part(p: &str) -> Option<u64> {
    let (digits, radix) = if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
        if h.is_empty() {
            return Some(0);
        }
        (h, 16)
    } else if p.len() > 1 && p.starts_with('0') {
        (&p[1..], 8)
    } else {
        (p, 10)
    };
    if digits.is_empty() || digits.len() > 12 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Parses a decimal port, 1-65535.
pub fn parse_port(p: &str) -> Result<u16, HostError> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostError::BadPort(p.to_string()));
    }
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(HostError::BadPort(p.to_string())),
    }
}

/// Parses `host[:port]` (a CONNECT authority or a `Host` header). `default_port` is used when no
/// port is given; `None` makes the port mandatory.
pub fn parse_authority(input: &str, default_port: Option<u16>) -> Result<Target, HostError> {
    if input.contains('@') {
        return Err(HostError::Userinfo);
    }
    let (host_part, port_part) = if input.starts_with('[') {
        match input.find(']') {
            Some(i) => {
                let rest = &input[i + 1..];
                let port = match rest {
                    "" => None,
                    r => Some(r.strip_prefix(':').ok_or_else(|| HostError::BadIpv6(input.to_string()))?),
                };
                (&input[..=i], port)
            }
            None => return Err(HostError::BadIpv6(input.to_string())),
        }
    } else {
        match input.split_once(':') {
            Some((h, p)) if !p.contains(':') => (h, Some(p)),
            Some(_) => return Err(HostError::BadIpv6(input.to_string())),
            None => (input, None),
        }
    };
    let host = parse_host(host_part)?;
    let port = match port_part {
        Some(p) => parse_port(p)?,
        None => default_port.ok_or(HostError::MissingPort)?,
    };
    Ok(Target { host, port })
}

/// Parses an HTTP absolute-form request target (`http://host[:port]/path?query`) into the target
/// and the origin-form path to send upstream.
pub fn parse_absolute_form(target: &str) -> Result<(Target, String), HostError> {
    parse_absolute_form_with_port(target, 80)
}

/// [`parse_absolute_form`] with the port a URL without one means: inside a tunnel, the tunnel's
/// port (as for its `Host` headers), since that is the server the request reaches.
pub fn parse_absolute_form_with_port(target: &str, default_port: u16) -> Result<(Target, String), HostError> {
    for &b in target.as_bytes() {
        if b <= 0x20 || b == 0x7f {
            return Err(HostError::ControlByte(b));
        }
        if b >= 0x80 {
            return Err(HostError::NonAscii);
        }
    }
    for c in ['#', '\\'] {
        if target.contains(c) {
            return Err(HostError::BadUrlChar(c));
        }
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(HostError::NotAbsolute);
    };
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(HostError::BadScheme(scheme.to_string()));
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    let t = parse_authority(authority, Some(default_port))?;
    Ok((t, path))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Host {
        Host::Ip(IpAddr::V4(s.parse().unwrap()))
    }

    #[test]
    fn every_ipv4_spelling_of_loopback_is_a_literal() {
        for s in [
            "127.0.0.1",
            "2130706433",
            "0177.0.0.1",
            "0x7f.1",
            "127.1",
            "0x7f000001",
            "017700000001",
            "127.0.1",
            "0x7F.0.0.1",
            "127.0.0.1.",
        ] {
            assert_eq!(parse_host(s), Ok(v4("127.0.0.1")), "{s}");
        }
        assert_eq!(parse_host("10.1"), Ok(v4("10.0.0.1")));
        assert_eq!(parse_host("0"), Ok(v4("0.0.0.0")));
    }

    #[test]
    fn bad_numeric_hosts_are_refused_not_resolved() {
        for s in ["256.0.0.1", "1.2.3.4.5", "08.1.1.1", "0x1g.1", "4294967296", "evil.123"] {
            assert!(parse_host(s).is_err(), "{s}");
        }
        assert_eq!(parse_host("0x7f.evil"), Ok(Host::Name("0x7f.evil".into())));
    }

    #[test]
    fn names_are_lowercased_and_one_trailing_dot_is_dropped() {
        assert_eq!(parse_host("Allowed.TEST."), Ok(Host::Name("allowed.test".into())));
        assert!(parse_host("allowed.test..").is_err());
        assert!(parse_host(".").is_err());
        assert!(parse_host("a..b").is_err());
        assert!(parse_host("-a.b").is_err());
    }

    #[test]
    fn injection_and_tricks_are_refused() {
        assert_eq!(parse_host("a\0b"), Err(HostError::ControlByte(0)));
        assert_eq!(parse_host("a\r\nb"), Err(HostError::ControlByte(b'\r')));
        assert_eq!(parse_host("аllowed.test"), Err(HostError::NonAscii));
        assert_eq!(parse_host("evil.test#@allowed.test"), Err(HostError::ForbiddenChar('#')));
        assert_eq!(parse_host("a%2e.test"), Err(HostError::ForbiddenChar('%')));
        assert_eq!(parse_host("*.test"), Err(HostError::ForbiddenChar('*')));
        assert_eq!(parse_absolute_form("http://evil.test#@allowed.test/"), Err(HostError::BadUrlChar('#')));
        assert_eq!(parse_absolute_form("http://allowed.test@evil.test/"), Err(HostError::Userinfo));
        assert_eq!(parse_absolute_form("http://a\\@b/"), Err(HostError::BadUrlChar('\\')));
    }

    #[test]
    fn ipv6_literals() {
        assert_eq!(parse_host("[::1]"), Ok(Host::Ip("::1".parse().unwrap())));
        assert_eq!(parse_host("::1"), Ok(Host::Ip("::1".parse().unwrap())));
        assert!(parse_host("[fe80::1%eth0]").is_err());
        assert_eq!(parse_authority("[::ffff:127.0.0.1]:443", None).map(|t| t.port), Ok(443));
        assert!(parse_authority("::1:443", None).is_err());
    }

    #[test]
    fn authorities_and_urls() {
        let t = parse_authority("allowed.test:8443", None).unwrap();
        assert_eq!(t.to_string(), "allowed.test:8443");
        assert_eq!(parse_authority("allowed.test", None), Err(HostError::MissingPort));
        assert_eq!(parse_authority("allowed.test", Some(80)).unwrap().port, 80);
        for p in ["0", "65536", "+80", "8o", ""] {
            assert!(parse_authority(&format!("a.test:{p}"), None).is_err(), "{p}");
        }
        let (t, path) = parse_absolute_form("HTTP://Allowed.test:81?x=1").unwrap();
        assert_eq!((t.to_string(), path.as_str()), ("allowed.test:81".into(), "/?x=1"));
        assert!(matches!(parse_absolute_form("https://allowed.test/"), Err(HostError::BadScheme(_))));
        assert_eq!(parse_absolute_form("/index.html"), Err(HostError::NotAbsolute));
    }
}
