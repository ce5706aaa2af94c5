//! JSON-RPC error objects and the AXP error codes (DESIGN §5). Every error that leaves the
//! gateway is an [`RpcError`] whose `data.reason` is a sentence a person can act on; internal
//! detail is logged by the caller, never put here.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Every error code AXP emits: the JSON-RPC standard ones and the AXP range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// The body was not valid JSON.
    ParseError,
    /// Valid JSON but not a JSON-RPC request.
    InvalidRequest,
    /// No such method.
    MethodNotFound,
    /// Parameters of the wrong shape or type.
    InvalidParams,
    /// A failure inside the gateway; details are logged, not sent.
    InternalError,
    /// Missing, forged, expired or revoked token.
    Unauthorized,
    /// The token does not cover this request.
    CapabilityDenied,
    /// The sandbox tier asked for cannot be had on this host.
    TierUnavailable,
    /// No tool of that name in the index.
    UnknownTool,
    /// No job of that id in this session.
    UnknownJob,
    /// No open session of that id.
    UnknownSession,
    /// A size, rate or quota limit was hit.
    LimitExceeded,
    /// The provider behind the tool is down, restarting or timed out.
    ProviderUnavailable,
    /// The call waits for an operator's approval.
    ApprovalRequired,
}

impl ErrorCode {
    /// The numeric JSON-RPC code.
    pub fn code(self) -> i64 {
        match self {
            Self::ParseError => -32700,
            Self::InvalidRequest => -32600,
            Self::MethodNotFound => -32601,
            Self::InvalidParams => -32602,
            Self::InternalError => -32603,
            Self::Unauthorized => -32001,
            Self::CapabilityDenied => -32002,
            Self::TierUnavailable => -32003,
            Self::UnknownTool => -32004,
            Self::UnknownJob => -32005,
            Self::UnknownSession => -32006,
            Self::LimitExceeded => -32007,
            Self::ProviderUnavailable => -32008,
            Self::ApprovalRequired => -32009,
        }
    }

    /// The stable name used in `data.name` and in documentation.
    pub fn name(self) -> &'static str {
        match self {
            Self::ParseError => "ParseError",
            Self::InvalidRequest => "InvalidRequest",
            Self::MethodNotFound => "MethodNotFound",
            Self::InvalidParams => "InvalidParams",
            Self::InternalError => "InternalError",
            Self::Unauthorized => "Unauthorized",
            Self::CapabilityDenied => "CapabilityDenied",
            Self::TierUnavailable => "TierUnavailable",
            Self::UnknownTool => "UnknownTool",
            Self::UnknownJob => "UnknownJob",
            Self::UnknownSession => "UnknownSession",
            Self::LimitExceeded => "LimitExceeded",
            Self::ProviderUnavailable => "ProviderUnavailable",
            Self::ApprovalRequired => "ApprovalRequired",
        }
    }

    /// The inverse of [`ErrorCode::code`].
    pub fn from_code(code: i64) -> Option<Self> {
        ALL_CODES.iter().copied().find(|c| c.code() == code)
    }
}

const ALL_CODES: &[ErrorCode] = &[
    ErrorCode::ParseError,
    ErrorCode::InvalidRequest,
    ErrorCode::MethodNotFound,
    ErrorCode::InvalidParams,
    ErrorCode::InternalError,
    ErrorCode::Unauthorized,
    ErrorCode::CapabilityDenied,
    ErrorCode::TierUnavailable,
    ErrorCode::UnknownTool,
    ErrorCode::UnknownJob,
    ErrorCode::UnknownSession,
    ErrorCode::LimitExceeded,
    ErrorCode::ProviderUnavailable,
    ErrorCode::ApprovalRequired,
];

/// A JSON-RPC error object as sent on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `data.reason` set to `reason` and `data.name` to the code's name. The
    /// `message` is `Name: reason`: most MCP clients (the Inspector, desktop apps) show only the
    /// message, and the reason is what tells a user what to do; programs match on `code` or
    /// `data.name`, never on the message.
    pub fn new(code: ErrorCode, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Self {
            code: code.code(),
            message: format!("{}: {reason}", code.name()),
            data: Some(json!({ "name": code.name(), "reason": reason })),
        }
    }

    /// Adds one more field to `data` (e.g. `pointer` for schema failures).
    pub fn with_data(mut self, key: &str, value: impl Into<Value>) -> Self {
        if let Some(Value::Object(map)) = self.data.as_mut() {
            map.insert(key.to_string(), value.into());
        }
        self
    }

    /// The human sentence in `data.reason`, or the message.
    pub fn reason(&self) -> &str {
        self.data.as_ref().and_then(|d| d.get("reason")).and_then(Value::as_str).unwrap_or(&self.message)
    }

    /// The AXP code, if this is one we know.
    pub fn kind(&self) -> Option<ErrorCode> {
        ErrorCode::from_code(self.code)
    }

    pub fn parse(reason: impl Into<String>) -> Self {
        Self::new(ErrorCode::ParseError, reason)
    }
    pub fn invalid_request(reason: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, reason)
    }
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            ErrorCode::MethodNotFound,
            format!("there is no method `{method}`; see docs/protocol.md for the AXP and MCP methods"),
        )
    }
    pub fn invalid_params(reason: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidParams, reason)
    }
    pub fn internal(reason: impl Into<String>) -> Self {
        Self::new(ErrorCode::InternalError, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for c in ALL_CODES {
            assert!(seen.insert(c.code()), "duplicate code {}", c.code());
            assert_eq!(ErrorCode::from_code(c.code()), Some(*c));
        }
        assert_eq!(ErrorCode::UnknownTool.code(), -32004);
    }

    #[test]
    fn reason_is_in_data() {
        let e = RpcError::new(ErrorCode::CapabilityDenied, "missing tool(time__*)");
        assert_eq!(e.reason(), "missing tool(time__*)");
        assert_eq!(e.kind(), Some(ErrorCode::CapabilityDenied));
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["data"]["name"], "CapabilityDenied");
    }
}
