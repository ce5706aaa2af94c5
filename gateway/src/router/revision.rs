//! Which MCP revision a request speaks, and what the 2026-07-28 revision asks of the answer.
//!
//! Up to 2025-11-25 a client opens a session with `initialize` and its requests carry only the
//! session. From 2026-07-28 every request stands alone: its `params._meta` carries the
//! envelope (`io.modelcontextprotocol/protocolVersion`, `…/clientCapabilities`, optionally
//! `…/clientInfo` and `…/logLevel`), `server/discover` replaces `initialize`, methods that the
//! revision removed answer -32601 with HTTP 404, every result says its `resultType`, and
//! cacheable results carry `ttlMs` and `cacheScope`. A request is read as 2026-07-28 when it
//! carries the envelope's version, names that revision in its `MCP-Protocol-Version` header, or
//! calls `server/discover`; anything else is served as before, so both revisions work side by
//! side on one endpoint. Pure functions: the router applies them.

use axp_protocol::jsonrpc::Request;
use axp_protocol::{MCP_PROTOCOL_VERSIONS, RpcError};
use serde_json::{Value, json};

/// The stateless revision.
pub const STATELESS: &str = "2026-07-28";

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
const META_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// Where a server names itself on its results.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// Where a `subscriptions/listen` stream's notifications name their subscription.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// MCP's error codes for the revision's own failures.
pub const HEADER_MISMATCH: i64 = -32020;
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// What a 2026-07-28 request says about its client.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub client_capabilities: Value,
    pub client_info: Option<Value>,
    pub log_level: Option<String>,
}

/// A request refused before it runs, with the HTTP status the revision gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub error: RpcError,
    pub http_status: u16,
}

fn refuse(code: i64, message: impl Into<String>, http_status: u16) -> Refusal {
    Refusal { error: RpcError { code, message: message.into(), data: None }, http_status }
}

/// The revision's envelope of `req` (`None`: an earlier revision's request), or why it is
/// refused. `header` is the `MCP-Protocol-Version` header, if the transport has one.
pub fn envelope(req: &Request, header: Option<&str>) -> Result<Option<Envelope>, Refusal> {
    let meta = req.params.as_ref().and_then(|p| p.get("_meta"));
    let meta_version = meta.and_then(|m| m.get(META_VERSION));
    let header = header.map(str::trim);
    let stateless = meta_version.is_some() || header == Some(STATELESS) || req.method == "server/discover";
    if !stateless {
        return Ok(None);
    }
    let Some(meta) = meta.filter(|m| m.is_object()) else {
        return Err(refuse(
            -32602,
            "a 2026-07-28 request carries `params._meta` with its protocol version and client capabilities",
            400,
        ));
    };
    let Some(version) = meta_version.and_then(Value::as_str) else {
        return Err(refuse(-32602, format!("`params._meta` lacks `{META_VERSION}`"), 400));
    };
    let Some(caps) = meta.get(META_CAPS).filter(|c| c.is_object()) else {
        return Err(refuse(-32602, format!("`params._meta` lacks `{META_CAPS}` (an object)"), 400));
    };
    // A header that disagrees with the body is refused as such before the version is judged:
    // a proxy may have routed on either.
    if let Some(h) = header
        && h != version
    {
        return Err(refuse(
            HEADER_MISMATCH,
            format!("the MCP-Protocol-Version header names `{h}` but `params._meta` names `{version}`"),
            400,
        ));
    }
    if version != STATELESS {
        let mut r = refuse(UNSUPPORTED_VERSION, format!("protocol version `{version}` is not supported"), 400);
        r.error.data = Some(json!({"supported": supported_versions(), "requested": version}));
        return Err(r);
    }
    Ok(Some(Envelope {
        client_capabilities: caps.clone(),
        client_info: meta.get(META_INFO).cloned(),
        log_level: meta.get(META_LOG_LEVEL).and_then(Value::as_str).map(str::to_string),
    }))
}

/// Every revision this gateway speaks, newest first.
pub fn supported_versions() -> Vec<&'static str> {
    std::iter::once(STATELESS).chain(MCP_PROTOCOL_VERSIONS.iter().copied()).collect()
}

