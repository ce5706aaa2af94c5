//! Signed operator envelopes: the form every policy-changing request (`job.approve`, `job.deny`,
//! `cap.revoke`) takes. An envelope names its operator, the method, the params (as the exact
//! JSON text that was signed, so no canonicalisation is needed), a timestamp and a random nonce,
//! and carries an Ed25519 signature over all of them. The gateway holds only public keys, so
//! nothing it stores or sees on the wire lets anyone sign a new envelope; a captured envelope
//! cannot be replayed (each nonce is accepted once, durably) nor used late (a timestamp window)
//! nor used for another job or method (both are signed).
//!
//! This file owns the format, signing (for the CLI) and the signature check; the nonce book and
//! the operator keys live in `operators.rs`. Ed25519 comes from `ring` (already in the tree for
//! rustls), not a hand-rolled implementation.

use std::path::Path;

use anyhow::{Context, Result};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The domain-separation prefix of the signed bytes.
const CONTEXT: &str = "axp-envelope-v1";

/// How far an envelope's timestamp may be from the gateway's clock, either way.
pub const WINDOW_MS: u64 = 120_000;

/// The file name of the operator key `axp serve` creates in its state dir (the `local`
/// operator: whoever can read the state dir already controls the gateway).
pub const LOCAL_KEY_FILE: &str = "operator.key";

/// The name envelopes signed with the state dir's key carry.
pub const LOCAL_OPERATOR: &str = "local";

/// A signed, single-use operator request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The operator's name in `[[operators]]`, or `local`.
    pub operator: String,
    /// The JSON-RPC method this envelope authorises (must equal the method it is sent with).
    pub method: String,
    /// The method's params as JSON text, exactly as signed.
    pub params: String,
    /// When it was signed (ms since the epoch).
    pub ts_ms: u64,
    /// Random, at least 16 characters; accepted once.
    pub nonce: String,
    /// Ed25519 signature (base64url, no padding) over [`Envelope::signed_bytes`].
    pub sig: String,
}

impl Envelope {
    /// The bytes the signature covers.
    pub fn signed_bytes(operator: &str, method: &str, params: &str, ts_ms: u64, nonce: &str) -> Vec<u8> {
        format!("{CONTEXT}\n{operator}\n{method}\n{ts_ms}\n{nonce}\n{params}").into_bytes()
    }

    /// Signs `params` for `method` as `operator` with a PKCS#8 Ed25519 key.
    pub fn sign(key: &Ed25519KeyPair, operator: &str, method: &str, params: &Value, ts_ms: u64) -> Envelope {
        let params = params.to_string();
        let nonce = crate::util::random_b64(18);
        let sig = key.sign(&Self::signed_bytes(operator, method, &params, ts_ms, &nonce));
        Envelope {
            operator: operator.to_string(),
            method: method.to_string(),
            params,
            ts_ms,
            nonce,
            sig: b64().encode(sig.as_ref()),
        }
    }

    /// Whether the signature verifies with `public_key` (raw 32 bytes).
    pub fn signature_verifies(&self, public_key: &[u8]) -> bool {
        let Ok(sig) = b64().decode(self.sig.trim_end_matches('=')) else {
            return false;
        };
        let msg = Self::signed_bytes(&self.operator, &self.method, &self.params, self.ts_ms, &self.nonce);
        UnparsedPublicKey::new(&ED25519, public_key).verify(&msg, &sig).is_ok()
    }
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// A new Ed25519 key as PKCS#8 (base64 text, what key files hold) and its public key (base64).
pub fn generate() -> Result<(String, String)> {
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
        .map_err(|_| anyhow::anyhow!("the system random source failed"))?;
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|_| anyhow::anyhow!("a fresh key did not parse"))?;
    Ok((b64().encode(pkcs8.as_ref()), b64().encode(pair.public_key().as_ref())))
}

/// Reads a key file written by [`write_key`] / `axp operator keygen`.
pub fn read_key(path: &Path) -> Result<Ed25519KeyPair> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the operator key {}", path.display()))?;
    let der = b64()
        .decode(text.trim().trim_end_matches('='))
        .with_context(|| format!("{} is not an operator key (base64 PKCS#8)", path.display()))?;
    Ed25519KeyPair::from_pkcs8(&der).map_err(|_| anyhow::anyhow!("{} is not an Ed25519 PKCS#8 key", path.display()))
}

/// Writes a new key file readable by its owner only; refuses to overwrite one.
pub fn write_key(path: &Path, pkcs8_b64: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(pkcs8_b64.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    Ok(())
}

/// The public key (base64) of a key pair.
pub fn public_key_b64(key: &Ed25519KeyPair) -> String {
    b64().encode(key.public_key().as_ref())
}

/// Decodes a configured public key.
pub fn decode_public_key(s: &str) -> Result<Vec<u8>, String> {
    let bytes = b64()
        .decode(s.trim().trim_end_matches('='))
        .or_else(|_| base64::engine::general_purpose::STANDARD.decode(s.trim()))
        .map_err(|_| "is not base64".to_string())?;
    if bytes.len() != 32 {
        return Err(format!("is {} bytes; an Ed25519 public key is 32", bytes.len()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify_and_tamper() {
        let (pkcs8, public) = generate().unwrap();
        let der = b64().decode(&pkcs8).unwrap();
        let key = Ed25519KeyPair::from_pkcs8(&der).unwrap();
        let pk = decode_public_key(&public).unwrap();
        let e = Envelope::sign(&key, "local", "job.approve", &serde_json::json!({"job_id": "j_1"}), 5);
        assert!(e.signature_verifies(&pk));
        for tampered in [
            Envelope { params: r#"{"job_id":"j_2"}"#.into(), ..e.clone() },
            Envelope { method: "job.deny".into(), ..e.clone() },
            Envelope { ts_ms: 6, ..e.clone() },
            Envelope { nonce: "x".repeat(24), ..e.clone() },
            Envelope { operator: "alice".into(), ..e.clone() },
        ] {
            assert!(!tampered.signature_verifies(&pk), "{tampered:?}");
        }
        let (_, other) = generate().unwrap();
        assert!(!e.signature_verifies(&decode_public_key(&other).unwrap()));
    }
}
