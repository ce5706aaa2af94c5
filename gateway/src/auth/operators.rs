//! Operator authentication (DESIGN §3): who may open sessions, with what ceiling, and
//! who may change policy. Two credentials, for two kinds of request:
//!
//! * **Bearer tokens** (`Authorization: Bearer …`) open sessions. `axp.toml` holds only their
//!   SHA-256 (`token_sha256`) or the name of an environment variable (`token_env`, hashed when
//!   read); each maps to a capability ceiling and allowed tiers. A session opened with one can
//!   never hold more than that ceiling: the agent never authors its own policy.
//! * **Signed envelopes** (`envelope.rs`) approve, deny and revoke. They verify against an
//!   operator's Ed25519 `public_key`, or the state dir's own key (`local`), inside a timestamp
//!   window, and each nonce is accepted once — durably, so a restart does not reopen a replay.
//!
//! With no `[[operators]]` configured the gateway is in zero-config local mode: every HTTP
//! request is the local operator with the `[session]` profile as ceiling, and `axp serve`
//! refuses a non-loopback `--listen`. stdio is always the local operator for opening sessions.
//! This module decides *who* is asking; the dispatcher decides what they may do.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axp_protocol::methods::SandboxTier;
use axp_protocol::{CapabilitySet, ErrorCode, RpcError};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::auth::envelope::{Envelope, LOCAL_KEY_FILE, LOCAL_OPERATOR, WINDOW_MS};
use crate::config::env::EnvSource;
use crate::config::operator_policy::OperatorSettings;

/// An authenticated operator (or the local one).
#[derive(Debug, Clone)]
pub struct Operator {
    pub name: String,
    /// The most a session this operator opens may hold; also its default grant. `None` for the
    /// local operator: the `[session]` profile applies.
    pub ceiling: Option<CapabilitySet>,
    /// Tiers it may ask for; `None` = any the gateway grants.
    pub tiers: Option<Vec<SandboxTier>>,
}

impl Operator {
    /// Refuses a tier this operator may not ask for.
    pub fn check_tier(&self, tier: Option<SandboxTier>, default: SandboxTier) -> Result<(), RpcError> {
        let tier = tier.unwrap_or(default);
        match &self.tiers {
            Some(allowed) if !allowed.contains(&tier) => Err(RpcError::new(
                ErrorCode::CapabilityDenied,
                format!(
                    "operator `{}` may not open `{tier}` sessions (allowed: {})",
                    self.name,
                    allowed.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
                ),
            )
            .with_data("missing", format!("tier({tier})"))),
            _ => Ok(()),
        }
    }
}

/// The nonces accepted within the window, and the file that keeps them across restarts.
struct NonceBook {
    seen: HashMap<String, u64>,
    file: std::fs::File,
}

pub struct Operators {
    by_digest: HashMap<[u8; 32], Arc<Operator>>,
    keys: HashMap<String, Vec<u8>>,
    local: Arc<Operator>,
    configured: bool,
    /// `None` only in [`Operators::default`] (no keys, so no envelope can verify anyway).
    nonces: Mutex<Option<NonceBook>>,
    /// The PostgreSQL store this gateway shares with other replicas, which decides a nonce's
    /// single use across all of them; `None` on the embedded store.
    shared_nonces: Option<axp_store::Store>,
}

impl Default for Operators {
    /// Zero-config local mode without keys (tests and embedders).
    fn default() -> Self {
        Self {
            by_digest: HashMap::new(),
            keys: HashMap::new(),
            local: Arc::new(Operator { name: LOCAL_OPERATOR.into(), ceiling: None, tiers: None }),
            configured: false,
            nonces: Mutex::new(None),
            shared_nonces: None,
        }
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.trim().as_bytes()).into()
}

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= 64 && n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

