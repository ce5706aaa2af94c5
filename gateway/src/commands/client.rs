//! The human CLI against a running gateway (`axp index|describe|call|jobs|attach --url`): calls
//! through `axp_client` and keeps one session per gateway URL in the state dir, so `axp jobs`
//! and `axp attach` see the jobs `axp call` started. Data goes to stdout, everything else to
//! stderr.

use clap::Args;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use axp_protocol::ErrorCode;
use axp_protocol::methods::{JobEvent, JobEventKind, JobState};
use serde_json::{Value, json};

#[derive(Debug, Args, Clone)]
pub struct ClientArgs {
    /// The gateway's endpoint.
    #[arg(long, env = "AXP_URL", default_value = "http://127.0.0.1:7878/axp")]
    pub url: String,
    /// Print raw JSON.
    #[arg(long)]
    pub json: bool,
    /// An operator bearer token for opening the session (when the gateway has [[operators]]).
    #[arg(long = "operator-token", env = "AXP_OPERATOR_TOKEN", hide_env_values = true)]
    pub operator_token: Option<String>,
}

#[derive(Debug, Args)]
pub struct IndexArgs {
    /// What you need, in your words: tools are ranked by meaning (embeddings) and by their
    /// words (BM25 over names, descriptions and parameters), best first.
    pub query: Vec<String>,
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Show each ranked tool's score, where the gateway sends one with its entries.
    #[arg(long)]
    pub scores: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    pub name: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct CallArgs {
    pub name: String,
    /// Arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    pub args: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    pub job_id: String,
    /// First sequence number to read.
    #[arg(long, default_value_t = 0)]
    pub from: u64,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Saved {
    session_id: String,
    cap_token: String,
}

pub struct Client {
    rpc: axp_client::Client,
    session: Option<Saved>,
    /// Sent as `Authorization: Bearer` when opening a session.
    operator_token: Option<String>,
}

/// A JSON-RPC error from the gateway, kept whole so callers can branch on the code.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.reason())]
pub struct Remote(pub axp_protocol::RpcError);

fn sessions_file() -> PathBuf {
    crate::commands::serve::default_state_dir().join("client-sessions.json")
}

/// What a person is told when a call never got an answer from the gateway at `url`.
pub(crate) fn transport_error(e: axp_client::Error, url: &str) -> anyhow::Error {
    match e {
        axp_client::Error::Unreachable { source, .. } => anyhow!(source)
            .context(format!("cannot reach the gateway at {url}\nhint: start it with `axp serve`, or pass --url")),
        e @ axp_client::Error::NotJson { .. } => anyhow!(e).context("the gateway sent something that is not JSON"),
        e @ axp_client::Error::NotAResponse { .. } => {
            anyhow!(e).context("the gateway sent something that is not a JSON-RPC response")
        }
        e => anyhow!(e),
    }
}

impl Client {
    pub fn new(args: &ClientArgs) -> Self {
        let saved = std::fs::read(sessions_file())
            .ok()
            .and_then(|b| serde_json::from_slice::<BTreeMap<String, Saved>>(&b).ok())
            .and_then(|m| m.get(&args.url).cloned());
        Self { rpc: axp_client::Client::new(&args.url), session: saved, operator_token: args.operator_token.clone() }
    }

    async fn raw(&mut self, method: &str, params: Value) -> Result<Result<Value, Remote>> {
        // The session's headers when there is one; otherwise the operator's token, which only
        // `session.open` needs (the session's token does the rest).
        let (session_id, cap_token, bearer) = match &self.session {
            Some(s) => (Some(s.session_id.clone()), Some(s.cap_token.clone()), None),
            None => (None, None, self.operator_token.clone()),
        };
        (self.rpc.session_id, self.rpc.cap_token, self.rpc.bearer) = (session_id, cap_token, bearer);
        match self.rpc.call(method, params).await {
            Ok(v) => Ok(Ok(v)),
            Err(axp_client::Error::Rpc(e)) => Ok(Err(Remote(e))),
            Err(e) => Err(transport_error(e, &self.rpc.url)),
        }
    }

    /// Calls `method` in this client's session, opening (and remembering) one when needed.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        if self.session.is_none() {
            self.open_session().await?;
        }
        match self.raw(method, params.clone()).await? {
            Err(Remote(e)) if matches!(e.kind(), Some(ErrorCode::UnknownSession | ErrorCode::Unauthorized)) => {
                self.open_session().await?;
                self.raw(method, params).await?.map_err(|e| anyhow!(e))
            }
            r => r.map_err(|e| anyhow!(e)),
        }
    }

