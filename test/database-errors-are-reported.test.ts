/**
 * A database error is said where it happens, never turned into "nothing there": the look before
 * BEGIN that fails is logged and counted (the claim still answers the delivery), the CLI's
 * replay exits non-zero with the error instead of treating the event as unknown (and skipping
 * its retention check), and the console answers an error page instead of listing no sources.
 *
 * Each error is a real one: the statement's connection is cut by a TCP proxy in front of the
 * shared PostgreSQL (test/support/tcp-proxy.ts) as the statement is sent, the way a failover or
 * a dropped connection fails it; every other statement goes through.
 */
import pg from 'pg';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createConsole } from '../src/console/index.js';
import { createInbox, type Inbox, METRIC_NAMES, openOperations } from '../src/index.js';
import { cli } from './support/cli.js';
import { CONSOLE_TOKEN } from './support/console.js';
import { postgresUrl, uniqueName } from './support/databases.js';
import { startTcpProxy, type TcpProxy } from './support/tcp-proxy.js';

/**
 * The look before BEGIN without Redis (src/db/sql/find-processed.ts): a named statement, so its
 * name is in every message that runs it (Parse once per connection, then Bind).
 */
const LOOK_FIRST = 'find_processed';
/** A dead letter's read as an operator sees it (src/operations/dead-letters.ts), as it is sent. */
const DEAD_LETTER_READ = 'e.result::text as result_text';

interface LogLine {
  level: string;
  obj: Record<string, unknown>;
  msg: string;
}

function recordingLogger() {
  const lines: LogLine[] = [];
  const at = (level: string) => (obj: object, msg?: string) =>
    lines.push({ level, obj: obj as Record<string, unknown>, msg: msg ?? '' });
  return { lines, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

async function counter(registry: Registry, name: string): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) throw new Error(`no metric ${name}`);
  return (await metric.get()).values.reduce((sum, v) => sum + v.value, 0);
}

