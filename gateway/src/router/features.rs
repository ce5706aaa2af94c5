//! The MCP face beyond tools, multiplexed over every mounted provider as one server: resources
//! (`resources/list`, `resources/templates/list`, `resources/read`, `resources/subscribe`,
//! `resources/unsubscribe`), prompts (`prompts/list`, `prompts/get`), `completion/complete` and
//! `logging/setLevel`.
//!
//! Naming follows the tools: a prompt is `<provider>__<prompt>`, and a resource URI gets the
//! reversible rewrite of `catalog::uris`, for every provider mounted with a `prefix` other than
//! `never` (whose names and URIs pass unchanged). Every item is filtered by the session's
//! grants (`prompt(GLOB)` on the name the client sees, `resource(GLOB)` on
//! `<provider>__<the provider's own URI>`), and every lookup checks them again. Lists ask every
//! serving provider at once, each bounded in time, and are paginated with an opaque cursor; a
//! provider that fails to answer is left out of the list and logged, never failing the list.
//! Every prompt and resource passes the registration lint's prose rules (hidden Unicode,
//! injection, exfiltration …) before it is listed, as a tool's description does.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axp_audit::Kind;
use axp_protocol::{ErrorCode, RpcError};
use axp_providers::{DynProvider, InputAnswers, ProviderError, ProviderId};
use serde_json::{Map, Value, json};

use super::Ctx;
use crate::auth::session::{Session, denied};
use crate::catalog::registry::Mount;
use crate::catalog::uris;
use crate::config::fleet::PrefixMode;
use crate::execution::jobs::provider_error_to_rpc;
use crate::gateway::Gateway;
use crate::gateway::listeners::level_rank;

/// Items per page of a list answer.
const PAGE: usize = 100;

/// How long one provider may take to answer a list before it is left out of it: a hung server
/// must not hang every client's `resources/list`.
const LIST_WITHIN: Duration = Duration::from_secs(10);

fn namespaced(m: &Mount) -> bool {
    m.prefix != PrefixMode::Never
}

/// The name a client sees for a provider's prompt.
fn prompt_name(m: &Mount, name: &str) -> String {
    if namespaced(m) { format!("{}__{name}", m.provider.id()) } else { name.to_string() }
}

/// The URI a client sees for a provider's resource (or template).
fn client_uri(m: &Mount, uri: &str) -> String {
    if namespaced(m) { uris::wrap(m.provider.id().as_str(), uri) } else { uri.to_string() }
}

/// One page of `items` from the request's `cursor`, as `{key: [...], nextCursor?}`.
fn page(items: Vec<Value>, p: &Value, key: &str) -> Result<Value, RpcError> {
    let from = match p.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => c
            .strip_prefix("axp:")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= items.len())
            .ok_or_else(|| RpcError::invalid_params(format!("`cursor` `{c}` is not one this gateway gave out")))?,
        Some(_) => return Err(RpcError::invalid_params("`cursor` must be a string")),
    };
    let end = (from + PAGE).min(items.len());
    let mut out = json!({ key: items[from..end] });
    if end < items.len() {
        out["nextCursor"] = json!(format!("axp:{end}"));
    }
    Ok(out)
}

fn required_str<'a>(p: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    p.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("`{key}` (a string) is required")))
}

fn unknown_resource(uri: &str) -> RpcError {
    RpcError::invalid_params(format!("no mounted server offers the resource `{uri}`")).with_data("uri", uri)
}

fn unknown_prompt(name: &str) -> RpcError {
    RpcError::invalid_params(format!("no mounted server offers the prompt `{name}`")).with_data("name", name)
}

/// What one `subscriptions/listen` stream is subscribed to (see
/// [`Gateway::listen_resources`]); dropped when the stream ends, which unsubscribes it.
pub struct ResourceListen {
    gw: std::sync::Weak<Gateway>,
    /// The session whose grants allowed the subscriptions, which updates are addressed to.
    pub session: String,
    /// The URIs honoured, as the client wrote them.
    pub uris: Vec<String>,
    /// When the session expires: its grants, and with them the updates, end then.
    pub expires_ms: u64,
    upstream: Vec<(DynProvider, String)>,
}

