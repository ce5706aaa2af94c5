//! Small shared helpers of the gateway: clock, internal-error conversion that logs detail and
//! hides it from callers, and UTF-8-safe chunk decoding for streamed process output.

use axp_protocol::RpcError;

pub use axp_protocol::now_ms;

/// Logs `err` with its context and returns a caller-safe `InternalError`.
pub fn internal(context: &str, err: impl std::fmt::Display) -> RpcError {
    tracing::error!(%err, "{context}");
    RpcError::internal(format!("the gateway failed while {context}; see the gateway log"))
}

/// Decodes a byte stream into UTF-8 text chunk by chunk, holding back an incomplete trailing
/// sequence so a character split across reads is not mangled.
#[derive(Debug, Default)]
pub struct Utf8Chunker {
    pending: Vec<u8>,
}

impl Utf8Chunker {
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let valid_up_to = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let rest = self.pending.split_off(valid_up_to);
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        out
    }

    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

/// `n` random bytes as base64url (no padding): nonces, session ids, bearer tokens.
pub fn random_b64(n: usize) -> String {
    use base64::Engine;
    let bytes: Vec<u8> = (0..n).map(|_| rand::random::<u8>()).collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_survive() {
        let mut c = Utf8Chunker::default();
        let s = "héllo".as_bytes();
        let a = c.push(&s[..2]);
        let b = c.push(&s[2..]);
        assert_eq!(format!("{a}{b}"), "héllo");
        assert_eq!(c.push(&[0xff, b'a']), "\u{fffd}a");
        assert_eq!(c.finish(), "");
    }
}
