//! A real crash: a child process appends events and reports each acknowledged seq on stdout;
//! the parent SIGKILLs it mid-run, reopens the state directory and checks that every
//! acknowledged event is there, intact. The child is this same test binary re-executed with
//! `--ignored --exact` on [`crash_writer_child`], so no extra build target is needed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axp_protocol::methods::{JobEventKind, JobState};
use axp_store::Store;

const DIR_VAR: &str = "AXP_STORE_CRASH_CHILD_DIR";
const JOB: &str = "crash-job";

/// The payload of event `seq` in the crash test: sizes vary from a few bytes to ~200 KiB so a
/// kill can land in the middle of a large write.
fn crash_payload(seq: u64) -> String {
    let len = match seq % 5 {
        0 => 200_000,
        1 => 3,
        2 => 40_000,
        _ => 700,
    };
    let c = char::from(b'a' + (seq % 26) as u8);
    format!("{seq}:{}", c.to_string().repeat(len))
}

/// The child half: runs only when re-executed by [`sigkill_mid_run_loses_no_acknowledged_event`].
#[test]
#[ignore = "child process of the crash test; runs only when re-executed by it"]
fn crash_writer_child() {
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        return;
    };
    let store = Store::open(std::path::Path::new(&dir)).unwrap();
    store.create_job(&super::job(JOB, "s", None)).unwrap();
    let log = store.log(JOB).unwrap();
    let mut out = std::io::stdout().lock();
    for seq in 0.. {
        let ev = log
            .append(JobEventKind::Stdout {
                data: crash_payload(seq),
            })
            .unwrap();
        // Printed only after append returned: this is the acknowledgement.
        writeln!(out, "ACK {}", ev.seq).unwrap();
        out.flush().unwrap();
    }
}

/// The seq in an acknowledgement line. The test harness prints `test NAME ... ` without a newline
/// before the child's first line, so the marker is searched for, not expected at the start.
fn ack(line: &str) -> Option<u64> {
    let (_, seq) = line.split_once("ACK ")?;
    Some(seq.trim().parse().unwrap())
}

#[test]
fn sigkill_mid_run_loses_no_acknowledged_event() {
    let (_tmp, dir) = super::state();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "suite::crash::crash_writer_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_VAR, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked: Vec<u64> = Vec::new();
    let started = Instant::now();
    // Let it write for a while (enough events that the kill lands mid-stream), then kill.
    while acked.len() < 1500 && started.elapsed() < Duration::from_secs(20) {
        let line = lines.next().expect("child exited early").unwrap();
        if let Some(seq) = ack(&line) {
            acked.push(seq);
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Acknowledgements already in the pipe count too.
    for line in lines {
        if let Some(seq) = ack(&line.unwrap()) {
            acked.push(seq);
        }
    }
    assert!(
        acked.len() >= 1500,
        "the child acknowledged {} events",
        acked.len()
    );
    let last_acked = *acked.last().unwrap();
    assert!(
        acked.iter().enumerate().all(|(i, s)| i as u64 == *s),
        "the child acknowledged seqs out of order"
    );

    let store = Store::open(&dir).unwrap();
    let log = store.log(JOB).unwrap();
    // Maybe one more event than acknowledged: written completely, killed before the ACK.
    let n = log.next_seq();
    assert!(
        n == last_acked + 1 || n == last_acked + 2,
        "{n} events after recovery, {} acknowledged",
        last_acked + 1
    );
    let mut next = 0;
    while next < n {
        let batch = store.read_log(JOB, next, 500).unwrap();
        assert!(!batch.is_empty());
        for ev in batch {
            assert_eq!(ev.seq, next);
            assert_eq!(
                ev.kind,
                JobEventKind::Stdout {
                    data: crash_payload(next)
                },
                "event {next} is intact"
            );
            next += 1;
        }
    }
    // And the restarted gateway's bookkeeping: the job was running, so it is lost now.
    assert_eq!(store.mark_running_lost(1).unwrap(), 1);
    assert_eq!(store.get_job(JOB).unwrap().unwrap().state, JobState::Lost);
}
