/**
 * The console shows and acts on the sources it is given, no others: over an inbox, the
 * inbox's source; over operations opened for one source, that one. Two inboxes share one
 * schema (sources `default` and `other`), each with a dead letter of the same id: the console
 * of `default` neither shows `other`'s (by `?source=` or by its URL) nor replays it, and a
 * replay of `other/X` never replays `default/X` in its place.
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Console, createConsole } from '../src/console/index.js';
import { createInbox, type Inbox, openOperations } from '../src/index.js';
import { CONSOLE_TOKEN } from './support/console.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const target = targets.at(-1)!;
const ID = 'evt-shared-id';
const bearer = { authorization: `Bearer ${CONSOLE_TOKEN}`, host: 'console.test' };
let db: TargetDb;
let mine: Inbox;
let theirs: Inbox;
const schema = uniqueName('wi');

function dying(source: string): Inbox {
  return createInbox({
    db: db.db,
    schema,
    source,
    sweepIntervalMs: 0,
    maxAttempts: 1,
    handle: (event) => {
      if (event.body.dies) throw new Error(`broken in ${source}`);
    },
  });
}

beforeAll(async () => {
  db = await target.open();
  mine = dying('default');
  theirs = dying('other');
  const delivery = (dies: boolean) => ({
    headers: { 'content-type': 'application/json', 'idempotency-key': ID },
    rawBody: Buffer.from(JSON.stringify({ dies, secret: 'of-other' })),
  });
  expect((await mine.receive(delivery(true))).status).toBe(200);
  expect((await theirs.receive(delivery(true))).status).toBe(200);
  expect((await mine.deadLetter(ID)).status).toBe('dead');
  expect((await theirs.deadLetter(ID)).status).toBe('dead');
});
afterAll(async () => {
  const k = await mine?.kysely();
  if (k) await sql`drop schema if exists ${sql.id(schema)} cascade`.execute(k);
  await theirs?.close();
  await mine?.close();
  await db?.close();
});

async function get(app: Console, url: string) {
  return app.handle({ method: 'GET', url, headers: bearer });
}

async function replay(app: Console, targetRef: string) {
  const page = await get(app, '/dead-letters');
  const csrf = /name="csrf" value="([^"]+)"/.exec(page.body)![1]!;
  return app.handle({
    method: 'POST',
    url: '/actions/replay',
    headers: { ...bearer, origin: 'http://console.test' },
    body: new URLSearchParams({ csrf, target: targetRef, confirmed: 'yes' }).toString(),
  });
}

describe.each([
  [
    'an inbox',
    async () => ({ app: createConsole({ inbox: mine, token: CONSOLE_TOKEN }), close: async () => {} }),
  ],
  [
    'operations opened for one source',
    async () => {
      const ops = await openOperations({ db: db.db, schema, source: 'default' });
      return { app: createConsole({ operations: ops, token: CONSOLE_TOKEN }), close: () => ops.close() };
    },
  ],
] as const)('the console over %s', (_, make) => {
  let app: Console;
  let close: () => Promise<void>;
  beforeAll(async () => {
    ({ app, close } = await make());
  });
  afterAll(async () => {
    await close?.();
  });

  test("another source's dead letters are not shown, by filter or by URL", async () => {
    const list = await get(app, '/dead-letters');
    expect(list.status).toBe(200);
    expect(list.body).toContain('/events/default/');
    expect(list.body).not.toContain('/events/other/');
    const filtered = await get(app, '/dead-letters?source=other');
    expect(filtered.status).toBe(404);
    expect(filtered.body).not.toContain(ID);
    const event = await get(app, `/events/other/${ID}`);
    expect(event.status).toBe(404);
    expect(event.body).not.toContain('broken in other');
    expect((await get(app, `/events/default/${ID}`)).body).toContain('broken in default');
  });

  test("replaying other/X changes neither source's X", async () => {
    const res = await replay(app, `other/${ID}`);
    expect(res.status).toBe(200);
    expect(res.body).toContain('not-found');
    expect((await theirs.deadLetter(ID)).status).toBe('dead');
    expect((await mine.deadLetter(ID)).status).toBe('dead');
  });
});

describe('operations opened for one source', () => {
  test("never read or replay another source's ignored events or groups", async () => {
    const ops = await openOperations({ db: db.db, schema, source: 'default' });
    try {
      const notFound = { code: 'not-found' };
      await expect(ops.ignored({ source: 'other' })).rejects.toMatchObject(notFound);
      await expect(ops.ignoredTypes('other')).rejects.toMatchObject(notFound);
      await expect(ops.replayIgnored({ type: 'x', source: 'other', dryRun: true })).rejects.toMatchObject(
        notFound,
      );
      await expect(ops.groups(20, 'other')).rejects.toMatchObject(notFound);
      expect(await ops.ignored({ source: 'default' })).toEqual([]);
    } finally {
      await ops.close();
    }
  });
});
