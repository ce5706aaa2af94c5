//! Prometheus text metrics for `/metrics`. A handful of counters and gauges on atomics: a metrics
//! crate would add a registry and a global for what fits in one small file.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn add(&self, d: i64) {
        self.0.fetch_add(d, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: Counter,
    pub request_errors: Counter,
    pub jobs_started: Counter,
    pub jobs_running: Gauge,
    pub sessions_opened: Counter,
    pub list_changed_sent: Counter,
    pub egress_allowed: Counter,
    pub egress_denied: Counter,
}

impl Metrics {
    /// Renders the text exposition format; provider gauges are passed in by the caller.
    pub fn render(&self, providers: &[(String, bool, usize)]) -> String {
        let mut s = String::new();
        let mut counter = |name: &str, help: &str, v: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter("axp_requests_total", "JSON-RPC requests handled.", self.requests.get());
        counter("axp_request_errors_total", "JSON-RPC requests answered with an error.", self.request_errors.get());
        counter("axp_jobs_started_total", "Jobs started.", self.jobs_started.get());
        counter("axp_sessions_opened_total", "Sessions opened.", self.sessions_opened.get());
        counter("axp_list_changed_sent_total", "tools/list_changed notifications sent.", self.list_changed_sent.get());
        let _ = writeln!(
            s,
            "# HELP axp_egress_attempts_total Egress proxy connection attempts by decision.\n\
             # TYPE axp_egress_attempts_total counter\n\
             axp_egress_attempts_total{{decision=\"allow\"}} {}\n\
             axp_egress_attempts_total{{decision=\"deny\"}} {}",
            self.egress_allowed.get(),
            self.egress_denied.get()
        );
        let _ = writeln!(
            s,
            "# HELP axp_jobs_running Jobs running now.\n# TYPE axp_jobs_running gauge\naxp_jobs_running {}",
            self.jobs_running.get()
        );
        let _ = writeln!(
            s,
            "# HELP axp_provider_up Whether a provider is serving (1) or not (0).\n# TYPE axp_provider_up gauge"
        );
        for (id, up, _) in providers {
            let _ = writeln!(s, "axp_provider_up{{provider=\"{id}\"}} {}", u8::from(*up));
        }
        let _ = writeln!(s, "# HELP axp_provider_tools Tools a provider publishes.\n# TYPE axp_provider_tools gauge");
        for (id, _, n) in providers {
            let _ = writeln!(s, "axp_provider_tools{{provider=\"{id}\"}} {n}");
        }
        s
    }
}