impl Drop for ResourceListen {
    fn drop(&mut self) {
        let Some(gw) = self.gw.upgrade() else { return };
        for (provider, uri) in self.upstream.drain(..) {
            if gw.listeners.unsubscribe(provider.id(), &uri, &self.session)
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                rt.spawn(async move {
                    if let Err(e) = provider.subscribe_resource(&uri, false).await {
                        tracing::warn!(provider = %provider.id(), uri, error = %e, "unsubscribing upstream failed");
                    }
                });
            }
        }
    }
}

/// A 2026-07-28 client's answers to a server's `input_required` round (`inputResponses` and the
/// server's `requestState`), carried back to the server with the same request.
fn input_answers(p: &Value) -> Result<Option<InputAnswers>, RpcError> {
    let responses = match p.get("inputResponses") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(_) => return Err(RpcError::invalid_params("`inputResponses` must be an object of results by key")),
    };
    let request_state = match p.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(RpcError::invalid_params("`requestState` must be the string the round gave")),
    };
    if responses.is_none() && request_state.is_none() {
        return Ok(None);
    }
    Ok(Some(InputAnswers { responses: responses.unwrap_or_default(), request_state }))
}

/// A provider's failure as the client sees it; unknown names keep the name the client used.
fn lookup_error(e: &ProviderError, unknown: impl FnOnce() -> RpcError) -> RpcError {
    match e {
        ProviderError::UnknownResource(_) | ProviderError::UnknownPrompt(_) => unknown(),
        other => provider_error_to_rpc(other),
    }
}

/// Runs a provider's `method` for a session, so that the server's requests of the client made
/// meanwhile are relayed to that session's client (`axp_providers` counts it in flight). It runs
/// in a provider-call span, as a tool call's provider call does, and the server is handed that
/// span's trace context (`meta.trace`), or the client's while traces are off.
async fn for_session<F: Future>(s: &Session, provider: &ProviderId, method: &str, fut: F) -> F::Output {
    use tracing::Instrument;
    let span = crate::telemetry::trace_span!(
        "provider call",
        otel.kind = "client",
        axp.provider = %provider,
        axp.method = %method,
    );
    let mut meta = json!({"session_id": s.id});
    if let Some(trace) = crate::telemetry::outgoing(&span) {
        meta["trace"] = Value::Object(trace);
    }
    axp_providers::REQUEST_META.scope(meta, fut.instrument(span)).await
}

/// A server's error about one of its URIs, told with the URI the client used: the server's own
/// URI means nothing to the client (and would tell it how URIs are rewritten).
fn in_client_terms(mut e: RpcError, upstream: &str, client: &str) -> RpcError {
    if upstream == client {
        return e;
    }
    e.message = e.message.replace(upstream, client);
    if let Some(d) = e.data.as_mut().and_then(Value::as_object_mut) {
        for v in d.values_mut() {
            if let Value::String(s) = v
                && s.contains(upstream)
            {
                *s = s.replace(upstream, client);
            }
        }
    }
    e
}

