//! Operator commands: `axp approve|deny JOB`, `axp revoke TOKEN`, `axp pending` against a running
//! gateway, and `axp operator token|keygen` to make credentials. Policy changes are sent as
//! signed single-use envelopes (`envelope.rs`) with the local key from the state dir or an
//! operator's key file; a bearer token (`--token` / `AXP_OPERATOR_TOKEN`) is sent when given.
//! The calls go through `axp_client`; only the signing is done here.

use std::path::PathBuf;

use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::auth::envelope::{Envelope, LOCAL_KEY_FILE, LOCAL_OPERATOR};

#[derive(Debug, Args, Clone)]
pub struct OperatorClient {
    /// The gateway's endpoint.
    #[arg(long, env = "AXP_URL", default_value = "http://127.0.0.1:7878/axp")]
    pub url: String,
    /// The operator's signing key [default: STATE_DIR/operator.key, the `local` operator].
    #[arg(long, env = "AXP_OPERATOR_KEY", value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// The operator name the key belongs to [default: local].
    #[arg(long, env = "AXP_OPERATOR")]
    pub operator: Option<String>,
    /// The gateway's state dir, where its `local` key is [default: $XDG_STATE_HOME/axp].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// An operator bearer token, sent as `Authorization: Bearer` (only needed when a proxy in
    /// front of the gateway asks for one; envelopes authenticate these commands).
    #[arg(long, env = "AXP_OPERATOR_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Debug, Args)]
pub struct DecideArgs {
    /// The job awaiting approval.
    pub job_id: String,
    /// Why (recorded in the audit log and, for a denial, returned to the agent).
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub client: OperatorClient,
}

#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// A token id (`axp token inspect` shows them) or a whole `axp1.` token.
    #[arg(value_name = "TOKEN")]
    pub target: String,
    #[command(flatten)]
    pub client: OperatorClient,
}

#[derive(Debug, Args)]
pub struct PendingArgs {
    #[command(flatten)]
    pub client: OperatorClient,
    /// Print raw JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Make a bearer token: prints the token (give it to the operator) on stdout and the
    /// `token_sha256` line for axp.toml on stderr.
    Token,
    /// Make an Ed25519 signing key file (0600) and print its `public_key` for axp.toml.
    Keygen {
        /// Where to write the key; refuses to overwrite.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

pub fn run_sync(cmd: OperatorCommand) -> Result<i32> {
    match cmd {
        OperatorCommand::Token => {
            let (token, hash) = crate::auth::operators::new_token();
            println!("{token}");
            eprintln!(
                "add to axp.toml:\n[[operators]]\nname = \"…\"\ntoken_sha256 = \"{hash}\"\ncapabilities = [\"tool(*)\"]"
            );
            Ok(0)
        }
        OperatorCommand::Keygen { out } => {
            let (pkcs8, public) = crate::auth::envelope::generate()?;
            crate::auth::envelope::write_key(&out, &pkcs8)?;
            println!("{public}");
            eprintln!("wrote {}; add to the operator's entry in axp.toml:\npublic_key = \"{public}\"", out.display());
            Ok(0)
        }
    }
}

async fn send(c: &OperatorClient, method: &str, params: Value) -> Result<Value> {
    let mut rpc = axp_client::Client::new(&c.url);
    rpc.bearer = c.token.clone();
    rpc.call(method, params).await.map_err(|e| match e {
        axp_client::Error::Rpc(e) => anyhow!("{} ({})", e.reason(), e.code),
        e => crate::commands::client::transport_error(e, &c.url),
    })
}

/// Signs `params` for `method` and sends it as `{envelope}`.
async fn signed(c: &OperatorClient, method: &str, params: Value) -> Result<Value> {
    let key_path = match &c.key {
        Some(k) => k.clone(),
        None => c.state_dir.clone().unwrap_or_else(crate::commands::serve::default_state_dir).join(LOCAL_KEY_FILE),
    };
    let key = crate::auth::envelope::read_key(&key_path).map_err(|e| {
        anyhow!(
            "{e:#}\nhint: run on the gateway's host (its state dir holds the local key), or pass --key and --operator"
        )
    })?;
    let operator = c.operator.clone().unwrap_or_else(|| LOCAL_OPERATOR.to_string());
    let env = Envelope::sign(&key, &operator, method, &params, crate::util::now_ms());
    send(c, method, json!({"envelope": env})).await
}

pub async fn approve(a: DecideArgs) -> Result<i32> {
    let mut params = json!({"job_id": a.job_id});
    if let Some(r) = &a.reason {
        params["reason"] = json!(r);
    }
    let r = signed(&a.client, "job.approve", params).await?;
    eprintln!("approved {}: {}", a.job_id, r["state"].as_str().unwrap_or(""));
    Ok(0)
}

pub async fn deny(a: DecideArgs) -> Result<i32> {
    let params =
        json!({"job_id": a.job_id, "reason": a.reason.clone().unwrap_or_else(|| "denied by the operator".into())});
    signed(&a.client, "job.deny", params).await?;
    eprintln!("denied {}", a.job_id);
    Ok(0)
}

pub async fn revoke(a: RevokeArgs) -> Result<i32> {
    let params = if a.target.starts_with(axp_caps::TOKEN_PREFIX) {
        json!({"cap_token": a.target})
    } else {
        json!({"token_id": a.target})
    };
    let r = signed(&a.client, "cap.revoke", params).await?;
    eprintln!("revoked {}", r["token_id"].as_str().unwrap_or(""));
    Ok(0)
}

pub async fn pending(a: PendingArgs) -> Result<i32> {
    let r = signed(&a.client, "job.pending", json!({})).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(0);
    }
    for j in r["jobs"].as_array().into_iter().flatten() {
        println!(
            "{}  {}  {}  {}",
            j["job_id"].as_str().unwrap_or(""),
            j["session_id"].as_str().unwrap_or(""),
            j["tool"].as_str().unwrap_or(""),
            j["arguments"]
        );
    }
    Ok(0)
}
