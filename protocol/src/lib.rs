//! `axp-protocol` owns the vocabulary every other crate speaks: JSON-RPC 2.0 envelopes and
//! error codes, the AXP method parameters and results, the capability grammar, and the
//! `ToolSpec` model that providers publish. It is pure data plus pure functions (serde only):
//! no I/O, no tokio, no knowledge of transports, sandboxes or providers. Everything else depends
//! on it; it depends on nothing of ours.

pub mod capability;
pub mod error;
pub mod jsonrpc;
pub mod methods;
pub mod tool;

pub use capability::{Capability, CapabilityParseError, CapabilitySet};
pub use error::{ErrorCode, RpcError};
pub use jsonrpc::{Id, Incoming, Message, Notification, Request, Response};
pub use tool::{ToolCall, ToolOutput, ToolSpec};

/// The AXP protocol version this crate describes.
pub const AXP_VERSION: &str = "0";

/// MCP protocol revisions the gateway answers to, newest first.
pub const MCP_PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Milliseconds since the Unix epoch, as every timestamp AXP writes (job records, audit
/// records, tokens) carries it; 0 for a clock before 1970, saturating far in the future.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
