//! One audit record: its kinds, its canonical bytes, its hash and its line in a segment file.
//! Pure functions over bytes; no files, no clock, no locks (those are `log.rs` and `read.rs`).
//!
//! A line is the record's canonical JSON without `hash` (fields in a fixed order, `detail` with
//! object keys sorted), with `,"hash":"<64 hex>"` spliced in before the closing brace, and
//! `hash = SHA-256(prev_hash as 32 bytes ‖ those canonical bytes)`. The verifier hashes the exact
//! bytes found on disk (the line minus the hash suffix), never a re-serialisation, so number
//! formatting or key order cannot make a genuine record fail or an edited one pass.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The `prev_hash` of record 0.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The fixed-length suffix `,"hash":"` + 64 hex + `"}`.
const HASH_SUFFIX_LEN: usize = 9 + 64 + 2;

/// What happened. Unknown kinds read from a newer log are kept as [`Kind::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A session was opened (detail: workspace, tier, capabilities, token id).
    SessionOpen,
    /// A session was closed or expired.
    SessionClose,
    /// A root token was minted.
    TokenMint,
    /// A token was attenuated through the gateway (`cap.attenuate`).
    TokenAttenuate,
    /// A token id was revoked.
    TokenRevoke,
    /// A request was refused for want of a grant (detail: method, missing grant).
    CapabilityDenied,
    /// A command job was started (detail: argv, cwd).
    Command,
    /// A tool was called (detail: tool, `args_sha256` of the canonical arguments — never the
    /// arguments themselves).
    ToolCall,
    /// A job wrote a file (detail: path, size, sha256).
    FileWrite,
    /// A network connection was attempted through the egress proxy (detail: host, port, verdict).
    NetAttempt,
    /// The registration lint passed or refused a tool.
    LintVerdict,
    /// An operator approved or denied a parked job.
    Approval,
    /// The log itself cut a torn (unacknowledged) tail when it was opened.
    AuditRecovered,
    /// A kind this version does not know.
    Other(String),
}

impl Kind {
    /// The wire name, e.g. `tool.call`.
    pub fn as_str(&self) -> &str {
        match self {
            Kind::SessionOpen => "session.open",
            Kind::SessionClose => "session.close",
            Kind::TokenMint => "token.mint",
            Kind::TokenAttenuate => "token.attenuate",
            Kind::TokenRevoke => "token.revoke",
            Kind::CapabilityDenied => "capability.denied",
            Kind::Command => "command",
            Kind::ToolCall => "tool.call",
            Kind::FileWrite => "file.write",
            Kind::NetAttempt => "net.attempt",
            Kind::LintVerdict => "lint.verdict",
            Kind::Approval => "approval",
            Kind::AuditRecovered => "audit.recovered",
            Kind::Other(s) => s,
        }
    }
}

impl FromStr for Kind {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "session.open" => Kind::SessionOpen,
            "session.close" => Kind::SessionClose,
            "token.mint" => Kind::TokenMint,
            "token.attenuate" => Kind::TokenAttenuate,
            "token.revoke" => Kind::TokenRevoke,
            "capability.denied" => Kind::CapabilityDenied,
            "command" => Kind::Command,
            "tool.call" => Kind::ToolCall,
            "file.write" => Kind::FileWrite,
            "net.attempt" => Kind::NetAttempt,
            "lint.verdict" => Kind::LintVerdict,
            "approval" => Kind::Approval,
            "audit.recovered" => Kind::AuditRecovered,
            other => Kind::Other(other.to_string()),
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(s.parse().unwrap_or_else(|e: std::convert::Infallible| match e {}))
    }
}

/// One record as stored and as `axp audit tail --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Dense from 0 across all segments.
    pub seq: u64,
    /// Wall-clock time of the append, ms since the Unix epoch.
    pub ts_ms: u64,
    pub kind: Kind,
    /// The session concerned, if any.
    pub session: Option<String>,
    /// Who acted: `operator`, `agent`, `gateway`, a provider id…
    pub actor: String,
    /// Kind-specific facts, with object keys sorted.
    pub detail: Value,
    /// The previous record's hash ([`GENESIS_HASH`] for record 0).
    pub prev_hash: String,
    /// SHA-256 over the previous hash and this record's canonical bytes, hex.
    pub hash: String,
}

/// The hashed part of a record (everything but `hash`), in the stored field order.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    seq: u64,
    ts_ms: u64,
    kind: Kind,
    session: Option<String>,
    actor: String,
    detail: Value,
    prev_hash: String,
}

/// `value` with every object's keys sorted (recursively), so equal data has equal bytes.
pub fn canonicalize(value: &Value) -> Value {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), canonicalize(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonicalize).collect()),
        other => other.clone(),
    }
}

/// SHA-256 (hex) of the canonical JSON of `value`: what a `tool.call` record stores instead of
/// the arguments, so the log proves what was called without keeping secrets passed to tools.
pub fn digest_json(value: &Value) -> String {
    hex::encode(Sha256::digest(canonicalize(value).to_string().as_bytes()))
}

fn chain_hash(prev_hex: &str, body: &[u8]) -> Option<String> {
    let prev = hex::decode(prev_hex).ok().filter(|p| p.len() == 32)?;
    let mut h = Sha256::new();
    h.update(&prev);
    h.update(body);
    Some(hex::encode(h.finalize()))
}

