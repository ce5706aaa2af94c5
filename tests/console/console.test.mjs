// The web console in a real headless Chromium (Debian's `chromium`, driven by the pinned
// playwright-core over CDP; no browser is downloaded) against a real `axp serve` with an
// operator, an approval-required tool and a tool the registration lint finds fault with.
// Covers: sign-in (bearer token + the state dir's signing key), opening a session, watching a
// job's log stream, a reload that resumes the log where it was, cancel and signal, approving a
// parked call (which the agent's own token cannot) and denying one with a reason, a lint
// finding and a provider that is down in the catalog, and the audit tail with its chain
// status. Screenshots of each page go to tests/console/out/.
//
// Environment: AXP_BIN (default target/debug/axp, relative to the repository root) and
// AXP_CHROMIUM (default /usr/bin/chromium).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../..');
const AXP = path.resolve(ROOT, process.env.AXP_BIN || 'target/debug/axp');
const CHROMIUM = process.env.AXP_CHROMIUM || '/usr/bin/chromium';
const OUT = path.join(HERE, 'out');
const TOKEN = `console-test-${randomBytes(16).toString('hex')}`;

let tmp;
let gw;
let base;
let browser;
let page;
const pageErrors = [];

async function startGateway() {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'axp-console-'));
  const ws = path.join(tmp, 'ws');
  fs.mkdirSync(ws);
  // server-everything (tests/fixtures, installed by scripts/install-test-deps.sh) gives an MCP
  // tool to park: an approval rule on the built-in files__* tools cannot hold while sessions may
  // be granted proc.spawn (axp serve refuses that), one on an MCP server's tools can.
  const everything = path.join(ROOT, 'tests/fixtures/node_modules/@modelcontextprotocol/server-everything/dist/index.js');
  assert.ok(fs.existsSync(everything), `${everything} is missing: run scripts/install-test-deps.sh`);
  const fleet = path.join(tmp, 'fleet.json');
  // …and a server whose command does not exist, so the catalog has a provider that is down.
  fs.writeFileSync(fleet, JSON.stringify({ mcpServers: {
    everything: { command: 'node', args: [everything] },
    broken: { command: path.join(tmp, 'no-such-server') },
  } }));
  const config = path.join(tmp, 'axp.toml');
  fs.writeFileSync(config, `
[approval]
required = ["everything__echo"]

[[operators]]
name = "console"
token_env = "AXP_CONSOLE_TEST_TOKEN"
capabilities = ["tool(*)", "proc.spawn"]

# "Hi." is too short to say what the tool does: the registration lint's AXP002, a warning, so
# the tool is served with the finding.
[[cli]]
provider = "demo"
[[cli.tools]]
name = "hello"
description = "Hi."
argv = ["echo", "hello"]
`);
  const child = spawn(AXP, ['serve', '--listen', '127.0.0.1:0', '--state-dir', path.join(tmp, 'state'),
    '--workspace', ws, '--config', config, '--mcp-config', fleet], {
    env: { ...process.env, AXP_CONSOLE_TEST_TOKEN: TOKEN, XDG_STATE_HOME: path.join(tmp, 'xdg'), AXP_LOG: 'axp=info,warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const log = [];
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`axp serve did not start:\n${log.join('\n')}`)), 60000);
    child.on('exit', (code) => reject(new Error(`axp serve exited (${code}):\n${log.join('\n')}`)));
    createInterface({ input: child.stderr }).on('line', (line) => {
      log.push(line);
      const m = line.match(/on (http:\/\/[^/\s]+)/);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
  });
  return { child, url, state: path.join(tmp, 'state') };
}

