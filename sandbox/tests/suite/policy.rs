//! The policy model and its encoding: round trips, validation, and refusal of malformed or
//! forged blobs (the exec process must never half-read a policy).

use std::ffi::OsString;

use axp_sandbox::{Limits, NetPolicy, Policy, PolicyError};

fn sample() -> Policy {
    Policy::builder("/work/ws")
        .fs_write("/work/ws")
        .fs_read("/root/.pyenv/versions/3.11.7")
        .fs_read("/work/ws/sub")
        .fs_write("/var/cache/axp")
        .net_proxy("/run/axp/proxy.sock", 18080)
        .env("SECRET", OsString::from("va=l\u{e9}"))
        .pty(true)
        .limits(Limits { procs: Some(10), memory: None, file_size: Some(1), open_files: Some(2), cpu_secs: Some(3) })
        .build()
        .expect("valid policy")
}

#[test]
fn encoding_round_trips() {
    let p = sample();
    assert_eq!(Policy::decode(&p.encode()).expect("decode"), p);
    assert_eq!(Policy::from_env_value(&p.to_env_value()).expect("hex"), p);
}

#[test]
fn builder_compiles_grants() {
    let p = sample();
    assert!(p.workspace_writable);
    assert_eq!(p.read_only, vec![std::path::PathBuf::from("/root/.pyenv/versions/3.11.7")]);
    assert_eq!(p.read_write, vec![std::path::PathBuf::from("/var/cache/axp")]);
    assert_eq!(p.cwd, std::path::PathBuf::from("/work/ws"));
    let ro = Policy::builder("/w").build().expect("policy");
    assert!(!ro.workspace_writable);
    assert_eq!(ro.net, NetPolicy::None);
}

#[test]
fn proxy_environment_has_no_bypass() {
    let env = sample().effective_env();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    for k in ["HTTP_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
        assert_eq!(get(k), Some("http://127.0.0.1:18080".into()), "{k}");
    }
    assert_eq!(get("NO_PROXY"), Some(OsString::new()));
    assert_eq!(get("no_proxy"), Some(OsString::new()));
}

#[test]
fn relative_and_dotdot_paths_are_refused() {
    assert!(matches!(Policy::builder("relative").build(), Err(PolicyError::BadPath { .. })));
    assert!(matches!(Policy::builder("/w").fs_read("/w/../etc").build(), Err(PolicyError::BadPath { .. })));
    for bad in ["/", "/proc/1", "/dev", "/sys/fs/cgroup"] {
        assert!(
            matches!(Policy::builder("/w").fs_read(bad).build(), Err(PolicyError::BadPath { .. })),
            "{bad} must be refused"
        );
    }
    assert!(matches!(Policy::builder("/w").env("A=B", "x").build(), Err(PolicyError::BadEnv { .. })));
    assert!(matches!(Policy::builder("/w").cwd("/etc").build(), Err(PolicyError::CwdNotVisible(_))));
}

#[test]
fn malformed_encodings_are_refused() {
    let bytes = sample().encode();
    for cut in [0, 5, 8, bytes.len() / 2, bytes.len() - 1] {
        assert!(Policy::decode(&bytes[..cut]).is_err(), "truncated at {cut}");
    }
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert_eq!(Policy::decode(&trailing), Err(PolicyError::Decode("trailing bytes")));
    let mut magic = bytes.clone();
    magic[0] = b'X';
    assert!(Policy::decode(&magic).is_err());
    // A forged huge element count must not allocate or loop.
    let mut forged = b"AXPSBX1\0".to_vec();
    forged.extend_from_slice(&4u32.to_le_bytes());
    forged.extend_from_slice(b"/w/x");
    forged.push(1);
    forged.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(Policy::decode(&forged).is_err());
    assert!(Policy::from_env_value(std::ffi::OsStr::new("zz")).is_err());
}
