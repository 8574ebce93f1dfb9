/**
 * Folded statements are PREPAREd once per connection and EXECUTEd (src/db/drivers/prepared-folds.ts).
 * A connection that lost them (DISCARD ALL or DEALLOCATE ALL by someone else, a pooler that
 * swapped backends) must not fail a delivery: its pool folds each statement's text with the
 * values written in from then on, and names nothing. Nor must a pool that wraps one connection
 * in a new client object at every checkout (its PREPAREs find their names taken).
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createInbox,
  type Inbox,
  type InboxOptions,
  type PgClientLike,
  type PgPoolLike,
} from '../src/index.js';
import { postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';

/** One connection; every round trip's text recorded; a new wrapper per checkout when asked. */
class OneConnection implements PgPoolLike {
  readonly pool = new pg.Pool({ connectionString: postgresUrl!, max: 1 });
  readonly sent: string[] = [];
  #wrapper: PgClientLike | undefined;
  constructor(readonly newWrapperEachTime = false) {
    this.pool.on('error', () => {});
  }
  async connect(): Promise<PgClientLike> {
    const client = await this.pool.connect();
    if (this.#wrapper && !this.newWrapperEachTime) return this.#wrapper;
    const sent = this.sent;
    this.#wrapper = {
      query(config) {
        sent.push(config.text);
        return client.query(config as pg.QueryConfig) as any;
      },
      release: (err) => client.release(err as any),
      on: (event, listener) => client.on(event, listener),
      off: (event, listener) => client.off(event, listener),
    };
    return this.#wrapper;
  }
  end(): Promise<void> {
    return this.pool.end();
  }
}

