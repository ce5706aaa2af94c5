//! Code-mode jobs (`job.start {code: {language, source}}`, DESIGN §4): an agent's short Python,
//! JavaScript or sh program runs in the session's sandbox like a command job, with a generated
//! SDK in which every tool the presented token allows is an ordinary function. Calls go back to
//! the gateway over a unix socket that belongs to this one job, so composing several tool calls
//! needs no round trip through the model.
//!
//! Per job, the gateway creates a private directory under `STATE_DIR/codemode/` holding the
//! socket, the SDK and the program, and mounts it read-only into the sandbox — nothing else of
//! the state directory is visible there, so another job's socket does not exist inside. The job
//! gets its own capability token, attenuated from the one the request presented to the tool
//! grants it carried (so it can never exceed the job's), and the socket answers only that token.
//! Every nested call is checked, validated and audited like a `tools/call`, and recorded in the
//! job's log as a `tool_call` event. When the process ends the socket is closed, the directory
//! removed and the token revoked.
//!
//! `sdk` writes the SDK and the program; `socket` serves the calls. This module only wires them
//! into a job and decides nothing the dispatcher has not (it reuses its checks).

mod sdk;
mod socket;

use std::path::{Path, PathBuf};
use std::time::Duration;

use axp_protocol::methods::{CodeSpec, JobStartParams};
use axp_protocol::{CapabilitySet, ErrorCode, RpcError};
use axp_store::JobRecord;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::auth::session::Session;
use crate::execution::jobs::Work;
use crate::gateway::Gateway;
use crate::util::{internal, now_ms};

pub use sdk::Language;

/// Largest program accepted, in bytes.
pub const MAX_SOURCE: usize = 1 << 20;

/// Longest path a unix socket address holds (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Where code-mode jobs' directories live, below the state directory.
pub(crate) fn root(state_dir: &Path) -> PathBuf {
    state_dir.join("codemode")
}

/// Starts a code-mode job for session `s`. `presented` is the token the request carried (the
/// job's token is attenuated from it); the caller audits the start.
pub fn start(
    gw: &Gateway,
    s: &Session,
    presented: Option<&str>,
    code: &CodeSpec,
    params: &JobStartParams,
    timeout: Option<Duration>,
) -> Result<JobRecord, RpcError> {
    let language: Language = code.language.parse().map_err(RpcError::invalid_params)?;
    if code.source.len() > MAX_SOURCE {
        return Err(RpcError::new(
            ErrorCode::LimitExceeded,
            format!("the program is {} bytes; code-mode accepts at most {MAX_SOURCE}", code.source.len()),
        ));
    }
    let id = gw.jobs.new_id();
    // The SDK offers what the token allows; the job's token carries exactly those tool grants.
    let tools: Vec<sdk::Tool> = gw
        .registry
        .entries(&|n| s.caps.allows_tool(n))
        .into_iter()
        .map(|(e, _)| sdk::Tool {
            signature: e.signature.clone(),
            desc: e.spec.description.clone(),
            name: e.name.clone(),
        })
        .collect();
    let grants: Vec<String> = s.caps.to_strings().into_iter().filter(|c| c.starts_with("tool(")).collect();
    let caps = CapabilitySet::parse_all(&grants).map_err(|_| RpcError::internal("a tool grant did not parse"))?;
    let ttl = timeout.unwrap_or(Duration::from_secs(24 * 3600));
    let expires = now_ms().saturating_add(ttl.as_millis() as u64 + 60_000);
    let (token, token_id) = gw.sessions.job_token(s, presented, &caps, expires)?;

    let dir = root(gw.jobs.store().dir()).join(id.trim_start_matches("j_"));
    let socket_path = dir.join("s");
    if socket_path.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(RpcError::new(
            ErrorCode::InternalError,
            format!(
                "the state directory's path is too long for a unix socket ({} > {MAX_SOCKET_PATH} bytes); use a shorter --state-dir",
                socket_path.as_os_str().len()
            ),
        ));
    }
    let argv =
        sdk::prepare(&dir, language, &tools, &code.source).map_err(|e| internal("writing the code-mode SDK", e))?;
    let listener = match socket::bind(&socket_path) {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(internal("opening the code-mode socket", e));
        }
    };
    let binding = socket::Binding {
        job_id: id.clone(),
        session_id: s.id.clone(),
        token: token.clone(),
        token_id,
        dir: dir.clone(),
    };
    // From here on, dropping the companion closes the socket, removes the directory and
    // revokes the token.
    let companion = socket::serve(gw.me.clone(), binding, listener);

    let mut spec = crate::execution::sandboxing::command_spec(&gw.options.extra_read, s, argv, params)?;
    // The interpreter is looked up on the gateway's default PATH, never on a PATH the agent passed
    // in `env`: the launcher makes the directories of the program it runs (and of what its `#!`
    // line names) readable, so an agent's PATH must not choose that program.
    let program = axp_sandbox::discover::find_program(&spec.program, None).ok_or_else(|| {
        RpcError::new(
            ErrorCode::ProviderUnavailable,
            format!(
                "`{}` is not installed on the gateway's PATH ({}), so code-mode cannot run {}",
                spec.program,
                axp_sandbox::DEFAULT_PATH,
                language.as_str()
            ),
        )
    })?;
    spec.program = program.to_string_lossy().into_owned();
    let sdk_dir = dir.to_string_lossy().into_owned();
    let path = format!("{sdk_dir}:{}", spec.env.get("PATH").cloned().unwrap_or_default());
    spec.env.insert("PATH".into(), path);
    spec.env.insert("AXP_SDK".into(), sdk_dir);
    spec.env.insert("AXP_SOCKET".into(), socket_path.to_string_lossy().into_owned());
    spec.env.insert("AXP_TOKEN".into(), token);
    spec.env.insert("PYTHONDONTWRITEBYTECODE".into(), "1".into());
    spec.policy.fs_read.push(dir.clone());
    // The interpreter is ours, not the agent's: its own files may be made readable.
    spec.policy.argv_trust = axp_providers::ArgvTrust::Program;
    let launcher = gw.sessions.tiers().launcher(s.tier)?;
    let digest = hex(&Sha256::digest(code.source.as_bytes()));
    let record = json!({
        "code": {"language": language.as_str(), "source_sha256": digest, "bytes": code.source.len(), "tools": tools.len()},
        "cwd": spec.cwd,
        "origin": "axp",
    });
    let (job, _) = gw.jobs.start_with_id(
        id,
        &s.id,
        "code",
        record,
        params.idempotency_key.clone(),
        timeout,
        Work::Code { spec, launcher, companion: Box::new(companion) },
    )?;
    Ok(job)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Removes directories left by jobs of an earlier run (their sockets are dead).
pub fn clean_stale(state_dir: &Path) {
    let _ = std::fs::remove_dir_all(root(state_dir));
}
