// The console's pages. Every piece of text from the gateway goes into the page as text
// (textContent, text nodes), never as markup; the CSP's Trusted Types rule makes any markup
// sink throw anyway.

import { RpcError, rpc, signed, store } from './rpc.js';

/** An element with attributes (`on…` are listeners) and children (strings become text). */
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function table(headers, rows, attrs = {}) {
  return el('table', attrs, el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows.map((r) => el('tr', r.attrs || {}, r.cells.map((c) => el('td', {}, c))))));
}

const when = (ms) => (ms ? new Date(ms).toLocaleString() : '');
function inHuman(ms) {
  const s = Math.round((ms - Date.now()) / 1000);
  if (s <= 0) return 'past';
  if (s < 120) return `in ${s} s`;
  if (s < 7200) return `in ${Math.round(s / 60)} min`;
  return `in ${Math.round(s / 3600)} h`;
}
const errText = (e) => (e instanceof RpcError ? `${e.data.name || 'Error'}: ${e.reason}` : e.message);
const json = (v) => JSON.stringify(v, null, 1);

/** A status line a page writes its last outcome to. */
function status(id) {
  const p = el('p', { class: 'status', id });
  p.set = (text, cls = '') => { p.textContent = text; p.className = `status ${cls}`; };
  return p;
}

// ---------------------------------------------------------------- Sessions

async function sessionsPage(main, life) {
  const caps = el('input', { id: 'open-caps', size: 40, value: 'tool(*) proc.spawn' });
  const tier = el('select', { id: 'open-tier' }, el('option', { value: '' }, '(default tier)'),
    ['kernel-lsm', 'process-token', 'container', 'dev-none'].map((t) => el('option', { value: t }, t)));
  const ttl = el('input', { id: 'open-ttl', type: 'number', min: 1, placeholder: 'default', size: 8 });
  const workspace = el('input', { id: 'open-workspace', size: 30, placeholder: '(default workspace)' });
  const st = status('sessions-status');
  const form = el('form', { class: 'row', id: 'open-form', onsubmit: async (ev) => {
    ev.preventDefault();
    const params = {};
    const list = caps.value.split(/[\s,]+/).filter(Boolean);
    if (list.length) params.capabilities = list;
    if (tier.value) params.sandbox_tier = tier.value;
    if (ttl.value) params.ttl_s = Number(ttl.value);
    if (workspace.value) params.workspace = workspace.value;
    try {
      const r = await rpc('session.open', params);
      store.addToken(r.session_id, r.cap_token);
      st.set(`Opened session ${r.session_id} (${r.granted_tier}).`, 'ok');
      await refresh();
    } catch (e) {
      st.set(`session.open refused: ${errText(e)}`, 'error');
    }
  } },
  el('label', {}, 'Capabilities', caps), el('label', {}, 'Tier', tier), el('label', {}, 'TTL (s)', ttl),
  el('label', {}, 'Workspace', workspace), el('button', { type: 'submit', id: 'open-session' }, 'Open session'));
  const holder = el('div', { id: 'sessions-table' });
  main.append(el('div', { class: 'card' }, el('h2', {}, 'Open a session'), form, st),
    el('h2', {}, 'Sessions'), holder);

  async function refresh() {
    const r = await signed('console.sessions', {}, { signal: life.signal });
    const held = store.tokens();
    holder.replaceChildren(table(
      ['Session', 'State', 'Tier', 'Grants', 'Token id', 'Expires', 'Quota use', 'Jobs', ''],
      r.sessions.map((s) => ({
        attrs: { 'data-session': s.session_id },
        cells: [
          el('span', { class: 'mono' }, s.session_id, held[s.session_id] ? el('small', {}, ' (opened here)') : ''),
          el('span', { class: s.state === 'open' ? 'ok' : 'warn' }, s.state),
          s.tier,
          el('pre', {}, s.capabilities.join('\n')),
          el('span', { class: 'mono' }, s.token_id || ''),
          el('span', { title: when(s.expires_ms) }, s.state === 'open' ? inHuman(s.expires_ms) : when(s.expires_ms)),
          `${s.quota_use.live_jobs} live, ${s.quota_use.calls_last_minute} calls in the last minute`,
          String(s.jobs),
          s.state === 'open' ? actions(s) : '',
        ],
      })),
      { id: 'sessions' },
    ));
  }

  function actions(s) {
    const token = store.tokens()[s.session_id];
    const close = token && el('button', { class: 'secondary', onclick: async () => {
      try {
        await rpc('session.close', {}, { token });
        store.dropToken(s.session_id);
        st.set(`Closed session ${s.session_id}.`, 'ok');
      } catch (e) { st.set(errText(e), 'error'); }
      await refresh();
    } }, 'Close');
    const revoke = s.token_id && el('button', { class: 'danger', onclick: async () => {
      try {
        await signed('cap.revoke', { token_id: s.token_id });
        st.set(`Revoked token ${s.token_id}.`, 'ok');
      } catch (e) { st.set(errText(e), 'error'); }
      await refresh();
    } }, 'Revoke token');
    return el('span', {}, close, ' ', revoke);
  }

  await refresh();
  life.every(5000, refresh);
}

