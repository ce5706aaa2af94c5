//! Attacks the egress proxy's TLS ClientHello reader (`axp_egress_policy::tls`) and the check a
//! tunnel's first bytes go through (`inspect`, and the client side of `relay::UpFilter` that
//! holds them until it is decided). Two modes, by the first byte: `0x16` feeds the input as the
//! client's first bytes; anything else takes the rest as a server name and builds a ClientHello
//! carrying it. Invariants checked: the reader never panics, and a hello it reads back from
//! `build_client_hello` carries exactly the name put in; a strict prefix of the bytes that make
//! a hello is never malformed, only incomplete (so a hello split over reads is judged like one
//! read); a tunnel to a name lets the hello through exactly when its SNI parses, with the one
//! host parser, to that name and there is no Encrypted Client Hello, and a tunnel to an address
//! never lets an SNI through; whatever the tunnel releases to the upstream is a prefix of what
//! the client sent, and released bytes do not depend on how the client's bytes were split.

#![no_main]

use axp_egress_policy::host::{Host, Target, parse_host};
use axp_egress_policy::inspect::{Inner, inspect};
use axp_egress_policy::relay::UpFilter;
use axp_egress_policy::tls::{HelloParse, MAX_HELLO, build_client_hello, parse_client_hello};
use libfuzzer_sys::fuzz_target;

const MAX_HEAD: usize = 32 * 1024;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    if first == 22 {
        check_bytes(data);
    } else if rest.len() <= 1024 {
        let name = String::from_utf8_lossy(rest);
        check_name(&name);
    }
});

fn tunnel(host: &str) -> Target {
    Target { host: parse_host(host).unwrap(), port: 443 }
}

/// A hello built around `name` reads back with exactly that name, and the tunnel's decision is
/// the host parser's.
fn check_name(name: &str) {
    let hello = build_client_hello(Some(name));
    let HelloParse::Hello(h) = parse_client_hello(&hello) else {
        panic!("a built hello does not read back: {name:?}");
    };
    assert_eq!(h.sni.as_deref(), Some(name));
    assert!(!h.ech);
    for host in ["allowed.test", "203.0.113.7"] {
        let t = tunnel(host);
        let passes = matches!(&t.host, Host::Name(n) if parse_host(name) == Ok(Host::Name(n.clone())));
        let got = inspect(&t, &hello, MAX_HEAD);
        assert_eq!(got.is_ok(), passes, "SNI {name:?} through a tunnel to {host}: {got:?}");
        if passes {
            assert_eq!(got, Ok(Some(Inner::Pass("tls"))));
        }
    }
    check_bytes(&hello);
}

fn check_bytes(data: &[u8]) {
    let parsed = parse_client_hello(data);
    if let HelloParse::Hello(h) = &parsed {
        // Every strict prefix of a hello is either the same hello (the bytes after it are not
        // part of it) or incomplete: never malformed, never something else.
        for cut in [1, 5, 6, data.len() / 2, data.len().saturating_sub(1)] {
            if cut == 0 || cut >= data.len() {
                continue;
            }
            match parse_client_hello(&data[..cut]) {
                HelloParse::NeedMore => {}
                HelloParse::Hello(p) => assert_eq!(&p, h),
                other => panic!("a prefix of {cut} bytes of a hello reads as {other:?}"),
            }
        }
        for host in ["allowed.test", "203.0.113.7"] {
            let t = tunnel(host);
            let got = inspect(&t, data, MAX_HEAD).map_err(|r| r.0);
            let expected = if h.ech {
                Err("tls_ech")
            } else {
                match (&t.host, h.sni.as_deref()) {
                    (Host::Name(n), Some(s)) if parse_host(s) == Ok(Host::Name(n.clone())) => {
                        Ok(Some(Inner::Pass("tls")))
                    }
                    (Host::Name(_), Some(_)) => Err("sni_mismatch"),
                    (Host::Name(_), None) => Err("sni_missing"),
                    (Host::Ip(_), None) => Ok(Some(Inner::Pass("tls"))),
                    (Host::Ip(_), Some(_)) => Err("sni_mismatch"),
                }
            };
            assert_eq!(got, expected, "{host}");
        }
    }
    // The tunnel's client side: released bytes are a prefix of what came in, the same whether
    // the bytes came in one read or two (below the size where an unfinished hello is refused,
    // which depends on how much is held at once).
    if data.len() > MAX_HELLO {
        return;
    }
    let t = tunnel("allowed.test");
    let whole = UpFilter::tunnel().client(&t, data.to_vec(), MAX_HEAD).map_err(|r| r.0);
    let cut = usize::from(data[data.len() / 2]) % (data.len() + 1);
    let mut split = UpFilter::tunnel();
    let (a, b) = data.split_at(cut);
    let two = split.client(&t, a.to_vec(), MAX_HEAD).and_then(|mut out| {
        out.extend(split.client(&t, b.to_vec(), MAX_HEAD)?);
        Ok(out)
    });
    let two = two.map_err(|r| r.0);
    if let Ok(out) = &whole {
        assert!(data.starts_with(out));
    }
    assert_eq!(whole, two, "split at {cut}");
}
