//! Sessions (DESIGN §3): open, authenticate, close, expire. A session binds one workspace, one
//! sandbox tier and one capability set, all decided here by the supervisor from the operator's
//! profile — a client may ask for less than the profile, never more. Records persist in the
//! store, so sessions (and their jobs) survive a gateway restart.
//!
//! Every session gets a capability token from `axp-caps` (an HMAC chain the holder can attenuate
//! offline). A request that presents a token is held to that token's effective grants, so an
//! attenuated token handed to a sub-agent carries strictly less. Sessions opened by MCP
//! `initialize` are bearer-by-id (MCP clients know no token); sessions from `session.open`
//! require their token on every request.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use axp_caps::{Minter, Token, Verifier};
use axp_protocol::methods::{SandboxTier, SessionOpenParams, SessionOpenResult};
use axp_protocol::{CapabilitySet, ErrorCode, RpcError};
use axp_store::{SessionRecord, Store};

use crate::auth::grants;
use crate::auth::tiers::Tiers;
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
    /// The grants in force for this request: the presented token's, resolved on this host.
    pub caps: CapabilitySet,
    /// What the session was granted when it was opened (resolved then): no token, however it
    /// was made, acts beyond these, and every process policy is checked against them again.
    pub granted: Arc<CapabilitySet>,
    pub expires_ms: u64,
    /// The root token's id (revoked when the session closes).
    pub token_root: Option<String>,
    id_is_bearer: bool,
}

/// The keys that mint and verify tokens, and where revocations are kept.
pub struct Auth {
    pub minter: Minter,
    pub verifier: Arc<Verifier>,
    pub revocations: PathBuf,
}

pub struct Sessions {
    store: Store,
    profile: Profile,
    tiers: Arc<Tiers>,
    auth: Auth,
    cache: RwLock<HashMap<String, Arc<Session>>>,
    /// Called with a session's id once it is closed (stops the session's egress proxy).
    on_close: Option<CloseHook>,
}

type CloseHook = Box<dyn Fn(&str) + Send + Sync>;

impl Sessions {
    pub fn new(store: Store, profile: Profile, tiers: Arc<Tiers>, auth: Auth) -> Self {
        Self { store, profile, tiers, auth, cache: RwLock::new(HashMap::new()), on_close: None }
    }

    /// Runs `f` with the id of every session closed from now on, after the close is durable.
    pub fn on_close(mut self, f: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_close = Some(Box::new(f));
        self
    }

    pub fn tiers(&self) -> &Tiers {
        &self.tiers
    }