// ---------------------------------------------------------------- Live jobs

function eventNode(e) {
  switch (e.kind) {
    case 'stdout':
    case 'pty':
      return document.createTextNode(e.data);
    case 'stderr':
      return el('span', { class: 'stderr' }, e.data);
    case 'exit':
      return el('span', { class: 'meta' },
        `\n[exit: ${e.state}${e.code !== undefined ? ` code ${e.code}` : ''}${e.signal ? ` signal ${e.signal}` : ''}${e.error ? ` — ${e.error.message}` : ''}]\n`);
    case 'result':
      return el('span', { class: 'meta' }, `[result] ${JSON.stringify(e.output)}\n`);
    case 'log':
      return el('span', { class: 'meta' }, `[${e.level || 'log'}] ${typeof e.data === 'string' ? e.data : JSON.stringify(e.data)}\n`);
    default:
      return el('span', { class: 'meta' }, `[${e.kind}] ${JSON.stringify(e)}\n`);
  }
}

async function jobsPage(main, life, rest) {
  const [jobId, seqText] = rest;
  const st = status('jobs-status');
  const held = store.tokens();
  const sessions = Object.keys(held);
  const sessionSel = el('select', { id: 'start-session' }, sessions.map((s) => el('option', { value: s }, s)));
  const command = el('input', { id: 'start-command', size: 50, placeholder: 'a command, e.g. echo hi' });
  const tool = el('input', { id: 'start-tool', size: 24, placeholder: 'or a tool, e.g. files__list_files' });
  const args = el('input', { id: 'start-args', size: 24, placeholder: '{"path": "."}' });
  const start = el('form', { class: 'row', onsubmit: async (ev) => {
    ev.preventDefault();
    const token = held[sessionSel.value];
    const params = {};
    try {
      if (tool.value.trim()) {
        params.tool = tool.value.trim();
        params.arguments = args.value.trim() ? JSON.parse(args.value) : {};
      } else {
        params.command = command.value;
      }
      const r = await rpc('job.start', params, { token });
      location.hash = `#jobs/${r.job_id}/0`;
    } catch (e) {
      st.set(`job.start refused: ${errText(e)}`, 'error');
    }
  } }, el('label', {}, 'Session', sessionSel), el('label', {}, 'Command', command), el('label', {}, 'Tool', tool),
  el('label', {}, 'Arguments', args), el('button', { type: 'submit', id: 'start-job' }, 'Start job'));
  main.append(el('div', { class: 'card' }, el('h2', {}, 'Start a job'),
    sessions.length ? start : el('p', {}, 'Open a session on the Sessions page to start jobs from here.'), st));

  const list = el('div', { id: 'jobs-table' });
  const detail = el('div', { id: 'job-detail' });
  main.append(detail, el('h2', {}, 'Jobs'), list);
  let jobs = [];

  async function refresh() {
    jobs = (await signed('console.jobs', { limit: 100 }, { signal: life.signal })).jobs;
    list.replaceChildren(table(['Job', 'Session', 'What', 'State', 'Started', 'Events'],
      jobs.map((j) => ({
        attrs: { 'data-job': j.job_id },
        cells: [el('a', { href: `#jobs/${j.job_id}/0` }, j.job_id), el('span', { class: 'mono' }, j.session_id),
          j.tool ? `${j.tool} ${JSON.stringify(j.arguments || {})}` : (Array.isArray(j.command) ? j.command.join(' ') : String(j.command || j.kind)),
          el('span', { class: stateClass(j.state) }, j.state), when(j.created_ms), String(j.next_seq)],
      }))));
  }
  await refresh();
  life.every(4000, refresh);
  if (jobId) await follow(detail, life, jobs.find((j) => j.job_id === jobId), jobId, Number(seqText || 0));
}

const stateClass = (s) => (s === 'running' || s === 'awaiting_approval' ? 'warn' : s === 'exited' ? 'ok' : 'error');

/**
 * Shows one job and follows its log from `from`: with the session's own token through
 * job.attach when the console opened that session, else through the signed console.attach.
 * Each batch moves the seq in the URL (#jobs/<id>/<seq>) and in sessionStorage, so a reload
 * asks for the events after the last one shown, and none twice.
 */
