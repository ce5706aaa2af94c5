//! What the soak reads about processes and the machine from `/proc`: the gateway's resident set,
//! open descriptors, threads and CPU time, the processes it has started, the load average, the
//! machine's busy share, and how many `rustc` processes of other people's builds share the
//! machine. Read-only and cheap: one pass over `/proc` per sample.

use std::collections::HashMap;

/// One reading of the gateway process and the machine.
#[derive(Clone, Debug, Default)]
pub struct Reading {
    pub rss_kib: u64,
    /// The anonymous part of the RSS (heap, stacks) and the file-backed part (the binary, mapped
    /// files).
    pub rss_anon_kib: u64,
    pub rss_file_kib: u64,
    pub fds: u64,
    pub threads: u64,
    /// The gateway's own CPU (all its threads), seconds.
    pub cpu_s: f64,
    /// Its own CPU plus that of the children it has reaped (and their reaped children), seconds.
    pub cpu_with_children_s: f64,
    /// Live processes below the gateway (sandbox helpers, job processes, MCP servers).
    pub descendants: u64,
    /// `rustc` processes that are not ours: other people's builds on the same CPUs.
    pub rustc: u64,
    pub load1: f64,
    pub load5: f64,
    /// Machine-wide CPU jiffies: (busy, total), from the first line of `/proc/stat`.
    pub machine: (u64, u64),
}

/// USER_HZ is 100 on every Linux ABI (fixed by the kernel ABI, not by HZ).
const TICKS: f64 = 100.0;

/// utime, stime, cutime, cstime of a process, in ticks.
fn stat_ticks(stat: &str) -> Option<[u64; 4]> {
    // The command name (field 2) may contain spaces; the fields after it start past the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime (14) is index 11, then stime, cutime, cstime.
    let t = |i: usize| f.get(i).and_then(|x| x.parse().ok());
    Some([t(11)?, t(12)?, t(13)?, t(14)?])
}

fn status_kib(status: &str, key: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Reads the gateway `pid` and the machine. A gateway that has gone away reads as zeros.
pub fn read(pid: u32) -> Reading {
    let mut r = Reading::default();
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        r.rss_kib = status_kib(&status, "VmRSS:");
        r.rss_anon_kib = status_kib(&status, "RssAnon:");
        r.rss_file_kib = status_kib(&status, "RssFile:");
        r.threads = status_kib(&status, "Threads:");
    }
    r.fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count() as u64).unwrap_or(0);
    if let Some(t) = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(stat_ticks) {
        r.cpu_s = (t[0] + t[1]) as f64 / TICKS;
        r.cpu_with_children_s = (t[0] + t[1] + t[2] + t[3]) as f64 / TICKS;
    }
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        let mut it = l.split_whitespace().map(|x| x.parse::<f64>().unwrap_or(0.0));
        r.load1 = it.next().unwrap_or(0.0);
        r.load5 = it.next().unwrap_or(0.0);
    }
    if let Ok(s) = std::fs::read_to_string("/proc/stat")
        && let Some(cpu) = s.lines().next().and_then(|l| l.strip_prefix("cpu "))
    {
        let v: Vec<u64> = cpu.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal …: idle and iowait are not busy.
        let total: u64 = v.iter().take(8).sum();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        r.machine = (total - idle, total);
    }
    let (desc, rustc) = tree(pid);
    r.descendants = desc;
    r.rustc = rustc;
    r
}

/// Live descendants of `root`, and `rustc` processes outside that tree.
fn tree(root: u32) -> (u64, u64) {
    let mut parent: HashMap<u32, u32> = HashMap::new();
    let mut rustc = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return (0, 0);
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if head.ends_with("(rustc") {
            rustc.push(pid);
        }
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            parent.insert(pid, ppid);
        }
    }
    let below = |mut p: u32| {
        for _ in 0..64 {
            match parent.get(&p) {
                Some(&pp) if pp == root => return true,
                Some(&pp) if pp > 1 => p = pp,
                _ => return false,
            }
        }
        false
    };
    let desc = parent.keys().filter(|&&p| below(p)).count() as u64;
    let foreign_rustc = rustc.iter().filter(|&&p| !below(p)).count() as u64;
    (desc, foreign_rustc)
}

/// This process's own CPU seconds.
pub fn self_cpu_s() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(stat_ticks)
        .map_or(0.0, |t| (t[0] + t[1]) as f64 / TICKS)
}
