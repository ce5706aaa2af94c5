//! JSON-RPC 2.0 framing: ids, requests, notifications, responses, their encoding to bytes, the
//! one parser that turns bytes from any transport into an [`Incoming`] message or a ready-made
//! error response, and its client-side counterpart [`parse_response`]. This is the only place
//! that knows JSON-RPC's rules (version field, id types, batch policy): servers and clients
//! build and read envelopes through it, never by hand.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::RpcError;

/// A request id: JSON-RPC allows numbers and strings (null only in error responses).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    Num(i64),
    Str(String),
    Null,
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Num(n) => write!(f, "{n}"),
            Id::Str(s) => write!(f, "{s:?}"),
            Id::Null => f.write_str("null"),
        }
    }
}

impl From<i64> for Id {
    fn from(n: i64) -> Self {
        Id::Num(n)
    }
}

impl From<String> for Id {
    fn from(s: String) -> Self {
        Id::Str(s)
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Self {
        Id::Str(s.to_string())
    }
}

/// A call that expects a response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub jsonrpc: String,
    pub id: Id,
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Request {
    pub fn new(id: Id, method: impl Into<String>, params: Value) -> Self {
        Self { jsonrpc: "2.0".into(), id, method: method.into(), params: Some(params) }
    }
}

/// A one-way message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub jsonrpc: String,
    pub method: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Notification {
    pub fn new(method: impl Into<String>, params: Value) -> Self {
        Self { jsonrpc: "2.0".into(), method: method.into(), params: Some(params) }
    }
}

/// A response: exactly one of `result` and `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub jsonrpc: String,
    pub id: Id,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

impl Response {
    pub fn ok(id: Id, result: Value) -> Self {
        Self { jsonrpc: "2.0".into(), id, result: Some(result), error: None }
    }
    pub fn err(id: Id, error: RpcError) -> Self {
        Self { jsonrpc: "2.0".into(), id, result: None, error: Some(error) }
    }
    pub fn from_result(id: Id, r: Result<Value, RpcError>) -> Self {
        match r {
            Ok(v) => Self::ok(id, v),
            Err(e) => Self::err(id, e),
        }
    }

    /// What the call came to: the error when there is one, else the result. A missing `result`
    /// is `null`: serde reads `"result": null` as absent, and `null` is a valid result.
    pub fn into_result(self) -> Result<Value, RpcError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.result.unwrap_or(Value::Null)),
        }
    }
}

/// The wire form of an envelope: the JSON value, the bytes of one compact JSON text (an HTTP
/// body), and `Display` as that same text (one line of a newline-delimited stream, since
/// compact JSON never contains a raw newline).
macro_rules! wire_forms {
    ($($t:ty),*) => {$(
        impl $t {
            /// This envelope as a JSON value.
            pub fn to_value(&self) -> Value {
                // Every field is a string, an id or a JSON value: serialising cannot fail.
                serde_json::to_value(self).unwrap_or(Value::Null)
            }

            /// This envelope as one compact JSON text.
            pub fn to_bytes(&self) -> Vec<u8> {
                serde_json::to_vec(self).unwrap_or_default()
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                let text = serde_json::to_string(self).map_err(|_| std::fmt::Error)?;
                f.write_str(&text)
            }
        }
    )*};
}

wire_forms!(Request, Notification, Response, Message);

/// Any message a peer may send.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

/// What a server receives, after validation.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request(Request),
    Notification(Notification),
    /// A response to a request the server sent (e.g. a ping); servers may ignore it.
    Response(Response),
}

/// Parses one JSON-RPC message. On failure returns the error response to send back (with id
/// `null` when the id could not be read, as JSON-RPC requires).
// The error is the ready-made response to send back, built once per bad message; boxing it would
// only add an allocation to the rare path.
#[allow(clippy::result_large_err)]
pub fn parse_incoming(bytes: &[u8]) -> Result<Incoming, Response> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Response::err(Id::Null, RpcError::parse(format!("the body is not valid JSON: {e}"))))?;
    parse_value(value)
}

