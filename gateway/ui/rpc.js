// The console's only way to the gateway: JSON-RPC POSTs to /axp on this origin, with the
// operator's credentials sent by this code and never by the browser on its own (no cookie, no
// URL parameter). Two credentials, kept apart:
//  * the operator's bearer token (sessionStorage, this tab only), sent as `Authorization` to
//    open sessions — the credential clients that open sessions also hold;
//  * the operator's Ed25519 signing key, imported as a non-extractable CryptoKey (the page can
//    sign with it but never read it back) and kept in IndexedDB under this tab's id, so a reload
//    keeps it, until sign-out or for 12 hours at most; every operator method (`console.*`, `job.pending`, `job.approve`, `job.deny`,
//    `cap.revoke`) is sent as a signed, single-use envelope (docs/protocol.md).
// A session's capability token, for sessions the console opened, is kept in sessionStorage and
// sent as `Axp-Capability` (job.start, job.attach, session.close).

const enc = new TextEncoder();
let nextId = 0;

export class RpcError extends Error {
  constructor(e) {
    super(e.message || 'request failed');
    this.code = e.code;
    this.data = e.data || {};
  }
  get reason() {
    return this.data.reason || this.message;
  }
}

export const store = {
  get bearer() { return sessionStorage.getItem('axp.bearer') || ''; },
  get operator() { return sessionStorage.getItem('axp.operator') || ''; },
  tokens() {
    try { return JSON.parse(sessionStorage.getItem('axp.tokens') || '{}'); } catch { return {}; }
  },
  addToken(sessionId, token) {
    const t = store.tokens();
    t[sessionId] = token;
    sessionStorage.setItem('axp.tokens', JSON.stringify(t));
  },
  dropToken(sessionId) {
    const t = store.tokens();
    delete t[sessionId];
    sessionStorage.setItem('axp.tokens', JSON.stringify(t));
  },
};

/** One JSON-RPC request; resolves to its result or throws an RpcError. */
export async function rpc(method, params = {}, opts = {}) {
  const headers = { 'content-type': 'application/json', accept: 'application/json' };
  if (store.bearer) headers.authorization = `Bearer ${store.bearer}`;
  if (opts.token) headers['axp-capability'] = opts.token;
  let resp;
  try {
    resp = await fetch('/axp', {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', id: ++nextId, method, params }),
      credentials: 'omit',
      cache: 'no-store',
      signal: opts.signal,
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new RpcError({ code: -32603, message: `the gateway cannot be reached (${e.message})` });
  }
  let body;
  try {
    body = await resp.json();
  } catch {
    throw new RpcError({ code: -32603, message: `HTTP ${resp.status} without a JSON-RPC answer` });
  }
  if (body.error) throw new RpcError(body.error);
  return body.result;
}

// ---- the signing key ----

function b64urlDecode(text) {
  const s = text.trim().replace(/=+$/, '').replace(/-/g, '+').replace(/_/g, '/');
  const bin = atob(s + '='.repeat((4 - (s.length % 4)) % 4));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

function b64url(bytes) {
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/**
 * Imports an operator key file (base64 PKCS#8 Ed25519, as `operator.key` holds it) as a
 * non-extractable signing key. The file may be PKCS#8 v2 (with the public key, what the gateway
 * writes), which WebCrypto does not take everywhere, so the 32-byte seed is rewrapped as v1.
 */
export async function importKey(text) {
  let der;
  try {
    der = b64urlDecode(text);
  } catch {
    throw new Error('the key is not base64 (give the operator.key file or its text)');
  }
  let seed = null;
  for (let i = 0; i + 36 <= der.length; i++) {
    if (der[i] === 0x04 && der[i + 1] === 0x22 && der[i + 2] === 0x04 && der[i + 3] === 0x20) {
      seed = der.slice(i + 4, i + 36);
      break;
    }
  }
  const ed25519Oid = [0x06, 0x03, 0x2b, 0x65, 0x70];
  const hasOid = der.some((_, i) => ed25519Oid.every((b, j) => der[i + j] === b));
  if (!seed || !hasOid) throw new Error('this is not an Ed25519 PKCS#8 key');
  const v1 = new Uint8Array([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70,
    0x04, 0x22, 0x04, 0x20, ...seed]);
  seed.fill(0);
  return crypto.subtle.importKey('pkcs8', v1, { name: 'Ed25519' }, false, ['sign']);
}

function idb() {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open('axp-console', 1);
    r.onupgradeneeded = () => r.result.createObjectStore('keys');
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

async function idbDo(mode, f) {
  const db = await idb();
  try {
    return await new Promise((resolve, reject) => {
      const tx = db.transaction('keys', mode);
      const req = f(tx.objectStore('keys'));
      tx.oncomplete = () => resolve(req.result);
      tx.onerror = () => reject(tx.error);
    });
  } finally {
    db.close();
  }
}

let signingKey = null;

/** How long a stored key outlives its tab at most (a closed tab cannot remove its own). */
const KEY_LIFETIME_MS = 12 * 3600 * 1000;

/** This tab's name for its key: sessionStorage is per tab, IndexedDB per origin. */
function tabKeyName() {
  let id = sessionStorage.getItem('axp.tab');
  if (!id) {
    id = b64url(crypto.getRandomValues(new Uint8Array(12)));
    sessionStorage.setItem('axp.tab', id);
  }
  return `signing.${id}`;
}

/** Removes the keys of tabs signed in more than KEY_LIFETIME_MS ago. */
async function purgeOldKeys() {
  const now = Date.now();
  await idbDo('readwrite', (s) => {
    const cursor = s.openCursor();
    cursor.onsuccess = () => {
      const c = cursor.result;
      if (!c) return;
      if (!(c.value && c.value.until > now)) c.delete();
      c.continue();
    };
    return cursor;
  }).catch(() => {});
}

/** The signing key of this tab's sign-in, if any. */
export async function loadKey() {
  await purgeOldKeys();
  if (!store.operator) return null;
  const entry = await idbDo('readonly', (s) => s.get(tabKeyName())).catch(() => null);
  signingKey = entry && entry.until > Date.now() ? entry.key : null;
  return signingKey;
}

export async function signIn(bearer, operator, key) {
  sessionStorage.setItem('axp.bearer', bearer);
  sessionStorage.setItem('axp.operator', operator);
  signingKey = key;
  await idbDo('readwrite', (s) => s.put({ key, until: Date.now() + KEY_LIFETIME_MS }, tabKeyName()));
}

export async function signOut() {
  signingKey = null;
  const name = tabKeyName();
  sessionStorage.clear();
  await idbDo('readwrite', (s) => s.delete(name)).catch(() => {});
}

/**
 * An operator method as a signed envelope: Ed25519 over
 * "axp-envelope-v1\n" + operator + "\n" + method + "\n" + ts_ms + "\n" + nonce + "\n" + params,
 * params being the exact JSON text sent. The nonce is 18 random bytes; the gateway accepts
 * each nonce once, within ±120 s of its clock.
 */
export async function signed(method, params = {}, opts = {}) {
  if (!signingKey) throw new RpcError({ code: -32001, message: 'no signing key: sign in again' });
  const operator = store.operator;
  const text = JSON.stringify(params);
  const ts = Date.now();
  const nonce = b64url(crypto.getRandomValues(new Uint8Array(18)));
  const msg = `axp-envelope-v1\n${operator}\n${method}\n${ts}\n${nonce}\n${text}`;
  const sig = new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, signingKey, enc.encode(msg)));
  const envelope = { operator, method, params: text, ts_ms: ts, nonce, sig: b64url(sig) };
  return rpc(method, { envelope }, opts);
}
