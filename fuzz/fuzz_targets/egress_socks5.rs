//! Attacks the egress proxy's SOCKS5 reader (`axp_egress_policy::socks`: `parse_greeting`,
//! `parse_request`) and the refusals it maps to (`refusal`). The input is a client's bytes from
//! the start of the connection (a greeting, then a request), tried as they are and with the
//! greeting skipped. Invariants checked: nothing panics; what a message consumes is within the
//! input and exactly its encoded length; cutting the input short never turns a message into a
//! refusal, only into "incomplete" (so a message split over reads is judged like one read); a
//! greeting accepted offers the no-authentication method; a request's domain is judged by the
//! one host parser, so the target is exactly what `parse_host` makes of it, and the target,
//! encoded again, reads back the same; a refused request maps to a reason code of the audit
//! format and a reply code a client understands.

#![no_main]

use std::net::IpAddr;

use axp_egress_policy::host::{Host, Target, parse_host};
use axp_egress_policy::refusal::{socks_greeting_refusal, socks_request_refusal};
use axp_egress_policy::socks::{SocksError, parse_greeting, parse_request, reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let greeting = parse_greeting(data);
    check_prefixes(data, parse_greeting);
    match &greeting {
        Ok(Some(n)) => {
            assert_eq!(*n, 2 + usize::from(data[1]));
            assert!(*n <= data.len());
            assert!(data[0] == 5 && data[2..*n].contains(&0));
            check_request(&data[*n..]);
        }
        Ok(None) => {}
        Err(e) => {
            let (code, _) = socks_greeting_refusal(e);
            assert!(matches!(code, "unsupported" | "malformed"), "{code}");
        }
    }
    check_request(data);
});

fn check_request(data: &[u8]) {
    let parsed = parse_request(data);
    check_prefixes(data, parse_request);
    match parsed {
        Ok(Some((t, n))) => {
            assert!(n <= data.len());
            assert_ne!(t.port, 0);
            assert_eq!(&data[..3], &[5, 1, 0]);
            if data[3] == 3 {
                // The domain form goes through the one host parser and nothing else.
                let len = usize::from(data[4]);
                let name = std::str::from_utf8(&data[5..5 + len]).unwrap();
                assert_eq!(parse_host(name), Ok(t.host.clone()));
                assert_eq!(n, 5 + len + 2);
            }
            let again = encode(&t);
            assert_eq!(parse_request(&again), Ok(Some((t, again.len()))));
        }
        Ok(None) => {}
        Err(e) => {
            let (code, _) = socks_request_refusal(&e);
            assert!(matches!(code, "invalid_host" | "unsupported" | "malformed"), "{code}");
            let r = e.reply_code();
            assert!(
                [reply::FAILURE, reply::NOT_ALLOWED, reply::COMMAND_NOT_SUPPORTED, reply::ADDRESS_NOT_SUPPORTED]
                    .contains(&r),
                "{e:?}: {r}"
            );
        }
    }
}

/// Every strict prefix reads as incomplete, or exactly as the whole input reads.
fn check_prefixes<X: PartialEq + std::fmt::Debug>(data: &[u8], parse: impl Fn(&[u8]) -> Result<Option<X>, SocksError>) {
    let whole = parse(data);
    for cut in 0..data.len().min(300) {
        let part = parse(&data[..cut]);
        if part != Ok(None) {
            assert_eq!(part, whole, "cut at {cut}");
        }
    }
}

/// A CONNECT request for `t` in the address type its host calls for.
fn encode(t: &Target) -> Vec<u8> {
    let mut out = vec![5, 1, 0];
    match &t.host {
        Host::Name(n) => {
            out.push(3);
            out.push(n.len() as u8);
            out.extend_from_slice(n.as_bytes());
        }
        Host::Ip(IpAddr::V4(a)) => {
            out.push(1);
            out.extend_from_slice(&a.octets());
        }
        Host::Ip(IpAddr::V6(a)) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
    }
    out.extend_from_slice(&t.port.to_be_bytes());
    out
}