/// Builds the record that follows `prev_hash` and its line (with the trailing newline).
pub(crate) fn seal(
    seq: u64,
    ts_ms: u64,
    kind: Kind,
    session: Option<String>,
    actor: String,
    detail: &Value,
    prev_hash: String,
) -> (Record, Vec<u8>) {
    let body = Body { seq, ts_ms, kind, session, actor, detail: canonicalize(detail), prev_hash };
    // A struct of strings, integers and a `Value` always serialises.
    let bytes = serde_json::to_vec(&body).unwrap_or_else(|e| unreachable!("record body: {e}"));
    let hash =
        chain_hash(&body.prev_hash, &bytes).unwrap_or_else(|| unreachable!("prev_hash is always 64 hex digits here"));
    let mut line = bytes;
    line.pop(); // the closing brace
    line.extend_from_slice(b",\"hash\":\"");
    line.extend_from_slice(hash.as_bytes());
    line.extend_from_slice(b"\"}\n");
    let record = Record {
        seq: body.seq,
        ts_ms: body.ts_ms,
        kind: body.kind,
        session: body.session,
        actor: body.actor,
        detail: body.detail,
        prev_hash: body.prev_hash,
        hash,
    };
    (record, line)
}

/// Why a line is not a sound record on its own (chain links are checked by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineError {
    /// Not a record: bad JSON, missing or extra fields, no hash suffix.
    Unparsable(String),
    /// Parsed, but the stored hash is not the hash of the stored bytes.
    HashMismatch,
}

/// Parses one line (without its newline) and checks its own hash.
pub(crate) fn open_line(line: &[u8]) -> Result<Record, LineError> {
    let n = line.len();
    if n < HASH_SUFFIX_LEN + 2 {
        return Err(LineError::Unparsable("too short to be a record".into()));
    }
    let (head, suffix) = line.split_at(n - HASH_SUFFIX_LEN);
    let hash = suffix
        .strip_prefix(b",\"hash\":\"")
        .and_then(|s| s.strip_suffix(b"\"}"))
        .filter(|h| h.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b)))
        .ok_or_else(|| LineError::Unparsable("it does not end with its hash".into()))?;
    let hash = String::from_utf8_lossy(hash).into_owned();
    let mut body_bytes = head.to_vec();
    body_bytes.push(b'}');
    let body: Body =
        serde_json::from_slice(&body_bytes).map_err(|e| LineError::Unparsable(format!("not a record: {e}")))?;
    match chain_hash(&body.prev_hash, &body_bytes) {
        Some(h) if h == hash => {}
        Some(_) => return Err(LineError::HashMismatch),
        None => {
            return Err(LineError::Unparsable("prev_hash is not 64 hex digits".into()));
        }
    }
    Ok(Record {
        seq: body.seq,
        ts_ms: body.ts_ms,
        kind: body.kind,
        session: body.session,
        actor: body.actor,
        detail: body.detail,
        prev_hash: body.prev_hash,
        hash,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sealed_line_opens_to_the_same_record() {
        let (rec, line) = seal(
            3,
            42,
            Kind::ToolCall,
            Some("s_1".into()),
            "agent".into(),
            &json!({"z": 1, "a": {"y": 2.5, "b": [3, {"k": "v", "c": null}]}}),
            GENESIS_HASH.into(),
        );
        assert_eq!(line.last(), Some(&b'\n'));
        let opened = open_line(&line[..line.len() - 1]).unwrap();
        assert_eq!(opened, rec);
        let text = String::from_utf8(line).unwrap();
        assert!(text.starts_with(r#"{"seq":3,"ts_ms":42,"kind":"tool.call","session":"s_1","actor":"agent","detail":{"a":{"b":[3,{"c":null,"k":"v"}],"y":2.5},"z":1}"#), "{text}");
        // The Record's own serialisation is the stored line.
        assert_eq!(serde_json::to_string(&rec).unwrap(), text.trim_end());
    }

    #[test]
    fn any_edit_breaks_the_hash() {
        let (_, line) =
            seal(0, 1, Kind::Command, None, "gateway".into(), &json!({"argv": ["ls"]}), GENESIS_HASH.into());
        let line = &line[..line.len() - 1];
        let edited = String::from_utf8(line.to_vec()).unwrap().replace("\"ls\"", "\"rm\"");
        assert_eq!(open_line(edited.as_bytes()), Err(LineError::HashMismatch));
        assert!(matches!(open_line(b"garbage"), Err(LineError::Unparsable(_))));
    }

    #[test]
    fn digests_ignore_key_order() {
        assert_eq!(digest_json(&json!({"a": 1, "b": [1, 2]})), digest_json(&json!({"b": [1, 2], "a": 1})));
        assert_ne!(digest_json(&json!({"a": 1})), digest_json(&json!({"a": 2})));
        assert_eq!(digest_json(&json!({})).len(), 64);
    }

    #[test]
    fn unknown_kinds_survive() {
        let k: Kind = serde_json::from_str("\"job.park\"").unwrap();
        assert_eq!(k, Kind::Other("job.park".into()));
        assert_eq!(serde_json::to_string(&k).unwrap(), "\"job.park\"");
        let k: Kind = serde_json::from_str("\"tool.call\"").unwrap();
        assert_eq!(k, Kind::ToolCall);
    }
}