async function follow(detail, life, job, jobId, from) {
  const token = job && store.tokens()[job.session_id];
  const state = el('span', { id: 'job-state', class: stateClass(job ? job.state : '') }, job ? job.state : '?');
  const seqShown = el('span', { id: 'job-seq' }, String(from));
  const log = el('pre', { class: 'log', id: 'job-log' });
  const st = status('job-status');
  const sig = el('select', { id: 'signal-name' }, ['INT', 'TERM', 'HUP', 'USR1', 'KILL'].map((s) => el('option', { value: s }, s)));
  const act = async (f, done) => {
    try { await f(); st.set(done, 'ok'); } catch (e) { st.set(errText(e), 'error'); }
  };
  detail.append(el('div', { class: 'card' },
    el('h2', {}, 'Job ', el('span', { class: 'mono' }, jobId), ' — ', state),
    el('div', { class: 'row' },
      el('button', { class: 'danger', id: 'job-cancel', onclick: () => act(() => signed('console.cancel', { job_id: jobId }), 'Cancel sent.') }, 'Cancel'),
      sig,
      el('button', { class: 'secondary', id: 'job-signal', onclick: () => act(() => signed('console.signal', { job_id: jobId, signal: sig.value }), `SIG${sig.value} sent.`) }, 'Send signal'),
      el('button', { class: 'secondary', id: 'job-replay', onclick: () => { location.hash = `#jobs/${jobId}/0`; } }, 'Replay from the start'),
      el('span', {}, 'next seq: ', seqShown, token ? ' (job.attach with the session token)' : ' (console.attach, signed)')),
    from > 0 ? el('p', { class: 'meta', id: 'job-resumed' }, `Resumed at seq ${from}: the events before it were shown before the reload.`) : '',
    log, st));
  let seq = from;
  for (;;) {
    if (life.over) return;
    let r;
    try {
      const params = { job_id: jobId, from_seq: seq, wait_ms: 10000 };
      r = token ? await rpc('job.attach', params, { token, signal: life.signal }) : await signed('console.attach', params, { signal: life.signal });
    } catch (e) {
      if (e.name === 'AbortError' || life.over) return;
      st.set(errText(e), 'error');
      await new Promise((res) => setTimeout(res, 2000));
      continue;
    }
    for (const e of r.events) {
      log.append(eventNode(e));
      if (e.kind === 'exit') { state.textContent = e.state; state.className = stateClass(e.state); }
    }
    if (r.events.length) log.scrollTop = log.scrollHeight;
    seq = r.next_seq;
    seqShown.textContent = String(seq);
    if (!life.over) {
      history.replaceState(null, '', `#jobs/${jobId}/${seq}`);
      sessionStorage.setItem(`axp.seq.${jobId}`, String(seq));
    }
    if (r.state) { state.textContent = r.state; state.className = stateClass(r.state); }
    if (r.done) {
      log.append(el('span', { class: 'meta', id: 'job-done' }, '[end of log]\n'));
      return;
    }
  }
}

// ---------------------------------------------------------------- Approvals

async function approvalsPage(main, life) {
  const st = status('approvals-status');
  const holder = el('div', { id: 'approvals-table' });
  main.append(el('h2', {}, 'Calls waiting for an operator'),
    el('p', {}, `Each decision is an envelope signed in this page with the key of operator “${store.operator}”; no session token can make one.`),
    st, holder);
  async function refresh() {
    const r = await signed('job.pending', {}, { signal: life.signal });
    if (!r.jobs.length) {
      holder.replaceChildren(el('p', { id: 'no-pending' }, 'Nothing is waiting.'));
      return;
    }
    holder.replaceChildren(table(['Job', 'Session', 'Tool', 'Arguments', 'Since', 'Decision'],
      r.jobs.map((j) => {
        const reason = el('input', { placeholder: 'reason (for a denial)', size: 20, class: 'deny-reason' });
        const decide = async (method, params, done) => {
          try {
            await signed(method, params);
            st.set(done, 'ok');
          } catch (e) { st.set(errText(e), 'error'); }
          await refresh();
        };
        return {
          attrs: { 'data-job': j.job_id },
          cells: [el('span', { class: 'mono' }, j.job_id), el('span', { class: 'mono' }, j.session_id), j.tool,
            el('pre', { class: 'arguments' }, json(j.arguments)), when(j.created_ms),
            el('span', {},
              el('button', { class: 'approve', onclick: () => decide('job.approve', { job_id: j.job_id }, `Approved ${j.job_id}.`) }, 'Approve'), ' ',
              reason, ' ',
              el('button', { class: 'danger deny', onclick: () => decide('job.deny', { job_id: j.job_id, reason: reason.value || 'denied from the console' }, `Denied ${j.job_id}.`) }, 'Deny'))],
        };
      }), { id: 'pending' }));
  }
  await refresh();
  life.every(3000, refresh);
}

