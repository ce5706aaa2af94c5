//! Traces: OpenTelemetry spans for each request, tool call, job, provider call and egress
//! attempt, exported over OTLP/HTTP (protobuf) when `[telemetry] otlp_endpoint` is set, and the
//! W3C trace context (`traceparent`, `tracestate`) taken from a client and passed on to the
//! servers a call reaches.
//!
//! The spans are `tracing` spans of the target [`TARGET`], made only while an exporter runs
//! ([`enabled`]; the `trace_span!` macro gives `Span::none()` otherwise, so a
//! gateway without `[telemetry]` pays one relaxed load per would-be span). `tracing-opentelemetry`
//! turns them into OpenTelemetry spans; its layer sees that target only, and the log layer never
//! sees it, so logs read the same with or without traces. The layer is installed with the log
//! subscriber, before `axp.toml` is read, and reaches the SDK's tracer through [`Deferred`] once
//! [`start`] has built it.
//!
//! A client's context comes from the `traceparent` header or the request's
//! `params._meta.traceparent` (MCP, SEP-414); invalid values are ignored, as W3C asks. With
//! traces on, the request span is its child and a server is handed the context of the provider
//! call span; with traces off, the client's context is passed on unchanged (a task-local that
//! follows the request into its jobs), so a trace that spans AXP still connects.
//!
//! An egress attempt is reported by the proxy child when its connection ends, with no trace
//! context of its own: it is placed under the call of the same owner (the provider whose server
//! made it, or the session whose job did) that was running when the connection was accepted.
//! When several were, it belongs to none of them for certain: it gets a span of its own, linked
//! to each.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, UNIX_EPOCH};

use axp_egress_proxy::AuditRecord;
use axp_protocol::now_ms;
use axp_providers::NetScope;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Link, SpanContext, SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use serde_json::{Map, Value};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `tracing` target of every span this module exports.
pub const TARGET: &str = "axp::trace";

/// How long an ended call still receives the egress attempts that began while it ran (a proxy
/// reports an attempt when its connection closes, which a kept-alive connection delays).
const WINDOW_KEPT: Duration = Duration::from_secs(600);

/// Calls remembered per owner for attributing egress attempts; the oldest ended ones go first.
const WINDOWS_PER_OWNER: usize = 256;

/// Links an unattributable attempt carries at most.
const MAX_LINKS: usize = 8;

static ON: AtomicBool = AtomicBool::new(false);
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

tokio::task_local! {
    /// The client's trace context, passed on unchanged while traces are off.
    static REMOTE: Option<Context>;
}

/// Whether spans are being made and exported.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// An INFO span of [`TARGET`] while traces are on, `Span::none()` otherwise.
macro_rules! trace_span {
    ($name:literal $(, $($fields:tt)*)?) => {
        if $crate::telemetry::enabled() {
            tracing::info_span!(target: "axp::trace", $name $(, $($fields)*)?)
        } else {
            tracing::Span::none()
        }
    };
}
pub(crate) use trace_span;

/// The `[telemetry]` settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where spans are POSTed (`…/v1/traces`).
    pub traces_url: String,
    pub service_name: String,
}

impl Config {
    /// `None` when no endpoint is configured (traces off); an error names a bad value.
    pub fn from_settings(s: &crate::config::settings::TelemetrySettings) -> Result<Option<Config>, String> {
        let Some(endpoint) = s.otlp_endpoint.as_deref() else {
            if s.service_name.is_some() {
                return Err(
                    "`telemetry.service_name` needs `telemetry.otlp_endpoint` (traces are off without it)".into()
                );
            }
            return Ok(None);
        };
        let url = reqwest::Url::parse(endpoint)
            .map_err(|e| format!("`telemetry.otlp_endpoint` is not a URL ({e}): `{endpoint}`"))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "`telemetry.otlp_endpoint` must be an http:// or https:// URL of an OTLP/HTTP receiver, like http://127.0.0.1:4318, not `{endpoint}`"
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!("`telemetry.otlp_endpoint` takes no query or fragment: `{endpoint}`"));
        }
        let base = endpoint.trim_end_matches('/');
        let traces_url = if base.ends_with("/v1/traces") { base.to_string() } else { format!("{base}/v1/traces") };
        let service_name = s.service_name.clone().unwrap_or_else(|| "axp".into());
        if service_name.trim().is_empty() {
            return Err("`telemetry.service_name` is empty".into());
        }
        Ok(Some(Config { traces_url, service_name }))
    }
}

