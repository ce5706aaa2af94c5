//! `subscriptions/listen` (MCP 2026-07-28) over HTTP: a stateless client's one long-lived
//! stream of the change notifications it asked for, in place of the earlier revisions' `GET`
//! stream. The answer is an SSE stream that opens with `notifications/subscriptions/acknowledged`
//! (naming the part of the filter the gateway honours) and then carries each matching
//! `*/list_changed`, every one stamped with the subscription's id (the request's id) in
//! `_meta`. A filter that honours nothing is answered with the final result at once.
//!
//! Honoured: `toolsListChanged`, `promptsListChanged`, `resourcesListChanged`, and
//! `resourceSubscriptions`: each listed URI that the request's session may read is subscribed
//! for that session (and upstream, while anyone listens), for as long as the stream is open,
//! and its `notifications/resources/updated` arrive on the stream; a URI that cannot be
//! subscribed (unknown, not granted, a server without subscriptions) is left out of the
//! acknowledgement. The session is the one the request names, or an implicit one that lasts
//! its ten minutes. A stream with resource subscriptions ends, with its final result, when that
//! session expires (its grants end then, and a stream that stayed open hearing nothing would
//! look alive to a client that is told nothing more); the client listens again, under a live
//! session. Open streams are capped, so that clients cannot pile up broadcast subscribers
//! without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axp_protocol::RpcError;
use axp_protocol::jsonrpc::{Notification, Request, Response};
use serde_json::{Map, Value, json};
use tokio_stream::StreamExt;

use super::http::{json_response, sse};
use crate::gateway::Gateway;
use crate::router::revision::{META_SERVER_INFO, META_SUBSCRIPTION_ID};
use crate::router::{Ctx, Push};

/// At most this many listen streams are open at once.
pub const MAX_LISTENS: usize = 1024;

/// The filter keys the gateway honours, and the notification each lets through.
const HONOURED: [(&str, &str); 3] = [
    ("toolsListChanged", "notifications/tools/list_changed"),
    ("promptsListChanged", "notifications/prompts/list_changed"),
    ("resourcesListChanged", "notifications/resources/list_changed"),
];

const UPDATED: &str = "notifications/resources/updated";

/// Counts open listen streams; a stream's slot is freed when its client goes away.
#[derive(Default, Clone)]
pub struct Listens(Arc<AtomicUsize>);

struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn stamp(id: &Value, mut params: Map<String, Value>) -> Value {
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.insert(META_SUBSCRIPTION_ID.into(), id.clone());
    }
    Value::Object(params)
}

/// Answers one `subscriptions/listen` request.
pub async fn serve(gw: Arc<Gateway>, listens: &Listens, req: Request, ctx: &Ctx) -> axum::response::Response {
    let bad = |id, message: &str| {
        let e = RpcError::invalid_params(message);
        json_response(axum::http::StatusCode::BAD_REQUEST, &Response::err(id, e), None)
    };
    let params = req.params.clone().unwrap_or(Value::Null);
    let Some(filter) = params.get("notifications").and_then(Value::as_object) else {
        return bad(req.id, "`notifications` (the subscription filter, an object) is required");
    };
    let wanted: Vec<String> = match filter.get("resourceSubscriptions") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => match serde_json::from_value(v.clone()) {
            Ok(uris) => uris,
            Err(_) => return bad(req.id, "`resourceSubscriptions` must be an array of resource URIs"),
        },
    };
    let mut honoured: Map<String, Value> = HONOURED
        .iter()
        .filter(|(k, _)| filter.get(*k) == Some(&json!(true)))
        .map(|(k, _)| ((*k).to_string(), json!(true)))
        .collect();
    let mut methods: Vec<&'static str> =
        HONOURED.iter().filter(|(k, _)| honoured.contains_key(*k)).map(|(_, m)| *m).collect();
    if listens.0.fetch_add(1, Ordering::SeqCst) >= MAX_LISTENS {
        listens.0.fetch_sub(1, Ordering::SeqCst);
        let e = RpcError::internal("subscription limit reached: too many listen streams are open");
        return json_response(axum::http::StatusCode::SERVICE_UNAVAILABLE, &Response::err(req.id, e), None);
    }
    let slot = Slot(listens.0.clone());
    let resources = if wanted.is_empty() {
        None
    } else {
        match gw.listen_resources(&params, ctx, &wanted).await {
            Ok(r) => Some(r),
            Err(e) => return json_response(axum::http::StatusCode::OK, &Response::err(req.id, e), None),
        }
    };
    if let Some(r) = resources.as_ref().filter(|r| !r.uris.is_empty()) {
        honoured.insert("resourceSubscriptions".into(), json!(r.uris));
        methods.push(UPDATED);
    }
    let id = serde_json::to_value(&req.id).unwrap_or(Value::Null);
    let ack = Notification::new(
        "notifications/subscriptions/acknowledged",
        stamp(&id, Map::from_iter([("notifications".into(), Value::Object(honoured))])),
    );
    let first = Push { event_id: None, message: ack.to_value().into() };
    let last = {
        let info = json!({"name": "axp", "version": env!("CARGO_PKG_VERSION")});
        let done = Response::ok(
            req.id,
            json!({"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: id, META_SERVER_INFO: info}}),
        );
        Push { event_id: None, message: serde_json::to_value(done).unwrap_or_default().into() }
    };
    if methods.is_empty() {
        drop(slot);
        return sse(tokio_stream::iter([first, last]));
    }
    let ends = resources.as_ref().filter(|r| !r.uris.is_empty()).map(|r| {
        let left = r.expires_ms.saturating_sub(axp_protocol::now_ms());
        tokio::time::sleep(std::time::Duration::from_millis(left))
    });
    let rx = gw.notify.subscribe();
    let changes = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |o| {
        let o = o.ok()?;
        let method = o.message.get("method").and_then(Value::as_str)?;
        if !methods.contains(&method) {
            return None;
        }
        let params = o.message.get("params").and_then(Value::as_object).cloned().unwrap_or_default();
        // What every client hears (list changes), and the updates of the resources this stream
        // subscribed to for its session; nothing else meant for one session.
        let mine = match (&o.to, &resources) {
            (None, _) => method != UPDATED,
            (Some(to), Some(r)) => {
                method == UPDATED
                    && to.contains(&r.session)
                    && params.get("uri").and_then(Value::as_str).is_some_and(|u| r.uris.iter().any(|w| w == u))
            }
            (Some(_), None) => false,
        };
        if !mine {
            return None;
        }
        let _held = &slot;
        Some(Push { event_id: None, message: Notification::new(method, stamp(&id, params)).to_value().into() })
    });
    match ends {
        None => sse(tokio_stream::iter([first]).chain(changes)),
        Some(expiry) => sse(tokio_stream::iter([first])
            .chain(futures::StreamExt::take_until(changes, expiry))
            .chain(tokio_stream::iter([last]))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_carry_the_subscription_id() {
        let stamped = stamp(&json!(7), Map::from_iter([("x".to_string(), json!(1))]));
        assert_eq!(stamped, json!({"x": 1, "_meta": {META_SUBSCRIPTION_ID: 7}}));
    }
}
