//! Prometheus text metrics for `/metrics`. A handful of counters, gauges and one histogram family
//! on atomics: a metrics crate would add a registry and a global for what fits in one small file.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// Upper bounds of [`Histogram`] buckets, in microseconds: fine below a millisecond, where the
/// gateway's own share of a tool call lives, coarse up to the longest calls.
const BUCKETS_US: [u64; 22] = [
    25,
    50,
    75,
    100,
    150,
    200,
    300,
    500,
    750,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    1_000_000,
    5_000_000,
    30_000_000,
    120_000_000,
    600_000_000,
];

/// A latency histogram: a count per bucket (not cumulative; rendering sums them), the total in
/// nanoseconds and the number of observations, each on its own atomic.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_US.len()],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        if let Some(i) = BUCKETS_US.iter().position(|&le| us <= le) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_ns.fetch_add(d.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the series of this histogram (`NAME_bucket`, `NAME_sum`, `NAME_count`) with
    /// `labels` (`key="value"`, already escaped) to `s`.
    fn render(&self, s: &mut String, name: &str, labels: &str) {
        let count = self.count.load(Ordering::Relaxed);
        let mut below = 0;
        for (le, b) in BUCKETS_US.iter().zip(&self.buckets) {
            below += b.load(Ordering::Relaxed);
            let _ = writeln!(s, "{name}_bucket{{{labels},le=\"{}\"}} {below}", *le as f64 / 1e6);
        }
        // Read separately from the buckets, so `+Inf` is never below the last bound.
        let _ = writeln!(s, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", count.max(below));
        let _ = writeln!(s, "{name}_sum{{{labels}}} {}", self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9);
        let _ = writeln!(s, "{name}_count{{{labels}}} {}", count.max(below));
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
    /// Tool-call times by provider id.
    tool_calls: Mutex<BTreeMap<String, Arc<ToolCallTimes>>>,
}

/// The two parts of one provider's tool calls.
#[derive(Debug, Default)]
pub struct ToolCallTimes {
    /// How long each tool job's provider took to answer (the upstream server and the transport
    /// to it, sandbox included).
    pub provider: Histogram,
    /// What the gateway itself added to each `tools/call` answered by a job: from the request's
    /// dispatch to its reply, less the provider's time (recording the job, audit, validation,
    /// scheduling; not the HTTP framing around it).
    pub gateway: Histogram,
}

impl Metrics {
    /// The tool-call histograms of `provider` (created on its first call).
    pub fn tool_calls(&self, provider: &str) -> Arc<ToolCallTimes> {
        let mut all = self.tool_calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = all.get(provider) {
            return t.clone();
        }
        all.entry(provider.to_string()).or_default().clone()
    }

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
        let _ = writeln!(
            s,
            "# HELP axp_tool_call_seconds Time of tool calls by part: `provider` (the upstream answering, per \
             tool job) and `gateway` (what the gateway added to a tools/call, its dispatch to its reply less \
             the provider's time).\n# TYPE axp_tool_call_seconds histogram"
        );
        let calls: Vec<(String, Arc<ToolCallTimes>)> = {
            let all = self.tool_calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            all.iter().map(|(id, t)| (id.clone(), t.clone())).collect()
        };
        for (id, t) in calls {
            t.provider.render(&mut s, "axp_tool_call_seconds", &format!("part=\"provider\",provider=\"{id}\""));
            t.gateway.render(&mut s, "axp_tool_call_seconds", &format!("part=\"gateway\",provider=\"{id}\""));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(text: &str, name: &str) -> Vec<(String, f64)> {
        text.lines()
            .filter(|l| l.starts_with(name))
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn a_histogram_renders_cumulative_buckets_its_sum_and_count() {
        let m = Metrics::default();
        for us in [10, 40, 40, 900, 3_000_000, 1_000_000_000] {
            m.tool_calls("ev").gateway.observe(Duration::from_micros(us));
        }
        m.tool_calls("time").provider.observe(Duration::from_millis(2));
        let text = m.render(&[]);
        let b = series(&text, "axp_tool_call_seconds_bucket{part=\"gateway\",provider=\"ev\"");
        let at = |le: &str| b.iter().find(|(k, _)| k.ends_with(&format!("le=\"{le}\"}}"))).unwrap().1;
        assert_eq!(at("0.000025"), 1.0, "{text}");
        assert_eq!(at("0.00005"), 3.0);
        assert_eq!(at("0.00075"), 3.0);
        assert_eq!(at("0.001"), 4.0);
        assert_eq!(at("5"), 5.0);
        assert_eq!(at("600"), 5.0, "1000 s is above the last bound");
        assert_eq!(at("+Inf"), 6.0);
        assert!(b.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative: {b:?}");
        let sum = series(&text, "axp_tool_call_seconds_sum{part=\"gateway\",provider=\"ev\"}")[0].1;
        assert!((sum - 1003.00099).abs() < 1e-6, "{sum}");
        assert_eq!(series(&text, "axp_tool_call_seconds_count{part=\"gateway\",provider=\"ev\"}")[0].1, 6.0);
        // Each provider has both parts; one it has not observed is there, empty.
        assert_eq!(series(&text, "axp_tool_call_seconds_count{part=\"provider\",provider=\"ev\"}")[0].1, 0.0);
        assert_eq!(series(&text, "axp_tool_call_seconds_count{part=\"provider\",provider=\"time\"}")[0].1, 1.0);
        assert_eq!(series(&text, "axp_tool_call_seconds_count{part=\"gateway\",provider=\"time\"}")[0].1, 0.0);
        assert_eq!(text.matches("# TYPE axp_tool_call_seconds histogram").count(), 1);
    }
}
