//! The runner's verdicts: one `PASS|FAIL|SKIP <id> <detail>` line per check, printed as each
//! check ends (so a run that hangs still shows how far it got), a summary line, and the same
//! verdicts as one JSON document for `--json`. Nothing here talks to the endpoint.

use std::io::Write;

use serde_json::{Value, json};

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Pass,
    Fail,
    Skip,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::Skip => "SKIP",
        }
    }
}

/// One check's verdict.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) status: Status,
    pub(crate) id: String,
    pub(crate) detail: String,
}

/// Why a check did not pass: it failed, or it could not be made against this endpoint.
#[derive(Debug)]
pub(crate) enum Stop {
    Fail(String),
    Skip(String),
}

/// Any error a check runs into while talking to the endpoint is a failure of that check.
impl From<String> for Stop {
    fn from(s: String) -> Self {
        Stop::Fail(s)
    }
}

/// What a check returns: the detail of a pass, or why it stopped.
pub(crate) type Verdict = Result<String, Stop>;

/// Fails the check with `why()` unless `cond` holds.
pub(crate) fn ensure(cond: bool, why: impl FnOnce() -> String) -> Result<(), Stop> {
    if cond { Ok(()) } else { Err(Stop::Fail(why())) }
}

/// Every verdict of a run, in the order the checks ran.
#[derive(Debug)]
pub(crate) struct Report {
    outcomes: Vec<Outcome>,
    /// Print each line as it is recorded (text mode); `--json` prints only at the end.
    stream: bool,
}

impl Report {
    pub(crate) fn new(stream: bool) -> Self {
        Self { outcomes: Vec::new(), stream }
    }

    /// Records the verdict of check `id`.
    pub(crate) fn record(&mut self, id: &str, verdict: Verdict) {
        let (status, detail) = match verdict {
            Ok(d) => (Status::Pass, d),
            Err(Stop::Fail(d)) => (Status::Fail, d),
            Err(Stop::Skip(d)) => (Status::Skip, d),
        };
        // One line per check: a detail that quotes a multi-line answer is folded.
        let detail = detail.split_whitespace().collect::<Vec<_>>().join(" ");
        let outcome = Outcome { status, id: id.to_string(), detail };
        if self.stream {
            let mut out = std::io::stdout().lock();
            // A closed stdout (the output piped into `head`) must not abort the run: the exit
            // code still says whether the endpoint conforms.
            let _ = writeln!(out, "{} {} {}", outcome.status.as_str(), outcome.id, outcome.detail);
            let _ = out.flush();
        }
        self.outcomes.push(outcome);
    }

    pub(crate) fn count(&self, status: Status) -> usize {
        self.outcomes.iter().filter(|o| o.status == status).count()
    }

    pub(crate) fn failed(&self) -> bool {
        self.count(Status::Fail) > 0
    }

    pub(crate) fn summary(&self) -> String {
        format!(
            "SUMMARY {} passed, {} failed, {} skipped",
            self.count(Status::Pass),
            self.count(Status::Fail),
            self.count(Status::Skip)
        )
    }

    /// The whole run as one JSON document: the endpoint, the tool the tool checks used, every
    /// verdict and the counts.
    pub(crate) fn to_json(&self, url: &str, tool: &Value) -> Value {
        let checks: Vec<Value> = self
            .outcomes
            .iter()
            .map(|o| json!({"id": o.id, "status": o.status.as_str(), "detail": o.detail}))
            .collect();
        json!({
            "url": url,
            "tool": tool,
            "checks": checks,
            "passed": self.count(Status::Pass),
            "failed": self.count(Status::Fail),
            "skipped": self.count(Status::Skip),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_counted_and_details_fit_on_one_line() {
        let mut r = Report::new(false);
        r.record("a", Ok("fine".into()));
        r.record("b", Err(Stop::Fail("broke\n  here".into())));
        r.record("c", Err(Stop::Skip("not here".into())));
        assert!(r.failed());
        assert_eq!(r.summary(), "SUMMARY 1 passed, 1 failed, 1 skipped");
        let j = r.to_json("http://127.0.0.1:1/axp", &Value::Null);
        assert_eq!(j["checks"][1], json!({"id": "b", "status": "FAIL", "detail": "broke here"}));
        assert_eq!((j["passed"].as_u64(), j["failed"].as_u64(), j["skipped"].as_u64()), (Some(1), Some(1), Some(1)));
    }
}
