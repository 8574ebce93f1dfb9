/**
 * ops/: the Grafana dashboard and the Prometheus alert rules. Every metric they name exists in
 * what an inbox's registry serves (histograms by their _bucket/_sum/_count series), every
 * label value they match on is one the inbox emits, and the rules pass `promtool check rules`
 * and their unit tests, `promtool test rules` (Debian's prometheus package; .ci/run installs
 * it when missing).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createInbox, type Inbox, METRIC_NAMES, OutcomeKind } from '../src/index.js';
import { filePGlite } from './support/databases.js';

/** The database of this file's inboxes that need one only to exist (see filePGlite). */
const memory = filePGlite();

const root = join(import.meta.dirname, '..');
const RULES = join(root, 'ops', 'prometheus', 'webhook-inbox-alerts.yml');
const DASHBOARD = join(root, 'ops', 'grafana', 'webhook-inbox-dashboard.json');

function promtool(): string | undefined {
  try {
    execFileSync('promtool', ['--version'], { stdio: 'ignore' });
    return 'promtool';
  } catch {
    return undefined;
  }
}

/** Every `webhook_inbox_…` name in a text. */
function metricNames(text: string): Set<string> {
  return new Set([...text.matchAll(/webhook_inbox_[a-z_]+/g)].map((m) => m[0]));
}

/** The expressions of the dashboard's panels. */
function dashboardExprs(): string[] {
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8'));
  const exprs: string[] = [];
  for (const panel of dashboard.panels) for (const t of panel.targets ?? []) exprs.push(t.expr);
  for (const v of dashboard.templating.list) if (v.query?.query) exprs.push(v.query.query);
  return exprs;
}

let inbox: Inbox;
/** Every series name the registry serves, histograms expanded. */
const served = new Set<string>();

beforeAll(async () => {
  const registry = new Registry();
  inbox = createInbox({ db: memory(), metrics: { registry }, sweepIntervalMs: 0, handle: () => {} });
  await inbox.ready();
  const text = await registry.metrics();
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    served.add(name!);
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) served.add(name + suffix);
  }
});
afterAll(async () => {
  await inbox?.close();
});

describe('ops/', () => {
  test('the registry serves every METRIC_NAMES entry (what the check below relies on)', () => {
    for (const name of Object.values(METRIC_NAMES)) expect(served, name).toContain(name);
  });

  test('every metric the alert rules use is in the registry output', () => {
    const names = metricNames(readFileSync(RULES, 'utf8'));
    expect(names.size).toBeGreaterThan(5);
    for (const name of names) expect(served, name).toContain(name);
  });

  test('every metric the dashboard uses is in the registry output', () => {
    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThan(15);
    for (const expr of exprs)
      for (const name of metricNames(expr)) expect(served, `${name} in ${expr}`).toContain(name);
    // And every metric the inbox has is on the board.
    const used = metricNames(exprs.join('\n'));
    for (const name of Object.values(METRIC_NAMES)) {
      expect(
        [name, `${name}_bucket`, `${name}_count`].some((n) => used.has(n)),
        name,
      ).toBe(true);
    }
  });

  test('the outcomes the rules and the dashboard match on are outcomes the inbox reports', () => {
    const text = `${readFileSync(RULES, 'utf8')}\n${dashboardExprs().join('\n')}`;
    for (const [, value] of text.matchAll(/outcome="([^"]+)"/g)) {
      expect([...Object.values(OutcomeKind), 'processed', 'failed'], value).toContain(value);
    }
  });

  test('the package ships them: npm pack lists the dashboard and the rules', () => {
    // --dry-run lists what `files` in package.json takes, without building or writing a tarball.
    const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: root,
      encoding: 'utf8',
    });
    const packed: string[] = JSON.parse(out)[0].files.map((f: { path: string }) => f.path);
    // The rules' unit tests stay in the repository, with the package's other tests.
    expect(packed.filter((file) => file.startsWith('ops/')).sort()).toEqual([
      'ops/grafana/webhook-inbox-dashboard.json',
      'ops/prometheus/webhook-inbox-alerts.yml',
    ]);
  });

  test.skipIf(!promtool() && !process.env.CI)('promtool check rules passes', () => {
    // In CI promtool must be there (.ci/run installs it): a missing one fails here.
    const out = execFileSync('promtool', ['check', 'rules', RULES], { encoding: 'utf8' });
    expect(out).toContain('SUCCESS: 7 rules found');
  });

  test.skipIf(!promtool() && !process.env.CI)(
    'each alert fires on the series that should fire it, and only then',
    () => {
      // ops/prometheus/webhook-inbox-alerts.test.yml: input series, and the alerts expected (or
      // not) at given times, with their rendered summaries. A failing case exits non-zero.
      const out = execFileSync('promtool', ['test', 'rules', RULES.replace(/\.yml$/, '.test.yml')], {
        encoding: 'utf8',
      });
      expect(out).toContain('SUCCESS');
    },
  );
});
