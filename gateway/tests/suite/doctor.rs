//! `axp doctor`, `axp completions` and `axp man`, run as the real binary: a good fleet passes
//! with every command resolved; missing, unexecutable and broken commands fail by name with a
//! fix; typos in the fleet and in axp.toml fail with the loaders' located messages; a state
//! directory held by a running gateway is reported as held, and as free once it stops.

use std::path::Path;
use std::process::Command;

use super::*;

/// `axp doctor --json ARGS…` run in `dir` (so no stray axp.toml is found), with its exit code.
fn doctor(dir: &Path, args: &[&str]) -> (i32, Value) {
    let out = Command::new(axp())
        .arg("doctor")
        .arg("--json")
        .args(args)
        .current_dir(dir)
        .env("XDG_STATE_HOME", dir.join("xdg"))
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}):\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap(), report)
}

fn check<'a>(report: &'a Value, area: &str, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["area"] == area && c["name"] == name)
        .unwrap_or_else(|| panic!("no check {area}/{name} in {report:#}"))
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

#[test]
fn a_good_fleet_passes_with_every_command_resolved() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = write_fleet(tmp.path(), json!({"remote": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}));
    let state = tmp.path().join("state");
    let (code, r) =
        doctor(tmp.path(), &["--mcp-config", fleet.to_str().unwrap(), "--state-dir", state.to_str().unwrap()]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["ok"], true);
    assert_eq!(r["summary"]["fail"], 0, "{r:#}");
    assert_eq!(check(&r, "config", "fleet.json")["status"], "ok");
    assert!(text(&check(&r, "config", "fleet.json")["detail"]).ends_with("3 servers"), "{r:#}");
    let everything = check(&r, "servers", "everything");
    assert_eq!(everything["status"], "ok");
    assert!(text(&everything["detail"]).ends_with("/node"), "node is looked up on PATH: {everything}");
    let time = check(&r, "servers", "time");
    assert_eq!(time["status"], "ok", "{time}");
    assert_eq!(text(&time["detail"]), venv_bin("mcp-server-time"));
    let remote = check(&r, "servers", "remote");
    assert_eq!(remote["status"], "ok");
    assert!(text(&remote["detail"]).contains("not contacted"), "{remote}");
    let st = check(&r, "state", "state dir");
    assert_eq!(st["status"], "ok");
    assert!(text(&st["detail"]).contains("does not exist yet"), "{st}");
    assert!(!state.exists(), "doctor creates nothing");

    // The tiers agree with `axp sandbox check`, which reads the same probe.
    let sandbox_ok = Command::new(axp()).args(["sandbox", "check"]).output().unwrap().status.success();
    let tiers = check(&r, "host", "sandbox tiers");
    assert!(text(&tiers["detail"]).contains("kernel-lsm (default): granted") == sandbox_ok, "{tiers}");
    for layer in ["user namespaces", "pivot_root", "landlock", "seccomp", "cgroups"] {
        assert_ne!(check(&r, "host", layer)["status"], "fail", "{r:#}");
    }

    // The same checks as text, one line each.
    let out = Command::new(axp())
        .args(["doctor", "--mcp-config", fleet.to_str().unwrap(), "--state-dir", state.to_str().unwrap()])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let out = String::from_utf8(out.stdout).unwrap();
    assert!(out.lines().any(|l| l.starts_with("  ok    time ")), "{out}");
    assert!(out.contains("\nservers\n") && out.trim_end().ends_with("0 failures"), "{out}");
}