    /// `session.open` (and MCP `initialize` with `id_is_bearer`): grants the asked capabilities
    /// if the profile covers them, and mints the session's root token.
    /// An operator's `ceiling` (see `operators.rs`) replaces the profile's; `None` is the local
    /// operator, held to the profile. The grant, asked or default, never exceeds it.
    pub fn open_as(
        &self,
        p: SessionOpenParams,
        id_is_bearer: bool,
        ceiling: Option<(&str, &CapabilitySet)>,
    ) -> Result<SessionOpenResult, RpcError> {
        let (who, limit) = match ceiling {
            Some((name, c)) => (format!("operator `{name}`'s ceiling"), c),
            None => ("the operator's profile".to_string(), &self.profile.capabilities),
        };
        // Both sides resolved: a path is granted by the directory it names on this host now.
        let limit = grants::resolve(limit);
        let caps = match &p.capabilities {
            None => limit.clone(),
            Some(list) => {
                let asked = CapabilitySet::parse_all(list).map_err(|errs| {
                    RpcError::invalid_params(errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
                })?;
                grants::resolve_within(&asked, &limit).map_err(|o| o.to_rpc(&who))?
            }
        };
        let (tier, layers) = self.tiers.grant(p.sandbox_tier)?;
        let workspace = self.workspace_for(p.workspace.as_deref())?;
        let ttl = p.ttl_s.unwrap_or(self.profile.ttl_s).min(self.profile.max_ttl_s).max(1);
        let id = format!("s_{}", crate::util::random_b64(16));
        let now = now_ms();
        let expires_ms = now + ttl * 1000;
        let token = self.auth.minter.mint(&id, &caps, expires_ms);
        let session = Session {
            id: id.clone(),
            workspace: workspace.clone(),
            tier,
            caps: caps.clone(),
            granted: Arc::new(caps.clone()),
            expires_ms,
            token_root: Some(token.root_id().to_string()),
            id_is_bearer,
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
                token_id: session.token_root.clone(),
                id_is_bearer,
            })
            .map_err(|e| crate::util::internal("storing a session", e))?;
        self.write_cache().insert(id.clone(), Arc::new(session.clone()));
        Ok(SessionOpenResult {
            session_id: id,
            granted_tier: tier,
            cap_token: token.to_string(),
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
        let candidate = if asked.is_absolute() { asked.to_path_buf() } else { root.join(asked) };
        let canon = candidate.canonicalize().map_err(|e| {
            RpcError::invalid_params(format!("workspace `{}` cannot be used: {e}", candidate.display()))
        })?;
        if !canon.starts_with(root) {
            return Err(RpcError::new(
                ErrorCode::CapabilityDenied,
                format!("workspace `{}` is outside the operator's workspace `{}`", canon.display(), root.display()),
            ));
        }
        Ok(canon)
    }

    /// Authenticates a request. With a token, the token is verified (and must belong to `id`
    /// when one is named) and its effective grants apply; without one, only a bearer session
    /// (MCP) is accepted, with the session's own grants.
    pub fn authenticate(&self, id: Option<&str>, token: Option<&str>) -> Result<Arc<Session>, RpcError> {
        let now = now_ms();
        let verified = match (token, id) {
            (Some(t), Some(id)) => {
                Some(self.auth.verifier.verify_for_session(t, id, now).map_err(|e| e.to_rpc_error())?)
            }
            (Some(t), None) => Some(self.auth.verifier.verify(t, now).map_err(|e| e.to_rpc_error())?),
            (None, _) => None,
        };
        let id = match (&verified, id) {
            (Some(v), _) => v.session_id.clone(),
            (None, Some(id)) => id.to_string(),
            (None, None) => return Err(unknown_session("(none)")),
        };
        let s = self.load(&id)?;
        if s.expires_ms <= now {
            self.write_cache().remove(&id);
            return Err(RpcError::new(
                ErrorCode::UnknownSession,
                format!("session `{id}` has expired; open a new one"),
            ));
        }
        match verified {
            Some(v) => {
                // A token is held to the session's stored grants as well as its own chain, so a
                // leaked signing key alone cannot widen a session; and its paths are resolved,
                // so a narrowed `fs.*` grant that points through a symlink is caught here.
                let caps = grants::resolve_within(&v.caps, &s.granted).map_err(|o| {
                    RpcError::new(
                        ErrorCode::Unauthorized,
                        format!(
                            "the token grants `{}`{}, which session `{}` was never granted",
                            o.asked,
                            if o.asked == o.resolved {
                                String::new()
                            } else {
                                format!(" (resolved: `{}`)", o.resolved)
                            },
                            s.id
                        ),
                    )
                })?;
                Ok(Arc::new(Session { caps, expires_ms: v.expires_ms.min(s.expires_ms), ..(*s).clone() }))
            }
            // A bearer session whose root token was revoked was closed (here, or on another
            // replica sharing the store, whose revocation reached this one's verifier).
            None if s.id_is_bearer && s.token_root.as_deref().is_some_and(|r| self.auth.verifier.is_revoked(r)) => {
                self.write_cache().remove(&id);
                Err(unknown_session(&id))
            }
            None if s.id_is_bearer => Ok(s),
            None => Err(RpcError::new(
                ErrorCode::Unauthorized,
                "this session requires its capability token: send it as `cap_token` or in the `Axp-Capability` header",
            )),
        }
    }

    fn load(&self, id: &str) -> Result<Arc<Session>, RpcError> {
        if let Some(s) = self.read_cache().get(id).cloned() {
            return Ok(s);
        }
        let rec = self
            .store
            .get_session(id)
            .map_err(|e| crate::util::internal("reading a session", e))?
            .filter(|r| !r.closed)
            .ok_or_else(|| unknown_session(id))?;
        let tier = rec.tier.parse().map_err(RpcError::internal)?;
        let caps = CapabilitySet::parse_all(&rec.capabilities)
            .map_err(|_| RpcError::internal("a stored session has unreadable capabilities"))?;
        // Records written before grants were resolved at open are resolved as they are read.
        let caps = grants::resolve(&caps);
        let s = Arc::new(Session {
            id: rec.id.clone(),
            workspace: PathBuf::from(rec.workspace),
            tier,
            granted: Arc::new(caps.clone()),
            caps,
            expires_ms: rec.expires_ms,
            token_root: rec.token_id,
            id_is_bearer: rec.id_is_bearer,
        });
        self.write_cache().insert(rec.id, s.clone());
        Ok(s)
    }

    /// `cap.attenuate`: a child of `parent` (which must verify) with `caps` and an expiry no
    /// later than the parent's. Holders can do the same offline with `axp_caps::attenuate`.
    pub fn attenuate(
        &self,
        parent: &str,
        caps: &[String],
        ttl_s: Option<u64>,
    ) -> Result<(String, Arc<axp_caps::Verified>), RpcError> {
        let v = self.auth.verifier.verify(parent, now_ms()).map_err(|e| e.to_rpc_error())?;
        let caps = CapabilitySet::parse_all(caps).map_err(|errs| {
            RpcError::invalid_params(errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
        })?;
        // The child's paths are resolved and must stay within the parent's resolved paths:
        // `fs.write(<ws>/link)` with `link -> /etc` is a widening, not a narrowing.
        let caps =
            grants::resolve_within(&caps, &grants::resolve(&v.caps)).map_err(|o| o.to_rpc("the parent token"))?;
        let token = Token::parse(parent).map_err(|e| e.to_rpc_error())?;
        let expires = ttl_s.map(|t| (now_ms() + t * 1000).min(v.expires_ms));
        let child = axp_caps::attenuate(&token, &caps, expires).map_err(|e| match e {
            axp_caps::AttenuateError::Widening { grant } => RpcError::new(
                ErrorCode::CapabilityDenied,
                format!("the parent token does not cover `{grant}`; a child can only narrow its parent"),
            )
            .with_data("missing", grant.to_string()),
            other => RpcError::invalid_params(other.to_string()),
        })?;
        Ok((child.to_string(), v))
    }

    /// `cap.revoke`: revokes a token id (and so every token attenuated from it), durably.
    /// `false` when it was already revoked.
    ///
    /// With a PostgreSQL store the revocation is also recorded there, durably, before this
    /// returns, and every other replica refuses the token within [`REVOCATION_BOUND`].
    pub fn revoke(&self, token_id: &str) -> Result<bool, RpcError> {
        let newly = self.auth.verifier.revoke_durably(&self.auth.revocations, token_id).map_err(|e| match e {
            axp_caps::RevocationError::InvalidId { .. } => {
                RpcError::invalid_params(format!("`{token_id}` is not a token id (`axp token inspect` shows them)"))
            }
            other => crate::util::internal("revoking a token", other),
        })?;
        let shared = self.revoke_shared(token_id)?;
        Ok(newly || shared)
    }

    /// Records a revocation for the other replicas sharing a PostgreSQL store (nothing to do on
    /// the embedded store). `true` when it was not recorded there yet.
    fn revoke_shared(&self, token_id: &str) -> Result<bool, RpcError> {
        if self.store.kind() != axp_store::StoreKind::Postgres {
            return Ok(false);
        }
        self.store
            .revoke_token(token_id)
            .map_err(|e| crate::util::internal("recording a revocation for the other replicas", e))
    }

    /// A token for one job's own use (code-mode's SDK): exactly `caps`, which the caller derives
    /// from the request's effective grants, expiring no later than `expires_ms`. With the token
    /// the request presented it is an attenuation of that token (so revoking the parent revokes
    /// it); a bearer session (MCP, no token) gets one minted for the session. Returns the token
    /// and its id.
    pub fn job_token(
        &self,
        s: &Session,
        presented: Option<&str>,
        caps: &CapabilitySet,
        expires_ms: u64,
    ) -> Result<(String, String), RpcError> {
        let expires_ms = expires_ms.min(s.expires_ms);
        let token = match presented {
            Some(p) => {
                let parent = Token::parse(p).map_err(|e| e.to_rpc_error())?;
                axp_caps::attenuate(&parent, caps, Some(expires_ms.min(parent.expires_ms()))).map_err(|e| {
                    RpcError::new(ErrorCode::CapabilityDenied, format!("cannot attenuate the token: {e}"))
                })?
            }
            None => {
                if let Some(c) = s.caps.first_uncovered(caps) {
                    return Err(RpcError::new(
                        ErrorCode::CapabilityDenied,
                        format!("the session does not grant `{c}`"),
                    ));
                }
                self.auth.minter.mint(&s.id, caps, expires_ms)
            }
        };
        Ok((token.to_string(), token.token_id().to_string()))
    }

    /// Revokes one token id in memory (a job's own token, when the job ends).
    pub fn revoke_token(&self, token_id: &str) {
        self.auth.verifier.revoke(token_id);
    }

    pub fn close(&self, id: &str) -> Result<(), RpcError> {
        if let Ok(s) = self.load(id)
            && let Some(root) = &s.token_root
        {
            // Revoking the root revokes every token attenuated from it.
            self.auth
                .verifier
                .revoke_durably(&self.auth.revocations, root)
                .map_err(|e| crate::util::internal("revoking the session's token", e))?;
            self.revoke_shared(root)?;
        }
        self.write_cache().remove(id);
        self.store.close_session(id).map_err(|e| crate::util::internal("closing a session", e))?;
        if let Some(f) = &self.on_close {
            f(id);
        }
        Ok(())
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Session>>> {
        self.cache.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_cache(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<Session>>> {
        self.cache.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How late a revocation made on one replica may reach another sharing its PostgreSQL store:
/// each replica reads the revocations recorded since its previous read every
/// [`REVOCATION_POLL`], so a token is refused everywhere at most one poll, plus the read's own
/// time, after the revocation was acknowledged.
pub const REVOCATION_BOUND: std::time::Duration = std::time::Duration::from_secs(2);
/// How often a replica reads the shared revocation list.
pub const REVOCATION_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// How far before the previous read's server time each read starts: a revocation is stamped
/// when its statement runs and becomes visible when it commits, and the margin covers the
/// time between.
const REVOCATION_MARGIN_MS: u64 = 10_000;

/// Loads every revocation recorded in the shared store into `verifier` (call it before
/// serving), then keeps doing so every [`REVOCATION_POLL`] in the background. Nothing on the
/// embedded store, whose revocations are this gateway's own file.
pub fn follow_revocations(store: Store, verifier: Arc<Verifier>) -> anyhow::Result<()> {
    if store.kind() != axp_store::StoreKind::Postgres {
        return Ok(());
    }
    let first = store.revocations_since(0)?;
    verifier.extend_revoked(first.token_ids);
    let mut since = first.server_ms.saturating_sub(REVOCATION_MARGIN_MS);
    tracing::info!(
        poll_ms = REVOCATION_POLL.as_millis() as u64,
        bound_ms = REVOCATION_BOUND.as_millis() as u64,
        "tokens revoked on other replicas are refused here within the bound"
    );
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(REVOCATION_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let store = store.clone();
            match tokio::task::spawn_blocking(move || store.revocations_since(since)).await {
                Ok(Ok(r)) => {
                    verifier.extend_revoked(r.token_ids);
                    since = r.server_ms.saturating_sub(REVOCATION_MARGIN_MS);
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot read the revocations other replicas recorded"),
                Err(_) => {}
            }
        }
    });
    Ok(())
}

pub fn unknown_session(id: &str) -> RpcError {
    RpcError::new(
        ErrorCode::UnknownSession,
        format!("no open session `{id}`; open one with `session.open` (or MCP `initialize`)"),
    )
}

/// A `CapabilityDenied` error naming the grant the session lacks and what it was needed for.
pub fn denied(grant: &str, what: &str) -> RpcError {
    RpcError::new(
        ErrorCode::CapabilityDenied,
        format!("the session's token does not grant `{grant}`, needed to {what}"),
    )
    .with_data("missing", grant)
}