/** A JSON-RPC call from outside the browser: the agent's side of the story. */
async function call(method, params, headers = {}) {
  const resp = await fetch(`${base}/axp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  return resp.json();
}

const shot = (name) => page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
const text = (sel) => page.locator(sel).innerText();
const seen = (sel, hasText, timeout = 30000) => page.locator(sel).filter({ hasText }).first().waitFor({ timeout });

before(async () => {
  fs.mkdirSync(OUT, { recursive: true });
  gw = await startGateway();
  base = gw.url;
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  // A CSP violation, an uncaught error or a failed module load shows here.
  page.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(`console: ${m.text()}`); });
});

after(async () => {
  await browser?.close();
  gw?.child.kill('SIGTERM');
  if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
});

test('the console loads under its CSP and the operator signs in', async () => {
  const resp = await page.goto(`${base}/ui/`);
  assert.equal(resp.status(), 200);
  const csp = resp.headers()['content-security-policy'];
  assert.match(csp, /script-src 'self'/);
  assert.match(csp, /require-trusted-types-for 'script'/);
  await page.locator('#login-form').waitFor();
  await page.fill('#bearer', TOKEN);
  await page.fill('#operator', 'local');
  await page.setInputFiles('#keyfile', path.join(gw.state, 'operator.key'));
  await shot('01-sign-in');
  await page.click('#signin');
  await seen('#who', 'signed in as local');
  // The credentials live in this tab's sessionStorage, never in the URL or a cookie.
  assert.ok(!page.url().includes(TOKEN));
  assert.deepEqual(await page.context().cookies(), []);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('axp.bearer')), TOKEN);
});

test('a wrong signing key is refused at sign-in', async () => {
  const other = await browser.newPage();
  await other.goto(`${base}/ui/`);
  const key = Buffer.from(randomBytes(48)).toString('base64url');
  // A well-formed Ed25519 PKCS#8 key that no operator holds.
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), randomBytes(32)]).toString('base64url');
  await other.fill('#bearer', TOKEN);
  await other.fill('#keytext', pkcs8);
  await other.click('#signin');
  await other.locator('#login-error').filter({ hasText: 'signature does not verify' }).waitFor();
  await other.fill('#keytext', key);
  await other.click('#signin');
  await other.locator('#login-error').filter({ hasText: 'Sign-in failed' }).waitFor();
  await other.close();
});

let sessionId;

test('open a session from the Sessions page', async () => {
  await page.goto(`${base}/ui/#sessions`);
  await page.fill('#open-caps', 'tool(*) proc.spawn');
  await page.click('#open-session');
  await seen('#sessions-status', 'Opened session');
  sessionId = (await text('#sessions-status')).match(/Opened session (\S+)/)[1];
  const row = page.locator(`tr[data-session="${sessionId}"]`);
  await row.filter({ hasText: 'opened here' }).waitFor();
  const cells = await row.innerText();
  assert.match(cells, /proc\.spawn/);
  assert.match(cells, /open/);
  await shot('02-sessions');
});