impl Gateway {
    /// Asks every serving provider at once; the answers of those that gave one in time.
    async fn gather<T, F, Fut>(&self, what: &str, f: F) -> Vec<(Mount, T)>
    where
        F: Fn(DynProvider) -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let mounts = self.registry.available_mounts();
        let asks = mounts.into_iter().map(|m| {
            let fut = tokio::time::timeout(LIST_WITHIN, f(m.provider.clone()));
            async move { (m, fut.await) }
        });
        let mut out = Vec::new();
        for (m, r) in futures::future::join_all(asks).await {
            match r {
                Ok(Ok(v)) => out.push((m, v)),
                Ok(Err(ProviderError::Unavailable { .. } | ProviderError::Starting { .. })) => {}
                Ok(Err(e)) => tracing::warn!(provider = %m.provider.id(), error = %e, "{what} failed; left out"),
                Err(_) => tracing::warn!(
                    provider = %m.provider.id(),
                    "{what} took over {}s; left out",
                    LIST_WITHIN.as_secs()
                ),
            }
        }
        out
    }

    /// The provider (and its own URI) behind a URI a client sent. A namespaced URI names its
    /// provider; otherwise the providers mounted with `prefix = "never"` are asked, and the
    /// one that lists the URI (or the only one) serves it.
    async fn route_uri(&self, uri: &str) -> Result<(Mount, String), RpcError> {
        if let Some((provider, original)) = uris::unwrap(uri)
            && let Some((m, _)) = self.registry.mount_of(&ProviderId(provider.to_string()))
            && namespaced(&m)
        {
            return Ok((m, original));
        }
        let plain: Vec<Mount> = self.registry.available_mounts().into_iter().filter(|m| !namespaced(m)).collect();
        if plain.len() > 1 {
            for m in &plain {
                let listed = m.provider.resources().await.unwrap_or_default();
                if listed.iter().any(|r| r.get("uri").and_then(Value::as_str) == Some(uri)) {
                    return Ok((m.clone(), uri.to_string()));
                }
            }
        }
        plain.into_iter().next().map(|m| (m, uri.to_string())).ok_or_else(|| unknown_resource(uri))
    }

    /// The provider (and its own name) behind a prompt name a client sent.
    fn route_prompt(&self, name: &str) -> Option<(Mount, String)> {
        if let Some((provider, rest)) = name.split_once("__")
            && let Some((m, _)) = self.registry.mount_of(&ProviderId(provider.to_string()))
            && namespaced(&m)
        {
            return Some((m, rest.to_string()));
        }
        self.registry.available_mounts().into_iter().find(|m| !namespaced(m)).map(|m| (m, name.to_string()))
    }

    /// A routed provider that is serving, or the error that says it is not.
    fn serving(&self, m: &Mount) -> Result<(), RpcError> {
        match self.registry.mount_of(m.provider.id()) {
            Some((_, true)) => Ok(()),
            _ => Err(RpcError::new(
                ErrorCode::ProviderUnavailable,
                format!("provider `{}` is unavailable; retry when it is back", m.provider.id()),
            )),
        }
    }

    pub async fn resources_list(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let lists = self.gather("resources/list", |pr| async move { pr.resources().await }).await;
        page(self.offered_resources(&s, lists, "uri"), p, "resources")
    }

    pub async fn resource_templates_list(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let lists = self.gather("resources/templates/list", |pr| async move { pr.resource_templates().await }).await;
        page(self.offered_resources(&s, lists, "uriTemplate"), p, "resourceTemplates")
    }

    /// The resources (or templates) of every provider's list that the session may read and the
    /// lint admits, each with its URI (under `key`) rewritten to the one the client sees.
    fn offered_resources(&self, s: &Session, lists: Vec<(Mount, Vec<Value>)>, key: &str) -> Vec<Value> {
        let mut items = Vec::new();
        for (m, list) in lists {
            let id = m.provider.id().as_str();
            for mut r in list {
                let Some(uri) = r.get(key).and_then(Value::as_str).map(str::to_string) else { continue };
                if s.caps.allows_resource(id, &uri) && self.admission.admit_offering(id, &uri, &r).is_ok() {
                    r[key] = json!(client_uri(&m, &uri));
                    items.push(r);
                }
            }
        }
        items
    }

    pub async fn resources_read(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let uri = required_str(p, "uri")?;
        let (m, upstream) = self.route_uri(uri).await?;
        let id = m.provider.id().clone();
        self.may_read(&s, &id, &upstream)?;
        self.serving(&m)?;
        let answers = input_answers(p)?;
        let mut r = for_session(&s, &id, "resources/read", m.provider.read_resource(&upstream, answers))
            .await
            .map_err(|e| in_client_terms(lookup_error(&e, || unknown_resource(uri)), &upstream, uri))?;
        if let Some(contents) = r.get_mut("contents").and_then(Value::as_array_mut) {
            for c in contents {
                if let Some(u) = c.get("uri").and_then(Value::as_str).map(str::to_string) {
                    c["uri"] = json!(client_uri(&m, &u));
                }
            }
        }
        self.audit(Kind::Other("resource_read".into()), Some(&s.id), json!({"provider": id.as_str(), "uri": upstream}))
            .await?;
        Ok(r)
    }

    fn may_read(&self, s: &Session, provider: &ProviderId, upstream: &str) -> Result<(), RpcError> {
        if s.caps.allows_resource(provider.as_str(), upstream) {
            Ok(())
        } else {
            Err(denied(&format!("resource({provider}__{upstream})"), "read this resource"))
        }
    }

    /// `resources/subscribe` (`on`) and `resources/unsubscribe`: the upstream is subscribed
    /// while at least one session is, and updates reach exactly the subscribed sessions.
    pub async fn resources_subscribe(&self, p: &Value, ctx: &Ctx, on: bool) -> Result<Value, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let uri = required_str(p, "uri")?;
        let (m, upstream) = self.route_uri(uri).await?;
        let id = m.provider.id().clone();
        self.may_read(&s, &id, &upstream)?;
        if on {
            self.serving(&m)?;
            if self.listeners.subscribe(&id, &upstream, s.clone())
                && let Err(e) = m.provider.subscribe_resource(&upstream, true).await
            {
                self.listeners.unsubscribe(&id, &upstream, &s.id);
                return Err(lookup_error(&e, || unknown_resource(uri)));
            }
        } else if self.listeners.unsubscribe(&id, &upstream, &s.id)
            && let Err(e) = m.provider.subscribe_resource(&upstream, false).await
        {
            tracing::warn!(provider = %id, uri = upstream, error = %e, "unsubscribing upstream failed");
        }
        Ok(json!({}))
    }

    /// The resource subscriptions of a 2026-07-28 `subscriptions/listen` stream: each URI the
    /// request's session may read and a serving server can be subscribed to is subscribed for
    /// that session (upstream too, while at least one listener wants it), as
    /// `resources/subscribe` does for a 2025 session. The rest are left out of what the stream
    /// acknowledges. Dropping the answer ends the subscriptions.
    pub async fn listen_resources(
        self: &Arc<Self>,
        p: &Value,
        ctx: &Ctx,
        uris: &[String],
    ) -> Result<ResourceListen, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let mut listen = ResourceListen {
            gw: Arc::downgrade(self),
            session: s.id.clone(),
            uris: Vec::new(),
            expires_ms: s.expires_ms,
            upstream: Vec::new(),
        };
        for uri in uris {
            let Ok((m, upstream)) = self.route_uri(uri).await else { continue };
            let id = m.provider.id().clone();
            if self.may_read(&s, &id, &upstream).is_err() || self.serving(&m).is_err() {
                continue;
            }
            if self.listeners.subscribe(&id, &upstream, s.clone())
                && let Err(e) = m.provider.subscribe_resource(&upstream, true).await
            {
                self.listeners.unsubscribe(&id, &upstream, &s.id);
                tracing::debug!(provider = %id, uri = upstream, error = %e, "a listen stream's resource subscription was not honoured");
                continue;
            }
            listen.uris.push(uri.clone());
            listen.upstream.push((m.provider.clone(), upstream));
        }
        Ok(listen)
    }

    pub async fn prompts_list(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let mut items = Vec::new();
        for (m, list) in self.gather("prompts/list", |pr| async move { pr.prompts().await }).await {
            for mut pr in list {
                let Some(own) = pr.get("name").and_then(Value::as_str).map(str::to_string) else { continue };
                let name = prompt_name(&m, &own);
                if s.caps.allows_prompt(&name)
                    && self.admission.admit_offering(m.provider.id().as_str(), &own, &pr).is_ok()
                {
                    pr["name"] = json!(name);
                    items.push(pr);
                }
            }
        }
        page(items, p, "prompts")
    }

    pub async fn prompts_get(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let name = required_str(p, "name")?;
        if !s.caps.allows_prompt(name) {
            return Err(denied(&format!("prompt({name})"), "get this prompt"));
        }
        let arguments = match p.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(RpcError::invalid_params("`arguments` must be an object of strings")),
        };
        let (m, own) = self.route_prompt(name).ok_or_else(|| unknown_prompt(name))?;
        self.serving(&m)?;
        // The lint reads a prompt's description in the list; one refused there is not served by
        // name either.
        if self.admission.offering_refused(m.provider.id().as_str(), &own) {
            return Err(
                unknown_prompt(name).with_data("reason", "refused by the registration lint (see the gateway log)")
            );
        }
        let answers = input_answers(p)?;
        for_session(&s, m.provider.id(), "prompts/get", m.provider.get_prompt(&own, arguments, answers))
            .await
            .map_err(|e| lookup_error(&e, || unknown_prompt(name)))
    }

    /// `completion/complete`: the `ref` (a prompt or a resource template) is routed like a
    /// lookup of it, with its name or URI mapped back to the provider's own.
    pub async fn complete(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let r = p.get("ref").ok_or_else(|| RpcError::invalid_params("`ref` is required"))?;
        let mut upstream = p.clone();
        if let Value::Object(o) = &mut upstream {
            o.remove("session_id");
            o.remove("cap_token");
        }
        let m = match r.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {
                let name = required_str(r, "name")?;
                if !s.caps.allows_prompt(name) {
                    return Err(denied(&format!("prompt({name})"), "complete this prompt's arguments"));
                }
                let (m, own) = self.route_prompt(name).ok_or_else(|| unknown_prompt(name))?;
                upstream["ref"]["name"] = json!(own);
                m
            }
            Some("ref/resource") => {
                let uri = required_str(r, "uri")?;
                let (m, own) = self.route_uri(uri).await?;
                self.may_read(&s, m.provider.id(), &own)?;
                upstream["ref"]["uri"] = json!(own);
                m
            }
            _ => return Err(RpcError::invalid_params("`ref.type` must be `ref/prompt` or `ref/resource`")),
        };
        self.serving(&m)?;
        for_session(&s, m.provider.id(), "completion/complete", m.provider.complete(upstream))
            .await
            .map_err(|e| provider_error_to_rpc(&e))
    }

    /// `logging/setLevel`: this session hears server logs at `level` and above from every
    /// server it may see; the servers, shared by every session, are set to the most verbose
    /// level any session asked for.
    pub async fn set_log_level(&self, p: &Value, ctx: &Ctx) -> Result<Value, RpcError> {
        let s = self.session_or_default(p, ctx)?;
        let level = required_str(p, "level")?;
        let rank = level_rank(level).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "`{level}` is not a log level (one of {})",
                crate::gateway::listeners::LEVELS.join(", ")
            ))
        })?;
        let upstream = crate::gateway::listeners::LEVELS[self.listeners.set_level(s, rank)];
        let mounts = self.registry.available_mounts();
        let sets = mounts.iter().map(|m| async move { (m, m.provider.set_log_level(upstream).await) });
        for (m, r) in futures::future::join_all(sets).await {
            if let Err(e) = r {
                tracing::warn!(provider = %m.provider.id(), error = %e, "logging/setLevel failed upstream");
            }
        }
        Ok(json!({}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_follow_the_cursor_and_refuse_forged_ones() {
        let items: Vec<Value> = (0..250).map(|i| json!(i)).collect();
        let first = page(items.clone(), &json!({}), "x").unwrap();
        assert_eq!(first["x"].as_array().unwrap().len(), PAGE);
        let next = first["nextCursor"].as_str().unwrap();
        let second = page(items.clone(), &json!({"cursor": next}), "x").unwrap();
        assert_eq!(second["x"][0], json!(100));
        let third = page(items.clone(), &json!({"cursor": second["nextCursor"]}), "x").unwrap();
        assert_eq!(third["x"].as_array().unwrap().len(), 50);
        assert!(third.get("nextCursor").is_none());
        for bad in [json!("axp:999"), json!("nope"), json!(3)] {
            let e = page(items.clone(), &json!({"cursor": bad}), "x").unwrap_err();
            assert_eq!(e.code, -32602, "{bad}");
        }
    }
}
