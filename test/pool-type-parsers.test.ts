/**
 * A pool's type parsers are the application's (`pg.types.setTypeParser`, or a pool's `types`):
 * jsonb left as text is a common one (another JSON library parses it later). The inbox reads
 * its jsonb columns back as text and parses them itself (src/db/sql/tables.ts, `fromJsonText`), so
 * such a parser changes nothing it answers or hands a handler. Before, a duplicate's `result` was
 * a string, and a held event's `event.headers` was a string too.
 *
 * A pool that parses nothing at all (every column as PostgreSQL's text) is the extreme: before
 * src/db/sql/tables.ts read booleans as `t` too, the try-claim never applied, the claim's
 * `row_at_commit` read as false, no new event's row was written, and a duplicate on another
 * instance ran its handler again.
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { createInbox, type Inbox, type InboxEvent } from '../src/index.js';
import { postgresTarget, postgresUrl, uniqueName } from './support/databases.js';
import { invariantsHoldAfterEach, watchInvariants } from './support/invariants.js';

invariantsHoldAfterEach();

const cleanups: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => {});
});

const JSONB = 3802;

/** A pool of ten clients with these type parsers (the process's global ones untouched). */
function poolParsing(
  getTypeParser: (oid: number, format?: 'text' | 'binary') => (text: string) => unknown,
): pg.Pool {
  const pool = new pg.Pool({
    connectionString: postgresUrl!,
    max: 10,
    types: { getTypeParser: getTypeParser as typeof pg.types.getTypeParser },
  });
  pool.on('error', () => {});
  cleanups.push(() => pool.end());
  return pool;
}

/** Jsonb left as its text; every other type as pg parses it. */
const jsonbAsTextPool = () =>
  poolParsing((oid, format) =>
    oid === JSONB ? (text: string) => text : pg.types.getTypeParser(oid, format),
  );

/** Nothing parsed: every column arrives as PostgreSQL's text for it. */
const everythingAsTextPool = () => poolParsing(() => (text: string) => text);

/**
 * Starts inboxes on one new schema of `pool` (each one another instance: its own in-process
 * cache), closed, checked against the invariants and dropped after the test.
 */
function instancesOn(pool: pg.Pool, handle: (event: InboxEvent<{ total: number }>) => Promise<unknown>) {
  const schema = uniqueName('wi');
  cleanups.push(() => pool.query(`drop schema if exists "${schema}" cascade`));
  return (): Inbox => {
    const inbox = createInbox({ db: pool, schema, sweepIntervalMs: 0, handle });
    cleanups.push(() => inbox.close());
    watchInvariants(inbox);
    return inbox;
  };
}

const delivery = (id: string, headers: Record<string, string> = {}) => ({
  headers: { 'content-type': 'application/json', 'idempotency-key': id, ...headers },
  rawBody: Buffer.from('{"total":5}'),
});

describe.runIf(postgresTarget)('a pool whose type parser leaves jsonb as text', () => {
  it("answers a duplicate with the stored result as JSON, and hands a held event's handler its headers as an object", async () => {
    const seen: Array<{ id: string; note: unknown }> = [];
    const start = instancesOn(jsonbAsTextPool(), async (event) => {
      seen.push({ id: event.id, note: event.headers['x-note'] });
      return { total: event.body.total, id: event.id };
    });
    const first = start();
    const second = start();

    expect(await first.receive(delivery('e1'))).toMatchObject({
      status: 200,
      body: { status: 'processed', result: { total: 5, id: 'e1' } },
    });
    // Another instance: no in-process cache to answer from, so the row answers.
    expect((await second.receive(delivery('e1'))).body).toEqual({
      status: 'duplicate',
      id: 'e1',
      result: { total: 5, id: 'e1' },
    });

    // Seq 2 waits for seq 1 in the table, its headers with it; seq 1 drains it.
    const held = await first.receive(delivery('o2', { 'x-key': 'k', 'x-seq': '2', 'x-note': 'second' }));
    expect(held).toMatchObject({ status: 202, body: { status: 'held' } });
    expect(
      await second.receive(delivery('o1', { 'x-key': 'k', 'x-seq': '1', 'x-note': 'first' })),
    ).toMatchObject({
      status: 200,
    });
    await first.idle();
    await second.idle();
    expect(seen).toEqual([
      { id: 'e1', note: undefined },
      { id: 'o1', note: 'first' },
      { id: 'o2', note: 'second' },
    ]);
    expect((await first.event('o2'))?.result).toEqual({ total: 5, id: 'o2' });
  });
});

describe.runIf(postgresTarget)('a pool whose type parsers leave every type as text', () => {
  it('applies each event once, answers duplicates from the row on another instance, and hands handlers a Date', async () => {
    const runs: Array<{ id: string; attempt: unknown; receivedAt: boolean }> = [];
    const start = instancesOn(everythingAsTextPool(), async (event) => {
      runs.push({
        id: event.id,
        attempt: event.attempt,
        receivedAt: event.receivedAt instanceof Date && !Number.isNaN(event.receivedAt.getTime()),
      });
      return { id: event.id };
    });
    const first = start();
    const second = start();

    // Unordered: applied by the first instance; the second has no in-process cache and reads the row.
    expect((await first.receive(delivery('u1'))).status).toBe(200);
    expect((await second.receive(delivery('u1'))).body).toEqual({
      status: 'duplicate',
      id: 'u1',
      result: { id: 'u1' },
    });
    // Ordered: seq 2 held, seq 1 applied on the other instance and drains it; redeliveries are duplicates.
    expect((await first.receive(delivery('k:2', { 'x-key': 'k', 'x-seq': '2' }))).status).toBe(202);
    expect((await second.receive(delivery('k:1', { 'x-key': 'k', 'x-seq': '1' }))).status).toBe(200);
    await first.idle();
    await second.idle();
    for (const id of ['k:1', 'k:2']) {
      const again = await first.receive(delivery(id, { 'x-key': 'k', 'x-seq': id.slice(2) }));
      expect(again.body).toMatchObject({ status: 'duplicate', id });
    }
    expect(runs).toEqual([
      { id: 'u1', attempt: 1, receivedAt: true },
      { id: 'k:1', attempt: 1, receivedAt: true },
      { id: 'k:2', attempt: 1, receivedAt: true },
    ]);
    const stored = await first.event('k:2');
    expect(stored?.receivedAt).toBeInstanceOf(Date);
    expect(stored?.seq).toBe(2);
  });
});
