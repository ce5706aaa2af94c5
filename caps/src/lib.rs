//! `axp-caps` owns the capability token (DESIGN §3): minting, offline attenuation by the holder,
//! verification with a revocation set and a verified-token cache, unverified inspection, and the
//! root key file. It carries [`axp_protocol::CapabilitySet`] grants and decides attenuation only
//! through `CapabilitySet::first_uncovered`; it never re-implements the grammar or the covering
//! relation, never does network or database I/O, and never decides policy (which grants a session
//! may have is the gateway's call).
//!
//! # Why an HMAC chain and not biscuit
//!
//! Tokens are macaroon-style HMAC-SHA-256 chains. `biscuit-auth` 6 (public-key, Datalog) was
//! considered: it would let third parties verify without the root key, but it brings
//! `ed25519-dalek`, `p256`, `prost` 0.10, `nom`, `regex` and older duplicates of `sha2`, `rand`,
//! `base64` and `thiserror` into a 2-core build, and its attenuation is Datalog checks rather than
//! our grammar, so "the child's grants are covered by the parent's" would have to be re-expressed
//! in Datalog next to the Rust covering relation, and the two could drift. Only the gateway that
//! minted a token ever verifies it, so a shared secret loses nothing here; HMAC verification is
//! also an order of magnitude cheaper than a signature check. The full record is
//! `docs/decisions/0002-capability-tokens.md`.
//!
//! # Format
//!
//! `axp1.` `B64(block0)` `.` … `B64(blockN)` `.` `B64(tag)`, base64url without padding. Each block
//! is a JSON object `{"id","sid"?,"kid"?,"exp","caps"}`; block 0 (minted with the root key)
//! carries the session id and a key id, every later block is an attenuation appended by a holder.
//! The chain is `sig0 = HMAC(root_key, "axp1\0" ‖ block0)`, `sig_i = HMAC(sig_{i-1}, block_i)`,
//! and the token carries only `tag = sig_N`. A holder can therefore append a block (they know
//! `sig_N`) but cannot remove or edit one (that needs an earlier `sig`, which HMAC does not
//! reveal). Verification recomputes the chain with the root key, then checks that every block's
//! grants are covered by the previous block's and that expiry never increases; the effective
//! grants are the last block's. Every block has its own random id, and revoking any id in a
//! chain revokes the token, so revoking a parent revokes all of its descendants.

mod key;
mod revocations;
mod token;
mod verify;

pub use key::{KEY_FILE_NAME, KeyError, load_or_create_root_key, load_root_key};
pub use revocations::{REVOCATIONS_FILE_NAME, RevocationError};
pub use token::{
    AttenuateError, InspectBlock, Inspection, MAX_BLOCKS, MAX_TOKEN_LEN, Minter, TOKEN_PREFIX, Token, TokenError,
    attenuate, inspect,
};
pub use verify::{DEFAULT_CACHE_CAPACITY, Verified, Verifier};