impl Operators {
    /// Validates `[[operators]]` (collecting every problem), loads or creates the local operator
    /// key in `state_dir`, and loads the nonce book.
    pub fn build(settings: &[OperatorSettings], state_dir: &Path, env: &dyn EnvSource) -> Result<Self> {
        let mut problems = Vec::new();
        let mut by_digest = HashMap::new();
        let mut keys = HashMap::new();
        for (i, o) in settings.iter().enumerate() {
            let at = format!("[[operators]] #{} (`{}`)", i + 1, o.name);
            if !valid_name(&o.name) || o.name == LOCAL_OPERATOR {
                problems.push(format!(
                    "{at}: `name` must be 1-64 of [A-Za-z0-9_.-] and not `{LOCAL_OPERATOR}` (reserved for the state dir's key)"
                ));
            }
            // Problems are collected, so a bad ceiling still lets the credential be checked.
            let ceiling = match &o.capabilities {
                Some(list) => match CapabilitySet::parse_all(list) {
                    Ok(c) => c,
                    Err(errs) => {
                        problems.push(format!(
                            "{at}: capabilities: {}",
                            errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
                        ));
                        CapabilitySet::default()
                    }
                },
                None => {
                    problems.push(format!(
                        "{at}: `capabilities` is required: the most a session this operator opens may hold, e.g. [\"tool(*)\"]"
                    ));
                    CapabilitySet::default()
                }
            };
            let tiers = match &o.tiers {
                None => None,
                Some(list) => {
                    let mut out = Vec::new();
                    for t in list {
                        match t.parse::<SandboxTier>() {
                            Ok(t) => out.push(t),
                            Err(e) => problems.push(format!("{at}: tiers: {e}")),
                        }
                    }
                    Some(out)
                }
            };
            let op = Arc::new(Operator { name: o.name.clone(), ceiling: Some(ceiling), tiers });
            let token_digest = match (&o.token_sha256, &o.token_env) {
                (Some(h), None) => match hex::decode(h.trim()) {
                    Ok(b) if b.len() == 32 => {
                        let mut d = [0u8; 32];
                        d.copy_from_slice(&b);
                        Some(d)
                    }
                    _ => {
                        problems.push(format!(
                            "{at}: `token_sha256` must be 64 hex digits (`axp operator token` prints one)"
                        ));
                        None
                    }
                },
                (None, Some(var)) => match env.var(var) {
                    Some(t) if t.trim().len() >= 16 => Some(digest(&t)),
                    Some(_) => {
                        problems.push(format!("{at}: the token in ${var} is shorter than 16 characters"));
                        None
                    }
                    None => {
                        problems.push(format!("{at}: `token_env = \"{var}\"` but ${var} is not set"));
                        None
                    }
                },
                (Some(_), Some(_)) => {
                    problems.push(format!("{at}: give one of `token_sha256` and `token_env`, not both"));
                    None
                }
                (None, None) if o.public_key.is_some() => None,
                (None, None) => {
                    problems.push(format!(
                        "{at}: needs a credential: `token_sha256` or `token_env` (to open sessions) and/or `public_key` (to sign approvals)"
                    ));
                    None
                }
            };
            if let Some(d) = token_digest
                && by_digest.insert(d, op.clone()).is_some()
            {
                problems.push(format!("{at}: the same token is configured for two operators"));
            }
            if let Some(pk) = &o.public_key {
                match crate::auth::envelope::decode_public_key(pk) {
                    Ok(k) => {
                        if keys.insert(o.name.clone(), k).is_some() {
                            problems.push(format!("{at}: two operators are named `{}`", o.name));
                        }
                    }
                    Err(e) => problems.push(format!("{at}: `public_key` {e}")),
                }
            }
        }
        if !problems.is_empty() {
            anyhow::bail!("the operators in axp.toml have problems:\n{}", problems.join("\n"));
        }
        let key_path = state_dir.join(LOCAL_KEY_FILE);
        if !key_path.exists() {
            std::fs::create_dir_all(state_dir)
                .with_context(|| format!("cannot create the state dir {}", state_dir.display()))?;
            let (pkcs8, _) = crate::auth::envelope::generate()?;
            crate::auth::envelope::write_key(&key_path, &pkcs8)?;
        }
        let local_key = crate::auth::envelope::read_key(&key_path)?;
        let pk = crate::auth::envelope::decode_public_key(&crate::auth::envelope::public_key_b64(&local_key))
            .map_err(|e| anyhow::anyhow!("the local operator key {e}"))?;
        keys.insert(LOCAL_OPERATOR.to_string(), pk);
        let nonces = NonceBook::open(&state_dir.join("operator-nonces"), crate::util::now_ms())?;
        Ok(Self {
            by_digest,
            keys,
            local: Arc::new(Operator { name: LOCAL_OPERATOR.into(), ceiling: None, tiers: None }),
            configured: !settings.is_empty(),
            nonces: Mutex::new(Some(nonces)),
            shared_nonces: None,
        })
    }

