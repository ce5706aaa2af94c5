// Reads what the conformance suite wrote for each leg of a run (one `checks.json` per scenario,
// once against the fixture directly and once through axp), prints the side-by-side table and the
// totals, and decides the exit status. It owns the verdict rules:
//
// * A scenario passes when none of its checks is a FAILURE (warnings and skips do not fail it,
//   the same rule as the suite's own summary). A scenario with no result at all fails.
// * A scenario the control passes and axp fails is a regression unless expected-failures.txt
//   lists it for that leg; a listed scenario that no longer fails through axp anywhere the entry
//   applies is a stale entry. Both make the run fail.
// * The control must fail only what control-failures.txt lists, and everything listed there
//   must still fail: otherwise the fixture or the suite changed and the comparison means nothing.
//
// Usage: node compare.mjs RESULTS_DIR LEG...   where LEG is `label:package` and RESULTS_DIR/label
// holds control/ and axp/ (suite output dirs). Exit 0 when clean, 1 otherwise.

import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import process from 'node:process';

import YAML from 'yaml';

const HERE = dirname(fileURLToPath(import.meta.url));

// `server-<scenario>-<ISO time with - for :>`: the directory name the suite gives each scenario.
// Sorting by that time gives the order the suite ran them in.
const RESULT_DIR = /^server-(.+)-(\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z)$/;

function readResults(dir) {
  const results = new Map();
  if (!existsSync(dir)) return results;
  const runs = readdirSync(dir)
    .map((entry) => ({ entry, m: RESULT_DIR.exec(entry) }))
    .filter(({ m }) => m)
    .sort((a, b) => a.m[2].localeCompare(b.m[2]));
  for (const { entry, m } of runs) {
    const scenario = m[1];
    let checks;
    try {
      checks = JSON.parse(readFileSync(join(dir, entry, 'checks.json'), 'utf8'));
    } catch {
      // The suite creates the directory first; no checks.json means the scenario threw.
      results.set(scenario, { pass: false, failed: [], note: 'the scenario threw before writing checks (see the suite log)' });
      continue;
    }
    const failed = checks.filter((c) => c.status === 'FAILURE');
    results.set(scenario, { pass: failed.length === 0, failed, total: checks.length });
  }
  return results;
}

// Lines `<leg-selector> <scenario> # reason`. A selector names a whole leg label
// (`2026-07-28@0.2.0-alpha.12`), a revision (`2025-11-25`: every leg of that revision) or a
// suite version (`0.1.16`: every leg run with that suite).
function readList(file) {
  const entries = [];
  if (!existsSync(file)) return entries;
  readFileSync(file, 'utf8')
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.trim();
      if (line === '' || line.startsWith('#')) return;
      const hash = line.indexOf('#');
      const body = (hash >= 0 ? line.slice(0, hash) : line).trim();
      const reason = hash >= 0 ? line.slice(hash + 1).trim() : '';
      const fields = body.split(/\s+/);
      if (fields.length !== 2 || reason === '') {
        throw new Error(`${file}:${i + 1}: expected "<revision-or-version> <scenario> # reason", got: ${raw}`);
      }
      entries.push({ selector: fields[0], scenario: fields[1], reason, where: `${file.replace(HERE + '/', '')}:${i + 1}`, hits: [], applies: [] });
    });
  return entries;
}

const selects = (selector, leg) => selector === leg.label || selector === leg.revision || selector === leg.version;

// Which scenarios the leg's requirement set scores, when the suite ships one for the revision.
function scoring(pkg, revision) {
  const file = join(HERE, 'node_modules', pkg, 'requirements', `${revision}.yaml`);
  if (!existsSync(file)) return null;
  const doc = YAML.parse(readFileSync(file, 'utf8'));
  const notScored = new Map((doc.not_scored ?? []).filter((e) => e.leg === 'server').map((e) => [e.scenario, e.reason]));
  return { required: new Set(doc.server ?? []), notScored };
}

function pad(s, n) {
  return s.length >= n ? s : s + ' '.repeat(n - s.length);
}

function cell(r) {
  if (!r) return 'no result';
  if (r.note) return 'error';
  return r.pass ? 'pass' : `FAIL(${r.failed.length})`;
}

const args = process.argv.slice(2);
// --complete: every leg run.sh knows was run, so an entry that matches no scenario of any leg
// it selects is a typo or a scenario the suite dropped, not a leg left out of this run.
const complete = args[0] === '--complete';
const [resultsDir, ...legArgs] = complete ? args.slice(1) : args;
if (!resultsDir || legArgs.length === 0) {
  console.error('usage: compare.mjs [--complete] RESULTS_DIR label:package...');
  process.exit(2);
}