/// Methods the 2026-07-28 revision removed (their work moved into the envelope or
/// `subscriptions/listen`): answered -32601 with HTTP 404.
pub fn removed(method: &str) -> bool {
    matches!(
        method,
        "initialize" | "ping" | "logging/setLevel" | "resources/subscribe" | "resources/unsubscribe" | "roots/list"
    )
}

/// The refusal of a method this revision does not have.
pub fn not_found(method: &str) -> Refusal {
    Refusal { error: RpcError::method_not_found(method), http_status: 404 }
}

/// Methods whose results a client may cache (SEP-2549).
fn cacheable(method: &str) -> bool {
    matches!(
        method,
        "server/discover"
            | "tools/list"
            | "prompts/list"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
    )
}

/// Completes a result for a 2026-07-28 client: `resultType` (`complete` unless the result
/// already says otherwise) and, on cacheable results, `ttlMs` 0 and `cacheScope` `private`:
/// what a session may see depends on its grants and on servers that change at any time, so
/// nothing is shared between callers or kept.
pub fn decorate(method: &str, result: &mut Value) {
    let Some(obj) = result.as_object_mut() else { return };
    obj.entry("resultType").or_insert_with(|| json!("complete"));
    if cacheable(method) {
        obj.entry("ttlMs").or_insert_with(|| json!(0));
        obj.entry("cacheScope").or_insert_with(|| json!("private"));
    }
}

/// Removes the revision's envelope from params forwarded to a server: the gateway speaks to
/// each server in the revision that server and it agreed on.
pub fn strip_envelope(params: &mut Value) {
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
        if meta.is_empty()
            && let Some(p) = params.as_object_mut()
        {
            p.remove("_meta");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axp_protocol::jsonrpc::Id;

    fn req(method: &str, params: Value) -> Request {
        Request::new(Id::Num(1), method, params)
    }

    fn meta() -> Value {
        json!({META_VERSION: STATELESS, META_CAPS: {"sampling": {}}, META_LOG_LEVEL: "info"})
    }

    #[test]
    fn the_revision_is_read_from_the_envelope_the_header_or_discover() {
        assert_eq!(envelope(&req("tools/list", json!({})), None), Ok(None));
        assert_eq!(envelope(&req("tools/list", json!({})), Some("2025-11-25")), Ok(None));
        let e = envelope(&req("tools/list", json!({"_meta": meta()})), Some(STATELESS)).unwrap().unwrap();
        assert_eq!((e.client_capabilities, e.log_level.as_deref()), (json!({"sampling": {}}), Some("info")));
        for (r, h, code) in [
            (req("server/discover", json!({})), None, -32602),
            (req("tools/list", json!({})), Some(STATELESS), -32602),
            (req("tools/list", json!({"_meta": {META_CAPS: {}}})), Some(STATELESS), -32602),
            (req("tools/list", json!({"_meta": {META_VERSION: STATELESS}})), None, -32602),
            (req("tools/list", json!({"_meta": {META_VERSION: "v9", META_CAPS: {}}})), Some("v9"), UNSUPPORTED_VERSION),
            (req("tools/list", json!({"_meta": meta()})), Some("2025-11-25"), HEADER_MISMATCH),
        ] {
            let refused = envelope(&r, h).unwrap_err();
            assert_eq!((refused.error.code, refused.http_status), (code, 400), "{r:?} {h:?}");
        }
    }

    #[test]
    fn results_say_their_type_and_cache_hints() {
        let mut list = json!({"tools": []});
        decorate("tools/list", &mut list);
        assert_eq!(list, json!({"tools": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}));
        let mut more = json!({"resultType": "input_required"});
        decorate("tools/call", &mut more);
        assert_eq!(more, json!({"resultType": "input_required"}));
    }

    #[test]
    fn the_envelope_is_not_forwarded() {
        let mut p = json!({"name": "x", "_meta": {META_VERSION: STATELESS, "progressToken": 3}});
        strip_envelope(&mut p);
        assert_eq!(p, json!({"name": "x", "_meta": {"progressToken": 3}}));
        let mut p = json!({"_meta": meta()});
        strip_envelope(&mut p);
        assert_eq!(p, json!({}));
    }
}
