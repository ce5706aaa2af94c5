//! `axp audit verify` (check the whole hash chain and its HEAD anchor, naming the first bad
//! record; with several `--state-dir`s, every replica's chain, each with its range) and `axp audit tail [--follow] [--session S] [--kind K] [--json]` (print records).
//! Both only read `STATE_DIR/audit/`; neither takes the writer's lock, so they work while the
//! gateway runs, and neither ever repairs anything (the gateway's open does that, and records it).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use axp_audit::{Filter, Kind, Record};
use clap::{Args, Subcommand};

/// `axp audit …`
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check every record's hash, every link and the HEAD anchor; name the first bad record.
    Verify(VerifyArgs),
    /// Print audit records (the last 20 by default), optionally following new ones.
    Tail(TailArgs),
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The gateway's state directory [default: $XDG_STATE_HOME/axp]; records are in DIR/audit.
    /// Repeatable: replicas sharing a PostgreSQL store each keep their own chain in their own
    /// state directory (or a copy of it shipped elsewhere); each is verified, with its range.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Vec<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TailArgs {
    /// Keep printing new records as they are appended (Ctrl-C to stop).
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only records of this session.
    #[arg(long, value_name = "SESSION_ID")]
    pub session: Option<String>,
    /// Only records of this kind (e.g. tool.call, capability.denied). Repeatable.
    #[arg(long, value_name = "KIND")]
    pub kind: Vec<String>,
    /// Start at this sequence number instead of showing the last --lines records.
    #[arg(long, value_name = "SEQ")]
    pub from: Option<u64>,
    /// How many of the newest matching records to show first.
    #[arg(long, short = 'n', default_value_t = 20)]
    pub lines: usize,
    /// One JSON object per line, exactly as stored.
    #[arg(long)]
    pub json: bool,
    /// The gateway's state directory [default: $XDG_STATE_HOME/axp]; records are in DIR/audit.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

pub fn run(cmd: AuditCommand) -> Result<i32> {
    match cmd {
        AuditCommand::Verify(a) => verify(a),
        AuditCommand::Tail(a) => tail(a),
    }
}

fn audit_dir(state_dir: Option<PathBuf>) -> PathBuf {
    state_dir.unwrap_or_else(crate::commands::serve::default_state_dir).join("audit")
}

fn verify(a: VerifyArgs) -> Result<i32> {
    if a.state_dir.len() > 1 {
        return verify_chains(&a.state_dir, a.json);
    }
    let dir = audit_dir(a.state_dir.into_iter().next());
    if !dir.is_dir() {
        bail!(
            "no audit log at {}\nhint: pass the gateway's --state-dir; the log is created when the gateway first starts",
            dir.display()
        );
    }
    match axp_audit::verify(&dir) {
        Ok(report) => {
            if a.json {
                let mut v = serde_json::to_value(&report)?;
                v["ok"] = true.into();
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("{report}");
                println!(
                    "hint: keep the last hash somewhere this host cannot write; a later verify that ends in a different history means the whole directory was rewritten"
                );
            }
            Ok(0)
        }
        Err(e) => {
            if a.json {
                let mut v = serde_json::json!({"ok": false, "error": e.to_string()});
                if let axp_audit::VerifyError::BadRecord { seq, file, line, .. } = &e {
                    v["seq"] = (*seq).into();
                    v["file"] = file.display().to_string().into();
                    v["line"] = (*line).into();
                }
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                println!("audit log FAILED verification: {e}");
            }
            Ok(1)
        }
    }
}

/// One replica's chain, verified, with the range it covers.
#[derive(serde::Serialize)]
struct Chain {
    state_dir: String,
    /// The replica's id (`STATE/replica-id`, written when it first used a PostgreSQL store).
    replica: Option<String>,
    ok: bool,
    records: u64,
    first_ts_ms: Option<u64>,
    last_ts_ms: Option<u64>,
    last_hash: Option<String>,
    error: Option<String>,
}

