//! `axp token inspect [TOKEN|-] [--json] [--verify --state-dir DIR]`: shows what a capability
//! token claims (session, grants, expiry, its attenuation chain). Decoding needs no key and says
//! so loudly; `--verify` additionally checks the MAC chain with the gateway's root key read from
//! the state directory (never creating one). It cannot see the running gateway's revocation set,
//! so it never claims a token is usable — only that it is genuine and unexpired.

use axp_protocol::now_ms;
use std::io::Read;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};

/// `axp token …`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Decode a capability token and show its session, grants, expiry and chain (unverified
    /// unless --verify).
    Inspect(InspectArgs),
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The token (`axp1.…`); `-` reads it from stdin, which keeps it out of shell history.
    #[arg(env = "AXP_CAP_TOKEN", hide_env_values = true)]
    pub token: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Also verify the signature chain and expiry with the gateway's root key (operator only:
    /// needs read access to the state directory).
    #[arg(long)]
    pub verify: bool,
    /// The gateway's state directory, for --verify [default: $XDG_STATE_HOME/axp].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

pub fn run(cmd: TokenCommand) -> Result<i32> {
    match cmd {
        TokenCommand::Inspect(a) => inspect(a),
    }
}

/// "in 59m 58s" / "3h 2m ago", for people reading expiries.
fn relative(expires_ms: u64, now: u64) -> String {
    let (secs, past) =
        if expires_ms >= now { ((expires_ms - now) / 1000, false) } else { ((now - expires_ms) / 1000, true) };
    let text = match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    };
    if past { format!("expired {text} ago") } else { format!("expires in {text}") }
}

fn inspect(a: InspectArgs) -> Result<i32> {
    let token = if a.token == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading the token from stdin")?;
        s
    } else {
        a.token.clone()
    };
    let token = token.trim();
    let inspection = match axp_caps::inspect(token) {
        Ok(i) => i,
        Err(e) => bail!("{e}\nhint: pass the `cap_token` exactly as session.open or cap.attenuate returned it"),
    };
    let now = now_ms();
    let verification = if a.verify {
        let dir = a.state_dir.clone().unwrap_or_else(crate::commands::serve::default_state_dir);
        let key = axp_caps::load_root_key(&dir).with_context(|| {
            format!(
                "--verify needs the gateway's root key in {}\nhint: run this on the gateway host as its user, or pass --state-dir",
                dir.display()
            )
        })?;
        Some(axp_caps::Verifier::with_cache_capacity(key, 0).verify(token, now))
    } else {
        None
    };
    if a.json {
        let mut v = serde_json::to_value(&inspection)?;
        if let Some(r) = &verification {
            v["verified"] = serde_json::Value::Bool(r.is_ok());
            if let Err(e) = r {
                v["verify_error"] = serde_json::Value::String(e.to_string());
            }
            v["revocation_checked"] = serde_json::Value::Bool(false);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        match &verification {
            // The inspection's own text starts with an UNVERIFIED banner; replace it when the
            // chain did verify, keep it otherwise.
            Some(Ok(_)) => {
                println!(
                    "VERIFIED: the signature chain and expiry check out with this host's root key (revocation is known only to the running gateway)."
                );
                for line in inspection.to_string().lines().skip(1) {
                    println!("{line}");
                }
            }
            Some(Err(e)) => {
                println!("REJECTED: {e}");
                print!("{inspection}");
            }
            None => print!("{inspection}"),
        }
        println!("({})", relative(inspection.expires_ms, now));
    }
    Ok(match verification {
        Some(Err(_)) => 1,
        _ => 0,
    })
}