describe.runIf(postgresTarget)('prepared folds fall back to text (real Postgres)', () => {
  let t: TargetDb | undefined;
  let inbox: Inbox | undefined;
  let pool: OneConnection | undefined;
  afterEach(async () => {
    await inbox?.close();
    await pool?.end();
    await t?.close();
    inbox = undefined;
    pool = undefined;
    t = undefined;
  });

  async function start(newWrapperEachTime: boolean, options: Partial<InboxOptions> = {}) {
    t = await postgresTarget!.open();
    pool = new OneConnection(newWrapperEachTime);
    inbox = createInbox({
      db: pool,
      schema: t.schema,
      sweepIntervalMs: 0,
      duplicateCacheSize: 0,
      handle: (event) => ({ id: event.id }),
      ...options,
    });
    await inbox.ready();
    return { inbox, pool };
  }
  const delivery = (id: string) => ({
    headers: { 'idempotency-key': id, 'content-type': 'application/json' },
    rawBody: Buffer.from('{}'),
  });

  it('statements deallocated behind its back: the next delivery is processed, folded as text', async () => {
    const { inbox, pool } = await start(false);
    expect((await inbox.receive(delivery('p-1'))).kind).toBe('processed');
    expect(pool.sent.some((text) => /execute "wi:[^"]+\.try_claim"/.test(text))).toBe(true);

    await pool.pool.query('deallocate all'); // the one connection the inbox uses
    pool.sent.length = 0;
    const outcome = await inbox.receive(delivery('p-2'));
    expect(outcome).toMatchObject({ kind: 'processed', status: 200, body: { result: { id: 'p-2' } } });
    // The failed EXECUTE was rolled back and the claim sent again as text, once.
    expect(pool.sent.filter((text) => /^rollback$/.test(text))).toHaveLength(1);
    // A new event's row, written with its result on COMMIT (src/db/sql/record-applied.ts), as text too.
    expect(pool.sent.at(-1)).toMatch(
      /^insert into .*"events" .*'processed', now\(\), '\{"id":"p-2"\}'.*; commit$/s,
    );
    expect(await inbox.event('p-2')).toMatchObject({ status: 'processed', result: { id: 'p-2' } });
    // And it stays text: no PREPARE again on this connection.
    pool.sent.length = 0;
    expect((await inbox.receive(delivery('p-3'))).kind).toBe('processed');
    expect(pool.sent.some((text) => text.startsWith('prepare '))).toBe(false);
  });

  it("node-postgres's own pool, its statements deallocated: the next delivery is processed, and nothing is PREPAREd again", async () => {
    t = await postgresTarget!.open();
    const one = new pg.Pool({ connectionString: postgresUrl!, max: 1 });
    one.on('error', () => {});
    const ours = createInbox({
      db: one,
      schema: t.schema,
      sweepIntervalMs: 0,
      duplicateCacheSize: 0,
      handle: (event) => ({ id: event.id }),
    });
    const prepared = async () =>
      (
        await one.query<{ name: string }>(
          `select name from pg_prepared_statements where name like 'wi:%' order by name`,
        )
      ).rows.map((row) => row.name);
    try {
      expect((await ours.receive(delivery('q-1'))).kind).toBe('processed');
      expect(await prepared()).toEqual(
        expect.arrayContaining([`wi:${t.schema}.try_id_lock`, `wi:${t.schema}.record_applied`]),
      );

      await one.query('deallocate all');
      const outcome = await ours.receive(delivery('q-2'));
      expect(outcome).toMatchObject({ kind: 'processed', status: 200, body: { result: { id: 'q-2' } } });
      expect(await ours.event('q-2')).toMatchObject({ status: 'processed', result: { id: 'q-2' } });
      // Not PREPAREd again: a pooler that lost them once would lose them again, and a COMMIT
      // could be the one to find out.
      expect(await prepared()).toEqual([]);
      for (const id of ['q-3', 'q-4']) {
        await one.query('deallocate all');
        expect((await ours.receive(delivery(id))).kind).toBe('processed');
        expect(await ours.event(id)).toMatchObject({ status: 'processed', result: { id } });
      }
      // A duplicate's read alone (the look before BEGIN, or the try-claim's) is not named either.
      expect((await ours.receive(delivery('q-4'))).kind).toBe('duplicate');
      expect(await prepared()).toEqual([]);
    } finally {
      await ours.close();
      await one.end();
    }
  });

  it("deferred mode's claim alone, its statement deallocated: sent again as text, nothing to roll back", async () => {
    const { inbox, pool } = await start(false, { mode: 'deferred', workers: 0 });
    expect((await inbox.receive(delivery('d-1'))).kind).toBe('pending');
    await pool.pool.query('deallocate all');
    pool.sent.length = 0;
    expect((await inbox.receive(delivery('d-2'))).kind).toBe('pending');
    // Its implicit transaction was rolled back with the failed EXECUTE.
    // Not the pending count, nor the wake-up NOTIFY after it (src/background/wake-ups.ts).
    const claims = pool.sent.filter(
      (text) => !text.startsWith('select count(*)') && !text.includes('pg_notify'),
    );
    expect(claims).toEqual([
      expect.stringMatching(
        /^set transaction isolation level read committed; execute "wi:[^"]+\.claim_many"\(/,
      ),
      expect.stringMatching(
        /^set transaction isolation level read committed; select ord, decision, result::text as result, .*"claim_many"\(/s,
      ),
    ]);
    expect(await inbox.event('d-2')).toMatchObject({ status: 'pending' });
  });

  it('a pool that wraps its connection anew at every checkout: every delivery processed', async () => {
    const { inbox, pool } = await start(true);
    for (const id of ['w-1', 'w-2', 'w-3']) {
      expect((await inbox.receive(delivery(id))).kind).toBe('processed');
      expect(await inbox.event(id)).toMatchObject({ status: 'processed', result: { id } });
    }
    // One PREPARE found its names taken; the pool folds text from then on.
    pool.sent.length = 0;
    expect((await inbox.receive(delivery('w-4'))).kind).toBe('processed');
    expect(pool.sent.some((text) => text.startsWith('prepare '))).toBe(false);
    expect(pool.sent[0]).toMatch(
      /^begin .*; select pg_try_advisory_xact_lock\(.*; select \(extract\(epoch from coalesce\(e.received_at, now\(\)\)\) \* 1000\)::float8 as received_ms,/s,
    );
  });
});
