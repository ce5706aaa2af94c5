//! The audit trail and the counters: one JSON line per connection attempt (allowed or denied,
//! with reason, client, target, resolved address and bytes), and Prometheus-text metrics.
//!
//! This module owns the record format (the gateway reads it as its audit stream) and must not
//! make policy decisions. Lines are written whole and flushed one by one so a reader tailing the
//! file never sees half a record. The file is its owner's alone (mode 0600): it names every URL
//! a session asked for.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// One audit record: one connection attempt.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditRecord {
    /// Milliseconds since the Unix epoch when the record was written.
    pub ts_ms: u64,
    /// Connection number within this proxy instance.
    pub conn: u64,
    /// Who connected: `ip:port` or `unix:PATH`.
    pub client: String,
    /// `http`, `connect`, `socks5`, or `unknown` if the protocol was never identified.
    pub proto: &'static str,
    /// The destination exactly as the client wrote it (escaped, at most 256 characters), for
    /// the record of refused input that never parsed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested: Option<String>,
    /// The requested destination as parsed (`host:port`), when it parsed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The address the proxy connected to (or refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// `allow`, `deny`, or `error` (allowed but the upstream failed).
    pub decision: &'static str,
    /// A stable reason code (`granted`, `not_granted`, `refused_address`, `sni_mismatch`, …).
    pub reason: &'static str,
    /// A sentence saying why.
    pub detail: String,
    /// For tunnels: what the client spoke inside (`tls`, `http`, `opaque`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inner: Option<&'static str>,
    /// Why an allowed connection ended (`closed`, `idle_timeout`, `byte_limit`, `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<&'static str>,
    /// Plain HTTP: the request went over an upstream connection kept from an earlier request
    /// (to the same destination, after this request's own checks passed).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
    /// Bytes from client to upstream.
    pub bytes_up: u64,
    /// Bytes from upstream to client.
    pub bytes_down: u64,
    /// Milliseconds from accept to the end of the attempt.
    pub duration_ms: u64,
}

/// Counters exposed as Prometheus text.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections currently open.
    pub active: AtomicU64,
    /// Bytes client → upstream.
    pub bytes_up: AtomicU64,
    /// Bytes upstream → client.
    pub bytes_down: AtomicU64,
    /// Plain-HTTP requests sent over a kept upstream connection.
    pub upstream_reused: AtomicU64,
    /// Of `bytes_down`, those relayed with `splice(2)` (never copied through the proxy).
    pub bytes_spliced: AtomicU64,
    decisions: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
}

/// Escapes untrusted text for a record and bounds its length.
pub fn escaped(raw: &[u8]) -> String {
    let s: String = raw.escape_ascii().to_string();
    match s.char_indices().nth(256) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

impl Metrics {
    fn count(&self, decision: &'static str, reason: &'static str) {
        if let Ok(mut m) = self.decisions.lock() {
            *m.entry((decision, reason)).or_default() += 1;
        }
    }

    /// The counters in Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("# HELP axp_egress_attempts_total Connection attempts by decision and reason.\n");
        s.push_str("# TYPE axp_egress_attempts_total counter\n");
        if let Ok(m) = self.decisions.lock() {
            for ((d, r), n) in m.iter() {
                s.push_str(&format!("axp_egress_attempts_total{{decision=\"{d}\",reason=\"{r}\"}} {n}\n"));
            }
        }
        let g = |name: &str, kind: &str, help: &str, v: &AtomicU64| {
            format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}\n", v.load(Ordering::Relaxed))
        };
        s.push_str(&g("axp_egress_accepted_total", "counter", "Connections accepted.", &self.accepted));
        s.push_str(&g("axp_egress_active", "gauge", "Connections open now.", &self.active));
        s.push_str(&g("axp_egress_bytes_up_total", "counter", "Bytes client to upstream.", &self.bytes_up));
        s.push_str(&g("axp_egress_bytes_down_total", "counter", "Bytes upstream to client.", &self.bytes_down));
        s.push_str(&g(
            "axp_egress_upstream_reused_total",
            "counter",
            "Plain-HTTP requests sent over a kept upstream connection.",
            &self.upstream_reused,
        ));
        s.push_str(&g(
            "axp_egress_bytes_spliced_total",
            "counter",
            "Of the bytes upstream to client, those relayed by splice(2) without a copy.",
            &self.bytes_spliced,
        ));
        s
    }
}

/// Called with every record as it is written, after the instance's own audit line is queued:
/// how a process that embeds the proxy (the gateway) folds its attempts into its own
/// tamper-evident audit log. It runs on the connection's task, so it must not block for long.
#[derive(Clone)]
pub struct Observer(pub std::sync::Arc<dyn Fn(&AuditRecord) + Send + Sync>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer(..)")
    }
}