#[test]
fn missing_and_broken_commands_fail_by_name_with_a_fix() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let plain = dir.join("plain-server.sh");
    std::fs::write(&plain, "#!/bin/sh\nexit 0\n").unwrap();
    let moved = dir.join("moved-venv-server");
    std::fs::write(&moved, "#!/nonexistent/venv/bin/python3\nprint('hi')\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&moved, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fleet = write_fleet(
        dir,
        json!({
            "ghost": {"command": "mcp-server-ghost", "args": ["--stdio"]},
            "typo": {"command": "nodee"},
            "nonpx": {"command": "npx", "args": ["-y", "some-server"], "env": {"PATH": "/nonexistent"}},
            "plain": {"command": "./plain-server.sh", "cwd": dir.to_str().unwrap()},
            "moved": {"command": moved.to_str().unwrap()},
            "badurl": {"type": "http", "url": "http://[::1/mcp"},
            "cleartext": {"type": "http", "url": "http://example.com/mcp"}
        }),
    );
    let state = dir.join("state");
    let (code, r) = doctor(dir, &["--mcp-config", fleet.to_str().unwrap(), "--state-dir", state.to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(r["ok"], false);
    assert_eq!(r["summary"]["fail"], 6, "{r:#}");

    let ghost = check(&r, "servers", "ghost");
    assert_eq!(ghost["status"], "fail");
    assert!(text(&ghost["detail"]).contains("`mcp-server-ghost` is not found on your PATH"), "{ghost}");
    assert!(text(&ghost["fix"]).contains("install `mcp-server-ghost`, or give its absolute path"), "{ghost}");
    let typo = check(&r, "servers", "typo");
    assert!(text(&typo["fix"]).starts_with("did you mean `node`?"), "{typo}");
    let npx = check(&r, "servers", "nonpx");
    assert!(text(&npx["detail"]).contains("the server's own `env.PATH`"), "{npx}");
    assert!(text(&npx["fix"]).contains("install Node.js"), "{npx}");
    let plain = check(&r, "servers", "plain");
    assert!(text(&plain["detail"]).contains("is not an executable file"), "{plain}");
    assert!(text(&plain["fix"]).contains("chmod +x"), "{plain}");
    let moved = check(&r, "servers", "moved");
    assert!(text(&moved["detail"]).contains("its interpreter /nonexistent/venv/bin/python3 does not exist"), "{moved}");
    let bad = check(&r, "servers", "badurl");
    assert_eq!(bad["status"], "fail");
    assert!(text(&bad["detail"]).contains("is not a valid URL"), "{bad}");
    let clear = check(&r, "servers", "cleartext");
    assert_eq!(clear["status"], "warn");
    assert!(text(&clear["fix"]).contains("use https"), "{clear}");
    // The good servers of the same file still pass.
    assert_eq!(check(&r, "servers", "time")["status"], "ok");

    // As text: the failing server is named, with its fix on the next line.
    let out = Command::new(axp())
        .args(["doctor", "--mcp-config", fleet.to_str().unwrap(), "--state-dir", state.to_str().unwrap()])
        .current_dir(dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = String::from_utf8(out.stdout).unwrap();
    let at = out.find("  FAIL  ghost ").unwrap_or_else(|| panic!("{out}"));
    let next = out[at..].lines().nth(1).unwrap();
    assert!(next.trim_start().starts_with("fix: install `mcp-server-ghost`"), "{out}");
}

#[test]
fn typos_in_the_fleet_and_in_axp_toml_fail_where_they_are() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fleet = dir.join("fleet.json");
    std::fs::write(&fleet, "{\"mcpServers\": {\n  \"time\": {\n    \"comand\": \"mcp-server-time\"\n  }\n}}\n")
        .unwrap();
    // Found as `axp serve` finds it: ./axp.toml, no --config.
    std::fs::write(dir.join("axp.toml"), "listne = \"127.0.0.1:7000\"\n").unwrap();
    let (code, r) = doctor(dir, &["--mcp-config", fleet.to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#}");
    let f = check(&r, "config", "fleet.json");
    assert_eq!(f["status"], "fail");
    let detail = text(&f["detail"]);
    assert!(detail.contains("fleet.json:3:") && detail.contains("unknown field `comand`"), "{detail}");
    assert!(detail.contains("did you mean `command`?"), "{detail}");
    let t = check(&r, "config", "axp.toml");
    assert_eq!(t["status"], "fail");
    assert!(text(&t["detail"]).contains("axp.toml:1:1") && text(&t["detail"]).contains("`listen`"), "{t}");
    // The state dir named by the default (XDG_STATE_HOME) is still checked.
    let st = check(&r, "state", "state dir");
    assert!(text(&st["detail"]).starts_with(dir.join("xdg/axp").to_str().unwrap()), "{st}");
}

#[test]
fn a_state_dir_held_by_a_running_gateway_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let gw = gateway().state(&state).start();
    let (code, r) = doctor(tmp.path(), &["--state-dir", state.to_str().unwrap()]);
    let st = check(&r, "state", "state dir");
    assert_eq!(st["status"], "warn", "{st}");
    assert!(text(&st["detail"]).contains("is held by a running gateway"), "{st}");
    assert!(text(&st["fix"]).contains("own --state-dir"), "{st}");
    assert_eq!(code, 0, "a warning alone does not fail: {r:#}");
    drop(gw);
    let (_, r) = doctor(tmp.path(), &["--state-dir", state.to_str().unwrap()]);
    let st = check(&r, "state", "state dir");
    assert_eq!(st["status"], "ok", "{st}");
    assert!(text(&st["detail"]).ends_with("writable, not in use"), "{st}");
    // A file where the directory should be fails.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let (code, r) = doctor(tmp.path(), &["--state-dir", file.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(text(&check(&r, "state", "state dir")["detail"]).ends_with("is not a directory"), "{r:#}");
}

#[test]
fn completions_and_man_pages_come_from_the_command_tree() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = Command::new(axp()).args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains("serve") && script.contains("doctor") && script.contains("mcp-config"), "{shell}");
    }
    // bash really loads the script and registers it for `axp`.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("source <('{}' completions bash) && complete -p axp", axp()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(" axp"), "{}", String::from_utf8_lossy(&out.stdout));

    let out = Command::new(axp()).arg("man").output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH axp 1") && page.contains("serve") && page.contains("doctor"), "{page}");
    let out = Command::new(axp()).args(["man", "serve"]).output().unwrap();
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH axp\\-serve 1") || page.contains(".TH axp-serve 1"), "{page}");
    assert!(page.contains("mcp\\-config"), "{page}");
    let out = Command::new(axp()).args(["man", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no subcommand `nope`; one of: serve"));
}

/// `[store]`: a PostgreSQL store is looked at as `axp serve` would reach it, without writing:
/// reachable over verified TLS with the cluster's CA (and its schema version said), refused
/// with the fix when the certificate is not trusted; the retention setting is checked too.
#[test]
fn the_store_is_checked_over_tls_without_being_written() {
    let Some(url) = super::jobs::pg_url() else { return };
    let Ok(ca) = std::env::var("AXP_TEST_PG_CA") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "AXP_TEST_PG_CA is not set: export AXP_TEST_PG_CA=\"$(scripts/pg-cluster.sh ca)\""
        );
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("axp.toml");
    let sep = if url.contains('?') { '&' } else { '?' };
    std::fs::write(
        &config,
        format!("[store]\nurl = \"{url}{sep}sslmode=verify-full&sslrootcert={ca}\"\nkeep_ended_jobs_days = 30\n"),
    )
    .unwrap();
    let (_, report) = doctor(tmp.path(), &["--config", config.to_str().unwrap()]);
    let pg = check(&report, "store", "postgres");
    assert_eq!(pg["status"], "ok", "{pg:#}");
    assert!(text(&pg["detail"]).contains("reachable over TLS, the server's certificate checked"), "{pg:#}");
    assert!(text(&pg["detail"]).contains("schema version"), "{pg:#}");
    assert!(!text(&pg["detail"]).contains(&url), "the detail never shows the URL (it holds the password): {pg:#}");
    assert_eq!(check(&report, "store", "retention")["status"], "ok");

    std::fs::write(&config, format!("[store]\nurl = \"{url}{sep}sslmode=verify-full\"\nkeep_ended_jobs_days = 0\n"))
        .unwrap();
    let (code, report) = doctor(tmp.path(), &["--config", config.to_str().unwrap()]);
    assert_eq!(code, 1, "{report:#}");
    let pg = check(&report, "store", "postgres");
    assert_eq!(pg["status"], "fail", "{pg:#}");
    assert!(text(&pg["detail"]).contains("sslrootcert=/path/to/ca.pem"), "{pg:#}");
    assert_eq!(check(&report, "store", "retention")["status"], "fail");
}
