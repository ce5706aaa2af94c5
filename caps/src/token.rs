//! The token format: blocks, the HMAC chain, the string encoding, minting, offline attenuation
//! and unverified inspection. Nothing here consults a revocation set, a clock or a cache; that is
//! `verify.rs`. The only secret-holding type is [`Minter`]; attenuation needs no key.

use std::fmt;
use std::str::FromStr;

use axp_protocol::{Capability, CapabilitySet, ErrorCode, RpcError};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Every token string starts with this; the digit is the format version.
pub const TOKEN_PREFIX: &str = "axp1.";
/// Longest token string accepted (bytes). Bounds the work an unauthenticated caller can cause.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
/// Most blocks in one chain (the minted block plus 15 attenuations).
pub const MAX_BLOCKS: usize = 16;
/// Domain separation for the first MAC, so a root key used elsewhere cannot be confused with it.
const ROOT_DOMAIN: &[u8] = b"axp1\0";

/// Why a token was refused. Every variant maps to JSON-RPC `-32001 Unauthorized`
/// ([`TokenError::to_rpc_error`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a well-formed token: wrong prefix, bad base64 or JSON, an unknown field, an invalid
    /// grant, a missing session, too long or too many blocks. The string says which.
    #[error("malformed capability token: {0}")]
    Malformed(String),
    /// The MAC chain does not verify: a byte was changed, a block removed or reordered, or the
    /// token was minted with another root key.
    #[error("forged capability token: its signature chain does not verify")]
    Forged,
    /// A block (appended by hand, since [`attenuate`] refuses) claims more than its parent: a
    /// grant the parent does not cover, or a later expiry.
    #[error("capability token widens its parent at block {depth}: {detail}")]
    Widened {
        /// Index of the offending block (1 = first attenuation).
        depth: usize,
        /// What it claims that the parent does not grant.
        detail: String,
    },
    /// The token's expiry (the last block's) has passed.
    #[error("capability token expired at {expires_ms} ms since the epoch")]
    Expired {
        /// When it expired.
        expires_ms: u64,
    },
    /// The token or one of its ancestors was revoked.
    #[error("capability token was revoked (id {token_id})")]
    Revoked {
        /// The revoked id found in the chain (the token's own or an ancestor's).
        token_id: String,
    },
    /// The token belongs to another session than the one the request names.
    #[error("capability token belongs to session `{token_session}`, not `{expected}`")]
    WrongSession {
        /// The session the token was minted for.
        token_session: String,
        /// The session the request named.
        expected: String,
    },
}

impl TokenError {
    /// The wire error: `-32001 Unauthorized` with a reason a person can act on.
    pub fn to_rpc_error(&self) -> RpcError {
        let reason = match self {
            TokenError::Malformed(why) => format!(
                "the capability token is malformed ({why}); present the `cap_token` returned by session.open or cap.attenuate"
            ),
            TokenError::Forged => "the capability token is forged or damaged (its signature chain does not verify); present the token exactly as issued".to_string(),
            TokenError::Widened { depth, detail } => format!(
                "the capability token's attenuation block {depth} widens its parent ({detail}); attenuation can only narrow grants"
            ),
            TokenError::Expired { .. } => {
                "the capability token has expired; open a new session or ask for a fresh token".to_string()
            }
            TokenError::Revoked { token_id } => format!(
                "the capability token was revoked (id {token_id}); ask the operator for a new one"
            ),
            TokenError::WrongSession { .. } => {
                "the capability token belongs to another session; present this session's token".to_string()
            }
        };
        RpcError::new(ErrorCode::Unauthorized, reason)
    }
}

/// Why [`attenuate`] refused to mint a child.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttenuateError {
    /// The child asks for a grant the parent does not cover.
    #[error("`{grant}` is not covered by the parent token's grants; a child can only narrow them")]
    Widening {
        /// The first uncovered grant.
        grant: Capability,
    },
    /// The child asks to live longer than the parent.
    #[error("the child expiry {asked_ms} is later than the parent's {parent_ms}")]
    ExpiryExtended {
        /// The parent's expiry.
        parent_ms: u64,
        /// The expiry asked for.
        asked_ms: u64,
    },
    /// The chain already has [`MAX_BLOCKS`] blocks.
    #[error("the token already has {MAX_BLOCKS} blocks; attenuate an earlier token instead")]
    TooDeep,
}