/// Starts exporting: builds the OTLP exporter and the SDK's batch processor (its own thread),
/// and turns span making on. Once per process.
pub fn start(config: &Config) -> Result<(), String> {
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(config.traces_url.clone())
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter for {}: {e}", config.traces_url))?;
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(config.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("axp");
    if TRACER.set(tracer).is_err() || PROVIDER.set(provider).is_err() {
        return Err("traces were already started in this process".into());
    }
    ON.store(true, Ordering::SeqCst);
    tracing::info!(endpoint = %config.traces_url, "exporting traces over OTLP/HTTP");
    Ok(())
}

/// Sends the spans still buffered and stops the exporter (at shutdown; blocks up to 5 s).
pub fn stop() {
    if let Some(p) = PROVIDER.get() {
        ON.store(false, Ordering::SeqCst);
        if let Err(e) = p.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "the last spans could not all be exported");
        }
    }
}

/// The tracer `tracing-opentelemetry` builds spans with: the SDK's once [`start`] has run. Before
/// that no span of [`TARGET`] is made, so the fallback (a provider with no exporter) only keeps
/// the type whole.
#[derive(Debug, Clone, Copy, Default)]
pub struct Deferred;

impl Tracer for Deferred {
    type Span = opentelemetry_sdk::trace::Span;

    fn build_with_context(&self, builder: opentelemetry::trace::SpanBuilder, parent_cx: &Context) -> Self::Span {
        sdk_tracer().build_with_context(builder, parent_cx)
    }
}

fn sdk_tracer() -> &'static SdkTracer {
    static FALLBACK: OnceLock<SdkTracer> = OnceLock::new();
    TRACER.get().unwrap_or_else(|| FALLBACK.get_or_init(|| SdkTracerProvider::builder().build().tracer("axp")))
}

/// The layer that turns the spans of [`TARGET`] (and nothing else) into OpenTelemetry spans.
pub fn layer<S>() -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    tracing_opentelemetry::layer()
        .with_tracer(Deferred)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::INFO))
}