    /// Accepts each envelope nonce once across every replica sharing `store` (PostgreSQL; on
    /// the embedded store this gateway's own nonce book is the only one, and this does nothing).
    pub fn share_nonces(mut self, store: &axp_store::Store) -> Self {
        if store.kind() == axp_store::StoreKind::Postgres {
            self.shared_nonces = Some(store.clone());
        }
        self
    }

    /// Whether any `[[operators]]` are configured (else: zero-config local mode).
    pub fn configured(&self) -> bool {
        self.configured
    }

    /// The local operator (stdio, and HTTP in zero-config mode).
    pub fn local(&self) -> Arc<Operator> {
        self.local.clone()
    }

    /// Who an HTTP request comes from, by its `Authorization` header: the named operator for a
    /// known bearer token; the local operator when none is configured and no header is sent;
    /// nobody (`None`) when operators are configured and no header is sent. A header with an
    /// unknown token is an error, never silently ignored.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Option<Arc<Operator>>, RpcError> {
        let Some(h) = authorization else {
            return Ok((!self.configured).then(|| self.local.clone()));
        };
        let Some(token) = h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer ")) else {
            return Err(unauthorized("the Authorization header must be `Bearer <operator token>`"));
        };
        // Looked up by the token's SHA-256: the table never holds a token, and a lookup's timing
        // says nothing useful about a token's bytes.
        match self.by_digest.get(&digest(token)) {
            Some(op) => Ok(Some(op.clone())),
            None if !self.configured => {
                Err(unauthorized("this gateway has no operator credentials configured; send no Authorization header"))
            }
            None => Err(unauthorized("the operator token is not recognised")),
        }
    }

    /// Verifies an envelope for `method` and returns its operator and params. Checks, in order:
    /// the method matches, the operator has a key, the signature, the timestamp window, and the
    /// nonce (recorded durably before this returns).
    pub fn open_envelope(&self, raw: &Value, method: &str, now_ms: u64) -> Result<(String, Value), RpcError> {
        let env: Envelope = serde_json::from_value(raw.clone()).map_err(|e| {
            RpcError::invalid_params(format!(
                "`envelope` must be a signed operator envelope ({e}); `axp approve`, `axp deny` and `axp revoke` make them"
            ))
        })?;
        if env.method != method {
            return Err(unauthorized(format!("the envelope was signed for `{}`, not `{method}`", env.method)));
        }
        let Some(pk) = self.keys.get(&env.operator) else {
            return Err(unauthorized(format!("no operator `{}` with a public key is configured", env.operator)));
        };
        if !env.signature_verifies(pk) {
            return Err(unauthorized("the envelope's signature does not verify"));
        }
        if env.ts_ms.abs_diff(now_ms) > WINDOW_MS {
            return Err(unauthorized(format!(
                "the envelope was signed at {} ms, outside the gateway's ±{} s window (now {now_ms}); check the clocks and sign a new one",
                env.ts_ms,
                WINDOW_MS / 1000
            )));
        }
        if env.nonce.len() < 16 || env.nonce.len() > 128 || env.nonce.contains(char::is_whitespace) {
            return Err(unauthorized("the envelope's nonce must be 16-128 characters without spaces"));
        }
        // Across replicas first: the shared store's key on the nonce lets exactly one replica
        // accept it, durably, however many race.
        if let Some(store) = &self.shared_nonces {
            let first = store
                .use_nonce(&env.nonce, env.ts_ms, now_ms, WINDOW_MS)
                .map_err(|e| crate::util::internal("recording an envelope nonce for the other replicas", e))?;
            if !first {
                return Err(unauthorized(
                    "this envelope was already used (replayed nonce, on this or another replica); sign a new one",
                ));
            }
        }
        let mut book = self.nonces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(book) = book.as_mut() else {
            return Err(unauthorized("this gateway accepts no envelopes (no nonce book)"));
        };
        book.accept(&env.nonce, env.ts_ms, now_ms).map_err(|e| match e {
            NonceError::Replayed => unauthorized("this envelope was already used (replayed nonce); sign a new one"),
            NonceError::Io(e) => crate::util::internal("recording an envelope nonce", e),
        })?;
        let params: Value = serde_json::from_str(&env.params)
            .map_err(|e| RpcError::invalid_params(format!("the envelope's params are not JSON: {e}")))?;
        Ok((env.operator, params))
    }
}

