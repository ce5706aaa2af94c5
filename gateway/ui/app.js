// The console's entry: sign-in, navigation by the URL hash (#sessions, #jobs, #jobs/<id>/<seq>,
// #approvals, #audit, #catalog) and the life of the page shown. Pages live in views.js.

import { importKey, loadKey, rpc, signIn, signOut, signed, store } from './rpc.js';
import { pages } from './views.js';

const $ = (id) => document.getElementById(id);

// Everything a page starts (timers, long polls) is tied to its Life and stops when the page is
// left, so a page that is not shown sends nothing.
class Life {
  constructor() {
    this.ctrl = new AbortController();
    this.timers = [];
  }
  get signal() { return this.ctrl.signal; }
  get over() { return this.ctrl.signal.aborted; }
  every(ms, f) {
    const run = () => { if (!this.over) Promise.resolve(f()).catch(() => {}); };
    this.timers.push(setInterval(run, ms));
  }
  end() {
    this.ctrl.abort();
    this.timers.forEach(clearInterval);
  }
}

let life = null;

function route() {
  const [page, ...rest] = (location.hash.replace(/^#/, '') || 'sessions').split('/');
  return { page: pages[page] ? page : 'sessions', rest };
}

async function show() {
  if (life) life.end();
  life = new Life();
  const { page, rest } = route();
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === page);
  const main = $('main');
  main.replaceChildren();
  try {
    await pages[page](main, life, rest);
  } catch (e) {
    if (e.name !== 'AbortError') {
      const p = document.createElement('p');
      p.className = 'error';
      p.textContent = e.reason || e.message;
      main.append(p);
    }
  }
}

function signedInView() {
  $('login').hidden = true;
  $('nav').hidden = false;
  $('main').hidden = false;
  const out = document.createElement('button');
  out.className = 'secondary';
  out.id = 'signout';
  out.textContent = 'Sign out';
  out.addEventListener('click', async () => {
    await signOut();
    location.hash = '';
    location.reload();
  });
  $('who').replaceChildren(`signed in as ${store.operator}`, out);
  window.addEventListener('hashchange', show);
  show();
}

async function readKeyText() {
  const file = $('keyfile').files[0];
  if (file) return file.text();
  return $('keytext').value;
}

async function onSignIn(ev) {
  ev.preventDefault();
  const err = $('login-error');
  err.textContent = '';
  try {
    const operator = $('operator').value.trim() || 'local';
    const key = await importKey(await readKeyText());
    await signIn($('bearer').value.trim(), operator, key);
    // The key and the operator's name are checked by the gateway at once (a signed read), and
    // the bearer token too when one was given (it is a 401 if unknown).
    await signed('console.catalog');
    if (store.bearer) await rpc('ping');
    $('keytext').value = '';
    $('bearer').value = '';
    signedInView();
  } catch (e) {
    await signOut();
    err.textContent = `Sign-in failed: ${e.reason || e.message}`;
  }
}

async function main() {
  $('login-form').addEventListener('submit', onSignIn);
  if (await loadKey()) {
    signedInView();
  } else {
    $('login').hidden = false;
  }
}

main();