/// The W3C trace context in `traceparent` (and `tracestate`), if it is a valid one.
pub fn extract(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Context> {
    let traceparent = traceparent?.trim();
    if !well_formed(traceparent) {
        return None;
    }
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert("traceparent".to_string(), traceparent.to_string());
    if let Some(s) = tracestate {
        carrier.insert("tracestate".to_string(), s.to_string());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    let valid = cx.span().span_context().is_valid();
    valid.then_some(cx)
}

/// W3C's `traceparent` shape: `version-traceid-parentid-flags`, of 2, 32, 16 and 2 lowercase hex
/// digits (a later version may add fields; version 00 has exactly these). The propagator checks
/// the values (no all-zero id, no version ff), but takes a short id and pads it.
fn well_formed(traceparent: &str) -> bool {
    let parts: Vec<&str> = traceparent.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    parts.len() >= 4
        && (parts[0] != "00" || parts.len() == 4)
        && [2, 32, 16, 2].iter().zip(&parts).all(|(n, s)| hex(s, *n))
}

/// The client's trace context of a request: `params._meta.traceparent` (MCP), else the
/// transport's (the HTTP `traceparent` header).
pub fn incoming(params: Option<&Value>, header: Option<(&str, Option<&str>)>) -> Option<Context> {
    let meta = params.and_then(|p| p.get("_meta"));
    let from_meta = meta.and_then(|m| m.get("traceparent")).and_then(Value::as_str);
    if let Some(tp) = from_meta {
        let state = meta.and_then(|m| m.get("tracestate")).and_then(Value::as_str);
        if let Some(cx) = extract(Some(tp), state) {
            return Some(cx);
        }
    }
    header.and_then(|(tp, state)| extract(Some(tp), state))
}

/// Runs a request's future as the child of the client's context: under `span` (whose parent
/// it becomes) while traces are on, with the context kept for [`outgoing`] while they are off.
pub async fn within<F: std::future::Future>(remote: Option<Context>, span: Span, fut: F) -> F::Output {
    use tracing::Instrument;
    if let Some(cx) = &remote
        && enabled()
    {
        let _ = span.set_parent(cx.clone());
    }
    REMOTE.scope(remote, fut.instrument(span)).await
}

/// `fut` on another task, under `span` (a child of the current one) and with the client's
/// context of the current task (for jobs, which outlive the request that started them).
pub fn carried<F: std::future::Future>(span: Span, fut: F) -> impl std::future::Future<Output = F::Output> {
    use tracing::Instrument;
    let remote = REMOTE.try_with(Clone::clone).ok().flatten();
    REMOTE.scope(remote, fut.instrument(span))
}

/// The trace context a server called inside `span` is handed, as `_meta` keys (`traceparent`,
/// and `tracestate` when there is one): `span`'s own while traces are on, else the client's.
pub fn outgoing(span: &Span) -> Option<Map<String, Value>> {
    let cx =
        if enabled() && !span.is_none() { span.context() } else { REMOTE.try_with(Clone::clone).ok().flatten()? };
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier: HashMap<String, String> = HashMap::with_capacity(2);
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    let mut out = Map::new();
    for key in ["traceparent", "tracestate"] {
        if let Some(v) = carrier.remove(key).filter(|v| !v.is_empty()) {
            out.insert(key.to_string(), Value::String(v));
        }
    }
    out.contains_key("traceparent").then_some(out)
}

/// Marks `span` failed, with a reason.
pub fn failed(span: &Span, why: &str) {
    if !span.is_none() {
        span.set_status(Status::error(why.to_string()));
    }
}

/// A call's span, open to the egress attempts of `owner` while it runs (and for a while after).
#[derive(Debug)]
pub struct Window {
    owner: NetScope,
    id: u64,
}

struct Open {
    id: u64,
    cx: SpanContext,
    start_ms: u64,
    end_ms: Option<u64>,
}

fn windows() -> &'static Mutex<HashMap<NetScope, VecDeque<Open>>> {
    static W: OnceLock<Mutex<HashMap<NetScope, VecDeque<Open>>>> = OnceLock::new();
    W.get_or_init(Mutex::default)
}

/// Opens `span` to `owner`'s egress attempts until the returned guard drops; `None` while traces
/// are off.
pub fn window(owner: NetScope, span: &Span) -> Option<Window> {
    if !enabled() || span.is_none() {
        return None;
    }
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let cx = span.context().span().span_context().clone();
    if !cx.is_valid() {
        return None;
    }
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let now = now_ms();
    let mut all = windows().lock().unwrap_or_else(PoisonError::into_inner);
    let list = all.entry(owner.clone()).or_default();
    let kept = WINDOW_KEPT.as_millis() as u64;
    list.retain(|w| w.end_ms.is_none_or(|e| now.saturating_sub(e) < kept));
    if list.len() >= WINDOWS_PER_OWNER
        && let Some(i) = list.iter().position(|w| w.end_ms.is_some())
    {
        list.remove(i);
    }
    list.push_back(Open { id, cx, start_ms: now, end_ms: None });
    Some(Window { owner, id })
}

impl Drop for Window {
    fn drop(&mut self) {
        let now = now_ms();
        let mut all = windows().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = all.get_mut(&self.owner).and_then(|l| l.iter_mut().find(|w| w.id == self.id)) {
            w.end_ms = Some(now);
        }
    }
}

/// The calls of `owner` running at `at_ms`.
fn running_at(owner: &NetScope, at_ms: u64) -> Vec<SpanContext> {
    let all = windows().lock().unwrap_or_else(PoisonError::into_inner);
    all.get(owner)
        .map(|l| {
            l.iter()
                .filter(|w| w.start_ms <= at_ms && w.end_ms.is_none_or(|e| at_ms <= e))
                .map(|w| w.cx.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Exports one egress attempt as a span of its own times (accept to end), under the call of its
/// owner that made it (see the module's notes).
pub fn egress_attempt(owner: &NetScope, r: &AuditRecord) {
    if !enabled() {
        return;
    }
    let end = UNIX_EPOCH + Duration::from_millis(r.ts_ms);
    let start_ms = r.ts_ms.saturating_sub(r.duration_ms);
    let start = UNIX_EPOCH + Duration::from_millis(start_ms);
    let mut attributes = vec![
        KeyValue::new("axp.egress.decision", r.decision),
        KeyValue::new("axp.egress.reason", r.reason),
        KeyValue::new("axp.egress.proto", r.proto),
        KeyValue::new("axp.egress.bytes_up", r.bytes_up as i64),
        KeyValue::new("axp.egress.bytes_down", r.bytes_down as i64),
    ];
    if let Some(t) = r.target.as_deref().or(r.requested.as_deref()) {
        attributes.push(KeyValue::new("server.address", t.to_string()));
    }
    match owner {
        NetScope::Session(id) => attributes.push(KeyValue::new("axp.session", id.clone())),
        NetScope::Provider(name) => attributes.push(KeyValue::new("axp.provider", name.clone())),
        NetScope::Shared => {}
    }
    let calls = running_at(owner, start_ms);
    let mut builder = sdk_tracer()
        .span_builder("egress attempt")
        .with_kind(SpanKind::Client)
        .with_start_time(start)
        .with_attributes(attributes);
    let parent = match calls.as_slice() {
        [one] => Context::new().with_remote_span_context(one.clone()),
        several => {
            let links = several.iter().take(MAX_LINKS).map(|c| Link::with_context(c.clone())).collect();
            builder = builder.with_links(links);
            Context::new()
        }
    };
    let mut span = builder.start_with_context(sdk_tracer(), &parent);
    use opentelemetry::trace::Span as _;
    if r.decision != "allow" {
        span.set_status(Status::error(format!("{}: {}", r.reason, r.detail)));
    }
    span.end_with_timestamp(end.max(start));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::settings::TelemetrySettings;

    #[test]
    fn endpoints_are_checked_and_get_the_traces_path() {
        let s = |e: &str| TelemetrySettings { otlp_endpoint: Some(e.into()), service_name: None };
        let c = Config::from_settings(&s("http://127.0.0.1:4318")).unwrap().unwrap();
        assert_eq!(c.traces_url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(c.service_name, "axp");
        let c = Config::from_settings(&s("https://otel.example/v1/traces/")).unwrap().unwrap();
        assert_eq!(c.traces_url, "https://otel.example/v1/traces");
        for bad in ["127.0.0.1:4318", "grpc://collector:4317", "http://x/?a=b", "not a url"] {
            let e = Config::from_settings(&s(bad)).unwrap_err();
            assert!(e.contains("telemetry.otlp_endpoint"), "{bad}: {e}");
        }
        assert_eq!(Config::from_settings(&TelemetrySettings::default()).unwrap(), None);
        let e = Config::from_settings(&TelemetrySettings { otlp_endpoint: None, service_name: Some("x".into()) });
        assert!(e.unwrap_err().contains("needs `telemetry.otlp_endpoint`"));
    }

    #[test]
    fn only_valid_trace_contexts_are_taken() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = extract(Some(tp), Some("vendor=1")).unwrap();
        assert_eq!(cx.span().span_context().trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "",
        ] {
            assert!(extract(Some(bad), None).is_none(), "{bad}");
        }
        // `_meta` wins over the header; an invalid `_meta` value falls back to the header.
        let params = serde_json::json!({"_meta": {"traceparent": tp}});
        let other = "00-11111111111111111111111111111111-2222222222222222-01";
        let got = incoming(Some(&params), Some((other, None))).unwrap();
        assert_eq!(got.span().span_context().span_id().to_string(), "00f067aa0ba902b7");
        let params = serde_json::json!({"_meta": {"traceparent": "garbage"}});
        let got = incoming(Some(&params), Some((other, None))).unwrap();
        assert_eq!(got.span().span_context().span_id().to_string(), "2222222222222222");
        assert!(incoming(None, None).is_none());
    }

    #[tokio::test]
    async fn with_traces_off_the_clients_context_is_passed_on_unchanged() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let remote = extract(Some(tp), Some("vendor=1"));
        let got = within(remote, Span::none(), async {
            // A job's task: spawned, carrying the context.
            tokio::spawn(carried(Span::none(), async { outgoing(&Span::none()) })).await.unwrap()
        })
        .await
        .unwrap();
        assert_eq!(got["traceparent"], tp);
        assert_eq!(got["tracestate"], "vendor=1");
        assert!(outgoing(&Span::none()).is_none());
    }
}
