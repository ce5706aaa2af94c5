//! SOCKS5 (RFC 1928) message parsing: the greeting and the CONNECT request, without
//! authentication. Pure functions: bytes in, a parsed message or a refusal out; the domain form
//! goes through the same host parser as every other form, so `\0`, CR/LF and non-ASCII refuse.
//! This module must not perform I/O or consult the allowlist.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::host::{Host, HostError, Target, parse_host};

/// SOCKS5 reply codes the proxy sends.
pub mod reply {
    /// Succeeded.
    pub const OK: u8 = 0;
    /// General failure.
    pub const FAILURE: u8 = 1;
    /// Connection not allowed by ruleset.
    pub const NOT_ALLOWED: u8 = 2;
    /// Host unreachable.
    pub const HOST_UNREACHABLE: u8 = 4;
    /// Connection refused.
    pub const REFUSED: u8 = 5;
    /// Command not supported.
    pub const COMMAND_NOT_SUPPORTED: u8 = 7;
    /// Address type not supported.
    pub const ADDRESS_NOT_SUPPORTED: u8 = 8;
}

/// Why a SOCKS5 message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SocksError {
    /// Wrong version byte or reserved byte.
    #[error("not a SOCKS5 message")]
    Version,
    /// The client offered no method without authentication.
    #[error("the client offered no SOCKS5 method without authentication")]
    NoAcceptableMethod,
    /// BIND or UDP ASSOCIATE.
    #[error("SOCKS5 command {0} is not supported (only CONNECT)")]
    Command(u8),
    /// Unknown address type.
    #[error("SOCKS5 address type {0} is not supported")]
    AddressType(u8),
    /// The domain does not parse as a host.
    #[error("{0}")]
    Host(#[from] HostError),
    /// Port 0.
    #[error("port 0 is not a destination")]
    Port,
}

impl SocksError {
    /// The reply code for this refusal.
    pub fn reply_code(&self) -> u8 {
        match self {
            SocksError::Command(_) => reply::COMMAND_NOT_SUPPORTED,
            SocksError::AddressType(_) => reply::ADDRESS_NOT_SUPPORTED,
            SocksError::Host(_) | SocksError::Port => reply::NOT_ALLOWED,
            _ => reply::FAILURE,
        }
    }
}

/// Parses the greeting `05 NMETHODS METHODS…`. `Ok(None)`: incomplete. On success, the number of
/// bytes consumed.
pub fn parse_greeting(buf: &[u8]) -> Result<Option<usize>, SocksError> {
    let Some(&v) = buf.first() else {
        return Ok(None);
    };
    if v != 5 {
        return Err(SocksError::Version);
    }
    let Some(&n) = buf.get(1) else {
        return Ok(None);
    };
    let Some(methods) = buf.get(2..2 + usize::from(n)) else {
        return Ok(None);
    };
    if !methods.contains(&0) {
        return Err(SocksError::NoAcceptableMethod);
    }
    Ok(Some(2 + usize::from(n)))
}

/// Parses `05 CMD 00 ATYP ADDR PORT`. `Ok(None)`: incomplete. On success, the target and the
/// number of bytes consumed.
pub fn parse_request(buf: &[u8]) -> Result<Option<(Target, usize)>, SocksError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    if buf[0] != 5 || buf[2] != 0 {
        return Err(SocksError::Version);
    }
    let (host, at) = match buf[3] {
        1 => {
            let Some(a) = buf.get(4..8) else {
                return Ok(None);
            };
            (Host::Ip(IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))), 8)
        }
        4 => {
            let Some(a) = buf.get(4..20) else {
                return Ok(None);
            };
            let mut o = [0u8; 16];
            o.copy_from_slice(a);
            (Host::Ip(IpAddr::V6(Ipv6Addr::from(o))), 20)
        }
        3 => {
            let Some(&n) = buf.get(4) else {
                return Ok(None);
            };
            let Some(d) = buf.get(5..5 + usize::from(n)) else {
                return Ok(None);
            };
            let s = std::str::from_utf8(d).map_err(|_| HostError::NonAscii)?;
            (parse_host(s)?, 5 + usize::from(n))
        }
        t => return Err(SocksError::AddressType(t)),
    };
    let Some(p) = buf.get(at..at + 2) else {
        return Ok(None);
    };
    if buf[1] != 1 {
        return Err(SocksError::Command(buf[1]));
    }
    let port = u16::from_be_bytes([p[0], p[1]]);
    if port == 0 {
        return Err(SocksError::Port);
    }
    Ok(Some((Target { host, port }, at + 2)))
}

/// A reply with the given code and an all-zero bound address.
pub fn reply_bytes(code: u8) -> [u8; 10] {
    [5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn greeting() {
        assert_eq!(parse_greeting(&[5, 2, 2, 0]), Ok(Some(4)));
        assert_eq!(parse_greeting(&[5, 2, 2]), Ok(None));
        assert_eq!(parse_greeting(&[5, 1, 2]), Err(SocksError::NoAcceptableMethod));
        assert_eq!(parse_greeting(&[4, 1, 0]), Err(SocksError::Version));
    }

    #[test]
    fn requests() {
        let mut r = vec![5, 1, 0, 3, 12];
        r.extend_from_slice(b"allowed.test");
        r.extend_from_slice(&443u16.to_be_bytes());
        let (t, n) = parse_request(&r).unwrap().unwrap();
        assert_eq!((t.to_string(), n), ("allowed.test:443".into(), r.len()));
        assert_eq!(parse_request(&r[..r.len() - 1]), Ok(None));
        let (t, _) = parse_request(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80]).unwrap().unwrap();
        assert_eq!(t.to_string(), "127.0.0.1:80");
        let mut bad = vec![5, 1, 0, 3, 5];
        bad.extend_from_slice(b"a\0b.c");
        bad.extend_from_slice(&[0, 80]);
        assert!(matches!(parse_request(&bad), Err(SocksError::Host(_))));
        assert_eq!(parse_request(&[5, 3, 0, 1, 1, 1, 1, 1, 0, 53]), Err(SocksError::Command(3)));
        let mut lit = vec![5, 1, 0, 3, 9];
        lit.extend_from_slice(b"127.0.0.1");
        lit.extend_from_slice(&[0, 80]);
        let (t, _) = parse_request(&lit).unwrap().unwrap();
        assert!(matches!(t.host, Host::Ip(_)));
    }
}