test('watch a job stream, reload, and the log resumes where it was', async () => {
  await page.goto(`${base}/ui/#jobs`);
  await page.fill('#start-command', 'for i in $(seq -w 1 40); do echo line $i; sleep 0.15; done');
  await page.click('#start-job');
  await page.waitForURL(/#jobs\/[^/]+\/\d+$/);
  const jobId = page.url().match(/#jobs\/([^/]+)\//)[1];
  await seen('#job-log', 'line 08');
  await shot('03-job-streaming');
  // The seq in the URL follows the log, so a reload asks only for what comes after it.
  const before = Number(page.url().match(/\/(\d+)$/)[1]);
  assert.ok(before > 0, page.url());
  await page.reload();
  const resumed = Number(page.url().match(/\/(\d+)$/)[1]);
  assert.ok(resumed >= before, `${resumed} < ${before}`);
  await page.locator('#job-resumed').waitFor();
  await seen('#job-log', 'line 40', 60000);
  await seen('#job-log', '[end of log]');
  const log = await text('#job-log');
  assert.ok(!log.includes('line 01'), `the reload replayed from the start:\n${log}`);
  for (let i = 1; i <= 40; i++) {
    const n = log.split(`line ${String(i).padStart(2, '0')}\n`).length - 1;
    assert.ok(n <= 1, `line ${i} shown ${n} times`);
  }
  assert.match(await text('#job-state'), /exited/);
  await seen(`tr[data-job="${jobId}"]`, 'exited');
  await shot('04-job-resumed');
  // Replaying from the start shows every line once.
  await page.click('#job-replay');
  await seen('#job-log', '[end of log]');
  const full = await text('#job-log');
  assert.ok(full.includes('line 01') && full.includes('line 40'));
});

test('cancel and signal a running job', async () => {
  await page.goto(`${base}/ui/#jobs`);
  await page.fill('#start-command', 'echo started; sleep 60');
  await page.click('#start-job');
  await seen('#job-log', 'started');
  await page.click('#job-cancel');
  await seen('#job-log', '[exit: killed');
  await page.goto(`${base}/ui/#jobs`);
  await page.fill('#start-command', "trap 'echo got TERM; exit 7' TERM; echo waiting; while :; do sleep 0.1; done");
  await page.click('#start-job');
  await seen('#job-log', 'waiting');
  await page.selectOption('#signal-name', 'TERM');
  await page.click('#job-signal');
  await seen('#job-log', 'got TERM');
  await seen('#job-log', '[exit: exited code 7');
});

test('approve a parked call; the agent\'s own token cannot', async () => {
  // The agent: a session of its own, and a call that needs an operator.
  const opened = await call('session.open', { capabilities: ['tool(everything__*)'] }, { authorization: `Bearer ${TOKEN}` });
  const agent = { 'axp-capability': opened.result.cap_token };
  const started = await call('job.start', { tool: 'everything__echo', arguments: { message: 'approved from the console' } }, agent);
  assert.equal(started.result.state, 'awaiting_approval', JSON.stringify(started));
  const jobId = started.result.job_id;
  // Neither the agent's token nor its operator's bearer token reaches an operator method.
  const self = await call('job.approve', { job_id: jobId }, agent);
  assert.equal(self.error.code, -32001, JSON.stringify(self));
  const bearer = await call('console.jobs', {}, { authorization: `Bearer ${TOKEN}`, ...agent });
  assert.equal(bearer.error.code, -32001, JSON.stringify(bearer));

  await page.goto(`${base}/ui/#approvals`);
  const row = page.locator(`tr[data-job="${jobId}"]`);
  await row.waitFor();
  assert.match(await row.locator('pre.arguments').innerText(), /approved from the console/);
  await shot('05-approvals');
  await row.locator('button.approve').click();
  await seen('#approvals-status', `Approved ${jobId}`);
  await page.locator('#no-pending').waitFor();
  // The agent's job ran with the operator's approval.
  let events = [];
  for (let i = 0; i < 50 && !events.some((e) => e.kind === 'exit'); i++) {
    const r = await call('job.attach', { job_id: jobId, from_seq: 0, wait_ms: 2000 }, agent);
    events = r.result.events;
  }
  assert.ok(JSON.stringify(events).includes('Echo: approved from the console'), JSON.stringify(events));

  // A denial with the operator's reason fails the agent's call with -32009.
  const second = await call('job.start', { tool: 'everything__echo', arguments: { message: 'deny me' } }, agent);
  const denied = second.result.job_id;
  await page.reload();
  const row2 = page.locator(`tr[data-job="${denied}"]`);
  await row2.waitFor();
  await row2.locator('input.deny-reason').fill('not today');
  await row2.locator('button.deny').click();
  await seen('#approvals-status', `Denied ${denied}`);
  const st = await call('job.status', { job_id: denied }, agent);
  assert.equal(st.result.state, 'failed', JSON.stringify(st));
  assert.equal(st.result.error.code, -32009, JSON.stringify(st));
  assert.match(st.result.error.message, /not today/);
});

test('the catalog shows a lint finding, pins and provider health', async () => {
  await page.goto(`${base}/ui/#catalog`);
  const row = page.locator('tr[data-tool="demo__hello"]');
  await row.waitFor();
  assert.match(await row.innerText(), /AXP002/);
  await seen('tr[data-provider="demo"]', 'up');
  await seen('tr[data-provider="everything"]', 'up');
  // A provider that is down says why.
  const broken = page.locator('tr[data-provider="broken"]');
  await broken.filter({ hasText: 'down' }).waitFor();
  assert.match(await broken.innerText(), /no-such-server|No such file|not found/i);
  assert.match(await page.locator('tr[data-tool="everything__echo"]').innerText(), /pinned|unpinned/);
  await shot('06-catalog');
});

test('the audit tail filters and shows the chain verifies', async () => {
  await page.goto(`${base}/ui/#audit`);
  await seen('#chain-status', 'Chain verifies');
  await page.fill('#audit-kinds', 'approval');
  await page.click('#audit-filter');
  await page.locator('#audit tbody tr[data-kind="approval"]').first().waitFor();
  assert.equal(await page.locator('#audit tbody tr:not([data-kind="approval"])').count(), 0);
  assert.match(await text('#audit'), /approved/);
  await shot('07-audit');
});

test('no page error, CSP violation or failed load along the way', () => {
  assert.deepEqual(pageErrors, []);
});