enum NonceError {
    Replayed,
    Io(std::io::Error),
}

impl NonceBook {
    /// Loads the nonces still inside the window and rewrites the file with only those.
    fn open(path: &PathBuf, now_ms: u64) -> Result<Self> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let seen: HashMap<String, u64> = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(ts, n)| ts.parse::<u64>().ok().map(|ts| (n.to_string(), ts)))
            .filter(|(_, ts)| ts.abs_diff(now_ms) <= WINDOW_MS)
            .collect();
        let tmp = path.with_extension("tmp");
        let mut body = String::new();
        for (n, ts) in &seen {
            body.push_str(&format!("{ts} {n}\n"));
        }
        std::fs::write(&tmp, body).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
        let file = std::fs::OpenOptions::new().append(true).open(path)?;
        Ok(Self { seen, file })
    }

    fn accept(&mut self, nonce: &str, ts_ms: u64, now_ms: u64) -> Result<(), NonceError> {
        self.seen.retain(|_, ts| ts.abs_diff(now_ms) <= WINDOW_MS);
        if self.seen.contains_key(nonce) {
            return Err(NonceError::Replayed);
        }
        // Durable before the request is acted on: a crash right after cannot reopen the nonce.
        self.file.write_all(format!("{ts_ms} {nonce}\n").as_bytes()).map_err(NonceError::Io)?;
        self.file.sync_data().map_err(NonceError::Io)?;
        self.seen.insert(nonce.to_string(), ts_ms);
        Ok(())
    }
}

pub fn unauthorized(reason: impl Into<String>) -> RpcError {
    RpcError::new(ErrorCode::Unauthorized, reason)
}

/// The error for a request that needs an operator and came without one.
pub fn operator_required(what: &str) -> RpcError {
    unauthorized(format!(
        "{what} needs an operator credential: send `Authorization: Bearer <operator token>` (see [[operators]] in axp.toml; the axp CLI reads --operator-token or AXP_OPERATOR_TOKEN)"
    ))
}

/// A fresh bearer token and its SHA-256 for `token_sha256`.
pub fn new_token() -> (String, String) {
    let token = format!("axpop_{}", crate::util::random_b64(32));
    let d = digest(&token);
    (token, hex::encode(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_lookup_and_problems() {
        let dir = tempfile::tempdir().unwrap();
        let (token, hash) = new_token();
        let ops = [OperatorSettings {
            name: "ci".into(),
            token_sha256: Some(hash),
            capabilities: Some(vec!["tool(files__*)".into()]),
            ..Default::default()
        }];
        let env = std::collections::BTreeMap::new();
        let o = Operators::build(&ops, dir.path(), &env).unwrap();
        assert!(o.configured());
        assert_eq!(o.authenticate(Some(&format!("Bearer {token}"))).unwrap().unwrap().name, "ci");
        assert!(o.authenticate(None).unwrap().is_none());
        assert_eq!(o.authenticate(Some("Bearer nope")).unwrap_err().kind(), Some(ErrorCode::Unauthorized));
        let bad = [OperatorSettings { name: "local".into(), token_env: Some("NOPE".into()), ..Default::default() }];
        let msg = Operators::build(&bad, dir.path(), &env).err().unwrap().to_string();
        assert!(
            msg.contains("reserved") && msg.contains("$NOPE is not set") && msg.contains("`capabilities` is required"),
            "{msg}"
        );
    }

    #[test]
    fn nonces_are_single_use_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n");
        let mut b = NonceBook::open(&path, 1000).unwrap();
        assert!(b.accept("abcdefghijklmnopq", 1000, 1000).is_ok());
        assert!(matches!(b.accept("abcdefghijklmnopq", 1000, 1001), Err(NonceError::Replayed)));
        drop(b);
        let mut b = NonceBook::open(&path, 2000).unwrap();
        assert!(matches!(b.accept("abcdefghijklmnopq", 1000, 2000), Err(NonceError::Replayed)));
    }
}
