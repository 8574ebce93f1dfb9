/**
 * The console's actions through its framework-free core (`createConsole().handle()`), over
 * handler-free operations on real PostgreSQL: bulk replay and skip ask first and then report
 * each item; "replay every dead letter matching the filter" lists what would be re-queued
 * before it does; bad forms are 400 naming the field and change nothing.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { type Console, createConsole } from '../src/console/index.js';
import { createInbox, type Inbox, type Operations, openOperations } from '../src/index.js';
import { deliver } from './support/console.js';
import { type TargetDb, targets } from './support/databases.js';

const target = targets.at(-1)!;
let db: TargetDb;
let inbox: Inbox;
let ops: Operations & { close(): Promise<void> };
let app: Console;
let csrf: string;
let receiveInto: string;
const ORIGIN = 'http://console.test';
const failing = new Set<string>();
const logged: Array<Record<string, unknown>> = [];

/** A page's markup with the escapes the console writes undone, to compare with plain text. */
function text(markup: string): string {
  const entities: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'", '#96': '`' };
  return markup.replace(/&(amp|lt|gt|quot|#39|#96);/g, (_, e: string) => entities[e]!);
}

async function post(path: string, fields: Array<[string, string]>, confirmed = false) {
  const form = new URLSearchParams([['csrf', csrf], ...fields]);
  if (confirmed) form.set('confirmed', 'yes');
  const response = await app.handle({
    method: 'POST',
    url: path,
    headers: { host: 'console.test', origin: ORIGIN, 'x-user': 'bob' },
    body: form.toString(),
  });
  return { ...response, body: text(response.body) };
}

beforeAll(async () => {
  db = await target.open();
  inbox = createInbox({
    db: db.db,
    schema: db.schema,
    sweepIntervalMs: 0,
    maxAttempts: 1,
    handle: (event) => {
      if (failing.has(event.id)) throw new Error(`broken for ${event.id}`);
    },
  });
  await inbox.ready();
  const { createServer } = await import('node:http');
  ({ receiveInto } = await serverFor(inbox, createServer));
  for (const id of ['u-1', 'u-2', 'o-1']) failing.add(id);
  expect(await deliver(receiveInto, 'u-1', { n: 1 })).toBe(200);
  expect(await deliver(receiveInto, 'u-2', { n: 2 })).toBe(200);
  expect(await deliver(receiveInto, 'o-1', { n: 3 }, { 'x-key': 'k', 'x-seq': '1' })).toBe(200);
  ops = await openOperations({ db: db.db, schema: db.schema });
  const log = (obj: object) => logged.push(obj as Record<string, unknown>);
  app = createConsole({
    operations: ops,
    authorize: (r) => (r.headers['x-user'] as string | undefined) ?? null,
    logger: { debug: log, info: log, warn: log, error: log },
  });
  const page = await app.handle({ method: 'GET', url: '/dead-letters', headers: { 'x-user': 'bob' } });
  csrf = /name="csrf" value="([^"]+)"/.exec(page.body)![1]!;
});

/** A tiny server so deliveries go through the inbox's real receive path. */
async function serverFor(i: Inbox, createServer: typeof import('node:http').createServer) {
  const { inbox: middleware } = await import('../adapters/express.js');
  const express = (await import('express')).default;
  const e = express();
  e.use('/webhooks', middleware(i));
  const server = createServer(e);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return { receiveInto: `http://127.0.0.1:${(server.address() as { port: number }).port}` };
}
const servers: import('node:http').Server[] = [];

afterAll(async () => {
  for (const s of servers) {
    s.closeAllConnections();
    s.close();
  }
  const k = await inbox?.kysely();
  if (k) await sql`drop schema if exists ${sql.id(db.schema)} cascade`.execute(k);
  await ops?.close();
  await inbox?.close();
  await db?.close();
});

test('a bulk replay asks first, listing each event, and changes nothing until confirmed', async () => {
  const targets: Array<[string, string]> = [
    ['target', 'default/u-1'],
    ['target', 'default/u-2'],
  ];
  const ask = await post('/actions/replay', targets);
  expect(ask.status).toBe(200);
  expect(ask.body).toContain('Replay 2 dead letters?');
  expect(ask.body).toContain('default/u-1');
  expect(ask.body).toContain('name="confirmed" value="yes"');
  expect((await ops.deadLetter('u-1')).status).toBe('dead');

  const done = await post('/actions/replay', targets, true);
  expect(done.status).toBe(200);
  expect(done.body).toContain("Re-queued: the application's sweeper applies replays");
  expect(done.body.match(/requeued \(now pending\)/g)).toHaveLength(2);
  expect((await ops.deadLetter('u-1')).status).toBe('pending');
  expect(logged).toContainEqual(
    expect.objectContaining({ console: 'replay', who: 'bob', targets: ['default/u-1', 'default/u-2'] }),
  );
});

