//! The web console's static front end at `/ui`: a few HTML, CSS and JavaScript-module files
//! compiled into the binary (`gateway/ui/`), served with the checks `/axp` applies to a request
//! (a foreign `Origin` or, in zero-config mode, a non-loopback `Host` is 403; an unknown or
//! malformed `Authorization` header is 401) and with headers that keep the page to itself: a
//! Content-Security-Policy that allows only these files (no inline script or style, no other
//! origin, no framing, Trusted Types for every DOM sink), `nosniff`, no referrer and no caching.
//!
//! The files hold no data and no secret (they are the same in every binary), so a browser's
//! navigation — which cannot carry a bearer header — loads them; everything the console shows
//! comes from `/axp`, where the page sends the operator's credentials itself: the bearer token
//! as a header and a signed envelope per operator method (docs/protocol.md, "The web
//! console"). No cookie is set or read, so no other site can make the browser act with them.
//! This file serves bytes; it decides nothing.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::http::{authed_ctx, host_allowed, origin_allowed};
use crate::gateway::Gateway;

/// What the page may load and run: its own files and `/axp`, nothing inline, nothing framed.
/// `require-trusted-types-for 'script'` makes every string-to-DOM sink (`innerHTML`, …) throw,
/// so even a bug in the page cannot turn data into markup or script.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; \
    require-trusted-types-for 'script'; trusted-types 'none'";

/// The embedded files: name, content type, bytes.
const FILES: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../../ui/index.html")),
    ("console.css", "text/css; charset=utf-8", include_str!("../../ui/console.css")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../../ui/app.js")),
    ("rpc.js", "text/javascript; charset=utf-8", include_str!("../../ui/rpc.js")),
    ("views.js", "text/javascript; charset=utf-8", include_str!("../../ui/views.js")),
    ("favicon.svg", "image/svg+xml", include_str!("../../ui/favicon.svg")),
];

pub fn router(gw: Arc<Gateway>) -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(index))
        .route("/ui/{file}", get(file))
        .with_state(gw)
}

async fn index(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    serve(&gw, &headers, "index.html")
}

async fn file(State(gw): State<Arc<Gateway>>, headers: HeaderMap, Path(name): Path<String>) -> Response {
    serve(&gw, &headers, &name)
}

fn serve(gw: &Gateway, headers: &HeaderMap, name: &str) -> Response {
    if !origin_allowed(headers) || !host_allowed(gw, headers) {
        return guarded(StatusCode::FORBIDDEN.into_response());
    }
    if let Err(refused) = authed_ctx(gw, headers) {
        return guarded(*refused);
    }
    let Some((_, content_type, body)) = FILES.iter().find(|(n, _, _)| *n == name) else {
        return guarded(StatusCode::NOT_FOUND.into_response());
    };
    guarded(([(header::CONTENT_TYPE, *content_type)], *body).into_response())
}

/// Every answer under `/ui`, refusals included, carries the same protective headers.
fn guarded(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
    h.insert("cross-origin-resource-policy", HeaderValue::from_static("same-origin"));
    resp
}