    async fn open_session(&mut self) -> Result<()> {
        self.session = None;
        let r = self.raw("session.open", json!({})).await?.map_err(|e| anyhow!(e))?;
        let saved = Saved {
            session_id: r["session_id"].as_str().unwrap_or_default().to_string(),
            cap_token: r["cap_token"].as_str().unwrap_or_default().to_string(),
        };
        let path = sessions_file();
        let mut all: BTreeMap<String, Saved> =
            std::fs::read(&path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
        all.insert(self.rpc.url.clone(), saved.clone());
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(&path, serde_json::to_vec_pretty(&all)?);
        self.session = Some(saved);
        Ok(())
    }
}

pub async fn index(a: IndexArgs) -> Result<i32> {
    let mut c = Client::new(&a.client);
    let query = (!a.query.is_empty()).then(|| a.query.join(" "));
    let ranked = query.is_some();
    let r = c.call("axp.index", json!({"query": query, "limit": a.limit})).await?;
    if a.client.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(0);
    }
    let tools = r["tools"].as_array().cloned().unwrap_or_default();
    let mut out = std::io::stdout().lock();
    write_index(&mut out, &tools, ranked, a.scores)?;
    eprintln!("{} of {} tools", tools.len(), r["total"]);
    if a.scores && tools.iter().all(|t| t.get("score").is_none()) && !tools.is_empty() {
        eprintln!("(this gateway sends no scores with its entries; the order above is its ranking)");
    }
    Ok(0)
}

/// One line per tool: with a query, its rank first (and its score when asked for and sent),
/// so the order reads as the ranking it is.
fn write_index(out: &mut dyn Write, tools: &[Value], ranked: bool, scores: bool) -> std::io::Result<()> {
    let width = tools.iter().filter_map(|t| t["name"].as_str()).map(str::len).max().unwrap_or(0);
    let rank_width = tools.len().to_string().len();
    for (i, t) in tools.iter().enumerate() {
        let mark = if t["unavailable"].as_bool() == Some(true) { " [unavailable]" } else { "" };
        if ranked {
            write!(out, "{:>rank_width$}. ", i + 1)?;
        }
        if scores && let Some(score) = t["score"].as_f64() {
            write!(out, "{score:>7.4}  ")?;
        }
        writeln!(out, "{:width$}  {}{mark}", t["name"].as_str().unwrap_or(""), t["desc"].as_str().unwrap_or(""))?;
    }
    Ok(())
}

pub async fn describe(a: DescribeArgs) -> Result<i32> {
    let mut c = Client::new(&a.client);
    let r = c.call("axp.describe", json!({"name": a.name})).await?;
    if a.client.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(0);
    }
    println!("{}", r["signature"].as_str().unwrap_or(""));
    println!();
    println!("{}", r["description"].as_str().unwrap_or(""));
    println!();
    if let Some(instructions) = r["instructions"].as_str() {
        println!("{instructions}");
        println!();
    }
    println!("provider: {}   requires: {}", r["provider"].as_str().unwrap_or(""), r["requires"]);
    println!("schema: {}", serde_json::to_string_pretty(&r["schema"])?);
    Ok(0)
}

pub async fn call(a: CallArgs) -> Result<i32> {
    let arguments: Value = serde_json::from_str(&a.args).context("--args must be a JSON object")?;
    if !arguments.is_object() {
        bail!("--args must be a JSON object, e.g. --args '{{\"message\": \"hi\"}}'");
    }
    let mut c = Client::new(&a.client);
    let r = c.call("job.start", json!({"tool": a.name, "arguments": arguments})).await?;
    let job = r["job_id"].as_str().ok_or_else(|| anyhow!("the gateway returned no job id"))?.to_string();
    eprintln!("job {job}");
    follow(&mut c, &job, 0, a.client.json).await
}

