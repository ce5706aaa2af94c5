//! JSON-RPC 2.0 framing: ids, requests, notifications, responses, and the one parser that turns
//! bytes from any transport into an [`Incoming`] message or a ready-made error response. This
//! is the only place that knows JSON-RPC's rules (version field, id types, batch policy).

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
}

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
}
