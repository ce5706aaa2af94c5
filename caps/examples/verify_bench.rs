//! Measures token verification: cold (full decode + HMAC chain + covering checks, cache
//! disabled) against cached (digest lookup plus the expiry/revocation checks), with the SHA-256
//! of the token string — the least a cache keyed by digest can cost — as the in-run baseline.
//! Run with `cargo run --release -p axp-caps --example verify_bench`. Prints figures; asserts
//! nothing about time.

use std::hint::black_box;
use std::time::Instant;

use axp_caps::{Minter, Verifier};
use axp_protocol::CapabilitySet;
use sha2::{Digest, Sha256};

fn per_call_us(iters: u32, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(iters)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let key = [42u8; 32];
    let root = CapabilitySet::parse_all(&[
        "fs.write(/work/project)",
        "fs.read(/usr/share/dict)",
        "net.connect(*.github.com:443)",
        "net.connect(pypi.org:443)",
        "tool(github__*)",
        "tool(time__*)",
        "proc.spawn",
        "pty.open",
    ])
    .map_err(|e| format!("{e:?}"))?;
    let child = CapabilitySet::parse_all(&[
        "fs.read(/work/project/src)",
        "net.connect(api.github.com:443)",
        "tool(github__list_*)",
        "proc.spawn",
    ])
    .map_err(|e| format!("{e:?}"))?;
    let grandchild =
        CapabilitySet::parse_all(&["tool(github__list_issues)", "proc.spawn"]).map_err(|e| format!("{e:?}"))?;
    let now = 1_000;
    let t0 = Minter::new(key).mint("s_bench", &root, u64::MAX / 2);
    let t2 = t0.attenuate(&child, None)?.attenuate(&grandchild, None)?;
    let iters = 50_000;
    println!("token sizes: root {} B, depth-2 {} B", t0.to_string().len(), t2.to_string().len());
    for (name, t) in [("root (depth 0)", t0), ("depth 2", t2)] {
        let s = t.to_string();
        let cold = Verifier::with_cache_capacity(key, 0);
        let warm = Verifier::new(key);
        warm.verify(&s, now)?;
        warm.revoke("some-other-id"); // a non-empty revocation set, as in production
        cold.revoke("some-other-id");
        let base = per_call_us(iters, || {
            black_box(Sha256::digest(black_box(s.as_bytes())));
        });
        let c = per_call_us(iters, || {
            black_box(cold.verify(black_box(&s), now).ok());
        });
        let w = per_call_us(iters, || {
            black_box(warm.verify(black_box(&s), now).ok());
        });
        println!(
            "{name}: sha256(token) {base:.2} µs | cold verify {c:.2} µs ({:.1}x baseline) | cached verify {w:.2} µs ({:.1}x baseline) | cold/cached {:.1}x",
            c / base,
            w / base,
            c / w
        );
    }
    Ok(())
}