test('replay every dead letter matching a filter: what would be re-queued first', async () => {
  const ask = await post('/actions/replay-all', [['key', 'k']]);
  expect(ask.body).toContain('Replay the 1 dead letter matching this filter');
  expect(ask.body).toContain('default/o-1: would be re-queued');
  expect((await ops.deadLetter('o-1')).status).toBe('dead');
  const bad = await post('/actions/replay-all', [['olderThan', 'soon']], true);
  expect(bad.status).toBe(400);
  expect(bad.body).toContain('olderThan');
});

test('bulk skip reports each item; one that cannot be skipped says why', async () => {
  const ask = await post('/actions/skip', [['target', 'default/o-1']]);
  expect(ask.body).toContain('Skip 1 dead letter?');
  const done = await post(
    '/actions/skip',
    [
      ['target', 'default/o-1'],
      ['target', 'default/no-such-id'],
    ],
    true,
  );
  expect(done.status).toBe(200);
  expect(done.body).toContain('skipped seq 1 of k; it waits for 2');
  expect(done.body).toContain('not-found');
  expect((await ops.key('k'))?.nextSeq).toBe(2);
});

test('bad forms are 400 naming the field, and change nothing', async () => {
  const none = await post('/actions/replay', [], true);
  expect(none.status).toBe(400);
  expect(none.body).toContain('field `target`');
  const malformed = await post('/actions/replay', [['target', 'no-slash']], true);
  expect(malformed.status).toBe(400);
  const noKey = await post('/actions/unblock', [['source', 'default']], true);
  expect(noKey.status).toBe(400);
  expect(noKey.body).toContain('field `key`');
  const unknown = await post('/actions/drop-tables', [], true);
  expect(unknown.status).toBe(404);
});

test('the overview lists causes; a replay of one cause in a window counts first, then re-queues exactly those, in key order', async () => {
  for (const id of ['x-3', 'x-1', 'x-2']) {
    failing.add(id);
    expect(await deliver(receiveInto, id, { n: 9 }, { 'x-key': `acct-${id}`, 'x-seq': '1' })).toBe(200);
  }
  // x-1 failed two hours ago (the clock, set by hand): outside the window.
  await sql`update ${sql.table(`${db.schema}.events`)} set failed_at = now() - interval '2 hours' where id = 'x-1'`.execute(
    await inbox.kysely(),
  );
  const cause = (await ops.deadLetter('x-2')).cause!;
  const overview = await app.handle({ method: 'GET', url: '/', headers: { 'x-user': 'bob' } });
  const row = new RegExp(
    `<tr><td><a href="[^"]*cause=${cause}[^"]*">${cause}</a></td><td>poison</td><td>3</td>`,
  );
  expect(overview.body).toMatch(row);
  expect(text(overview.body)).toContain('Error: broken for x-');

  const filter: Array<[string, string]> = [
    ['cause', cause],
    ['since', '1h'],
  ];
  const ask = await post('/actions/replay-all', filter);
  expect(ask.body).toContain('Replay the 2 dead letters matching this filter, in key order?');
  expect(ask.body.indexOf('default/x-2: would be re-queued')).toBeLessThan(ask.body.indexOf('default/x-3'));
  // The confirmation carries the window as an absolute time.
  const since = /name="since" value="([^"]+)"/.exec(ask.body)![1]!;
  expect(new Date(since).toISOString()).toBe(since);
  expect((await ops.deadLetter('x-2')).status).toBe('dead');

  const done = await post(
    '/actions/replay-all',
    [
      ['cause', cause],
      ['since', since],
    ],
    true,
  );
  expect([...new Set(done.body.match(/default\/x-\d/g))]).toEqual(['default/x-2', 'default/x-3']);
  expect(done.body.match(/requeued \(now held\)/g)).toHaveLength(2);
  expect((await ops.statuses('default', ['x-1', 'x-2', 'x-3'])).get('x-1')).toBe('dead');
  expect(await ops.countDead({ cause })).toBe(1);
});