// ---------------------------------------------------------------- Audit

async function auditPage(main, life) {
  const kinds = el('input', { id: 'audit-kinds', size: 30, placeholder: 'kinds, e.g. approval tool.call' });
  const session = el('input', { id: 'audit-session', size: 30, placeholder: 'session id' });
  const text = el('input', { id: 'audit-text', size: 20, placeholder: 'contains…' });
  const limit = el('input', { id: 'audit-limit', type: 'number', value: 100, min: 1, max: 1000, size: 6 });
  const verify = el('div', { id: 'audit-verify' });
  const holder = el('div', { id: 'audit-table' });
  const form = el('form', { class: 'row', onsubmit: (ev) => { ev.preventDefault(); refresh(); } },
    el('label', {}, 'Kinds', kinds), el('label', {}, 'Session', session), el('label', {}, 'Text', text),
    el('label', {}, 'Limit', limit), el('button', { type: 'submit', id: 'audit-filter' }, 'Filter'));
  main.append(el('h2', {}, 'Audit log'), verify, form, holder);
  async function refresh() {
    const params = { limit: Number(limit.value) || 100 };
    const k = kinds.value.split(/[\s,]+/).filter(Boolean);
    if (k.length) params.kinds = k;
    if (session.value.trim()) params.session = session.value.trim();
    if (text.value) params.text = text.value;
    const r = await signed('console.audit', params, { signal: life.signal });
    const v = r.verify;
    verify.replaceChildren(v.ok
      ? el('p', { class: 'ok', id: 'chain-status' }, `Chain verifies: ${v.records} records in ${v.segments} segment(s), last hash ${v.last_hash.slice(0, 16)}…${v.unanchored ? ` (${v.unanchored} after HEAD)` : ''}`)
      : el('p', { class: 'error', id: 'chain-status' }, `Chain does NOT verify: ${v.error}`));
    holder.replaceChildren(table(['Seq', 'Time', 'Kind', 'Session', 'Actor', 'Detail'],
      r.records.map((rec) => ({ attrs: { 'data-kind': rec.kind }, cells: [String(rec.seq), when(rec.ts_ms), rec.kind,
        el('span', { class: 'mono' }, rec.session || ''), rec.actor, el('pre', {}, JSON.stringify(rec.detail))] })),
      { id: 'audit' }));
  }
  await refresh();
  life.every(5000, refresh);
}

// ---------------------------------------------------------------- Catalog

async function catalogPage(main, life) {
  const providers = el('div', { id: 'providers-table' });
  const tools = el('div', { id: 'tools-table' });
  const refused = el('div', { id: 'refused-table' });
  main.append(el('h2', {}, 'Providers'), providers, el('h2', {}, 'Tools'), tools, el('h2', {}, 'Refused by the registration lint'), refused);
  async function refresh() {
    const r = await signed('console.catalog', {}, { signal: life.signal });
    providers.replaceChildren(table(['Provider', 'Kind', 'State', 'Why', 'Tools'],
      r.providers.map((p) => ({ attrs: { 'data-provider': p.id }, cells: [p.id, p.kind,
        el('span', { class: p.state === 'up' ? 'ok' : 'error' }, p.state), p.state === 'up' ? '' : (p.reason || ''), String(p.tools)] })),
      { id: 'providers' }));
    tools.replaceChildren(table(['Tool', 'Provider', 'Available', 'Pin', 'Lint findings'],
      r.tools.map((t) => ({ attrs: { 'data-tool': t.name }, cells: [el('span', { class: 'mono' }, t.name), t.provider,
        t.available ? 'yes' : el('span', { class: 'error' }, 'no'),
        el('span', { class: t.pin === 'pinned' ? 'ok' : 'warn' }, t.pin),
        t.lint.length ? el('ul', { class: 'lint' }, t.lint.map((f) => el('li', {}, el('span', { class: 'badge warn' }, `${f.rule} ${f.severity}`), ' ', f.message))) : ''] })),
      { id: 'tools' }));
    refused.replaceChildren(r.refused.length
      ? table(['Tool', 'Provider', 'Reasons'], r.refused.map((t) => ({ attrs: { 'data-tool': t.tool }, cells: [t.tool, t.provider, el('pre', {}, t.reasons.join('\n'))] })), { id: 'refused' })
      : el('p', {}, 'None.'));
  }
  await refresh();
  life.every(10000, refresh);
}

export const pages = {
  sessions: sessionsPage,
  jobs: jobsPage,
  approvals: approvalsPage,
  audit: auditPage,
  catalog: catalogPage,
};
