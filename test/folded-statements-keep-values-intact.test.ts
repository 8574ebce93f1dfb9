/**
 * The claim rides on BEGIN and the result on COMMIT, in one round trip each
 * (src/db/drivers/fold.ts), as simple-protocol text: its values written as SQL literals
 * (src/db/drivers/literals.ts), on node-postgres's own clients and on a pg-shaped wrapper.
 * Hostile values must arrive exactly as sent and never escape their literal: quotes, backslashes, statement separators and
 * comments in ids, unicode keys, binary payloads, and results that look like SQL.
 */
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox } from '../src/index.js';
import { CountingPool, type FoldPath } from './support/counting-pool.js';
import { postgresTarget, postgresUrl, type TargetDb } from './support/databases.js';

const HOSTILE = [
  "it's",
  'back\\slash\\',
  "'); drop table events; --",
  "\\'; select pg_sleep(10); --",
  "$1 $$ $fn$ E'\\x00'",
  '/* comment */ ; commit; begin',
];

const PATHS: FoldPath[] = ['client', 'wrapper'];

describe.runIf(postgresTarget).each(PATHS)(
  'folded statements keep every value intact (real Postgres, %s)',
  (path) => {
    let t: TargetDb;
    let pool: CountingPool;
    let inbox: Inbox;
    let db: Kysely<any>;

    beforeAll(async () => {
      t = await postgresTarget!.open();
      pool = new CountingPool(postgresUrl!, path);
      inbox = createInbox({
        db: pool,
        schema: t.schema,
        sweepIntervalMs: 0,
        duplicateCacheSize: 0,
        parse: 'auto',
        // The result rides on COMMIT: echo back what the sender sent, as a string.
        handle: (event) => ({ echo: event.headers['x-echo'] ?? null, bytes: event.rawBody.length }),
      });
      db = await inbox.kysely();
    });
    afterAll(async () => {
      await inbox.close();
      await pool.end();
      await t.close();
    });

    async function stored(id: string) {
      const { rows } = await sql<{
        key: string | null;
        payload: Buffer | null;
        headers: any;
        result: any;
        status: string;
      }>`
      select key, payload, headers, result, status from ${sql.table(`${t.schema}.events`)} where id = ${id}`.execute(
        db,
      );
      return rows[0];
    }

    it('ids, keys, headers and results with quotes, backslashes and SQL arrive as sent', async () => {
      for (const [i, value] of HOSTILE.entries()) {
        const id = `id-${i}-${value}`.replace(/[^\x20-\x7e]/g, '?');
        pool.reset();
        const outcome = await inbox.receive({
          headers: { 'idempotency-key': id, 'x-echo': value, 'content-type': 'application/json' },
          rawBody: Buffer.from('{}'),
        });
        expect(outcome.body).toMatchObject({ status: 'processed', id, result: { echo: value } });
        // It was folded: BEGIN with the claim, COMMIT with the result.
        expect(pool.reset()).toEqual([
          expect.stringMatching(/^begin .*claim/),
          expect.stringMatching(/; commit$/),
        ]);
        expect(await stored(id)).toMatchObject({ status: 'processed', result: { echo: value } });
        // The stored result is what a duplicate replays.
        const again = await inbox.receive({
          headers: { 'idempotency-key': id, 'x-echo': value, 'content-type': 'application/json' },
          rawBody: Buffer.from('{}'),
        });
        expect(again.body).toMatchObject({ status: 'duplicate', result: { echo: value } });
      }
      const { rows } = await sql<{
        n: string;
      }>`select count(*) as n from ${sql.table(`${t.schema}.events`)}`.execute(db);
      expect(Number(rows[0].n)).toBe(HOSTILE.length); // no statement of a value ran
    });

    it('unicode keys, hostile stored headers and every byte of a binary payload are stored exactly', async () => {
      const binary = Buffer.from(Array.from({ length: 512 }, (_, i) => i % 256));
      const keys = ['счёт-7', 'emoji-🧾-key', "quote'key", 'back\\key'];
      for (const [i, key] of keys.entries()) {
        const id = `held-${i}`;
        pool.reset();
        // seq 2: held, so the claim stores the payload and the headers.
        const outcome = await inbox.receive({
          headers: {
            'idempotency-key': id,
            'x-key': Buffer.from(key).toString('latin1'),
            'x-seq': '2',
            'x-echo': HOSTILE[i],
            'content-type': 'application/octet-stream',
          },
          rawBody: binary,
        });
        expect(outcome.kind).toBe('held');
        expect(pool.reset()).toHaveLength(2); // folded
        const row = await stored(id);
        expect(Buffer.compare(row.payload!, binary)).toBe(0);
        expect(row.headers['x-echo']).toBe(HOSTILE[i]);
      }
    });

    it('a 1 MiB payload is stored exactly, folded as any other value', async () => {
      const big = Buffer.alloc(1024 * 1024, 0xab);
      big.write("'); drop table events; --", 100);
      pool.reset();
      const outcome = await inbox.receive({
        headers: {
          'idempotency-key': 'big-1',
          'x-key': 'big',
          'x-seq': '2',
          'content-type': 'application/octet-stream',
        },
        rawBody: big,
      });
      expect(outcome.kind).toBe('held');
      // BEGIN with the claim (its literals megabytes of hex) and the savepoint, then COMMIT.
      expect(pool.reset()).toHaveLength(2);
      expect(Buffer.compare((await stored('big-1')).payload!, big)).toBe(0);
    });
  },
);
