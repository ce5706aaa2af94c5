//! Which session a request speaks for: the one it names (`session_id`, `cap_token`, the
//! `Mcp-Session-Id` and `Axp-Capability` headers), authenticated; or, for MCP's stateless mode
//! and `initialize`, one opened for the request's operator within that operator's ceiling.

use std::sync::Arc;

use axp_audit::Kind;
use axp_protocol::methods::SessionOpenParams;
use axp_protocol::{ErrorCode, RpcError};
use serde_json::{Value, json};

use super::Ctx;
use crate::auth::session::{Session, unknown_session};
use crate::gateway::Gateway;

impl Gateway {
    /// Opens a session for the request's operator, within that operator's ceiling and tiers.
    pub fn open_for(
        &self,
        ctx: &Ctx,
        params: SessionOpenParams,
        id_is_bearer: bool,
    ) -> Result<axp_protocol::methods::SessionOpenResult, RpcError> {
        let op = ctx.operator.clone().ok_or_else(|| crate::auth::operators::operator_required("opening a session"))?;
        op.check_tier(params.sandbox_tier, self.sessions.tiers().default)?;
        let r = self.sessions.open_as(params, id_is_bearer, op.ceiling.as_ref().map(|c| (op.name.as_str(), c)))?;
        if id_is_bearer {
            // Sessions opened implicitly (MCP `initialize`, stateless requests) are audited here,
            // synchronously: these paths are not async, and an open is rare (once per client).
            let detail = json!({
                "workspace": r.workspace, "tier": r.granted_tier, "capabilities": r.capabilities,
                "via": "mcp", "operator": op.name,
            });
            let append = || self.audit.append(Kind::SessionOpen, Some(&r.session_id), "gateway", detail);
            let written = match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
                Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(append),
                _ => append(),
            };
            written.map_err(|e| crate::util::internal("writing the audit log", e))?;
        }
        Ok(r)
    }

    /// The session a request names (param or header), authenticated.
    pub fn session(&self, p: &Value, ctx: &Ctx) -> Result<Arc<Session>, RpcError> {
        let id = p
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| ctx.session_id.clone())
            .or_else(|| ctx.opened_session());
        let token = p.get("cap_token").and_then(Value::as_str).map(str::to_string).or_else(|| ctx.token.clone());
        if id.is_none() && token.is_none() {
            return Err(RpcError::new(
                ErrorCode::UnknownSession,
                "this method needs a session: open one with `session.open` (or MCP `initialize`) and send its token as `cap_token` or the `Axp-Capability` header",
            ));
        }
        self.sessions.authenticate(id.as_deref(), token.as_deref())
    }

    /// Like [`Gateway::session`], but a request without any session gets a fresh session with
    /// the operator's default profile (MCP's stateless mode).
    pub fn session_or_default(&self, p: &Value, ctx: &Ctx) -> Result<Arc<Session>, RpcError> {
        let named = p.get("session_id").is_some()
            || p.get("cap_token").is_some()
            || ctx.session_id.is_some()
            || ctx.token.is_some()
            || ctx.opened_session().is_some();
        if named {
            return self.session(p, ctx);
        }
        let params = SessionOpenParams { workspace: None, sandbox_tier: None, capabilities: None, ttl_s: Some(600) };
        let r = self.open_for(ctx, params, true)?;
        *ctx.opened.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r.session_id.clone());
        self.sessions.authenticate(Some(&r.session_id), Some(&r.cap_token))
    }

    /// The session of an HTTP `GET` resume, checked like any request.
    pub fn resume_session(&self, ctx: &Ctx) -> Result<Arc<Session>, RpcError> {
        if ctx.session_id.is_none() && ctx.token.is_none() {
            return Err(unknown_session("(none)"));
        }
        self.sessions.authenticate(ctx.session_id.as_deref(), ctx.token.as_deref())
    }
}