enum Msg {
    Line(Vec<u8>),
    Sync(std::sync::mpsc::Sender<()>),
}

/// Where audit lines go. Lines are written by a dedicated thread, in order, so a slow disk never
/// stalls the connections; [`AuditLog::sync`] waits until everything sent so far is written.
pub struct AuditLog {
    tx: std::sync::mpsc::Sender<Msg>,
    /// The counters updated with every record.
    pub metrics: Metrics,
    observer: Option<Observer>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").finish_non_exhaustive()
    }
}

fn writer(mut out: Box<dyn Write + Send>, rx: std::sync::mpsc::Receiver<Msg>) {
    let mut failed = false;
    let mut batch = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut acks = Vec::new();
        let mut next = Some(first);
        // Gather everything already queued and write it with one call, whole lines only, so a
        // reader tailing the file sees complete records.
        while let Some(m) = next {
            match m {
                Msg::Line(l) => batch.extend_from_slice(&l),
                Msg::Sync(ack) => acks.push(ack),
            }
            next = rx.try_recv().ok();
        }
        // An audit line that cannot be written is reported on stderr (once); the attempt has
        // already been decided, and stopping the proxy would not undo it.
        if out.write_all(&batch).and_then(|()| out.flush()).is_err() && !failed {
            failed = true;
            eprintln!("axp-egress-proxy: cannot write the audit log");
        }
        let wrote_lines = !batch.is_empty();
        batch.clear();
        for a in acks {
            let _ = a.send(());
        }
        // Linger before blocking again: records that arrive meanwhile are queued without waking
        // this thread (a sender only pays a futex wake-up when the receiver is parked), and go
        // out together. Measured: the per-record wake-up was ~10% of the proxy's CPU on
        // back-to-back short requests. Lines are at most this much later on disk.
        if wrote_lines {
            std::thread::sleep(LINGER);
        }
    }
}

/// Opens `path` for appending, readable and writable by its owner only: created 0600 (the mode
/// is given to `open(2)`, so the file never exists with a wider one), and an existing file's
/// mode set to 0600 through the open descriptor (not the path, which could be swapped).
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    if f.metadata()?.permissions().mode() & 0o7777 != 0o600 {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// See [`writer`].
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

impl AuditLog {
    /// Appends to `path`, or writes to stderr when `None`. The file is created with mode 0600,
    /// and an existing one is tightened to it: the records name every destination and URL a
    /// session asked for, which no other local user may read.
    pub fn open(path: Option<&Path>) -> std::io::Result<Self> {
        let out: Box<dyn Write + Send> = match path {
            Some(p) => Box::new(open_private(p)?),
            None => Box::new(std::io::stderr()),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new().name("axp-egress-audit".into()).spawn(move || writer(out, rx))?;
        Ok(Self { tx, metrics: Metrics::default(), observer: None })
    }

    /// Also hands every record to `observer`.
    pub fn with_observer(mut self, observer: Option<Observer>) -> Self {
        self.observer = observer;
        self
    }

    /// Queues one record as one line and counts it.
    pub fn record(&self, mut r: AuditRecord) {
        r.ts_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
        self.metrics.count(r.decision, r.reason);
        let mut line = serde_json::to_vec(&r).unwrap_or_default();
        line.push(b'\n');
        let _ = self.tx.send(Msg::Line(line));
        if let Some(o) = &self.observer {
            (o.0)(&r);
        }
    }

    /// Blocks until every record queued so far is written and flushed.
    pub fn sync(&self) {
        let (ack, done) = std::sync::mpsc::channel();
        if self.tx.send(Msg::Sync(ack)).is_ok() {
            let _ = done.recv_timeout(std::time::Duration::from_secs(5));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn the_log_is_created_private_and_an_existing_one_is_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("fresh.jsonl");
        AuditLog::open(Some(&fresh)).unwrap().sync();
        assert_eq!(mode(&fresh), 0o600);
        let old = dir.path().join("old.jsonl");
        std::fs::write(&old, b"{}\n").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        let log = AuditLog::open(Some(&old)).unwrap();
        assert_eq!(mode(&old), 0o600);
        log.record(AuditRecord { decision: "deny", reason: "not_granted", ..AuditRecord::default() });
        log.sync();
        let text = std::fs::read_to_string(&old).unwrap();
        assert!(text.starts_with("{}\n{") && text.ends_with("}\n"), "appended, not truncated: {text}");
    }
}
