//! `axp-sandbox-test`: a small binary for this crate's tests and benchmark. It dispatches
//! `__sandbox-exec` to [`axp_sandbox::exec_main`] exactly as the `axp` gateway does, prints the
//! host probe for `check`, and runs one command under a policy built from flags for `run`.
//! It must stay a thin shell over the library: no policy decisions live here.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use axp_sandbox::{EXEC_ARG, Limits, Policy};

const USAGE: &str = "usage:
  axp-sandbox-test check
  axp-sandbox-test run --workspace DIR [--ro] [--allow-read P]... [--allow-write P]...
      [--proxy SOCKET:PORT] [--env K=V]... [--cwd DIR] [--procs N] [--memory BYTES]
      [--fsize BYTES] [--nofile N] [--cpu SECS] [--tmp-size BYTES] [--pty]
      [--print-policy] -- CMD ARGS...
  (--print-policy prints the AXP_SANDBOX_POLICY value instead of running, for bench.sh)";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == EXEC_ARG) {
        axp_sandbox::exec_main(&args);
    }
    let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    match args.get(1).map(String::as_str) {
        Some("check") => {
            let host = axp_sandbox::probe();
            println!("{host}");
            if host.kernel_lsm_available().is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Some("run") => match run(&args[2..]) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("axp-sandbox-test: {e}\n{USAGE}");
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn num(v: Option<&String>, flag: &str) -> Result<u64, String> {
    v.ok_or(format!("{flag} needs a value"))?.parse().map_err(|e| format!("{flag}: {e}"))
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let mut it = args.iter();
    let mut workspace: Option<PathBuf> = None;
    let mut ro = false;
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    let mut proxy = None;
    let mut env = Vec::new();
    let mut cwd = None;
    let mut limits = Limits::default();
    let mut tmp_size = None;
    let mut pty = false;
    let mut print_policy = false;
    let mut cmd = Vec::new();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--workspace" => workspace = it.next().map(PathBuf::from),
            "--ro" => ro = true,
            "--allow-read" => reads.push(it.next().ok_or("--allow-read needs a path")?.clone()),
            "--allow-write" => writes.push(it.next().ok_or("--allow-write needs a path")?.clone()),
            "--proxy" => {
                let v = it.next().ok_or("--proxy needs SOCKET:PORT")?;
                let (s, p) = v.rsplit_once(':').ok_or("--proxy needs SOCKET:PORT")?;
                proxy = Some((PathBuf::from(s), p.parse::<u16>().map_err(|e| e.to_string())?));
            }
            "--env" => {
                let v = it.next().ok_or("--env needs K=V")?;
                let (k, val) = v.split_once('=').ok_or("--env needs K=V")?;
                env.push((k.to_string(), val.to_string()));
            }
            "--cwd" => cwd = it.next().map(PathBuf::from),
            "--procs" => limits.procs = Some(num(it.next(), "--procs")?),
            "--memory" => limits.memory = Some(num(it.next(), "--memory")?),
            "--fsize" => limits.file_size = Some(num(it.next(), "--fsize")?),
            "--nofile" => limits.open_files = Some(num(it.next(), "--nofile")?),
            "--cpu" => limits.cpu_secs = Some(num(it.next(), "--cpu")?),
            "--tmp-size" => tmp_size = Some(num(it.next(), "--tmp-size")?),
            "--pty" => pty = true,
            "--print-policy" => print_policy = true,
            "--" => {
                cmd.extend(it.by_ref().cloned());
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let workspace = workspace.ok_or("--workspace is required")?;
    if cmd.is_empty() {
        return Err("no command after --".into());
    }
    let mut b = Policy::builder(&workspace).limits(limits).pty(pty);
    if !ro {
        b = b.fs_write(&workspace);
    }
    for r in reads {
        b = b.fs_read(r);
    }
    for w in writes {
        b = b.fs_write(w);
    }
    if let Some((s, p)) = proxy {
        b = b.net_proxy(s, p);
    }
    for (k, v) in env {
        b = b.env(k, v);
    }
    if let Some(c) = cwd {
        b = b.cwd(c);
    }
    if let Some(t) = tmp_size {
        b = b.tmp_size(t);
    }
    let policy = b.build().map_err(|e| e.to_string())?;
    if print_policy {
        println!("{}", policy.to_env_value().to_string_lossy());
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let status = axp_sandbox::run(&exe, &policy, &cmd).map_err(|e| e.to_string())?;
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(s)) => ExitCode::from(128u8.wrapping_add(s as u8)),
        _ => ExitCode::from(1),
    })
}
