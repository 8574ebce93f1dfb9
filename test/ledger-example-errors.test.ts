/**
 * The ledger example's own routes, through each framework: every error is problem+json with
 * nothing internal in it (no stack, no file path, no SQL or Postgres message), and the
 * `/fail-next` test hook exists only when asked for (LEDGER_TEST_HOOKS=1, `testHooks`).
 */
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { FRAMEWORKS, type LedgerServer, startLedger } from '../examples/ledger/start.js';
import { type TargetDb, targets, uniqueName } from './support/databases.js';

const target = targets.at(-1)!;
let db: TargetDb;
beforeAll(async () => {
  db = await target.open();
});
afterAll(async () => {
  await db?.close();
});

async function call(url: string, init?: RequestInit) {
  const res = await fetch(url, init);
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type') ?? '', text };
}

function expectCleanProblem(r: { status: number; type: string; text: string }, status: number) {
  expect(r.status, r.text).toBe(status);
  expect(r.type).toMatch(/^application\/problem\+json/);
  const body = JSON.parse(r.text);
  expect(body).toMatchObject({ status, title: expect.any(String), detail: expect.any(String) });
  // Nothing internal: no stack frame, no path, no database text, no HTML.
  expect(r.text).not.toMatch(
    /\bat \S+ \(|node_modules|\/work\/|\.ts:\d|<html|<pre|invalid byte sequence|0x00|postgres|syntax/i,
  );
}

describe.each(FRAMEWORKS)('the ledger example over %s', (framework) => {
  const schemas = { inbox: uniqueName('wi'), ledger: uniqueName('app') };
  let app: LedgerServer;
  let hooked: LedgerServer;
  beforeAll(async () => {
    const start = (testHooks: boolean, suffix: string) =>
      startLedger({
        framework,
        testHooks,
        ledgerSchema: schemas.ledger + suffix,
        inbox: { db: db.db, schema: schemas.inbox + suffix, sweepIntervalMs: 0 },
      });
    app = await start(false, '');
    hooked = await start(true, '_h');
  });
  afterAll(async () => {
    const k = await app?.inbox.kysely();
    if (k) {
      for (const s of [schemas.inbox, schemas.ledger, `${schemas.inbox}_h`, `${schemas.ledger}_h`])
        await sql`drop schema if exists ${sql.id(s)} cascade`.execute(k);
    }
    await app?.close();
    await hooked?.close();
  });

  test.each([
    ['a NUL in the account key', '/accounts/%00', 400],
    ['a C1 control in the account key', '/accounts/%C2%85', 400],
    ['a route that does not exist', '/no-such-route', 404],
  ])('%s is problem+json, nothing internal', async (_name, path, status) => {
    expectCleanProblem(await call(`${app.url}${path}`), status);
  });

  test('a malformed percent-escape is a 4xx problem (or the literal key), never HTML or a stack', async () => {
    const r = await call(`${app.url}/accounts/%ZZ`);
    if (r.status === 200) expect(JSON.parse(r.text)).toMatchObject({ key: '%ZZ', balance: 0 });
    else {
      expect(r.status).toBeGreaterThanOrEqual(400);
      expect(r.status).toBeLessThan(500);
      expectCleanProblem(r, r.status);
    }
  });

  test('POST /fail-next does not exist without the test hooks', async () => {
    const r = await call(`${app.url}/fail-next`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: 'acct', times: 1 }),
    });
    expectCleanProblem(r, 404);
    expect(app.ledger.failNext.size).toBe(0);
  });

  test('with the test hooks, /fail-next works, and a bad body is a problem too', async () => {
    const ok = await call(`${hooked.url}/fail-next`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ key: 'acct', times: 2 }),
    });
    expect(ok.status).toBe(200);
    expect(hooked.ledger.failNext.get('acct')).toBe(2);
    const bad = await call(`${hooked.url}/fail-next`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"key": ',
    });
    expectCleanProblem(bad, 400);
    const wrong = await call(`${hooked.url}/fail-next`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ times: 'x' }),
    });
    expectCleanProblem(wrong, 400);
  });
});
