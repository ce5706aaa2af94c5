//! Host probing: this machine supports `kernel-lsm`; `check` says what is in force; and when
//! user namespaces are forbidden (simulated for real: `user.max_user_namespaces = 0` written in a
//! child user namespace we own) the probe says so with the reason and the sandbox refuses to run.

use std::process::Command;

use super::{bin, run_cmd, workspace};

#[test]
fn probe_grants_kernel_lsm_on_this_host() {
    let host = axp_sandbox::probe();
    let layers =
        host.kernel_lsm_available().unwrap_or_else(|e| panic!("kernel-lsm should be available here: {e}\n{host}"));
    assert!(layers.landlock_abi >= 1);
    assert!(layers.seccomp);
    assert!(layers.namespaces.contains(&"user") && layers.namespaces.contains(&"net"));
    // This host binds pids/memory to cgroup v1, so cgroup v2 limits are reported as absent.
    assert_eq!(layers.cgroups, host.cgroup.is_ok());
}

#[test]
fn check_prints_the_layers() {
    let mut c = Command::new(bin());
    c.arg("check");
    let o = run_cmd(c, 10);
    assert_eq!(o.code(), Some(0), "{o:?}");
    for needle in ["user namespaces  yes", "landlock         yes (ABI", "tier kernel-lsm: available"] {
        assert!(o.stdout.contains(needle), "missing {needle:?} in:\n{}", o.stdout);
    }
}

/// Runs `script` with `$BIN` set, inside a user namespace where max_user_namespaces is 0.
fn in_userns_forbidding_nested(script: &str) -> super::Outcome {
    let mut c = Command::new("unshare");
    c.args(["--user", "--map-root-user", "sh", "-c"])
        .arg(format!("echo 0 > /proc/sys/user/max_user_namespaces || exit 99; {script}"))
        .env("BIN", bin());
    run_cmd(c, 15)
}

#[test]
fn probe_reports_forbidden_user_namespaces_with_the_reason() {
    let o = in_userns_forbidding_nested("exec \"$BIN\" check");
    assert_ne!(o.code(), Some(99), "could not set up the simulation: {o:?}");
    assert_eq!(o.code(), Some(1), "{o:?}");
    assert!(o.stdout.contains("user namespaces  NO — sysctl user.max_user_namespaces = 0"), "{}", o.stdout);
    assert!(o.stdout.contains("tier kernel-lsm: UNAVAILABLE — user namespaces unavailable"), "{}", o.stdout);
}

#[test]
fn sandbox_refuses_to_run_when_user_namespaces_are_forbidden() {
    let ws = workspace();
    let o = in_userns_forbidding_nested(&format!(
        "exec \"$BIN\" run --workspace {} -- sh -c 'echo UNCONFINED'",
        ws.path().display()
    ));
    assert_eq!(o.code(), Some(axp_sandbox::EXIT_SETUP), "{o:?}");
    assert!(!o.stdout.contains("UNCONFINED"), "{o:?}");
    assert!(o.stderr.starts_with("axp-sandbox: unshare"), "{o:?}");
}