/// Like [`parse_incoming`] for an already-parsed JSON value.
#[allow(clippy::result_large_err)]
pub fn parse_value(value: Value) -> Result<Incoming, Response> {
    let obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err(Response::err(
                Id::Null,
                RpcError::invalid_request(
                    "JSON-RPC batches are not accepted (MCP removed them in 2025-06-18); send one message per request",
                ),
            ));
        }
        other => {
            return Err(Response::err(
                Id::Null,
                RpcError::invalid_request(format!("a JSON-RPC message must be an object, not {}", kind_of(&other))),
            ));
        }
    };
    let id = match obj.get("id") {
        None => None,
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => Some(Id::Num(i)),
            None => return Err(bad(Id::Null, "`id` must be an integer or a string")),
        },
        Some(Value::String(s)) => Some(Id::Str(s.clone())),
        Some(Value::Null) => Some(Id::Null),
        Some(_) => return Err(bad(Id::Null, "`id` must be an integer or a string")),
    };
    let err_id = id.clone().unwrap_or(Id::Null);
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        _ => return Err(bad(err_id, "`jsonrpc` must be the string \"2.0\"")),
    }
    let params = obj.get("params").cloned();
    if let Some(p) = &params
        && !(p.is_object() || p.is_array() || p.is_null())
    {
        return Err(bad(err_id, "`params` must be an object or an array"));
    }
    match obj.get("method") {
        Some(Value::String(method)) => {
            let params = params.filter(|p| !p.is_null());
            Ok(match id {
                Some(id) => Incoming::Request(Request { jsonrpc: "2.0".into(), id, method: method.clone(), params }),
                None => Incoming::Notification(Notification { jsonrpc: "2.0".into(), method: method.clone(), params }),
            })
        }
        Some(_) => Err(bad(err_id, "`method` must be a string")),
        None => {
            if obj.contains_key("result") || obj.contains_key("error") {
                let resp: Response = serde_json::from_value(Value::Object(obj))
                    .map_err(|e| bad(err_id.clone(), &format!("malformed response: {e}")))?;
                Ok(Incoming::Response(resp))
            } else {
                Err(bad(err_id, "a request needs a `method`"))
            }
        }
    }
}

/// Why bytes a client received are not a JSON-RPC response.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ResponseError {
    /// The bytes are not JSON at all.
    #[error("not JSON: {0}")]
    NotJson(String),
    /// Valid JSON, but not a well-formed response (a request, a batch, a bad `jsonrpc` or `id`).
    #[error("not a JSON-RPC response: {0}")]
    NotAResponse(String),
}

/// The client side of [`parse_incoming`]: reads the answer to a request. The same rules apply
/// (version field, id types, no batches); what is not a response is refused with the reason.
pub fn parse_response(bytes: &[u8]) -> Result<Response, ResponseError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ResponseError::NotJson(e.to_string()))?;
    parse_response_value(value)
}

/// Like [`parse_response`] for an already-parsed JSON value.
pub fn parse_response_value(value: Value) -> Result<Response, ResponseError> {
    match parse_value(value) {
        Ok(Incoming::Response(r)) => Ok(r),
        Ok(Incoming::Request(r)) => {
            Err(ResponseError::NotAResponse(format!("a request for `{}` where a response was due", r.method)))
        }
        Ok(Incoming::Notification(n)) => {
            Err(ResponseError::NotAResponse(format!("a notification `{}` where a response was due", n.method)))
        }
        Err(e) => Err(ResponseError::NotAResponse(e.error.map(|e| e.reason().to_string()).unwrap_or_default())),
    }
}

