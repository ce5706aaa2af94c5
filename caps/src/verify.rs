//! Verification: the MAC chain with the root key, the covering relation down the chain, expiry,
//! session binding and the revocation set, with a bounded cache of tokens whose chain already
//! verified. It must never let the cache skip the checks that change over time (expiry,
//! revocation, session): a cache hit saves only the MAC and the parsing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use axp_protocol::CapabilitySet;
use sha2::{Digest, Sha256};

use crate::token::{TokenError, chain_verifies, decode_blocks, decode_raw, key_id};

/// Default number of verified tokens kept (across two generations, see [`Verifier`]).
pub const DEFAULT_CACHE_CAPACITY: usize = 4096;

/// A token whose chain verified. Shared (`Arc`) so a cache hit costs no copy of the grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The session the token was minted for.
    pub session_id: String,
    /// The effective grants (the last block's).
    pub caps: CapabilitySet,
    /// The effective expiry (ms since the epoch).
    pub expires_ms: u64,
    /// The token's own revocation id (its last block's).
    pub token_id: String,
    /// The minted root block's id; revoking it revokes every token derived from it.
    pub root_id: String,
    /// Number of attenuations (0 for a minted token).
    pub depth: usize,
    /// Every id in the chain, root first.
    pub chain_ids: Vec<String>,
}

/// Two generations of a hash map: inserts go to `young`; when it is full, `old` is dropped and
/// `young` becomes `old`. A hit in `old` is promoted. This bounds memory at twice the capacity
/// and keeps recently used entries, with no dependency and O(1) work per call (a hand-rolled
/// approximation of LRU; an exact LRU would need a linked list for little gain here).
#[derive(Default)]
struct Cache {
    young: HashMap<[u8; 32], Arc<Verified>>,
    old: HashMap<[u8; 32], Arc<Verified>>,
}

/// Verifies tokens minted with one root key. `Send + Sync`; share it behind an `Arc`.
pub struct Verifier {
    key: [u8; 32],
    kid: String,
    capacity: usize,
    cache: Mutex<Cache>,
    revoked: RwLock<HashSet<String>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier").field("kid", &self.kid).field("capacity", &self.capacity).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Poisoning only means a thread panicked while holding the lock; the cache stays coherent
    // (every operation on it is a single insert or remove).
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Verifier {
    /// A verifier for `root_key` with the default cache capacity.
    pub fn new(root_key: [u8; 32]) -> Self {
        Self::with_cache_capacity(root_key, DEFAULT_CACHE_CAPACITY)
    }

    /// A verifier keeping up to `capacity` recently verified tokens per generation (0 disables
    /// the cache).
    pub fn with_cache_capacity(root_key: [u8; 32], capacity: usize) -> Self {
        Self {
            kid: key_id(&root_key),
            key: root_key,
            capacity,
            cache: Mutex::new(Cache::default()),
            revoked: RwLock::new(HashSet::new()),
        }
    }

    /// Verifies `token` at time `now_ms`: genuine chain, every block narrowing its parent, not
    /// expired, no id in the chain revoked. Does not check the session; see
    /// [`Verifier::verify_for_session`].
    pub fn verify(&self, token: &str, now_ms: u64) -> Result<Arc<Verified>, TokenError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let v = match self.cache_get(&digest) {
            Some(v) => v,
            None => {
                let v = Arc::new(self.verify_chain(token)?);
                self.cache_put(digest, v.clone());
                v
            }
        };
        if now_ms >= v.expires_ms {
            return Err(TokenError::Expired { expires_ms: v.expires_ms });
        }
        {
            let revoked = self.revoked.read().unwrap_or_else(PoisonError::into_inner);
            if !revoked.is_empty()
                && let Some(id) = v.chain_ids.iter().find(|id| revoked.contains(*id))
            {
                return Err(TokenError::Revoked { token_id: id.clone() });
            }
        }
        Ok(v)
    }

    /// [`Verifier::verify`] and checks that the token was minted for `session_id`.
    pub fn verify_for_session(&self, token: &str, session_id: &str, now_ms: u64) -> Result<Arc<Verified>, TokenError> {
        let v = self.verify(token, now_ms)?;
        if v.session_id != session_id {
            return Err(TokenError::WrongSession {
                token_session: v.session_id.clone(),
                expected: session_id.to_string(),
            });
        }
        Ok(v)
    }

    /// The uncached work: decode, MAC chain, then shape and narrowing.
    fn verify_chain(&self, token: &str) -> Result<Verified, TokenError> {
        let (raw, tag) = decode_raw(token)?;
        if !chain_verifies(&self.key, &raw, &tag) {
            return Err(TokenError::Forged);
        }
        let t = decode_blocks(raw, tag)?;
        // The MAC already binds the key id; a mismatch means the key file was replaced by one
        // that happens to produce the same MAC, which cannot happen, so treat it as forged.
        if t.kid() != self.kid {
            return Err(TokenError::Forged);
        }
        t.check_narrowing()?;
        Ok(Verified {
            session_id: t.session_id().to_string(),
            caps: t.caps().clone(),
            expires_ms: t.expires_ms(),
            token_id: t.token_id().to_string(),
            root_id: t.root_id().to_string(),
            depth: t.depth(),
            chain_ids: t.chain_ids().map(str::to_string).collect(),
        })
    }

    /// Revokes `token_id` (any block's id): the token with that id and every token derived from
    /// it fail from the next verification on. Returns `false` when it was already revoked.
    /// The set lives in memory; the caller persists it (and reloads it with
    /// [`Verifier::extend_revoked`]) so revocation survives a restart.
    pub fn revoke(&self, token_id: &str) -> bool {
        self.revoked.write().unwrap_or_else(PoisonError::into_inner).insert(token_id.to_string())
    }

    /// Adds many revoked ids at once (e.g. loaded from the store at start-up).
    pub fn extend_revoked<I: IntoIterator<Item = String>>(&self, ids: I) {
        self.revoked.write().unwrap_or_else(PoisonError::into_inner).extend(ids);
    }

    /// Whether `token_id` is in the revocation set.
    pub fn is_revoked(&self, token_id: &str) -> bool {
        self.revoked.read().unwrap_or_else(PoisonError::into_inner).contains(token_id)
    }

    /// The revocation set, sorted.
    pub fn revoked_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> =
            self.revoked.read().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect();
        ids.sort();
        ids
    }

    /// Number of cached verified tokens (both generations).
    pub fn cached(&self) -> usize {
        let c = lock(&self.cache);
        c.young.len() + c.old.len()
    }

    fn cache_get(&self, digest: &[u8; 32]) -> Option<Arc<Verified>> {
        if self.capacity == 0 {
            return None;
        }
        let mut c = lock(&self.cache);
        if let Some(v) = c.young.get(digest) {
            return Some(v.clone());
        }
        let v = c.old.remove(digest)?;
        Self::insert(&mut c, self.capacity, *digest, v.clone());
        Some(v)
    }

    fn cache_put(&self, digest: [u8; 32], v: Arc<Verified>) {
        if self.capacity == 0 {
            return;
        }
        let mut c = lock(&self.cache);
        Self::insert(&mut c, self.capacity, digest, v);
    }

    fn insert(c: &mut Cache, capacity: usize, digest: [u8; 32], v: Arc<Verified>) {
        if c.young.len() >= capacity {
            c.old = std::mem::take(&mut c.young);
        }
        c.young.insert(digest, v);
    }
}