/// One block as it is MACed and encoded. Unknown fields are refused: a verifier must never
/// ignore a restriction it does not understand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Block {
    /// This block's random id (128 bits, hex): the revocation id.
    id: String,
    /// The session (block 0 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sid: Option<String>,
    /// Which root key minted the chain (block 0 only); lets the gateway rotate keys later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kid: Option<String>,
    /// Expiry in ms since the Unix epoch.
    exp: u64,
    /// The grants, as grammar strings.
    caps: CapabilitySet,
}

/// A decoded, *unverified* token: its blocks, their exact encoded bytes and the final MAC.
/// Obtained from [`Minter::mint`], [`attenuate`] or [`Token::parse`]; only
/// [`crate::Verifier::verify`] says whether it is genuine.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    blocks: Vec<Block>,
    /// The exact JSON bytes of each block; the MAC covers these, so they are kept verbatim.
    raw: Vec<Vec<u8>>,
    tag: [u8; 32],
}

impl fmt::Debug for Token {
    // The tag is the bearer secret that lets anyone attenuate; keep it out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("session_id", &self.session_id())
            .field("token_id", &self.token_id())
            .field("depth", &self.depth())
            .field("expires_ms", &self.expires_ms())
            .field("caps", &self.caps().to_strings())
            .finish_non_exhaustive()
    }
}

fn new_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// The key id printed in block 0: 8 hex digits of a hash of the key (not reversible).
pub(crate) fn key_id(root_key: &[u8; 32]) -> String {
    let mut h = Sha256::new();
    h.update(b"axp1 key id\0");
    h.update(root_key);
    hex::encode(&h.finalize()[..4])
}

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail; the fallback keeps `unwrap` out.
    let mut m =
        <HmacSha256 as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for p in parts {
        m.update(p);
    }
    m
}

fn to_array(out: &[u8]) -> [u8; 32] {
    let mut a = [0u8; 32];
    a.copy_from_slice(out);
    a
}

/// Recomputes the chain over `raw` with `root_key` and compares the result with `tag` in
/// constant time.
pub(crate) fn chain_verifies(root_key: &[u8; 32], raw: &[Vec<u8>], tag: &[u8; 32]) -> bool {
    let Some((last, init)) = raw.split_last() else {
        return false;
    };
    let mut sig: Option<[u8; 32]> = None;
    let step = |sig: &Option<[u8; 32]>, block: &[u8]| match sig {
        None => mac(root_key, &[ROOT_DOMAIN, block]),
        Some(s) => mac(s, &[block]),
    };
    for block in init {
        sig = Some(to_array(&step(&sig, block).finalize().into_bytes()));
    }
    step(&sig, last).verify_slice(tag).is_ok()
}

fn encode_block(b: &Block) -> Vec<u8> {
    // Serialising a struct of strings, integers and a string list cannot fail.
    serde_json::to_vec(b).unwrap_or_else(|e| unreachable!("a token block serialises: {e}"))
}

/// Mints root tokens. Holds the root key; share it only with the [`crate::Verifier`].
pub struct Minter {
    key: [u8; 32],
    kid: String,
}

impl fmt::Debug for Minter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Minter").field("kid", &self.kid).finish_non_exhaustive()
    }
}

impl Minter {
    /// A minter for `root_key` (see [`crate::load_or_create_root_key`]).
    pub fn new(root_key: [u8; 32]) -> Self {
        Self { kid: key_id(&root_key), key: root_key }
    }

    /// A root token for `session_id` granting `caps` until `expires_ms` (ms since the epoch).
    pub fn mint(&self, session_id: &str, caps: &CapabilitySet, expires_ms: u64) -> Token {
        let block = Block {
            id: new_id(),
            sid: Some(session_id.to_string()),
            kid: Some(self.kid.clone()),
            exp: expires_ms,
            caps: caps.clone(),
        };
        let raw = encode_block(&block);
        let tag = to_array(&mac(&self.key, &[ROOT_DOMAIN, &raw]).finalize().into_bytes());
        Token { blocks: vec![block], raw: vec![raw], tag }
    }
}