fn bad(id: Id, reason: &str) -> Response {
    Response::err(id, RpcError::invalid_request(reason.to_string()))
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;
    use serde_json::json;

    fn code(r: Result<Incoming, Response>) -> i64 {
        r.unwrap_err().error.unwrap().code
    }

    #[test]
    fn parses_request_and_notification() {
        let r = parse_incoming(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
        assert!(matches!(r, Incoming::Request(Request { id: Id::Num(1), .. })));
        let n = parse_incoming(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(n, Incoming::Notification(_)));
        let s = parse_incoming(br#"{"jsonrpc":"2.0","id":"a","method":"x","params":{"k":1}}"#).unwrap();
        match s {
            Incoming::Request(r) => assert_eq!(r.params.unwrap()["k"], 1),
            _ => panic!("not a request"),
        }
    }

    #[test]
    fn rejects_malformed_input_with_the_right_code() {
        assert_eq!(code(parse_incoming(b"{not json")), ErrorCode::ParseError.code());
        assert_eq!(code(parse_incoming(b"[]")), ErrorCode::InvalidRequest.code());
        assert_eq!(code(parse_incoming(b"42")), ErrorCode::InvalidRequest.code());
        assert_eq!(code(parse_incoming(br#"{"id":1,"method":"x"}"#)), ErrorCode::InvalidRequest.code());
        assert_eq!(code(parse_incoming(br#"{"jsonrpc":"2.0","id":1,"method":7}"#)), ErrorCode::InvalidRequest.code());
        assert_eq!(
            code(parse_incoming(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":"s"}"#)),
            ErrorCode::InvalidRequest.code()
        );
        assert_eq!(
            code(parse_incoming(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#)),
            ErrorCode::InvalidRequest.code()
        );
        // The id is echoed when it could be read.
        let e = parse_incoming(br#"{"jsonrpc":"1.0","id":9,"method":"x"}"#).unwrap_err();
        assert_eq!(e.id, Id::Num(9));
    }

    #[test]
    fn envelopes_encode_to_what_the_parser_reads_back() {
        let req = Request::new(Id::from(3), "tools/call", json!({"name": "t"}));
        assert_eq!(req.to_value(), json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "t"}}));
        assert_eq!(parse_incoming(&req.to_bytes()).unwrap(), Incoming::Request(req.clone()));
        // Display is the same compact text: one line of a newline-delimited stream.
        assert_eq!(req.to_string().into_bytes(), req.to_bytes());
        assert!(!req.to_string().contains('\n'));

        let note = Notification::new("notifications/initialized", json!({}));
        assert_eq!(note.to_value(), json!({"jsonrpc": "2.0", "method": "notifications/initialized", "params": {}}));
        assert_eq!(parse_incoming(note.to_string().as_bytes()).unwrap(), Incoming::Notification(note));

        let ok = Response::ok(Id::from("a"), json!({"x": 1}));
        assert_eq!(ok.to_value(), json!({"jsonrpc": "2.0", "id": "a", "result": {"x": 1}}));
        let err = Response::err(Id::Null, RpcError::parse("bad"));
        assert_eq!(err.to_value()["error"]["code"], ErrorCode::ParseError.code());
        assert_eq!(err.to_value()["id"], Value::Null);
        assert_eq!(Message::Response(ok.clone()).to_value(), ok.to_value());
    }

    #[test]
    fn a_client_reads_results_errors_and_null_results() {
        let r = parse_response(br#"{"jsonrpc":"2.0","id":1,"result":{"k":2}}"#).unwrap();
        assert_eq!(r.id, Id::Num(1));
        assert_eq!(r.into_result().unwrap(), json!({"k": 2}));
        // `"result": null` is a result (serde reads it as absent).
        let r = parse_response(br#"{"jsonrpc":"2.0","id":1,"result":null}"#).unwrap();
        assert_eq!(r.into_result().unwrap(), Value::Null);
        let wire = Response::err(Id::Num(4), RpcError::method_not_found("x")).to_bytes();
        let e = parse_response(&wire).unwrap().into_result().unwrap_err();
        assert_eq!(e.kind(), Some(ErrorCode::MethodNotFound));
        assert_eq!(e, RpcError::method_not_found("x"));
    }

    #[test]
    fn a_client_refuses_what_is_not_a_response() {
        assert!(matches!(parse_response(b"<html>"), Err(ResponseError::NotJson(_))));
        let not = |b: &[u8]| matches!(parse_response(b), Err(ResponseError::NotAResponse(_)));
        assert!(not(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#));
        assert!(not(br#"{"jsonrpc":"2.0","method":"job.event"}"#));
        assert!(not(br#"[{"jsonrpc":"2.0","id":1,"result":1}]"#));
        assert!(not(br#"{"jsonrpc":"1.0","id":1,"result":1}"#));
        assert!(not(br#"{"jsonrpc":"2.0","id":1}"#));
        let e = parse_response_value(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).unwrap_err();
        assert!(e.to_string().contains("`ping`"), "{e}");
    }
}
