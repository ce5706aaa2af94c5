//! Crash durability of the job system with real processes: a gateway running 100 sandboxed
//! command jobs is killed with SIGKILL while most of them still run, and restarted on the same
//! state directory. Every event a client was given before the kill must still be in the log,
//! unchanged and in a dense seq order; every job must end exactly `exited` (its exit was seen
//! before the kill) or `lost` (it was still running); and no process of any job may outlive the
//! gateway that started it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

const JOBS: usize = 100;
/// Of every five jobs, one prints [`QUICK_LINES`] lines and exits by itself before the kill, one
/// is chatty (a line every 50 ms until it is stopped: its log outgrows its job's row and moves
/// to files before the kill), and three print [`QUIET_LINES`] lines and then run on silently
/// (their logs stay in their rows). A crash must lose nothing in either place. Each quiet job
/// also starts a daemon that tries to outlive it (its own session, SIGHUP and SIGTERM ignored).
const QUICK_LINES: usize = 3;
const QUIET_LINES: usize = 8;
/// A chatty job has this many events acknowledged before the kill: more than a row holds
/// (`axp_store::log::SMALL_LOG_EVENTS`, 32).
const CHATTY_ACKED: usize = 48;

/// A process as `/proc` shows it, named by pid *and* start time so that a pid the kernel hands
/// to a new process after this one died is never mistaken for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Proc {
    pid: u32,
    start: u64,
    cmdline: String,
}

/// `(state, ppid, start time)` from `/proc/PID/stat`, or `None` once the pid is gone.
fn stat(pid: u32) -> Option<(char, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields are counted after the last `)`.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((f.first()?.chars().next()?, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// The session id of `pid` (field 6 of `/proc/PID/stat`).
fn session(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 2..].split_whitespace().nth(3)?.parse().ok()
}

fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ").trim_end().to_string()
}

/// Every live process below `root` in the process tree (not `root` itself).
fn descendants(root: u32) -> Vec<Proc> {
    let mut children: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Some((state, ppid, start)) = stat(pid)
            && state != 'Z'
        {
            children.entry(ppid).or_default().push((pid, start));
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for &(pid, start) in children.get(&p).into_iter().flatten() {
            out.push(Proc { pid, start, cmdline: cmdline(pid) });
            todo.push(pid);
        }
    }
    out
}

/// Whether the very process `p` still runs (a zombie has ended: only its exit status is left).
fn alive(p: &Proc) -> bool {
    stat(p.pid).is_some_and(|(state, _, start)| start == p.start && state != 'Z' && state != 'X')
}

/// The pid `p` has in the innermost pid namespace it belongs to (what `$$` says inside a job).
fn inner_pid(p: &Proc) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid)).ok()?;
    status.lines().find(|l| l.starts_with("NSpid:"))?.split_whitespace().last()?.parse().ok()
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    /// Exits by itself with this code before the kill.
    Quick(i64),
    Chatty,
    Quiet,
}

/// What each job is, and what its output and end must be.
struct Job {
    id: String,
    /// A word in the job's script, so its processes can be told apart by their command line.
    marker: String,
    kind: Kind,
}

fn script(i: usize, marker: &str, kind: Kind) -> String {
    let head = format!(": {marker}; echo pid $$; n=0;");
    match kind {
        Kind::Quick(code) => format!(
            "{head} while [ $n -lt {QUICK_LINES} ]; do n=$((n+1)); echo job-{i} line-$n; sleep 0.05; done; exit {code}"
        ),
        Kind::Chatty => format!("{head} while true; do n=$((n+1)); echo job-{i} line-$n; sleep 0.05; done"),
        Kind::Quiet => format!(
            "{head} setsid sh -c 'trap \"\" HUP INT TERM; : {marker}-daemon; while true; do sleep 1; done' </dev/null >/dev/null 2>&1 & \
             while [ $n -lt {QUIET_LINES} ]; do n=$((n+1)); echo job-{i} line-$n; sleep 0.05; done; while true; do sleep 1; done"
        ),
    }
}

/// Whether job `id`'s log has an index file under `state`, i.e. it lives in files and not in
/// its job's row.
fn has_index_file(state: &Path, id: &str) -> bool {
    let name = format!("{id}.idx");
    std::fs::read_dir(state.join("jobs")).into_iter().flatten().flatten().any(|shard| shard.path().join(&name).exists())
}

