//! The CLI provider: the argv template rules as a table, and real commands for streaming, exit
//! codes, cancellation (whole process group), timeouts and bounded memory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axp_protocol::ToolCall;
use axp_protocol::methods::JobEventKind;
use axp_providers::{
    ArgvTemplate, CancellationToken, CliProvider, CliToolConfig, DirectLauncher, EventSink, Provider, ProviderError,
    ProviderId,
};
use serde_json::{Value, json};

use super::support::{Recorder, args, base_env, eventually};

fn schema(props: &[&str]) -> Value {
    let mut p = serde_json::Map::new();
    for name in props {
        p.insert((*name).into(), json!({}));
    }
    json!({"type": "object", "properties": p})
}

fn render(argv: &[&str], schema: Value, a: Value) -> Result<Vec<String>, String> {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    ArgvTemplate::parse(&argv, &schema)?.render(&args(a))
}

/// One row: template, schema properties, arguments, expected argv.
type Row<'a> = (&'a [&'a str], &'a [&'a str], Value, &'a [&'a str]);
/// One row: template, schema properties, arguments, a phrase the refusal must contain.
type Refusal<'a> = (&'a [&'a str], &'a [&'a str], Value, &'a str);

#[test]
fn argv_substitution_table() {
    let ok: Vec<Row<'_>> = vec![
        (&["git", "diff", "--", "{path}"], &["path"], json!({"path": "a b.txt"}), &["git", "diff", "--", "a b.txt"]),
        (&["ls", "{files}"], &["files"], json!({"files": ["a", "b", "c"]}), &["ls", "a", "b", "c"]),
        (&["ls", "{files}"], &["files"], json!({"files": []}), &["ls"]),
        (&["ls", "{flag}", "x"], &["flag"], json!({}), &["ls", "x"]),
        (&["ls", "{flag}", "x"], &["flag"], json!({"flag": null}), &["ls", "x"]),
        (&["echo", "--name={name}"], &["name"], json!({"name": "bob"}), &["echo", "--name=bob"]),
        (&["echo", "--name={name}", "end"], &["name"], json!({}), &["echo", "end"]),
        (&["echo", "{a}:{b}"], &["a", "b"], json!({"a": "x", "b": 2}), &["echo", "x:2"]),
        (&["head", "-n", "{n}"], &["n"], json!({"n": 5}), &["head", "-n", "5"]),
        (&["t", "{v}", "{f}"], &["v", "f"], json!({"v": true, "f": 1.5}), &["t", "true", "1.5"]),
        (&["find", ".", "-exec", "echo", "{}", ";"], &[], json!({}), &["find", ".", "-exec", "echo", "{}", ";"]),
        (&["awk", "{{print}}", "{ print $1 }"], &[], json!({}), &["awk", "{print}", "{ print $1 }"]),
        // `$(…)` and quotes are just bytes in one argv element: no shell ever sees them.
        (&["echo", "{s}"], &["s"], json!({"s": "$(rm -rf /); `id` 'q'"}), &["echo", "$(rm -rf /); `id` 'q'"]),
        // After `--`, a leading dash is data, not an option.
        (&["rm", "--", "{path}"], &["path"], json!({"path": "-rf"}), &["rm", "--", "-rf"]),
        // Not at the start of the element: cannot become an option.
        (&["grep", "-e{pat}"], &["pat"], json!({"pat": "-v"}), &["grep", "-e-v"]),
    ];
    for (argv, props, a, want) in ok {
        let got = render(argv, schema(props), a.clone()).unwrap_or_else(|e| panic!("{argv:?} with {a}: {e}"));
        assert_eq!(got, want, "{argv:?} with {a}");
    }

    let allow = json!({"type": "object", "properties": {"n": {"type": "integer", "x-allow-dash": true}}});
    assert_eq!(render(&["seq", "{n}", "0"], allow, json!({"n": -3})).unwrap(), ["seq", "-3", "0"]);

    let refused: Vec<Refusal<'_>> = vec![
        (&["cat", "{path}"], &["path"], json!({"path": "-rf"}), "starts with `-`"),
        (&["cat", "{path}", "--"], &["path"], json!({"path": "--help"}), "starts with `-`"),
        (&["cat", "{p}.txt"], &["p"], json!({"p": "-x"}), "starts with `-`"),
        (&["ls", "{files}"], &["files"], json!({"files": ["ok", "-la"]}), "starts with `-`"),
        (&["seq", "{n}"], &["n"], json!({"n": -1}), "starts with `-`"),
        (&["ls", "{o}"], &["o"], json!({"o": {"a": 1}}), "must be a string"),
        (&["ls", "{o}"], &["o"], json!({"o": [["nested"]]}), "must be a string"),
        (&["ls", "x{o}"], &["o"], json!({"o": ["a"]}), "is an array"),
        (&["ls", "{o}"], &["o"], json!({"o": "a\u{0}b"}), "NUL"),
    ];
    for (argv, props, a, why) in refused {
        let err = render(argv, schema(props), a.clone()).unwrap_err();
        assert!(err.contains(why), "{argv:?} with {a}: {err}");
    }
}

#[test]
fn bad_templates_are_configuration_errors() {
    let cases: Vec<(&[&str], &[&str], &str)> = vec![
        (&[], &[], "empty"),
        (&["{prog}", "x"], &["prog"], "must be literal"),
        (&["ls", "{nope}"], &["path"], "names no property"),
    ];
    for (argv, props, why) in cases {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let err = ArgvTemplate::parse(&argv, &schema(props)).unwrap_err();
        assert!(err.contains(why), "{argv:?}: {err}");
    }
    let tool = |name: &str, argv: &[&str]| CliToolConfig {
        name: name.into(),
        description: "d".into(),
        argv: argv.iter().map(|s| s.to_string()).collect(),
        input_schema: schema(&[]),
        timeout: Duration::from_secs(1),
        cwd: None,
        env: BTreeMap::new(),
        policy: Default::default(),
    };
    let err = CliProvider::new(
        ProviderId("c".into()),
        vec![tool("a", &["true"]), tool("a", &["true"]), tool("b", &["ls", "{x}"])],
        Arc::new(DirectLauncher),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("`a` is declared twice"), "{msg}");
    assert!(msg.contains("tool `b`"), "{msg}");
}

fn sh_tool(name: &str, script: &str, props: &[&str], timeout: Duration) -> CliToolConfig {
    let mut argv = vec!["sh".to_string(), "-c".to_string(), script.to_string(), "sh".to_string()];
    argv.extend(props.iter().map(|p| format!("{{{p}}}")));
    CliToolConfig {
        name: name.into(),
        description: format!("runs {script}"),
        argv,
        input_schema: schema(props),
        timeout,
        cwd: None,
        env: base_env(),
        policy: Default::default(),
    }
}

fn provider(tools: Vec<CliToolConfig>) -> CliProvider {
    CliProvider::new(ProviderId("cli".into()), tools, Arc::new(DirectLauncher)).unwrap()
}

fn call(tool: &str, a: Value) -> ToolCall {
    ToolCall { tool: tool.into(), arguments: args(a), meta: None }
}

#[tokio::test]
async fn streams_output_as_it_comes() {
    let p =
        provider(vec![sh_tool("count", "for i in 1 2 3; do echo $i; sleep 0.1; done", &[], Duration::from_secs(5))]);
    let tools = p.tools().await.unwrap();
    assert_eq!(tools[0].name, "count");
    let sink = Recorder::new();
    let out = p.call(call("count", json!({})), sink.clone(), CancellationToken::new()).await.unwrap();
    assert!(!out.is_error);
    assert_eq!(out.joined_text(), "1\n2\n3\n");
    assert_eq!(sink.stdout(), "1\n2\n3\n");
    let chunks = sink.events().iter().filter(|e| matches!(e, JobEventKind::Stdout { .. })).count();
    assert!(chunks >= 2, "output was not streamed: {:?}", sink.events());
    assert_eq!(out.structured_content.unwrap()["exit_code"], 0);
}

#[tokio::test]
async fn arguments_reach_the_command_verbatim() {
    let p = provider(vec![sh_tool("say", "printf '%s|' \"$@\"", &["words"], Duration::from_secs(5))]);
    let out = p
        .call(call("say", json!({"words": ["a b", "$(id)", "`x`;y"]})), Recorder::new(), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(out.joined_text(), "a b|$(id)|`x`;y|");
    let err =
        p.call(call("say", json!({"words": ["-n"]})), Recorder::new(), CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, ProviderError::InvalidArguments(_)), "{err:?}");
    let err = p.call(call("nope", json!({})), Recorder::new(), CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, ProviderError::UnknownTool(t) if t == "nope"));
}

#[tokio::test]
async fn non_zero_exit_is_a_tool_error_with_the_code() {
    let p = provider(vec![sh_tool("fail", "echo out; echo bad >&2; exit 7", &[], Duration::from_secs(5))]);
    let sink = Recorder::new();
    let out = p.call(call("fail", json!({})), sink.clone(), CancellationToken::new()).await.unwrap();
    assert!(out.is_error);
    let text = out.joined_text();
    assert!(text.contains("out\n"), "{text}");
    assert!(text.contains("exit code 7"), "{text}");
    assert!(text.contains("stderr:\nbad"), "{text}");
    assert_eq!(sink.stderr(), "bad\n");
    assert_eq!(out.structured_content.unwrap()["exit_code"], 7);
}

#[tokio::test]
async fn cancel_kills_the_whole_process_group() {
    let p = Arc::new(provider(vec![sh_tool("bg", "sleep 30 & echo $!; wait", &[], Duration::from_secs(30))]));
    let sink = Recorder::new();
    let cancel = CancellationToken::new();
    let task = {
        let (p, sink, cancel) = (p.clone(), sink.clone(), cancel.clone());
        tokio::spawn(async move { p.call(call("bg", json!({})), sink, cancel).await })
    };
    assert!(eventually(Duration::from_secs(5), || sink.stdout().ends_with('\n')).await);
    let child_pid: u32 = sink.stdout().trim().parse().unwrap();
    let proc_dir = std::path::PathBuf::from(format!("/proc/{child_pid}"));
    assert!(proc_dir.exists());
    let t0 = Instant::now();
    cancel.cancel();
    let res = task.await.unwrap();
    assert!(matches!(res, Err(ProviderError::Cancelled)), "{res:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    // The background `sleep` is in the same group: it must be gone too (reaped by init).
    assert!(
        eventually(Duration::from_secs(3), || !proc_dir.exists()
            || std::fs::read_to_string(proc_dir.join("stat")).is_ok_and(|s| s.contains(") Z ")))
        .await,
        "the background child {child_pid} survived the cancel"
    );
}

#[tokio::test]
async fn timeout_kills_and_reports() {
    let p = provider(vec![sh_tool("nap", "sleep 5", &[], Duration::from_millis(300))]);
    let t0 = Instant::now();
    let res = p.call(call("nap", json!({})), Recorder::new(), CancellationToken::new()).await;
    assert!(matches!(res, Err(ProviderError::Timeout { ref tool, .. }) if tool == "nap"), "{res:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_background_process_holding_stdout_does_not_hang_the_call() {
    let p = provider(vec![sh_tool("daemonish", "(sleep 30 &); echo started", &[], Duration::from_secs(20))]);
    let t0 = Instant::now();
    let out = p.call(call("daemonish", json!({})), Recorder::new(), CancellationToken::new()).await.unwrap();
    assert_eq!(out.joined_text(), "started\n");
    assert!(t0.elapsed() < Duration::from_secs(3), "took {:?}", t0.elapsed());
}

/// Counts bytes instead of keeping them, so the test itself stays small.
#[derive(Default)]
struct Counter(AtomicU64);

impl EventSink for Counter {
    fn emit(&self, e: JobEventKind) {
        if let JobEventKind::Stdout { data } = e {
            self.0.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_megabytes_of_output_keep_the_result_bounded() {
    const SIZE: u64 = 50 * 1024 * 1024;
    let p = provider(vec![sh_tool("flood", "head -c 52428800 /dev/zero | tr '\\0' x", &[], Duration::from_secs(60))]);
    let counter = Arc::new(Counter::default());
    let out = p.call(call("flood", json!({})), counter.clone(), CancellationToken::new()).await.unwrap();
    assert_eq!(counter.0.load(Ordering::Relaxed), SIZE, "every byte was streamed");
    let text = out.joined_text();
    assert!(text.len() <= 64 * 1024 + 200, "result holds {} bytes", text.len());
    assert!(text.starts_with("[… "), "the result says it was cut: {}", &text[..80]);
    assert!(text.ends_with("xxxx"));
    let sc = out.structured_content.unwrap();
    assert_eq!(sc["stdout_bytes"], SIZE);
    assert_eq!(sc["truncated"], true);
}

#[tokio::test]
async fn meta_timeout_ms_overrides_the_configured_timeout() {
    let p = provider(vec![sh_tool("nap", "sleep 5", &[], Duration::from_secs(60))]);
    let t0 = Instant::now();
    let res = p
        .call(
            ToolCall { tool: "nap".into(), arguments: Default::default(), meta: Some(json!({"timeout_ms": 200})) },
            Recorder::new(),
            CancellationToken::new(),
        )
        .await;
    assert!(matches!(res, Err(ProviderError::Timeout { .. })), "{res:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    let d = Duration::from_secs(9);
    let with = |meta: Value| ToolCall { tool: "x".into(), arguments: Default::default(), meta: Some(meta) };
    assert_eq!(axp_providers::call_timeout(&with(json!({"timeout_ms": 1500})), d), Duration::from_millis(1500));
    assert_eq!(axp_providers::call_timeout(&with(json!({"timeout_ms": -1})), d), d);
    assert_eq!(axp_providers::call_timeout(&with(json!({"timeout_ms": "5"})), d), d);
    assert_eq!(axp_providers::call_timeout(&with(json!({"job": "j"})), d), d);
}
