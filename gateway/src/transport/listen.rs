//! `subscriptions/listen` (MCP 2026-07-28) over HTTP: a stateless client's one long-lived
//! stream of the change notifications it asked for, in place of the earlier revisions' `GET`
//! stream. The answer is an SSE stream that opens with `notifications/subscriptions/acknowledged`
//! (naming the part of the filter the gateway honours) and then carries each matching
//! `*/list_changed`, every one stamped with the subscription's id (the request's id) in
//! `_meta`. A filter that honours nothing is answered with the final result at once.
//!
//! Honoured: `toolsListChanged`, `promptsListChanged`, `resourcesListChanged`. Not honoured:
//! `resourceSubscriptions`, because `server/discover` does not declare `resources.subscribe`
//! for stateless clients (their updates would need a subscription upstream that outlives any
//! one request, which the gateway does not keep for them). Open streams are capped, so that
//! clients cannot pile up broadcast subscribers without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axp_protocol::RpcError;
use axp_protocol::jsonrpc::{Notification, Request, Response};
use serde_json::{Map, Value, json};
use tokio_stream::StreamExt;

use super::http::{json_response, sse};
use crate::gateway::Gateway;
use crate::router::Push;
use crate::router::revision::{META_SERVER_INFO, META_SUBSCRIPTION_ID};

/// At most this many listen streams are open at once.
pub const MAX_LISTENS: usize = 1024;

/// The filter keys the gateway honours, and the notification each lets through.
const HONOURED: [(&str, &str); 3] = [
    ("toolsListChanged", "notifications/tools/list_changed"),
    ("promptsListChanged", "notifications/prompts/list_changed"),
    ("resourcesListChanged", "notifications/resources/list_changed"),
];

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
pub fn serve(gw: Arc<Gateway>, listens: &Listens, req: Request) -> axum::response::Response {
    let filter = req.params.as_ref().and_then(|p| p.get("notifications")).and_then(Value::as_object);
    let Some(filter) = filter else {
        let e = RpcError::invalid_params("`notifications` (the subscription filter, an object) is required");
        return json_response(axum::http::StatusCode::BAD_REQUEST, &Response::err(req.id, e), None);
    };
    let honoured: Map<String, Value> = HONOURED
        .iter()
        .filter(|(k, _)| filter.get(*k) == Some(&json!(true)))
        .map(|(k, _)| ((*k).to_string(), json!(true)))
        .collect();
    let methods: Vec<&'static str> =
        HONOURED.iter().filter(|(k, _)| honoured.contains_key(*k)).map(|(_, m)| *m).collect();
    if listens.0.fetch_add(1, Ordering::SeqCst) >= MAX_LISTENS {
        listens.0.fetch_sub(1, Ordering::SeqCst);
        let e = RpcError::internal("subscription limit reached: too many listen streams are open");
        return json_response(axum::http::StatusCode::SERVICE_UNAVAILABLE, &Response::err(req.id, e), None);
    }
    let slot = Slot(listens.0.clone());
    let id = serde_json::to_value(&req.id).unwrap_or(Value::Null);
    let ack = Notification::new(
        "notifications/subscriptions/acknowledged",
        stamp(&id, Map::from_iter([("notifications".into(), Value::Object(honoured))])),
    );
    let first = Push { event_id: None, message: ack.to_value() };
    if methods.is_empty() {
        let info = json!({"name": "axp", "version": env!("CARGO_PKG_VERSION")});
        let done = Response::ok(
            req.id,
            json!({"resultType": "complete", "_meta": {META_SUBSCRIPTION_ID: id, META_SERVER_INFO: info}}),
        );
        let last = Push { event_id: None, message: serde_json::to_value(done).unwrap_or_default() };
        drop(slot);
        return sse(tokio_stream::iter([first, last]));
    }
    let rx = gw.notify.subscribe();
    let changes = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |o| {
        let o = o.ok()?;
        // Only what every client hears (list changes); nothing meant for one session.
        let method = o.message.get("method").and_then(Value::as_str)?;
        if o.to.is_some() || !methods.contains(&method) {
            return None;
        }
        let params = o.message.get("params").and_then(Value::as_object).cloned().unwrap_or_default();
        let _held = &slot;
        Some(Push { event_id: None, message: Notification::new(method, stamp(&id, params)).to_value() })
    });
    sse(tokio_stream::iter([first]).chain(changes))
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