/// Checks a job's whole stdout: `pid N`, then `job-I line-1`, `line-2`, … with no gap, each line
/// whole. Returns N and the number of numbered lines.
fn check_stdout(i: usize, events: &[Value]) -> (u32, usize) {
    let text = stdout_of(events);
    assert!(text.ends_with('\n'), "job {i}: its output ends mid-line: {text:?}");
    let mut lines = text.lines();
    let pid = lines
        .next()
        .and_then(|l| l.strip_prefix("pid "))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("job {i}: no `pid` line first: {text:?}"));
    let mut n = 0;
    for line in lines {
        n += 1;
        assert_eq!(line, format!("job-{i} line-{n}"), "job {i}: its output has a gap or a foreign line");
    }
    (pid, n)
}

#[tokio::test]
async fn a_gateway_killed_amid_100_running_jobs_keeps_every_acknowledged_event_and_ends_every_job() {
    let test_started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let started = Instant::now();
    let mut gw = gateway().state(&state).workspace(&ws).start();
    let first_start = started.elapsed();
    let gw_pid = gw.child.id();
    let mut s = Rpc::open(&gw.url, json!({})).await;

    let nonce = format!(
        "crash{}x{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
    );
    let mut jobs = Vec::new();
    let starting = Instant::now();
    for i in 0..JOBS {
        let marker = format!("{nonce}-job-{i}");
        let kind = match i % 5 {
            0 => Kind::Quick((i / 5 % 4) as i64),
            1 => Kind::Chatty,
            _ => Kind::Quiet,
        };
        let r = s.ok("job.start", json!({"command": ["sh", "-c", script(i, &marker, kind)]})).await;
        jobs.push(Job { id: r["job_id"].as_str().unwrap().to_string(), marker, kind });
    }
    let start_all = starting.elapsed();

    // One client per job follows it the way any client does (`job.attach` from the last seq it
    // has), and records exactly the events it was given: those are the acknowledged ones.
    let seen: Vec<Arc<Mutex<Vec<Value>>>> = (0..JOBS).map(|_| Arc::default()).collect();
    let readers: Vec<_> = jobs
        .iter()
        .zip(&seen)
        .map(|(job, seen)| {
            let mut c = Rpc::new(&gw.url);
            c.session = s.session.clone();
            let (id, seen) = (job.id.clone(), seen.clone());
            tokio::spawn(async move {
                loop {
                    let from = seen.lock().unwrap().len();
                    let r = c.ok("job.attach", json!({"job_id": id, "from_seq": from, "wait_ms": 1000})).await;
                    seen.lock().unwrap().extend(r["events"].as_array().unwrap().iter().cloned());
                    if r["done"] == true {
                        return;
                    }
                }
            })
        })
        .collect();

    // Kill once every quick job's exit has been seen, every chatty job's log has outgrown its
    // row, and every quiet job has printed all it will.
    let ready = || {
        jobs.iter().zip(&seen).enumerate().all(|(i, (job, seen))| {
            let seen = seen.lock().unwrap();
            match job.kind {
                Kind::Quick(_) => !exit_of(&seen).is_null(),
                Kind::Chatty => seen.len() >= CHATTY_ACKED,
                Kind::Quiet => stdout_of(&seen).contains(&format!("job-{i} line-{QUIET_LINES}\n")),
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "the 100 jobs did not get going within 30 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The processes to account for after the kill: the gateway's whole tree, and for each running
    // job the one whose pid inside its sandbox is the `$$` it printed.
    let tree = descendants(gw_pid);
    for (i, (job, seen)) in jobs.iter().zip(&seen).enumerate() {
        if matches!(job.kind, Kind::Quick(_)) {
            continue;
        }
        let (pid, _) = check_stdout(i, &seen.lock().unwrap());
        let shell = tree.iter().find(|p| p.cmdline.contains(&job.marker) && inner_pid(p) == Some(pid));
        let Some(shell) = shell else {
            panic!("job {i}: no process in the gateway's tree is its shell (pid {pid} inside)");
        };
        if job.kind == Kind::Quiet {
            let daemon = format!("{}-daemon", job.marker);
            // The job's own processes carry the daemon's script inside theirs; the daemon does not
            // carry the job's.
            let daemon = tree.iter().find(|p| p.cmdline.contains(&daemon) && !p.cmdline.contains("echo pid"));
            let Some(daemon) = daemon else { panic!("job {i}: its daemon is not running: {tree:#?}") };
            assert_ne!(session(daemon.pid), session(shell.pid), "job {i}: the daemon did not leave the job's session");
        }
    }

    // Stop the clients (so that what they recorded is final), then kill the gateway without warning.
    for r in &readers {
        r.abort();
    }
    for r in readers {
        if let Err(e) = r.await
            && e.is_panic()
        {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    let acked: Vec<Vec<Value>> = seen.iter().map(|s| s.lock().unwrap().clone()).collect();
    let acked_total: usize = acked.iter().map(Vec::len).sum();
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    drop(gw);
    // Both places a log can be in were crashed: chatty jobs' logs in files, quiet jobs' in rows.
    for (i, job) in jobs.iter().enumerate() {
        match job.kind {
            Kind::Chatty => assert!(has_index_file(&state, &job.id), "job {i}: its log did not move to files"),
            Kind::Quiet => assert!(!has_index_file(&state, &job.id), "job {i}: its log left its row"),
            Kind::Quick(_) => {}
        }
    }

    // The sandboxed children die with the gateway (PDEATHSIG on the sandbox's supervisor, and
    // the job's pid namespace dies with its init). Give the kernel a moment to deliver that.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut survivors: Vec<&Proc> = tree.iter().filter(|p| alive(p)).collect();
    while !survivors.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        survivors.retain(|p| alive(p));
    }
    assert!(survivors.is_empty(), "processes of the killed gateway outlived it: {survivors:#?}");
    // Nor did any job's process end up elsewhere (re-parented away from the tree we saw).
    let escaped: Vec<Proc> = descendants(1).into_iter().filter(|p| p.cmdline.contains(&nonce)).collect();
    assert!(escaped.is_empty(), "job processes outlived the gateway: {escaped:#?}");

    let restarted = Instant::now();
    let gw = gateway().state(&state).workspace(&ws).start();
    let recovery = restarted.elapsed();
    let mut s2 = Rpc::new(&gw.url);
    s2.session = s.session.clone();

    let mut ended: HashMap<&str, usize> = HashMap::new();
    for (i, (job, acked)) in jobs.iter().zip(&acked).enumerate() {
        let replay = s2.events(&job.id, 0).await;
        for (seq, e) in replay.iter().enumerate() {
            assert_eq!(e["seq"], seq as u64, "job {i}: seqs are not dense from 0");
            assert_eq!(e["job_id"], job.id.as_str(), "job {i}: an event of another job");
        }
        assert!(
            replay.len() >= acked.len(),
            "job {i}: {} events acknowledged, {} after restart",
            acked.len(),
            replay.len()
        );
        assert_eq!(&replay[..acked.len()], &acked[..], "job {i}: an acknowledged event changed or is missing");
        let exits: Vec<&Value> = replay.iter().filter(|e| e["kind"] == "exit").collect();
        assert_eq!(exits.len(), 1, "job {i}: not exactly one exit event: {exits:?}");
        assert_eq!(replay.last().unwrap()["kind"], "exit", "job {i}: events after its exit");
        let exit = exits[0];
        let (_, lines) = check_stdout(i, &replay);
        let st = s2.ok("job.status", json!({"job_id": job.id})).await;
        assert_eq!(st["next_seq"], replay.len() as u64, "job {i}: status and log disagree on its length");
        match job.kind {
            Kind::Quick(code) => {
                assert_eq!(exit["state"], "exited", "job {i}: {exit}");
                assert_eq!(exit["code"], code, "job {i}: {exit}");
                assert_eq!(st["state"], "exited", "job {i}: {st}");
                assert_eq!(st["code"], code, "job {i}: {st}");
                assert_eq!(lines, QUICK_LINES, "job {i}");
                assert_eq!(&replay, acked, "job {i}: a job seen to its end replays identically");
            }
            Kind::Chatty | Kind::Quiet => {
                if job.kind == Kind::Quiet {
                    assert_eq!(lines, QUIET_LINES, "job {i}");
                }
                assert_eq!(exit["state"], "lost", "job {i}: {exit}");
                assert!(exit["code"].is_null(), "job {i}: {exit}");
                assert_eq!(st["state"], "lost", "job {i}: {st}");
            }
        }
        *ended.entry(if matches!(job.kind, Kind::Quick(_)) { "exited" } else { "lost" }).or_default() += 1;
    }
    let list = s2.ok("job.list", json!({})).await;
    let states: HashSet<&str> = list["jobs"].as_array().unwrap().iter().map(|j| j["state"].as_str().unwrap()).collect();
    assert_eq!(list["jobs"].as_array().unwrap().len(), JOBS);
    assert!(states.iter().all(|s| *s == "exited" || *s == "lost"), "job states after restart: {states:?}");
    assert_eq!(ended["exited"], JOBS / 5);
    assert_eq!(ended["lost"], JOBS - JOBS / 5);
    eprintln!(
        "crash: {JOBS} jobs started in {:.1} s, {acked_total} events acknowledged before SIGKILL, {} processes in \
         the gateway's tree all gone; first start {:.0} ms, restart recovering {} lost jobs {:.0} ms; whole test {:.1} s",
        start_all.as_secs_f64(),
        tree.len(),
        first_start.as_secs_f64() * 1e3,
        ended["lost"],
        recovery.as_secs_f64() * 1e3,
        test_started.elapsed().as_secs_f64()
    );
}
