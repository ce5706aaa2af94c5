//! Sessions (DESIGN §3): open, authenticate, close, expire. A session binds one workspace, one
//! sandbox tier and one capability set, all decided here by the supervisor from the operator's
//! profile — a client may ask for less than the profile, never more. Records persist in the
//! store, so sessions (and their jobs) survive a gateway restart.
//!
//! Tokens here are opaque random secrets bound to the session, stored only as a SHA-256 digest;
//! the attenuable, offline-verifiable token format is issue 5's work and will replace them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use axp_protocol::methods::{SandboxTier, SessionOpenParams, SessionOpenResult};
use axp_protocol::{CapabilitySet, ErrorCode, RpcError};
use axp_store::{SessionRecord, Store};
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::tiers::Tiers;
use crate::util::now_ms;

/// What the operator lets sessions have.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The ceiling and the default grant.
    pub capabilities: CapabilitySet,
    pub workspace: PathBuf,
    pub ttl_s: u64,
    pub max_ttl_s: u64,
}

/// A live, authenticated session.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub workspace: PathBuf,
    pub tier: SandboxTier,
    pub caps: CapabilitySet,
    pub expires_ms: u64,
    token_digest: String,
}

pub struct Sessions {
    store: Store,
    profile: Profile,
    tiers: Arc<Tiers>,
    cache: RwLock<HashMap<String, Arc<Session>>>,
}

fn digest(token: &str) -> String {
    let d = Sha256::digest(token.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_b64(n: usize) -> String {
    let bytes: Vec<u8> = (0..n).map(|_| rand::random::<u8>()).collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Sessions {
    pub fn new(store: Store, profile: Profile, tiers: Arc<Tiers>) -> Self {
        Self {
            store,
            profile,
            tiers,
            cache: RwLock::new(HashMap::new()),
        }
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn tiers(&self) -> &Tiers {
        &self.tiers
    }

    /// `session.open`: grants the asked capabilities if the profile covers them.
    pub fn open(&self, p: SessionOpenParams) -> Result<SessionOpenResult, RpcError> {
        let caps = match &p.capabilities {
            None => self.profile.capabilities.clone(),
            Some(list) => CapabilitySet::parse_all(list).map_err(|errs| {
                RpcError::invalid_params(
                    errs.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })?,
        };
        if let Some(c) = self.profile.capabilities.first_uncovered(&caps) {
            return Err(RpcError::new(
                ErrorCode::CapabilityDenied,
                format!("the operator's profile does not allow `{c}`; ask for a narrower grant"),
            )
            .with_data("missing", c.to_string()));
        }
        let (tier, layers) = self.tiers.grant(p.sandbox_tier)?;
        let workspace = self.workspace_for(p.workspace.as_deref())?;
        let ttl = p
            .ttl_s
            .unwrap_or(self.profile.ttl_s)
            .min(self.profile.max_ttl_s)
            .max(1);
        let id = format!("s_{}", random_b64(16));
        let token = format!("axp0.{}", random_b64(32));
        let now = now_ms();
        let session = Session {
            id: id.clone(),
            workspace: workspace.clone(),
            tier,
            caps: caps.clone(),
            expires_ms: now + ttl * 1000,
            token_digest: digest(&token),
        };
        self.store
            .put_session(&SessionRecord {
                id: id.clone(),
                workspace: workspace.to_string_lossy().into_owned(),
                tier: tier.as_str().to_string(),
                capabilities: caps.to_strings(),
                created_ms: now,
                expires_ms: session.expires_ms,
                closed: false,
                token_id: Some(session.token_digest.clone()),
            })
            .map_err(|e| crate::util::internal("storing a session", e))?;
        self.write_cache()
            .insert(id.clone(), Arc::new(session.clone()));
        Ok(SessionOpenResult {
            session_id: id,
            granted_tier: tier,
            cap_token: token,
            capabilities: caps.to_strings(),
            workspace: workspace.to_string_lossy().into_owned(),
            expires_at_ms: session.expires_ms,
            layers,
        })
    }

    /// The requested workspace must be the operator's workspace or below it.
    fn workspace_for(&self, asked: Option<&str>) -> Result<PathBuf, RpcError> {
        let root = &self.profile.workspace;
        let Some(asked) = asked else {
            return Ok(root.clone());
        };
        let asked = Path::new(asked);
        let candidate = if asked.is_absolute() {
            asked.to_path_buf()
        } else {
            root.join(asked)
        };
        let canon = candidate.canonicalize().map_err(|e| {
            RpcError::invalid_params(format!(
                "workspace `{}` cannot be used: {e}",
                candidate.display()
            ))
        })?;
        if !canon.starts_with(root) {
            return Err(RpcError::new(
                ErrorCode::CapabilityDenied,
                format!(
                    "workspace `{}` is outside the operator's workspace `{}`",
                    canon.display(),
                    root.display()
                ),
            ));
        }
        Ok(canon)
    }

    /// Finds a session and checks its token (when presented), expiry and state.
    pub fn authenticate(&self, id: &str, token: Option<&str>) -> Result<Arc<Session>, RpcError> {
        let cached = self.read_cache().get(id).cloned();
        let s = match cached {
            Some(s) => s,
            None => {
                let rec = self
                    .store
                    .get_session(id)
                    .map_err(|e| crate::util::internal("reading a session", e))?
                    .filter(|r| !r.closed)
                    .ok_or_else(|| unknown_session(id))?;
                let tier = rec.tier.parse().map_err(RpcError::internal)?;
                let caps = CapabilitySet::parse_all(&rec.capabilities).map_err(|_| {
                    RpcError::internal("a stored session has unreadable capabilities")
                })?;
                let s = Arc::new(Session {
                    id: rec.id.clone(),
                    workspace: PathBuf::from(rec.workspace),
                    tier,
                    caps,
                    expires_ms: rec.expires_ms,
                    token_digest: rec.token_id.unwrap_or_default(),
                });
                self.write_cache().insert(rec.id, s.clone());
                s
            }
        };
        if s.expires_ms <= now_ms() {
            self.write_cache().remove(id);
            return Err(RpcError::new(
                ErrorCode::UnknownSession,
                format!("session `{id}` has expired; open a new one"),
            ));
        }
        if let Some(t) = token {
            if digest(t) != s.token_digest {
                return Err(RpcError::new(
                    ErrorCode::Unauthorized,
                    "the capability token is not valid for this session (forged, or from another session)",
                ));
            }
        }
        Ok(s)
    }

    pub fn close(&self, id: &str) -> Result<(), RpcError> {
        self.write_cache().remove(id);
        self.store
            .close_session(id)
            .map_err(|e| crate::util::internal("closing a session", e))?;
        Ok(())
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Session>>> {
        self.cache
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_cache(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Session>>> {
        self.cache
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

pub fn unknown_session(id: &str) -> RpcError {
    RpcError::new(
        ErrorCode::UnknownSession,
        format!("no open session `{id}`; open one with `session.open` (or MCP `initialize`)"),
    )
}