describe.runIf(postgresUrl)('database errors are reported, not swallowed', () => {
  const schema = uniqueName('wi');
  let proxy: TcpProxy;
  /** The shared server, through the proxy. */
  let proxiedUrl: string;
  const pools: pg.Pool[] = [];
  const pool = (connectionString: string) => {
    const p = new pg.Pool({ connectionString, max: 4 });
    p.on('error', () => {});
    pools.push(p);
    return p;
  };
  /** Two sources' inboxes, each with a dead letter of the same id (and `default` with one of its own). */
  const inboxes: Inbox[] = [];

  beforeAll(async () => {
    const direct = new URL(postgresUrl!);
    proxy = await startTcpProxy(Number(direct.port || 5432), direct.hostname);
    const through = new URL(postgresUrl!);
    through.hostname = '127.0.0.1';
    through.port = String(proxy.port);
    proxiedUrl = through.toString();
    for (const source of ['default', 'other']) {
      inboxes.push(
        createInbox({
          db: pool(postgresUrl!),
          schema,
          source,
          sweepIntervalMs: 0,
          maxAttempts: 1,
          logger: false,
          handle: () => {
            throw new Error('broken handler');
          },
        }),
      );
    }
    for (const inbox of inboxes) {
      const outcome = await inbox.receive({
        headers: { 'idempotency-key': 'evt-shared' },
        rawBody: Buffer.from('{}'),
      });
      expect(outcome.kind).toBe('dead-lettered');
    }
    const [mine] = inboxes;
    expect(
      (await mine!.receive({ headers: { 'idempotency-key': 'evt-old' }, rawBody: Buffer.from('{}') })).kind,
    ).toBe('dead-lettered');
    // Received a month ago: older than the CLI's default retention (7d), so its replay needs --force.
    await pools[0]!.query(
      `update ${mine!.tables.events} set received_at = now() - interval '30 days' where id = 'evt-old'`,
    );
  });
  afterAll(async () => {
    for (const inbox of inboxes) await inbox.close();
    await pools[0]?.query(`drop schema if exists "${schema}" cascade`).catch(() => {});
    await Promise.all(pools.map((p) => p.end().catch(() => {})));
    await proxy?.close();
  });

  it('a failed look before BEGIN is logged and counted, and the claim still answers the delivery', async () => {
    const registry = new Registry();
    const log = recordingLogger();
    const inbox = createInbox({
      db: pool(proxiedUrl),
      schema,
      source: 'storm',
      sweepIntervalMs: 0,
      // No in-process cache: every copy goes to Postgres, as copies spread over instances do.
      duplicateCacheSize: 0,
      metrics: { registry },
      logger: log.logger,
      handle: () => ({ ok: true }),
    });
    try {
      const deliver = () =>
        inbox.receive({ headers: { 'idempotency-key': 'evt-storm' }, rawBody: Buffer.from('{}') });
      expect((await deliver()).kind).toBe('processed');
      // A retry storm: copies answered by Postgres until duplicates are likely, then by the look.
      for (let i = 0; i < 10; i++) expect((await deliver()).kind).toBe('duplicate');
      expect(await counter(registry, METRIC_NAMES.lookFirstErrors)).toBe(0);

      proxy.cutWhenSent(LOOK_FIRST);
      const outcome = await deliver();
      expect(outcome).toMatchObject({ kind: 'duplicate', status: 200 });
      expect(await counter(registry, METRIC_NAMES.lookFirstErrors)).toBe(1);
      const warned = log.lines.filter((l) => l.level === 'warn' && /before BEGIN failed/.test(l.msg));
      expect(warned).toHaveLength(1);
      expect(warned[0]!.obj).toMatchObject({ source: 'storm', id: 'evt-storm' });
      expect(String(warned[0]!.obj.err)).toMatch(/Connection terminated/i);

      // The next look reads again (the cut was once), and says nothing.
      expect((await deliver()).kind).toBe('duplicate');
      expect(await counter(registry, METRIC_NAMES.lookFirstErrors)).toBe(1);
    } finally {
      await inbox.close();
    }
  });

  it("the CLI's replay exits non-zero with the error when a dead letter cannot be read, and changes nothing", async () => {
    proxy.cutWhenSent(DEAD_LETTER_READ);
    const run = await cli(['dead', 'replay', 'evt-old', '--schema', schema, '--source', 'default'], {
      DATABASE_URL: proxiedUrl,
    });
    expect(run.stderr).toMatch(/Connection terminated/i);
    expect(run.code).toBe(1);
    expect((await inboxes[0]!.deadLetter('evt-old')).status).toBe('dead');
  });

  it('the console answers 500 when a dead letter cannot be read, not a search that found nothing', async () => {
    const ops = await openOperations({ db: proxiedUrl, schema });
    try {
      const log = recordingLogger();
      const app = createConsole({ operations: ops, token: CONSOLE_TOKEN, logger: log.logger });
      const search = () =>
        app.handle({
          method: 'GET',
          url: '/search?id=evt-shared',
          headers: { authorization: `Bearer ${CONSOLE_TOKEN}`, host: '127.0.0.1' },
        });
      // In two sources: the search lists both.
      const listed = await search();
      expect(listed.status).toBe(200);
      expect(listed.body).toContain('/events/default/evt-shared');
      expect(listed.body).toContain('/events/other/evt-shared');

      proxy.cutWhenSent(DEAD_LETTER_READ);
      const failed = await search();
      expect(failed.status).toBe(500);
      expect(failed.body).toContain('could not read or change the inbox');
      const logged = log.lines.filter((l) => l.level === 'error');
      expect(logged.map((l) => l.msg)).toEqual(['webhook-inbox console: a request failed']);
      expect(String(logged[0]!.obj.err)).toMatch(/Connection terminated/i);
    } finally {
      await ops.close();
    }
  });
});