const expected = readList(join(HERE, 'expected-failures.txt'));
const controlExpected = readList(join(HERE, 'control-failures.txt'));
const problems = [];
const summary = [];

for (const arg of legArgs) {
  const [label, pkg] = arg.split(':');
  const [revision, version] = label.split('@');
  const leg = { label, revision, version };
  const control = readResults(join(resultsDir, label, 'control'));
  const axp = readResults(join(resultsDir, label, 'axp'));
  const score = scoring(pkg, revision);
  const scenarios = [...new Set([...control.keys(), ...axp.keys(), ...(score ? score.required : [])])];

  console.log(`\n=== ${label} (suite ${pkg}, revision ${revision}) ===`);
  const width = Math.max(8, ...scenarios.map((s) => s.length));
  console.log(`${pad('scenario', width)}  ${pad('control', 9)}  ${pad('axp', 9)}  note`);
  console.log(`${'-'.repeat(width)}  ${'-'.repeat(9)}  ${'-'.repeat(9)}  ----`);

  const tally = { n: 0, control: 0, axp: 0, required: 0, controlRequired: 0, axpRequired: 0 };
  for (const list of [expected, controlExpected]) {
    for (const e of list) if (selects(e.selector, leg) && scenarios.includes(e.scenario)) e.applies.push(label);
  }
  for (const scenario of scenarios) {
    const c = control.get(scenario);
    const a = axp.get(scenario);
    const cPass = c?.pass === true;
    const aPass = a?.pass === true;
    const required = score ? score.required.has(scenario) : true;
    tally.n += 1;
    tally.control += cPass;
    tally.axp += aPass;
    if (required) {
      tally.required += 1;
      tally.controlRequired += cPass;
      tally.axpRequired += aPass;
    }

    const notes = [];
    if (c?.note) notes.push(`control: ${c.note}`);
    if (a?.note) notes.push(`axp: ${a.note}`);
    if (score && !required) notes.push(`not scored: ${score.notScored.get(scenario) ?? 'not in the requirement set'}`);

    const ctrlEntry = controlExpected.find((e) => e.scenario === scenario && selects(e.selector, leg));
    if (cPass && ctrlEntry) notes.push(`STALE: listed at ${ctrlEntry.where} but the control passes`);
    if (!cPass) {
      if (ctrlEntry) {
        ctrlEntry.hits.push(label);
        notes.push(`control fails as listed: ${ctrlEntry.reason}`);
      } else {
        notes.push('CONTROL FAILS (not in control-failures.txt)');
        problems.push(`${label} ${scenario}: the control fails and control-failures.txt does not list it`);
      }
    }

    const entry = expected.find((e) => e.scenario === scenario && selects(e.selector, leg));
    if (entry && !aPass) entry.hits.push(label);
    if (cPass && !aPass) {
      if (entry) notes.push(`expected: ${entry.reason}`);
      else {
        notes.push('REGRESSION (not in expected-failures.txt)');
        problems.push(`${label} ${scenario}: passes directly, fails through axp, not in expected-failures.txt`);
      }
    } else if (entry && aPass) {
      notes.push(`STALE: listed at ${entry.where} but passes through axp`);
    } else if (!cPass && aPass) {
      notes.push('passes through axp only');
    }

    console.log(`${pad(scenario, width)}  ${pad(cell(c), 9)}  ${pad(cell(a), 9)}  ${notes.join('; ')}`);
  }

  const line =
    `${label}: control ${tally.control}/${tally.n}, axp ${tally.axp}/${tally.n}` +
    (score ? ` (required: control ${tally.controlRequired}/${tally.required}, axp ${tally.axpRequired}/${tally.required})` : '');
  console.log(`\n${line}`);
  summary.push({ leg, line });
}

for (const [list, what] of [
  [expected, 'fails through axp'],
  [controlExpected, 'fails directly (control)'],
]) {
  for (const e of list) {
    if (e.applies.length > 0 && e.hits.length === 0) {
      problems.push(`stale entry ${e.where} (${e.selector} ${e.scenario}): it no longer ${what} in any leg it names; delete the line`);
    } else if (e.applies.length === 0 && complete) {
      problems.push(`entry ${e.where} (${e.selector} ${e.scenario}): no leg it selects ran that scenario; fix or delete the line`);
    }
  }
}

console.log('\n=== totals ===');
for (const s of summary) console.log(s.line);
if (problems.length > 0) {
  console.log(`\n${problems.length} problem(s):`);
  for (const p of problems) console.log(`  - ${p}`);
  process.exit(1);
}
console.log('\nno regressions, no stale entries');