/// Verifies each state directory's chain on its own (a replica's records link only to its own
/// previous ones), and reports each; exit 1 if any fails.
fn verify_chains(dirs: &[PathBuf], json: bool) -> Result<i32> {
    let mut chains = Vec::new();
    for state in dirs {
        let dir = state.join("audit");
        let replica = std::fs::read_to_string(state.join("replica-id")).ok().map(|s| s.trim().to_string());
        let mut chain = Chain {
            state_dir: state.display().to_string(),
            replica,
            ok: false,
            records: 0,
            first_ts_ms: None,
            last_ts_ms: None,
            last_hash: None,
            error: None,
        };
        if !dir.is_dir() {
            chain.error = Some(format!("no audit log at {}", dir.display()));
            chains.push(chain);
            continue;
        }
        match axp_audit::verify(&dir) {
            Ok(report) => {
                chain.ok = true;
                chain.records = report.records;
                chain.last_hash = Some(report.last_hash.clone());
                for r in axp_audit::tail(&dir, 0, Filter::default()) {
                    let r = r?;
                    chain.first_ts_ms.get_or_insert(r.ts_ms);
                    chain.last_ts_ms = Some(r.ts_ms);
                }
            }
            Err(e) => chain.error = Some(e.to_string()),
        }
        chains.push(chain);
    }
    let ok = chains.iter().all(|c| c.ok);
    if json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({"ok": ok, "chains": chains}))?);
    } else {
        for c in &chains {
            let who = c.replica.as_deref().unwrap_or("(no replica id)");
            match &c.error {
                None => println!(
                    "{who} {}: ok, {} records (#0..#{}), {} .. {}, last hash {}",
                    c.state_dir,
                    c.records,
                    c.records.saturating_sub(1),
                    c.first_ts_ms.map_or_else(|| "-".into(), crate::util::rfc3339),
                    c.last_ts_ms.map_or_else(|| "-".into(), crate::util::rfc3339),
                    c.last_hash.as_deref().unwrap_or("-")
                ),
                Some(e) => println!("{who} {}: FAILED verification: {e}", c.state_dir),
            }
        }
        println!("{} of {} chains verify", chains.iter().filter(|c| c.ok).count(), chains.len());
    }
    Ok(if ok { 0 } else { 1 })
}

fn tail(a: TailArgs) -> Result<i32> {
    let dir = audit_dir(a.state_dir.clone());
    if !dir.is_dir() && !a.follow {
        bail!("no audit log at {}\nhint: pass the gateway's --state-dir", dir.display());
    }
    let filter = Filter {
        session: a.session.clone(),
        kinds: a.kind.iter().map(|k| k.parse::<Kind>().unwrap_or_else(|e| match e {})).collect(),
    };
    // Without --from, find where the last N matching records start with one pass over the log.
    let from = match a.from {
        Some(f) => f,
        None => {
            let mut last: VecDeque<u64> = VecDeque::with_capacity(a.lines + 1);
            for r in axp_audit::tail(&dir, 0, filter.clone()) {
                last.push_back(r?.seq);
                if last.len() > a.lines {
                    last.pop_front();
                }
            }
            match last.front() {
                Some(&s) => s,
                // Nothing matched yet (or --lines 0): start after the current end.
                None => next_seq(&dir)?,
            }
        }
    };
    let records: Box<dyn Iterator<Item = Result<Record, axp_audit::AuditError>>> = if a.follow {
        Box::new(axp_audit::follow(&dir, from, filter, Duration::from_millis(200)))
    } else {
        Box::new(axp_audit::tail(&dir, from, filter))
    };
    for r in records {
        let r = r?;
        if a.json {
            println!("{}", serde_json::to_string(&r)?);
        } else {
            println!("{}", human(&r));
        }
    }
    Ok(0)
}

/// The sequence number after the last record (0 for an empty or absent log).
fn next_seq(dir: &Path) -> Result<u64> {
    let mut next = 0;
    for r in axp_audit::tail(dir, 0, Filter::default()) {
        next = r?.seq + 1;
    }
    Ok(next)
}

fn human(r: &Record) -> String {
    format!(
        "#{:<6} {}  {:<17} {:<24} {:<10} {}",
        r.seq,
        crate::util::rfc3339(r.ts_ms),
        r.kind.as_str(),
        r.session.as_deref().unwrap_or("-"),
        r.actor,
        r.detail
    )
}

#[cfg(test)]
mod tests {
    use crate::util::rfc3339 as utc;

    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(utc(1_795_910_400_000), "2026-11-29T00:00:00.000Z");
    }
}
