//! Per-call overhead of a no-op WASM tool through the provider (instantiate + call + JSON) and
//! instantiation alone, against a direct in-process Rust function doing the same JSON work,
//! measured in the same run; and, for scale, a call into the native example through its helper
//! process (JSON-RPC over a pipe; started directly here, the gateway adds the kernel sandbox
//! around it, which costs only at start). Prints microseconds per operation and the ratios;
//! asserts nothing. Needs the example plugins (`plugins/build-examples.sh`).
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axp_plugin_host::{DylibConfig, DylibProvider, HelperCommand, WasmGrants, WasmLimits, WasmProvider, WasmRuntime};
use axp_protocol::{ToolCall, ToolOutput};
use axp_provider_api::{CancellationToken, NullSink, Provider};

/// The baseline: what the host does around a call (arguments to JSON text, result parsed back
/// into a `ToolOutput`), with the tool itself a plain Rust function.
fn direct(call: &ToolCall) -> ToolOutput {
    let args = serde_json::Value::Object(call.arguments.clone()).to_string();
    let result = noop(black_box(&args));
    let v: serde_json::Value = serde_json::from_str(&result).unwrap();
    ToolOutput::text(v.to_string())
}

#[inline(never)]
fn noop(_args: &str) -> String {
    "null".to_string()
}

fn per_op(n: u32, f: impl FnMut()) -> f64 {
    let mut f = f;
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

fn main() {
    let wasm = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/examples/dist/hello/hello.wasm");
    let bytes =
        std::fs::read(&wasm).unwrap_or_else(|e| panic!("{}: {e}; run plugins/build-examples.sh first", wasm.display()));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let runtime =
        WasmRuntime::new(WasmLimits { call_timeout: Duration::from_secs(10), ..WasmLimits::default() }).unwrap();
    let provider = rt.block_on(WasmProvider::new(&runtime, "hello", &bytes, WasmGrants::default())).unwrap();
    let call = ToolCall { tool: "noop".into(), arguments: Default::default(), meta: None };
    let sink: axp_provider_api::JobSink = Arc::new(NullSink);
    let native_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/examples/dist/hello-native");
    let native = rt
        .block_on(DylibProvider::new(
            DylibConfig {
                id: "hello-native".into(),
                library: native_dir.join("hello_native.so"),
                helper: HelperCommand { program: env!("CARGO_BIN_EXE_axp-plugin-host").into(), args: vec![] },
                policy: Default::default(),
                trusted: false,
                call_timeout: Duration::from_secs(10),
            },
            Arc::new(axp_provider_api::DirectLauncher),
        ))
        .unwrap();
    let mut echo_args = serde_json::Map::new();
    echo_args.insert("message".into(), "x".into());
    let native_call = ToolCall { tool: "echo".into(), arguments: echo_args, meta: None };

    // Warm up every path.
    for _ in 0..200 {
        black_box(direct(&call));
        rt.block_on(provider.plugin().instantiate_only()).unwrap();
        rt.block_on(provider.call(call.clone(), sink.clone(), CancellationToken::new())).unwrap();
        rt.block_on(native.call(native_call.clone(), sink.clone(), CancellationToken::new())).unwrap();
    }
    let n = 5_000;
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let base = per_op(n * 10, || {
            black_box(direct(black_box(&call)));
        });
        let inst = per_op(n, || rt.block_on(provider.plugin().instantiate_only()).unwrap());
        let full = per_op(n, || {
            black_box(rt.block_on(provider.call(call.clone(), sink.clone(), CancellationToken::new())).unwrap());
        });
        let helper = per_op(n / 5, || {
            black_box(rt.block_on(native.call(native_call.clone(), sink.clone(), CancellationToken::new())).unwrap());
        });
        rounds.push((base, inst, full, helper));
    }
    // The best of three rounds: the least disturbed by other work on the machine.
    let best = |k: fn(&(f64, f64, f64, f64)) -> f64| rounds.iter().map(k).fold(f64::INFINITY, f64::min);
    let (base, inst, full, helper) = (best(|r| r.0), best(|r| r.1), best(|r| r.2), best(|r| r.3));
    println!("direct in-process Rust function (JSON in/out): {base:>9.2} µs/call");
    println!(
        "WASM instantiation alone (pooling):             {inst:>9.2} µs  ({:.0}x direct; target <= 50 µs)",
        inst / base
    );
    println!(
        "WASM no-op call (instantiate + call + JSON):    {full:>9.2} µs  ({:.0}x direct; target <= 20 µs)",
        full / base
    );
    println!(
        "native plugin call via its helper process:      {helper:>9.2} µs  ({:.0}x direct; {:.1}x the WASM call)",
        helper / base,
        helper / full
    );
}
