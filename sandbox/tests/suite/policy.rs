//! The policy model and its encoding: round trips, validation, hidden paths, and refusal of
//! malformed, forged or other-version blobs (the exec process must never half-read a policy).

use std::ffi::OsString;

use axp_sandbox::{Limits, NetPolicy, Policy, PolicyError};

fn sample() -> Policy {
    Policy::builder("/work/ws")
        .fs_write("/work/ws")
        .fs_read("/root/.pyenv/versions/3.11.7")
        .fs_read("/work/ws/sub")
        .fs_write("/var/cache/axp")
        .hide("/work/ws/.axp-state")
        .net_proxy("/run/axp/proxy.sock", 18080)
        .env("SECRET", OsString::from("va=l\u{e9}"))
        .pty(true)
        .limits(Limits {
            procs: Some(10),
            memory: None,
            file_size: Some(1),
            open_files: Some(2),
            cpu_secs: Some(3),
            nice: Some(7),
        })
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
fn a_nice_value_past_19_is_refused() {
    let err = Policy::builder("/w").limits(Limits { nice: Some(20), ..Limits::default() }).build().unwrap_err();
    assert_eq!(err.to_string(), "nice value 20 is outside 0-19");
}

#[test]
fn builder_compiles_grants() {
    let p = sample();
    assert!(p.workspace_writable);
    assert_eq!(p.read_only, vec![std::path::PathBuf::from("/root/.pyenv/versions/3.11.7")]);
    assert_eq!(p.read_write, vec![std::path::PathBuf::from("/var/cache/axp")]);
    assert_eq!(p.hide, vec![std::path::PathBuf::from("/work/ws/.axp-state")]);
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
    let mut forged = b"AXPSBX2\0".to_vec();
    forged.extend_from_slice(&4u32.to_le_bytes());
    forged.extend_from_slice(b"/w/x");
    forged.push(1);
    forged.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(Policy::decode(&forged).is_err());
    assert!(Policy::from_env_value(std::ffi::OsStr::new("zz")).is_err());
}

#[test]
fn reads_below_a_hidden_path_are_kept_even_inside_the_workspace() {
    // A read inside the workspace is normally folded into the workspace grant; below a hidden
    // path the mask covers it, so it must stay a grant of its own to be bound on top.
    let p = Policy::builder("/w")
        .fs_write("/w")
        .hide("/w/state")
        .fs_read("/w/state/codemode/job")
        .fs_read("/w/src")
        .build()
        .expect("policy");
    assert_eq!(p.read_only, vec![std::path::PathBuf::from("/w/state/codemode/job")]);
    assert_eq!(p.hide, vec![std::path::PathBuf::from("/w/state")]);
    for bad in ["relative", "/w/../etc", "/", "/proc/1"] {
        assert!(
            matches!(Policy::builder("/w").hide(bad).build(), Err(PolicyError::BadPath { .. })),
            "hiding {bad} must be refused"
        );
    }
}

#[test]
fn a_blob_of_the_previous_version_is_refused() {
    // Version 1 had no hidden paths and version 2 no nice value: read with this field order,
    // their fields would be taken for others. The magic carries the version, so each is refused
    // outright.
    let mut old = sample().encode();
    assert_eq!(&old[..8], b"AXPSBX3\0");
    for v in [b'1', b'2'] {
        old[6] = v;
        assert_eq!(Policy::decode(&old), Err(PolicyError::Decode("wrong magic or version")));
    }
}
