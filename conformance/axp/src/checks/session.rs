//! Sessions and operators: `session.open` and the shape of its result, what an operator
//! credential changes (a forged bearer is refused; with operators configured, no bearer is
//! refused), and `session.close`, after which the session's token and every token attenuated
//! from it are refused.

use axp_protocol::CapabilitySet;
use axp_protocol::methods::SessionOpenResult;
use serde_json::{Value, json};

use super::{Runner, Session};
use crate::report::{Stop, Verdict, ensure};
use crate::wire::{Answer, Conn, describe};

/// A bearer no endpoint issued.
const FORGED_BEARER: &str = "axpop_axp-conformance-forged-bearer-0000000000";

impl Runner {
    /// A bearer the endpoint never issued is refused with HTTP 401 and -32001, whether or not it
    /// has operators (protocol.md: an unknown `Authorization` header is refused, also in
    /// zero-config mode).
    pub(super) async fn bad_bearer(&mut self) -> Verdict {
        let mut c = Conn::new(&self.opts.url, self.opts.timeout).with_bearer(Some(FORGED_BEARER));
        let reply = c.reply("session.open", json!({})).await?;
        let status = reply.status;
        let e = match reply.into_result() {
            Err(axp_client::Error::Rpc(e)) => e,
            Ok(r) => return Err(Stop::Fail(format!("a forged bearer opened a session: {}", crate::wire::short(&r)))),
            Err(other) => return Err(Stop::Fail(format!("session.open with a forged bearer: {other}"))),
        };
        crate::wire::error_shape(&e).map_err(|why| format!("the answer {}, which {why}", describe(&e)))?;
        ensure(e.code == -32001 && status == 401, || {
            format!("a forged bearer got HTTP {status} {} instead of HTTP 401 -32001 Unauthorized", describe(&e))
        })?;
        Ok(format!("session.open with a forged bearer: HTTP 401 {}", describe(&e)))
    }

    /// `session.open {}` with the operator's credential: a session with every result field of
    /// protocol.md, of the right type (`SessionOpenResult`), its grants in the capability
    /// grammar, and an expiry in the future.
    pub(super) async fn open(&mut self) -> Verdict {
        let mut op = self.operator();
        let r = match op.answer("session.open", json!({})).await {
            Ok(Answer::Result(r)) => r,
            Ok(Answer::Error(e)) if e.code == -32001 && self.opts.operator_token.is_none() => {
                self.no_session = "the endpoint opens sessions only for an operator (session.open without a \
                                   credential: -32001 Unauthorized); pass --operator-token"
                    .into();
                return Err(Stop::Skip(format!("{} ({})", self.no_session, e.reason())));
            }
            Ok(Answer::Error(e)) => {
                self.no_session = format!("session.open failed ({})", describe(&e));
                return Err(Stop::Fail(self.no_session.clone()));
            }
            Err(why) => {
                self.no_session = format!("session.open got no answer ({why})");
                return Err(Stop::Fail(why));
            }
        };
        self.no_session = "session.open answered a result without the fields of a session".into();
        let open: SessionOpenResult = serde_json::from_value(r.clone()).map_err(|e| {
            Stop::Fail(format!("the result is not a session.open result ({e}): {}", crate::wire::short(&r)))
        })?;
        ensure(!open.session_id.is_empty() && !open.cap_token.is_empty(), || {
            "session_id and cap_token must not be empty".into()
        })?;
        ensure(!open.workspace.is_empty(), || "workspace is empty".into())?;
        let now = axp_protocol::now_ms();
        ensure(open.expires_at_ms > now, || {
            format!("expires_at_ms {} is not in the future (now {now})", open.expires_at_ms)
        })?;
        let grants = CapabilitySet::parse_all(&open.capabilities).map_err(|errs| {
            let errs: Vec<String> = errs.iter().map(ToString::to_string).collect();
            Stop::Fail(format!("capabilities outside the grammar: {}", errs.join("; ")))
        })?;
        ensure(open.layers.as_ref().is_none_or(Value::is_object), || "layers is not an object".into())?;
        let detail = format!(
            "session {} on tier {}, {} grant(s) [{}]{}, expires in {} s",
            open.session_id,
            open.granted_tier,
            open.capabilities.len(),
            open.capabilities.join(", "),
            if grants.allows_spawn() { "" } else { " (no proc.spawn: command jobs will be skipped)" },
            (open.expires_at_ms - now) / 1000
        );
        let conn = Conn::new(&self.opts.url, self.opts.timeout).with_token(Some(&open.session_id), &open.cap_token);
        self.session = Some(Session { open, conn, spawn: grants.allows_spawn(), grants });
        Ok(detail)
    }

    /// With `--operator-token`: the same `session.open` without it is refused with -32001 (an
    /// endpoint with operators hands sessions to none but them).
    pub(super) async fn no_credential(&mut self) -> Verdict {
        if self.opts.operator_token.is_none() {
            return Err(Stop::Skip("no --operator-token given, so there is no credential to leave out".into()));
        }
        let mut anon = Conn::new(&self.opts.url, self.opts.timeout);
        let e = anon.err("session.open", json!({})).await.map_err(|why| {
            Stop::Fail(format!("the endpoint has operators but opened a session for a request without one: {why}"))
        })?;
        ensure(e.code == -32001, || {
            format!("session.open without a credential got {} instead of -32001", describe(&e))
        })?;
        Ok(format!("session.open without the operator's bearer: {}", describe(&e)))
    }

    /// `session.close`, then the session's token (and the attenuated child token, when
    /// `cap.attenuate` made one) is refused with -32001.
    pub(super) async fn close(&mut self) -> Verdict {
        let mut c = self.conn()?;
        c.ok("session.close", json!({})).await?;
        let e = c.err("axp.index", json!({})).await.map_err(|why| format!("after session.close, {why}"))?;
        ensure(e.code == -32001, || format!("the closed session's token got {} instead of -32001", describe(&e)))?;
        let mut detail = format!("afterwards its token gets {}", describe(&e));
        if let Some((child, _)) = self.child.clone() {
            let mut sub = Conn::new(&self.opts.url, self.opts.timeout).with_token(None, &child);
            let e = sub.err("axp.index", json!({})).await.map_err(|why| format!("after session.close, {why}"))?;
            ensure(e.code == -32001, || {
                format!("the closed session's child token got {} instead of -32001", describe(&e))
            })?;
            detail.push_str("; so does the token attenuated from it");
        }
        self.session = None;
        self.no_session = "the session was closed".into();
        Ok(detail)
    }
}
