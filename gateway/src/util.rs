//! Small shared helpers of the gateway: the clock (`axp_protocol::now_ms`), the conversion of an
//! internal failure into an error that logs the detail and hides it from callers, and random
//! ids.

use axp_protocol::RpcError;

pub use axp_protocol::now_ms;

/// Logs `err` with its context and returns a caller-safe `InternalError`.
pub fn internal(context: &str, err: impl std::fmt::Display) -> RpcError {
    tracing::error!(%err, "{context}");
    RpcError::internal(format!("the gateway failed while {context}; see the gateway log"))
}

/// `n` random bytes as base64url (no padding): nonces, session ids, bearer tokens.
pub fn random_b64(n: usize) -> String {
    use base64::Engine;
    let bytes: Vec<u8> = (0..n).map(|_| rand::random::<u8>()).collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}