/// Mints a child of `parent` granting `caps` (each covered by the parent's effective grants)
/// until `expires_ms` (`None`: the parent's expiry; a later one is refused). Needs no key: any
/// holder can do it offline. The child gets its own random revocation id.
pub fn attenuate(parent: &Token, caps: &CapabilitySet, expires_ms: Option<u64>) -> Result<Token, AttenuateError> {
    if parent.blocks.len() >= MAX_BLOCKS {
        return Err(AttenuateError::TooDeep);
    }
    if let Some(grant) = parent.caps().first_uncovered(caps) {
        return Err(AttenuateError::Widening { grant: grant.clone() });
    }
    let parent_ms = parent.expires_ms();
    let exp = match expires_ms {
        None => parent_ms,
        Some(asked_ms) if asked_ms > parent_ms => {
            return Err(AttenuateError::ExpiryExtended { parent_ms, asked_ms });
        }
        Some(asked_ms) => asked_ms,
    };
    let block = Block { id: new_id(), sid: None, kid: None, exp, caps: caps.clone() };
    let raw = encode_block(&block);
    let tag = to_array(&mac(&parent.tag, &[&raw]).finalize().into_bytes());
    let mut child = parent.clone();
    child.blocks.push(block);
    child.raw.push(raw);
    child.tag = tag;
    Ok(child)
}

/// Splits and base64-decodes a token string without interpreting the blocks, so the MAC can be
/// checked before any JSON is trusted.
pub(crate) fn decode_raw(s: &str) -> Result<(Vec<Vec<u8>>, [u8; 32]), TokenError> {
    let malformed = |why: &str| TokenError::Malformed(why.to_string());
    if s.len() > MAX_TOKEN_LEN {
        return Err(malformed("longer than 16 KiB"));
    }
    let body = s.strip_prefix(TOKEN_PREFIX).ok_or_else(|| malformed("it does not start with `axp1.`"))?;
    let mut parts: Vec<&str> = body.split('.').collect();
    let tag_b64 = parts.pop().unwrap_or_default();
    if parts.is_empty() {
        return Err(malformed("it has no blocks"));
    }
    if parts.len() > MAX_BLOCKS {
        return Err(malformed("it has more than 16 blocks"));
    }
    let tag = URL_SAFE_NO_PAD
        .decode(tag_b64)
        .ok()
        .filter(|t| t.len() == 32)
        .ok_or_else(|| malformed("its signature is not 32 bytes of base64url"))?;
    let raw = parts
        .iter()
        .map(|p| URL_SAFE_NO_PAD.decode(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| malformed("a block is not base64url"))?;
    Ok((raw, to_array(&tag)))
}

/// Interprets decoded blocks and checks their shape (not the MAC, not the covering relation).
pub(crate) fn decode_blocks(raw: Vec<Vec<u8>>, tag: [u8; 32]) -> Result<Token, TokenError> {
    let mut blocks = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let b: Block = serde_json::from_slice(r)
            .map_err(|e| TokenError::Malformed(format!("block {i} is not a valid block: {e}")))?;
        if !crate::revocations::is_token_id(&b.id) {
            return Err(TokenError::Malformed(format!("block {i} has an id that is not 32 hex digits")));
        }
        if i == 0 && (b.sid.is_none() || b.kid.is_none()) {
            return Err(TokenError::Malformed("block 0 names no session or key".to_string()));
        }
        if i > 0 && (b.sid.is_some() || b.kid.is_some()) {
            return Err(TokenError::Malformed(format!("attenuation block {i} must not name a session or key")));
        }
        blocks.push(b);
    }
    Ok(Token { blocks, raw, tag })
}

impl Token {
    /// Decodes a token string. This checks the shape only: it does **not** verify the MAC.
    pub fn parse(s: &str) -> Result<Token, TokenError> {
        let (raw, tag) = decode_raw(s)?;
        decode_blocks(raw, tag)
    }

    /// The session the token was minted for.
    pub fn session_id(&self) -> &str {
        self.blocks[0].sid.as_deref().unwrap_or_default()
    }

    /// The effective grants: the last block's.
    pub fn caps(&self) -> &CapabilitySet {
        &self.last().caps
    }

    /// The effective expiry: the last block's (ms since the epoch).
    pub fn expires_ms(&self) -> u64 {
        self.last().exp
    }

    /// This token's own revocation id (its last block's id).
    pub fn token_id(&self) -> &str {
        &self.last().id
    }

    /// The revocation id of the minted root block.
    pub fn root_id(&self) -> &str {
        &self.blocks[0].id
    }

    /// Every revocation id in the chain, root first.
    pub fn chain_ids(&self) -> impl Iterator<Item = &str> {
        self.blocks.iter().map(|b| b.id.as_str())
    }

    /// Number of attenuations (0 for a minted token).
    pub fn depth(&self) -> usize {
        self.blocks.len() - 1
    }

    /// [`attenuate`] as a method.
    pub fn attenuate(&self, caps: &CapabilitySet, expires_ms: Option<u64>) -> Result<Token, AttenuateError> {
        attenuate(self, caps, expires_ms)
    }