pub async fn jobs(a: ClientArgs) -> Result<i32> {
    let mut c = Client::new(&a);
    let r = c.call("job.list", json!({})).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(0);
    }
    for j in r["jobs"].as_array().into_iter().flatten() {
        let what = j
            .get("tool")
            .map(|t| t.to_string())
            .or_else(|| j.get("command").map(|c| c.to_string()))
            .unwrap_or_default();
        println!(
            "{}  {:9}  seq {:>6}  {}",
            j["job_id"].as_str().unwrap_or(""),
            j["state"].as_str().unwrap_or(""),
            j["next_seq"],
            what
        );
    }
    Ok(0)
}

pub async fn attach(a: AttachArgs) -> Result<i32> {
    let mut c = Client::new(&a.client);
    follow(&mut c, &a.job_id, a.from, a.client.json).await
}

/// Prints a job's events from `from` until it ends (long-polling `job.attach`); the exit code
/// is the job's.
async fn follow(c: &mut Client, job: &str, from: u64, json_out: bool) -> Result<i32> {
    let mut seq = from;
    let mut code = 0;
    // What the job streamed to stdout: a tool that streams its output also returns it as its
    // result's text, which is then not printed a second time.
    let mut streamed = String::new();
    loop {
        let r = c.call("job.attach", json!({"job_id": job, "from_seq": seq, "wait_ms": 20000})).await?;
        let events: Vec<JobEvent> = serde_json::from_value(r["events"].clone())?;
        for e in &events {
            if json_out {
                println!("{}", serde_json::to_string(e)?);
                continue;
            }
            match &e.kind {
                JobEventKind::Stdout { data } | JobEventKind::Pty { data } => {
                    print!("{data}");
                    std::io::stdout().flush()?;
                    streamed.push_str(data);
                }
                JobEventKind::Stderr { data } => eprint!("{data}"),
                JobEventKind::Progress { progress, total, message } => eprintln!(
                    "progress {progress}{}{}",
                    total.map(|t| format!("/{t}")).unwrap_or_default(),
                    message.as_ref().map(|m| format!(" {m}")).unwrap_or_default()
                ),
                JobEventKind::Log { level, data } => eprintln!("[{level}] {data}"),
                JobEventKind::ToolCall { tool, ok, code: c, ms, .. } => eprintln!(
                    "[tool] {tool} {} ({ms} ms)",
                    if *ok { "ok".to_string() } else { format!("failed {}", c.unwrap_or_default()) }
                ),
                JobEventKind::Result { output } => {
                    let text = output.joined_text();
                    if !text.is_empty() && text.trim_end() != streamed.trim_end() {
                        println!("{text}");
                    }
                    // Structured content usually repeats the text; it is shown when there is none.
                    if let Some(s) = &output.structured_content
                        && text.is_empty()
                        && streamed.is_empty()
                    {
                        println!("{}", serde_json::to_string_pretty(s)?);
                    }
                    if output.is_error {
                        code = 1;
                    }
                }
                JobEventKind::Exit { state, code: c, signal, error } => {
                    if let Some(err) = error {
                        eprintln!(
                            "error: {}",
                            err.get("data")
                                .and_then(|d| d.get("reason"))
                                .and_then(Value::as_str)
                                .unwrap_or(&err.to_string())
                        );
                        code = code.max(1);
                    }
                    match (state, c, signal) {
                        (JobState::Exited, Some(c), _) if *c != 0 => code = code.max(*c),
                        (JobState::Killed, _, s) => {
                            eprintln!("job killed ({})", s.clone().unwrap_or_default());
                            code = code.max(130);
                        }
                        (JobState::Failed, ..) | (JobState::Lost, ..) => code = code.max(1),
                        _ => {}
                    }
                }
            }
        }
        seq = r["next_seq"].as_u64().unwrap_or(seq);
        if r["done"].as_bool() == Some(true) {
            return Ok(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ranked_index_numbers_its_lines_and_shows_scores_on_request() {
        let tools = vec![
            json!({"name": "time__get_current_time", "desc": "Get current time", "score": 0.1667}),
            json!({"name": "time__convert_time", "desc": "Convert time", "score": 0.0833, "unavailable": true}),
        ];
        let mut out = Vec::new();
        write_index(&mut out, &tools, true, true).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "1.  0.1667  time__get_current_time  Get current time\n2.  0.0833  time__convert_time      Convert time [unavailable]\n"
        );
        let mut out = Vec::new();
        write_index(&mut out, &tools, false, false).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "time__get_current_time  Get current time\ntime__convert_time      Convert time [unavailable]\n"
        );
    }
}
