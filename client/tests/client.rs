//! The client against a real HTTP server on loopback: a small axum endpoint that reads each
//! request with `axp_protocol::jsonrpc` as the gateway does and answers the way the gateway's
//! `/axp` and `/mcp` do (JSON, an event stream, session headers, errors, a body that is not
//! JSON), echoing the headers it saw so each test can check what the client sent.

use axp_client::{Client, Error};
use axp_protocol::jsonrpc::{Incoming, Response, parse_incoming};
use axp_protocol::{ErrorCode, RpcError};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response as HttpResponse};
use serde_json::{Value, json};

fn header_of(headers: &HeaderMap, name: &str) -> Value {
    headers.get(name).and_then(|v| v.to_str().ok()).map_or(Value::Null, |v| json!(v))
}

async fn endpoint(headers: HeaderMap, body: Bytes) -> HttpResponse {
    let req = match parse_incoming(&body) {
        Ok(Incoming::Request(r)) => r,
        Ok(_) => return StatusCode::ACCEPTED.into_response(),
        Err(resp) => return (StatusCode::BAD_REQUEST, resp.to_string()).into_response(),
    };
    let seen = json!({
        "session": header_of(&headers, "mcp-session-id"),
        "capability": header_of(&headers, "axp-capability"),
        "authorization": header_of(&headers, "authorization"),
        "accept": header_of(&headers, "accept"),
        "content_type": header_of(&headers, "content-type"),
        "id": req.id,
        "params": req.params,
    });
    let json_answer = |resp: Response| ([(header::CONTENT_TYPE, "application/json")], resp.to_string());
    match req.method.as_str() {
        "initialize" if req.params.as_ref().is_some_and(|p| p["bare"] == true) => {
            json_answer(Response::ok(req.id, json!({}))).into_response()
        }
        "initialize" => {
            let mut r = json_answer(Response::ok(req.id, json!({"protocolVersion": "2025-11-25"}))).into_response();
            r.headers_mut().insert("mcp-session-id", "mcp-1".parse().expect("a valid header value"));
            r
        }
        "session.open" => {
            json_answer(Response::ok(req.id, json!({"session_id": "s-1", "cap_token": "axp1.t"}))).into_response()
        }
        "fail" => json_answer(Response::err(req.id, RpcError::new(ErrorCode::UnknownJob, "no job j"))).into_response(),
        "html" => (StatusCode::BAD_GATEWAY, "<html>bad gateway</html>").into_response(),
        "request-back" => ([(header::CONTENT_TYPE, "application/json")], r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#)
            .into_response(),
        "stream" if seen["accept"].as_str().is_some_and(|a| a.contains("text/event-stream")) => {
            let note = axp_protocol::Notification::new("job.event", json!({"seq": 0}));
            let body = format!(
                ": keep-alive\n\nid: j:0\ndata: {note}\n\ndata: {}\n\n: more after the response\n\n",
                Response::ok(req.id, seen)
            );
            ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
        }
        "cut-stream" => {
            let note = axp_protocol::Notification::new("job.event", json!({"seq": 0}));
            ([(header::CONTENT_TYPE, "text/event-stream")], format!("data: {note}\n\n")).into_response()
        }
        _ => json_answer(Response::ok(req.id, seen)).into_response(),
    }
}

/// Starts the endpoint on a loopback port and returns its URL.
async fn server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/rpc", listener.local_addr().expect("a bound address"));
    let app = axum::Router::new().route("/rpc", axum::routing::post(endpoint));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_call_sends_one_request_with_increasing_ids_and_returns_its_result() {
    let mut c = Client::new(server().await);
    let first = c.call("echo", json!({"k": 1})).await.unwrap();
    assert_eq!(first["id"], 1);
    assert_eq!(first["params"], json!({"k": 1}));
    assert_eq!(first["content_type"], "application/json");
    // No credentials, no session and no event-stream `Accept` unless asked for.
    assert_eq!(first["session"], Value::Null);
    assert_eq!(first["capability"], Value::Null);
    assert_eq!(first["authorization"], Value::Null);
    assert!(!first["accept"].as_str().unwrap_or("").contains("event-stream"), "{first}");
    let second = c.call("echo", json!({})).await.unwrap();
    assert_eq!(second["id"], 2);
}

#[tokio::test]
async fn initialize_and_session_open_keep_the_session_for_later_calls() {
    let url = server().await;
    let mut mcp = Client::new(&url);
    mcp.initialize(json!({"capabilities": {}})).await.unwrap();
    assert_eq!(mcp.session_id.as_deref(), Some("mcp-1"));
    let seen = mcp.call("echo", json!({})).await.unwrap();
    assert_eq!(seen["session"], "mcp-1");
    mcp.notify("notifications/initialized", json!({})).await.unwrap();

    let mut axp = Client::new(&url);
    axp.bearer = Some("op-token".into());
    let opened = axp.open_session(json!({})).await.unwrap();
    assert_eq!(opened["cap_token"], "axp1.t");
    let seen = axp.call("echo", json!({})).await.unwrap();
    assert_eq!(seen["session"], "s-1");
    assert_eq!(seen["capability"], "axp1.t");
    assert_eq!(seen["authorization"], "Bearer op-token");
    // An empty session field is not sent at all (a token without a session is a valid call).
    axp.session_id = Some(String::new());
    let seen = axp.call("echo", json!({})).await.unwrap();
    assert_eq!(seen["session"], Value::Null);
    assert_eq!(seen["capability"], "axp1.t");
}

#[tokio::test]
async fn errors_say_what_went_wrong() {
    let url = server().await;
    let mut c = Client::new(&url);
    let e = c.call("fail", json!({})).await.unwrap_err();
    assert_eq!(e.rpc().and_then(RpcError::kind), Some(ErrorCode::UnknownJob), "{e}");
    assert_eq!(e.rpc().unwrap().reason(), "no job j");
    // The whole answer is there for callers that look at it as it came.
    let reply = c.request("fail", json!({})).await.unwrap();
    assert_eq!(reply.status, 200);
    assert_eq!(reply.message["error"]["data"]["name"], "UnknownJob");
    assert!(reply.response().unwrap().into_result().is_err());

    match c.call("html", json!({})).await.unwrap_err() {
        Error::NotJson { status, body, .. } => assert_eq!((status, body.as_str()), (502, "<html>bad gateway</html>")),
        e => panic!("{e:?}"),
    }
    assert!(matches!(c.call("request-back", json!({})).await, Err(Error::NotAResponse { .. })));
    // An `initialize` answered without a session header leaves the client without one.
    assert!(matches!(c.initialize(json!({"bare": true})).await, Err(Error::NoSession { .. })));
    assert_eq!(c.session_id, None);

    // Nothing listens on a port that was just released.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/rpc", l.local_addr().unwrap());
    drop(l);
    let e = Client::new(&dead).call("echo", json!({})).await.unwrap_err();
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains(&dead), "{e}");
}

#[tokio::test]
async fn an_event_stream_answer_gives_its_notifications_and_then_the_response() {
    let url = server().await;
    let mut c = Client::keep_alive(&url).unwrap().accept_event_stream();
    let reply = c.request("stream", json!({"job_id": "j"})).await.unwrap();
    assert_eq!(reply.notifications.len(), 1);
    assert_eq!(reply.notifications[0].method, "job.event");
    let seen = reply.into_result().unwrap();
    assert!(seen["accept"].as_str().unwrap().contains("text/event-stream"), "{seen}");
    // The same connection serves the next call.
    let again = c.call("echo", json!({})).await.unwrap();
    assert_eq!(again["id"], 2);
    // A stream that ends without a response is an error, not a hang or a null result.
    assert!(matches!(c.call("cut-stream", json!({})).await, Err(Error::StreamEnded { .. })));
}