    fn last(&self) -> &Block {
        // A token always has at least one block: every constructor guarantees it.
        &self.blocks[self.blocks.len() - 1]
    }

    pub(crate) fn kid(&self) -> &str {
        self.blocks[0].kid.as_deref().unwrap_or_default()
    }

    /// Checks the covering relation and monotone expiry down the chain.
    pub(crate) fn check_narrowing(&self) -> Result<(), TokenError> {
        for (i, pair) in self.blocks.windows(2).enumerate() {
            let (parent, child) = (&pair[0], &pair[1]);
            if let Some(grant) = parent.caps.first_uncovered(&child.caps) {
                return Err(TokenError::Widened {
                    depth: i + 1,
                    detail: format!("`{grant}` is not covered by its parent"),
                });
            }
            if child.exp > parent.exp {
                return Err(TokenError::Widened {
                    depth: i + 1,
                    detail: format!("expiry {} is later than its parent's {}", child.exp, parent.exp),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(TOKEN_PREFIX)?;
        for r in &self.raw {
            f.write_str(&URL_SAFE_NO_PAD.encode(r))?;
            f.write_str(".")?;
        }
        f.write_str(&URL_SAFE_NO_PAD.encode(self.tag))
    }
}

impl FromStr for Token {
    type Err = TokenError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Token::parse(s)
    }
}

/// One block as [`inspect`] shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InspectBlock {
    /// 0 for the minted block, then one per attenuation.
    pub depth: usize,
    /// The block's revocation id.
    pub id: String,
    /// The session (block 0 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The minting key's id (block 0 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The block's grants.
    pub capabilities: Vec<String>,
    /// The block's expiry (ms since the epoch).
    pub expires_ms: u64,
}

/// What a token claims, read without any key. `verified` is always `false`: anyone can write a
/// token that inspects well; only the gateway's verifier decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Inspection {
    /// Always `false`; present so JSON consumers cannot mistake this for a verification.
    pub verified: bool,
    pub session_id: String,
    /// The effective grants (the last block's).
    pub capabilities: Vec<String>,
    /// The effective expiry.
    pub expires_ms: u64,
    /// The token's own revocation id.
    pub token_id: String,
    /// The minted root block's id.
    pub root_id: String,
    /// Number of attenuations.
    pub depth: usize,
    /// Whether each block's grants are covered by its parent's (checkable without a key).
    pub narrowing_ok: bool,
    pub blocks: Vec<InspectBlock>,
}

/// Decodes a token for display (`axp token inspect`) without verifying it.
pub fn inspect(token: &str) -> Result<Inspection, TokenError> {
    let t = Token::parse(token.trim())?;
    Ok(Inspection {
        verified: false,
        session_id: t.session_id().to_string(),
        capabilities: t.caps().to_strings(),
        expires_ms: t.expires_ms(),
        token_id: t.token_id().to_string(),
        root_id: t.root_id().to_string(),
        depth: t.depth(),
        narrowing_ok: t.check_narrowing().is_ok(),
        blocks: t
            .blocks
            .iter()
            .enumerate()
            .map(|(depth, b)| InspectBlock {
                depth,
                id: b.id.clone(),
                session_id: b.sid.clone(),
                key_id: b.kid.clone(),
                capabilities: b.caps.to_strings(),
                expires_ms: b.exp,
            })
            .collect(),
    })
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "UNVERIFIED: decoded without the gateway's key; the gateway alone decides whether this token is genuine, unexpired and unrevoked."
        )?;
        writeln!(f, "session:    {}", self.session_id)?;
        writeln!(f, "token id:   {}", self.token_id)?;
        writeln!(f, "root id:    {}", self.root_id)?;
        writeln!(f, "depth:      {} attenuation(s)", self.depth)?;
        writeln!(f, "expires:    {} (ms since the epoch)", self.expires_ms)?;
        writeln!(f, "grants:")?;
        if self.capabilities.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for c in &self.capabilities {
            writeln!(f, "  {c}")?;
        }
        if !self.narrowing_ok {
            writeln!(f, "WARNING: a block claims more than its parent; the gateway will refuse this token.")?;
        }
        writeln!(f, "chain:")?;
        for b in &self.blocks {
            write!(f, "  [{}] id {} expires {}", b.depth, b.id, b.expires_ms)?;
            if let Some(s) = &b.session_id {
                write!(f, " session {s}")?;
            }
            if let Some(k) = &b.key_id {
                write!(f, " key {k}")?;
            }
            writeln!(f)?;
            writeln!(f, "      {}", b.capabilities.join(", "))?;
        }
        Ok(())
    }
}
